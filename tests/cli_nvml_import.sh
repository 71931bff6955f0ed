#!/bin/bash
# nvidia-smi samples as a site has them: one --query-gpu CSV per workload run
# alone, made at test time from the V100 system profiles (two samples each
# at the profile's sm%, mem% and memory in MiB), with the colocations' own
# profile columns dropped, so that sm%, mem% and memcap come from the samples
# only. kace import recognises them by their header; the store evaluates
# exactly as one holding the same profiles as system.csv; a DCGM layout
# imports too, and a file with two GPUs' samples is refused with
# file:line:col.
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 DATA=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR/smi" "$DIR/cols" "$DIR/ref"
fail() { echo "FAIL: $*"; exit 1; }

drop_columns() { # REGEX IN OUT
    awk -F, -v OFS=, -v re="$1" 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = $i !~ re }
        { s = ""; n = 0; for (i = 1; i <= NF; i++) if (keep[i]) { s = s (n++ ? "," : "") $i }; print s }' "$2" >"$3"
}
for f in pairs triples; do
    drop_columns '^w[0-9]+(_|sm%|mem%|memcap)' "$DATA/colocations/$f.csv" "$DIR/cols/$f.csv"
done
head -1 "$DIR/cols/pairs.csv" | grep -q 'sm%' && fail "the colocations still hold sm%"
# system.csv: Type,Exclusive100,sm%,mem%,memcap,Exclusive50 -> one nvidia-smi file per workload
awk -F, -v dir="$DIR/smi" 'NR > 1 && $3 != "" {
        f = dir "/" $1 ".csv"
        print "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB]" > f
        for (i = 0; i < 2; i++) printf "2024/05/01 12:00:0%d.000, 0, Tesla V100-SXM2-32GB, %.17g %%, %.17g %%, %.17g MiB\n", i, $3, $4, $5 * 1024 > f
        close(f)
    }' "$DATA/profiles/system.csv"
[ "$(ls "$DIR/smi" | wc -l)" -ge 21 ] || fail "fewer than 21 sample files made"
# The exclusive throughput is not in nvidia-smi's samples: the colocation
# files carry it (w1exclusive_throughput).
"$KACE" import --db "$DIR/smi.db" "$DIR/smi" "$DIR/cols" >"$DIR/import.txt" || fail "import: $(cat "$DIR/import.txt")"
grep -q "nvidia-smi/DCGM samples" "$DIR/import.txt" || fail "the samples are not recognised: $(head -3 "$DIR/import.txt")"
# The reference: the same colocations with system.csv.
cp "$DATA/profiles/system.csv" "$DIR/ref/"
"$KACE" import --db "$DIR/ref.db" "$DIR/ref/system.csv" "$DIR/cols" >/dev/null
for db in smi ref; do
    "$KACE" eval --db "$DIR/$db.db" --protocol leave-workload-out --no-xu --csv >"$DIR/$db-lwo.csv" ||
        fail "eval on $db"
done
cmp -s "$DIR/smi-lwo.csv" "$DIR/ref-lwo.csv" ||
    fail "the nvidia-smi store does not evaluate as system.csv's: $(diff "$DIR/smi-lwo.csv" "$DIR/ref-lwo.csv" | head -5)"
grep -q '^mean,' "$DIR/smi-lwo.csv" || fail "no mean row"
"$KACE" train --db "$DIR/smi.db" --name smi >"$DIR/train.txt" || fail "train on nvidia-smi samples"
grep -q "reads the system metrics" "$DIR/train.txt" || fail "not a system-metrics model"
"$KACE" predict --db "$DIR/smi.db" --target bert-base-cased_batch8-inf --top 3 >/dev/null || fail "predict"

# DCGM's field names.
printf 'timestamp,gpu,DCGM_FI_DEV_GPU_UTIL,DCGM_FI_DEV_MEM_COPY_UTIL,DCGM_FI_DEV_FB_USED\n1,0,50,20,2048\n2,0,70,30,4096\n' \
    >"$DIR/newjob_batch4-train.csv"
"$KACE" import --db "$DIR/smi.db" "$DIR/newjob_batch4-train.csv" >"$DIR/dcgm.txt" || fail "DCGM import: $(cat "$DIR/dcgm.txt")"
grep -q "values +3" "$DIR/dcgm.txt" || fail "DCGM: not 3 values: $(cat "$DIR/dcgm.txt")"
# Two GPUs' samples for one workload: refused where the second starts.
printf 'timestamp, index, utilization.gpu [%%]\n1, 0, 40 %%\n2, 1, 45 %%\n' >"$DIR/two_batch1-inf.csv"
if "$KACE" import --db "$DIR/smi.db" "$DIR/two_batch1-inf.csv" >"$DIR/two.txt" 2>&1; then
    fail "two GPUs' samples imported"
fi
grep -q "two_batch1-inf.csv:3:.*two GPUs" "$DIR/two.txt" || fail "two GPUs: $(cat "$DIR/two.txt")"
echo "cli_nvml_import: ok"
