#!/usr/bin/env bash
# kace export: a store's dataset written as the CSV files kace import reads.
#
#   bash cli_export.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# 1. The V100 reference data: import -> export -> import into a fresh store.
#    The two stores hold the same workloads, profile values (exactly: the
#    same doubles, compared by SQLite's =), runs (set, status, members in
#    slot order, MPS shares, throughputs exactly) and splits; kace info says
#    the same; and an export of the re-imported store is byte-identical.
#    A raw campaign's runs of one pair at mirrored shares round-trip as a raw campaign.
# 2. Runs measured by kace measure with stand-in workloads (no GPU): two
#    repetitions, an MPS split, time-sliced runs (in their own set and in an
#    MPS run's set), a failed run and a solo curve point. The export keeps
#    each run (mode and repetition in the set's name), re-imports folder by
#    folder with the sources, and exports again byte-identically; the failed
#    run, which has no throughput, is in runs.csv and said to be left out.
# 3. Errors: a non-empty folder without --force, an unknown set, no store, a
#    file as DIR. The store is only read (its file unchanged).
# 4. --dataset (a device campaign's dataset folder) of the measured runs: each
#    colocation once, the mean over its ok repetitions, whatever set measured
#    it; the spread of the repeated ones; every run in campaign/runs.csv; a
#    README with the calls, the noise floor and how the processes ended; the
#    same bytes each time; --verify passes it and fails an edited one; the
#    engine's stored ncu exports against the profiles (ncu/compare.csv).
set -uo pipefail
KACE=${1:?usage: cli_export.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
build=$(dirname "$KACE")
export LC_ALL=C
unset KACE_DB

source "$(dirname "$0")/lib_test.sh" # fail, check_eq, need, finish
need sqlite3 sha256sum
[ -f "$REF/colocations/pairs.csv" ] || { echo "FAIL: reference data not found under $REF" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/bin" || exit 1

# How two stores compare: each line "what: A B matched" where all three must be equal.
# Profile values (NULL = known missing) and throughputs are compared as doubles (IS).
# A run is compared by the set its file gives it (a time-sliced run's set with
# -timeslice, a repetition's with -rep<N>), its status, and its members in slot order.
compare_stores() { # A B
    local run_set="CASE WHEN r.mode='timeslice' AND instr(r.set_name, 'timeslice')=0 THEN r.set_name || '-timeslice'
                    ELSE r.set_name END || CASE WHEN r.repetition > 0 THEN '-rep' || r.repetition ELSE '' END"
    local said="EXISTS(SELECT 1 FROM %s.run_members t WHERE t.run_id=r.id AND t.throughput IS NOT NULL)"
    local sig="$run_set || '|' || r.status || '|' || (SELECT group_concat(x, ' ') FROM (SELECT w.name || '@' ||
               m.mps_pct AS x FROM %s.run_members m JOIN %s.workloads w ON w.id=m.workload_id WHERE m.run_id=r.id
               ORDER BY m.slot))"
    local members="SELECT ${sig//%s/DB} AS sig, m.slot, m.throughput FROM DB.runs r JOIN DB.run_members m ON
                   m.run_id=r.id WHERE ${said//%s/DB}"
    # The workloads of the dataset: profiled, or in a run with a throughput.
    local in_data="SELECT w.name, w.family, w.batch FROM DB.workloads w WHERE w.id IN (SELECT workload_id FROM
                   DB.profiles) OR w.id IN (SELECT m.workload_id FROM DB.run_members m JOIN DB.runs r ON
                   r.id=m.run_id WHERE ${said//%s/DB})"
    sqlite3 "$1" "ATTACH '$2' AS b;
        SELECT 'workloads: ' || (SELECT count(*) FROM (${in_data//DB/main})) || ' ' || (SELECT count(*) FROM (${in_data//DB/b}))
            || ' ' || (SELECT count(*) FROM (${in_data//DB/main}) JOIN (${in_data//DB/b}) USING(name, family, batch));
        SELECT 'profile values: ' || (SELECT count(*) FROM main.profiles) || ' ' || (SELECT count(*) FROM b.profiles)
            || ' ' || (SELECT count(*) FROM main.profiles p JOIN main.workloads w ON w.id=p.workload_id
                       JOIN b.workloads v ON v.name=w.name JOIN b.profiles q ON q.workload_id=v.id
                       AND q.metric=p.metric AND q.value IS p.value);
        SELECT 'run members: ' || (SELECT count(*) FROM (${members//DB/main})) || ' '
            || (SELECT count(*) FROM (${members//DB/b})) || ' '
            || (SELECT count(*) FROM (${members//DB/main}) x JOIN (${members//DB/b}) y
                ON y.sig=x.sig AND y.slot=x.slot AND y.throughput IS x.throughput);
        SELECT 'splits: ' || (SELECT count(*) FROM main.splits) || ' ' || (SELECT count(*) FROM b.splits) || ' '
            || (SELECT count(*) FROM main.splits s JOIN b.splits t
                USING(n_occur, seed, is_train, paper_fit, workload1, workload2));"
}
check_same() { # WHAT A B
    local out line
    out=$(compare_stores "$2" "$3") || { fail "$1: the comparison failed"; return; }
    while read -r line; do
        read -r -a n <<<"${line#*: }"
        [ "${#n[@]}" = 3 ] && [ "${n[0]}" = "${n[1]}" ] && [ "${n[1]}" = "${n[2]}" ] || fail "$1: $line"
    done <<<"$out"
    echo "$out"
}

# ---- 1. the V100 reference data ---------------------------------------------------
A="$SCRATCH/a.db" B="$SCRATCH/b.db"
"$KACE" import --quiet --db "$A" "$REF" || { echo "FAIL: importing $REF" >&2; exit 1; }
before=$(sha256sum <"$A")
out=$("$KACE" export --db "$A" "$SCRATCH/v1" 2>"$SCRATCH/err") || fail "export: $(cat "$SCRATCH/err")"
[ -s "$SCRATCH/err" ] && fail "export wrote to stderr: $(cat "$SCRATCH/err")"
grep -q "52 workloads, 1123 profile values, 7256 runs (491 failed), 8145 split rows" <<<"$out" ||
    fail "export summary: $out"
check_eq "the store after export" "$before" "$(sha256sum <"$A")"
# (A read-only open by a user who may write the folder leaves SQLite's -wal and -shm, as
# kace info does: the file itself is what must not change.)
[ -f "$SCRATCH/v1/README.md" ] || fail "no README.md"
# The failed runs of the raw campaigns are raw campaigns again; whole sets are colocation files.
head -1 "$SCRATCH/v1/data/k2/pairs.csv" | grep -q '^workload1,workload2,w1throughput,w2throughput,w1mps_pct,w2mps_pct$' ||
    fail "pairs.csv header: $(head -1 "$SCRATCH/v1/data/k2/pairs.csv")"
grep -q '"(w1_10, w2_90)"' "$SCRATCH/v1/data/k2/partitions_0520_inf-inf.csv" || fail "raw campaign header"
find "$SCRATCH/v1" -name '.*' | grep -q . && fail "temporary files left: $(find "$SCRATCH/v1" -name '.*')"

"$KACE" import --quiet --db "$B" "$SCRATCH/v1" 2>"$SCRATCH/err" || fail "re-import: $(cat "$SCRATCH/err")"
check_same "V100 re-imported" "$A" "$B"
check_eq "kace info" "$("$KACE" info --db "$A" | tail -n +2)" "$("$KACE" info --db "$B" | tail -n +2)"
"$KACE" export --quiet --db "$B" "$SCRATCH/v2" || fail "second export"
diff -r "$SCRATCH/v1" "$SCRATCH/v2" >"$SCRATCH/diff" || fail "the second export differs: $(head -5 "$SCRATCH/diff")"

# Mirrored shares: a raw campaign's A+B at 10/90 and B+A at 90/10 are two runs, but one
# colocation to a colocation file, so the set is written as a raw campaign again.
printf '%s\n' 'workload1,workload2,"(LS10, BE90)","(LS90, BE10)","(LS100, BE100)"' \
    'wa,wb,"(1.5, 2.25)","(None, None)","(None, None)"' 'wb,wa,"(None, None)","(3.125, 0.5)","(4, 5)"' >"$SCRATCH/mirror.csv"
"$KACE" import --quiet --create-workloads --db "$SCRATCH/mirror.db" "$SCRATCH/mirror.csv" || fail "import mirror.csv"
"$KACE" export --quiet --db "$SCRATCH/mirror.db" "$SCRATCH/mirror1" || fail "export the mirrored runs"
check_eq "mirrored runs, as a raw campaign" 'workload1,workload2,"(w1_10, w2_90)","(w1_90, w2_10)","(w1_100, w2_100)"' \
    "$(head -1 "$SCRATCH/mirror1/data/k2/mirror.csv")"
"$KACE" import --quiet --create-workloads --db "$SCRATCH/mirror2.db" "$SCRATCH/mirror1" || fail "re-import the mirrored runs"
check_same "mirrored runs re-imported" "$SCRATCH/mirror.db" "$SCRATCH/mirror2.db" >/dev/null

# --set: that set's runs only, the profiles, no splits.
"$KACE" export --quiet --db "$A" --set pairs "$SCRATCH/only-pairs" || fail "export --set pairs"
check_eq "--set pairs files" "data/k2/pairs.csv" \
    "$(cd "$SCRATCH/only-pairs" && find . -path './data/k*' -name '*.csv' | sed 's|^\./||')"
[ -e "$SCRATCH/only-pairs/splits.csv" ] && fail "--set wrote the splits"

# ---- 3. errors ----------------------------------------------------------------------
"$KACE" export --db "$A" "$SCRATCH/v1" 2>"$SCRATCH/err" && fail "a non-empty folder was written without --force"
grep -q "is not empty (pass --force" "$SCRATCH/err" || fail "non-empty folder message: $(cat "$SCRATCH/err")"
"$KACE" export --quiet --force --db "$A" "$SCRATCH/v1" || fail "--force"
diff -r "$SCRATCH/v1" "$SCRATCH/v2" >/dev/null || fail "--force over the same export changed it"
"$KACE" export --db "$A" --set nosuch "$SCRATCH/x" 2>"$SCRATCH/err" && fail "an unknown set was exported"
grep -q "no set 'nosuch'" "$SCRATCH/err" || fail "unknown set message: $(cat "$SCRATCH/err")"
[ -e "$SCRATCH/x" ] && fail "a refused export created its folder"
"$KACE" export --db "$SCRATCH/none.db" "$SCRATCH/x" 2>"$SCRATCH/err" && fail "exported a missing store"
grep -q "no such store" "$SCRATCH/err" || fail "missing store message: $(cat "$SCRATCH/err")"
[ -e "$SCRATCH/none.db" ] && fail "export created a store"
"$KACE" export --db "$A" "$A" 2>"$SCRATCH/err" && fail "exported into a file"
grep -q "not a folder" "$SCRATCH/err" || fail "file as DIR message: $(cat "$SCRATCH/err")"
"$KACE" export --db "$A" 2>/dev/null; check_eq "no DIR: usage" 2 $?

# ---- 2. measured runs ---------------------------------------------------------------
# Copies under the scratch folder: every process of this part has it in its command
# line, so that a stray (after a failure) is found and ended by its id.
cp "$build/tests/kace-test-worker" "$SCRATCH/bin/worker" || exit 1
cp "$build/tests/kace-test-mps-control" "$SCRATCH/bin/mps-control" || exit 1
marker="$SCRATCH/bin/"
run_dir=$(mktemp -d /tmp/kace-cli-export-XXXXXX)
trap 'kill_pids; for p in $(pgrep -f "$marker"); do kill -KILL "$p" 2>/dev/null; done; rm -rf "$run_dir"' EXIT
export KACE_MPS_CONTROL="$SCRATCH/bin/mps-control" KACE_TEST_MPS_MODE=normal
M="$SCRATCH/m.db" R="$SCRATCH/r.db"
quick=(--db "$M" --gpu "Stand-in GPU" --warmup 0.2 --window 0.3 --run-dir "$run_dir" --quiet)
"$KACE" workload add --db "$M" fast -- "$SCRATCH/bin/worker" report 4000 >/dev/null || fail "workload add fast"
"$KACE" workload add --db "$M" slow -- "$SCRATCH/bin/worker" report 1000 >/dev/null || fail "workload add slow"
"$KACE" workload add --db "$M" crasher -- "$SCRATCH/bin/worker" crash 1000 0.3 >/dev/null || fail "workload add crasher"
measure() { "$KACE" measure "$@" "${quick[@]}" >>"$SCRATCH/measure.out" 2>&1; }
measure fast slow || fail "measure pair"
measure fast slow || fail "measure pair again"
measure fast slow --mps-pct 30,70 || fail "measure split"
measure fast slow --no-mps || fail "measure time-sliced"
measure fast slow --no-mps --set pairs || fail "measure time-sliced into pairs"
measure fast --mps-pct 50 || fail "measure solo"
measure slow crasher; check_eq "the crash fails its run" 1 $?
check_eq "measured runs" "pairs:mps:0:ok pairs:mps:1:ok pairs:mps:0:ok timeslice-pairs:timeslice:0:ok pairs:timeslice:0:ok solo:mps:0:ok pairs:mps:0:failed" \
    "$(sqlite3 "$M" "SELECT group_concat(set_name || ':' || mode || ':' || repetition || ':' || status, ' ') FROM (SELECT * FROM runs ORDER BY id)")"

"$KACE" export --db "$M" "$SCRATCH/m1" >"$SCRATCH/out" 2>"$SCRATCH/err" || fail "export measured: $(cat "$SCRATCH/err")"
grep -q "1 failed run without any throughput left out" "$SCRATCH/err" || fail "left-out message: $(cat "$SCRATCH/err")"
day=$(sqlite3 "$M" "SELECT DISTINCT date FROM sources WHERE date IS NOT NULL")
folder="kace-measure_Stand-in-GPU_$day"
check_eq "measured export files" \
    "$folder/k1/solo.csv $folder/k2/pairs-rep1.csv $folder/k2/pairs-timeslice.csv $folder/k2/pairs.csv $folder/k2/timeslice-pairs.csv $folder/runs.csv kace-measure_Stand-in-GPU_any-date/profiles.csv" \
    "$(cd "$SCRATCH/m1" && find . -name '*.csv' | sed 's|^\./||' | sort | tr '\n' ' ' | sed 's/ $//')"
# The record keeps what the files cannot: modes, repetitions, the failed run and its members' words.
grep -q ',pairs,mps,0,failed,.*,crasher,100,,,crashed,' "$SCRATCH/m1/$folder/runs.csv" ||
    fail "runs.csv lacks the failed run: $(cat "$SCRATCH/m1/$folder/runs.csv")"
grep -q ',pairs,timeslice,0,ok,' "$SCRATCH/m1/$folder/runs.csv" || fail "runs.csv lacks the time-sliced run"
grep -qx 'fast,slow,[0-9.]*,[0-9.]*,30,70' "$SCRATCH/m1/$folder/k2/pairs.csv" || fail "the split: $(cat "$SCRATCH/m1/$folder/k2/pairs.csv")"

# Folder by folder with each folder's source, as README.md says (its commands, DIR replaced).
grep '^    kace import .*DIR/' "$SCRATCH/m1/README.md" | sed "s|^    kace import|\"\$KACE\" import --quiet --db \"\$R\"|; s|DIR/|$SCRATCH/m1/|" >"$SCRATCH/import.sh"
check_eq "README's import commands" 2 "$(grep -c . "$SCRATCH/import.sh")"
KACE="$KACE" R="$R" bash -e "$SCRATCH/import.sh" 2>"$SCRATCH/err" || fail "re-import measured: $(cat "$SCRATCH/err")"
check_same "measured re-imported" "$M" "$R" >/dev/null
check_eq "sources" "$(sqlite3 "$M" "SELECT DISTINCT gpu || '|' || tool || '|' || ifnull(date, '') FROM sources ORDER BY 1")" \
    "$(sqlite3 "$R" "SELECT DISTINCT gpu || '|' || tool || '|' || ifnull(date, '') FROM sources ORDER BY 1")"
check_eq "re-imported sets" "pairs:2 pairs-rep1:1 pairs-timeslice:1 solo:1 timeslice-pairs:1" \
    "$(sqlite3 "$R" "SELECT group_concat(s, ' ') FROM (SELECT set_name || ':' || count(*) AS s FROM runs GROUP BY set_name ORDER BY set_name)")"
"$KACE" export --db "$R" "$SCRATCH/m2" >/dev/null 2>&1 || fail "second export of the measured runs"
# runs.csv is kace measure's record: the re-imported store has imported runs, no record
# (and README.md counts the failed run left out of the first).
diff -r -x runs.csv -x README.md "$SCRATCH/m1" "$SCRATCH/m2" >"$SCRATCH/diff" || fail "the measured runs' second export differs: $(head -5 "$SCRATCH/diff")"

# 4. --dataset: the layout of data/h200, from the measured runs.
printf '2026-11-29T09:00:00Z\tStand-in GPU, 1.0, 1024 MiB\t13.0\tnone\tkace test\n' >"$SCRATCH/calls.tsv"
"$KACE" export --dataset --db "$M" --calls "$SCRATCH/calls.tsv" "$SCRATCH/d1" >"$SCRATCH/out" 2>"$SCRATCH/err" ||
    fail "export --dataset: $(cat "$SCRATCH/err")"
grep -q "7 runs (1 failed), 3 colocations (0 measured >= 3 times)" "$SCRATCH/out" || fail "export --dataset: $(cat "$SCRATCH/out")"
check_eq "dataset files" \
    "README.md campaign/runs.csv campaign/spread.csv campaign/visits.tsv colocations/mps-splits.csv colocations/pairs.csv colocations/timeslice-pairs.csv profiles/exclusive-by-mps.csv" \
    "$(cd "$SCRATCH/d1" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ' | sed 's/ $//')"
# The pair's two MPS repetitions are one row, their mean; the time-sliced pair measured in two
# sets is one row too; a solo run is a curve point, not a colocation.
mean=$(sqlite3 "$M" "SELECT printf('%.6f', avg(m.throughput)) FROM runs r JOIN run_members m ON m.run_id = r.id
    JOIN workloads w ON w.id = m.workload_id WHERE r.mode = 'mps' AND r.status = 'ok' AND r.k = 2 AND m.mps_pct = 100 AND w.name = 'fast'")
check_eq "pairs.csv" "fast,slow,$mean" "$(awk -F, 'NR == 2 { printf "%s,%s,%.6f", $1, $2, $3 }' "$SCRATCH/d1/colocations/pairs.csv")"
check_eq "time-sliced rows" 1 "$(tail -n +2 "$SCRATCH/d1/colocations/timeslice-pairs.csv" | wc -l)"
check_eq "split row" "30,70" "$(awk -F, 'NR == 2 { print $5 "," $6 }' "$SCRATCH/d1/colocations/mps-splits.csv")"
check_eq "curve" "workload,50" "$(head -1 "$SCRATCH/d1/profiles/exclusive-by-mps.csv")"
check_eq "spread rows (2 colocations x 2 members)" 4 "$(tail -n +2 "$SCRATCH/d1/campaign/spread.csv" | wc -l)"
check_eq "runs.csv members" 13 "$(tail -n +2 "$SCRATCH/d1/campaign/runs.csv" | wc -l)"
grep -q '^| 2026-11-29T09:00:00Z | Stand-in GPU, 1.0, 1024 MiB | 13.0 | none | kace test |$' "$SCRATCH/d1/README.md" &&
    grep -q "^# kace's own dataset: Stand-in GPU$" "$SCRATCH/d1/README.md" &&
    grep -q "(\`campaign/spread.csv\`, 4 members): median [0-9.]*%, largest" "$SCRATCH/d1/README.md" &&
    grep -q "^- 1 ended on their own (a crash, an early exit)$" "$SCRATCH/d1/README.md" &&
    grep -q '^| workload | members | at a step boundary (stop message) | on its own |$' "$SCRATCH/d1/README.md" &&
    grep -q '^| `crasher` | 1 | 0 | 1 |$' "$SCRATCH/d1/README.md" && grep -q '^| `fast` | 6 | 6 | 0 |$' "$SCRATCH/d1/README.md" ||
    fail "dataset README: $(cat "$SCRATCH/d1/README.md")"
"$KACE" export --dataset --quiet --db "$M" --calls "$SCRATCH/calls.tsv" "$SCRATCH/d2" || fail "export --dataset again"
diff -r "$SCRATCH/d1" "$SCRATCH/d2" >/dev/null || fail "two dataset exports of one store differ"
"$KACE" export --dataset --verify --db "$M" --calls "$SCRATCH/calls.tsv" "$SCRATCH/d1" >"$SCRATCH/out" 2>&1 ||
    fail "--verify of a dataset just made: $(cat "$SCRATCH/out")"
grep -q "all as its store gives, and it imports" "$SCRATCH/out" || fail "--verify: $(cat "$SCRATCH/out")"
"$KACE" export --dataset --verify --db "$M" "$SCRATCH/d1" >/dev/null 2>"$SCRATCH/err" && fail "--verify without the calls passed"
grep -q "^  campaign/visits.tsv: not made by kace export --dataset" "$SCRATCH/err" || fail "--verify: $(cat "$SCRATCH/err")"
"$KACE" export --verify --db "$M" "$SCRATCH/d1" >/dev/null 2>&1; check_eq "--verify without --dataset" 2 $?
"$KACE" export --dataset --set pairs --db "$M" "$SCRATCH/d3" >/dev/null 2>&1; check_eq "--dataset with --set" 2 $?
check_eq "no ncu yet" 0 "$(grep -c 'ncu/compare.csv' <(cd "$SCRATCH/d1" && find . -type f))"
grep -q "^Not measured yet: the campaign's ncu step" "$SCRATCH/d1/README.md" || fail "README without ncu: $(cat "$SCRATCH/d1/README.md")"
# The engine's ncu step stores ncu's export (campaign_ncu): the dataset sets it beside the
# workload's profile, here the same export imported as its profile, so all six agree; an
# export that is not ncu's CSV is counted apart.
NCU_CSV="$(dirname "$0")/data/ncu/newer.csv"
"$KACE" import-ncu --quiet --db "$M" --workload fast "$NCU_CSV" >/dev/null || fail "import-ncu as fast's profile"
sqlite3 "$M" "INSERT INTO campaign_ncu(workload, command_key, status, seconds, cap_s, output, measured_at)
    VALUES('fast', 'k', 'ok', 30, 120, readfile('$NCU_CSV'), 'now'), ('slow', 'k', 'ok', 30, 120, 'not a csv', 'now')" ||
    fail "storing ncu tries"
"$KACE" export --dataset --quiet --db "$M" --calls "$SCRATCH/calls.tsv" "$SCRATCH/d4" || fail "export --dataset with ncu"
check_eq "ncu rows within 10%" "6/6" "$(awk -F, 'NR > 1 { n++; y += $6 == "yes" } END { print y "/" n }' "$SCRATCH/d4/ncu/compare.csv")"
grep -q '^| `fast` | +0.0% | +0.0% | +0.0% | +0.0% | +0.0% | +0.0% |$' "$SCRATCH/d4/README.md" &&
    grep -q "^6 of 6 metric values within 10% of ncu's.$" "$SCRATCH/d4/README.md" &&
    grep -q "^1 stored export could not be read as an ncu CSV.$" "$SCRATCH/d4/README.md" &&
    grep -q '^| workloads compared with ncu (3 CUDA C, 2 PyTorch) | 1 | 5 | \*\*missing\*\* |$' "$SCRATCH/d4/README.md" ||
    fail "README's ncu part: $(sed -n '/## kace against Nsight/,/## Files/p' "$SCRATCH/d4/README.md")"
"$KACE" export --dataset --verify --db "$M" --calls "$SCRATCH/calls.tsv" "$SCRATCH/d4" >/dev/null 2>&1 ||
    fail "--verify of a dataset with ncu/compare.csv (kace import reads past it)"

finish cli_export
