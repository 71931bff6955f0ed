#!/usr/bin/env bash
# Progress on long work (cli/meter.c over lib/base/meter.c): on a terminal,
# import, eval and simulate draw one updating line on stderr ("kace import:
# importing 1.3/3.0 MB (44%), 12.2 MB/s, 0:00 left") and erase it at
# the end of each phase; into a pipe or a file, or with --quiet, they print
# nothing more (stderr empty on success). The terminal is a pseudo-terminal
# from script(1). kace campaign's and measure's bar: tests/cli_measure.sh.
#
#   cli_meter.sh KACE SHARED_DATA SCRATCH
set -uo pipefail
kace=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shared=$2
scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
command -v script >/dev/null || { echo "FAIL: script (bsdutils) is not installed" >&2; exit 1; }
src=$(cd "$(dirname "$0")/.." && pwd)
asan=0
grep -q libasan < <(ldd "$kace") && asan=1

source "$(dirname "$0")/lib_test.sh" # fail, failures
# Runs a command on a pseudo-terminal; its output (stdout and stderr) in $scratch/tty.
on_tty() {
    local t0=$(date +%s.%N)
    script -qfec "$*" /dev/null >"$scratch/tty" 2>&1 </dev/null
    tty_rc=$?
    tty_seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# The progress lines drawn for label $1, one per line.
# (Into a file first: grep -q on a long pipe would end it early, and pipefail calls that a failure.)
drawn() {
    tr '\r' '\n' <"$scratch/tty" | sed 's/\x1b\[K//g' | grep -a "^kace $1: " >"$scratch/drawn"
    cat "$scratch/drawn"
}
# True when the last progress line of label $1 was erased.
erased() { perl -0777 -ne "exit(/.*kace $1: [^\r]*\r\e\[K/s ? 0 : 1)" "$scratch/tty"; }

# A system profile with 60,000 workloads (300,000 values): long enough to be drawn more than once.
awk 'BEGIN { print "Type,Exclusive100,sm%,mem%,memcap,Exclusive50";
             for (i = 0; i < 60000; i++) printf "meter-w%d_batch1-inf,%d.5,%d.25,%d.5,1.5,%d.25\n", i, 10 + i % 90, i % 100, i % 100, 5 + i % 50 }' \
    >"$scratch/many.csv"

# 1. import on a terminal: one phase (the file is read and stored batch by batch),
# bytes done/total, erased at the end.
on_tty "$kace import --db $scratch/tty.db $scratch/many.csv"
[ $tty_rc = 0 ] || fail "import on a terminal: exit $tty_rc: $(head -c 500 "$scratch/tty")"
drawn import >/dev/null; grep -q "^kace import: importing [0-9.]*/[0-9.]* MB ([0-9]*%)" "$scratch/drawn" || fail "import: no importing line: $(drawn import | head -3)"
erased import || fail "import: the progress line was left on the terminal"
grep -aq "many.csv" "$scratch/tty" || fail "import: the file summary is missing: $(head -c 300 "$scratch/tty")"
# A line drawn 0.2 s or more into its phase shows the rate and time left. Lines are
# drawn ten a second at most, the first at once, so the third line of the phase and
# every later one are that far in, however slow the machine (counted, not timed).
drawn import >/dev/null
late=$(grep "^kace import: importing " "$scratch/drawn" | tail -n +3)
if [ -n "$late" ]; then
    grep -v "MB/s, [0-9]*:[0-9][0-9] left" <<<"$late" | grep -q . &&
        fail "import: a line drawn late in its phase without rate and time left: $(grep -v 'MB/s' <<<"$late" | head -2)"
fi
echo "import on a terminal: $(drawn import | wc -l) progress lines in ${tty_seconds}s"

# 2. Into a file: stdout as before, stderr empty.
"$kace" import --db "$scratch/pipe.db" "$scratch/many.csv" >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc = 0 ] || fail "import into a file: exit $rc: $(cat "$scratch/err")"
[ -s "$scratch/err" ] && fail "import into a file printed on stderr: $(head -c 300 "$scratch/err")"
grep -q $'\r\|\x1b' "$scratch/out" && fail "import into a file: terminal codes on stdout"
[ "$(wc -l <"$scratch/out")" = 1 ] || fail "import into a file: stdout is not the one file line: $(cat "$scratch/out")"

# 3. --quiet on a terminal: no progress.
on_tty "$kace import --quiet --db $scratch/quiet.db $scratch/many.csv"
[ $tty_rc = 0 ] || fail "import --quiet: exit $tty_rc"
[ -s "$scratch/tty" ] && fail "import --quiet on a terminal printed: $(head -c 300 "$scratch/tty" | cat -v)"

# 4. simulate and eval on the reference store.
"$kace" import --quiet --db "$scratch/ref.db" "$shared/kace-v100" >/dev/null 2>&1 || fail "importing the reference data"
sim="$kace simulate --db $scratch/ref.db --trace $shared/alibaba-gpu-2023/openb_pod_list_default.csv --policies exclusive,kace --no-figures"
on_tty "$sim --out $scratch/sim-tty"
[ $tty_rc = 0 ] || fail "simulate on a terminal: exit $tty_rc: $(tail -c 500 "$scratch/tty")"
[ "$(drawn simulate >/dev/null; grep -c "^kace simulate: replaying 0/[0-9]* jobs (0%)" "$scratch/drawn")" -ge 2 ] ||
    fail "simulate: not one replay line per policy: $(drawn simulate | head -5)"
erased simulate || fail "simulate: the progress line was left on the terminal"
$sim --out "$scratch/sim-pipe" >"$scratch/out" 2>"$scratch/err" || fail "simulate into a file failed: $(cat "$scratch/err")"
[ -s "$scratch/err" ] && fail "simulate into a file printed on stderr: $(head -c 300 "$scratch/err")"
on_tty "$sim --quiet --out $scratch/sim-quiet"
drawn simulate >/dev/null; grep -q . "$scratch/drawn" && fail "simulate --quiet drew progress"

# eval takes minutes under ASan: there only its usage is checked.
if [ $asan = 0 ]; then
    ev="$kace eval --db $scratch/ref.db --mode clean --no-xu --no-figures"
    on_tty "$ev --out $scratch/eval-tty"
    [ $tty_rc = 0 ] || fail "eval on a terminal: exit $tty_rc: $(tail -c 500 "$scratch/tty")"
    drawn eval >/dev/null; grep -q "^kace eval: evaluating [a-z ]* [0-9]*/[0-9]* tasks ([0-9]*%)" "$scratch/drawn" || fail "eval: no progress line: $(drawn eval | head -3)"
    erased eval || fail "eval: the progress line was left on the terminal"
    $ev --out "$scratch/eval-pipe" >"$scratch/out" 2>"$scratch/err" || fail "eval into a file failed: $(cat "$scratch/err")"
    [ -s "$scratch/err" ] && fail "eval into a file printed on stderr: $(head -c 300 "$scratch/err")"
else
    echo "ASan build: eval's progress is checked in the plain build only"
fi
grep -q -- "--quiet" < <("$kace" eval --help) || fail "eval --help does not mention --quiet"
grep -q -- "--quiet" < <("$kace" simulate --help) || fail "simulate --help does not mention --quiet"

# 5. The library never prints: no stdio call in lib/base/meter.c.
grep -nE "printf|fputs|fwrite|stderr|stdout" "$src/lib/base/meter.c" && fail "lib/base/meter.c prints"

[ $failures = 0 ] || { echo "$failures failures" >&2; exit 1; }
echo ok
