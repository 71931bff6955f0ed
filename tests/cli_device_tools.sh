#!/usr/bin/env bash
# The device scripts' pieces that can be checked without a GPU or the bundle:
# check-libs.py rejects a library from outside the allowed folders, the
# output-folder check rejects more than 8 files or 3 folders deep, campaign.sh
# stops before measuring when its --store cannot be restored or is another GPU
# model's, dataset.sh (kace export --dataset) and its --verify of data/h*, the
# real GPU's recordings, and docs/h100.md's blocks are in step with data/h100
# (tools/gpu-report.py); and two whole campaign.sh calls against the engine's
# stand-ins (tests/cli_campaign_device.sh's).
#   bash cli_device_tools.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_device_tools.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
DEV=$(cd "$(dirname "$0")/../scripts/device" && pwd)
CHECK_LIBS=$(cd "$(dirname "$0")/device" && pwd)/check-libs.py
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1
source "$(dirname "$0")/lib_test.sh" # fail, failures

# 1. check-libs.py (the dry run checks the bundle's loads with it): a kace that loaded a
#    library from outside the allowed folders fails; inside passes.
mkdir -p "$SCRATCH/ld" "$SCRATCH/bundle/lib"
cat >"$SCRATCH/ld/ld.100" <<EOT
       100:	find library=libsqlite3.so.0 [0]; searching
       100:	  trying file=$SCRATCH/bundle/lib/libsqlite3.so.0
       100:	find library=libc.so.6 [0]; searching
       100:	 search cache=/etc/ld.so.cache
       100:	  trying file=/lib/x86_64-linux-gnu/libc.so.6
       100:	initialize program: $KACE
       100:	transferring control: $KACE
       100:	calling init: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
EOT
python3 "$CHECK_LIBS" --kace "$KACE" --allow "$SCRATCH/bundle/lib" "$SCRATCH/ld" >"$SCRATCH/cl1.out" 2>&1 &&
    fail "check-libs accepted a dlopen'd library from /usr/lib: $(cat "$SCRATCH/cl1.out")"
grep -q "libnvidia-ml.so.1 (in" "$SCRATCH/cl1.out" || fail "check-libs does not name the library: $(cat "$SCRATCH/cl1.out")"
python3 "$CHECK_LIBS" --kace "$KACE" --allow "$SCRATCH/bundle/lib" --allow /usr/lib/x86_64-linux-gnu "$SCRATCH/ld" \
    >"$SCRATCH/cl2.out" 2>&1 || fail "check-libs rejected allowed libraries: $(cat "$SCRATCH/cl2.out")"
python3 "$CHECK_LIBS" --kace /nonexistent/kace --allow / "$SCRATCH/ld" >/dev/null 2>&1 &&
    fail "check-libs passed without seeing any kace process"

# 2. The output folder rules of a device call.
mkdir -p "$SCRATCH/out/a/b/c"
for i in 1 2 3 4 5 6 7 8; do : >"$SCRATCH/out/f$i"; done
(source "$DEV/lib.sh" && out_check "$SCRATCH/out") >/dev/null || fail "out_check rejected 8 files"
: >"$SCRATCH/out/a/b/c/deep"
(source "$DEV/lib.sh" && out_check "$SCRATCH/out") >"$SCRATCH/oc.out" && fail "out_check accepted 9 files, 3 folders deep"
grep -q "9 files" "$SCRATCH/oc.out" && grep -q "3 folders deep" "$SCRATCH/oc.out" || fail "out_check: $(cat "$SCRATCH/oc.out")"

ROOT=$(cd "$(dirname "$0")/.." && pwd)

# 3. A campaign call given a store it cannot restore stops at once (going on would start a
#     new campaign whose store replaces the old one).
bash "$DEV/campaign.sh" "$SCRATCH/c1" --minutes 1 --store "$SCRATCH/nonexistent/store.tar.gz" >/dev/null 2>&1 &&
    fail "campaign.sh went on with a --store that does not exist"
grep -q "no such file; nothing was run" "$SCRATCH/c1/campaign.log" || fail "campaign.sh, missing store: $(cat "$SCRATCH/c1/campaign.log")"
echo "not a tar archive" >"$SCRATCH/bad.tar.gz"
bash "$DEV/campaign.sh" "$SCRATCH/c2" --minutes 1 --store "$SCRATCH/bad.tar.gz" >/dev/null 2>&1 &&
    fail "campaign.sh went on with a store it could not unpack"
grep -q "^step restore fail .*cannot unpack" "$SCRATCH/c2/campaign.log" &&
    grep -q "^end .*could not be restored: nothing else was run" "$SCRATCH/c2/campaign.log" &&
    [ "$(wc -l <"$SCRATCH/c2/campaign.log")" = 2 ] || fail "campaign.sh, bad store: $(cat "$SCRATCH/c2/campaign.log")"
[ -e "$SCRATCH/c2/store.tar.gz" ] && fail "campaign.sh wrote a store after failing to restore one"
# A store measured on another GPU model is not continued here (the batch tool may lend an
# H200 where an H100 was asked for); the dry run resumes stores of the same GPU.
mkdir -p "$SCRATCH/other"
"$KACE" workload --db "$SCRATCH/other/kace.db" add w -- true >/dev/null || fail "workload add"
printf '2026-11-20T10:00:00Z\tNVIDIA H100 80GB HBM3, 580.65, 81559 MiB\t13.0\t2.9\tkace 1\n' >"$SCRATCH/other/visits.tsv"
tar -C "$SCRATCH/other" -czf "$SCRATCH/other.tar.gz" kace.db visits.tsv
KACE_DEVICE_FAKE=1 KACE_BIN=$KACE KACE_FAKE_GPU_NAME="NVIDIA H200" \
    bash "$DEV/campaign.sh" "$SCRATCH/c3" --minutes 1 --store "$SCRATCH/other.tar.gz" >/dev/null 2>&1 &&
    fail "campaign.sh continued an H100 store on an H200"
grep -q "^step env fail .*the store was measured on NVIDIA H100 80GB HBM3 and this GPU is NVIDIA H200: give this GPU a campaign of its own" \
    "$SCRATCH/c3/campaign.log" &&
    grep -q "^end .*(the store is another GPU model's: nothing else was run)" "$SCRATCH/c3/campaign.log" &&
    [ "$(wc -l <"$SCRATCH/c3/campaign.log")" = 3 ] || fail "campaign.sh, another GPU's store: $(cat "$SCRATCH/c3/campaign.log")"
[ -e "$SCRATCH/c3/store.tar.gz" ] && fail "campaign.sh wrote a store after refusing another GPU's"
# --minutes: a long call on one's own server is fine (1440 is 24 h); 0 and 1441 are refused.
for m in 0 1441 x; do
    bash "$DEV/campaign.sh" "$SCRATCH/c4" --minutes "$m" >/dev/null 2>"$SCRATCH/c4.err"
    [ $? = 2 ] && grep -q "minutes must be in (0, 1440]" "$SCRATCH/c4.err" || fail "campaign.sh --minutes $m: $(cat "$SCRATCH/c4.err")"
done
KACE_DEVICE_FAKE=1 KACE_BIN=$KACE bash "$DEV/campaign.sh" "$SCRATCH/c4" --minutes 1440 --store "$SCRATCH/nonexistent.tar.gz" \
    >/dev/null 2>"$SCRATCH/c4.err"
grep -q "no such file; nothing was run" "$SCRATCH/c4.err" || fail "campaign.sh --minutes 1440 was refused: $(cat "$SCRATCH/c4.err")"

# 3b. A whole call against stand-ins (the engine's, as tests/cli_campaign_device.sh sets them
#     up): stand-in workloads that write a recording where the injection library would,
#     the stand-in MPS daemon, a fake NVML. The first call profiles, plans and measures
#     what its time holds; the second resumes from the first's store, measures the rest
#     of the plan, and then the later catalog's workload, profiled, joins the plan; each
#     brings back the three files, the dataset folder among them, and dataset.sh makes a
#     folder of the last store that --verify passes.
BUILD=$(dirname "$KACE")
E=$SCRATCH/e2e
mkdir -p "$E/bin"
if cp "$BUILD/tests/kace-test-worker" "$E/bin/worker" && cp "$BUILD/tests/kace-test-mps-control" "$E/bin/mps-control" &&
    [ -e "$BUILD/tests/libfake_nvml_mps.so" ]; then
    trap 'kill_pids; for p in $(pgrep -f "$E/bin/"); do kill -KILL "$p" 2>/dev/null; done' EXIT
    sed 's/^clock monotonic/clock realtime/' "$(dirname "$0")/data/cupti/small.txt" >"$E/recording.txt"
    : >"$E/inject.so"
    for w in a:4000 b:2000 c:1000 d:3000; do
        cat >"$E/bin/sw-${w%%:*}" <<EOS
#!/bin/sh
# A run started ahead waits at its CUDA start until kace opens its gate, as the
# injection library makes it wait (one byte down the FIFO); only then does it record.
if [ -n "\${KACE_CUPTI_GATE:-}" ]; then
    head -c 1 "\$KACE_CUPTI_GATE" >/dev/null || exit 75
    unset KACE_CUPTI_GATE
fi
if [ -n "\${CUDA_INJECTION64_PATH:-}" ]; then
    if [ "\${KACE_CUPTI_COUNTERS:-1}" = 0 ]; then sed '/^counters /d' "$E/recording.txt" >"\$KACE_CUPTI_OUTPUT"
    else cp "$E/recording.txt" "\$KACE_CUPTI_OUTPUT"; fi
fi
exec "$E/bin/worker" report ${w#*:}
EOS
        chmod +x "$E/bin/sw-${w%%:*}"
        echo "s${w%%:*}_batch1-inf cmd @W@/sw-${w%%:*}" >>"$E/bin/catalog.txt"
    done
    sed -n '$p' "$E/bin/catalog.txt" >"$E/bin/later.txt" && sed -i '$d' "$E/bin/catalog.txt"
    e2e() { # OUT ARGS...: one call of campaign.sh against the stand-ins
        KACE_DEVICE_FAKE=1 KACE_BIN=$KACE KACE_CATALOG=$E/bin/catalog.txt KACE_CATALOG_LATER=$E/bin/later.txt KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_mps.so \
            KACE_FAKE_GPU_NAME="Stand-in GPU" KACE_CUPTI_LIBRARY=$E/inject.so KACE_MPS_CONTROL=$E/bin/mps-control \
            KACE_TEST_MPS_MODE=normal KACE_DEVICE_NCU=none KACE_DEVICE_WARMUP=0.3 KACE_DEVICE_WINDOW=0.5 \
            KACE_DEVICE_PROFILE_WARMUP=0.2 KACE_DEVICE_PROFILE_WINDOW=0.3 bash "$DEV/campaign.sh" "$@" >/dev/null 2>&1
    }
    runs_in() { tar -xzOf "$1" ./kace.db >"$E/r.db" && sqlite3 "$E/r.db" "SELECT count(*) FROM runs WHERE status = 'ok'"; }
    e2e "$E/c1" --minutes 1.5 || fail "campaign.sh, call 1: $(cat "$E/c1/campaign.log")"
    for s in restore env campaign export pack; do
        grep -q "^step $s ok " "$E/c1/campaign.log" || fail "campaign.sh, call 1: step $s: $(cat "$E/c1/campaign.log")"
    done
    grep -q "^step campaign-later skip .*the catalog's plan is not measured yet" "$E/c1/campaign.log" ||
        fail "call 1 went on to the later catalog: $(cat "$E/c1/campaign.log")"
    [ "$(cd "$E/c1" && ls | tr '\n' ' ')" = "campaign-export.tar.gz campaign.log store.tar.gz " ] || fail "call 1 brought back: $(ls "$E/c1")"
    tar -tzf "$E/c1/store.tar.gz" | grep -qx './visits.tsv' || fail "call 1: no visits.tsv in its store"
    tar -tzf "$E/c1/campaign-export.tar.gz" | grep -q 'campaign-export/dataset/README.md' ||
        fail "call 1: no dataset in campaign-export.tar.gz"
    n1=$(runs_in "$E/c1/store.tar.gz")
    [ "${n1:-0}" -gt 0 ] || fail "call 1 measured no run: $(cat "$E/c1/campaign.log")"
    e2e "$E/c2" --minutes 4 --fit-minutes 4 --store "$E/c1/store.tar.gz" || fail "campaign.sh, call 2: $(cat "$E/c2/campaign.log")"
    # The visit's fit reaches the engine, counted from the call's start.
    tar -xzOf "$E/c2/campaign-export.tar.gz" --wildcards '*steps/*-campaign.txt' 2>/dev/null |
        grep -q '^fit: .* left of --fit-minutes with windows of ' || fail "call 2: the engine was not given the fit"
    grep -q "^step restore ok .* 1 earlier calls" "$E/c2/campaign.log" || fail "call 2 did not restore call 1's store"
    grep -q "^step campaign ok .*, 0 left for the next call; ended: finished" "$E/c2/campaign.log" &&
        grep -q "^step campaign-later ok " "$E/c2/campaign.log" || fail "call 2: $(cat "$E/c2/campaign.log")"
    n2=$(runs_in "$E/c2/store.tar.gz")
    [ "$(sqlite3 "$E/r.db" "SELECT count(*) FROM campaign_plans WHERE text LIKE '%sd_batch1-inf%'")" -ge 1 ] ||
        fail "call 2: the later catalog's workload did not join the plan"
    [ "${n2:-0}" -gt "${n1:-0}" ] || fail "call 2 measured nothing more ($n1 then $n2 runs): $(cat "$E/c2/campaign.log")"
    bash "$DEV/dataset.sh" --kace "$KACE" "$E/c2/store.tar.gz" "$E/ds" >"$E/ds.out" 2>&1 &&
        bash "$DEV/dataset.sh" --kace "$KACE" --verify "$E/ds" >>"$E/ds.out" 2>&1 || fail "dataset.sh of call 2: $(cat "$E/ds.out")"
    [ "$(grep -c '^| 20[0-9-]*T.* | Stand-in GPU, ' "$E/ds/README.md")" = 2 ] || fail "dataset README: not the 2 calls"
    left=$(pgrep -af "$E/bin/") && fail "campaign.sh left processes behind: $left"
else
    fail "the stand-ins are not built in $BUILD/tests"
fi

# 4. dataset.sh (kace export --dataset) rebuilds a dataset folder only from a store that
#     continues its campaign: the same GPU model and every call the folder holds; anything
#     else leaves the folder as it was.
V1=$(printf '2026-11-20T10:00:00Z\tNVIDIA H100 80GB HBM3, 580.65, 81559 MiB\t13.0\t2.9\tkace 1')
V2=$(printf '2026-11-21T10:00:00Z\tNVIDIA H100 80GB HBM3, 580.65, 81559 MiB\t13.0\t2.9\tkace 1')
V3=$(printf '2026-11-22T10:00:00Z\tNVIDIA H200, 580.65, 143771 MiB\t13.0\t2.9\tkace 1')
store_with_visits() { # NAME VISIT...: NAME.tar.gz with a store and those calls
    local name=$1 d=$SCRATCH/st-$1; shift
    mkdir -p "$d" && "$KACE" workload --db "$d/kace.db" add w -- true >/dev/null || fail "workload add"
    printf '%s\n' "$@" >"$d/visits.tsv"
    tar -C "$d" -czf "$SCRATCH/$name.tar.gz" kace.db visits.tsv
}
store_with_visits older "$V1"
store_with_visits newer "$V1" "$V2"
store_with_visits h200 "$V3"
store_with_visits mixed "$V1" "$V3"
DS=$SCRATCH/dsc
ds() { (cd "$SCRATCH" && bash "$DEV/dataset.sh" --kace "$KACE" "$@" >/dev/null 2>"$SCRATCH/ds.err"); }
ds older.tar.gz "$DS" && ds newer.tar.gz "$DS" || fail "dataset.sh, a campaign continued: $(cat "$SCRATCH/ds.err")"
[ "$(wc -l <"$DS/campaign/visits.tsv")" = 2 ] || fail "dataset.sh: $DS/campaign/visits.tsv has not the newer store's 2 calls"
grep -q "^# kace's own dataset: NVIDIA H100 80GB HBM3$" "$DS/README.md" &&
    grep -q "^| 2026-11-21T10:00:00Z | NVIDIA H100 80GB HBM3, 580.65, 81559 MiB | 13.0 | 2.9 | kace 1 |$" "$DS/README.md" ||
    fail "dataset.sh: the README does not name the GPU and the calls: $(head -12 "$DS/README.md")"
ds h200.tar.gz "$DS" && fail "dataset.sh wrote an H200 campaign over an H100 dataset"
grep -q "h200.tar.gz was measured on NVIDIA H200 and $DS holds NVIDIA H100 80GB HBM3's: write it into a folder of its own; nothing written" \
    "$SCRATCH/ds.err" || fail "dataset.sh, another GPU: $(cat "$SCRATCH/ds.err")"
ds older.tar.gz "$DS" && fail "dataset.sh wrote an older call's store over a newer dataset"
grep -q "older.tar.gz does not continue $DS's campaign: the 2 calls of .* are not all in it; nothing written (pass --replace" \
    "$SCRATCH/ds.err" || fail "dataset.sh, an older store: $(cat "$SCRATCH/ds.err")"
ds mixed.tar.gz "$SCRATCH/dsm" && fail "dataset.sh took a store of two GPU models"
grep -q "mixes GPU models (NVIDIA H100 80GB HBM3, NVIDIA H200)" "$SCRATCH/ds.err" || fail "dataset.sh, mixed: $(cat "$SCRATCH/ds.err")"
cmp -s "$DS/campaign/store.tar.gz" "$SCRATCH/newer.tar.gz" && [ "$(wc -l <"$DS/campaign/visits.tsv")" = 2 ] ||
    fail "dataset.sh changed $DS although it refused"
ds older.tar.gz "$DS" --replace && cmp -s "$DS/campaign/store.tar.gz" "$SCRATCH/older.tar.gz" ||
    fail "dataset.sh --replace: $(cat "$SCRATCH/ds.err")"
# --verify: the folder is what its own store gives, and it imports; a file edited, added
# or removed by hand fails it.
ds --verify "$DS" || fail "dataset.sh --verify on a folder it made: $(cat "$SCRATCH/ds.err")"
echo "edited by hand" >>"$DS/campaign/runs.csv"
touch "$DS/notes.txt"
rm "$DS/campaign/spread.csv"
ds --verify "$DS" && fail "dataset.sh --verify passed a folder edited by hand"
grep -q "^  notes.txt: not made by kace export --dataset" "$SCRATCH/ds.err" &&
    grep -q "^  campaign/runs.csv: differs from what the store gives" "$SCRATCH/ds.err" &&
    grep -q "^  campaign/spread.csv: missing" "$SCRATCH/ds.err" || fail "dataset.sh --verify: $(cat "$SCRATCH/ds.err")"
# kace's own datasets, once a device brought them back (data/h200 since 2026-11-28):
# each generated from its store, and each imports (the CI check).
for d in "$ROOT"/data/h[0-9]*; do
    [ -d "$d" ] || continue
    (cd "$ROOT" && bash scripts/device/dataset.sh --verify "data/${d##*/}" --kace "$KACE") >"$SCRATCH/${d##*/}v.out" 2>&1 ||
        fail "data/${d##*/}: $(cat "$SCRATCH/${d##*/}v.out")"
done

# data/h200 holds first light's 3 colocations (an MPS pair, its 30/70 split and the pair
# time-sliced, measured before the campaign's first call and put into its store), and kace
# import stores them.
if [ -d "$ROOT/data/h200" ]; then
    "$KACE" import --quiet --db "$SCRATCH/h200.db" "$ROOT/data/h200" >"$SCRATCH/h200i.out" 2>&1 ||
        fail "kace import data/h200: $(cat "$SCRATCH/h200i.out")"
    got=$(sqlite3 "$SCRATCH/h200.db" "SELECT group_concat(set_name || ':' || n, ' ') FROM
          (SELECT set_name, count(*) AS n FROM runs GROUP BY set_name ORDER BY set_name)")
    [ "$got" = "mps-splits:1 pairs:1 timeslice-pairs:1" ] || fail "data/h200's colocations as imported: '$got'"
    [ "$(tail -n +2 "$ROOT/data/h200/campaign/runs.csv" | cut -d, -f1 | sort -u | wc -l)" = 3 ] ||
        fail "data/h200/campaign/runs.csv: not first light's 3 runs"
    grep -q "^- 6 stopped at their next report after SIGTERM (the step-boundary stop)$" "$ROOT/data/h200/README.md" ||
        fail "data/h200/README.md does not say how the processes ended"
fi

# 5. The recordings a real GPU made (data/first-light/*/first-light.tar.gz, made by
#     libkace_cupti.so under CUDA 13 on the first H200): kace import-cupti reads every one,
#     and from each CUDA C profile's recording gives the six kernel metrics kace profile
#     stored on that GPU (first-light-store.tar.gz); the gemm's are its launch's own
#     arithmetic (2048 x 2048 threads, 32 registers each, 64 x 64 blocks of 8 KiB).
for fl in "$ROOT"/data/first-light/*/first-light.tar.gz; do
    [ -f "$fl" ] || continue
    R=$SCRATCH/real-$(basename "$(dirname "$fl")") && mkdir -p "$R/st" &&
        tar -C "$R" -xzf "$fl" && tar -C "$R/st" -xzf "$(dirname "$fl")/first-light-store.tar.gz" ||
        { fail "$fl: cannot unpack it and its store"; continue; }
    n=0
    for rec in "$R"/first-light/recordings/*.txt; do
        w=$(basename "$rec" .txt) && w=${w#profile-} && w=${w%_batch*}_batch1-inf
        "$KACE" import-cupti --db "$R/import.db" --workload "$w" "$rec" >"$R/$w.out" 2>&1 ||
            { fail "import-cupti of the real recording $(basename "$rec"): $(cat "$R/$w.out")"; continue; }
        n=$((n + 1))
    done
    [ "$n" -ge 10 ] || fail "$fl: $n recordings imported, expected 10"
    for w in cuda-gemm2048_batch1-inf cuda-stream1024_batch1-inf cuda-latency4x64_batch1-inf; do
        q="SELECT p.metric || '=' || printf('%.6g', p.value) FROM profiles p JOIN workloads w ON w.id = p.workload_id
           WHERE w.name = '$w' AND p.metric IN ('Threads', 'Compute (SM) Throughput', 'DRAM Throughput',
           'Memory Throughput', 'Registers', 'Static Shared Memory') ORDER BY p.metric"
        want=$(sqlite3 "$R/st/kace.db" "$q" | tr '\n' ' ') got=$(sqlite3 "$R/import.db" "$q" | tr '\n' ' ')
        [ "$(grep -o '=' <<<"$want" | wc -l)" = 6 ] && [ "$got" = "$want" ] ||
            fail "$w: import-cupti of the real recording gives '$got', kace profile stored '$want'"
    done
    got=$(sqlite3 "$R/import.db" "SELECT p.metric || '=' || p.value FROM profiles p JOIN workloads w ON w.id = p.workload_id
          WHERE w.name = 'cuda-gemm2048_batch1-inf' AND p.metric IN ('Threads', 'Registers', 'Static Shared Memory')
          ORDER BY p.metric" | tr '\n' ' ')
    [ "$got" = "Registers=134217728.0 Static Shared Memory=33554432.0 Threads=4194304.0 " ] ||
        fail "the real gemm recording: '$got'"
done

# 6. kace demo on a dataset of profiles only (what a campaign's first visit brings back,
#     as data/h200's did): it fails and says why, rather than "cannot fit a model on 0 rows".
mkdir -p "$SCRATCH/profiles-only/profiles"
printf 'Type,Exclusive100\nw1_batch1-inf,10\nw2_batch1-inf,20\n' >"$SCRATCH/profiles-only/profiles/system.csv"
(cd "$SCRATCH" && "$KACE" demo --data "$SCRATCH/profiles-only" --out "$SCRATCH/demo-po" >/dev/null 2>"$SCRATCH/demo-po.err") &&
    fail "kace demo on profiles alone succeeded"
grep -q "profiles-only holds 0 measured pairs at 100/100 MPS; the model needs at least 2" "$SCRATCH/demo-po.err" ||
    fail "kace demo on profiles alone: $(cat "$SCRATCH/demo-po.err")"

# 7. docs/h100.md is what tools/gpu-report.py gives from data/h100 (when it exists, the
#    evaluation runs here); a stale block fails and says how to fix it.
SHARED=${2:-}
(cd "$ROOT" && python3 tools/gpu-report.py --kace "$KACE" --v100 "$SHARED/kace-v100" --work "$SCRATCH/report" \
    --check docs/h100.md) >"$SCRATCH/h100.out" 2>&1 || fail "docs/h100.md: $(cat "$SCRATCH/h100.out")"
sed 's/^<!-- END generated -->$/stale\n&/' "$ROOT/docs/h100.md" >"$SCRATCH/h100.md"
(cd "$ROOT" && python3 tools/gpu-report.py --kace "$KACE" --v100 "$SHARED/kace-v100" --check "$SCRATCH/h100.md") \
    >/dev/null 2>"$SCRATCH/h100.err" && fail "gpu-report.py --check passed a stale docs/h100.md"
grep -q "run: tools/gpu-report.py --update" "$SCRATCH/h100.err" || fail "gpu-report.py --check: $(cat "$SCRATCH/h100.err")"
# Each other dataset's page (docs/h200.md for data/h200) is what gpu-report.py gives from it.
for doc in "$ROOT"/docs/h[0-9]*.md; do
    n=$(basename "$doc" .md)
    [ "$n" = h100 ] && continue
    (cd "$ROOT" && python3 tools/gpu-report.py --kace "$KACE" --v100 "$SHARED/kace-v100" --data "data/$n" \
        --work "$SCRATCH/report-$n" --check "docs/$n.md") >"$SCRATCH/$n.out" 2>&1 ||
        fail "docs/$n.md: $(cat "$SCRATCH/$n.out")"
done

# 8. A dataset with MPS split grids and too few pairs (what an early visit brings back):
#    gpu-report.py scores its grids with the split model fitted on the V100's. Made from the
#    V100 data in the device's formats: the curve at the plan's 6 shares, 2 grids of 5 splits.
if [ -d "$SHARED/kace-v100" ]; then
    V=$SHARED/kace-v100 G=$SCRATCH/grids-only
    mkdir -p "$G/profiles" "$G/colocations"
    cp "$V/profiles/system.csv" "$G/profiles/" && cp -r "$V/profiles/kernel" "$G/profiles/"
    cut -d, -f1,2,4,6,8,10,11 "$V/profiles/exclusive_by_mps_pct.csv" >"$G/profiles/exclusive-by-mps.csv"
    # The 100/100 runs go to pairs.csv, as kace export --dataset writes them (the second pair's members swapped).
    python3 - "$V/colocations/raw/partitions_0617_train-inf.csv" "$G/colocations" <<'PYEOF' ||
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))[1:3]
header = ["workload1", "workload2", "w1throughput", "w2throughput", "w1mps_pct", "w2mps_pct"]
with open(sys.argv[2] + "/mps-splits.csv", "w", newline="") as f, \
        open(sys.argv[2] + "/pairs.csv", "w", newline="") as p:
    out, full = csv.writer(f), csv.writer(p)
    out.writerow(header)
    full.writerow(header)
    for i, r in enumerate(rows):
        for ls in (10, 30, 50, 70, 90):
            a, b = r[2 + ls // 10 - 1].strip("()").split(", ")
            if a != "None" and b != "None":
                out.writerow([r[0], r[1], a, b, ls, 100 - ls])
        a, b = r[11].strip("()").split(", ")
        full.writerow([r[0], r[1], a, b, 100, 100] if i == 0 else [r[1], r[0], b, a, 100, 100])
PYEOF
        fail "making the grids-only dataset"
    python3 "$ROOT/tools/gpu-report.py" --kace "$KACE" --data "$G" --v100 "$V" --work "$SCRATCH/grids-report" \
        >"$SCRATCH/grids.md" 2>"$SCRATCH/grids.err" || fail "gpu-report.py on grids only: $(cat "$SCRATCH/grids.err")"
    grep -q "^Too few pairs to evaluate yet" "$SCRATCH/grids.md" || fail "gpu-report.py on grids only: no too-few-pairs line"
    grep -q "^Measured value of the advised split / best measured split, mean over 2 grid(s):" "$SCRATCH/grids.md" ||
        fail "gpu-report.py on grids only: no split scores: $(grep -A3 'MPS thread splits' "$SCRATCH/grids.md")"
    # Scores in [0, 1]; 100/100 is scored too: the grids take that cell from pairs.csv.
    for policy in max-sum max-min; do
        grep -Eq "^\| $policy( \| (0\.[0-9]{3}|1\.000)){3} \|$" "$SCRATCH/grids.md" ||
            fail "gpu-report.py on grids only: no $policy scores in [0, 1]: $(grep "^| $policy" "$SCRATCH/grids.md")"
    done
    # kace predict --split-with: its own 2 grids cannot fit the model (the error says what would);
    # --split-train-db fits it on the V100's.
    GDB=$SCRATCH/grids-report/gpu.db VDB=$SCRATCH/grids-report/v100.db
    pair=$(sed -n 2p "$G/colocations/mps-splits.csv" | cut -d, -f1,2)
    "$KACE" predict --db "$GDB" --target "${pair%,*}" --split-with "${pair#*,}" >/dev/null 2>"$SCRATCH/split.err" &&
        fail "kace predict --split-with fitted a split model on 2 grids"
    grep -q -- "--split-train-db" "$SCRATCH/split.err" || fail "the too-few-grids error does not say what to do: $(cat "$SCRATCH/split.err")"
    "$KACE" predict --db "$GDB" --target "${pair%,*}" --split-with "${pair#*,}" --split-train-db "$VDB" \
        >"$SCRATCH/split.out" 2>&1 || fail "kace predict --split-train-db: $(cat "$SCRATCH/split.out")"
    grep -q "fitted on 560 measured grids of $VDB" "$SCRATCH/split.out" || fail "kace predict --split-train-db: $(head -3 "$SCRATCH/split.out")"
    [ "$(grep -c '^ \* ' "$SCRATCH/split.out")" = 1 ] || fail "kace predict --split-train-db: not exactly one split marked"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "cli_device_tools: all cases passed"
