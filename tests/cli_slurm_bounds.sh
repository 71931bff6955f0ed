#!/usr/bin/env bash
# job_submit/kace within bounds, in a real local Slurm (tests/slurm_cluster.sh)
# whose node n2 has two GPUs, each with 4 shards of a type of its own:
#  - one placement per GPU: two jobs on n2 go to its two GPUs, each decision
#    names its GPU, Slurm gives each job that GPU (its gres detail), and
#    `kace slurm status` shows the two GPUs apart; with gres/mps (which
#    Slurm 22.05 runs on one GPU of a node at a time) a second job goes
#    beside the first and runs;
#  - memory that follows the jobs, not the store: with load_all_max = 0
#    (any store is "big") the placer loads only the workloads jobs name (0
#    at start), the first job of a workload makes it load that one, and a
#    workload the store lacks is named as such;
#  - a refresher that never blocks on a file: kace.conf, then the model
#    file, replaced by a FIFO nobody writes, is refused with a log line
#    naming it, the placer keeps placing on its previous state, and comes
#    back when the file does.
#
# usage: cli_slurm_bounds.sh KACE_BINARY SHARED_DATA SCRATCH_DIR
# Exits 77 (skipped) without root, the Slurm packages or the built plugins.
set -uo pipefail
KACE=$1
DATA=$2/kace-v100
SCRATCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PLUGINS=$(cd "$(dirname "$KACE")" && pwd)/slurm-plugins
source "$HERE/slurm_cluster.sh"
source "$HERE/lib_test.sh"
slurm_test_require "$PLUGINS/job_submit_kace.so" "$PLUGINS/spank_kace.so"

mkdir -p "$SCRATCH"
C=$(mktemp -d /tmp/kace-slurm.XXXXXX)
trap 'slurm_test_cleanup "$C" "$C/cluster/log" "$C/jobs"' EXIT
trap 'exit 1' INT TERM

slurm_test_store "$KACE" "$DATA" "$C/kace.db" "$C/model.txt"
export KACE_TEST_N2_GPUS=2 KACE_TEST_N2_SHARE=shard
slurm_cluster_start "$C/cluster" "$PLUGINS" || { echo "FAIL: the Slurm cluster did not start"; tail -n 30 "$C"/cluster/log/*.log; exit 1; }
LOG=$C/cluster/log/slurmctld.log
CONF=$C/cluster/kace.conf
cat >"$CONF" <<CONF
store = $C/kace.db
model_file = $C/model.txt
gres = shard
refresh_seconds = 1
load_all_max = 0
CONF
mkdir -p "$C/jobs"
log_lines() { wc -l <"$LOG"; }
after_has() { slurm_log_after_has "$LOG" "$@"; }
wait_after() { slurm_wait "${3:-30}" after_has "$1" "$2"; }
job_running() { [ "$(squeue -h -j "$1" -o '%T')" == RUNNING ]; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }

# --- the placer holds only the workloads jobs name --------------------------
wait_after 0 "placer ready: 0 workloads loaded (those jobs name), 3 shared GPUs (gres/shard)" 60 ||
    fail "the placer did not start with no workload loaded and 3 shared GPUs (n2's two, n3): $(grep 'placer ready' "$LOG")"
T=bert-base-cased_batch8-train
m=$(log_lines)
sbatch --test-only --kace-workload="$T" --wrap true >/dev/null 2>&1
wait_after "$m" "job of workload $T left as submitted: workload '$T' not loaded yet" ||
    fail "the first job of $T did not ask for it to be loaded"
wait_after "$m" "placer reloaded: 1 workloads loaded" || fail "the placer did not load $T"
m=$(log_lines)
sbatch --test-only --kace-workload=no-such-workload --wrap true >/dev/null 2>&1
wait_after "$m" "workload 'no-such-workload' asked for by a job is not in the store" ||
    fail "an unknown workload was not named after the load"
m=$(log_lines)
sbatch --test-only --kace-workload=no-such-workload --wrap true >/dev/null 2>&1
wait_after "$m" "job of workload no-such-workload left as submitted: unknown workload 'no-such-workload'" ||
    fail "a second job of an unknown workload was not told so"

# --- one placement per GPU on two-GPU n2 --------------------------------------
# Three jobs of workloads that each take 1 or 2 of a GPU's 4 shards on the
# idle cluster, so that a third job still fits beside one of the others.
share_on_idle() { field share "$("$KACE" slurm place --config "$CONF" --workload "$1")"; }
mapfile -t all < <("$KACE" predict --db "$C/kace.db" --model-file "$C/model.txt" --target "$T" | awk 'NR > 2 { print $2 }')
W=()
for w in "$T" "${all[@]}"; do
    s=$(share_on_idle "$w")
    [ -n "$s" ] && [ "$s" -le 50 ] && [ "$s" -ge 25 ] && [[ " ${W[*]} " != *" $w "* ]] && W+=("$w")
    [ "${#W[@]}" -ge 3 ] && break
done
[ "${#W[@]}" -ge 1 ] || { echo "FAIL: no workload with a share of 25..50%"; exit 1; }
while [ "${#W[@]}" -lt 3 ]; do W+=("${W[0]}"); done # a workload may come twice
echo "workloads: ${W[*]}"
slurm_test_warm "$LOG" $(printf "%s\n" "${W[@]}" | sort -u) || fail "the placer did not load ${W[*]}"
# A job that runs until the test releases it.
cat >"$C/job.sh" <<EOF
#!/bin/bash
while [ ! -e "$C/release" ]; do sleep 0.2; done
EOF
chmod +x "$C/job.sh"
# Submits workload $1 to partition second (n2 only); waits until it runs.
# Prints "JOB GPU-kace-chose GPU-Slurm-gave".
submit_n2() {
    local m job line chose gave
    m=$(log_lines)
    job=$(sbatch --parsable -p second --kace-workload="$1" -o /dev/null "$C/job.sh")
    slurm_wait 60 job_running "$job" || { echo "job $job of $1 did not start" >&2; return 1; }
    line=$(slurm_decision_after "$LOG" "$m" "$1")
    echo "decision: ${line#*kace: }" >&2
    # The next decision must count this job: the placer saw it.
    wait_after "$m" "confirmed: job $job" || echo "job $job: its placement was never confirmed" >&2
    chose=$(sed -n 's/.*-> node n2 GPU \([0-9]*\) (.*/\1/p' <<<"$line")
    gave=$(scontrol show job -d "$job" | grep -o 'GRES=[^ ]*(IDX:[0-9]*' | sed 's/.*IDX://' | head -1)
    echo "$job ${chose:-none} ${gave:-none}"
}
status_has() { "$KACE" slurm status --config "$CONF" --no-store 2>/dev/null | grep -qE "$1"; }
read -r j1 c1 g1 < <(submit_n2 "${W[0]}")
check_eq "first job: kace chose n2's GPU 0 (both idle, the first wins)" 0 "$c1"
check_eq "first job: Slurm gave it the GPU kace chose" "$c1" "$g1"
slurm_wait 30 status_has '^n2/gpu0 +up +1 ' || fail "kace slurm status never showed the first job on n2/gpu0"
read -r j2 c2 g2 < <(submit_n2 "${W[1]}")
check_eq "second job: kace chose n2's other, idle GPU" 1 "$c2"
check_eq "second job: Slurm gave it the GPU kace chose" "$c2" "$g2"
"$KACE" slurm status --config "$CONF" --no-store >"$C/jobs/status.txt" 2>&1
cat "$C/jobs/status.txt"
grep -qE "^n2/gpu0 +up +1 " "$C/jobs/status.txt" || fail "status: n2/gpu0 should hold one job"
grep -qE "^n2/gpu1 +up +1 " "$C/jobs/status.txt" || fail "status: n2/gpu1 should hold one job"
# The third goes beside one of them: wherever kace says, Slurm agrees.
read -r j3 c3 g3 < <(submit_n2 "${W[2]}")
[ "$c3" = 0 ] || [ "$c3" = 1 ] || fail "third job: the decision names no GPU of n2 ($c3)"
check_eq "third job: Slurm gave it the GPU kace chose" "$c3" "$g3"
touch "$C/release"
slurm_wait 60 slurm_nodes_idle || fail "jobs did not end"

# --- a FIFO in place of kace.conf, then of the model file ----------------------
refuse() { # FILE WHAT
    local m
    m=$(log_lines)
    mv "$1" "$1.real"
    mkfifo "$1"
    wait_after "$m" "$2 $1 is a FIFO, not a regular file: refused (kace reads only regular files); keeping the placer's previous state" ||
        fail "$2 as a FIFO: no log line refusing it"
    # Decisions go on with what the placer read before.
    m=$(log_lines)
    sbatch --test-only -p second --kace-workload="$T" --wrap true >/dev/null 2>&1
    wait_after "$m" "kace: $T -> node n2" || fail "$2 as a FIFO: the placer stopped placing"
    grep -q UP < <(scontrol ping) || fail "$2 as a FIFO: slurmctld does not answer"
    m=$(log_lines)
    rm "$1"
    mv "$1.real" "$1"
    wait_after "$m" "placer ready" || fail "$2 back: the placer did not reload it"
}
refuse "$CONF" configuration
refuse "$C/model.txt" "model file"
grep -q UP < <(scontrol ping) || fail "slurmctld is down"

# --- gres/mps on two-GPU n2: one shared GPU ----------------------------------
# Slurm 22.05 runs every MPS job of a node on one GPU at a time (a job
# asking for MPS on the other GPU waits). kace must follow: the second job
# goes beside the first, not to the idle GPU, and runs.
slurm_test_stop
export KACE_TEST_N2_SHARE=mps
slurm_cluster_start "$C/cluster" "$PLUGINS" || { echo "FAIL: the mps cluster did not start"; exit 1; }
cat >"$CONF" <<CONF
store = $C/kace.db
model_file = $C/model.txt
gres = mps
refresh_seconds = 1
load_all_max = 0
CONF
wait_after 0 "placer ready: 0 workloads loaded (those jobs name), 3 shared GPUs (gres/mps)" 60 ||
    fail "mps: the placer did not see n1 and n2's two GPUs"
rm -f "$C/release"
slurm_test_warm "$LOG" $(printf "%s\n" "${W[0]}" "${W[1]}" | sort -u) || fail "mps: the placer did not load ${W[*]}"
read -r j1 c1 g1 < <(submit_n2 "${W[0]}")
check_eq "mps, first job: n2's GPU 0" 0 "$c1"
check_eq "mps, first job: Slurm gave it the GPU kace chose" "$c1" "$g1"
read -r j2 c2 g2 < <(submit_n2 "${W[1]}")
check_eq "mps, second job: beside the first (the node's MPS GPU), not on the idle GPU" "$c1" "$c2"
check_eq "mps, second job: Slurm gave it the GPU kace chose" "$c2" "$g2"
touch "$C/release"
slurm_wait 60 slurm_nodes_idle || fail "mps: jobs did not end"
grep "kace" "$LOG" | tail -12
slurm_test_finish
echo "all bounds checks passed"
