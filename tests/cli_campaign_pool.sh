#!/usr/bin/env bash
# kace campaign --pool without a GPU: stand-in workloads (tests/helpers/worker.c)
# under the stand-in MPS control daemon (tests/helpers/mps_standin.c). The MPS
# runs are measured by one process per (workload, MPS share), each started
# once; the time-sliced run comes after them, started afresh; a member that
# crashes fails its run, and the next MPS run gets a fresh daemon and pool.
# Starts are counted by a probe that logs each start of its workload.
#
#   cli_campaign_pool.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
build=$(dirname "$kace")
source "$(dirname "$0")/lib_test.sh"
source "$(dirname "$0")/lib_campaign.sh"
campaign_standins pool
quick=(--warmup 0.2 --window 0.3 --run-dir "$run_dir" --quiet)

# A workload that logs "NAME MPS-share" at each start, then reports as the worker does.
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
"$kace" workload add crasher -- "$scratch/bin/worker" crash 1000 0.3 >/dev/null || fail "workload add crasher"

# 1. 3 pairs x 2 repetitions and a split at 100% shares, plus a time-sliced pair in between:
#    every MPS run from one start of a, b and c; then the time-sliced one.
cat >"$scratch/plan.txt" <<'EOF'
workloads a b c
repeat 2
pairs
repeat 1
mode timeslice
run a b
mode mps
set solo-like
run a c
EOF
"$kace" campaign --pool "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "pool campaign: exit $rc: $(cat "$scratch/err")"
[ "$(sql "SELECT count(*) FROM runs WHERE status='ok'")" = 8 ] || fail "pool campaign: $(sql 'SELECT count(*) FROM runs') runs"
grep -q "pool: 7 MPS runs measured by 3 member processes, each started once" "$scratch/out" ||
    fail "pool campaign: $(cat "$scratch/out")"
printf '%s\n' "a 100" "b 100" "c 100" "a none" "b none" >"$scratch/starts.want"
sort "$scratch/starts.log" >"$scratch/starts.got"
sort "$scratch/starts.want" | cmp -s - "$scratch/starts.got" ||
    fail "pool campaign: starts $(tr '\n' ',' <"$scratch/starts.log") (want each MPS member once, then the time-sliced pair)"
# the time-sliced pair came last
[ "$(tail -n 2 "$scratch/starts.log" | sort | tr '\n' ',')" = "a none,b none," ] ||
    fail "pool campaign: order $(tr '\n' ',' <"$scratch/starts.log")"
# a's throughput is the worker's rate in each of its 6 runs, warm or cold
[ "$(sql "SELECT count(*) FROM run_members m JOIN workloads w ON w.id=m.workload_id WHERE w.name='a' AND m.throughput BETWEEN 3600 AND 4400")" = 6 ] ||
    fail "pool campaign: a's throughput $(sql "SELECT group_concat(m.throughput) FROM run_members m JOIN workloads w ON w.id=m.workload_id WHERE w.name='a'")"
no_strays "pool campaign"

# 2. A bounded pool: 2 members at most, so each pair whose members are not both in
#    the pool gets a fresh one (a+b, then a+c, then b+c: 6 starts for 3 runs).
printf '%s\n' "workloads a b c" "set bounded" "pairs" >"$scratch/bounded.txt"
rm -f "$scratch/starts.log"
"$kace" campaign --pool --pool-members 2 "$scratch/bounded.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "bounded pool: exit $rc: $(cat "$scratch/err")"
grep -q "pool: 3 MPS runs measured by 6 member processes" "$scratch/out" || fail "bounded pool: $(cat "$scratch/out")"
[ "$(wc -l <"$scratch/starts.log")" = 6 ] || fail "bounded pool: starts $(tr '\n' ',' <"$scratch/starts.log")"
[ "$(sql "SELECT count(*) FROM runs WHERE set_name='bounded' AND status='ok'")" = 3 ] || fail "bounded pool: runs"
"$kace" campaign --pool --pool-members 0 "$scratch/bounded.txt" >/dev/null 2>"$scratch/err"
[ $? = 2 ] || fail "--pool-members 0: $(cat "$scratch/err")"
no_strays "bounded pool"

# 3. A member that crashes fails its run (recorded); the next MPS run gets a
#    fresh daemon and a fresh pool, and is measured.
printf '%s\n' "workloads crasher b c" "set crash-pool" "run b crasher" "run b c" >"$scratch/crash.txt"
rm -f "$scratch/starts.log"
"$kace" campaign --pool "$scratch/crash.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "crash pool: exit $rc: $(cat "$scratch/err")"
grep -q "failed under MPS: the next MPS run starts a fresh MPS daemon" "$scratch/err" ||
    fail "crash pool: $(cat "$scratch/err")"
[ "$(sql "SELECT status FROM runs WHERE set_name='crash-pool' ORDER BY id" | tr '\n' ,)" = "failed,ok," ] ||
    fail "crash pool: $(sql "SELECT status FROM runs WHERE set_name='crash-pool'")"
# b started twice (the first pool, then the fresh one), c with the first pool and again
[ "$(grep -c '^b 100' "$scratch/starts.log")" = 2 ] || fail "crash pool: starts $(tr '\n' ',' <"$scratch/starts.log")"
no_strays "crash pool"

finish cli_campaign_pool
