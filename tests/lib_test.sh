# What the shell tests share (sourced, not a test itself):
#
#   fail MESSAGE...           counts a failed check in $failures (on stderr)
#   check_eq WHAT EXPECTED ACTUAL
#   need TOOL...              exit 1 naming the first TOOL not installed
#   PIDS / kill_pids          processes to stop at exit: a test adds "$!" to
#                             PIDS; kill_pids (the EXIT trap set here, or
#                             called from a test's own) kills and waits each
#   wait_file FILE PID        until FILE is not empty (30 s), 1 at once when
#                             PID has ended
#   started FILE WHAT [LOG]   the process just started in the background ($!)
#                             joins PIDS; waits for it to write FILE (its
#                             port), else exits 1 saying WHAT did not start
#   free_port                 a TCP port free now, below 32768 (see there)
#   finish NAME               exits 1 with the count of failures, else "NAME: ok"

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
