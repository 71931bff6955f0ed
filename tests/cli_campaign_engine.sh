#!/usr/bin/env bash
# kace campaign --device without a GPU, two of the engine's rules:
# 1. Host contention controlled: every run's members are pinned to shares of
#    kace's CPUs, as many shares as the probe's pool size (a stored probe's,
#    seeded here), a time-sliced pair's, the warm pool's and a cold repeat's
#    members alike. Stand-in workloads (tests/helpers/worker.c, mode cpus)
#    say at each start which CPUs they run on and their thread counts.
# 2. SIGTERM during the profile step: the try cut short is not noted, the
#    allocation is recorded as killed, and what is left is counted.
# And $KACE_CAMPAIGN_TIME_SCALE, the stand-ins' time scale, shortens the
# engine's allowances.
#
#   cli_campaign_engine.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
build=$(dirname "$kace")
source "$(dirname "$0")/lib_test.sh"
need sqlite3 setsid
source "$(dirname "$0")/lib_campaign.sh"
campaign_standins engine
quick=(--warmup 0.2 --window 0.3 --run-dir "$run_dir" --quiet)
ending() { sql "SELECT ending FROM campaign_allocations ORDER BY id DESC LIMIT 1"; }
# A stored probe (as a first call's): a pool of 2 members.
seed_probe() {
    sql "INSERT INTO campaign_probes(client_refused, pool_members, pool_bound, seconds, evidence, probed_at)
         VALUES(0, 2, 'seeded', 1, 'probe: seeded', 'then')" || fail "seed the probe"
}

# 1. Stand-ins that append "cpus C1,C2 omp N ..." to cpus-NAME at each start.
for w in a:4000 b:2000; do
    name=${w%%:*}
    printf '#!/bin/sh\nexec "%s" cpus %s >>"%s"\n' "$scratch/bin/worker" "${w#*:}" "$scratch/cpus-$name" \
        >"$scratch/bin/pin-$name"
    chmod +x "$scratch/bin/pin-$name"
    "$kace" workload add "$name" -- "$scratch/bin/pin-$name" >/dev/null || fail "workload add $name"
done
seed_probe
# A time-sliced pair, the same pair in the warm pool, and its cold repeat.
printf '%s\n' "workloads a b" "mode timeslice" "run a b" "mode mps" "run a b" >"$scratch/plan.txt"
"$kace" campaign --device --minutes 3 "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "pinning: exit $rc: $(cat "$scratch/err")"
[ "$(sql "SELECT count(*) FROM runs WHERE status='ok'")" = 3 ] ||
    fail "pinning: runs $(sql "SELECT set_name, status FROM runs") $(cat "$scratch/out")"
grep -q "^probe: this call's pool holds at most 2 members" "$scratch/out" || fail "pinning: $(grep probe "$scratch/out")"
# Each workload started 3 times (time-sliced, pool member, cold repeat), each time on
# the same share: a CPU list and a thread count that says its size.
for name in a b; do
    [ "$(wc -l <"$scratch/cpus-$name")" = 3 ] || fail "pinning: $name's starts: $(cat "$scratch/cpus-$name")"
    [ "$(sort -u "$scratch/cpus-$name" | wc -l)" = 1 ] || fail "pinning: $name's shares differ: $(cat "$scratch/cpus-$name")"
    read -r _ cpus _ omp _ <"$scratch/cpus-$name"
    n=$(tr ',' '\n' <<<"$cpus" | wc -l)
    [ "$omp" = "$n" ] || fail "pinning: $name on CPUs $cpus has OMP_NUM_THREADS $omp"
    eval "cpus_$name=\$cpus"
done
# Disjoint shares when kace has 2 CPUs or more (fewer: the one CPU is shared).
if [ "$(nproc)" -ge 2 ]; then
    common=$(comm -12 <(tr ',' '\n' <<<"$cpus_a" | sort) <(tr ',' '\n' <<<"$cpus_b" | sort))
    [ -z "$common" ] || fail "pinning: a on $cpus_a and b on $cpus_b share CPUs $common"
    [ "$(tr ',' '\n' <<<"$cpus_a,$cpus_b" | wc -l)" -le "$(nproc)" ] || fail "pinning: more CPUs than kace has"
fi
no_strays "pinning"

# 1b. $KACE_CAMPAIGN_TIME_SCALE (stand-ins F times faster): the allowances are
#     F times shorter. A cold run's projection before any is stored is its
#     warm-up and window plus 20 s, here 1 s: a 3 s call has room for it.
export KACE_DB="$scratch/scale.db"
for name in a b; do "$kace" workload add "$name" -- "$scratch/bin/pin-$name" >/dev/null || fail "scale: add $name"; done
printf '%s\n' "workloads a b" "mode timeslice" "run a b" >"$scratch/plan-ts.txt"
KACE_CAMPAIGN_TIME_SCALE=20 "$kace" campaign --device --minutes 0.05 "$scratch/plan-ts.txt" "${quick[@]}" \
    >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "scale: exit $rc: $(cat "$scratch/err")"
grep -q "^step timeslice: 1 runs planned, 0 stored before, 1 measured in .* (1.5 s a run, from the plan's windows)" \
    "$scratch/out" || fail "scale: $(cat "$scratch/out")"
KACE_CAMPAIGN_TIME_SCALE=0.5 "$kace" campaign --device --minutes 1 "$scratch/plan-ts.txt" >/dev/null 2>"$scratch/err"
rc=$?
[ $rc = 2 ] && grep -q "KACE_CAMPAIGN_TIME_SCALE must be a number from 1 to 1000" "$scratch/err" ||
    fail "scale 0.5: exit $rc: $(cat "$scratch/err")"
no_strays "scale"

# 2. SIGTERM while a catalog workload is being profiled.
export KACE_DB="$scratch/term.db"
export KACE_NVML_LIBRARY="$build/tests/libfake_nvml_mps.so" KACE_FAKE_GPU_NAME="Stand-in GPU"
export KACE_CUPTI_LIBRARY="$scratch/libkace_cupti_placeholder.so"
: >"$KACE_CUPTI_LIBRARY"
# (A run started ahead waits at its CUDA start until kace opens its gate, as
# the injection library makes it wait: one byte down the FIFO.)
for name in p q r; do
    printf '#!/bin/sh\n[ -z "${KACE_CUPTI_GATE:-}" ] || head -c 1 "$KACE_CUPTI_GATE" >/dev/null || exit 75
echo "%s ${CUDA_INJECTION64_PATH:+injected}" >>"%s"\nexec "%s" report 1000\n' \
        "$name" "$scratch/starts.log" "$scratch/bin/worker" >"$scratch/bin/sw-$name"
    chmod +x "$scratch/bin/sw-$name"
    echo "s${name}_batch1-inf cmd @W@/sw-$name"
done >"$scratch/bin/catalog.txt"
"$kace" workload add seed_batch1-inf -- /bin/true >/dev/null || fail "term: create the store"
seed_probe
# A profile window far longer than the test waits: the signal comes mid-profile.
setsid "$kace" campaign --device --minutes 5 --catalog "$scratch/bin/catalog.txt" --profile-warmup 0.2 \
    --profile-window 60 "${quick[@]}" >"$scratch/out" 2>"$scratch/err" &
pid=$!
PIDS+=("$pid")
for ((i = 0; i < 600; i++)); do # a state, polled: a workload started under the injection library
    grep -q injected "$scratch/starts.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
grep -q injected "$scratch/starts.log" 2>/dev/null || fail "term: no profile started: $(cat "$scratch/out" "$scratch/err")"
kill -TERM "$pid"
wait "$pid"
rc=$?
[ $rc = 143 ] || fail "term: exit $rc (want 128+15): $(cat "$scratch/err")"
[ "$(ending)" = killed ] || fail "term: ending $(ending): $(cat "$scratch/err")"
grep -q "^campaign: 0 runs measured (0 ok, 0 failed), 3 left for the next call; ended: killed" "$scratch/out" ||
    fail "term: $(tail -n 3 "$scratch/out")"
[ "$(sql "SELECT count(*) FROM campaign_profiles")" = 0 ] ||
    fail "term: a try cut by the signal was noted: $(sql "SELECT workload, status FROM campaign_profiles")"
[ "$(sql "SELECT runs_done || '/' || runs_left FROM campaign_steps WHERE step='profile'")" = 0/3 ] ||
    fail "term: steps $(sql "SELECT * FROM campaign_steps")"
no_strays "term"

finish cli_campaign_engine
