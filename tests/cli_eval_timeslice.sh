#!/bin/bash
# A store whose colocations were measured time-sliced only (kace measure
# without MPS: sets 'timeslice-pairs' and 'timeslice-triples', runs marked
# mode 'timeslice'), made at test time from the V100 data: kace eval, with
# no set named, says it evaluates the time-sliced sets and does, under a
# protocol, every objective and the paper's experiments (made splits, triples);
# naming the set works too; a store that holds MPS pairs keeps evaluating
# them.
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 DATA=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR/ts/profiles" "$DIR/ts/colocations"
fail() { echo "FAIL: $*"; exit 1; }

cp "$DATA/profiles/system.csv" "$DIR/ts/profiles/"
cp "$DATA/colocations/pairs.csv" "$DIR/ts/colocations/timeslice-pairs.csv"
cp "$DATA/colocations/triples.csv" "$DIR/ts/colocations/timeslice-triples.csv"
S=$DIR/ts.db
"$KACE" import --db "$S" "$DIR/ts" >"$DIR/import.txt" 2>&1 || fail "import: $(cat "$DIR/import.txt")"
# As kace measure marks a time-sliced run.
sqlite3 "$S" "UPDATE runs SET mode='timeslice'"
[ "$(sqlite3 "$S" "SELECT group_concat(set_name || ':' || mode || ':' || n, ' ') FROM
     (SELECT set_name, mode, count(*) AS n FROM runs GROUP BY 1, 2 ORDER BY 1)")" = \
    "timeslice-pairs:timeslice:181 timeslice-triples:timeslice:400" ] || fail "the store's runs: $(sqlite3 "$S" \
    "SELECT set_name, mode, count(*) FROM runs GROUP BY 1, 2")"

said="the store's pairs are time-sliced: evaluating set 'timeslice-pairs'"
for p in leave-workload-out kfold; do
    for o in raw normalized fair; do
        "$KACE" eval --db "$S" --protocol $p --objective $o --no-xu --csv >"$DIR/$p-$o.csv" 2>"$DIR/$p-$o.err" ||
            fail "eval --protocol $p --objective $o: $(tail -3 "$DIR/$p-$o.err")"
        grep -q "$said" "$DIR/$p-$o.err" || fail "$p $o: the time-sliced set is not said: $(cat "$DIR/$p-$o.err")"
        # kace's model beats Random (the last policy column) and scores within (0.5, 1]
        awk -F, '$1 == "mean" { if (!($6 > 0.5 && $6 <= 1 && $6 > $13)) exit 1; found = 1 } END { exit !found }' \
            "$DIR/$p-$o.csv" || fail "$p --objective $o: $(grep '^mean' "$DIR/$p-$o.csv")"
    done
done
# The paper's experiments: made splits for the set, and its triples.
"$KACE" eval --db "$S" --mode clean --no-xu --no-figures --out "" >"$DIR/paper.txt" 2>&1 ||
    fail "kace eval: $(tail -3 "$DIR/paper.txt")"
grep -q "Three workloads at once" "$DIR/paper.txt" || fail "no triples section: $(head -5 "$DIR/paper.txt")"
# Named, the same set evaluates without the note.
"$KACE" eval --db "$S" --protocol kfold --set timeslice-pairs --no-xu --csv >"$DIR/named.csv" 2>"$DIR/named.err" ||
    fail "eval --set timeslice-pairs: $(tail -3 "$DIR/named.err")"
grep -q "time-sliced" "$DIR/named.err" && fail "a named set was switched: $(cat "$DIR/named.err")"
cmp -s "$DIR/named.csv" "$DIR/kfold-raw.csv" || fail "--set timeslice-pairs differs from the default it took"
# A store with MPS pairs too: those stay the default.
mkdir -p "$DIR/mps/colocations"
cp "$DATA/colocations/pairs.csv" "$DIR/mps/colocations/pairs.csv"
"$KACE" import --db "$S" "$DIR/mps" >"$DIR/import-mps.txt" 2>&1 || fail "import: $(cat "$DIR/import-mps.txt")"
"$KACE" eval --db "$S" --protocol kfold --no-xu --csv >"$DIR/mps.csv" 2>"$DIR/mps.err" ||
    fail "eval on MPS and time-sliced pairs: $(tail -3 "$DIR/mps.err")"
grep -q "time-sliced" "$DIR/mps.err" && fail "MPS pairs were passed over: $(cat "$DIR/mps.err")"
echo "cli_eval_timeslice: all cases passed"
