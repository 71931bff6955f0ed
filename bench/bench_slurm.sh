#!/usr/bin/env bash
# job_submit/kace's decision against Slurm's own submission, in the same run:
#  - kace: p50/p99 of one placement decision with 1,000 running jobs on 100
#    nodes x 4 GPUs (build/kace-bench-place, the plugin's work under its lock);
#  - Slurm: p50/p99 wall time of `sbatch --test-only` and of a real `sbatch`
#    (with --kace-workload, so through job_submit/kace) on a real local
#    cluster (tests/slurm_cluster.sh: munged, slurmctld, 3 slurmd).
# Prints the ratio Slurm submission / kace decision. Needs root and the Slurm
# packages; says so and exits 0 without them.
# usage: bench/bench_slurm.sh [KACE_BIN] [DATA_DIR] [SUBMISSIONS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kace=$(cd "$(dirname "${1:-$here/../build/kace}")" && pwd)/$(basename "${1:-kace}")
data=${2:-$here/../../shared/data/kace-v100}
n=${3:-100}
plugins=$(dirname "$kace")/slurm-plugins
source "$here/../tests/slurm_cluster.sh"
if [ "$(id -u)" -ne 0 ] || slurm_cluster_missing >/dev/null || [ ! -f "$plugins/job_submit_kace.so" ]; then
    echo "bench_slurm: skipped (needs root, the Slurm packages and the plugins in $plugins)"
    exit 0
fi
work=$(mktemp -d /tmp/kace-bench-slurm.XXXXXX)
trap 'scancel --quiet --user=root 2>/dev/null; slurm_cluster_stop; rm -rf "$work"' EXIT
"$kace" import --db "$work/kace.db" --quiet "$data" && "$kace" train --db "$work/kace.db" --out "$work/model.txt" >/dev/null || exit 1

echo "== kace decision (kace-bench-place)"
decision=$("$(dirname "$kace")/kace-bench-place" "$work/kace.db" "$work/model.txt") || exit 1
echo "$decision"
d50=$(sed -n 's/.*decision_p50_us=\([0-9.]*\).*/\1/p' <<<"$decision")
d99=$(sed -n 's/.*decision_p99_us=\([0-9.]*\).*/\1/p' <<<"$decision")

echo "== Slurm submission ($n each) on a local cluster"
slurm_cluster_start "$work/cluster" "$plugins" || { echo "cluster did not start"; exit 1; }
printf "store = %s\nmodel_file = %s\nrefresh_seconds = 1\n" "$work/kace.db" "$work/model.txt" >"$work/cluster/kace.conf"
slurm_wait 30 grep -q "placer ready" "$work/cluster/log/slurmctld.log" || { echo "placer not ready"; exit 1; }
# Each sample: microseconds of one client command.
time_us() {
    local a b
    a=$(date +%s%N)
    "$@" >/dev/null 2>&1
    b=$(date +%s%N)
    echo $(((b - a) / 1000))
}
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100); if (i<1) i=1; if (i>NR) i=NR; print a[i]}'; }
for ((i = 0; i < n; i++)); do time_us sbatch --test-only --wrap true; done >"$work/testonly.us"
for ((i = 0; i < n; i++)); do
    time_us sbatch --kace-workload=bert-base-cased_batch8-train -o /dev/null --wrap true
done >"$work/submit.us"
placed=$(grep -c "bert-base-cased_batch8-train -> node" "$work/cluster/log/slurmctld.log")
t50=$(pct 50 <"$work/testonly.us") t99=$(pct 99 <"$work/testonly.us")
s50=$(pct 50 <"$work/submit.us") s99=$(pct 99 <"$work/submit.us")
echo "sbatch --test-only: p50 ${t50} us, p99 ${t99} us"
echo "sbatch (through job_submit/kace, $placed of $n placed by kace): p50 ${s50} us, p99 ${s99} us"
echo "kace decision: p50 ${d50} us, p99 ${d99} us"
echo "ratio sbatch --test-only / kace decision: p50 $(echo "$t50 / $d50" | bc -l | xargs printf '%.1f')x, p99 $(echo "$t99 / $d99" | bc -l | xargs printf '%.1f')x"
echo "ratio sbatch / kace decision: p50 $(echo "$s50 / $d50" | bc -l | xargs printf '%.1f')x, p99 $(echo "$s99 / $d99" | bc -l | xargs printf '%.1f')x"
