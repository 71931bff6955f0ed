#!/usr/bin/env bash
# The scheduler loop : kube-scheduler driving kace serve's extender
# on a simulated 16-node, 64-GPU cluster places a stream of pods exactly where
# `kace schedule` places the same stream.
#
#   bash cli_k8s_loop.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# The stand-in API server (tests/helpers/fake_kube_api.c) holds 16 nodes x 4
# GPUs; one `kace agent` round per node annotates it (kace.io/gpus) and reports
# to kace serve. A stream of 110 pods of five V100 reference workloads (every
# 7th latency sensitive, label kace.io/qos: LS) arrives, and from the 60th on,
# every 4th arrival is preceded by the end of the longest-running pod. Each
# arrival goes through the extender as kube-scheduler calls it: filter (node
# names only with nodeCacheCapable true; full Node objects from the API server
# with false) -> prioritize -> the highest score (first node on a tie) ->
# bind, then the bound node's agent runs. A pod that passes no node stays
# pending and is retried, in arrival order, after each end (kube-scheduler
# retries a pod an extender rejected on the next cluster event). A pod ends
# by its deletion in the API server and its node's agent round.
#
# The same stream goes to `kace schedule --cluster 16x4` on stdin, line by
# line. kace serve's scheduler predicts with the served model (kace train's,
# fitted on every pair) and kace schedule's with the model of the published
# training split: both judge the groups of these five workloads alike, so the
# placements match; tests/cli_k8s_model.sh shows the extender following its
# own model where two models differ. Asserted, event by event: every pod kace schedule starts is bound
# (node and GPU: kace schedule's GPU g is node g/4's GPU g%4, nodes and GPUs
# sorted by name), at that event, to that GPU, with the MPS share 100/k for
# the k pods kace schedule has on it; every pod it queues stays pending; the
# Binding reached the API server (spec.nodeName, kace.io/gpu). Then, as
# kube-scheduler also calls it: pods offered one node only (filtered three
# times) pass that node or none and are never decided elsewhere, and a pod
# deleted between filter and bind gets the API server's error and leaves no
# trace in kace's cache. Run with
# nodeCacheCapable true and false, plus a run with --extender-policy gain (the
# extender's former node scoring) that must NOT match: the comparison can fail.
set -u

KACE=${1:?usage: cli_k8s_loop.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
FAKE_API="$(dirname "$KACE")/kace-test-kube-api"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need python3
[ -x "$FAKE_API" ] || { echo "FAIL: no $FAKE_API (built with the tests)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
python3 - "$SCRATCH/nodes.json" <<'PY'
import json, sys
items = [{"metadata": {"name": "node-%02d" % n, "labels": {"nvidia.com/gpu.present": "true"}},
          "status": {"capacity": {"nvidia.com/gpu": "4"}}} for n in range(16)]
json.dump({"kind": "NodeList", "apiVersion": "v1", "items": items}, open(sys.argv[1], "w"))
PY
echo 'loop-token' >"$SCRATCH/token"

# run_loop NAME NODE_CACHE(true|false) [serve options...]: the driver's exit status (0 equal, 3 different)
run_loop() {
    local name=$1 cache=$2 dir="$SCRATCH/$1"
    shift 2
    mkdir -p "$dir"
    "$FAKE_API" --port-file "$dir/api.port" --nodes "$SCRATCH/nodes.json" --token loop-token --log "$dir/api.log" &
    local api_pid=$!
    PIDS="$api_pid $PIDS"
    wait_file "$dir/api.port" "$api_pid" || { echo "FAIL: the fake API server did not start" >&2; return 1; }
    local api="http://127.0.0.1:$(cat "$dir/api.port")"
    "$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$dir/port" --watch 0 --threads 2 --no-nvml \
        --kube-api "$api" --kube-token-file "$SCRATCH/token" "$@" >"$dir/serve.log" 2>&1 &
    local serve_pid=$!
    PIDS="$serve_pid $PIDS"
    wait_file "$dir/port" "$serve_pid" || { echo "FAIL: kace serve did not start: $(cat "$dir/serve.log")" >&2; return 1; }
    local url="http://127.0.0.1:$(cat "$dir/port")"
    local rc=0
    python3 - "$api" "$url" "$SCRATCH" "$KACE" "$DB" "$cache" "$dir" <<'PY' || rc=$?
import json, os, subprocess, sys, urllib.request
api, url, scratch, kace, db, cache, out_dir = sys.argv[1:8]
names_only = cache == "true"
token = {"Authorization": "Bearer loop-token"}

def call(base, method, path, body=None, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 method=method, headers=h)
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.load(r)

nodes = ["node-%02d" % n for n in range(16)]
def gpus_of(node):
    n = node[len("node-"):]
    return ["GPU-%s-%d" % (n, g) for g in range(4)]
def agent(node):
    out = subprocess.run([kace, "agent", "--node", node, "--once", "--gpus", ",".join(gpus_of(node)), "--kube-api", api,
                          "--kube-token-file", scratch + "/token", "--serve", url], capture_output=True, text=True)
    if out.returncode:
        sys.exit("agent on %s: %s" % (node, out.stderr))
for node in nodes:
    agent(node)

workloads = ["bert-base-cased_batch8-train", "vit-base-patch16-224_batch2-inf", "whisper-large-v2_batch8-inf",
             "resnet50_batch32-train", "gpt2_batch4-inf"]
known = {w["name"] for w in call(url, "GET", "/v1/workloads")["workloads"]}
workloads = [w for w in workloads if w in known]
if len(workloads) < 3:
    sys.exit("only %s of the stream's workloads are in the reference data" % workloads)

sched = subprocess.Popen([kace, "schedule", "--db", db, "--cluster", "16x4"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
def schedule(line, until):
    """Sends a line to kace schedule; returns the lines up to the one starting with one of `until`."""
    sched.stdin.write(line + "\n")
    sched.stdin.flush()
    lines = []
    while True:
        l = sched.stdout.readline()
        if not l:
            sys.exit("kace schedule ended early")
        l = l.strip()
        if l.startswith("error"):
            sys.exit("kace schedule: %s (for '%s')" % (l, line))
        lines.append(l)
        if l.split()[0] in until:
            return lines

pods = {}       # name -> created Pod
pending = []    # names kube-scheduler still has to place (arrival order)
placed = {}     # name -> (node, gpu, mps)
occupancy = {}  # kace schedule's GPU -> its pods
mismatches = []
calls = {"filter": 0, "prioritize": 0, "bind": 0}

def try_schedule(name):
    """One kube-scheduler attempt for a pending pod; returns (node, gpu, mps) or None."""
    pod = pods[name]
    if names_only:
        args = {"Pod": pod, "Nodes": None, "NodeNames": nodes}
    else:
        args = {"Pod": pod, "Nodes": call(api, "GET", "/api/v1/nodes", headers=token), "NodeNames": None}
    f = call(url, "POST", "/k8s/filter", args)
    calls["filter"] += 1
    if f.get("error"):
        sys.exit("filter %s: %s" % (name, f["error"]))
    feasible = f["nodenames"] if names_only else [n["metadata"]["name"] for n in (f.get("nodes") or {}).get("items") or []]
    if not feasible:
        return None
    if names_only:
        pargs = dict(args, NodeNames=feasible)
    else:
        pargs = dict(args, Nodes={"items": f["nodes"]["items"]})
    scores = {h["host"]: h["score"] for h in call(url, "POST", "/k8s/prioritize", pargs)}
    calls["prioritize"] += 1
    best = max(feasible, key=lambda n: (scores.get(n, 0), -feasible.index(n)))
    r = call(url, "POST", "/k8s/bind", {"PodName": name, "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"],
                                        "Node": best})
    calls["bind"] += 1
    if r.get("Error"):
        return ("bind-error", r["Error"], 0)
    agent(best)
    return (best, r.get("gpu"), r.get("mps_percentage"))

def expect(name, g):
    node = "node-%02d" % (g // 4)
    return (node, gpus_of(node)[g % 4])

def compare(event, started, got):
    """started: kace schedule's {name: gpu}; got: the extender's {name: (node, gpu, mps)} for this event."""
    want = {n: expect(n, g) + (100 // len(occupancy[g]),) for n, g in started.items()}
    if want != got:
        mismatches.append("%s: kace schedule %s, extender %s" % (event, sorted(want.items()), sorted(got.items())))

n_arrivals, n_ends, n_queued_seen, n_drained, n_shared = 110, 0, 0, 0, 0
running = []  # kace schedule's running pods, oldest start first
for i in range(n_arrivals):
    if i >= 60 and i % 4 == 0 and running:
        # the longest-running pod ends
        done = running.pop(0)
        n_ends += 1
        lines = schedule("finish %d" % int(done[len("job-"):]), ("ok",))
        for gg, ps in occupancy.items():
            if done in ps:
                ps.remove(done)
        started = {}
        for l in lines[:-1]:
            _, jid, _, gs = l.split()
            started["job-%03d" % int(jid)] = int(gs)
        for n, gg in started.items():
            occupancy.setdefault(gg, []).append(n)
            running.append(n)
        n_drained += len(started)
        node = placed[done][0]
        call(api, "DELETE", "/api/v1/namespaces/ml/pods/" + done, headers=token)
        agent(node)
        got = {}
        for n in list(pending):
            r = try_schedule(n)
            if r:
                got[n] = r
                pending.remove(n)
                placed[n] = r
        compare("end of %s" % done, started, got)
    name = "job-%03d" % i
    w = workloads[i % len(workloads)]
    qos = "LS" if i % 7 == 3 else "BE"
    labels = {"kace.io/workload": w}
    if qos == "LS":
        labels["kace.io/qos"] = "LS"
    pods[name] = call(api, "POST", "/api/v1/namespaces/ml/pods",
                      {"metadata": {"name": name, "labels": labels}, "spec": {"schedulerName": "kace-scheduler"}}, token)
    l = schedule("submit %d %s %s" % (i, w, qos), ("start", "queued"))[-1].split()
    started = {}
    if l[0] == "start":
        g = int(l[3])
        occupancy.setdefault(g, []).append(name)
        n_shared += len(occupancy[g]) > 1
        running.append(name)
        started[name] = g
    else:
        n_queued_seen += 1
    r = try_schedule(name)
    got = {}
    if r:
        got[name] = r
        placed[name] = r
    else:
        pending.append(name)
    compare("arrival of %s" % name, started, got)
    if mismatches and os.environ.get("STOP_AT_FIRST"):
        break
sched.stdin.close()
sched.wait()

# kube-scheduler's own ways, after the comparison (names run): a candidate set
# its filters restricted, a filter repeated, a bind the API server refuses
# because the pod has vanished.
if names_only:
    def decided_nodes(f):
        text = json.dumps({k: f.get(k) for k in ("failedNodes", "failedAndUnresolvableNodes")})
        return set(f.get("nodenames") or []) | {n for n in nodes if '"kace\'s scheduler placed the pod on GPU' in text
                                                and "of node '%s'" % n in text}
    for i, only in enumerate(["node-03", "node-11", "node-15"]):
        name = "extra-%d" % i
        pods[name] = call(api, "POST", "/api/v1/namespaces/ml/pods",
                          {"metadata": {"name": name, "labels": {"kace.io/workload": workloads[i]}},
                           "spec": {"schedulerName": "kace-scheduler"}}, token)
        args = {"Pod": pods[name], "Nodes": None, "NodeNames": [only]}
        answers = [call(url, "POST", "/k8s/filter", args) for _ in range(3)]  # and retried
        if any(a != answers[0] for a in answers):
            mismatches.append("repeated filters of %s differ: %s" % (name, answers))
        f = answers[0]
        print("%s offered %s only: passes %s" % (name, only, f.get("nodenames")))
        if decided_nodes(f) - {only}:
            mismatches.append("offered %s only, %s was decided elsewhere: %s" % (only, name, f))
        if not set(f.get("nodenames") or []) <= {only} or (set(f["failedNodes"]) | set(f["failedAndUnresolvableNodes"])) - {only}:
            mismatches.append("offered %s only, the reply names other nodes: %s" % (only, f))
        if f.get("nodenames"):
            r = call(url, "POST", "/k8s/bind", {"PodName": name, "PodNamespace": "ml", "PodUID": pods[name]["metadata"]["uid"],
                                                "Node": only})
            if r.get("Error") or call(api, "GET", "/api/v1/namespaces/ml/pods/" + name, headers=token)["spec"].get("nodeName") != only:
                mismatches.append("%s, offered %s only and passed there, was not bound there: %s" % (name, only, r))
    # a pod that vanishes between filter and bind: the API server refuses the Binding, kace forgets it
    name = "vanishing"
    pods[name] = call(api, "POST", "/api/v1/namespaces/ml/pods",
                      {"metadata": {"name": name, "labels": {"kace.io/workload": workloads[0]}},
                       "spec": {"schedulerName": "kace-scheduler"}}, token)
    f = call(url, "POST", "/k8s/filter", {"Pod": pods[name], "Nodes": None, "NodeNames": nodes})
    call(api, "DELETE", "/api/v1/namespaces/ml/pods/" + name, headers=token)
    if f.get("nodenames"):
        r = call(url, "POST", "/k8s/bind", {"PodName": name, "PodNamespace": "ml", "PodUID": pods[name]["metadata"]["uid"],
                                            "Node": f["nodenames"][0]})
        if not r.get("Error"):
            mismatches.append("the bind of a deleted pod reported no error: %s" % r)
        st = call(url, "GET", "/k8s/state", headers=token)
        if "ml/vanishing" in [m["pod"] for n in st["nodes"] for g in n["gpus"] for m in g["members"]]:
            mismatches.append("a refused bind stayed in kace's node cache")
    else:
        mismatches.append("the vanishing pod passed no node: %s" % f)

# the API server holds the bindings kace chose
for name, (node, gpu, mps) in placed.items():
    if node == "bind-error":
        continue
    try:
        p = call(api, "GET", "/api/v1/namespaces/ml/pods/" + name, headers=token)
    except urllib.error.HTTPError:
        continue  # ended and deleted
    a = p["metadata"].get("annotations", {})
    if p["spec"].get("nodeName") != node or a.get("kace.io/gpu") != gpu or a.get("kace.io/mps-percentage") != str(mps):
        mismatches.append("%s in the API server: %s %s, want %s %s %s" % (name, p["spec"].get("nodeName"), a, node, gpu, mps))
state = call(url, "GET", "/k8s/state", headers=token)
summary = ("%d arrivals, %d ends: kace schedule queued %d at arrival, started %d after ends, %d placements shared a GPU; "
           "%d pending at the end; extender calls %s; scheduler state %s" %
           (n_arrivals, n_ends, n_queued_seen, n_drained, n_shared, len(pending), calls,
            state.get("scheduler")))
print(summary)
open(out_dir + "/summary.txt", "w").write(summary + "\n" + "\n".join(mismatches) + "\n")
for m in mismatches[:5]:
    print("mismatch: " + m)
if mismatches:
    sys.exit(3)
if n_queued_seen == 0 or n_drained == 0 or n_shared == 0:
    sys.exit("the stream did not exercise queueing, draining and sharing (%d, %d, %d)" % (n_queued_seen, n_drained, n_shared))
PY
    kill "$serve_pid" "$api_pid" 2>/dev/null
    wait "$serve_pid" "$api_pid" 2>/dev/null
    return $rc
}

run_loop names true || fail "nodeCacheCapable true: the extender's placements differ from kace schedule's (above)"
run_loop objects false || fail "nodeCacheCapable false: the extender's placements differ from kace schedule's (above)"
grep -q "places pods with kace schedule's scheduler (policy kace" "$SCRATCH/names/serve.log" ||
    fail "kace serve did not say it uses kace schedule's scheduler: $(cat "$SCRATCH/names/serve.log")"
# The comparison can fail: the extender's former scoring (best predicted gain per node) does not place as kace schedule.
STOP_AT_FIRST=1 run_loop gain true --extender-policy gain >"$SCRATCH/gain.out" 2>&1
rc=$?
[ "$rc" = 3 ] || fail "with --extender-policy gain the loop should differ from kace schedule (exit 3), got $rc: $(cat "$SCRATCH/gain.out")"

finish cli_k8s_loop
