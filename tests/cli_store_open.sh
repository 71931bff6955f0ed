#!/usr/bin/env bash
# Where kace creates stores, and readers during a long write.
#
#   bash cli_store_open.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
#  - commands that only read (info, predict, train, eval, simulate, slurm
#    status, workload list) never create a store: "no such store: PATH",
#    exit != 0, no file left behind (an empty file is no store either);
#  - commands that add data create the store file, but not missing folders
#    (a mistyped path), except the default ~/.local/share/kace;
#  - the store is in WAL mode, and `kace predict` answers while a large
#    import holds the write lock in another process; the import still
#    stores all of its rows (one transaction).
set -u

KACE=${1:?usage: cli_store_open.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
export LC_ALL=C
unset KACE_DB

failures=0
case_name=""
fail() {
    echo "FAIL [$case_name]: $*" >&2
    failures=$((failures + 1))
}
for tool in sqlite3 awk timeout; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/home" || exit 1

# ---- read-only commands on a path where no store is -------------------------
missing="$SCRATCH/mistyped.db"
check_no_store() { # name command...
    case_name=$1
    shift
    "$@" >"$SCRATCH/ro.out" 2>"$SCRATCH/ro.err"
    local rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -lt 126 ] || fail "exit status $rc: $*"
    grep -qF "kace: no such store: $missing" "$SCRATCH/ro.err" || fail "message: $(head -n3 "$SCRATCH/ro.err")"
    [ ! -e "$missing" ] || { fail "created $missing"; rm -f "$missing"; }
    [ ! -e "$missing-wal" ] && [ ! -e "$missing-journal" ] || fail "left SQLite files beside $missing"
}
check_no_store info "$KACE" info --db "$missing"
check_no_store predict "$KACE" predict --db "$missing" --target bert-base-cased_batch8-train
check_no_store train "$KACE" train --db "$missing"
check_no_store eval "$KACE" eval --db "$missing"
check_no_store simulate "$KACE" simulate --db "$missing"
check_no_store slurm-status "$KACE" slurm status --db "$missing"
check_no_store workload-list "$KACE" workload --db "$missing" list
: >"$missing"
case_name=empty-file
"$KACE" info --db "$missing" >"$SCRATCH/ro.out" 2>"$SCRATCH/ro.err" && fail "kace info accepted an empty file"
grep -qF "no such store: $missing" "$SCRATCH/ro.err" || fail "message: $(cat "$SCRATCH/ro.err")"
[ ! -s "$missing" ] || fail "the empty file was written to"
rm -f "$missing"

# ---- writers create the file, not missing folders ----------------------------
case_name=import-missing-folder
"$KACE" import --db "$SCRATCH/no/such/folder/kace.db" "$REF/profiles/system.csv" >"$SCRATCH/w.out" 2>"$SCRATCH/w.err" &&
    fail "import into a missing folder succeeded"
grep -q "folder does not exist" "$SCRATCH/w.err" || fail "message: $(cat "$SCRATCH/w.err")"
[ ! -e "$SCRATCH/no" ] || fail "created $SCRATCH/no"
case_name=workload-add-missing-folder
"$KACE" workload --db "$SCRATCH/nope/kace.db" add a_batch2-inf -- true >"$SCRATCH/w.out" 2>&1 &&
    fail "workload add into a missing folder succeeded"
[ ! -e "$SCRATCH/nope" ] || fail "created $SCRATCH/nope"
case_name=import-creates-file
"$KACE" import --quiet --db "$SCRATCH/new.db" "$REF/profiles/system.csv" >"$SCRATCH/w.out" 2>&1 ||
    fail "import into a new file of an existing folder failed: $(cat "$SCRATCH/w.out")"
[ -s "$SCRATCH/new.db" ] || fail "no store at $SCRATCH/new.db"
case_name=default-folder
HOME="$SCRATCH/home" "$KACE" import --quiet "$REF/profiles/system.csv" >"$SCRATCH/w.out" 2>&1 ||
    fail "import into the default store failed: $(cat "$SCRATCH/w.out")"
[ -s "$SCRATCH/home/.local/share/kace/kace.db" ] || fail "the default store was not created"
HOME="$SCRATCH/home" "$KACE" info >"$SCRATCH/w.out" 2>&1 || fail "kace info on the default store: $(cat "$SCRATCH/w.out")"

# ---- readers during a large import (WAL) --------------------------------------
case_name=setup
DB="$SCRATCH/store.db"
"$KACE" import --quiet --db "$DB" "$REF" >"$SCRATCH/setup.out" 2>&1 || { cat "$SCRATCH/setup.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
case_name=wal
[ "$(sqlite3 "$DB" "PRAGMA journal_mode")" = wal ] || fail "journal mode is $(sqlite3 "$DB" "PRAGMA journal_mode"), not wal"

# Colocations of the stored workloads at many MPS splits: distinct runs,
# enough rows (about 260k) that storing them takes seconds.
case_name=predict-during-import
sqlite3 "$DB" "SELECT name FROM workloads ORDER BY id" >"$SCRATCH/workloads.txt"
awk 'BEGIN { print "workload1,workload2,w1throughput,w2throughput,w1mps_pct,w2mps_pct" }
     { w[NR] = $0 }
     END { for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++) for (p = 1; p <= 99; p++) {
             printf "%s,%s,%d.5,%d.25,%d,%d\n", w[i], w[j], p, 100 - p, p, 100 - p
             printf "%s,%s,%d.5,%d.25,%d,%d\n", w[i], w[j], p, 100 - p, p, 100 } }' \
    "$SCRATCH/workloads.txt" >"$SCRATCH/big.csv"
n_rows=$(($(grep -c '' "$SCRATCH/big.csv") - 1))
runs_before=$(sqlite3 "$DB" "SELECT count(*) FROM runs")
T=bert-base-cased_batch8-train
"$KACE" import --quiet --db "$DB" "$SCRATCH/big.csv" >"$SCRATCH/big.out" 2>&1 &
pid=$!
# Wait until the import holds the write lock (parsing comes first).
locked=0
for _ in $(seq 1 1200); do
    kill -0 "$pid" 2>/dev/null || break
    if ! sqlite3 -cmd ".timeout 0" "$DB" "BEGIN IMMEDIATE; ROLLBACK;" >/dev/null 2>&1; then
        locked=1
        break
    fi
    sleep 0.05
done
# Then ask predict again and again until the import ends: every answer must come.
if [ "$locked" = 1 ]; then
    n_ok=0
    n_bad=0
    slowest=0
    while kill -0 "$pid" 2>/dev/null; do
        start=$(date +%s.%N)
        timeout 60 "$KACE" predict --db "$DB" --target "$T" --top 3 >"$SCRATCH/predict.out" 2>"$SCRATCH/predict.err"
        rc=$?
        took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
        slowest=$(awk -v a="$slowest" -v b="$took" 'BEGIN { print (b > a) ? b : a }')
        if [ "$rc" -eq 0 ] && grep -q "^ *1  " "$SCRATCH/predict.out"; then
            n_ok=$((n_ok + 1))
        else
            n_bad=$((n_bad + 1))
            fail "predict failed during the import (exit $rc, ${took}s): $(head -n2 "$SCRATCH/predict.err")"
        fi
        sleep 0.2
    done
    [ $((n_ok + n_bad)) -ge 2 ] || fail "the import ended before predict asked twice: nothing was shown"
    echo "predict answered $n_ok of $((n_ok + n_bad)) times (slowest ${slowest}s) during the import of $n_rows rows"
else
    fail "never saw the import hold the write lock (it ended first?)"
fi
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "the large import failed: $(cat "$SCRATCH/big.out")"
[ "$(sqlite3 "$DB" "SELECT count(*) FROM runs")" = $((runs_before + n_rows)) ] ||
    fail "runs: $(sqlite3 "$DB" "SELECT count(*) FROM runs"), expected $runs_before + $n_rows"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "cli_store_open: all checks passed"
exit 0
