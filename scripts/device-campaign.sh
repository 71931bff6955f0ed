#!/usr/bin/env bash
# The H100/H200 campaign that produces data/h100/: on a machine with an NVIDIA
# GPU, builds kace and the example workloads, registers and profiles them,
# measures the plan (>= 30 pairs, >= 10 triples, repeated pairs for the
# run-to-run spread, an MPS split grid, a few time-sliced pairs to compare),
# and exports CSV files kace import reads, plus a README.
#
#   scripts/device-campaign.sh [--out DIR] [--minutes M] [--export-only]
#
#   --out DIR       where the store (kace-h100.db), CSVs and README go (default data/h100)
#   --minutes M     stop the measuring after M minutes (SIGTERM: the current run is
#                   dropped, finished runs are kept); run the script again in a later
#                   session with the same store to continue (default 20)
#   --export-only   only write the CSVs and README from the store in DIR (works without a GPU)
#
# Device sessions are short (30 min): the store in DIR is the campaign's state.
# Bring DIR back from each session and carry it into the next one; the plan is
# deterministic, so the same runs are skipped and the rest measured.
# kace starts and quits its own MPS daemon (kace campaign); it never changes the
# GPU's compute mode, clocks or MIG layout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/data/h100
minutes=20
export_only=0
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --export-only) export_only=1; shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--out DIR] [--minutes M] [--export-only]" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
db=$out/kace-h100.db
export KACE_DB=$db
build=$root/build-device
kace=$build/kace
sql() { sqlite3 -cmd ".timeout 10000" "$db" "$@"; }

# ---- export: CSV files in the layouts `kace import` recognises ----------------
export_data() {
    # Profiles: the kernel and system layouts of the reference V100 data.
    sql -header -csv "SELECT
        max(CASE WHEN metric='Threads' THEN value END) AS \"Threads\",
        max(CASE WHEN metric='Compute (SM) Throughput' THEN value END) AS \"Compute (SM) Throughput\",
        max(CASE WHEN metric='DRAM Throughput' THEN value END) AS \"DRAM Throughput\",
        max(CASE WHEN metric='Memory Throughput' THEN value END) AS \"Memory Throughput\",
        max(CASE WHEN metric='Registers' THEN value END) AS \"Registers\",
        max(CASE WHEN metric='Static Shared Memory' THEN value END) AS \"Static Shared Memory\",
        w.name AS \"Type\"
        FROM profiles p JOIN workloads w ON w.id=p.workload_id GROUP BY w.id ORDER BY w.name" >"$out/kernel.csv"
    sql -header -csv "SELECT w.name AS \"Type\",
        max(CASE WHEN metric='exclusive_throughput' THEN value END) AS \"Exclusive100\",
        max(CASE WHEN metric='sm%' THEN value END) AS \"sm%\",
        max(CASE WHEN metric='mem%' THEN value END) AS \"mem%\",
        max(CASE WHEN metric='memcap' THEN value END) AS \"memcap\"
        FROM profiles p JOIN workloads w ON w.id=p.workload_id GROUP BY w.id ORDER BY w.name" >"$out/system.csv"
    # Every measured run and member, each repetition, failures included.
    sql -header -csv "SELECT r.id AS run, r.set_name AS \"set\", r.mode, r.repetition, r.status AS run_status,
        r.measured_at, r.window_s, m.slot, w.name AS workload, m.mps_pct, m.throughput, m.throughput_cv,
        m.status, m.detail FROM runs r JOIN run_members m ON m.run_id=r.id JOIN workloads w ON w.id=m.workload_id
        WHERE r.mode IS NOT NULL ORDER BY r.id, m.slot" >"$out/runs.csv"
    # Colocations for training: the mean over ok repetitions, one file per k
    # and mode (100% each), and the MPS splits of pairs.
    local k name where
    for spec in "2|pairs|mode='mps' AND all100" "3|triples|mode='mps' AND all100" \
        "2|mps-splits|mode='mps' AND NOT all100" "2|timeslice-pairs|mode='timeslice'"; do
        IFS='|' read -r k name where <<<"$spec"
        local cols="" sel="" joins=""
        for i in $(seq 1 "$k"); do
            cols+="workload$i,"
            sel+="w$i.name AS workload$i,"
            joins+=" JOIN run_members m$i ON m$i.run_id=r.id AND m$i.slot=$((i - 1)) JOIN workloads w$i ON w$i.id=m$i.workload_id"
        done
        local thr="" pct=""
        for i in $(seq 1 "$k"); do
            thr+="avg(m$i.throughput) AS w${i}throughput,"
            pct+="m$i.mps_pct AS w${i}mps_pct,"
        done
        sql -header -csv "WITH runs2 AS (SELECT r.*, (SELECT min(mps_pct)=100 FROM run_members x WHERE x.run_id=r.id)
            AS all100 FROM runs r)
            SELECT $sel ${thr} ${pct} count(*) AS repetitions FROM runs2 r $joins
            WHERE r.status='ok' AND r.k=$k AND $where GROUP BY replace(r.run_key, '|#' || r.repetition, '') ORDER BY 1, 2" >"$out/$name.csv"
        # Nothing measured of that kind: no file.
        [ "$(wc -l <"$out/$name.csv")" -gt 1 ] || rm -f "$out/$name.csv"
    done
    # Run-to-run spread: per member of every colocation measured ok >= 2 times.
    sql -header -csv "SELECT replace(r.run_key, '|#' || r.repetition, '') AS colocation, w.name AS workload, count(*) AS repetitions,
        avg(m.throughput) AS mean, sqrt(max(avg(m.throughput*m.throughput) - avg(m.throughput)*avg(m.throughput), 0))
        AS sd, sqrt(max(avg(m.throughput*m.throughput) - avg(m.throughput)*avg(m.throughput), 0)) / avg(m.throughput)
        AS cv FROM runs r JOIN run_members m ON m.run_id=r.id JOIN workloads w ON w.id=m.workload_id
        WHERE r.status='ok' AND r.mode IS NOT NULL GROUP BY replace(r.run_key, '|#' || r.repetition, ''), m.slot
        HAVING count(*) >= 2 ORDER BY cv DESC" >"$out/spread.csv"
}

write_readme() {
    local gpu=${1:-unknown} driver=${2:-unknown} cuda=${3:-unknown}
    local n_pairs n_triples n_splits n_ts n_failed first last spread
    n_pairs=$(sql "SELECT count(DISTINCT replace(run_key, '|#' || repetition, '')) FROM runs r WHERE mode='mps' AND k=2
        AND status='ok' AND NOT EXISTS (SELECT 1 FROM run_members m WHERE m.run_id=r.id AND m.mps_pct != 100)")
    n_triples=$(sql "SELECT count(DISTINCT replace(run_key, '|#' || repetition, '')) FROM runs WHERE mode='mps' AND k=3 AND status='ok'")
    n_splits=$(sql "SELECT count(*) FROM runs r WHERE mode='mps' AND status='ok' AND EXISTS
        (SELECT 1 FROM run_members m WHERE m.run_id=r.id AND m.mps_pct != 100)")
    n_ts=$(sql "SELECT count(*) FROM runs WHERE mode='timeslice' AND status='ok'")
    n_failed=$(sql "SELECT count(*) FROM runs WHERE mode IS NOT NULL AND status != 'ok'")
    first=$(sql "SELECT min(measured_at) FROM runs WHERE mode IS NOT NULL")
    last=$(sql "SELECT max(measured_at) FROM runs WHERE mode IS NOT NULL")
    # Median and largest cv of spread.csv (last column), sorted.
    spread=$(tail -n +2 "$out/spread.csv" | awk -F, '{print $NF}' | sort -g |
        awk '{v[NR]=$1} END {if (NR == 0) print "no colocation measured twice yet";
             else printf "%d members of repeated colocations: median cv %.3f, max %.3f", NR, v[int((NR+1)/2)], v[NR]}')
    cat >"$out/README.md" <<EOF
# kace's own colocation measurements on $gpu

Measured by \`scripts/device-campaign.sh\` (kace profile, kace campaign) with the example
workloads of \`workloads/\` (CUDA C kernels; PyTorch models with random weights).

- GPU: $gpu; driver $driver; CUDA $cuda
- Measured: $first .. $last (UTC)
- Pairs (100%/100% MPS): $n_pairs distinct; triples: $n_triples; MPS split runs: $n_splits;
  time-sliced pairs: $n_ts; runs that failed (recorded, not used for training): $n_failed
- Run-to-run spread: $spread (\`spread.csv\`)
- Warm-up and window: see \`runs.csv\` (window_s); plan: \`plan.txt\`

Files: \`kernel.csv\`, \`system.csv\` (profiles), \`pairs.csv\`, \`triples.csv\`,
\`mps-splits.csv\`, \`timeslice-pairs.csv\` (means over ok repetitions), \`runs.csv\` (every
run and member, failures included), \`spread.csv\`, \`kace-h100.db\` (the store: the
campaign's state; carry it into the next session to continue).

Use: \`kace import data/h100/kernel.csv data/h100/system.csv data/h100/pairs.csv data/h100/triples.csv\`.
EOF
}

if [ $export_only = 1 ]; then
    [ -f "$db" ] || { echo "$0: no store at $db" >&2; exit 1; }
    export_data
    write_readme "$(sql "SELECT gpu FROM sources WHERE tool='kace-measure' AND gpu IS NOT NULL LIMIT 1")"
    echo "exported to $out"
    exit 0
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "$0: no NVIDIA GPU here (nvidia-smi missing or failing): this campaign needs a device machine." >&2
    exit 3
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
echo "GPU: $gpu, driver $driver, CUDA $cuda"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKACE_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

# ---- workloads -----------------------------------------------------------------
# Names follow the reference data: <model>_batch<B>-<train|inf>.
workloads=()
add() { "$kace" workload add "$1" -- "${@:2}" >/dev/null && workloads+=("$1"); }
if command -v nvcc >/dev/null 2>&1 && make -C "$root/workloads" >/dev/null; then
    kk=$root/workloads/build/kace_kernels
    add cuda-gemm_batch2048-inf "$kk" gemm 2048
    add cuda-stream_batch1024-inf "$kk" stream 1024
    add cuda-latency_batch4-inf "$kk" latency 4 64
else
    echo "warning: nvcc missing: no CUDA C workloads" >&2
fi
if python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
    t=$root/workloads/torch
    add bert-base-cased_batch8-train python3 "$t/bert.py" --mode train --batch 8
    add bert-base-cased_batch2-inf python3 "$t/bert.py" --mode inf --batch 2
    add albert-base-v2_batch8-train python3 "$t/albert.py" --mode train --batch 8
    add albert-base-v2_batch8-inf python3 "$t/albert.py" --mode inf --batch 8
    add vit-base-patch16-224_batch8-train python3 "$t/vit.py" --mode train --batch 8
    add vit-base-patch16-224_batch16-inf python3 "$t/vit.py" --mode inf --batch 16
    add wav2vec2-base-960h_batch2-inf python3 "$t/wav2vec2.py" --mode inf --batch 2
    add whisper-large-v2_batch2-inf python3 "$t/whisper.py" --mode inf --batch 2
    add whisper-large-v2_batch8-inf python3 "$t/whisper.py" --mode inf --batch 8
else
    echo "warning: no CUDA PyTorch + transformers: no PyTorch workloads" >&2
fi
[ ${#workloads[@]} -ge 6 ] || { echo "$0: only ${#workloads[@]} workloads: too few for the campaign" >&2; exit 1; }
deadline=$(($(date +%s) + minutes * 60))

# ---- profiles (once per workload; kace profile comes with the profiler) ---------
for w in "${workloads[@]}"; do
    [ "$(sql "SELECT count(*) FROM profiles p JOIN workloads x ON x.id=p.workload_id WHERE x.name='$w'
        AND metric='exclusive_throughput'")" = 0 ] || continue
    [ "$(date +%s)" -lt "$deadline" ] || break
    # shellcheck disable=SC2046
    "$kace" profile --name "$w" -- $(sql "SELECT group_concat(j.value, ' ') FROM workload_commands c
        JOIN workloads x ON x.id=c.workload_id, json_each(c.argv) j WHERE x.name='$w'") || echo "warning: profiling $w failed" >&2
done

# ---- the plan: deterministic, so every session continues the same one ---------
n=${#workloads[@]}
{
    echo "# written by scripts/device-campaign.sh"
    echo "workloads ${workloads[*]}"
    echo "occur $(((60 + n - 1) / n)) seed 1   # >= 30 pairs: every workload in >= 60/n of them"
    for i in $(seq 0 11); do # 12 triples spread over the set
        echo "run ${workloads[$((i % n))]} ${workloads[$(((i + 1 + i / n) % n))]} ${workloads[$(((i + 3 + 2 * (i / n)) % n))]}"
    done
    echo "splits 10 30 50 70 90 on ${workloads[0]} ${workloads[1]}"
    echo "splits 10 30 50 70 90 on ${workloads[3]} ${workloads[$((n - 1))]}"
    echo "repeat 3   # spread: 6 pairs measured 3 times, the repetitions apart in time"
    for i in 0 1 2 3 4 5; do
        echo "run ${workloads[$i]} ${workloads[$(((i + 2) % n))]}"
    done
    echo "repeat 1"
    echo "mode timeslice   # the same kind of pairs without MPS, to compare"
    for i in 0 1 2; do
        echo "run ${workloads[$i]} ${workloads[$(((i + 2) % n))]}"
    done
} >"$out/plan.txt"

left=$((deadline - $(date +%s)))
if [ $left -gt 60 ]; then
    # SIGTERM at the deadline: kace drops the current run, quits MPS, keeps the rest.
    timeout --signal=TERM "$left" "$kace" campaign "$out/plan.txt" --warmup 5 --window 10 --timeout 180 \
        --gpu "$gpu" --log "$out/workloads.log" || echo "campaign stopped (status $?): run the script again to continue"
fi
export_data
write_readme "$gpu" "$driver" "$cuda"
"$kace" campaign --dry-run "$out/plan.txt" | head -1
echo "data in $out"
