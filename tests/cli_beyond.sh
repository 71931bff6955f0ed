#!/bin/bash
# kace predict --group / --split-with and kace eval --groups --splits on the
# reference data. Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 DATA=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
export KACE_DB=$DIR/kace.db
fail() { echo "FAIL: $*"; exit 1; }
"$KACE" import "$DATA" >/dev/null
"$KACE" train >/dev/null
T=bert-base-cased_batch8-train
out=$("$KACE" predict --target $T --group 3)
echo "$out"
bb=$(echo "$out" | awk '$1 == "sum" {print $2}')
en=$("$KACE" predict --target $T --group 3 --enumerate | awk '$1 == "sum" {print $2}')
[ -n "$bb" ] && [ "$bb" = "$en" ] || fail "branch and bound $bb differs from enumeration $en"
mem=$(echo "$out" | awk '$1 == "sum" {print $3}')
awk -v m="$mem" 'BEGIN { exit !(m <= 32) }' || fail "group memory $mem over 32 GB"
small=$("$KACE" predict --target $T --group 4 --gpu-mem 12 | awk '$1 == "sum" {print $3}')
awk -v m="$small" 'BEGIN { exit !(m <= 12) }' || fail "group memory $small over the 12 GB asked"
"$KACE" predict --target $T --group 9 2>"$DIR/err" && fail "k=9 accepted"
grep -q "2..4" "$DIR/err" || fail "no range in the k error: $(cat "$DIR/err")"
split=$("$KACE" predict --target bert-base-cased_batch2-inf --split-with whisper-large-v2_batch8-inf --policy latency --ls-target 0.7)
echo "$split"
grep -q "^recommended (latency" <<<"$split" || fail "no recommendation"
[ "$(echo "$split" | grep -c '^ \* ')" = 1 ] || fail "not exactly one split marked"
"$KACE" predict --target $T --split-with $T --policy fastest 2>/dev/null && fail "unknown policy accepted"
"$KACE" eval --groups --splits --out "$DIR/eval" --no-figures > "$DIR/eval.txt"
grep -q "Best group of 3" "$DIR/eval.txt" || fail "no k=3 section"
adv=$(awk '$1 == "max-sum" {print $2}' "$DIR/eval.txt")
awk -v a="$adv" 'BEGIN { exit !(a >= 0.9 && a <= 1) }' || fail "max-sum advisor $adv"
for f in groups_k2.csv groups_k3.csv groups_summary.csv splits_advisor.csv splits_latency.csv splits_cases.csv; do
    [ -s "$DIR/eval/$f" ] || fail "missing $f"
done
# --splits --train-db: fitted on another store's grids. The same data with its
# workloads stored in another order must give the same numbers as
# leave-one-pair-out here (pairs are matched by name, features read from the
# store each side's indices belong to).
REV=$DIR/rev
mkdir -p "$REV/profiles" "$REV/colocations/raw"
for f in system.csv exclusive_by_mps_pct.csv; do
    (head -1 "$DATA/profiles/$f"; tail -n +2 "$DATA/profiles/$f" | tac) >"$REV/profiles/$f"
done
cp -r "$DATA/profiles/kernel" "$REV/profiles/"
cp "$DATA"/colocations/raw/partitions_*.csv "$REV/colocations/raw/"
KACE_DB=$DIR/rev.db "$KACE" import "$REV/profiles/exclusive_by_mps_pct.csv" >/dev/null
KACE_DB=$DIR/rev.db "$KACE" import "$REV" >/dev/null
[ "$(sqlite3 "$DIR/rev.db" 'SELECT name FROM workloads ORDER BY id LIMIT 1')" != \
  "$(sqlite3 "$KACE_DB" 'SELECT name FROM workloads ORDER BY id LIMIT 1')" ] || fail "the reversed store has the same order"
"$KACE" eval --splits --no-figures > "$DIR/splits.txt"
"$KACE" eval --splits --no-figures --train-db "$DIR/rev.db" > "$DIR/across.txt"
grep -q "fitted on $DIR/rev.db's 560 grids" "$DIR/across.txt" || fail "no transfer header: $(head -3 "$DIR/across.txt")"
diff <(tail -n +4 "$DIR/splits.txt") <(tail -n +4 "$DIR/across.txt") || fail "--train-db of the same data differs"
KACE_DB=$DIR/empty.db "$KACE" import "$DATA/profiles/system.csv" >/dev/null
"$KACE" eval --splits --train-db "$DIR/empty.db" 2>"$DIR/err" && fail "a train store without grids accepted"
grep -q "has no MPS split grids" "$DIR/err" || fail "no message for a train store without grids: $(cat "$DIR/err")"
"$KACE" eval --groups --splits --train-db "$DIR/rev.db" 2>/dev/null && fail "--train-db with --groups accepted"
# A mistyped train store is an error, and nothing is created there.
"$KACE" eval --splits --train-db "$DIR/typo/none.db" 2>"$DIR/err" && fail "a missing --train-db accepted"
"$KACE" predict --target $T --split-with bert-base-cased_batch2-inf --split-train-db "$DIR/typo/none.db" 2>>"$DIR/err" &&
    fail "a missing --split-train-db accepted"
[ ! -e "$DIR/typo" ] || fail "a missing train store was created: $(ls -R "$DIR/typo")"
[ "$(grep -c "none.db" "$DIR/err")" -ge 2 ] || fail "the missing train store is not named: $(cat "$DIR/err")"
echo ok
