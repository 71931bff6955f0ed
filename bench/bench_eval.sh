#!/usr/bin/env bash
# Speed of `kace eval` against the Python/scikit-learn peer doing the same
# pairwise protocol (paper + clean mode, n_occur 2..10 x 5 seeds, unseen
# families, triples; the paper's linear model and the rules, no Xu forest and
# no kace slowdown model on either side), measured in the same run.
# kace is timed as a whole process (store load included); the peer's time
# excludes interpreter start-up and imports (its own peer_seconds=), which
# favours the peer. Prints the median of REPEAT runs of each and the ratio.
# usage: bench/bench_eval.sh [KACE_BIN] [DATA_DIR] [REPEAT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kace=${1:-$here/../build/kace}
data=${2:-$here/../../shared/data/kace-v100}
repeat=${3:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$kace" import --db "$work/kace.db" --quiet "$data"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

kace_times=() peer_times=()
for ((i = 0; i < repeat; i++)); do
    t0=$(date +%s.%N)
    "$kace" eval --db "$work/kace.db" --mode both --no-xu --no-kace --no-figures --out "$work/eval" > "$work/kace.out"
    t1=$(date +%s.%N)
    kace_times+=("$(echo "$t1 - $t0" | bc -l)")
    /usr/bin/python3 "$here/peer_sklearn.py" --data "$data" --modes paper,clean > "$work/peer.out"
    peer_times+=("$(sed -n 's/^peer_seconds=//p' "$work/peer.out")")
done
# Both sides must have computed the same thing: compare the headline number.
# Columns: n_occur, kace (nan here), KACE, ...
kace_n3=$(awk '/paper mode \(normalized/{f=1} f && $1=="3"{print $3; exit}' "$work/kace.out")
peer_n3=$(awk '/mode=paper/{f=1} f && $1=="3"{print $2; exit}' "$work/peer.out")
k=$(printf '%s\n' "${kace_times[@]}" | median)
p=$(printf '%s\n' "${peer_times[@]}" | median)
printf 'paper-mode KACE at n_occur=3: kace %s, peer %s\n' "$kace_n3" "$peer_n3"
printf 'kace eval (whole process):   median %.4f s over %d runs\n' "$k" "$repeat"
printf 'python3 + scikit-learn peer: median %.4f s over %d runs\n' "$p" "$repeat"
printf 'speed-up: %.1fx\n' "$(echo "$p / $k" | bc -l)"
[ "$kace_n3" = "$peer_n3" ] || { echo "the two sides disagree" >&2; exit 1; }
