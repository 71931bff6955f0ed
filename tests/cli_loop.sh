#!/bin/bash
# The closed learning loop end to end with the CLI: import, train, kace serve
# --store-observations storing POSTed observations (deduplicated on their
# id, a conflicting resend refused), drift shown by /metrics and kace info,
# and kace train --from-observations promoting a candidate only when it does
# at least as well on the held-out slice (the most recent observations):
#  A. older observations at half the measured throughput, recent ones as
#     measured: the candidate (fitted on the halved ones) is worse on the
#     recent slice -> not promoted, the default model unchanged;
#  B. more halved observations, now the recent ones, from three more
#     senders (three agents of --agent-tokens, each with its own token; the
#     first 40 came through --token-file's server, from one address): the
#     candidate is better there and no single sender controls the judgement
#     -> promoted (one sender contradicting the stored measurements is not
#     enough, whatever addresses it uses: cli_serve_poison).
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
# Runs the test in a process group of its own, killed whole at the end.
source "$(dirname "$0")/lib_test.sh"
KACE=$1 DATA=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
export KACE_DB=$DIR/kace.db LC_ALL=C
fail() { echo "FAIL: $*"; exit 1; }
command -v curl >/dev/null || fail "curl is not installed (bash .ci/install-deps)"
KACE_PID=""
trap 'kill_pids; [ -n "$KACE_PID" ] && kill "$KACE_PID" 2>/dev/null; wait 2>/dev/null || true' EXIT

"$KACE" import "$DATA/profiles/system.csv" "$DATA/colocations/pairs.csv" >/dev/null
"$KACE" train >/dev/null
T=bert-base-cased_batch8-train
"$KACE" predict --target $T --top 5 > "$DIR/predict0.txt"
grep -q "observations 0" < <("$KACE" info) || fail "a fresh store has observations"

"$KACE" serve --listen 127.0.0.1:0 --port-file "$DIR/port" --watch 0 --threads 2 --no-nvml --store-observations \
    >"$DIR/serve.log" 2>&1 &
KACE_PID=$!
for _ in $(seq 1 200); do
    [ -s "$DIR/port" ] && break
    kill -0 "$KACE_PID" 2>/dev/null || break
    sleep 0.1
done
[ -s "$DIR/port" ] || fail "kace serve did not start: $(cat "$DIR/serve.log")"
URL="http://127.0.0.1:$(cat "$DIR/port")"

# post ID FACTOR ROW [TOKEN]: pairs.csv's data row ROW, its measured throughputs times FACTOR,
# sent with the bearer token TOKEN (an agent's: another sender).
post() {
    local line
    line=$(tail -n +2 "$DATA/colocations/pairs.csv" | sed -n "$3p")
    awk -F, -v id="$1" -v f="$2" '{ printf "{\"id\": \"%s\", \"gpu\": \"GPU-0\", \"workloads\": [\"%s\", \"%s\"], \"throughput\": [%.6f, %.6f]}", id, $13, $14, $17 * f, $18 * f }' \
        <<<"$line" > "$DIR/body.json"
    curl -s -o "$DIR/reply.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
        ${4:+-H "Authorization: Bearer $4"} --data-binary @"$DIR/body.json" "$URL/v1/observations"
}

# A: 30 halved, then 10 as measured (the most recent).
for i in $(seq 1 30); do [ "$(post a$i 0.5 $i)" = 200 ] || fail "observation a$i: $(cat "$DIR/reply.json")"; done
for i in $(seq 31 40); do [ "$(post a$i 1.0 $i)" = 200 ] || fail "observation a$i: $(cat "$DIR/reply.json")"; done
# The same id again: stored once. With other values: refused, nothing stored.
[ "$(post a40 1.0 40)" = 200 ] || fail "a resent observation was refused: $(cat "$DIR/reply.json")"
code=$(post a40 0.7 40)
[ "$code" = 422 ] || [ "$code" = 400 ] || fail "a conflicting resend gave $code: $(cat "$DIR/reply.json")"
grep -q "not stored" "$DIR/reply.json" || fail "the conflicting resend does not say it was not stored"
curl -s "$URL/metrics" > "$DIR/metrics.txt"
grep -q '^kace_model_cv_error_percent [0-9]' "$DIR/metrics.txt" || fail "no cross-validated error in /metrics"
grep -q '^kace_model_drift_ratio [0-9]' "$DIR/metrics.txt" || fail "no drift ratio in /metrics"

"$KACE" info > "$DIR/info.txt"
grep -q "observations 40$" "$DIR/info.txt" || fail "expected 40 stored observations: $(grep observations "$DIR/info.txt")"
"$KACE" train --from-observations > "$DIR/trainA.txt" || fail "retrain A: $(cat "$DIR/trainA.txt")"
cat "$DIR/trainA.txt"
grep -q "the 10 most recent held out" "$DIR/trainA.txt" || fail "A: expected 10 of 40 held out"
cur=$(awk '$1 == "current" && NF == 3 {print $3+0}' "$DIR/trainA.txt")
cand=$(awk '$1 == "candidate" && NF == 3 {print $3+0}' "$DIR/trainA.txt")
awk -v a="$cand" -v b="$cur" 'BEGIN { exit !(a > b) }' || fail "A: the candidate ($cand%) should do worse than the current model ($cur%)"
grep -q "^not promoted" "$DIR/trainA.txt" || fail "A: promoted although worse"
"$KACE" predict --target $T --top 5 > "$DIR/predictA.txt"
cmp -s "$DIR/predict0.txt" "$DIR/predictA.txt" || fail "A: the default model changed without a promotion"

kill "$KACE_PID"; wait "$KACE_PID" 2>/dev/null || true; KACE_PID=""

# B: 40 more halved from three agents: now the most recent slice disagrees with the model.
printf 'agent-1 t1-%s\nagent-2 t2-%s\nagent-3 t3-%s\n' "$RANDOM$RANDOM" "$RANDOM$RANDOM" "$RANDOM$RANDOM" > "$DIR/agents"
chmod 600 "$DIR/agents"
mapfile -t AGENT_TOKENS < <(awk '{print $2}' "$DIR/agents")
rm -f "$DIR/port"
"$KACE" serve --listen 127.0.0.1:0 --port-file "$DIR/port" --watch 0 --threads 2 --no-nvml --store-observations \
    --agent-tokens "$DIR/agents" >>"$DIR/serve.log" 2>&1 &
KACE_PID=$!
wait_file "$DIR/port" "$KACE_PID" || fail "kace serve did not start with --agent-tokens: $(cat "$DIR/serve.log")"
URL="http://127.0.0.1:$(cat "$DIR/port")"
[ "$(post b0 0.5 41)" = 401 ] || fail "an observation without an agent's token was taken: $(cat "$DIR/reply.json")"
for i in $(seq 41 80); do
    [ "$(post b$i 0.5 $i "${AGENT_TOKENS[i % 3]}")" = 200 ] || fail "observation b$i: $(cat "$DIR/reply.json")"
done
curl -s "$URL/metrics" > "$DIR/metrics.txt"
kill "$KACE_PID"; wait "$KACE_PID" 2>/dev/null || true; KACE_PID=""
recent=$(awk '$1 == "kace_model_recent_error_percent" {print $2}' "$DIR/metrics.txt")
ratio=$(awk '$1 == "kace_model_drift_ratio" {print $2}' "$DIR/metrics.txt")
echo "serve: recent error $recent%, drift ratio $ratio"
awk -v r="$ratio" 'BEGIN { exit !(r > 1.5) }' || fail "serve: drift ratio $ratio after half-throughput observations"
"$KACE" info > "$DIR/info.txt"
grep drift "$DIR/info.txt"
drift=$(awk '$1 == "drift" {print $5}' "$DIR/info.txt" | tr -d :)
awk -v r="$drift" 'BEGIN { exit !(r > 1.5) }' || fail "info: drift $drift after half-throughput observations"
"$KACE" train --from-observations > "$DIR/trainB.txt" || fail "retrain B: $(cat "$DIR/trainB.txt")"
cat "$DIR/trainB.txt"
grep -q "the 20 most recent held out" "$DIR/trainB.txt" || fail "B: expected 20 of 80 held out"
cur=$(awk '$1 == "current" && NF == 3 {print $3+0}' "$DIR/trainB.txt")
cand=$(awk '$1 == "candidate" && NF == 3 {print $3+0}' "$DIR/trainB.txt")
awk -v a="$cand" -v b="$cur" 'BEGIN { exit !(a <= b) }' || fail "B: the candidate ($cand%) should do better than $cur%"
grep -q "^promoted" "$DIR/trainB.txt" || fail "B: not promoted although better"
"$KACE" predict --target $T --top 5 > "$DIR/predictB.txt"
cmp -s "$DIR/predict0.txt" "$DIR/predictB.txt" && fail "B: promoted but the default model did not change"
# After the promotion the model has seen the halved throughputs: less drift on them.
"$KACE" info | grep drift
drift2=$("$KACE" info | awk '$1 == "drift" {print $5}' | tr -d :)
awk -v a="$drift2" -v b="$drift" 'BEGIN { exit !(a < b) }' || fail "drift $drift2 after the promotion, $drift before"
# Too few observations: refused with the reason, nothing promoted.
rm -f "$DIR/empty.db"
KACE_DB=$DIR/empty.db "$KACE" import "$DATA/profiles/system.csv" "$DATA/colocations/pairs.csv" >/dev/null
KACE_DB=$DIR/empty.db "$KACE" train >/dev/null
KACE_DB=$DIR/empty.db "$KACE" train --from-observations 2>"$DIR/err" && fail "retrain without observations succeeded"
grep -q "0 usable observations" "$DIR/err" || fail "no reason: $(cat "$DIR/err")"
echo ok
