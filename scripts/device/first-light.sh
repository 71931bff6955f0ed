#!/usr/bin/env bash
# First light: does kace's GPU path work on this server? Runs from the bundle
# (make device-bundle) in at most 8 minutes, never changes GPU settings, and
# writes three files into OUT:
#   first-light.log       one line per step: step NAME ok|fail|skip SECONDS detail
#   first-light.tar.gz    nvidia-smi -q, versions, each step's output, recordings,
#                         MPS server lists and logs, ncu's CSV and ncu-compare.csv
#   store.tar.gz          kace.db: the profiles and runs of this call
#
#   bash scripts/device/first-light.sh OUT        (or OUT=... bash first-light.sh)
#
# Environment (all optional): KACE_DEVICE_LIMIT (seconds for the whole call,
# default 480), KACE_DEVICE_WARMUP / KACE_DEVICE_WINDOW (kace profile and
# measure, default 5 / 10), KACE_DEVICE_INJECT_S (seconds of each injection
# run, default 5), KACE_DEVICE_TORCH_S (the PyTorch run, default 100),
# KACE_PYTHON (python3), KACE_CATALOG (workloads/catalog.txt).
# What each failure line means: docs/gpu.md.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-${OUT:?usage: first-light.sh OUT}}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
LIMIT=${KACE_DEVICE_LIMIT:-480}
WARMUP=${KACE_DEVICE_WARMUP:-5}
WINDOW=${KACE_DEVICE_WINDOW:-10}
CWARMUP=${KACE_DEVICE_COUNTERS_WARMUP:-5}
CWINDOW=${KACE_DEVICE_COUNTERS_WINDOW:-5}
INJECT_S=${KACE_DEVICE_INJECT_S:-5}
TORCH_S=${KACE_DEVICE_TORCH_S:-100}
# Integer seconds of warm-up + window (they may be decimals).
WW=$(awk -v a="$WARMUP" -v b="$WINDOW" 'BEGIN { printf "%d", a + b + 0.999 }')
CWW=$(awk -v a="$CWARMUP" -v b="$CWINDOW" 'BEGIN { printf "%d", a + b + 0.999 }')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kace-first-light.XXXXXX")
A=$WORK/first-light # what goes into first-light.tar.gz
mkdir -p "$A/env" "$A/recordings" "$A/measure" "$A/ncu" "$WORK/store" "$WORK/server"
DB=$WORK/store/kace.db
export KACE_DB=$DB
call_begin "$LIMIT" 25 "$OUT/first-light.log" "$A"
catalog_load
CUDA_IDX=() TORCH_IDX=()
for i in "${!CATALOG_NAMES[@]}"; do
    case ${CATALOG_KINDS[$i]} in cuda) CUDA_IDX+=("$i") ;; torch | llm) TORCH_IDX+=("$i") ;; esac
done
MPS_CONTROL=${KACE_MPS_CONTROL:-nvidia-cuda-mps-control}
GPU=unknown
INJECT_LIB="" # the injection library that works, once chosen
unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT

# ---- environment -----------------------------------------------------------------
s_env_gpu() {
    command -v nvidia-smi >/dev/null || { DETAIL="nvidia-smi not found: no NVIDIA driver here"; return 1; }
    tmo nvidia-smi -q >"$A/env/nvidia-smi-q.txt" 2>&1 || { DETAIL="nvidia-smi -q failed: $(tail -1 "$A/env/nvidia-smi-q.txt")"; return 1; }
    DETAIL="$(tmo nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    GPU=$(gpu_name)
    GPU=${GPU:-unknown}
    echo "$DETAIL"
}
s_env_mps() {
    local c s
    c=$(command -v "$MPS_CONTROL") || { DETAIL="$MPS_CONTROL not found: no MPS (measure steps will fail)"; return 1; }
    s=$(command -v nvidia-cuda-mps-server || true)
    DETAIL="control $c; server ${s:-not on PATH}"
    [ -n "$s" ] || [ -n "${KACE_MPS_CONTROL:-}" ] || return 1
}
s_env_cupti() {
    find_cupti || { DETAIL="libcupti.so.13 not found (CUDA toolkit lib64, extras/CUPTI/lib64, Python nvidia/cuda_cupti/lib, ldconfig)"; return 1; }
    DETAIL="libcupti.so.13 in $CUPTI_DIR"
    ls -la "$CUPTI_DIR"/libcupti* "$CUPTI_DIR"/libnvperf* 2>/dev/null
    return 0
}
s_env_tools() {
    local v=$A/env/versions.txt
    {
        echo "== bundle"; cat "$BUNDLE/VERSION"
        echo "== uname"; uname -a
        echo "== glibc"; ldd --version 2>&1 | head -1
        echo "== ncu"; tmo ncu --version 2>&1 | tail -2
        echo "== nvcc"; tmo nvcc --version 2>&1 | tail -2
        echo "== compute-sanitizer"; tmo compute-sanitizer --version 2>&1 | head -2
        echo "== cmake"; tmo cmake --version 2>&1 | head -1
        echo "== python"; tmo "$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1
        echo "== torch"; tmo "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
        echo "== transformers"; tmo "$PY" -c 'import transformers; print(transformers.__version__)' 2>&1 | tail -1
        echo "== pid namespace (4026531836: the host's; NVML gives host PIDs)"; stat -Lc %i /proc/self/ns/pid 2>&1
        echo "== cgroup (MainMem% is a share of its memory limit where one is set)"; cat /proc/self/cgroup 2>&1 | head -12
        echo "== memory limits"; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>&1 | head -2
        echo "== ncu options"; tmo ncu --help 2>&1 | grep -E -- '--(pipeline-boost-state|clock-control|apply-rules)' | head -5
    } >"$v" 2>&1
    cat "$v"
    DETAIL="ncu: $(command -v ncu >/dev/null && echo yes || echo no); nvcc: $(command -v nvcc >/dev/null && echo yes || echo no);"
    DETAIL+=" torch: $(awk '/^== torch/ { getline; if (NF == 3) print $1 " cuda " $2 " available " $3; else print "not importable" }' "$v")"
    tmo "$KACE" --help >/dev/null || { DETAIL="the bundle's kace does not start: $DETAIL"; return 1; }
}

# ---- builds on the server -----------------------------------------------------------
s_build_workloads() {
    if [ "$FAKE" = 1 ]; then DETAIL="fake mode: no nvcc, the fake CUDA program stands in"; return 2; fi
    command -v nvcc >/dev/null || { DETAIL="nvcc not found: no CUDA C workloads"; return 1; }
    workloads_writable
    tmo make -C "$WDIR" || { DETAIL="make -C workloads failed: $(tail -1 "$STEP_DIR"/*build-workloads.txt 2>/dev/null)"; return 1; }
    DETAIL="$WDIR/build/kace_kernels"
}
s_build_inject() {
    [ -n "${CUPTI_DIR:-}" ] || { DETAIL="no libcupti.so.13 to build against"; return 1; }
    build_inject "$WORK/server/libkace_cupti.so" || { DETAIL="cc failed (see the step's output)"; return 1; }
    DETAIL="$WORK/server/libkace_cupti.so against $CUPTI_DIR"
}

# ---- the injection library alone ----------------------------------------------------
# inject_run LIB COUNTERS IDX TAG: runs catalog entry IDX for INJECT_S seconds
# under LIB, then SIGTERM; sets REC and COUNTS (kernels counters errors dropped).
inject_run() {
    local lib=$1 c=$2 idx=$3 tag=$4
    REC=$A/recordings/$tag.txt
    rm -f "$REC"
    catalog_cmd "$idx"
    echo "== $tag: CUDA_INJECTION64_PATH=$lib KACE_CUPTI_COUNTERS=$c ${CMD[*]}"
    CUDA_INJECTION64_PATH=$lib KACE_CUPTI_OUTPUT=$REC KACE_CUPTI_COUNTERS=$c \
        timeout -k 5 "$INJECT_S" "${CMD[@]}" 2>&1 | tail -20
    COUNTS=$(recording_counts "$REC")
    PASSES=$(recording_pass_records "$REC") # before the trim, which may cut such lines out
    UNMATCHED=$(recording_unmatched "$REC")
    echo "recording: $COUNTS (kernels counters errors dropped); first error: $(recording_error "$REC")"
    trim_recording "$REC" 2>/dev/null
}
# s_inject WHICH LIB: counters off then on, on the first CUDA C workload.
s_inject() {
    local which=$1 lib=$2 k0 k1 c1
    [ -f "$lib" ] || { DETAIL="no $which library"; return 1; }
    [ ${#CUDA_IDX[@]} -gt 0 ] || { DETAIL="no cuda workload in the catalog"; return 2; }
    echo "== ldd $lib"; ldd "$lib" 2>&1
    local missing; missing=$(ldd "$lib" 2>&1 | awk '/not found/ { print $1 }' | tr '\n' ' ')
    inject_run "$lib" 0 "${CUDA_IDX[0]}" "inject-$which-c0"
    read -r k0 _ <<<"$COUNTS"
    inject_run "$lib" 1 "${CUDA_IDX[0]}" "inject-$which-c1"
    read -r k1 c1 _ <<<"$COUNTS"
    local err; err=$(recording_error "$REC")
    if [ ! -s "$A/recordings/inject-$which-c0.txt" ]; then
        DETAIL="did not load (no recording)${missing:+; ldd: not found $missing}"
        return 1
    fi
    DETAIL="loaded; counters off: $k0 kernels; on: $k1 kernels, $c1 counter lines; $PASSES replay-pass records skipped${UNMATCHED:+; $UNMATCHED}${err:+; error: $err}"
    [ "$k0" -gt 0 ] && [ "$k1" -gt 0 ] && [ "$c1" -gt 0 ]
}
INJECT_OK=()
s_inject_choice() {
    local w
    for w in "${INJECT_OK[@]}"; do
        INJECT_LIB=$w
        break
    done
    [ -n "$INJECT_LIB" ] || { DETAIL="neither injection library works: kace profile cannot get kernel metrics"; return 1; }
    export KACE_CUPTI_LIBRARY=$INJECT_LIB
    DETAIL="using $INJECT_LIB"
}
s_inject_more() {
    local idx=$1
    [ -n "$INJECT_LIB" ] || { DETAIL="no working injection library"; return 2; }
    inject_run "$INJECT_LIB" 1 "$idx" "inject-${CATALOG_NAMES[$idx]}"
    local k c e d; read -r k c e d <<<"$COUNTS"
    DETAIL="$k kernels, $c counter lines, $e errors, $d dropped, $PASSES replay-pass records skipped${UNMATCHED:+; $UNMATCHED}${e:+ $(recording_error "$REC")}"
    [ "$k" -gt 0 ] && [ "$c" -gt 0 ]
}

# ---- kace profile ------------------------------------------------------------------------
PROFILED=()
declare -A PROFILE_COUNTS # name -> "KERNELS WITH_COUNTERS BEFORE" of its counters run
s_profile() {
    local idx=$1 name=${CATALOG_NAMES[$1]}
    catalog_cmd "$idx"
    local budget; budget=$(at_least $(( $(step_left) - 5 )) 10)
    fake_nvml alone
    tmo "$KACE" profile --name "$name" --warmup "$WARMUP" --window "$WINDOW" --counters-warmup "$CWARMUP" \
        --counters-window "$CWINDOW" --budget "$budget" \
        --keep-recording "$A/recordings/profile-$name.txt" -- "${CMD[@]}" >"$WORK/p.out" 2>&1
    local rc=$?
    cat "$WORK/p.out"
    trim_recording "$A/recordings/profile-$name.txt" 2>/dev/null
    if [ $rc -ne 0 ]; then
        DETAIL="exit $rc: $(grep -m1 'kace:' "$WORK/p.out" || tail -1 "$WORK/p.out")"
        return 1
    fi
    PROFILED+=("$name")
    PROFILE_COUNTS[$name]=$(profile_counts "$WORK/p.out")
    # The kernels where the counters window starts (ncu's --launch-skip lands on the first
    # of them when both count launches the same way): compared with ncu's in step ncu.
    local b; read -r _ _ b <<<"${PROFILE_COUNTS[$name]}"
    [ -n "$b" ] && awk '$1 == "kernel" { print $2, $0 }' "$A/recordings/profile-$name.txt" | sort -n -k1,1 |
        awk -v b="$b" 'NR > b && NR <= b + 5 { for (i = 14; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : "\n") }' \
            >"$A/ncu/$name.kace-first-kernels.txt"
    DETAIL="$(grep -m1 -i -E 'throughput|stored' "$WORK/p.out" | cut -c1-200)"
}

# ---- a PyTorch training workload under injection: the time of each step -----------------
s_torch() {
    local idx="" i
    for i in "${TORCH_IDX[@]}"; do case ${CATALOG_NAMES[$i]} in *-train) idx=$i; break ;; esac; done
    [ -n "$idx" ] || { DETAIL="no torch *-train workload in the catalog"; return 2; }
    [ -n "$INJECT_LIB" ] || { DETAIL="no working injection library"; return 2; }
    local name=${CATALOG_NAMES[$idx]} rec=$A/recordings/torch-$name.txt prog=$A/torch-steps.txt
    catalog_cmd "$idx"
    local t0=$EPOCHREALTIME secs=$TORCH_S
    [ "$secs" -gt "$(( $(step_left) - 10 ))" ] && secs=$(at_least $(( $(step_left) - 10 )) 3)
    echo "== $name for $secs s: ${CMD[*]}"
    # Each progress record stamped on arrival (seconds since the start).
    CUDA_INJECTION64_PATH=$INJECT_LIB KACE_CUPTI_OUTPUT=$rec KACE_CUPTI_COUNTERS=1 KACE_PROGRESS_FD=3 \
        timeout -k 10 "$secs" "${CMD[@]}" 3> >(while IFS= read -r l; do
            echo "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }') $l"
        done >"$prog") 2>&1 | tail -30
    sleep 1
    local k c e d; read -r k c e d <<<"$(recording_counts "$rec")"
    trim_recording "$rec" 2>/dev/null
    # step i: time between records i-1 and i; the first steps carry the replay.
    DETAIL=$(awk -v k="$k" -v c="$c" '$2 == "done" { t[n++] = $1 }
        END {
            if (n < 2) { printf "%d progress records in the run; %d kernels, %d counter lines", n, k, c; exit 1 }
            for (i = 1; i < n; i++) d[i] = t[i] - t[i-1]
            m = n - 1; s = ""; for (i = 1; i <= 5 && i < n; i++) s = s sprintf("%.2f ", d[i])
            # steady step: median of the last half
            h = int(m / 2) + 1; j = 0; for (i = h; i < n; i++) v[j++] = d[i]
            for (a = 1; a < j; a++) for (b = a; b > 0 && v[b-1] > v[b]; b--) { x = v[b]; v[b] = v[b-1]; v[b-1] = x }
            med = v[int((j - 1) / 2)]
            extra = 0; for (i = 1; i < h; i++) extra += d[i] - med
            printf "first record at %.1f s; first steps %ss; steady step %.3f s; replay cost about %.1f s; %d kernels, %d counter lines", t[0], s, med, extra, k, c
        }' "$prog") || return 1
    awk '$2 == "done" { if (n++) printf "%d,%.3f,%.3f\n", n - 1, $1, $1 - p; else print "step,t_s,step_s"; p = $1 }' "$prog" >"$A/torch-steps.csv"
    [ "$k" -gt 0 ] && [ "$c" -gt 0 ]
}

# ---- kace measure: an MPS pair, a 30/70 split, a time-sliced pair ----------------------
s_measure() {
    local tag=$1
    shift
    [ ${#PROFILED[@]} -ge 2 ] || { DETAIL="fewer than 2 profiled workloads"; return 2; }
    fake_nvml mps
    local rd; rd=$(mktemp -d /tmp/kmps.XXXXXX)
    local to list=$A/measure/$tag-server-list.txt servers_seen=$WORK/$tag-servers.txt
    to=$(at_least $(( $(step_left) - 10 )) 5)
    tmo "$KACE" measure --warmup "$WARMUP" --window "$WINDOW" --timeout "$to" --run-dir "$rd" --quiet \
        --gpu "$GPU" --log "$A/measure/$tag-workloads.log" "$@" "${PROFILED[0]}" "${PROFILED[1]}" \
        >"$WORK/m.out" 2>&1 &
    local pid=$!
    : >"$list"
    : >"$servers_seen"
    local pause=0.3 # every 0.3 s until a server is up, then every 2 s: each look runs nvidia-smi
    while kill -0 $pid 2>/dev/null; do
        sleep "$pause"
        if [ -e "$rd/pipe/control" ]; then
            local now_list
            now_list=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$rd/pipe CUDA_MPS_LOG_DIRECTORY=$rd/log \
                timeout 5 "$MPS_CONTROL" 2>&1)
            printf '# %s servers\n%s\n' "$(date -u +%T)" "$now_list" >>"$list"
            grep -E '^[0-9]+$' <<<"$now_list" >>"$servers_seen" && pause=2
            # Each server's clients (kace's proof that MPS served the run), and
            # what nvidia-smi lists (NVML's PIDs: the host's, in a container).
            # Only servers: on the first H200 client PIDs were asked for as servers.
            local s
            for s in $(sort -u "$servers_seen"); do
                echo "# clients of $s"
                echo "get_client_list $s" | CUDA_MPS_PIPE_DIRECTORY=$rd/pipe CUDA_MPS_LOG_DIRECTORY=$rd/log \
                    timeout 5 "$MPS_CONTROL" 2>&1
            done >>"$list"
            { echo "# nvidia-smi compute apps"; tmo nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader; } \
                >>"$list" 2>&1
        fi
    done
    wait $pid
    local rc=$?
    cat "$WORK/m.out"
    [ -d "$rd/log" ] && cp -r "$rd/log" "$A/measure/$tag-mps-log"
    rm -rf "$rd"
    local servers; servers=$(sort -u "$servers_seen" | tr '\n' ' ')
    DETAIL="exit $rc; $(grep -m1 '^run ' "$WORK/m.out" | cut -c1-120);"
    DETAIL+=" $(awk '/^  / && $2 ~ /^[0-9]+$/ { printf "%s %s %s; ", $1, $3, $4 }' "$WORK/m.out")"
    [ "$tag" = timeslice ] || DETAIL+=" MPS servers seen: ${servers:-none}; $(grep -m1 'served by MPS server' "$WORK/m.out" | sed 's/^ *//')"
    [ $rc -eq 0 ]
}

# ---- ncu on one workload, compared with kace's numbers ----------------------------------
# ncu starts at the kernel where kace's counters window started (--launch-skip:
# the kernels recorded before it, at most 100: ncu_skip) and profiles
# ncu_step_count's launches (20 for CUDA C; KACE_DEVICE_NCU_KERNELS overrides).
s_ncu() {
    command -v ncu >/dev/null || { DETAIL="ncu not found"; return 2; }
    [ ${#PROFILED[@]} -ge 1 ] || { DETAIL="no profiled workload to compare with"; return 2; }
    local name=${PROFILED[0]} idx i k c b
    for i in "${!CATALOG_NAMES[@]}"; do [ "${CATALOG_NAMES[$i]}" = "$name" ] && idx=$i; done
    read -r k c b <<<"${PROFILE_COUNTS[$name]:-}"
    [ -n "$b" ] || { DETAIL="kace profile of $name printed no kernel counts"; return 1; }
    local count; count=$(ncu_step_count cuda "$name" "")
    [ "$k" -lt "$count" ] && count=$k
    ncu_run "$idx" "$(ncu_skip cuda "$name" "$b" "")" "$count" "$A/ncu/$name.ncu.csv" || return 1
    echo "== the first kernels of kace's counters window (recording, mangled) and of ncu's report:"
    cat "$A/ncu/$name.kace-first-kernels.txt" 2>/dev/null
    echo "--"
    "$PY" -c 'import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("ID", "").isdigit()]
seen = []
for r in sorted(rows, key=lambda r: int(r["ID"])):
    if r["ID"] not in [s[0] for s in seen]:
        seen.append((r["ID"], r.get("Kernel Name", "")))
for i, n in seen[:5]:
    print(n)' "$A/ncu/$name.ncu.csv"
    ncu_compare "$name" "$DB" "$A/ncu/$name.ncu.csv" "$A/ncu-compare.csv" || return 1
    DETAIL="$name: $NCU_SUMMARY; ncu ${NCU_S} s for launches $NCU_SKIP..$((NCU_SKIP + count - 1))"
}

# ---- the run -----------------------------------------------------------------------------
step env-gpu 20 s_env_gpu
step env-mps 10 s_env_mps
step env-cupti 20 s_env_cupti
step env-tools 40 s_env_tools
step build-workloads 150 s_build_workloads
step build-inject 60 s_build_inject
# Both libraries are tried; the bundle's is preferred when both work.
step inject-bundle $((INJECT_S * 2 + 25)) s_inject bundle "$BUNDLE/lib/libkace_cupti.so"
[ "$LAST_STATUS" = ok ] && INJECT_OK+=("$BUNDLE/lib/libkace_cupti.so")
step inject-server $((INJECT_S * 2 + 25)) s_inject server "$WORK/server/libkace_cupti.so"
[ "$LAST_STATUS" = ok ] && INJECT_OK+=("$WORK/server/libkace_cupti.so")
step inject-choice 5 s_inject_choice
for i in "${CUDA_IDX[@]:1}"; do step "inject-${CATALOG_NAMES[$i]}" $((INJECT_S + 15)) s_inject_more "$i"; done
for i in "${CUDA_IDX[@]}"; do step "profile-${CATALOG_NAMES[$i]}" $((WW + CWW + 50)) s_profile "$i"; done
step torch-steps $((TORCH_S + 20)) s_torch
step measure-mps-pair $((WW + 45)) s_measure mps-pair
step measure-mps-split $((WW + 45)) s_measure mps-split --mps-pct 30,70
step measure-timeslice $((WW + 45)) s_measure timeslice --no-mps
step ncu 90 s_ncu

# ---- pack: at most 8 files in OUT ------------------------------------------------------
CALL_DEADLINE=$(awk -v d="$CALL_DEADLINE" 'BEGIN { printf "%.3f", d + 20 }')
s_pack() {
    tmo tar -C "$WORK/store" -czf "$OUT/store.tar.gz" kace.db || { DETAIL="tar of the store failed"; return 1; }
    tmo tar -C "$WORK" --exclude='*-pack.txt' -czf "$OUT/first-light.tar.gz" first-light || { DETAIL="tar failed"; return 1; }
    if [ "$(stat -c %s "$OUT/first-light.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
        rm -rf "$A/recordings"
        tmo tar -C "$WORK" --exclude='*-pack.txt' -czf "$OUT/first-light.tar.gz" first-light
        DETAIL="recordings left out (archive over 15 MiB); "
    fi
    DETAIL+="$(du -b "$OUT"/*.tar.gz | awk '{ printf "%s %d B; ", $2, $1 }' | sed "s|$OUT/||g")"
    out_check "$OUT" || return 1
}
step pack 20 s_pack
printf 'end ok %d fail %d skip %d %s s\n' "$N_OK" "$N_FAIL" "$N_SKIP" "$(since "$T_START")" | tee -a "$LOG"
rm -rf "$WORK"
exit 0
