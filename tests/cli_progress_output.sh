#!/usr/bin/env bash
# kace progress-from-output: a command that does not speak the progress
# protocol, profiled and measured unchanged from its own output lines.
#   1. --check on a saved log: tqdm redraws (\r), \r\n as one end, a new
#      epoch's bar, the records and the summary; bad patterns and counts are
#      refused with file:line:column;
#   2. not run by kace: COMMAND runs with its output and exit status as they are;
#   3. run by kace: the records reach $KACE_PROGRESS_FD with their times,
#      COMMAND's output passes byte for byte, even to a slow reader, COMMAND
#      sees neither kace's pipe nor its variable, SIGTERM goes on to it and
#      the wrapper ends as it did; helpers that keep COMMAND's output open do
#      not keep the wrapper alive; COMMAND dies with the wrapper;
#   4. end to end: kace measure of a tqdm-style workload gets its throughput and
#      reads its ending as mid-step, also when COMMAND prints a last step and
#      exits 0 at SIGTERM; kace profile (fake NVML, a stand-in recording)
#      stores the clean run's throughput.
#
#   cli_progress_output.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
build=$(cd "$(dirname "$kace")" && pwd)
src=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
export LC_ALL=C
unset KACE_PROGRESS_FD
source "$src/lib_test.sh" # fail, check_eq, finish
need python3 sqlite3

pfo() { "$kace" progress-from-output "$@"; }

# ---- 1. --check ----------------------------------------------------------------
printf 'loading\r  0%%| | 0/5 [00:00<?]\r 20%%|#| 1/5 [00:01<00:04]\r 40%%|##| 2/5 [00:02<00:03]\r\n' >"$scratch/bar.log"
printf ' 40%%|##| 2/5 [00:02<00:03]\nepoch 2\n  0%%| | 0/5 [00:00<?]\r 20%%|#| 1/5 [00:01<00:04]\n' >>"$scratch/bar.log"
out=$(pfo --match '([0-9]+)/[0-9]+ \[' --samples 16 --check "$scratch/bar.log" 2>"$scratch/err")
check_eq "check exit" 0 $?
check_eq "check records" "done 16 done 32 done 48" "$(grep '^done' <<<"$out" | tr '\n' ' ' | sed 's/ $//')"
check_eq "check summary" "# 8 lines, 3 counted, 0 errors; 48 samples in all" "$(tail -1 <<<"$out")"
# Without a group every matching line adds --samples.
out=$(pfo --match '\]$' --samples 2 --check - <"$scratch/bar.log")
check_eq "matches without a group" "# 8 lines, 6 counted, 0 errors; 12 samples in all" "$(tail -1 <<<"$out")"

# refused LABEL EXIT PATTERN -- ARGS...: kace progress-from-output ARGS exits EXIT, stderr has PATTERN.
refused() {
    local label=$1 want=$2 pattern=$3
    shift 4
    pfo "$@" >"$scratch/out" 2>"$scratch/err" </dev/null
    local rc=$?
    [ $rc = "$want" ] || fail "$label: exit $rc, expected $want: $(cat "$scratch/err")"
    grep -qF -- "$pattern" "$scratch/err" || fail "$label: stderr lacks '$pattern': $(cat "$scratch/err")"
}
refused "bad pattern" 2 "--match: pattern '(step': " -- --match '(step' --check "$scratch/bar.log"
refused "no pattern" 2 "--match ERE is required" -- --check "$scratch/bar.log"
refused "zero samples" 2 "--samples" -- --match x --samples 0 --check "$scratch/bar.log"
refused "no command" 2 "give the command after --" -- --match x
refused "check and command" 2 "--check takes no command" -- --match x --check "$scratch/bar.log" true
refused "missing log" 1 "$scratch/none.log: No such file" -- --match x --check "$scratch/none.log"
refused "nothing matched" 1 "no line of $scratch/bar.log matched" -- --match zzz --check "$scratch/bar.log"
refused "group out of range" 2 "has 1 group, so no group 2" -- --match 'step ([0-9]+)' --group 2 --check "$scratch/bar.log"
printf 'step 1\nstep 2\nstep 2b\nstep 3\n' >"$scratch/steps.log"
refused "not a count" 1 "$scratch/steps.log:3:6: group 1 matched '2b', expected a count" -- \
    --match 'step ([0-9a-z]+)' --check "$scratch/steps.log"
grep -qx "# 4 lines, 3 counted, 1 errors; 3 samples in all" "$scratch/out" ||
    fail "not a count: the lines after the error are not counted: $(cat "$scratch/out")"

# ---- 2. not run by kace --------------------------------------------------------
out=$(pfo --match x -- sh -c 'echo "out x"; echo "err x" >&2; exit 7' 2>"$scratch/err")
check_eq "exit status, not run by kace" 7 $?
check_eq "stdout, not run by kace" "out x" "$out"
check_eq "stderr, not run by kace" "err x" "$(cat "$scratch/err")"
refused "command not found" 127 "/nonexistent/cmd: No such file" -- --match x -- /nonexistent/cmd
for bad in x 1e1 +7 2; do
    KACE_PROGRESS_FD=$bad refused "descriptor '$bad'" 2 "KACE_PROGRESS_FD='$bad' is not" -- --match x -- true
done
# --group: the count after an alternation (POSIX ERE has no non-capturing group).
printf 'iter 1\nstep 2\nstep 2\niter 5\n' >"$scratch/alt.log"
out=$(pfo --match '^(step|iter) ([0-9]+)' --group 2 --check "$scratch/alt.log")
check_eq "--group 2" "# 4 lines, 3 counted, 0 errors; 5 samples in all" "$(tail -1 <<<"$out")"

# ---- 3. run by kace (its pipe on fd 7) -----------------------------------------
cat >"$scratch/talk.sh" <<'EOS'
#!/bin/sh
# Steps on stdout with other lines between them, noise on stderr, what COMMAND sees of kace.
echo "fd7=$( [ -e /proc/$$/fd/7 ] && echo open || echo closed ) var=${KACE_PROGRESS_FD:-unset}" >&2
for i in 1 2 3 4 5; do
    printf 'step %s loss 0.%s\r\n' "$i" "$i"
    printf 'noise %s\n' "$i" >&2
    sleep 0.05
done
printf 'last line without an end'
exit 3
EOS
chmod +x "$scratch/talk.sh"
"$scratch/talk.sh" >"$scratch/plain.out" 2>"$scratch/plain.err"
KACE_PROGRESS_FD=7 pfo --match '^step ([0-9]+) ' --samples 8 -- "$scratch/talk.sh" \
    >"$scratch/wrapped.out" 2>"$scratch/wrapped.err" 7>"$scratch/records.txt"
check_eq "exit status, run by kace" 3 $?
cmp -s "$scratch/plain.out" "$scratch/wrapped.out" || fail "stdout changed on its way through"
check_eq "what COMMAND sees" "fd7=closed var=unset" "$(head -1 "$scratch/wrapped.err")"
check_eq "stderr passed on" "$(tail -n +2 "$scratch/plain.err")" "$(tail -n +2 "$scratch/wrapped.err")"
check_eq "record counts" "8 16 24 32 40" "$(awk '{ printf "%s%s", (NR > 1 ? " " : ""), $2 }' "$scratch/records.txt")"
# Each record is "done N T" with T in CLOCK_MONOTONIC ns, never decreasing, over the 5 steps' 0.2 s.
awk 'NF != 3 || $1 != "done" || $3 !~ /^[0-9]+$/ || (NR > 1 && $3 < t) { bad = 1 } NR == 1 { t0 = $3 } { t = $3 }
     END { exit bad || t - t0 < 1e8 }' "$scratch/records.txt" || fail "records: $(cat "$scratch/records.txt")"
# Errors name the stream and its own line: stdout's 2nd line (stderr's lines are not counted in).
KACE_PROGRESS_FD=7 pfo --match 'step ([0-9a-z]+)' -- sh -c 'echo a >&2; echo b >&2; echo "step 1"; echo "step 2b"' \
    >/dev/null 2>"$scratch/err" 7>/dev/null
grep -q "stdout:2:6: group 1 matched '2b'" "$scratch/err" || fail "error position: $(cat "$scratch/err")"

# A slow reader of the output loses nothing, records included, after COMMAND has exited.
KACE_PROGRESS_FD=7 pfo --match '^step' -- python3 -c 'for i in range(4000): print("step %05d" % i, "x" * 60)' \
    7>"$scratch/slow-records.txt" |
    python3 -c 'import sys, time
n = 0
while True:
    b = sys.stdin.buffer.read1(4096)
    if not b: break
    n += len(b); time.sleep(0.02)
print(n)' >"$scratch/slow.out"
check_eq "bytes through a slow reader" $((4000 * 72)) "$(cat "$scratch/slow.out")"
check_eq "records through a slow reader" 4000 "$(wc -l <"$scratch/slow-records.txt")"

# SIGTERM goes on to COMMAND at once, and the wrapper ends as COMMAND did.
cat >"$scratch/loop.py" <<'EOF'
import signal, sys, time
if len(sys.argv) > 1:
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(int(sys.argv[1])))
i = 0
while True:
    i += 1
    print("step", i)
    time.sleep(0.02)
EOF
term_after() { # ARGS...: kace progress-from-output ARGS in the background, SIGTERM after its first record; prints its exit
    : >"$scratch/term-records.txt"
    KACE_PROGRESS_FD=7 "$kace" progress-from-output "$@" >/dev/null 7>"$scratch/term-records.txt" &
    local pid=$!
    for _ in $(seq 1 300); do
        [ -s "$scratch/term-records.txt" ] && break
        sleep 0.1
    done
    sleep 0.2
    kill -TERM "$pid"
    wait "$pid"
    echo $?
}
check_eq "ended by SIGTERM as COMMAND was" 143 "$(term_after --match '^step' -- python3 "$scratch/loop.py")"
check_eq "COMMAND's own SIGTERM exit" 5 "$(term_after --match '^step' -- python3 "$scratch/loop.py" 5)"
[ "$(wc -l <"$scratch/term-records.txt")" -ge 2 ] || fail "only $(wc -l <"$scratch/term-records.txt") records"
# COMMAND dies with the wrapper, also when it left its process group (kace's SIGKILL goes to the group).
KACE_PROGRESS_FD=7 "$kace" progress-from-output --match x -- python3 -c 'import os, sys, time
os.setsid(); open(sys.argv[1], "w").write(str(os.getpid())); time.sleep(60)' "$scratch/orphan.pid" 7>/dev/null &
wrapper=$!
for _ in $(seq 1 100); do [ -s "$scratch/orphan.pid" ] && break; sleep 0.1; done
kill -KILL "$wrapper"
wait "$wrapper" 2>/dev/null
orphan=$(cat "$scratch/orphan.pid" 2>/dev/null)
for _ in $(seq 1 30); do kill -0 "${orphan:-0}" 2>/dev/null || break; sleep 0.1; done
if [ -z "$orphan" ] || kill -0 "$orphan" 2>/dev/null; then
    fail "COMMAND (pid ${orphan:-?}) outlived the wrapper's SIGKILL"
    [ -n "$orphan" ] && kill -KILL "$orphan"
fi
# A helper that keeps COMMAND's output open does not keep the wrapper waiting.
start=$(date +%s)
KACE_PROGRESS_FD=7 pfo --match '^step' -- sh -c 'sleep 20 & echo $! >"$1"; echo step' sh "$scratch/helper.pid" \
    >/dev/null 7>"$scratch/helper.txt"
check_eq "exit with a helper left" 0 $?
[ $(($(date +%s) - start)) -le 8 ] || fail "the wrapper waited for COMMAND's helper: $(($(date +%s) - start)) s"
check_eq "its record" 1 "$(awk '{ print $2 }' "$scratch/helper.txt")"
kill "$(cat "$scratch/helper.pid")" 2>/dev/null

# A reader of the wrapper's output that reads nothing does not hold up SIGTERM: COMMAND gets it
# at once (without the wrapper it would be blocked in its own write, and get it there).
cat >"$scratch/chatty.py" <<'EOF'
import signal, sys, time
def stop(sig, frame):
    open(sys.argv[1], "w").write("termed")
    sys.exit(5)
signal.signal(signal.SIGTERM, stop)
while True:
    print("step", "x" * 200)
EOF
mkfifo "$scratch/stuck" && exec 8<>"$scratch/stuck" # a reader that never reads
KACE_PROGRESS_FD=7 "$kace" progress-from-output --match '^step' -- python3 "$scratch/chatty.py" "$scratch/termed" \
    >"$scratch/stuck" 7>/dev/null 8<&- &
pid=$!
# Both pipes full (the event, not a pause): COMMAND sleeps in a write to the wrapper
# (its wchan; a kernel that does not show it: the stuck reader's pipe at least half full).
pipes_full() {
    local cmd wchan
    cmd=$(pgrep -P "$pid" | head -1) && wchan=$(cat "/proc/$cmd/wchan" 2>/dev/null) || return 1
    [ "${wchan:-0}" != 0 ] && { [[ "$wchan" == *pipe_write* ]]; return; }
    python3 -c 'import fcntl, os, struct, sys, termios
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
sys.exit(0 if unread >= fcntl.fcntl(fd, 1032) // 2 else 1)  # 1032: F_GETPIPE_SZ' "$scratch/stuck"
}
for _ in $(seq 1 300); do pipes_full && break; sleep 0.1; done
pipes_full || fail "COMMAND never filled the pipes to a wrapper with a stuck reader"
kill -TERM "$pid"
for _ in $(seq 1 50); do [ -s "$scratch/termed" ] && break; sleep 0.1; done
[ -s "$scratch/termed" ] || fail "SIGTERM did not reach COMMAND while the wrapper's reader was stuck"
exec 8<&- # the reader goes away: the wrapper ends as COMMAND did
wait "$pid"
check_eq "exit after a stuck reader" 5 $?
# COMMAND ended, our reader stuck: a SIGTERM ends the wait for it.
exec 8<>"$scratch/stuck"
KACE_PROGRESS_FD=7 "$kace" progress-from-output --match '^step' -- sh -c 'echo $$ >"$1"; for i in $(seq 1 1200); do
    echo "step $i ................................................................"; done; exit 4' sh "$scratch/cmd.pid" \
    >"$scratch/stuck" 7>/dev/null 8<&- &
pid=$!
# COMMAND ended (the event, not a pause): its process gone or a zombie the wrapper has yet to reap.
cmd_ended() { [ -s "$scratch/cmd.pid" ] && [[ "$(ps -o stat= -p "$(cat "$scratch/cmd.pid")")" =~ ^(Z|$) ]]; }
for _ in $(seq 1 300); do cmd_ended && break; sleep 0.1; done
cmd_ended || fail "COMMAND did not end while its wrapper's reader was stuck"
kill -TERM "$pid"
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
    fail "a SIGTERM after COMMAND's end did not end the wait for a stuck reader"
    kill -KILL "$pid"
fi
wait "$pid"
check_eq "exit after COMMAND's end and a SIGTERM" 4 $?
exec 8<&-
# A reader that goes away ends COMMAND as it would without the wrapper (yes | head -1).
KACE_PROGRESS_FD=7 timeout -k 5 20 "$kace" progress-from-output --match x -- yes 7>/dev/null | head -1 >"$scratch/yes.out"
check_eq "yes | head -1 through the wrapper (SIGPIPE)" "141 y" "${PIPESTATUS[0]} $(cat "$scratch/yes.out")"
# SIGCHLD ignored by whoever started the wrapper: COMMAND's end is still seen.
KACE_PROGRESS_FD=7 python3 -c 'import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.execvp(sys.argv[1], sys.argv[1:])' "$kace" progress-from-output --match x -- sh -c 'echo x; exit 3' \
    >/dev/null 7>/dev/null
check_eq "exit with SIGCHLD ignored" 3 $?

# Ctrl-C to the process group: COMMAND finishes its own cleanup; the wrapper waits for it.
cat >"$scratch/ctrlc.py" <<'EOF'
import sys, time
try:
    while True:
        print("step", flush=True)
        time.sleep(0.05)
except KeyboardInterrupt:
    time.sleep(0.3)
    open(sys.argv[1], "w").write("saved")
EOF
# (A background job of a script starts with SIGINT ignored: the launcher gives it its default.)
KACE_PROGRESS_FD=7 python3 -c 'import os, signal, sys
os.setpgid(0, 0)
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$kace" progress-from-output --match '^step' -- python3 "$scratch/ctrlc.py" \
    "$scratch/saved" >/dev/null 7>"$scratch/ctrlc.rec" &
pid=$!
wait_line "$scratch/ctrlc.rec" '^done' "$pid" # a step's record: COMMAND is in its loop, in its group
kill -INT -- -"$pid"
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { fail "Ctrl-C to the group: still running after 5 s"; kill -KILL -- -"$pid"; }
wait "$pid"
check_eq "exit after Ctrl-C to the group" "0 saved" "$? $(cat "$scratch/saved" 2>/dev/null)"
# Standard output closed: no pipe end lands on fd 1; COMMAND's writes fail as they would.
KACE_PROGRESS_FD=7 timeout -k 5 20 "$kace" progress-from-output --match x -- yes >&- 2>/dev/null 7>/dev/null
check_eq "stdout closed: yes ends by SIGPIPE (124: a hang)" 141 $?

# ---- 4. end to end -------------------------------------------------------------
# A tqdm-style bar on stderr: 50 steps/s of batch 8, redrawn with \r, a new bar every 100 steps.
# With "tidy" it draws one more step at SIGTERM and exits 0, as tqdm's close() in a handler does.
cat >"$scratch/bar.py" <<'EOF'
import signal, sys, time
rate = float(sys.argv[1]) if len(sys.argv) > 1 else 50
t = time.monotonic()
step = 0
def tidy(sig, frame):
    n = step % 100 + 1
    sys.stderr.write("\r%3d%%|###| %d/100 [00:01<00:01]\n" % (n, n))
    sys.exit(0)
if sys.argv[2:] == ["tidy"]:
    signal.signal(signal.SIGTERM, tidy)
while True:
    step += 1
    t += 1 / rate
    time.sleep(max(0, t - time.monotonic()))
    n = (step - 1) % 100 + 1
    sys.stderr.write("\r%3d%%|###| %d/100 [00:01<00:01, %dit/s]" % (n, n, rate))
    if n == 100:
        sys.stderr.write("\n")
EOF
export KACE_DB=$scratch/kace.db
run_dir=$(mktemp -d /tmp/kace-cli-pfo-XXXXXX) || exit 1
trap 'kill_pids; rm -rf "$run_dir"' EXIT
"$kace" workload add bar_batch8-train -- "$kace" progress-from-output --match '([0-9]+)/100 \[' --samples 8 -- \
    python3 "$scratch/bar.py" >/dev/null 2>"$scratch/err" || fail "workload add: $(cat "$scratch/err")"
out=$("$kace" measure --no-mps --quiet --warmup 0.5 --window 3 --run-dir "$run_dir" bar_batch8-train 2>"$scratch/err")
rc=$?
if [ $rc != 0 ]; then
    fail "kace measure of a wrapped workload: exit $rc: $out $(cat "$scratch/err")"
else
    row=$(awk '$1 == "bar_batch8-train"' <<<"$out")
    read -r _ _ status rate _ <<<"$row"
    check_eq "measure status" ok "${status:-}"
    # 400 samples/s over a window that crosses a new bar; 20% slack for a loaded machine.
    awk -v r="${rate:-0}" 'BEGIN { exit !(r > 320 && r < 440) }' || fail "measure: ${rate:-?} samples/s, expected 400: $out"
    # The wrapper cannot stop COMMAND at a step boundary: asked on the control channel, it ends
    # COMMAND with SIGTERM at its next line and reports nothing more; the ending says so (a
    # campaign then gives the next MPS run a fresh daemon).
    grep -q "killed by signal 15 after kace's stop message" <<<"$row" || fail "measure: the ending reads: $row"
fi
# A COMMAND that draws one more step at SIGTERM and exits 0 was still stopped mid-step: the
# wrapper reports nothing after kace's stop, so the ending cannot read as a step boundary.
"$kace" workload add tidy_batch8-train -- "$kace" progress-from-output --match '([0-9]+)/100 \[' --samples 8 -- \
    python3 "$scratch/bar.py" 50 tidy >/dev/null 2>"$scratch/err" || fail "workload add: $(cat "$scratch/err")"
out=$("$kace" measure --no-mps --quiet --warmup 0.3 --window 1 --run-dir "$run_dir" tidy_batch8-train 2>"$scratch/err")
row=$(awk '$1 == "tidy_batch8-train"' <<<"$out")
grep -q "exited with status 0 after kace's stop message, before its next report" <<<"$row" ||
    fail "measure: a COMMAND that exits 0 at SIGTERM after one more line reads: ${row:-$out $(cat "$scratch/err")}"

# kace profile: the fake NVML, a stand-in CUDA program that writes the recording where the
# injection library would and runs at a quarter of its speed when it replays (not when it
# records launches only, KACE_CUPTI_COUNTERS=0: the clean run's warm-up, for the replay cap).
export KACE_NVML_LIBRARY=$build/tests/libfake_nvml_full.so KACE_CUPTI_LIBRARY=$scratch/libkace_cupti_placeholder.so
: >"$KACE_CUPTI_LIBRARY"
sed 's/^clock monotonic/clock realtime/' "$src/data/cupti/small.txt" >"$scratch/recording.txt"
cat >"$scratch/fake-cuda.sh" <<EOS
#!/bin/sh
# A run started ahead waits at its CUDA start until kace opens its gate, as the
# injection library makes it wait (one byte down the FIFO); only then does it record.
if [ -n "\${KACE_CUPTI_GATE:-}" ]; then
    head -c 1 "\$KACE_CUPTI_GATE" >/dev/null || exit 75
    unset KACE_CUPTI_GATE
fi
if [ -n "\${CUDA_INJECTION64_PATH:-}" ]; then
    cp "$scratch/recording.txt" "\$KACE_CUPTI_OUTPUT" || exit 3
    [ "\${KACE_CUPTI_COUNTERS:-1}" = 0 ] || exec python3 "$scratch/bar.py" 12.5
fi
exec python3 "$scratch/bar.py" 50
EOS
chmod +x "$scratch/fake-cuda.sh"
if "$kace" profile --warmup 0.5 --window 2 --counters-warmup 0.2 --counters-window 0.5 --name pbar_batch8-train -- \
    "$kace" progress-from-output --match '([0-9]+)/100 \[' --samples 8 -- "$scratch/fake-cuda.sh" \
    >"$scratch/profile.out" 2>"$scratch/profile.err"; then
    thr=$(sqlite3 "$KACE_DB" "SELECT value FROM profiles p JOIN workloads w ON w.id=p.workload_id
                              WHERE w.name='pbar_batch8-train' AND p.metric='exclusive_throughput'")
    awk -v t="${thr:-0}" 'BEGIN { exit !(t > 320 && t < 440) }' ||
        fail "profile: exclusive throughput '${thr:-}', expected 400 (the clean run's)"
    [ "$(sqlite3 "$KACE_DB" "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id
                             WHERE w.name='pbar_batch8-train' AND p.metric='Registers' AND p.value > 0")" = 1 ] ||
        fail "profile: no kernel metric stored"
else
    fail "profile of a wrapped workload: $(tail -5 "$scratch/profile.err")"
fi

finish cli_progress_output
