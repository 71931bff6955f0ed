#!/usr/bin/env bash
# One model per server: the scheduler extender decides with the model kace
# serve serves, and with the new one after a promotion (file watch) or a
# SIGHUP reload:
#
#   bash cli_k8s_model.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# The store holds two models that judge colocations differently: the default
# (slowdown on every metric) and 'sys' (the same kind on system metrics
# only). Each request offers two nodes of one busy GPU each (node-a runs X,
# node-b runs Y) for a pod of workload W; kace's scheduler shares the GPU
# where the model predicts the better group, so the two models pick
# different nodes for some (W, X, Y) of the candidates below. Three servers
# start on the same store: S1 watches it (--watch 0.2), S2 reloads on SIGHUP
# only (--watch 0), and R serves 'sys' by name (the reference).
# --assume-seconds 0 forgets each judged pod at the next request, so every
# request sees the same two busy GPUs.
# - before: S1 and R pick different nodes for one candidate (the extender
#   follows --model; with a scheduler fitted apart from the served model, as
#   before, they agree on every candidate and the test fails here);
# - kace model promote sys: S1's extender comes to pick R's node (it reloads
#   on the file change), and logs that its scheduler is on the served model;
# - S2 still picks the default's node until SIGHUP; after its reload line,
#   R's node; /k8s/prioritize scores that node 10.
set -u

KACE=${1:?usage: cli_k8s_model.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
DATA="$(cd "$(dirname "$0")" && pwd)/data/k8s"
REF="$SHARED/kace-v100"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl python3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"

"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
"$KACE" train --db "$DB" --metrics system --name sys >"$SCRATCH/train-sys.out" 2>&1 ||
    { cat "$SCRATCH/train-sys.out" >&2; exit 1; }

serve() { # NAME WATCH [OPTION...]: starts kace serve, its port in $SCRATCH/NAME.port
    local name=$1 watch=$2
    shift 2
    "$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/$name.port" --watch "$watch" --threads 2 \
        --no-nvml --assume-seconds 0 "$@" >"$SCRATCH/$name.log" 2>&1 &
}
serve s1 0.2
S1_PID=$!
started "$SCRATCH/s1.port" "kace serve (S1)" "$SCRATCH/s1.log"
serve s2 0
S2_PID=$!
started "$SCRATCH/s2.port" "kace serve (S2)" "$SCRATCH/s2.log"
serve r 0 --model sys
started "$SCRATCH/r.port" "kace serve (R, model sys)" "$SCRATCH/r.log"
url() { echo "http://127.0.0.1:$(cat "$SCRATCH/$1.port")"; }

# decide SERVER ROUTE W X Y: filter: the node the extender passes ("none" when
# it queues the pod); prioritize: the node it scores highest. A new pod each time.
n_pods=0
decide() {
    n_pods=$((n_pods + 1))
    python3 - "$DATA/extender-args-nodes.json" "$(url "$1")/k8s/$2" "$3" "$4" "$5" "pod-$n_pods" <<'PY'
import json, sys, urllib.request
template, url, w, x, y, pod = sys.argv[1:7]
args = json.load(open(template))
node = args["Nodes"]["items"][0]
def busy(name, gpu, workload):
    n = json.loads(json.dumps(node))
    n["metadata"]["name"] = n["metadata"]["labels"]["kubernetes.io/hostname"] = name
    n["metadata"]["annotations"]["kace.io/gpus"] = json.dumps({gpu: [workload]})
    return n
args["Pod"]["metadata"].update(name=pod, uid="uid-" + pod)
args["Pod"]["metadata"]["labels"]["kace.io/workload"] = w
args["Nodes"]["items"] = [busy("node-a", "GPU-a-0", x), busy("node-b", "GPU-b-0", y)]
req = urllib.request.Request(url, json.dumps(args).encode(), {"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=30))
if url.endswith("/filter"):
    names = [n["metadata"]["name"] for n in ((reply.get("nodes") or {}).get("items") or [])]
    print(names[0] if len(names) == 1 else "none" if not names else "all")
else:
    best = max(reply, key=lambda h: h["score"])
    print(best["host"] if best["score"] == 10 else "none")
PY
}

# ---- before: each server's extender follows its own model ------------------------------------
CANDIDATES="albert-base-v2_batch16-train albert-base-v2_batch2-train vit_h_14_batch2-train
bert-base-cased_batch16-inf bert-base-cased_batch16-train bert-base-cased_batch8-inf
whisper-large-v2_batch8-inf vit-base-patch16-224_batch16-inf wav2vec2-base-960h_batch2-inf
vit-base-patch16-224_batch16-inf vit-base-patch16-224_batch2-inf vit-base-patch16-224_batch8-inf
bert-base-cased_batch2-inf albert-base-v2_batch2-train vit_h_14_batch2-train
vit_h_14_batch2-train vit-base-patch16-224_batch2-inf vit-base-patch16-224_batch8-inf"
W="" X="" Y="" A_NODE="" B_NODE=""
while read -r w x y; do
    a=$(decide s1 filter "$w" "$x" "$y") || fail "S1 filter failed"
    b=$(decide r filter "$w" "$x" "$y") || fail "R filter failed"
    echo "$w on node-a ($x) or node-b ($y): default model $a, sys $b"
    if [ "$a" != "$b" ]; then
        W=$w X=$x Y=$y A_NODE=$a B_NODE=$b
        break
    fi
done <<<"$CANDIDATES"
if [ -z "$W" ]; then
    fail "the extender decides the same under the default and the 'sys' model on every candidate: its scheduler does not predict with the served model"
    finish cli_k8s_model
fi
grep -q "places pods with kace schedule's scheduler (policy kace, objective normalized, [0-9]* workloads) on the served model" "$SCRATCH/s1.log" ||
    fail "S1 does not say its extender's scheduler is on the served model: $(cat "$SCRATCH/s1.log")"
check_eq "S2 before the promotion" "$A_NODE" "$(decide s2 filter "$W" "$X" "$Y")"

# ---- a promotion: the watching server's extender follows it ---------------------------------
"$KACE" model --db "$DB" promote sys >"$SCRATCH/promote.out" 2>&1 || fail "kace model promote sys: $(cat "$SCRATCH/promote.out")"
now=$A_NODE
for _ in $(seq 1 300); do # the state (S1's decision), not a time
    now=$(decide s1 filter "$W" "$X" "$Y")
    [ "$now" = "$B_NODE" ] && break
    kill -0 "$S1_PID" 2>/dev/null || break
    sleep 0.1
done
check_eq "S1's extender after kace model promote sys" "$B_NODE" "$now"
grep -q "reloaded (file changed)" "$SCRATCH/s1.log" || fail "S1 did not log its reload: $(tail -3 "$SCRATCH/s1.log")"

# ---- SIGHUP: the other server's extender follows it too ---------------------------------------
kill -HUP "$S2_PID"
wait_line "$SCRATCH/s2.log" 'reloaded \(SIGHUP\)' "$S2_PID" || fail "S2 did not reload on SIGHUP: $(tail -3 "$SCRATCH/s2.log")"
check_eq "S2's extender after SIGHUP (filter)" "$B_NODE" "$(decide s2 filter "$W" "$X" "$Y")"
check_eq "S2's extender after SIGHUP (prioritize)" "$B_NODE" "$(decide s2 prioritize "$W" "$X" "$Y")"
wait_line "$SCRATCH/s2.log" "places pods with kace schedule's scheduler .* on the served model" "$S2_PID" 2 ||
    fail "S2 did not say its rebuilt scheduler is on the served model: $(cat "$SCRATCH/s2.log")"

finish cli_k8s_model
