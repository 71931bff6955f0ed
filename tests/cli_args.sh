#!/usr/bin/env bash
# Command-line arguments read the way they are written.
#
#   bash cli_args.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
#  - kace workload: options count anywhere before '--' ("add --db X NAME --
#    CMD" stores NAME in X, never a workload "--db" in the default store);
#    an argument starting with '-' is never a name; what follows '--' is the
#    command, its own options included;
#  - every comma-list option refuses an empty item (",,,", "a,", ",a",
#    "a,,b") with exit 2 and a message naming the option, instead of
#    reading fewer items (--among ,,, printed an empty table with exit 0);
#  - kace simulate --gpus 1 on a pod list with 8-GPU jobs says before any
#    output that no job that large could start, and the smallest cluster
#    that fits; --gpus takes whole numbers only.
set -u
KACE=${1:?usage: cli_args.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
source "$(dirname "$0")/lib_test.sh" # fail, failures, need
need sqlite3
export LC_ALL=C
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/home" || exit 1
# The default store, where a misread command would write.
export HOME="$SCRATCH/home" KACE_DB="$SCRATCH/default.db"

refused() { # WHAT EXPECTED_STDERR_REGEX COMMAND...: exit 2, the message, nothing on stdout
    local what=$1 re=$2
    shift 2
    "$@" >"$SCRATCH/out" 2>"$SCRATCH/err"
    local rc=$?
    [ $rc = 2 ] || fail "$what: exit $rc, expected 2 (stderr: $(head -c 300 "$SCRATCH/err"))"
    grep -qE -- "$re" "$SCRATCH/err" || fail "$what: stderr '$(head -c 300 "$SCRATCH/err")' lacks /$re/"
    [ -s "$SCRATCH/out" ] && fail "$what: printed '$(head -c 200 "$SCRATCH/out")'"
    return 0
}
names_in() { sqlite3 "$1" "SELECT name FROM workloads ORDER BY name" 2>/dev/null | tr '\n' ' '; }

# ---- kace workload: options anywhere before '--' ----------------------------
db="$SCRATCH/w.db"
"$KACE" workload add --db "$db" first -- true >"$SCRATCH/out" 2>&1 || fail "add --db X NAME: $(cat "$SCRATCH/out")"
"$KACE" workload add second --db "$db" -- sh -c 'echo --db -x' >"$SCRATCH/out" 2>&1 ||
    fail "add NAME --db X: $(cat "$SCRATCH/out")"
"$KACE" workload --db "$db" add third -- true >"$SCRATCH/out" 2>&1 || fail "--db X add NAME: $(cat "$SCRATCH/out")"
[ -e "$KACE_DB" ] && fail "a workload was stored in the default store: $(names_in "$KACE_DB")"
"$KACE" workload list --db "$db" >"$SCRATCH/list" 2>"$SCRATCH/err" || fail "list --db X: $(cat "$SCRATCH/err")"
check_eq "workloads listed" "first: true|second: sh -c echo --db -x|third: true" "$(paste -sd'|' "$SCRATCH/list")"
grep -q -- "--db:" "$SCRATCH/list" && fail "a workload named --db was stored"

refused "an option as a name" "unknown option" "$KACE" workload add --db "$db" --bogus -- true
refused "an option where the name goes" "unknown option" "$KACE" workload add --db "$db" -x -- true
refused "a name starting with '-'" "workload name '-' starts with '-'" "$KACE" workload add --db "$db" - -- true
refused "no name" "expected NAME" "$KACE" workload add --db "$db" -- true
refused "no command" "expected a command after '--'" "$KACE" workload add --db "$db" lonely --
refused "two names" "'extra' before '--'" "$KACE" workload add --db "$db" w extra -- true
refused "list with a name" "list takes no arguments" "$KACE" workload list --db "$db" w
refused "--db without a path" "unknown option" "$KACE" workload add w --db
"$KACE" workload list --db "$db" >"$SCRATCH/list2" 2>&1
cmp -s "$SCRATCH/list" "$SCRATCH/list2" || fail "a refused add changed the store: $(cat "$SCRATCH/list2")"
[ -e "$KACE_DB" ] && fail "a refused add wrote the default store"

# ---- comma lists: no empty item ---------------------------------------------
ref="$SCRATCH/ref.db"
"$KACE" import --db "$ref" "$SHARED/kace-v100" >/dev/null 2>"$SCRATCH/err" || fail "import: $(cat "$SCRATCH/err")"
"$KACE" train --db "$ref" >/dev/null 2>"$SCRATCH/err" || fail "train: $(cat "$SCRATCH/err")"
target=bert-base-cased_batch8-train partner=bert-base-cased_batch16-train
"$KACE" predict --db "$ref" --target $target --among $partner >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "predict --among one: $(cat "$SCRATCH/err")"
grep -q " $partner " "$SCRATCH/out" || fail "predict --among one: $(cat "$SCRATCH/out")"
for list in ",,," "," "$partner," ",$partner" "$partner,,$partner"; do
    refused "predict --among '$list'" "^kace predict: --among: item [0-9]+ of '$list' is empty" \
        "$KACE" predict --db "$ref" --target $target --among "$list"
done
refused "predict --split-with ','" "^kace predict: --split-with: item 1 of ',' is empty" \
    "$KACE" predict --db "$ref" --target $target --split-with ","
for list in "kace," ",kace" "kace,,Oracle" ""; do
    refused "simulate --policies '$list'" "^kace simulate: --policies: item [0-9]+ of '$list' is empty" \
        "$KACE" simulate --db "$ref" --policies "$list" --out "$SCRATCH/sim" --no-figures --quiet
done
refused "simulate --tune-gpus '16,'" "^kace simulate: --tune-gpus: item 2 of '16,' is empty" \
    "$KACE" simulate --db "$ref" --tune --tune-gpus "16," --out "$SCRATCH/sim" --no-figures --quiet
refused "eval --targets '$target,,'" "^kace eval: --targets: item 2 of '$target,,' is empty" \
    "$KACE" eval --db "$ref" --protocol leave-family-out --targets "$target,," --no-xu --csv --out ""
refused "agent --gpus 'a,,b'" "^kace agent: --gpus: item 2 of 'a,,b' is empty" \
    "$KACE" agent --node n1 --gpus "a,,b" --once

# ---- kace simulate --gpus ---------------------------------------------------
trace="$SHARED/alibaba-gpu-2023/openb_pod_list_default.csv"
"$KACE" simulate --db "$ref" --trace "$trace" --gpus 1 --out "$SCRATCH/sim1" --no-figures --quiet \
    >"$SCRATCH/out" 2>"$SCRATCH/err"
rc=$?
[ $rc = 1 ] || fail "simulate --gpus 1: exit $rc, expected 1"
grep -qE "^kace: simulate: a cluster of about 1 GPUs .* at most [0-9]+ GPUs, but GPU job [0-9]+ asks for 8 .*the smallest cluster that fits every job is about [0-9]+ GPUs" \
    "$SCRATCH/err" || fail "simulate --gpus 1: $(cat "$SCRATCH/err")"
grep -q "^policy " "$SCRATCH/out" && fail "simulate --gpus 1 printed a table before failing"
fits=$(sed -n 's/.*fits every job is about \([0-9]*\) GPUs.*/\1/p' "$SCRATCH/err")
if [ -n "$fits" ]; then
    "$KACE" simulate --db "$ref" --trace "$trace" --gpus "$fits" --policies exclusive,kace --out "$SCRATCH/simf" \
        --no-figures --quiet >"$SCRATCH/out" 2>"$SCRATCH/err" || fail "simulate --gpus $fits: $(cat "$SCRATCH/err")"
    grep -qE "^kace +[0-9]" "$SCRATCH/out" || fail "simulate --gpus $fits: no kace row: $(cat "$SCRATCH/out")"
fi
# A pod list without multi-GPU jobs runs on one GPU.
"$KACE" simulate --db "$ref" --trace "$SHARED/alibaba-gpu-2023/openb_pod_list_gpushare100.csv" --gpus 1 \
    --policies exclusive,kace --out "$SCRATCH/sim100" --no-figures --quiet >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "simulate gpushare100 --gpus 1: $(cat "$SCRATCH/err")"
refused "simulate --gpus 1.5" "--gpus: '1.5' is not a whole number" \
    "$KACE" simulate --db "$ref" --gpus 1.5 --out "$SCRATCH/sim" --no-figures --quiet

[ -e "$KACE_DB" ] && fail "something wrote the default store"
finish cli_args
