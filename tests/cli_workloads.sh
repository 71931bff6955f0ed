#!/usr/bin/env bash
# The example workloads (workloads/), on a machine without a GPU or torch:
#   1. every workloads/**/*.py compiles (python3 -m py_compile);
#   2. every PyTorch / LLM script answers --help with exit 0 without importing
#      torch or transformers (stand-in modules that fail on import come first
#      on PYTHONPATH), and accepts its catalog line's arguments;
#   3. workloads/catalog.txt parses: NAME KIND COMMAND..., names
#      <model>_batch<B>-<train|inf> and unique, KIND cuda|torch|llm, the
#      referenced programs exist, --batch / --mode agree with the name, the
#      torch and llm commands state --dtype, at least 3 cuda, 8 torch, 3 llm lines;
#   4. workloads/kace_progress.py writes records of docs/progress-protocol.md
#      (checked line by line) that kace itself reads: a Python workload using it
#      is measured alone with `kace measure --no-mps` and its throughput is right;
#   5. run by kace, SIGTERM ends a workload with status 0 at its next report
#      (kace_progress.py and kace_progress.h), also under Nsight Compute's
#      injection library, and is left alone otherwise.
#
#   cli_workloads.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
scratch=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
w=$root/workloads
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
# Compiled bytecode goes under the scratch folder, never into the source tree.
export PYTHONPYCACHEPREFIX=$scratch/pycache
export PYTHONDONTWRITEBYTECODE=1
unset KACE_PROGRESS_FD

source "$(dirname "$0")/lib_test.sh" # fail, failures

command -v python3 >/dev/null || { echo "FAIL: python3 not found" >&2; exit 1; }

# ---- 1. every Python file compiles ------------------------------------------
mapfile -t pyfiles < <(find "$w" -name '*.py' -not -path '*/__pycache__/*' | sort)
[ "${#pyfiles[@]}" -ge 3 ] || fail "only ${#pyfiles[@]} Python files under $w"
for f in "${pyfiles[@]}"; do
    out=$(python3 -m py_compile "$f" 2>&1) || fail "py_compile ${f#"$root"/}: $out"
done

# ---- 2. --help without torch ------------------------------------------------
poison=$scratch/poison
mkdir -p "$poison/transformers"
echo 'raise ImportError("kace test: torch imported before the arguments were parsed")' >"$poison/torch.py"
echo 'raise ImportError("kace test: transformers imported before the arguments were parsed")' \
    >"$poison/transformers/__init__.py"
# Runs a workload script with the stand-ins first on the path; stdout+stderr in $scratch/help.out.
run_py() {
    PYTHONPATH=$poison${PYTHONPATH:+:$PYTHONPATH} python3 "$@" >"$scratch/help.out" 2>&1
}
# The runnable scripts: those with a __main__ block (kace_torch.py, kace_llm.py are modules).
mapfile -t scripts < <(grep -l '^if __name__ == "__main__":' "$w"/torch/*.py | sort)
[ "${#scripts[@]}" -ge 7 ] || fail "only ${#scripts[@]} runnable scripts in workloads/torch"
for s in "${scripts[@]}"; do
    rel=${s#"$root"/}
    run_py "$s" --help
    rc=$?
    if [ $rc != 0 ]; then
        fail "$rel --help: exit $rc: $(tail -3 "$scratch/help.out")"
        continue
    fi
    grep -q '^usage:' "$scratch/help.out" || fail "$rel --help: no usage line: $(head -3 "$scratch/help.out")"
    grep -q -- '--dtype' "$scratch/help.out" || fail "$rel --help: no --dtype option"
    grep -q -- '--batch' "$scratch/help.out" || fail "$rel --help: no --batch option"
done

# ---- 3. the catalog ---------------------------------------------------------
# catalog.txt (the campaign's plan) and catalog-later.txt (profiled once the plan is
# measured): the same format, no name in both.
declare -A seen=() count=([cuda]=0 [torch]=0 [llm]=0) main_count=()
for cat_name in catalog.txt catalog-later.txt; do
catalog=$w/$cat_name
[ -f "$catalog" ] || { echo "FAIL: $catalog missing" >&2; exit 1; }
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    where="$cat_name:$lineno"
    case $line in '' | '#'*) continue ;; esac
    read -r -a f <<<"$line"
    if [ "${#f[@]}" -lt 3 ]; then
        fail "$where: want NAME KIND COMMAND...: $line"
        continue
    fi
    name=${f[0]} kind=${f[1]}
    cmd=("${f[@]:2}")
    if [[ ! $name =~ ^[A-Za-z0-9._-]+_batch([0-9]+)-(train|inf)$ ]]; then
        fail "$where: name $name is not <model>_batch<B>-<train|inf>"
        continue
    fi
    batch=${BASH_REMATCH[1]} mode=${BASH_REMATCH[2]}
    [ -z "${seen[$name]:-}" ] || fail "$where: $name already on ${seen[$name]}"
    seen[$name]=$where
    case $kind in
    cuda)
        [ "${cmd[0]}" = "@W@/build/kace_kernels" ] || fail "$where: a cuda command runs @W@/build/kace_kernels, not ${cmd[0]}"
        [ -f "$w/cuda/kace_kernels.cu" ] || fail "$where: workloads/cuda/kace_kernels.cu missing"
        grep -q 'kace_kernels' "$w/Makefile" || fail "$where: workloads/Makefile does not build kace_kernels"
        case ${cmd[1]:-} in gemm | stream | latency) ;; *) fail "$where: unknown kace_kernels mode '${cmd[1]:-}'" ;; esac
        ;;
    torch | llm)
        if [ "${cmd[0]}" != "@PY@" ] || [ "${#cmd[@]}" -lt 2 ]; then
            fail "$where: a $kind command is @PY@ SCRIPT ARGS...: ${cmd[*]}"
            count[$kind]=$((count[$kind] + 1))
            continue
        fi
        script=${cmd[1]//@W@/$w}
        args=("${cmd[@]:2}")
        if [ ! -f "$script" ]; then
            fail "$where: ${cmd[1]}: no such script"
        else
            # The arguments must be the script's: argparse checks them before --help.
            run_py "$script" "${args[@]}" --help ||
                fail "$where: ${cmd[1]} rejects its arguments ${args[*]}: $(tail -2 "$scratch/help.out")"
        fi
        a=" ${args[*]} "
        [[ $a == *" --batch $batch "* ]] || fail "$where: $name but the command has no --batch $batch"
        [[ $a =~ \ --dtype\ (bf16|tf32|fp32)\  ]] || fail "$where: $name: the command does not state --dtype"
        if [ "$kind" = torch ]; then
            [[ $a == *" --mode $mode "* ]] || fail "$where: $name but the command has no --mode $mode"
        else
            [ "$mode" = inf ] || fail "$where: llm workloads are inference only: $name"
            [[ $a != *" --mode train "* ]] || fail "$where: $name: --mode train"
        fi
        ;;
    cmd)
        # Any command (a script run behind kace progress-from-output): its words must parse.
        printf '%s' "${line#*" $kind "}" | xargs -r printf '%s\n' >/dev/null 2>&1 ||
            fail "$where: a quote does not close: $line"
        ;;
    *) fail "$where: unknown KIND '$kind' (cuda, torch, llm or cmd)" ;;
    esac
    [ -n "${count[$kind]+x}" ] && count[$kind]=$((count[$kind] + 1))
done <"$catalog"
[ "$cat_name" = catalog.txt ] && main_count=([cuda]=${count[cuda]} [torch]=${count[torch]} [llm]=${count[llm]})
done
# The plan's catalog alone holds the H100 issue's minimum: 12 workloads, 3 CUDA C, 5
# PyTorch, 2 LLMs, whose lines cover two models at batch 1 and 8.
catalog=$w/catalog.txt
[ "${main_count[cuda]}" -ge 3 ] || fail "catalog.txt: ${main_count[cuda]} cuda lines, want at least 3"
[ "${main_count[torch]}" -ge 5 ] || fail "catalog.txt: ${main_count[torch]} torch lines, want at least 5"
[ "${main_count[llm]}" -ge 2 ] || fail "catalog.txt: ${main_count[llm]} llm lines, want at least 2"
[ $((main_count[cuda] + main_count[torch] + main_count[llm])) -ge 12 ] || fail "catalog.txt: fewer than 12 workloads"
[ "${count[torch]}" -ge 8 ] || fail "catalog.txt and catalog-later.txt: ${count[torch]} torch lines, want at least 8"
[ "${count[llm]}" -ge 3 ] || fail "catalog.txt and catalog-later.txt: ${count[llm]} llm lines, want at least 3"
llm_models=$(grep -E '^[^#]\S* llm ' "$catalog" | sed -E 's/_batch.*//' | sort -u | wc -l)
[ "$llm_models" -ge 2 ] || fail "catalog.txt: llm lines of $llm_models model(s), want 2"
for b in 1 8; do
    grep -qE "^\S+_batch$b-inf llm " "$catalog" || fail "catalog.txt: no llm line at batch $b"
done
# Five model families among the PyTorch lines (BERT, ALBERT, ViT, Whisper, Wav2vec2).
torch_families=$(grep -E '^[^#]\S* torch ' "$catalog" | sed -E 's/[-_].*//' | sort -u | wc -l)
[ "$torch_families" -ge 5 ] || fail "catalog.txt: torch lines of $torch_families model families, want 5"

# ---- 4. the progress records ------------------------------------------------
# A stand-in Python workload: 3 samples every 10 ms on an absolute schedule
# (300 samples/s), through workloads/kace_progress.py like the real ones.
# With PYW_READY set it prints "ready" once Progress() is made (its handler in, if any).
cat >"$scratch/pyw.py" <<EOF
import os, sys, time
sys.path.insert(0, "$w")
from kace_progress import Progress
p = Progress()
if os.environ.get("PYW_READY"):
    print("ready", flush=True)
limit = float(sys.argv[1]) if len(sys.argv) > 1 else 0
t0 = next_t = time.monotonic()
while limit <= 0 or time.monotonic() - t0 < limit:
    next_t += 0.01
    time.sleep(max(0.0, next_t - time.monotonic()))
    p.step(3)
EOF
# Not run by kace: reports nothing, no error.
out=$(python3 "$scratch/pyw.py" 0.05 2>&1) || fail "kace_progress without KACE_PROGRESS_FD: exit $?: $out"
[ -z "$out" ] || fail "kace_progress without KACE_PROGRESS_FD wrote: $out"
# The records, read back from a file: the grammar of docs/progress-protocol.md
# (done <samples> [<t_ns>]), samples and times never decreasing.
KACE_PROGRESS_FD=7 python3 "$scratch/pyw.py" 0.3 7>"$scratch/records.txt" ||
    fail "the stand-in workload failed with KACE_PROGRESS_FD set"
awk -v file="$scratch/records.txt" '
    /^kace-progress 1[ \t]*$/ && NR == 1 { next }
    /^[ \t]*$/ || /^#/ { next }
    !/^done[ \t]+[0-9]+(\.[0-9]+)?([ \t]+[0-9]+)?\r?$/ { printf "%s:%d: not a progress record: %s\n", file, NR, $0; bad = 1; next }
    {
        n++
        if ($2 + 0 < last_s) { printf "%s:%d: samples decrease: %s\n", file, NR, $0; bad = 1 }
        if (NF >= 3 && $3 + 0 < last_t) { printf "%s:%d: times decrease: %s\n", file, NR, $0; bad = 1 }
        last_s = $2 + 0; if (NF >= 3) last_t = $3 + 0
    }
    END {
        if (n < 10) { printf "%s: %d records in 0.3 s, want at least 10\n", file, n; bad = 1 }
        if (last_s < 30) { printf "%s: %d samples in 0.3 s, want at least 30\n", file, last_s; bad = 1 }
        exit bad
    }' "$scratch/records.txt" >"$scratch/awk.out" || fail "progress records: $(head -5 "$scratch/awk.out")"
grep -qx 'done 0 [0-9]*' < <(head -1 "$scratch/records.txt") || fail "the first record is not 'done 0 <t_ns>': $(head -1 "$scratch/records.txt")"
# Times are CLOCK_MONOTONIC ns, the clock kace reads (/proc/uptime counts from the same boot).
t_ns=$(sed -n 2p "$scratch/records.txt" | awk '{ print $3 }')
up=$(awk '{ print $1 }' /proc/uptime 2>/dev/null)
if [ -n "$t_ns" ] && [ -n "$up" ]; then
    awk -v t="$t_ns" -v u="$up" 'BEGIN { d = t / 1e9 - u; exit !(d > -3600 && d < 5) }' ||
        echo "note: record time ${t_ns} ns is far from /proc/uptime ${up} s (suspend or containers: not a failure)" >&2
fi

# End to end: kace reads the workload's records and measures its throughput.
run_dir=$(mktemp -d /tmp/kace-cli-workloads-XXXXXX) || exit 1
trap 'kill_pids; rm -rf "$run_dir"' EXIT
export KACE_DB=$scratch/kace.db
"$kace" workload add pyw_batch3-inf -- python3 "$scratch/pyw.py" >/dev/null 2>"$scratch/err" ||
    fail "kace workload add: $(cat "$scratch/err")"
out=$("$kace" measure --no-mps --quiet --warmup 0.5 --window 1.5 --run-dir "$run_dir" pyw_batch3-inf 2>"$scratch/err")
rc=$?
if [ $rc != 0 ]; then
    fail "kace measure of a kace_progress.py workload: exit $rc: $out $(cat "$scratch/err")"
else
    row=$(awk '$1 == "pyw_batch3-inf"' <<<"$out")
    read -r _ _ status rate _ <<<"$row"
    [ "${status:-}" = ok ] || fail "kace measure: status '${status:-}' for the kace_progress.py workload: $out"
    # 300 samples/s; 20% slack for a loaded machine.
    awk -v r="${rate:-0}" 'BEGIN { exit !(r > 240 && r < 330) }' ||
        fail "kace measure: ${rate:-?} samples/s from kace_progress.py, expected 300: $out"
fi

# ---- 5. SIGTERM from kace: the helpers stop at a step boundary ---------------
# Run by kace, a workload ends with status 0 at its first report after SIGTERM (its
# step's GPU work synchronized: MPS clients must not end with work outstanding).
# Not run by kace, or with a SIGTERM handler of its own, SIGTERM is left alone.
# The SIGTERM goes once an event proves the handler is in (or would be): a record (written
# after the handler goes in) or a line the program prints after Progress() is made; never
# after a delay, which a loaded machine outlasts (the interpreter not yet started: 143).
# term_when READY CMD...: starts CMD (stdout to $scratch/term.out), sends it SIGTERM once
# the command READY succeeds ($pid is CMD's), prints CMD's exit status.
term_when() {
    local ready=$1
    shift
    # Emptied here, not by the background command's redirection: that runs in the child,
    # after this loop may already have read the previous command's "ready".
    : >"$scratch/term.out"
    "$@" >>"$scratch/term.out" &
    local pid=$! ok=0
    for _ in $(seq 1 300); do
        eval "$ready" && { ok=1; break; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ $ok = 1 ] || echo "term_when: '$ready' never held for $*" >&2
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $?
}
# has FILE REGEX N: FILE has N lines matching REGEX.
has() { [ "$(grep -cE -- "$2" "$1" 2>/dev/null)" -ge "$3" ]; }
rc=$(KACE_PROGRESS_FD=7 term_when 'has "$scratch/term.txt" ^done 5' python3 "$scratch/pyw.py" 7>"$scratch/term.txt")
[ "$rc" = 0 ] || fail "kace_progress.py: exit $rc after SIGTERM, expected 0 at the next report"
[ "$(grep -c '^done' "$scratch/term.txt")" -ge 5 ] || fail "kace_progress.py: $(wc -l <"$scratch/term.txt") records before SIGTERM"
rc=$(PYW_READY=1 term_when 'has "$scratch/term.out" ^ready$ 1' python3 "$scratch/pyw.py")
[ "$rc" = 143 ] || fail "kace_progress.py not run by kace: exit $rc after SIGTERM, expected 143 (left alone)"
cat >"$scratch/own.py" <<EOF
import signal, sys, time
sys.path.insert(0, "$w")
signal.signal(signal.SIGTERM, lambda s, f: sys.exit(3))
from kace_progress import Progress
p = Progress()
print("ready", flush=True)
while True:
    time.sleep(0.01)
    p.step(1)
EOF
rc=$(KACE_PROGRESS_FD=7 term_when 'has "$scratch/term.out" ^ready$ 1' python3 "$scratch/own.py" 7>/dev/null)
[ "$rc" = 3 ] || fail "kace_progress.py replaced the program's own SIGTERM handler: exit $rc, expected 3"
# Under an injection library. Nsight Compute's (any name but kace's): the handler goes in, so a
# workload bounded by SIGTERM under ncu ends at a step with status 0 and ncu writes its report
# (on the first H200 a killed workload left none). Under libkace_cupti.so SIGTERM stays its own.
rc=$(CUDA_INJECTION64_PATH=/opt/nsight-compute/libTreeLauncherTargetInjection.so KACE_PROGRESS_FD=7 \
    term_when 'has "$scratch/term-ncu.txt" ^done 1' python3 "$scratch/pyw.py" 7>"$scratch/term-ncu.txt")
[ "$rc" = 0 ] || fail "kace_progress.py under ncu's injection: exit $rc after SIGTERM, expected 0 at the next report"
rc=$(CUDA_INJECTION64_PATH=/x/libkace_cupti.so KACE_PROGRESS_FD=7 \
    term_when 'has "$scratch/term-cupti.txt" ^done 1' python3 "$scratch/pyw.py" 7>"$scratch/term-cupti.txt")
[ "$rc" = 143 ] || fail "kace_progress.py under libkace_cupti.so: exit $rc after SIGTERM, expected 143 (its own)"
# A C handler put in after the interpreter started (as an injection library does) is invisible
# to signal.getsignal(); kace_progress.py asks sigaction() and leaves SIGTERM alone.
cat >"$scratch/c-handler.py" <<EOF
import ctypes, signal, sys
sys.path.insert(0, "$w")
import kace_progress
before = kace_progress._sigterm_at_default()
ctypes.CDLL(None).signal(signal.SIGTERM, ctypes.c_void_p(1))  # SIG_IGN, behind Python's back
print(before, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, kace_progress._sigterm_at_default())
EOF
out=$(python3 "$scratch/c-handler.py" 2>&1)
[ "$out" = "True True False" ] || fail "kace_progress.py: SIGTERM at its default before and after a C handler: '$out', expected 'True True False'"
# A process forked after the handler is in (a DataLoader worker) is ended by SIGTERM at once.
cat >"$scratch/fork.py" <<EOF
import os, signal, sys, time
sys.path.insert(0, "$w")
from kace_progress import Progress
p = Progress()
pid = os.fork()
if pid == 0:
    time.sleep(5)
    os._exit(0)
time.sleep(0.2)
os.kill(pid, signal.SIGTERM)
print(os.waitpid(pid, 0)[1] & 0x7f)
EOF
sig=$(KACE_PROGRESS_FD=7 python3 "$scratch/fork.py" 7>/dev/null)
[ "$sig" = 15 ] || fail "kace_progress.py: a forked child was not ended by SIGTERM (signal '${sig}', expected 15)"
fake_app=$(dirname "$kace")/tests/fake_cuda/kace-fake-cuda-app
if [ -x "$fake_app" ]; then # kace_progress.h, in the fake CUDA program's workload mode
    rc=$(KACE_PROGRESS_FD=7 LD_LIBRARY_PATH=$(dirname "$fake_app") \
        term_when 'has "$scratch/term-c.txt" ^done 5' "$fake_app" stream 0 7>"$scratch/term-c.txt")
    [ "$rc" = 0 ] || fail "kace_progress.h: exit $rc after SIGTERM, expected 0 at the next report"
    [ "$(grep -c '^done' "$scratch/term-c.txt")" -ge 5 ] || fail "kace_progress.h: $(wc -l <"$scratch/term-c.txt") records"
    # Not run by kace it writes nothing: it is past its first report once it has exec'd and
    # sleeps (state S), which it does only in its synchronize.
    rc=$(LD_LIBRARY_PATH=$(dirname "$fake_app") \
        term_when '[ "$(readlink "/proc/$pid/exe")" = "$(readlink -f "$fake_app")" ] && [ "$(sed "s/.*) //" "/proc/$pid/stat" | cut -d" " -f1)" = S ]' \
        "$fake_app" stream 0)
    [ "$rc" = 143 ] || fail "kace_progress.h not run by kace: exit $rc after SIGTERM, expected 143"
fi

if [ $failures -gt 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "workloads: ${#pyfiles[@]} Python files, ${#scripts[@]} scripts, catalogs ${count[cuda]} cuda + ${count[torch]} torch + ${count[llm]} llm lines: ok"
