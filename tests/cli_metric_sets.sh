#!/bin/bash
# Metric sets from the command line, on stores made at test time from the
# V100 data (never copied into the repository):
# - system only: the kernel profiles dropped (pairs and triples keep names,
#   throughputs, exclusive throughput, sm%, mem%, memcap): it imports,
#   trains (the model file records 'metrics system'), evaluates under every
#   protocol and objective, serves kace predict (partners, --group, every
#   --objective), and --metrics full names the workload and what to import;
# - launch only: the three counter columns dropped: chosen as no-counters;
# - full: unchanged output (no metric line, model file version 2), and
#   --ablation gives every set under every protocol, its figures the same as
#   kace eval --protocol P --metrics S.
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 DATA=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
fail() { echo "FAIL: $*"; exit 1; }

# drop_columns REGEX IN OUT: the CSV without the columns whose header matches.
drop_columns() {
    awk -F, -v OFS=, -v re="$1" 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = $i !~ re }
        { s = ""; n = 0; for (i = 1; i <= NF; i++) if (keep[i]) { s = s (n++ ? "," : "") $i }; print s }' "$2" >"$3"
}
make_store() { # NAME REGEX: a folder of the V100 data without the matching columns, imported
    local d=$DIR/$1
    mkdir -p "$d/profiles" "$d/colocations"
    cp "$DATA/profiles/system.csv" "$d/profiles/"
    cp "$DATA/splits.csv" "$d/"
    for f in pairs triples; do drop_columns "$2" "$DATA/colocations/$f.csv" "$d/colocations/$f.csv"; done
    "$KACE" import --db "$DIR/$1.db" "$d" >"$DIR/$1-import.txt" 2>&1 || fail "import of $1: $(cat "$DIR/$1-import.txt")"
}
make_store system '^w[0-9]+_'
make_store launch '^w[0-9]+_(Compute|DRAM|Memory)'
head -1 "$DIR/system/colocations/pairs.csv" | grep -q Threads && fail "the system-only pairs still hold Threads"

# ---- system only ----------------------------------------------------------
S=$DIR/system.db
for p in leave-family-out leave-workload-out leave-batch-size-out kfold; do
    "$KACE" eval --db "$S" --protocol $p --no-figures --out "" >"$DIR/sys-$p.txt" 2>&1 ||
        fail "eval --protocol $p on the system-only store: $(tail -3 "$DIR/sys-$p.txt")"
    grep -q "^(every model reads the system metrics" "$DIR/sys-$p.txt" || fail "$p: the metric set is not said"
    # kace's model chooses better than Random on every protocol
    awk '/^mean over folds/ { if (!($4 > $11 && $4 > 0.8 && $4 <= 1)) exit 1; found = 1 } END { exit !found }' \
        "$DIR/sys-$p.txt" || fail "$p: kace's mean is not above Random: $(grep '^mean over' "$DIR/sys-$p.txt")"
    for o in normalized fair; do
        "$KACE" eval --db "$S" --protocol $p --objective $o --no-xu --csv >"$DIR/sys-$p-$o.csv" 2>&1 ||
            fail "eval --protocol $p --objective $o: $(tail -3 "$DIR/sys-$p-$o.csv")"
        awk -F, '$1 == "mean" { if (!($6 > 0.5 && $6 <= 1)) exit 1; found = 1 } END { exit !found }' \
            "$DIR/sys-$p-$o.csv" || fail "$p --objective $o: no kace mean in (0.5, 1]"
    done
done
# The paper's experiments (published splits, unseen families, triples).
"$KACE" eval --db "$S" --no-xu --no-figures --out "$DIR/sys-paper" >"$DIR/sys-paper.txt" 2>&1 ||
    fail "kace eval on the system-only store: $(tail -3 "$DIR/sys-paper.txt")"
grep -q "Three workloads at once" "$DIR/sys-paper.txt" || fail "no triples section on the system-only store"
# Asking for counters the store does not hold: the workload and what to import.
if "$KACE" eval --db "$S" --protocol kfold --metrics full --no-xu --out "" >"$DIR/sys-full.txt" 2>&1; then
    fail "--metrics full succeeded on a store without kernel profiles"
fi
grep -q "workload '.*' has no value for metric '.*'.*import" "$DIR/sys-full.txt" ||
    fail "the missing metric is not named with what to import: $(cat "$DIR/sys-full.txt")"
"$KACE" eval --db "$S" --protocol kfold --metrics nvml --out "" >/dev/null 2>&1 && fail "--metrics nvml accepted"

# Train and serve predictions.
"$KACE" train --db "$S" --name sys --promote --out "$DIR/sys.model" >"$DIR/sys-train.txt" ||
    fail "train on the system-only store"
grep -q "reads the system metrics" "$DIR/sys-train.txt" || fail "train does not say its metric set"
[ "$(head -1 "$DIR/sys.model")" = "kace-model 3" ] || fail "model file version $(head -1 "$DIR/sys.model")"
grep -qx "metrics system" "$DIR/sys.model" || fail "the model file does not record its metric set"
"$KACE" train --db "$S" --kind linear --name sys-linear >"$DIR/sys-linear.txt" || fail "linear train"
grep -q "(kace-system features)" "$DIR/sys-linear.txt" || fail "the linear model's features: $(head -1 "$DIR/sys-linear.txt")"
T=bert-base-cased_batch8-inf
"$KACE" predict --db "$S" --target $T >"$DIR/sys-predict.txt" || fail "predict on the system-only store"
[ "$(grep -c '^ *[0-9]\+  ' "$DIR/sys-predict.txt")" -ge 10 ] || fail "predict ranks fewer than 10 partners"
"$KACE" predict --db "$S" --model-file "$DIR/sys.model" --target $T --top 3 >/dev/null || fail "predict --model-file"
for o in normalized fair; do
    "$KACE" predict --db "$S" --target $T --objective $o --top 5 >"$DIR/sys-predict-$o.txt" || fail "predict --objective $o"
    grep -q "($o objective" "$DIR/sys-predict-$o.txt" || fail "predict --objective $o does not say it"
    # shares are at most about 1 each: a pair's normalized sum under 2.5, its fairness under 1.25
    awk -v o=$o '/^ *1  / { v = $3; if (!(v > 0 && v < (o == "fair" ? 1.25 : 2.5))) exit 1; found = 1 } END { exit !found }' \
        "$DIR/sys-predict-$o.txt" || fail "predict --objective $o: best value out of range"
    "$KACE" predict --db "$S" --target $T --group 3 --objective $o >"$DIR/sys-group-$o.txt" || fail "--group 3 --objective $o"
    grep -q "^$o " "$DIR/sys-group-$o.txt" || fail "--group --objective $o prints no $o line"
done
"$KACE" predict --db "$S" --target $T --group 3 >"$DIR/sys-group.txt" || fail "predict --group 3 on system metrics"
grep -q "enumeration" "$DIR/sys-group.txt" || fail "a model without bounds is not searched by enumeration"
"$KACE" predict --db "$S" --model sys-linear --target $T --objective fair >"$DIR/lin-fair.txt" 2>&1 &&
    fail "the linear model ranked by fairness"
grep -q "predicts throughput sums only" "$DIR/lin-fair.txt" || fail "no reason why the linear model cannot: $(cat "$DIR/lin-fair.txt")"
"$KACE" predict --db "$S" --target $T --metrics full >"$DIR/sys-m.txt" 2>&1 && fail "predict --metrics full with a system model"
grep -q "reads the system metrics, not the full ones" "$DIR/sys-m.txt" || fail "predict --metrics: $(cat "$DIR/sys-m.txt")"
"$KACE" train --db "$S" --metrics full --name no >"$DIR/sys-train-full.txt" 2>&1 && fail "train --metrics full on system metrics"
grep -q "import" "$DIR/sys-train-full.txt" || fail "train --metrics full: $(cat "$DIR/sys-train-full.txt")"

# ---- launch records without counters ---------------------------------------
L=$DIR/launch.db
"$KACE" eval --db "$L" --protocol leave-workload-out --no-xu --out "" >"$DIR/launch.txt" 2>&1 || fail "eval on launch"
grep -q "^(every model reads the no-counters metrics" "$DIR/launch.txt" || fail "launch-only not chosen as no-counters"
"$KACE" train --db "$L" --name launch --out "$DIR/launch.model" >/dev/null || fail "train on launch"
grep -qx "metrics no-counters" "$DIR/launch.model" || fail "the launch model's set"
"$KACE" predict --db "$L" --target $T --top 2 >/dev/null || fail "predict on launch"

# ---- full: unchanged, and the ablation --------------------------------------
F=$DIR/full.db
"$KACE" import --db "$F" "$DATA" >/dev/null
"$KACE" eval --db "$F" --protocol kfold --no-xu --out "" >"$DIR/full.txt"
grep -q "every model reads" "$DIR/full.txt" && fail "the full store says a metric set"
"$KACE" train --db "$F" --name full --out "$DIR/full.model" >"$DIR/full-train.txt"
[ "$(head -1 "$DIR/full.model")" = "kace-model 2" ] || fail "a full model is not written as version 2"
grep -q "reads the" "$DIR/full-train.txt" && fail "train says a metric set on full data"
"$KACE" train --db "$F" --metrics no-counters --name nc --out "$DIR/nc.model" >/dev/null || fail "train --metrics no-counters"
grep -qx "metrics no-counters" "$DIR/nc.model" || fail "--metrics no-counters not recorded"
"$KACE" predict --db "$F" --model nc --target $T --top 2 >/dev/null || fail "predict with the no-counters model"

"$KACE" eval --db "$F" --ablation --csv >"$DIR/ablation.csv" || fail "eval --ablation"
[ "$(head -1 "$DIR/ablation.csv")" = "protocol,metrics,folds,targets,kace,KACE,Best rule,Random,kace_mae_pct" ] ||
    fail "ablation header: $(head -1 "$DIR/ablation.csv")"
[ "$(grep -c ',full,' "$DIR/ablation.csv")" = 7 ] || fail "not 7 protocols with full metrics"
[ "$(grep -c ',system,' "$DIR/ablation.csv")" = 7 ] || fail "not 7 protocols with system metrics"
[ "$(grep -c ',no-counters,' "$DIR/ablation.csv")" = 7 ] || fail "not 7 protocols without counters"
# The paper's linear model, clean mode, n_occur=3: 0.918 with every feature,
# 0.900 without counters and with system metrics alone (deterministic fits).
awk -F, '$1 == "paper n_occur=3" { printf "%s %.3f\n", $2, $6 }' "$DIR/ablation.csv" >"$DIR/linear.txt"
[ "$(tr '\n' ' ' <"$DIR/linear.txt")" = "full 0.918 no-counters 0.900 system 0.900 " ] ||
    fail "the paper's model in the ablation: $(cat "$DIR/linear.txt")"
# A row is what kace eval --protocol P --metrics S reports.
"$KACE" eval --db "$F" --protocol leave-workload-out --metrics system --no-xu --csv >"$DIR/lwo-sys.csv"
want=$(awk -F, '$1 == "mean" { printf "%s %s", $6, $7 }' "$DIR/lwo-sys.csv")
got=$(awk -F, '$1 == "leave-workload-out" && $2 == "system" { printf "%s %s", $5, $6 }' "$DIR/ablation.csv")
[ "$want" = "$got" ] || fail "ablation row '$got' is not kace eval --protocol's '$want'"
# On the system-only store only the system rows exist.
"$KACE" eval --db "$S" --ablation --csv >"$DIR/sys-ablation.csv" || fail "--ablation on system metrics"
[ "$(tail -n +2 "$DIR/sys-ablation.csv" | grep -vc ',system,' || true)" = 0 ] || fail "richer rows on system metrics"
[ "$(grep -c ',system,' "$DIR/sys-ablation.csv")" = 7 ] || fail "not 7 system rows on the system store"
"$KACE" eval --db "$F" --ablation --metrics full >/dev/null 2>&1 && fail "--ablation with --metrics accepted"
echo "cli_metric_sets: ok"
