#!/usr/bin/env bash
# kace campaign --device --minutes M without a GPU: one allocation's schedule
# over stand-in workloads (tests/helpers/worker.c) under the stand-in MPS
# control daemon. The schedule's time need comes from the run times the
# store holds (seeded here, so the test counts runs and steps, never the
# clock): a call with too little time stops at a step boundary, records its
# allocation and what each step left, and the next calls finish the plan.
#
#   cli_campaign_device.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
build=$(dirname "$kace")
source "$(dirname "$0")/lib_test.sh"
source "$(dirname "$0")/lib_campaign.sh"
campaign_standins device
quick=(--warmup 0.2 --window 0.3 --run-dir "$run_dir" --quiet)
device() { # MINUTES: one call; its output in $scratch/out, $scratch/err
    "$kace" campaign --device --minutes "$1" "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
}
ending() { sql "SELECT ending FROM campaign_allocations ORDER BY id DESC LIMIT 1"; }

# Workloads that log "NAME MPS-share" at each start, then report as the worker does.
for w in a:4000 b:2000 c:1000; do
    name=${w%%:*}
    cat >"$scratch/bin/probe-$name" <<EOS
#!/bin/sh
echo "$name \${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none}" >>"$scratch/starts.log"
exec "$scratch/bin/worker" report ${w#*:}
EOS
    chmod +x "$scratch/bin/probe-$name"
    "$kace" workload add "$name" -- "$scratch/bin/probe-$name" >/dev/null || fail "workload add $name"
done

# The plan: 1 time-sliced pair, 3 MPS pairs in the pool, and their 3 cold repeats.
printf '%s\n' "workloads a b c" "mode timeslice" "run a b" "mode mps" "pairs" >"$scratch/plan.txt"

# Usage: --device and --minutes go together; minutes are positive.
"$kace" campaign --device "$scratch/plan.txt" >/dev/null 2>&1
[ $? = 2 ] || fail "--device without --minutes is a usage error"
"$kace" campaign --minutes 3 "$scratch/plan.txt" >/dev/null 2>&1
[ $? = 2 ] || fail "--minutes without --device is a usage error"
"$kace" campaign --device --minutes 0 "$scratch/plan.txt" >/dev/null 2>&1
[ $? = 2 ] || fail "--minutes 0 is a usage error"
"$kace" campaign --device --minutes 3 --max-runs 2 "$scratch/plan.txt" >/dev/null 2>&1
[ $? = 2 ] || fail "--device with --max-runs is a usage error"
[ "$(sql "SELECT count(*) FROM campaign_allocations")" = 0 ] || fail "a usage error recorded an allocation"
# A bad plan: file:line:col and what was expected; no store is created for it.
printf '%s\n' "workloads a b" "paris" >"$scratch/bad.txt"
KACE_DB="$scratch/bad.db" "$kace" campaign --device --minutes 3 "$scratch/bad.txt" >/dev/null 2>"$scratch/err"
rc=$?
[ $rc = 1 ] && grep -q "bad.txt:2:1: unknown statement 'paris'" "$scratch/err" ||
    fail "bad plan: exit $rc: $(cat "$scratch/err")"
[ ! -e "$scratch/bad.db" ] || fail "bad plan: a store was created"

# Run times stored by earlier calls (1000 runs each, so this test's own runs
# barely move them): a time-sliced run 100 s, a pool run 50 s, a cold repeat 150 s.
sql "INSERT INTO campaign_plans(fingerprint, text, added_at) VALUES('seed', 'seed', 'then');
     INSERT INTO campaign_allocations(plan_id, started_at, deadline_at, ended_at, ending)
       VALUES(1, 'then', 'then', 'then', 'finished');
     INSERT INTO campaign_steps VALUES(1, 'timeslice', 1000, 0, 100000), (1, 'pool', 1000, 0, 50000),
       (1, 'cold-repeats', 1000, 0, 150000);" || fail "seed the run times"

# 1. 4 minutes (240 s): the time-sliced run (100 s); the pool's 3 x 50 s do not
#    fit the 140 s left but fit a call: left whole; the cold repeats (3 x 150 s,
#    more than a call) as many as fit: none. The call stops at a step boundary.
device 4
rc=$?
[ $rc = 0 ] || fail "call 1: exit $rc: $(cat "$scratch/err")"
grep -q "^step timeslice: 1 runs planned, 0 stored before, 1 measured in .* 0 left" "$scratch/out" ||
    fail "call 1: $(cat "$scratch/out")"
grep -q "^step pool: 3 runs planned, 0 stored before, 0 measured in .* 3 left for the next call (50.0 s a run, measured)" \
    "$scratch/out" || fail "call 1, pool: $(cat "$scratch/out")"
[ "$(sql "SELECT group_concat(set_name || ':' || status) FROM runs")" = "timeslice-pairs:ok" ] ||
    fail "call 1: runs $(sql "SELECT set_name, status FROM runs")"
[ "$(ending)" = deadline ] || fail "call 1: ending $(ending)"
[ "$(sql "SELECT count(*) FROM campaign_allocations a JOIN campaign_plans p ON p.id=a.plan_id
          WHERE a.id=2 AND p.path='$scratch/plan.txt' AND a.ended_at IS NOT NULL
          AND a.deadline_at > a.started_at")" = 1 ] || fail "call 1: allocation $(sql "SELECT * FROM campaign_allocations")"
[ "$(sql "SELECT group_concat(step || '=' || runs_done || '/' || runs_left, ' ') FROM
          (SELECT * FROM campaign_steps WHERE allocation_id=2 ORDER BY rowid)")" = \
    "timeslice=1/0 pool=0/3 cold-repeats=0/3" ] || fail "call 1: steps $(sql "SELECT * FROM campaign_steps")"
grep -q "campaign: 1 runs measured (1 ok, 0 failed), 6 left for the next call; ended: deadline" "$scratch/out" ||
    fail "call 1: summary $(tail -n 1 "$scratch/out")"
no_strays "call 1"

# A call killed -9 leaves its allocation open: the next call closes it as killed.
sql "INSERT INTO campaign_allocations(plan_id, started_at, deadline_at) VALUES(2, 'x', 'y')"
rm -f "$scratch/starts.log"

# 2. 4 minutes again: the pool (150 s), each workload started once; 90 s left
#    for the cold repeats, not enough for one.
device 4
rc=$?
[ $rc = 0 ] || fail "call 2: exit $rc: $(cat "$scratch/err")"
grep -q "1 earlier call ended without a word (killed)" "$scratch/out" || fail "call 2: $(head -n 2 "$scratch/out")"
[ "$(sql "SELECT ending FROM campaign_allocations WHERE id=3")" = killed ] || fail "call 2: the open row was not closed"
[ "$(sql "SELECT count(*) FROM runs WHERE set_name='pairs' AND status='ok'")" = 3 ] ||
    fail "call 2: pool runs $(sql "SELECT set_name, status FROM runs")"
[ "$(sort "$scratch/starts.log" | tr '\n' ,)" = "a 100,b 100,c 100," ] ||
    fail "call 2: starts $(tr '\n' , <"$scratch/starts.log") (want each pool member once)"
[ "$(ending)" = deadline ] || fail "call 2: ending $(ending)"
grep -q "^step cold-repeats: 3 runs planned, 0 stored before, 0 measured" "$scratch/out" ||
    fail "call 2: $(cat "$scratch/out")"
no_strays "call 2"

# 3. 8 minutes: the 3 cold repeats (450 s), each pair's processes started afresh;
#    the plan is done.
rm -f "$scratch/starts.log"
device 8
rc=$?
[ $rc = 0 ] || fail "call 3: exit $rc: $(cat "$scratch/err")"
[ "$(sql "SELECT count(*) FROM runs WHERE set_name='cold-pairs' AND status='ok'")" = 3 ] ||
    fail "call 3: cold runs $(sql "SELECT set_name, status FROM runs")"
[ "$(wc -l <"$scratch/starts.log")" = 6 ] || fail "call 3: starts $(tr '\n' , <"$scratch/starts.log")"
[ "$(ending)" = finished ] || fail "call 3: ending $(ending)"
grep -q "0 left for the next call; ended: finished" "$scratch/out" || fail "call 3: $(tail -n 1 "$scratch/out")"
no_strays "call 3"

# 4. Nothing left: nothing is measured, nothing started.
rm -f "$scratch/starts.log"
device 1
rc=$?
[ $rc = 0 ] || fail "call 4: exit $rc: $(cat "$scratch/err")"
[ ! -e "$scratch/starts.log" ] || fail "call 4 started $(cat "$scratch/starts.log")"
[ "$(sql "SELECT count(*) FROM runs")" = 7 ] || fail "call 4: $(sql "SELECT count(*) FROM runs") runs"
[ "$(ending)" = finished ] || fail "call 4: ending $(ending)"
# One plan row for the plan, however many calls; 4 calls of it and the killed one.
[ "$(sql "SELECT count(*) FROM campaign_plans WHERE path='$scratch/plan.txt'")" = 1 ] || fail "plans: $(sql "SELECT id, path FROM campaign_plans")"
[ "$(sql "SELECT group_concat(ending, ',') FROM (SELECT ending FROM campaign_allocations WHERE id > 1 ORDER BY id)")" = \
    "deadline,killed,deadline,finished,finished" ] || fail "allocations: $(sql "SELECT * FROM campaign_allocations")"
no_strays "call 4"

# 5. kill -9 in the middle of a call (after its first stored run): no stored run
#    is lost, its allocation is left open, and the next call closes it as killed
#    and measures exactly what is left.
export KACE_DB="$scratch/killed.db"
for w in a b c; do
    "$kace" workload add "$w" -- "$scratch/bin/probe-$w" >/dev/null || fail "killed: workload add $w"
done
setsid "$kace" campaign --device --minutes 60 "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do # a state, polled: the first run stored
    [ "$(sql "SELECT count(*) FROM runs" 2>/dev/null)" -ge 1 ] 2>/dev/null && break
    sleep 0.05
done
stored=$(sql "SELECT count(*) FROM runs")
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
for ((i = 0; i < 600; i++)); do # the workloads end on their own (kace's death ends them)
    pgrep -af "$marker" | grep -qv mps-control || break
    sleep 0.05
done
for p in $(pgrep -f "$marker" | grep -v mps-control); do kill -KILL "$p" 2>/dev/null; done
[ "$stored" -ge 1 ] || fail "killed: the call ended before a run was stored: $(cat "$scratch/err")"
[ "$(sql "PRAGMA integrity_check")" = ok ] || fail "killed: integrity $(sql "PRAGMA integrity_check")"
[ "$(sql "SELECT count(*) FROM campaign_allocations WHERE ending IS NULL AND ended_at IS NULL")" = 1 ] ||
    fail "killed: allocation $(sql "SELECT * FROM campaign_allocations")"
[ "$(sql "SELECT count(*) FROM runs")" -ge "$stored" ] || fail "killed: runs lost"
device 60
rc=$?
[ $rc = 0 ] || fail "after the kill: exit $rc: $(cat "$scratch/err")"
grep -q "1 earlier call ended without a word (killed)" "$scratch/out" || fail "after the kill: $(head -n 2 "$scratch/out")"
[ "$(sql "SELECT group_concat(ending, ',') FROM (SELECT ending FROM campaign_allocations ORDER BY id)")" = \
    "killed,finished" ] || fail "after the kill: allocations $(sql "SELECT * FROM campaign_allocations")"
[ "$(sql "SELECT count(*) || '/' || count(DISTINCT run_key) FROM runs WHERE status='ok'")" = "7/7" ] ||
    fail "after the kill: runs $(sql "SELECT set_name, status FROM runs")"
no_strays "after the kill"

# 6. The whole allocation from a catalog: stand-in "CUDA programs" (kace
#    profile's stand-in: a recording where the injection library would write
#    one) under a fake NVML whose MPS list holds kace's children. Call 1
#    profiles each workload alone (no MPS), drops the one that fails twice,
#    makes the plan, measures what its time holds and exports; call 2
#    resumes: no profile again, the same plan, more runs; a fix to the
#    dropped workload's code gets it profiled and the plan extended.
export KACE_DB="$scratch/catalog.db"
export KACE_NVML_LIBRARY="$build/tests/libfake_nvml_mps.so" KACE_FAKE_GPU_NAME="Stand-in GPU"
export KACE_CUPTI_LIBRARY="$scratch/libkace_cupti_placeholder.so"
: >"$KACE_CUPTI_LIBRARY"
sed 's/^clock monotonic/clock realtime/' "$(dirname "$0")/data/cupti/small.txt" >"$scratch/recording.txt"
standin() { # NAME HOW: a stand-in CUDA program; HOW "report RATE" or "crash RATE 0.1"
    cat >"$scratch/bin/sw-$1" <<EOS
#!/bin/sh
# A run started ahead waits at its CUDA start until kace opens its gate, as the
# injection library makes it wait (one byte down the FIFO).
if [ -n "\${KACE_CUPTI_GATE:-}" ]; then
    head -c 1 "\$KACE_CUPTI_GATE" >/dev/null || exit 75
    unset KACE_CUPTI_GATE
fi
if [ -n "\${CUDA_INJECTION64_PATH:-}" ]; then # under kace profile's injection library
    if [ "\${KACE_CUPTI_COUNTERS:-1}" = 0 ]; then
        sed '/^counters /d' "$scratch/recording.txt" >"\$KACE_CUPTI_OUTPUT"
    else
        cp "$scratch/recording.txt" "\$KACE_CUPTI_OUTPUT"
    fi
fi
echo "$1 \${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none}\${CUDA_INJECTION64_PATH:+ injected}\${CUDA_MPS_PIPE_DIRECTORY:+ mps-env}" >>"$scratch/starts.log"
exec "$scratch/bin/worker" $2
EOS
    chmod +x "$scratch/bin/sw-$1"
}
for w in a:4000 b:2000 c:1000 d:3000; do standin "${w%%:*}" "report ${w#*:}"; done
standin bad "crash 1000 0.1"
{
    echo "# stand-ins: NAME KIND COMMAND (@W@: the catalog's folder)"
    for w in a b c d bad; do echo "s$w""_batch1-inf cmd @W@/sw-$w"; done
} >"$scratch/bin/catalog.txt"
catalog() { # MINUTES: one call from the catalog; its output in $scratch/out, $scratch/err
    "$kace" campaign --device --minutes "$1" --catalog "$scratch/bin/catalog.txt" --out "$scratch/dataset" \
        --profile-warmup 0.2 --profile-window 0.3 "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
}
line_of() { grep -n -m 1 "$1" "$scratch/out" | cut -d: -f1; }
steps_of() { # ALLOCATION: its steps, in order
    sql "SELECT group_concat(step, ' ') FROM (SELECT step FROM campaign_steps WHERE allocation_id=$1 ORDER BY rowid)"
}

# Usage: --catalog goes with --device and takes no PLAN.
"$kace" campaign --catalog "$scratch/bin/catalog.txt" "$scratch/plan.txt" >/dev/null 2>&1
[ $? = 2 ] || fail "--catalog without --device is a usage error"
"$kace" campaign --device --minutes 3 --catalog "$scratch/bin/catalog.txt" "$scratch/plan.txt" >/dev/null 2>&1
[ $? = 2 ] || fail "--catalog with a PLAN is a usage error"
# A bad catalog: file:line:col; no store is created for it.
printf '%s\n' "ok_batch1-inf cmd /bin/true" "x_batch1-inf gpu /bin/true" >"$scratch/bad-catalog.txt"
KACE_DB="$scratch/bad2.db" "$kace" campaign --device --minutes 3 --catalog "$scratch/bad-catalog.txt" >/dev/null \
    2>"$scratch/err"
rc=$?
[ $rc = 1 ] && grep -q "bad-catalog.txt:2:" "$scratch/err" || fail "bad catalog: exit $rc: $(cat "$scratch/err")"
[ ! -e "$scratch/bad2.db" ] || fail "bad catalog: a store was created"

# A call too short for the probe's and a profile's time needs leaves both whole
# to the next call (their rows say what is left) and still exports.
KACE_DB="$scratch/short.db" catalog 0.4
rc=$?
[ $rc = 0 ] || fail "short catalog call: exit $rc: $(cat "$scratch/err")"
[ "$(KACE_DB="$scratch/short.db" sql "SELECT group_concat(step || '=' || runs_done || '/' || runs_left, ' ')
                                      FROM (SELECT * FROM campaign_steps ORDER BY rowid)")" = \
    "probe=0/1 profile=0/5 export=0/0" ] || fail "short catalog call: $(cat "$scratch/out")"
grep -q "^step probe: needs 30 s, the call has 14 s left: left whole to the next call" "$scratch/out" ||
    fail "short catalog call: $(cat "$scratch/out")"
[ "$(KACE_DB="$scratch/short.db" ending)" = deadline ] || fail "short catalog call: ending"
# A catalog whose workloads cannot make a plan (fewer than 3 profiled) says so.
grep -E '^s(a|bad)_' "$scratch/bin/catalog.txt" >"$scratch/two.txt"
# Without --window, the probe's window is the call's.
KACE_DB="$scratch/two.db" "$kace" campaign --device --minutes 3 --catalog "$scratch/two.txt" \
    --workloads-dir "$scratch/bin" --profile-warmup 0.2 --profile-window 0.3 --warmup 0.2 --run-dir "$run_dir" \
    --quiet >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] && grep -q "warning: 1 catalog workloads profiled (1 dropped): a plan needs 3" "$scratch/err" ||
    fail "two-workload catalog: exit $rc: $(cat "$scratch/err")"
grep -q "^probe: this call's pool holds at most [0-9]* members; its window is [0-9.]* s (the probe's)" "$scratch/out" ||
    fail "two-workload catalog: $(grep probe "$scratch/out")"
# Without --pool-members the probe sizes the pool past the default 16 when
# it counted the server's clients (a CUDA C workload is its client): counted
# up to 2 past the most (32), all taken, the pool the most. (A limit met,
# the pool 2 below it: test_probe.)
{ echo "sa_batch1-inf cuda @W@/sw-a"; echo "sb_batch1-inf cmd @W@/sw-b"; } >"$scratch/bin/clients.txt"
KACE_DB="$scratch/clients.db" "$kace" campaign --device --minutes 1 --catalog "$scratch/bin/clients.txt" \
    --workloads-dir "$scratch/bin" --profile-warmup 0.2 --profile-window 0.3 --warmup 0.2 --run-dir "$run_dir" \
    --quiet >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "pool past 16: exit $rc: $(cat "$scratch/err")"
grep -q "^probe: this call's pool holds at most 32 members" "$scratch/out" ||
    fail "pool past 16: $(grep probe "$scratch/out")"
[ "$(KACE_DB="$scratch/clients.db" sql "SELECT clients_accepted || ' ' || client_refused || ' ' || pool_members
                                        FROM campaign_probes")" = "34 0 32" ] ||
    fail "pool past 16: probe $(KACE_DB="$scratch/clients.db" sql "SELECT * FROM campaign_probes")"

# Run times stored by earlier calls, as above: a time-sliced run 30 s, a pool run 50 s, a cold repeat 1000 s.
"$kace" workload add seed_batch1-inf -- /bin/true >/dev/null || fail "catalog: create the store"
sql "INSERT INTO campaign_plans(fingerprint, text, added_at) VALUES('seed', 'seed', 'then');
     INSERT INTO campaign_allocations(plan_id, started_at, deadline_at, ended_at, ending)
       VALUES(1, 'then', 'then', 'then', 'finished');
     INSERT INTO campaign_steps VALUES(1, 'timeslice', 1000, 0, 30000), (1, 'pool', 1000, 0, 50000),
       (1, 'cold-repeats', 1000, 0, 1000000);" || fail "catalog: seed the run times"

# Call 1, 3 minutes: profiles, the plan, its 3 time-sliced pairs (90 s), a pool run or so, export.
rm -f "$scratch/starts.log"
catalog 3
rc=$?
[ $rc = 0 ] || fail "catalog call 1: exit $rc: $(cat "$scratch/err")"
want="sa_batch1-inf:ok sb_batch1-inf:ok sc_batch1-inf:ok sd_batch1-inf:ok"
want+=" sbad_batch1-inf:failed sbad_batch1-inf:failed"
[ "$(sql "SELECT group_concat(workload || ':' || status, ' ') FROM (SELECT * FROM campaign_profiles ORDER BY id)")" = \
    "$want" ] ||
    fail "catalog call 1: profile tries $(sql "SELECT workload, status FROM campaign_profiles")"
[ "$(sql "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
          WHERE p.metric='exclusive_throughput' AND w.name LIKE 's_\_batch1-inf' ESCAPE '\'")" = 4 ] ||
    fail "catalog call 1: profiles $(sql "SELECT w.name, p.metric FROM profiles p
                                          JOIN workloads w ON w.id=p.workload_id")"
grep -q "profile sbad_batch1-inf: failed 2 times with this command and code: dropped" "$scratch/out" ||
    fail "catalog call 1: the failing workload was not dropped: $(cat "$scratch/out")"
# Profiled alone: no MPS share in the environment of any run under the injection library
# (but for runs started ahead, held at the gate: they have an MPS environment, a profile has none).
[ "$(grep -c ' injected$' "$scratch/starts.log")" -ge 4 ] &&
    ! grep -v -e ' none injected$' -e ' mps-env$' "$scratch/starts.log" | grep -q injected || fail "catalog call 1: starts $(tr '\n' , <"$scratch/starts.log")"
# The first minute's probe, before the profiles: its findings stored.
[ "$(sql "SELECT count(*) FROM campaign_probes
          WHERE allocation_id=2 AND pool_members > 0 AND evidence LIKE 'probe: %'")" = 1 ] ||
    fail "catalog call 1: probe $(sql "SELECT * FROM campaign_probes") $(grep probe "$scratch/out")"
[ "$(sql "SELECT count(*) FROM campaign_plan_kinds k JOIN campaign_plans p ON p.id=k.plan_id
          WHERE k.kind='made' AND p.text LIKE '%sa_batch1-inf%' AND p.text NOT LIKE '%sbad%'")" = 1 ] ||
    fail "catalog call 1: plan $(sql "SELECT * FROM campaign_plan_kinds")"
[ "$(sql "SELECT count(*) FROM runs WHERE set_name LIKE 'timeslice-%' AND status='ok'")" = 3 ] ||
    fail "catalog call 1: runs $(sql "SELECT set_name, status FROM runs")"
# In order: the profiles, then the plan, then the runs.
p=$(line_of "^profile sd_batch1-inf: stored"); m=$(line_of "^plan .*: made from 4 profiled workloads (1 dropped)")
t=$(line_of "^step timeslice: ")
[ -n "$p" ] && [ -n "$m" ] && [ -n "$t" ] && [ "$p" -lt "$m" ] && [ "$m" -lt "$t" ] ||
    fail "catalog call 1: order $p $m $t: $(cat "$scratch/out")"
[ "$(steps_of 2)" = \
    "probe profile plan timeslice pool cold-repeats export" ] ||
    fail "catalog call 1: steps $(sql "SELECT * FROM campaign_steps WHERE allocation_id=2")"
[ "$(ending)" = deadline ] || fail "catalog call 1: ending $(ending)"
# No CUDA C workload in the catalog: the server's clients not counted, the
# pool stays at the default.
grep -q "^probe: this call's pool holds at most 16 members; its window is 0.30 s$" "$scratch/out" ||
    fail "catalog call 1: --window given, the probe's used: $(grep probe "$scratch/out")"
ls "$scratch"/dataset/*/*.csv >/dev/null 2>&1 && [ -s "$scratch/dataset/README.md" ] ||
    fail "catalog call 1: export $(ls -R "$scratch/dataset" 2>&1)"
no_strays "catalog call 1"

# Call 2, with the catalog and its programs unpacked elsewhere: nothing
# profiled or planned again (a workload's key is its line as written and its
# files' contents); the stored commands follow; more of the plan's runs.
runs_before=$(sql "SELECT count(*) FROM runs")
mkdir -p "$scratch/moved" && cp -p "$scratch"/bin/sw-* "$scratch/bin/catalog.txt" "$scratch/moved/" || fail "move"
"$kace" campaign --device --minutes 2 --catalog "$scratch/moved/catalog.txt" --out "$scratch/dataset" \
    --profile-warmup 0.2 --profile-window 0.3 "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
# The 4 profiled workloads' commands (sbad, never profiled, has none yet).
grep -q "^campaign: 4 stored commands updated to the catalog's" "$scratch/out" ||
    fail "catalog call 2: commands $(head -n 3 "$scratch/out")"
[ "$(sql "SELECT count(*) FROM workload_commands WHERE argv LIKE '%/moved/sw-%'")" = 4 ] ||
    fail "catalog call 2: stored commands $(sql "SELECT argv FROM workload_commands")"
[ $rc = 0 ] || fail "catalog call 2: exit $rc: $(cat "$scratch/err")"
[ "$(sql "SELECT count(*) FROM campaign_profiles")" = 6 ] || fail "catalog call 2: profiled again"
[ "$(sql "SELECT count(*) FROM campaign_plan_kinds WHERE kind='made'")" = 1 ] || fail "catalog call 2: a new plan"
[ "$(sql "SELECT count(*) FROM campaign_probes")" = 1 ] || fail "catalog call 2: probed again"
[ "$(sql "SELECT count(*) FROM runs")" -gt "$runs_before" ] || fail "catalog call 2: no run: $(cat "$scratch/out")"
[ "$(steps_of 3)" = \
    "timeslice pool cold-repeats export" ] ||
    fail "catalog call 2: steps $(sql "SELECT * FROM campaign_steps WHERE allocation_id=3")"
no_strays "catalog call 2"

# A fix to the dropped workload's code: it is profiled and joins the plan.
standin bad "report 1500"
catalog 2
rc=$?
[ $rc = 0 ] || fail "catalog call 3: exit $rc: $(cat "$scratch/err")"
[ "$(sql "SELECT status FROM campaign_profiles ORDER BY id DESC LIMIT 1")" = ok ] ||
    fail "catalog call 3: $(sql "SELECT workload, status FROM campaign_profiles")"
[ "$(sql "SELECT count(*) FROM campaign_plan_kinds k JOIN campaign_plans p ON p.id=k.plan_id
          WHERE k.kind='made' AND p.text LIKE '%sbad_batch1-inf%'")" = 1 ] ||
    fail "catalog call 3: the plan was not extended: $(cat "$scratch/out")"
grep -q "^plan .*: extended from 5 profiled workloads" "$scratch/out" || fail "catalog call 3: $(cat "$scratch/out")"
no_strays "catalog call 3"

# 6b. kill -9 during a catalog call's profiles: every stored profile stays,
#     the allocation is left open, and the next call closes it as killed,
#     profiles only what is left and goes on to the plan.
export KACE_DB="$scratch/killed-catalog.db"
setsid "$kace" campaign --device --minutes 3 --catalog "$scratch/bin/catalog.txt" --profile-warmup 0.2 \
    --profile-window 0.3 "${quick[@]}" >"$scratch/out" 2>"$scratch/err" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do # a state, polled: the first profile stored
    [ "$(sql "SELECT count(*) FROM campaign_profiles WHERE status='ok'" 2>/dev/null)" -ge 1 ] 2>/dev/null && break
    sleep 0.05
done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
for ((i = 0; i < 600; i++)); do # the workloads end on their own (kace's death ends them)
    pgrep -af "$marker" | grep -qv mps-control || break
    sleep 0.05
done
for p in $(pgrep -f "$marker" | grep -v mps-control); do kill -KILL "$p" 2>/dev/null; done
profiled=$(sql "SELECT count(*) FROM profiles WHERE metric='exclusive_throughput'")
[ "$profiled" -ge 1 ] || fail "killed catalog call: ended before a profile was stored: $(cat "$scratch/err")"
[ "$(sql "PRAGMA integrity_check")" = ok ] || fail "killed catalog call: integrity"
[ "$(sql "SELECT count(*) FROM campaign_allocations WHERE ending IS NULL")" = 1 ] ||
    fail "killed catalog call: allocation $(sql "SELECT * FROM campaign_allocations")"
catalog 1
rc=$?
[ $rc = 0 ] || fail "after the killed catalog call: exit $rc: $(cat "$scratch/err")"
grep -q "1 earlier call ended without a word (killed)" "$scratch/out" ||
    fail "after the kill: $(head -n 2 "$scratch/out")"
[ "$(sql "SELECT count(*) FROM profiles WHERE metric='exclusive_throughput'")" = 5 ] && # sbad is fixed by now
    [ "$(sql "SELECT count(*) FROM (SELECT workload FROM campaign_profiles WHERE status='ok' GROUP BY workload
                                    HAVING count(*) > 1)")" = 0 ] ||
    fail "after the kill: profiles $(sql "SELECT workload, status FROM campaign_profiles")"
[ "$(sql "SELECT count(*) FROM campaign_plan_kinds WHERE kind='made'")" = 1 ] || fail "after the kill: no plan"
no_strays "after the killed catalog call"

# 7. ncu, last: once the plan is measured, on each workload, with a stand-in
#    ncu whose --help is long (a reader that closed early would kill it by
#    SIGPIPE and the boost-state option would be lost); its CSV stored.
export KACE_DB="$scratch/ncu.db"
unset KACE_NVML_LIBRARY
for w in a b; do "$kace" workload add "$w" -- "$scratch/bin/probe-$w" >/dev/null || fail "ncu: workload add $w"; done
printf '%s\n' "workloads a b" "run a b" >"$scratch/plan-ncu.txt"
cat >"$scratch/bin/ncu" <<EOS
#!/bin/sh
if [ "\$1" = --help ]; then
    echo "usage: ncu [options] [program] [program-arguments]"
    for i in \$(seq 300); do echo "  --option-\$i arg    an option of the stand-in"; done
    echo "  --pipeline-boost-state arg    dynamic or stable"
    exit 0
fi
echo "\$*" >>"$scratch/ncu.log"
args=" \$* "
for want in "--kill yes" "--clock-control none" "--launch-count" "--section" "--pipeline-boost-state dynamic"; do
    case \$args in *" \$want "*) ;; *) echo "stand-in ncu: no \$want" >&2; exit 1 ;; esac
done
while [ \$# -gt 0 ] && [ "\$1" != -- ]; do shift; done
shift
# The application runs until its launches are profiled, then ncu ends it (--kill yes)
# and prints the results.
"\$@" </dev/null &
kill -TERM \$! && wait \$!
echo '"ID","Kernel Name","Metric Name","Metric Value"'
echo '"0","gemm","sm__throughput.avg.pct_of_peak_sustained_elapsed","50.0"'
EOS
chmod +x "$scratch/bin/ncu"
ncu_call() {
    "$kace" campaign --device --minutes 2 --ncu "$scratch/bin/ncu" --out "$scratch/ncu-out" "$scratch/plan-ncu.txt" \
        "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
}
ncu_call
rc=$?
[ $rc = 0 ] || fail "ncu call 1: exit $rc: $(cat "$scratch/err")"
[ "$(sql "SELECT group_concat(workload || ':' || status, ' ') FROM (SELECT * FROM campaign_ncu ORDER BY id)")" = \
    "a:ok b:ok" ] ||
    fail "ncu call 1: $(sql "SELECT workload, status, output FROM campaign_ncu") $(cat "$scratch/out")"
[ "$(sql "SELECT count(*) FROM campaign_ncu WHERE output LIKE '%sm__throughput%'")" = 2 ] || fail "ncu call 1: output"
[ "$(grep -c -- "--pipeline-boost-state dynamic" "$scratch/ncu.log")" = 2 ] ||
    fail "ncu call 1: ncu ran as $(cat "$scratch/ncu.log")"
# ncu after the runs: the plan's run and its cold repeat are stored first.
n=$(line_of "^ncu a: "); c=$(line_of "^step cold-repeats: ")
[ -n "$n" ] && [ -n "$c" ] && [ "$c" -lt "$n" ] || fail "ncu call 1: order $c $n: $(cat "$scratch/out")"
[ "$(ending)" = finished ] || fail "ncu call 1: ending $(ending)"
ncu_call
rc=$?
[ $rc = 0 ] && [ "$(sql "SELECT count(*) FROM campaign_ncu")" = 2 ] || fail "ncu call 2: exit $rc, ncu ran again"
no_strays "ncu"

finish cli_campaign_device
