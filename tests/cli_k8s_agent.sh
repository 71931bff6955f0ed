#!/usr/bin/env bash
# kace agent and the scheduling loop on a simulated cluster:
#
#   bash cli_k8s_agent.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - kace agent reads its GPUs through NVML (the fake NVML library: GPU-fake-0)
#   and the pods bound to its node, and prints the node's GPU state;
# - a simulated cluster of 16 nodes x 4 GPUs in the stand-in API server
#   (tests/helpers/fake_kube_api.c); one kace agent round per node annotates it
#   (PATCH, kace.io/gpus) and reports to kace serve (POST /k8s/nodes) with
#   its node's own token (--agent-tokens: not the administrator's; a report
#   without a token, or with a wrong one, is refused);
# - a stream of 80 pods goes through filter (node names only, as with
#   nodeCacheCapable) -> prioritize -> bind, the way kube-scheduler calls an
#   extender (the highest score wins, the first node on a tie), and the bound
#   node's agent runs after each bind. Then: every pod is bound; each node's
#   kace.io/gpus annotation lists exactly the pods bound to it, on the GPU and
#   with the MPS share kace's Binding gave them; no GPU holds more than
#   --max-colocation pods; kace serve's cache agrees and holds no bind still
#   assumed (every one confirmed by its agent); pods share a GPU (at most 3,
#   equal MPS shares 100/50/33%) where kace predicts a gain, or wait when no GPU
#   keeps them fast enough; at least 64 of the 80 are placed.
set -u

KACE=${1:?usage: cli_k8s_agent.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
FAKE_API="$(dirname "$KACE")/kace-test-kube-api"
FAKE_NVML="$(dirname "$KACE")/tests/libfake_nvml_full.so"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl python3
[ -x "$FAKE_API" ] || { echo "FAIL: no $FAKE_API (built with the tests)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"

# ---- the agent on NVML (fake library) and a PodList from a file ---------------------------
cat >"$SCRATCH/pods.json" <<'EOF'
{"kind": "PodList", "items": [
 {"metadata": {"name": "a", "namespace": "ml", "uid": "u-a", "annotations": {"kace.io/gpu": "GPU-fake-0",
  "kace.io/workload": "bert-base-cased_batch8-train", "kace.io/mps-percentage": "50"}}, "status": {"phase": "Running"}},
 {"metadata": {"name": "done", "namespace": "ml", "uid": "u-d", "annotations": {"kace.io/gpu": "GPU-fake-0",
  "kace.io/workload": "bert-base-cased_batch8-train"}}, "status": {"phase": "Succeeded"}},
 {"metadata": {"name": "elsewhere", "uid": "u-e", "annotations": {"kace.io/gpu": "GPU-other",
  "kace.io/workload": "bert-base-cased_batch8-train"}}, "status": {"phase": "Running"}},
 {"metadata": {"name": "plain", "uid": "u-p"}, "status": {"phase": "Running"}}]}
EOF
KACE_NVML_LIBRARY="$FAKE_NVML" "$KACE" agent --node n --once --pods "$SCRATCH/pods.json" >"$SCRATCH/agent-nvml.out" 2>"$SCRATCH/agent-nvml.err" ||
    fail "kace agent on the fake NVML: $(cat "$SCRATCH/agent-nvml.err")"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
want = {"GPU-fake-0": [{"workload": "bert-base-cased_batch8-train", "uid": "u-a", "pod": "ml/a", "mps": 50}]}
sys.exit(0 if j == want else "got %s" % j)' "$SCRATCH/agent-nvml.out" || fail "kace agent state: $(cat "$SCRATCH/agent-nvml.out")"
grep -q '1 pod(s) on n name a GPU this node does not have' "$SCRATCH/agent-nvml.err" || fail "no word of the foreign pod"
echo '{"items": 3}' >"$SCRATCH/bad-pods.json"
"$KACE" agent --node n --once --gpus g0 --pods "$SCRATCH/bad-pods.json" >/dev/null 2>"$SCRATCH/bad.err" &&
    fail "kace agent accepted a bad PodList"
grep -q "PodList" "$SCRATCH/bad.err" || fail "bad PodList message: $(cat "$SCRATCH/bad.err")"

# ---- a simulated cluster: 16 nodes x 4 GPUs ---------------------------------------------------
python3 - "$SCRATCH/nodes.json" <<'EOF'
import json, sys
items = [{"metadata": {"name": "node-%02d" % n, "labels": {"nvidia.com/gpu.present": "true"}},
          "status": {"capacity": {"nvidia.com/gpu": "4"}}} for n in range(16)]
json.dump({"kind": "NodeList", "apiVersion": "v1", "items": items}, open(sys.argv[1], "w"))
EOF
echo 'agent-token' >"$SCRATCH/token"
mkdir -p "$SCRATCH/agent-tokens"
for n in $(seq -f '%02g' 0 15); do
    printf 'node-%s tok-%s-%s\n' "$n" "$n" "$RANDOM$RANDOM" >>"$SCRATCH/agents"
    awk -v n="node-$n" '$1 == n {print $2}' "$SCRATCH/agents" >"$SCRATCH/agent-tokens/node-$n"
done
chmod 600 "$SCRATCH/agents"
"$FAKE_API" --port-file "$SCRATCH/api.port" --nodes "$SCRATCH/nodes.json" --token agent-token --log "$SCRATCH/api.log" &
started "$SCRATCH/api.port" "the fake API server"
API="http://127.0.0.1:$(cat "$SCRATCH/api.port")"
"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 2 --no-nvml \
    --kube-api "$API" --kube-token-file "$SCRATCH/token" --token-file "$SCRATCH/token" --agent-tokens "$SCRATCH/agents" \
    --extender-listen 127.0.0.1:0 --extender-port-file "$SCRATCH/ext.port" >"$SCRATCH/serve.log" 2>&1 &
started "$SCRATCH/port" "kace serve" "$SCRATCH/serve.log"
URL="http://127.0.0.1:$(cat "$SCRATCH/port")"
EXT="http://127.0.0.1:$(cat "$SCRATCH/ext.port")" # kube-scheduler's listener, as in deploy/scheduler.yaml

agent() { # NODE
    local n=${1#node-}
    "$KACE" agent --node "$1" --once --gpus "GPU-$n-0,GPU-$n-1,GPU-$n-2,GPU-$n-3" --kube-api "$API" \
        --kube-token-file "$SCRATCH/token" --serve "$URL" --serve-token-file "$SCRATCH/agent-tokens/$1" \
        >>"$SCRATCH/agent.log" 2>&1 || fail "kace agent on $1: $(tail -2 "$SCRATCH/agent.log")"
}
# node reports need a token: an agent's (or the administrator's)
report='{"node": "node-00", "gpus": []}'
got=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d "$report" "$URL/k8s/nodes")
check_eq "a node report without a token" 401 "$got"
got=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -H 'Authorization: Bearer not-an-agent' -d "$report" "$URL/k8s/nodes")
check_eq "a node report with a wrong token" 401 "$got"
for n in $(seq -f '%02g' 0 15); do agent "node-$n"; done

# ---- the scheduler loop ---------------------------------------------------------------------------
python3 - "$API" "$URL" "$SCRATCH" "$KACE" "$EXT" <<'EOF' || fail "the scheduler loop (above)"
import json, subprocess, sys, urllib.request
api, url, scratch, kace, ext = sys.argv[1:6]
token = {"Authorization": "Bearer agent-token"}
def call(base, method, path, body=None, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 method=method, headers=h)
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.load(r)
workloads = ["bert-base-cased_batch8-train", "vit-base-patch16-224_batch2-inf", "whisper-large-v2_batch8-inf",
             "resnet50_batch32-train", "gpt2_batch4-inf"]
known = {w["name"] for w in call(url, "GET", "/v1/workloads", headers=token)["workloads"]}
workloads = [w for w in workloads if w in known]
if len(workloads) < 3:
    sys.exit("only %s of the stream's workloads are in the reference data" % workloads)
nodes = ["node-%02d" % n for n in range(16)]
placed, pending, bad = {}, [], 0
for i in range(80):
    w = workloads[i % len(workloads)]
    name = "job-%02d" % i
    pod = call(api, "POST", "/api/v1/namespaces/ml/pods",
               {"metadata": {"name": name, "labels": {"kace.io/workload": w}}, "spec": {"schedulerName": "kace-scheduler"}},
               token)
    args = {"Pod": pod, "Nodes": None, "NodeNames": nodes}
    f = call(ext, "POST", "/k8s/filter", args)
    feasible = f["nodenames"]
    if not feasible:  # kace's answer: the pod waits (kube-scheduler retries it later)
        pending.append(name)
        continue
    scores = {h["host"]: h["score"] for h in call(ext, "POST", "/k8s/prioritize", dict(args, NodeNames=feasible))}
    best = max(feasible, key=lambda n: (scores[n], -feasible.index(n)))
    r = call(ext, "POST", "/k8s/bind", {"PodName": name, "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"],
                                        "Node": best})
    if r.get("Error"):
        print("FAIL: bind %s: %s" % (name, r["Error"]))
        bad += 1
        continue
    placed[name] = (best, r["gpu"], r["mps_percentage"], w, scores[best])
    n = best[len("node-"):]
    out = subprocess.run([kace, "agent", "--node", best, "--once", "--gpus", ",".join("GPU-%s-%d" % (n, g) for g in range(4)),
                          "--kube-api", api, "--kube-token-file", scratch + "/token", "--serve", url,
                          "--serve-token-file", scratch + "/agent-tokens/" + best], capture_output=True, text=True)
    if out.returncode:
        print("FAIL: agent after bind: %s" % out.stderr)
        bad += 1
# every pod bound where kace said, with kace's annotations
by_gpu = {}
for name, (node, gpu, mps, w, score) in placed.items():
    p = call(api, "GET", "/api/v1/namespaces/ml/pods/" + name, headers=token)
    a = p["metadata"].get("annotations", {})
    if p["spec"].get("nodeName") != node or a.get("kace.io/gpu") != gpu or a.get("kace.io/mps-percentage") != str(mps):
        print("FAIL: %s: %s %s" % (name, p["spec"].get("nodeName"), a))
        bad += 1
    by_gpu.setdefault(gpu, []).append((name, mps))
# kace's scheduler (kace schedule's policy) takes an idle GPU first, then shares where it predicts a gain;
# at most 3 pods share a GPU, each with an equal MPS share when it came
for g, ps in by_gpu.items():
    shares = [mps for _, mps in sorted(ps)]
    if len(ps) > 3 or shares != [100, 50, 33][:len(ps)]:
        print("FAIL: GPU %s holds %s" % (g, ps))
        bad += 1
if len(placed) + len(pending) != 80 or len(placed) < 64:
    print("FAIL: %d placed, %d pending of 80: no sharing happened" % (len(placed), len(pending)))
    bad += 1
# each node's annotation lists exactly its pods
for node in nodes:
    ann = json.loads(call(api, "GET", "/api/v1/nodes/" + node, headers=token)["metadata"]["annotations"]["kace.io/gpus"])
    listed = sorted((m["pod"], g, m.get("mps")) for g, ms in ann.items() for m in ms)
    want = sorted(("ml/" + n, gpu, mps) for n, (nd, gpu, mps, w, s) in placed.items() if nd == node)
    if listed != want or len(ann) != 4:
        print("FAIL: %s annotation %s, want %s" % (node, listed, want))
        bad += 1
state = call(url, "GET", "/k8s/state", headers=token)
members = [(n["name"], g["id"], m["pod"], m["assumed"]) for n in state["nodes"] for g in n["gpus"] for m in g["members"]]
if len(state["nodes"]) != 16 or len(members) != len(placed) or any(m[3] for m in members):
    print("FAIL: kace serve's cache: %d nodes, %d members, assumed %s" % (len(state["nodes"]), len(members),
                                                                       [m for m in members if m[3]]))
    bad += 1
json.dump(placed, open(scratch + "/placed.json", "w"), indent=1)
print("placed %d pods on %d GPUs of %d nodes, %d pending" % (len(placed), len(by_gpu), len({v[0] for v in placed.values()}),
                                                              len(pending)))
sys.exit(1 if bad else 0)
EOF

finish cli_k8s_agent
