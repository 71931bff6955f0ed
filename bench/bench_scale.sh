#!/usr/bin/env bash
# kace on a large store: a synthetic one of N workloads and M pair
# colocations (bench/gen_scale.sh, written into a temporary folder and
# deleted after) is imported, trained on a subset (its set "pairs": 2,000
# runs of 400 workloads) and asked for predictions; the same prediction is
# asked of the 52-workload V100 reference store in the same run, and the
# ratio is printed with the machine's load.
#
# The prediction compared is the one a scheduler asks: the target's partners
# among a few candidates (`kace predict --target W --among A,B,C,D`); its
# time should not grow with the store (goal: at most 2x the small store's).
# Ranking the target against every workload of the store (`kace predict
# --target W --top 5`) is also timed: that one does work in proportion to
# the workloads and is reported, not held to the goal.
#
# Times are wall-clock seconds; predictions are the minimum and median of R
# runs, alternating between the stores; peak RSS (maximum resident set) is
# from /usr/bin/time. With MAX_RATIO, exits 1 when the candidate prediction
# on the big store takes more than MAX_RATIO x its time on the small one
# (minimum against minimum), or the ranking of every workload more than
# 20 x MAX_RATIO x (the test in tests/cli_scale.sh).
# usage: bench/bench_scale.sh [KACE_BIN] [V100_DIR] [N_WORKLOADS] [N_COLOCATIONS] [MAX_RATIO] [R]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kace=${1:-$here/../build/kace}
small_data=${2:-$here/../../shared/data/kace-v100}
n=${3:-100000}
m=${4:-1000000}
max_ratio=${5:-}
reps=${6:-5}
[ -x /usr/bin/time ] || { echo "bench_scale: /usr/bin/time is not installed (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "bench_scale: $n workloads, $m colocations; load: $(uptime | sed 's/.*load average/load average/')"

# timed NAME CMD...: runs CMD with its output in $work/NAME.out, sets
# secs (wall) and rss_kb (peak), fails loudly when CMD fails.
timed() {
    local name=$1
    shift
    local t0=$EPOCHREALTIME
    if ! /usr/bin/time -f %M -o "$work/$name.rss" "$@" >"$work/$name.out" 2>"$work/$name.err"; then
        echo "bench_scale: '$*' failed:" >&2
        cat "$work/$name.err" >&2
        exit 1
    fi
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.4f", b - a }')
    rss_kb=$(tail -n1 "$work/$name.rss")
}
row() { printf '%-34s %10s %10s\n' "$@"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }

t0=$EPOCHREALTIME
bash "$here/gen_scale.sh" "$work/data" "$n" "$m"
gen_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "generated $(du -sm "$work/data" | cut -f1) MiB of CSV in $gen_s s"
row "step" "seconds" "peak MiB"
timed small-import "$kace" import --quiet --db "$work/small.db" "$small_data"
row "import (V100, 52 workloads)" "$secs" "$(mib "$rss_kb")"
timed small-train "$kace" train --db "$work/small.db"
row "train (V100, 181 pairs)" "$secs" "$(mib "$rss_kb")"
timed big-import "$kace" import --quiet --db "$work/big.db" "$work/data"
row "import (synthetic)" "$secs" "$(mib "$rss_kb")"
timed big-train "$kace" train --db "$work/big.db" --set pairs
row "train (synthetic, set pairs)" "$secs" "$(mib "$rss_kb")"
echo "store: $(du -m "$work/big.db" | cut -f1) MiB"

small_target=bert-base-cased_batch8-train
small_among=whisper-large-v2_batch2-inf,bert-base-cased_batch8-inf,albert-base-v2_batch2-train,vit_h_14_batch2-train
big_target=syn0_batch2-train
big_among=syn0_batch4-train,syn12_batch2-inf,syn5_batch8-inf,syn100_batch4-train

# stats FILE: "min median" of the numbers in FILE
stats() { sort -g "$1" | awk '{ v[NR] = $1 } END { printf "%.4f %.4f\n", v[1], (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
: >"$work/among-small" && : >"$work/among-big" && : >"$work/all-small" && : >"$work/all-big"
rss_among=0 rss_all=0
for _ in $(seq 1 "$reps"); do
    timed p "$kace" predict --db "$work/small.db" --target "$small_target" --among "$small_among"
    echo "$secs" >>"$work/among-small"
    timed p "$kace" predict --db "$work/big.db" --target "$big_target" --among "$big_among"
    echo "$secs" >>"$work/among-big"
    rss_among=$((rss_kb > rss_among ? rss_kb : rss_among))
    grep -q "^   4  " "$work/p.out" || { echo "bench_scale: predict ranked fewer than 4 candidates:" >&2; cat "$work/p.out" >&2; exit 1; }
    timed p "$kace" predict --db "$work/small.db" --target "$small_target" --top 5
    echo "$secs" >>"$work/all-small"
    timed p "$kace" predict --db "$work/big.db" --target "$big_target" --top 5
    echo "$secs" >>"$work/all-big"
    rss_all=$((rss_kb > rss_all ? rss_kb : rss_all))
done
read -r as_min as_med < <(stats "$work/among-small")
read -r ab_min ab_med < <(stats "$work/among-big")
read -r ls_min ls_med < <(stats "$work/all-small")
read -r lb_min lb_med < <(stats "$work/all-big")
ratio_among=$(awk -v a="$ab_min" -v b="$as_min" 'BEGIN { printf "%.2f", a / b }')
ratio_all=$(awk -v a="$lb_min" -v b="$ls_min" 'BEGIN { printf "%.2f", a / b }')
echo
echo "predict, $reps runs each (seconds: min / median)   V100 (52)          synthetic ($n)     ratio of minima"
printf '%-44s %8s / %-8s %8s / %-8s %6sx   (peak %s MiB)\n' "--target W --among 4 candidates" "$as_min" "$as_med" \
    "$ab_min" "$ab_med" "$ratio_among" "$(mib "$rss_among")"
printf '%-44s %8s / %-8s %8s / %-8s %6sx   (peak %s MiB)\n' "--target W --top 5 (ranks every workload)" "$ls_min" \
    "$ls_med" "$lb_min" "$lb_med" "$ratio_all" "$(mib "$rss_all")"
echo "load after: $(uptime | sed 's/.*load average/load average/')"
if [ -n "$max_ratio" ]; then
    awk -v r="$ratio_among" -v max="$max_ratio" 'BEGIN { exit !(r <= max) }' ||
        { echo "FAIL: predict among candidates took ${ratio_among}x its time on the V100 store (at most ${max_ratio}x)" >&2; exit 1; }
    awk -v r="$ratio_all" -v max="$max_ratio" 'BEGIN { exit !(r <= 20 * max) }' ||
        { echo "FAIL: ranking every workload took ${ratio_all}x its time on the V100 store (at most 20 x ${max_ratio}x)" >&2; exit 1; }
    echo "ok: ${ratio_among}x <= ${max_ratio}x"
fi
