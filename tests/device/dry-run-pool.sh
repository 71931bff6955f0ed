#!/usr/bin/env bash
# The device dry run's warm pool (tests/device/dry-run.sh calls it): one
# allocation's colocation schedule (plan.py's plan for the catalog's 12
# workloads) measured by `kace campaign --pool` against stand-ins as slow and
# as coupled as the real thing, F times faster (KACE_DRY_SCALE, default 10):
#   - workloads (tests/fake_cuda's program): 10-18 s of start-up before CUDA,
#     step time +-7% over 3 s, slowed by their partners' number, kind and MPS
#     share, and by their own share (KACE_FAKE_* in tests/fake_cuda/fake_app.c);
#   - the MPS daemon (tests/helpers/mps_standin.c, mode cuda-start): no server
#     until the first client's CUDA start, clients listed only from then, and
#     a client past its limit refused.
# Prints the schedule's projected minutes of commands and runs per minute
# beside today's design (2.3 runs/min) and checks what it measured against
# the dataset's goal; what falls short within 12 minutes is printed
# ("FALLS SHORT:"), and fails the script only under KACE_DRY_STRICT=1 (the
# engine does not reach the goal yet; a failed run or stand-in always fails).
#
#   bash tests/device/dry-run-pool.sh KACE BUILD WORK [PROFILED]
# KACE: the kace binary; BUILD: the build folder (tests/fake_cuda,
# tests/kace-test-mps-control); WORK: a scratch folder; PROFILED: how many
# workloads the dry run profiled (counted against the goal; default 0).
set -uo pipefail
dev=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$dev/../.." && pwd)
KACE=$1 BUILD=$2 W=$3/pool PROFILED=${4:-0}
F=${KACE_DRY_SCALE:-10}
# The real schedule's times (seconds; the dry run divides them by F): the window
# covers two periods of the step-time noise; a warm member needs no more warm-up.
WARMUP=${KACE_DRY_POOL_WARMUP:-1} WINDOW=${KACE_DRY_POOL_WINDOW:-6}
# Profiles are not run here (the dry run's campaign calls profile): each is counted
# at a PyTorch start (17.5 s on the H200) plus its two runs' windows.
PROFILE_S=${KACE_DRY_PROFILE_S:-40} N_PROFILES=${KACE_DRY_PROFILES:-12}
POOL_MEMBERS=${KACE_DRY_POOL_MEMBERS:-16} MPS_LIMIT=${KACE_DRY_MPS_CLIENTS:-48}
APP=$BUILD/tests/fake_cuda/kace-fake-cuda-app
short=0
say() { echo "dry-run: pool: $*"; }
falls_short() { echo "dry-run: pool: FALLS SHORT: $*" >&2; short=$((short + 1)); }
[ -x "$APP" ] && [ -x "$BUILD/tests/kace-test-mps-control" ] || { say "$APP is not built"; exit 1; }
rm -rf "$W" && mkdir -p "$W/bin" "$W/gpu" || exit 1
cp "$BUILD/tests/kace-test-mps-control" "$W/bin/mps-control" || exit 1
scaled() { awk -v s="$1" -v f="$F" 'BEGIN { printf "%.3f", s / f }'; }
export KACE_DB=$W/kace.db KACE_MPS_CONTROL=$W/bin/mps-control KACE_TEST_MPS_MODE=cuda-start \
    KACE_TEST_MPS_MAX_CLIENTS=$MPS_LIMIT KACE_FAKE_START_S=10-18 KACE_FAKE_TIME_SCALE=$F KACE_FAKE_NOISE=0.07 \
    KACE_FAKE_GPU_DIR=$W/gpu KACE_FAKE_MPS_CONNECT=1 LD_LIBRARY_PATH=$BUILD/tests/fake_cuda
unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT

# The MPS stand-in refuses a client past its limit (here 1), and lists a client only
# once it has started CUDA.
mkdir -p "$W/limit/pipe" "$W/limit/log"
(
    export CUDA_MPS_PIPE_DIRECTORY=$W/limit/pipe CUDA_MPS_LOG_DIRECTORY=$W/limit/log KACE_TEST_MPS_MAX_CLIENTS=1 \
        KACE_FAKE_START_S=0 KACE_FAKE_GPU_DIR=$W/limit
    "$W/bin/mps-control" -d || exit 1
    [ -z "$(echo get_server_list | "$W/bin/mps-control")" ] || echo "a server before any client"
    "$APP" gemm 100 >/dev/null 2>&1 &
    first=$!
    for _ in $(seq 200); do s=$(echo get_server_list | "$W/bin/mps-control"); [ -n "$s" ] && break; sleep 0.05; done
    [ -n "$s" ] || echo "no server after the first client"
    "$APP" stream 1 >/dev/null 2>"$W/limit/second.err" && echo "a second client was not refused"
    grep -q 'refused' "$W/limit/second.err" || echo "the refusal does not say so: $(cat "$W/limit/second.err")"
    [ "$(echo "get_client_list $s" | "$W/bin/mps-control")" = "$first" ] || echo "the client list is not the first client"
    kill "$first"
    wait "$first" 2>/dev/null
    echo quit | "$W/bin/mps-control"
) >"$W/limit.out" 2>&1
[ -s "$W/limit.out" ] && { say "FAIL: the MPS stand-in: $(cat "$W/limit.out")"; exit 1; }

# The catalog's 12 workloads, each as the stand-in of its kind (cuda: its mode).
names=() i=0
while read -r name kind rest; do
    case $name in '' | '#'*) continue ;; esac
    mode=gemm
    for w in $rest; do case $w in gemm | stream | latency) mode=$w; break ;; esac; done
    [ "$kind" = cuda ] || { modes=(gemm stream latency); mode=${modes[$((i % 3))]}; }
    "$KACE" workload add "$name" -- "$APP" "$mode" >/dev/null || { say "FAIL: workload add $name"; exit 1; }
    names+=("$name") i=$((i + 1))
done <"$root/workloads/catalog.txt"
python3 "$root/scripts/device/plan.py" "${names[@]}" >"$W/plan.txt" || { say "FAIL: plan.py"; exit 1; }

limit_s=$(( (12 * 60 + F - 1) / F + 60 ))
t0=$EPOCHREALTIME
timeout -k 10 "$limit_s" "$KACE" campaign --pool --pool-members "$POOL_MEMBERS" --warmup "$(scaled "$WARMUP")" \
    --window "$(scaled "$WINDOW")" --run-dir "$W/run" "$W/plan.txt" >"$W/campaign.out" 2>"$W/campaign.err"
rc=$?
wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
[ $rc = 0 ] || say "kace campaign --pool: exit $rc: $(tail -3 "$W/campaign.err")"
line=$(grep -m1 '^pool: ' "$W/campaign.out")
[[ $line =~ starting\ them\ took\ ([0-9.]+)\ s,\ the\ runs\ ([0-9.]+)\ s ]] || { say "FAIL: no pool line: $(tail -3 "$W/campaign.out")"; exit 1; }
start_s=${BASH_REMATCH[1]} runs_s=${BASH_REMATCH[2]}
# The time-sliced runs are cold: every second of theirs is stand-in time too.
ts_s=$(sed -n -E 's/^.*\(time-slicing\) #[0-9]+: run [0-9]+ \([^)]*\): [a-z]+ in ([0-9.]+) s.*$/\1/p' "$W/campaign.out" |
    awk '{ s += $1 } END { printf "%.1f", s }')
sql() { python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$KACE_DB" "$1"; }
n_ok=$(sql "SELECT count(*) FROM runs WHERE status='ok'")
# Projected: the stand-ins' time (starts, pool runs, cold time-sliced runs) times F, kace's
# own time between them (this busy machine's) as it is, and the profiles.
read -r proj_s proj_min rpm < <(awk -v w="$wall" -v s="$start_s" -v r="$runs_s" -v t="$ts_s" -v f="$F" \
    -v p="$PROFILE_S" -v np="$N_PROFILES" -v n="$n_ok" 'BEGIN {
        own = w - s - r - t; if (own < 0) own = 0
        total = (s + r + t) * f + own + p * np
        printf "%.0f %.1f %.1f\n", total, total / 60, n / ((total - p * np) / 60) }')
say "wall $wall s at 1/$F of real time: pool starts $start_s s, pool runs $runs_s s, time-sliced runs $ts_s s"
say "$(awk -v w="$wall" -v s="$start_s" -v r="$runs_s" -v t="$ts_s" -v f="$F" -v p="$PROFILE_S" -v np="$N_PROFILES" 'BEGIN {
    own = w - s - r - t; if (own < 0) own = 0
    printf "projected minutes: profiles %.1f, pool starts %.1f, pool runs %.1f, time-sliced runs %.1f, kace between runs %.1f",
        p * np / 60, s * f / 60, r * f / 60, t * f / 60, own / 60 }')"
say "projected: $proj_min min of commands ($N_PROFILES profiles at $PROFILE_S s, $n_ok runs ok at warm-up $WARMUP s," \
    "window $WINDOW s); $rpm runs/min measuring, against 2.3 runs/min today (one cold start a run)"
say "$(grep -m1 '^campaign: ' "$W/campaign.out")"
say "$line"

# What was measured, against the dataset's goal (runs ok; the plan's split runs are pairs
# with shares under 100, its repetitions runs of repetition 1 and 2).
pairs=$(sql "SELECT count(*) FROM runs r WHERE status='ok' AND k=2 AND mode='mps' AND repetition=0 AND NOT EXISTS
    (SELECT 1 FROM run_members m WHERE m.run_id=r.id AND m.mps_pct<>100)")
triples=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND k=3 AND repetition=0")
grids=$(sql "SELECT count(*) FROM (SELECT pair FROM (SELECT r.id AS id, group_concat(m.workload_id, ' ') AS pair FROM runs r
    JOIN run_members m ON m.run_id=r.id WHERE r.status='ok' AND r.k=2 AND r.id IN (SELECT run_id FROM run_members
    WHERE mps_pct<>100) GROUP BY r.id) GROUP BY pair HAVING count(*) >= 5)")
splits=$(sql "SELECT count(DISTINCT run_id) FROM run_members m JOIN runs r ON r.id=m.run_id WHERE r.status='ok'
    AND r.k=2 AND m.mps_pct<>100")
repeated=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND repetition=2")
ts=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND mode='timeslice'")
echo "dry-run: pool: measured: profiles $PROFILED (goal 12), pairs $pairs (30), triples $triples (10)," \
    "split grids of >= 5 splits $grids ($splits split runs; goal 2), colocations measured 3 times $repeated (6)," \
    "time-sliced pairs $ts (3)"
[ "$PROFILED" -ge 12 ] || falls_short "profiles: $PROFILED of 12 (the dry run's campaign calls profile 10 of the catalog's 12)"
[ "$pairs" -ge 30 ] || falls_short "pairs: $pairs of 30"
[ "$triples" -ge 10 ] || falls_short "triples: $triples of 10"
[ "$grids" -ge 2 ] || falls_short "split grids: $grids of 2"
[ "$repeated" -ge 6 ] || falls_short "colocations measured 3 times: $repeated of 6"
falls_short "cold repeats: the pool measures every MPS repetition warm; only the $ts time-sliced pairs start cold"
[ "$ts" -ge 3 ] || falls_short "time-sliced pairs: $ts of 3"
if ! awk -v m="$proj_min" 'BEGIN { exit !(m <= 12) }'; then
    fit=$(awk -v w="$wall" -v s="$start_s" -v r="$runs_s" -v t="$ts_s" -v f="$F" -v p="$PROFILE_S" -v np="$N_PROFILES" \
        -v n="${line#pool: }" -v wu="$WARMUP" 'BEGIN { split(n, a, " "); own = w - s - r - t; if (own < 0) own = 0
            left = 720 - p * np - (s + t) * f - own
            printf "the profiles, pool starts and time-sliced runs leave %.0f s for %d pool runs: ", left, a[1]
            w = left / a[1] - wu
            if (w > 0) printf "a window of %.1f s each", w; else printf "no window fits" }')
    falls_short "the schedule needs $proj_min min of commands, over 12; $fit"
fi
# The coupling shows: one workload's throughput differs across its pairs, and along a split grid.
read -r pmin pmax < <(sql "SELECT printf('%.0f %.0f', min(m.throughput), max(m.throughput)) FROM run_members m JOIN runs r
    ON r.id=m.run_id WHERE r.status='ok' AND r.k=2 AND r.mode='mps' AND m.mps_pct=100 AND m.workload_id=(SELECT
    min(workload_id) FROM run_members)")
curve=$(sql "SELECT group_concat(t, ' ') FROM (SELECT printf('%d%%:%.0f', m.mps_pct, avg(m.throughput)) AS t FROM
    run_members m JOIN runs r ON r.id=m.run_id WHERE r.status='ok' AND r.k=1 AND m.workload_id=(SELECT workload_id
    FROM run_members m2 JOIN runs r2 ON r2.id=m2.run_id WHERE r2.k=1 LIMIT 1) GROUP BY m.mps_pct ORDER BY m.mps_pct)")
say "coupling: the first workload's throughput across its pairs $pmin..$pmax samples/s; a solo curve by share: $curve"
[ $rc = 0 ] || { say "FAIL: kace campaign --pool exited $rc"; exit 1; }
[ $short = 0 ] || [ "${KACE_DRY_STRICT:-0}" != 1 ] || exit 1
exit 0
