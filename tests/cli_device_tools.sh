#!/usr/bin/env bash
# The device scripts' pieces that can be checked without a GPU or the bundle:
# plan.py's plan meets the campaign's requirements (kace campaign parses it),
# check-libs.py rejects a library from outside the allowed folders, and the
# output-folder check rejects more than 8 files or 3 folders deep.
#   bash cli_device_tools.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_device_tools.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
DEV=$(cd "$(dirname "$0")/../scripts/device" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1
source "$(dirname "$0")/lib_test.sh" # fail, failures

# 1. Plans for 17 and 9 workloads: >= 30 pairs (each workload in >= 5), 10 triples, 10 split runs,
#    3 repetitions of 6 pairs, 3 time-sliced pairs.
for n in 17 9; do
    names=$(seq 1 "$n" | sed 's/^/w/; s/$/_batch1-inf/')
    for w in $names; do "$KACE" workload --db "$SCRATCH/p$n.db" add "$w" -- true >/dev/null || fail "workload add"; done
    python3 "$DEV/plan.py" $names >"$SCRATCH/plan$n.txt" || fail "plan.py $n"
    "$KACE" campaign --db "$SCRATCH/p$n.db" --dry-run "$SCRATCH/plan$n.txt" >"$SCRATCH/dry$n.txt" 2>&1 || fail "dry-run $n: $(cat "$SCRATCH/dry$n.txt")"
    awk -v n="$n" '
        NR > 1 && $4 !~ /@/ && $0 !~ /time-slicing/ && NF == 7 && $7 == "#0" { pairs++; c[$4]++; c[$6]++ }
        NR > 1 && NF == 9 { triples++ }
        NR > 1 && /@/ { splits++ }
        NR > 1 && /#2$/ { rep3++ }
        NR > 1 && /time-slicing/ { ts++ }
        END {
            min = 99; for (w in c) if (c[w] < min) min = c[w]
            if (pairs < 30 || min < 5 || length(c) != n || triples != 10 || splits != 10 || rep3 != 6 || ts != 3) {
                printf "n=%d: pairs %d (min per workload %d, %d workloads), triples %d, splits %d, 3rd repetitions %d, time-sliced %d\n",
                    n, pairs, min, length(c), triples, splits, rep3, ts; exit 1 } }' "$SCRATCH/dry$n.txt" ||
        fail "plan for $n workloads: $(head -3 "$SCRATCH/dry$n.txt")"
done
# Deterministic: the same names give the same plan.
python3 "$DEV/plan.py" $(seq 1 17 | sed 's/^/w/; s/$/_batch1-inf/') | cmp -s - "$SCRATCH/plan17.txt" || fail "plan.py is not deterministic"

# 2. check-libs.py: a kace that loaded a library from outside the allowed folders fails; inside passes.
mkdir -p "$SCRATCH/ld" "$SCRATCH/bundle/lib"
cat >"$SCRATCH/ld/ld.100" <<EOT
       100:	find library=libsqlite3.so.0 [0]; searching
       100:	  trying file=$SCRATCH/bundle/lib/libsqlite3.so.0
       100:	find library=libc.so.6 [0]; searching
       100:	 search cache=/etc/ld.so.cache
       100:	  trying file=/lib/x86_64-linux-gnu/libc.so.6
       100:	initialize program: $KACE
       100:	transferring control: $KACE
       100:	calling init: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
EOT
python3 "$DEV/check-libs.py" --kace "$KACE" --allow "$SCRATCH/bundle/lib" "$SCRATCH/ld" >"$SCRATCH/cl1.out" 2>&1 &&
    fail "check-libs accepted a dlopen'd library from /usr/lib: $(cat "$SCRATCH/cl1.out")"
grep -q "libnvidia-ml.so.1 (in" "$SCRATCH/cl1.out" || fail "check-libs does not name the library: $(cat "$SCRATCH/cl1.out")"
python3 "$DEV/check-libs.py" --kace "$KACE" --allow "$SCRATCH/bundle/lib" --allow /usr/lib/x86_64-linux-gnu "$SCRATCH/ld" \
    >"$SCRATCH/cl2.out" 2>&1 || fail "check-libs rejected allowed libraries: $(cat "$SCRATCH/cl2.out")"
python3 "$DEV/check-libs.py" --kace /nonexistent/kace --allow / "$SCRATCH/ld" >/dev/null 2>&1 &&
    fail "check-libs passed without seeing any kace process"

# 3. The output folder rules of a device call.
mkdir -p "$SCRATCH/out/a/b/c"
for i in 1 2 3 4 5 6 7 8; do : >"$SCRATCH/out/f$i"; done
(source "$DEV/lib.sh" && out_check "$SCRATCH/out") >/dev/null || fail "out_check rejected 8 files"
: >"$SCRATCH/out/a/b/c/deep"
(source "$DEV/lib.sh" && out_check "$SCRATCH/out") >"$SCRATCH/oc.out" && fail "out_check accepted 9 files, 3 folders deep"
grep -q "9 files" "$SCRATCH/oc.out" && grep -q "3 folders deep" "$SCRATCH/oc.out" || fail "out_check: $(cat "$SCRATCH/oc.out")"

[ $failures -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "cli_device_tools: all cases passed"
