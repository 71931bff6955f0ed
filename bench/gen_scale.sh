#!/usr/bin/env bash
# Writes a synthetic store's input files, in the CSV formats `kace import`
# reads, into DIR: N workloads (kernel and system profiles) and M pair
# colocations, deterministically (Park-Miller generator, exact in awk's
# doubles, so every run writes the same bytes).
#   DIR/kernel.csv  Threads,...,Type              (N rows)
#   DIR/system.csv  Type,Exclusive100,sm%,...     (N rows)
#   DIR/pairs.csv   the training subset: T workloads (T = min(N, 400)), 5
#                   partners each, set "pairs"
#   DIR/bulk.csv    the other M - 5T colocations over all N workloads
#                   (set "bulk"), no pair shared with pairs.csv
# Workload i is named syn<i/4>_batch<2,4,8,16>-<train|inf>, so families
# and batches parse as the reference data's do. Values lie in the ranges of
# the V100 reference data; a member keeps 30..95% of its exclusive
# throughput.
# usage: bench/gen_scale.sh DIR N_WORKLOADS N_COLOCATIONS
set -euo pipefail
dir=$1 n=$2 m=$3
[ "$n" -ge 1000 ] && [ "$m" -gt $((5 * 400)) ] || { echo "gen_scale: N >= 1000 and M > 2000 please" >&2; exit 2; }
mkdir -p "$dir"
awk -v N="$n" -v M="$m" -v dir="$dir" '
function rnd() { x = (x * 16807) % 2147483647; return x / 2147483647 }
function uni(lo, hi) { return lo + (hi - lo) * rnd() }
function name(i) { return sprintf("syn%d_batch%d-%s", int(i / 8), 2 ^ (1 + i % 4), (int(i / 4) % 2) ? "inf" : "train") }
function pair(file, a, b,   fa, fb) {
    fa = uni(0.3, 0.95); fb = uni(0.3, 0.95)
    printf "%s,%s,%.6f,%.6f\n", name(a), name(b), excl[a] * fa, excl[b] * fb > file
}
BEGIN {
    x = 20261124
    kernel = dir "/kernel.csv"; sysf = dir "/system.csv"
    print "Threads,Compute (SM) Throughput,DRAM Throughput,Memory Throughput,Registers,Static Shared Memory,Type" > kernel
    print "Type,Exclusive100,sm%,mem%,memcap,Exclusive50" > sysf
    for (i = 0; i < N; i++) {
        printf "%.1f,%.4f,%.4f,%.4f,%.1f,%.2f,%s\n", uni(1e5, 5e6), uni(10, 90), uni(5, 80), uni(10, 90),
               uni(1e6, 1e8), uni(0, 30000), name(i) > kernel
        excl[i] = uni(1, 500)
        printf "%s,%.6f,%.4f,%.4f,%.1f,%.6f\n", name(i), excl[i], uni(10, 100), uni(1, 60), uni(1, 30),
               excl[i] * uni(0.5, 0.9) > sysf
    }
    T = N < 400 ? N : 400
    pairs = dir "/pairs.csv"; bulk = dir "/bulk.csv"
    print "workload1,workload2,w1throughput,w2throughput" > pairs
    for (a = 0; a < T; a++)
        for (j = 1; j <= 5; j++)
            pair(pairs, a, (a + j) % T)
    # bulk: partner offsets 100, 137, 174, ... (distinct, < N/2, so no
    # unordered pair repeats and none is a training pair)
    print "workload1,workload2,w1throughput,w2throughput" > bulk
    left = M - 5 * T
    for (j = 0; left > 0; j++)
        for (a = 0; a < N && left > 0; a++) {
            pair(bulk, a, (a + 100 + 37 * j) % N)
            left--
        }
    if (100 + 37 * j >= N / 2) { print "gen_scale: too many colocations for N" > "/dev/stderr"; exit 1 }
}'
