#!/usr/bin/env bash
# The metric-set ablation table of docs/model.md cannot drift: it is
# regenerated with tools/ablation-table.sh (kace eval --ablation --csv on the
# V100 data) into a copy of docs/model.md, and any difference from the
# committed file fails, with the diff and the command that regenerates it.
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 SHARED=$2 DIR=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$DIR" && mkdir -p "$DIR"
cp "$ROOT/docs/model.md" "$DIR/model.md"
TMPDIR=$DIR bash "$ROOT/tools/ablation-table.sh" --kace "$KACE" --data "$SHARED" --update "$DIR/model.md"
grep -q '^| paper n_occur=3 | 0\.[0-9]* |' "$DIR/model.md" || { echo "FAIL: no table rows generated"; exit 1; }
if ! diff -u "$ROOT/docs/model.md" "$DIR/model.md"; then
    echo "FAIL: docs/model.md's ablation table is not what the code gives;"
    echo "      regenerate it: tools/ablation-table.sh --update docs/model.md"
    exit 1
fi
echo "cli_ablation_table: ok"
