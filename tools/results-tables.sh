#!/usr/bin/env bash
# The result tables of docs/results.md, generated from kace's own CSV output.
#
#   tools/results-tables.sh [--kace BIN] [--data DIR] [--work DIR | --from DIR] [--update FILE] [BLOCK...]
#
# Without --from it imports DIR/kace-v100 (default ../shared/data) into a fresh
# store and runs the commands below into --work DIR (default: a temporary
# folder, removed at the end), then prints every BLOCK as markdown between
#   <!-- BEGIN generated: results-tables.sh BLOCK -->  and  <!-- END generated -->
# With --update FILE it replaces those blocks in FILE instead (every requested
# block must have its markers there). With --from DIR it runs nothing and
# reads the CSVs of an earlier --work DIR; the eval-* blocks also read a
# `make demo` folder (--from kace-demo: its CSVs are `kace eval`'s).
#
# Blocks (default: all) and the command each one reads:
#   eval-headline eval-size eval-unseen eval-triples eval-error eval-confidence
#                  kace eval --out W/eval --no-figures        (what make demo runs;
#                  eval-confidence also reads its stdout, W/eval/stdout.txt)
#   seeds          seed 0 from the eval run; kace eval --mode clean --no-xu --no-figures
#                  with --kace-seed 1..3 and with --kace-monotone shares (W/seeds/*); the
#                  mean row is the mean of seeds 0..3, what --kace-seeds 4 reports
#   groups splits  kace eval --groups --splits --no-figures   (W/beyond)
#   sim sim-sweep  kace simulate --no-figures --trace openb_pod_list_{default,gpushare40}.csv
#                  --gpus 16,24,32,48,64                     (W/sim/LIST-G, with stdout.txt)
#   tune           kace simulate --tune --no-figures --policies kace on the default list (W/tune)
# Columns are found by their CSV header names; timings are never printed, so
# the output depends only on the data and the code (tests/cli_results_tables.sh).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KACE=$here/build/kace
DATA=$here/../shared/data
WORK=""
FROM=""
UPDATE=""
ALL="eval-headline eval-size eval-unseen eval-triples eval-error eval-confidence seeds groups splits sim sim-sweep tune"
BLOCKS=""
die() { echo "results-tables.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --kace) KACE=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --update) UPDATE=$2; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ " $ALL " == *" $1 "* ]] || die "unknown block '$1' (blocks: $ALL)"; BLOCKS="$BLOCKS $1"; shift ;;
    esac
done
BLOCKS=${BLOCKS:-$ALL}
[ -z "$UPDATE" ] || [ -f "$UPDATE" ] || die "no file $UPDATE"
want() { for b in $BLOCKS; do [[ $b == $1* ]] && return 0; done; return 1; }

LISTS="default gpushare40"
SIZES="16 24 32 48 64"
cleanup=""
trap '[ -z "$cleanup" ] || rm -rf "$cleanup"' EXIT

# ---- running the commands ------------------------------------------------
run() { # NAME OUTFILE CMD...: runs CMD, stdout to OUTFILE, stderr shown on failure
    local name=$1 out=$2; shift 2
    if ! "$@" >"$out" 2>"$out.err"; then
        cat "$out.err" >&2
        echo "results-tables.sh: '$name' failed: $*" >&2
        return 1
    fi
}
run_all() {
    local W=$1 db=$1/kace.db trace=$DATA/alibaba-gpu-2023
    [ -x "$KACE" ] || die "no kace binary at $KACE (make build, or --kace BIN)"
    [ -d "$DATA/kace-v100" ] || die "no $DATA/kace-v100 (--data DIR)"
    mkdir -p "$W"
    rm -f "$db"
    run import "$W/import.txt" "$KACE" import --db "$db" "$DATA/kace-v100"
    local pids=()
    # The evaluation with the Xu et al. forest and the tuning are the slow
    # parts: they run beside the rest.
    if want eval || want seeds; then
        mkdir -p "$W/eval"
        run eval "$W/eval/stdout.txt" "$KACE" eval --db "$db" --out "$W/eval" --no-figures & pids+=($!)
    fi
    if want tune; then
        run tune "$W/tune.txt" "$KACE" simulate --tune --db "$db" --trace "$trace/openb_pod_list_default.csv" \
            --policies kace --no-figures --out "$W/tune" & pids+=($!)
    fi
    (
        set -e
        if want seeds; then
            local s
            for s in 1 2 3; do
                run "seed $s" "$W/seed-$s.txt" "$KACE" eval --db "$db" --mode clean --no-xu --no-figures \
                    --kace-seed "$s" --out "$W/seeds/seed-$s"
            done
            run "monotone shares" "$W/shares.txt" "$KACE" eval --db "$db" --mode clean --no-xu --no-figures \
                --kace-monotone shares --out "$W/seeds/shares"
        fi
        if want groups || want splits; then
            run beyond "$W/beyond.txt" "$KACE" eval --db "$db" --groups --splits --no-figures --out "$W/beyond"
        fi
        if want sim; then
            local l g
            for l in $LISTS; do
                for g in $SIZES; do
                    mkdir -p "$W/sim/$l-$g"
                    run "simulate $l $g" "$W/sim/$l-$g/stdout.txt" "$KACE" simulate --db "$db" \
                        --trace "$trace/openb_pod_list_$l.csv" --gpus "$g" --no-figures --out "$W/sim/$l-$g"
                done
            done
        fi
    ) & pids+=($!)
    local p rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

if [ -n "$FROM" ]; then
    [ -d "$FROM" ] || die "no folder $FROM"
    W=$FROM
else
    if [ -z "$WORK" ]; then
        WORK=$(mktemp -d "${TMPDIR:-/tmp}/kace-results.XXXXXX")
        cleanup=$WORK
    fi
    run_all "$WORK" || die "a command failed"
    W=$WORK
fi
E=$W/eval
[ -d "$E" ] || E=$W # a `make demo` folder holds the eval CSVs at its top

need() { for f; do [ -f "$f" ] || die "no $f (run without --from, or give the folder of an earlier --work)"; done; }

# ---- the tables ----------------------------------------------------------
# Common awk: CSV columns by header name (col["name"]), numbers as %.3f or
# "–" when not a number, mean of a column over rows that hold a number.
AWK_LIB='
function num(v) { return v ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ }
function f3(v) { return num(v) ? sprintf("%.3f", v) : "–" }
function f1(v) { return num(v) ? sprintf("%.1f", v) : "–" }
function f2(v) { return num(v) ? sprintf("%.2f", v) : "–" }
function header(   i) { delete col; for (i = 1; i <= NF; i++) col[$i] = i }
function get(name) { if (!(name in col)) { print "results-tables.sh: no column \"" name "\" in " FILENAME > "/dev/stderr"; err = 1; exit 1 } return $(col[name]) }
'
awkcsv() { # PROGRAM [-v VAR=VALUE]... FILE...
    local prog=$1 vars=()
    shift
    while [ "${1:-}" = -v ]; do vars+=(-v "$2"); shift 2; done
    awk -F, "${vars[@]}" "$AWK_LIB$prog" "$@" || { : >"$gen_dir/failed"; return 1; }
}

POLICIES="kace,KACE,Xu,Best rule,MEMCAP,MEM%,SM%,Random"
POLICY_HEAD="| kace | KACE | Xu et al. | Best rule | MEMCAP | MEM% | SM% | Random |"

# The mean over targets of every policy column of an unseen/triples CSV,
# as "| v | v | ... |" (mean of the targets that have a number).
target_means() { # FILE
    awkcsv '
    FNR == 1 { header(); n = split(P, pol, ","); next }
    { for (i = 1; i <= n; i++) { v = get(pol[i]); if (num(v)) { s[i] += v; c[i]++ } } rows++ }
    END { if (err) exit 1; out = ""; for (i = 1; i <= n; i++) out = out " " (c[i] ? f3(s[i] / c[i]) : "–") " |"; print out }
    ' -v P="$POLICIES" "$1"
}
rows_of() { awk 'NR > 1 && NF' "$1" | wc -l | tr -d ' '; }

gen_eval-headline() {
    need "$E/summary_paper.csv" "$E/summary_clean.csv"
    echo "| n_occur = 3 $POLICY_HEAD"
    echo "|---|---|---|---|---|---|---|---|---|"
    echo "| paper (published) | – | 0.906 | 0.813 | 0.837 | 0.785 | 0.718 | 0.354 | 0.543 |"
    local m
    for m in paper clean; do
        awkcsv '
        FNR == 1 { header(); n = split(P, pol, ","); next }
        get("n_occur") == 3 { out = "| " M " mode |"; for (i = 1; i <= n; i++) out = out " " f3(get(pol[i])) " |"; print out }
        END { if (err) exit 1 }' -v P="$POLICIES" -v M=$m "$E/summary_$m.csv"
    done
}

gen_eval-size() {
    need "$E/summary_paper.csv" "$E/summary_clean.csv"
    awkcsv '
    FNR == 1 { header(); f++; next }
    { n = $(col["n_occur"]); occ[n] = 1
      k[f, n] = get("kace"); K[f, n] = get("KACE"); x[f, n] = get("Xu"); b[f, n] = get("Best rule") }
    function line(label, arr, fi,   o, i) {
        o = "| " label " |"; for (i = lo; i <= hi; i++) o = o " " f3(arr[fi, i]) " |"; print o }
    END {
        if (err) exit 1
        lo = 1e9; hi = -1; for (i in occ) { if (i + 0 < lo) lo = i + 0; if (i + 0 > hi) hi = i + 0 }
        split("0.876 0.906 0.921 0.930 0.921 0.940 0.930 0.957 0.946", pk, " ")
        split("0.825 0.837 0.862 0.866 0.883 0.890 0.898 0.914 0.937", pb, " ")
        o = "| n_occur |"; s = "|---|"; for (i = lo; i <= hi; i++) { o = o " " i " |"; s = s "---|" }; print o; print s
        o = "| KACE, published |"; for (i = lo; i <= hi; i++) o = o " " ((i - 1) in pk ? pk[i - 1] : "–") " |"; print o
        line("KACE, paper mode", K, 1); line("KACE, clean mode", K, 2)
        o = "| Best rule, published |"; for (i = lo; i <= hi; i++) o = o " " ((i - 1) in pb ? pb[i - 1] : "–") " |"; print o
        line("Best rule (both modes)", b, 2)
        line("Xu et al., paper mode", x, 1); line("Xu et al., clean mode", x, 2)
        line("kace, paper mode", k, 1); line("**kace, clean mode**", k, 2)
    }' "$E/summary_paper.csv" "$E/summary_clean.csv"
}

gen_eval-unseen() {
    need "$E/unseen_paper.csv" "$E/unseen_clean.csv" "$E/triples_paper.csv" "$E/triples_clean.csv"
    echo "| test $POLICY_HEAD"
    echo "|---|---|---|---|---|---|---|---|---|"
    echo "| unseen families, published | – | 0.888 | 0.860 | – | 0.793 | 0.711 | 0.336 | 0.524 |"
    echo "| unseen families ($(rows_of "$E/unseen_paper.csv") targets), paper mode |$(target_means "$E/unseen_paper.csv")"
    echo "| unseen families ($(rows_of "$E/unseen_clean.csv") targets), clean mode |$(target_means "$E/unseen_clean.csv")"
    echo "| three at once, published | – | 0.958 | 0.892 | – | 0.630 | 0.748 | 0.237 | 0.432 |"
    echo "| three at once ($(rows_of "$E/triples_paper.csv") targets), paper mode |$(target_means "$E/triples_paper.csv")"
    echo "| three at once ($(rows_of "$E/triples_clean.csv") targets), clean mode |$(target_means "$E/triples_clean.csv")"
}

gen_eval-triples() {
    need "$E/triples_clean.csv"
    echo "| target (clean mode) | candidates | kace | KACE | Xu et al. | Best rule | MEMCAP |"
    echo "|---|---|---|---|---|---|---|"
    awkcsv '
    FNR == 1 { header(); next }
    { printf "| %s | %s | %s | %s | %s | %s | %s |\n", get("target"), get("candidates"), f3(get("kace")),
             f3(get("KACE")), f3(get("Xu")), f3(get("Best rule")), f3(get("MEMCAP")) }
    END { if (err) exit 1 }' "$E/triples_clean.csv"
}

gen_eval-error() {
    need "$E/splits_paper.csv" "$E/splits_clean.csv"
    echo "| n_occur | KACE MSE, paper | KACE R², paper | KACE MSE, clean | KACE R², clean | kace R², clean | kace MAE %, clean |"
    echo "|---|---|---|---|---|---|---|"
    awkcsv '
    FNR == 1 { header(); f++; next }
    { n = get("n_occur"); occ[n] = 1
      add(f, n, "mse", get("mse")); add(f, n, "r2", get("r2"))
      add(f, n, "kr2", get("kace_r2")); add(f, n, "mae", get("kace_mae_pct")) }
    function add(fi, n, k, v) { if (num(v)) { s[fi, n, k] += v; c[fi, n, k]++ } }
    function m(fi, n, k) { return c[fi, n, k] ? s[fi, n, k] / c[fi, n, k] : "x" }
    END {
        if (err) exit 1
        for (i = 2; i <= 100; i++) if (i in occ)
            printf "| %d | %s | %s | %s | %s | %s | %s |\n", i, f3(m(1, i, "mse")), f3(m(1, i, "r2")),
                   f3(m(2, i, "mse")), f3(m(2, i, "r2")), f3(m(2, i, "kr2")), f1(m(2, i, "mae"))
    }' "$E/splits_paper.csv" "$E/splits_clean.csv"
}

gen_eval-confidence() {
    need "$E/splits_paper.csv" "$E/splits_clean.csv"
    echo "| test colocations | error, confidence ≥ median | error, below median |"
    echo "|---|---|---|"
    local m
    for m in paper clean; do
        awkcsv '
        FNR == 1 { header(); next }
        { a = get("kace_err_confident_pct"); b = get("kace_err_unsure_pct")
          if (num(a)) { sa += a; ca++ } if (num(b)) { sb += b; cb++ } }
        END { if (err) exit 1
              printf "| published splits, %s mode (mean over splits) | %s%% | %s%% |\n", M,
                     f1(ca ? sa / ca : "x"), f1(cb ? sb / cb : "x") }' -v M=$m "$E/splits_$m.csv"
    done
    # The family-exclusion studies report it on stdout only (the same in both modes).
    local out=$E/stdout.txt
    if [ -f "$out" ]; then
        awk '
        /^== Unseen workload families/ { s = "unseen families (targets pooled)" }
        /^== Three workloads at once/ { s = "three at once (targets pooled)" }
        /^== Partner choice/ { s = "" }
        /^kace confidence:/ && s != "" && !(s in done) {
            match($0, /sum [0-9.]+%/); a = substr($0, RSTART + 4, RLENGTH - 4)
            match($0, /, [0-9.]+% below/); b = substr($0, RSTART + 2, RLENGTH - 8)
            printf "| %s | %s | %s |\n", s, a, b; done[s] = 1 }' "$out"
    fi
}

seed_values() { # DIR: kace's n_occur 2..10, unseen and triples means (clean mode), unrounded, one line
    need "$1/summary_clean.csv" "$1/unseen_clean.csv" "$1/triples_clean.csv"
    awkcsv '
    FNR == 1 { header(); f++; next }
    f == 1 { o = o " " get("kace") }
    f > 1 { v = get("kace"); if (num(v)) { s[f] += v; c[f]++ } }
    END { if (err) exit 1; printf "%s %s %s\n", o, c[2] ? s[2] / c[2] : "x", c[3] ? s[3] / c[3] : "x" }
    ' "$1/summary_clean.csv" "$1/unseen_clean.csv" "$1/triples_clean.csv"
}

gen_seeds() {
    local S=$W/seeds
    {
        echo "seed 0 (default)|$(seed_values "$E")"
        echo "seed 1|$(seed_values "$S/seed-1")"
        echo "seed 2|$(seed_values "$S/seed-2")"
        echo "seed 3|$(seed_values "$S/seed-3")"
        echo "constraints fixed on (\`--kace-monotone shares\`), seed 0|$(seed_values "$S/shares")"
    } | awk -F'|' '
    { label[NR] = $1; n[NR] = split($2, v, " "); for (i = 1; i <= n[NR]; i++) val[NR, i] = v[i] }
    function row(l, r,   o, i) { o = "| " l " |"; for (i = 1; i <= n[r]; i++) o = o " " sprintf("%.3f", val[r, i]) " |"; print o }
    END {
        print "| clean mode | n_occur 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | unseen | triples |"
        print "|---|---|---|---|---|---|---|---|---|---|---|---|"
        for (r = 1; r <= 4; r++) row(label[r], r)
        for (i = 1; i <= n[1]; i++) val[9, i] = (val[1, i] + val[2, i] + val[3, i] + val[4, i]) / 4
        n[9] = n[1]; row("mean of seeds 0..3 (what `--kace-seeds 4` reports)", 9)
        row(label[5], 5)
    }'
}

gen_groups() {
    local B=$W/beyond
    need "$B/groups_summary.csv"
    echo "| | kace (B&B) | MEMCAP | SM% | MEM% | Random |"
    echo "|---|---|---|---|---|---|"
    awkcsv '
    FNR == 1 { header(); next }
    { k = get("k"); f = B "/groups_k" k ".csv"; t = 0
      while ((getline line < f) > 0) if (line != "") t++
      close(f)
      printf "| k = %s (%d targets) | **%s** | %s | %s | %s | %s |\n", k, t - 1, f3(get("kace_bb")), f3(get("MEMCAP")),
             f3(get("SM%")), f3(get("MEM%")), f3(get("Random")) }
    END { if (err) exit 1 }' -v B="$B" "$B/groups_summary.csv"
}

gen_splits() {
    local B=$W/beyond
    need "$B/splits_advisor.csv" "$B/splits_latency.csv"
    echo "| policy | advisor | fixed 50/50 | fixed 100/100 |"
    echo "|---|---|---|---|"
    awkcsv '
    FNR == 1 { header(); next }
    { p = get("policy"); p = p == "max-sum" ? "max throughput sum" : p == "max-min" ? "max-min fairness" : p
      printf "| %s | **%s** (%.4f) | %s | %s |\n", p, f3(get("advisor")), get("advisor"), f3(get("fixed50")),
             f3(get("fixed100")) }
    END { if (err) exit 1 }' "$B/splits_advisor.csv"
    echo
    awkcsv '
    FNR == 1 { header(); next }
    { n++; t[n] = get("target_pct"); c[n] = get("cases"); a[n] = get("advisor")
      h[n] = get("fixed50"); o[n] = get("fixed100"); be[n] = get("be_oracle") }
    END {
        if (err) exit 1
        l = "| LS target (× exclusive) |"; s = "|---|"
        for (i = 1; i <= n; i++) { l = l " " t[i] "% |"; s = s "---|" }; print l; print s
        l = "| cases (a measured split meets it) |"; for (i = 1; i <= n; i++) l = l " " c[i] " |"; print l
        l = "| met, advisor |"; for (i = 1; i <= n; i++) l = l " " f3(a[i]) " |"; print l
        l = "| met, 50/50 / 100/100 |"; for (i = 1; i <= n; i++) l = l " " f3(h[i]) " / " f3(o[i]) " |"; print l
        l = "| best effort / Oracle |"; for (i = 1; i <= n; i++) l = l " " f3(be[i]) " |"; print l
    }' "$B/splits_latency.csv"
}

sim_gpus() { # the "cluster: N GPUs" of a run's stdout, or "?"
    local n
    # sed -n 1p, not head -1: it reads to the end (no SIGPIPE under pipefail).
    n=$(sed -n 's/^cluster: \([0-9]*\) GPUs.*/\1/p' "$1" 2>/dev/null | sed -n 1p)
    echo "${n:-?}"
}

gen_sim() {
    local l d files=()
    for l in $LISTS; do files+=("$W/sim/$l-32/policies.csv"); done
    need "${files[@]}"
    awkcsv '
    FNR == 1 { header(); f++; np = 0; next }
    { np++; name[np] = get("policy"); jct[f, np] = get("mean_jct_h") }
    END {
        if (err) exit 1
        split(L, lists, " ")
        o = "| mean JCT (h), --gpus 32 |"; s = "|---|"
        for (i = 1; i <= np; i++) { o = o " " (name[i] == "kace" ? "**kace**" : name[i]) " |"; s = s "---|" }
        print o; print s
        for (j = 1; j <= f; j++) {
            o = "| " lists[j] " |"
            for (i = 1; i <= np; i++) o = o " " (name[i] == "kace" ? "**" f2(jct[j, i]) "**" : f2(jct[j, i])) " |"
            print o
        }
    }' -v L="$LISTS" "${files[@]}"
    echo
    echo "| list (GPUs) | policy | mean JCT (h) | p95 JCT (h) | mean queue (h) | makespan (d) | efficiency | time shared | LS jobs at target |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for l in $LISTS; do
        d=$W/sim/$l-32
        awkcsv '
        FNR == 1 { header(); next }
        { printf "| %s | %s | %s | %s | %s | %s | %s | %.1f%% | %.1f%% |\n", L, get("policy"), f2(get("mean_jct_h")),
                 f2(get("p95_jct_h")), f2(get("mean_queue_h")), f1(get("makespan_d")), f3(get("efficiency")),
                 100 * get("shared_fraction"), 100 * get("ls_met_fraction") }
        END { if (err) exit 1 }' -v L="$l ($(sim_gpus "$d/stdout.txt"))" "$d/policies.csv"
    done
}

gen_sim-sweep() {
    local l g d
    echo "| list | --gpus (GPUs) | kace | best other | Oracle | kace vs best other | kace vs Oracle |"
    echo "|---|---|---|---|---|---|---|"
    for l in $LISTS; do
        for g in $SIZES; do
            d=$W/sim/$l-$g
            need "$d/policies.csv"
            awkcsv '
            FNR == 1 { header(); next }
            { p = get("policy"); v = get("mean_jct_h") + 0
              if (p == "kace") k = v; else if (p == "Oracle") o = v
              else if (best == "" || v < bv) { best = p; bv = v } }
            END {
                if (err) exit 1
                kb = sprintf("%.2f", k) == sprintf("%.2f", bv) ? " (tie)" : ""
                ks = k < bv && kb == "" ? "**" f2(k) "**" : f2(k)
                printf "| %s | %s (%s) | %s | %s %s%s | %s | %s | %s |\n", L, G, N, ks, best, f2(bv), kb,
                       f2(o), pct(k / bv - 1), pct(k / o - 1) }
            function pct(x) { x = 100 * x; return x > -0.05 && x < 0.05 ? "0" : sprintf("%+.1f%%", x) }' \
                -v L="$l" -v G="$g" -v N="$(sim_gpus "$d/stdout.txt")" "$d/policies.csv"
        done
    done
}

gen_tune() {
    local T=$W/tune/tune.csv
    need "$T"
    # The built-in defaults, as kace simulate reports them before its table.
    local defaults=""
    [ -f "$W/sim/default-32/stdout.txt" ] &&
        defaults=$(sed -n 's/^kace: --min-gain \([^ ]*\) --min-confidence \([^ ]*\) --overload-queue \([^ ]*\) --reserve \([^ ]*\) .*/\1,\2,\3,\4/p' \
            "$W/sim/default-32/stdout.txt" | sed -n 1p)
    echo "| rank | min_gain | min_confidence | overload_queue | reserve | geometric mean of kace's mean JCT (h) |"
    echo "|---|---|---|---|---|---|"
    awkcsv '
    FNR == 1 { header(); next }
    { n++; g[n] = get("geomean_jct_h") + 0
      q = get("overload_queue"); q = q + 0 < 0 ? "never" : q
      key[n] = get("min_gain") "," get("min_confidence") "," get("overload_queue") "," get("reserve")
      row[n] = get("min_gain") " | " get("min_confidence") " | " q " | " get("reserve") }
    END {
        if (err) exit 1
        # rank by geometric mean, grid order on ties (as --tune chooses)
        for (i = 1; i <= n; i++) { r = 1; for (j = 1; j <= n; j++) if (g[j] < g[i] || (g[j] == g[i] && j < i)) r++; rank[i] = r }
        for (r = 1; r <= 5; r++) for (i = 1; i <= n; i++) if (rank[i] == r)
            printf "| %d%s | %s | %.2f |\n", r, r == 1 ? " (chosen)" : "", row[i], g[i]
        if (D != "") for (i = 1; i <= n; i++) if (key[i] == D)
            printf "| %d of %d | %s (the built-in defaults) | %.2f |\n", rank[i], n, row[i], g[i]
    }' -v D="$defaults" "$T"
}

# ---- output --------------------------------------------------------------
gen_dir=$(mktemp -d "${TMPDIR:-/tmp}/kace-tables.XXXXXX")
cleanup="$cleanup $gen_dir"
trap 'rm -rf $cleanup' EXIT
for b in $BLOCKS; do
    {
        echo "<!-- BEGIN generated: results-tables.sh $b -->"
        "gen_$b"
        echo "<!-- END generated -->"
    } >"$gen_dir/$b.md" || die "block $b could not be generated"
done

[ ! -e "$gen_dir/failed" ] || die "a table could not be generated (see above)"
if [ -z "$UPDATE" ]; then
    for b in $BLOCKS; do cat "$gen_dir/$b.md"; echo; done
    exit 0
fi
for b in $BLOCKS; do
    grep -qxF "<!-- BEGIN generated: results-tables.sh $b -->" "$UPDATE" || die "$UPDATE has no block '$b'"
done
awk -v D="$gen_dir" -v B=" $BLOCKS " '
    /^<!-- BEGIN generated: results-tables\.sh [a-z0-9-]+ -->$/ {
        name = $5
        if (index(B, " " name " ")) {
            f = D "/" name ".md"
            while ((getline line < f) > 0) print line
            close(f); skip = 1; done[name]++; next
        }
    }
    skip && /^<!-- END generated -->$/ { skip = 0; next }
    !skip { print }
    END {
        if (skip) { print "results-tables.sh: a block has no END marker" > "/dev/stderr"; exit 1 }
        n = split(B, want, " ")
        for (i = 1; i <= n; i++) if (done[want[i]] != 1) {
            print "results-tables.sh: block " want[i] " replaced " done[want[i]] + 0 " times (once expected)" > "/dev/stderr"; exit 1 }
    }
' "$UPDATE" >"$gen_dir/updated" || die "cannot update $UPDATE"
cat "$gen_dir/updated" >"$UPDATE"
