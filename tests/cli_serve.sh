#!/usr/bin/env bash
# kace serve as a real daemon on a loopback port, driven by real clients
# (hostile ones: cli_serve_hostile.sh):
#
#   bash cli_serve.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - curl: every endpoint with a good request (200 and the expected JSON) and
#   bad ones (malformed JSON, wrong types, unknown workloads, a 2 MB body,
#   unknown path, wrong method: 4xx with a JSON error), the daemon still up;
# - hot reload: a new model in the store is picked up (file change) and so is
#   SIGHUP, while wrk keeps requesting: no request fails (the new model is a
#   linear one, which answers fewer endpoints: --allow-partial-model);
# - a real Prometheus server (Debian's) scrapes /metrics every second; its
#   HTTP API must show the kace series;
# - a bounded wrk load test on the partner ranking: no error;
# - SIGTERM: exits 0 after "stopped".
set -u

KACE=${1:?usage: cli_serve.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl wrk prometheus python3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
KACE_PID=""
PROM_PID=""
WRK_PID=""
cleanup() {
    for pid in $WRK_PID $PROM_PID $KACE_PID; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
}
trap cleanup EXIT

"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }

"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0.2 --threads 2 --allow-partial-model \
    >"$SCRATCH/serve.log" 2>&1 &
KACE_PID=$!
wait_file "$SCRATCH/port" "$KACE_PID" || { echo "FAIL: kace serve did not start: $(cat "$SCRATCH/serve.log")" >&2; exit 1; }
PORT=$(cat "$SCRATCH/port")
URL="http://127.0.0.1:$PORT"

# call METHOD PATH [BODY-FILE|-] -> prints "STATUS" and leaves the body in $SCRATCH/body
call() {
    local method=$1 path=$2 data=${3:-}
    if [ -n "$data" ] || [ "$method" = POST ]; then
        curl -s -o "$SCRATCH/body" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
            --data-binary "$data" "$URL$path"
    else
        curl -s -o "$SCRATCH/body" -w '%{http_code}' -X "$method" "$URL$path"
    fi
}
# json EXPR: evaluates a Python expression on the last body (j) and fails when false
json() {
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$SCRATCH/body" 2>/dev/null
}
expect() { # expect STATUS METHOD PATH [BODY] [PY-EXPR]
    local want=$1 got
    got=$(call "$2" "$3" "${4:-}")
    if [ "$got" != "$want" ]; then
        fail "$2 $3 ${4:0:60}: status $got, want $want: $(head -c 300 "$SCRATCH/body")"
        return
    fi
    if [ -n "${5:-}" ] && ! json "$5"; then
        fail "$2 $3 ${4:0:60}: reply fails '$5': $(head -c 300 "$SCRATCH/body")"
    fi
}

B8=bert-base-cased_batch8-train
V2=vit-base-patch16-224_batch2-inf
W8=whisper-large-v2_batch8-inf
B2=bert-base-cased_batch2-inf

# ---- every endpoint, good requests -----------------------------------------
expect 200 GET /healthz "" 'j["status"] == "ok" and j["model"] == "slowdown" and j["mps_split"] == "split-model" and j["split_grids"] > 200'
grep -q "mps-split: split model fitted on [0-9]* measured grids" "$SCRATCH/serve.log" ||
    fail "serve.log does not say the split model was fitted: $(cat "$SCRATCH/serve.log")"
expect 200 GET /v1/workloads "" "any(w['name'] == '$B8' for w in j['workloads'])"
expect 200 POST /v1/predict "{\"workloads\": [\"$B8\", \"$V2\"]}" \
    'j["predicted_sum"] > 0 and j["measured_sum"] > 0 and len(j["members"]) == 2 and 0 <= j["confidence"] <= 1'
expect 200 POST /v1/partners "{\"target\": \"$B8\", \"top\": 3}" \
    'len(j["partners"]) == 3 and j["partners"][0]["predicted_sum"] >= j["partners"][2]["predicted_sum"]'
expect 200 POST /v1/place "{\"job\": \"$B8\", \"gpus\": [{\"id\": \"g0\", \"running\": [\"$V2\"]}, {\"id\": \"g1\", \"running\": [\"$W8\", \"$V2\"]}]}" \
    'j["gpu"] in ("g0", "g1") and len(j["gpus"]) == 2 and j["policy"] == "kace"'
expect 200 POST /v1/mps-split "{\"workloads\": [\"$B2\", \"$B8\"]}" \
    'sum(j["split"]) in (100, 200) and len(j["candidates"]) == 10 and all(c["feasible"] for c in j["candidates"]) and j["method"] == "split-model" and j["policy"] == "max-sum"'
cp "$SCRATCH/body" "$SCRATCH/split-own.json"
expect 200 POST /v1/mps-split "{\"workloads\": [\"$B2\", \"$B8\"], \"policy\": \"latency\", \"ls_target\": 0.6}" \
    'j["policy"] == "latency" and j["ls_margin"] >= 1 and j["value"] == max(c["value"] for c in j["candidates"]) and (j["value"] >= 0 or all(c["value"] < 0 for c in j["candidates"]))'
expect 400 POST /v1/mps-split "{\"workloads\": [\"$B2\", \"$B8\"], \"policy\": \"fastest\"}" \
    '"max-min" in j["error"]["message"]'
expect 200 POST /v1/observations "{\"gpu\": \"GPU-0\", \"workloads\": [\"$B8\", \"$V2\"], \"throughput\": [20.5, 31]}" \
    'j["recorded"] is True and j["observed_sum"] == 51.5 and j["predicted_sum"] > 0'
NODES="{\"Pod\": {\"metadata\": {\"name\": \"p\", \"labels\": {\"kace.io/workload\": \"$B8\"}}}, \"Nodes\": {\"items\": [
  {\"metadata\": {\"name\": \"n0\", \"annotations\": {\"kace.io/gpus\": \"{\\\"g0\\\": []}\"}}},
  {\"metadata\": {\"name\": \"n1\", \"annotations\": {\"kace.io/gpus\": \"{\\\"g0\\\": [\\\"$V2\\\"]}\"}}},
  {\"metadata\": {\"name\": \"n2\"}}]}}"
# kace schedule's scheduler decides (docs/kubernetes.md): n0's idle GPU first, so only n0 passes
expect 200 POST /k8s/filter "$NODES" \
    '[n["metadata"]["name"] for n in j["nodes"]["items"]] == ["n0"] and "placed the pod" in j["failedAndUnresolvableNodes"]["n1"] and "n2" in j["failedAndUnresolvableNodes"]'
expect 200 POST /k8s/prioritize "$NODES" \
    '[h["host"] for h in j] == ["n0", "n1", "n2"] and j[0]["score"] == 10 and j[2]["score"] == 0 and all(0 <= h["score"] <= 10 for h in j)'
got=$(curl -s -o "$SCRATCH/body" -w '%{http_code}' -I "$URL/healthz")
[ "$got" = 200 ] || fail "HEAD /healthz: $got"

# ---- bad requests: 4xx with a JSON error, and the daemon keeps serving -------
err() { echo "'error' in j and j['error']['status'] == $1 and len(j['error']['message']) > 5"; }
expect 400 POST /v1/predict '{"workloads": [' "$(err 400)"
expect 400 POST /v1/predict '' "$(err 400)"
expect 400 POST /v1/predict '{"workloads": "bert"}' "$(err 400)"
expect 400 POST /v1/predict '{"workloads": [1, 2]}' "$(err 400)"
expect 400 POST /v1/partners "{\"target\": \"$B8\", \"top\": \"three\"}" "$(err 400)"
expect 400 POST /v1/place "{\"job\": \"$B8\", \"gpus\": {}}" "$(err 400)"
expect 422 POST /v1/predict '{"workloads": ["no-such-workload"]}' "$(err 422) and 'no-such-workload' in j['error']['message']"
expect 422 POST /v1/partners '{"target": "no-such-workload"}' "$(err 422)"
expect 400 POST /k8s/filter '{"nodes": {"items": []}}' "$(err 400)"
head -c 2000000 /dev/zero | tr '\0' ' ' >"$SCRATCH/big.json"
expect 413 POST /v1/predict "@$SCRATCH/big.json" "$(err 413)"
# the same without a length (chunked): read and refused
got=$(curl -s -o "$SCRATCH/body" -w '%{http_code}' -X POST -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' \
    --data-binary "@$SCRATCH/big.json" "$URL/v1/predict")
[ "$got" = 413 ] || fail "chunked 2 MB body: status $got, want 413"
expect 404 GET /v1/nothing "" "$(err 404)"
expect 405 GET /v1/partners "" "$(err 405)"
expect 405 POST /metrics '{}' "$(err 405)"
expect 200 GET /healthz "" 'j["status"] == "ok"'
kill -0 "$KACE_PID" 2>/dev/null || fail "kace serve died on bad requests: $(tail -5 "$SCRATCH/serve.log")"

# ---- metrics -------------------------------------------------------------------
curl -s "$URL/metrics" >"$SCRATCH/metrics.txt"
for want in 'kace_http_requests_total{endpoint="predict",code="422"} 1' \
    'kace_http_requests_total{endpoint="predict",code="413"} 2' \
    'kace_decisions_total{endpoint="partners",policy="kace"} 1' \
    'kace_colocation_throughput_samples_per_second{UUID="GPU-0",colocation="'"$B8+$V2"'",kind="observed"} 51.5' \
    'kace_model_loads_total{result="ok"} 1'; do
    grep -qF "$want" "$SCRATCH/metrics.txt" || fail "metrics lack: $want"
done
grep -q '^kace_http_request_duration_seconds_bucket{endpoint="partners",le="+Inf"} 4$' "$SCRATCH/metrics.txt" ||
    fail "no latency histogram for partners"

# ---- wrk: the partner ranking under load, with reloads during it -------------
cat >"$SCRATCH/partners.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"target": "$B8", "top": 5}'
wrk.headers["Content-Type"] = "application/json"
EOF
# the slowdown model's ranking, now held in serve's reply cache
expect 200 POST /v1/partners "{\"target\": \"$B8\", \"top\": 5}" 'j["model"] == "slowdown" and len(j["partners"]) == 5'
cp "$SCRATCH/body" "$SCRATCH/partners.slowdown"
partners_served() {
    curl -s "$URL/metrics" | awk '/^kace_http_request_duration_seconds_bucket\{endpoint="partners",le="\+Inf"\}/ { print $2 }'
}
served_before=$(partners_served)
wrk -t2 -c16 -d4s --timeout 5s -s "$SCRATCH/partners.lua" "$URL/v1/partners" >"$SCRATCH/wrk.out" 2>&1 &
WRK_PID=$!
# wrk under way (the event, not a pause): serve has answered some of its requests.
for _ in $(seq 1 300); do
    [ "$(partners_served)" -gt "$((${served_before:-0} + 16))" ] 2>/dev/null && break
    kill -0 "$WRK_PID" 2>/dev/null || break
    sleep 0.1
done
# a new model in the store: the file watch reloads it
"$KACE" train --db "$DB" --kind linear --promote >"$SCRATCH/train2.out" 2>&1 || fail "kace train --kind linear --promote failed"
# Up to 30 s: a load also fits the MPS split model (seconds under ASan, under load, with wrk running).
for _ in $(seq 1 300); do
    call GET /healthz >/dev/null
    json 'j["model"] == "linear"' && break
    sleep 0.1
done
json 'j["model"] == "linear"' || fail "the new model in the store was not picked up: $(cat "$SCRATCH/body")"
# SIGHUP reloads (the same store: one more successful load). A load also
# fits the MPS split model; under ASan that takes seconds, so wait for it.
kill -HUP "$KACE_PID"
for _ in $(seq 1 200); do grep -q 'reloaded (SIGHUP)' "$SCRATCH/serve.log" && break; sleep 0.1; done
wait "$WRK_PID"
WRK_PID=""
cat "$SCRATCH/wrk.out"
requests=$(awk '/requests in/ {print $1}' "$SCRATCH/wrk.out")
[ "${requests:-0}" -ge 100 ] || fail "wrk made ${requests:-0} requests in 4 s"
grep -q 'Non-2xx' "$SCRATCH/wrk.out" && fail "wrk saw failed requests during the reloads"
grep -q 'Socket errors' "$SCRATCH/wrk.out" && fail "wrk saw socket errors during the reloads"
grep -q 'reloaded (SIGHUP)' "$SCRATCH/serve.log" || fail "no SIGHUP reload in the log: $(tail -3 "$SCRATCH/serve.log")"
# the start, the file change (a WAL store may change on disk twice: two reloads) and SIGHUP
loads=$(curl -s "$URL/metrics" | awk '$1 == "kace_model_loads_total{result=\"ok\"}" {print $2}')
logged=$(($(grep -c 'reloaded (' "$SCRATCH/serve.log") + 1))
[ "${loads:-0}" -ge 3 ] && [ "${loads:-0}" -eq "$logged" ] ||
    fail "expected 3 or more model loads, as many as logged ($logged): ${loads:-none}"
call POST /v1/partners "{\"target\": \"$B8\"}" >/dev/null # by the reloaded model, however long the reload took
# the same request as before the reloads: answered by the new model, not from the previous model's cache
expect 200 POST /v1/partners "{\"target\": \"$B8\", \"top\": 5}" 'j["model"] == "linear" and len(j["partners"]) == 5'
cmp -s "$SCRATCH/body" "$SCRATCH/partners.slowdown" && fail "the partner ranking after the reload is the previous model's"
curl -s "$URL/metrics" | grep -q 'kace_decisions_total{endpoint="partners",policy="KACE"}' ||
    fail "no partner decisions by the linear model after the reload"

# ---- Prometheus scrapes kace --------------------------------------------------
PROM_PORT=$(free_port)
mkdir -p "$SCRATCH/prometheus"
cat >"$SCRATCH/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kace
    static_configs:
      - targets: ['127.0.0.1:$PORT']
EOF
prometheus --config.file="$SCRATCH/prometheus.yml" --storage.tsdb.path="$SCRATCH/prometheus" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$SCRATCH/prometheus.log" 2>&1 &
PROM_PID=$!
query() {
    curl -s -G --data-urlencode "query=$1" "http://127.0.0.1:$PROM_PORT/api/v1/query" >"$SCRATCH/body" 2>/dev/null
}
seen=""
for _ in $(seq 1 60); do
    query 'kace_http_requests_total{endpoint="partners",code="200"}'
    if json 'j["status"] == "success" and len(j["data"]["result"]) == 1 and float(j["data"]["result"][0]["value"][1]) >= 100'; then
        seen=yes
        break
    fi
    kill -0 "$PROM_PID" 2>/dev/null || break
    sleep 0.5
done
[ -n "$seen" ] || fail "Prometheus never showed kace_http_requests_total: $(head -c 300 "$SCRATCH/body"); $(tail -3 "$SCRATCH/prometheus.log")"
for q in 'kace_model_age_seconds' 'kace_http_request_duration_seconds_bucket{endpoint="partners",le="+Inf"}' \
    'kace_decisions_total' 'kace_colocation_throughput_samples_per_second{kind="predicted"}' 'up{job="kace"} == 1'; do
    query "$q"
    json 'j["status"] == "success" and len(j["data"]["result"]) >= 1' || fail "Prometheus has no $q: $(head -c 300 "$SCRATCH/body")"
done
kill "$PROM_PID" && wait "$PROM_PID" 2>/dev/null
PROM_PID=""

# ---- SIGTERM: graceful stop ------------------------------------------------------
kill -TERM "$KACE_PID"
status=""
for _ in $(seq 1 150); do
    if ! kill -0 "$KACE_PID" 2>/dev/null; then
        wait "$KACE_PID"
        status=$?
        break
    fi
    sleep 0.1
done
KACE_PID=""
[ "$status" = 0 ] || fail "kace serve did not exit 0 after SIGTERM (status '${status:-still running}')"
grep -q 'stopped' "$SCRATCH/serve.log" || fail "no 'stopped' in the log"
grep -qi 'ERROR: [a-z]*Sanitizer\|runtime error' "$SCRATCH/serve.log" && fail "sanitizer report: $(grep -i -m3 'error' "$SCRATCH/serve.log")"

# ---- --split-train-db: a store without split grids, its split model fitted on another's ----
# Same profiles, so /v1/mps-split must answer exactly as the first server did.
SP="$SCRATCH/no-grids.db"
{ "$KACE" import --db "$SP" "$REF/profiles" "$REF/colocations/pairs.csv" && "$KACE" train --db "$SP"; } \
    >"$SCRATCH/sp.out" 2>&1 || fail "the store without grids: $(cat "$SCRATCH/sp.out")"
rm -f "$SCRATCH/port"
OTHER="$SCRATCH/other.db"
cp "$DB" "$OTHER" || fail "cp $DB $OTHER"
"$KACE" serve --db "$SP" --split-train-db "$OTHER" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0.2 \
    --allow-partial-model >"$SCRATCH/serve2.log" 2>&1 &
KACE_PID=$!
if wait_file "$SCRATCH/port" "$KACE_PID"; then
    URL="http://127.0.0.1:$(cat "$SCRATCH/port")"
    expect 200 GET /healthz "" 'j["mps_split"] == "split-model" and j["split_grids"] == 560'
    grep -q "mps-split: split model fitted on 560 measured grids of $OTHER" "$SCRATCH/serve2.log" ||
        fail "serve2.log does not say where the split model came from: $(cat "$SCRATCH/serve2.log")"
    expect 200 POST /v1/mps-split "{\"workloads\": [\"$B2\", \"$B8\"]}" 'j["method"] == "split-model"'
    python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
sys.exit(0 if (a["split"], a["predicted"]) == (b["split"], b["predicted"]) else 1)' "$SCRATCH/split-own.json" "$SCRATCH/body" ||
        fail "the split advised with --split-train-db differs: $(head -c 300 "$SCRATCH/body")"
    # OTHER is watched as the store is: replaced by a store without grids, the
    # server reloads and advises by the profile rule.
    cp "$SP" "$OTHER.new" && mv -f "$OTHER.new" "$OTHER" || fail "replacing $OTHER"
    for _ in $(seq 1 100); do
        grep -q "reloaded (file changed)" "$SCRATCH/serve2.log" && break
        sleep 0.1
    done
    grep -q "reloaded (file changed)" "$SCRATCH/serve2.log" && grep -q "advising by the profile rule ($OTHER" "$SCRATCH/serve2.log" ||
        fail "a change of --split-train-db's store was not picked up: $(tail -3 "$SCRATCH/serve2.log")"
    expect 200 GET /healthz "" 'j["mps_split"] == "mps-profile" and j["split_grids"] == 0'
else
    fail "kace serve --split-train-db did not start: $(cat "$SCRATCH/serve2.log")"
fi
kill -TERM "$KACE_PID" 2>/dev/null && wait "$KACE_PID" 2>/dev/null
KACE_PID=""

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s); log: $SCRATCH/serve.log" >&2
    exit 1
fi
echo "cli_serve: all checks passed"
