#!/usr/bin/env bash
# kace export --dataset: Exclusive100 is the paper's exclusive throughput, a
# workload alone under MPS at 100%, where the store has it.
#
#   bash cli_dataset_exclusive.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# Two workloads profiled (kace import of a system profile: their clean runs,
# alone without MPS); one of them then measured alone at 100% MPS by kace
# measure (stand-in worker and MPS daemon, no GPU), which stores its
# exclusive_mps100.
# 1. profiles/system.csv: that workload's Exclusive100 is its exclusive_mps100,
#    the other's its clean run; column exclusive_nomps holds both clean runs.
#    The README counts the sources and names the workload without an MPS
#    measurement. --verify passes (the folder imports, the extra column too).
# 2. Imported into a fresh store and exported again: the same system.csv.
# 3. A store without a run alone under MPS: Exclusive100 is the clean run, no
#    exclusive_nomps column (data/h200's layout), the README says so.
set -uo pipefail
KACE=${1:?usage: cli_dataset_exclusive.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
build=$(dirname "$KACE")
export LC_ALL=C
unset KACE_DB
source "$(dirname "$0")/lib_test.sh" # fail, check_eq, need, finish
need sqlite3
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/bin" "$SCRATCH/profile" || exit 1

# Copies under the scratch folder: a stray stand-in (after a failure) is found by its path.
cp "$build/tests/kace-test-worker" "$SCRATCH/bin/worker" || exit 1
cp "$build/tests/kace-test-mps-control" "$SCRATCH/bin/mps-control" || exit 1
marker="$SCRATCH/bin/"
run_dir=$(mktemp -d /tmp/kace-cli-dataset-exclusive-XXXXXX)
trap 'kill_pids; for p in $(pgrep -f "$marker"); do kill -KILL "$p" 2>/dev/null; done; rm -rf "$run_dir"' EXIT
export KACE_MPS_CONTROL="$SCRATCH/bin/mps-control" KACE_TEST_MPS_MODE=normal

M="$SCRATCH/m.db" P="$SCRATCH/profiled-only.db"
A=alpha_batch1-inf B=beta_batch2-train
"$KACE" workload add --db "$M" "$A" -- "$SCRATCH/bin/worker" report 4000 >/dev/null || fail "workload add $A"
"$KACE" workload add --db "$M" "$B" -- "$SCRATCH/bin/worker" report 1000 >/dev/null || fail "workload add $B"
printf 'Type,Exclusive100,sm%%,mem%%,memcap\n%s,111.5,50,20,1.5\n%s,222.25,60,30,2.5\n' "$A" "$B" \
    >"$SCRATCH/profile/system.csv"
"$KACE" import --quiet --db "$M" "$SCRATCH/profile/system.csv" 2>"$SCRATCH/err" || fail "import the profiles: $(cat "$SCRATCH/err")"
cp "$M" "$P" || exit 1
"$KACE" measure "$A" --db "$M" --gpu "Stand-in GPU" --warmup 0.2 --window 0.3 --run-dir "$run_dir" --quiet \
    >"$SCRATCH/measure.out" 2>&1 || fail "measure $A alone: $(cat "$SCRATCH/measure.out")"
mps=$(sqlite3 "$M" "SELECT printf('%.6f', value) FROM profiles p JOIN workloads w ON w.id = p.workload_id
    WHERE w.name = '$A' AND p.metric = 'exclusive_mps100'")
[ -n "$mps" ] || fail "kace measure stored no exclusive_mps100: $(cat "$SCRATCH/measure.out")"
[ "$mps" != 111.500000 ] || fail "the stand-in's throughput is the clean run's"

# A workload's row of a system.csv: Exclusive100 and exclusive_nomps (empty when no such column), 6 digits.
row() { # FILE WORKLOAD
    awk -F, -v w="$2" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i }
        $1 == w { x = $(col["Exclusive100"]); n = col["exclusive_nomps"] ? $(col["exclusive_nomps"]) : ""
                  printf "%.6f %s", x, n == "" ? "-" : sprintf("%.6f", n) }' "$1"
}

# ---- 1. alone under MPS where measured, the clean run elsewhere -----------------
"$KACE" export --dataset --quiet --db "$M" "$SCRATCH/d1" 2>"$SCRATCH/err" || fail "export --dataset: $(cat "$SCRATCH/err")"
S=$SCRATCH/d1/profiles/system.csv
check_eq "system.csv header" "Type,Exclusive100,sm%,mem%,memcap,exclusive_nomps" "$(head -1 "$S")"
check_eq "$A: Exclusive100 alone under MPS, exclusive_nomps the clean run" "$mps 111.500000" "$(row "$S" "$A")"
check_eq "$B: both the clean run" "222.250000 222.250000" "$(row "$S" "$B")"
R=$SCRATCH/d1/README.md
grep -q "^under MPS at 100% (\`exclusive_mps100\`, measured in the pool): 1 of 2 workloads\.$" "$R" ||
    fail "README lacks the count of MPS sources: $(grep -A4 '^Exclusive throughput (' "$R")"
grep -q "^Not measured so yet, hence the profile's clean run, alone without MPS (\`exclusive_throughput\`), for 1:$" "$R" &&
    grep -qx "\`$B\`\." "$R" || fail "README does not name $B as the clean run: $(grep -A4 '^Exclusive throughput (' "$R")"
grep -q "^Column \`exclusive_nomps\` holds each workload's clean run" "$R" || fail "README lacks exclusive_nomps"
"$KACE" export --dataset --verify --db "$M" "$SCRATCH/d1" >"$SCRATCH/out" 2>&1 ||
    fail "--verify (the folder imports with exclusive_nomps): $(cat "$SCRATCH/out")"

# ---- 2. the dataset imported and exported again ------------------------------------
"$KACE" import --quiet --create-workloads --db "$SCRATCH/again.db" "$SCRATCH/d1" 2>"$SCRATCH/err" ||
    fail "import the dataset: $(cat "$SCRATCH/err")"
check_eq "imported: $A's exclusive_nomps, exclusive_throughput" "111.500000|$mps" \
    "$(sqlite3 "$SCRATCH/again.db" "SELECT group_concat(printf('%.6f', value), '|') FROM (SELECT value FROM profiles p
        JOIN workloads w ON w.id = p.workload_id WHERE w.name = '$A' AND p.metric IN ('exclusive_throughput',
        'exclusive_nomps') ORDER BY p.metric)")"
"$KACE" export --dataset --quiet --db "$SCRATCH/again.db" "$SCRATCH/d2" 2>"$SCRATCH/err" ||
    fail "export the imported dataset: $(cat "$SCRATCH/err")"
cmp -s "$S" "$SCRATCH/d2/profiles/system.csv" ||
    fail "system.csv changed through import: $(diff "$S" "$SCRATCH/d2/profiles/system.csv")"

# ---- 3. no run alone under MPS: the clean runs, the layout before --------------------
"$KACE" export --dataset --quiet --db "$P" "$SCRATCH/d3" 2>"$SCRATCH/err" || fail "export --dataset: $(cat "$SCRATCH/err")"
check_eq "system.csv header without MPS runs" "Type,Exclusive100,sm%,mem%,memcap" "$(head -1 "$SCRATCH/d3/profiles/system.csv")"
check_eq "$A: the clean run" "111.500000 -" "$(row "$SCRATCH/d3/profiles/system.csv" "$A")"
grep -q "): 0 of 2 workloads\.$" "$SCRATCH/d3/README.md" && grep -qx "\`$A\`, \`$B\`\." "$SCRATCH/d3/README.md" ||
    fail "README without MPS runs: $(grep -A4 '^Exclusive throughput (' "$SCRATCH/d3/README.md")"
grep -q "exclusive_nomps\` holds" "$SCRATCH/d3/README.md" && fail "README names a column it lacks"

finish cli_dataset_exclusive
