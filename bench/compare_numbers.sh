#!/usr/bin/env bash
# Same numbers before and after a change: runs `kace demo`, `kace eval`
# (paper and clean modes, --groups, --splits) and a small `kace simulate`
# with two kace binaries on the reference data and diffs what they print
# and the CSV files they write. Timings (fit seconds, wall clock) are masked.
#   bench/compare_numbers.sh OLD_KACE NEW_KACE [WORKDIR]
# Exit 0 when every output matches. Not in CTest: it takes about a minute.
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2")
work=${3:-$(mktemp -d)}
here=$(cd "$(dirname "$0")/.." && pwd)
data=${KACE_DATA:-$here/../shared/data/kace-v100}
trace_dir=$(dirname "$data")/alibaba-gpu-2023
export KACE_DATA=$data

# Masks the columns that measure time, not decisions: in CSV files by header
# name, in printed tables by position from the end of the header line (names
# such as "Best rule" hold spaces), until the next blank line.
mask() {
    awk -v csv="$([[ $1 == *.csv ]] && echo 1 || echo 0)" '
    function timing(name) { return name ~ /^(fit_ms|fit_seconds|xu_fit_seconds|kace_fit_seconds|sim_seconds|sim_ms)$/ }
    csv == 1 {
        n = split($0, f, ",")
        if (NR == 1) for (i = 1; i <= n; i++) drop[i] = timing(f[i])
        line = ""
        for (i = 1; i <= n; i++) line = line (i > 1 ? "," : "") (drop[i] ? "<time>" : f[i])
        print line; next
    }
    /^[[:space:]]*$/ { delete back; nback = 0; print; next }
    {
        gsub(/[0-9]+\.[0-9]+ s([);,]|$)/, "<time>")
        hit = 0
        for (i = 1; i <= NF; i++) if (timing($i)) { back[NF - i] = 1; nback++; hit = 1; cols = NF }
        if (!hit && nback > 0 && (NF == cols || NF == cols - 1)) { for (b in back) $(NF - b) = "<time>" }
        print
    }' "$1"
}

run_all() { # binary dir
    local k=$1 d=$2
    rm -rf "$d" && mkdir -p "$d"
    (cd "$d" && "$k" demo --db demo/kace.db --out demo >demo.txt 2>&1)
    (cd "$d" && "$k" eval --db demo/kace.db --mode both --out eval --no-figures >eval.txt 2>&1)
    (cd "$d" && "$k" eval --db demo/kace.db --groups --out groups --no-figures >groups.txt 2>&1)
    (cd "$d" && "$k" eval --db demo/kace.db --splits --out splits --no-figures >splits.txt 2>&1)
    (cd "$d" && "$k" simulate --db demo/kace.db --trace "$trace_dir/openb_pod_list_default.csv" --gpus 16 \
        --out sim --no-figures >sim.txt 2>&1)
    rm -f "$d"/demo/*.png "$d"/demo/kace.db
}

run_all "$old" "$work/old" &
run_all "$new" "$work/new" &
wait
status=0
for f in $(cd "$work/old" && find . -type f \( -name '*.txt' -o -name '*.csv' \) | sort); do
    # Masked to files, not <(...): a failing mask must fail the comparison, not shorten it.
    if ! mask "$work/old/$f" >"$work/old.masked" || ! mask "$work/new/$f" >"$work/new.masked"; then
        echo "MASK FAILED: $f"; status=1; continue
    fi
    if ! diff "$work/old.masked" "$work/new.masked" >"$work/diff.out" 2>&1; then
        echo "DIFFERS: $f"; head -20 "$work/diff.out"; status=1
    fi
done
[ $status = 0 ] && echo "same numbers: $(cd "$work/old" && find . -type f \( -name '*.txt' -o -name '*.csv' \) | wc -l) files compared in $work"
exit $status
