#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang into build-fuzz/ and runs each one
# for a while on a scratch copy of its seed corpus (fuzz/corpus/<name>/ is
# never written to).
#
#   fuzz/run.sh [SECONDS] [HARNESS...]     default: 30 seconds, every fuzz/fuzz_*.c
#
# Environment:
#   CC                 C compiler (default: clang, else clang-14, clang-15, ...)
#   KACE_FUZZ_BUILD    build folder (default: <repo>/build-fuzz)
#   KACE_FUZZ_NO_BUILD=1   use the executables already built
#   KACE_FUZZ_KEEP=1   keep the scratch corpora (their paths are printed)
#   KACE_FUZZ_ARGS     extra libFuzzer arguments (e.g. "-jobs=4 -workers=4")
#   KACE_FUZZ_ALLOW_KNOWN=1  fuzz_model: step over the known booster NUL bug (see fuzz_model.c)
#
# Exit status: 0 when no harness found anything; 1 when one crashed, leaked,
# timed out or broke an invariant (the input is saved under
# build-fuzz/artifacts/<harness>/, the log under build-fuzz/logs/).
# Reproduce with: build-fuzz/fuzz/<harness> <crash file>
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
seconds=${1:-30}
shift || true
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "usage: $0 [SECONDS] [HARNESS...]  (SECONDS: a positive integer, got '$seconds')" >&2
    exit 2
fi
build=${KACE_FUZZ_BUILD:-$root/build-fuzz}

if [ -z "${CC:-}" ]; then
    for c in clang clang-14 clang-15 clang-16 clang-17 clang-18 clang-19; do
        if command -v "$c" >/dev/null 2>&1; then
            CC=$c
            break
        fi
    done
fi
# Not "$CC --version | grep -q" under pipefail: grep's early exit can SIGPIPE the compiler.
if [ -z "${CC:-}" ] || ! grep -qi clang <<<"$("$CC" --version 2>/dev/null)"; then
    echo "$0: needs clang with libFuzzer (Debian 12: apt-get install clang-14 libclang-rt-14-dev); CC='${CC:-}'" >&2
    exit 2
fi
export CC

harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
    for src in "$here"/fuzz_*.c; do
        harnesses+=("$(basename "$src" .c)")
    done
fi
for h in "${harnesses[@]}"; do
    if [ ! -f "$here/$h.c" ]; then
        echo "$0: no harness $h (expected $here/$h.c)" >&2
        exit 2
    fi
done

if [ "${KACE_FUZZ_NO_BUILD:-0}" != 1 ]; then
    echo "== building the harnesses with $CC into $build"
    cmake -S "$root" -B "$build" -DKACE_FUZZ=ON -DKACE_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER="$CC" >"$build.configure.log" 2>&1 || {
        cat "$build.configure.log" >&2
        exit 1
    }
    cmake --build "$build" --target "${harnesses[@]}" -j "$(nproc 2>/dev/null || echo 4)"
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kace-fuzz.XXXXXX")
if [ "${KACE_FUZZ_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$scratch"' EXIT
fi
mkdir -p "$build/logs"

# Sanitizer reports become failures; leaks count as well.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

failed=()
for h in "${harnesses[@]}"; do
    exe=$build/fuzz/$h
    if [ ! -x "$exe" ]; then
        echo "$0: $exe was not built" >&2
        exit 1
    fi
    corpus=$scratch/$h/corpus
    artifacts=$build/artifacts/$h
    mkdir -p "$corpus" "$artifacts"
    seeds=$here/corpus/${h#fuzz_}
    if [ -d "$seeds" ]; then
        cp -R "$seeds/." "$corpus/"
    fi
    chmod -R u+w "$corpus"
    log=$build/logs/$h.log
    echo "== $h: ${seconds}s on $(find "$corpus" -type f | wc -l) seed(s), log $log"
    status=0
    # shellcheck disable=SC2086
    "$exe" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" ${KACE_FUZZ_ARGS:-} "$corpus" >"$log" 2>&1 || status=$?
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)' "$log" | sed 's/^/   /' || true
    grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | sed 's/^/   /' || true
    if [ "$status" -ne 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: |.*invariant failed)' "$log"; then
        echo "!! $h FAILED (exit $status); see $log and $artifacts/" >&2
        grep -E 'invariant failed|ERROR: |SUMMARY: |Test unit written to' "$log" | sed -n '1,5s/^/   /p' >&2
        failed+=("$h")
    fi
    if [ "${KACE_FUZZ_KEEP:-0}" = 1 ]; then
        echo "   corpus kept in $corpus"
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "== FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "== no crash in ${harnesses[*]} (${seconds}s each)"
