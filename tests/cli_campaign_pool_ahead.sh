#!/usr/bin/env bash
# kace campaign --device's pool step starts the next pool's members ahead:
# while one pool measures, the next one's processes import and build on the
# CPU, each held at its CUDA start (the injection library's gate), and the
# gate opens only once that pool's turn has come (the last pool's members
# gone, the MPS daemon up). Checked by the order of the fake CUDA program's
# own events (KACE_FAKE_EVENTS), never by time:
#   - some member finished its start-up while a member of an earlier pool still
#     ran, and started CUDA only after that member had exited (started ahead);
#   - never more MPS clients at once than the pool holds (no gate opened while
#     the last pool's members were clients);
#   - every pool member started once, and each reached its CUDA start (none
#     started ahead for nothing);
#   - no gate is left behind.
#
#   bash cli_campaign_pool_ahead.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_campaign_pool_ahead.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh" # fail, failures, finish
source "$(dirname "$0")/lib_campaign.sh" # fake_cuda_standins
fake_cuda_standins # BUILD, APP, EV; the fake CUDA stack
POOL=4
for w in a b c d; do
    echo "w$w""_batch1-inf torch env KACE_FAKE_START_S=0.3 KACE_FAKE_EVENTS=$EV KACE_FAKE_EVENT_TAG=w$w $APP gemm"
done >"$SCRATCH/catalog.txt"
"$KACE" campaign --device --minutes 2 --catalog "$SCRATCH/catalog.txt" --profile-warmup 0.2 --profile-window 0.3 \
    --warmup 0.2 --window 0.3 --pool-members $POOL --run-dir "$SCRATCH/run" >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "kace campaign: exit $?: $(tail -5 "$SCRATCH/err")"
grep -q '^step pool: .* measured' "$SCRATCH/out" || fail "no pool step: $(cat "$SCRATCH/out")"

# The pool step's processes: those that started after the last profile's and
# the time-sliced runs' (no MPS client) processes and became MPS clients, up to
# the first cold repeat (its processes start after the pool step ended).
[ -s "$EV" ] || fail "no events"
awk '{ print $1, $2, NR }' "$EV" >"$SCRATCH/ev"
# a line per MPS client process: PID UP CUDA EXIT (event line numbers, 0: none)
awk '{ if ($2 == "started-up") up[$1] = $3; if ($2 == "cuda") cu[$1] = $3; if ($2 == "mps") m[$1] = 1;
       if ($2 == "exit") ex[$1] = $3 }
     END { for (p in up) if (m[p]) print p, up[p], cu[p] + 0, ex[p] + 0 }' "$SCRATCH/ev" | sort -k3n >"$SCRATCH/clients"
[ "$(wc -l <"$SCRATCH/clients")" -gt "$POOL" ] || fail "too few MPS clients for two pools: $(cat "$SCRATCH/clients")"

# Started ahead: P up before Q's exit, and P's CUDA start after it.
ahead=$(awk 'NR == FNR { up[NR] = $2; cu[NR] = $3; n = NR; next }
             { for (i = 1; i <= n; i++) if (up[i] < $4 && cu[i] > $4) k[i] = 1 }
             END { print length(k) }' "$SCRATCH/clients" "$SCRATCH/clients")
[ "$ahead" -gt 0 ] || fail "no pool member started ahead of its pool: $(cat "$SCRATCH/clients")"

# Never more clients at once than the pool holds (+1 at a CUDA start, -1 at an exit).
most=$(awk '{ print $3, 1; if ($4) print $4, -1 }' "$SCRATCH/clients" | sort -n |
    awk '{ c += $2; if (c > m) m = c } END { print m + 0 }')
[ "$most" -le "$POOL" ] || fail "$most MPS clients at once, the pool holds $POOL: a gate opened early"

# Each process started once, and every process started ahead reached its CUDA start.
[ "$(awk '$2 == "started-up"' "$SCRATCH/ev" | cut -d' ' -f1 | sort | uniq -d | wc -l)" = 0 ] ||
    fail "a process started up twice"
grep -q '^campaign: .* 0 failed' "$SCRATCH/out" || fail "failed runs: $(grep '^campaign:' "$SCRATCH/out")"
# Each pool run's printed length is its own (warm-up 0.2 s and window 0.3 s at least), not
# less the time its members waited at their gates before their pool opened.
short=$(grep '(pairs, MPS, repetition' "$SCRATCH/out" | sed -n 's/.*: ok in \([0-9.]*\) s.*/\1/p' |
    awk '$1 < 0.45 { n++ } END { print n + 0 }')
[ "$short" = 0 ] || fail "$short pool runs printed less than their warm-up and window: $(grep -m3 'MPS, rep' "$SCRATCH/out")"
stray=$(awk '{ if ($2 == "started-up") up[$1] = 1; if ($2 == "cuda") cu[$1] = 1 }
             END { for (p in up) if (!cu[p]) n++; print n + 0 }' "$SCRATCH/ev")
[ "$stray" = 0 ] || fail "$stray processes started but never reached their CUDA start"
[ -z "$(ls "$TMPDIR" | grep '^kace-pool-gate-')" ] || fail "gates left in $TMPDIR: $(ls "$TMPDIR")"
finish cli_campaign_pool_ahead
