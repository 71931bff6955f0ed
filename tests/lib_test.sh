# What the shell tests share (sourced, not a test itself):
#
#   (sourcing)                runs the test in a process group of its own and
#                             kills that group when the test ends, however it
#                             ends (see "The test's process group" below)
#   fail MESSAGE...           counts a failed check in $failures (on stderr)
#   check_eq WHAT EXPECTED ACTUAL
#   need TOOL...              exit 1 naming the first TOOL not installed
#   PIDS / kill_pids          processes to stop at exit: a test adds "$!" to
#                             PIDS; kill_pids (the EXIT trap set here, or
#                             called from a test's own) kills and waits each
#   wait_file FILE PID        until FILE is not empty (30 s), 1 at once when
#                             PID has ended
#   wait_line FILE REGEX PID [N]
#                             until FILE has N (1) lines matching REGEX
#                             (grep -E; 30 s), 1 at once when PID has ended
#   started FILE WHAT [LOG]   the process just started in the background ($!)
#                             joins PIDS; waits for it to write FILE (its
#                             port), else exits 1 saying WHAT did not start
#   free_port                 a TCP port free now, below 32768 (see there)
#   finish NAME               exits 1 with the count of failures, else "NAME: ok"

# ---- The test's process group -------------------------------------------------
# A test's background processes, and theirs, must not outlive it: not when it
# fails half-way, exits early, or is interrupted (one left spinning for an hour
# after the suite once). Sourcing this file runs the script again, from the
# start, as the leader of a new process group, and this shell stays behind as
# its supervisor: it waits for the test, passes INT, TERM and HUP on to the
# whole group, and then kills whatever of the group is left (TERM, then KILL),
# naming it on stderr. The test's exit status is the supervisor's. A process
# that made a group of its own (setsid, kace's workloads) is not in it: kill
# those in the test (PIDS, kill_pids) as before. Only for a script that
# sources this file itself (not an interactive shell).
if [ "${KACE_TEST_SUPERVISOR:-}" != "$PPID" ] && [ "${BASH_SOURCE[1]:-}" = "$0" ] && [ -f "$0" ]; then
    set +e
    export KACE_TEST_SUPERVISOR=$$
    # Job control for this one command: the script leads a process group of
    # its own, and SIGINT is not ignored in it as in a plain background job.
    set -m
    "$BASH" "$0" "$@" &
    _kace_test_group=$!
    set +m
    trap 'kill -TERM -- "-$_kace_test_group" 2>/dev/null' INT TERM HUP
    until wait "$_kace_test_group"; _kace_test_rc=$?; ! kill -0 "$_kace_test_group" 2>/dev/null; do :; done
    # The group's live members (zombies only wait for a parent, or an init that reaps, to go).
    _kace_test_left() { ps -e -o pgid=,stat=,pid=,args= | awk -v g="$_kace_test_group" '$1 == g && $2 !~ /^Z/'; }
    if [ -n "$(_kace_test_left)" ]; then
        echo "note: the test left these processes; killing them:" >&2
        _kace_test_left | cut -c1-200 >&2
        kill -TERM -- "-$_kace_test_group" 2>/dev/null
        for _ in $(seq 1 50); do # a grace to clean up in, not a synchronisation
            [ -n "$(_kace_test_left)" ] || break
            sleep 0.1
        done
        kill -KILL -- "-$_kace_test_group" 2>/dev/null
    fi
    exit "$_kace_test_rc"
fi
# A signal ends the test through its EXIT trap (kill_pids, a test's own cleanup).
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
check_eq() { # what expected actual
    if [ "$2" == "$3" ]; then echo "ok: $1 = $3"; else fail "$1: expected '$2', got '$3'"; fi
}

need() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (bash .ci/install-deps)" >&2; exit 1; }
    done
}

PIDS=""
kill_pids() {
    local pid
    for pid in $PIDS; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    PIDS=""
}
trap kill_pids EXIT

wait_file() { # FILE PID
    for _ in $(seq 1 300); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

wait_line() { # FILE REGEX PID [N]
    local n=${4:-1}
    for _ in $(seq 1 300); do
        [ "$(grep -cE -- "$2" "$1" 2>/dev/null)" -ge "$n" ] && return 0
        kill -0 "$3" 2>/dev/null || break
        sleep 0.1
    done
    [ "$(grep -cE -- "$2" "$1" 2>/dev/null)" -ge "$n" ]
}

started() { # FILE WHAT [LOG]
    local pid=$!
    PIDS="$pid $PIDS"
    wait_file "$1" "$pid" && return 0
    echo "FAIL: $2 did not start${3:+: $(cat "$3")}" >&2
    exit 1
}

# A port for a server that takes its port on the command line (Prometheus,
# a stand-in exporter, nginx). Not one the kernel picks (bind to port 0):
# those lie in the ephemeral range (ip_local_port_range, 32768-60999), where
# any outgoing connection may take the port between this check and the
# server's bind. 10000-19999: below the Slurm test clusters' 20000-32767.
free_port() {
    python3 -c '
import random, socket
for _ in range(500):
    port = random.randrange(10000, 20000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("no free port in 10000-19999")'
}

finish() { # NAME
    if [ "$failures" -gt 0 ]; then
        echo "$failures failure(s)" >&2
        exit 1
    fi
    echo "$1: ok"
}
