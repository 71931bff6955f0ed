#!/usr/bin/env bash
# Issue 24's model-speed goals as ratios against the library before that
# work (commit 2d3299e), built and run in the same run: bench/bench_speed.c
# is compiled against both (the old tree gets a copy of the file and one
# CMake line, in a throwaway worktree), then the two binaries run
# alternately R times. Prints the machine's load, each run's figures (the
# thread's CPU time and wall time, min/median/max within a run) and, per
# goal, min/median/max over the R runs of the median CPU time, the ratio
# old/new of those medians, and the goal.
# usage: bash bench/bench_speed.sh [NEW_BUILD_DIR] [V100_DIR] [R]
#   KACE_BASE_COMMIT (default 2d3299e), KACE_BASE_DIR (default /tmp/kace-base):
#   the old tree and its build folder are kept there and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
NEW_BUILD=${1:-build}
DATA=${2:-../shared/data/kace-v100}
R=${3:-3}
BASE_COMMIT=${KACE_BASE_COMMIT:-2d3299e}
BASE=${KACE_BASE_DIR:-/tmp/kace-base}

cmake --build "$NEW_BUILD" -j2 --target kace-bench-speed >/dev/null
if [ ! -d "$BASE" ]; then
    git worktree add --detach "$BASE" "$BASE_COMMIT" >/dev/null 2>&1
fi
[ "$(git -C "$BASE" rev-parse HEAD)" = "$(git rev-parse "$BASE_COMMIT^{commit}")" ] ||
    { echo "bench_speed: $BASE is not at $BASE_COMMIT" >&2; exit 1; }
cp bench/bench_speed.c bench/bench_common.h "$BASE/bench/"
grep -q kace-bench-speed "$BASE/CMakeLists.txt" ||
    printf 'add_executable(kace-bench-speed ${CMAKE_SOURCE_DIR}/bench/bench_speed.c)\ntarget_link_libraries(kace-bench-speed PRIVATE kace)\n' \
        >>"$BASE/CMakeLists.txt"
cmake -S "$BASE" -B "$BASE/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BASE/build" -j2 --target kace-bench-speed >/dev/null

OLD_BIN=$BASE/build/kace-bench-speed
NEW_BIN=$NEW_BUILD/kace-bench-speed
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "load before: $(uptime)"
for i in $(seq 1 "$R"); do
    "$OLD_BIN" "$DATA" "$OUT/old.db" >"$OUT/old.$i"
    "$NEW_BIN" "$DATA" "$OUT/new.db" >"$OUT/new.$i"
done
echo "load after:  $(uptime)"
for i in $(seq 1 "$R"); do
    echo "--- run $i, before ($BASE_COMMIT):"; grep -E '^(fit|predict|group4)' "$OUT/old.$i"
    echo "--- run $i, now:"; grep -E '^(fit|predict|group4)' "$OUT/new.$i"
done
# The same searches must find the same groups (the models are the same).
if ! diff <(grep 'predicted sums' "$OUT/old.1") <(grep 'predicted sums' "$OUT/new.1") >/dev/null; then
    echo "bench_speed: the best groups' predicted sums differ from the old build's" >&2
    grep 'predicted sums' "$OUT/old.1" "$OUT/new.1" >&2
    exit 1
fi
# Per goal: column 5 is a run's median CPU figure, 6 its max, 9 and 10 the
# wall median and max (for group4: of the slowest target per search round).
summary() { # NAME GOAL UNIT
    awk -v name="$1" -v goal="$2" -v unit="$3" -v r="$R" -v dir="$OUT" '
        function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
        BEGIN {
            for (i = 1; i <= r; i++) {
                while ((getline line < (dir "/old." i)) > 0) { split(line, f); if (f[1] == name) { o[i] = f[5]; ocmax = (f[6] > ocmax ? f[6] : ocmax) } }
                while ((getline line < (dir "/new." i)) > 0) { split(line, f); if (f[1] == name) { n[i] = f[5]; nmax = (f[10] > nmax ? f[10] : nmax); ncmax = (f[6] > ncmax ? f[6] : ncmax); nwmed[i] = f[9] } }
            }
            sort(o, r); sort(n, r); sort(nwmed, r)
            m = int((r + 1) / 2)
            printf "%-8s before: cpu median of runs %.3f %s (min %.3f, max %.3f) | now: %.3f %s (min %.3f, max %.3f; wall median %.3f; max of all: cpu %.3f, wall %.3f) | ratio before/now %.2fx | goal <= %s %s: %s\n",
                name, o[m], unit, o[1], o[r], n[m], unit, n[1], n[r], nwmed[m], ncmax, nmax, o[m] / n[m], goal, unit, (n[m] <= goal ? "met (cpu median)" : "MISSED")
        }'
}
echo "=== summary over $R runs (figures: per run the median; cpu = the benchmark thread's CPU time)"
summary predict 150 ns
summary group4 3 ms
summary fit 25 ms
echo "group4 goal also: never above 10 ms in 10 runs (the 'wall max of all' and cpu max above)"
