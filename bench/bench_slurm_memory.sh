#!/usr/bin/env bash
# slurmctld's resident memory with job_submit/kace on a large store: a
# synthetic store of N workloads (bench/gen_scale.sh, 2N colocations), the
# V100 reference data's model, a local cluster (tests/slurm_cluster.sh).
# For each plugin folder given (default: this build's slurm-plugins), prints
# VmRSS and VmHWM of slurmctld without kace.conf, once the placer is ready,
# and after jobs of one workload were decided. Needs root and the Slurm
# packages.
# usage: bench/bench_slurm_memory.sh KACE_BIN N_WORKLOADS [PLUGIN_DIR...]
#   KACE_BENCH_DIR: where the store is made and kept (default a temp folder)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kace=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
n=$2
shift 2
[ $# -gt 0 ] || set -- "$(dirname "$kace")/slurm-plugins"
source "$here/../tests/slurm_cluster.sh"
if [ "$(id -u)" -ne 0 ] || slurm_cluster_missing >/dev/null; then
    echo "bench_slurm_memory: skipped (needs root and the Slurm packages)"
    exit 0
fi
work=${KACE_BENCH_DIR:-$(mktemp -d /tmp/kace-bench-slurm-mem.XXXXXX)}
mkdir -p "$work"
cluster=""
trap '[ -n "$cluster" ] && { scancel --quiet --user=root 2>/dev/null; slurm_cluster_stop; rm -rf "$cluster"; }' EXIT
if [ ! -s "$work/model.txt" ]; then
    "$kace" import --db "$work/v100.db" --quiet "$here/../../shared/data/kace-v100" &&
        "$kace" train --db "$work/v100.db" --out "$work/model.txt" >/dev/null || exit 1
fi
if [ ! -s "$work/store-$n.db" ]; then
    start=$SECONDS
    bash "$here/gen_scale.sh" "$work/gen-$n" "$n" $((2 * n)) && "$kace" import --db "$work/store-$n.db" --quiet "$work/gen-$n" ||
        exit 1
    rm -rf "$work/gen-$n"
    echo "store of $n workloads made in $((SECONDS - start)) s: $(du -m "$work/store-$n.db" | cut -f1) MB"
fi
workload=syn0_batch2-train
for plugins in "$@"; do
    cluster=$(mktemp -d /tmp/kace-slurm-mem.XXXXXX)
    slurm_cluster_start "$cluster/c" "$plugins" >/dev/null || { echo "cluster did not start"; exit 1; }
    pid=$(cat "$cluster/c/slurmctld.pid")
    log=$cluster/c/log/slurmctld.log
    mem() { awk '/^VmRSS|^VmHWM/ { printf "%s %6.1f MB  ", $1, $2 / 1024 }' "/proc/$pid/status"; }
    echo "== $plugins/job_submit_kace.so, store of $n workloads"
    echo "slurmctld without kace.conf:  $(mem)"
    printf "store = %s\nmodel_file = %s\nrefresh_seconds = 30\n" "$work/store-$n.db" "$work/model.txt" >"$cluster/c/kace.conf"
    slurm_wait 1200 grep -q "placer ready" "$log" || { echo "placer not ready"; grep kace "$log" | tail -3; exit 1; }
    echo "slurmctld, placer ready:      $(mem) ($(grep -o 'placer ready: [0-9]* workloads' "$log" | tail -1))"
    for _ in 1 2 3; do
        m=$(wc -l <"$log")
        sbatch --test-only --kace-workload="$workload" --wrap true >/dev/null 2>&1
        slurm_wait 600 slurm_decided_after "$log" "$m" "$workload" || { echo "no decision"; exit 1; }
        line=$(slurm_decision_after "$log" "$m" "$workload")
        [[ "$line" == *"-> node"* ]] && break
        slurm_wait 600 slurm_log_after_has "$log" "$m" "placer re" || { echo "no reload"; exit 1; }
    done
    echo "slurmctld, after $workload: $(mem) (${line#*kace: })" | cut -c1-160
    scancel --quiet --user=root 2>/dev/null
    slurm_cluster_stop
    rm -rf "$cluster"
    cluster=""
done
