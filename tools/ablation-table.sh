#!/usr/bin/env bash
# The metric-set ablation table of docs/model.md, generated from kace's own CSV.
#
#   tools/ablation-table.sh [--kace BIN] [--data DIR] [--update FILE]
#
# Imports DIR/kace-v100 (default ../shared/data) into a fresh store in a
# temporary folder, runs
#   kace eval --ablation --csv           (clean mode, raw objective, no Xu)
# and prints the table as markdown between
#   <!-- BEGIN generated: ablation-table.sh -->  and  <!-- END generated -->
# With --update FILE it replaces that block in FILE instead. The evaluation
# takes a few seconds; its figures depend only on the data and the code
# (tests/cli_ablation_table.sh checks that the committed table is this one).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KACE=$here/build/kace
DATA=$here/../shared/data
UPDATE=""
die() { echo "ablation-table.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --kace) KACE=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --update) UPDATE=$2; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ -x "$KACE" ] || die "no kace binary at $KACE (make build, or --kace BIN)"
[ -d "$DATA/kace-v100" ] || die "no $DATA/kace-v100 (--data DIR)"
[ -z "$UPDATE" ] || [ -f "$UPDATE" ] || die "no file $UPDATE"
work=$(mktemp -d "${TMPDIR:-/tmp}/kace-ablation.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$KACE" import --db "$work/kace.db" "$DATA/kace-v100" >"$work/import.txt" 2>&1 || { cat "$work/import.txt" >&2; die "import failed"; }
"$KACE" eval --db "$work/kace.db" --ablation --csv >"$work/ablation.csv" 2>"$work/err.txt" ||
    { cat "$work/err.txt" >&2; die "kace eval --ablation failed"; }

# One row per protocol: kace's model and the paper's (KACE) under each set,
# then kace's per-member error (% of exclusive throughput).
table() {
    awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
        p = $col["protocol"]; s = $col["metrics"]
        if (!(p in seen)) { seen[p] = 1; order[++n] = p }
        kace[p, s] = $col["kace"]; paper[p, s] = $col["KACE"]; mae[p, s] = $col["kace_mae_pct"]
        best[p] = $col["Best rule"]
    }
    function f3(v) { return v == "" ? "–" : sprintf("%.3f", v) }
    function f1(v) { return v == "" ? "–" : sprintf("%.1f", v) }
    END {
        print "| protocol (clean mode) | kace: full | no counters | system | paper'"'"'s: full | no counters | system | best rule | kace member error %: full / no counters / system |"
        print "|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= n; i++) {
            p = order[i]
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n", p,
                f3(kace[p, "full"]), f3(kace[p, "no-counters"]), f3(kace[p, "system"]),
                f3(paper[p, "full"]), f3(paper[p, "no-counters"]), f3(paper[p, "system"]), f3(best[p]),
                f1(mae[p, "full"]), f1(mae[p, "no-counters"]), f1(mae[p, "system"])
        }
    }' "$work/ablation.csv"
}
{
    echo "<!-- BEGIN generated: ablation-table.sh -->"
    table
    echo "<!-- END generated -->"
} >"$work/block.md"

if [ -z "$UPDATE" ]; then
    cat "$work/block.md"
    exit 0
fi
grep -q '^<!-- BEGIN generated: ablation-table.sh -->$' "$UPDATE" || die "$UPDATE has no ablation-table.sh block"
awk -v block="$work/block.md" '
    $0 == "<!-- BEGIN generated: ablation-table.sh -->" { while ((getline line < block) > 0) print line; skip = 1; next }
    skip && $0 == "<!-- END generated -->" { skip = 0; next }
    !skip { print }' "$UPDATE" >"$work/updated"
cat "$work/updated" >"$UPDATE"
