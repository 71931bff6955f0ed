#!/usr/bin/env bash
# make device-dry-run: the device scripts end to end here, without a GPU, from the
# bundle (build-bundle/kace-bundle), against fakes, then one allocation's projection:
#   1. two calls of scripts/device/campaign.sh, the second resuming from the first's
#      store, each into its own folder of OUT as a batch tool brings it back, at scaled
#      time (KACE_CAMPAIGN_TIME_SCALE=KACE_DRY_SCALE, default 20), for a
#      catalog of stand-ins: build/tests/fake_cuda's program on its fake CUDA driver and
#      CUPTI (the bundle's injection library runs inside it), the stand-in MPS daemon
#      (build/tests/kace-test-mps-control), a fake NVML whose MPS client list names
#      kace's workloads (build/tests/libfake_nvml_mps.so), and the nvidia-smi and ncu
#      stand-ins of scripts/device/fakes/bin; the fake driver's folder is the library
#      path, as a server's driver folder is;
#   2. the injection library built from the bundle's sources against the fake CUPTI,
#      as campaign.sh builds it on a server whose CUPTI the bundle's build does not fit;
#   3. scripts/device/dataset.sh's folder of the last store, which --verify passes;
#   4. one allocation (tests/device/dry-run-pool.sh): one kace campaign --device
#      --catalog call against stand-ins as slow and as coupled as the real thing, its
#      projected minutes, runs per minute and counts against the dataset's goal.
# Checks: each call's folder passes out_check (at most 8 files, 2 folders deep); each
# call ended within its limit; every line of its log is a step line or the end line
# and no step failed; the second call restored the first's store and measured more
# runs; nvidia-smi was never asked to change GPU settings; with LD_DEBUG=libs, every
# library that kace and the injection library loaded came from the bundle, the C
# library or the (fake) driver folders (tests/device/check-libs.py). What the engine
# does not do yet (ncu refused for locking clocks, the probe's curve cut short under the
# time scale, the allocation's goal) is printed
# as "FALLS SHORT:" lines, failures only under KACE_DRY_STRICT=1.
#
#   bash tests/device/dry-run.sh [OUT]     (default: a temporary folder, removed when all passed)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$root/build}
B=${BUNDLE_DIR:-$root/build-bundle/kace-bundle}
OUT=${1:-${OUT:-}}
keep=1
[ -n "$OUT" ] || { OUT=$(mktemp -d "${TMPDIR:-/tmp}/kace-dry-run.XXXXXX"); keep=0; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kace-dry-work.XXXXXX")
failures=0 short=0
fail() { echo "dry-run: FAIL: $*" >&2; failures=$((failures + 1)); }
falls_short() { echo "dry-run: FALLS SHORT: $*" >&2; short=$((short + 1)); }
t_all=$EPOCHREALTIME

FAKE_CUDA=$BUILD/tests/fake_cuda APP=$BUILD/tests/fake_cuda/kace-fake-cuda-app
for f in "$B/bin/kace" "$B/scripts/device/campaign.sh" "$B/scripts/device/dataset.sh" "$BUILD/tests/libfake_nvml_mps.so" \
    "$BUILD/tests/kace-test-mps-control" "$APP" "$FAKE_CUDA/libcuda.so.1" "$FAKE_CUDA/libcupti.so.13" \
    "$root/tests/data/ncu/newer.csv"; do
    [ -e "$f" ] || { echo "dry-run: $f is missing (make build device-bundle first)" >&2; exit 1; }
done
mkdir -p "$WORK/bin" "$WORK/ld"
cp "$BUILD/tests/kace-test-mps-control" "$WORK/bin/mps-control" || exit 1
export KACE_DEVICE_FAKE=1 KACE_FAKE_CUDA_DIR=$FAKE_CUDA KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_mps.so \
    KACE_MPS_CONTROL=$WORK/bin/mps-control KACE_TEST_MPS_MODE=cuda-start KACE_FAKE_MPS_CONNECT=1 \
    KACE_FAKE_NCU_CSV=$root/tests/data/ncu/newer.csv KACE_FAKE_FORBIDDEN_LOG=$WORK/forbidden.log \
    KACE_DEVICE_WARMUP=0.3 KACE_DEVICE_WINDOW=0.5 KACE_DEVICE_PROFILE_WARMUP=0.3 KACE_DEVICE_PROFILE_WINDOW=0.5 \
    KACE_CATALOG=$WORK/catalog.txt TMPDIR=$WORK
# The calls' minutes are scaled time: the stand-ins start at once and their windows are
# 1/F of a server's (0.5 s for 10 s), so the engine's fixed allowances (a cold start's
# 20 s, the probe's 90 s, ...) are F times shorter too (docs/campaign.md).
F=${KACE_DRY_SCALE:-20}
export KACE_CAMPAIGN_TIME_SCALE=$F
unset KACE_DB KACE_CUPTI_LIBRARY CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT LD_LIBRARY_PATH KACE_BIN KACE_DEVICE_NCU
: >"$WORK/forbidden.log"
# The catalog: the 3 CUDA C workloads and 2 PyTorch ones as the stand-in of their kind,
# fast (no start-up), PyTorch's steps over 20 kernel signatures.
{
    echo "cuda-gemm_batch1-inf cuda $APP gemm"
    echo "cuda-stream_batch1-inf cuda $APP stream"
    echo "cuda-latency_batch1-inf cuda $APP latency"
    echo "bert-base-cased_batch8-train torch env KACE_FAKE_KERNELS=20 $APP gemm"
    echo "vit-base-patch16-224_batch32-inf torch env KACE_FAKE_KERNELS=20 $APP stream"
} >"$KACE_CATALOG"

# call NAME LIMIT_S ARGS...: one campaign.sh call under LD_DEBUG, timed, its folder checked.
call() {
    local name=$1 limit=$2
    shift 2
    local t0=$EPOCHREALTIME
    LD_LIBRARY_PATH=$FAKE_CUDA LD_DEBUG=libs LD_DEBUG_OUTPUT=$WORK/ld/ld timeout -k 10 $((limit + 30)) bash "$B/scripts/device/campaign.sh" \
        "$OUT/$name" "$@" >"$WORK/$name.out" 2>&1
    local rc=$? wall problems bad
    wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    echo "dry-run: $name: exit $rc, $wall s (limit $limit s)"
    [ $rc -eq 0 ] || fail "$name: exit $rc: $(tail -3 "$WORK/$name.out")"
    awk -v w="$wall" -v l="$limit" 'BEGIN { exit !(w <= l) }' || fail "$name: took $wall s, over its limit of $limit s"
    problems=$(bash -c 'source "$1"; out_check "$2"' _ "$B/scripts/device/lib.sh" "$OUT/$name") ||
        fail "$name: output folder: $problems"
    local L=$OUT/$name/campaign.log
    bad=$(grep -v -E '^step [A-Za-z0-9._-]+ (ok|fail|skip) [0-9]+\.[0-9] |^end ok [0-9]+ fail [0-9]+ skip [0-9]+ ' "$L")
    [ -z "$bad" ] || fail "$name: lines that are not step lines: $bad"
    grep -q '^step [^ ]* fail ' "$L" && fail "$name: failed steps: $(grep '^step [^ ]* fail ' "$L" | cut -c1-300)"
    grep -q '^end ' "$L" || fail "$name: no end line (the call did not finish)"
    for s in restore env inject-check campaign export pack; do
        grep -q "^step $s ok " "$L" || fail "$name: step $s is not ok: $(grep "^step $s " "$L")"
    done
}
runs_in() { # STORE.tar.gz: its runs ok
    tar -xzOf "$1" ./kace.db >"$WORK/r.db" &&
        python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(
            "SELECT count(*) FROM runs WHERE status = '"'ok'"'").fetchone()[0])' "$WORK/r.db"
}

# 1. two campaign.sh calls, the second from the first's store.
call campaign-1 90 --minutes 1.5
call campaign-2 60 --minutes 1 --store "$OUT/campaign-1/store.tar.gz"
grep -q '^step restore ok .* 1 earlier calls' "$OUT/campaign-2/campaign.log" || fail "campaign-2 did not restore campaign-1's store"
r1=$(runs_in "$OUT/campaign-1/store.tar.gz") r2=$(runs_in "$OUT/campaign-2/store.tar.gz")
echo "dry-run: measured runs: $r1 after the first call, $r2 after the second"
[ "${r1:-0}" -gt 0 ] && [ "${r2:-0}" -gt "${r1:-0}" ] || fail "the runs did not grow across calls ($r1 -> $r2)"
tar -xzOf "$OUT/campaign-2/store.tar.gz" ./kace.db >"$WORK/c2.db"
n_cat=$(grep -c '^[^#]' "$KACE_CATALOG")
n_prof=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(
    "SELECT count(DISTINCT workload) FROM campaign_profiles WHERE status = '"'ok'"'").fetchone()[0])' "$WORK/c2.db")
[ "$n_prof" = "$n_cat" ] || fail "not all $n_cat catalog workloads profiled over the two calls: $n_prof"
# The probe's curve is real seconds (1 s skipped, then 6 s: kace_probe_options) while its
# longest time is scaled (90 s / F): under the time scale its curve can be cut short.
probe=$(python3 -c 'import sqlite3, sys; print(" | ".join(r[0] for r in sqlite3.connect(sys.argv[1]).execute(
    "SELECT evidence FROM campaign_probes ORDER BY id")))' "$WORK/c2.db")
[ -n "$probe" ] || fail "no probe stored over the two calls"
case $probe in *"(incomplete)"*)
    falls_short "the probe under KACE_CAMPAIGN_TIME_SCALE=$F: its curve was cut short (its longest time is" \
        "scaled, its curve's 1 + 6 s are not): $(echo "$probe" | grep -o 'curve [^;]*; window [^;]*' | head -1)" ;;
esac

# 2. the injection library built from the bundle's sources, as on a server whose CUPTI
#    the bundle's build does not fit.
if bash -c 'source "$1/scripts/device/lib.sh"; find_cupti && STEP_END=$(awk -v t="$EPOCHREALTIME" "BEGIN { print t + 60 }") &&
    build_inject "$2"' _ "$B" "$WORK/server-inject.so" >"$WORK/build-inject.out" 2>&1 &&
    [ -s "$WORK/server-inject.so" ]; then
    rm -f "$WORK/rec.txt"
    CUDA_INJECTION64_PATH=$WORK/server-inject.so KACE_CUPTI_OUTPUT=$WORK/rec.txt KACE_CUPTI_COUNTERS=1 \
        timeout -k 5 2 "$APP" gemm >/dev/null 2>&1
    grep -q '^kernel ' "$WORK/rec.txt" 2>/dev/null || fail "the injection library built from the bundle recorded no kernel"
else
    fail "the injection library does not build from the bundle's sources: $(tail -3 "$WORK/build-inject.out")"
fi

# 3. dataset.sh's folder of the last store (--verify: exactly what the store gives, and it
#    imports). kace demo is not tried on it: the fake NVML under MPS gives the engine's
#    profiles no SM or memory utilization (its samples are the MPS server's, with or
#    without MPS), which the demo's features need.
bash "$B/scripts/device/dataset.sh" --kace "$B/bin/kace" "$OUT/campaign-2/store.tar.gz" "$WORK/ds" >"$WORK/ds.out" 2>&1 &&
    bash "$B/scripts/device/dataset.sh" --kace "$B/bin/kace" --verify "$WORK/ds" >>"$WORK/ds.out" 2>&1 ||
    fail "dataset.sh of the last store: $(tail -3 "$WORK/ds.out")"
[ "$(grep -c '^| 20[0-9-]*T.* | Fake GPU (kace dry run), ' "$WORK/ds/README.md" 2>/dev/null)" = 2 ] ||
    fail "dataset README: not one line per call with the GPU: $(grep '^|' "$WORK/ds/README.md" 2>/dev/null | head -5)"

# 4. one allocation, projected.
t_pool=$EPOCHREALTIME
bash "$here/dry-run-pool.sh" "$B/bin/kace" "$BUILD" "$WORK" || fail "the allocation (above)"
echo "dry-run: the allocation: $(awk -v a="$t_pool" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"

# 5. nothing asked to change GPU settings (nvidia-smi); ncu's refusals (it would lock the
#    clocks or leave the workload running) are the engine's ncu step falling short;
#    libraries from the bundle, libc or the driver; no stand-in left running.
grep -v '^ncu ' "$WORK/forbidden.log" >"$WORK/forbidden-smi.log"
[ ! -s "$WORK/forbidden-smi.log" ] || fail "forbidden nvidia-smi options: $(cat "$WORK/forbidden-smi.log")"
grep -q '^ncu ' "$WORK/forbidden.log" &&
    falls_short "the stand-in ncu refused the engine's ncu command $(grep -c '^ncu ' "$WORK/forbidden.log") times:" \
        "$(grep -m1 '^ncu ' "$WORK/forbidden.log" | sed 's/.*://' | cut -c1-200)"
python3 "$here/check-libs.py" --kace "$B/bin/kace" --allow "$B/lib" --allow "$FAKE_CUDA" \
    --allow "$(dirname "$KACE_NVML_LIBRARY")" "$WORK/ld" >"$WORK/libs.out" 2>&1 || fail "libraries: $(cat "$WORK/libs.out")"
cat "$WORK/libs.out"
grep -q ' [1-9][0-9]* processes with the injection library' "$WORK/libs.out" ||
    fail "the injection library was never loaded by the fake CUDA program"
# (the dry run's own: their environment holds its TMPDIR)
left=""
for p in $(pgrep -f "$APP"); do
    tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qxF "TMPDIR=$WORK" && left+="$p "
done
[ -z "$left" ] || { fail "stand-ins left running: $left"; for p in $left; do kill -KILL "$p" 2>/dev/null; done; }

echo "dry-run: $(awk -v a="$t_all" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s in all; output in $OUT"
if [ $failures -ne 0 ]; then
    echo "dry-run: $failures failure(s); the calls' output: $WORK/*.out, logs in $OUT" >&2
    exit 1
fi
[ $short = 0 ] || [ "${KACE_DRY_STRICT:-0}" != 1 ] || exit 1
rm -rf "$WORK"
[ $keep = 1 ] || rm -rf "$OUT"
echo "dry-run: all checks passed"
