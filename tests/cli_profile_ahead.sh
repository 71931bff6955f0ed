#!/usr/bin/env bash
# kace campaign --device's profile step starts the next workloads ahead: while
# one is profiled, the next ones' processes import and build on the CPU, each
# held at its CUDA start (the injection library's gate) until its turn.
# Checked by the order of the fake CUDA program's own events (KACE_FAKE_EVENTS,
# tagged with the workload's name), never by time: each later workload's
# processes finished their start-up before the workload before it finished
# its counters run, and none started CUDA before that (the GPU alone).
#
#   bash cli_profile_ahead.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_profile_ahead.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh" # fail, failures, finish
source "$(dirname "$0")/lib_campaign.sh" # fake_cuda_standins
fake_cuda_standins # BUILD, APP, EV; the fake CUDA stack
for w in a b c d; do
    echo "w$w""_batch1-inf torch env KACE_FAKE_START_S=0.3 KACE_FAKE_EVENTS=$EV KACE_FAKE_EVENT_TAG=w$w $APP gemm"
done >"$SCRATCH/catalog.txt"
"$KACE" campaign --device --minutes 0.5 --catalog "$SCRATCH/catalog.txt" --profile-warmup 0.2 --profile-window 0.3 \
    --warmup 0.2 --window 0.3 --pool-members 4 --run-dir "$SCRATCH/run" >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "kace campaign: exit $?: $(tail -5 "$SCRATCH/err")"
grep -c '^profile .*: stored' "$SCRATCH/out" | grep -qx 4 || fail "not 4 profiles stored: $(grep '^profile' "$SCRATCH/out")"

# Each workload's profile processes: its first two that were no MPS clients (the probe's
# are; the time-sliced runs' come after the profiles).
pids_of() { awk -v t="$1" '$3 == t && $2 == "started-up" { up[$1] = NR } $2 == "mps" { mps[$1] = 1 }
                           END { for (p in up) if (!mps[p]) print up[p], p }' "$EV" | sort -n | cut -d' ' -f2 |
    head -2; }
last_step() { awk -v p="$1" '$1 == p && $2 == "step" { n = NR } END { print n + 0 }' "$EV"; }
first() { awk -v p="$1" -v e="$2" '$1 == p && $2 == e && !n { n = NR } END { print n + 0 }' "$EV"; }
order=$(grep '^profile .*: stored' "$SCRATCH/out" | sed -E 's/^profile ([^:]*):.*/\1/; s/_batch1-inf//')
prev=""
for w in $order; do
    pids=$(pids_of "$w")
    [ "$(echo "$pids" | grep -c .)" = 2 ] || { fail "$w: not two profile processes: $(grep " $w\$" "$EV" | head)"; continue; }
    if [ -n "$prev" ]; then
        end=0
        for p in $(pids_of "$prev"); do e=$(last_step "$p"); [ "$e" -gt "$end" ] && end=$e; done
        for p in $pids; do
            [ "$(first "$p" started-up)" -lt "$end" ] ||
                fail "$w: process $p finished its start-up only after $prev's profile ended"
            [ "$(first "$p" cuda)" -gt "$end" ] || fail "$w: process $p started CUDA while $prev was profiled"
        done
    fi
    prev=$w
done
[ -z "$(ls "$TMPDIR" | grep '^kace-gate-')" ] || fail "gates left in $TMPDIR: $(ls "$TMPDIR")"
finish cli_profile_ahead
