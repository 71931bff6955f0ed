#!/usr/bin/env bash
# job_submit/kace never turns a job Slurm accepts into one it rejects: every
# class of job option (nodes, partitions, GPUs, features, exclusivity,
# arrays, heterogeneous jobs, reservations, node counts, CPUs, memory) is
# submitted to a real local Slurm (tests/slurm_cluster.sh) with and without
# --kace-workload, once as `sbatch --test-only` and once as a real held
# submission; each must be accepted with kace exactly when it is accepted
# without. On the idle cluster the test-only runs also check what kace did:
# placed the job (and on which node Slurm would start it) or left it as
# submitted, per class. slurmctld must be up at the end.
#
# usage: cli_slurm_matrix.sh KACE_BINARY SHARED_DATA SCRATCH_DIR
# Exits 77 (skipped) without root, the Slurm packages or the built plugins.
set -uo pipefail
KACE=$1
DATA=$2/kace-v100
SCRATCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PLUGINS=$(cd "$(dirname "$KACE")" && pwd)/slurm-plugins
source "$HERE/slurm_cluster.sh"
source "$HERE/lib_test.sh"
slurm_test_require "$PLUGINS/job_submit_kace.so" "$PLUGINS/spank_kace.so"

mkdir -p "$SCRATCH"
C=$(mktemp -d /tmp/kace-slurm.XXXXXX)
trap 'slurm_test_cleanup "$C" "$C/cluster/log" "$C/out"' EXIT
trap 'exit 1' INT TERM

slurm_test_store "$KACE" "$DATA" "$C/kace.db" "$C/model.txt"
slurm_test_start "$C/cluster" "$PLUGINS" "$C/kace.db" "$C/model.txt"
mkdir -p "$C/out"
cat >"$C/het.sh" <<'EOF'
#!/bin/bash
#SBATCH -n1
#SBATCH hetjob
#SBATCH -n1
true
EOF

T=bert-base-cased_batch8-train
# name | sbatch options | what kace does on the idle cluster: a node
# (placed, preferring it), "-" (left as submitted; or Slurm rejects it) or
# "*" (either). A node with "?": kace places it there, but Slurm may start it
# elsewhere (with several partitions Slurm tries them in its own order, and
# kace's --prefer applies inside each). RESERVE creates reservation r2 of n2, starting in an hour:
# the classes after it see n2 reserved.
CLASSES=(
    "plain||n1"
    "exclude-n1|--exclude=n1|n2"
    "exclude-n1n2|--exclude=n1,n2|-"
    "exclude-all|--exclude=n1,n2,n3|-"
    "nodelist-n2|--nodelist=n2|n2"
    "nodelist-n3|--nodelist=n3|-"
    "nodelist-n1n2|--nodelist=n1,n2|-"
    "nodelist-excluded|--nodelist=n1 --exclude=n1|-"
    "partition-second|-p second|n2"
    "partitions-two|-p debug,second|n2?"
    "partition-unknown|-p nosuch|-"
    "gpus|--gpus=1|-"
    "gpus-2|--gpus=2|-"
    "gpus-per-node|--gpus-per-node=1|-"
    "gpus-per-task|-n1 --gpus-per-task=1|-"
    "gres-gpu|--gres=gpu:1|-"
    "gres-mps|--gres=mps:50|-"
    "constraint|--constraint=big|n2"
    "constraint-and|--constraint=ib&big|n2"
    "constraint-or|--constraint=ib|big|n1"
    "constraint-unknown|--constraint=nosuch|-"
    "constraint-matching-or|--constraint=[ib|big]|-"
    "constraint-excluded|--constraint=big --exclude=n2|-"
    "prefer-own|--prefer=big|-"
    "exclusive|--exclusive|-"
    "exclusive-user|--exclusive=user|-"
    "array|--array=0-1|-"
    "het|HET|*"
    "nodes-1|-N1|n1"
    "nodes-2|-N2|-"
    "nodes-4|-N4|-"
    "ntasks-8|-n8|-"
    "cpus-4|-c4|n1"
    "cpus-5|-c5|-"
    "mem|--mem=900|n1"
    "mem-per-cpu|--mem-per-cpu=300 -c3|n1"
    "RESERVE"
    "reservation|--reservation=r2|n2"
    "reservation-unknown|--reservation=nosuch|-"
    "reserved-n2|--exclude=n1|-"
    "reserved-n2-later|--exclude=n1 --time=10|n2"
    "reserved-n2-listed|--nodelist=n2|-"
)

# Runs sbatch with the class's options; prints "ok" or "rejected: why".
submit() { # mode(test|hold) options kace(yes|no) out-name
    local mode=$1 opts=$2 kace=$3 name=$4 args=() script rc
    [ "$mode" == test ] && args+=(--test-only) || args+=(--hold --parsable -o /dev/null)
    [ "$kace" == yes ] && args+=(--kace-workload="$T")
    if [ "$opts" == HET ]; then
        script=("$C/het.sh")
    else
        # Options as words; --constraint values with | stay one word.
        read -r -a words <<<"$opts"
        args+=("${words[@]}")
        script=(--wrap true)
    fi
    sbatch "${args[@]}" "${script[@]}" >"$C/out/$name.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then echo ok; else echo "rejected: $(grep -m1 error "$C/out/$name.out")"; fi
}
new_kace_lines() { tail -n +$(($1 + 1)) "$LOG" | grep -E "kace: ($T -> node|job of workload $T left as submitted)"; }

reserve() {
    local marker start=$SECONDS
    scontrol create reservation reservationname=r2 nodes=n2 starttime=now+3600 duration=60 users=root >/dev/null ||
        fail "cannot create reservation r2"
    # kace sees it at its next refresh (refresh_seconds = 1): probe until
    # it places on n2, for up to 60 s from now (not from the script's start).
    marker=$(wc -l <"$LOG")
    sbatch --test-only --kace-workload="$T" --reservation=r2 --wrap true >/dev/null 2>&1
    until grep -q "kace: $T -> node n2" < <(tail -n +$((marker + 1)) "$LOG"); do
        ((SECONDS - start > 60)) && { fail "kace never saw reservation r2 (60 s)"; break; }
        sleep 0.3
        marker=$(wc -l <"$LOG")
        sbatch --test-only --kace-workload="$T" --reservation=r2 --wrap true >/dev/null 2>&1
    done
    echo "kace saw reservation r2 after $((SECONDS - start)) s (the test has run $SECONDS s)"
}

echo "--- sbatch --test-only on the idle cluster"
for entry in "${CLASSES[@]}"; do
    [ "$entry" == RESERVE ] && { reserve; continue; }
    name=${entry%%|*}
    rest=${entry#*|}
    opts=${rest%|*}
    want=${rest##*|}
    without=$(submit test "$opts" no "$name-test-plain")
    marker=$(wc -l <"$LOG")
    with=$(submit test "$opts" yes "$name-test-kace")
    [ "$without" == "$with" ] || fail "$name ($opts): without kace '$without', with kace '$with'"
    decision=$(new_kace_lines "$marker" | tail -1)
    got=-
    [[ "$decision" =~ "-> node "([a-z0-9]+) ]] && got=${BASH_REMATCH[1]}
    printf '%-24s %-36s %-10s kace: %s\n' "$name" "$opts" "${with%%:*}" "${decision#*kace: }"
    # sbatch --test-only asks about each component of a heterogeneous job
    # on its own (not as a component), so kace may place it there.
    [ "$want" == "*" ] || [ "$got" == "${want%\?}" ] || fail "$name: kace should have $([ "$want" == - ] && echo "left the job as submitted" ||
        echo "placed it on $want"), got: ${decision:-no kace log line}"
    # Where Slurm would start it: on kace's node, which it prefers.
    if [ "$got" != - ] && [ "$with" == ok ] && [ "$want" == "$got" ]; then
        grep -qE "on (nodes )?$got( |$)" "$C/out/$name-test-kace.out" ||
            fail "$name: sbatch --test-only does not start it on kace's node $got: $(cat "$C/out/$name-test-kace.out")"
    fi
done

echo "--- real (held) submissions, one after another: the GPUs fill up with kace's held jobs"
for entry in "${CLASSES[@]}"; do
    [ "$entry" == RESERVE ] && continue
    name=${entry%%|*}
    rest=${entry#*|}
    opts=${rest%|*}
    marker=$(wc -l <"$LOG")
    without=$(submit hold "$opts" no "$name-hold-plain")
    with=$(submit hold "$opts" yes "$name-hold-kace")
    [ "$without" == "$with" ] || fail "held $name ($opts): without kace '$without', with kace '$with'"
    if [ "$name" == het ]; then
        grep -q "left as submitted: a component of a heterogeneous job" < <(tail -n +$((marker + 1)) "$LOG") ||
            fail "kace did not leave the heterogeneous job's components as submitted"
    fi
done
echo "held jobs: $(squeue -h | wc -l); kace placed $(grep -c "kace: $T -> node" "$LOG") jobs in all, left $(grep -c "left as submitted" "$LOG") as submitted"

# Held jobs kace placed keep their preference: --prefer, not a pinned node list.
job=$(sed -n 's/.*kace: placement .* confirmed: job \([0-9]*\).*/\1/p' "$LOG" | head -1)
if [ -n "$job" ]; then
    scontrol show job "$job" >"$C/out/placed-job.txt"
    grep -qE "Prefer=kace_n[12]" "$C/out/placed-job.txt" || fail "placed job $job has no Prefer=kace_nX"
    grep -qE "ReqNodeList=\(null\)" "$C/out/placed-job.txt" || fail "placed job $job has a required node list"
    grep -qE "AdminComment=kace:workload=$T,share=[0-9]+ kace:node=n[12],pick=" "$C/out/placed-job.txt" ||
        fail "placed job $job does not carry kace's record"
else
    fail "no held job carries kace's record"
fi

grep -q UP < <(scontrol ping) || fail "slurmctld is down"
slurm_test_finish
echo "all matrix checks passed"
