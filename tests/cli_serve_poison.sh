#!/usr/bin/env bash
# The closed loop cannot be poisoned by one sender (docs/serve.md, "Observations"):
#
#   bash cli_serve_poison.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# The attack: 120 consistent made-up reports that the target's best partner
# runs at half its measured throughput, POSTed to /v1/observations, then
# `kace train --from-observations`, which used to promote a model that had
# learnt them (it was judged on the sender's own reports).
# - without the token, all 120 are refused and nothing is stored;
# - with it, one sender gets --observation-rate's burst (60) and then 429,
#   counted in /metrics;
# - with no rate limit, all 120 are stored; the candidate is better on the
#   held-out (made-up) reports, but not promoted: it disagrees with the
#   stored measurements and one sender sent every report. The served model
#   (kace predict) is unchanged.
# The same attack from several addresses (127.0.0.2-4: any local process
# may use them): without --agent-tokens they are three senders and the
# retrain promotes; with --agent-tokens:
# - --token-file's token and no token are refused on /v1/observations; an
#   agents file that others may read, or with a bad line, stops kace serve;
# - one agent's token from three addresses is one sender (the store's
#   origin is the agent's name): one rate limit for the three, and the
#   retrain counts 1 sender and does not promote.
set -u

KACE=${1:?usage: cli_serve_poison.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl awk
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
export KACE_DB="$SCRATCH/store.db"
PAIRS="$SHARED/kace-v100/colocations/pairs.csv"
"$KACE" import "$SHARED/kace-v100/profiles/system.csv" "$PAIRS" >"$SCRATCH/import.out" 2>&1 &&
    "$KACE" train >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/import.out" "$SCRATCH/train.out" >&2; exit 1; }
cp "$KACE_DB" "$SCRATCH/clean.db" # trained, no observation yet: the store of the attack through agents
T=bert-base-cased_batch8-train
"$KACE" predict --target "$T" --top 5 >"$SCRATCH/predict0.txt" || fail "kace predict"
# the target's best partner, and their measured throughputs together (pairs.csv)
P=$(awk '$1 == "1" {print $2; exit}' "$SCRATCH/predict0.txt")
[ -n "$P" ] || { echo "FAIL: no best partner in: $(cat "$SCRATCH/predict0.txt")" >&2; exit 1; }
read -r t1 t2 < <(awk -F, -v a="$T" -v b="$P" '$13 == a && $14 == b {print $17, $18; exit} $13 == b && $14 == a {print $18, $17; exit}' "$PAIRS")
[ -n "${t1:-}" ] || { echo "FAIL: $T with $P is not measured in $PAIRS" >&2; exit 1; }
echo "poisoning $T + $P: measured $t1 + $t2, reported at half"
printf 's3cret-%s\n' "$RANDOM$RANDOM" >"$SCRATCH/token"
chmod 600 "$SCRATCH/token"
TOKEN=$(head -1 "$SCRATCH/token")

# serve ARGS...: kace serve storing observations; sets URL
serve() {
    rm -f "$SCRATCH/port"
    "$KACE" serve --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 2 --no-nvml \
        --store-observations --token-file "$SCRATCH/token" "$@" >>"$SCRATCH/serve.log" 2>&1 &
    SERVE_PID=$!
    started "$SCRATCH/port" "kace serve" "$SCRATCH/serve.log"
    URL="http://127.0.0.1:$(cat "$SCRATCH/port")"
}
stop() {
    kill -TERM "$SERVE_PID" && wait "$SERVE_PID"
    PIDS=""
}
# attack FROM TO [CURL-ARGS]: reports FROM..TO; prints how many got each status.
# With ADDRS set (loopback addresses), report i comes from the (i mod n)th.
attack() {
    local from=$1 to=$2 addrs=(${ADDRS:-})
    shift 2
    for i in $(seq "$from" "$to"); do
        local via=()
        [ ${#addrs[@]} -gt 0 ] && via=(--interface "${addrs[i % ${#addrs[@]}]}")
        printf '{"id": "fake-%d", "gpu": "GPU-0", "workloads": ["%s", "%s"], "throughput": [%.6f, %.6f]}' \
            "$i" "$T" "$P" "$(awk -v x="$t1" 'BEGIN {print x / 2}')" "$(awk -v x="$t2" 'BEGIN {print x / 2}')" \
            >"$SCRATCH/obs.json"
        curl -s -o /dev/null -w '%{http_code}\n' -X POST -H 'Content-Type: application/json' "${via[@]}" "$@" \
            --data-binary @"$SCRATCH/obs.json" "$URL/v1/observations"
    done | sort | uniq -c | awk '{printf "%s:%s ", $2, $1} END {print ""}'
}
stored() { "$KACE" info | awk '$1 == "observations" {print $2}'; }

serve --observation-rate 0.01/60 # a burst of 60, then one per 100 minutes
got=$(attack 1 120)
check_eq "statuses without the token" "401:120 " "$got"
check_eq "observations stored without the token" 0 "$(stored)"
got=$(attack 1 120 -H "Authorization: Bearer $TOKEN")
check_eq "statuses from one sender past its rate" "200:60 429:60 " "$got"
metric=$(curl -s -H "Authorization: Bearer $TOKEN" "$URL/metrics" |
    awk '$1 == "kace_http_dropped_total{reason=\"observation_rate\"}" {print $2}')
check_eq "observations refused for rate in /metrics" 60 "$metric"
stop

serve --observation-rate 0
got=$(attack 61 180 -H "Authorization: Bearer $TOKEN")
check_eq "statuses without a rate limit" "200:120 " "$got"
stop
check_eq "observations stored" 180 "$(stored)"
"$KACE" train --from-observations >"$SCRATCH/retrain.txt" 2>&1 || fail "retrain: $(cat "$SCRATCH/retrain.txt")"
cat "$SCRATCH/retrain.txt"
cur=$(awk '$1 == "current" && NF == 3 {print $3 + 0}' "$SCRATCH/retrain.txt")
cand=$(awk '$1 == "candidate" && NF == 3 {print $3 + 0}' "$SCRATCH/retrain.txt")
awk -v a="$cand" -v b="$cur" 'BEGIN { exit !(a < b) }' ||
    fail "the candidate ($cand%) should win on the made-up held-out slice ($cur%): the attack as it was"
grep -q '^not promoted: better on the held-out observations, but those disagree with the stored measurements' \
    "$SCRATCH/retrain.txt" || fail "the poisoned candidate was promoted"
grep -q '^measurements: .* 1 sender(s), the largest with 180 of 180' "$SCRATCH/retrain.txt" ||
    fail "the senders were not counted: $(grep measurements "$SCRATCH/retrain.txt")"
"$KACE" predict --target "$T" --top 5 >"$SCRATCH/predict1.txt"
cmp -s "$SCRATCH/predict0.txt" "$SCRATCH/predict1.txt" || fail "the served model changed: $(diff "$SCRATCH/predict0.txt" "$SCRATCH/predict1.txt")"

# ---- the attack through several addresses ----
# Without --agent-tokens, senders are addresses: 127.0.0.2-4 are three, and
# the retrain promotes (the attack, as docs/serve.md warns).
export KACE_DB="$SCRATCH/addresses.db"
cp "$SCRATCH/clean.db" "$KACE_DB"
export ADDRS="127.0.0.2 127.0.0.3 127.0.0.4"
serve --observation-rate 0
got=$(attack 1 120 -H "Authorization: Bearer $TOKEN")
check_eq "statuses from three addresses" "200:120 " "$got"
stop
"$KACE" train --from-observations >"$SCRATCH/retrain-addresses.txt" 2>&1 ||
    fail "retrain: $(cat "$SCRATCH/retrain-addresses.txt")"
grep -q '^measurements: .* 3 sender(s), the largest with 40 of 120' "$SCRATCH/retrain-addresses.txt" ||
    fail "three addresses were not three senders: $(grep measurements "$SCRATCH/retrain-addresses.txt")"
grep -q '^promoted' "$SCRATCH/retrain-addresses.txt" ||
    fail "the attack through three addresses did not promote (the replay is not the attack): $(tail -1 "$SCRATCH/retrain-addresses.txt")"

# ---- the same, senders named by --agent-tokens ----
export KACE_DB="$SCRATCH/agents.db"
cp "$SCRATCH/clean.db" "$KACE_DB"
AGENTS="$SCRATCH/agents"
printf '# NAME TOKEN\nnode-a tok-a-%s\nnode-b tok-b-%s\n\nmallory tok-m-%s\n' "$RANDOM$RANDOM" "$RANDOM$RANDOM" \
    "$RANDOM$RANDOM" >"$AGENTS"
chmod 644 "$AGENTS"
timeout 60 "$KACE" serve --listen 127.0.0.1:0 --watch 0 --no-nvml --agent-tokens "$AGENTS" >"$SCRATCH/start.err" 2>&1 &&
    fail "kace serve started with an agents file others may read"
grep -q "other users may read it" "$SCRATCH/start.err" || fail "no reason for the readable file: $(cat "$SCRATCH/start.err")"
chmod 600 "$AGENTS"
printf 'node-x tok-x\nNode-Y tok-y\n' >"$SCRATCH/bad-agents"
chmod 600 "$SCRATCH/bad-agents"
timeout 60 "$KACE" serve --listen 127.0.0.1:0 --watch 0 --no-nvml --agent-tokens "$SCRATCH/bad-agents" >"$SCRATCH/start.err" 2>&1 &&
    fail "kace serve started with a bad agents file"
grep -q "bad-agents:2:1: expected an agent name" "$SCRATCH/start.err" ||
    fail "a bad agents file is not reported at file:line:col: $(cat "$SCRATCH/start.err")"
MALLORY=$(awk '$1 == "mallory" {print $2}' "$AGENTS")

serve --agent-tokens "$AGENTS" --observation-rate 0.01/20
got=$(attack 1 30)
check_eq "statuses without a token, agents named" "401:30 " "$got"
got=$(attack 1 30 -H "Authorization: Bearer $TOKEN")
check_eq "statuses with --token-file's token, agents named" "401:30 " "$got"
got=$(attack 1 60 -H "Authorization: Bearer $MALLORY")
check_eq "statuses from one agent through three addresses past its rate" "200:20 429:40 " "$got"
stop
check_eq "observations stored through three addresses" 20 "$(stored)"

serve --agent-tokens "$AGENTS" --observation-rate 0
got=$(attack 21 120 -H "Authorization: Bearer $MALLORY")
check_eq "statuses from one agent, no rate limit" "200:100 " "$got"
stop
check_eq "observations stored from one agent" 120 "$(stored)"
"$KACE" train --from-observations >"$SCRATCH/retrain-agents.txt" 2>&1 ||
    fail "retrain: $(cat "$SCRATCH/retrain-agents.txt")"
cat "$SCRATCH/retrain-agents.txt"
grep -q '^measurements: .* 1 sender(s), the largest with 120 of 120' "$SCRATCH/retrain-agents.txt" ||
    fail "three addresses with one token did not count as one sender: $(grep measurements "$SCRATCH/retrain-agents.txt")"
grep -q '^promoted' "$SCRATCH/retrain-agents.txt" && fail "the poisoned candidate was promoted (agents named)"
"$KACE" predict --target "$T" --top 5 >"$SCRATCH/predict2.txt"
cmp -s "$SCRATCH/predict0.txt" "$SCRATCH/predict2.txt" ||
    fail "the served model changed (agents named): $(diff "$SCRATCH/predict0.txt" "$SCRATCH/predict2.txt")"
finish cli_serve_poison
