#!/bin/bash
# Xu et al. on data that kace profile measured: no ncu PCIe section, so
# NVML's PCIe throughput takes the place of ncu's PCIe bandwidth, said so.
# With the same values under either name, every score is the same; without
# either, the baseline is left out with both names given.
# Args: kace binary, shared data folder, scratch folder.
set -euo pipefail
KACE=$1 R=$2/kace-v100 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
fail() { echo "FAIL: $*"; exit 1; }
cd "$DIR"
"$KACE" import --db ncu.db --quiet "$R/profiles/system.csv" "$R/profiles/system-xu.csv" "$R/colocations/pairs.csv" \
    "$R/colocations/pairs-xu.csv"
# The same store with ncu's PCIe bandwidth renamed as NVML's throughput.
awk -F, 'NR == 1 { for (c = 1; c <= NF; c++) keep[c] = $c !~ /PCIe/ }
         { out = ""; for (c = 1; c <= NF; c++) if (keep[c]) out = out (out == "" ? "" : ",") $c; print out }' \
    "$R/colocations/pairs-xu.csv" >pairs-xu-nopcie.csv
sqlite3 -separator , ncu.db "SELECT w.name, max(CASE WHEN p.metric = 'PCIe read bandwidth' THEN p.value END),
                                    max(CASE WHEN p.metric = 'PCIe write bandwidth' THEN p.value END)
                             FROM profiles p JOIN workloads w ON w.id = p.workload_id
                             WHERE p.metric GLOB 'PCIe *' GROUP BY w.name" >pcie.txt
[ "$(wc -l <pcie.txt)" -ge 20 ] || fail "the reference store holds ncu's PCIe for $(wc -l <pcie.txt) workloads"
awk -F, 'NR == FNR { v[$1] = $2 "," $3; next }
         FNR == 1 { print $0 ",pcie_rx_MBps,pcie_tx_MBps"; next }
         { print $0 "," (($1 in v) ? v[$1] : ",") }' pcie.txt "$R/profiles/system.csv" >system-nvml.csv
"$KACE" import --db nvml.db --quiet system-nvml.csv "$R/profiles/system-xu.csv" "$R/colocations/pairs.csv" \
    pairs-xu-nopcie.csv
[ "$(sqlite3 nvml.db "SELECT count(*) FROM profiles WHERE metric GLOB 'PCIe *'")" = 0 ] || fail "ncu's PCIe in nvml.db"

eval_csv() { "$KACE" eval --db "$1" --protocol leave-family-out --xu-iter 1 --csv --out "" | cut -d, -f1-13; }
eval_csv ncu.db >ncu.csv
eval_csv nvml.db >nvml.csv
grep -q '^section,.*,Xu,' ncu.csv || fail "no Xu column: $(head -1 ncu.csv)"
[ "$(awk -F, '$1 == "fold" && $8 != "" && $8 != "nan"' nvml.csv | wc -l)" -ge 5 ] ||
    fail "Xu has no scores with NVML's PCIe: $(head -3 nvml.csv)"
cmp -s ncu.csv nvml.csv || fail "the same values under NVML's names score differently: $(diff ncu.csv nvml.csv | head -5)"
"$KACE" eval --db nvml.db --protocol leave-family-out --xu-iter 1 --out "" >nvml.txt
grep -q "^(Xu et al. with NVML's PCIe throughput (pcie_rx_MBps, pcie_tx_MBps) in place of ncu's PCIe read and write bandwidth: workload [^ ]* has no 'PCIe read bandwidth')" nvml.txt ||
    fail "the substitution is not said: $(head -2 nvml.txt)"
# A model trained on it names its features.
"$KACE" train --db nvml.db --kind forest --features xu-nvml --search-iter 1 --name xn >train.txt 2>&1 ||
    fail "kace train --features xu-nvml: $(cat train.txt)"
[ "$(sqlite3 nvml.db "SELECT body FROM models WHERE name = 'xn'" | grep -c '^features xu-nvml$')" = 1 ] ||
    fail "the model does not name its features xu-nvml"

# Neither: left out, both names given.
"$KACE" import --db none.db --quiet "$R/profiles/system.csv" "$R/profiles/system-xu.csv" "$R/colocations/pairs.csv" \
    pairs-xu-nopcie.csv
"$KACE" eval --db none.db --protocol leave-family-out --xu-iter 1 --out "" >none.txt
grep -q "^(Xu et al. left out: workload [^ ]* has no 'PCIe read bandwidth' (ncu's PCIe) and workload [^ ]* no 'pcie_rx_MBps' (NVML's)" none.txt ||
    fail "no reason for leaving Xu out: $(head -2 none.txt)"
echo "ok: Xu et al. with NVML's PCIe scores as with ncu's; left out, said why, with neither"
