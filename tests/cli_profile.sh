#!/usr/bin/env bash
# kace profile without a GPU: a clear "no NVIDIA driver" error; with a fake
# NVML library (tests/helpers/fake_nvml.c) the failure paths of a run: a
# non-CUDA workload, a crash, a hang, an interrupt. Each ends with a clear
# message, exit status != 0, the workload's process group gone and the store
# unchanged. And one whole profile with a stand-in recording: the profile and
# the profiled command are stored together.
#
#   bash cli_profile.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_profile.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
BUILD=$(cd "$(dirname "$KACE")" && pwd)
WORKER=$BUILD/tests/kace-test-worker
FAKE=$BUILD/tests/libfake_nvml_full.so
export LC_ALL=C
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB=$SCRATCH/store.db
# kace's recording and replay list go to TMPDIR: the test's own, so that files another
# test's kace left in /tmp are not taken for this one's.
export TMPDIR=$SCRATCH/tmp
mkdir -p "$TMPDIR" || exit 1
source "$(dirname "$0")/lib_test.sh" # fail, failures

for f in "$WORKER" "$FAKE"; do [ -e "$f" ] || { echo "FAIL: $f was not built" >&2; exit 1; }; done

# A store with something in it, to check that failures leave it as it was.
printf 'Type,Exclusive100,sm%%,mem%%,memcap\nalready_batch8-train,10,50,20,3.5\n' >"$SCRATCH/system.csv"
"$KACE" import --db "$DB" "$SCRATCH/system.csv" >/dev/null || { echo "FAIL: import" >&2; exit 1; }
fingerprint() { sqlite3 "$DB" .dump | sha256sum; }
before=$(fingerprint)

expect() { # expect NAME STATUS_WANTED(nonzero|2) PATTERN -- command...
    local name=$1 want=$2 pattern=$3
    shift 4
    "$@" >"$SCRATCH/$name.out" 2>"$SCRATCH/$name.err"
    local rc=$?
    if [ "$want" = nonzero ] && [ $rc -eq 0 ]; then fail "$name: exit 0, expected an error"; fi
    if [ "$want" != nonzero ] && [ $rc -ne "$want" ]; then fail "$name: exit $rc, expected $want"; fi
    if [ $rc -ge 128 ] && [ "$want" = nonzero ]; then fail "$name: killed by a signal ($rc)"; fi
    grep -q -- "$pattern" "$SCRATCH/$name.err" || fail "$name: stderr lacks '$pattern': $(cat "$SCRATCH/$name.err")"
    [ "$(fingerprint)" = "$before" ] || fail "$name: the store changed"
}

# 1. No driver: a path that does not exist, and the default library when this machine has none.
KACE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 \
    expect no-driver nonzero "no NVIDIA driver found" -- "$KACE" profile --db "$DB" --name w -- "$WORKER" report
if ! ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1; then
    unset KACE_NVML_LIBRARY
    expect no-driver-default nonzero "no NVIDIA driver found" -- \
        "$KACE" profile --db "$DB" --name w -- "$WORKER" report
fi
# A driver whose NVML cannot start.
KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_nodriver.so \
    expect nvml-init nonzero "no NVIDIA driver is loaded" -- "$KACE" profile --db "$DB" --name w -- true

# 2. Usage errors.
expect no-name 2 "--name W is required" -- "$KACE" profile --db "$DB" -- true
expect no-command 2 "no command to run" -- "$KACE" profile --db "$DB" --name w
expect bad-window 2 "not a number of seconds" -- "$KACE" profile --db "$DB" --name w --window x -- true

# 3. Runs with the fake NVML; the "CUPTI library" is a placeholder file: these
#    workloads never initialise CUDA, so the driver would never load it.
export KACE_NVML_LIBRARY=$FAKE KACE_CUPTI_LIBRARY=$SCRATCH/libkace_cupti_placeholder.so
: >"$KACE_CUPTI_LIBRARY"
P=(profile --db "$DB" --warmup 0.2 --window 0.6 --counters-warmup 0.2 --counters-window 0.4)
expect non-cuda nonzero "never initialised CUDA" -- "$KACE" "${P[@]}" --name w -- "$WORKER" report 1000
expect crash nonzero "crashed: killed by signal 6" -- "$KACE" "${P[@]}" --name w -- "$WORKER" crash 1000 0.2
grep -q "its process group was ended, nothing was stored" "$SCRATCH/crash.err" || fail "crash: no 'nothing was stored'"
expect oom nonzero "oom: ran out of memory" -- "$KACE" "${P[@]}" --name w -- "$WORKER" oom 1000 0.1
grep -q "CUDA out of memory" "$SCRATCH/oom.err" || fail "oom: the workload's stderr tail is not shown"
expect hang nonzero "timeout" -- "$KACE" "${P[@]}" --timeout 1.5 --name w -- "$WORKER" hang 1000 0.3
expect missing-cmd nonzero "spawn-failed: cannot run" -- "$KACE" "${P[@]}" --name w -- /nonexistent/cmd
KACE_CUPTI_LIBRARY=/nonexistent/libkace_cupti.so \
    expect no-cupti nonzero "CUPTI injection library" -- "$KACE" "${P[@]}" --name w -- true

# 5. A whole profile without a GPU: a stand-in "CUDA program" writes a kernel
#    recording where the CUPTI library would (KACE_CUPTI_OUTPUT; the test's
#    recording with its clock marked non-monotonic, so all of it counts) and
#    reports progress. With the injection library replaying it runs at 250
#    samples/s (as kernel replay slows a real one), recording launches only
#    (the clean run, for the replay cap) or without it at 1000: the stored
#    exclusive throughput must be the clean run's. kace's environment holds a
#    CUDA_INJECTION64_PATH of its own, which the clean run without a cap must
#    not inherit. The counters run gets the cap's list of signatures
#    (KACE_CUPTI_REPLAY): the longest GPU time first, covering 95% of it.
#    kace stores the profile and the command in one transaction, and
#    `kace workload list` then shows the command that `kace measure` would run.
SRC=$(cd "$(dirname "$0")" && pwd)
sed 's/^clock monotonic/clock realtime/' "$SRC/data/cupti/small.txt" >"$SCRATCH/recording.txt"
cat >"$SCRATCH/fake-cuda.sh" <<EOS
#!/bin/sh
# \$1: which run crashes (clean, counters or none).
# A run started ahead waits at its CUDA start until kace opens its gate, as the
# injection library makes it wait (one byte down the FIFO).
if [ -n "\${KACE_CUPTI_GATE:-}" ]; then
    head -c 1 "\$KACE_CUPTI_GATE" >/dev/null || exit 75
    unset KACE_CUPTI_GATE
fi
if [ -n "\${CUDA_INJECTION64_PATH:-}" ] && [ "\${KACE_CUPTI_COUNTERS:-1}" = 0 ]; then
    # The injection library recording launches only: no replay, no counter records.
    echo "launches run: \$CUDA_INJECTION64_PATH" >>"$SCRATCH/runs.log"
    sed '/^counters /d' "$SCRATCH/recording.txt" >"\$KACE_CUPTI_OUTPUT" || exit 3 # keeps the cut last line
    [ "\$1" = clean ] && exec "$WORKER" crash 1000 0.1
    exec "$WORKER" report 1000
fi
if [ -n "\${CUDA_INJECTION64_PATH:-}" ]; then
    echo "counters run: \$CUDA_INJECTION64_PATH\${KACE_CUPTI_REPLAY:+, replay list}" >>"$SCRATCH/runs.log"
    [ -n "\${KACE_CUPTI_REPLAY:-}" ] && cp "\$KACE_CUPTI_REPLAY" "$SCRATCH/replay-list.txt"
    [ "\$1" = counters ] && exec "$WORKER" crash 250 0.1
    [ "\$1" = slow ] && sleep 3 # a long start, as a PyTorch model's first steps under kernel replay
    cp "$SCRATCH/recording.txt" "\$KACE_CUPTI_OUTPUT" || exit 3
    # A child CUDA process's recording, as the injection library names it.
    [ "\$1" = child ] && echo "kace-cupti 1" >"\$KACE_CUPTI_OUTPUT.4242"
    exec "$WORKER" report 250
fi
echo "clean run: output=\${KACE_CUPTI_OUTPUT:-none}" >>"$SCRATCH/runs.log"
[ "\$1" = clean ] && exec "$WORKER" crash 1000 0.1
exec "$WORKER" report 1000
EOS
chmod +x "$SCRATCH/fake-cuda.sh"
rm -f "$SCRATCH/runs.log"
if CUDA_INJECTION64_PATH=/inherited/libkace_cupti.so "$KACE" "${P[@]}" --name ok_batch4-train -- \
    "$SCRATCH/fake-cuda.sh" none >"$SCRATCH/ok.out" 2>"$SCRATCH/ok.err"; then
    grep -q "stored with its command" "$SCRATCH/ok.out" || fail "ok: $(cat "$SCRATCH/ok.out")"
    grep -q "1/2 done: " "$SCRATCH/ok.err" && grep -q "2/2 done: " "$SCRATCH/ok.err" ||
        fail "ok: the phases' outcomes are not shown: $(cat "$SCRATCH/ok.err")"
    # Kernels per sample only where the recording's kernels and the samples share a window
    # (a monotonic clock); this canned recording's clock is realtime. The dry run covers the rest.
    grep -q "kernels per sample" "$SCRATCH/ok.err" &&
        fail "ok: kernels per sample from a recording without a monotonic clock: $(grep '2/2 done' "$SCRATCH/ok.err")"
    printf '%s\n' "launches run: $KACE_CUPTI_LIBRARY" "counters run: $KACE_CUPTI_LIBRARY, replay list" \
        >"$SCRATCH/runs.want"
    cmp -s "$SCRATCH/runs.log" "$SCRATCH/runs.want" || fail "ok: the runs were: $(cat "$SCRATCH/runs.log")"
    # The recording's 4 signatures by GPU time: warmup 500 us, gemm (grid 80) 300, stream 60,
    # gemm (grid 40) 10; 95% of 870 us needs the first 3 (860 us, 98.9%).
    printf '%s\n' "1 1 1 32 1 1 _Z6warmupv" "80 1 1 256 1 1 _Z4gemmPfS_S_i" "1024 1 1 128 1 1 _Z6streamPKfPfm" \
        >"$SCRATCH/list.want"
    cmp -s "$SCRATCH/replay-list.txt" "$SCRATCH/list.want" ||
        fail "ok: the replay list was: $(cat "$SCRATCH/replay-list.txt" 2>&1)"
    [ -e "$SCRATCH/replay-list.txt" ] && ls "$TMPDIR"/kace-cupti-* >/dev/null 2>&1 &&
        fail "ok: the recording, replay list or stop file was left behind: $(ls "$TMPDIR")"
    # The counters run's recording has counters for gemm (grid 80) and stream: 360 of 870 us.
    [ "$(sqlite3 "$DB" "SELECT round(p.value, 3) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='ok_batch4-train' AND p.metric='counters_time_share'")" = 0.414 ] ||
        fail "ok: counters_time_share is not 0.414 (360 of 870 us)"
    grep -q "replay cap: 3 of 4 kernel signatures replayed, 98.9% of the clean run's GPU time" "$SCRATCH/ok.err" ||
        fail "ok: no replay cap line: $(cat "$SCRATCH/ok.err")"
    [ "$(sqlite3 "$DB" "SELECT group_concat(m, ' ') FROM (SELECT p.metric || '=' || round(p.value, 3) AS m
                         FROM profiles p JOIN workloads w ON w.id=p.workload_id WHERE w.name='ok_batch4-train'
                         AND p.metric LIKE 'replay%' ORDER BY p.metric)")" = \
        "replay_cover=0.95 replay_max=40.0 replay_signatures=3.0 replay_signatures_seen=4.0 replay_time_share=0.989" ] ||
        fail "ok: the cap stored: $(sqlite3 "$DB" "SELECT p.metric, p.value FROM profiles p JOIN workloads w
                                   ON w.id=p.workload_id WHERE w.name='ok_batch4-train' AND p.metric LIKE 'replay%'")"
    thr=$(sqlite3 "$DB" "SELECT value FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='ok_batch4-train' AND p.metric='exclusive_throughput'")
    awk -v t="$thr" 'BEGIN { exit !(t > 900 && t < 1100) }' ||
        fail "ok: exclusive throughput '$thr', expected ~1000 (the clean run's, not the counters run's 250)"
    [ "$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='ok_batch4-train' AND p.metric='Registers' AND p.value > 0")" = 1 ] ||
        fail "ok: no kernel metric stored"
    # Not an MPS client: NVML's values are stored (the device's, alone on it).
    [ "$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='ok_batch4-train' AND p.metric='sm%' AND p.value IS NOT NULL")" = 1 ] ||
        fail "ok: sm% missing"
    # The host side: its process group's CPU% and share of the host's memory.
    [ "$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='ok_batch4-train' AND ((p.metric='CPU%' AND p.value >= 0)
                               OR (p.metric='MainMem%' AND p.value > 0 AND p.value < 100))")" = 2 ] ||
        fail "ok: host CPU% or MainMem% missing: $(sqlite3 "$DB" "SELECT p.metric, p.value FROM profiles p
                         JOIN workloads w ON w.id=p.workload_id WHERE w.name='ok_batch4-train'")"
    "$KACE" workload --db "$DB" list >"$SCRATCH/list.out" 2>&1 || fail "workload list: $(cat "$SCRATCH/list.out")"
    grep -qx "ok_batch4-train: $SCRATCH/fake-cuda.sh none" "$SCRATCH/list.out" ||
        fail "ok: the profiled command is not stored: $(cat "$SCRATCH/list.out")"
else
    fail "ok: exit $?: $(cat "$SCRATCH/ok.err")"
fi
before=$(fingerprint)

# 5a'. No cap (--replay-cover 1 --replay-max 0): the clean run without the library, as before
#      the cap, every signature replayed (no list), and the profile says so: share 1, the
#      counts missing (not known without the clean run's launches). --replay-max 1: the
#      longest signature only.
rm -f "$SCRATCH/runs.log" "$SCRATCH/replay-list.txt"
if "$KACE" "${P[@]}" --replay-cover 1 --replay-max 0 --name nocap_batch4-train -- "$SCRATCH/fake-cuda.sh" none \
    >"$SCRATCH/nocap.out" 2>"$SCRATCH/nocap.err"; then
    printf '%s\n' "clean run: output=none" "counters run: $KACE_CUPTI_LIBRARY" >"$SCRATCH/runs.want"
    cmp -s "$SCRATCH/runs.log" "$SCRATCH/runs.want" || fail "nocap: the runs were: $(cat "$SCRATCH/runs.log")"
    grep -q "replay cap: none" "$SCRATCH/nocap.err" || fail "nocap: $(cat "$SCRATCH/nocap.err")"
    [ "$(sqlite3 "$DB" "SELECT group_concat(m, ' ') FROM (SELECT p.metric || '=' || coalesce(p.value, 'null') AS m
                         FROM profiles p JOIN workloads w ON w.id=p.workload_id WHERE w.name='nocap_batch4-train'
                         AND p.metric LIKE 'replay%' ORDER BY p.metric)")" = \
        "replay_cover=1.0 replay_max=0.0 replay_signatures=null replay_signatures_seen=null replay_time_share=1.0" ] ||
        fail "nocap: the cap stored: $(sqlite3 "$DB" "SELECT p.metric, p.value FROM profiles p JOIN workloads w
                                      ON w.id=p.workload_id WHERE w.name='nocap_batch4-train'")"
else
    fail "nocap: exit $?: $(cat "$SCRATCH/nocap.err")"
fi
if "$KACE" "${P[@]}" --replay-max 1 --name cap1_batch4-train -- "$SCRATCH/fake-cuda.sh" none \
    >"$SCRATCH/cap1.out" 2>"$SCRATCH/cap1.err"; then
    [ "$(cat "$SCRATCH/replay-list.txt")" = "1 1 1 32 1 1 _Z6warmupv" ] ||
        fail "cap1: the replay list was: $(cat "$SCRATCH/replay-list.txt")"
    grep -q "replay cap: 1 of 4 kernel signatures replayed, 57.5% of" "$SCRATCH/cap1.err" ||
        fail "cap1: $(cat "$SCRATCH/cap1.err")"
else
    fail "cap1: exit $?: $(cat "$SCRATCH/cap1.err")"
fi
before=$(fingerprint)
expect cover-zero 2 "replay-cover" -- "$KACE" "${P[@]}" --replay-cover 0 --name w -- true
expect max-bad 2 "replay-max" -- "$KACE" "${P[@]}" --replay-max -1 --name w -- true

# 5b. A failure of either run stores nothing, and says which run failed.
expect clean-crash nonzero "clean run (1/2): workload w crashed" -- "$KACE" "${P[@]}" --name w -- \
    "$SCRATCH/fake-cuda.sh" clean
grep -q "counters run" "$SCRATCH/clean-crash.err" && fail "clean-crash: the counters run started after a failure"
expect counters-crash nonzero "counters run (2/2): workload w crashed" -- "$KACE" "${P[@]}" --name w -- \
    "$SCRATCH/fake-cuda.sh" counters
grep -q "1/2 done" "$SCRATCH/counters-crash.err" || fail "counters-crash: the clean run did not finish first"
grep -q "nothing was stored" "$SCRATCH/counters-crash.err" || fail "counters-crash: no 'nothing was stored'"

# 5b'. --budget S bounds both runs together: the counters run gets what the clean run left,
#      the clean run what the counters run's warm-up and window (0.6 s here) leave. A
#      counters run that starts 3 s late fails when each run has 3 s (--timeout 3), and
#      fits a budget of 6 s for both. With a budget of 1 s the clean run has 0.4 s, too
#      little for its own 0.8 s: it fails as a clean-run timeout and the counters run never
#      starts. A budget not above the counters run's warm-up and window fails at once.
expect split-timeout nonzero "counters run (2/2): workload w timeout" -- "$KACE" "${P[@]}" --timeout 3 --name w -- \
    "$SCRATCH/fake-cuda.sh" slow
: >"$SCRATCH/runs.log"
expect budget-short nonzero "clean run (1/2): workload w timeout: timeout after 0.4 s" \
    -- "$KACE" "${P[@]}" --budget 1 --name w -- "$SCRATCH/fake-cuda.sh" none
grep -q "counters run:" "$SCRATCH/runs.log" && fail "budget-short: the counters run started"
"$KACE" "${P[@]}" --budget 6 --name budget_batch4-train -- "$SCRATCH/fake-cuda.sh" slow >"$SCRATCH/budget.out" 2>&1 &&
    grep -q "2/2 done: " "$SCRATCH/budget.out" || fail "budget: a slow counters run within --budget 6: $(cat "$SCRATCH/budget.out")"
before=$(fingerprint)
expect budget-tiny nonzero "a budget of 0.5 s is not more than the counters run's warm-up and window (0.6 s)" \
    -- "$KACE" "${P[@]}" --budget 0.5 --name w -- "$SCRATCH/fake-cuda.sh" none
[ -z "$(grep -c 'clean run' "$SCRATCH/budget-tiny.err" | grep -v '^0$')" ] || fail "budget-tiny: a run started"
"$KACE" "${P[@]}" --budget x --name w -- true >/dev/null 2>"$SCRATCH/budget-bad.err"
[ $? = 2 ] && grep -q -- "--budget.*not a number of seconds" "$SCRATCH/budget-bad.err" ||
    fail "--budget x: $(cat "$SCRATCH/budget-bad.err")"
before=$(fingerprint)

# 5c. The workload runs as an MPS client (an MPS daemon on the machine; the
#     fake NVML lists kace's children as MPS clients, their utilization
#     samples belong to a server): sm% and mem% are stored as missing, never
#     the device's; memcap is its MPS client memory; a note says so once.
if KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_mps.so "$KACE" "${P[@]}" --name mps_batch4-train -- \
    "$SCRATCH/fake-cuda.sh" none >"$SCRATCH/mps.out" 2>"$SCRATCH/mps.err"; then
    [ "$(grep -c "ran as an MPS client" "$SCRATCH/mps.err")" = 1 ] || fail "mps: no single note: $(cat "$SCRATCH/mps.err")"
    [ "$(sqlite3 "$DB" "SELECT group_concat(m, ' ') FROM (SELECT p.metric || '=' || coalesce(p.value, 'null') AS m
                         FROM profiles p JOIN workloads w ON w.id=p.workload_id WHERE w.name='mps_batch4-train'
                         AND p.metric IN ('sm%', 'mem%') ORDER BY p.metric)")" = "mem%=null sm%=null" ] ||
        fail "mps: sm%/mem% stored: $(sqlite3 "$DB" "SELECT p.metric, p.value FROM profiles p JOIN workloads w
                                      ON w.id=p.workload_id WHERE w.name='mps_batch4-train'")"
    [ "$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='mps_batch4-train' AND p.metric='memcap' AND p.value > 0")" = 1 ] ||
        fail "mps: memcap missing"
else
    fail "mps: exit $?: $(cat "$SCRATCH/mps.err")"
fi

# 5d. Profiling ok_batch4-train again on another GPU (NVML's name) replaces
#     its whole profile: kace says how many values it moved to history, and
#     every stored value of it is the new GPU's, those that came back
#     unchanged (Threads, Registers: the same recording) too.
n_old=$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                       WHERE w.name='ok_batch4-train'")
if KACE_FAKE_GPU_NAME="Fake Other GPU" "$KACE" "${P[@]}" --name ok_batch4-train -- \
    "$SCRATCH/fake-cuda.sh" none >"$SCRATCH/regpu.out" 2>"$SCRATCH/regpu.err"; then
    grep -q "^ok_batch4-train: $n_old stored profile values measured on 'Fake GPU 80GB' moved to history" \
        "$SCRATCH/regpu.out" || fail "regpu: no count of $n_old retired values: $(cat "$SCRATCH/regpu.out")"
    [ "$(sqlite3 "$DB" "SELECT group_concat(DISTINCT s.gpu) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         JOIN sources s ON s.id=p.source_id WHERE w.name='ok_batch4-train'")" = "Fake Other GPU" ] ||
        fail "regpu: the profile still mixes GPUs: $(sqlite3 "$DB" "SELECT p.metric, s.gpu FROM profiles p JOIN
                      workloads w ON w.id=p.workload_id JOIN sources s ON s.id=p.source_id WHERE w.name='ok_batch4-train'")"
else
    fail "regpu: exit $?: $(cat "$SCRATCH/regpu.err")"
fi

# 5e. A child CUDA process wrote its own recording (FILE.<pid>): kace says
#     so, profiles the first process's, and removes the child's unless kept.
if "$KACE" "${P[@]}" --name child_batch4-train -- "$SCRATCH/fake-cuda.sh" child \
    >"$SCRATCH/child.out" 2>"$SCRATCH/child.err"; then
    grep -q "note: 1 other CUDA process(es) of child_batch4-train wrote recordings of their own (.*\.4242)" \
        "$SCRATCH/child.err" || fail "child: no note: $(cat "$SCRATCH/child.err")"
    ls "${TMPDIR:-/tmp}"/kace-cupti-*.4242 >/dev/null 2>&1 && fail "child: the child's recording was left behind"
else
    fail "child: exit $?: $(cat "$SCRATCH/child.err")"
fi
if "$KACE" "${P[@]}" --keep-recording "$SCRATCH/kept.cupti" --name child_batch4-train -- \
    "$SCRATCH/fake-cuda.sh" child >"$SCRATCH/child2.out" 2>"$SCRATCH/child2.err"; then
    [ -s "$SCRATCH/kept.cupti.4242" ] || fail "child: --keep-recording did not keep the child's recording"
else
    fail "child: exit $? with --keep-recording: $(cat "$SCRATCH/child2.err")"
fi
before=$(fingerprint)

# 5f. --no-counters: one run, the clean run with the injection library
#     recording launches only (KACE_CUPTI_COUNTERS=0): the throughput is
#     that run's (1000, not a replaying run's 250), the launch metrics
#     (Threads, Registers) are stored, the counter metrics are stored as
#     missing (so models trained on the store use the no-counters set).
rm -f "$SCRATCH/runs.log"
if "$KACE" "${P[@]}" --no-counters --name nc_batch4-train -- "$SCRATCH/fake-cuda.sh" none \
    >"$SCRATCH/nc.out" 2>"$SCRATCH/nc.err"; then
    printf '%s\n' "launches run: $KACE_CUPTI_LIBRARY" >"$SCRATCH/runs.want"
    cmp -s "$SCRATCH/runs.log" "$SCRATCH/runs.want" || fail "no-counters: the runs were: $(cat "$SCRATCH/runs.log")"
    grep -q "metric set no-counters" "$SCRATCH/nc.out" || fail "no-counters: $(cat "$SCRATCH/nc.out")"
    grep -q "2/2" "$SCRATCH/nc.err" && fail "no-counters: a counters run: $(cat "$SCRATCH/nc.err")"
    q() { sqlite3 "$DB" "SELECT $1 FROM profiles p JOIN workloads w ON w.id=p.workload_id
                         WHERE w.name='nc_batch4-train' AND $2"; }
    thr=$(q value "p.metric='exclusive_throughput'")
    awk -v t="$thr" 'BEGIN { exit !(t > 900 && t < 1100) }' || fail "no-counters: exclusive throughput '$thr'"
    [ "$(q count\(\*\) "p.metric IN ('Threads', 'Registers', 'Static Shared Memory') AND p.value >= 0")" = 3 ] ||
        fail "no-counters: launch metrics missing: $(q "p.metric || '=' || coalesce(p.value, 'null')" 1)"
    [ "$(q "group_concat(p.metric || '=' || coalesce(p.value, 'null'), ' ')" \
        "p.metric IN ('Compute (SM) Throughput', 'DRAM Throughput', 'Memory Throughput') ORDER BY p.metric")" = \
        "Compute (SM) Throughput=null DRAM Throughput=null Memory Throughput=null" ] ||
        fail "no-counters: counter metrics not stored as missing: $(q "p.metric || '=' || coalesce(p.value, 'null')" 1)"
else
    fail "no-counters: exit $?: $(cat "$SCRATCH/nc.err")"
fi
before=$(fingerprint)
expect nc-crash nonzero "clean run (1/1): workload w crashed" -- "$KACE" "${P[@]}" --no-counters --name w -- \
    "$WORKER" crash 1000 0.2
expect nc-non-cuda nonzero "never initialised CUDA" -- "$KACE" "${P[@]}" --no-counters --name w -- \
    "$WORKER" report 1000

# 6. kace import-cupti: a recording made outside kace profile (Slurm's
#    --kace-profile): a broken one names its line and stores nothing; a good
#    one stores the kernel metrics of all its kernels.
printf 'kace-cupti 1\nkernel 1 2 x\n' >"$SCRATCH/broken.cupti"
expect import-cupti-broken nonzero "broken.cupti:2:" -- "$KACE" import-cupti --db "$DB" --workload c_batch1-inf \
    "$SCRATCH/broken.cupti"
expect import-cupti-usage 2 "--workload W is required" -- "$KACE" import-cupti --db "$DB" "$SCRATCH/recording.txt"
if "$KACE" import-cupti --db "$DB" --workload c_batch1-inf "$SCRATCH/recording.txt" >"$SCRATCH/ic.out" 2>&1; then
    [ "$(sqlite3 "$DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                        WHERE w.name='c_batch1-inf' AND p.value IS NOT NULL")" = 11 ] ||
        fail "import-cupti: expected 11 kernel metrics: $(cat "$SCRATCH/ic.out")"
else
    fail "import-cupti: $(cat "$SCRATCH/ic.out")"
fi
before=$(fingerprint)

# 4. SIGINT while a workload that ignores SIGTERM runs: kace ends its group and says so.
token="kace-cli-profile-$$"
"$KACE" profile --db "$DB" --timeout 60 --name w -- "$WORKER" ignore-term 1000 1000 "$token" \
    >/dev/null 2>"$SCRATCH/sigint.err" &
kace_pid=$!
for _ in $(seq 50); do pgrep -f "$token" | grep -vq "^$kace_pid\$" && break; sleep 0.1; done
worker_pid=$(pgrep -f "kace-test-worker ignore-term 1000 1000 $token" | head -1)
[ -n "$worker_pid" ] || fail "sigint: the workload did not start"
kill -INT "$kace_pid"
wait "$kace_pid"
rc=$?
[ $rc -eq 130 ] || fail "sigint: exit $rc, expected 130"
grep -q "cancelled" "$SCRATCH/sigint.err" || fail "sigint: stderr lacks 'cancelled': $(cat "$SCRATCH/sigint.err")"
if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    fail "sigint: workload $worker_pid still runs"
fi
[ "$(fingerprint)" = "$before" ] || fail "sigint: the store changed"

if [ $failures -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "cli_profile: all cases passed"
