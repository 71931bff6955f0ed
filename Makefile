# Thin wrapper over CMake so that a new user needs no flags.
#   make demo        the main job on the reference data (installs Debian packages if missing)
#   make check       the fast tier, plain and under ASan+UBSan (and TSan for the CUPTI
#                    library), plus a short fuzz run: minutes
#   make check-full  the whole suite: check, then the slow tier (long Slurm clusters, the
#                    package, result tables, the store at scale), the device bundle and its
#                    dry run, and a longer fuzz run; what CI runs (docs/testing.md)
#   make bench       benchmarks, each a ratio against a peer in the same run
BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_TSAN  ?= build-tsan
JOBS        ?= $(shell nproc)
FUZZ_SECONDS ?= 4
FUZZ_SECONDS_FULL ?= 15
# Most tests wait on processes (workloads, servers, clusters) more than they compute, so
# ctest runs twice as many as there are cores; the evaluation-heavy ones claim both
# cores (PROCESSORS in tests/CMakeLists.txt).
CTEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
SAN_ENV = ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: all deps build build-asan demo check check-full test test-asan test-tsan test-slow test-asan-slow fuzz fuzz-full bench bench-scale clean device-bundle device-dry-run deb

all: build

deps:
	@bash .ci/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/kace demo --db kace-demo/kace.db --out kace-demo

# The fast tier (every test not labelled slow).
test: build
	cd $(BUILD) && ctest --output-on-failure -LE slow -j$(CTEST_JOBS)

build-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DKACE_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j$(JOBS)

test-asan: build-asan
	cd $(BUILD_ASAN) && $(SAN_ENV) ctest --output-on-failure -LE slow -j$(CTEST_JOBS)

# The slow tier: plain, and the part of it the sanitized tree runs too.
test-slow: build
	cd $(BUILD) && ctest --output-on-failure -L '^slow$$' -j$(JOBS)

test-asan-slow: build-asan
	cd $(BUILD_ASAN) && $(SAN_ENV) ctest --output-on-failure -L '^slow-sanitized$$' -j$(JOBS)

# The CUPTI injection library and its fake-driver tests under ThreadSanitizer
# (only that part is built: the callbacks run on the workload's threads).
test-tsan: deps
	@cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DKACE_TSAN=ON >/dev/null
	@cmake --build $(BUILD_TSAN) -j$(JOBS)
	cd $(BUILD_TSAN) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -j$(JOBS)

fuzz: deps
	bash fuzz/run.sh $(FUZZ_SECONDS)

fuzz-full: deps
	bash fuzz/run.sh $(FUZZ_SECONDS_FULL)

check: test test-asan test-tsan fuzz

check-full: check test-slow test-asan-slow device-bundle device-dry-run fuzz-full

# The device bundle: kace + the libraries it needs in one folder (<= 48 MiB) for
# GPU servers without kace's dependencies (scripts/bundle/make-bundle.sh, docs/gpu.md).
device-bundle: deps
	bash scripts/bundle/make-bundle.sh build-bundle

# The device scripts (scripts/device/) end to end against fakes, from the bundle
# (tests/device/dry-run.sh):
# first-light and two resumed campaign calls into $(OUT) (a temporary folder when unset).
device-dry-run: build device-bundle
	bash tests/device/dry-run.sh $(OUT)

bench: build
	bash bench/bench_eval.sh $(BUILD)/kace
	$(BUILD)/kace-bench-model ../shared/data/kace-v100
	$(BUILD)/kace-bench-sched ../shared/data
	$(BUILD)/kace-bench-group ../shared/data/kace-v100
	bash bench/bench_speed.sh $(BUILD)
	bash bench/bench_startup.sh $(BUILD)
	bash bench/bench_sched_growth.sh $(BUILD)
	bash bench/bench_serve.sh $(BUILD)/kace
	bash bench/bench_serve_scale.sh $(BUILD)/kace ../shared/data/kace-v100 10000 1000000 3 3 2
	bash bench/bench_slurm.sh $(BUILD)/kace

# kace predict on a synthetic store of 100k workloads and 1M colocations against the V100 store
# (bench/bench_scale.sh; a few minutes, about 1.5 GB of memory for the import).
bench-scale: build
	bash bench/bench_scale.sh $(BUILD)/kace

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) build-fuzz kace-demo kace-eval

# The Debian packages an admin installs: kace, kace-slurm and libkace-dev (packaging/build-deb.sh; docs/install.md).
deb: build
	bash packaging/build-deb.sh $(BUILD) dist
