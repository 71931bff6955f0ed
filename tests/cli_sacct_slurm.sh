#!/usr/bin/env bash
# kace simulate --sacct on real sacct output: the local Slurm of
# tests/slurm_cluster.sh with accounting (slurmdbd on a private MariaDB, all
# under one scratch folder) runs a handful of short GPU, multi-node and CPU
# jobs; sacct --parsable2 (the command docs/slurm.md gives) collects them and
# kace simulate --sacct replays them. Checks: every job of the run is in the
# file and parses; jobs named after stored workloads are mapped by name,
# kace-tagged ones by their AdminComment tag, the others counted as
# exclusive; the exclusive scenario's GPU-hours equal the file's
# (End - Start) x GPUs; no scenario uses more GPU-hours than exclusive.
# Every daemon is stopped by pid at the end.
#
# usage: cli_sacct_slurm.sh KACE_BINARY SHARED_DATA SCRATCH_DIR
# Exits 77 (skipped) without root, the Debian packages (slurmdbd,
# mariadb-server, the Slurm ones) or the built plugins.
# KACE_SACCT_SAMPLE=FILE: also copy the collected sacct output to FILE.
set -uo pipefail
KACE=$1
DATA=$2/kace-v100
SCRATCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PLUGINS=$(cd "$(dirname "$KACE")" && pwd)/slurm-plugins
source "$HERE/slurm_cluster.sh"
source "$HERE/lib_test.sh"
export PATH=$PATH:/usr/sbin

slurm_test_require "$PLUGINS/job_submit_kace.so" "$PLUGINS/spank_kace.so"
for b in slurmdbd mariadbd mariadb-install-db mariadb sacct sacctmgr; do
    command -v "$b" >/dev/null 2>&1 || { echo "SKIP: $b not installed (.ci/install-deps: slurmdbd, mariadb-server)"; exit 77; }
done
if ! grep -q 'KACE_TEST_SLURM_CONF' "$HERE/slurm_cluster.sh"; then
    echo "SKIP: tests/slurm_cluster.sh takes no extra slurm.conf lines (KACE_TEST_SLURM_CONF)"
    exit 77
fi

mkdir -p "$SCRATCH"
C=$(mktemp -d /tmp/kace-sacct.XXXXXX)
DB=$C/mariadb
cleanup() {
    slurm_test_stop
    local f pid
    for f in "$C/slurmdbd.pid" "$DB/mariadb.pid"; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null)
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.3; done
        kill -9 "$pid" 2>/dev/null
    done
    slurm_test_keep "$C" "$C/cluster/log" "$C/slurmdbd.log" "$DB/mariadb.err"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- MariaDB on a private folder and port -------------------------------------
# Two ports free now (free_port binds each to check; below the ephemeral range).
DBPORT=$(free_port) && DBDPORT=$(free_port) || { echo "FAIL: no free ports for MariaDB and slurmdbd"; exit 1; }
while [ "$DBDPORT" = "$DBPORT" ]; do DBDPORT=$(free_port) || exit 1; done
mariadb-install-db --no-defaults --datadir="$DB/data" --user=root --auth-root-authentication-method=normal \
    --skip-test-db >"$C/mariadb-install.log" 2>&1 || { echo "FAIL: mariadb-install-db"; tail "$C/mariadb-install.log"; exit 1; }
mariadbd --no-defaults --datadir="$DB/data" --user=root --port=$DBPORT --bind-address=127.0.0.1 --socket="$DB/sock" \
    --pid-file="$DB/mariadb.pid" --log-error="$DB/mariadb.err" --skip-name-resolve --innodb-buffer-pool-size=32M \
    >/dev/null 2>&1 &
slurm_wait 60 mariadb --no-defaults -S "$DB/sock" -u root -e 'select 1' || { echo "FAIL: MariaDB did not start"; exit 1; }

# --- kace's placer (for the kace-tagged job): store, model, configuration -------
# In its own folder, named by KACE_SLURM_CONFIG in slurmctld's environment, so
# that the placer finds it from the start (slurm_cluster_start empties the
# cluster folder).
mkdir -p "$C/store" # kace creates a store file, not a missing folder
"$KACE" import --db "$C/store/kace.db" "$DATA" >/dev/null || { echo "FAIL: import"; exit 1; }
"$KACE" train --db "$C/store/kace.db" --out "$C/store/model.txt" >/dev/null || { echo "FAIL: train"; exit 1; }
printf '%s\n' "store = $C/store/kace.db" "model_file = $C/store/model.txt" "gres = mps" "refresh_seconds = 1" \
    >"$C/store/kace.conf"
export KACE_SLURM_CONFIG=$C/store/kace.conf

# --- slurmdbd, then the cluster with accounting through it --------------------
# slurmctld refuses to start with a database it never reached, so slurmdbd
# comes first; it authenticates through the cluster's munged (started by
# slurm_cluster_start; AccountingStoragePass names its socket for the
# daemons' and sacct's connections to slurmdbd) and reads its own folder's
# slurmdbd.conf.
export KACE_TEST_SLURM_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBDPORT
AccountingStoragePass=$C/cluster/munge/sock
AccountingStorageTRES=gres/gpu,gres/mps,gres/shard"
mkdir -p "$C/dbd"
printf '%s\n' "AuthType=auth/munge" "AuthInfo=socket=$C/cluster/munge/sock" "DbdHost=localhost" "DbdPort=$DBDPORT" \
    "SlurmUser=root" "StorageType=accounting_storage/mysql" "StorageHost=127.0.0.1" "StoragePort=$DBPORT" \
    "StorageUser=root" "StorageLoc=kace_acct" "PidFile=$C/slurmdbd.pid" "LogFile=$C/slurmdbd.log" "DebugLevel=info" \
    >"$C/dbd/slurmdbd.conf"
chmod 600 "$C/dbd/slurmdbd.conf"
SLURM_CONF=$C/dbd/slurm.conf slurmdbd || { echo "FAIL: slurmdbd did not start"; tail -n 20 "$C/slurmdbd.log"; exit 1; }
slurm_wait 30 bash -c "ss -ltn | grep -q ':$DBDPORT '" || { echo "FAIL: slurmdbd does not listen"; tail -n 20 "$C/slurmdbd.log"; exit 1; }
slurm_cluster_start "$C/cluster" "$PLUGINS" || { echo "FAIL: the Slurm cluster did not start"; tail -n 30 "$C"/cluster/log/*.log "$C/slurmdbd.log"; exit 1; }
sacctmgr -i add cluster kacetest >/dev/null 2>&1
registered() { grep -q '^kacetest|[1-9]' < <(sacctmgr -n -P list cluster format=cluster,controlport); }
slurm_wait 90 registered || { echo "FAIL: slurmctld did not register with slurmdbd"; tail -n 20 "$C/cluster/log/slurmctld.log" "$C/slurmdbd.log"; exit 1; }

# --- a handful of short jobs ----------------------------------------------------
mkdir -p "$C/out"
submit() { sbatch --parsable -o "$C/out/%j.out" "$@" | cut -d';' -f1; }
ids=()
ids+=("$(submit --job-name=bert-base-cased_batch8-train --gres=gpu:1 --wrap 'sleep 3')")
ids+=("$(submit --job-name=vit_h_14_batch2-train --gres=gpu:1 --wrap 'sleep 4')")
ids+=("$(submit --job-name=whisper-large-v2_batch2-inf --gres=gpu:1 --wrap 'sleep 2')")
ids+=("$(submit --job-name=bert-base-cased_batch8-train --gres=gpu:1 --wrap 'sleep 2')")
ids+=("$(submit --job-name=site-analysis --gres=gpu:1 --wrap 'sleep 2')")
ids+=("$(submit --job-name=two-nodes --nodes=2 --gres=gpu:1 --wrap 'sleep 2')")
ids+=("$(submit --job-name=cpu-only --wrap 'sleep 1')")
ids+=("$(submit --job-name=tagged --kace-workload=bert-base-cased_batch2-train --wrap 'sleep 2')")
ids+=("$(submit --job-name=fails --gres=gpu:1 --wrap 'sleep 1; exit 3')")
for id in "${ids[@]}"; do
    [[ $id =~ ^[0-9]+$ ]] || fail "sbatch gave '$id', not a job id"
done
n_jobs=${#ids[@]}
# Done when sacct lists every job with an End time.
FMT=JobID,JobName,User,Account,Partition,Submit,Start,End,Elapsed,AllocTRES,NodeList,State,Comment,AdminComment
since=$(date -d '-10 minutes' +%Y-%m-%dT%H:%M:%S)
ended() {
    [ "$(sacct -a -X -n -P --starttime="$since" --format=End,State | grep -cv -e '^Unknown' -e RUNNING -e PENDING)" -ge "$n_jobs" ]
}
slurm_wait 90 ended || { fail "sacct never listed all $n_jobs jobs as ended"; sacct -a -X -P --starttime="$since" --format=$FMT; }

# --- the what-if on it -----------------------------------------------------------
sacct -a -X --parsable2 --noconvert --starttime="$since" --format=$FMT >"$SCRATCH/site.sacct" || fail "sacct"
cat "$SCRATCH/site.sacct"
rows=$(($(wc -l <"$SCRATCH/site.sacct") - 1))
[ "$rows" -eq "$n_jobs" ] || fail "sacct listed $rows jobs, expected $n_jobs"
[ -n "${KACE_SACCT_SAMPLE:-}" ] && cp "$SCRATCH/site.sacct" "$KACE_SACCT_SAMPLE"
"$KACE" simulate --db "$C/store/kace.db" --sacct "$SCRATCH/site.sacct" --out "$SCRATCH/sim" >"$SCRATCH/sim.txt" 2>&1 ||
    fail "simulate --sacct: exit $?"
cat "$SCRATCH/sim.txt"
# GPU jobs: 5 single-GPU, 1 on two nodes (2 sim jobs), 1 that fails = 8 sim jobs; 1 CPU-only job; the
# tagged one is a GPU job when kace placed it (its tag in AdminComment, a GPU or a GPU share in
# AllocTRES), else CPU-only.
tagged_gpu=$(awk -F'|' 'NR > 1 && $2 == "tagged" && $14 ~ /kace:workload=/ && $10 ~ /gres\/(gpu|mps|shard)=/' "$SCRATCH/site.sacct" | wc -l)
echo "kace-tagged jobs on a GPU or a GPU share: $tagged_gpu"
grep -q "^sacct $SCRATCH/site.sacct: $n_jobs jobs; .* ($((8 + tagged_gpu)) replayed jobs, 1 multi-node" "$SCRATCH/sim.txt" ||
    fail "replayed jobs not $((8 + tagged_gpu)) with one multi-node job"
grep -q "^workloads: 0 by --sacct-map rule, $tagged_gpu by kace's tag in AdminComment, 4 by JobName; 4 without" "$SCRATCH/sim.txt" ||
    fail "workload counts (expected $tagged_gpu by tag, 4 by name, 4 without: site-analysis, two-nodes x2, fails)"
# Exclusive GPU-hours = the sum over GPU jobs of (End - Start) x GPUs, computed from the file itself.
want=$(awk -F'|' 'NR > 1 && $10 ~ /gres\/(gpu|mps|shard)=/ && $7 != "Unknown" && $8 != "Unknown" {
        g = 1; if (match($10, /gres\/gpu=[0-9]+/)) g = substr($10, RSTART + 9, RLENGTH - 9)
        gsub(/[-T:]/, " ", $7); gsub(/[-T:]/, " ", $8)
        d = mktime($8) - mktime($7); if (d < 1) d = 1; s += d * g }
        END { printf "%.6f", s / 3600 }' "$SCRATCH/site.sacct")
got=$(awk -F, '$1 == "exclusive" { print $2 }' "$SCRATCH/sim/sacct.csv")
awk -v a="$want" -v b="$got" 'BEGIN { exit !(a > 0 && (a - b) ^ 2 < 1e-10) }' || fail "exclusive GPU-hours $got, the file says $want"
awk -F, 'NR > 1 { h[$1] = $2 } END { exit !(h["shard"] <= h["exclusive"] + 1e-9 && h["kace"] <= h["exclusive"] + 1e-9) }' \
    "$SCRATCH/sim/sacct.csv" || fail "a sharing scenario used more GPU-hours than exclusive"
scontrol ping >/dev/null 2>&1 || fail "slurmctld is not up at the end"

[ $failures -eq 0 ] && echo "cli_sacct_slurm: all passed"
exit $((failures > 0))
