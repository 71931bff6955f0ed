#!/usr/bin/env bash
# Workload names follow one rule (docs/cli.md): 1 to 127 of A-Z a-z 0-9 . _ -,
# not starting with . or -.
#
#   bash cli_names.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
#  - every name of the reference data (V100) and of data/h200 follows it:
#    both import;
#  - kace workload add refuses names with a comma, a space, '/', '../',
#    quotes, '+', a backslash, a control byte, invalid or non-ASCII UTF-8, a
#    leading '.' or '-', or more than 127 bytes: exit 2, the rule in the
#    message, the store unchanged;
#  - kace import refuses such a name in a profile table, a colocation file
#    and splits.csv: exit 1, its first "kace: FILE:LINE:COL:" line naming the
#    field and the byte, the store unchanged (sqlite3 .dump | sha256sum);
#  - kace import-ncu refuses such a --workload name.
set -u
KACE=${1:?usage: cli_names.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
H200="$(cd "$(dirname "$0")/.." && pwd)/data/h200"
source "$(dirname "$0")/lib_test.sh" # fail, failures, need
need sqlite3 sha256sum
export LC_ALL=C
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/home" || exit 1
export HOME="$SCRATCH/home" KACE_DB="$SCRATCH/default.db"
fingerprint() { sqlite3 "$1" .dump | sha256sum | cut -d' ' -f1; }
rule="a workload name is 1 to 127 of A-Z a-z 0-9 . _ -, not starting with . or -"

# ---- the reference data follows the rule ------------------------------------
db="$SCRATCH/kace.db"
"$KACE" import --db "$db" "$REF" >/dev/null 2>"$SCRATCH/err" || fail "V100 import: $(cat "$SCRATCH/err")"
if [ -d "$H200/profiles" ]; then
    "$KACE" import --db "$SCRATCH/h200.db" "$H200" >/dev/null 2>"$SCRATCH/err" ||
        fail "data/h200 import: $(cat "$SCRATCH/err")"
fi
bad_stored=$(sqlite3 "$db" "SELECT name FROM workloads" | grep -cvE '^[A-Za-z0-9_][A-Za-z0-9._-]{0,126}$')
check_eq "stored V100 names outside the rule" 0 "$bad_stored"

# ---- kace workload add ------------------------------------------------------
"$KACE" workload add --db "$db" good_batch1-inf -- true >/dev/null || fail "workload add good_batch1-inf"
before=$(fingerprint "$db")
long=$(printf 'a%.0s' $(seq 1 128))
names=("a,b" "bad name" "../up" "x/../y" "say\"hi\"" "it's" "a+b" "back\\slash" $'tab\there' $'caf\xc3\xa9'
       $'bad\xff' ".hidden" "." ".." "-" "$long" "a@b" "a#b")
whys=("byte 2 ','" "byte 4 \\\\x20" "starts with '.'" "byte 2 '/'" "byte 4 '\"'" "byte 3 '''" "byte 2 '\\+'"
      "byte 5 \\\\x5c" "byte 4 \\\\x09" "byte 4 \\\\xc3" "byte 4 \\\\xff" "starts with '.'" "starts with '.'"
      "starts with '.'" "starts with '-'" "is longer than 127 bytes" "byte 2 '@'" "byte 2 '#'")
for i in "${!names[@]}"; do
    n=${names[$i]}
    "$KACE" workload add --db "$db" "$n" -- true >"$SCRATCH/out" 2>"$SCRATCH/err"
    rc=$?
    [ $rc = 2 ] || fail "workload add '$n': exit $rc, expected 2"
    grep -qE "^kace workload: add: workload name .*${whys[$i]}.*\\($rule\\)" "$SCRATCH/err" ||
        fail "workload add '$n': $(cat "$SCRATCH/err") (expected ${whys[$i]})"
    LC_ALL=C grep -q $'[^\t -~]' "$SCRATCH/err" && fail "workload add '$n': unprintable bytes in the message"
done
check_eq "store after refused names" "$before" "$(fingerprint "$db")"
"$KACE" workload add --db "$db" "$(printf 'a%.0s' $(seq 1 127))" -- true >/dev/null ||
    fail "a name of 127 bytes was refused"

# ---- kace import ------------------------------------------------------------
before=$(fingerprint "$db")
refused_import() { # CASE FILE LINE:COL WHY
    "$KACE" import --db "$db" "$2" >"$SCRATCH/out" 2>"$SCRATCH/err"
    local rc=$?
    [ $rc = 1 ] || fail "$1: exit $rc, expected 1"
    grep -m1 '^kace: ' "$SCRATCH/err" | grep -qE "^kace: $2:$3: column '[^']*': .*$4.*\\($rule\\)" ||
        fail "$1: $(cat "$SCRATCH/err") (expected $2:$3: ... $4)"
    check_eq "$1: store unchanged" "$before" "$(fingerprint "$db")"
}
mkdir -p "$SCRATCH/bad"
# A profile table: the name is the first field of line 3.
profile() { # CASE NAME_FIELD WHY
    local f="$SCRATCH/bad/$1/profiles/system.csv"
    mkdir -p "$(dirname "$f")"
    awk -v name="$2" -F, 'NR == 3 { sub(/^[^,]*/, name) } { print }' "$REF/profiles/system.csv" >"$f"
    refused_import "profile $1" "$f" "3:1" "$3"
}
profile comma '"a,b"' "byte 2 ','"
profile dotdot '../etc' "starts with '.'"
profile slash 'x/../y' "byte 2 '/'"
profile space 'bad name' "byte 4 \\\\x20"
profile quote '"say ""hi"""' "byte 4 \\\\x20"
profile utf8 $'caf\xc3\xa9_batch1-inf' "byte 4 \\\\xc3"
profile invalid $'bad\xff' "byte 4 \\\\xff"
profile dash '-x' "starts with '-'"
# A raw campaign file (workload1,workload2,...) and a colocation table: the
# first name of line 2.
f="$SCRATCH/bad/raw/colocations/raw/MPS100_0624_inf-inf.csv"
mkdir -p "$(dirname "$f")"
awk -F, 'NR == 2 { $1 = "w+x" } { print }' OFS=, "$REF/colocations/raw/MPS100_0624_inf-inf.csv" >"$f"
refused_import "raw campaign" "$f" "2:1" "byte 2 '\\+'"
# A field of line 2 named by the header: its number and its 1-based character column.
column_of() { # FILE HEADER_NAME
    local c
    c=$(head -1 "$1" | tr ',' '\n' | grep -nx "$2" | cut -d: -f1)
    echo "$c $(sed -n 2p "$1" | awk -F, -v c="$c" '{ n = 1; for (i = 1; i < c; i++) n += length($i) + 1; print n }')"
}
f="$SCRATCH/bad/pairs/colocations/pairs.csv"
mkdir -p "$(dirname "$f")"
read -r c at <<<"$(column_of "$REF/colocations/pairs.csv" workload1)"
awk -F, -v c="$c" 'NR == 2 { $c = "w@x" } { print }' OFS=, "$REF/colocations/pairs.csv" >"$f"
refused_import "colocation table" "$f" "2:$at" "byte 2 '@'"
# splits.csv: workload1 of line 2.
f="$SCRATCH/bad/splits/splits.csv"
mkdir -p "$(dirname "$f")"
read -r c at <<<"$(column_of "$REF/splits.csv" workload1)"
awk -F, -v c="$c" 'NR == 2 { $c = "it'"'"'s" } { print }' OFS=, "$REF/splits.csv" >"$f"
refused_import "splits" "$f" "2:$at" "byte 3 '''"

# ---- kace import-ncu --------------------------------------------------------
ncu="$(dirname "$0")/data/ncu/classic.csv"
"$KACE" import-ncu --db "$db" --workload 'a,b' "$ncu" >"$SCRATCH/out" 2>"$SCRATCH/err"
rc=$?
[ $rc != 0 ] || fail "import-ncu --workload 'a,b' succeeded"
grep -q "workload name 'a,b': byte 2 ','" "$SCRATCH/err" || fail "import-ncu 'a,b': $(cat "$SCRATCH/err")"
check_eq "import-ncu: store unchanged" "$before" "$(fingerprint "$db")"

[ -e "$KACE_DB" ] && fail "something wrote the default store"
finish cli_names
