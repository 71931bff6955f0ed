#!/usr/bin/env bash
# Failure injection over whole commands (tests/helpers/failinject.c, an
# LD_PRELOAD library): the Nth allocation, then the Nth write to a regular
# file, fails, for N = 1, 2, ... (every N up to FIRST, then a stride up to
# the count an unharmed run makes) over
#   import  (colocations into a store that holds the profiles),
#   train   (a model into the store and into a model file, both held before),
#   campaign (one pair of stand-in workloads under the stand-in MPS daemon).
# For every N: the command succeeds, or exits 1..125 with a "kace: " message;
# no crash, abort, hang or sanitizer report; on failure the store's content
# (sqlite3 .dump) and the model file are byte for byte as before; on success
# without a campaign's clock in the data, the store is as after an unharmed run.
#
# Under ASan+UBSan the shim goes first in the library list (ASan's link-order
# check is turned off for that) and passes the calls it does not fail on to
# ASan's malloc, so leaks and bad accesses on the error paths are reported; a
# smaller sample runs there, counting the main thread's calls only.
#
#   cli_failinject.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$1
shared=$2
scratch=$3
build=$(dirname "$kace")
shim="$build/tests/libkace_failinject.so"
ref="$shared/kace-v100"
export LC_ALL=C
rm -rf "$scratch" && mkdir -p "$scratch/bin" || exit 1
[ -f "$shim" ] || { echo "FAIL: $shim not built" >&2; exit 1; }
[ -f "$ref/colocations/pairs.csv" ] || { echo "FAIL: reference data not found under $ref" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 is not installed" >&2; exit 1; }

asan=0
# Not "producer | grep -q" under pipefail: grep leaves at the first match and the
# producer's next write dies of SIGPIPE, which fails the pipeline at random.
if grep -q -e __asan_init -e libasan < <(nm -D "$kace" 2>/dev/null; ldd "$kace"); then
    asan=1
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
    # A new thread's start-up inside ASan allocates through malloc and aborts on NULL:
    # there only the main thread's calls are counted.
    export KACE_FAIL_MAIN_THREAD=1
    echo "ASan build: the shim stands in front of ASan's allocator; a smaller sample"
fi
# Samples per command and kind: every N up to FIRST, then about MORE more spread up to
# the count (a campaign run takes ~0.4 s, an import or a train ~0.05 s).
# KACE_FAILINJECT_SCALE=K multiplies both (K=1000: every N); KACE_FAILINJECT_ONLY="train"
# walks only the commands named.
scale=${KACE_FAILINJECT_SCALE:-1}
samples() { # FIRST MORE for command $1
    local f m
    case $1 in campaign) f=20 m=25 ;; *) f=40 m=120 ;; esac
    [ $asan = 1 ] && f=$((f / 4)) m=$((m / 8))
    echo $((f * scale)) $((m * scale))
}

source "$(dirname "$0")/lib_test.sh" # fail, failures
dump() { sqlite3 "$1" .dump | sha256sum | cut -d' ' -f1; }
# The same without the models' creation times (two good runs differ only there).
stable_dump() {
    # .backup, not cp: committed pages may still be in the -wal file (a failed checkpoint).
    rm -f "$scratch"/stable.db* && sqlite3 "$1" ".backup $scratch/stable.db" &&
        sqlite3 "$scratch/stable.db" "UPDATE models SET created = ''" && dump "$scratch/stable.db"
}

# ---- the states each command starts from ---------------------------------------
mkdir -p "$scratch/profiles-only"
cp "$ref/profiles/system.csv" "$scratch/profiles-only/" && cp -r "$ref/profiles/kernel" "$scratch/profiles-only/" ||
    exit 1
head -61 "$ref/colocations/pairs.csv" >"$scratch/pairs-part.csv"
"$kace" import --quiet --db "$scratch/profiles.db" "$scratch/profiles-only" >/dev/null || { fail "setup: profiles"; exit 1; }
cp "$scratch/profiles.db" "$scratch/trained.db"
"$kace" import --quiet --db "$scratch/trained.db" "$ref/colocations/pairs.csv" >/dev/null || { fail "setup: pairs"; exit 1; }
"$kace" train --kind linear --db "$scratch/trained.db" --out "$scratch/trained.model" >/dev/null ||
    { fail "setup: train"; exit 1; }

# Stand-in workloads and MPS daemon, as tests/cli_measure.sh uses them.
cp "$build/tests/kace-test-worker" "$scratch/bin/worker" && cp "$build/tests/kace-test-mps-control" "$scratch/bin/mps-control" ||
    exit 1
export KACE_MPS_CONTROL="$scratch/bin/mps-control" KACE_TEST_MPS_MODE=normal
run_dir=$(mktemp -d /tmp/kace-failinject-XXXXXX)
trap 'for p in $(pgrep -f "$scratch/bin/"); do kill -KILL "$p" 2>/dev/null; done; rm -rf "$run_dir"' EXIT
cp "$scratch/profiles.db" "$scratch/campaign.db"
"$kace" workload --db "$scratch/campaign.db" add fast -- "$scratch/bin/worker" report 4000 >/dev/null &&
    "$kace" workload --db "$scratch/campaign.db" add slow -- "$scratch/bin/worker" report 1000 >/dev/null ||
    { fail "setup: workloads"; exit 1; }
printf 'workloads fast slow\npairs\n' >"$scratch/plan.txt"

# Puts the work copies back to the starting state of command $1.
restore() {
    rm -f "$scratch"/work.db* "$scratch"/work.model*
    case $1 in
    import) cp "$scratch/profiles.db" "$scratch/work.db" ;;
    train) cp "$scratch/trained.db" "$scratch/work.db" && cp "$scratch/trained.model" "$scratch/work.model" ;;
    campaign) cp "$scratch/campaign.db" "$scratch/work.db" ;;
    esac
}
command_of() {
    case $1 in
    import) echo "$kace import --quiet --db $scratch/work.db $scratch/pairs-part.csv" ;;
    train) echo "$kace train --db $scratch/work.db --out $scratch/work.model" ;;
    campaign) echo "$kace campaign --quiet --db $scratch/work.db --warmup 0.1 --window 0.2 --run-dir $run_dir $scratch/plan.txt" ;;
    esac
}

# Runs command $1 with KACE_FAIL_$2=$3; sets rc and report ("allocs A writes W failed F").
run_injected() {
    local log="$scratch/inject.log"
    rm -f "$log"
    # shellcheck disable=SC2046
    timeout 60 env LD_PRELOAD="$shim" "KACE_FAIL_$2=$3" KACE_FAIL_LOG="$log" $(command_of "$1") \
        >"$scratch/out" 2>"$scratch/err"
    rc=$?
    report=$(cat "$log" 2>/dev/null)
}

total_runs=0
summary=""
walk() {
    local cmd=$1 kind=$2
    restore "$cmd"
    local before model_before="" after_ok="" model_ok=""
    before=$(dump "$scratch/work.db")
    [ -f "$scratch/work.model" ] && model_before=$(sha256sum <"$scratch/work.model")
    # An unharmed run: how many calls there are, and the store it leaves.
    run_injected "$cmd" "$kind" 0
    if [ $rc != 0 ] || [ -z "$report" ]; then
        fail "$cmd: the unharmed run failed (exit $rc): $(head -c 500 "$scratch/err")"
        return
    fi
    local count
    if [ "$kind" = ALLOC ]; then count=$(awk '{print $2}' <<<"$report"); else count=$(awk '{print $4}' <<<"$report"); fi
    [ "$cmd" != campaign ] && after_ok=$(stable_dump "$scratch/work.db")
    [ -f "$scratch/work.model" ] && model_ok=$(sha256sum <"$scratch/work.model")
    local ns=() n step FIRST MORE
    read -r FIRST MORE <<<"$(samples "$cmd")"
    for ((n = 1; n <= count && n <= FIRST; n++)); do ns+=("$n"); done
    if ((count > FIRST)); then
        step=$(((count - FIRST + MORE - 1) / MORE))
        for ((n = FIRST + step; n <= count; n += step)); do ns+=("$n"); done
    fi
    local hit_fail=0 hit_ok=0
    for n in "${ns[@]}"; do
        restore "$cmd"
        run_injected "$cmd" "$kind" "$n"
        total_runs=$((total_runs + 1))
        local what="$cmd, $kind $n of $count"
        if [ -z "$report" ]; then
            fail "$what: died without exiting (exit $rc): $(tail -c 800 "$scratch/err")"
        elif [ $rc -ge 124 ]; then
            fail "$what: exit $rc (signal, abort or hang): $(tail -c 800 "$scratch/err")"
        elif grep -qE "AddressSanitizer|LeakSanitizer|runtime error:" "$scratch/err"; then
            fail "$what: sanitizer report: $(head -c 800 "$scratch/err")"
        elif [ $rc != 0 ]; then
            hit_fail=$((hit_fail + 1))
            grep -q "^kace" "$scratch/err" || fail "$what: exit $rc without a message: $(head -c 300 "$scratch/err")"
            [ "$(dump "$scratch/work.db")" = "$before" ] || fail "$what: failed (exit $rc) but the store changed: $(head -c 300 "$scratch/err")"
            if [ -n "$model_before" ]; then
                [ "$(sha256sum <"$scratch/work.model" 2>/dev/null)" = "$model_before" ] ||
                    fail "$what: failed but the model file changed: $(head -c 300 "$scratch/err")"
            fi
            compgen -G "$scratch/work.model?*" >/dev/null && fail "$what: a temporary model file was left behind: $(ls "$scratch"/work.model?*)"
        else
            hit_ok=$((hit_ok + 1))
            if [ -n "$after_ok" ] && [ "$(stable_dump "$scratch/work.db")" != "$after_ok" ]; then
                fail "$what: exit 0, but the store differs from an unharmed run's"
            fi
            if [ -n "$model_ok" ] && [ "$(sha256sum <"$scratch/work.model")" != "$model_ok" ]; then
                fail "$what: exit 0, but the model file differs from an unharmed run's"
            fi
            if [ "$cmd" = campaign ] && [ "$(sqlite3 "$scratch/work.db" "SELECT count(*) FROM runs WHERE status='ok'")" != 1 ]; then
                fail "$what: exit 0, but the run was not stored: $(head -c 300 "$scratch/err")"
            fi
        fi
    done
    summary+="  $cmd $kind: $count calls in an unharmed run, ${#ns[@]} tried (N=1..$((count < FIRST ? count : FIRST))${step:+, then every $step}): $hit_fail failed cleanly, $hit_ok succeeded anyway"$'\n'
}

start=$(date +%s)
for cmd in ${KACE_FAILINJECT_ONLY:-import train campaign}; do
    walk "$cmd" ALLOC
    walk "$cmd" WRITE
done
printf '%s' "$summary"
echo "$total_runs injected runs in $(($(date +%s) - start)) s"
[ $failures = 0 ] || { echo "$failures failures" >&2; exit 1; }
echo ok
