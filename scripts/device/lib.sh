# Common parts of first-light.sh and campaign.sh (sourced, not run).
#
# A call of a device script: at most LIMIT seconds in all (the batch tool's
# calls end at 10 minutes; plan 8), steps each under their own timeout and
# within the call's deadline, one line per step in one log:
#     step NAME ok|fail|skip SECONDS detail
# and everything it keeps in at most 8 files of one folder ($OUT).
#
# Fake mode (KACE_DEVICE_FAKE=1, used by scripts/device/dry-run.sh): the
# catalog's commands run the fake CUDA program instead (KIND cuda/torch/llm),
# nvidia-smi and ncu are the stand-ins of fakes/bin, nvcc is skipped.
DEV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUNDLE=$(cd "$DEV_DIR/../.." && pwd)
KACE=${KACE_BIN:-$BUNDLE/bin/kace}
export LC_ALL=C
FAKE=${KACE_DEVICE_FAKE:-0}
PY=${KACE_PYTHON:-python3}
T_START=$EPOCHREALTIME
CALL_DEADLINE=0   # set by call_begin
LOG=/dev/null
STEP_DIR=/dev/null
N_OK=0 N_FAIL=0 N_SKIP=0 STEP_NO=0

now() { echo "$EPOCHREALTIME"; }
# Seconds (integer, >= 0) from now to epoch time $1.
until_s() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { d = a - b; printf "%d\n", (d > 0 ? d : 0) }'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }'; }

# call_begin LIMIT_SECONDS RESERVE_SECONDS LOGFILE WORKDIR: the call must be
# over LIMIT seconds after it started; RESERVE of them are kept for packing.
call_begin() {
    CALL_DEADLINE=$(awk -v t="$T_START" -v l="$1" -v r="$2" 'BEGIN { printf "%.3f\n", t + l - r }')
    LOG=$3
    STEP_DIR=$4/steps
    mkdir -p "$STEP_DIR"
    : >"$LOG"
    if [ "$FAKE" = 1 ]; then
        export PATH="$DEV_DIR/fakes/bin:$PATH"
    fi
}

# step NAME BUDGET FUNCTION [ARGS...]: runs FUNCTION in this shell with its
# output in steps/NN-NAME.txt and at most BUDGET seconds (and no later than
# the call's deadline) for the commands it runs through `tmo`. FUNCTION
# returns 0 (ok), 2 (skip) or anything else (fail) and sets DETAIL.
step() {
    local name=$1 budget=$2 fn=$3
    shift 3
    STEP_NO=$((STEP_NO + 1))
    local t0=$EPOCHREALTIME out
    out=$(printf '%s/%02d-%s.txt' "$STEP_DIR" "$STEP_NO" "$name")
    local left
    left=$(until_s "$CALL_DEADLINE")
    [ "$left" -lt "$budget" ] && budget=$left
    DETAIL=""
    local rc
    if [ "$budget" -lt 3 ]; then
        rc=2
        DETAIL="no time left in this call"
    else
        STEP_END=$(awk -v t="$t0" -v b="$budget" 'BEGIN { printf "%.3f\n", t + b }')
        "$fn" "$@" >"$out" 2>&1 </dev/null
        rc=$?
    fi
    local status=fail
    case $rc in 0) status=ok; N_OK=$((N_OK + 1)) ;; 2) status=skip; N_SKIP=$((N_SKIP + 1)) ;; *) N_FAIL=$((N_FAIL + 1)) ;; esac
    [ $rc = 0 ] || [ $rc = 2 ] || [ -n "$DETAIL" ] || DETAIL="exit $rc; see steps/${out##*/}"
    DETAIL=$(printf '%s' "$DETAIL" | tr '\n\t' '  ' | cut -c1-400)
    LAST_STATUS=$status
    printf 'step %s %s %s %s\n' "$name" "$status" "$(since "$t0")" "$DETAIL" | tee -a "$LOG"
    return 0
}

# positive INT MIN: INT, at least MIN.
at_least() { [ "$1" -ge "$2" ] && echo "$1" || echo "$2"; }
# Seconds left in the current step (at least 1).
step_left() { local l; l=$(until_s "$STEP_END"); [ "$l" -ge 1 ] && echo "$l" || echo 1; }
# tmo CMD...: CMD under the step's timeout (SIGTERM, SIGKILL 10 s later).
tmo() { timeout -k 10 "$(step_left)" "$@"; }
# tmo_for SECONDS CMD...: CMD under a timeout of its own (SIGTERM, SIGKILL 5 s later). A
# function, like tmo: bash sets $! to a process substitution's PID on a function call's
# redirection (ncu_run and ncu_probe wait for theirs), not on an external command's.
tmo_for() { local s=$1; shift; timeout -k 5 "$s" "$@"; }

# ---- the catalog -------------------------------------------------------------
# CATALOG_NAMES[i], CATALOG_KINDS[i], CATALOG_CMDS[i] (the command, one word per
# line, quoted words as in a shell, @W@, @PY@ and @KACE@ replaced; in fake mode
# the fake CUDA program). A line whose quotes do not close, or whose name an
# earlier line has, is left out with a message on stderr naming its file and line.
# catalog_load [FILE] appends FILE's entries (default: the catalog).
WDIR=$BUNDLE/workloads
CATALOG=${KACE_CATALOG:-$WDIR/catalog.txt}
CATALOG_NAMES=() CATALOG_KINDS=() CATALOG_CMDS=() CATALOG_RAW=()
FAKE_APP="" FAKE_CUDA_DIR=""
fake_setup() {
    # One name for the fake NVML library and the fake nvidia-smi, as on a real GPU.
    export KACE_FAKE_GPU_NAME=${KACE_FAKE_GPU_NAME:-Fake GPU (kace dry run)}
    FAKE_CUDA_DIR=${KACE_FAKE_CUDA_DIR:-}
    if [ -n "$FAKE_CUDA_DIR" ] && [ -x "$FAKE_CUDA_DIR/kace-fake-cuda-app" ]; then
        FAKE_APP=$FAKE_CUDA_DIR/kace-fake-cuda-app
    else
        FAKE_APP=$DEV_DIR/fakes/fake-cuda-app # stand-in: writes a synthetic recording itself
    fi
}
# catalog_words TEXT: TEXT's words, one per line, quotes and backslashes as in a
# shell (xargs: nothing is expanded or globbed); exit != 0 and the reason on
# stdout when a quote does not close.
catalog_words() { printf '%s' "$1" | xargs -r printf '%s\n' 2>&1; }
catalog_load() {
    local file=${1:-$CATALOG}
    [ "$FAKE" = 1 ] && fake_setup
    local name kind rest line lineno=0
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        line=${line%%$'\r'}
        case $line in '' | '#'*) continue ;; esac
        read -r name kind rest <<<"$line"
        [ -n "$rest" ] || continue
        if printf '%s\n' "${CATALOG_NAMES[@]}" | grep -qxF -- "$name"; then
            echo "catalog: $file:$lineno: $name left out: an earlier line has that name" >&2
            continue
        fi
        local words=() w mode parsed
        if [ "$FAKE" = 1 ]; then
            # cuda: the catalog's mode (gemm/stream/latency); torch, llm, cmd: by position.
            mode=gemm
            for w in $rest; do case $w in gemm | stream | latency) mode=$w; break ;; esac; done
            if [ "$kind" != cuda ]; then
                local modes=(gemm stream latency)
                mode=${modes[$((${#CATALOG_NAMES[@]} % 3))]}
            fi
            words=(env "LD_LIBRARY_PATH=$FAKE_CUDA_DIR" "$FAKE_APP" "$mode")
        else
            if ! parsed=$(catalog_words "$rest"); then
                echo "catalog: $file:$lineno: $name left out: ${parsed##*xargs: }" >&2
                continue
            fi
            while IFS= read -r w; do
                w=${w//@W@/$WDIR}
                w=${w//@PY@/$PY}
                w=${w//@KACE@/$KACE}
                words+=("$w")
            done <<<"$parsed"
        fi
        CATALOG_NAMES+=("$name")
        CATALOG_KINDS+=("$kind")
        CATALOG_CMDS+=("$(printf '%s\n' "${words[@]}")")
        CATALOG_RAW+=("$line")
    done <"$file"
}
# workload_key I: a short hash of entry I's catalog line as written (@W@, @PY@ unexpanded:
# the same wherever the bundle is unpacked) and of the contents of the files it runs (a
# script among its words, the workloads' shared modules; CUDA C: the source, not the
# binary built on the server), so that a fix to a workload changes it. campaign.sh counts
# a workload's failures under its key: one that failed twice is dropped until it changes.
workload_key() {
    catalog_cmd "$1"
    local w files=()
    for w in "${CMD[@]}"; do [[ $w == */* ]] && [ -f "$w" ] && [[ $w != "$WDIR/build/"* ]] && files+=("$w"); done
    case ${CATALOG_KINDS[$1]} in
    cuda) files+=("$WDIR/cuda/kace_kernels.cu" "$WDIR/kace_progress.h") ;;
    torch | llm) files+=("$WDIR/torch/kace_torch.py" "$WDIR/torch/kace_llm.py" "$WDIR/kace_progress.py") ;;
    esac
    { printf '%s\n' "${CATALOG_RAW[$1]}"; for w in "${files[@]}"; do [ -f "$w" ] && cat "$w"; done; } | sha256sum | cut -c1-12
}
# count_lines FILE LINE: how often LINE is in FILE (0 when FILE does not exist).
count_lines() { local n=0; [ -f "$1" ] && n=$(grep -cxF -- "$2" "$1"); echo "${n:-0}"; }
# profile_failure_add FILE NAME KEY / profile_failures FILE NAME KEY: a workload's failed
# profiles, one line each (NAME, a tab, its workload_key), and how many under KEY.
profile_failure_add() { printf '%s\t%s\n' "$2" "$3" >>"$1"; }
profile_failures() { count_lines "$1" "$2	$3"; }
# ncu_off STORE_DIR WAY: ncu has profiled no launch in two calls of this way of running it
# (ncu-nothing.tsv: one line a call, ending "way WAY") and no comparison was ever made.
ncu_off() {
    local n
    ls "$1"/ncu/*.compare.csv >/dev/null 2>&1 && return 1
    n=$(grep -c "	way $2\$" "$1/ncu-nothing.tsv" 2>/dev/null)
    [ "${n:-0}" -ge 2 ]
}
# catalog_cmd I: the command of entry I into the array CMD.
catalog_cmd() { mapfile -t CMD <<<"${CATALOG_CMDS[$1]}"; }

# The workloads folder must be writable for `make -C workloads` (build/).
workloads_writable() {
    if ! touch "$WDIR/.w" 2>/dev/null; then
        local copy=${TMPDIR:-/tmp}/kace-workloads-$$
        rm -rf "$copy"
        cp -r "$WDIR" "$copy"
        WDIR=$copy
    fi
    rm -f "$WDIR/.w"
}

# ---- the CUPTI injection library ---------------------------------------------
# find_cupti: the folder of libcupti.so.13 (CUDA toolkit, extras/CUPTI, Python's
# nvidia-cuda-cupti wheel, ldconfig), in CUPTI_DIR; "" when none.
find_cupti() {
    CUPTI_DIR=""
    local d cands=()
    if [ "$FAKE" = 1 ]; then
        # the fake CUPTI; the real one to build against while the fake is not there
        cands=("$FAKE_CUDA_DIR" /usr/local/cuda/lib64)
    else
        local cuda_home=${CUDA_HOME:-/usr/local/cuda}
        command -v nvcc >/dev/null 2>&1 && cuda_home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
        cands=("$cuda_home/lib64" "$cuda_home/extras/CUPTI/lib64" /usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64)
        d=$("$PY" -c 'import importlib.util as u, os
s = u.find_spec("nvidia.cuda_cupti")
print(os.path.join(list(s.submodule_search_locations)[0], "lib") if s else "")' 2>/dev/null)
        [ -n "$d" ] && cands+=("$d")
        d=$(ldconfig -p 2>/dev/null | awk '$1 == "libcupti.so.13" { print $NF; exit }')
        [ -n "$d" ] && cands+=("$(dirname "$d")")
    fi
    for d in "${cands[@]}"; do
        [ -n "$d" ] && [ -e "$d/libcupti.so.13" ] && { CUPTI_DIR=$d; return 0; }
    done
    return 1
}
# cupti_include: the folder of cupti.h (and cuda.h).
cupti_include() {
    local cuda_home=${CUDA_HOME:-/usr/local/cuda} d
    command -v nvcc >/dev/null 2>&1 && cuda_home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
    for d in "$cuda_home/include" "$cuda_home/extras/CUPTI/include" /usr/local/cuda/include; do
        [ -e "$d/cupti.h" ] && [ -e "$d/cuda.h" ] && { echo "$d"; return 0; }
    done
    return 1
}
# build_inject OUTPUT: libkace_cupti.so built here against CUPTI_DIR, with
# that folder in its RUNPATH. It links libcuda (the toolkit's stub, whose
# soname is the driver's libcuda.so.1, as the bundle's build does): the
# driver dlopens the library, and the application may have loaded libcuda
# with RTLD_LOCAL, where its symbols would not be found otherwise.
build_inject() {
    local inc cc=${CC:-cc} root d cudalib=(-l:libcuda.so.1)
    inc=$(cupti_include) || { echo "no cupti.h/cuda.h found"; return 1; }
    command -v "$cc" >/dev/null 2>&1 || cc=gcc
    root=$(cd "$inc/.." && pwd)
    for d in "$root/lib64/stubs" "$root/targets/x86_64-linux/lib/stubs" "$root/lib/stubs"; do
        [ -e "$d/libcuda.so" ] && { cudalib=(-L"$d" -lcuda); break; }
    done
    echo "$cc -shared -fPIC -O2 -fvisibility=hidden -I$inc -o $1 $BUNDLE/src/cupti/inject.c -L$CUPTI_DIR -l:libcupti.so.13 -Wl,-rpath,$CUPTI_DIR ${cudalib[*]} -lpthread"
    tmo "$cc" -shared -fPIC -O2 -fvisibility=hidden -I"$inc" -o "$1" "$BUNDLE/src/cupti/inject.c" \
        -L"$CUPTI_DIR" -l:libcupti.so.13 -Wl,-rpath,"$CUPTI_DIR" "${cudalib[@]}" -lpthread
}
# recording_counts FILE: "KERNELS COUNTERS ERRORS DROPPED" of a recording.
recording_counts() {
    [ -s "$1" ] || { echo "0 0 0 0"; return; }
    awk '$1 == "kernel" { k++ } $1 == "counters" { c++ } $1 == "error" { e++ } $1 == "dropped" { d += $2 }
         END { printf "%d %d %d %d\n", k, c, e, d }' "$1"
}
# Kernel records of replay passes that the library skipped (0: CUPTI gives one per launch).
recording_pass_records() { [ -s "$1" ] && awk '/ of replay passes skipped/ { n += $2 } END { print n + 0 }' "$1" || echo 0; }
# Its "# profiled launches: ..." line, if any (launches whose kernel record never came).
recording_unmatched() { { [ -s "$1" ] && grep -m1 '^# profiled launches: ' "$1" | cut -c3-; } || true; }
# The first error record of a recording, if any.
recording_error() { [ -s "$1" ] && awk '$1 == "error" { $1 = ""; print substr($0, 2); exit }' "$1"; }
# Keeps a recording small enough to carry: header + first 40000 + last 2000 lines.
trim_recording() {
    local n
    n=$(wc -l <"$1")
    [ "$n" -le 42000 ] && return 0
    { head -n 40000 "$1"; echo "# kace-device: $((n - 42000)) lines left out"; tail -n 2000 "$1"; } >"$1.trim"
    mv "$1.trim" "$1"
}

# ---- the output folder ---------------------------------------------------------
# out_check OUT: at most 8 files, at most 2 folders deep, names of letters,
# digits and ._-, each at most 16 MiB. Prints what is wrong; 1 then.
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

# py_store DB COMMAND...: store queries and exports with Python's sqlite3
# module (the server may have no sqlite3 program).
py_store() { "$PY" "$DEV_DIR/store.py" "$@"; }

# fake_nvml alone|mps: in fake mode, the fake NVML for a workload alone (kace
# profile) or for colocations (its MPS client list names kace's workloads).
fake_nvml() {
    [ "$FAKE" = 1 ] || return 0
    case $1 in
    alone) [ -z "${KACE_FAKE_NVML_ALONE:-}" ] || export KACE_NVML_LIBRARY=$KACE_FAKE_NVML_ALONE ;;
    mps) [ -z "${KACE_FAKE_NVML_MPS:-}" ] || export KACE_NVML_LIBRARY=$KACE_FAKE_NVML_MPS ;;
    esac
}

gpu_name() {
    nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1
}

# ---- kace against Nsight Compute ----------------------------------------------
# profile_counts FILE: "KERNELS WITH_COUNTERS BEFORE" from kace profile's last
# line ("...; N kernels (M with counters, ...) after B earlier kernels; ...").
profile_counts() {
    sed -n -E 's/.*; ([0-9]+) kernels \(([0-9]+) with counters.* after ([0-9]+) earlier kernels.*/\1 \2 \3/p' "$1" | tail -1
}
# Kernels per sample in kace profile's counters window ("" when it gave none).
profile_kernels_per_sample() {
    sed -n -E 's/.*; about ([0-9.e+-]+) kernels per sample.*/\1/p' "$1" | tail -1
}
# profile_need KIND [NAME]: (campaign.sh; S: its store folder, PWW: the profile's
# four windows in seconds) the seconds a profile step of that kind is given. Before any of
# its kind was profiled: CUDA C, the windows and 30 s (two quick starts); PyTorch, the
# windows and 110 s (first H200: BERT's first report came 17.5 s after its start, and
# the counters run's first step took 22.4 s of kernel replay). After: the longest
# profile of that kind in this campaign (profile-cost.tsv), outside its windows, plus
# a quarter and 10 s, where that is longer (a larger model starts and replays longer
# than the first one measured). The step is bounded by it, so a guess too short costs
# a retry.
# NAME's earlier try that ran out of time (profile-timeouts.tsv) makes it half as long
# again as that try took, where that is more.
profile_need() {
    local base=30 need
    [ "$1" = cuda ] || base=110
    need=$(awk -F'\t' -v k="$1" -v pww="$PWW" -v base="$base" '
        NR > 1 && $2 == k && $3 + 0 > 0 { o = $3 - ($7 + $8 + $9 + $10); if (o > m) m = o; n++ }
        END { o = base; if (n && int(m * 1.25 + 10.999) > o) o = int(m * 1.25 + 10.999); print pww + o }' \
        "$S/profile-cost.tsv" 2>/dev/null) || need=$((PWW + base))
    [ -n "${2:-}" ] && [ -f "$S/profile-timeouts.tsv" ] &&
        need=$(awk -F'\t' -v n="$2" -v need="${need:-$((PWW + base))}" '
            $1 == n && int($2 * 1.5 + 0.999) > need { need = int($2 * 1.5 + 0.999) } END { print need }' \
            "$S/profile-timeouts.tsv")
    echo "${need:-$((PWW + base))}"
}
# profile_ran_out NAME RC OUTPUT: whether kace profile (exit status RC, its output in
# OUTPUT) failed for lack of time: the step's timeout ended it, or kace says a run of NAME
# timed out or the clean run left too little of the budget (lib/measure/profile.c). Only
# kace's own lines count, not the workload's stderr that kace shows.
profile_ran_out() {
    [ "$2" = 124 ] || [ "$2" = 137 ] ||
        grep -Eq "^kace( profile)?: .*(workload $1 timeout: |s budget; the [0-9.]+ s left)" "$3"
}
# ncu_step_count KIND NAME KERNELS_PER_SAMPLE [PER_KERNEL_S BUDGET_S]: how many
# launches ncu profiles. CUDA C: 20 (one kernel signature, launched over and
# over: more launches give the same means). PyTorch: one training or inference
# step and a quarter (kernels per sample x the name's batch), at least 1000 and
# at most 4000, so that ncu's duration-weighted means cover a whole step as
# kace's cover many; 1000 without the count. With PER_KERNEL_S (ncu's seconds per
# profiled launch, measured in this campaign) and BUDGET_S, no more than fit
# in the budget, at least 20 (the first H200's ncu steps ended with no launch
# profiled; the fewer asked, the sooner a slow ncu shows what it does).
# KACE_DEVICE_NCU_KERNELS overrides all of it.
ncu_step_count() {
    [ -n "${KACE_DEVICE_NCU_KERNELS:-}" ] && { echo "$KACE_DEVICE_NCU_KERNELS"; return; }
    [ "$1" = cuda ] && { echo 20; return; }
    local batch; batch=$(sed -n -E 's/.*_batch([0-9]+)-.*/\1/p' <<<"$2")
    awk -v k="$3" -v b="${batch:-1}" -v per="${4:-}" -v budget="${5:-}" 'BEGIN {
        n = (k == "" || k + 0 <= 0) ? 1000 : int(k * b * 1.25 + 0.999)
        if (n < 1000) n = 1000
        if (n > 4000) n = 4000
        if (per + 0 > 0 && budget + 0 > 0 && n > int(budget / per)) n = int(budget / per)
        if (n < 20) n = 20
        print n }'
}
# ncu_seconds_per_kernel COST_TSV KIND: ncu's wall seconds per launch compared, the
# largest over this campaign's ncu runs of workloads of KIND (ncu-cost.tsv: wall_s
# over kernels), or nothing before the first. Startup is in it, so it errs long;
# a CUDA C run's 20 launches would make it err far too long for PyTorch's.
ncu_seconds_per_kernel() {
    [ -f "$1" ] || return 0
    awk -F'\t' -v k="$2" 'NR > 1 && $2 == k && $7 + 0 > 0 { r = $4 / $7; if (r > m) m = r }
        END { if (m > 0) printf "%.3f\n", m }' "$1"
}
# ncu_skip KIND NAME SKIP KERNELS_PER_SAMPLE: ncu's --launch-skip. kace's counters
# window starts after SKIP launches; ncu skips as many, but at most 100 for a CUDA C
# workload (one kernel signature: any launch after the first few is like the window's)
# and three steps' launches for PyTorch (kernels per sample x batch x 3, 2000 without
# the count), where every step has the window's kernel mix. ncu pays for each skipped
# launch, and on the first H200 it profiled no gemm launch in 74 s after a skip of 1000
# (1.9 s of launches without ncu): its cost per skipped launch is unmeasured.
ncu_skip() {
    local batch; batch=$(sed -n -E 's/.*_batch([0-9]+)-.*/\1/p' <<<"$2")
    awk -v kind="$1" -v skip="$3" -v k="$4" -v b="${batch:-1}" 'BEGIN {
        cap = (kind == "cuda") ? 100 : ((k == "" || k + 0 <= 0) ? 2000 : int(k * b * 3 + 0.999))
        print (skip + 0 > cap ? cap : skip + 0) }'
}
# ncu_options: the options every ncu run adds, once per call (NCU_OPTS).
# --pipeline-boost-state dynamic where this ncu has it: its default,
# "stable", sets the Tensor Cores' boost state for the run, a GPU setting
# that --clock-control none leaves alone (and that moves bf16 kernels'
# durations and throughputs away from what kace's counters run saw).
# --apply-rules no: no rule results to compute and export.
# The help is read whole before it is searched: in `ncu --help | grep -q` under
# pipefail, grep ends at the match, ncu dies of SIGPIPE on the rest of its long
# help, and the pipeline fails although the option is there.
ncu_options() {
    [ -n "${NCU_OPTS_SET:-}" ] && return 0
    NCU_OPTS=(--clock-control none --apply-rules no)
    local help
    help=$(ncu --help 2>&1)
    [[ $help == *--pipeline-boost-state* ]] && NCU_OPTS+=(--pipeline-boost-state dynamic)
    NCU_OPTS_SET=1
}
# kill_marked TOKEN [SPARE_PID]: SIGKILL to every process but SPARE_PID whose
# environment holds KACE_NCU_TOKEN=TOKEN; prints how many. A workload ncu left running would
# hold the GPU through every later measurement.
kill_marked() {
    local p n=0
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = "$$" ] || [ "${p#/proc/}" = "${2:-}" ] && continue
        grep -qx "KACE_NCU_TOKEN=$1" < <(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
        kill -KILL "${p#/proc/}" 2>/dev/null && n=$((n + 1))
    done
    echo "$n"
}
# ncu_run IDX SKIP COUNT CSV [CACHE]: Nsight Compute on catalog entry IDX from
# launch SKIP for COUNT launches, with the two sections that hold kace's six
# kernel metrics (SpeedOfLight: the throughputs and Duration; LaunchStats:
# threads, registers, static shared memory). Never --set full; always
# --clock-control none (ncu would lock the clocks otherwise; ncu_options).
# CACHE: ncu's --cache-control, all (its default, what KACE's ncu runs used:
# caches flushed before each replay pass) or none. Its CSV export (section
# headers, where every metric kace reads is) goes to CSV; NCU_S: the run's
# wall seconds (start, the skipped launches, the profiled ones, --kill yes);
# NCU_SKIP: the launches skipped (ncu_skip); NCU_PROFILED: the launches ncu said
# it profiled (its "==PROF== Profiling" lines). ncu.out (in the step's output) has
# each line of ncu's with the seconds since ncu started, which tells a slow skip from
# a stall at the first profiled launch.
# The workload, not ncu, is bounded by time (the step's time less 45 s for ncu to write
# and export its report), and it is given KACE_PROGRESS_FD (to /dev/null) under
# timeout --preserve-status: a kace workload then ends at its next report after the
# bound's SIGTERM with status 0 instead of dying inside a profiled launch. --foreground:
# timeout sends that SIGTERM to the workload only; without it a second one follows at
# once to timeout's process group, and a workload whose handler ran in between (the
# first SIGTERM turns it back to the default) died of the second (143; seen under ASan
# in CI). What the workload forked is ncu's --kill and kill_marked's to end.
# (kace_progress.py catches SIGTERM under ncu's injection library where that left it
# at its default; kace_progress.h decides at its first report, before CUDA loads the
# library, so a handler ncu's library put in would win.)
# The export is cut to the rows kace import-ncu reads (store.py ncu-slim). Workload
# processes left running afterwards are killed and counted in the output.
# stamp_lines T0: each line of stdin with the seconds since T0 ($EPOCHREALTIME) before it.
stamp_lines() {
    local line d t0=${1/./}
    while IFS= read -r line || [ -n "$line" ]; do
        d=$(( (${EPOCHREALTIME/./} - t0) / 100000 )) # tenths of a second
        printf '%d.%d s %s\n' $((d / 10)) $((d % 10)) "$line"
    done
}
ncu_run() {
    local idx=$1 skip=$2 count=$3 csv=$4 cache=${5:-all} rep=$WORK/ncu-report
    catalog_cmd "$idx"
    ncu_options
    NCU_SKIP=$skip NCU_PROFILED=0
    rm -f "$rep.ncu-rep"
    local app_s; app_s=$(at_least $(( $(step_left) - 45 )) 5)
    local token="$$-$RANDOM-$idx"
    echo "ncu ${NCU_OPTS[*]} --cache-control $cache --kill yes --launch-skip $skip --launch-count $count --section SpeedOfLight --section LaunchStats (workload bounded to $app_s s, then its next report) ${CMD[*]}"
    local t0=$EPOCHREALTIME
    # ncu's output goes through stamp_lines, which ends when every process holding the
    # pipe has: a workload that --kill yes left behind is killed first (kill_marked), and
    # any other holder is waited for 5 s at most.
    : >"$WORK/ncu.out"
    KACE_NCU_TOKEN=$token tmo ncu "${NCU_OPTS[@]}" --cache-control "$cache" --kill yes --launch-skip "$skip" \
        --launch-count "$count" --section SpeedOfLight --section LaunchStats -f -o "$rep" \
        timeout --foreground --preserve-status -k 10 "$app_s" bash -c 'exec 9>/dev/null; KACE_PROGRESS_FD=9 exec "$@"' ncu-workload "${CMD[@]}" \
        > >(stamp_lines "$t0" >>"$WORK/ncu.out") 2>&1 </dev/null
    local stamper=$!
    NCU_S=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
    local left; left=$(kill_marked "$token" "$stamper")
    local i
    for ((i = 0; i < 50; i++)); do kill -0 "$stamper" 2>/dev/null || break; sleep 0.1; done
    kill "$stamper" 2>/dev/null
    NCU_PROFILED=$(grep -c '^[0-9.]* s ==PROF== Profiling' "$WORK/ncu.out")
    grep -v '^[0-9.]* s ==PROF== Profiling' "$WORK/ncu.out" | tail -20
    grep '^[0-9.]* s ==PROF== Profiling' "$WORK/ncu.out" | sed -n '1,3p;$p'
    echo "ncu: ${NCU_PROFILED} launches profiled in ${NCU_S} s"
    [ "$left" = 0 ] || echo "ncu left $left workload process(es) running: killed"
    if [ ! -f "$rep.ncu-rep" ]; then
        local why
        why=$(grep -m1 '==ERROR==' "$WORK/ncu.out" || grep -v 'unmodified GPU clocks' "$WORK/ncu.out" | grep -m1 '==WARNING==')
        DETAIL="ncu wrote no report in ${NCU_S} s (${NCU_PROFILED} of $count launches profiled): $(cut -c1-160 <<<"${why:-no ==ERROR== line}")"
        return 1
    fi
    tmo ncu -i "$rep.ncu-rep" --csv >"$csv.full" || { DETAIL="ncu -i --csv failed"; return 1; }
    py_store ncu-slim "$csv.full" "$csv" || { DETAIL="no metric rows in ncu's export ($(wc -c <"$csv.full") bytes)"; return 1; }
    rm -f "$rep.ncu-rep" "$csv.full"
}
# ncu_probe IDX: after an ncu run that profiled no launch, three short ncu runs of one
# launch each on catalog entry IDX, from its start, each workload bounded to
# KACE_DEVICE_NCU_PROBE_S seconds (default 15), which tell where ncu stops:
#   launch-stats    --section LaunchStats: the launch's configuration, no counters;
#   one-counter     --metrics gpu__time_duration.sum: one hardware counter, one pass;
#   speed-of-light  --section SpeedOfLight: what ncu_run asks, for one launch.
# The first H200's ncu printed "Connected" and then nothing in 44 to 75 s: whether ncu
# intercepts a launch at all, collects a counter, or replays a launch was unknown.
# Each probe has its own time: its workload's bound, then KACE_DEVICE_NCU_PROBE_END_S
# (default 20) for ncu to end, then SIGKILL, so a hung ncu spoils no other probe; a
# probe that the step has not that time and 10 s more left for is not run. Every line
# of ncu's output is kept with its time (ncu-probe-NAME.out in WORK) and printed;
# DETAIL: for each probe, the launches profiled, its seconds, ncu's first ==ERROR==
# line, and whether ncu had to be killed.
# Returns 0 when every probe profiled its launch, 1 when one did not, 2 when one was
# not run (PROBES_RUN: how many ran).
ncu_probe() {
    local idx=$1 bound=${KACE_DEVICE_NCU_PROBE_S:-15} end=${KACE_DEVICE_NCU_PROBE_END_S:-20} probe what all=0 n t0 s why rc
    catalog_cmd "$idx"
    ncu_options
    DETAIL="" PROBES_RUN=0
    for probe in launch-stats:--section:LaunchStats one-counter:--metrics:gpu__time_duration.sum \
        speed-of-light:--section:SpeedOfLight; do
        IFS=: read -r probe what <<<"$probe"
        if [ "$(step_left)" -lt $((bound + end + 10)) ]; then
            DETAIL+="$probe: not run (the step has under $((bound + end + 10)) s left); "
            all=2
            continue
        fi
        local token="$$-$RANDOM-probe" o=$WORK/ncu-probe-$probe.out
        echo "== $probe: ncu ${NCU_OPTS[*]} --kill yes --launch-count 1 ${what/:/ } (workload bounded to $bound s) ${CMD[*]}"
        t0=$EPOCHREALTIME
        : >"$o"
        KACE_NCU_TOKEN=$token tmo_for $((bound + end)) ncu "${NCU_OPTS[@]}" --kill yes --launch-count 1 ${what/:/ } \
            timeout --preserve-status -k 5 "$bound" bash -c 'exec 9>/dev/null; KACE_PROGRESS_FD=9 exec "$@"' ncu-workload "${CMD[@]}" \
            > >(stamp_lines "$t0" >>"$o") 2>&1 </dev/null
        rc=$?
        local stamper=$!
        PROBES_RUN=$((PROBES_RUN + 1))
        s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
        kill_marked "$token" "$stamper" >/dev/null
        local i
        for ((i = 0; i < 50; i++)); do kill -0 "$stamper" 2>/dev/null || break; sleep 0.1; done
        kill "$stamper" 2>/dev/null
        cat "$o"
        n=$(grep -c '^[0-9.]* s ==PROF== Profiling' "$o")
        why=$(grep -m1 '==ERROR==' "$o" | sed 's/^[0-9.]* s //' | cut -c1-100)
        [ "$n" -ge 1 ] || [ "$all" = 2 ] || all=1
        case $rc in 124 | 137) why="${why:+$why; }ncu did not end within $((bound + end)) s: killed" ;; esac
        DETAIL+="$probe: $n of 1 launch profiled in $s s${why:+ ($why)}; "
    done
    DETAIL=${DETAIL%; }
    return $all
}
# ncu_compare NAME DB CSV OUT: ncu's export CSV reduced by kace import-ncu (a
# scratch store) against NAME's profile in DB; OUT gets one row per metric.
# NCU_SUMMARY: the one-line result.
ncu_compare() {
    local ndb=$WORK/ncu-compare.db
    rm -f "$ndb"
    tmo "$KACE" import-ncu --db "$ndb" --workload "$1" "$3" >/dev/null || { DETAIL="kace import-ncu failed"; return 1; }
    NCU_SUMMARY=$(py_store ncu-compare "$2" "$1" "$ndb" "$3" "$4") || { DETAIL="$1: $NCU_SUMMARY"; return 1; }
    cat "$4"
}
