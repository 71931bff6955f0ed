#!/usr/bin/env bash
# Commands that only read open the store read-only.
#
#   bash cli_store_readonly.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
#  - a user who may not write the store or its folder (nobody) reads it with
#    kace info, model list, predict and workload list, whether no writer has it
#    open (no -wal, no -shm beside it) or a writer does (its -wal holds rows
#    not yet in the store file, and they are read), and leaves no file;
#  - reading writes nothing: a store in rollback-journal mode stays so, and
#    its file is unchanged;
#  - a store of an older schema is not migrated by a reader: the message
#    names the store, its version and the command that upgrades it.
# Needs root (to act as nobody); exits 77 (skipped) otherwise.
set -u
. "$(dirname "$0")/lib_test.sh"

KACE=${1:?usage: cli_store_readonly.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
export LC_ALL=C
unset KACE_DB
if [ "$(id -u)" -ne 0 ]; then
    echo "cli_store_readonly: skipped (needs root to read as another user)"
    exit 77
fi
need sqlite3 setpriv sha256sum
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
# The build folder may be closed to nobody: the stores live in a folder of
# their own that nobody may enter but not write.
RO=$(mktemp -d /tmp/kace-readonly.XXXXXX) || exit 1
WRITER_PID=
cleanup() {
    [ -z "$WRITER_PID" ] || kill -KILL "$WRITER_PID" 2>/dev/null
    rm -rf "$RO"
    kill_pids
}
trap cleanup EXIT
chmod 755 "$RO"
KACE_BIN=$(readlink -f "$KACE")
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
as_nobody test -x "$KACE_BIN" || { echo "cli_store_readonly: skipped (nobody cannot run $KACE_BIN)"; exit 77; }

DB="$RO/kace.db"
"$KACE" import --quiet --db "$DB" "$REF" >"$SCRATCH/setup.out" 2>&1 || { cat "$SCRATCH/setup.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }
chmod 644 "$DB"
N=$(sqlite3 "$DB" "SELECT count(*) FROM workloads")
T=$(sqlite3 "$DB" "SELECT name FROM workloads ORDER BY id LIMIT 1")
as_nobody touch "$RO/probe" 2>/dev/null && fail "nobody may write $RO: the test proves nothing"

reads() { # CASE EXPECTED_WORKLOADS
    case_name=$1
    as_nobody "$KACE_BIN" info --db "$DB" >"$SCRATCH/info.out" 2>"$SCRATCH/info.err" ||
        fail "$1: kace info as nobody: $(cat "$SCRATCH/info.err")"
    grep -qE "^  workloads $2\$" "$SCRATCH/info.out" || fail "$1: kace info: $(head -n3 "$SCRATCH/info.out")"
    as_nobody "$KACE_BIN" model --db "$DB" list >"$SCRATCH/list.out" 2>"$SCRATCH/list.err" ||
        fail "$1: kace model list as nobody: $(cat "$SCRATCH/list.err")"
    as_nobody "$KACE_BIN" predict --db "$DB" --target "$T" --top 3 >"$SCRATCH/predict.out" 2>"$SCRATCH/predict.err" ||
        fail "$1: kace predict as nobody: $(cat "$SCRATCH/predict.err")"
    as_nobody "$KACE_BIN" workload --db "$DB" list >"$SCRATCH/wl.out" 2>"$SCRATCH/wl.err" ||
        fail "$1: kace workload list as nobody: $(cat "$SCRATCH/wl.err")"
}

# No writer: the store file alone (a WAL store closed cleanly).
[ "$(sqlite3 "$DB" "PRAGMA journal_mode")" = wal ] || fail "the store is not in WAL mode"
[ ! -e "$DB-wal" ] && [ ! -e "$DB-shm" ] || fail "setup left -wal or -shm beside the store"
sum=$(sha256sum <"$DB")
reads no-writer "$N"
[ ! -e "$DB-wal" ] && [ ! -e "$DB-shm" ] || fail "no-writer: a reader left -wal or -shm"
check_eq "store file after reading" "$sum" "$(sha256sum <"$DB")"

# A writer has it open and has committed a workload to its -wal only.
coproc WRITER { exec sqlite3 "$DB"; }
WRITER_PID=$WRITER_PID
echo "INSERT INTO workloads(name, family, batch) VALUES('extra_batch1-inf', 'extra-inf', 1); SELECT 'stored';" >&"${WRITER[1]}"
read -r line <&"${WRITER[0]}"
check_eq "writer" stored "$line"
[ -e "$DB-wal" ] && [ -e "$DB-shm" ] || fail "the writer has no -wal and -shm"
reads writer-open $((N + 1))
cp "$DB-wal" "$SCRATCH/left.wal"
echo ".exit" >&"${WRITER[1]}"
wait "$WRITER_PID"
# A -wal left without its -shm (a writer killed, the -shm removed): the reader may not
# make the -shm, cannot read the -wal's commits, and says so plainly.
case_name=wal-without-shm
cp "$SCRATCH/left.wal" "$DB-wal" && chmod 644 "$DB-wal"
as_nobody "$KACE_BIN" info --db "$DB" >"$SCRATCH/info.out" 2>"$SCRATCH/info.err" &&
    fail "wal-without-shm: kace info read a store whose -wal it cannot use"
grep -qF "kace: $DB: cannot read the store here" "$SCRATCH/info.err" ||
    fail "wal-without-shm: message: $(cat "$SCRATCH/info.err")"
echo "wal-without-shm: $(cat "$SCRATCH/info.err")"
rm -f "$DB-wal"
WRITER_PID=

# Reading writes nothing: a rollback-journal store stays one, unchanged.
case_name=journal-mode
sqlite3 "$DB" "PRAGMA journal_mode=DELETE" >/dev/null
sum=$(sha256sum <"$DB")
"$KACE" info --db "$DB" >"$SCRATCH/info.out" 2>&1 || fail "kace info: $(cat "$SCRATCH/info.out")"
check_eq "journal mode after kace info" delete "$(sqlite3 "$DB" "PRAGMA journal_mode")"
check_eq "store file after kace info" "$sum" "$(sha256sum <"$DB")"
reads journal-mode-nobody $((N + 1))

# An older schema: read through an upgraded copy in memory, said plainly, the file
# not migrated.
case_name=older-schema
sqlite3 "$DB" "DROP TABLE profile_history; DROP TABLE run_history; DROP TABLE split_history;
    ALTER TABLE profiles DROP COLUMN embedded; UPDATE meta SET value='3' WHERE key='schema_version';"
sum=$(sha256sum <"$DB")
as_nobody "$KACE_BIN" info --db "$DB" >"$SCRATCH/info.out" 2>"$SCRATCH/info.err" ||
    fail "kace info as nobody on schema 3: $(cat "$SCRATCH/info.err")"
grep -qF "schema version 3, older than this kace's: read through an upgraded copy in memory" "$SCRATCH/info.out" ||
    fail "kace info on schema 3 does not say it: $(cat "$SCRATCH/info.out")"
as_nobody "$KACE_BIN" predict --db "$DB" --target "$T" >"$SCRATCH/predict.out" 2>"$SCRATCH/predict.err" ||
    fail "predict as nobody on schema 3: $(cat "$SCRATCH/predict.err")"
check_eq "schema after readers" 3 "$(sqlite3 "$DB" "SELECT value FROM meta WHERE key='schema_version'")"
check_eq "store file after readers" "$sum" "$(sha256sum <"$DB")"
"$KACE" info --upgrade --db "$DB" >"$SCRATCH/info.out" 2>&1 || fail "kace info --upgrade: $(cat "$SCRATCH/info.out")"
reads upgraded $((N + 1))
finish cli_store_readonly
