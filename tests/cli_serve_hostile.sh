#!/usr/bin/env bash
# kace serve against hostile clients, on loopback (docs/serve.md, "Limits"):
#
#   bash cli_serve_hostile.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# Clients are tests/helpers/slowclient.c (built beside kace) and curl. Slow
# clients connect from other loopback addresses (127.0.0.2, ...) than the
# probes (127.0.0.1), as separate hosts would.
# - 1,100 connections sending headers one byte at a time, from one address
#   and then from 20: /healthz's median stays within 5x its idle median
#   measured in this run, none fails;
# - 400 connections holding 900 KB of 1 MB bodies: RSS (VmRSS) grows by at
#   most 64 MiB, the ones past the cap on partly received bodies get 503;
# - a 21 MB /k8s/filter request (5,000 full Node objects) is answered, and
#   the memory its parse took is given back (RSS within 64 MiB of idle after);
# - a foreign Origin and a non-JSON Content-Type are refused, same-origin
#   and Origin-less requests answered; with --token-file every route but
#   /healthz needs the bearer token, and the extender's routes are served on
#   their own listener (--extender-listen) only;
# - --max-connections refuses connections past it, and /metrics counts the
#   refusals (past the per-client limit too);
# - header and body deadlines close connections that trickle bytes (which
#   keeps an idle timeout from ever firing);
# - a model that cannot answer every endpoint is refused at start and on
#   reload (the old one kept, the reason in the log and in /metrics).
# KACE_HOSTILE_SCALE=N divides the connection counts (the ASan run may use it).
set -u

KACE=${1:?usage: cli_serve_hostile.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
SLOW="$(dirname "$KACE")/kace-test-slowclient"
export LC_ALL=C
SCALE=${KACE_HOSTILE_SCALE:-1}
source "$(dirname "$0")/lib_test.sh"
need curl python3
[ -x "$SLOW" ] || { echo "FAIL: $SLOW is not built" >&2; exit 1; }
# a descriptor per slow connection on each side
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 2400 ] || { echo "FAIL: need 2400 open files, the hard limit is $(ulimit -Hn)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
KACE_PID=""
HOLD_PID=""
cleanup() {
    for pid in $HOLD_PID $KACE_PID; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
}
trap cleanup EXIT

"$KACE" import --db "$DB" "$SHARED/kace-v100" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" --name hostile_slowdown --out "$SCRATCH/slowdown.model" >"$SCRATCH/train.out" 2>&1 &&
    "$KACE" train --db "$DB" --kind linear --name hostile_linear --out "$SCRATCH/linear.model" >>"$SCRATCH/train.out" 2>&1 ||
    { cat "$SCRATCH/train.out" >&2; exit 1; }
cp "$SCRATCH/slowdown.model" "$SCRATCH/served.model"

# start NAME ARGS...: kace serve on a free port; sets KACE_PID, PORT, URL, LOG
start() {
    local name=$1
    shift
    LOG="$SCRATCH/$name.log"
    rm -f "$SCRATCH/port"
    "$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 2 --no-nvml \
        "$@" >"$LOG" 2>&1 &
    KACE_PID=$!
    if ! wait_file "$SCRATCH/port" "$KACE_PID"; then
        fail "kace serve $* did not start: $(cat "$LOG")"
        cleanup
        exit 1
    fi
    PORT=$(cat "$SCRATCH/port")
    URL="http://127.0.0.1:$PORT"
}
stop() {
    kill -TERM "$KACE_PID" && wait "$KACE_PID"
    local status=$?
    [ "$status" = 0 ] || fail "kace serve exited $status after SIGTERM: $(tail -3 "$LOG")"
    KACE_PID=""
    grep -qi 'ERROR: [a-z]*Sanitizer\|runtime error' "$LOG" && fail "sanitizer report: $(grep -i -m3 'error' "$LOG")"
}
# hold ARGS...: slow connections in the background until ready (their state in $SCRATCH/hold.out)
hold() {
    rm -f "$SCRATCH/hold.out"
    "$SLOW" hold "${HOLD_PORT:-$PORT}" "$@" >"$SCRATCH/hold.out" 2>&1 &
    HOLD_PID=$!
    for _ in $(seq 1 400); do
        grep -q '^ready' "$SCRATCH/hold.out" 2>/dev/null && return
        kill -0 "$HOLD_PID" 2>/dev/null || break
        sleep 0.1
    done
    fail "slow client not ready: $(cat "$SCRATCH/hold.out")"
}
unhold() {
    kill -TERM "$HOLD_PID" && wait "$HOLD_PID"
    HOLD_PID=""
}
field() { # field NAME LINE -> the value of NAME=V in LINE (0 when absent)
    echo "$2" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2; f = 1} END {if (!f) print 0}'
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$KACE_PID/status"; }
# post PATH BODY-FILE [CURL-ARGS...] -> status; reply body in $SCRATCH/body
post() {
    local path=$1 data=$2
    shift 2
    curl -s -o "$SCRATCH/body" -w '%{http_code}' -X POST "$@" --data-binary "@$data" "$URL$path"
}
metric() { curl -s ${TOKEN:+-H "Authorization: Bearer $TOKEN"} "$URL/metrics" | awk -v k="$1" '$1 == k {print $2}'; }

B8=bert-base-cased_batch8-train
V2=vit-base-patch16-224_batch2-inf
echo "{\"workloads\": [\"$B8\", \"$V2\"]}" >"$SCRATCH/predict.json"
echo "{\"job\": \"$B8\", \"gpus\": [{\"id\": \"g0\", \"running\": [\"$V2\"]}]}" >"$SCRATCH/place.json"
JSON=(-H 'Content-Type: application/json')

# ==== defaults: connection limits, body memory, extender body, origins ===========
rm -f "$SCRATCH/ext.port"
start defaults --model-file "$SCRATCH/served.model" --extender-listen 127.0.0.1:0 --extender-port-file "$SCRATCH/ext.port"
EXT_PORT=$(cat "$SCRATCH/ext.port")
N_SLOW=$((1100 / SCALE))
idle=$("$SLOW" probe "$PORT" 31)
idle_median=$(field median_us "$idle")
echo "idle /healthz: $idle"

# ---- 1,100 slow header senders from one address: the per-client limit ----------
hold "$N_SLOW" 1 headers 500
ready=$(head -1 "$SCRATCH/hold.out")
busy=$("$SLOW" probe "$PORT" 31)
echo "/healthz with $N_SLOW slow connections from one address ($ready): $busy"
[ "$(field failed "$busy")" = 0 ] || fail "/healthz failed under $N_SLOW slow connections: $busy"
[ "$(field median_us "$busy")" -le $((5 * idle_median)) ] ||
    fail "/healthz median $(field median_us "$busy") us under $N_SLOW slow connections, more than 5x idle ($idle_median us)"
# the server's count (the client may not have seen every refusal yet); +1: this request.
# The probe's last connections may still be closing on the server's side: wait for the
# count to settle (10 s at most, a failure's deadline, not a pause).
for _ in $(seq 1 100); do
    conns=$(metric kace_http_connections)
    [ "${conns:-999}" -le 65 ] && break
    sleep 0.1
done
[ "${conns:-999}" -le 65 ] || fail "one address kept more than its 64 connections: $conns open ($ready)"
refused=$(metric 'kace_http_dropped_total{reason="per_client_limit"}')
[ "${refused:-0}" -ge 1 ] || fail "/metrics counts no connection refused past the per-client limit ($ready)"
# the same address's connections to the extender listener (kube-scheduler's) have their own limit
"$SLOW" hold "$EXT_PORT" 10 1 headers 500 >"$SCRATCH/hold-ext.out" 2>&1 &
EXT_HOLD=$!
for _ in $(seq 1 300); do
    grep -q '^ready' "$SCRATCH/hold-ext.out" 2>/dev/null && break
    sleep 0.1
done
kill -TERM "$EXT_HOLD" && wait "$EXT_HOLD"
[ "$(field open "$(head -1 "$SCRATCH/hold-ext.out")")" = 10 ] ||
    fail "the extender listener refused an address the main listener had at its limit: $(head -1 "$SCRATCH/hold-ext.out")"
unhold

# ---- ... and from 20 addresses (55 each, under the per-client limit) -------------
hold "$N_SLOW" 20 headers 500
ready=$(head -1 "$SCRATCH/hold.out")
busy=$("$SLOW" probe "$PORT" 31)
echo "/healthz with $N_SLOW slow connections from 20 addresses ($ready): $busy"
[ "$(field failed "$busy")" = 0 ] || fail "/healthz failed under $N_SLOW slow connections from 20 addresses: $busy"
[ "$(field median_us "$busy")" -le $((5 * idle_median)) ] ||
    fail "/healthz median $(field median_us "$busy") us under $N_SLOW spread slow connections, more than 5x idle ($idle_median us)"
[ "$(field open "$ready")" -ge $((N_SLOW * 9 / 10)) ] || fail "spread slow connections were refused: $ready"
unhold

# ---- 400 partial 1 MB bodies: bounded memory, 503 past the cap ---------------------
N_BODY=$((400 / SCALE))
# idle (the event, not a pause): the server has closed the slow connections; 1 is this request
for _ in $(seq 1 300); do [ "$(metric kace_http_connections)" -le 1 ] 2>/dev/null && break; sleep 0.1; done
rss0=$(rss_kb)
hold "$N_BODY" 20 body 500 1000000 900000
# the kernel buffers what was sent: wait until the server has taken every
# request (a reserved body or a 503), then watch RSS while it reads the bodies
for _ in $(seq 1 200); do
    pending=$(metric kace_http_pending_body_bytes)
    refused=$(metric 'kace_http_dropped_total{reason="body_memory"}')
    [ $((${pending:-0} / 1000001 + ${refused:-0})) -ge "$N_BODY" ] && break
    sleep 0.1
done
rss1=0
for _ in $(seq 1 8); do
    r=$(rss_kb)
    [ "$r" -gt "$rss1" ] && rss1=$r
    sleep 0.2
done
echo "RSS idle ${rss0} kB, with $N_BODY partial 1 MB bodies at most ${rss1} kB; pending bytes $pending, refused $refused"
[ "$rss1" -le $((rss0 + 64 * 1024)) ] || fail "RSS grew from $rss0 kB to $rss1 kB with $N_BODY partial bodies"
[ "${refused:-0}" -ge 1 ] || fail "/metrics counts no body refused (503) at the memory cap"
[ "${pending:-0}" -le $((40 * 1048576)) ] || fail "pending body bytes $pending over the cap"
unhold
final=$(tail -1 "$SCRATCH/hold.out")
[ "$(field status_503 "$final")" -ge 1 ] || fail "no client saw a 503 at the memory cap: $final"
for _ in $(seq 1 300); do # up to 30 s: the loaded machine may be slow to close them
    [ "$(metric kace_http_pending_body_bytes)" = 0 ] && break
    sleep 0.1
done
[ "$(metric kace_http_pending_body_bytes)" = 0 ] || fail "pending body bytes not released: $(metric kace_http_pending_body_bytes)"

# ---- a 5,000-node extender request (full Node objects, ~21 MB) -------------------
python3 - "$SCRATCH/filter.json" "$B8" "$V2" <<'EOF'
import json, sys
path, job, other = sys.argv[1:4]
def node(i):  # shaped like `kubectl get node -o json` of a GPU node
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": f"gpu-node-{i:05d}", "uid": f"{i:08x}-7c1e-4d2a-9a51-3f0c2b8e6d14",
                         "resourceVersion": str(1000000 + i), "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"kubernetes.io/hostname": f"gpu-node-{i:05d}", "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB",
                                    "nvidia.com/gpu.count": "8", "topology.kubernetes.io/zone": f"zone-{i % 3}"},
                         "annotations": {"kace.io/gpus": json.dumps({f"gpu{g}": [other] if (i + g) % 3 == 0 else []
                                                                     for g in range(8)}),
                                         "node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                                            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:status": {"f:conditions": {}, "f:images": {}}}}]},
            "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24", "providerID": f"aws:///us-east-1a/i-{i:017x}"},
            "status": {"capacity": {"cpu": "96", "memory": "791353432Ki", "nvidia.com/gpu": "8", "pods": "110"},
                       "allocatable": {"cpu": "95690m", "memory": "780120216Ki", "nvidia.com/gpu": "8", "pods": "110"},
                       "conditions": [{"type": t, "status": "False", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Kubelet" + t,
                                       "message": "kubelet has no " + t.lower()}
                                      for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
                       "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"},
                                     {"type": "Hostname", "address": f"gpu-node-{i:05d}"}],
                       "nodeInfo": {"kubeletVersion": "v1.29.3", "containerRuntimeVersion": "containerd://1.7.13",
                                    "kernelVersion": "5.15.0-1051-aws", "osImage": "Ubuntu 22.04.4 LTS",
                                    "machineID": f"{i:032x}", "systemUUID": f"{i:08x}-0000-0000-0000-000000000000",
                                    "bootID": f"{i:08x}-1111-2222-3333-444444444444",
                                    "operatingSystem": "linux", "architecture": "amd64"},
                       "images": [{"names": [f"registry.example/ml/image-{k}@sha256:{k:064x}",
                                             f"registry.example/ml/image-{k}:v{k}"], "sizeBytes": 1000000000 + k}
                                  for k in range(12)]}}
args = {"Pod": {"metadata": {"name": "p", "labels": {"kace.io/workload": job}}},
        "Nodes": {"items": [node(i) for i in range(5000)]}}
json.dump(args, open(path, "w"))
EOF
size=$(stat -c %s "$SCRATCH/filter.json")
got=$(URL=http://127.0.0.1:$EXT_PORT post /k8s/filter "$SCRATCH/filter.json" "${JSON[@]}")
echo "/k8s/filter with 5,000 Node objects ($size bytes): $got"
[ "$size" -ge 20000000 ] || fail "the generated filter request is only $size bytes"
[ "$got" = 200 ] || fail "/k8s/filter with $size bytes: status $got: $(head -c 300 "$SCRATCH/body")"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); n=len(j['nodes']['items']); sys.exit(0 if n + len(j['failedNodes']) + len(j['failedAndUnresolvableNodes']) == 5000 and n > 0 else 1)" \
    "$SCRATCH/body" 2>/dev/null || fail "/k8s/filter did not judge the 5,000 nodes: $(head -c 300 "$SCRATCH/body")"
# the parse took ~11x the body; it is given back (not under ASan, whose quarantine keeps it)
if ! ldd "$KACE" 2>/dev/null | grep -q libasan; then
    # given back once the server has freed it: RSS is watched until it is, up to 30 s
    for _ in $(seq 1 300); do
        rss2=$(rss_kb)
        [ "$rss2" -le $((rss0 + 64 * 1024)) ] && break
        sleep 0.1
    done
    echo "RSS after the extender request: $rss2 kB (idle $rss0 kB)"
    [ "$rss2" -le $((rss0 + 64 * 1024)) ] || fail "RSS stays at $rss2 kB after the extender request (idle $rss0 kB)"
fi
# the JSON endpoints keep their small limit
head -c 1100000 /dev/zero | tr '\0' ' ' >"$SCRATCH/big.json"
got=$(post /v1/predict "$SCRATCH/big.json" "${JSON[@]}")
[ "$got" = 413 ] || fail "1.1 MB to /v1/predict: status $got, want 413"

# ---- Origin and Content-Type ---------------------------------------------------------
got=$(post /v1/predict "$SCRATCH/predict.json" -H 'Content-Type: text/plain' -H 'Origin: http://evil.example')
[ "$got" = 403 ] || fail "foreign Origin with a text/plain body: status $got, want 403"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H 'Origin: http://evil.example')
[ "$got" = 403 ] || fail "foreign Origin with a JSON body: status $got, want 403"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Origin: http://127.0.0.1:$((PORT + 1))")
[ "$got" = 403 ] || fail "Origin on another port: status $got, want 403"
got=$(URL=http://127.0.0.1:$EXT_PORT post /k8s/filter "$SCRATCH/predict.json" "${JSON[@]}" -H 'Origin: null')
[ "$got" = 403 ] || fail "Origin null: status $got, want 403"
got=$(post /v1/predict "$SCRATCH/predict.json" -H 'Content-Type: text/plain')
[ "$got" = 415 ] || fail "text/plain body without Origin: status $got, want 415"
got=$(post /v1/predict "$SCRATCH/predict.json")
[ "$got" = 415 ] || fail "form-encoded body (curl's default): status $got, want 415"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Origin: http://127.0.0.1:$PORT")
[ "$got" = 200 ] || fail "same-origin POST: status $got, want 200: $(cat "$SCRATCH/body")"
got=$(post /v1/predict "$SCRATCH/predict.json" -H 'Content-Type: application/json; charset=utf-8')
[ "$got" = 200 ] || fail "POST without Origin: status $got, want 200: $(cat "$SCRATCH/body")"
got=$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: http://evil.example' "$URL/healthz")
[ "$got" = 200 ] || fail "GET with a foreign Origin (reads are not refused): status $got"

# ---- a model that cannot answer /v1/place is refused on reload ----------------------
cp "$SCRATCH/linear.model" "$SCRATCH/served.tmp" && mv "$SCRATCH/served.tmp" "$SCRATCH/served.model"
kill -HUP "$KACE_PID"
for _ in $(seq 1 300); do grep -q 'reload (SIGHUP)' "$LOG" && break; sleep 0.1; done
grep -q 'reload (SIGHUP) refused, still serving the previous model: the linear model cannot answer /v1/place' "$LOG" ||
    fail "no refusal in the log: $(tail -3 "$LOG")"
[ "$(metric 'kace_model_reload_failures_total{reason="cannot_answer"}')" = 1 ] ||
    fail "/metrics does not count the refused reload: $(curl -s "$URL/metrics" | grep reload)"
curl -s "$URL/metrics" | grep -q '^kace_model_reload_error_info{reason="cannot_answer",message="the linear model cannot answer' ||
    fail "/metrics does not say why the reload was refused"
curl -s "$URL/healthz" | grep -q '"model":"slowdown"' || fail "the slowdown model is no longer served: $(curl -s "$URL/healthz")"
got=$(post /v1/place "$SCRATCH/place.json" "${JSON[@]}")
[ "$got" = 200 ] || fail "/v1/place after the refused reload: status $got: $(cat "$SCRATCH/body")"
cp "$SCRATCH/slowdown.model" "$SCRATCH/served.model"
kill -HUP "$KACE_PID"
for _ in $(seq 1 300); do grep -q 'reloaded (SIGHUP)' "$LOG" && break; sleep 0.1; done
curl -s "$URL/metrics" | grep -q '^kace_model_reload_error_info' && fail "the refusal is still shown after a good reload"
stop

# ... and at start, unless asked for
"$KACE" serve --db "$DB" --model-file "$SCRATCH/linear.model" --listen 127.0.0.1:0 --watch 0 --no-nvml \
    >"$SCRATCH/linear.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    fail "kace serve started with a linear model"
fi
wait "$pid"
[ $? -ne 0 ] || fail "kace serve with a linear model exited 0"
grep -q 'cannot answer /v1/place' "$SCRATCH/linear.log" || fail "no reason at start: $(cat "$SCRATCH/linear.log")"
start partial --model-file "$SCRATCH/linear.model" --allow-partial-model
curl -s "$URL/healthz" | grep -q '"model":"linear"' || fail "--allow-partial-model did not serve the linear model"
stop

# ==== the global connection limit ======================================================
start global --model-file "$SCRATCH/served.model" --max-connections 40
hold 80 8 headers 200 # 10 per address: under the per-client limit
# the rest wait in the kernel's listen queue: count the server's own sockets
# (+1: the listener) once it has taken at least half (up to 30 s: a loaded
# machine accepts slowly), then the most it holds over a second
server_sockets() { ls -l "/proc/$KACE_PID/fd" | grep -c 'socket:'; }
for _ in $(seq 1 300); do
    [ "$(server_sockets)" -ge 21 ] && break
    sleep 0.1
done
sockets=0
for _ in $(seq 1 10); do
    n=$(server_sockets)
    [ "$n" -gt "$sockets" ] && sockets=$n
    sleep 0.1
done
unhold
# the server sees the slow connections close in its own time: read /metrics once it answers again
for _ in $(seq 1 300); do
    refused=$(metric 'kace_http_dropped_total{reason="connection_limit"}')
    [ -n "$refused" ] && break
    sleep 0.1
done
echo "80 slow connections against --max-connections 40: the server holds $sockets sockets, refused $refused"
[ "${refused:-0}" -ge 1 ] || fail "/metrics counts no connection refused past --max-connections"
[ "$sockets" -le 41 ] && [ "$sockets" -ge 21 ] || fail "--max-connections 40: the server holds $sockets sockets"
got=$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")
[ "$got" = 200 ] || fail "/healthz after the slow connections left: $got"
stop

# ==== short deadlines and a token =====================================================
printf 's3cret-token-%s\n' "$RANDOM" >"$SCRATCH/token"
chmod 600 "$SCRATCH/token"
TOKEN=$(head -1 "$SCRATCH/token")
rm -f "$SCRATCH/ext.port"
start deadlines --model-file "$SCRATCH/served.model" --header-timeout 1 --body-timeout 1 --idle-timeout 30 \
    --token-file "$SCRATCH/token" --allow-origin https://ui.example --extender-listen 127.0.0.1:0 \
    --extender-port-file "$SCRATCH/ext.port"
EXT_PORT=$(cat "$SCRATCH/ext.port")

# Waits (up to 30 s: a loaded machine) until the slow client has seen N of
# its connections closed.
wait_closed() { # N
    for _ in $(seq 1 300); do
        [ "$(field closed "$(tail -1 "$SCRATCH/hold.out")")" -ge "$1" ] && return
        sleep 0.1
    done
}
# headers one byte every 200 ms: alive for the idle timeout, not for the header deadline
hold 5 1 headers 200
wait_closed 5
unhold
final=$(tail -1 "$SCRATCH/hold.out")
[ "$(field closed "$final")" = 5 ] || fail "slow headers were not cut at the 1 s header deadline: $final"
HOLD_PORT=$EXT_PORT hold 5 1 body 200 100000 1000 /k8s/filter # the extender listener: no token needed
wait_closed 5
unhold
final=$(tail -1 "$SCRATCH/hold.out")
[ "$(field closed "$final")" = 5 ] || fail "slow bodies were not cut at the 1 s body deadline: $final"
[ "$(metric 'kace_http_dropped_total{reason="header_timeout"}')" -ge 5 ] || fail "/metrics counts no header deadline"
[ "$(metric 'kace_http_dropped_total{reason="body_timeout"}')" -ge 5 ] || fail "/metrics counts no body deadline"

got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -D "$SCRATCH/headers")
[ "$got" = 401 ] || fail "no token: status $got, want 401"
grep -qi '^WWW-Authenticate: Bearer' "$SCRATCH/headers" || fail "401 without WWW-Authenticate: $(cat "$SCRATCH/headers")"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Authorization: Bearer ${TOKEN}x")
[ "$got" = 401 ] || fail "wrong token: status $got, want 401"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Authorization: Bearer ${TOKEN:0:${#TOKEN}-1}")
[ "$got" = 401 ] || fail "token prefix: status $got, want 401"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Authorization: Bearer $TOKEN")
[ "$got" = 200 ] || fail "right token: status $got, want 200: $(cat "$SCRATCH/body")"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Authorization: Bearer $TOKEN" -H 'Origin: https://ui.example')
[ "$got" = 200 ] || fail "right token from an --allow-origin: status $got, want 200"
got=$(post /v1/predict "$SCRATCH/predict.json" "${JSON[@]}" -H "Authorization: Bearer $TOKEN" -H 'Origin: http://evil.example')
[ "$got" = 403 ] || fail "right token from a foreign Origin: status $got, want 403"
got=$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")
[ "$got" = 200 ] || fail "/healthz needs no token: status $got"
echo '{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["n0"]}' >"$SCRATCH/k8s.json"
got=$(post /k8s/filter "$SCRATCH/k8s.json" "${JSON[@]}" -H "Authorization: Bearer $TOKEN")
[ "$got" = 404 ] || fail "the extender's route on the main listener: status $got, want 404"
got=$(URL=http://127.0.0.1:$EXT_PORT post /k8s/filter "$SCRATCH/k8s.json" "${JSON[@]}")
[ "$got" = 200 ] || fail "the extender listener needs no token (kube-scheduler cannot send one): status $got"
got=$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics")
[ "$got" = 401 ] || fail "/metrics without the token: status $got, want 401"
stop

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s); logs in $SCRATCH" >&2
    exit 1
fi
echo "cli_serve_hostile: all checks passed"
