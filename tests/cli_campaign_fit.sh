#!/usr/bin/env bash
# kace campaign --device --fit-minutes F shortens the window so that what is
# left is expected to fit F minutes, never above the window the call had nor
# below the least (1 s, times the stand-ins' scale), and every run and
# profile is measured with the window the fit chose; with time enough the
# window stays. Checked by what the call prints and what the store holds.
#
#   bash cli_campaign_fit.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_campaign_fit.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"     # fail, failures, finish
source "$(dirname "$0")/lib_campaign.sh" # fake_cuda_standins, sql
fake_cuda_standins                       # BUILD, APP; the fake CUDA stack, 20 times faster (KACE_CAMPAIGN_TIME_SCALE)

"$KACE" campaign --fit-minutes 1 --db "$SCRATCH/x.db" plan.txt >/dev/null 2>"$SCRATCH/err"
[ $? = 2 ] || fail "--fit-minutes without --device: not a usage error"
grep -q -- '--fit-minutes go with --device' "$SCRATCH/err" || fail "usage error unclear: $(cat "$SCRATCH/err")"

for w in a b c; do
    echo "w$w""_batch1-inf torch env KACE_FAKE_START_S=0.3 $APP gemm"
done >"$SCRATCH/catalog.txt"

WINDOW=0.3 LEAST=0.05 # --window, and 1 s at the stand-ins' scale
campaign() { # DB FIT_MINUTES TAG
    KACE_DB=$1 "$KACE" campaign --device --minutes 3 --fit-minutes "$2" --catalog "$SCRATCH/catalog.txt" \
        --profile-warmup 0.2 --warmup 0.2 --window $WINDOW --pool-members 3 --run-dir "$SCRATCH/run-$3" \
        >"$SCRATCH/out-$3" 2>"$SCRATCH/err-$3" || fail "kace campaign ($3): exit $?: $(tail -5 "$SCRATCH/err-$3")"
    grep -q '^campaign: .*, 0 failed), 0 left .*ended: finished' "$SCRATCH/out-$3" ||
        fail "$3: not every run measured: $(grep '^campaign:' "$SCRATCH/out-$3")"
}
# The fit's window as printed: before the profiles, then before the runs.
fitted() { sed -n 's/^fit: .* with windows of \([0-9.]*\) s (at most \([0-9.]*\) s)$/\1 \2/p' "$SCRATCH/out-$1"; }
# Distinct windows the store's runs were measured with, to the ms.
run_windows() { KACE_DB=$1 sql "SELECT DISTINCT printf('%.3f', window_s) FROM runs" 2>&1; }

# Too short a time for the whole dataset at 0.5 s windows: shorter windows.
campaign "$SCRATCH/short.db" 0.3 short
[ "$(fitted short | wc -l)" = 2 ] || fail "short: not two fits: $(grep '^fit' "$SCRATCH/out-short")"
fitted short | awk -v w=$WINDOW -v l=$LEAST '{ if (!($1 < w && $1 >= l - 1e-9 && $2 == w)) bad = 1 } END { exit bad }' ||
    fail "short: windows not within [$LEAST, $WINDOW): $(fitted short)"
last=$(fitted short | tail -1 | cut -d' ' -f1)
windows=$(run_windows "$SCRATCH/short.db")
[ "$(echo "$windows" | wc -l)" = 1 ] && awk -v a="$windows" -v b="$last" 'BEGIN { d = a - b; exit !(d < 0.001 && d > -0.001) }' ||
    fail "short: runs measured with windows $windows, the fit chose $last"

# Time enough: the window stays, and the runs have it.
campaign "$SCRATCH/long.db" 600 long
[ "$(fitted long | wc -l)" = 2 ] && fitted long | awk -v w=$WINDOW '{ if ($1 != w || $2 != w) bad = 1 } END { exit bad }' ||
    fail "long: the window changed: $(fitted long)"
[ "$(run_windows "$SCRATCH/long.db")" = "0.300" ] || fail "long: runs measured with $(run_windows "$SCRATCH/long.db")"
finish cli_campaign_fit
