# What campaign.sh needs of a bare GPU server beside kace itself (sourced, not run):
# a call's steps under one deadline, the injection library's check, and the rules
# of the folder a batch tool brings back.
#
# A call is at most LIMIT seconds (the batch tool's calls end at 10 minutes; plan
# 8); each step runs under its own timeout within the call's deadline and writes
# one line into one log:
#     step NAME ok|fail|skip SECONDS detail
# Fake mode (KACE_DEVICE_FAKE=1, the dry run): nvidia-smi and ncu are the stand-ins
# of fakes/bin.
DEV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUNDLE=$(cd "$DEV_DIR/../.." && pwd)
KACE=${KACE_BIN:-$BUNDLE/bin/kace}
export LC_ALL=C
FAKE=${KACE_DEVICE_FAKE:-0}
PY=${KACE_PYTHON:-python3}
T_START=$EPOCHREALTIME
CALL_DEADLINE=0 # set by call_begin
LOG=/dev/null STEP_DIR=/dev/null
N_OK=0 N_FAIL=0 N_SKIP=0 STEP_NO=0

# Seconds (integer, >= 0) from now to epoch time $1; seconds since $1.
until_s() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { d = a - b; printf "%d\n", (d > 0 ? d : 0) }'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }'; }

# call_begin LIMIT RESERVE LOGFILE WORKDIR: the steps end RESERVE seconds before the
# call's LIMIT (packing's time).
call_begin() {
    CALL_DEADLINE=$(awk -v t="$T_START" -v l="$1" -v r="$2" 'BEGIN { printf "%.3f\n", t + l - r }')
    LOG=$3 STEP_DIR=$4/steps
    mkdir -p "$STEP_DIR" && : >"$LOG"
    if [ "$FAKE" = 1 ]; then
        export PATH="$DEV_DIR/fakes/bin:$PATH"
        export KACE_FAKE_GPU_NAME=${KACE_FAKE_GPU_NAME:-Fake GPU (kace dry run)}
    fi
}

# step NAME BUDGET FUNCTION [ARGS...]: FUNCTION in this shell, its output in
# steps/NN-NAME.txt, the commands it runs through tmo bounded by BUDGET seconds and
# the call's deadline. FUNCTION returns 0 (ok), 2 (skip) or else (fail) and sets DETAIL.
step() {
    local name=$1 budget=$2 fn=$3 t0=$EPOCHREALTIME out rc left status=fail
    shift 3
    STEP_NO=$((STEP_NO + 1))
    out=$(printf '%s/%02d-%s.txt' "$STEP_DIR" "$STEP_NO" "$name")
    left=$(until_s "$CALL_DEADLINE")
    [ "$left" -lt "$budget" ] && budget=$left
    DETAIL=""
    if [ "$budget" -lt 3 ]; then
        rc=2 DETAIL="no time left in this call"
    else
        STEP_END=$(awk -v t="$t0" -v b="$budget" 'BEGIN { printf "%.3f\n", t + b }')
        "$fn" "$@" >"$out" 2>&1 </dev/null
        rc=$?
    fi
    case $rc in 0) status=ok; N_OK=$((N_OK + 1)) ;; 2) status=skip; N_SKIP=$((N_SKIP + 1)) ;; *) N_FAIL=$((N_FAIL + 1)) ;; esac
    [ $rc = 0 ] || [ $rc = 2 ] || [ -n "$DETAIL" ] || DETAIL="exit $rc; see steps/${out##*/}"
    DETAIL=$(printf '%s' "$DETAIL" | tr '\n\t' '  ' | cut -c1-400)
    LAST_STATUS=$status
    printf 'step %s %s %s %s\n' "$name" "$status" "$(since "$t0")" "$DETAIL" | tee -a "$LOG"
}
# Seconds left in the current step (at least 1); tmo CMD...: CMD within them
# (SIGTERM, then SIGKILL 10 s later).
step_left() { local l; l=$(until_s "$STEP_END"); [ "$l" -ge 1 ] && echo "$l" || echo 1; }
tmo() { timeout -k 10 "$(step_left)" "$@"; }

gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; }

# ---- the CUPTI injection library ------------------------------------------------
# find_cupti: the folder of libcupti.so.13 (CUDA toolkit, extras/CUPTI, Python's
# nvidia-cuda-cupti wheel, ldconfig) into CUPTI_DIR; 1 when there is none.
find_cupti() {
    local d cands=() home=${CUDA_HOME:-/usr/local/cuda}
    CUPTI_DIR=""
    command -v nvcc >/dev/null 2>&1 && home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
    cands=("${KACE_FAKE_CUDA_DIR:-}" "$home/lib64" "$home/extras/CUPTI/lib64" /usr/local/cuda/lib64)
    d=$("$PY" -c 'import importlib.util as u, os
s = u.find_spec("nvidia.cuda_cupti")
print(os.path.join(list(s.submodule_search_locations)[0], "lib") if s else "")' 2>/dev/null) && cands+=("$d")
    d=$(ldconfig -p 2>/dev/null | awk '$1 == "libcupti.so.13" { print $NF; exit }') && [ -n "$d" ] && cands+=("$(dirname "$d")")
    for d in "${cands[@]}"; do [ -n "$d" ] && [ -e "$d/libcupti.so.13" ] && { CUPTI_DIR=$d; return 0; }; done
    return 1
}
# build_inject OUTPUT: libkace_cupti.so built here against CUPTI_DIR (in its RUNPATH),
# linked to the driver's libcuda.so.1 through the toolkit's stub, as the bundle's is.
build_inject() {
    local inc="" cc=${CC:-cc} root d cudalib=(-l:libcuda.so.1) home=${CUDA_HOME:-/usr/local/cuda}
    command -v nvcc >/dev/null 2>&1 && home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
    for d in "$home/include" "$home/extras/CUPTI/include" /usr/local/cuda/include; do
        [ -e "$d/cupti.h" ] && [ -e "$d/cuda.h" ] && { inc=$d; break; }
    done
    [ -n "$inc" ] || { echo "no cupti.h/cuda.h found"; return 1; }
    command -v "$cc" >/dev/null 2>&1 || cc=gcc
    root=$(cd "$inc/.." && pwd)
    for d in "$root/lib64/stubs" "$root/targets/x86_64-linux/lib/stubs" "$root/lib/stubs"; do
        [ -e "$d/libcuda.so" ] && { cudalib=(-L"$d" -lcuda); break; }
    done
    tmo "$cc" -shared -fPIC -O2 -fvisibility=hidden -I"$inc" -o "$1" "$BUNDLE/src/cupti/inject.c" \
        -L"$CUPTI_DIR" -l:libcupti.so.13 -Wl,-rpath,"$CUPTI_DIR" "${cudalib[@]}" -lpthread
}
# recording_counts FILE: "KERNELS COUNTERS" of an injection library's recording.
recording_counts() {
    [ -s "$1" ] || { echo "0 0"; return; }
    awk '$1 == "kernel" { k++ } $1 == "counters" { c++ } END { printf "%d %d\n", k, c }' "$1"
}

# ---- the folder a batch tool brings back -------------------------------------------
# out_check OUT: at most 8 files, at most 2 folders deep, names of letters, digits
# and ._-, each at most 16 MiB. Prints what is wrong; 1 then.
out_check() {
    local n bad=0 f rel depth
    n=$(find "$1" -type f | wc -l)
    [ "$n" -le 8 ] || { echo "$1: $n files (at most 8)"; bad=1; }
    while IFS= read -r f; do
        rel=${f#"$1"/}
        depth=$(awk -F/ '{ print NF - 1 }' <<<"$rel")
        [ "$depth" -le 2 ] || { echo "$rel: $depth folders deep (at most 2)"; bad=1; }
        [[ $rel =~ ^[A-Za-z0-9._/-]+$ ]] || { echo "$rel: a name with other characters than letters, digits and ._-"; bad=1; }
        [ "$(stat -c %s "$f")" -le $((16 * 1024 * 1024)) ] || { echo "$rel: larger than 16 MiB"; bad=1; }
    done < <(find "$1" -mindepth 1)
    return $bad
}
