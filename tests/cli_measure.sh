#!/usr/bin/env bash
# kace workload / measure / campaign end to end, without a GPU: real stand-in
# workloads (tests/helpers/worker.c) under the stand-in MPS control daemon
# (tests/helpers/mps_standin.c). kace is interrupted with SIGINT, SIGTERM and
# SIGKILL midway; after each: no process of the test is left, the store holds
# no half-written run, and a rerun of the campaign continues without
# duplicates.
#
#   cli_measure.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
build=$(dirname "$kace")
# Runs the test in a process group of its own, killed whole at the end.
source "$(dirname "$0")/lib_test.sh"
rm -rf "$scratch" && mkdir -p "$scratch/bin" || exit 1
# Copies under the scratch folder: every process of this test has it in its
# command line, so pgrep -f finds strays of this test and of no other.
cp "$build/tests/kace-test-worker" "$scratch/bin/worker" || exit 1
cp "$build/tests/kace-test-mps-control" "$scratch/bin/mps-control" || exit 1
marker="$scratch/bin/"
export KACE_DB="$scratch/kace.db"
export KACE_MPS_CONTROL="$scratch/bin/mps-control"
export KACE_TEST_MPS_MODE=normal
run_dir=$(mktemp -d /tmp/kace-cli-measure-XXXXXX)
# On exit, whatever of this test is still running (only after a failure) is ended by id.
trap 'kill_pids; for p in $(pgrep -f "$marker"); do kill -KILL "$p" 2>/dev/null; done; rm -rf "$run_dir"' EXIT
quick=(--warmup 0.2 --window 0.3 --run-dir "$run_dir")

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
sql() { sqlite3 -cmd ".timeout 5000" "$KACE_DB" "$1"; }
# No process of this test may outlive a kace command (a leak stays: waiting up
# to 5 s for exits that a loaded machine delays costs nothing when none is left).
no_strays() {
    local left
    for _ in $(seq 50); do
        left=$(pgrep -f "$marker") || break
        sleep 0.1
    done
    left=$(pgrep -af "$marker")
    [ -z "$left" ] || fail "$1: processes left behind: $left"
}
# Every stored run has exactly its k members.
whole_runs() {
    local half
    half=$(sql "SELECT count(*) FROM runs r WHERE k != (SELECT count(*) FROM run_members m WHERE m.run_id=r.id)")
    [ "$half" = 0 ] || fail "$1: $half half-written runs"
    local dup
    dup=$(sql "SELECT count(*) - count(DISTINCT run_key) FROM runs")
    [ "$dup" = 0 ] || fail "$1: $dup duplicate runs"
}
# Waits until a worker runs (kace is measuring), at most 30 s (starting kace and
# the stand-in MPS daemon under ASan on a loaded machine takes seconds).
wait_for_workers() {
    for _ in $(seq 300); do
        pgrep -f "${marker}worker" >/dev/null && return 0
        sleep 0.1
    done
    fail "no workload started"
}

"$kace" workload add fast -- "$scratch/bin/worker" report 4000 >/dev/null || fail "workload add fast"
"$kace" workload add slow -- "$scratch/bin/worker" report 1000 >/dev/null || fail "workload add slow"
"$kace" workload add medium -- "$scratch/bin/worker" report 2000 >/dev/null || fail "workload add medium"
# These two do not speak the control channel (env -u: the worker's helper then sees none), so
# kace's SIGTERM, the fallback, stops them: one ignores it, one has a handler of its own.
"$kace" workload add stubborn -- env -u KACE_CONTROL_FD "$scratch/bin/worker" ignore-term 1000 >/dev/null ||
    fail "workload add stubborn"
"$kace" workload add handler -- env -u KACE_CONTROL_FD "$scratch/bin/worker" own-handler 1000 >/dev/null ||
    fail "workload add handler"
"$kace" workload add crasher -- "$scratch/bin/worker" crash 1000 0.3 >/dev/null || fail "workload add crasher"
[ "$("$kace" workload list | wc -l)" = 6 ] || fail "workload list"
"$kace" workload add "bad name" -- true 2>/dev/null && fail "a name with a space was accepted"

# 1. A pair under MPS with a split: stored whole, daemon quit.
out=$("$kace" measure fast slow --mps-pct 30,70 "${quick[@]}" 2>"$scratch/err")
rc=$?
[ $rc = 0 ] || fail "measure ok: exit $rc: $(cat "$scratch/err")"
grep -q "): ok" <<<"$out" || fail "measure ok: output: $out"
# The run's length and its members' start (the worker reports at once): the start is a
# part of the run, under a second here.
grep -Eq '\): ok in [0-9]+\.[0-9] s \(every member.s first report within 0\.[0-9] s of its start\)$' <<<"$out" ||
    fail "measure ok: no run length and start time: $(head -1 <<<"$out")"
grep -q $'\r' "$scratch/err" && fail "a progress bar was drawn into a pipe"
[ "$(sql "SELECT group_concat(m.mps_pct || ':' || m.status, ' ') FROM run_members m")" = "30:ok 70:ok" ] ||
    fail "measure ok: members $(sql 'SELECT * FROM run_members')"
# The stand-in reports 4000 samples/s (10% slack: the machine may be loaded).
[ "$(sql "SELECT throughput BETWEEN 3600 AND 4400 FROM run_members WHERE slot=0")" = 1 ] ||
    fail "measure ok: throughput $(sql 'SELECT throughput FROM run_members WHERE slot=0')"
grep -q "] quit" "$run_dir/log/control.log" || fail "the daemon never got 'quit'"
no_strays "measure ok"
whole_runs "measure ok"
# The same pair again is its next repetition.
"$kace" measure fast slow --mps-pct 30,70 "${quick[@]}" >/dev/null 2>&1 || fail "second measurement"
[ "$(sql "SELECT group_concat(repetition) FROM runs")" = "0,1" ] || fail "repetitions: $(sql 'SELECT repetition FROM runs')"

# 1b. Alone under MPS at a multiple of 10%: a solo run that is also the
# workload's exclusive throughput at that share (exclusive_mps50); measured
# again, the new value replaces it. At 35% or time-sliced: the run only.
excl() {
    sql "SELECT group_concat(p.metric || '=' || (p.value BETWEEN 3600 AND 4400)) FROM profiles p JOIN workloads w \
         ON w.id = p.workload_id WHERE w.name = 'fast' AND p.metric LIKE 'exclusive_mps%'"
}
for i in 1 2; do
    out=$("$kace" measure fast --mps-pct 50 "${quick[@]}" 2>"$scratch/err") || fail "solo at 50% ($i): $(cat "$scratch/err")"
    grep -q "stored as fast's exclusive_mps50 (its exclusive throughput at 50% MPS)" <<<"$out" || fail "solo ($i): $out"
    [ "$(excl)" = "exclusive_mps50=1" ] || fail "solo ($i): profile values $(excl)"
done
[ "$(sql "SELECT count(*) FROM runs WHERE set_name = 'solo' AND k = 1")" = 2 ] || fail "solo runs: $(sql 'SELECT * FROM runs')"
out=$("$kace" measure fast --mps-pct 35 "${quick[@]}" 2>"$scratch/err") || fail "solo at 35%: $(cat "$scratch/err")"
grep -q "stored as" <<<"$out" && fail "a 35% run was stored as a curve point: $out"
"$kace" measure fast --no-mps "${quick[@]}" >"$scratch/out" 2>&1 || fail "solo time-sliced: $(cat "$scratch/out")"
grep -q "stored as" "$scratch/out" && fail "a time-sliced run was stored as a curve point"
[ "$(excl)" = "exclusive_mps50=1" ] || fail "after 35% and time-slicing: $(excl)"
no_strays "solo"
whole_runs "solo"
# The dataset export (kace export --dataset): the curve as an "exclusive by MPS %" file
# that kace imports, and no solo run among the colocation files.
"$kace" export --dataset --quiet "$scratch/export" || fail "kace export --dataset"
head -1 "$scratch/export/profiles/exclusive-by-mps.csv" | grep -qx "workload,50" ||
    fail "exclusive-by-mps.csv: $(cat "$scratch/export/profiles/exclusive-by-mps.csv")"
grep -q "^fast,[34][0-9][0-9][0-9]" "$scratch/export/profiles/exclusive-by-mps.csv" || fail "fast's exclusive_mps50 not exported"
ls "$scratch/export/colocations" | grep -Eq "^(k1|solo|mps-splits)\.csv$" &&
    ! grep -q "^workload1,workload2," "$scratch/export/colocations/mps-splits.csv" && fail "a solo run was exported as a colocation"
"$kace" import --db "$scratch/reimport.db" --create-workloads "$scratch/export/profiles/exclusive-by-mps.csv" >/dev/null 2>"$scratch/err" ||
    fail "the exported curve does not import: $(cat "$scratch/err")"

# 2. A crash is recorded as such, its partner stopped; exit status 1.
"$kace" measure slow crasher --warmup 1 --window 0.3 --run-dir "$run_dir" >"$scratch/out" 2>&1
rc=$?
[ $rc = 1 ] || fail "measure crash: exit $rc"
[ "$(sql "SELECT r.status || ':' || group_concat(m.status, ',') FROM runs r JOIN run_members m ON m.run_id=r.id \
          WHERE r.id=(SELECT max(id) FROM runs)")" = "failed:stopped,crashed" ] || fail "measure crash: $(cat "$scratch/out")"
no_strays "measure crash"
# How each process ended is stored with its member: the partner stopped at its next report
# (the step-boundary stop, asked for on the control channel), the crasher on its own; ok
# members of earlier runs the same way.
ends=$(sql "SELECT group_concat(m.detail, '|') FROM run_members m WHERE m.run_id=(SELECT max(id) FROM runs)")
[[ "$ends" == *"(stopped at its next report after kace's stop message)|"*"(killed by signal 6 on its own)" ]] ||
    fail "measure crash: how the members ended: $ends"
[ "$(sql "SELECT count(*) FROM run_members WHERE status='ok' AND detail NOT LIKE 'stopped at its next report after %'")" = 0 ] ||
    fail "ok members that did not stop at their next report: $(sql "SELECT DISTINCT detail FROM run_members WHERE status='ok'")"

# 3. Bad input: clear errors, nothing stored.
runs_before=$(sql "SELECT count(*) FROM runs")
"$kace" measure fast slow --mps-pct 50,x 2>"$scratch/err"
[ $? = 2 ] && grep -q -- "--mps-pct:1:4: expected an MPS percentage" "$scratch/err" || fail "bad --mps-pct: $(cat "$scratch/err")"
"$kace" measure fast nobody 2>"$scratch/err"
[ $? = 1 ] && grep -q "kace workload add nobody" "$scratch/err" || fail "unknown workload: $(cat "$scratch/err")"
KACE_TEST_MPS_MODE=refuse "$kace" measure fast slow "${quick[@]}" 2>"$scratch/err"
[ $? = 1 ] && grep -q "already running" "$scratch/err" || fail "daemon refusing to start: $(cat "$scratch/err")"
[ "$(sql "SELECT count(*) FROM runs")" = "$runs_before" ] || fail "bad input stored something"
no_strays "bad input"

# 4. Interrupted midway (SIGINT, then SIGTERM): nothing recorded, workloads
#    (one ignores SIGTERM) and daemon gone, exit 128+N.
for sig in INT TERM; do
    "$kace" measure fast stubborn --warmup 0.2 --window 30 --run-dir "$run_dir" >/dev/null 2>"$scratch/err" &
    pid=$!
    wait_for_workers
    # Both members running (the event, not a pause): kace is midway through the run.
    for _ in $(seq 300); do [ "$(pgrep -cf "${marker}worker")" -ge 2 ] && break; sleep 0.1; done
    kill -s $sig $pid
    wait $pid
    rc=$?
    want=$((128 + $(kill -l $sig)))
    [ $rc = $want ] || fail "SIG$sig: exit $rc, expected $want: $(cat "$scratch/err")"
    grep -q "nothing recorded" "$scratch/err" || fail "SIG$sig: $(cat "$scratch/err")"
    [ "$(sql "SELECT count(*) FROM runs")" = "$runs_before" ] || fail "SIG$sig: a run was recorded"
    no_strays "SIG$sig"
done

# 5. The progress bar on a terminal.
if script -qec "true" /dev/null >/dev/null 2>&1; then
    script -qec "'$kace' measure fast slow --set tty ${quick[*]}" /dev/null >"$scratch/tty" 2>&1
    grep -q "\[#" "$scratch/tty" || fail "no progress bar on a terminal: $(head -c 300 "$scratch/tty")"
    no_strays "terminal"
fi

# 6. A campaign: 3 pairs x 2 repetitions + 2 splits + 1 time-sliced pair = 9 runs.
cat >"$scratch/plan.txt" <<'EOF'
workloads fast slow medium
repeat 2
pairs
repeat 1
splits 20 on fast slow
splits 60 on fast slow
mode timeslice
run fast medium
EOF
before=$(sql "SELECT count(*) FROM runs")
"$kace" campaign --dry-run "$scratch/plan.txt" >"$scratch/out" || fail "dry run"
grep -q "9 runs" "$scratch/out" && [ "$(grep -c 'to do' "$scratch/out")" = 9 ] || fail "dry run: $(cat "$scratch/out")"
# Stopped with SIGTERM after some runs, then with SIGKILL (no chance to clean
# up: the next kace quits the daemon it left, the workloads die on their
# broken progress pipe).
"$kace" campaign "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>&1 &
pid=$!
# (up to 60 s: a run takes seconds under ASan on a loaded machine)
for _ in $(seq 600); do
    [ "$(sql "SELECT count(*) FROM runs")" -ge $((before + 2)) ] && break
    sleep 0.1
done
wait_for_workers
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 143 ] || fail "campaign SIGTERM: exit $rc: $(cat "$scratch/out")"
after_term=$(sql "SELECT count(*) FROM runs")
[ "$after_term" -ge $((before + 2)) ] && [ "$after_term" -lt $((before + 9)) ] || fail "campaign SIGTERM: $after_term runs"
no_strays "campaign SIGTERM"
whole_runs "campaign SIGTERM"

"$kace" campaign "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>&1 &
pid=$!
for _ in $(seq 600); do
    [ "$(sql "SELECT count(*) FROM runs")" -ge $((after_term + 1)) ] && break
    sleep 0.1
done
wait_for_workers
kill -KILL $pid
wait $pid 2>/dev/null
whole_runs "campaign SIGKILL"
after_kill=$(sql "SELECT count(*) FROM runs")

"$kace" campaign "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>&1
rc=$?
[ $rc = 0 ] || fail "campaign resume: exit $rc: $(cat "$scratch/out")"
grep -q "$((after_kill - before)) were stored before, 0 left" "$scratch/out" || fail "campaign resume: $(cat "$scratch/out")"
[ "$(sql "SELECT count(*) FROM runs")" = $((before + 9)) ] || fail "campaign: $(sql 'SELECT count(*) FROM runs') runs"
[ "$(sql "SELECT count(*) FROM runs WHERE mode='timeslice' AND set_name='timeslice-pairs'")" = 1 ] || fail "timeslice run"
[ "$(sql "SELECT count(*) FROM run_members WHERE mps_pct IN (20, 80, 60, 40)")" = 4 ] || fail "split runs"
whole_runs "campaign resume"
no_strays "campaign resume"
# Everything done: a rerun measures nothing and starts no daemon.
"$kace" campaign "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>&1 || fail "campaign rerun"
grep -q "0 runs measured" "$scratch/out" || fail "campaign rerun: $(cat "$scratch/out")"

# 7. A plan naming a workload without a command fails before measuring.
printf 'workloads fast\nrun fast ghost\n' >"$scratch/ghost.txt"
"$kace" campaign "$scratch/ghost.txt" "${quick[@]}" 2>"$scratch/err"
[ $? = 1 ] && grep -q "ghost.txt:2: .*kace workload add ghost" "$scratch/err" || fail "ghost plan: $(cat "$scratch/err")"
printf 'workloads fast\npairs\n' >"$scratch/bad.txt"
"$kace" campaign "$scratch/bad.txt" 2>"$scratch/err"
[ $? = 1 ] && grep -q "bad.txt:2:1: 'pairs' needs at least 2 workloads" "$scratch/err" || fail "bad plan: $(cat "$scratch/err")"

# 8. MPS is verified, not assumed: a daemon that is alive but never starts a
#    server (the clients then run without MPS) gets nothing recorded, and the
#    message says what was seen.
runs_before=$(sql "SELECT count(*) FROM runs")
KACE_TEST_MPS_MODE=no-server "$kace" measure fast slow "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 1 ] || fail "no MPS server: exit $rc: $(cat "$scratch/err")"
grep -q "MPS did not serve this run: the control daemon named no MPS server" "$scratch/err" &&
    grep -q "Server failed to start" "$scratch/err" || fail "no MPS server: $(cat "$scratch/err")"
[ "$(sql "SELECT count(*) FROM runs")" = "$runs_before" ] || fail "no MPS server: a run was recorded"
no_strays "no MPS server"
# A verified run says which server served it.
"$kace" measure fast slow --set verified "${quick[@]}" >"$scratch/out" 2>"$scratch/err" ||
    fail "verified: $(cat "$scratch/err")"
grep -q "served by MPS server [0-9]" "$scratch/out" || fail "verified: $(cat "$scratch/out")"

# 9. Time-sliced runs run without kace's MPS daemon: a workload that counts
#    the stand-in daemon's processes ("-d": daemon and server, not a client
#    asking get_server_list) when it starts sees none under time-slicing,
#    and the daemon and its server (2) under MPS before and after.
cat >"$scratch/bin/probe" <<EOS
#!/bin/sh
echo "\${CUDA_MPS_PIPE_DIRECTORY:-unset} \$(pgrep -fc "$scratch/bin/mps-control -d")" >>"$scratch/probe.log"
exec "$scratch/bin/worker" report 2000
EOS
chmod +x "$scratch/bin/probe"
"$kace" workload add probe -- "$scratch/bin/probe" >/dev/null || fail "workload add probe"
printf '%s\n' "workloads probe slow" "set probe" "run probe slow" "mode timeslice" "set probe-timeslice" \
    "run probe slow" "mode mps" "set probe-again" "run probe slow" >"$scratch/probe-plan.txt"
rm -f "$scratch/probe.log"
"$kace" campaign "$scratch/probe-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "probe campaign: exit $rc: $(cat "$scratch/err")"
printf '%s\n' "$run_dir/pipe 2" "/nonexistent/kace-no-mps 0" "$run_dir/pipe 2" >"$scratch/probe.want"
cmp -s "$scratch/probe.log" "$scratch/probe.want" ||
    fail "probe campaign: MPS processes seen by the workloads: $(cat "$scratch/probe.log") (want: $(cat "$scratch/probe.want"))"
[ "$(sql "SELECT count(*) FROM runs WHERE set_name LIKE 'probe%'")" = 3 ] || fail "probe campaign: runs"
grep -q "died" "$scratch/err" && fail "probe campaign: a daemon quit on purpose was taken for dead: $(cat "$scratch/err")"
no_strays "probe campaign"
# 9b. A run that fails under MPS (a crash) is followed by a fresh MPS daemon:
#     the next MPS run's workload sees a daemon and server again, and no
#     daemon is taken for dead.
printf '%s\n' "workloads crasher slow probe" "set crash-then" "run slow crasher" "run probe slow" \
    >"$scratch/crash-plan.txt"
rm -f "$scratch/probe.log"
"$kace" campaign "$scratch/crash-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "crash campaign: exit $rc: $(cat "$scratch/err")"
grep -q "\[1/2\] failed under MPS: the next MPS run starts a fresh MPS daemon" "$scratch/err" ||
    fail "crash campaign: no fresh daemon after the failed run: $(cat "$scratch/err")"
[ "$(cat "$scratch/probe.log")" = "$run_dir/pipe 2" ] ||
    fail "crash campaign: the run after the crash saw: $(cat "$scratch/probe.log")"
grep -q "died" "$scratch/err" && fail "crash campaign: a daemon quit on purpose was taken for dead: $(cat "$scratch/err")"
[ "$(sql "SELECT group_concat(status, ',') FROM runs WHERE set_name='crash-then'")" = "failed,ok" ] ||
    fail "crash campaign: $(sql "SELECT status FROM runs WHERE set_name='crash-then'")"
no_strays "crash campaign"
# 9c. So is a run that measured well but whose member had to be killed (it ignores
#     SIGTERM, so it never stopped at a step boundary): it may have left GPU work.
#     pidprobe logs the stand-in daemon's processes: new ones after the kill, the
#     same ones after a clean run.
cat >"$scratch/bin/pidprobe" <<EOS
#!/bin/sh
echo \$(pgrep -f "$scratch/bin/mps-control -d" | sort) >>"$scratch/pids.log"
exec "$scratch/bin/worker" report 2000
EOS
chmod +x "$scratch/bin/pidprobe"
"$kace" workload add pidprobe -- "$scratch/bin/pidprobe" >/dev/null || fail "workload add pidprobe"
for middle in stubborn handler fast; do
    printf '%s\n' "workloads pidprobe $middle slow medium" "set then-$middle" "run pidprobe slow" "run $middle slow" \
        "run pidprobe medium" >"$scratch/kill-plan.txt"
    rm -f "$scratch/pids.log"
    "$kace" campaign "$scratch/kill-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
    rc=$?
    [ $rc = 0 ] || fail "$middle campaign: exit $rc: $(cat "$scratch/err")"
    [ "$(sql "SELECT group_concat(status, ',') FROM runs WHERE set_name='then-$middle'")" = "ok,ok,ok" ] ||
        fail "$middle campaign: $(sql "SELECT status FROM runs WHERE set_name='then-$middle'")"
    grep -q "died" "$scratch/err" && fail "$middle campaign: a daemon quit on purpose was taken for dead: $(cat "$scratch/err")"
    [ "$(wc -l <"$scratch/pids.log")" = 2 ] && [ -n "$(head -1 "$scratch/pids.log")" ] ||
        fail "$middle campaign: daemon processes seen: $(cat "$scratch/pids.log")"
    same=$([ "$(sed -n 1p "$scratch/pids.log")" = "$(sed -n 2p "$scratch/pids.log")" ] && echo yes || echo no)
    # handler: a SIGTERM handler of its own exits at once, before its next report.
    declare -A ending=([stubborn]="killed by SIGKILL after a grace of 3 s"
        [handler]="exited with status 0 after SIGTERM, before its next report")
    if [ $middle != fast ]; then
        grep -qF "[2/3] $middle ended mid-step (${ending[$middle]}) under MPS: the next MPS run starts a fresh MPS daemon" "$scratch/err" ||
            fail "$middle campaign: no fresh daemon after the member that ended mid-step: $(cat "$scratch/err")"
        [ $same = no ] || fail "$middle campaign: the same daemon after the member that ended mid-step: $(cat "$scratch/pids.log")"
    else
        grep -q "fresh MPS daemon" "$scratch/err" && fail "clean campaign: a fresh daemon after clean runs: $(cat "$scratch/err")"
        [ $same = yes ] || fail "clean campaign: another daemon after a clean run: $(cat "$scratch/pids.log")"
    fi
    no_strays "$middle campaign"
done
# kace measure --no-mps shuts down a daemon that a killed kace left in the run folder.
KACE_TEST_MPS_MODE=normal CUDA_MPS_PIPE_DIRECTORY="$run_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$run_dir/log" \
    "$scratch/bin/mps-control" -d || fail "a left-behind daemon did not start"
rm -f "$scratch/probe.log"
"$kace" measure probe slow --no-mps --set probe-stale "${quick[@]}" >"$scratch/out" 2>"$scratch/err" ||
    fail "--no-mps after a left-behind daemon: $(cat "$scratch/err")"
[ "$(cat "$scratch/probe.log")" = "/nonexistent/kace-no-mps 0" ] ||
    fail "--no-mps: MPS processes alive during the time-sliced run: $(cat "$scratch/probe.log")"
grep -q "left by an earlier kace" "$scratch/err" || fail "--no-mps: $(cat "$scratch/err")"
no_strays "--no-mps after a left-behind daemon"

# The dataset export over every set: one colocation measured in two sets, the
# second time as "slow fast", is one row whose means keep each workload's own throughput.
"$kace" measure fast slow --set twice-a "${quick[@]}" >/dev/null 2>&1 || fail "twice-a"
"$kace" measure slow fast --set twice-b "${quick[@]}" >/dev/null 2>&1 || fail "twice-b"
"$kace" export --dataset --quiet "$scratch/export2" || fail "kace export --dataset (2)"
rows=$(grep -E "^(fast,slow|slow,fast)," "$scratch/export2/colocations/pairs.csv")
[ "$(wc -l <<<"$rows")" = 1 ] || fail "export: fast + slow is not one row: $rows"
awk -F, '{ f = $1 == "fast" ? $3 : $4; s = $1 == "fast" ? $4 : $3; exit !(f > 3600 && f < 4400 && s > 900 && s < 1100) }' \
    <<<"$rows" || fail "export: throughputs mixed between the members: $rows"
"$kace" import --db "$scratch/reimport2.db" --create-workloads "$scratch/export2/colocations/pairs.csv" >/dev/null 2>"$scratch/err" ||
    fail "the export does not import: $(cat "$scratch/err")"

# --stop-grace-max caps the grace (3 x the longest step): a workload whose steps take
# 1.5 s and that ignores SIGTERM is killed after 4.5 s by default, after 3.5 s here.
cat >"$scratch/bin/slowsteps" <<'EOS'
#!/bin/sh
trap '' TERM
i=0
while :; do
    echo "done $i" >&"$KACE_PROGRESS_FD"
    i=$((i + 1))
    sleep 1.5
done
EOS
chmod +x "$scratch/bin/slowsteps"
KACE_DB="$scratch/grace.db" "$kace" workload add slowsteps -- "$scratch/bin/slowsteps" >/dev/null || fail "workload add slowsteps"
out=$(KACE_DB="$scratch/grace.db" "$kace" measure slowsteps --no-mps --warmup 0.1 --window 2 --stop-grace-max 3.5 \
      --run-dir "$run_dir" 2>&1)
grep -q "killed by SIGKILL after a grace of 3.5 s" <<<"$out" || fail "--stop-grace-max 3.5: $out"
no_strays "--stop-grace-max"

# A failed campaign run is measured again once its workload's command or code changes, and
# only then: its script crashes, the rerun leaves it, the fixed script is measured again.
R=$scratch/retry.db
printf '#!/bin/sh\nexec "%s" crash 1000 0.3\n' "$scratch/bin/worker" >"$scratch/bin/fixme.sh"
chmod +x "$scratch/bin/fixme.sh"
KACE_DB=$R "$kace" workload add fixme -- "$scratch/bin/fixme.sh" >/dev/null || fail "workload add fixme"
KACE_DB=$R "$kace" workload add slow -- "$scratch/bin/worker" report 1000 >/dev/null || fail "workload add slow"
printf 'workloads fixme slow\nset retry\nrun fixme slow\n' >"$scratch/retry-plan.txt"
KACE_DB=$R "$kace" campaign "$scratch/retry-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
[ "$(KACE_DB=$R sql "SELECT status FROM runs WHERE set_name='retry'")" = failed ] ||
    fail "retry: the crashing script's run: $(KACE_DB=$R sql "SELECT status FROM runs") $(cat "$scratch/err")"
KACE_DB=$R "$kace" campaign "$scratch/retry-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err" ||
    fail "retry: second call: $(cat "$scratch/err")"
grep -q "; 1 stored already, 0 to measure$" "$scratch/out" || fail "retry: a failed run measured again unchanged: $(cat "$scratch/out")"
printf '#!/bin/sh\nexec "%s" report 1000\n' "$scratch/bin/worker" >"$scratch/bin/fixme.sh" # the script fixed
KACE_DB=$R "$kace" campaign --dry-run "$scratch/retry-plan.txt" >"$scratch/out" 2>&1
grep -q "1 to measure (1 of them failed before and are tried again" "$scratch/out" && grep -q "^  retry  retry " "$scratch/out" ||
    fail "retry: dry run after the fix: $(cat "$scratch/out")"
KACE_DB=$R "$kace" campaign "$scratch/retry-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err" ||
    fail "retry: the call after the fix: $(cat "$scratch/err")"
[ "$(KACE_DB=$R sql "SELECT r.status || ':' || group_concat(m.status, ',') FROM runs r JOIN run_members m ON m.run_id = r.id
      WHERE r.set_name='retry'")" = "ok:ok,ok" ] || fail "retry: after the fix: $(KACE_DB=$R sql "SELECT status FROM runs")"
[ "$(KACE_DB=$R sql "SELECT group_concat(status, ',') FROM (SELECT status FROM campaign_attempts ORDER BY attempt)")" = "failed,ok" ] ||
    fail "retry: attempts: $(KACE_DB=$R sql "SELECT * FROM campaign_attempts")"
KACE_DB=$R "$kace" campaign "$scratch/retry-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
grep -q "; 1 stored already, 0 to measure$" "$scratch/out" || fail "retry: an ok run measured again: $(cat "$scratch/out")"
no_strays "retry"

# A member that crashes before it starts CUDA never becomes an MPS client: its run is a
# failed run of that workload, stored as such (not "MPS did not serve", measured again).
printf '#!/bin/sh\nkill -ABRT $$\n' >"$scratch/bin/early.sh"
chmod +x "$scratch/bin/early.sh"
KACE_DB=$R "$kace" workload add early -- "$scratch/bin/early.sh" >/dev/null || fail "workload add early"
printf 'workloads early slow\nset early\nrun early slow\n' >"$scratch/early-plan.txt"
KACE_DB=$R "$kace" campaign "$scratch/early-plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
[ "$(KACE_DB=$R sql "SELECT status FROM runs WHERE set_name='early'")" = failed ] ||
    fail "a member that crashed before CUDA: $(KACE_DB=$R sql "SELECT set_name, status FROM runs") $(cat "$scratch/err")"
no_strays "early crash"

if [ $failures -gt 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "cli_measure: all checks passed"
