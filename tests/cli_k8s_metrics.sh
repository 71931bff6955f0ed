#!/usr/bin/env bash
# kace's metrics, alert rules and dashboard against a real Prometheus
#:
#
#   bash cli_k8s_metrics.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - kace serve runs on loopback with the fake NVML library (one GPU,
#   UUID GPU-fake-0) and NODE_NAME=node-a; a colocation is reported far below
#   its prediction, with its pod and namespace;
# - `promtool check metrics` passes on a real scrape of /metrics, whose GPU
#   and colocation series carry DCGM exporter's labels (its camelCase
#   `modelName` is the one lint problem allowed);
# - `promtool check rules` and `promtool test rules` pass on monitoring/;
# - a real Prometheus (Debian's) scrapes kace serve and a recorded DCGM
#   exporter page (tests/data/k8s/dcgm-exporter.prom) and loads the alert
#   rules; every PromQL expression of the rules and of the Grafana dashboard
#   is run through its HTTP API and must return at least one finite value
#   (so the dashboard's joins on UUID find DCGM's series), and every alert
#   must be pending or firing (the test sets their conditions: throughput far
#   below the prediction, a model file 40 days old).
set -u

KACE=${1:?usage: cli_k8s_metrics.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
MON="$HERE/../monitoring"
REF="$SHARED/kace-v100"
FAKE_NVML="$(dirname "$KACE")/tests/libfake_nvml_full.so"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl prometheus promtool python3
python3 -c 'import yaml' 2>/dev/null || { echo "FAIL: python3-yaml is not installed (bash .ci/install-deps)" >&2; exit 1; }
[ -f "$FAKE_NVML" ] || { echo "FAIL: no fake NVML library at $FAKE_NVML" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/dcgm" "$SCRATCH/prometheus" || exit 1
DB="$SCRATCH/store.db"
KACE_PID=""
PROM_PID=""
DCGM_PID=""
cleanup() {
    for pid in $PROM_PID $DCGM_PID $KACE_PID; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
}
trap cleanup EXIT

# ---- the rules on their own ----------------------------------------------------
promtool check rules "$MON/kace-alerts.yml" >"$SCRATCH/check-rules.out" 2>&1 ||
    fail "promtool check rules: $(cat "$SCRATCH/check-rules.out")"
(cd "$MON" && promtool test rules kace-alerts.test.yml) >"$SCRATCH/test-rules.out" 2>&1 ||
    fail "promtool test rules: $(cat "$SCRATCH/test-rules.out")"

# ---- kace serve with a GPU and an observation -------------------------------------
"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
touch -d '40 days ago' "$DB" # the model's age: KaceModelStale's condition
printf '%s\n' '61 30 0 0 0 0 0 0 0 0' >"$SCRATCH/nvml.script"
NODE_NAME=node-a KACE_NVML_LIBRARY="$FAKE_NVML" KACE_FAKE_NVML_SCRIPT="$SCRATCH/nvml.script" \
    "$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 2 \
    >"$SCRATCH/serve.log" 2>&1 &
KACE_PID=$!
for _ in $(seq 1 300); do
    [ -s "$SCRATCH/port" ] && break
    kill -0 "$KACE_PID" 2>/dev/null || break
    sleep 0.1
done
[ -s "$SCRATCH/port" ] || { echo "FAIL: kace serve did not start: $(cat "$SCRATCH/serve.log")" >&2; exit 1; }
PORT=$(cat "$SCRATCH/port")
URL="http://127.0.0.1:$PORT"
post() {
    curl -s -o "$SCRATCH/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data "$2" "$URL$1"
}
B8=bert-base-cased_batch8-train
V2=vit-base-patch16-224_batch2-inf
code=$(post /v1/observations "{\"gpu\": \"GPU-fake-0\", \"workloads\": [\"$B8\", \"$V2\"], \"throughput\": [1, 1],
        \"hostname\": \"node-a\", \"pod\": \"bert-0\", \"namespace\": \"ml\"}")
[ "$code" = 200 ] || fail "observation: HTTP $code $(cat "$SCRATCH/body")"
code=$(post /v1/observations '{"gpu": "GPU-fake-0", "workloads": ["'"$B8"'"], "throughput": [1], "pod": ""}')
[ "$code" = 422 ] || [ "$code" = 400 ] || fail "an empty pod name was not refused: HTTP $code"
for _ in 1 2 3; do post /v1/partners "{\"target\": \"$B8\", \"top\": 3}" >/dev/null; done

# ---- one real scrape: promtool's linter and DCGM's labels -------------------------------
curl -s "$URL/metrics" >"$SCRATCH/metrics.txt" || fail "cannot scrape /metrics"
# promtool's linter wants snake_case label names; DCGM exporter's own
# `modelName` is camelCase, and kace keeps it so the two join. So: the only
# problems allowed are that one, on the GPU series, and the same scrape with
# modelName spelt model_name must pass the linter clean.
promtool check metrics <"$SCRATCH/metrics.txt" >"$SCRATCH/check-metrics.out" 2>&1
grep -v -E "^kace_gpu_(memory_)?utilization_ratio label names should be written in 'snake_case' not 'camelCase'$" \
    "$SCRATCH/check-metrics.out" | grep . && fail "promtool check metrics: $(cat "$SCRATCH/check-metrics.out")"
sed 's/,modelName=/,model_name=/' "$SCRATCH/metrics.txt" | promtool check metrics >"$SCRATCH/check-metrics2.out" 2>&1 ||
    fail "promtool check metrics (modelName aside): $(cat "$SCRATCH/check-metrics2.out")"
for want in 'kace_build_info{version="' \
    'kace_gpu_utilization_ratio{gpu="0",UUID="GPU-fake-0",modelName="Fake GPU 80GB",Hostname="node-a"} 0.6' \
    "kace_colocation_throughput_samples_per_second{UUID=\"GPU-fake-0\",Hostname=\"node-a\",pod=\"bert-0\",namespace=\"ml\",colocation=\"$B8+$V2\",kind=\"observed\"} 2" \
    'kace_colocation_prediction_error_ratio{UUID="GPU-fake-0",Hostname="node-a",pod="bert-0",namespace="ml"'; do
    grep -qF "$want" "$SCRATCH/metrics.txt" || fail "metrics lack: $want"
done
grep -q '^kace_colocation_throughput{' "$SCRATCH/metrics.txt" && fail "the unit-less kace_colocation_throughput is still served"

# ---- a recorded DCGM exporter beside it ---------------------------------------------------
cp "$HERE/data/k8s/dcgm-exporter.prom" "$SCRATCH/dcgm/metrics"
DCGM_PORT=$(free_port)
python3 -m http.server "$DCGM_PORT" --bind 127.0.0.1 --directory "$SCRATCH/dcgm" >"$SCRATCH/dcgm.log" 2>&1 &
DCGM_PID=$!

# ---- a real Prometheus with the rules ---------------------------------------------------------
PROM_PORT=$(free_port)
cat >"$SCRATCH/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $MON/kace-alerts.yml
scrape_configs:
  - job_name: kace
    static_configs:
      - targets: ['127.0.0.1:$PORT']
  - job_name: dcgm
    static_configs:
      - targets: ['127.0.0.1:$DCGM_PORT']
EOF
prometheus --config.file="$SCRATCH/prometheus.yml" --storage.tsdb.path="$SCRATCH/prometheus" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$SCRATCH/prometheus.log" 2>&1 &
PROM_PID=$!
PROM="http://127.0.0.1:$PROM_PORT"
# Ready when both targets are up and rate() over the kace job has two samples.
ready=""
for _ in $(seq 1 120); do
    if curl -s -G --data-urlencode 'query=count(up == 1) == 2 and on() count(count_over_time(kace_build_info[1m]) >= 3)' \
        "$PROM/api/v1/query" 2>/dev/null | grep -q '"result":\[{'; then
        ready=yes
        break
    fi
    kill -0 "$PROM_PID" 2>/dev/null || break
    sleep 0.5
done
[ -n "$ready" ] || { fail "Prometheus never scraped both targets: $(tail -3 "$SCRATCH/prometheus.log")"; exit 1; }
for _ in 1 2 3; do post /v1/partners "{\"target\": \"$B8\", \"top\": 3}" >/dev/null; done
# rates over these requests need two scrapes after them: the expressions
# below are asked again until they have data (up to 30 s, not a fixed wait)

# ---- every expression of the rules and the dashboard returns data ----------------------------------
python3 - "$PROM" "$MON/kace-alerts.yml" "$MON/kace-dashboard.json" <<'EOF' || fail "an expression returned no data (above)"
import json, math, sys, time, urllib.parse, urllib.request
import yaml

prom, rules_path, dashboard_path = sys.argv[1:4]
exprs = []
with open(rules_path) as f:
    rules = yaml.safe_load(f)
alerts = []
for group in rules["groups"]:
    for rule in group["rules"]:
        exprs.append(("rule " + rule.get("alert", rule.get("record", "?")), rule["expr"]))
        if "alert" in rule:
            alerts.append(rule["alert"])
with open(dashboard_path) as f:
    dashboard = json.load(f)
def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))
for p in panels(dashboard["panels"]):
    for t in p.get("targets", []):
        exprs.append(("panel '%s' %s" % (p["title"], t["refId"]), t["expr"]))
if len(exprs) < 10 or len(alerts) < 3:
    sys.exit("only %d expressions and %d alerts found: the extraction is broken" % (len(exprs), len(alerts)))

def get(path, **params):
    url = prom + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)

bad = 0
deadline = time.time() + 30
for where, expr in exprs:
    while True:
        reply = get("/api/v1/query", query=expr)
        result = reply["data"]["result"] if reply.get("status") == "success" else []
        values = [float(s["value"][1]) for s in result] if reply.get("data", {}).get("resultType") == "vector" else []
        finite = [v for v in values if math.isfinite(v)]
        if finite or time.time() > deadline:
            break
        time.sleep(0.5)
    print("%-60s %d series, finite values %s" % (where, len(result), finite[:3]))
    if not finite:
        print("FAIL: %s: %s returned no finite value: %s" % (where, expr, json.dumps(reply)[:300]))
        bad += 1

# The alerts' conditions are met: each must be pending (its `for` is longer than this test) or firing.
deadline = time.time() + 10
while True:
    states = {}
    for group in get("/api/v1/rules")["data"]["groups"]:
        for rule in group["rules"]:
            if rule["type"] == "alerting":
                states[rule["name"]] = rule["state"]
    missing = [a for a in alerts if states.get(a) not in ("pending", "firing")]
    if not missing or time.time() > deadline:
        break
    time.sleep(0.5)
print("alert states:", states)
for a in missing:
    print("FAIL: alert %s is %s, not pending or firing" % (a, states.get(a)))
    bad += 1
sys.exit(1 if bad else 0)
EOF

kill -TERM "$KACE_PID"
wait "$KACE_PID"
status=$?
KACE_PID=""
[ "$status" = 0 ] || fail "kace serve exited $status after SIGTERM"
finish cli_k8s_metrics
