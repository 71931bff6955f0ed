#!/usr/bin/env bash
# kace campaign --device starts a cold run's members ahead: while one cold
# run (time-sliced, or a cold repeat) measures, the next ones' processes
# import and build on the CPU, each held at its CUDA start (the injection
# library's gate), and their gate opens only when their run's turn has come.
# The first pool's members start ahead during the time-sliced runs, held too:
# the MPS instance does not count them, so keeping MPS down for a time-sliced
# run neither kills nor waits for them. Checked by the order of the fake CUDA
# program's own events (KACE_FAKE_EVENTS), never by time:
#   - every time-sliced pair but the first, and every cold repeat, had both
#     members started up while the run before it still ran (before that
#     run's last exit) and reach their CUDA start only after it;
#   - some pool member started up during the last time-sliced run and reached
#     its CUDA start, as an MPS client, after that run's members exited;
#   - every process started once, and each reached its CUDA start (none was
#     killed at the gate nor started ahead for nothing); no gate is left.
#
#   bash cli_campaign_cold_ahead.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_campaign_cold_ahead.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh" # fail, failures, finish
source "$(dirname "$0")/lib_campaign.sh" # fake_cuda_standins
fake_cuda_standins # BUILD, APP, EV; the fake CUDA stack
for w in a b c d; do
    echo "w$w""_batch1-inf torch env KACE_FAKE_START_S=0.3 KACE_FAKE_EVENTS=$EV KACE_FAKE_EVENT_TAG=w$w $APP gemm"
done >"$SCRATCH/catalog.txt"
"$KACE" campaign --device --minutes 2 --catalog "$SCRATCH/catalog.txt" --profile-warmup 0.2 --profile-window 0.3 \
    --warmup 0.2 --window 0.3 --pool-members 4 --run-dir "$SCRATCH/run" >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "kace campaign: exit $?: $(tail -5 "$SCRATCH/err")"
grep -q '^step timeslice: 3 runs planned, 0 stored before, 3 measured' "$SCRATCH/out" &&
    grep -q '^step cold-repeats: 3 runs planned, 0 stored before, 3 measured' "$SCRATCH/out" ||
    fail "not every cold run measured: $(grep '^step' "$SCRATCH/out")"
grep -q '^campaign: .* 0 failed' "$SCRATCH/out" || fail "failed runs: $(grep '^campaign:' "$SCRATCH/out")"

[ -s "$EV" ] || fail "no events"
awk '{ print $1, $2, NR }' "$EV" >"$SCRATCH/ev"
# A line per process: PID UP CUDA EXIT MPS (event line numbers, 0: none; MPS 1: a client), by CUDA start.
awk '{ if ($2 == "started-up") up[$1] = $3; if ($2 == "cuda") cu[$1] = $3; if ($2 == "mps") m[$1] = 1;
       if ($2 == "exit") ex[$1] = $3 }
     END { for (p in up) print p, up[p], cu[p] + 0, ex[p] + 0, m[p] + 0 }' "$SCRATCH/ev" | sort -k3n >"$SCRATCH/procs"

# The cold runs' pairs: time-sliced ones are the processes without MPS that
# ran together (a profile runs alone); cold repeats are the last 3 pairs of
# MPS clients (their processes start after the pool's).
awk '$5 == 0 && $3 > 0' "$SCRATCH/procs" |
    awk '{ c[NR] = $3; e[NR] = $4; line[NR] = $0 }
         END { for (i = 1; i < NR; i++) if (c[i + 1] < e[i]) { print line[i], line[i + 1]; i++ } }' >"$SCRATCH/ts"
[ "$(wc -l <"$SCRATCH/ts")" = 3 ] || fail "time-sliced pairs: $(cat "$SCRATCH/ts")"
awk '$5 == 1' "$SCRATCH/procs" | tail -n 6 | paste -d' ' - - >"$SCRATCH/cold"
[ "$(wc -l <"$SCRATCH/cold")" = 3 ] || fail "cold repeats: $(cat "$SCRATCH/cold")"

# Started ahead: both members up before the run before ended (the previous
# pair's last exit; for a first row, the last exit before the pair's first
# CUDA start), and neither at its CUDA start until then.
ahead() { # FILE FIRST_ROW: the rows from FIRST_ROW on that were not started ahead
    awk -v first="$2" 'NR == FNR { ex[NR] = $4; n = NR; next }
        { start = $3 < $8 ? $3 : $8; end = 0
          if (FNR > 1) end = prev
          else for (i = 1; i <= n; i++) if (ex[i] < start && ex[i] > end) end = ex[i]
          prev = $4 > $9 ? $4 : $9 }
        FNR >= first && !($2 < end && $7 < end && start > end) {
            print "not ahead:", $0, "(the run before ended at line", end ")" }' "$SCRATCH/procs" "$1"
}
late=$(ahead "$SCRATCH/ts" 2)
[ -z "$late" ] || fail "time-sliced: $late"
late=$(ahead "$SCRATCH/cold" 1)
[ -z "$late" ] || fail "cold repeats: $late"

# The first pool started ahead during the last time-sliced run: up before its
# members' exits, a client (CUDA start) after.
ts_end=$(tail -n 1 "$SCRATCH/ts" | awk '{ print ($4 > $9 ? $4 : $9) }')
pool_ahead=$(awk -v e="$ts_end" '$5 == 1 && $2 < e && $3 > e' "$SCRATCH/procs" | wc -l)
[ "$pool_ahead" -gt 0 ] || fail "no pool member started ahead during the time-sliced runs: $(cat "$SCRATCH/procs")"

# Each process started once, and every process started ahead reached its CUDA start.
[ "$(awk '$2 == "started-up"' "$SCRATCH/ev" | cut -d' ' -f1 | sort | uniq -d | wc -l)" = 0 ] ||
    fail "a process started up twice"
stray=$(awk '$3 == 0' "$SCRATCH/procs" | wc -l)
[ "$stray" = 0 ] || fail "$stray processes started but never reached their CUDA start"
[ -z "$(ls "$TMPDIR" | grep '^kace-pool-gate-')" ] || fail "gates left in $TMPDIR: $(ls "$TMPDIR")"
finish cli_campaign_cold_ahead
