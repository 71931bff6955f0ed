# A real Slurm cluster on localhost for tests and benchmarks (sourced, not a
# test itself): munged, slurmctld and three slurmd (`slurmd -N`, one port
# each) with the kace plugins, fake GPU device files, and every config, state,
# log and pid file under one folder. Needs root and the Debian packages
# munge, slurmctld, slurmd, slurm-client.
#
#   slurm_cluster_start DIR PLUGIN_DIR   starts it; exports SLURM_CONF
#   slurm_cluster_stop                   stops every daemon by its pid
#   slurm_wait SECONDS CMD...            polls CMD until it succeeds
#
# For the test scripts (they also source tests/lib_test.sh: fail, check_eq):
#   slurm_test_require FILE...           exit 77 (skipped) without root, the
#                                        packages or FILE (plugins, stand-ins)
#   slurm_test_store KACE DATA DB MODEL  kace import + train, or exit 1
#   slurm_test_start DIR PLUGINS DB MODEL  slurm_cluster_start with kace.conf
#                                        (gres mps, refresh every second); sets
#                                        LOG; exit 1 unless the placer is ready
#   slurm_test_cleanup DIR SAVE...       slurm_test_stop, then slurm_test_keep:
#   slurm_test_stop                      cancel every job, stop the cluster
#   slurm_test_keep DIR SAVE...          keep SAVE (logs) in $SCRATCH/logs,
#                                        remove DIR
#   slurm_test_finish                    exit 1 when a check failed
#
# Nodes: n1 and n2 have one GPU with gres/mps (Count=100), n3 one GPU with
# gres/shard (Count=4); with KACE_TEST_N2_GPUS=N, n2 has N GPUs, each with a
# device file of its own and gres/mps Count=100 (mps:100N in all), or with
# KACE_TEST_N2_SHARE=shard gres/shard Count=4 of a type of its own (g0,
# g1, ...: a request of type gI lands on GPU I). Partitions: debug (all,
# default) and second (n2). kace.conf (beside slurm.conf) is the test's to
# write.
#
#   slurm_test_warm LOG WORKLOAD...      has job_submit/kace load the
#                                        workloads (with a store above
#                                        load_all_max it loads only those
#                                        jobs name): a --test-only probe of each
#                                        until one is decided without "not
#                                        loaded yet"; waits for the last
#                                        placed probe's pick to be dropped

slurm_cluster_missing() {
    local b
    for b in munged slurmctld slurmd sbatch srun scontrol sinfo squeue; do
        command -v "$b" >/dev/null 2>&1 || { echo "$b"; return 0; }
    done
    return 1
}

slurm_wait() {
    local limit=$1 start=$SECONDS
    shift
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS - start >= limit)); then
            echo "timed out after ${limit}s waiting for: $*" >&2
            return 1
        fi
        sleep 0.3
    done
}

slurm_nodes_idle() {
    local states
    states=$(sinfo -h -N -o '%T' 2>/dev/null) || return 1
    [ -n "$states" ] && ! grep -qv '^idle$' <<<"$states"
}

slurm_cluster_stop() {
    local f pid
    for f in "$SLURM_DIR"/slurmd-*.pid "$SLURM_DIR"/slurmctld.pid "$SLURM_DIR"/munge/munged.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null)
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
    done
    # Give them a moment, then make sure (still by pid only).
    for f in "$SLURM_DIR"/slurmd-*.pid "$SLURM_DIR"/slurmctld.pid "$SLURM_DIR"/munge/munged.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null)
        [ -n "$pid" ] || continue
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.3
        done
        kill -9 "$pid" 2>/dev/null
        rm -f "$f"
    done
    return 0
}

slurm_test_require() { # FILE...
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: needs root (slurmd and munged run as root)"
        exit 77
    fi
    local missing f
    if missing=$(slurm_cluster_missing); then
        echo "SKIP: $missing not installed (.ci/install-deps installs munge, slurmctld, slurmd, slurm-client)"
        exit 77
    fi
    for f in "$@"; do
        [ -e "$f" ] || { echo "SKIP: $f not built (no libslurm-dev at configure time)"; exit 77; }
    done
    # Under ASan: libslurm's own leaks are not kace's (see the file).
    export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(dirname "${BASH_SOURCE[0]}")/lsan-slurm.supp"
}

slurm_test_store() { # KACE DATA DB MODEL
    "$1" import --db "$3" "$2" >/dev/null || { echo "FAIL: kace import"; exit 1; }
    "$1" train --db "$3" --out "$4" >/dev/null || { echo "FAIL: kace train"; exit 1; }
}

slurm_test_start() { # DIR PLUGINS DB MODEL
    slurm_cluster_start "$1" "$2" || {
        echo "FAIL: the Slurm cluster did not start"
        tail -n 30 "$1"/log/*.log 2>/dev/null
        exit 1
    }
    cat >"$1/kace.conf" <<EOF
store = $3
model_file = $4
gres = mps
refresh_seconds = 1
EOF
    LOG=$1/log/slurmctld.log
    slurm_wait 60 grep -q "placer ready" "$LOG" || { echo "FAIL: placer never became ready"; exit 1; }
}

# The decision line for workload $3 after line $2 of log $1 ("" when none).
slurm_decision_after() {
    grep -F -e "kace: $3 -> node " -e "workload $3 left as submitted" < <(tail -n +$(($2 + 1)) "$1") | tail -1
}
slurm_decided_after() { [ -n "$(slurm_decision_after "$@")" ]; }
slurm_log_after_has() { grep -qF -- "$3" < <(tail -n +$(($2 + 1)) "$1"); }

slurm_test_warm() { # LOG WORKLOAD...
    local log=$1 w m line token tries
    shift
    for w in "$@"; do
        for ((tries = 0; ; tries++)); do
            m=$(wc -l <"$log")
            sbatch --test-only --kace-workload="$w" --wrap true >/dev/null 2>&1
            slurm_wait 30 slurm_decided_after "$log" "$m" "$w" || { echo "warm: no decision for $w" >&2; return 1; }
            line=$(slurm_decision_after "$log" "$m" "$w")
            [[ "$line" != *"not loaded yet"* ]] && break
            [ "$tries" -lt 10 ] || { echo "warm: $w still not loaded: $line" >&2; return 1; }
            # The load it asked for: a placer line after the probe.
            # (ready after a failed load, reloaded else)
            slurm_wait 60 slurm_log_after_has "$log" "$m" "kace: placer re" ||
                { echo "warm: the placer did not reload for $w" >&2; return 1; }
        done
        token=$(sed -n 's/.*, pick \([^)]*\))$/\1/p' <<<"$line")
        [ -z "$token" ] || slurm_wait 30 slurm_log_after_has "$log" "$m" "placement $token of $w" ||
            { echo "warm: probe $token of $w never dropped" >&2; return 1; }
    done
}

slurm_test_stop() {
    scancel --quiet --user=root 2>/dev/null
    slurm_cluster_stop
}

slurm_test_cleanup() { # DIR SAVE...
    slurm_test_stop
    slurm_test_keep "$@"
}

slurm_test_keep() { # DIR SAVE...
    local dir=$1
    shift
    # Keep the logs for a failed run, drop the rest.
    mkdir -p "$SCRATCH/logs"
    cp -r "$@" "$SCRATCH/logs/" 2>/dev/null
    rm -rf "$dir"
}

slurm_test_finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures check(s) failed; logs in $SCRATCH/logs"
        exit 1
    fi
}

slurm_cluster_start() {
    SLURM_DIR=$1
    local plugins=$2 d=$1
    # Ports from the pid, so that two runs on one machine do not collide;
    # moved on while any of the four is taken (another cluster listens).
    # All below 32768, where Linux's outgoing connections take their local
    # ports (ip_local_port_range): a client can hold such a port without
    # listening, and slurmctld then failed to bind (seen under load).
    local base=$((20000 + ($$ % 1270) * 10)) p taken tries=0
    while :; do
        taken=""
        for p in $base $((base + 1)) $((base + 2)) $((base + 3)); do
            (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && taken=$p
        done
        [ -z "$taken" ] && break
        tries=$((tries + 1))
        [ $tries -gt 50 ] && { echo "no free ports for the test cluster" >&2; return 1; }
        base=$((20000 + (($$ + tries * 7) % 1270) * 10))
    done
    rm -rf "$d"
    mkdir -p "$d"/munge "$d"/state "$d"/spool "$d"/log "$d"/dev/n1 "$d"/dev/n2 "$d"/dev/n3 || return 1
    chmod 755 "$d" "$d"/munge "$(dirname "$d")"
    touch "$d"/dev/n1/nvidia0 "$d"/dev/n2/nvidia0 "$d"/dev/n3/nvidia0
    local n2_gpus=${KACE_TEST_N2_GPUS:-1} i n2_gres="" n2_node="gpu:${KACE_TEST_N2_GPUS:-1},mps:$((100 * ${KACE_TEST_N2_GPUS:-1}))"
    [ "${KACE_TEST_N2_SHARE:-mps}" = shard ] && n2_node=""
    for ((i = 0; i < n2_gpus; i++)); do
        touch "$d/dev/n2/nvidia$i"
        if [ "${KACE_TEST_N2_SHARE:-mps}" = shard ]; then
            n2_gres+="NodeName=n2 Name=gpu Type=g$i File=$d/dev/n2/nvidia$i
NodeName=n2 Name=shard Type=g$i Count=4 File=$d/dev/n2/nvidia$i
"
            n2_node="${n2_node:+$n2_node,}gpu:g$i:1"
        else
            n2_gres+="NodeName=n2 Name=gpu File=$d/dev/n2/nvidia$i
NodeName=n2 Name=mps Count=100 File=$d/dev/n2/nvidia$i
"
        fi
    done
    if [ "${KACE_TEST_N2_SHARE:-mps}" = shard ]; then
        for ((i = 0; i < n2_gpus; i++)); do n2_node+=",shard:g$i:4"; done
    fi
    head -c 1024 /dev/urandom >"$d"/munge/munge.key
    chmod 400 "$d"/munge/munge.key
    munged --socket="$d"/munge/sock --key-file="$d"/munge/munge.key --pid-file="$d"/munge/munged.pid \
        --log-file="$d"/munge/munged.log --seed-file="$d"/munge/seed || return 1
    cat >"$d"/slurm.conf <<EOF
ClusterName=kacetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,mps,shard
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=60
MessageTimeout=20
InactiveLimit=0
KillWait=2
MinJobAge=30
JobSubmitPlugins=kace
PluginDir=$plugins:/usr/lib/x86_64-linux-gnu/slurm-wlm
PlugStackConfig=$d/plugstack.conf
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 1)) CPUs=4 RealMemory=1000 Gres=gpu:1,mps:100 Features=kace_n1,ib State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=4 RealMemory=1000 Gres=$n2_node Features=kace_n2,ib,big State=UNKNOWN
NodeName=n3 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 3)) CPUs=4 RealMemory=1000 Gres=gpu:1,shard:4 Features=kace_n3 State=UNKNOWN
PartitionName=debug Nodes=n1,n2,n3 Default=YES MaxTime=INFINITE State=UP
PartitionName=second Nodes=n2 MaxTime=INFINITE State=UP
${KACE_TEST_SLURM_CONF:-}
EOF
    cat >"$d"/gres.conf <<EOF
NodeName=n1 Name=gpu File=$d/dev/n1/nvidia0
NodeName=n1 Name=mps Count=100 File=$d/dev/n1/nvidia0
${n2_gres}NodeName=n3 Name=gpu File=$d/dev/n3/nvidia0
NodeName=n3 Name=shard Count=4 File=$d/dev/n3/nvidia0
EOF
    # KACE_TEST_SPANK_ARGS: more plugstack.conf arguments (cli_slurm.sh: profiler=, profile_dir=)
    echo "required $plugins/spank_kace.so shards_per_gpu=4 ${KACE_TEST_SPANK_ARGS:-}" >"$d"/plugstack.conf
    export SLURM_CONF=$d/slurm.conf
    slurmctld -f "$SLURM_CONF" -c || return 1
    local n
    for n in n1 n2 n3; do
        slurmd -f "$SLURM_CONF" -N "$n" || return 1
    done
    slurm_wait 60 slurm_nodes_idle
}
