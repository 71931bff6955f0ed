#!/usr/bin/env bash
# Who may act through kace serve (docs/kubernetes.md, "Who may call kace"):
#
#   bash cli_serve_auth.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# The attacks, each refused, then the same call with credentials accepted:
# - a bind of a pod of another namespace to a node the caller picks, with no
#   credentials, on the main listener: refused, and the API server sees no
#   Binding; kube-scheduler's call over HTTPS with its client certificate
#   binds (201 at the API server);
# - a flood of 40 made-up pods to /k8s/filter: refused on the main listener,
#   refused on the extender's HTTPS listener without a client certificate and
#   with one another CA signed; the node cache holds none of them;
# - an observation POST without the token: 401; with it, 200;
# - the node cache (GET /k8s/state) and /metrics without the token: 401;
# - start-up refuses an extender listener off loopback without client
#   certificates, and a main listener off loopback without a token;
# - with --extender-client-name, a certificate the same CA signed for
#   another name (a node's) is refused; the name as CN or as a DNS name of
#   the subjectAltName gets in;
# - a real Prometheus with monitoring/prometheus-scrape.yml (its token file
#   and target made the test's; `promtool check config` first) scrapes
#   /metrics with the token; the same job with a wrong token gets 401.
# Certificates are made here with openssl.
set -u

KACE=${1:?usage: cli_serve_auth.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA="$HERE/data/k8s"
FAKE_API="$(dirname "$KACE")/kace-test-kube-api"
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl python3 openssl prometheus promtool
[ -x "$FAKE_API" ] || { echo "FAIL: no $FAKE_API (built with the tests)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/pki" || exit 1
DB="$SCRATCH/store.db"
PKI="$SCRATCH/pki"

# ---- certificates: a CA, kace's server certificate, kube-scheduler's client one, an impostor's --------
mkcert() { # NAME CA(or -) CN [SAN]
    openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$1.key" -subj "/CN=$3" -out "$PKI/$1.csr" 2>/dev/null || return 1
    if [ "$2" = - ]; then
        openssl x509 -req -in "$PKI/$1.csr" -signkey "$PKI/$1.key" -days 2 -out "$PKI/$1.crt" \
            -extfile <(printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign,cRLSign\n') 2>/dev/null
    else
        openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/$2.crt" -CAkey "$PKI/$2.key" -CAcreateserial -days 2 \
            -out "$PKI/$1.crt" -extfile <(printf 'basicConstraints=CA:FALSE\n%s\n' "${4:-}") 2>/dev/null
    fi
}
mkcert ca - "kace test CA" && mkcert other-ca - "someone else's CA" &&
    mkcert server ca "kace serve" "subjectAltName=IP:127.0.0.1" &&
    mkcert scheduler ca "kube-scheduler" "extendedKeyUsage=clientAuth" &&
    mkcert impostor other-ca "kube-scheduler" "extendedKeyUsage=clientAuth" &&
    mkcert node ca "system:node:gpu-node-0" "extendedKeyUsage=clientAuth" &&
    mkcert by-san ca "kube-scheduler-1" "extendedKeyUsage=clientAuth
subjectAltName=DNS:other.example,DNS:kube-scheduler" &&
    mkcert longer ca "kube-scheduler.evil" "extendedKeyUsage=clientAuth
subjectAltName=DNS:kube-scheduler.evil,DNS:*.kube-scheduler" ||
    { echo "FAIL: openssl could not make the test certificates" >&2; exit 1; }

# ---- the stand-in API server, and kace serve with both listeners ------------------------------------
echo 'auth-test-token' >"$SCRATCH/api-token"
"$FAKE_API" --port-file "$SCRATCH/api.port" --nodes "$DATA/nodes.json" --token auth-test-token \
    --log "$SCRATCH/api.log" 2>"$SCRATCH/api.err" &
started "$SCRATCH/api.port" "the fake API server" "$SCRATCH/api.err"
API="http://127.0.0.1:$(cat "$SCRATCH/api.port")"
curl -s -X POST -H 'Authorization: Bearer auth-test-token' -H 'Content-Type: application/json' \
    --data-binary @"$DATA/pod-bert-0.json" "$API/api/v1/namespaces/ml/pods" >/dev/null
printf 'kace-token-%s%s\n' "$RANDOM" "$RANDOM" >"$SCRATCH/token"
chmod 600 "$SCRATCH/token"
TOKEN=$(head -1 "$SCRATCH/token")

"$KACE" import --db "$DB" "$SHARED/kace-v100" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 2 --no-nvml \
    --kube-api "$API" --kube-token-file "$SCRATCH/api-token" --token-file "$SCRATCH/token" \
    --extender-listen 127.0.0.1:0 --extender-port-file "$SCRATCH/ext.port" --extender-tls-cert "$PKI/server.crt" \
    --extender-tls-key "$PKI/server.key" --extender-client-ca "$PKI/ca.crt" >"$SCRATCH/serve.log" 2>&1 &
started "$SCRATCH/port" "kace serve" "$SCRATCH/serve.log"
URL="http://127.0.0.1:$(cat "$SCRATCH/port")"
EXT="https://127.0.0.1:$(cat "$SCRATCH/ext.port")"

# call URL PATH OUT [curl options...]: the HTTP status (000 when no answer)
call() {
    local url=$1 path=$2 out=$3
    shift 3
    curl -s -o "$out" -w '%{http_code}' "$@" "$url$path"
}
JSON=(-X POST -H 'Content-Type: application/json')
AUTH=(-H "Authorization: Bearer $TOKEN")
SCHED=(--cacert "$PKI/ca.crt" --cert "$PKI/scheduler.crt" --key "$PKI/scheduler.key")
bindings() { grep -c '/binding 201 ' "$SCRATCH/api.log"; }

# ---- bind: an attacker's, then kube-scheduler's ---------------------------------------------------
echo '{"PodName": "bert-0", "PodNamespace": "ml", "PodUID": "3a8f2d4e-1b2c-4d5e-8f90-123456789abc", "Node": "gpu-node-0"}' \
    >"$SCRATCH/evil-bind.json"
got=$(call "$URL" /k8s/bind "$SCRATCH/out" "${JSON[@]}" --data-binary @"$SCRATCH/evil-bind.json")
[ "$got" = 401 ] || [ "$got" = 404 ] || fail "a bind without credentials on the main listener: HTTP $got, want 401/404"
got=$(call "$URL" /k8s/bind "$SCRATCH/out" "${JSON[@]}" "${AUTH[@]}" --data-binary @"$SCRATCH/evil-bind.json")
[ "$got" = 404 ] || fail "a bind with the agents' token on the main listener: HTTP $got, want 404 (extender listener only)"
got=$(call "$EXT" /k8s/bind "$SCRATCH/out" "${JSON[@]}" --cacert "$PKI/ca.crt" --data-binary @"$SCRATCH/evil-bind.json")
[ "$got" = 401 ] || fail "a bind over HTTPS without a client certificate: HTTP $got, want 401"
got=$(call "$EXT" /k8s/bind "$SCRATCH/out" "${JSON[@]}" --cacert "$PKI/ca.crt" --cert "$PKI/impostor.crt" \
    --key "$PKI/impostor.key" --data-binary @"$SCRATCH/evil-bind.json")
[ "$got" = 401 ] || [ "$got" = 000 ] || fail "a bind with another CA's client certificate: HTTP $got, want 401 or no answer"
got=$(call "http://127.0.0.1:$(cat "$SCRATCH/ext.port")" /k8s/bind "$SCRATCH/out" "${JSON[@]}" \
    --data-binary @"$SCRATCH/evil-bind.json")
[ "$got" = 200 ] && fail "a bind in plain HTTP to the HTTPS listener was answered"
check_eq "Bindings the attacks created" 0 "$(bindings)"

got=$(call "$EXT" /k8s/filter "$SCRATCH/filter.json" "${JSON[@]}" "${SCHED[@]}" \
    --data-binary @"$DATA/extender-args-nodenames.json")
[ "$got" = 200 ] || fail "kube-scheduler's filter over HTTPS: HTTP $got $(cat "$SCRATCH/filter.json")"
got=$(call "$EXT" /k8s/bind "$SCRATCH/bind.json" "${JSON[@]}" "${SCHED[@]}" --data-binary @"$DATA/extender-binding-args.json")
[ "$got" = 200 ] && grep -q '"Error":""' "$SCRATCH/bind.json" ||
    fail "kube-scheduler's bind over HTTPS: HTTP $got $(cat "$SCRATCH/bind.json")"
check_eq "Bindings kube-scheduler created" 1 "$(bindings)"
got=$(call "$EXT" /healthz "$SCRATCH/out" "${SCHED[@]}")
check_eq "/healthz on the extender listener" 200 "$got"
got=$(call "$EXT" /v1/observations "$SCRATCH/out" "${JSON[@]}" "${SCHED[@]}" --data '{}')
check_eq "/v1/observations on the extender listener" 404 "$got"

# ---- a filter flood of made-up pods --------------------------------------------------------------
refused=0
for i in $(seq 1 40); do
    sed "s/\"bert-0\"/\"flood-$i\"/; s/3a8f2d4e-1b2c-4d5e-8f90-123456789abc/flood-uid-$i/" \
        "$DATA/extender-args-nodenames.json" >"$SCRATCH/flood.json"
    a=$(call "$URL" /k8s/filter "$SCRATCH/out" "${JSON[@]}" --data-binary @"$SCRATCH/flood.json")
    b=$(call "$EXT" /k8s/filter "$SCRATCH/out" "${JSON[@]}" --cacert "$PKI/ca.crt" --data-binary @"$SCRATCH/flood.json")
    { [ "$a" = 401 ] || [ "$a" = 404 ]; } && [ "$b" = 401 ] && refused=$((refused + 1))
done
check_eq "flood filters refused on both listeners" 40 "$refused"
got=$(call "$URL" /k8s/state "$SCRATCH/state.json" "${AUTH[@]}")
check_eq "GET /k8s/state with the token" 200 "$got"
python3 -c 'import json,sys; s=open(sys.argv[1]).read(); sys.exit(1 if "flood" in s else 0)' "$SCRATCH/state.json" ||
    fail "the node cache holds flood pods: $(head -c 600 "$SCRATCH/state.json")"

# ---- observations, reads -----------------------------------------------------------------------
echo '{"gpu": "GPU-n1-0", "workloads": ["vit-base-patch16-224_batch2-inf", "whisper-large-v2_batch8-inf"], "throughput": [0.5, 0.5]}' \
    >"$SCRATCH/obs.json"
got=$(call "$URL" /v1/observations "$SCRATCH/out" "${JSON[@]}" --data-binary @"$SCRATCH/obs.json")
check_eq "an observation without the token" 401 "$got"
got=$(call "$URL" /v1/observations "$SCRATCH/obs-out.json" "${JSON[@]}" "${AUTH[@]}" --data-binary @"$SCRATCH/obs.json")
check_eq "an observation with the token" 200 "$got"
for path in /k8s/state /metrics /v1/workloads; do
    got=$(call "$URL" "$path" "$SCRATCH/out")
    check_eq "GET $path without the token" 401 "$got"
done
got=$(call "$URL" /healthz "$SCRATCH/out")
check_eq "GET /healthz without the token" 200 "$got"
grep -q 'extender listener on 127.0.0.1:0 (port [0-9]*, HTTPS, client certificates' "$SCRATCH/serve.log" ||
    fail "kace serve did not say how its extender listener is guarded: $(cat "$SCRATCH/serve.log")"

# ---- start-up refuses listeners anyone could reach ------------------------------------------------
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --no-nvml --extender-listen 0.0.0.0:0 >"$SCRATCH/refused1.log" 2>&1
check_eq "exit status, extender off loopback without client certificates" 2 "$?"
grep -q 'extender-client-ca' "$SCRATCH/refused1.log" || fail "no reason given: $(cat "$SCRATCH/refused1.log")"
"$KACE" serve --db "$DB" --listen 0.0.0.0:0 --no-nvml >"$SCRATCH/refused2.log" 2>&1
check_eq "exit status, main listener off loopback without a token" 2 "$?"
grep -q 'token-file' "$SCRATCH/refused2.log" || fail "no reason given: $(cat "$SCRATCH/refused2.log")"

# ---- --extender-client-name: the CA signs more than kube-scheduler's certificate ----------------------
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --no-nvml --extender-listen 127.0.0.1:0 \
    --extender-client-name kube-scheduler >"$SCRATCH/refused3.log" 2>&1
check_eq "exit status, --extender-client-name without --extender-client-ca" 2 "$?"
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port2" --watch 0 --threads 1 --no-nvml \
    --token-file "$SCRATCH/token" --extender-listen 127.0.0.1:0 --extender-port-file "$SCRATCH/ext2.port" \
    --extender-tls-cert "$PKI/server.crt" --extender-tls-key "$PKI/server.key" --extender-client-ca "$PKI/ca.crt" \
    --extender-client-name kube-scheduler >"$SCRATCH/serve2.log" 2>&1 &
started "$SCRATCH/port2" "kace serve --extender-client-name" "$SCRATCH/serve2.log"
EXT2="https://127.0.0.1:$(cat "$SCRATCH/ext2.port")"
# named CERT: the status of kube-scheduler's filter with CERT's certificate
named() {
    call "$EXT2" /k8s/filter "$SCRATCH/named-$1.json" "${JSON[@]}" --cacert "$PKI/ca.crt" --cert "$PKI/$1.crt" \
        --key "$PKI/$1.key" --data-binary @"$DATA/extender-args-nodenames.json"
}
check_eq "filter with the CN kube-scheduler" 200 "$(named scheduler)"
check_eq "filter with a SAN DNS name kube-scheduler" 200 "$(named by-san)"
check_eq "filter with a node's certificate from the same CA" 401 "$(named node)"
grep -q "system:node:gpu-node-0.*--extender-client-name" "$SCRATCH/named-node.json" ||
    fail "the refusal does not say why: $(cat "$SCRATCH/named-node.json")"
check_eq "filter with kube-scheduler.evil and a wildcard SAN" 401 "$(named longer)"
got=$(named impostor)
[ "$got" = 401 ] || [ "$got" = 000 ] || fail "another CA's kube-scheduler certificate, named: HTTP $got, want 401 or no answer"
grep -q 'client certificates signed by --extender-client-ca, named --extender-client-name' "$SCRATCH/serve2.log" ||
    fail "kace serve did not say its extender listener checks the name: $(cat "$SCRATCH/serve2.log")"

# ---- Prometheus scrapes /metrics with the token (monitoring/prometheus-scrape.yml) --------------------
printf '%s\n' "$TOKEN" >"$SCRATCH/prom-token"
echo 'not-the-token' >"$SCRATCH/prom-wrong-token"
chmod 600 "$SCRATCH/prom-token" "$SCRATCH/prom-wrong-token"
python3 - "$HERE/../monitoring/prometheus-scrape.yml" "$SCRATCH" "127.0.0.1:$(cat "$SCRATCH/port")" \
    >"$SCRATCH/prometheus.yml" <<'PY' || fail "cannot adapt monitoring/prometheus-scrape.yml"
import copy, sys, yaml
conf = yaml.safe_load(open(sys.argv[1]))
job = conf["scrape_configs"][0]
assert job["authorization"]["credentials_file"], "no credentials_file"
job["scrape_interval"] = "1s"
job["authorization"]["credentials_file"] = sys.argv[2] + "/prom-token"
job["static_configs"] = [{"targets": [sys.argv[3]]}]
wrong = copy.deepcopy(job)
wrong["job_name"] = "kace-wrong-token"
wrong["authorization"]["credentials_file"] = sys.argv[2] + "/prom-wrong-token"
conf["scrape_configs"].append(wrong)
print(yaml.safe_dump(conf))
PY
promtool check config "$SCRATCH/prometheus.yml" >"$SCRATCH/promtool.out" 2>&1 ||
    fail "promtool check config: $(cat "$SCRATCH/promtool.out")"
PROM_PORT=$(free_port)
prometheus --config.file="$SCRATCH/prometheus.yml" --storage.tsdb.path="$SCRATCH/prometheus" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$SCRATCH/prometheus.log" 2>&1 &
PROM_PID=$!
PIDS="$PIDS $PROM_PID"
PROM="http://127.0.0.1:$PROM_PORT"
# until both targets were scraped once (their health is no longer "unknown")
scraped=""
for _ in $(seq 1 120); do
    curl -s "$PROM/api/v1/targets" >"$SCRATCH/targets.json" 2>/dev/null &&
        python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["data"]["activeTargets"]; sys.exit(0 if len(t) == 2 and all(x["health"] != "unknown" for x in t) else 1)' \
            "$SCRATCH/targets.json" 2>/dev/null && { scraped=yes; break; }
    kill -0 "$PROM_PID" 2>/dev/null || break
    sleep 0.5
done
[ -n "$scraped" ] || fail "Prometheus never scraped kace serve: $(tail -3 "$SCRATCH/prometheus.log")"
health() { # JOB: its target's health and last error
    python3 -c 'import json,sys; t=[x for x in json.load(open(sys.argv[1]))["data"]["activeTargets"] if x["labels"]["job"] == sys.argv[2]]; print(t[0]["health"], t[0]["lastError"]) if t else print("none")' \
        "$SCRATCH/targets.json" "$1"
}
check_eq "the kace job with the token" "up " "$(health kace)"
case "$(health kace-wrong-token)" in
    down*401*) ;;
    *) fail "the job with a wrong token: $(health kace-wrong-token), want down with 401" ;;
esac
got=$(curl -s -G --data-urlencode 'query=kace_build_info{job="kace"}' "$PROM/api/v1/query")
grep -q '"result":\[{' <<<"$got" || fail "no kace series scraped: $got"
finish cli_serve_auth
