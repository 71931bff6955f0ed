#!/bin/bash
# kace eval on any stored colocation set: a pairs set without published
# splits (the training-size study runs on splits made the KACE artifact's
# way; on the V100 pairs they score exactly as the published ones), and
# every --protocol with its CSV checked for consistency (fold counts, the
# mean and 95% t-interval over folds recomputed from the fold rows),
# --targets, --candidates (and a bad list's file:line:col error), --train-set.
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 DATA=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
export KACE_DB=$DIR/kace.db
fail() { echo "FAIL: $*"; exit 1; }

# "mypairs": the reference pairs without whisper, so the published splits
# name pairs it does not hold.
P=$DATA/colocations/pairs.csv
{ head -1 "$P"; tail -n +2 "$P" | awk -F, '$13 !~ /whisper/ && $14 !~ /whisper/'; } > "$DIR/mypairs.csv"
"$KACE" import "$DATA/profiles/system.csv" "$P" "$DATA/colocations/triples.csv" "$DATA/splits.csv" \
    "$DIR/mypairs.csv" >/dev/null

# The paper's experiments on it: no failure; the stored splits do not fit, so
# the training-size study runs on splits made the artifact's way, said so.
"$KACE" eval --set mypairs --triples-set none --no-xu --no-figures --out "$DIR/paper" > "$DIR/paper.txt" ||
    fail "kace eval on a set without published splits failed: $(cat "$DIR/paper.txt")"
grep -q "stored splits do not fit this set" "$DIR/paper.txt" || fail "no reason for not using the stored splits"
grep -q "Partner choice on the made splits, clean mode" "$DIR/paper.txt" || fail "no training-size study on made splits"
[ "$(grep -c '^clean,' "$DIR/paper/splits_clean.csv")" = 45 ] || fail "not 45 made splits on mypairs"
grep -qi whisper "$DIR/paper/targets_clean_n3.csv" && fail "whisper scored in the training-size study of mypairs"

# A set so small that a family-exclusion split leaves a target fewer than 2
# training rows (a partial campaign): that target is listed, not scored, and
# named; the others are scored and the means are theirs.
{ head -1 "$DATA/colocations/triples.csv"; sed -n 2,5p "$DATA/colocations/triples.csv"; } >"$DIR/tinytriples.csv"
"$KACE" import "$DIR/tinytriples.csv" >/dev/null
"$KACE" eval --set mypairs --triples-set tinytriples --no-xu --no-figures --mode clean --out "$DIR/tiny" \
    >"$DIR/tiny.txt" 2>&1 || fail "kace eval with a 4-row triples set failed: $(tail -2 "$DIR/tiny.txt")"
grep -q "^(1 target(s) not scored, their means left out: fewer than 2 colocations without the target's family to fit on: bert-base-cased_batch2-inf (0))" \
    "$DIR/tiny.txt" || fail "the unscored target is not named: $(grep -A8 'Three workloads' "$DIR/tiny.txt")"
grep -A8 "Three workloads" "$DIR/tiny.txt" | grep -q "^mean  *1\.000 " || fail "the triples' mean is not the scored targets'"

# Splits made for a store holding no splits at all equal the published ones
# (the V100 pairs): every score of the training-size study is the same; only
# the fit times (columns *seconds) may differ.
"$KACE" import --db "$DIR/nosplits.db" "$DATA/profiles/system.csv" "$P" >/dev/null
"$KACE" eval --db "$DIR/nosplits.db" --mode both --no-xu --no-figures --out "$DIR/made" > "$DIR/made.txt" ||
    fail "kace eval without splits: $(cat "$DIR/made.txt")"
grep -q "no published splits for set 'pairs'" "$DIR/made.txt" || fail "made splits not announced"
"$KACE" eval --mode both --no-xu --no-figures --out "$DIR/published" > /dev/null
mask() { awk -F, 'NR == 1 { for (c = 1; c <= NF; c++) if ($c ~ /seconds/) skip[c] = 1 }
                  { for (c = 1; c <= NF; c++) if (!skip[c]) printf "%s,", $c; print "" }' "$1"; }
for m in paper clean; do
    cmp -s <(mask "$DIR/made/splits_$m.csv") <(mask "$DIR/published/splits_$m.csv") ||
        fail "$m mode: made splits score otherwise than the published ones: $(diff <(mask "$DIR/made/splits_$m.csv") \
            <(mask "$DIR/published/splits_$m.csv") | head -4)"
    cmp -s "$DIR/made/targets_${m}_n3.csv" "$DIR/published/targets_${m}_n3.csv" || fail "$m mode: per-target scores differ"
done
[ "$(grep -c '^paper,' "$DIR/made/splits_paper.csv")" = 45 ] || fail "not 45 splits"
grep -q "Unseen workload families" "$DIR/paper.txt" || fail "no unseen-family study"
grep -qi whisper "$DIR/paper/unseen_clean.csv" && fail "whisper scored on a set without it"

# Fold rows: the mean and 95% t-interval (Student t, df = folds - 1) of column c.
check_summary() { # csv column
    awk -F, -v c="$2" '
        function t975(df) { split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 " \
                                  "2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 " \
                                  "2.060 2.056 2.052 2.048 2.045 2.042", t, " "); return t[df] }
        $1 == "fold" { v[n++] = $c }
        $1 == "mean" { mean = $c } $1 == "ci95" { ci = $c }
        END {
            s = 0; for (i = 0; i < n; i++) s += v[i]; m = s / n
            ss = 0; for (i = 0; i < n; i++) ss += (v[i] - m) ^ 2
            h = t975(n - 1) * sqrt(ss / (n - 1)) / sqrt(n)
            if (n < 2 || (m - mean) ^ 2 > 1e-10 || (h - ci) ^ 2 > 1e-8 * (1 + n)) {
                printf "column %d: folds give mean %.6f ci %.6f, CSV says %s %s\n", c, m, h, mean, ci; exit 1 }
        }' "$1" || fail "summary of $1 column $2"
}

for proto in leave-family-out leave-workload-out leave-batch-size-out kfold; do
    out=$DIR/$proto.csv
    "$KACE" eval --set mypairs --protocol $proto --no-xu --csv --out "$DIR/$proto" --no-figures > "$out" ||
        fail "$proto on mypairs"
    grep -q "^section,label,n_train,n_test,n_targets,kace,KACE,Xu" < <(head -1 "$out") || fail "$proto header"
    folds=$(grep -c '^fold,' "$out")
    check_summary "$out" 6   # kace
    check_summary "$out" 10  # MEMCAP
    # Scores are fractions of Oracle; no fold trains on nothing.
    awk -F, '$1 == "fold" || $1 == "target" { for (c = 6; c <= 13; c++) if ($c != "nan" && ($c < 0 || $c > 1.0000001)) exit 1 }
             $1 == "fold" && $3 < 1 { exit 1 }' "$out" || fail "$proto: a score outside [0, 1] or an empty fit"
    grep -q "^target,whisper" "$out" && fail "$proto scored whisper"
    [ -s "$DIR/$proto/protocol_${proto}_mypairs_clean.csv" ] || fail "$proto: no CSV written to --out"
    echo "$proto: $folds folds, kace $(awk -F, '$1 == "mean" {print $6}' "$out") +/- $(awk -F, '$1 == "ci95" {print $6}' "$out")"
    case $proto in
    leave-family-out) [ "$folds" = 6 ] || fail "$folds families, not the 6 of mypairs (albert, bert inf and train, vit-base, vit_h, wav2vec2)";;
    leave-batch-size-out) [ "$(grep '^fold,' "$out" | cut -d, -f2 | tr '\n' ' ')" = "batch 2 batch 8 batch 16 " ] ||
                              fail "batch folds: $(grep '^fold,' "$out" | cut -d, -f2)";;
    kfold) [ "$folds" = 5 ] || fail "$folds k-folds";;
    esac
done

# k-fold: the seed decides the folds; the same seed gives the same CSV.
"$KACE" eval --set mypairs --protocol kfold --folds 3 --seed 4 --no-xu --csv --out "" > "$DIR/k1.csv"
"$KACE" eval --set mypairs --protocol kfold --folds 3 --seed 4 --no-xu --csv --out "" > "$DIR/k2.csv"
cmp -s "$DIR/k1.csv" "$DIR/k2.csv" || fail "kfold with one seed is not reproducible"
[ "$(grep -c '^fold,' "$DIR/k1.csv")" = 3 ] || fail "--folds 3"
# Every colocation is a test row of exactly one fold: the folds' test rows add up to the set.
tests=$(awk -F, '$1 == "fold" { s += $4 } END { print s }' "$DIR/k1.csv")
[ "$tests" = 140 ] || fail "k-fold test rows add up to $tests, not the set's 140"

# --targets: only those are scored; their family stays out of training.
T=bert-base-cased_batch8-train
"$KACE" eval --set mypairs --protocol leave-family-out --targets $T --no-xu --csv --out "" > "$DIR/t.csv"
[ "$(grep -c '^target,' "$DIR/t.csv")" = 1 ] && grep -q "^target,$T," "$DIR/t.csv" || fail "--targets: $(cat "$DIR/t.csv")"
"$KACE" eval --set mypairs --protocol kfold --targets nope --csv --out "" 2>"$DIR/err" && fail "unknown target accepted"
grep -q "unknown workload 'nope'" "$DIR/err" || fail "unknown target message: $(cat "$DIR/err")"

# --candidates: a list of measured colocations; a bad one names file:line:col.
awk -F, -v t=$T 'NR > 1 && ($13 == t || $14 == t) && n++ < 4 { print $13 "," $14 }' "$DIR/mypairs.csv" > "$DIR/cand.txt"
"$KACE" eval --set mypairs --protocol leave-workload-out --candidates "$DIR/cand.txt" --no-xu --csv --out "" \
    > "$DIR/c.csv" || fail "--candidates"
awk -F, -v t=$T '$1 == "target" && $2 == t { found = 1; if ($4 != 4) exit 1 } END { exit !found }' "$DIR/c.csv" ||
    fail "--candidates: $T should have exactly the 4 listed candidates: $(grep "^target,$T" "$DIR/c.csv")"
printf '# two lines\n%s,%s\n%s,whisper-large-v2_batch8-inf\n' $T $T $T > "$DIR/bad.txt"
before=$(sha256sum "$KACE_DB")
"$KACE" eval --set mypairs --protocol kfold --candidates "$DIR/bad.txt" --csv --out "" 2>"$DIR/err" && fail "bad list accepted"
grep -q "bad.txt:3:1: no measured colocation" "$DIR/err" || fail "bad list message: $(cat "$DIR/err")"
[ "$(sha256sum "$KACE_DB")" = "$before" ] || fail "a failed eval changed the store"

# --train-set: a pairs-only model choosing among the triples.
"$KACE" eval --set triples --train-set pairs --protocol leave-workload-out --no-xu --csv --out "" > "$DIR/tp.csv" ||
    fail "--train-set"
awk -F, '$1 == "fold" && ($3 > 181 || $3 < 100) { exit 1 }' "$DIR/tp.csv" || fail "training rows are not pairs"
echo "pairs-only model among triples (leave-workload-out): kace $(awk -F, '$1 == "mean" {print $6}' "$DIR/tp.csv")"

# The loop simulated (the learning curve): from the published n_occur=2 split, the other
# pairs replayed as observations, retrained every 20 and promoted only when better.
"$KACE" eval --learning-curve --every 20 --seed 3 --no-figures --out "$DIR/curve" > "$DIR/curve.txt" ||
    fail "learning curve: $(cat "$DIR/curve.txt")"
C=$DIR/curve/learning_curve.csv
stream=$(sed -n 's/.*the other \([0-9]*\) of set.*/\1/p' "$DIR/curve.txt")
[ -n "$stream" ] && [ "$(tail -1 "$C" | cut -d, -f1)" = "$stream" ] || fail "the curve does not end at all $stream observations"
awk -F, 'NR == 2 && ($1 != 0 || $2 != $3) { print "start: " $0; exit 1 }
         NR > 2 && $4 != "nan" && (($4 <= $5) != ($6 == 1)) { print "promotion rule broken: " $0; exit 1 }
         NR > 2 && $6 == 0 && $2 != prev { print "quality changed without a promotion: " $0; exit 1 }
         NR > 1 { prev = $2; if ($3 != never && NR > 2) { print "the never-learning model changed"; exit 1 } never = $3; last = $2 }
         END { if (!(last >= never)) { print "learning ends below never-learning"; exit 1 } }' "$C" ||
    fail "learning curve CSV: $(cat "$C")"
grep -c ',1$' "$C" >/dev/null || fail "no promotion along the curve"
echo "learning curve: $(sed -n 2p "$C" | cut -d, -f2) -> $(tail -1 "$C" | cut -d, -f2) (never learns: $(tail -1 "$C" | cut -d, -f3))"

# Options that need a protocol are refused without one.
set +e
"$KACE" eval --targets $T >/dev/null 2>&1; rc=$?
set -e
[ $rc = 2 ] || fail "--targets without --protocol: exit $rc"
set +e
"$KACE" eval --every 5 >/dev/null 2>&1; rc=$?
set -e
[ $rc = 2 ] || fail "--every without --learning-curve: exit $rc"
# Across GPUs (--train-db): every fold fits on all of the other store's 181
# pairs and scores this store's candidates (the rules, which fit nothing,
# score exactly as in the plain protocol); a missing store is named.
"$KACE" eval --protocol leave-workload-out --train-db "$DIR/nosplits.db" --no-xu --csv --out "" > "$DIR/transfer.csv" ||
    fail "--train-db: $(cat "$DIR/transfer.csv")"
"$KACE" eval --protocol leave-workload-out --no-xu --csv --out "" > "$DIR/plain-lwo.csv"
awk -F, '$1 == "fold" && $3 != 181 { exit 1 }' "$DIR/transfer.csv" || fail "--train-db: a fold did not fit on the 181 pairs"
[ "$(grep -c '^fold,' "$DIR/transfer.csv")" = 21 ] || fail "--train-db: not one fold per workload"
rules() { awk -F, '$1 == "fold" { print $2, $4, $5, $9, $10, $11, $12, $13 }' "$1"; }
cmp -s <(rules "$DIR/transfer.csv") <(rules "$DIR/plain-lwo.csv") || fail "--train-db changed the candidates: $(diff \
    <(rules "$DIR/transfer.csv") <(rules "$DIR/plain-lwo.csv") | head -3)"
awk -F, '$1 == "fold" && $3 >= 181 { exit 1 }' "$DIR/plain-lwo.csv" || fail "plain leave-workload-out trained on every pair"
set +e
"$KACE" eval --protocol kfold --train-db "$DIR/absent.db" --no-xu --csv --out "" > "$DIR/absent.txt" 2>&1; rc=$?
set -e
[ $rc != 0 ] && grep -q "absent.db" "$DIR/absent.txt" || fail "--train-db of a missing store: exit $rc, $(cat "$DIR/absent.txt")"
echo "across GPUs (same data as the other store): kace $(awk -F, '$1 == "mean" {print $6}' "$DIR/transfer.csv")"
echo ok
