#!/usr/bin/env bash
# Issue 24's scheduler goal: from 100,000 to 1,000,000 jobs on 100,000 GPUs
# the scheduler's time grows within 1.2x of n log n's growth (12x, so at
# most 14.4x), as a ratio against the scheduler before that work (commit
# 2d3299e), built and run in the same run. bench/bench_sched_growth.c is
# compiled against both (the old tree gets a copy of the file and one CMake
# line, in a throwaway worktree of its own); the two binaries run
# alternately R times, each replaying both stream lengths REPS times.
#
# The figure: the thread's CPU time of the scheduler's calls alone (the
# calls of one replay recorded, then replayed on a fresh scheduler with no
# clock read per call). Also shown: the whole `kace simulate` replay of the
# same streams (event heap and rates included) and its scheduler wall time.
# Both builds must place every job identically: the placement hashes of the
# growth streams and of an overloaded stream under three policies are
# compared, and any difference fails the run.
# usage: bash bench/bench_sched_growth.sh [NEW_BUILD_DIR] [DATA_DIR] [R] [REPS]
#   KACE_BASE_COMMIT (default 2d3299e), KACE_SCHED_BASE_DIR (default
#   /tmp/kace-base-sched): the old tree and its build are kept and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
NEW_BUILD=${1:-build}
DATA=${2:-../shared/data}
R=${3:-3}
REPS=${4:-3}
BASE_COMMIT=${KACE_BASE_COMMIT:-2d3299e}
BASE=${KACE_SCHED_BASE_DIR:-/tmp/kace-base-sched}

cmake --build "$NEW_BUILD" -j2 --target kace-bench-sched-growth >/dev/null
if [ ! -d "$BASE" ]; then
    git worktree add --detach "$BASE" "$BASE_COMMIT" >/dev/null 2>&1
fi
[ "$(git -C "$BASE" rev-parse HEAD)" = "$(git rev-parse "$BASE_COMMIT^{commit}")" ] ||
    { echo "bench_sched_growth: $BASE is not at $BASE_COMMIT" >&2; exit 1; }
cp bench/bench_sched_growth.c bench/bench_common.h bench/bench_sched_world.h "$BASE/bench/"
grep -q kace-bench-sched-growth "$BASE/CMakeLists.txt" ||
    printf 'add_executable(kace-bench-sched-growth ${CMAKE_SOURCE_DIR}/bench/bench_sched_growth.c)\ntarget_link_libraries(kace-bench-sched-growth PRIVATE kace)\n' \
        >>"$BASE/CMakeLists.txt"
cmake -S "$BASE" -B "$BASE/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BASE/build" -j2 --target kace-bench-sched-growth >/dev/null

OLD_BIN=$BASE/build/kace-bench-sched-growth
NEW_BIN=$NEW_BUILD/kace-bench-sched-growth
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "load before: $(uptime)"
for i in $(seq 1 "$R"); do
    "$OLD_BIN" "$DATA" "$REPS" >"$OUT/old.$i"
    "$NEW_BIN" "$DATA" "$REPS" >"$OUT/new.$i"
done
echo "load after:  $(uptime)"

# Same placements: every hash of every run of both builds.
hashes() { awk '$1 == "check" { print $1, $2, $3, $4, $5, $7 } $1 == "calls" { print $1, $2, $3, $6 }
                $1 == "sim" { print $1, $2, $3, $7 }' "$@" | sort -u; }
if ! diff <(hashes "$OUT"/old.*) <(hashes "$OUT"/new.*) >"$OUT/diff"; then
    echo "bench_sched_growth: the placements differ from the old build's:" >&2
    cat "$OUT/diff" >&2
    exit 1
fi
echo "placements: identical in both builds ($(hashes "$OUT"/new.* | wc -l) streams x policies, hashes of every job's GPU and start)"
grep -h '^check' "$OUT/new.1" | awk '{ printf "  %s on %s GPUs, %s jobs at offered load 1.5: max queued %s\n", $2, $3, $4, $6 }'

# Per build and stream length: min/median/max over all runs of a figure.
summary() { # KIND COLUMN LABEL
    awk -v kind="$1" -v col="$2" -v label="$3" -v dir="$OUT" -v r="$R" '
        function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
        function med(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        BEGIN {
            split("old new", builds)
            for (b = 1; b <= 2; b++) {
                ns = nl = 0
                for (i = 1; i <= r; i++) {
                    f = dir "/" builds[b] "." i
                    while ((getline line < f) > 0) {
                        split(line, x)
                        if (x[1] != kind) continue
                        if (!small || x[3] + 0 < small + 0) small = x[3]
                        if (x[3] + 0 > large + 0) large = x[3]
                        gpus = x[2]
                        v[b, x[3], ++cnt[b, x[3]]] = x[col]
                    }
                    close(f)
                }
            }
            for (b = 1; b <= 2; b++) {
                n = cnt[b, small]; for (i = 1; i <= n; i++) s[i] = v[b, small, i]; sort(s, n); ms[b] = med(s, n)
                m = cnt[b, large]; for (i = 1; i <= m; i++) l[i] = v[b, large, i]; sort(l, m); ml[b] = med(l, m)
                growth[b] = ml[b] / ms[b]
                printf "%-38s %-6s %7d jobs: %.4f s (min %.4f, max %.4f) | %7d jobs: %.4f s (min %.4f, max %.4f) | growth %.2fx (of the minima %.2fx; %d+%d runs)\n",
                    label, (b == 1 ? "before" : "now"), small, ms[b], s[1], s[n], large, ml[b], l[1], l[m], growth[b], l[1] / s[1], n, m
            }
            nlogn = (large * log(large)) / (small * log(small))
            goal = 1.2 * nlogn
            printf "%-38s ratio before/now at %d jobs: %.2fx; n log n grows %.2fx\n", label, large, ml[1] / ml[2], nlogn
            if (kind == "calls")
                printf "goal scheduler growth %d -> %d jobs on %d GPUs <= %.2fx (1.2 x n log n): now %.2fx %s (before: %.2fx)\n",
                    small, large, gpus, goal, growth[2], (growth[2] <= goal ? "MET" : "MISSED"), growth[1]
        }'
}
echo "=== over $R runs x $REPS replays per build (medians; CPU = the thread's CPU time)"
summary calls 5 "scheduler calls alone, CPU"
summary sim 4 "whole kace_sim_run replay, CPU"
summary sim 6 "kace_sim_run's scheduler calls, wall"   # wall: inflated by waiting for a core under load
echo "memory (max RSS of a whole benchmark process, 1M-job streams and all): before $(awk '$1 == "rss_max_kb" { print int($2 / 1024) }' "$OUT/old.1") MiB, now $(awk '$1 == "rss_max_kb" { print int($2 / 1024) }' "$OUT/new.1") MiB"
