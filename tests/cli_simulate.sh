#!/usr/bin/env bash
# kace simulate and kace schedule end to end on the shared data.
#
#   bash cli_simulate.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - on the default pod list and on gpushare40 (32 GPUs, the default): the
#   policy table lists all eight policies, kace's mean JCT is the lowest of the
#   non-Oracle policies and within 10% of the Oracle's, and the CSV files (and
#   the PNG figures when gnuplot is installed) are written;
# - a pod list with a negative time, a non-numeric field or an unknown column
#   fails with exit 1 and one message naming FILE:LINE:COL;
# - --tune scores every grid point on a held-out list, picks the lowest and
#   reports with it; it refuses to tune on the reported list;
# - kace schedule answers its line protocol.
set -u
KACE=${1:?usage: cli_simulate.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
TRACE="$SHARED/alibaba-gpu-2023"
export LC_ALL=C
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

db="$SCRATCH/kace.db"
"$KACE" import --db "$db" "$SHARED/kace-v100" >/dev/null || fail "import"

for list in openb_pod_list_default.csv openb_pod_list_gpushare40.csv; do
    out="$SCRATCH/${list%.csv}"
    if ! "$KACE" simulate --db "$db" --trace "$TRACE/$list" --out "$out" >"$out.txt" 2>"$out.err"; then
        fail "simulate $list: exit $?"; cat "$out.err"; continue
    fi
    cat "$out.txt"
    rows=$(grep -cE '^(exclusive|packing|random|MEMCAP|SM%|MEM%|kace|Oracle) +[0-9]' "$out.txt")
    [ "$rows" -eq 8 ] || fail "$list: $rows policy rows, expected 8"
    grep -q "0 CPU-only pods" "$out.txt" && fail "$list: CPU-only pods not counted"
    # policies.csv: policy,mean_jct_h,...
    awk -F, 'NR > 1 { jct[$1] = $2 }
             END {
               best = 1e300
               for (p in jct) if (p != "Oracle" && p != "kace" && jct[p] < best) best = jct[p]
               if (!(jct["kace"] < best)) { printf "kace %.3f h is not below the best other %.3f h\n", jct["kace"], best; exit 1 }
               if (!(jct["kace"] <= 1.10 * jct["Oracle"])) { printf "kace %.3f h is not within 10%% of Oracle %.3f h\n", jct["kace"], jct["Oracle"]; exit 1 }
             }' "$out/policies.csv" || fail "$list: kace is not the best non-Oracle policy within 10% of Oracle"
    [ -s "$out/jct_cdf.csv" ] && [ -s "$out/timeline_0.csv" ] || fail "$list: CSV files missing"
    if command -v gnuplot >/dev/null 2>&1; then
        [ -s "$out/fig_jct_cdf.png" ] && [ -s "$out/fig_utilization.png" ] || fail "$list: figures missing"
    fi
done

# Bad pod lists: one defect each; the message names file:line:col.
header='name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time'
bad() { # name, body, expected "line:col", expected words
    local f="$SCRATCH/$1.csv"
    printf '%s\n%b' "$header" "$2" >"$f"
    "$KACE" simulate --db "$db" --trace "$f" --nodes "$TRACE/openb_node_list_gpu_node.csv" --out "$SCRATCH/bad" \
        --no-figures >"$SCRATCH/$1.out" 2>"$SCRATCH/$1.err"
    local rc=$?
    [ $rc -eq 1 ] || fail "$1: exit $rc, expected 1"
    grep -q "^kace: $f:$3: .*$4" "$SCRATCH/$1.err" || { fail "$1: expected '$f:$3: ...$4'"; cat "$SCRATCH/$1.err"; }
    [ "$(wc -l <"$SCRATCH/$1.err")" -eq 1 ] || fail "$1: more than one line on stderr"
}
bad negative 'a,1,1,1,500,,LS,Running,0,10,0\nb,1,1,1,500,,BE,Running,-5,10,0\n' '3:25' 'negative'
bad text 'a,1,1,1,500,,LS,Running,0,10,0\nb,1,1,1,5x0,,BE,Running,0,10,0\n' '3:9' 'not an integer'
printf 'name,num_gpu,gpu_milli,qos,creation_time,deletion_time,owner\nx,1,1000,BE,1,2,me\n' >"$SCRATCH/unknown.csv"
"$KACE" simulate --db "$db" --trace "$SCRATCH/unknown.csv" --nodes "$TRACE/openb_node_list_gpu_node.csv" \
    --out "$SCRATCH/bad" 2>"$SCRATCH/unknown.err" >/dev/null
grep -q "unknown.csv:1:56: unknown column 'owner'" "$SCRATCH/unknown.err" || fail "unknown column not named"

# --tune on one held-out cell: tune.csv holds every grid point, the chosen one
# has the lowest score, and the report runs with the chosen values.
tune="$SCRATCH/tune"
if "$KACE" simulate --db "$db" --trace "$TRACE/openb_pod_list_default.csv" --tune \
        --tune-traces "$TRACE/openb_pod_list_gpushare80.csv" --tune-gpus 24 --policies kace,Oracle --no-figures \
        --out "$tune" >"$tune.txt" 2>"$tune.err"; then
    [ "$(wc -l <"$tune/tune.csv")" -eq 129 ] || fail "tune: $(wc -l <"$tune/tune.csv") lines in tune.csv, expected 1 + 128"
    chosen=$(sed -n 's/^chosen: \(--min-gain .* --reserve [a-z]*\) (.*/\1/p' "$tune.txt")
    best=$(awk -F, 'NR > 1 && (min == "" || $5 < min) { min = $5; p = "--min-gain " $1 " --min-confidence " $2 " --overload-queue " $3 " --reserve " $4 }
                    END { print p }' "$tune/tune.csv")
    [ -n "$chosen" ] && [ "$chosen" = "$best" ] || fail "tune: chose '$chosen', the lowest row of tune.csv is '$best'"
    grep -q "^kace: $chosen --overload-min-rate" "$tune.txt" || fail "tune: the report does not use the chosen values"
else
    fail "simulate --tune: exit $?"; cat "$tune.err"
fi
"$KACE" simulate --db "$db" --trace "$TRACE/openb_pod_list_default.csv" --tune \
    --tune-traces "$TRACE/openb_pod_list_default.csv" --out "$tune" >/dev/null 2>"$tune.err"
rc=$?
[ $rc -eq 2 ] && grep -q "reported list" "$tune.err" || fail "tune on the reported list: exit $rc, expected a usage error"

# kace schedule: two nodes of one GPU; a third job must share or wait.
answers=$(printf 'submit 1 bert-base-cased_batch8-train BE\nsubmit 2 bert-base-cased_batch8-train BE\nsubmit 3 vit_h_14_batch16-train BE\nstate\nfinish 1\nsubmit 4 no-such-workload\nstate\n' |
    "$KACE" schedule --db "$db" --cluster 2x1)
echo "$answers"
echo "$answers" | grep -q '^start 1 gpu [01]$' || fail "schedule: job 1 did not start"
echo "$answers" | grep -q '^start 2 gpu [01]$' || fail "schedule: job 2 did not start on the idle GPU"
echo "$answers" | grep -qE '^(start 3 gpu [01]|queued 3)$' || fail "schedule: no answer for job 3"
echo "$answers" | grep -q "^error: line 6: unknown workload 'no-such-workload'" || fail "schedule: bad workload"
[ "$(echo "$answers" | grep -c '^ok$')" -eq 1 ] || fail "schedule: finish not acknowledged"
echo "$answers" | grep -q '^busy [12] queued 0 gpus 2$' || fail "schedule: final state"

[ $failures -eq 0 ] && echo "cli_simulate: all passed"
exit $((failures > 0))
