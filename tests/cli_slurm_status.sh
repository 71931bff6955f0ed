#!/usr/bin/env bash
# kace slurm status when no slurmctld is up answers at once, saying so:
#
#   bash cli_slurm_status.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# libslurm retries a controller that is down for about a minute (59 s
# measured) before it fails; kace first tries a TCP connection to slurm.conf's
# SlurmctldHost and SlurmctldPort (1 s at most) and fails with the address.
# The slurm.conf here names a loopback port nothing listens on, and one
# whose host does not resolve. No Slurm daemon runs. Also: the sample
# plugstack.conf loads kace's SPANK plugin as optional (a plugin that cannot
# load must not fail every job of a node).
set -u

KACE=${1:?usage: cli_slurm_status.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need python3 timeout
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
"$KACE" slurm --help >/dev/null 2>&1 || { echo "kace was built without Slurm: skipped"; exit 77; }
DB="$SCRATCH/store.db"
"$KACE" import --db "$DB" "$SHARED/kace-v100" >"$SCRATCH/import.out" 2>&1 &&
    "$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/import.out" "$SCRATCH/train.out" >&2; exit 1; }
PORT=$(free_port)
for host in "localhost(127.0.0.1)" "no-such-controller.invalid"; do
    printf 'ClusterName=test\nSlurmctldHost=%s\nSlurmctldPort=%s # nothing listens\nAuthType=auth/munge\n' \
        "$host" "$PORT" >"$SCRATCH/slurm.conf"
    start=$(date +%s%N)
    SLURM_CONF="$SCRATCH/slurm.conf" timeout 120 "$KACE" slurm status --db "$DB" >"$SCRATCH/out" 2>"$SCRATCH/err"
    status=$?
    took=$((($(date +%s%N) - start) / 1000000))
    echo "kace slurm status, SlurmctldHost=$host: exit $status after $took ms: $(cat "$SCRATCH/err")"
    [ "$status" = 124 ] && fail "kace slurm status still waiting after 120 s"
    [ "$status" = 1 ] || fail "exit status $status, want 1"
    grep -qE 'no slurmctld answers at 127.0.0.1:'"$PORT"'|does not resolve' "$SCRATCH/err" ||
        fail "the error does not name the controller: $(cat "$SCRATCH/err")"
done
SAMPLE="$(dirname "$0")/../packaging/examples/plugstack.conf"
grep -qE '^optional +spank_kace\.so' "$SAMPLE" || fail "the sample plugstack.conf does not say optional: $(grep spank "$SAMPLE")"
grep -qE '^required' "$SAMPLE" && fail "the sample plugstack.conf still has a required line"
finish cli_slurm_status
