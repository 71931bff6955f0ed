#!/usr/bin/env bash
# The generated tables of docs/results.md cannot drift, and the README stays short.
#
#   bash cli_results_tables.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - tools/results-tables.sh regenerates every block of docs/results.md with
#   KACE_BIN on SHARED_DATA_DIR into a copy; any difference from the committed
#   file fails, with the diff and the command that regenerates it. With a
#   sanitizer build of kace (make test-asan) only the blocks of the fast
#   commands are regenerated (groups, splits, sim, sim-sweep): the numbers are
#   the same, the full set would take minutes;
# - README.md is at most 200 lines and opens with `make demo` and `make check`.
set -u
KACE=${1:?usage: cli_results_tables.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LC_ALL=C
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# README: short, and the two commands first.
lines=$(wc -l <"$ROOT/README.md")
[ "$lines" -le 200 ] || fail "README.md has $lines lines (at most 200)"
first=$(grep -m2 -n '^make ' "$ROOT/README.md" | tr '\n' ' ')
case $first in
*"make demo"*"make check"*) ;;
*) fail "README.md does not open with make demo and make check (found: $first)" ;;
esac
[ "$(grep -n -m1 '^make demo' "$ROOT/README.md" | cut -d: -f1)" -le 10 ] 2>/dev/null ||
    fail "make demo is not in README.md's first 10 lines"

# docs/results.md: regenerate and compare.
blocks=""
if grep -q -a '__asan_init\|__tsan_init' "$KACE" 2>/dev/null; then
    blocks="groups splits sim sim-sweep"
    echo "sanitizer build: regenerating only: $blocks"
fi
cp "$ROOT/docs/results.md" "$SCRATCH/results.md"
start=$(date +%s)
# shellcheck disable=SC2086
if ! bash "$ROOT/tools/results-tables.sh" --kace "$KACE" --data "$SHARED" --work "$SCRATCH/work" \
    --update "$SCRATCH/results.md" $blocks; then
    fail "tools/results-tables.sh failed"
elif ! diff -u "$ROOT/docs/results.md" "$SCRATCH/results.md"; then
    fail "docs/results.md differs from what the code produces (above: - committed, + regenerated);" \
        "if the change is intended: make build && tools/results-tables.sh --update docs/results.md"
fi
echo "regenerated in $(($(date +%s) - start)) s"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "cli_results_tables: all checks passed"
