#!/usr/bin/env bash
# kill -9 of kace campaign at any point of a call loses no stored run, and the
# next call resumes: stand-in workloads (tests/helpers/worker.c) under the
# stand-in MPS control daemon (tests/helpers/mps_standin.c), cold and with the
# warm pool. kace is killed right after a run was stored and in the middle of a
# run (its members running); each time the store must pass SQLite's integrity
# check and keep every run it had, the workloads kace started must end on
# their own (a crashed kace must not leave them on the GPU), and the next call
# must measure exactly what is left.
#
#   cli_campaign_kill.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
build=$(dirname "$kace")
source "$(dirname "$0")/lib_test.sh"
need sqlite3 setsid
source "$(dirname "$0")/lib_campaign.sh"
campaign_standins kill
# A window long enough that "in the middle of a run" can be caught between two records.
quick=(--warmup 0.2 --window 1 --run-dir "$run_dir" --quiet)

# Waits (for a state, polled) until the SQL answers at least want; 0 when it did.
wait_count() { # SQL WANT PID
    local n
    while kill -0 "$3" 2>/dev/null; do
        n=$(sql "$1" 2>/dev/null) || n=0
        [ "${n:-0}" -ge "$2" ] && return 0
        sleep 0.05
    done
    return 1
}
# Waits until no process of this test is left but the stand-in MPS daemon (a
# real MPS daemon outlives its clients too); fails after 600 polls (30 s).
workloads_end() { # WHAT
    local left i
    for ((i = 0; i < 600; i++)); do
        left=$(pgrep -af "$marker" | grep -v mps-control) || return 0
        sleep 0.05
    done
    fail "$1: workloads left running after kace was killed: $left"
    for p in $(pgrep -f "$marker" | grep -v mps-control); do kill -KILL "$p" 2>/dev/null; done
}

for w in a:4000 b:2000 c:1000 d:3000; do
    printf '#!/bin/sh\nexec "%s" report %s\n' "$scratch/bin/worker" "${w#*:}" >"$scratch/bin/w-${w%%:*}"
    chmod +x "$scratch/bin/w-${w%%:*}"
done
printf '%s\n' "workloads a b c d" "repeat 2" "pairs" >"$scratch/plan.txt" # 6 pairs x 2: 12 runs
total=12

for mode in cold pool; do
    export KACE_DB="$scratch/$mode.db"
    for w in a b c d; do
        "$kace" workload add "$w" -- "$scratch/bin/w-$w" >/dev/null || fail "$mode: workload add $w"
    done
    extra=()
    [ "$mode" = pool ] && extra=(--pool)
    # Kill points: after the 1st stored run; during the 4th run (after 3 stored, once a
    # member of the next run reports); after the 7th; then a call that finishes.
    for point in after:1 during:3 after:7; do
        what=${point%%:*} n=${point#*:}
        setsid "$kace" campaign "${extra[@]}" "$scratch/plan.txt" "${quick[@]}" \
            >"$scratch/out" 2>"$scratch/err" &
        pid=$!
        if ! wait_count "SELECT count(*) FROM runs" "$n" "$pid"; then
            fail "$mode $point: the campaign ended before $n runs were stored: $(cat "$scratch/err")"
            continue
        fi
        if [ "$what" = during ]; then
            # a run under way: the next run's run key is not stored yet and its members report
            before=$(sql "SELECT count(*) FROM runs")
            for ((i = 0; i < 600; i++)); do
                [ "$(sql "SELECT count(*) FROM runs")" = "$before" ] || break
                pgrep -f "${marker}worker report" >/dev/null && [ $i -gt 2 ] && break
                sleep 0.05
            done
        fi
        stored=$(sql "SELECT count(*) FROM runs")
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        workloads_end "$mode $point"
        [ "$(sql "PRAGMA integrity_check")" = ok ] || fail "$mode $point: integrity: $(sql 'PRAGMA integrity_check')"
        kept=$(sql "SELECT count(*) FROM runs")
        [ "$kept" -ge "$stored" ] || fail "$mode $point: $stored runs stored before the kill, $kept after"
        [ "$(sql "SELECT count(*) FROM runs r WHERE (SELECT count(*) FROM run_members m WHERE m.run_id = r.id) != 2")" = 0 ] ||
            fail "$mode $point: a run stored without its members"
        at=$n
        [ "$what" = during ] && at=$((n + 1))
        echo "$mode, killed $what run $at: $stored runs stored before the kill, $kept after"
        # The dry run of the next call counts what is left to measure.
        "$kace" campaign --dry-run "$scratch/plan.txt" >"$scratch/dry" 2>&1
        grep -q "; $kept stored already, $((total - kept)) to measure" "$scratch/dry" ||
            fail "$mode $point: after the kill with $kept stored: $(head -n 1 "$scratch/dry")"
    done
    "$kace" campaign "${extra[@]}" "$scratch/plan.txt" "${quick[@]}" >"$scratch/out" 2>"$scratch/err"
    rc=$?
    [ $rc = 0 ] || fail "$mode: the call after the kills: exit $rc: $(cat "$scratch/err")"
    [ "$(sql "SELECT count(*) FROM runs WHERE status='ok'")" = $total ] ||
        fail "$mode: $(sql "SELECT status, count(*) FROM runs GROUP BY status" | tr '\n' ' ') after the last call (want $total ok)"
    [ "$(sql "SELECT count(*) FROM runs")" = $total ] || fail "$mode: $(sql "SELECT count(*) FROM runs") runs stored, want $total"
    for p in $(pgrep -f "${marker}mps-control"); do kill -TERM "$p" 2>/dev/null; done
done

workloads_end "the end"
finish cli_campaign_kill
