#!/usr/bin/env bash
# Issue 24's serve goal: `kace serve` answering the partner ranking
# (POST /v1/partners, the top 5 of 52 workloads ranked by the slowdown
# model) at >= 0.8x the requests/s of nginx serving the same reply bytes as
# a static file, at 1 and 16 connections, in the same run; with the kace
# before that work (commit 2d3299e, built in a throwaway worktree) measured
# alongside.
#
# - Load generator: wrk, the same for every server: the same POST request
#   (same body and headers), HTTP/1.1 keep-alive, 1 thread for 1 connection
#   and 2 threads for 16, SECONDS per point.
# - Servers, loopback only, the same number of cores each: kace serve
#   --threads N (libmicrohttpd's pool: N threads, each polling its share of
#   the connections with epoll) and nginx with worker_processes N (default
#   N = 2, the machine's cores; wrk shares them). nginx (Debian's) serves the
#   new kace's reply, saved to a file, to POST /v1/partners: its static
#   module refuses POST with 405, which error_page turns into the file
#   (sendfile, open_file_cache, no access log).
# - R rounds; in each, for 1 then 16 connections: new kace, nginx, old kace,
#   one after the other (alternating, so that the machine's load hits all
#   alike). Per point: requests/s and the server's CPU time per request
#   (utime+stime of its processes from /proc, clock ticks), since the
#   machine is shared.
# - Prints every point, then per connection count min/median/max of
#   requests/s and of the per-round ratios kace/nginx, old/nginx and
#   kace/old, and "goal ... MET/MISSED" on the median of the per-round
#   kace/nginx ratios.
# The two kace binaries must answer the bytes nginx serves (checked).
# usage: bash bench/bench_serve.sh [NEW_KACE_BIN] [V100_DIR] [SECONDS] [R] [N]
#   KACE_BASE_COMMIT (default 2d3299e), KACE_BASE_SERVE_DIR (default
#   /tmp/kace-base-serve): the old tree and its build folder, kept and reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$root/tests/lib_test.sh" # free_port (below the ephemeral range); its EXIT trap gives way to cleanup's
kace=$(readlink -f "${1:-$root/build/kace}")
data=$(readlink -f "${2:-$root/../shared/data/kace-v100}")
seconds=${3:-3}
R=${4:-3}
N=${5:-2}
BASE_COMMIT=${KACE_BASE_COMMIT:-2d3299e}
BASE=${KACE_BASE_SERVE_DIR:-/tmp/kace-base-serve}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
for tool in wrk curl python3 "$nginx"; do
    command -v "$tool" >/dev/null || { echo "bench_serve: $tool is not installed (bash .ci/install-deps)" >&2; exit 1; }
done

# the old kace, built once
if [ ! -d "$BASE" ]; then
    git -C "$root" worktree add --detach "$BASE" "$BASE_COMMIT" >/dev/null 2>&1
fi
[ "$(git -C "$BASE" rev-parse HEAD)" = "$(git -C "$root" rev-parse "$BASE_COMMIT^{commit}")" ] ||
    { echo "bench_serve: $BASE is not at $BASE_COMMIT" >&2; exit 1; }
cmake -S "$BASE" -B "$BASE/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BASE/build" -j2 --target kace-cli >/dev/null
old=$BASE/build/kace

work=$(mktemp -d)
chmod 755 "$work" # nginx's workers read the reply file as nobody
pids=()
cleanup() {
    set +e # a killed child's status must not end the cleanup early
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
body='{"target": "bert-base-cased_batch8-train", "top": 5}'
post() { curl -sf -X POST -H 'Content-Type: application/json' --data-binary "$body" "http://127.0.0.1:$1/v1/partners"; }

# start_kace NAME BIN: its own store (the two binaries' schemas differ), trained by it
start_kace() {
    local name=$1 bin=$2
    mkdir -p "$work/$name"
    "$bin" import --db "$work/$name/kace.db" --quiet "$data" >/dev/null
    "$bin" train --db "$work/$name/kace.db" >/dev/null
    "$bin" serve --db "$work/$name/kace.db" --listen 127.0.0.1:0 --port-file "$work/$name/port" --threads "$N" \
        --watch 0 --no-nvml --quiet >"$work/$name/serve.log" 2>&1 &
    pids+=($!)
    echo $! >"$work/$name/pids"
    for _ in $(seq 1 100); do [ -s "$work/$name/port" ] && break; sleep 0.1; done
    [ -s "$work/$name/port" ] || { echo "bench_serve: $name kace serve did not start: $(cat "$work/$name/serve.log")" >&2; exit 1; }
}
start_kace new "$kace"
start_kace old "$old"
post "$(cat "$work/new/port")" >"$work/reply.json"
post "$(cat "$work/old/port")" >"$work/reply.old.json"
# the same but for the objective the new reply names (raw), which the old one did not
sed 's/,"objective":"raw"//' "$work/reply.json" | cmp -s - "$work/reply.old.json" ||
    { echo "bench_serve: the old and new kace answer different bytes:" >&2; cat "$work/reply.old.json" "$work/reply.json" >&2; exit 1; }

mkdir -p "$work/nginx/www/v1" "$work/nginx/tmp"
cp "$work/reply.json" "$work/nginx/www/v1/partners"
nginx_port=$(free_port)
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes $N;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 60s;
    open_file_cache max=16;
    client_body_temp_path $work/nginx/tmp/body;
    proxy_temp_path $work/nginx/tmp/proxy;
    fastcgi_temp_path $work/nginx/tmp/fastcgi;
    uwsgi_temp_path $work/nginx/tmp/uwsgi;
    scgi_temp_path $work/nginx/tmp/scgi;
    server {
        listen 127.0.0.1:$nginx_port;
        root $work/nginx/www;
        location = /v1/partners { default_type application/json; error_page 405 =200 \$uri; }
    }
}
EOF
"$nginx" -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
pids+=($!)
for _ in $(seq 1 100); do post "$nginx_port" >"$work/reply.nginx.json" 2>/dev/null && break; sleep 0.1; done
cmp -s "$work/reply.json" "$work/reply.nginx.json" ||
    { echo "bench_serve: nginx does not answer the reply bytes: $(cat "$work/nginx/error.log")" >&2; exit 1; }
pgrep -P "$(cat "$work/nginx/nginx.pid")" >"$work/nginx/pids" # the workers
echo "$nginx_port" >"$work/nginx/port"

cat >"$work/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
EOF

ticks=$(getconf CLK_TCK)
cpu_ticks() { # the summed utime+stime of the processes listed in file $1
    local t=0 pid
    for pid in $(cat "$1"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$t"
}
# point NAME CONNECTIONS ROUND -> appends "name c round rps cpu_us_per_request" to points
point() {
    local name=$1 c=$2 round=$3 threads=2 before after
    [ "$c" -lt 2 ] && threads=1
    before=$(cpu_ticks "$work/$name/pids")
    wrk -t"$threads" -c"$c" -d"${seconds}s" --timeout 5s -s "$work/post.lua" \
        "http://127.0.0.1:$(cat "$work/$name/port")/v1/partners" >"$work/wrk.out" 2>&1
    after=$(cpu_ticks "$work/$name/pids")
    if grep -q 'Non-2xx\|Socket errors' "$work/wrk.out"; then
        echo "bench_serve: errors against $name:" >&2
        cat "$work/wrk.out" >&2
        exit 1
    fi
    awk -v name="$name" -v c="$c" -v round="$round" -v cpu=$((after - before)) -v tck="$ticks" \
        '/requests in/ {n = $1} /Requests\/sec:/ {rps = $2}
         END {printf "%s %d %d %.0f %.2f\n", name, c, round, rps, cpu / tck * 1e6 / n}' "$work/wrk.out" >>"$work/points"
    tail -1 "$work/points"
}

echo "kace serve partner ranking vs nginx (static file, same bytes) on loopback: $(nproc) cores, $R rounds," \
    "wrk ${seconds}s per point (1 thread at 1 connection, 2 at 16; keep-alive), same POST for all"
echo "servers: new kace ($kace) --threads $N; nginx $("$nginx" -v 2>&1 | sed 's/.*\///') worker_processes $N;" \
    "old kace ($BASE_COMMIT) --threads $N; reply $(wc -c <"$work/reply.json") bytes, identical from all three"
echo "load before: $(uptime)"
echo "points: server connections round requests/s server-cpu-us/request"
for round in $(seq 1 "$R"); do
    for c in 1 16; do
        for name in new nginx old; do point "$name" "$c" "$round"; done
    done
done
echo "load after:  $(uptime)"

awk -v r="$R" '
    function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
    function stats(a, n,   m) { sort(a, n); m = int((n + 1) / 2); med = (n % 2 ? a[m] : (a[m] + a[m+1]) / 2); lo = a[1]; hi = a[n] }
    { rps[$1, $2, $3] = $4; cpu[$1, $2, $3] = $5 }
    END {
        split("1 16", conns, " ")
        for (ci = 1; ci <= 2; ci++) {
            c = conns[ci]
            for (s = 1; s <= 3; s++) {
                name = (s == 1 ? "new" : s == 2 ? "nginx" : "old")
                for (i = 1; i <= r; i++) { a[i] = rps[name, c, i]; b[i] = cpu[name, c, i] }
                stats(b, r); cmed = med
                stats(a, r)
                printf "c=%-2d %-5s requests/s min %7.0f median %7.0f max %7.0f | server cpu per request median %6.2f us\n", c, name, lo, med, hi, cmed
            }
            for (i = 1; i <= r; i++) { a[i] = rps["new", c, i] / rps["nginx", c, i]; b[i] = rps["old", c, i] / rps["nginx", c, i]; d[i] = rps["new", c, i] / rps["old", c, i] }
            stats(b, r); printf "c=%-2d ratio old/nginx (per round) min %.2f median %.2f max %.2f\n", c, lo, med, hi
            stats(d, r); printf "c=%-2d ratio new/old   (per round) min %.2f median %.2f max %.2f\n", c, lo, med, hi
            for (i = 1; i <= r; i++) e[i] = cpu["nginx", c, i] / cpu["new", c, i]
            stats(e, r); printf "c=%-2d server cpu per request nginx/new (per round) min %.2f median %.2f max %.2f (> 1: kace costs less)\n", c, lo, med, hi
            stats(a, r); printf "c=%-2d ratio new/nginx (per round) min %.2f median %.2f max %.2f\n", c, lo, med, hi
            ok[c] = med >= 0.8; got[c] = med
        }
        printf "goal kace serve partner ranking >= 0.80x nginx (static, same bytes) at 1 and 16 connections: %s (median ratio %.2fx at 1, %.2fx at 16)\n",
            ok[1] && ok[16] ? "MET" : "MISSED", got[1], got[16]
    }' "$work/points"
