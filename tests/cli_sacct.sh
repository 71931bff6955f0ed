#!/usr/bin/env bash
# kace simulate --sacct on the documented samples (tests/data/sacct/):
#
# - site.sacct + site.map: every count of the report is checked (jobs that
#   never ran, CPU-only, multi-node, GPU shares (gres/mps, gres/shard) replayed
#   as one GPU, workloads by rule, by kace's AdminComment
#   tag and by JobName, jobs without a workload and those a '-' rule made
#   exclusive); the exclusive scenario's GPU-hours equal (End - Start) x GPUs
#   summed over the file by awk, its slowdown is 1 and nothing shares; the
#   sharing scenarios never use more GPU-hours than exclusive; CSV (and PNG
#   with gnuplot) written;
# - without the map the rule's job has no workload (counted, not dropped);
# - local-slurm.sacct (real sacct output of tests/cli_sacct_slurm.sh) replays;
# - bad files (a job step, a bad time, a missing column, --parsable's
#   trailing '|', a short row, a bad TRES count, End before Start, a
#   duplicate job) and bad maps (an unknown field, an unknown workload) fail
#   with exit 1 and one message naming FILE:LINE:COL (map: the rule's line).
#
#   bash cli_sacct.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_sacct.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
SAMPLES=$HERE/data/sacct
export LC_ALL=C
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

db="$SCRATCH/kace.db"
"$KACE" import --db "$db" "$SHARED/kace-v100" >/dev/null || fail "import"

# File GPU-hours: sum of (End - Start, at least 1 s) x GPUs over jobs that ran on GPUs or GPU shares.
file_gpu_hours() {
    awk -F'|' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["AllocTRES"] ~ /gres\/(gpu|mps|shard)=/ && $c["Start"] ~ /^[0-9]/ && $c["End"] ~ /^[0-9]/ {
            g = 1   # a GPU share (gres/mps, gres/shard) counts as one GPU
            if (match($c["AllocTRES"], /gres\/gpu=[0-9]+/)) g = substr($c["AllocTRES"], RSTART + 9, RLENGTH - 9)
            s0 = $c["Start"]; e0 = $c["End"]; gsub(/[-T:]/, " ", s0); gsub(/[-T:]/, " ", e0)
            d = mktime(e0) - mktime(s0); if (d < 1) d = 1; s += d * g }
        END { printf "%.6f", s / 3600 }' "$1"
}
check_scenarios() { # sacct.csv, expected exclusive GPU-hours, label
    local csv=$1 want=$2
    awk -F, -v want="$want" 'NR > 1 { h[$1] = $2; slow[$1] = $3; sh[$1] = $9 }
        END {
            if (!(want > 0 && (h["exclusive"] - want) ^ 2 < 1e-10)) { print "exclusive GPU-hours " h["exclusive"] ", the file says " want; exit 1 }
            if (slow["exclusive"] != 1 || sh["exclusive"] != 0) { print "exclusive: slowdown " slow["exclusive"] ", shared " sh["exclusive"]; exit 1 }
            if (!(h["shard"] <= h["exclusive"] + 1e-9 && h["kace"] <= h["exclusive"] + 1e-9)) { print "sharing used more GPU-hours"; exit 1 }
            if (!(slow["shard"] >= 1 - 1e-9 && slow["kace"] >= 1 - 1e-9)) { print "a slowdown below 1"; exit 1 }
        }' "$csv" || fail "$3: scenarios"
}

# --- the sample with its map ---
out="$SCRATCH/site"
if "$KACE" simulate --db "$db" --sacct "$SAMPLES/site.sacct" --sacct-map "$SAMPLES/site.map" --out "$out" \
        >"$out.txt" 2>"$out.err"; then
    cat "$out.txt"
    grep -q "^sacct $SAMPLES/site.sacct: 13 jobs; 10 ran on GPUs (11 replayed jobs, 1 multi-node jobs split" "$out.txt" ||
        fail "site: job counts"
    grep -q "not replayed: 2 never started or still running, 1 without a GPU" "$out.txt" || fail "site: not-replayed counts"
    grep -q "^  2 jobs held a GPU share (gres/mps or gres/shard): replayed as one GPU each" "$out.txt" || fail "site: GPU shares"
    grep -q "^workloads: 1 by --sacct-map rule, 2 by kace's tag in AdminComment, 4 by JobName; 4 without a stored workload (1 by a '-' rule)" \
        "$out.txt" || fail "site: workload counts"
    grep -q "^cluster: 3 GPUs on 3 nodes" "$out.txt" || fail "site: cluster from the file"
    rows=$(grep -cE '^(exclusive|shard|kace) +[0-9]' "$out.txt")
    [ "$rows" -eq 3 ] || fail "site: $rows scenario rows, expected 3"
    check_scenarios "$out/sacct.csv" "$(file_gpu_hours "$SAMPLES/site.sacct")" site
    [ "$(wc -l <"$out/sacct_cdf.csv")" -eq 202 ] || fail "site: sacct_cdf.csv has not 201 quantiles"
    if command -v gnuplot >/dev/null 2>&1; then
        [ -s "$out/fig_sacct.png" ] || fail "site: fig_sacct.png missing"
    fi
else
    fail "simulate --sacct site: exit $?"; cat "$out.err"
fi

# --- without the map: the rule's job has no workload, the '-' job is found by name ---
"$KACE" simulate --db "$db" --sacct "$SAMPLES/site.sacct" --out "$SCRATCH/nomap" --no-figures >"$SCRATCH/nomap.txt" 2>&1 ||
    fail "simulate without a map: exit $?"
grep -q "^workloads: 0 by --sacct-map rule, 2 by kace's tag in AdminComment, 5 by JobName; 4 without a stored workload (0 by a '-' rule)" \
    "$SCRATCH/nomap.txt" || { fail "nomap: workload counts"; cat "$SCRATCH/nomap.txt"; }

# --- real sacct output of the local Slurm ---
if "$KACE" simulate --db "$db" --sacct "$SAMPLES/local-slurm.sacct" --out "$SCRATCH/local" --no-figures \
        >"$SCRATCH/local.txt" 2>&1; then
    grep -q "^sacct .*: 9 jobs; 8 ran on GPUs (9 replayed jobs, 1 multi-node" "$SCRATCH/local.txt" || fail "local: counts"
    check_scenarios "$SCRATCH/local/sacct.csv" "$(file_gpu_hours "$SAMPLES/local-slurm.sacct")" local
else
    fail "simulate local-slurm.sacct: exit $?"; cat "$SCRATCH/local.txt"
fi
# --cluster overrides the file's nodes.
"$KACE" simulate --db "$db" --sacct "$SAMPLES/site.sacct" --cluster 1x4 --out "$SCRATCH/c14" --no-figures \
    >"$SCRATCH/c14.txt" 2>&1 && grep -q "^cluster: 1 nodes x 4 GPUs" "$SCRATCH/c14.txt" || fail "--cluster 1x4"

# --- bad files: one defect each ---
header='JobID|JobName|Submit|Start|End|AllocTRES|NodeList|State'
good='1|a|2026-01-01T00:00:00|2026-01-01T00:00:01|2026-01-01T01:00:00|gres/gpu=1,node=1|n1|COMPLETED'
bad() { # name, file body (after the header, printf %b), expected "line:col", expected words
    local f="$SCRATCH/$1.sacct"
    printf '%s\n%b' "$header" "$2" >"$f"
    "$KACE" simulate --db "$db" --sacct "$f" --out "$SCRATCH/bad" --no-figures >"$SCRATCH/$1.out" 2>"$SCRATCH/$1.err"
    local rc=$?
    [ $rc -eq 1 ] || fail "$1: exit $rc, expected 1"
    grep -q "^kace: $f:$3: .*$4" "$SCRATCH/$1.err" || { fail "$1: expected '$f:$3: ...$4'"; cat "$SCRATCH/$1.err"; }
    [ "$(wc -l <"$SCRATCH/$1.err")" -eq 1 ] || fail "$1: more than one line on stderr"
}
bad step "$good\n1.batch|batch|2026-01-01T00:00:00|2026-01-01T00:00:01|2026-01-01T01:00:00|cpu=1|n1|COMPLETED\n" '3:2' 'job step: run sacct with -X'
bad time "$good\n2|b|2026-13-01T00:00:00|2026-01-01T00:00:01|2026-01-01T01:00:00|gres/gpu=1|n1|COMPLETED\n" '3:5' 'Submit .* is not a time'
bad short "$good\n2|b|2026-01-01T00:00:00|2026-01-01T00:00:01\n" '3:44' 'row has 4 fields, the header has 8'
bad tres "$good\n2|b|2026-01-01T00:00:00|2026-01-01T00:00:01|2026-01-01T01:00:00|gres/gpu=x|n1|COMPLETED\n" '3:74' "value 'x'"
bad order "$good\n2|b|2026-01-01T00:00:00|2026-01-01T00:30:00|2026-01-01T00:20:00|gres/gpu=1|n1|COMPLETED\n" '3:45' 'End is before Start'
bad dup "$good\n$good\n" '3:1' 'job 1 appears again'
bad state "${good%COMPLETED}DONE\n" '2:86' "State 'DONE' is not a Slurm job state"
bad nodes "${good%n1|COMPLETED}n[3-1]|COMPLETED\n" '2:87' 'range end'
printf 'JobID|JobName|Submit|Start|End|NodeList|State\n' >"$SCRATCH/missing.sacct"
"$KACE" simulate --db "$db" --sacct "$SCRATCH/missing.sacct" --out "$SCRATCH/bad" 2>"$SCRATCH/missing.err" >/dev/null
grep -q "missing.sacct:1:.*missing column 'AllocTRES'" "$SCRATCH/missing.err" || fail "missing column not named"
printf '%s|\n%s|\n' "$header" "$good" >"$SCRATCH/parsable.sacct"
"$KACE" simulate --db "$db" --sacct "$SCRATCH/parsable.sacct" --out "$SCRATCH/bad" 2>"$SCRATCH/parsable.err" >/dev/null
grep -q "parsable.sacct:1:.*use --parsable2" "$SCRATCH/parsable.err" || fail "--parsable output not recognised"

# --- bad maps ---
printf '%s\n%s\n' "$header" "$good" >"$SCRATCH/one.sacct"
printf 'name a bert-base-cased_batch8-train\nowner a bert-base-cased_batch8-train\n' >"$SCRATCH/field.map"
"$KACE" simulate --db "$db" --sacct "$SCRATCH/one.sacct" --sacct-map "$SCRATCH/field.map" --out "$SCRATCH/bad" \
    2>"$SCRATCH/field.err" >/dev/null
[ $? -eq 1 ] && grep -q "field.map:2:1: unknown field 'owner'" "$SCRATCH/field.err" || { fail "map: unknown field"; cat "$SCRATCH/field.err"; }
printf '# a comment\nname a no-such-workload\n' >"$SCRATCH/typo.map"
"$KACE" simulate --db "$db" --sacct "$SCRATCH/one.sacct" --sacct-map "$SCRATCH/typo.map" --out "$SCRATCH/bad" \
    2>"$SCRATCH/typo.err" >/dev/null
[ $? -eq 1 ] && grep -q "typo.map: .*line 2: 'no-such-workload' is not a workload" "$SCRATCH/typo.err" ||
    { fail "map: unknown workload"; cat "$SCRATCH/typo.err"; }
# --sacct takes none of the trace's options.
"$KACE" simulate --db "$db" --sacct "$SCRATCH/one.sacct" --policies kace >/dev/null 2>&1
[ $? -eq 2 ] || fail "--sacct with --policies is not a usage error"

[ $failures -eq 0 ] && echo "cli_sacct: all passed"
exit $((failures > 0))
