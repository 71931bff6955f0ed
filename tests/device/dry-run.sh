#!/usr/bin/env bash
# make device-dry-run: the whole device pipeline here, without a GPU, from the
# bundle (build-bundle/kace-bundle), against fakes: first-light, then two
# campaign calls (the second resuming from the first's store), each into its
# own folder of OUT as a device call would write it. Fakes: NVML
# (build/tests/libfake_nvml_full.so for a workload alone,
# libfake_nvml_mps.so for colocations: its MPS client list names kace's workloads), the stand-in MPS daemon (build/tests/kace-test-mps-control), the
# fake CUDA driver + CUPTI + program of build/tests/fake_cuda (the real
# injection library runs inside it; scripts/device/fakes/fake-cuda-app stands
# in while it is not built), nvidia-smi and ncu stand-ins (fakes/bin).
#
# Checks: each call's folder has at most 8 files, 2 folders deep; each call
# ended within its limit; no step failed; nvidia-smi/ncu were never asked to
# change GPU settings or lock clocks; the second campaign call resumed (more
# runs, none measured twice); the exported CSVs import into a new store; the
# dataset folder scripts/device/dataset.py makes imports and kace demo runs on it; the
# engine's call (tests/device/dry-run-pool.sh) does a whole allocation's work; and,
# with LD_DEBUG=libs, every library that kace and the injection library
# loaded came from the bundle, the C library or the (fake) driver folders.
#
#   bash tests/device/dry-run.sh [OUT]     (default: a temporary folder, removed when all passed)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$root/build}
B=${BUNDLE_DIR:-$root/build-bundle/kace-bundle}
OUT=${1:-${OUT:-}}
keep=1
[ -n "$OUT" ] || { OUT=$(mktemp -d "${TMPDIR:-/tmp}/kace-dry-run.XXXXXX"); keep=0; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kace-dry-work.XXXXXX")
failures=0
fail() { echo "dry-run: FAIL: $*" >&2; failures=$((failures + 1)); }
t_all=$EPOCHREALTIME

for f in "$B/bin/kace" "$BUILD/tests/libfake_nvml_mps.so" "$BUILD/tests/libfake_nvml_full.so" "$BUILD/tests/kace-test-mps-control" \
    "$BUILD/tests/kace-test-worker" "$root/tests/data/ncu/newer.csv"; do
    [ -e "$f" ] || { echo "dry-run: $f is missing (make build device-bundle first)" >&2; exit 1; }
done
FAKE_CUDA=$BUILD/tests/fake_cuda
if [ -x "$FAKE_CUDA/kace-fake-cuda-app" ] && [ -e "$FAKE_CUDA/libcuda.so.1" ] && [ -e "$FAKE_CUDA/libcupti.so.13" ]; then
    echo "dry-run: fake CUDA: $FAKE_CUDA/kace-fake-cuda-app (the injection library runs inside it)"
    real_inject=1
else
    echo "dry-run: fake CUDA: scripts/device/fakes/fake-cuda-app (stand-in; build/tests/fake_cuda is not built)"
    real_inject=0
fi
export KACE_DEVICE_FAKE=1 KACE_FAKE_CUDA_DIR=$FAKE_CUDA KACE_TEST_WORKER=$BUILD/tests/kace-test-worker \
    KACE_FAKE_NVML_ALONE=$BUILD/tests/libfake_nvml_full.so KACE_FAKE_NVML_MPS=$BUILD/tests/libfake_nvml_mps.so \
    KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_mps.so KACE_MPS_CONTROL=$BUILD/tests/kace-test-mps-control \
    KACE_FAKE_NCU_CSV=$root/tests/data/ncu/newer.csv KACE_FAKE_FORBIDDEN_LOG=$WORK/forbidden.log KACE_FAKE_NCU_LEAVE=1 \
    KACE_DEVICE_WARMUP=0.5 KACE_DEVICE_WINDOW=1 KACE_DEVICE_PROFILE_WARMUP=0.5 KACE_DEVICE_PROFILE_WINDOW=1 \
    KACE_DEVICE_COUNTERS_WARMUP=0.5 KACE_DEVICE_COUNTERS_WINDOW=1 KACE_DEVICE_INJECT_S=2 KACE_DEVICE_TORCH_S=4 TMPDIR=$WORK
unset KACE_DB KACE_CUPTI_LIBRARY CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT LD_LIBRARY_PATH
: >"$WORK/forbidden.log"
mkdir -p "$WORK/ld"
# 9 of the catalog's workloads, every kind (3 cuda, 4 torch, 2 llm): enough for
# the plan's >= 30 pairs, few enough to profile in the first campaign call.
awk '/^#/ || !NF { print; next } { n[$2]++ } $2 == "cuda" || ($2 == "torch" && n[$2] <= 4) || ($2 == "llm" && n[$2] <= 2)' \
    "$B/workloads/catalog.txt" >"$WORK/catalog.txt"
export KACE_CATALOG=$WORK/catalog.txt
# The second campaign call's catalog has one more workload (the 5th PyTorch one): it is
# profiled then and joins the first call's plan (plan.py --extend).
awk '/^#/ || !NF { print; next } { n[$2]++ } $2 == "cuda" || ($2 == "torch" && n[$2] <= 5) || ($2 == "llm" && n[$2] <= 2)' \
    "$B/workloads/catalog.txt" >"$WORK/catalog2.txt"
added=$(awk '!/^#/ && NF { print $1 }' "$WORK/catalog2.txt" | grep -vxF -f <(awk '!/^#/ && NF { print $1 }' "$KACE_CATALOG"))

# call NAME LIMIT_S SCRIPT ARGS...: one device call under LD_DEBUG, timed.
call() {
    local name=$1 limit=$2
    shift 2
    local t0=$EPOCHREALTIME
    LD_DEBUG=libs LD_DEBUG_OUTPUT=$WORK/ld/ld timeout -k 10 $((limit + 30)) bash "$@" >"$WORK/$name.out" 2>&1
    local rc=$? wall
    wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    echo "dry-run: $name: exit $rc, $wall s (limit $limit s)"
    [ $rc -eq 0 ] || fail "$name: exit $rc: $(tail -3 "$WORK/$name.out")"
    awk -v w="$wall" -v l="$limit" 'BEGIN { exit !(w <= l) }' || fail "$name: took $wall s, over its limit of $limit s"
    local problems
    problems=$(bash -c 'source "$1"; out_check "$2"' _ "$B/scripts/device/lib.sh" "$OUT/$name") ||
        fail "$name: output folder: $problems"
}
check_log() { # check_log LOG: every line a step line or the end line; no step failed
    local bad
    bad=$(grep -v -E '^step [A-Za-z0-9._-]+ (ok|fail|skip) [0-9]+\.[0-9] |^end ok [0-9]+ fail [0-9]+ skip [0-9]+ ' "$1")
    [ -z "$bad" ] || fail "${1##*/}: lines that are not step lines: $bad"
    grep -q '^step [^ ]* fail ' "$1" && fail "${1##*/}: failed steps: $(grep '^step [^ ]* fail ' "$1" | cut -c1-200)"
    grep -q '^end ' "$1" || fail "${1##*/}: no end line (the call did not finish)"
}
want_ok() { grep -q "^step $2 ok " "$1" || fail "${1##*/}: step $2 is not ok: $(grep "^step $2 " "$1")"; }

# 1. first-light
# The fake CUPTI gives each replay pass a kernel record here, as real CUPTI might.
FAKE_CUPTI_RECORD_PER_PASS=1 KACE_DEVICE_LIMIT=120 call first-light 120 "$B/scripts/device/first-light.sh" "$OUT/first-light"
L=$OUT/first-light/first-light.log
check_log "$L"
if [ "$real_inject" = 1 ]; then
    grep -q '^step inject-bundle ok .* [1-9][0-9]* replay-pass records skipped' "$L" ||
        fail "first-light: inject-bundle does not report the replay-pass records it skipped: $(grep '^step inject-bundle ' "$L")"
fi
for s in env-gpu env-mps env-cupti env-tools build-inject inject-bundle inject-server inject-choice torch-steps \
    measure-mps-pair measure-mps-split measure-timeslice ncu pack; do want_ok "$L" "$s"; done
[ "$(grep -c '^step profile-[^ ]* ok ' "$L")" -ge 3 ] || fail "first-light: fewer than 3 profiles ok"
# One MPS server served the pair, and the step names that one alone (on the first H200 it
# also named the two clients, whose PIDs it had asked for as servers).
for s in measure-mps-pair measure-mps-split; do
    grep "^step $s " "$L" | grep -Eq 'MPS servers seen: ([0-9]+) ; served by MPS server \1;' ||
        fail "first-light: $s does not name one MPS server, the one that served it: $(grep "^step $s " "$L")"
done
tar -tzf "$OUT/first-light/first-light.tar.gz" >"$WORK/fl.list"
for f in env/nvidia-smi-q.txt env/versions.txt ncu-compare.csv measure/mps-pair-mps-log/ measure/mps-pair-server-list.txt \
    torch-steps.csv recordings/inject-bundle-c1.txt; do
    grep -q "first-light/$f" "$WORK/fl.list" || fail "first-light: no $f in first-light.tar.gz"
done

# 2. two campaign calls, the second from the first's store, measuring in chunks of 6 runs.
#    The second has 1.5 minutes: it profiles the added workload and runs ncu first, and its
#    measuring must pass the plan's pairs into its triples for the evaluation's checks below.
#    The fake CUPTI does as real CUPTI did on the first H200: a profiled launch gets no
#    kernel record (first light above covers a record per replay pass instead).
export FAKE_CUPTI_NO_RECORD_PROFILED=1
call campaign-1 60 "$B/scripts/device/campaign.sh" "$OUT/campaign-1" --minutes 1
KACE_CATALOG=$WORK/catalog2.txt KACE_DEVICE_CHUNK_RUNS=6 call campaign-2 90 "$B/scripts/device/campaign.sh" "$OUT/campaign-2" \
    --minutes 1.5 --store "$OUT/campaign-1/store.tar.gz"
# Until an ncu step has worked, a call's first ncu step comes before its profiles.
if ! grep -q '^step ncu-[^ ]* ok ' "$OUT/campaign-1/campaign.log"; then
    first=$(grep -m1 -E '^step (ncu|profile)-' "$OUT/campaign-2/campaign.log")
    [[ $first == "step ncu-"* ]] || fail "campaign-2: its first ncu step did not come before its profiles: $first"
fi
for c in campaign-1 campaign-2; do
    check_log "$OUT/$c/campaign.log"
    for s in env inject-check register plan campaign export pack; do want_ok "$OUT/$c/campaign.log" "$s"; done
done
n_cat=$(grep -v '^#' "$KACE_CATALOG" | grep -c '[^[:space:]]')
[ "$(grep -c '^step profile-[^ ]* ok ' "$OUT/campaign-1/campaign.log")" = "$n_cat" ] ||
    fail "campaign-1: not all $n_cat catalog workloads profiled"
[ "$(grep -c '^step profile-' "$OUT/campaign-2/campaign.log")" = 1 ] && grep -q "^step profile-$added ok " "$OUT/campaign-2/campaign.log" ||
    fail "campaign-2: did not profile just the added workload $added: $(grep '^step profile-' "$OUT/campaign-2/campaign.log" | cut -c1-100)"
grep -q "^step plan ok .*extended with $added: plan " "$OUT/campaign-2/campaign.log" ||
    fail "campaign-2: the plan was not extended with $added: $(grep '^step plan ' "$OUT/campaign-2/campaign.log")"
grep -q '^step restore ok .*profiled '"$n_cat" "$OUT/campaign-2/campaign.log" || fail "campaign-2: did not restore the store"
runs() { tar -xzOf "$1" ./kace.db >"$WORK/r.db" && python3 "$B/scripts/device/store.py" summary "$WORK/r.db" | awk '{ print $2 }'; }
r1=$(runs "$OUT/campaign-1/store.tar.gz") r2=$(runs "$OUT/campaign-2/store.tar.gz")
echo "dry-run: measured runs: $r1 after the first campaign call, $r2 after the second"
[ "${r1:-0}" -gt 0 ] && [ "${r2:-0}" -gt "${r1:-0}" ] || fail "campaign: runs did not grow across calls ($r1 -> $r2)"
grep -q '^step campaign ok .* s a run: about [0-9]* min of measuring left' "$OUT/campaign-1/campaign.log" ||
    fail "campaign-1: no estimate of the measuring left: $(grep '^step campaign ' "$OUT/campaign-1/campaign.log")"
# Its MPS runs in the warm pool (campaign.sh passes --pool): the median run and the pool's starts.
grep -q '^step campaign ok .*; an ok run took a median [0-9.]*[1-9][0-9.]* s.*; pool: [1-9][0-9]* MPS runs by [1-9][0-9]* member processes, their starts [0-9]* s, the runs [0-9]* s' \
    "$OUT/campaign-1/campaign.log" || fail "campaign-1: no median run time or pool line: $(grep '^step campaign ' "$OUT/campaign-1/campaign.log")"
grep -q '^step campaign ok .*[1-9][0-9]* were stored before, [0-9]* left (in [2-9][0-9]* chunks of at most 6 runs)' \
    "$OUT/campaign-2/campaign.log" ||
    fail "campaign-2: kace campaign did not continue the stored plan: $(grep '^step campaign ' "$OUT/campaign-2/campaign.log")"
# The plan: >= 30 pairs, 10 triples, 2 split grids, 3 repetitions, 3 time-sliced pairs, 24 solo curve runs.
tar -xzOf "$OUT/campaign-2/store.tar.gz" ./plan.txt >"$WORK/plan.txt" || fail "campaign: no plan.txt in the store"
tar -xzOf "$OUT/campaign-1/store.tar.gz" ./plan.txt >"$WORK/plan1.txt" &&
    head -n "$(wc -l <"$WORK/plan1.txt")" "$WORK/plan.txt" | cmp -s - "$WORK/plan1.txt" &&
    [ "$(grep -c "^run $added " "$WORK/plan.txt")" -ge 5 ] ||
    fail "campaign-2: its plan is not the first call's with $added in >= 5 pairs: $(tail -12 "$WORK/plan.txt")"
grep -q '^occur [5-9]' "$WORK/plan.txt" && [ "$(grep -c '^run [^ @]* [^ @]* [^ @]*$' "$WORK/plan.txt")" = 10 ] &&
    [ "$(grep -c '^run [^ @]* @ [0-9]*$' "$WORK/plan.txt")" = 24 ] &&
    [ "$(grep -c '^splits 10 30 50 70 90 on' "$WORK/plan.txt")" = 2 ] && grep -q '^repeat 3' "$WORK/plan.txt" &&
    grep -q '^mode timeslice' "$WORK/plan.txt" || fail "campaign: the plan lacks a part: $(cat "$WORK/plan.txt")"
# ncu against kace: the 3 CUDA C workloads and the first PyTorch training and
# inference ones, each once over the two calls, kept in the store with both costs.
tar -C "$WORK" -xzf "$OUT/campaign-2/store.tar.gz" ./ncu ./ncu-cost.tsv ./profile-cost.tsv 2>/dev/null ||
    fail "campaign: no ncu/, ncu-cost.tsv or profile-cost.tsv in the store"
n_ncu=$(cat "$OUT"/campaign-*/campaign.log | grep -c '^step ncu-[^ ]* ok ')
[ "$n_ncu" = 8 ] && [ "$(ls "$WORK"/ncu/*.compare.csv 2>/dev/null | wc -l)" = 8 ] &&
    [ "$(ls "$WORK"/ncu/*.nocache.ncu.csv.gz 2>/dev/null | wc -l)" = 3 ] &&
    [ "$(ls "$WORK"/ncu/*.ncu.csv.gz 2>/dev/null | wc -l)" = 8 ] ||
    fail "campaign: $n_ncu ncu steps ok (want 8: 5 workloads, 3 of them also without cache flush): $(grep -h '^step ncu-' "$OUT"/campaign-*/campaign.log | cut -c1-160)"
grep -h '^step ncu-[^ ]* ok ' "$OUT"/campaign-*/campaign.log | grep -q -v ' 6/6 metrics in both' &&
    fail "campaign: an ncu step without all 6 metrics in both: $(grep -h '^step ncu-' "$OUT"/campaign-*/campaign.log | cut -c1-200)"
[ "$(awk -F'\t' 'NR > 1 && $4 > 0 && $5 > 0 && $6 != "" && $11 > 0' "$WORK/profile-cost.tsv" | wc -l)" = "$((n_cat + 1))" ] ||
    fail "campaign: profile-cost.tsv lacks a workload's kernel counts or kernels per sample: $(cat "$WORK/profile-cost.tsv")"
# The exports import into a new store.
mkdir -p "$WORK/x" && tar -C "$WORK/x" -xzf "$OUT/campaign-2/campaign-export.tar.gz"
"$B/bin/kace" import --db "$WORK/import.db" "$WORK/x/campaign-export/kernel.csv" "$WORK/x/campaign-export/system.csv" \
    "$WORK/x/campaign-export/pairs.csv" >"$WORK/import.out" 2>&1 || fail "kace import of the exports: $(cat "$WORK/import.out")"

# 2b. The later catalog: its workloads wait until the plan is measured (above, the bundle's
#     catalog-later.txt was loaded and none of it profiled), then are profiled and join the
#     plan, and the call measures their pairs. A new campaign of 3 workloads with a plan of
#     one pair of two of them (KACE_DEVICE_PLAN: the third is never added to it) and one
#     later workload, which joins in a pair with each of the two. Its ncu profiles no launch, as on
#     the first H200 (the stand-in in its slow mode), so the call's first ncu failure is
#     followed by the probes (ncu_probe), once, and no other ncu step of the call runs.
awk '!/^#/ && $2 == "cuda"' "$KACE_CATALOG" >"$WORK/catalog3.txt"
later=$(awk '!/^#/ && $2 == "llm" { print $1; exit }' "$KACE_CATALOG")
awk -v n="$later" '$1 == n' "$KACE_CATALOG" >"$WORK/catalog3-later.txt"
read -r w1 w2 _ <<<"$(awk '{ printf "%s ", $1 }' "$WORK/catalog3.txt")"
printf 'workloads %s %s\nrun %s %s\n' "$w1" "$w2" "$w1" "$w2" >"$WORK/plan3.txt"
KACE_CATALOG=$WORK/catalog3.txt KACE_CATALOG_LATER=$WORK/catalog3-later.txt KACE_DEVICE_PLAN=$WORK/plan3.txt \
    KACE_DEVICE_NCU=$w1 KACE_FAKE_NCU_SLOW=1 KACE_FAKE_NCU_PROFILED=0 KACE_DEVICE_NCU_PROBE_S=1 KACE_DEVICE_NCU_PROBE_END_S=3 \
    call campaign-later 90 "$B/scripts/device/campaign.sh" "$OUT/campaign-later" --minutes 1.5
L=$OUT/campaign-later/campaign.log
grep -v '^step ncu-'"$w1"'\(\.nocache\)\? fail .*(0 of [0-9]* launches profiled)' "$L" >"$WORK/later.log"
check_log "$WORK/later.log"
for s in plan campaign "profile-$later" plan-later campaign-later; do want_ok "$L" "$s"; done
[ "$(grep -c '^step ncu-probe ok .*launch-stats: 0 of 1 launch profiled in [0-9.]* s; one-counter: 0 of 1 .*; speed-of-light: 0 of 1 ' "$L")" = 1 ] &&
    grep -A1 "^step ncu-$w1 fail" "$L" | grep -q '^step ncu-probe ' &&
    [ "$(grep -c "^step ncu-$w1" "$L")" = 1 ] && grep -q '^step ncu-others skip .*other ncu steps wait for a later call' "$L" ||
    fail "campaign-later: not one ncu step, then the probes, and no other ncu step (the call's ncu profiled nothing): $(grep '^step ncu' "$L" | cut -c1-200)"
tar -xzOf "$OUT/campaign-later/store.tar.gz" ./ncu-nothing.tsv | grep -q "	$w1	way [0-9]*\$" ||
    fail "campaign-later: the call whose ncu profiled nothing is not in ncu-nothing.tsv"
tar -xzOf "$OUT/campaign-later/store.tar.gz" ./ncu-probe.tsv | grep -q "	$w1	launch-stats: 0 of 1" ||
    fail "campaign-later: the probe's results are not in the store (ncu-probe.tsv)"
[ "$(grep -c '^step profile-' "$L")" = 4 ] || fail "campaign-later: not 4 profiles: $(grep '^step profile-' "$L" | cut -c1-80)"
grep -n '^step ' "$L" | grep -A1 '^[0-9]*:step campaign ok' | grep -q "step profile-$later ok" ||
    fail "campaign-later: $later was not profiled right after the plan was measured: $(grep '^step \(campaign\|profile\)' "$L" | cut -c1-90)"
grep -q '^step plan ok [0-9.]* your plan' "$L" && grep -q '^step campaign ok .*the plan is done' "$L" ||
    fail "campaign-later: KACE_DEVICE_PLAN's plan was not measured whole: $(grep '^step \(plan\|campaign\) ' "$L")"
grep -q "^step plan-later ok .*extended with $later: plan " "$L" &&
    grep -q '^step campaign-later ok [0-9.]* campaign: 2 runs measured (2 ok, 0 failed), 1 were stored before, 0 left' "$L" ||
    fail "campaign-later: the plan did not take in $later and measure its 2 pairs: $(grep '^step \(plan\|campaign\)-later ' "$L")"
w3=$(awk 'NR == 3 { print $1 }' "$WORK/catalog3.txt")
tar -xzOf "$OUT/campaign-later/store.tar.gz" ./plan.txt >"$WORK/plan3-after.txt"
grep -q "$w3" "$WORK/plan3-after.txt" && fail "campaign-later: $w3, left out of the plan given, was added: $(cat "$WORK/plan3-after.txt")"
[ "$(grep -c "^run .*$later" "$WORK/plan3-after.txt")" = 2 ] || fail "campaign-later: $later not in 2 pairs: $(cat "$WORK/plan3-after.txt")"
# Its dataset folder's README says what ncu and the probes did.
python3 "$B/scripts/device/dataset.py" "$OUT/campaign-later/store.tar.gz" "$WORK/later-ds" --kace "$B/bin/kace" >/dev/null 2>&1 &&
    grep -q '^ncu profiled no launch in 1 call (`campaign/ncu-nothing.tsv`)' "$WORK/later-ds/README.md" &&
    grep -q '^Probes (`campaign/ncu-probe.tsv`), .*launch-stats: 0 of 1 launch profiled' "$WORK/later-ds/README.md" ||
    fail "campaign-later: the dataset README does not give ncu's calls and probes: $(sed -n '/## kace against Nsight/,/## Files/p' "$WORK/later-ds/README.md")"

# 2c. One allocation (tests/device/dry-run-pool.sh): one kace campaign --device --catalog
#     call for the catalog's 12 workloads (probe, profiles, plan, the measuring steps, ncu,
#     export), against stand-ins as slow and as coupled as the real thing at
#     1/KACE_DRY_SCALE (20) of real time; it prints
#     the projected minutes and runs per minute, and what falls short of the dataset's goal
#     within 12 minutes.
t_pool=$EPOCHREALTIME
bash "$root/tests/device/dry-run-pool.sh" "$B/bin/kace" "$BUILD" "$WORK" || fail "the allocation's schedule (above)"
echo "dry-run: the allocation's schedule: $(awk -v a="$t_pool" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"


# names the GPU and its calls, and kace demo runs on it: splits made the
# artifact's way, Xu et al. with NVML's PCIe throughput in place of ncu's (said so).
python3 "$B/scripts/device/dataset.py" "$OUT/campaign-2/store.tar.gz" "$WORK/h100" --kace "$B/bin/kace" \
    >"$WORK/dataset.out" 2>&1 || fail "dataset.py: $(tail -3 "$WORK/dataset.out")"
grep -q '^| 20[0-9-]*T[0-9:]*Z | Fake GPU (kace dry run), 580.00, 81559 MiB | 13.0 | fake | ' "$WORK/h100/README.md" &&
    [ "$(grep -c '^| 20[0-9-]*T' "$WORK/h100/README.md")" = 2 ] ||
    fail "dataset README: not one line per campaign call with the GPU, driver and CUDA: $(grep '^|' "$WORK/h100/README.md")"
grep -q "^| pairs at 100/100 MPS | [0-9]* | 30 | met |" "$WORK/h100/README.md" || fail "dataset README: pairs goal not met"
cmp -s "$OUT/campaign-2/store.tar.gz" "$WORK/h100/campaign/store.tar.gz" ||
    fail "dataset: campaign/store.tar.gz is not the last call's store (the next call's --store)"
python3 "$B/scripts/device/dataset.py" --verify "$WORK/h100" --kace "$B/bin/kace" >"$WORK/verify.out" 2>&1 ||
    fail "dataset.py --verify on the folder it made: $(cat "$WORK/verify.out")"
grep -q -- "--gpu-memory 80" "$WORK/h100/README.md" || fail "dataset README: no demo command with the GPU's memory"
# Every member ran kace_progress.h (the fake CUDA program): each stopped at its next report,
# or, in the warm pool, was paused at a step boundary.
ended=$(sed -n '/^## How the workloads ended/,/^## /p' "$WORK/h100/README.md")
good=$(grep -c -E '^- [1-9][0-9]* (stopped at their next report|paused at a step boundary in the warm pool)' <<<"$ended")
[ "$good" -ge 1 ] && [ "$(grep -c '^- [1-9]' <<<"$ended")" = "$good" ] ||
    fail "dataset README: not every member stopped at its next report: $(grep -A8 '^## How the workloads ended' "$WORK/h100/README.md")"
grep -q "^| CUDA C workloads compared with ncu | 3 | 3 | met |" "$WORK/h100/README.md" &&
    grep -q "^| PyTorch workloads compared with ncu | 2 | 2 | met |" "$WORK/h100/README.md" ||
    fail "dataset README: the ncu goals are not met: $(grep 'compared with ncu' "$WORK/h100/README.md")"
[ "$(grep -c '^| `[^`]*` | [a-z]* | 3\( (step ~[0-9]*\(, part\)\?)\)\? | [-+*0-9.]*%' "$WORK/h100/README.md")" = 5 ] ||
    fail "dataset README: not 5 ncu comparison rows (3 kernels each in the fake ncu's export): $(grep -A8 '^## kace against Nsight' "$WORK/h100/README.md")"
[ "$(grep -c '^| `cuda-[^`]*` (no cache flush) | cuda | 3 | ' "$WORK/h100/README.md")" = 3 ] ||
    fail "dataset README: not 3 CUDA C rows of ncu with --cache-control none"
grep -q '^kace / ncu wall time: median ' "$WORK/h100/README.md" || fail "dataset README: no profiling cost ratio"
[ "$(grep -c '^| `[^`]*` | torch | 3 (step ~[0-9]*' "$WORK/h100/README.md")" = 2 ] ||
    fail "dataset README: the PyTorch ncu rows do not give kace's kernels per step"
cp "$root/docs/gpu.md" "$WORK/gpu.md"
python3 "$B/scripts/device/dataset.py" --docs "$WORK/h100" "$WORK/gpu.md" >/dev/null &&
    python3 "$B/scripts/device/dataset.py" --docs "$WORK/h100" "$WORK/gpu.md" --check >/dev/null &&
    grep -q '^kace / ncu wall time: median ' "$WORK/gpu.md" || fail "dataset.py --docs: no ncu tables in a copy of docs/gpu.md"
# The evaluation of the dataset (docs/h100.md's tables), with the V100 data for the transfer.
if [ -d "$root/../shared/data/kace-v100" ]; then
    cp "$root/docs/h100.md" "$WORK/h100.md"
    (cd "$WORK" && python3 "$root/tools/gpu-report.py" --kace "$B/bin/kace" --data h100 \
        --v100 "$root/../shared/data/kace-v100" --update h100.md) >"$WORK/report.out" 2>&1 ||
        fail "gpu-report.py on the dataset: $(tail -3 "$WORK/report.out")"
    for want in '^| 2 | [01]\.[0-9]* | ' '^| clean | [0-9]* | [01]\.[0-9]* ± ' '^V100 → Fake GPU (kace dry run)' \
        '^Fake GPU (kace dry run) → V100' '^Triples (the paper' 'img/h100/training_size_clean.png' \
        '^| n_occur | kace | KACE | Xu | ' "^kace eval: Xu et al. with NVML's PCIe throughput" '^### MPS thread splits'; do
        grep -q -- "$want" "$WORK/h100.md" || fail "gpu-report.py on the dataset: no line matching '$want'"
    done
    [ -s "$WORK/img/h100/training_size_clean.png" ] || fail "gpu-report.py: no figure copied"
else
    echo "dry-run: no ../shared/data/kace-v100: the evaluation report is not tried"
fi
"$B/bin/kace" demo --data "$WORK/h100" --gpu "Fake GPU" --gpu-memory 80 --out "$WORK/demo" --db "$WORK/demo/kace.db" \
    >"$WORK/demo.out" 2>&1 || fail "kace demo on the dataset: $(tail -3 "$WORK/demo.out")"
for want in "runs on splits made the KACE artifact's way" "Xu et al. with NVML's PCIe throughput" "of 80 GB" \
    "Unseen workload families (pairs), clean mode"; do
    grep -q "$want" "$WORK/demo.out" || fail "kace demo on the dataset: no '$want'"
done

# 3. nothing asked to change GPU settings; libraries from the bundle, libc or the driver;
#    no workload that ncu left running (the fake leaves one each time) still runs.
[ ! -s "$WORK/forbidden.log" ] || fail "forbidden tool options: $(cat "$WORK/forbidden.log")"
left=0
for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -q '^KACE_NCU_TOKEN=' || continue
    left=$((left + 1))
    kill -KILL "${p#/proc/}" 2>/dev/null
done
[ "$left" = 0 ] || fail "$left workload process(es) that ncu left running were not killed"
python3 "$B/scripts/device/check-libs.py" --kace "$B/bin/kace" --allow "$B/lib" --allow "$FAKE_CUDA" \
    --allow "$(dirname "$KACE_NVML_LIBRARY")" "$WORK/ld" >"$WORK/libs.out" 2>&1 || fail "libraries: $(cat "$WORK/libs.out")"
cat "$WORK/libs.out"
if [ "$real_inject" = 1 ] && ! grep -q ' [1-9][0-9]* processes with the injection library' "$WORK/libs.out"; then
    fail "the injection library was never loaded by the fake CUDA program"
fi

echo "dry-run: $(awk -v a="$t_all" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s in all; output in $OUT"
if [ $failures -ne 0 ]; then
    echo "dry-run: $failures failure(s); the calls' output: $WORK/*.out, logs in $OUT" >&2
    exit 1
fi
rm -rf "$WORK"
[ $keep = 1 ] || rm -rf "$OUT"
echo "dry-run: all checks passed"
