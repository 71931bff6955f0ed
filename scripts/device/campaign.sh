#!/usr/bin/env bash
# The device campaign, resumable across short calls: profiles the catalog's
# workloads that the store has not profiled yet, then measures what the plan
# (scripts/device/plan.py, frozen in the store archive once every workload is
# profiled or has failed twice; workloads added to the catalog later join it)
# has not measured yet, and stops before
# --minutes are over (SIGTERM to kace: the run in flight is dropped, finished
# runs are kept). Writes into OUT:
#   campaign.log            one line per step: step NAME ok|fail|skip SECONDS detail
#   store.tar.gz            kace.db, plan.txt, profile-failures.txt: give it to the next call
#   campaign-export.tar.gz  CSV files `kace import` reads (kernel, system, pairs, triples,
#                           mps-splits, timeslice-pairs, runs, spread), README.md, the
#                           workloads' log and each step's output
#
#   bash scripts/device/campaign.sh OUT [--minutes M] [--store PREVIOUS/store.tar.gz]
#
# M (default 7, up to 1440; decimals allowed) bounds the whole call. CSVs are
# written with Python's sqlite3 module (scripts/device/store.py); no sqlite3
# program is needed. Environment: KACE_DEVICE_WARMUP / KACE_DEVICE_WINDOW
# (measure, default 5 / 10), KACE_DEVICE_PROFILE_WARMUP / _WINDOW (profile,
# default 10 / 20), KACE_PYTHON, KACE_CATALOG. Never changes GPU settings.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${OUT:-}
MINUTES=7
PREV=""
while [ $# -gt 0 ]; do
    case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --store) PREV=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "usage: campaign.sh OUT [--minutes M] [--store store.tar.gz]" >&2; exit 2 ;;
    *) OUT=$1; shift ;;
    esac
done
[ -n "$OUT" ] || { echo "usage: campaign.sh OUT [--minutes M] [--store store.tar.gz]" >&2; exit 2; }
awk -v m="$MINUTES" 'BEGIN { exit !(m > 0 && m <= 1440) }' ||
    { echo "campaign.sh: --minutes must be in (0, 1440] (a batch tool with 10-minute calls: 8)" >&2; exit 2; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
if [ -n "$PREV" ]; then
    # A store that cannot be read must stop the call: going on would start a new campaign
    # whose store replaces the old one.
    PREV=$(realpath -e -- "$PREV" 2>/dev/null) ||
        { echo "campaign.sh: --store $PREV: no such file; nothing was run" | tee "$OUT/campaign.log" >&2; exit 1; }
fi
LIMIT=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')
RESERVE=$(awk -v l="$LIMIT" 'BEGIN { r = l / 6; printf "%d", (r > 30 ? 30 : r) }')
WARMUP=${KACE_DEVICE_WARMUP:-5}
WINDOW=${KACE_DEVICE_WINDOW:-10}
# A profile's windows. On the first H200 (2026-11-28) the gemm's clean run read 536.6
# samples/s (sd 0.95) with 5 + 10 s and 537.4 (sd 1.38) with 10 + 20 s: the shorter
# windows cost half the device time, which a 15-minute visit cannot spare.
PWARMUP=${KACE_DEVICE_PROFILE_WARMUP:-5}
PWINDOW=${KACE_DEVICE_PROFILE_WINDOW:-10}
CWARMUP=${KACE_DEVICE_COUNTERS_WARMUP:-5}
CWINDOW=${KACE_DEVICE_COUNTERS_WINDOW:-5}
CHUNK_RUNS=${KACE_DEVICE_CHUNK_RUNS:-20}
# The MPS runs in a warm pool (kace campaign --pool): each (workload, share) started once
# a chunk, at most POOL_MEMBERS processes at once (KACE_DEVICE_POOL=0: every run cold).
POOL_ARGS=(--pool --pool-members "${KACE_DEVICE_POOL_MEMBERS:-16}")
[ "${KACE_DEVICE_POOL:-1}" = 0 ] && POOL_ARGS=()
PWW=$(awk -v a="$PWARMUP" -v b="$PWINDOW" -v c="$CWARMUP" -v d="$CWINDOW" 'BEGIN { printf "%d", a + b + c + d + 0.999 }')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kace-campaign.XXXXXX")
A=$WORK/campaign-export
S=$WORK/state
mkdir -p "$A" "$S"
DB=$S/kace.db
export KACE_DB=$DB
call_begin "$LIMIT" "$RESERVE" "$OUT/campaign.log" "$A"
# The later catalog (KACE_CATALOG_LATER, default workloads/catalog-later.txt, "none":
# no such catalog): workloads profiled only once the plan is measured, which then
# joins them. Entries [0, CATALOG_MAIN_N) are the catalog's, the rest the later one's.
CATALOG_LATER=${KACE_CATALOG_LATER:-$WDIR/catalog-later.txt}
catalog_load_all() {
    catalog_load
    CATALOG_MAIN_N=${#CATALOG_NAMES[@]}
    if [ "$CATALOG_LATER" != none ] && [ -f "$CATALOG_LATER" ]; then catalog_load "$CATALOG_LATER"
    elif [ -n "${KACE_CATALOG_LATER:-}" ] && [ "$CATALOG_LATER" != none ]; then
        echo "campaign.sh: KACE_CATALOG_LATER=$CATALOG_LATER: no such file: no later catalog" >&2
    fi
}
catalog_load_all
MPS_CONTROL=${KACE_MPS_CONTROL:-nvidia-cuda-mps-control}
GPU=unknown
unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT

s_restore() {
    [ -n "$PREV" ] || { DETAIL="no previous store: a new campaign"; return 0; }
    [ -f "$PREV" ] || { DETAIL="$PREV does not exist"; return 1; }
    tmo tar -C "$S" -xzf "$PREV" || { DETAIL="cannot unpack $PREV"; return 1; }
    [ -f "$DB" ] || { DETAIL="$PREV holds no kace.db"; return 1; }
    DETAIL="$(py_store summary "$DB")"
}
GPU_MISMATCH=0
s_env() {
    GPU=$(gpu_name)
    [ -n "$GPU" ] || { GPU=unknown; DETAIL="nvidia-smi gives no GPU name"; return 1; }
    # A campaign is one GPU model's: runs here would be compared with profiles and runs
    # measured there (the batch tool may lend an H200 where an H100 was asked for).
    local first
    first=$(awk -F'\t' 'NF >= 2 { print $2; exit }' "$S/visits.tsv" 2>/dev/null)
    first=${first%%, *}
    if [ -n "$first" ] && [ "$first" != unknown ] && [ "$first" != "$GPU" ]; then
        GPU_MISMATCH=1
        DETAIL="the store was measured on $first and this GPU is $GPU: give this GPU a campaign of its own (no --store) and its own dataset folder"
        return 1
    fi
    # What this call ran on, kept in the store for the dataset's README
    # (scripts/device/dataset.py): date, GPU, driver, memory, CUDA, torch, bundle.
    local q cuda torch_v
    q=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
    if [ "$FAKE" = 1 ]; then torch_v=fake; else
        torch_v=$(tmo "$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null | tail -1); fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "${q:-$GPU}" "${cuda:-?}" "${torch_v:-?}" \
        "$(head -1 "$BUNDLE/VERSION")" >>"$S/visits.tsv"
    command -v "$MPS_CONTROL" >/dev/null || { DETAIL="$GPU; $MPS_CONTROL not found"; return 1; }
    DETAIL="$GPU; ${q#*, }; CUDA ${cuda:-?}; torch ${torch_v:-?}"
}
s_build_workloads() {
    if [ "$FAKE" = 1 ]; then DETAIL="fake mode"; return 2; fi
    command -v nvcc >/dev/null || { DETAIL="nvcc not found: no CUDA C workloads"; return 1; }
    workloads_writable
    tmo make -C "$WDIR" || { DETAIL="make -C workloads failed"; return 1; }
    catalog_load_again
}
catalog_load_again() { CATALOG_NAMES=() CATALOG_KINDS=() CATALOG_CMDS=() CATALOG_RAW=(); catalog_load_all; }
# The bundle's injection library if it records kernels here, else one built here.
s_inject_check() {
    local i idx=""
    for i in "${!CATALOG_KINDS[@]}"; do [ "${CATALOG_KINDS[$i]}" = cuda ] && { idx=$i; break; }; done
    local lib=$BUNDLE/lib/libkace_cupti.so
    if [ -z "$idx" ]; then DETAIL="no cuda workload to check with: using $lib"; export KACE_CUPTI_LIBRARY=$lib; return 2; fi
    local try rec=$WORK/inject-check.txt
    for try in bundle server; do
        if [ $try = server ]; then
            find_cupti && build_inject "$WORK/libkace_cupti.so" || continue
            lib=$WORK/libkace_cupti.so
        fi
        catalog_cmd "$idx"
        rm -f "$rec"
        CUDA_INJECTION64_PATH=$lib KACE_CUPTI_OUTPUT=$rec KACE_CUPTI_COUNTERS=1 timeout -k 5 4 "${CMD[@]}" >/dev/null 2>&1
        local k c; read -r k c _ <<<"$(recording_counts "$rec")"
        echo "$try: $k kernels, $c counter lines"
        if [ "$k" -gt 0 ]; then
            export KACE_CUPTI_LIBRARY=$lib
            DETAIL="$try library: $k kernels, $c counter lines in 4 s"
            return 0
        fi
    done
    export KACE_CUPTI_LIBRARY=$BUNDLE/lib/libkace_cupti.so
    DETAIL="neither injection library recorded kernels; profiles will fail"
    return 1
}
# Commands with this server's paths (a store from another machine names its own).
s_register() {
    local i n=0
    for i in "${!CATALOG_NAMES[@]}"; do
        grep -qxF "${CATALOG_NAMES[$i]}" "$WORK/profiled.txt" || continue
        catalog_cmd "$i"
        tmo "$KACE" workload add "${CATALOG_NAMES[$i]}" -- "${CMD[@]}" >/dev/null && n=$((n + 1))
    done
    DETAIL="$n commands"
}
# A workload's profile failures count under its key (workload_key): a fix to it starts
# its count again. WORKLOAD_KEY[NAME] is set for every catalog entry.
declare -A WORKLOAD_KEY=()
for i in "${!CATALOG_NAMES[@]}"; do WORKLOAD_KEY[${CATALOG_NAMES[$i]}]=$(workload_key "$i"); done
failures() { profile_failures "$S/profile-failures.txt" "$1" "${WORKLOAD_KEY[$1]:-}"; }
s_profile() {
    local idx=$1 name=${CATALOG_NAMES[$1]} need=$2
    catalog_cmd "$idx"
    [ "$(until_s "$CALL_DEADLINE")" -ge "$need" ] || { DETAIL="left for the next call (needs ${need} s)"; return 2; }
    if [ "${CATALOG_KINDS[$idx]}" = cuda ] && [ "$FAKE" != 1 ] && [ ! -x "${CMD[0]}" ]; then
        DETAIL="${CMD[0]} not built"; return 2
    fi
    # Both runs within the step (--budget): the counters run, whose start and kernel replay
    # make it the longer (BERT's first step took 22.4 s on the H200), gets what the clean
    # run left, not a fixed half.
    local budget; budget=$(at_least $(( $(step_left) - 5 )) 10)
    fake_nvml alone
    local t0=$EPOCHREALTIME
    tmo "$KACE" profile --name "$name" --warmup "$PWARMUP" --window "$PWINDOW" --counters-warmup "$CWARMUP" \
        --counters-window "$CWINDOW" --budget "$budget" \
        -- "${CMD[@]}" >"$WORK/p.out" 2>&1
    local rc=$? wall; wall=$(since "$t0")
    cat "$WORK/p.out"
    if [ $rc -ne 0 ]; then
        profile_failure_add "$S/profile-failures.txt" "$name" "${WORKLOAD_KEY[$name]:-}"
        # A run that ran out of time: the next try is given more (profile_need).
        profile_ran_out "$name" "$rc" "$WORK/p.out" && printf '%s\t%s\n' "$name" "$wall" >>"$S/profile-timeouts.tsv"
        DETAIL="exit $rc (failure $(failures "$name") of 2): $(grep -m1 'kace' "$WORK/p.out" | cut -c1-200)"
        return 1
    fi
    echo "$name" >>"$WORK/profiled.txt"
    # The profile's cost and where its counters window starts (for ncu's --launch-skip).
    local k c b kps
    read -r k c b <<<"$(profile_counts "$WORK/p.out")"
    kps=$(profile_kernels_per_sample "$WORK/p.out")
    [ -s "$S/profile-cost.tsv" ] ||
        printf 'workload\tkind\twall_s\tkernels\twith_counters\tkernels_before\twarmup_s\twindow_s\tcounters_warmup_s\tcounters_window_s\tkernels_per_sample\n' >"$S/profile-cost.tsv"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "${CATALOG_KINDS[$idx]}" "$wall" "${k:-}" "${c:-}" "${b:-}" \
        "$PWARMUP" "$PWINDOW" "$CWARMUP" "$CWINDOW" "${kps:-}" >>"$S/profile-cost.tsv"
    DETAIL="$(grep -m1 -E 'samples/s' "$WORK/p.out" | cut -c1-200); ${wall} s"
}
# ncu against kace on one profiled workload (the H100 issue: the three CUDA C
# workloads and two PyTorch ones). Kept in the store folder, so a later call
# skips it: ncu/TAG.ncu.csv.gz (ncu's export), ncu/TAG.compare.csv, a line of
# ncu-cost.tsv. ncu starts where kace's counters window started, or earlier
# (ncu_skip: at most 100 launches in for CUDA C, three steps for PyTorch), and
# profiles ncu_step_count's launches (CUDA C 20, PyTorch a step and a quarter,
# from kace's kernels per sample, as fit in the step). CACHE is ncu's
# --cache-control: all (TAG = NAME), and for a CUDA C workload also none
# (TAG = NAME.nocache), a step of its own with its own time: kace's replay
# does not flush the caches that ncu flushes by default, and a DRAM
# difference that this run does not show is that flush. Each tag is tried
# in at most two calls of the current way of running ncu (NCU_WAY; failures of
# an earlier way, such as the first H200 call's 200 launches after a skip of
# 1000, do not count against it).
NCU_WAY=2
ncu_failures() { count_lines "$S/ncu-failures.txt" "$1 way $NCU_WAY"; }
s_ncu() {
    local idx=$1 name=${CATALOG_NAMES[$1]} kind=${CATALOG_KINDS[$1]} need=$2 cache=$3
    local tag=$name
    [ "$cache" = all ] || tag=$name.nocache
    command -v ncu >/dev/null || { DETAIL="ncu not found"; return 2; }
    catalog_cmd "$idx"
    if [ "$kind" = cuda ] && [ "$FAKE" != 1 ] && [ ! -x "${CMD[0]}" ]; then DETAIL="${CMD[0]} not built"; return 2; fi
    [ "$(until_s "$CALL_DEADLINE")" -ge "$need" ] || { DETAIL="left for the next call (needs ${need} s)"; return 2; }
    local row k b kps
    row=$(awk -F'\t' -v n="$name" '$1 == n { r = $0 } END { print r }' "$S/profile-cost.tsv" 2>/dev/null)
    k=$(cut -f4 <<<"$row") b=$(cut -f6 <<<"$row") kps=$(cut -f11 <<<"$row")
    [ -n "$k" ] && [ -n "$b" ] || { DETAIL="no kernel counts of kace's profile of $name (profile-cost.tsv)"; return 2; }
    # A PyTorch run's launches are sized to fit the step, less 40 s for its start and
    # skip (a guess), at the slowest seconds per launch that its kind's ncu runs took in
    # this campaign, 0.5 s before any.
    local per; per=$(ncu_seconds_per_kernel "$S/ncu-cost.tsv" "$kind")
    local count; count=$(ncu_step_count "$kind" "$name" "$kps" "${per:-0.5}" $((need - 45 - 40)))
    local skip; skip=$(ncu_skip "$kind" "$name" "$b" "$kps")
    [ "$k" -lt "$count" ] && count=$k
    echo "ncu profiles $count launches (kace: ${kps:-?} kernels per sample, $k kernels in its window)"
    mkdir -p "$S/ncu"
    [ -s "$S/ncu-cost.tsv" ] ||
        printf 'workload\tkind\tcache_control\twall_s\tlaunch_skip\tlaunch_count\tkernels\n' >"$S/ncu-cost.tsv"
    local csv=$WORK/$tag.ncu.csv
    if ! ncu_run "$idx" "$skip" "$count" "$csv" "$cache" || ! ncu_compare "$name" "$DB" "$csv" "$WORK/$tag.compare.csv"; then
        echo "$tag way $NCU_WAY" >>"$S/ncu-failures.txt"
        DETAIL="$DETAIL (failure $(ncu_failures "$tag") of 2)"
        return 1
    fi
    gzip -9 -c "$csv" >"$S/ncu/$tag.ncu.csv.gz" && mv "$WORK/$tag.compare.csv" "$S/ncu/$tag.compare.csv"
    local n; n=$(awk -F, 'NR == 2 { print $NF }' "$S/ncu/$tag.compare.csv")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$cache" "$NCU_S" "$NCU_SKIP" "$count" "$n" >>"$S/ncu-cost.tsv"
    if [ "$cache" = all ]; then DETAIL="$NCU_SUMMARY; ncu ${NCU_S} s"
    else DETAIL="no cache flush: ${NCU_SUMMARY%%; largest*}; ncu ${NCU_S} s"; fi
}
# The plan is made once every catalog workload is profiled or has failed twice:
# plan.py's, or KACE_DEVICE_PLAN (a plan file of yours, for the catalog's workloads).
# A workload added to the catalog later, or a later catalog's once profiled, joins it
# (plan.py --extend): the plan's text stays, so what it measured stays measured. The
# catalog's workloads still to profile hold that back; the later catalog's do not.
s_plan() {
    local i left=0 names=()
    # A plan of your own (KACE_DEVICE_PLAN, noted in plan-source.txt) takes in only the
    # later catalog's workloads, never the catalog's that it left out.
    local own=0
    [ -f "$S/plan-source.txt" ] && [ -f "$S/plan.txt" ] &&
        own=1 && awk '$1 == "workloads" { for (i = 2; i <= NF; i++) print $i }' "$S/plan.txt" >"$WORK/plan-names.txt"
    for i in "${!CATALOG_NAMES[@]}"; do
        if grep -qxF "${CATALOG_NAMES[$i]}" "$WORK/profiled.txt"; then
            if [ "$i" -lt "$CATALOG_MAIN_N" ]; then
                { [ $own = 0 ] || grep -qxF "${CATALOG_NAMES[$i]}" "$WORK/plan-names.txt"; } && names+=("${CATALOG_NAMES[$i]}")
            else
                [ -f "$S/plan.txt" ] && names+=("${CATALOG_NAMES[$i]}")
            fi
        elif [ "$i" -lt "$CATALOG_MAIN_N" ] && [ "$(failures "${CATALOG_NAMES[$i]}")" -lt 2 ]; then
            left=$((left + 1))
        fi
    done
    if [ -f "$S/plan.txt" ]; then
        DETAIL="the plan in the store ($(grep -c . "$S/plan.txt") lines)"
        [ ${#names[@]} -gt 0 ] || return 0
        "$PY" "$DEV_DIR/plan.py" --extend "$S/plan.txt" "${names[@]}" >"$WORK/plan.txt" ||
            { DETAIL="$DETAIL; plan.py --extend failed"; return 1; }
        cmp -s "$WORK/plan.txt" "$S/plan.txt" && return 0
        [ $left = 0 ] || { DETAIL="$DETAIL; $left new workloads still to profile before they join it"; return 0; }
        mv "$WORK/plan.txt" "$S/plan.txt"
        local added; added=$(grep '^workloads ' "$S/plan.txt" | tail -1)
        DETAIL="$DETAIL, extended with ${added#workloads }: $("$KACE" campaign --dry-run "$S/plan.txt" | sed -n 1p)"
        return 0
    fi
    [ $left = 0 ] || { DETAIL="$left workloads still to profile: no plan yet"; return 2; }
    if [ -n "${KACE_DEVICE_PLAN:-}" ]; then
        cp "$KACE_DEVICE_PLAN" "$S/plan.txt" || { rm -f "$S/plan.txt"; DETAIL="KACE_DEVICE_PLAN: cannot read $KACE_DEVICE_PLAN"; return 1; }
        # kace checks it (syntax, workloads with commands) before it stays in the store.
        "$KACE" campaign --dry-run "$S/plan.txt" >"$WORK/plan-check.txt" 2>&1 ||
            { rm -f "$S/plan.txt"; DETAIL="KACE_DEVICE_PLAN: $(grep -m1 'kace' "$WORK/plan-check.txt" | cut -c1-200)"; return 1; }
        echo "$KACE_DEVICE_PLAN" >"$S/plan-source.txt"
        DETAIL="your plan ($KACE_DEVICE_PLAN): $(sed -n 1p "$WORK/plan-check.txt" | sed 's/^plan [^:]*: //')"
        return 0
    fi
    "$PY" "$DEV_DIR/plan.py" "${names[@]}" >"$S/plan.txt" || { rm -f "$S/plan.txt"; DETAIL="plan.py failed"; return 1; }
    DETAIL="new plan for ${#names[@]} workloads: $("$KACE" campaign --dry-run "$S/plan.txt" | sed -n 1p)"
}
# kace campaign in chunks of CHUNK_RUNS runs (KACE_DEVICE_CHUNK_RUNS, default 20), the
# store saved to OUT after each: a long call that is ended from outside (a job's time
# limit, a lost node) keeps all but the last chunk. Each chunk starts a fresh MPS daemon
# and a fresh pool.
PLAN_DONE=0
s_campaign() {
    [ -f "$S/plan.txt" ] || { DETAIL="no plan yet"; return 2; }
    local need=30
    [ "$LIMIT" -ge 180 ] || need=8
    [ "$(until_s "$CALL_DEADLINE")" -ge $need ] || { DETAIL="no time left to measure"; return 2; }
    fake_nvml mps
    local t0=$EPOCHREALTIME rc left chunks=0 done_n=0 ok_n=0 failed_n=0 before_n="" left_n="" line
    : >"$WORK/runs.out"
    while :; do
        left=$(until_s "$CALL_DEADLINE")
        [ "$left" -ge $need ] || { rc=124; break; }
        local rd; rd=$(mktemp -d /tmp/kmps.XXXXXX)
        # SIGTERM at the deadline: kace drops the run in flight, quits MPS, keeps the rest.
        timeout -k 20 "$left" "$KACE" campaign "$S/plan.txt" --warmup "$WARMUP" --window "$WINDOW" \
            --max-runs "$CHUNK_RUNS" "${POOL_ARGS[@]}" --run-dir "$rd" --gpu "$GPU" --log "$A/workloads.log" --quiet \
            >"$WORK/c.out" 2>&1
        rc=$?
        chunks=$((chunks + 1))
        cat "$WORK/c.out"
        cat "$WORK/c.out" >>"$WORK/runs.out"
        if [ $rc = 137 ] && [ -e "$rd/pipe/control" ]; then # kace was killed: its MPS daemon may live on
            echo quit | CUDA_MPS_PIPE_DIRECTORY=$rd/pipe CUDA_MPS_LOG_DIRECTORY=$rd/log timeout 10 "$MPS_CONTROL"
            sleep 2
        fi
        rm -rf "$rd"
        # campaign: N runs measured (A ok, B failed), S were stored before, L left
        line=$(grep -m1 '^campaign:' "$WORK/c.out")
        if [[ $line =~ ^campaign:\ ([0-9]+)\ runs\ measured\ \(([0-9]+)\ ok,\ ([0-9]+)\ failed\),\ ([0-9]+)\ were\ stored\ before,\ ([0-9]+)\ left ]]; then
            done_n=$((done_n + BASH_REMATCH[1])) ok_n=$((ok_n + BASH_REMATCH[2])) failed_n=$((failed_n + BASH_REMATCH[3]))
            before_n=${before_n:-${BASH_REMATCH[4]}} left_n=${BASH_REMATCH[5]}
        fi
        [ $rc = 0 ] && [ "${left_n:-0}" -gt 0 ] && [ -n "$line" ] || break
        save_store
    done
    [ -n "$before_n" ] && DETAIL="campaign: $done_n runs measured ($ok_n ok, $failed_n failed), $before_n were stored before, $left_n left"
    [ $chunks -gt 1 ] && DETAIL+=" (in $chunks chunks of at most $CHUNK_RUNS runs)"
    case $rc in
    0)
        if [ "${left_n:-}" = 0 ]; then DETAIL="${DETAIL:-exit 0}; the plan is done"; PLAN_DONE=1
        else DETAIL="${DETAIL:-exit 0}; kace campaign ended without its summary line"; fi ;;
    124 | 143) DETAIL="stopped at the deadline; ${DETAIL:-no summary}" ;;
    *) DETAIL="exit $rc: $(grep -m1 'kace:' "$WORK/c.out") ${DETAIL}"; return 1 ;;
    esac
    # How long an ok run took, and how much of it its members took to start (median; what
    # keeping workloads warm between runs could save).
    local w f
    # kace campaign's lines: "[I/N] A + B #R: run ID (SET, MPS, repetition R): ok in W s (...)";
    # a cold run's "(...)" gives its members' start, a pool run's none (its members started once).
    sed -n -E 's/^(.*: )?run [0-9]+ \([^)]*\): ok in ([0-9.]+) s( \(every member.s first report within ([0-9.]+) s of its start\))?$/\2 \4/p' \
        "$WORK/runs.out" 2>/dev/null >"$WORK/run-times.txt"
    median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "%.1f", a[int((NR + 1) / 2)] }'; }
    w=$(cut -d' ' -f1 "$WORK/run-times.txt" | median) f=$(awk 'NF > 1 { print $2 }' "$WORK/run-times.txt" | median)
    [ -n "$w" ] && DETAIL+="; an ok run took a median $w s"
    [ -n "$f" ] && DETAIL+=", a cold run's members started within a median $f s"
    # The warm pool, over the chunks: "pool: N MPS runs measured by M member processes, ...;
    # starting them took S s, the runs R s".
    DETAIL+=$(sed -n -E 's/^pool: ([0-9]+) MPS runs measured by ([0-9]+) member processes.*took ([0-9.]+) s, the runs ([0-9.]+) s$/\1 \2 \3 \4/p' \
        "$WORK/runs.out" | awk '{ n += $1; m += $2; s += $3; r += $4 } END {
            if (NR) printf "; pool: %d MPS runs by %d member processes, their starts %.0f s, the runs %.0f s", n, m, s, r }')
    # How much device time the rest of the plan needs, at this call's pace.
    if [ "$done_n" -gt 0 ] && [ "${left_n:-0}" -gt 0 ]; then
        DETAIL+=$(awk -v a="$t0" -v b="$EPOCHREALTIME" -v d="$done_n" -v l="$left_n" \
            'BEGIN { r = (b - a) / d; printf "; %.0f s a run: about %.0f min of measuring left", r, l * r / 60 }')
    fi
}
s_export() {
    [ -f "$DB" ] || { DETAIL="no store"; return 1; }
    tmo "$PY" "$DEV_DIR/store.py" export "$DB" "$A" || { DETAIL="store.py export failed"; return 1; }
    local sum plan_line=""
    sum=$(py_store summary "$DB")
    [ -f "$S/plan.txt" ] && plan_line=$("$KACE" campaign --dry-run "$S/plan.txt" 2>/dev/null | sed -n 1p)
    {
        echo "# kace device campaign on $GPU"
        echo
        echo "Written by scripts/device/campaign.sh ($(head -1 "$BUNDLE/VERSION")) on $(date -u +%FT%TZ)."
        echo "- store: $sum"
        echo "- $plan_line"
        echo
        echo "kernel.csv, system.csv (exclusive-by-mps.csv, once measured): profiles; pairs.csv, triples.csv, mps-splits.csv, timeslice-pairs.csv:"
        echo "means over ok repetitions; runs.csv: every run and member; spread.csv: run-to-run spread."
        echo "Use: kace import kernel.csv system.csv pairs.csv triples.csv; kace train"
        echo "Into the repository: python3 scripts/device/dataset.py store.tar.gz data/h100"
        if [ -f "$S/visits.tsv" ]; then
            echo
            echo "Calls (UTC start, GPU with driver and memory, CUDA, torch, bundle):"
            sed 's/^/- /' "$S/visits.tsv"
        fi
    } >"$A/README.md"
    DETAIL="$sum; ${plan_line#plan *: }"
}

# stop_early WHY: ends the call before anything was measured, with no store in OUT, so that
# the store given with --store stays the one to resume from.
stop_early() {
    printf 'end ok %d fail %d skip %d %s s (%s: nothing else was run)\n' \
        "$N_OK" "$N_FAIL" "$N_SKIP" "$(since "$T_START")" "$1" | tee -a "$OUT/campaign.log"
    rm -rf "$WORK"
    exit 1
}
step restore 30 s_restore
[ "$LAST_STATUS" = fail ] && stop_early "the store given with --store could not be restored"
: >"$WORK/profiled.txt"
[ -f "$DB" ] && py_store profiled "$DB" >"$WORK/profiled.txt" 2>/dev/null
step env 20 s_env
[ "$GPU_MISMATCH" = 1 ] && stop_early "the store is another GPU model's"
if grep -q ' cuda ' "$CATALOG"; then step build-workloads 150 s_build_workloads; fi
step inject-check 60 s_inject_check
step register 30 s_register
# The store as it stands goes to OUT after every profile and ncu step, so that a call
# cut short (the batch tool's limit) keeps what it measured.
save_store() {
    py_store checkpoint "$DB" >/dev/null 2>&1
    tar -C "$S" -czf "$OUT/.store.tar.gz.part" . && mv "$OUT/.store.tar.gz.part" "$OUT/store.tar.gz"
}
# ncu: every CUDA C workload and the first PyTorch training and inference ones
# (KACE_DEVICE_NCU: the names instead; "none": no comparison).
NCU_IDX=()
if [ "${KACE_DEVICE_NCU:-}" != none ]; then
    have_train="" have_inf=""
    for i in "${!CATALOG_NAMES[@]}"; do
        name=${CATALOG_NAMES[$i]}
        if [ -n "${KACE_DEVICE_NCU:-}" ]; then
            [[ " $KACE_DEVICE_NCU " == *" $name "* ]] && NCU_IDX+=("$i")
            continue
        fi
        [ "$i" -lt "$CATALOG_MAIN_N" ] || break
        case ${CATALOG_KINDS[$i]}:$name in
        cuda:*) NCU_IDX+=("$i") ;;
        torch:*-train) [ -n "$have_train" ] || { have_train=1; NCU_IDX+=("$i"); } ;;
        torch:*-inf) [ -n "$have_inf" ] || { have_inf=1; NCU_IDX+=("$i"); } ;;
        esac
    done
fi
# ncu_step IDX CACHE: the ncu step of a profiled workload, unless it is done or failed twice.
# Once an ncu step of a call has profiled no launch, the call's other ncu steps wait for a
# later call (each would spend its time the same way: on the first H200, three ncu runs
# profiled nothing in 44 to 75 s each). After two calls like that, with no comparison ever
# made, the campaign runs ncu no more in this way of running it (ncu-nothing.tsv in the
# store: one line a call, with NCU_WAY, which a fix raises; the probes, ncu-probe.tsv,
# say where ncu stopped).
NCU_NOTHING_CALL=0 NCU_OTHERS_SAID=0
s_ncu_others() { DETAIL="this call's ncu profiled no launch: its other ncu steps wait for a later call"; return 2; }
ncu_step() {
    local i=$1 cache=$2 name=${CATALOG_NAMES[$1]} tag need
    if [ "$NCU_NOTHING_CALL" = 1 ]; then
        [ "$NCU_OTHERS_SAID" = 1 ] || step ncu-others 5 s_ncu_others
        NCU_OTHERS_SAID=1
        return 0
    fi
    ncu_off "$S" "$NCU_WAY" && return 0
    grep -qxF "$name" "$WORK/profiled.txt" || return 0
    tag=$name
    [ "$cache" = all ] || tag=$name.nocache
    [ -f "$S/ncu/$tag.compare.csv" ] && return 0
    [ "$(ncu_failures "$tag")" -ge 2 ] && return 0
    [ "${CATALOG_KINDS[$i]}" = cuda ] && need=90 || need=300
    [ "$FAKE" = 1 ] && need=20
    NCU_PROFILED=""
    step "ncu-$tag" "$need" s_ncu "$i" "$need" "$cache"
    if [ "$LAST_STATUS" = fail ] && [ "$NCU_PROFILED" = 0 ]; then
        NCU_NOTHING_CALL=1
        printf '%s\t%s\t%s\tway %s\n' "$(date -u +%FT%TZ)" "$GPU" "$tag" "$NCU_WAY" >>"$S/ncu-nothing.tsv"
    fi
    [ "$LAST_STATUS" = skip ] || save_store
    [ "$NCU_NOTHING_CALL" = 1 ] || return 0
    # An ncu run that profiled no launch: the probes tell where ncu stops (once a campaign).
    if [ "$NCU_PROBED" = 0 ] && [ ! -s "$S/ncu-probe.tsv" ]; then
        NCU_PROBED=1
        step ncu-probe $((3 * (${KACE_DEVICE_NCU_PROBE_S:-15} + ${KACE_DEVICE_NCU_PROBE_END_S:-20} + 20))) s_ncu_probe
        [ "$LAST_STATUS" = skip ] || save_store
    fi
}
# s_ncu_probe: ncu_probe on the catalog's first CUDA C workload; ok once the probes ran,
# whatever they found (the ncu step's failure is already counted). Their results stay in
# the store (ncu-probe.tsv: date, GPU, workload, what each probe profiled).
NCU_PROBED=0
s_ncu_probe() {
    local i idx=""
    for i in "${!CATALOG_KINDS[@]}"; do [ "${CATALOG_KINDS[$i]}" = cuda ] && { idx=$i; break; }; done
    [ -n "$idx" ] || { DETAIL="no CUDA C workload to probe with"; return 2; }
    catalog_cmd "$idx"
    if [ "$FAKE" != 1 ] && [ ! -x "${CMD[0]}" ]; then DETAIL="${CMD[0]} not built"; return 2; fi
    local need=$((${KACE_DEVICE_NCU_PROBE_S:-15} + ${KACE_DEVICE_NCU_PROBE_END_S:-20} + 10))
    [ "$(step_left)" -ge $need ] || { DETAIL="left for the next call (needs $need s for one probe)"; return 2; }
    ncu_probe "$idx"
    # Kept (and not tried again) only when all three probes had their time.
    [ "$PROBES_RUN" = 3 ] &&
        printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$GPU" "${CATALOG_NAMES[$idx]}" "$DETAIL" >>"$S/ncu-probe.tsv"
    DETAIL="${CATALOG_NAMES[$idx]}: $DETAIL"
    return 0
}
# Until one ncu step has worked in this campaign, the first one comes before the profiles:
# ncu is the one device step that has never worked (the first H200: no launch profiled),
# and a call that spent its time on profiles would not learn whether its fix does.
s_ncu_off() {
    DETAIL="ncu (way $NCU_WAY) profiled no launch in $(grep -c "	way $NCU_WAY\$" "$S/ncu-nothing.tsv") calls (ncu-nothing.tsv) and never compared: no ncu steps; the probes (ncu-probe.tsv) say where it stopped"
    return 2
}
if [ -n "${NCU_IDX[*]}" ] && ncu_off "$S" "$NCU_WAY"; then
    step ncu 5 s_ncu_off
elif [ -n "${NCU_IDX[*]}" ] && ! ls "$S"/ncu/*.compare.csv >/dev/null 2>&1; then
    ncu_step "${NCU_IDX[0]}" all
fi
# profile_steps FROM TO: a profile step for each catalog entry in [FROM, TO) not profiled
# yet (and not failed twice); sets PROFILED_NOW to how many worked.
# A profile's need is capped at what an 8-minute call gives after its first steps (390 s,
# KACE_DEVICE_PROFILE_NEED_MAX): more would leave the workload to a next call for ever,
# and the plan waiting for it. A shorter call leaves a longer need to a longer call.
PROFILE_NEED_MAX=${KACE_DEVICE_PROFILE_NEED_MAX:-390}
profile_steps() {
    local i name need
    PROFILED_NOW=0
    for ((i = $1; i < $2; i++)); do
        name=${CATALOG_NAMES[$i]}
        grep -qxF "$name" "$WORK/profiled.txt" && continue
        [ "$(failures "$name")" -ge 2 ] && continue
        need=$(profile_need "${CATALOG_KINDS[$i]}" "$name")
        # Never more than a call can give after its first steps (a need above that would
        # leave the workload to a next call for ever, and the plan waiting for it).
        [ "$need" -gt "$PROFILE_NEED_MAX" ] && need=$PROFILE_NEED_MAX
        [ "$FAKE" = 1 ] && need=$((PWW + 12))
        step "profile-$name" "$need" s_profile "$i" "$need"
        [ "$LAST_STATUS" = ok ] && PROFILED_NOW=$((PROFILED_NOW + 1))
        [ "$LAST_STATUS" = skip ] || save_store
    done
}
profile_steps 0 "$CATALOG_MAIN_N"
for i in "${NCU_IDX[@]}"; do
    caches=all
    [ "${CATALOG_KINDS[$i]}" = cuda ] && caches="all none"
    for cache in $caches; do ncu_step "$i" "$cache"; done
done
step plan 20 s_plan
step campaign "$LIMIT" s_campaign
# Once the plan is measured, the later catalog's workloads are profiled and join it
# (the plan grows by their pairs), and what time is left measures those.
if [ "$PLAN_DONE" = 1 ] && [ "$CATALOG_MAIN_N" -lt "${#CATALOG_NAMES[@]}" ]; then
    profile_steps "$CATALOG_MAIN_N" "${#CATALOG_NAMES[@]}"
    if [ "$PROFILED_NOW" -gt 0 ]; then
        step plan-later 20 s_plan
        step campaign-later "$LIMIT" s_campaign
    fi
fi
CALL_DEADLINE=$(awk -v d="$CALL_DEADLINE" -v r="$RESERVE" 'BEGIN { printf "%.3f", d + r - 2 }')
step export 30 s_export
s_pack() {
    save_store || { DETAIL="tar of the store failed"; return 1; }
    tmo tar -C "$WORK" --exclude='*-pack.txt' -czf "$OUT/campaign-export.tar.gz" campaign-export || { DETAIL="tar failed"; return 1; }
    DETAIL="$(du -b "$OUT"/*.tar.gz | awk '{ printf "%s %d B; ", $2, $1 }' | sed "s|$OUT/||g")"
    out_check "$OUT" || return 1
}
CALL_DEADLINE=$(awk -v t="$T_START" -v l="$LIMIT" 'BEGIN { printf "%.3f", t + l - 1 }') # pack: up to the call's end
step pack 20 s_pack
printf 'end ok %d fail %d skip %d %s s\n' "$N_OK" "$N_FAIL" "$N_SKIP" "$(since "$T_START")" | tee -a "$OUT/campaign.log"
rm -rf "$WORK"
exit 0
