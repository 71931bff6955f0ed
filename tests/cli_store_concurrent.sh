#!/usr/bin/env bash
# Several kace processes opening one store at once, while its schema is
# created or migrated.
#
#   bash cli_store_concurrent.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
#  - four writers at once on a brand-new path, and four `kace info --upgrade`
#    at once on a store of schema 1: every one succeeds (one migrates, the
#    others wait and find the store migrated; none runs a step twice, which
#    failed with "duplicate column name"), the data is kept and the store
#    ends at this kace's schema version;
#  - four plain `kace info` at once on a store of schema 1: each refuses it
#    the same way (naming the store, its version and the command that
#    upgrades it), and the store is left at schema 1.
set -u
. "$(dirname "$0")/lib_test.sh"

KACE=${1:?usage: cli_store_concurrent.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
PROFILE="$SHARED/kace-v100/profiles/system.csv"
export LC_ALL=C
unset KACE_DB
need sqlite3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
SCHEMA=$(sed -n 's/^#define KACE_STORE_SCHEMA_VERSION \([0-9]*\).*/\1/p' "$(dirname "$0")/../include/kace/store.h")

# A store of schema 1 (before kace measure) holding the profile: what a
# store written by the first kace looks like.
"$KACE" import --quiet --db "$SCRATCH/v1.db" "$PROFILE" >"$SCRATCH/setup.out" 2>&1 ||
    { cat "$SCRATCH/setup.out" >&2; exit 1; }
N_WORKLOADS=$(sqlite3 "$SCRATCH/v1.db" "SELECT count(*) FROM workloads")
sqlite3 "$SCRATCH/v1.db" "
    DROP TABLE observation_members; DROP TABLE observations; DROP TABLE profile_history;
    DROP TABLE run_history; DROP TABLE split_history; DROP TABLE workload_commands;
    ALTER TABLE profiles DROP COLUMN embedded;
    ALTER TABLE runs DROP COLUMN mode; ALTER TABLE runs DROP COLUMN repetition;
    ALTER TABLE runs DROP COLUMN measured_at; ALTER TABLE runs DROP COLUMN window_s;
    ALTER TABLE run_members DROP COLUMN status; ALTER TABLE run_members DROP COLUMN throughput_cv;
    ALTER TABLE run_members DROP COLUMN detail;
    UPDATE meta SET value='1' WHERE key='schema_version';" || exit 1

version() { sqlite3 "$1" "SELECT value FROM meta WHERE key='schema_version'"; }

# Starts "$@" four times at once (each with its number in $i of the output
# names) and waits for all four; prints how many exited 0.
four_at_once() { # NAME command...
    local name=$1 pids=() ok=0
    shift
    for i in 1 2 3 4; do
        "$@" >"$SCRATCH/$name.$i.out" 2>"$SCRATCH/$name.$i.err" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" && ok=$((ok + 1))
    done
    echo "$ok"
}

for round in 1 2 3; do
    # Writers creating one new store.
    new="$SCRATCH/new$round.db"
    ok=$(four_at_once "new$round" "$KACE" import --quiet --db "$new" "$PROFILE")
    [ "$ok" = 4 ] || fail "round $round: $ok of 4 imports into a new store succeeded: $(cat "$SCRATCH"/new$round.*.err | head -n3)"
    check_eq "round $round: new store's schema" "$SCHEMA" "$(version "$new")"
    check_eq "round $round: new store's workloads" "$N_WORKLOADS" \
        "$(sqlite3 "$new" "SELECT count(*) FROM workloads")"

    # Upgrades of one older store.
    old="$SCRATCH/old$round.db"
    cp "$SCRATCH/v1.db" "$old"
    ok=$(four_at_once "upgrade$round" "$KACE" info --upgrade --db "$old")
    [ "$ok" = 4 ] || fail "round $round: $ok of 4 'kace info --upgrade' succeeded: $(cat "$SCRATCH"/upgrade$round.*.err | head -n3)"
    ! grep -l "duplicate column" "$SCRATCH"/upgrade$round.*.err >/dev/null || fail "round $round: a migration step ran twice"
    check_eq "round $round: upgraded schema" "$SCHEMA" "$(version "$old")"
    grep -qE "^  workloads $N_WORKLOADS\$" "$SCRATCH/upgrade$round.1.out" ||
        fail "round $round: the upgraded store lost data: $(head -n3 "$SCRATCH/upgrade$round.1.out")"
done

# Readers do not migrate: all four read an upgraded copy in memory and say so, the
# file untouched.
old="$SCRATCH/old-read.db"
cp "$SCRATCH/v1.db" "$old"
sum=$(sha256sum <"$old")
ok=$(four_at_once read "$KACE" info --db "$old")
check_eq "plain kace info on schema 1 (succeeded)" 4 "$ok"
for i in 1 2 3 4; do
    grep -qF "schema version 1, older than this kace's: read through an upgraded copy in memory" \
        "$SCRATCH/read.$i.out" && grep -qE "^  workloads $N_WORKLOADS\$" "$SCRATCH/read.$i.out" ||
        fail "reader $i's output: $(cat "$SCRATCH/read.$i.out" "$SCRATCH/read.$i.err")"
done
check_eq "schema after plain kace info" 1 "$(version "$old")"
check_eq "store file after plain kace info" "$sum" "$(sha256sum <"$old")"
finish cli_store_concurrent
