#!/usr/bin/env bash
# Named models: `kace train` never replaces the default model (the one kace
# serve, the Slurm plugins and kace predict use) unless asked.
#
#   bash cli_models.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - a store without models: kace info says there is no default; the first
#   kace train (kind slowdown, stored as 'slowdown') becomes the default;
# - kace train --kind forest stores 'forest' and leaves the default's body,
#   kind and kace predict's answers as they were;
# - kace model promote forest makes it the default (predict then answers as
#   --model forest does); kace train --promote promotes the model it trains;
# - kace info and kace model list show each model's kind, creation time and
#   which one is the default;
# - refused, with the store unchanged (sqlite3 .dump): --name default, a
#   name with a space, promoting a model that does not exist.
set -u

KACE=${1:?usage: cli_models.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
export LC_ALL=C

source "$(dirname "$0")/lib_test.sh" # fail, failures
for tool in sqlite3 sha256sum; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
fingerprint() { sqlite3 "$DB" .dump | sha256sum | cut -d' ' -f1; }
body() { sqlite3 "$DB" "SELECT body FROM models WHERE name='$1'" | sha256sum | cut -d' ' -f1; }
kind_of() { sqlite3 "$DB" "SELECT kind FROM models WHERE name='$1'"; }
TARGET=bert-base-cased_batch8-train
AMONG=whisper-large-v2_batch2-inf,bert-base-cased_batch8-inf,albert-base-v2_batch2-train,vit_h_14_batch2-train
predict() { "$KACE" predict --db "$DB" --target "$TARGET" --among "$AMONG" "$@" 2>&1; }

"$KACE" import --db "$DB" --quiet "$REF/profiles/system.csv" "$REF/profiles/system-xu.csv" \
    "$REF/colocations/pairs.csv" "$REF/colocations/pairs-xu.csv" >/dev/null 2>"$SCRATCH/import.err" ||
    { echo "FAIL: import failed: $(cat "$SCRATCH/import.err")" >&2; exit 1; }
"$KACE" info --db "$DB" >"$SCRATCH/info0.out" || fail "kace info failed"
grep -q "default model: none" "$SCRATCH/info0.out" || fail "info on a store without models: $(tail -n2 "$SCRATCH/info0.out")"

# ---- the first model becomes the default ---------------------------------------
"$KACE" train --db "$DB" >"$SCRATCH/train1.out" 2>&1 || fail "kace train failed: $(cat "$SCRATCH/train1.out")"
grep -q "^trained slowdown model 'slowdown'" "$SCRATCH/train1.out" || fail "train's name: $(head -n1 "$SCRATCH/train1.out")"
grep -q "promoted to 'default' (the store had no default model)" "$SCRATCH/train1.out" ||
    fail "the first model was not made the default: $(cat "$SCRATCH/train1.out")"
[ "$(body default)" = "$(body slowdown)" ] || fail "default is not a copy of 'slowdown'"
[ "$(kind_of default)" = slowdown ] || fail "default's kind: $(kind_of default)"
default_before=$(body default)
predict >"$SCRATCH/predict1.out" || fail "predict failed: $(cat "$SCRATCH/predict1.out")"

# ---- train --kind forest leaves the default alone --------------------------------
"$KACE" train --db "$DB" --kind forest --search-iter 1 >"$SCRATCH/train2.out" 2>&1 ||
    fail "kace train --kind forest failed: $(cat "$SCRATCH/train2.out")"
grep -q "^trained forest model 'forest'" "$SCRATCH/train2.out" || fail "forest's name: $(head -n1 "$SCRATCH/train2.out")"
grep -q "the default model is unchanged; kace model promote forest" "$SCRATCH/train2.out" ||
    fail "train --kind forest does not say the default is unchanged: $(tail -n1 "$SCRATCH/train2.out")"
[ "$(body default)" = "$default_before" ] || fail "train --kind forest changed the default model"
[ "$(kind_of default)" = slowdown ] || fail "train --kind forest changed the default's kind to $(kind_of default)"
[ "$(kind_of forest)" = forest ] || fail "no model 'forest' of kind forest: '$(kind_of forest)'"
predict >"$SCRATCH/predict2.out"
cmp -s "$SCRATCH/predict1.out" "$SCRATCH/predict2.out" ||
    fail "predict answers differently after train --kind forest: $(diff "$SCRATCH/predict1.out" "$SCRATCH/predict2.out")"
"$KACE" info --db "$DB" >"$SCRATCH/info1.out" || fail "kace info failed"
grep -q "^  default model: slowdown (slowdown, promoted 20[0-9-]*T[0-9:]*Z)" "$SCRATCH/info1.out" ||
    fail "info's default: $(grep default "$SCRATCH/info1.out")"
grep -Eq "^  model slowdown +slowdown +created 20[0-9-]+T[0-9:]+Z  \[default\]$" "$SCRATCH/info1.out" ||
    fail "info's slowdown line: $(grep 'model slowdown' "$SCRATCH/info1.out")"
grep -Eq "^  model forest +forest +created 20[0-9-]+T[0-9:]+Z$" "$SCRATCH/info1.out" ||
    fail "info's forest line: $(grep 'model forest' "$SCRATCH/info1.out")"
grep -q "^  models 3$" "$SCRATCH/info1.out" || fail "info's model count: $(grep '^  models' "$SCRATCH/info1.out")"

# ---- refused: the store stays as it was -------------------------------------------
before=$(fingerprint)
"$KACE" train --db "$DB" --name default >"$SCRATCH/bad1.out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "train --name default: exit $rc, expected 2"
grep -q "'default' is the name of the promoted model" "$SCRATCH/bad1.out" || fail "train --name default said: $(cat "$SCRATCH/bad1.out")"
"$KACE" train --db "$DB" --name "my model" >"$SCRATCH/bad2.out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "train --name 'my model': exit $rc, expected 2"
grep -q "byte 3 (' ') is not allowed" "$SCRATCH/bad2.out" || fail "train --name 'my model' said: $(cat "$SCRATCH/bad2.out")"
"$KACE" model --db "$DB" promote nosuch >"$SCRATCH/bad3.out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "model promote nosuch: exit $rc, expected 1"
grep -q "no model named 'nosuch'" "$SCRATCH/bad3.out" || fail "model promote nosuch said: $(cat "$SCRATCH/bad3.out")"
"$KACE" model --db "$DB" promote >/dev/null 2>&1
[ $? -eq 2 ] || fail "model promote without a name is not a usage error"
[ "$(fingerprint)" = "$before" ] || fail "a refused command changed the store"

# ---- promotion is explicit -----------------------------------------------------------
"$KACE" model --db "$DB" promote forest >"$SCRATCH/promote.out" 2>&1 || fail "model promote forest failed: $(cat "$SCRATCH/promote.out")"
grep -q "^promoted 'forest' (a forest model) to 'default'" "$SCRATCH/promote.out" || fail "promote said: $(cat "$SCRATCH/promote.out")"
# serve's /v1/place, the extender and Slurm need per-workload throughputs: promote says a forest has none
grep -q "^note: 'forest' (a forest model) predicts only a group's sum" "$SCRATCH/promote.out" ||
    fail "promote did not say what a forest cannot answer: $(cat "$SCRATCH/promote.out")"
[ "$(body default)" = "$(body forest)" ] || fail "promote forest did not make it the default"
[ "$(kind_of default)" = forest ] || fail "default's kind after promote: $(kind_of default)"
predict >"$SCRATCH/predict3.out"
predict --model forest >"$SCRATCH/predict4.out"
cmp -s "$SCRATCH/predict3.out" "$SCRATCH/predict4.out" || fail "predict after promote does not answer as --model forest"
cmp -s "$SCRATCH/predict1.out" "$SCRATCH/predict3.out" && fail "predict answers as before the promotion"
"$KACE" model --db "$DB" list >"$SCRATCH/list.out" || fail "model list failed"
grep -q "^default model: forest (forest, promoted" "$SCRATCH/list.out" || fail "model list's default: $(head -n1 "$SCRATCH/list.out")"
grep -Eq "^model forest +forest +created .*\[default\]$" "$SCRATCH/list.out" || fail "model list: $(cat "$SCRATCH/list.out")"
grep -q "^model slowdown .*\[default\]" "$SCRATCH/list.out" && fail "slowdown is still marked default: $(cat "$SCRATCH/list.out")"

# ---- train --promote -------------------------------------------------------------------
"$KACE" train --db "$DB" --name second --promote >"$SCRATCH/train3.out" 2>&1 || fail "train --promote failed: $(cat "$SCRATCH/train3.out")"
grep -q "^  promoted to 'default': " "$SCRATCH/train3.out" || fail "train --promote said: $(tail -n1 "$SCRATCH/train3.out")"
[ "$(body default)" = "$(body second)" ] || fail "train --promote did not make 'second' the default"
[ "$(kind_of default)" = slowdown ] || fail "default's kind after train --promote: $(kind_of default)"
predict >"$SCRATCH/predict5.out"
cmp -s "$SCRATCH/predict1.out" "$SCRATCH/predict5.out" || fail "the promoted slowdown model predicts unlike the first one"

[ "$failures" -eq 0 ] || { echo "cli_models: $failures failure(s)" >&2; exit 1; }
echo "cli_models: ok"
