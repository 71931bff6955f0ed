#!/usr/bin/env bash
# kace serve --objective: what requests without an "objective" and the
# extender's scheduler rank by, kept across a reload:
#
#   bash cli_serve_objective.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - --objective with a value that is none: a usage error naming raw,
#   normalized and fair, and no server;
# - served with --objective normalized: /v1/partners, /v1/predict and
#   /v1/place without the field answer under normalized, a request's own
#   field wins, an unknown one is a 400 naming the accepted values, the
#   extender's scheduler says it is on normalized;
# - after SIGHUP (a reload), the same.
set -u

KACE=${1:?usage: cli_serve_objective.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl python3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
"$KACE" import --db "$DB" "$REF/profiles" "$REF/colocations/pairs.csv" >"$SCRATCH/import.out" 2>&1 ||
    { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }

# ---- a value that is none: refused before anything starts ------------------------
"$KACE" serve --db "$DB" --objective speed --listen 127.0.0.1:0 --port-file "$SCRATCH/bad.port" \
    >"$SCRATCH/bad.out" 2>&1
rc=$?
check_eq "exit status of --objective speed" 2 "$rc"
grep -q "raw, normalized or fair" "$SCRATCH/bad.out" || fail "--objective speed: no list of objectives: $(cat "$SCRATCH/bad.out")"
[ -e "$SCRATCH/bad.port" ] && fail "--objective speed left a port file"

"$KACE" serve --db "$DB" --objective normalized --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 \
    --threads 1 --no-nvml >"$SCRATCH/serve.log" 2>&1 &
started "$SCRATCH/port" "kace serve" "$SCRATCH/serve.log"
SERVE_PID=${PIDS%% *}
URL="http://127.0.0.1:$(cat "$SCRATCH/port")"

# post PATH BODY -> the status; the body in $SCRATCH/body
post() {
    curl -s -o "$SCRATCH/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary "$2" "$URL$1"
}
json() { # PY-EXPR on the last body (j)
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$SCRATCH/body" 2>/dev/null
}
expect() { # STATUS PATH BODY PY-EXPR
    local got
    got=$(post "$2" "$3")
    if [ "$got" != "$1" ]; then
        fail "$2 ${3:0:80}: status $got, want $1: $(head -c 300 "$SCRATCH/body")"
    elif ! json "$4"; then
        fail "$2 ${3:0:80}: reply fails '$4': $(head -c 300 "$SCRATCH/body")"
    fi
}

B8=bert-base-cased_batch8-train
V2=vit-base-patch16-224_batch2-inf
PLACE="\"job\": \"$B8\", \"gpus\": [{\"id\": \"g0\", \"running\": [\"$V2\"]}, {\"id\": \"g1\"}]"
shares='all(0 < p["predicted"] < 2.5 and "predicted_sum" not in p for p in j["partners"])'

requests() { # WHEN
    expect 200 /v1/partners "{\"target\": \"$B8\", \"top\": 5}" \
        "j['objective'] == 'normalized' and len(j['partners']) == 5 and $shares"
    cp "$SCRATCH/body" "$SCRATCH/default.$1.json"
    expect 200 /v1/partners "{\"target\": \"$B8\", \"top\": 5, \"objective\": \"normalized\"}" "j['objective'] == 'normalized'"
    cmp -s "$SCRATCH/body" "$SCRATCH/default.$1.json" ||
        fail "$1: the default ranking is not the normalized one: $(cat "$SCRATCH/default.$1.json") / $(cat "$SCRATCH/body")"
    expect 200 /v1/partners "{\"target\": \"$B8\", \"top\": 5, \"objective\": \"raw\"}" \
        'j["objective"] == "raw" and all(p["predicted_sum"] > 5 for p in j["partners"])'
    expect 200 /v1/partners "{\"target\": \"$B8\", \"top\": 5, \"objective\": \"fair\"}" \
        'j["objective"] == "fair" and all(0 < p["predicted"] <= 1.5 for p in j["partners"])'
    expect 200 /v1/predict "{\"workloads\": [\"$B8\", \"$V2\"]}" \
        'j["objective"] == "normalized" and abs(j["predicted"] - j["normalized"]) < 1e-9 and j["measured"] > 0'
    expect 200 /v1/place "{$PLACE}" 'j["objective"] == "normalized" and j["gpus"][1]["gain"] == 1'
    expect 200 /v1/place "{$PLACE, \"objective\": \"raw\"}" 'j["objective"] == "raw" and j["gpus"][1]["gain"] > 5'
    expect 400 /v1/partners "{\"target\": \"$B8\", \"objective\": \"Fair\"}" \
        '"raw" in j["error"]["message"] and "normalized" in j["error"]["message"] and "fair" in j["error"]["message"]'
}

requests start
wait_line "$SCRATCH/serve.log" "scheduler \\(policy kace, objective normalized," "$SERVE_PID" ||
    fail "the extender's scheduler is not on the normalized objective: $(cat "$SCRATCH/serve.log")"

# ---- a reload keeps the objective ----------------------------------------------------
kill -HUP "$SERVE_PID"
wait_line "$SCRATCH/serve.log" 'reloaded \(SIGHUP\)' "$SERVE_PID" || fail "no reload after SIGHUP: $(cat "$SCRATCH/serve.log")"
wait_line "$SCRATCH/serve.log" "scheduler \\(policy kace, objective normalized," "$SERVE_PID" 2 ||
    fail "after the reload, the extender's scheduler is not on the normalized objective: $(cat "$SCRATCH/serve.log")"
requests reload
cmp -s "$SCRATCH/default.start.json" "$SCRATCH/default.reload.json" ||
    fail "the default ranking changed across a reload of the same model"

kill_pids
finish cli_serve_objective
