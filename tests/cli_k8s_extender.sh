#!/usr/bin/env bash
# The scheduler extender's contract and its bind loop:
#
#   bash cli_k8s_extender.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# kace serve runs on loopback, with a stand-in API server
# (tests/helpers/fake_kube_api.c, built beside kace as kace-test-kube-api)
# holding the nodes of tests/data/k8s/nodes.json and a bearer token. The
# requests are the JSON kube-scheduler sends (tests/data/k8s/, built from the
# upstream types, see its README): each request and each of kace's replies is
# validated against tests/data/k8s/extender-schema.json (python3-jsonschema),
# and:
# - filter with full Node objects: kace's scheduler (kace schedule's policy)
#   starts the pod on gpu-node-1's free GPU, so the full node and the node
#   without GPUs fail with their reasons and gpu-node-1 passes; prioritize
#   scores it 10 (tests/cli_k8s_loop.sh compares whole streams with kace schedule);
# - filter and prioritize with node names only (nodeCacheCapable): the same
#   verdicts and scores, from kace's node cache; a node the cache does not know
#   fails; a fresh kace serve learns nodes from agent reports (POST /k8s/nodes);
# - bind: the API server receives a valid Binding (with the token), the pod
#   gets spec.nodeName and kace's annotations (GPU GPU-n1-0, MPS 50%), and
#   GET /k8s/state shows the pod assumed on that GPU; a second bind of the same
#   pod is refused by the API server (409): the Error reaches the scheduler and
#   the cache forgets it; a pod kace never saw is bound without annotations;
# - the schema rejects malformed replies (it can fail).
set -u

KACE=${1:?usage: cli_k8s_extender.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA="$HERE/data/k8s"
REF="$SHARED/kace-v100"
FAKE_API="$(dirname "$KACE")/kace-test-kube-api"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl python3
python3 -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (bash .ci/install-deps)" >&2; exit 1; }
[ -x "$FAKE_API" ] || { echo "FAIL: no $FAKE_API (built with the tests)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
# validate DEFINITION FILE: the JSON in FILE against the schema's definition
validate() {
    python3 - "$DATA/extender-schema.json" "$1" "$2" <<'EOF'
import json, sys
import jsonschema
schema_path, definition, path = sys.argv[1:4]
with open(schema_path) as f:
    schema = json.load(f)
with open(path) as f:
    doc = json.load(f)
sub = dict(schema)
sub["$ref"] = "#/definitions/" + definition
try:
    jsonschema.Draft7Validator(sub).validate(doc)
except jsonschema.ValidationError as e:
    sys.exit("%s is not a valid %s: %s at %s" % (path, definition, e.message, list(e.absolute_path)))
EOF
}

# ---- the recorded requests are what the upstream types describe ------------------------
validate ExtenderArgs "$DATA/extender-args-nodes.json" || fail "recorded ExtenderArgs (nodes)"
validate ExtenderArgs "$DATA/extender-args-nodenames.json" || fail "recorded ExtenderArgs (node names)"
validate ExtenderBindingArgs "$DATA/extender-binding-args.json" || fail "recorded ExtenderBindingArgs"
# ... and the schema can fail
echo '[{"host": "a", "score": "10"}]' >"$SCRATCH/bad.json"
validate HostPriorityList "$SCRATCH/bad.json" 2>/dev/null && fail "the schema accepts a string score"
echo '{"PodName": "a", "PodNamespace": "b", "Node": "n"}' >"$SCRATCH/bad.json"
validate ExtenderBindingArgs "$SCRATCH/bad.json" 2>/dev/null && fail "the schema accepts ExtenderBindingArgs without PodUID"

# ---- the stand-in API server, and kace serve bound to it ------------------------------------
echo 'k8s-test-token' >"$SCRATCH/token"
"$FAKE_API" --port-file "$SCRATCH/api.port" --nodes "$DATA/nodes.json" --token k8s-test-token \
    --log "$SCRATCH/api.log" 2>"$SCRATCH/api.err" &
started "$SCRATCH/api.port" "the fake API server" "$SCRATCH/api.err"
API="http://127.0.0.1:$(cat "$SCRATCH/api.port")"
api() { # METHOD PATH [BODY]
    curl -s -X "$1" -H 'Authorization: Bearer k8s-test-token' -H 'Content-Type: application/json' \
        ${3:+--data "$3"} "$API$2"
}
api POST /api/v1/namespaces/ml/pods "$(cat "$DATA/pod-bert-0.json")" >/dev/null
api POST /api/v1/namespaces/ml/pods '{"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}' >/dev/null

"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
start_serve() { # PORTFILE LOG
    "$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$1" --watch 0 --threads 2 --no-nvml \
        --kube-api "$API" --kube-token-file "$SCRATCH/token" >"$2" 2>&1 &
    started "$1" "kace serve" "$2"
}
start_serve "$SCRATCH/port" "$SCRATCH/serve.log"
URL="http://127.0.0.1:$(cat "$SCRATCH/port")"
post() { # PATH FILE OUT: the HTTP status
    curl -s -o "$3" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$2" "$URL$1"
}
check() { # OUT PYTHON-EXPRESSION over j: what must hold
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}

# ---- filter and prioritize with full Node objects -------------------------------------------
code=$(post /k8s/filter "$DATA/extender-args-nodes.json" "$SCRATCH/filter-nodes.json")
[ "$code" = 200 ] || fail "filter (nodes): HTTP $code $(cat "$SCRATCH/filter-nodes.json")"
validate ExtenderFilterResult "$SCRATCH/filter-nodes.json" || fail "filter (nodes) reply"
check "$SCRATCH/filter-nodes.json" '[n["metadata"]["name"] for n in j["nodes"]["items"]] == ["gpu-node-1"]' ||
    fail "filter (nodes) should pass gpu-node-1 only: $(cat "$SCRATCH/filter-nodes.json" | head -c 400)"
check "$SCRATCH/filter-nodes.json" '"placed the pod on GPU '"'"'GPU-n1-0'"'"' of node '"'"'gpu-node-1'"'"'" in j["failedAndUnresolvableNodes"]["gpu-node-0"] and "annotation" in j["failedAndUnresolvableNodes"]["cpu-node"] and j["failedNodes"] == {}' ||
    fail "filter (nodes) reasons: $(cat "$SCRATCH/filter-nodes.json")"
code=$(post /k8s/prioritize "$DATA/extender-args-nodes.json" "$SCRATCH/prio-nodes.json")
[ "$code" = 200 ] || fail "prioritize (nodes): HTTP $code"
validate HostPriorityList "$SCRATCH/prio-nodes.json" || fail "prioritize (nodes) reply"
check "$SCRATCH/prio-nodes.json" '{h["host"]: h["score"] for h in j}["gpu-node-1"] >= 1 and {h["host"]: h["score"] for h in j}["cpu-node"] == 0' ||
    fail "prioritize (nodes): $(cat "$SCRATCH/prio-nodes.json")"

# ---- the same with node names only: from kace's node cache ---------------------------------------
code=$(post /k8s/filter "$DATA/extender-args-nodenames.json" "$SCRATCH/filter-names.json")
[ "$code" = 200 ] || fail "filter (names): HTTP $code $(cat "$SCRATCH/filter-names.json")"
validate ExtenderFilterResult "$SCRATCH/filter-names.json" || fail "filter (names) reply"
check "$SCRATCH/filter-names.json" 'j["nodenames"] == ["gpu-node-1"] and sorted(j["failedAndUnresolvableNodes"]) == ["cpu-node", "gpu-node-0"]' ||
    fail "filter (names) should match filter (nodes): $(cat "$SCRATCH/filter-names.json")"
code=$(post /k8s/prioritize "$DATA/extender-args-nodenames.json" "$SCRATCH/prio-names.json")
validate HostPriorityList "$SCRATCH/prio-names.json" || fail "prioritize (names) reply"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a!=b)' \
    "$SCRATCH/prio-nodes.json" "$SCRATCH/prio-names.json" || fail "prioritize (names) differs from (nodes): $(cat "$SCRATCH/prio-names.json")"
sed 's/"gpu-node-0"/"gpu-node-9"/' "$DATA/extender-args-nodenames.json" >"$SCRATCH/args-unknown.json"
post /k8s/filter "$SCRATCH/args-unknown.json" "$SCRATCH/filter-unknown.json" >/dev/null
check "$SCRATCH/filter-unknown.json" '"knows nothing" in j["failedAndUnresolvableNodes"]["gpu-node-9"]' || fail "an unknown node: $(cat "$SCRATCH/filter-unknown.json")"

# ---- bind ----------------------------------------------------------------------------------------------
code=$(post /k8s/bind "$DATA/extender-binding-args.json" "$SCRATCH/bind.json")
[ "$code" = 200 ] || fail "bind: HTTP $code $(cat "$SCRATCH/bind.json")"
validate ExtenderBindingResult "$SCRATCH/bind.json" || fail "bind reply"
check "$SCRATCH/bind.json" 'j["Error"] == "" and j["gpu"] == "GPU-n1-0" and j["mps_percentage"] == 50' ||
    fail "bind: $(cat "$SCRATCH/bind.json")"
grep '^POST /api/v1/namespaces/ml/pods/bert-0/binding 201 ' "$SCRATCH/api.log" | head -1 | cut -d' ' -f4- >"$SCRATCH/binding.json"
[ -s "$SCRATCH/binding.json" ] || fail "the API server saw no Binding: $(cat "$SCRATCH/api.log")"
validate Binding "$SCRATCH/binding.json" || fail "the Binding kace sent"
api GET /api/v1/namespaces/ml/pods/bert-0 >"$SCRATCH/pod.json"
check "$SCRATCH/pod.json" 'j["spec"]["nodeName"] == "gpu-node-1" and j["metadata"]["annotations"]["kace.io/gpu"] == "GPU-n1-0" and j["metadata"]["annotations"]["kace.io/mps-percentage"] == "50"' ||
    fail "the pod after bind: $(cat "$SCRATCH/pod.json")"
curl -s "$URL/k8s/state" >"$SCRATCH/state.json"
check "$SCRATCH/state.json" '[m["pod"] for n in j["nodes"] if n["name"] == "gpu-node-1" for g in n["gpus"] if g["id"] == "GPU-n1-0" for m in g["members"] if m["assumed"]] == ["ml/bert-0"]' ||
    fail "state after bind: $(cat "$SCRATCH/state.json")"
# the same pod again: the API server refuses (already bound); the cache forgets the second bind
code=$(post /k8s/bind "$DATA/extender-binding-args.json" "$SCRATCH/bind2.json")
check "$SCRATCH/bind2.json" '"409" in j["Error"] or "already" in j["Error"]' || fail "a refused bind: $(cat "$SCRATCH/bind2.json")"
curl -s "$URL/k8s/state" >"$SCRATCH/state2.json"
check "$SCRATCH/state2.json" 'sum(1 for n in j["nodes"] for g in n["gpus"] for m in g["members"] if m["pod"] == "ml/bert-0") == 1' ||
    fail "a refused bind stayed in the cache: $(cat "$SCRATCH/state2.json")"
# a pod kace never judged: bound as it is
echo '{"PodName": "plain", "PodNamespace": "ml", "PodUID": "", "Node": "cpu-node"}' >"$SCRATCH/bind-plain-args.json"
post /k8s/bind "$SCRATCH/bind-plain-args.json" "$SCRATCH/bind-plain.json" >/dev/null
check "$SCRATCH/bind-plain.json" 'j == {"Error": ""}' || fail "plain bind: $(cat "$SCRATCH/bind-plain.json")"
api GET /api/v1/namespaces/ml/pods/plain >"$SCRATCH/plain.json"
check "$SCRATCH/plain.json" 'j["spec"]["nodeName"] == "cpu-node" and "kace.io/gpu" not in j["metadata"].get("annotations", {})' ||
    fail "the plain pod: $(cat "$SCRATCH/plain.json")"

# ---- a fresh kace serve learns the nodes from agent reports only ------------------------------------
start_serve "$SCRATCH/port2" "$SCRATCH/serve2.log"
URL="http://127.0.0.1:$(cat "$SCRATCH/port2")"
post /k8s/filter "$DATA/extender-args-nodenames.json" "$SCRATCH/filter-cold.json" >/dev/null
check "$SCRATCH/filter-cold.json" 'j["nodenames"] == [] and len(j["failedAndUnresolvableNodes"]) == 3' || fail "a cold cache: $(cat "$SCRATCH/filter-cold.json")"
python3 - "$DATA/nodes.json" "$SCRATCH" <<'EOF'
import json, sys
nodes = json.load(open(sys.argv[1]))["items"]
for i, n in enumerate(nodes):
    ann = n["metadata"].get("annotations", {}).get("kace.io/gpus")
    if ann:
        json.dump({"node": n["metadata"]["name"], "gpus": json.loads(ann)}, open("%s/report%d.json" % (sys.argv[2], i), "w"))
EOF
for r in "$SCRATCH"/report*.json; do
    code=$(post /k8s/nodes "$r" "$SCRATCH/report.out")
    [ "$code" = 200 ] || fail "agent report $r: HTTP $code $(cat "$SCRATCH/report.out")"
done
echo '{"node": "x", "gpus": {"g": [3]}}' >"$SCRATCH/bad-report.json"
code=$(post /k8s/nodes "$SCRATCH/bad-report.json" "$SCRATCH/report.out")
[ "$code" = 400 ] || [ "$code" = 422 ] || fail "a bad agent report: HTTP $code $(cat "$SCRATCH/report.out")"
post /k8s/filter "$DATA/extender-args-nodenames.json" "$SCRATCH/filter-warm.json" >/dev/null
check "$SCRATCH/filter-warm.json" 'j["nodenames"] == ["gpu-node-1"]' || fail "after agent reports: $(cat "$SCRATCH/filter-warm.json")"

finish cli_k8s_extender
