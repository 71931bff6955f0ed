#!/usr/bin/env bash
# kace plan: the device campaign's plan for a catalog's workloads or names.
#
#   bash cli_plan.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# 1. --catalog workloads/catalog.txt prints the plan for its 12 workloads in
#    its order, the same as the names given on the command line, and the
#    same bytes as the golden tests/data/plans/new-12.plan; every workload
#    alone at 100% MPS once; kace campaign --dry-run reads it: 101 runs.
# 2. --extend: the old plan's text first, then the workloads it lacks (by 1,
#    then by 3 more), each alone at 100% MPS too; the same again adds
#    nothing; the same as the goldens. A plan stored by the removed
#    scripts/device/plan.py extends too, its text kept.
# 3. Refusals: usage errors exit 2 (no names, names and --catalog, a bad
#    name, an unknown option); a bad catalog line exits 1 naming
#    file:line:col; 2 workloads, an unreadable plan and a plan with a `set`
#    exit 1. Nothing is printed on stdout then.
set -uo pipefail
KACE=${1:?usage: cli_plan.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
case $KACE in /*) ;; *) KACE=$PWD/$KACE ;; esac # the test works in SCRATCH
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CATALOG=$ROOT/workloads/catalog.txt
PLANS=$ROOT/tests/data/plans
export LC_ALL=C
unset KACE_DB
source "$(dirname "$0")/lib_test.sh" # fail, check_eq, finish
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1
cd "$SCRATCH" || exit 1
# same_as GOLDEN FILE: FILE is tests/data/plans/GOLDEN, byte for byte.
same_as() {
    cmp -s "$PLANS/$1" "$2" || fail "$2 is not tests/data/plans/$1: $(diff "$PLANS/$1" "$2" | head -5)"
}

# ---- 1. a new plan ------------------------------------------------------------
"$KACE" plan --catalog "$CATALOG" >cat.plan 2>err || fail "plan --catalog: $(cat err)"
mapfile -t names < <(awk '!/^#/ && NF { print $1 }' "$CATALOG")
check_eq "catalog workloads" 12 "${#names[@]}"
"$KACE" plan "${names[@]}" >names.plan 2>err || fail "plan NAME...: $(cat err)"
cmp -s cat.plan names.plan || fail "--catalog and the same NAMEs give different plans"
check_eq "workloads line" "workloads ${names[*]}" "$(grep '^workloads ' cat.plan)"
same_as new-12.plan cat.plan # workloads/catalog.txt's 12 workloads when the goldens were made
for n in "${names[@]}"; do
    check_eq "$n alone at 100% MPS" 1 "$(grep -c "^run $n @ 100\$" cat.plan)"
done
db=$SCRATCH/dry.db
for n in "${names[@]}" late-a_batch1-inf late-b_batch1-inf late-c_batch1-inf late-d_batch1-inf; do
    "$KACE" workload add --db "$db" "$n" -- true >/dev/null 2>err || fail "workload add $n: $(cat err)"
done
"$KACE" campaign --dry-run --db "$db" cat.plan >dry 2>err || fail "campaign --dry-run: $(cat err)"
check_eq "dry run" "plan cat.plan: 101 runs (12 workloads, up to 3 repetitions); 0 stored already, 101 to measure" \
    "$(head -1 dry)"

# ---- 2. extensions ----------------------------------------------------------------
"$KACE" plan --extend cat.plan "${names[@]}" late-a_batch1-inf >ext1.plan 2>err || fail "--extend by 1: $(cat err)"
cmp -s <(head -c "$(wc -c <cat.plan)" ext1.plan) cat.plan || fail "--extend changed the old plan's text"
check_eq "added workloads" "workloads late-a_batch1-inf" "$(grep '^workloads ' ext1.plan | tail -1)"
check_eq "pairs of late-a" 5 "$(grep -c '^run late-a_batch1-inf [^@]' ext1.plan)"
check_eq "late-a alone at 100% MPS" 1 "$(grep -c '^run late-a_batch1-inf @ 100$' ext1.plan)"
"$KACE" plan --extend ext1.plan --catalog <(cat "$CATALOG"; printf '%s cmd true\n' late-{a,b,c,d}_batch1-inf) \
    >ext2.plan 2>err || fail "--extend by 3 from a catalog: $(cat err)"
check_eq "added again" "workloads late-b_batch1-inf late-c_batch1-inf late-d_batch1-inf" \
    "$(grep '^workloads ' ext2.plan | tail -1)"
"$KACE" plan --extend ext2.plan "${names[@]}" late-{a,b,c,d}_batch1-inf >ext3.plan 2>err || fail "--extend: $(cat err)"
cmp -s ext2.plan ext3.plan || fail "--extend with nothing to add changed the plan"
"$KACE" campaign --dry-run --db "$db" ext2.plan >dry 2>err || fail "campaign --dry-run ext2: $(cat err)"
grep -q "(16 workloads" dry || fail "dry run of the extended plan: $(head -1 dry)"
same_as new-12-ext13.plan ext1.plan
same_as cli-ext2.plan ext2.plan
# A plan stored by plan.py (no solo runs but the grids'): its text kept, the same workload added as to kace's own.
"$KACE" plan --extend "$PLANS/plan-py-12.plan" "${names[@]}" late-a_batch1-inf >py-ext1.plan 2>err ||
    fail "--extend plan.py's plan: $(cat err)"
cmp -s <(head -c "$(wc -c <"$PLANS/plan-py-12.plan")" py-ext1.plan) "$PLANS/plan-py-12.plan" ||
    fail "--extend changed plan.py's text"
cmp -s <(tail -c +"$(($(wc -c <"$PLANS/plan-py-12.plan") + 1))" py-ext1.plan) \
    <(tail -c +"$(($(wc -c <cat.plan) + 1))" ext1.plan) || fail "--extend adds to plan.py's plan what it does not to kace's"

# ---- 3. refusals ------------------------------------------------------------------
refused() { # WHAT EXIT STDERR_REGEX ARGS...
    local what=$1 want=$2 re=$3
    shift 3
    "$KACE" plan "$@" >out 2>err
    local rc=$?
    [ $rc = "$want" ] || fail "$what: exit $rc, expected $want ($(head -c 300 err))"
    grep -qE -- "$re" err || fail "$what: stderr '$(head -c 300 err)' lacks /$re/"
    [ -s out ] && fail "$what: printed '$(head -c 200 out)'"
    return 0
}
refused "no names" 2 "expected --catalog FILE or workload NAMEs"
refused "names and --catalog" 2 "not both" --catalog "$CATALOG" a b c
refused "a bad name" 2 "'b,c': byte 2" a b,c d
refused "an option as a name" 2 "unknown option" a b --bogus
refused "2 workloads" 1 "2 workloads: a campaign needs at least 3" a b
refused "a name twice" 1 "workload a is named twice" a b a
printf 'ok cmd true\nbad cmd "unclosed\n' >bad.txt
refused "a bad catalog line" 1 "bad.txt:2:9: the quote \" here does not close" --catalog bad.txt
refused "no catalog" 1 "nothing.txt: No such file" --catalog nothing.txt
refused "no old plan" 1 "nothing.plan: No such file" --extend nothing.plan a b c
printf 'workloads a b c\npairs\nset mine\nrun a b\n' >set.plan
refused "a plan with set" 1 "set.plan:3:1: 'set' changes where later runs are stored" --extend set.plan a b c d
"$KACE" plan --help >out 2>&1 || fail "plan --help: exit $?"
grep -q -- "--extend OLD_PLAN" out || fail "plan --help: $(head -3 out)"

finish cli_plan
