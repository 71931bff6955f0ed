#!/usr/bin/env bash
# Speed of `kace serve` on loopback: requests per second and p99 latency of
# the partner-ranking endpoint (POST /v1/partners, the top 5 of ~50
# workloads ranked by the slowdown model) at 1, 16 and 64 concurrent
# connections, measured with wrk in the same run as two peers:
#  - static: GET /healthz of the same server (a small fixed-size JSON reply,
#    no model work): what the HTTP layer alone costs;
#  - python: python3's http.server (ThreadingHTTPServer, HTTP/1.1 keep-alive)
#    answering POST with the very bytes kace answered, precomputed: the cost
#    of serving the same JSON from a common Python service.
# Both the server and wrk share the machine's cores; kace runs with
# --threads 2 (the CI box has two).
# usage: bench/bench_serve.sh [KACE_BIN] [DATA_DIR] [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kace=${1:-$here/../build/kace}
data=${2:-$here/../../shared/data/kace-v100}
seconds=${3:-4}
for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { echo "bench_serve: $tool is not installed (bash .ci/install-deps)" >&2; exit 1; }
done
work=$(mktemp -d)
kace_pid="" peer_pid=""
cleanup() {
    set +e # a killed child's status must not end the cleanup early
    for pid in $peer_pid $kace_pid; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

"$kace" import --db "$work/kace.db" --quiet "$data" >/dev/null
"$kace" train --db "$work/kace.db" >/dev/null
"$kace" serve --db "$work/kace.db" --listen 127.0.0.1:0 --port-file "$work/port" --threads 2 --watch 0 --quiet \
    >"$work/serve.log" 2>&1 &
kace_pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
body='{"target": "bert-base-cased_batch8-train", "top": 5}'
curl -sf -X POST -H 'Content-Type: application/json' --data-binary "$body" "http://127.0.0.1:$port/v1/partners" >"$work/reply.json"

cat >"$work/peer.py" <<'EOF'
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
reply = open(sys.argv[1], "rb").read()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
open(sys.argv[2], "w").write(str(server.server_address[1]))
server.serve_forever()
EOF
python3 "$work/peer.py" "$work/reply.json" "$work/peer_port" 2>/dev/null &
peer_pid=$!
for _ in $(seq 1 100); do [ -s "$work/peer_port" ] && break; sleep 0.1; done
peer_port=$(cat "$work/peer_port")

cat >"$work/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
EOF

# run URL CONNECTIONS [LUA] -> "requests_per_second p99_ms"
run() {
    local url=$1 c=$2 script=${3:-} threads=2
    [ "$c" -lt 2 ] && threads=1
    wrk -t"$threads" -c"$c" -d"${seconds}s" --latency --timeout 5s ${script:+-s "$script"} "$url" >"$work/wrk.out" 2>&1
    if grep -q 'Non-2xx\|Socket errors' "$work/wrk.out"; then
        echo "bench_serve: errors against $url:" >&2
        cat "$work/wrk.out" >&2
        exit 1
    fi
    awk '/Requests\/sec:/ {rps = $2}
         $1 == "99%" {v = $2; unit = v; gsub(/[0-9.]/, "", unit); sub(/[a-z]+$/, "", v);
                      p99 = v * (unit == "us" ? 0.001 : unit == "s" ? 1000 : unit == "m" ? 60000 : 1)}
         END {printf "%.0f %.3f\n", rps, p99}' "$work/wrk.out"
}

echo "kace serve on loopback, wrk ${seconds}s per point, $(nproc) cores; partner ranking = POST /v1/partners (top 5)"
printf '%6s  %22s  %22s  %22s  %9s  %9s\n' "conns" "partners req/s (p99)" "static req/s (p99)" "python req/s (p99)" \
    "vs static" "vs python"
for c in 1 16 64; do
    read -r k_rps k_p99 < <(run "http://127.0.0.1:$port/v1/partners" "$c" "$work/post.lua")
    read -r s_rps s_p99 < <(run "http://127.0.0.1:$port/healthz" "$c")
    read -r p_rps p_p99 < <(run "http://127.0.0.1:$peer_port/v1/partners" "$c" "$work/post.lua")
    printf '%6d  %12s (%6.3f ms)  %12s (%6.3f ms)  %12s (%6.3f ms)  %8.2fx  %8.2fx\n' "$c" "$k_rps" "$k_p99" \
        "$s_rps" "$s_p99" "$p_rps" "$p_p99" "$(echo "$k_rps / $s_rps" | bc -l)" "$(echo "$k_rps / $p_rps" | bc -l)"
done
echo "(ratios: requests/s of the partner ranking over the peer's; > 1 = kace is faster)"
