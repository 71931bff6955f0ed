#!/usr/bin/env bash
# kace top in a real terminal (tmux), fed by a running kace serve:
#
#   bash cli_k8s_top.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# kace serve's node cache gets two nodes from agent-style reports (POST
# /k8s/nodes: one GPU with three pods predicted to slow each other down, one
# with a single pod, one idle GPU), an observed throughput for one GPU, and
# kace top runs in a detached tmux session (send-keys, capture-pane):
# - the screen shows every GPU, its pods, workloads, MPS shares, predicted
#   throughput, the observed one, and the interference flag on the crowded GPU;
# - after a bind through the extender (filter, then bind with a stand-in API
#   server), the screen updates: the new pod appears on its GPU with its MPS
#   share, marked assumed;
# - q quits.
set -u

KACE=${1:?usage: cli_k8s_top.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA="$HERE/data/k8s"
REF="$SHARED/kace-v100"
FAKE_API="$(dirname "$KACE")/kace-test-kube-api"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need tmux curl python3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
SOCK="kace-top-test-$$"
trap 'tmux -L "$SOCK" kill-server 2>/dev/null; kill_pids' EXIT

"$FAKE_API" --port-file "$SCRATCH/api.port" --nodes "$DATA/nodes.json" --log "$SCRATCH/api.log" &
started "$SCRATCH/api.port" "the fake API server"
API="http://127.0.0.1:$(cat "$SCRATCH/api.port")"
curl -s -X POST -H 'Content-Type: application/json' --data @"$DATA/pod-bert-0.json" "$API/api/v1/namespaces/ml/pods" >/dev/null
"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 2 --no-nvml \
    --kube-api "$API" >"$SCRATCH/serve.log" 2>&1 &
started "$SCRATCH/port" "kace serve" "$SCRATCH/serve.log"
URL="http://127.0.0.1:$(cat "$SCRATCH/port")"
post() { # PATH BODY
    curl -s -o "$SCRATCH/reply" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data "$2" "$URL$1"
}
V2=vit-base-patch16-224_batch2-inf
W8=whisper-large-v2_batch8-inf
B8=bert-base-cased_batch8-train
code=$(post /k8s/nodes '{"node": "gpu-node-0", "gpus": {"GPU-n0-0": [{"workload": "'$V2'", "pod": "ml/vit-a", "uid": "ua", "mps": 34},
    {"workload": "'$W8'", "pod": "ml/whisper-b", "uid": "ub", "mps": 33}, {"workload": "'$V2'", "pod": "ml/vit-c", "uid": "uc", "mps": 33}]}}')
[ "$code" = 200 ] || fail "report gpu-node-0: $code $(cat "$SCRATCH/reply")"
code=$(post /k8s/nodes '{"node": "gpu-node-1", "gpus": {"GPU-n1-0": [{"workload": "'$V2'", "pod": "ml/vit-d", "uid": "ud", "mps": 100}], "GPU-n1-1": []}}')
[ "$code" = 200 ] || fail "report gpu-node-1: $code $(cat "$SCRATCH/reply")"
code=$(post /v1/observations '{"gpu": "GPU-n1-0", "workloads": ["'$V2'"], "throughput": [57.25]}')
[ "$code" = 200 ] || fail "observation: $code $(cat "$SCRATCH/reply")"

tmux -L "$SOCK" new-session -d -s top -x 180 -y 40 "$KACE top --serve $URL --interval 0.3; echo kace-top-exited; sleep 30" ||
    { echo "FAIL: tmux could not start kace top" >&2; exit 1; }
screen() { tmux -L "$SOCK" capture-pane -p -t top >"$SCRATCH/screen.txt" 2>/dev/null; }
wait_screen() { # PATTERN (grep -E): waits up to 10 s
    for _ in $(seq 1 50); do
        screen
        grep -qE "$1" "$SCRATCH/screen.txt" && return 0
        sleep 0.2
    done
    return 1
}
wait_screen 'GPU-n1-1' || fail "kace top never drew the GPUs: $(cat "$SCRATCH/screen.txt")"
cp "$SCRATCH/screen.txt" "$SCRATCH/screen-1.txt"
for want in 'nodes 2  GPUs 3  pods 4  interfering 1' 'gpu-node-0 +GPU-n0-0 +3 .*! interference' \
    'gpu-node-1 +GPU-n1-0 +1 +63\.4 +57\.2 +ok' 'GPU-n1-1 +0 +- +- +idle' "ml/whisper-b +$W8 +MPS 33%" \
    "ml/vit-d +$V2 +MPS 100%"; do
    grep -qE -- "$want" "$SCRATCH/screen-1.txt" || fail "kace top lacks /$want/"
done
grep -qE "ml/vit-a .*\(0\.[0-4][0-9]\) +!" "$SCRATCH/screen-1.txt" || fail "no slowed-down pod flagged on GPU-n0-0"

# a bind through the extender: the screen follows
code=$(curl -s -o "$SCRATCH/reply" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data @"$DATA/extender-args-nodenames.json" "$URL/k8s/filter")
[ "$code" = 200 ] || fail "filter: $code $(cat "$SCRATCH/reply")"
code=$(curl -s -o "$SCRATCH/reply" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data @"$DATA/extender-binding-args.json" "$URL/k8s/bind")
grep -q '"Error":""' "$SCRATCH/reply" || fail "bind: $code $(cat "$SCRATCH/reply")"
wait_screen "ml/bert-0 +$B8 +MPS (50|100)%.* assumed" || fail "kace top did not show the new bind: $(cat "$SCRATCH/screen.txt")"
grep -q 'pods 5' "$SCRATCH/screen.txt" || fail "the pod count did not update"

tmux -L "$SOCK" send-keys -t top q
wait_screen 'kace-top-exited' || fail "q did not quit kace top: $(cat "$SCRATCH/screen.txt")"

if [ "$failures" -gt 0 ]; then
    echo "--- last screen:" >&2
    cat "$SCRATCH/screen.txt" >&2
fi
finish cli_k8s_top
