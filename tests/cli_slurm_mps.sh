#!/usr/bin/env bash
# MPS on the nodes: kace's Prolog, Epilog and TaskProlog (scripts/slurm/) in
# a real local Slurm (tests/slurm_cluster.sh), with the stand-in MPS control
# daemon (tests/helpers/mps_standin.c) in place of nvidia-cuda-mps-control.
# Checks that a job kace places with an MPS share runs under the node's
# daemon (it sees the pipe and log folders, the daemon answers it, and its
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is kace's share); that a second job on
# the node shares the same daemon, which the last job's Epilog stops; that
# a gres/shard job gets its percentage; that a job on a whole GPU gets no
# MPS; and that a daemon that will not start leaves jobs running without MPS.
#
# usage: cli_slurm_mps.sh KACE_BINARY SHARED_DATA SCRATCH_DIR
# Exits 77 (skipped) without root, the Slurm packages or the built plugins.
set -uo pipefail
KACE=$1
DATA=$2/kace-v100
SCRATCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$(dirname "$KACE")" && pwd)
PLUGINS=$BUILD/slurm-plugins
STANDIN=$BUILD/tests/kace-test-mps-control
SCRIPTS=$(cd "$HERE/../scripts/slurm" && pwd)
source "$HERE/slurm_cluster.sh"
source "$HERE/lib_test.sh"
slurm_test_require "$PLUGINS/job_submit_kace.so" "$STANDIN"

mkdir -p "$SCRATCH"
C=$(mktemp -d /tmp/kace-slurm.XXXXXX)
cleanup() {
    slurm_test_stop
    # Any stand-in daemon still up (a failed check) goes by its pipe.
    for p in "$C"/mps/*/pipe; do
        [ -p "$p/control" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$p timeout 5 "$STANDIN" >/dev/null 2>&1
    done
    slurm_test_keep "$C" "$C/cluster/log" "$C/jobs" "$C/mps"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

slurm_test_store "$KACE" "$DATA" "$C/kace.db" "$C/model.txt"

# Slurm runs Prolog/Epilog with a bare environment: small wrappers give the
# scripts the stand-in daemon, a root folder and the misbehaviour to play
# ($C/mode), as /etc/kace/mps.conf would on a site.
for s in prolog epilog taskprolog; do
    cat >"$C/$s" <<EOF
#!/bin/sh
export KACE_MPS_CONTROL=$STANDIN KACE_MPS_ROOT=$C/mps KACE_MPS_WAIT=5
export KACE_TEST_MPS_MODE=\$(cat $C/mode 2>/dev/null)
exec $SCRIPTS/kace-mps-$s
EOF
    chmod 755 "$C/$s"
done
export KACE_TEST_SLURM_CONF="Prolog=$C/prolog
Epilog=$C/epilog
TaskProlog=$C/taskprolog"
slurm_test_start "$C/cluster" "$PLUGINS" "$C/kace.db" "$C/model.txt"
mkdir -p "$C/jobs"

# What a task sees, then (when $1 names a file) waits for that file.
cat >"$C/job.sh" <<EOF
#!/bin/bash
server=\$(echo get_server_list | timeout 5 $STANDIN 2>/dev/null | head -1)
pipe=\${CUDA_MPS_PIPE_DIRECTORY:-none}
echo "node=\$SLURMD_NODENAME pct=\${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none} pipe=\$pipe log=\${CUDA_MPS_LOG_DIRECTORY:-none} control=\$([ -p "\$pipe/control" ] && echo fifo || echo none) server=\${server:-none}"
if [ -n "\${1:-}" ]; then for i in \$(seq 1 300); do [ -f "\$1" ] && break; sleep 0.1; done; fi
EOF
chmod +x "$C/job.sh"
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
job_running() { [ "$(squeue -h -j "$1" -o '%T')" == RUNNING ]; }
T=bert-base-cased_batch8-train

# --- a job kace places runs under the node's MPS daemon ------------------------
marker=$(wc -l <"$LOG")
ja=$(sbatch --parsable --kace-workload="$T" -o "$C/jobs/a.out" "$C/job.sh" "$C/release")
slurm_wait 30 job_running "$ja" || fail "job $ja did not start"
slurm_wait 10 test -s "$C/jobs/a.out" || fail "job $ja printed nothing"
out=$(head -1 "$C/jobs/a.out")
echo "kace's job: $out"
decision=$(tail -n +$((marker + 1)) "$LOG" | grep -m1 "kace: $T -> node")
node=$(sed -n 's/.*-> node \([a-z0-9]*\).*/\1/p' <<<"$decision")
share=$(sed -n 's/.*(share \([0-9]*\)%.*/\1/p' <<<"$decision")
check_eq "ran on kace's node" "$node" "$(field node "$out")"
check_eq "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is kace's share" "$share" "$(field pct "$out")"
check_eq "CUDA_MPS_PIPE_DIRECTORY" "$C/mps/$node/pipe" "$(field pipe "$out")"
check_eq "CUDA_MPS_LOG_DIRECTORY" "$C/mps/$node/log" "$(field log "$out")"
check_eq "the daemon's control pipe in the job's pipe folder" fifo "$(field control "$out")"
[ "$(field server "$out")" -gt 0 ] 2>/dev/null || fail "the daemon did not answer the job: server=$(field server "$out")"
check_eq "the job's record beside the daemon" "$share" "$(cat "$C/mps/$node/jobs/$ja" 2>/dev/null)"

# A second job on the same node: the same daemon (started once).
jb=$(sbatch --parsable -w "$node" --gres=mps:10 -o "$C/jobs/b.out" "$C/job.sh" "$C/release")
slurm_wait 30 job_running "$jb" || fail "job $jb did not start"
slurm_wait 10 test -s "$C/jobs/b.out" || fail "job $jb printed nothing"
out_b=$(head -1 "$C/jobs/b.out")
echo "second job: $out_b"
check_eq "second job: same daemon's server" "$(field server "$out")" "$(field server "$out_b")"
check_eq "second job: its own percentage (mps:10 of 100)" 10 "$(field pct "$out_b")"
check_eq "daemon started once" 1 "$(grep -c "started the MPS control daemon" "$C/mps/$node/log/kace-mps.log")"
touch "$C/release"
slurm_wait 60 slurm_nodes_idle || fail "jobs did not end"
slurm_wait 15 test ! -e "$C/mps/$node/jobs/$jb" || fail "job $jb's record stayed"
slurm_wait 15 grep -q "stopped the MPS control daemon" "$C/mps/$node/log/kace-mps.log" ||
    fail "the last job's Epilog did not stop the daemon"
grep -q "quit" "$C/mps/$node/log/control.log" || fail "the daemon never got quit"
if echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$C/mps/$node/pipe timeout 5 "$STANDIN" >/dev/null 2>&1; then
    fail "the daemon still answers after the last job"
fi
rm -f "$C/release"

# --- gres/shard: the percentage of the job's shards ----------------------------
out=$(timeout 60 srun -w n3 --gres=shard:2 "$C/job.sh" 2>"$C/jobs/shard.err" | head -1)
echo "shard job: $out"
check_eq "shard job: 2 of 4 shards" 50 "$(field pct "$out")"
check_eq "shard job: pipe folder" "$C/mps/n3/pipe" "$(field pipe "$out")"
[ "$(field server "$out")" -gt 0 ] 2>/dev/null || fail "shard job: no daemon answered"

# --- a job on a whole GPU: no MPS ----------------------------------------------
out=$(timeout 60 srun --gpus=1 -w n1 "$C/job.sh" 2>"$C/jobs/gpu.err" | head -1)
echo "whole-GPU job: $out"
check_eq "whole-GPU job: no MPS pipe" none "$(field pipe "$out")"
check_eq "whole-GPU job: no percentage" none "$(field pct "$out")"

# --- the daemon will not start: the job runs without MPS, the log says why -----
echo refuse >"$C/mode"
out=$(timeout 60 srun -w n2 --gres=mps:30 "$C/job.sh" 2>"$C/jobs/refuse.err" | head -1)
echo "job with a refusing daemon: $out"
check_eq "refusing daemon: the job ran" n2 "$(field node "$out")"
check_eq "refusing daemon: no MPS pipe" none "$(field pipe "$out")"
grep -q "failed: job runs without MPS" "$C/mps/n2/log/kace-mps.log" || fail "no log line for the refusing daemon"
rm -f "$C/mode"

grep -q UP < <(scontrol ping) || fail "slurmctld is down"
slurm_wait 30 slurm_nodes_idle ||
    fail "a node is not idle (a failed Prolog/Epilog drains it): $(sinfo -h -N -o '%N %T' | tr '\n' ' ')"
slurm_test_finish
echo "all MPS checks passed"
