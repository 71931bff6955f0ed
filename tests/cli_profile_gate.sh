#!/usr/bin/env bash
# kace profile starts the counters run's process before the clean run, held
# at its CUDA start by the injection library's gate (KACE_CUPTI_GATE), so that
# it imports while the clean run measures, and opens the gate when its turn
# comes. Checked by the order of the stand-in's own events (KACE_FAKE_EVENTS:
# start-up done, cuInit returned, each step), never by time: the counters
# process finished its start-up before the clean run's last step, and its
# CUDA start came only after it.
#
#   bash cli_profile_gate.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_profile_gate.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
BUILD=$(cd "$(dirname "$KACE")" && pwd)
FAKE_DIR=$BUILD/tests/fake_cuda
APP=$FAKE_DIR/kace-fake-cuda-app
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh" # fail, failures, finish
if [ ! -x "$APP" ] || [ ! -e "$BUILD/libkace_cupti.so" ]; then
    echo "skipped: libkace_cupti.so and the fake CUDA stack are built only where CUPTI is installed"
    exit 77
fi
need sqlite3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/tmp" || exit 1
DB=$SCRATCH/store.db
export TMPDIR=$SCRATCH/tmp
export KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_full.so KACE_CUPTI_LIBRARY=$BUILD/libkace_cupti.so
export LD_LIBRARY_PATH=$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} # the fake libcuda.so.1, libcupti.so.13
export KACE_FAKE_KERNELS=20 KACE_FAKE_REPLAY_S=0.01 KACE_FAKE_START_S=0.3 KACE_FAKE_EVENTS=$SCRATCH/events
unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT KACE_CUPTI_GATE

"$KACE" profile --db "$DB" --warmup 0.3 --window 0.8 --counters-warmup 0.3 --counters-window 0.6 --timeout 60 \
    --name gate_batch1-train -- "$APP" gemm >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "kace profile: exit $?: $(tail -5 "$SCRATCH/err")"
value=$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id = p.workload_id
                       WHERE w.name = 'gate_batch1-train' AND p.metric = 'exclusive_throughput' AND p.value > 0")
check_eq "stored exclusive throughput" 1 "$value"

# line NUMBER of PID's EVENT in the events file (0: none)
at() { awk -v p="$1" -v e="$2" '$1 == p && $2 == e && !n { n = NR } END { print n + 0 }' "$SCRATCH/events"; }
pids=$(awk '$2 == "started-up" { print $1 }' "$SCRATCH/events")
check_eq "processes started" 2 "$(echo "$pids" | grep -c .)"
# The clean run's process is the one whose CUDA start came first.
clean=$(awk '$2 == "cuda" { print $1; exit }' "$SCRATCH/events")
counters=$(echo "$pids" | grep -vx "$clean" | head -1)
[ -n "$clean" ] && [ -n "$counters" ] || fail "no clean and counters process in $(cat "$SCRATCH/events")"
c_exit=$(awk -v p="$clean" '$1 == p && $2 == "step" { n = NR } END { print n + 0 }' "$SCRATCH/events")
k_up=$(at "$counters" started-up) k_cuda=$(at "$counters" cuda)
[ "$c_exit" -gt 0 ] && [ "$k_up" -gt 0 ] && [ "$k_cuda" -gt 0 ] ||
    fail "missing events: clean's last step $c_exit, counters start-up $k_up, cuda $k_cuda: $(cat "$SCRATCH/events")"
[ "$k_up" -lt "$c_exit" ] ||
    fail "the counters process finished its start-up only after the clean run ended: $(cat "$SCRATCH/events")"
[ "$k_cuda" -gt "$c_exit" ] ||
    fail "the counters process started CUDA before the clean run ended (its gate): $(cat "$SCRATCH/events")"
# Its gate was waited at, and nothing of it is left behind.
[ -z "$(ls "$TMPDIR" | grep '^kace-gate-')" ] || fail "gates left in $TMPDIR: $(ls "$TMPDIR")"
for p in $pids; do
    kill -0 "$p" 2>/dev/null && fail "process $p is still running"
done
finish cli_profile_gate
