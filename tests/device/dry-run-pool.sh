#!/usr/bin/env bash
# The device dry run's allocation (tests/device/dry-run.sh calls it): one
# `kace campaign --device --catalog` call, the whole allocation's work (probe,
# profiles, plan, time-sliced pairs, the warm pool interleaved, cold repeats,
# ncu, export), for a catalog of the 12 workloads' stand-ins, as slow and as
# coupled as the real thing, run F times faster (KACE_DRY_SCALE, default 20;
# F only compresses wall time: every stand-in time is the H200's. kace's own
# time inside a step would be multiplied by F too, so the same allocation runs
# at 1/F2 as well and kace's time is counted once, below: measured here, idle,
# 12.3 projected minutes at 1/20 and 12.1 at 1/10 gave 11.6, in 47 s and 86 s
# of wall time):
#   - workloads (tests/fake_cuda's program, KACE_FAKE_* in fake_app.c): PyTorch
#     and LLM ones 10-18 s of start-up before CUDA (the H200: 17.5 s), CUDA C
#     ones 1-1.5 s (the H200's CUDA C pair: 16.4 s for a 5 s warm-up and a 10 s
#     window); step time +-7% over 3 s as BERT's; slowed by their partners'
#     number, kind and MPS share, and by their own share; PyTorch and LLM steps
#     of 91 kernel signatures sharing the GPU time as BERT's did on the H200
#     (tests/data/kernels/bert-h200-shares.txt: the replay cap then picks 25 of
#     them as it would there), each replayed one costing 0.24 s in the counters
#     run's first step (KACE_FAKE_REPLAY_S, the H200's: 93 in 22.4 s), and a
#     step (a progress record) every 0.047 s alone, as BERT's there;
#   - the MPS daemon (tests/helpers/mps_standin.c, mode cuda-start): no server
#     until the first client's CUDA start, clients listed only from then, and a
#     client past its limit refused (checked first, with a limit of 1);
#   - ncu: scripts/device/fakes/bin/ncu, whose --help is 6000 lines long and
#     lists --pipeline-boost-state; a run that would lock the clocks or let the
#     workload run on is refused and logged.
# Every step is measured, none assumed: a step's projected seconds are its
# seconds in the store (campaign_steps) times F; the probe's curve (6 s after a
# skip of 1 s: real seconds at any F) is counted once; plan, export and kace's
# time between steps as measured on this machine; ncu, last and optional,
# apart. kace's own time inside a step (storing a run, checking MPS, starting
# the next) does not shrink with the stand-ins', so times F it would be
# overstated: the same allocation runs first at 1/F2 (KACE_DRY_SCALE2, default
# 10; 0: not), and each step's projection is taken as stand-ins + kace, from
# the two: P(F) = S + F K, P(F2) = S + F2 K, so S + K = P(F) - (F - 1) K
# (K at least 0). Prints the projected minutes of commands per step, runs per minute
# beside today's design (2.3 runs/min: one cold start a run) and the counts
# against the dataset's goal; each miss is a "FALLS SHORT:" line, a failure
# only under KACE_DRY_STRICT=1 (the engine does not reach the goal yet; a
# failed run, profile or stand-in always fails).
#
#   bash tests/device/dry-run-pool.sh KACE BUILD WORK
# KACE: the kace binary; BUILD: the build folder (tests/fake_cuda,
# tests/kace-test-mps-control, tests/libfake_nvml_mps.so, libkace_cupti.so);
# WORK: a scratch folder.
#
# The call's windows (real seconds; divided by F here). The probe measures the
# noise and sizes the window itself, but its bounds (1 to 30 s) are real seconds
# at any F, so the dry run gives the window (--window) from the stand-in's noise:
#   KACE_DRY_TARGET_ERROR (0.02): the bound on a window's error from the step-time
#     noise (KACE_DRY_POOL_WINDOW overrides): a sine of amplitude A and period P
#     averaged over W seconds from any phase is off by at most A P / (pi W), so
#     W = A P / (pi e): 3.4 s for A = 0.07, P = 3 s, e = 2%;
#   KACE_DRY_POOL_WARMUP (1, the engine's --device default): a run's warm-up,
#     counted from a member's first record after it resumed (a warm member needs
#     no more);
#   KACE_DRY_PROFILE_WARMUP (2, the engine's default): each profile's clean
#     run's warm-up, whose launches rank the kernels for the replay cap; the
#     counters run's is the runs' (it starts at its first step at 10% of the
#     clean run's speed, after the replayed one, and the H200's BERT ran steady
#     from the step after its first); the clean run's window is the runs' (the
#     same bound on its error) and the counters run's half of it, the engine's
#     defaults;
#   KACE_DRY_FIT_MINUTES (unset: no fit): a lent visit instead of calls that
#     never meet their deadline: two calls of KACE_DRY_VISIT ("7 3") projected
#     minutes each, the first with --fit-minutes KACE_DRY_FIT_MINUTES (the
#     visit's measuring time), the second with its own minutes, as docs/gpu.md
#     says. With a long KACE_DRY_POOL_WINDOW (the H200's BERT noise: 14.5 s)
#     it shows what a fitted visit brings back. The fit's expected costs and
#     least window (1 s) are real seconds, so then the engine is told the
#     scale (KACE_CAMPAIGN_TIME_SCALE), which scales the probe's curve too.
set -uo pipefail
dev=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$dev/../.." && pwd)
KACE=$1 BUILD=$2 W=$3/pool
F=${KACE_DRY_SCALE:-20} F2=${KACE_DRY_SCALE2:-10}
[ -n "${KACE_DRY_PEER:-}" ] && W=$3/pool-at-$F
NOISE_A=0.07 NOISE_P=3
TARGET_ERR=${KACE_DRY_TARGET_ERROR:-0.02}
WARMUP=${KACE_DRY_POOL_WARMUP:-1}
WINDOW=${KACE_DRY_POOL_WINDOW:-$(awk -v a="$NOISE_A" -v p="$NOISE_P" -v e="$TARGET_ERR" \
    'BEGIN { printf "%.1f", a * p / (3.14159265 * e) + 0.05 }')}
PWARMUP=${KACE_DRY_PROFILE_WARMUP:-2}
POOL_MEMBERS=${KACE_DRY_POOL_MEMBERS:-} MPS_LIMIT=${KACE_DRY_MPS_CLIENTS:-48}
REPLAY_S=0.24 SHARES=$root/tests/data/kernels/bert-h200-shares.txt STEP_S=0.047
PROBE_REAL_S=7 # the probe's skip and curve (kace_probe_options' defaults: 1 + 6 s), real seconds at any F
ALLOC_MIN=12 TODAY_RPM=2.3
APP=$BUILD/tests/fake_cuda/kace-fake-cuda-app NCU=$root/scripts/device/fakes/bin/ncu
short=0
say() { echo "dry-run: pool: $*"; }
falls_short() { echo "dry-run: pool: FALLS SHORT: $*" >&2; short=$((short + 1)); }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
scaled() { awk -v s="$1" -v f="$F" 'BEGIN { printf "%.3f", s / f }'; }
for f in "$APP" "$SHARES" "$BUILD/tests/kace-test-mps-control" "$BUILD/tests/libfake_nvml_mps.so" "$BUILD/libkace_cupti.so" "$NCU" \
    "$root/tests/data/ncu/newer.csv"; do
    [ -e "$f" ] || { say "FAIL: $f is not built"; exit 1; }
done
rm -rf "$W" && mkdir -p "$W/bin" "$W/gpu" || exit 1
cp "$BUILD/tests/kace-test-mps-control" "$W/bin/mps-control" || exit 1
export KACE_DB=$W/kace.db KACE_MPS_CONTROL=$W/bin/mps-control KACE_TEST_MPS_MODE=cuda-start \
    KACE_TEST_MPS_MAX_CLIENTS=$MPS_LIMIT KACE_FAKE_TIME_SCALE=$F KACE_FAKE_NOISE=$NOISE_A KACE_FAKE_REPLAY_S=$REPLAY_S \
    KACE_FAKE_GPU_DIR=$W/gpu KACE_FAKE_MPS_CONNECT=1 LD_LIBRARY_PATH=$BUILD/tests/fake_cuda \
    KACE_CUPTI_LIBRARY=$BUILD/libkace_cupti.so KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_mps.so \
    KACE_FAKE_NCU_CSV=$root/tests/data/ncu/newer.csv KACE_FAKE_FORBIDDEN_LOG=$W/ncu-refused.log
# Not KACE_CAMPAIGN_TIME_SCALE (dry-run.sh's calls have it): it would cut the probe at 90/F s
# before its curve of 1 + 6 real seconds is done, and this call's deadline is never reached,
# so the engine's allowances in real seconds are only time-outs here, not waits.
unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT KACE_FAKE_START_S KACE_FAKE_KERNELS KACE_FAKE_KERNEL_SHARES KACE_FAKE_STEP_S KACE_FAKE_NCU_LEAVE KACE_FAKE_NCU_SLOW \
    KACE_CAMPAIGN_TIME_SCALE
[ -n "${KACE_DRY_FIT_MINUTES:-}" ] && export KACE_CAMPAIGN_TIME_SCALE=$F && PROBE_REAL_S=0 # scaled, as the fit
: >"$W/ncu-refused.log"

# The MPS stand-in refuses a client past its limit (here 1), and lists a client only
# once it has started CUDA.
mkdir -p "$W/limit/pipe" "$W/limit/log"
(
    export CUDA_MPS_PIPE_DIRECTORY=$W/limit/pipe CUDA_MPS_LOG_DIRECTORY=$W/limit/log KACE_TEST_MPS_MAX_CLIENTS=1 \
        KACE_FAKE_GPU_DIR=$W/limit
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

# The catalog: the 12 workloads of workloads/catalog.txt, each as the stand-in of its
# kind (cuda: its mode), with its kind's start-up and kernel signatures.
i=0
while read -r name kind rest; do
    case $name in '' | '#'*) continue ;; esac
    mode=gemm start=10-18 kernels="KACE_FAKE_KERNEL_SHARES=$SHARES KACE_FAKE_STEP_S=$STEP_S"
    for w in $rest; do case $w in gemm | stream | latency) mode=$w; break ;; esac; done
    if [ "$kind" = cuda ]; then start=1-1.5 kernels=KACE_FAKE_KERNELS=1; else modes=(gemm stream latency); mode=${modes[$((i % 3))]}; fi
    echo "$name $kind env KACE_FAKE_START_S=$start $kernels $APP $mode"
    i=$((i + 1))
done <"$root/workloads/catalog.txt" >"$W/catalog.txt"

# The allocation: a command is at most 9.5 minutes, so it is two calls of the same command,
# the first ended (SIGTERM, as a batch tool's limit ends it) at 9.5 projected minutes (its
# probe's curve in real seconds, the rest at 1/F), the second resuming from the store. Their deadline is one they do not reach (the
# engine's time allowances, such as a profile's two cold starts of 20 s, are real seconds
# at any F): the whole allocation's work is done, and what 12 minutes hold is projected.
COMMAND_S=570
# The warm-ups (unless KACE_DRY_*_WARMUP) are the engine's defaults, scaled: kace campaign
# --help must state them. The
# profiles' windows are not given: the clean run's follows --window and the counters run's
# is half of it, by default.
usage=$("$KACE" campaign --help | tr -s ' \n' '  ')
for want in "--warmup defaults to 1 " "each profile's clean run's warm-up (default 2" \
    "the counters run's warm-up is --warmup's" \
    "counters run's window (default half the clean run's"; do
    case $usage in *"$want"*) ;; *) say "FAIL: kace campaign --help does not say \"$want\": the dry run's settings are not the engine's defaults"; exit 1 ;; esac
done
CALL_MINUTES=600 CALL_FIT= # the engine's --minutes and --fit-minutes (projected, the visit's calls)
engine() { # LIMIT_S: one call, its output appended
    local fit=() minutes=$CALL_MINUTES
    [ -n "$CALL_FIT" ] && fit=(--fit-minutes "$(scaled "$CALL_FIT")") && minutes=$(scaled "$CALL_MINUTES")
    timeout -k 10 "$1" "$KACE" campaign --device --catalog "$W/catalog.txt" --minutes "$minutes" --out "$W/out" \
        ${POOL_MEMBERS:+--pool-members "$POOL_MEMBERS"} --warmup "$(scaled "$WARMUP")" --window "$(scaled "$WINDOW")" \
        --profile-warmup "$(scaled "$PWARMUP")" --ncu "$NCU" --run-dir "$W/run" "${fit[@]}" \
        >>"$W/campaign.out" 2>>"$W/campaign.err"
}
PEER_PROJECTION=
if [ -z "${KACE_DRY_PEER:-}" ] && [ "$F2" != 0 ] && [ "$F2" != "$F" ]; then
    t_peer=$EPOCHREALTIME
    KACE_DRY_PEER=1 KACE_DRY_SCALE=$F2 bash "${BASH_SOURCE[0]}" "$KACE" "$BUILD" "$3" >"$3/pool-at-$F2.log" 2>&1 ||
        { say "FAIL: the allocation at 1/$F2: $(grep -E 'FAIL' "$3/pool-at-$F2.log" | head -3)"; exit 1; }
    PEER_PROJECTION=$3/pool-at-$F2/projection
    say "the same allocation at 1/$F2: $(sed -n 's/^dry-run: pool: projected minutes of commands: \([0-9.]*\) .*/\1/p' \
        "$3/pool-at-$F2.log") projected minutes, in $(since "$t_peer") s"
fi
t0=$EPOCHREALTIME
if [ -n "${KACE_DRY_FIT_MINUTES:-}" ]; then # the visit: two calls, each ended by its own deadline
    read -r visit1 visit2 <<<"${KACE_DRY_VISIT:-7 3}"
    CALL_MINUTES=$visit1 CALL_FIT=$KACE_DRY_FIT_MINUTES
    engine "$(awk -v m="$visit1" -v f="$F" 'BEGIN { printf "%.0f", m * 60 / f + 60 }')"
    rc1=$? wall1=$(since "$t0") t0=$EPOCHREALTIME
    CALL_MINUTES=$visit2 CALL_FIT=$visit2
    engine "$(awk -v m="$visit2" -v f="$F" 'BEGIN { printf "%.0f", m * 60 / f + 60 }')"
    rc=$? wall2=$(since "$t0")
    say "the visit: calls of $visit1 and $visit2 projected minutes, the first fitted to $KACE_DRY_FIT_MINUTES, the second" \
        "to its own; left after them: $(grep '^campaign: ' "$W/campaign.out" | tail -1 | sed 's/^campaign: //')"
else
    engine "$(awk -v c="$COMMAND_S" -v r="$PROBE_REAL_S" -v f="$F" 'BEGIN { printf "%.2f", r + (c - r) / f }')"
    rc1=$? wall1=$(since "$t0") rc=0 wall2=0
    if [ $rc1 = 124 ]; then # the first command's limit came: the second resumes
        t0=$EPOCHREALTIME
        engine $(( (30 * 60 + F - 1) / F + 120 ))
        rc=$? wall2=$(since "$t0")
    else
        rc=$rc1
    fi
fi
wall=$(awk -v a="$wall1" -v b="$wall2" 'BEGIN { printf "%.2f", a + b }')
[ $rc = 0 ] || say "kace campaign --device: exit $rc: $(tail -3 "$W/campaign.err")"
sql() { python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$KACE_DB" "$1"; }
step_s() { sql "SELECT printf('%.2f', coalesce(sum(seconds), 0)) FROM campaign_steps WHERE step='$1'"; }
probe_s=$(step_s probe) prof_s=$(step_s profile) plan_s=$(step_s plan) ts_s=$(step_s timeslice) pool_s=$(step_s pool)
cold_s=$(step_s cold-repeats) ncu_s=$(step_s ncu) export_s=$(step_s export)
n_ok=$(sql "SELECT count(*) FROM runs WHERE status='ok'")
n_failed=$(sql "SELECT count(*) FROM runs WHERE status<>'ok'")
n_prof=$(sql "SELECT count(DISTINCT workload) FROM campaign_profiles WHERE status='ok'")
n_prof_torch=$(sql "SELECT count(DISTINCT workload) FROM campaign_profiles WHERE status='ok' AND workload NOT LIKE 'cuda-%'")
n_ncu=$(sql "SELECT count(DISTINCT workload) FROM campaign_ncu WHERE status='ok'")

# The projection (seconds): the stand-ins' time times F; the probe's curve once; plan, export
# and kace between the steps as they are.
read -r p_probe p_prof p_ts p_pool p_cold p_own p_all rpm < <(awk -v w="$wall" -v pr="$probe_s" -v pf="$prof_s" \
    -v pl="$plan_s" -v t="$ts_s" -v p="$pool_s" -v c="$cold_s" -v nc="$ncu_s" -v x="$export_s" -v f="$F" \
    -v real="$PROBE_REAL_S" -v n="$n_ok" 'BEGIN {
        probe = (pr > real ? (pr - real) * f + real : pr)
        own = w - pr - pf - pl - t - p - c - nc - x; if (own < 0) own = 0
        own += pl + x
        all = probe + (pf + t + p + c) * f + own
        printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.1f\n", probe, pf * f, t * f, p * f, c * f, own, all,
            n / ((t + p + c) * f / 60) }')
m() { awk -v s="$1" 'BEGIN { printf "%.1f", s / 60 }'; }
say "wall $wall s at 1/$F of real time (two kace campaign --device --catalog calls, $n_ok runs)"
echo "$F $p_probe $p_prof $p_ts $p_pool $p_cold $p_own $n_ok" >"$W/projection"
# The peer at 1/F2 (run before this one's calls, below): kace's own time counted once.
at_f="" at_f2=""
if [ -s "${PEER_PROJECTION:-}" ]; then
    at_f=$p_all
    read -r p_probe p_prof p_ts p_pool p_cold p_own p_all rpm at_f2 < <(awk -v f="$F" \
        -v a="$p_probe $p_prof $p_ts $p_pool $p_cold $p_own" -v n="$n_ok" '{
        split(a, x, " "); f2 = $1; all = 0; all2 = 0; meas = 0
        for (i = 1; i <= 6; i++) {
            y = $(i + 1); k = (x[i] - y) / (f - f2); if (k < 0) k = 0
            r[i] = x[i] - (f - 1) * k; all += r[i]; all2 += y
            if (i >= 3 && i <= 5) meas += r[i]
        }
        printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.1f %.0f\n", r[1], r[2], r[3], r[4], r[5], r[6], all,
            n / (meas / 60), all2 }' "$PEER_PROJECTION")
    say "at 1/$F the stand-ins' time and kace's, both times $F, came to $(m "$at_f") min; at 1/$F2 to $(m "$at_f2"):" \
        "kace's own time counted once, below"
fi
say "projected minutes of commands: $(m "$p_all") of $ALLOC_MIN (probe $(m "$p_probe"), profiles $(m "$p_prof")," \
    "time-sliced $(m "$p_ts"), pool $(m "$p_pool"), cold repeats $(m "$p_cold"), plan, export and kace between steps" \
    "$(m "$p_own"); ncu apart: $(awk -v s="$ncu_s" -v f="$F" 'BEGIN { printf "%.0f", s * f }') s, $n_ncu workloads)"
if [ -n "${KACE_DRY_FIT_MINUTES:-}" ]; then
    fitted=$(sed -n 's/^fit: .* with windows of \([0-9.]*\) s .*/\1/p' "$W/campaign.out" | awk -v f="$F" '{ printf "%.2f\n", $1 * f }')
    say "fitted to $KACE_DRY_FIT_MINUTES projected minutes: windows of $(echo $fitted | sed 's/ /, /g') s in turn" \
        "(before each call's profiles and runs), at most $WINDOW s; below, the window is the last of them"
    WINDOW=$(echo "$fitted" | tail -1)
fi
say "projected: $rpm runs/min measuring ($n_ok runs ok; pool warm-up $WARMUP s, window $WINDOW s: at most" \
    "$(awk -v w="$WINDOW" -v a="$NOISE_A" -v p="$NOISE_P" 'BEGIN { printf "%.1f%%", 100 * a * p / (3.14159265 * w) }') off" \
    "from the +-$(awk -v a="$NOISE_A" 'BEGIN { print 100 * a }')% noise over $NOISE_P s), against $TODAY_RPM runs/min today" \
    "(one cold start a run)"
say "profiles (warm-up $PWARMUP s, window $WINDOW s; the counters run's $WARMUP s and $(awk -v w="$WINDOW" 'BEGIN { print w / 2 }') s; replay $REPLAY_S s a signature; projected s each):" \
    "$(python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(", ".join("%s %.0f" % (w, s * float(sys.argv[2])) for w, s in
    c.execute("SELECT workload, seconds FROM campaign_profiles WHERE status=\"ok\" ORDER BY id")))' "$KACE_DB" "$F")"
say "kernel replay (the cap: $(sql "SELECT printf('%g', max(value)) FROM profiles WHERE metric='replay_cover'") of the GPU time," \
    "at most $(sql "SELECT printf('%g', max(value)) FROM profiles WHERE metric='replay_max'")): the PyTorch and LLM stand-ins'" \
    "counters runs replayed $(sql "SELECT printf('%g..%g of %g', min(p.value), max(p.value), max(s.value)) FROM profiles p
    JOIN profiles s ON s.workload_id=p.workload_id AND s.metric='replay_signatures_seen' JOIN workloads w ON w.id=p.workload_id
    WHERE p.metric='replay_signatures' AND w.name NOT LIKE 'cuda-%'") signatures (BERT's spread on the H200: 25 of 91)"
# Where the pool's minutes go: its runs' own time (each member's warm-up and window, and the
# pause at its next step boundary) and the rest (starting pools, as many as the bound makes).
pool_runs_s=$(sed -n -E 's/^\[[0-9]+\] .*\(([a-z0-9-]+), MPS, repetition [0-9]+\): [a-z]+ in ([0-9.]+) s.*/\1 \2/p' \
    "$W/campaign.out" | awk '$1 !~ /^cold-/ { s += $2 } END { printf "%.2f", s }')
say "where the pool's minutes go: its runs $(awk -v r="$pool_runs_s" -v f="$F" 'BEGIN { printf "%.1f", r * f / 60 }')," \
    "starting its pools (${POOL_MEMBERS:+at most $POOL_MEMBERS members each}${POOL_MEMBERS:-sized by the probe}) and between runs" \
    "$(awk -v p="$pool_s" -v r="$pool_runs_s" -v f="$F" 'BEGIN { printf "%.1f", (p - r) * f / 60 }')"
grep -E '^(probe|plan [0-9a-f]*|export|campaign): |^step ' "$W/campaign.out" | sed 's/^/dry-run: pool: /'
[ -s "$W/ncu-refused.log" ] && say "ncu refused: $(head -1 "$W/ncu-refused.log" | cut -c1-300)"

# What was measured, against the dataset's goal (runs ok; the plan's split runs are pairs
# with shares under 100, its repetitions runs of repetition 1 and 2; cold repeats are
# stored in sets "cold-...").
pairs=$(sql "SELECT count(*) FROM runs r WHERE status='ok' AND k=2 AND mode='mps' AND repetition=0
    AND set_name NOT LIKE 'cold-%' AND NOT EXISTS (SELECT 1 FROM run_members m WHERE m.run_id=r.id AND m.mps_pct<>100)")
triples=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND k=3 AND repetition=0 AND set_name NOT LIKE 'cold-%'")
grids=$(sql "SELECT count(*) FROM (SELECT pair FROM (SELECT r.id AS id, group_concat(m.workload_id, ' ') AS pair FROM runs r
    JOIN run_members m ON m.run_id=r.id WHERE r.status='ok' AND r.k=2 AND r.id IN (SELECT run_id FROM run_members
    WHERE mps_pct<>100) GROUP BY r.id) GROUP BY pair HAVING count(*) >= 5)")
splits=$(sql "SELECT count(DISTINCT run_id) FROM run_members m JOIN runs r ON r.id=m.run_id WHERE r.status='ok'
    AND r.k=2 AND m.mps_pct<>100")
repeated=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND repetition=2")
ts=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND mode='timeslice'")
# A colocation's members as one string, to match a cold repeat with the plan's repetitions.
members="(SELECT group_concat(w, ' ') FROM (SELECT m.workload_id || '@' || m.mps_pct AS w FROM run_members m
    WHERE m.run_id=r.id ORDER BY w))"
cold=$(sql "SELECT count(*) FROM runs r WHERE status='ok' AND set_name LIKE 'cold-%'")
cold_rep=$(sql "SELECT count(*) FROM runs r WHERE status='ok' AND set_name LIKE 'cold-%' AND $members IN
    (SELECT $members FROM runs r WHERE status='ok' AND repetition=2 AND set_name NOT LIKE 'cold-%')")
echo "dry-run: pool: counts: profiles $n_prof (goal 12; $n_prof_torch PyTorch or LLM, goal 7), pairs $pairs (30)," \
    "triples $triples (10), split grids of >= 5 splits $grids ($splits split runs; goal 2), colocations measured" \
    "3 times $repeated (6), cold repeats $cold ($cold_rep of a colocation measured 3 times), time-sliced pairs $ts (3); runs failed $n_failed"
[ "$n_prof" -ge 12 ] || falls_short "profiles: $n_prof of 12"
[ "$n_prof_torch" -ge 7 ] || falls_short "PyTorch or LLM profiles: $n_prof_torch of 7"
[ "$pairs" -ge 30 ] || falls_short "pairs: $pairs of 30"
[ "$triples" -ge 10 ] || falls_short "triples: $triples of 10"
[ "$grids" -ge 2 ] || falls_short "split grids: $grids of 2"
[ "$repeated" -ge 6 ] || falls_short "colocations measured 3 times: $repeated of 6"
[ "$cold_rep" -ge 1 ] || falls_short "cold repeats: $cold, none of a colocation measured 3 times (so no spread across processes)"
[ "$ts" -ge 3 ] || falls_short "time-sliced pairs: $ts of 3"
if ! awk -v s="$p_all" -v a="$ALLOC_MIN" 'BEGIN { exit !(s <= a * 60) }'; then
    falls_short "the allocation needs $(m "$p_all") min of commands, over $ALLOC_MIN: probe $(m "$p_probe"), profiles" \
        "$(m "$p_prof"), time-sliced $(m "$p_ts"), pool $(m "$p_pool"), cold repeats $(m "$p_cold"), the rest $(m "$p_own")"
fi
# One command holds at most 9.5 minutes: more than that is two calls, the second resuming.
[ $rc1 = 124 ] || [ $rc1 = 0 ] || falls_short "the first call ended with exit $rc1, not at its command's limit"
say "calls (at 1/$F, kace's own time times $F, ncu included): the first $(awk -v w="$wall1" -v f="$F" -v r="$PROBE_REAL_S" 'BEGIN { printf "%.1f", ((w - r) * f + r) / 60 }') min" \
    "($([ $rc1 = 124 ] && echo "ended at a command's 9.5 min" || echo "exit $rc1")), the second" \
    "$(awk -v w="$wall2" -v f="$F" 'BEGIN { printf "%.1f", w * f / 60 }') min" \
    "($(sql "SELECT group_concat(ending, ', ') FROM campaign_allocations"))"
[ "$n_ncu" -ge 1 ] || falls_short "ncu: no workload profiled by ncu ($(sql "SELECT count(*) FROM campaign_ncu") tries failed)"
files=$(find "$W/out" -type f | wc -l)
say "export: $files files in --out"
# The H200's own noise: BERT's step record from first light (bert.py training, batch 8, under
# the injection library, recording launches), the spread (cv) of its throughput over windows
# of W s, and the shortest window whose spread, and every longer one's, is within the target
# (the probe's rule). The stand-in's sine of 3 s averages out in one period; BERT's
# fluctuations are slower, so where they hold without the injection library too, the
# windows (the pool's and the profiles') grow to that length.
read -r h200_cv h200_w < <(python3 - "$root/data/first-light/h200-2026-11-28/first-light.tar.gz" "$WINDOW" \
    "$TARGET_ERR" <<'PY'
import bisect, statistics, sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    lines = tar.extractfile("first-light/torch-steps.txt").read().decode().splitlines()
rows = [l.split() for l in lines if " done " in l]
t, s = [float(r[0]) for r in rows][1:], [int(r[2]) for r in rows][1:]  # after the replayed first step
def cv(w):
    rates = []
    for i in range(len(t)):
        j = bisect.bisect_left(t, t[i] + w)
        if j >= len(t):
            break
        rates.append((s[j] - s[i]) / (t[j] - t[i]))
    return statistics.pstdev(rates) / statistics.mean(rates) if len(rates) > 10 else float("nan")
lengths = [x / 2 for x in range(2, 61)]
cvs = [cv(w) for w in lengths]
fit = next((w for k, w in enumerate(lengths) if all(c <= float(sys.argv[3]) for c in cvs[k:] if c == c)), 0)
print("%.1f %.1f" % (100 * cv(float(sys.argv[2])), fit))
PY
)
if [ -n "${h200_w:-}" ]; then
    n_pool_runs=$(sql "SELECT count(*) FROM runs WHERE status='ok' AND mode='mps' AND set_name NOT LIKE 'cold-%'")
    h200_all=$(awk -v a="$p_all" -v w="$h200_w" -v w0="$WINDOW" -v n="$n_pool_runs" -v c="$cold" -v t="$ts" -v np="$n_prof" \
        'BEGIN { printf "%.0f", a + (w - w0) * (n + c + t + 2 * np) }')
    say "the H200's BERT (first light, under the injection library): its throughput's spread over $WINDOW s windows" \
        "is $h200_cv% (the stand-in's: at most $(awk -v w="$WINDOW" -v a="$NOISE_A" -v p="$NOISE_P" \
        'BEGIN { printf "%.1f", 100 * a * p / (3.14159265 * w) }')%); $(awk -v e="$TARGET_ERR" 'BEGIN { print 100 * e }')%" \
        "needs windows of $h200_w s, with which this allocation would take $(m "$h200_all") min"
fi

# The coupling shows: one workload's throughput differs across its pairs, and along a split grid.
read -r pmin pmax < <(sql "SELECT printf('%.0f %.0f', min(m.throughput), max(m.throughput)) FROM run_members m JOIN runs r
    ON r.id=m.run_id WHERE r.status='ok' AND r.k=2 AND r.mode='mps' AND m.mps_pct=100 AND m.workload_id=(SELECT
    min(workload_id) FROM run_members)")
curve=$(sql "SELECT group_concat(t, ' ') FROM (SELECT printf('%d%%:%.0f', m.mps_pct, avg(m.throughput)) AS t FROM
    run_members m JOIN runs r ON r.id=m.run_id WHERE r.status='ok' AND r.k=1 AND m.workload_id=(SELECT workload_id
    FROM run_members m2 JOIN runs r2 ON r2.id=m2.run_id WHERE r2.k=1 LIMIT 1) GROUP BY m.mps_pct ORDER BY m.mps_pct)")
say "coupling: the first workload's throughput across its pairs $pmin..$pmax samples/s; a solo curve by share: $curve"
[ $rc = 0 ] || { say "FAIL: kace campaign --device exited $rc"; exit 1; }
[ "$n_failed" = 0 ] || { say "FAIL: $n_failed runs failed: $(grep -m3 ': failed\|: timeout' "$W/campaign.out")"; exit 1; }
[ "$n_prof" = 12 ] || { say "FAIL: $n_prof of 12 profiles: $(grep -m3 '^profile .*: \(failed\|timeout\)' "$W/campaign.out")"; exit 1; }
# The projection counts the probe's curve as PROBE_REAL_S real seconds: it must be whole.
probe=$(sql "SELECT group_concat(evidence, ' | ') FROM campaign_probes")
case $probe in '' | *"(incomplete)"*) say "FAIL: the probe's curve is not whole: ${probe:-no probe stored}"; exit 1 ;; esac
[ $short = 0 ] || [ "${KACE_DRY_STRICT:-0}" != 1 ] || exit 1
exit 0
