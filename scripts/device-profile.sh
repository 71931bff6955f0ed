#!/usr/bin/env bash
# Profiles 6 workloads (3 CUDA C, 3 PyTorch) with `kace profile` on a GPU
# machine, profiles the same workloads with `ncu --set full`, and compares
# kace's six kernel metrics with ncu's (same reduction: kace import-ncu), and
# kace's profiling wall time with ncu's.
#
#   bash scripts/device-profile.sh [OUT_DIR]      (default: device-profile-out)
#
# Needs: an NVIDIA GPU and driver, the CUDA toolkit (nvcc, CUPTI, ncu), and for
# the PyTorch workloads python3 with torch + transformers. Writes OUT_DIR/kace.db
# (kace's profiles and the ncu imports, named <workload>-ncu), OUT_DIR/compare.csv
# (metric, kace, ncu, relative difference) and OUT_DIR/times.csv (wall seconds).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-device-profile-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
db=$out/kace.db
WARMUP=${WARMUP:-10}
WINDOW=${WINDOW:-20}
NCU_KERNELS=${NCU_KERNELS:-300}   # ncu profiles this many launches after skipping NCU_SKIP
NCU_SKIP=${NCU_SKIP:-200}

command -v nvidia-smi >/dev/null || { echo "no NVIDIA driver (nvidia-smi) on this machine" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S "$root" -B "$root/build-device" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKACE_TESTS=OFF >/dev/null
cmake --build "$root/build-device" -j"$(nproc)"
kace=$root/build-device/kace
[ -f "$root/build-device/libkace_cupti.so" ] || { echo "libkace_cupti.so was not built (CUPTI not found)" >&2; exit 1; }
make -C "$root/workloads" >/dev/null
kk=$root/workloads/build/kace_kernels

# name | command (runs until stopped) | the same for ncu (bounded by --seconds)
workloads=(
    "cuda-gemm2048|$kk gemm 2048|$kk gemm 2048 30"
    "cuda-stream1024|$kk stream 1024|$kk stream 1024 30"
    "cuda-latency4x64|$kk latency 4 64|$kk latency 4 64 30"
    "bert-base-cased_batch8-train|python3 $root/workloads/torch/bert.py --mode train --batch 8|python3 $root/workloads/torch/bert.py --mode train --batch 8 --seconds 600"
    "vit-base-patch16-224_batch32-inf|python3 $root/workloads/torch/vit.py --mode inf --batch 32|python3 $root/workloads/torch/vit.py --mode inf --batch 32 --seconds 600"
    "wav2vec2-base-960h_batch4-train|python3 $root/workloads/torch/wav2vec2.py --mode train --batch 4|python3 $root/workloads/torch/wav2vec2.py --mode train --batch 4 --seconds 600"
)

echo "workload,kace_s,ncu_s,ratio" >"$out/times.csv"
for w in "${workloads[@]}"; do
    IFS='|' read -r name cmd ncu_cmd <<<"$w"
    echo "== $name"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$kace" profile --db "$db" --name "$name" --warmup "$WARMUP" --window "$WINDOW" \
        --keep-recording "$out/$name.cupti.txt" -- $cmd
    t1=$(date +%s.%N)
    # shellcheck disable=SC2086
    ncu --set full --launch-skip "$NCU_SKIP" --launch-count "$NCU_KERNELS" -f -o "$out/$name" $ncu_cmd >/dev/null
    ncu -i "$out/$name.ncu-rep" --csv --print-details all >"$out/$name.ncu.csv"
    t2=$(date +%s.%N)
    "$kace" import-ncu --db "$db" --workload "$name-ncu" "$out/$name.ncu.csv" >/dev/null
    echo "$name,$(echo "$t1 - $t0" | bc),$(echo "$t2 - $t1" | bc),$(echo "scale=3; ($t1 - $t0) / ($t2 - $t1)" | bc)" \
        >>"$out/times.csv"
done

sqlite3 -csv -header "$db" "
  SELECT k.name AS workload, p.metric, p.value AS kace, q.value AS ncu,
         CASE WHEN q.value <> 0 THEN ROUND((p.value - q.value) / q.value, 4) END AS rel_diff
  FROM profiles p JOIN workloads k ON k.id = p.workload_id
  JOIN workloads n ON n.name = k.name || '-ncu'
  JOIN profiles q ON q.workload_id = n.id AND q.metric = p.metric
  WHERE p.metric IN ('Threads', 'Compute (SM) Throughput', 'DRAM Throughput', 'Memory Throughput',
                     'Registers', 'Static Shared Memory')
  ORDER BY 1, 2;" | tee "$out/compare.csv"
column -s, -t "$out/times.csv"
