#!/usr/bin/env bash
# `kace serve` answering POST /v1/predict for one measured pair costs the
# same per request on the 52-workload V100 store and on a synthetic store of
# a million colocations (bench/gen_scale.sh: N workloads, M pair
# colocations), in the same run. Goal: the big store's server CPU time per
# request within 2x the small one's (each request looks up its measured sum
# in an index built at load, rather than scanning every colocation).
#
# - Both stores are imported and trained here (the big one on its set
#   "pairs", as bench/bench_scale.sh does) and served by the same binary,
#   `kace serve --threads 1`, on loopback.
# - Load generator: wrk, 1 thread, 1 connection, keep-alive, SECONDS per
#   point; R rounds, each measuring the small then the big store.
# - Per point: requests/s and the server's CPU time per request
#   (utime+stime from /proc, clock ticks), which the machine's other load
#   disturbs less than the request rate does. The goal is judged on the
#   median over the rounds of the per-round ratio big/small of CPU per
#   request; the medians of both, the request rates and the servers'
#   resident memory (VmRSS after loading) are printed.
# - Each server's answer is checked first: the pair's measured_sum must be a
#   number (the request exercises the index, not only the model).
# With MAX_RATIO, exits 1 when the median ratio exceeds it. With
# KACE_BASE_BIN set to another kace (one that scans every colocation per
# request, say), the same stores are also served by it and measured in the
# same rounds, its numbers printed alongside (not held to the goal).
# usage: bash bench/bench_serve_scale.sh [KACE_BIN] [V100_DIR] [N_WORKLOADS] [N_COLOCATIONS] [SECONDS] [R] [MAX_RATIO]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
kace=$(readlink -f "${1:-$root/build/kace}")
data=$(readlink -f "${2:-$root/../shared/data/kace-v100}")
n=${3:-10000}
m=${4:-1000000}
seconds=${5:-3}
R=${6:-3}
max_ratio=${7:-}
for tool in wrk curl; do
    command -v "$tool" >/dev/null || { echo "bench_serve_scale: $tool is not installed (bash .ci/install-deps)" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
    set +e # a killed child's status must not end the cleanup early
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
echo "bench_serve_scale: /v1/predict on the V100 store and on $n workloads, $m colocations;" \
    "$(nproc) cores, load: $(uptime | sed 's/.*load average/load average/')"
t0=$EPOCHREALTIME
bash "$here/gen_scale.sh" "$work/data" "$n" "$m"
echo "generated $(du -sm "$work/data" | cut -f1) MiB of CSV in $(since "$t0") s"
t0=$EPOCHREALTIME
"$kace" import --quiet --db "$work/small.db" "$data" >/dev/null
"$kace" train --db "$work/small.db" >/dev/null
echo "V100 store imported and trained in $(since "$t0") s"
t0=$EPOCHREALTIME
"$kace" import --quiet --db "$work/big.db" "$work/data" >/dev/null
"$kace" train --db "$work/big.db" --set pairs >/dev/null
echo "synthetic store imported and trained in $(since "$t0") s ($(du -m "$work/big.db" | cut -f1) MiB)"
rm -rf "$work/data"

# One measured pair of each store: V100's from colocations/pairs.csv; the
# synthetic one's from gen_scale.sh's bulk (workload 0 and workload 100).
body_small='{"workloads": ["wav2vec2-base-960h_batch2-inf", "bert-base-cased_batch8-train"]}'
body_big='{"workloads": ["syn0_batch2-train", "syn12_batch2-inf"]}'

# start NAME [BIN]: serves $work/NAME.db (NAME less any _base) with BIN, waits for its port (loading the big
# store takes a while), checks its answer has a measured sum
start() {
    local name=$1 bin=${2:-$kace} body_var=body_${1%_base} t0=$EPOCHREALTIME
    "$bin" serve --db "$work/${name%_base}.db" --listen 127.0.0.1:0 --port-file "$work/$name.port" --threads 1 \
        --watch 0 --no-nvml --quiet >"$work/$name.log" 2>&1 &
    pids+=($!)
    echo $! >"$work/$name.pids"
    while [ ! -s "$work/$name.port" ]; do
        kill -0 "$!" 2>/dev/null || { echo "bench_serve_scale: $name kace serve died: $(cat "$work/$name.log")" >&2; exit 1; }
        sleep 0.2
    done
    local port
    port=$(cat "$work/$name.port")
    curl -sf -X POST -H 'Content-Type: application/json' --data-binary "${!body_var}" \
        "http://127.0.0.1:$port/v1/predict" >"$work/$name.reply"
    grep -Eq '"measured_sum":[0-9]' "$work/$name.reply" ||
        { echo "bench_serve_scale: $name answered no measured sum: $(cat "$work/$name.reply")" >&2; exit 1; }
    cat >"$work/$name.lua" <<EOF
wrk.method = "POST"
wrk.body = '${!body_var}'
wrk.headers["Content-Type"] = "application/json"
EOF
    echo "$name: serving in $(since "$t0") s, VmRSS $(awk '/VmRSS/ {printf "%.0f MiB", $2 / 1024}' "/proc/$!/status")," \
        "answer $(cat "$work/$name.reply")"
}
base=${KACE_BASE_BIN:+$(readlink -f "$KACE_BASE_BIN")}
start small
start big
stores="small big"
if [ -n "$base" ]; then
    start small_base "$base"
    start big_base "$base"
    stores="small big small_base big_base"
fi

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$work/$1.pids")/stat"; }
# point NAME ROUND -> appends "name round rps cpu_us_per_request" to points
point() {
    local name=$1 round=$2 before after
    before=$(cpu_ticks "$name")
    wrk -t1 -c1 -d"${seconds}s" --timeout 5s -s "$work/$name.lua" \
        "http://127.0.0.1:$(cat "$work/$name.port")/v1/predict" >"$work/wrk.out" 2>&1
    after=$(cpu_ticks "$name")
    if grep -q 'Non-2xx\|Socket errors' "$work/wrk.out"; then
        echo "bench_serve_scale: errors against $name:" >&2
        cat "$work/wrk.out" >&2
        exit 1
    fi
    awk -v name="$name" -v round="$round" -v cpu=$((after - before)) -v tck="$ticks" \
        '/requests in/ {n = $1} /Requests\/sec:/ {rps = $2}
         END {printf "%s %d %.0f %.2f\n", name, round, rps, cpu / tck * 1e6 / n}' "$work/wrk.out" >>"$work/points"
    tail -1 "$work/points"
}
echo "points: store round requests/s server-cpu-us/request"
for round in $(seq 1 "$R"); do
    for name in $stores; do point "$name" "$round"; done
done
echo "load after: $(uptime | sed 's/.*load average/load average/')"

awk -v r="$R" -v m="$m" -v max="$max_ratio" -v base="$base" '
    function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
    function median(a, n,   k) { sort(a, n); k = int((n + 1) / 2); return n % 2 ? a[k] : (a[k] + a[k+1]) / 2 }
    { rps[$1, $2] = $3; cpu[$1, $2] = $4 }
    END {
        for (i = 1; i <= r; i++) { a[i] = cpu["small", i]; b[i] = cpu["big", i]; c[i] = rps["small", i]; d[i] = rps["big", i]; q[i] = cpu["big", i] / cpu["small", i] }
        printf "V100 (52 workloads):        requests/s median %7.0f | server cpu per request median %7.2f us\n", median(c, r), median(a, r)
        printf "synthetic (%d colocations): requests/s median %7.0f | server cpu per request median %7.2f us\n", m, median(d, r), median(b, r)
        if (base != "") {
            for (i = 1; i <= r; i++) { a[i] = cpu["small_base", i]; b[i] = cpu["big_base", i]; c[i] = rps["small_base", i]; d[i] = rps["big_base", i]; e[i] = cpu["big_base", i] / cpu["small_base", i] }
            printf "base %s:\n", base
            printf "  V100:                     requests/s median %7.0f | server cpu per request median %7.2f us\n", median(c, r), median(a, r)
            printf "  synthetic:                requests/s median %7.0f | server cpu per request median %7.2f us\n", median(d, r), median(b, r)
            printf "  base big/small (median per-round ratio) %.2fx\n", median(e, r)
        }
        ratio = median(q, r)
        printf "goal /v1/predict server cpu per request big/small <= 2x: %s (median per-round ratio %.2fx)\n", ratio <= 2 ? "MET" : "MISSED", ratio
        if (max != "" && ratio > max) { printf "FAIL: ratio %.2fx > %sx\n", ratio, max; exit 1 }
    }' "$work/points"
