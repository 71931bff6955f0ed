#!/usr/bin/env bash
# Lookups stay constant-time on a large store: bench/bench_scale.sh at a
# tenth of its size (20,000 synthetic workloads, 100,000 colocations,
# imported, trained on a subset) asks `kace predict --target W --among
# 4 candidates` of it and of the 52-workload V100 store in the same run;
# the big store's fastest answer must come within 5x of the small one's
# (with linear name lookups it took about 240x), and ranking every one of
# the 20,000 workloads within 100x.
#
#   bash cli_scale.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_scale.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
TMPDIR=$SCRATCH bash "$here/../bench/bench_scale.sh" "$KACE" "$SHARED/kace-v100" 20000 100000 5 5
