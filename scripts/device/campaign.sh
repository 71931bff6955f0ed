#!/usr/bin/env bash
# One call on a GPU server: what must be shell on a bare server around kace's
# campaign engine (docs/campaign.md), which does the measuring itself. Steps:
#   restore        unpack the previous call's store (--store)
#   env            GPU, driver, CUDA, torch; a store of another GPU model is refused
#   build-workloads  make -C workloads (the CUDA C programs)
#   inject-check   the bundle's injection library if it records kernels here, else one
#                  built here against this server's CUPTI (a first visit's question)
#   campaign       kace campaign --device --catalog ... --minutes (what is left of the call)
#   campaign-later once the catalog's plan is measured, the same with the later catalog's
#                  workloads added (workloads/catalog-later.txt): they join the plan
#   export         kace export --dataset: the dataset folder the repository keeps
#   pack           into OUT, at most 8 files:
#     campaign.log            one line per step: step NAME ok|fail|skip SECONDS detail
#     store.tar.gz            kace.db and visits.tsv (each call's GPU, driver, CUDA, torch):
#                             give it to the next call's --store
#     campaign-export.tar.gz  the dataset folder, nvidia-smi -q, the injection check's
#                             recording, the workloads' log and each step's output
#
#   bash scripts/device/campaign.sh OUT [--minutes M] [--fit-minutes F] [--store PREVIOUS/store.tar.gz]
#
# M (default 7, up to 1440; decimals allowed) bounds the whole call. F (default: no fit)
# is the time, from this call's start, that the whole dataset left should take: the
# engine's --fit-minutes, which shortens the window to fit it (a visit of two calls:
# the first call's F is both calls' measuring time). Environment:
# KACE_CATALOG (default workloads/catalog.txt), KACE_CATALOG_LATER (default, with the
# bundle's catalog, workloads/catalog-later.txt; "none": no later catalog), KACE_PYTHON,
# KACE_DEVICE_NCU (the ncu the engine runs last; default the one on PATH, "none": no ncu),
# KACE_DEVICE_WARMUP, _WINDOW, _PROFILE_WARMUP, _PROFILE_WINDOW (seconds; default the
# engine's), KACE_BIN.
# Never changes GPU settings.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT="" MINUTES=7 PREV="" FIT=""
usage() { echo "usage: campaign.sh OUT [--minutes M] [--fit-minutes F] [--store store.tar.gz]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --minutes) [ $# -ge 2 ] || usage; MINUTES=$2; shift 2 ;;
    --store) [ $# -ge 2 ] || usage; PREV=$2; shift 2 ;;
    --fit-minutes) [ $# -ge 2 ] || usage; FIT=$2; shift 2 ;;
    -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
    -*) usage ;;
    *) OUT=$1; shift ;;
    esac
done
[ -n "$OUT" ] || usage
awk -v m="$MINUTES" 'BEGIN { exit !(m > 0 && m <= 1440) }' ||
    { echo "campaign.sh: --minutes must be in (0, 1440] (a batch tool with 10-minute calls: 8)" >&2; exit 2; }
[ -z "$FIT" ] || awk -v m="$FIT" 'BEGIN { exit !(m > 0 && m <= 100000) }' 2>/dev/null ||
    { echo "campaign.sh: --fit-minutes must be a number of minutes above 0" >&2; exit 2; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
if [ -n "$PREV" ]; then
    # A store that cannot be read must stop the call: going on would start a new campaign
    # whose store replaces the old one.
    PREV=$(realpath -e -- "$PREV" 2>/dev/null) ||
        { echo "campaign.sh: --store $PREV: no such file; nothing was run" | tee "$OUT/campaign.log" >&2; exit 1; }
fi
LIMIT=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')
RESERVE=$(awk -v l="$LIMIT" 'BEGIN { r = l / 6; printf "%d", (r > 30 ? 30 : r) }') # export and pack
WDIR=$BUNDLE/workloads
CATALOG=${KACE_CATALOG:-$WDIR/catalog.txt}
LATER=${KACE_CATALOG_LATER:-$WDIR/catalog-later.txt} # the bundle's, with the bundle's catalog
[ -n "${KACE_CATALOG:-}" ] && [ -z "${KACE_CATALOG_LATER:-}" ] && LATER=none
WINDOWS=()
for w in warmup window profile-warmup profile-window; do
    v=KACE_DEVICE_${w//-/_} && v=${v^^} && [ -n "${!v:-}" ] && WINDOWS+=("--$w" "${!v}")
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kace-campaign.XXXXXX")
A=$WORK/campaign-export S=$WORK/store
mkdir -p "$A/env" "$S"
DB=$S/kace.db
export KACE_DB=$DB
call_begin "$LIMIT" "$RESERVE" "$OUT/campaign.log" "$A"
NCU=${KACE_DEVICE_NCU:-$(command -v ncu || echo none)} # after call_begin: fake mode's ncu is on PATH then
unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT
GPU=unknown GPU_MISMATCH=0

s_restore() {
    [ -n "$PREV" ] || { DETAIL="no previous store: a new campaign"; return 0; }
    tmo tar -C "$S" -xzf "$PREV" || { DETAIL="cannot unpack $PREV"; return 1; }
    [ -f "$DB" ] || { DETAIL="$PREV holds no kace.db"; return 1; }
    DETAIL="$(awk 'END { print NR }' "$S/visits.tsv" 2>/dev/null || echo 0) earlier calls"
}
s_env() {
    GPU=$(gpu_name)
    [ -n "$GPU" ] || { GPU=unknown; DETAIL="nvidia-smi gives no GPU name"; return 1; }
    # A campaign is one GPU model's (the batch tool may lend an H200 where an H100 was asked for).
    local first q cuda torch_v
    first=$(awk -F'\t' 'NF >= 2 { print $2; exit }' "$S/visits.tsv" 2>/dev/null)
    first=${first%%, *}
    if [ -n "$first" ] && [ "$first" != unknown ] && [ "$first" != "$GPU" ]; then
        GPU_MISMATCH=1
        DETAIL="the store was measured on $first and this GPU is $GPU: give this GPU a campaign of its own (no --store) and its own dataset folder"
        return 1
    fi
    tmo nvidia-smi -q >"$A/env/nvidia-smi-q.txt" 2>&1
    q=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
    if [ "$FAKE" = 1 ]; then torch_v=fake; else
        torch_v=$(tmo "$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null | tail -1); fi
    # The dataset's README names each call's GPU, driver, CUDA and torch (kace export --dataset --calls).
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "${q:-$GPU}" "${cuda:-?}" "${torch_v:-?}" \
        "$(head -1 "$BUNDLE/VERSION" 2>/dev/null)" >>"$S/visits.tsv"
    DETAIL="$GPU; ${q#*, }; CUDA ${cuda:-?}; torch ${torch_v:-?}"
}
s_build_workloads() {
    [ "$FAKE" = 1 ] && { DETAIL="fake mode"; return 2; }
    command -v nvcc >/dev/null || { DETAIL="nvcc not found: no CUDA C workloads"; return 1; }
    if ! touch "$WDIR/.w" 2>/dev/null; then # make needs a writable workloads/build
        rm -rf "$WORK/workloads" && cp -r "$WDIR" "$WORK/workloads" && WDIR=$WORK/workloads
    fi
    rm -f "$WDIR/.w"
    tmo make -C "$WDIR" || { DETAIL="make -C workloads failed"; return 1; }
}
# Tried on the catalog's first CUDA C command, its words as the catalog quotes them (xargs),
# @W@ replaced. KACE_CUPTI_LIBRARY names the library to try first (default the bundle's).
s_inject_check() {
    local line try lib=${KACE_CUPTI_LIBRARY:-$BUNDLE/lib/libkace_cupti.so} rec=$A/env/inject-check.txt k c cmd=()
    export KACE_CUPTI_LIBRARY=$lib
    line=$(awk '!/^[ \t]*#/ && $2 == "cuda" { $1 = $2 = ""; print; exit }' "$CATALOG")
    [ -n "$line" ] || { DETAIL="no CUDA C workload in the catalog to check with: using $lib"; return 2; }
    mapfile -t cmd < <(printf '%s' "${line//@W@/$WDIR}" | xargs -r printf '%s\n')
    for try in bundle server; do
        if [ $try = server ]; then
            find_cupti && build_inject "$WORK/libkace_cupti.so" || continue
            lib=$WORK/libkace_cupti.so
        fi
        rm -f "$rec"
        CUDA_INJECTION64_PATH=$lib KACE_CUPTI_OUTPUT=$rec KACE_CUPTI_COUNTERS=1 timeout -k 5 4 "${cmd[@]}" >/dev/null 2>&1
        read -r k c <<<"$(recording_counts "$rec")"
        if [ "$k" -gt 0 ]; then
            export KACE_CUPTI_LIBRARY=$lib
            DETAIL="$try library: $k kernels, $c counter lines in 4 s"
            return 0
        fi
    done
    DETAIL="neither injection library recorded kernels; profiles will fail (see docs/gpu.md, section 2)"
    return 1
}
# The engine on CATALOG within what is left of the call: it stops at a step boundary by its
# own deadline; the timeout is the fallback (its SIGTERM ends the run in flight unrecorded).
# @W@ is the catalog's folder, or for the bundle's catalogs its workloads as built here.
s_campaign() {
    local catalog=$1 left minutes rc wdir=$WDIR fit=()
    left=$(until_s "$CALL_DEADLINE")
    minutes=$(awk -v l="$left" 'BEGIN { printf "%.2f", (l - 5) / 60 }')
    awk -v m="$minutes" 'BEGIN { exit !(m > 0.1) }' || { DETAIL="no time left to measure"; return 2; }
    # The fit counts from this call's start; the engine's from its own.
    [ -n "$FIT" ] && fit=(--fit-minutes "$(awk -v f="$FIT" -v t="$T_START" -v n="$EPOCHREALTIME" \
        'BEGIN { m = f - (n - t) / 60; printf "%.3f", (m > 0.001 ? m : 0.001) }')")
    [ -n "${KACE_CATALOG:-}" ] && wdir=$(dirname "$CATALOG")
    timeout -k 20 "$left" "$KACE" campaign --device --catalog "$catalog" --db "$DB" --minutes "$minutes" \
        --workloads-dir "$wdir" --python "$PY" --ncu "$NCU" --gpu "$GPU" --log "$A/workloads.log" "${WINDOWS[@]}" "${fit[@]}" --quiet >"$WORK/c.out"
    rc=$?
    cat "$WORK/c.out"
    DETAIL=$(grep '^campaign: ' "$WORK/c.out" | tail -1)
    [ $rc = 0 ] || { DETAIL="exit $rc: ${DETAIL:-see steps/}"; return 1; }
}
# The later catalog's workloads are profiled only once the catalog's plan is measured
# (the engine makes the plan only when no catalog workload is left to profile), and
# then join it: the same call, from both catalogs, with what time is left.
s_campaign_later() {
    [ "$LATER" != none ] && [ -f "$LATER" ] || { DETAIL="no later catalog"; return 2; }
    grep -q '^campaign: .*, 0 left for the next call; ended: finished' "$WORK/c.out" 2>/dev/null ||
        { DETAIL="the catalog's plan is not measured yet"; return 2; }
    cat "$CATALOG" "$LATER" >"$WORK/catalog-all.txt"
    s_campaign "$WORK/catalog-all.txt"
}
s_export() {
    [ -f "$DB" ] || { DETAIL="no store"; return 1; }
    DETAIL=$(tmo "$KACE" export --dataset --db "$DB" --calls "$S/visits.tsv" "$A/dataset" 2>&1) || return 1
    DETAIL=${DETAIL#"$A/"}
}
s_pack() {
    # A WAL beside kace.db (kace killed at the timeout) goes too: it holds committed runs,
    # and the next call's kace takes them in.
    tmo tar -C "$S" -czf "$OUT/.store.tar.gz.part" . && mv "$OUT/.store.tar.gz.part" "$OUT/store.tar.gz" ||
        { DETAIL="tar of the store failed"; return 1; }
    tmo tar -C "$WORK" -czf "$OUT/campaign-export.tar.gz" campaign-export || { DETAIL="tar failed"; return 1; }
    DETAIL="$(du -b "$OUT"/*.tar.gz | awk '{ printf "%s %d B; ", $2, $1 }' | sed "s|$OUT/||g")"
    out_check "$OUT"
}
# stop_early WHY: no store in OUT, so that the one given with --store stays the one to resume.
stop_early() {
    printf 'end ok %d fail %d skip %d %s s (%s: nothing else was run)\n' \
        "$N_OK" "$N_FAIL" "$N_SKIP" "$(since "$T_START")" "$1" | tee -a "$OUT/campaign.log"
    rm -rf "$WORK"
    exit 1
}

step restore 30 s_restore
[ "$LAST_STATUS" = fail ] && stop_early "the store given with --store could not be restored"
step env 20 s_env
[ "$GPU_MISMATCH" = 1 ] && stop_early "the store is another GPU model's"
grep -q '^[^#]* cuda ' "$CATALOG" && step build-workloads 150 s_build_workloads
step inject-check 60 s_inject_check
step campaign "$LIMIT" s_campaign "$CATALOG"
step campaign-later "$LIMIT" s_campaign_later
CALL_DEADLINE=$(awk -v t="$T_START" -v l="$LIMIT" 'BEGIN { printf "%.3f", t + l - 1 }') # the reserve
step export 20 s_export
step pack 20 s_pack
printf 'end ok %d fail %d skip %d %s s\n' "$N_OK" "$N_FAIL" "$N_SKIP" "$(since "$T_START")" | tee -a "$OUT/campaign.log"
rm -rf "$WORK"
exit 0
