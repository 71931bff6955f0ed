#!/usr/bin/env bash
# kace in a real Slurm: munged, slurmctld and three slurmd on localhost
# (tests/slurm_cluster.sh) with job_submit/kace and spank_kace.so. Jobs are
# submitted with sbatch and srun; the test checks on which node they ran and
# with which CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, for good and bad inputs
# (unknown workload, model file missing, store locked); that backfill starts
# a job elsewhere when kace's preferred node is busy; that a placement Slurm
# rejects is not counted; and the throughput channel (kace slurm report ->
# kace slurm status -> observations in the store). Every daemon is stopped
# by pid at the end, also when a check fails.
#
# usage: cli_slurm.sh KACE_BINARY SHARED_DATA SCRATCH_DIR
# Exits 77 (skipped) without root, the Slurm packages or the built plugins.
set -uo pipefail
KACE=$1
DATA=$2/kace-v100
SCRATCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PLUGINS=$(cd "$(dirname "$KACE")" && pwd)/slurm-plugins
source "$HERE/slurm_cluster.sh"
source "$HERE/lib_test.sh"
slurm_test_require "$PLUGINS/job_submit_kace.so" "$PLUGINS/spank_kace.so"
# The cluster lives in a short path (the munge socket path has a length limit).
mkdir -p "$SCRATCH"
C=$(mktemp -d /tmp/kace-slurm.XXXXXX)
LOCK_PID=""
cleanup() {
    [ -n "$LOCK_PID" ] && kill "$LOCK_PID" 2>/dev/null
    slurm_test_cleanup "$C" "$C/cluster/log" "$C/jobs" "$C/kace.conf"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- the store, the model and the placer's configuration ---------------------
mkdir -p "$C/store" # kace creates a store file, not a missing folder
slurm_test_store "$KACE" "$DATA" "$C/store/kace.db" "$C/store/model.txt"

# --kace-profile: the plugin points tasks at a CUPTI library and a recording
# folder. No GPU here, so the "library" is a placeholder file that nothing
# loads, and the profiled job writes the recording itself (below).
mkdir -p "$C/profiles" "$C/reports"
chmod 1777 "$C/reports"
: >"$C/libkace_cupti.so"
export KACE_TEST_SPANK_ARGS="profiler=$C/libkace_cupti.so profile_dir=$C/profiles report_dir=$C/reports"
# Backfill every second, so that a job waiting for its preferred node is
# started elsewhere quickly.
export KACE_TEST_SLURM_CONF="SchedulerParameters=bf_interval=1"
export KACE_BIN=$KACE
slurm_cluster_start "$C/cluster" "$PLUGINS" || { echo "FAIL: the Slurm cluster did not start"; cat "$C"/cluster/log/*.log 2>/dev/null | tail -30; exit 1; }
mkdir -p "$C/jobs"
LOG=$C/cluster/log/slurmctld.log
write_conf() { # gres
    cat >"$C/cluster/kace.conf" <<EOF
# kace's placer (job_submit/kace)
store = $C/store/kace.db
model_file = $C/store/model.txt
gres = $1
refresh_seconds = 1
EOF
    cp "$C/cluster/kace.conf" "$C/kace.conf"
}
log_has() { grep -qF -- "$1" "$LOG"; }
# Waits for a new line in slurmctld's log after line $1 that contains $2.
log_after_has() { grep -qF -- "$2" < <(tail -n +$(($1 + 1)) "$LOG"); }
wait_log_after() { slurm_wait "${3:-30}" log_after_has "$1" "$2"; }
log_lines() { wc -l <"$LOG"; }

marker=$(log_lines)
write_conf mps
# A store of at most load_all_max (20000 by default) workloads is loaded
# whole, so that the first job of every workload is placed.
wait_log_after 0 "workloads loaded (all the store holds), 2 shared GPUs (gres/mps)" 60 ||
    fail "placer never became ready with the whole store: $(grep 'placer ready' "$LOG")"
n_store=$(sqlite3 -cmd ".timeout 10000" "$C/store/kace.db" "SELECT count(*) FROM workloads")
log_has "placer ready: $n_store workloads loaded (all the store holds)" ||
    fail "the placer did not load all $n_store workloads of the store: $(grep 'placer ready' "$LOG")"

# A job that prints where it ran and its MPS percentage, then sleeps $1 s.
cat >"$C/job.sh" <<'EOF'
#!/bin/bash
echo "node=$SLURMD_NODENAME pct=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none} workload=${KACE_WORKLOAD:-none}"
if [ -n "${2:-}" ]; then "$KACE_BIN" slurm report --throughput "$2" || echo "report failed"; fi
sleep "${1:-0}"
EOF
chmod +x "$C/job.sh"

# Runs a short job to the end; prints its "node=... pct=..." line.
run_batch() { # name workload-option...
    local name=$1
    shift
    timeout 90 sbatch --wait --quiet -o "$C/jobs/$name.out" "$@" "$C/job.sh" 0 >/dev/null 2>"$C/jobs/$name.err"
    cat "$C/jobs/$name.out" 2>/dev/null | head -1
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
node_of() { squeue -h -j "$1" -o '%N'; }
job_running() { [ "$(squeue -h -j "$1" -o '%T')" == RUNNING ]; }

# Waits until job_submit/kace decides for $T as `kace slurm place` does on
# slurmctld's state now: a refresh of the placer reloads store, model and
# cluster, which takes longer than a fixed "one refresh" sleep on a loaded
# machine. Probes with `sbatch --test-only` (no job is made; the plugin
# drops such a pick after its grace time) until the node and share agree,
# then waits for the last probe's pick to be dropped, so that later checks
# of the log see no probe.
log_after_decided() { grep -qF -e "kace: $T -> node " -e "workload $T left as submitted" < <(tail -n +$(($1 + 1)) "$LOG"); }
placer_caught_up() {
    local expected node share m line token start=$SECONDS t0=$EPOCHREALTIME probes=0
    expected=$("$KACE" slurm place --config "$C/cluster/kace.conf" --workload "$T")
    node=$(field node "$expected")
    share=$(field share "$expected")
    while :; do
        m=$(log_lines)
        sbatch --test-only --kace-workload="$T" --wrap true >/dev/null 2>&1
        probes=$((probes + 1))
        # A stale view may leave the probe as submitted (no room): probe again.
        slurm_wait 10 log_after_decided "$m" || { echo "placer probe: no decision for $T" >&2; return 1; }
        line=$(grep -F -e "kace: $T -> node " -e "workload $T left as submitted" < <(tail -n +$((m + 1)) "$LOG") | tail -1)
        token=$(sed -n 's/.*, pick \([^)]*\))$/\1/p' <<<"$line")
        [[ "$line" == *"-> node $node (--prefer="*"(share $share%,"* ]] && break
        if ((SECONDS - start >= 30)); then
            echo "placer still decides '${line#*kace: }' after 30 s; slurmctld's state says $expected" >&2
            return 1
        fi
        sleep 0.3
    done
    echo "placer caught up after $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s ($probes probe(s))"
    wait_log_after "$m" "placement $token of $T on $node not confirmed" 10
}

# --- which workloads: T and two partners, one good and one bad for it ----------
T=bert-base-cased_batch8-train
mapfile -t ranked < <("$KACE" predict --db "$C/store/kace.db" --model-file "$C/store/model.txt" --target "$T" |
    awk 'NR > 2 { print $2 }')
[ "${#ranked[@]}" -ge 10 ] || { echo "FAIL: kace predict ranked ${#ranked[@]} partners"; exit 1; }
# Partners must leave room on the GPU: their share (on an idle cluster) <= 80%.
share_on_idle() { field share "$("$KACE" slurm place --config "$C/cluster/kace.conf" --workload "$1")"; }
pick() {
    local w s
    for w in "$@"; do
        [ "$w" == "$T" ] && continue
        s=$(share_on_idle "$w")
        [ -n "$s" ] && [ "$s" -le 80 ] && { echo "$w"; return; }
    done
}
GOOD=$(pick "${ranked[@]}")
BAD=$(pick $(printf '%s\n' "${ranked[@]}" | tac))
echo "target $T, partners good=$GOOD bad=$BAD"
[ -n "$GOOD" ] && [ -n "$BAD" ] && [ "$GOOD" != "$BAD" ] || { echo "FAIL: no partners with room"; exit 1; }

# --- placement follows the partner: two rounds with the residents swapped ------
round() { # first-resident second-resident submit-with(sbatch|srun)
    local a=$1 b=$2 how=$3 ja jb expected out node pct share m
    m=$(log_lines)
    ja=$(sbatch --parsable --kace-workload="$a" -o /dev/null "$C/job.sh" 300 12.5)
    # In the first round, the first job of its workload since slurmctld
    # started: placed all the same (the store is loaded whole).
    log_after_has "$m" "kace: $a -> node n1 (--prefer=kace_n1)" ||
        fail "kace did not place job $ja of $a on idle n1: $(slurm_decision_after "$LOG" "$m" "$a")"
    slurm_wait 30 job_running "$ja" || fail "job $ja did not start"
    jb=$(sbatch --parsable --kace-workload="$b" -o /dev/null "$C/job.sh" 300)
    slurm_wait 30 job_running "$jb" || fail "job $jb did not start"
    check_eq "first resident ($a) on the first idle GPU" n1 "$(node_of "$ja")"
    check_eq "second resident ($b) on the other idle GPU, not beside the first" n2 "$(node_of "$jb")"
    placer_caught_up || fail "the placer never saw both residents"
    expected=$("$KACE" slurm place --config "$C/cluster/kace.conf" --workload "$T")
    echo "kace slurm place: $expected"
    if [ "$how" == srun ]; then
        out=$(timeout 90 srun --kace-workload="$T" "$C/job.sh" 0 2>"$C/jobs/srun.err" | head -1)
    else
        out=$(run_batch "round-$a" --kace-workload="$T")
    fi
    echo "$how job of $T: $out"
    node=$(field node "$out")
    pct=$(field pct "$out")
    check_eq "$how: $T ran where kace placed it" "$(field node "$expected")" "$node"
    check_eq "$how: $T's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is kace's share" "$(field share "$expected")" "$pct"
    check_eq "$how: KACE_WORKLOAD in the job" "$T" "$(field workload "$out")"
    if [ "$node" == n1 ]; then WINNER=$a; else WINNER=$b; fi
    # kace slurm status: both GPUs, their jobs, predicted and observed
    # throughput (job ja reported 12.5 samples/s through kace slurm report).
    slurm_wait 10 test -f "$C/reports/$ja.report" || fail "job $ja wrote no report"
    "$KACE" slurm status --config "$C/cluster/kace.conf" --reports "$C/reports" >"$C/jobs/status-$a.txt" 2>&1
    grep -qE "^n1 +up +1 .* 12\.50 +[0-9]+\.[0-9]+$" "$C/jobs/status-$a.txt" ||
        fail "status: n1 should hold 1 job with predicted and observed throughput and their ratio"
    grep -qE "job $ja +$a .*running.*observed +12\.50" "$C/jobs/status-$a.txt" ||
        fail "status does not show job $ja ($a) with its observed throughput"
    grep -qE "job $jb +$b .*predicted +[0-9]" "$C/jobs/status-$a.txt" || fail "status does not predict job $jb ($b)"
    # n1's only job reported: one observation (origin slurm) stored; a
    # second status stores nothing new.
    grep -q "observations (origin slurm) in .*: 1 stored now, 0 stored before; 1 GPUs with jobs not all" \
        "$C/jobs/status-$a.txt" || fail "status did not store n1's observation: $(tail -1 "$C/jobs/status-$a.txt")"
    "$KACE" slurm status --config "$C/cluster/kace.conf" --reports "$C/reports" >"$C/jobs/status2-$a.txt" 2>&1
    grep -q ": 0 stored now, 1 stored before" "$C/jobs/status2-$a.txt" ||
        fail "a second status stored again: $(tail -1 "$C/jobs/status2-$a.txt")"
    share=$(sed -n "s/^  job $ja .* \([0-9]*\)% running.*/\1/p" "$C/jobs/status-$a.txt")
    check_eq "observation of job $ja in the store (origin, workload, MPS %, throughput, predicted)" \
        "slurm|$a|$share.0|12.5|yes" "$(sqlite3 -cmd ".timeout 10000" "$C/store/kace.db" "SELECT o.origin, w.name, m.mps_pct, m.throughput,
            CASE WHEN m.predicted > 0 THEN 'yes' ELSE 'no' END FROM observations o
            JOIN observation_members m ON m.observation_id = o.id JOIN workloads w ON w.id = m.workload_id
            WHERE o.origin_id LIKE 'n1:$ja@%'")"
    # A report the job's user did not write is not trusted.
    chown 65534 "$C/reports/$ja.report"
    "$KACE" slurm status --config "$C/cluster/kace.conf" --reports "$C/reports" --no-store >"$C/jobs/status3-$a.txt" 2>&1
    grep -q "$ja.report: written by uid 65534, not by job $ja's user 0 (ignored)" "$C/jobs/status3-$a.txt" ||
        fail "status trusted a report of another user"
    grep -qE "job $ja .*observed +-$" "$C/jobs/status3-$a.txt" || fail "status shows an untrusted report's throughput"
    scancel "$ja" "$jb"
    slurm_wait 60 slurm_nodes_idle || fail "nodes did not come back to idle"
    placer_caught_up || fail "the placer never saw the cluster idle"
}
round "$GOOD" "$BAD" sbatch
first_winner=$WINNER
cat "$C/jobs/status-$GOOD.txt"
round "$BAD" "$GOOD" srun
check_eq "the target follows the same partner when the residents swap nodes" "$first_winner" "$WINNER"

# --- backfill: kace prefers a node, Slurm decides -------------------------------
# A job without a GPU takes every CPU of n1; n1's GPU stays idle, so kace
# prefers n1 for the target (idle GPUs tie, the first wins). Slurm starts the
# target on n2 instead of waiting for n1 (a pinned ReqNodeList would wait).
busy=$(sbatch --parsable -w n1 -c 4 -o /dev/null --wrap 'sleep 300')
slurm_wait 30 job_running "$busy" || fail "n1's CPU job did not start"
marker=$(log_lines)
jt=$(sbatch --parsable --kace-workload="$T" -o /dev/null "$C/job.sh" 300)
wait_log_after "$marker" "kace: $T -> node n1 (--prefer=kace_n1)" 10 || fail "kace did not prefer n1 (its GPU is idle)"
slurm_wait 30 job_running "$jt" || fail "job $jt waits for n1 instead of starting elsewhere"
check_eq "the job kace prefers on busy n1 started on" n2 "$(node_of "$jt")"
grep -E "Started JobId=$jt|Allocate JobId=$jt" "$LOG" | tail -1
scancel "$busy" "$jt"
slurm_wait 60 slurm_nodes_idle || fail "nodes did not come back to idle"
placer_caught_up || fail "the placer never saw the cluster idle"

# --- a placement counts only once Slurm accepted the job ---------------------------
# Slurm rejects an unknown license after job_submit/kace placed the job on n1.
# The next job goes to n1 as well (the rejected one is not counted); once a
# held job there is confirmed, the next goes to n2.
marker=$(log_lines)
if sbatch --kace-workload="$T" --licenses=nosuch:1 -o /dev/null --wrap true 2>"$C/jobs/rejected.err"; then
    fail "a job with an unknown license was accepted"
fi
log_after_has "$marker" "kace: $T -> node n1" || fail "kace did not place the job that Slurm then rejected"
marker=$(log_lines)
jh=$(sbatch --parsable --hold --kace-workload="$T" -o /dev/null --wrap true)
log_after_has "$marker" "kace: $T -> node n1" || fail "the rejected job was counted: held job $jh not sent to n1"
wait_log_after "$marker" "on n1 confirmed: job $jh" 10 || fail "held job $jh never confirmed"
wait_log_after "$marker" "on n1 not confirmed by slurmctld (job rejected or --test-only): no longer counted" 10 ||
    fail "the rejected placement was never dropped"
marker=$(log_lines)
jh2=$(sbatch --parsable --hold --kace-workload="$T" -o /dev/null --wrap true)
log_after_has "$marker" "kace: $T -> node n2" || fail "the confirmed held job $jh on n1 was not counted"
scancel "$jh" "$jh2"
placer_caught_up || fail "the placer never saw the held jobs go"

# --- gres/shard: the SPANK plugin exports the percentage ------------------------
marker=$(log_lines)
write_conf shard
wait_log_after "$marker" "shared GPUs (gres/shard)" || fail "placer did not switch to gres/shard"
expected=$("$KACE" slurm place --config "$C/cluster/kace.conf" --workload "$T")
out=$(run_batch shard --kace-workload="$T")
echo "shard job: $out (kace slurm place: $expected)"
check_eq "shard: node" n3 "$(field node "$out")"
# 4 shards per GPU: the share kace asks for, rounded down to a whole shard.
want=$(field share "$expected")
check_eq "shard: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from the SPANK plugin" "$((want / 25 * 25))" "$(field pct "$out")"
marker=$(log_lines)
write_conf mps
wait_log_after "$marker" "shared GPUs (gres/mps)" || fail "placer did not switch back to gres/mps"

# --- bad inputs: the job runs as submitted, slurmctld says why ----------------
# The first job asks the placer to load it, which finds it missing; the next is told so.
marker=$(log_lines)
out=$(run_batch unknown --kace-workload=no-such-workload)
check_eq "unknown workload: job ran unchanged (no MPS share)" none "$(field pct "$out")"
wait_log_after "$marker" "workload 'no-such-workload' asked for by a job is not in the store" ||
    fail "no log line for the unknown workload's load"
out=$(run_batch unknown2 --kace-workload=no-such-workload)
check_eq "unknown workload, second job: ran unchanged (no MPS share)" none "$(field pct "$out")"
log_has "job of workload no-such-workload left as submitted: unknown workload 'no-such-workload'" ||
    fail "no log line for the unknown workload"

if sbatch --kace-workload="two words" --wrap true >/dev/null 2>"$C/jobs/badname.err"; then
    fail "sbatch accepted a workload name with a space"
else
    grep -q "a workload name has no spaces" "$C/jobs/badname.err" || fail "no message for a bad workload name"
fi

marker=$(log_lines)
mv "$C/store/model.txt" "$C/store/model.moved"
wait_log_after "$marker" "cannot load the placer's state" || fail "missing model file not noticed"
out=$(run_batch nomodel --kace-workload="$T")
check_eq "model file missing: job ran unchanged" none "$(field pct "$out")"
log_has "job of workload $T left as submitted: no model loaded" || fail "no log line for the missing model"
marker=$(log_lines)
mv "$C/store/model.moved" "$C/store/model.txt"
wait_log_after "$marker" "placer ready" || fail "placer did not recover when the model came back"

marker=$(log_lines)
# Another process locks the store outright. (A writer such as a long import
# no longer does: the store is in WAL mode and readers keep reading; only an
# exclusive locking mode shuts them out.)
mkfifo "$C/lockfifo"
sqlite3 "$C/store/kace.db" <"$C/lockfifo" >/dev/null 2>&1 &
LOCK_PID=$!
exec 7>"$C/lockfifo"
echo "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; UPDATE meta SET value = value WHERE key = 'schema_version';" >&7
wait_log_after "$marker" "locked" || fail "locked store not noticed"
out=$(run_batch locked --kace-workload="$T")
check_eq "store locked: job ran unchanged" none "$(field pct "$out")"
grep -q "locked" < <(grep "left as submitted" "$LOG" | tail -1) || fail "no log line naming the locked store"
exec 7>&-
wait "$LOCK_PID" 2>/dev/null
LOCK_PID=""
marker=$(log_lines)
wait_log_after "$marker" "placer ready" || fail "placer did not recover when the store was unlocked"
out=$(run_batch recovered --kace-workload="$T")
[ "$(field pct "$out")" != none ] || fail "after recovery the job got no share: $out"

# Only nodes of the job's partition are a choice (on an idle cluster kace
# would take n1 first; partition "second" has only n2).
out=$(run_batch partition -p second --kace-workload="$T")
check_eq "partition second: node" n2 "$(field node "$out")"
[ "$(field pct "$out")" != none ] || fail "partition second: the job got no share: $out"

# --kace-profile: every task gets CUDA_INJECTION64_PATH (the library) and
# KACE_CUPTI_OUTPUT (its own recording file); the CUDA driver would load the
# library into the task's CUDA processes, which write the recording. Here the
# job writes a hand-made recording there in the library's place, and
# `kace import-cupti` stores its kernel metrics.
cat >"$C/profjob.sh" <<EOF
#!/bin/bash
echo "inject=\${CUDA_INJECTION64_PATH:-none} out=\${KACE_CUPTI_OUTPUT:-none} profile=\${KACE_PROFILE:-none}"
if [ -n "\${KACE_CUPTI_OUTPUT:-}" ]; then cp "$HERE/data/cupti/small.txt" "\$KACE_CUPTI_OUTPUT"; fi
EOF
chmod +x "$C/profjob.sh"
job=$(timeout 90 sbatch --wait --parsable -o "$C/jobs/profile.out" --kace-profile "$C/profjob.sh" 2>"$C/jobs/profile.err")
job=${job%%;*}
out=$(head -1 "$C/jobs/profile.out" 2>/dev/null)
echo "profiled job $job: $out"
check_eq "--kace-profile: CUDA_INJECTION64_PATH" "$C/libkace_cupti.so" "$(field inject "$out")"
check_eq "--kace-profile: KACE_CUPTI_OUTPUT" "$C/profiles/kace-$job.batch.0.cupti" "$(field out "$out")"
check_eq "--kace-profile: KACE_PROFILE" 1 "$(field profile "$out")"
if "$KACE" import-cupti --db "$C/prof.db" --workload prof_batch1-inf "$C/profiles/kace-$job.batch.0.cupti" \
    >"$C/jobs/import-cupti.out" 2>&1; then
    check_eq "import-cupti: kernel metrics stored" 11 "$(sqlite3 -cmd ".timeout 10000" "$C/prof.db" "SELECT count(*) FROM profiles p
        JOIN workloads w ON w.id = p.workload_id WHERE w.name = 'prof_batch1-inf' AND p.value IS NOT NULL")"
else
    fail "import-cupti: $(cat "$C/jobs/import-cupti.out")"
fi
timeout 90 sbatch --wait --quiet -o "$C/jobs/noprofile.out" "$C/profjob.sh" >/dev/null 2>&1
check_eq "without --kace-profile: no injection" none "$(field inject "$(head -1 "$C/jobs/noprofile.out")")"

# slurmctld is still there and answered everything.
grep -q UP < <(scontrol ping) || fail "slurmctld is down"
grep -E "kace" "$LOG" | tail -20

slurm_test_finish
echo "all Slurm checks passed"
