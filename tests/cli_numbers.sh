#!/usr/bin/env bash
# Every numeric option of every command goes through the CLI's one number
# parser (cli/number.c): "abc", "3x", "", " 3", "0x10" and out-of-range values
# are refused with exit 2 and a message naming the option, before anything
# runs. The options are read from each command's --help and from the option
# tables in cli/*.c; an option in neither table below fails the test, so a
# new option cannot go untested.
#
#   cli_numbers.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
export KACE_DB="$scratch/never-created.db"

# Numeric options: "command --option" -> out-of-range values (space-separated).
declare -A numeric=(
    ["campaign --max-runs"]="-1 1e10"
    ["campaign --pool-members"]="0 33 -1 1.5"
    ["campaign --minutes"]="0 -1 1e6"
    ["campaign --profile-warmup"]="-1"
    ["campaign --profile-window"]="0 -1 3601"
    ["campaign --counters-window"]="0 -1 3601"
    ["campaign --fit-minutes"]="0 -1 1e6"
    ["campaign --stop-grace-max"]="0 3601"
    ["measure --stop-grace-max"]="0 3601"
    ["profile --stop-grace-max"]="0 3601"
    ["campaign --nvml-device"]="-1 64 1.5"
    ["campaign --timeout"]="-1 1e9"
    ["campaign --warmup"]="-1 1e9"
    ["campaign --window"]="0 -1"
    ["demo --gpu-memory"]="0 -1 1e7"
    ["eval --folds"]="1 1001 2.5"
    ["eval --every"]="0 100001"
    ["eval --seed"]="-1 0.5"
    ["eval --kace-alpha"]="-1 1e13"
    ["eval --kace-depth"]="0 17 2.5"
    ["eval --kace-eta"]="0 2"
    ["eval --kace-rounds"]="-1 100001"
    ["eval --kace-seed"]="-1 0.5"
    ["eval --kace-seeds"]="0 101"
    ["eval --kace-tree-weight"]="-0.1 1.1"
    ["eval --xu-iter"]="0 10001"
    ["eval --xu-trees"]="-1 2"
    ["measure --nvml-device"]="-1 64"
    ["measure --timeout"]="-1 1e9"
    ["measure --warmup"]="-1 1e9"
    ["measure --window"]="0 -1"
    ["predict --gpu-mem"]="0 -1 1e7"
    ["predict --group"]="1 5 2.5"
    ["predict --ls-target"]="-0.1 1.5"
    ["predict --top"]="-1 1000001 1.5"
    ["profile --budget"]="-1"
    ["profile --counters-warmup"]="-1"
    ["profile --counters-window"]="-1"
    ["profile --device"]="-1 64"
    ["profile --timeout"]="-1"
    ["profile --warmup"]="-1"
    ["profile --window"]="-1"
    ["profile --replay-cover"]="0 -1 1.5"
    ["profile --replay-max"]="-1 8193 1.5"
    ["schedule --gpu-mem"]="0 1e7"
    ["schedule --gpus"]="-1 1e8"
    ["schedule --ls-target"]="2"
    ["schedule --max-group"]="0 100"
    ["schedule --min-confidence"]="-1 2"
    ["schedule --min-gain"]="-2 4"
    ["schedule --overload-min-rate"]="-1 4"
    ["schedule --overload-queue"]="-2 1e7"
    ["serve --max-body"]="0 1e12"
    ["serve --max-colocation"]="1 100"
    ["serve --min-confidence"]="-1 2"
    ["serve --min-fraction"]="-1 2"
    ["serve --threads"]="0 257 1.5"
    ["serve --watch"]="-1 3601"
    ["serve --max-extender-body"]="0 1e15"
    ["serve --max-pending-bodies"]="0 1e15"
    ["serve --max-connections"]="0 1e9"
    ["serve --max-per-client"]="-1 1e9"
    ["serve --idle-timeout"]="0 1e6"
    ["serve --header-timeout"]="0 1e6"
    ["serve --body-timeout"]="0 1e6"
    ["simulate --shards"]="0 100 1.5"
    ["serve --assume-seconds"]="-1 1e6"
    ["agent --interval"]="0 1e6"
    ["top --interval"]="0 4000"
    ["simulate --gpu-mem"]="0 1e7"
    ["simulate --gpus"]="-1 1e8"
    ["simulate --ls-target"]="2"
    ["simulate --max-group"]="0 100"
    ["simulate --min-confidence"]="-1 2"
    ["simulate --min-gain"]="-2 4"
    ["simulate --overload-min-rate"]="-1 4"
    ["simulate --overload-queue"]="-2 1e7"
    ["simulate --train-n-occur"]="0 101"
    ["simulate --train-seed"]="-1 2e9"
    ["train --search-iter"]="0 10001"
    ["train --holdout"]="0 0.95 -1"
    ["slurm --job"]="0 -1 5000000000 1.5"
    ["slurm --throughput"]="0 -1 1e16"
    ["progress-from-output --samples"]="0 -1 1e16"
    ["progress-from-output --group"]="-1 10 1.5"
    # Composite values: each part is a number.
    ["measure --mps-pct"]="0,50 50,101 50,,50 50,"
    ["simulate --tune-gpus"]="0 16,0 16, 16,,24"
    ["schedule --cluster"]="0x4 4x0 4x65 4x 4x8x 4x8y"
    ["simulate --cluster"]="0x4 4x0 4x65 4x 4x8x 4x8y"
    ["serve --listen"]="127.0.0.1:70000 127.0.0.1:-1 127.0.0.1:"
    ["serve --extender-listen"]="127.0.0.1:70000 127.0.0.1:-1 127.0.0.1:"
    ["serve --observation-rate"]="-1 1e7 5/0 5/x 5/"
)
# How a bad number is written into a composite value.
declare -A wrap=(["measure --mps-pct"]="50,%s" ["simulate --tune-gpus"]="16,%s" ["schedule --cluster"]="4x%s" ["simulate --cluster"]="4x%s"
                 ["serve --listen"]="127.0.0.1:%s" ["serve --extender-listen"]="127.0.0.1:%s")
# Options that take text, not a number (paths, names, choices, dates).
text_options=$(tr '\n' ' ' <<<" --db --out --data --mode --pairs-set --triples-set --kace-monotone --set --kind --features --name
 --target --among --model --model-file --norm --split-with --policy --policies --trace --nodes --import --reserve
 --tune-traces --port-file --cupti --keep-recording --run-dir --mps-control --gpu --log --tool --date --workload
 --config --protocol --train-set --train-db --split-train-db --targets --candidates --sacct --sacct-map --token-file --allow-origin --reports --kube-api --kube-ca-file --kube-token-file --node --pods --serve --serve-token-file --extender-policy --match --check
 --extender-client-ca --extender-port-file --extender-tls-cert --extender-tls-key --kace-kind --metrics --objective
 --agent-tokens --extender-client-name --extend --catalog --ncu --python --workloads-dir --calls ")
# --mps-pct is the plan file's list syntax (lib/gpu/mps.c), which allows "30, 70".
declare -A spaces_allowed=(["measure --mps-pct"]=1)
# Positional arguments a command checks before a composite option's value.
# (by "command --option" first, then by command)
declare -A positional=(["measure"]="w1 w2" ["slurm --job"]="report --throughput 1" ["slurm --throughput"]="report --job 7")

source "$(dirname "$0")/lib_test.sh" # fail, failures

# 1. Every option with a value, from the usage texts and from the sources, is classified.
commands=(demo import import-ncu info train predict eval simulate schedule serve profile slurm workload measure
          campaign plan import-cupti progress-from-output)
for cmd in "${commands[@]}"; do
    help=$("$kace" "$cmd" --help 2>&1)
    for opt in $(grep -oE -- '--[a-z][a-z0-9-]*[ =][A-Z][A-Za-z0-9:,._|-]*' <<<"$help" | sed 's/[ =].*//' | sort -u); do
        [ -n "${numeric["$cmd $opt"]+x}" ] && continue
        [[ "$text_options" == *" $opt "* ]] && continue
        fail "kace $cmd $opt: an option with a value that this test does not know (numeric or text?)"
    done
done
for opt in $(cat "$src"/cli/*.c "$src"/cli/*.h | grep -oE '\{"[a-z][a-z0-9-]*", required_argument' |
             sed -E 's/\{"([^"]*)".*/--\1/' | sort -u); do
    [[ "$text_options" == *" $opt "* ]] && continue
    known=0
    for key in "${!numeric[@]}"; do [ "${key#* }" = "$opt" ] && known=1; done
    [ $known = 1 ] || fail "$opt (in cli/ option tables): neither a known numeric nor a text option"
done

# 2. Each numeric option refuses garbage and out-of-range values: exit 2, the option named, nothing created.
tried=0
for key in "${!numeric[@]}"; do
    cmd=${key%% *}
    opt=${key#* }
    values=()
    for bad in abc 3x "" " 3" 0x10 nan inf 1e; do
        [ "$bad" = " 3" ] && [ -n "${spaces_allowed[$key]+x}" ] && continue
        if [ -n "${wrap[$key]+x}" ]; then
            # shellcheck disable=SC2059
            values+=("$(printf "${wrap[$key]}" "$bad")")
        else
            values+=("$bad")
        fi
    done
    read -r -a extra <<<"${numeric[$key]}"
    read -r -a pos <<<"${positional[$key]:-${positional[$cmd]:-}}"
    values+=("${extra[@]}")
    for v in "${values[@]}"; do
        tried=$((tried + 1))
        timeout 10 "$kace" "$cmd" "$opt" "$v" "${pos[@]}" </dev/null >"$scratch/out" 2>"$scratch/err"
        rc=$?
        if [ $rc != 2 ]; then
            fail "kace $cmd $opt '$v': exit $rc (expected 2): $(head -c 300 "$scratch/err")"
        elif ! grep -q -- "$opt" "$scratch/err"; then
            fail "kace $cmd $opt '$v': the message does not name $opt: $(cat "$scratch/err")"
        fi
    done
done
[ -e "$KACE_DB" ] && fail "a refused option still created the store"

# 3. The parser still takes what it should (the same options, valid values).
"$kace" predict --top 3 --target nobody --db "$KACE_DB" >/dev/null 2>"$scratch/err"
[ $? = 2 ] && fail "predict --top 3 refused: $(cat "$scratch/err")"
"$kace" schedule --cluster 2x4 --db "$KACE_DB" </dev/null >/dev/null 2>"$scratch/err"
grep -q -- "--cluster" "$scratch/err" && fail "schedule --cluster 2x4 refused: $(cat "$scratch/err")"

echo "tried $tried values over ${#numeric[@]} numeric options"
[ $failures = 0 ] || { echo "$failures failures" >&2; exit 1; }
echo "ok"
