#!/usr/bin/env bash
# kace import reads a file in batches of rows, not whole.
#
#   bash cli_store_import_stream.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
#  - memory: importing a 12 MB colocation file peaks (maximum resident set,
#    /usr/bin/time) within half the file's size of importing a file an
#    eighth of it into the same store: the peak follows the batch, not the
#    file (it was about 20 times the file's size more);
#  - a colocation repeated in a later batch of the file (as B+A) is still
#    found, with both lines, and nothing of the file is stored;
#  - a FIFO (or anything not a regular file) is refused at once, naming it,
#    instead of waiting for a writer for ever.
set -u
. "$(dirname "$0")/lib_test.sh"

KACE=${1:?usage: cli_store_import_stream.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
unset KACE_DB
need sqlite3 awk timeout mkfifo
[ -x /usr/bin/time ] || { echo "FAIL: /usr/bin/time is not installed (GNU time, for the peak memory)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1

# ---- a FIFO is refused without waiting -----------------------------------------
case_name=fifo
mkfifo "$SCRATCH/pipe.csv"
# timeout only guards against the old behaviour (blocking for ever).
timeout 60 "$KACE" import --db "$SCRATCH/fifo.db" "$SCRATCH/pipe.csv" >"$SCRATCH/fifo.out" 2>"$SCRATCH/fifo.err"
rc=$?
[ "$rc" -ne 124 ] || fail "import of a FIFO waited for a writer"
[ "$rc" -ne 0 ] || fail "import of a FIFO succeeded"
grep -qF "kace: $SCRATCH/pipe.csv: not a regular file (a FIFO)" "$SCRATCH/fifo.err" ||
    fail "FIFO message: $(cat "$SCRATCH/fifo.err")"
case_name=dev-null
"$KACE" import --db "$SCRATCH/fifo.db" /dev/null >"$SCRATCH/null.out" 2>"$SCRATCH/null.err" &&
    fail "import of /dev/null succeeded"
grep -qF "/dev/null: not a regular file (a character device)" "$SCRATCH/null.err" ||
    fail "/dev/null message: $(cat "$SCRATCH/null.err")"

# ---- a repeat in a later batch ---------------------------------------------------
case_name=repeat
awk 'BEGIN { print "workload1,workload2,w1throughput,w2throughput"
             for (i = 0; i < 10000; i++) {
                 printf "a%d_batch2-train,b%d_batch2-inf,1.5,2.5\n", i, i
                 if (i == 9000) print "b3_batch2-inf,a3_batch2-train,2.5,1.5" } }' >"$SCRATCH/dup.csv"
"$KACE" import --create-workloads --db "$SCRATCH/dup.db" "$SCRATCH/dup.csv" >"$SCRATCH/dup.out" 2>"$SCRATCH/dup.err" &&
    fail "a file with a repeated colocation was imported"
grep -qF "dup.csv:9003:31: colocation b3_batch2-inf@100 + a3_batch2-train@100 is measured again here (first at line 5)" \
    "$SCRATCH/dup.err" || fail "message: $(cat "$SCRATCH/dup.err")"
check_eq "runs stored from the refused file" 0 "$(sqlite3 "$SCRATCH/dup.db" "SELECT count(*) FROM runs")"

# ---- peak memory follows the batch, not the file -------------------------------------
case_name=memory
bash "$(dirname "$0")/../bench/gen_scale.sh" "$SCRATCH/gen" 10000 200000 || exit 1
big="$SCRATCH/gen/bulk.csv"
small="$SCRATCH/gen/eighth.csv"
head -n "$(($(grep -c '' "$big") / 8))" "$big" >"$small"
"$KACE" import --quiet --db "$SCRATCH/profiles.db" "$SCRATCH/gen/kernel.csv" "$SCRATCH/gen/system.csv" \
    >"$SCRATCH/profiles.out" 2>&1 || { cat "$SCRATCH/profiles.out" >&2; exit 1; }
peak_kb() { # DB FILE: the import's maximum resident set in kB
    cp "$SCRATCH/profiles.db" "$1"
    # Under ASan, freed memory waits in a quarantine that grows with the frees.
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0" \
        /usr/bin/time -f 'peak %M' -o "$SCRATCH/time.out" "$KACE" import --quiet --db "$1" "$2" \
        >"$SCRATCH/import.out" 2>&1 || { fail "import of $2: $(cat "$SCRATCH/import.out")"; echo 0; return; }
    sed -n 's/^peak \([0-9]*\)$/\1/p' "$SCRATCH/time.out"
}
small_kb=$(peak_kb "$SCRATCH/small.db" "$small")
big_kb=$(peak_kb "$SCRATCH/big.db" "$big")
size_kb=$(($(wc -c <"$big") / 1024))
echo "peak: ${small_kb} kB importing $(wc -c <"$small") bytes, ${big_kb} kB importing $(wc -c <"$big") bytes"
check_eq "runs of the large file" $(($(grep -c '' "$big") - 1)) "$(sqlite3 "$SCRATCH/big.db" "SELECT count(*) FROM runs")"
[ "$small_kb" -gt 0 ] && [ "$big_kb" -gt 0 ] || fail "no peak measured"
[ "$big_kb" -le $((small_kb + size_kb / 2)) ] ||
    fail "importing the ${size_kb} kB file peaked at ${big_kb} kB, the eighth of it at ${small_kb} kB: memory grows with the file"
finish cli_store_import_stream
