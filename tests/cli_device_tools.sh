#!/usr/bin/env bash
# The device scripts' pieces that can be checked without a GPU or the bundle:
# plan.py's plan meets the campaign's requirements (kace campaign parses it),
# check-libs.py rejects a library from outside the allowed folders, and the
# output-folder check rejects more than 8 files or 3 folders deep; the
# comparison with ncu (profile_counts, store.py ncu-compare), dataset.sh
# (kace export --dataset) and its --verify of data/h*, and docs/h100.md's
# blocks are in step with data/h100 (tools/gpu-report.py).
#   bash cli_device_tools.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_device_tools.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
DEV=$(cd "$(dirname "$0")/../scripts/device" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1
source "$(dirname "$0")/lib_test.sh" # fail, failures

# 1. Plans for 17 and 9 workloads: >= 30 pairs (each workload in >= 5), 10 triples, 10 split runs,
#    3 repetitions of 6 pairs, 3 time-sliced pairs, and the 4 grid workloads alone at 6 MPS shares.
for n in 17 9; do
    names=$(seq 1 "$n" | sed 's/^/w/; s/$/_batch1-inf/')
    for w in $names; do "$KACE" workload --db "$SCRATCH/p$n.db" add "$w" -- true >/dev/null || fail "workload add"; done
    python3 "$DEV/plan.py" $names >"$SCRATCH/plan$n.txt" || fail "plan.py $n"
    "$KACE" campaign --db "$SCRATCH/p$n.db" --dry-run "$SCRATCH/plan$n.txt" >"$SCRATCH/dry$n.txt" 2>&1 || fail "dry-run $n: $(cat "$SCRATCH/dry$n.txt")"
    awk -v n="$n" '
        NR > 1 && $4 !~ /@/ && $0 !~ /time-slicing/ && NF == 7 && $7 == "#0" { pairs++; c[$4]++; c[$6]++ }
        NR > 1 && NF == 9 { triples++ }
        NR > 1 && /@/ && $3 != "solo" { splits++ }
        NR > 1 && $3 == "solo" { solo++; shares[$4] = shares[$4] " " ($5 ~ /^@/ ? $5 : "@100") }
        NR > 1 && /#2$/ { rep3++ }
        NR > 1 && /time-slicing/ { ts++ }
        END {
            min = 99; for (w in c) if (c[w] < min) min = c[w]
            curves = 0; for (w in shares) curves += shares[w] == " @10 @30 @50 @70 @90 @100"
            if (pairs < 30 || min < 5 || length(c) != n || triples != 10 || splits != 10 || rep3 != 6 || ts != 3 ||
                solo != 24 || curves != 4) {
                printf "n=%d: pairs %d (min per workload %d, %d workloads), triples %d, splits %d, 3rd repetitions %d, time-sliced %d, solo %d, curves %d\n",
                    n, pairs, min, length(c), triples, splits, rep3, ts, solo, curves; exit 1 } }' "$SCRATCH/dry$n.txt" ||
        fail "plan for $n workloads: $(head -3 "$SCRATCH/dry$n.txt")"
done
# Deterministic: the same names give the same plan.
python3 "$DEV/plan.py" $(seq 1 17 | sed 's/^/w/; s/$/_batch1-inf/') | cmp -s - "$SCRATCH/plan17.txt" || fail "plan.py is not deterministic"

# 1b. Two workloads added to the catalog after the 9-workload plan was made: the plan keeps
#     its text (every run it planned stays planned) and each added workload joins >= 7 pairs
#     (the plan's occur); extending again, or with no new name, changes nothing.
names9=$(seq 1 9 | sed 's/^/w/; s/$/_batch1-inf/') names11=$(seq 1 11 | sed 's/^/w/; s/$/_batch1-inf/')
for w in w10_batch1-inf w11_batch1-inf; do "$KACE" workload --db "$SCRATCH/p9.db" add "$w" -- true >/dev/null || fail "workload add"; done
python3 "$DEV/plan.py" --extend "$SCRATCH/plan9.txt" $names11 >"$SCRATCH/plan9x.txt" || fail "plan.py --extend"
head -n "$(wc -l <"$SCRATCH/plan9.txt")" "$SCRATCH/plan9x.txt" | cmp -s - "$SCRATCH/plan9.txt" ||
    fail "plan.py --extend did not keep the plan's text"
"$KACE" campaign --db "$SCRATCH/p9.db" --dry-run "$SCRATCH/plan9x.txt" >"$SCRATCH/dry9x.txt" 2>&1 ||
    fail "dry-run of the extended plan: $(cat "$SCRATCH/dry9x.txt")"
[ -z "$(comm -23 <(sed 1d "$SCRATCH/dry9.txt" | sort) <(sed 1d "$SCRATCH/dry9x.txt" | sort))" ] ||
    fail "the extended plan lost runs of the first: $(comm -23 <(sed 1d "$SCRATCH/dry9.txt" | sort) <(sed 1d "$SCRATCH/dry9x.txt" | sort) | head -3)"
added=$(awk 'NR > 1 && NF == 7 && $7 == "#0" && $3 == "pairs" { for (i = 4; i <= 6; i += 2) if ($i ~ /^w1[01]_/) c[$i]++ }
    END { printf "%d %d", c["w10_batch1-inf"], c["w11_batch1-inf"] }' "$SCRATCH/dry9x.txt")
[ "$added" = "7 7" ] && [ "$(($(grep -c . "$SCRATCH/dry9x.txt") - $(grep -c . "$SCRATCH/dry9.txt")))" = 14 ] ||
    fail "extended plan: pairs of the added workloads '$added' (want 7 7), runs $(sed -n 1p "$SCRATCH/dry9x.txt")"
python3 "$DEV/plan.py" --extend "$SCRATCH/plan9x.txt" $names11 | cmp -s - "$SCRATCH/plan9x.txt" ||
    fail "plan.py --extend changed a plan that holds every name"
python3 "$DEV/plan.py" --extend "$SCRATCH/plan9.txt" $names9 | cmp -s - "$SCRATCH/plan9.txt" ||
    fail "plan.py --extend with no new name changed the plan"
# Added one at a time, w10 then w11: w11's partners are not w10's (w10's pairs count).
python3 "$DEV/plan.py" --extend "$SCRATCH/plan9.txt" $(seq 1 10 | sed 's/^/w/; s/$/_batch1-inf/') >"$SCRATCH/plan9a.txt" &&
    python3 "$DEV/plan.py" --extend "$SCRATCH/plan9a.txt" $names11 >"$SCRATCH/plan9b.txt" || fail "plan.py --extend twice"
p10=$(awk '$1 == "run" && NF == 3 && $2 == "w10_batch1-inf" { print $3 }' "$SCRATCH/plan9b.txt" | sort)
p11=$(awk '$1 == "run" && NF == 3 && $2 == "w11_batch1-inf" { print $3 }' "$SCRATCH/plan9b.txt" | sort)
[ "$(wc -l <<<"$p10")" = 7 ] && [ "$(wc -l <<<"$p11")" = 7 ] && [ "$(comm -12 <(echo "$p10") <(echo "$p11") | wc -l)" -le 5 ] ||
    fail "plan.py --extend one at a time: w10 with $(echo $p10), w11 with $(echo $p11)"
printf 'workloads a b c\nset mine\npairs\n' >"$SCRATCH/setplan.txt"
python3 "$DEV/plan.py" --extend "$SCRATCH/setplan.txt" a b c d >/dev/null 2>"$SCRATCH/set.err" &&
    fail "plan.py --extend extended a plan whose runs go into a set of its own"
grep -q "setplan.txt:2: 'set'" "$SCRATCH/set.err" || fail "plan.py --extend: no line in the error: $(cat "$SCRATCH/set.err")"

# 2. check-libs.py: a kace that loaded a library from outside the allowed folders fails; inside passes.
mkdir -p "$SCRATCH/ld" "$SCRATCH/bundle/lib"
cat >"$SCRATCH/ld/ld.100" <<EOT
       100:	find library=libsqlite3.so.0 [0]; searching
       100:	  trying file=$SCRATCH/bundle/lib/libsqlite3.so.0
       100:	find library=libc.so.6 [0]; searching
       100:	 search cache=/etc/ld.so.cache
       100:	  trying file=/lib/x86_64-linux-gnu/libc.so.6
       100:	initialize program: $KACE
       100:	transferring control: $KACE
       100:	calling init: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
EOT
python3 "$DEV/check-libs.py" --kace "$KACE" --allow "$SCRATCH/bundle/lib" "$SCRATCH/ld" >"$SCRATCH/cl1.out" 2>&1 &&
    fail "check-libs accepted a dlopen'd library from /usr/lib: $(cat "$SCRATCH/cl1.out")"
grep -q "libnvidia-ml.so.1 (in" "$SCRATCH/cl1.out" || fail "check-libs does not name the library: $(cat "$SCRATCH/cl1.out")"
python3 "$DEV/check-libs.py" --kace "$KACE" --allow "$SCRATCH/bundle/lib" --allow /usr/lib/x86_64-linux-gnu "$SCRATCH/ld" \
    >"$SCRATCH/cl2.out" 2>&1 || fail "check-libs rejected allowed libraries: $(cat "$SCRATCH/cl2.out")"
python3 "$DEV/check-libs.py" --kace /nonexistent/kace --allow / "$SCRATCH/ld" >/dev/null 2>&1 &&
    fail "check-libs passed without seeing any kace process"

# 3. The output folder rules of a device call.
mkdir -p "$SCRATCH/out/a/b/c"
for i in 1 2 3 4 5 6 7 8; do : >"$SCRATCH/out/f$i"; done
(source "$DEV/lib.sh" && out_check "$SCRATCH/out") >/dev/null || fail "out_check rejected 8 files"
: >"$SCRATCH/out/a/b/c/deep"
(source "$DEV/lib.sh" && out_check "$SCRATCH/out") >"$SCRATCH/oc.out" && fail "out_check accepted 9 files, 3 folders deep"
grep -q "9 files" "$SCRATCH/oc.out" && grep -q "3 folders deep" "$SCRATCH/oc.out" || fail "out_check: $(cat "$SCRATCH/oc.out")"

# 3b. The catalog: words quoted as in a shell, nothing expanded or globbed, @W@ @PY@ @KACE@
#     replaced; a line whose quote does not close is left out, named by file and line. A
#     command kace cannot change (KIND cmd) runs behind kace progress-from-output.
mkdir -p "$SCRATCH/cat" && : >"$SCRATCH/cat/step-9" # a glob would find it
cat >"$SCRATCH/cat/catalog.txt" <<'EOF'
# a comment
plain_batch1-inf cuda @W@/build/kace_kernels gemm 2048
wrapped_batch4-inf cmd @KACE@ progress-from-output --match '^step ([0-9]+) \[' --samples 4 -- sh -c 'for i in 1 2 3; do echo "step $i [x]"; done' step-*
broken_batch1-inf cmd sh -c 'echo unclosed
spaced_batch2-train torch @PY@ "a b.py" c\ d --batch 2
EOF
(
    KACE_CATALOG=$SCRATCH/cat/catalog.txt KACE_BIN=$(cd "$(dirname "$KACE")" && pwd)/${KACE##*/} KACE_PYTHON=/usr/bin/python3
    cd "$SCRATCH/cat" || exit 1
    export KACE_CATALOG KACE_BIN KACE_PYTHON
    source "$DEV/lib.sh" || exit 1
    catalog_load 2>"$SCRATCH/cat/err"
    [ "${CATALOG_NAMES[*]}" = "plain_batch1-inf wrapped_batch4-inf spaced_batch2-train" ] ||
        fail "catalog names: ${CATALOG_NAMES[*]}"
    [ "${CATALOG_KINDS[1]}" = cmd ] || fail "catalog kind: ${CATALOG_KINDS[1]}"
    grep -q "catalog.txt:4: broken_batch1-inf left out: unmatched single quote" "$SCRATCH/cat/err" ||
        fail "an unclosed quote: $(cat "$SCRATCH/cat/err")"
    catalog_cmd 0
    [ "${CMD[*]}" = "$WDIR/build/kace_kernels gemm 2048" ] || fail "catalog_cmd 0: ${CMD[*]}"
    catalog_cmd 2
    [ "${#CMD[@]}" = 5 ] && [ "${CMD[0]}" = /usr/bin/python3 ] && [ "${CMD[1]}" = "a b.py" ] && [ "${CMD[2]}" = "c d" ] ||
        fail "catalog_cmd 2: ${#CMD[@]} words: $(printf '[%s]' "${CMD[@]}")"
    catalog_cmd 1
    [ "${CMD[0]}" = "$KACE" ] && [ "${CMD[3]}" = '^step ([0-9]+) \[' ] && [ "${CMD[-1]}" = 'step-*' ] ||
        fail "catalog_cmd 1: $(printf '[%s]' "${CMD[@]}")"
    # The words run as they are: the wrapper counts COMMAND's three steps of 4 samples.
    KACE_PROGRESS_FD=7 "${CMD[@]}" 7>"$SCRATCH/cat/records" >/dev/null
    [ "$(awk '{ printf "%s ", $2 }' "$SCRATCH/cat/records")" = "4 8 12 " ] ||
        fail "the wrapped catalog command recorded: $(cat "$SCRATCH/cat/records")"
    # workload_key: a hash of the catalog line as written and of the script it runs; a change
    # to the script changes it (a fixed workload's failures count again from 0), not
    # another's; the same workloads unpacked in another folder keep their keys.
    mkdir -p "$SCRATCH/cat/w1" "$SCRATCH/cat/w2"
    printf 'echo one\n' | tee "$SCRATCH/cat/w1/k.sh" >"$SCRATCH/cat/w2/k.sh"
    printf 'k_batch1-inf cmd sh @W@/k.sh 8\nj_batch1-inf cmd sh -c true\n' >"$SCRATCH/cat/keys.txt"
    (
        key_in() { # key_in WDIR I
            WDIR=$1 CATALOG_NAMES=() CATALOG_KINDS=() CATALOG_CMDS=() CATALOG_RAW=()
            catalog_load "$SCRATCH/cat/keys.txt" && workload_key "$2"
        }
        k1=$(key_in "$SCRATCH/cat/w1" 0) j1=$(key_in "$SCRATCH/cat/w1" 1) k1b=$(key_in "$SCRATCH/cat/w2" 0)
        printf 'echo two\n' >"$SCRATCH/cat/w1/k.sh"
        k2=$(key_in "$SCRATCH/cat/w1" 0) j2=$(key_in "$SCRATCH/cat/w1" 1)
        [[ $k1 =~ ^[0-9a-f]{12}$ ]] && [ "$k1" != "$k2" ] && [ "$j1" = "$j2" ] && [ "$k1" != "$j1" ] && [ "$k1" = "$k1b" ] ||
            fail "workload_key: $k1 -> $k2 (script changed), $j1 -> $j2 (unchanged), $k1b (another folder, same files)"
        # The failures of a workload count under its key, as campaign.sh writes and reads them.
        f=$SCRATCH/cat/failures.txt
        profile_failure_add "$f" k_batch1-inf "$k1" && profile_failure_add "$f" k_batch1-inf "$k1" &&
            profile_failure_add "$f" j_batch1-inf "$j1"
        [ "$(profile_failures "$f" k_batch1-inf "$k1")" = 2 ] && [ "$(profile_failures "$f" k_batch1-inf "$k2")" = 0 ] &&
            [ "$(profile_failures "$f" j_batch1-inf "$j1")" = 1 ] && [ "$(profile_failures "$f.none" j_batch1-inf "$j1")" = 0 ] ||
            fail "profile_failures: $(cat "$f")"
        [ "$failures" = 0 ]
    ) || failures=$((failures + 1))
    # A second catalog (campaign.sh's later one) appends; a name already loaded is left out.
    printf 'spaced_batch2-train cuda @W@/x\nlater_batch1-inf cuda @W@/y\n' >"$SCRATCH/cat/later.txt"
    catalog_load "$SCRATCH/cat/later.txt" 2>"$SCRATCH/cat/err2"
    [ "${CATALOG_NAMES[*]}" = "plain_batch1-inf wrapped_batch4-inf spaced_batch2-train later_batch1-inf" ] &&
        [ "${CATALOG_KINDS[2]}" = torch ] && grep -q "later.txt:1: spaced_batch2-train left out: an earlier line has that name" "$SCRATCH/cat/err2" ||
        fail "a second catalog: ${CATALOG_NAMES[*]}: $(cat "$SCRATCH/cat/err2")"
    [ "$failures" = 0 ]
) || failures=$((failures + 1))

# 4. kace against ncu. kace profile's last line gives ncu's --launch-skip.
line="w: 1 samples/s (...), memcap 1.00 GB; 4000 kernels (3990 with counters, 99% of kernel time; counters run) after 123456 earlier kernels; stored"
echo "$line" >"$SCRATCH/p.out"
[ "$(source "$DEV/lib.sh" && profile_counts "$SCRATCH/p.out")" = "4000 3990 123456" ] ||
    fail "profile_counts: '$(source "$DEV/lib.sh" && profile_counts "$SCRATCH/p.out")'"
# ncu's launch count: CUDA C 20; PyTorch a step and a quarter from kace's kernels per sample
# (as kace profile prints it, %.4g) x the name's batch, within 1000..4000, and no more than
# fit in a budget at ncu's seconds per launch (at least 20); the override wins.
echo "kace profile: 2/2 done: 9000 kernels in its window (...) are not stored; about 187.5 kernels per sample" >"$SCRATCH/p2.err"
echo "kace profile: 2/2 done: 9 kernels in its window (...) are not stored; about 1.2e-05 kernels per sample" >"$SCRATCH/p3.err"
[ "$(source "$DEV/lib.sh" && profile_kernels_per_sample "$SCRATCH/p2.err")" = 187.5 ] &&
    [ "$(source "$DEV/lib.sh" && profile_kernels_per_sample "$SCRATCH/p3.err")" = 1.2e-05 ] ||
    fail "profile_kernels_per_sample: '$(source "$DEV/lib.sh" && profile_kernels_per_sample "$SCRATCH/p2.err")'"
for case in "cuda g_batch1-inf 64:20" "torch b_batch8-train 187.5:1875" "torch b_batch16-inf 20:1000" \
    "torch b_batch8-train :1000" "torch w_batch32-train 500:4000" "torch b_batch8-train 1.2e-05:1000" \
    "torch b_batch8-train 187.5 0.5 215:430" "torch b_batch8-train 187.5 0.01 215:1875" "torch b_batch8-train 187.5 30 215:20" \
    "cuda g_batch1-inf 64 30 215:20"; do
    args=${case%%:*} want=${case##*:}
    read -r kind name kps per budget <<<"$args"
    got=$(source "$DEV/lib.sh" && ncu_step_count "$kind" "$name" "${kps:-}" "${per:-}" "${budget:-}")
    [ "$got" = "$want" ] || fail "ncu_step_count $args: $got, expected $want"
done
[ "$(source "$DEV/lib.sh" && KACE_DEVICE_NCU_KERNELS=7 ncu_step_count torch b_batch8-train 187.5)" = 7 ] ||
    fail "ncu_step_count: KACE_DEVICE_NCU_KERNELS does not override"
# ncu's seconds per launch: the largest wall time over kernels compared in ncu-cost.tsv, per kind.
printf 'workload\tkind\tcache_control\twall_s\tlaunch_skip\tlaunch_count\tkernels\na\tcuda\tall\t12\t100\t20\t20\nb\ttorch\tall\t90\t500\t400\t300\n' \
    >"$SCRATCH/ncu-cost.tsv"
[ "$(source "$DEV/lib.sh" && ncu_seconds_per_kernel "$SCRATCH/ncu-cost.tsv" cuda)" = 0.600 ] &&
    [ "$(source "$DEV/lib.sh" && ncu_seconds_per_kernel "$SCRATCH/ncu-cost.tsv" torch)" = 0.300 ] &&
    [ -z "$(source "$DEV/lib.sh" && ncu_seconds_per_kernel "$SCRATCH/ncu-cost.tsv" llm)" ] &&
    [ -z "$(source "$DEV/lib.sh" && ncu_seconds_per_kernel "$SCRATCH/none.tsv" cuda)" ] ||
    fail "ncu_seconds_per_kernel: '$(source "$DEV/lib.sh" && ncu_seconds_per_kernel "$SCRATCH/ncu-cost.tsv" cuda)'"
# ncu_options under the device scripts' pipefail finds --pipeline-boost-state in the
# stand-in ncu's long --help (as long as a real one's, the option near its start): a
# `ncu --help | grep -q` there fails when grep ends early and ncu dies of SIGPIPE.
opts=$(set -o pipefail && PATH=$DEV/fakes/bin:$PATH && source "$DEV/lib.sh" && ncu_options && echo "${NCU_OPTS[*]}")
[ "$opts" = "--clock-control none --apply-rules no --pipeline-boost-state dynamic" ] ||
    fail "ncu_options with a long ncu --help: '$opts'"
# 4'. ncu_off: two calls of this NCU_WAY whose ncu profiled nothing, and no comparison ever
#       made; not one call, not another way's, not once a comparison exists; silent without
#       the file.
mkdir -p "$SCRATCH/no/ncu"
(
    source "$DEV/lib.sh" || exit 1
    ncu_off "$SCRATCH/no" 2 2>"$SCRATCH/no.err" && fail "ncu_off without ncu-nothing.tsv"
    [ -s "$SCRATCH/no.err" ] && fail "ncu_off without ncu-nothing.tsv wrote: $(cat "$SCRATCH/no.err")"
    printf 't\tG\tw\tway 2\n' >"$SCRATCH/no/ncu-nothing.tsv"
    ncu_off "$SCRATCH/no" 2 && fail "ncu_off after one call"
    printf 't\tG\tw\tway 1\n' >>"$SCRATCH/no/ncu-nothing.tsv"
    ncu_off "$SCRATCH/no" 2 && fail "ncu_off counted another way's call"
    printf 't\tG\tw.nocache\tway 2\n' >>"$SCRATCH/no/ncu-nothing.tsv"
    ncu_off "$SCRATCH/no" 2 || fail "ncu_off not off after two calls"
    : >"$SCRATCH/no/ncu/w.compare.csv"
    ncu_off "$SCRATCH/no" 2 && fail "ncu_off off with a comparison made"
    [ "$failures" = 0 ]
) || failures=$((failures + 1))
# 4'. profile_need: a PyTorch profile is first given its windows and 110 s, then the longest
#     of its kind so far (outside its windows) plus a quarter and 10 s where that is more;
#     a workload whose earlier try ran out of time, half as long again as that try took.
mkdir -p "$SCRATCH/pn"
pn() { (S=$SCRATCH/pn PWW=25 && source "$DEV/lib.sh" && profile_need "$@"); }
[ "$(pn torch a_batch1-train)" = 135 ] && [ "$(pn cuda g_batch1-inf)" = 55 ] || fail "profile_need, nothing measured: $(pn torch a_batch1-train)"
printf 'workload\tkind\twall_s\tkernels\twith_counters\tkernels_before\twarmup_s\twindow_s\tcounters_warmup_s\tcounters_window_s\tkernels_per_sample\n' >"$SCRATCH/pn/profile-cost.tsv"
printf 'b_batch8-train\ttorch\t145.5\t1\t1\t1\t5\t10\t5\t5\t10\n' >>"$SCRATCH/pn/profile-cost.tsv"
[ "$(pn torch a_batch1-train)" = 186 ] && [ "$(pn cuda g_batch1-inf)" = 55 ] ||
    fail "profile_need after a PyTorch profile of 145.5 s: $(pn torch a_batch1-train), want 25 + int(120.5 * 1.25 + 10.999) = 186"
printf 'a_batch1-train\t180.2\n' >"$SCRATCH/pn/profile-timeouts.tsv"
[ "$(pn torch a_batch1-train)" = 271 ] && [ "$(pn torch c_batch1-train)" = 186 ] ||
    fail "profile_need after a try of 180.2 s that ran out of time: $(pn torch a_batch1-train), want 271"
# 4''. profile_ran_out: kace profile's own words for a run out of time (as tests/cli_profile.sh
#      sees them), or the step's timeout; not a workload's stderr that mentions a timeout.
printf '%s\n' "kace profile: 1/2 done: 1000 samples/s" \
    "kace profile: counters run (2/2): workload a_batch1-inf timeout: timeout after 3 s: 1 progress record" >"$SCRATCH/ro1"
printf '%s\n' "kace: a_batch1-inf: the clean run took 0.8 s of the 1.0 s budget; the 0.2 s left are less than the counters run's warm-up and window (0.6 s)" >"$SCRATCH/ro2"
printf '%s\n' "kace profile: counters run (2/2): workload a_batch1-inf crashed: killed by signal 6" \
    "  socket.timeout: timed out" "  workload a_batch1-inf timeout: (its own words)" >"$SCRATCH/ro3"
(
    source "$DEV/lib.sh" || exit 1
    profile_ran_out a_batch1-inf 1 "$SCRATCH/ro1" && profile_ran_out a_batch1-inf 1 "$SCRATCH/ro2" &&
        profile_ran_out a_batch1-inf 124 "$SCRATCH/ro3" && ! profile_ran_out a_batch1-inf 1 "$SCRATCH/ro3" &&
        ! profile_ran_out b_batch1-inf 1 "$SCRATCH/ro1"
) || fail "profile_ran_out: not what kace profile's lines say"
# 4a. ncu_run when ncu never reaches its launch count (the first H200, 2026-11-28: no gemm
#     launch reported profiled in 74 s; the workload's time bound ended it and ncu wrote no
#     report). The stand-in ncu in that mode runs the application to its own end. A kace
#     workload, given KACE_PROGRESS_FD, ends at its next report after the bound's SIGTERM
#     and returns 0; the report holds what was profiled. One that dies of the SIGTERM
#     returns 143, and its report is still kept (ncu writes one after an error code). With
#     nothing profiled there is no report, and the failure says so. Each line of ncu's
#     output carries the seconds since ncu started.
WORKER=$(dirname "$KACE")/tests/kace-test-worker
if [ -x "$WORKER" ]; then
    mkdir -p "$SCRATCH/ncu-run"
    printf 'kace_batch1-inf cmd %s report 1000 600\nplain_batch1-inf cmd sh -c "sleep 600"\n' "$WORKER" >"$SCRATCH/ncu-run/catalog.txt"
    for c in 0:0:3 1:1:3 2:1:0; do
        IFS=: read -r k i profiled <<<"$c"
        (
            export KACE_CATALOG=$SCRATCH/ncu-run/catalog.txt KACE_FAKE_NCU_SLOW=1 KACE_FAKE_NCU_PROFILED=$profiled
            export KACE_FAKE_NCU_CSV=$(dirname "$0")/data/ncu/newer.csv PATH="$DEV/fakes/bin:$PATH"
            source "$DEV/lib.sh" || exit 1
            WORK=$SCRATCH/ncu-run/w$k && mkdir -p "$WORK"
            catalog_load
            # The workload gets 15 s: time for a sanitized worker on a loaded machine to
            # make its first report (from which on SIGTERM waits for the next one).
            STEP_END=$(awk -v t="$EPOCHREALTIME" 'BEGIN { printf "%.3f", t + 60 }')
            ncu_run "$i" 5000 20 "$SCRATCH/ncu-run/out$k.csv" all >"$SCRATCH/ncu-run/log$k"
            rc=$?
            echo "rc=$rc NCU_SKIP=$NCU_SKIP NCU_PROFILED=$NCU_PROFILED DETAIL=${DETAIL:-}" >>"$SCRATCH/ncu-run/log$k"
            cp "$WORK/ncu.out" "$SCRATCH/ncu-run/ncu$k.out"
            exit $rc
        )
        echo "$?" >"$SCRATCH/ncu-run/rc$k"
    done
    [ "$(cat "$SCRATCH/ncu-run/rc0")" = 0 ] && [ -s "$SCRATCH/ncu-run/out0.csv" ] &&
        grep -q '^ncu: 3 launches profiled in ' "$SCRATCH/ncu-run/log0" && ! grep -q ERROR "$SCRATCH/ncu-run/log0" ||
        fail "ncu_run, a kace workload past its bound: $(cat "$SCRATCH/ncu-run/log0")"
    grep -q -- '--launch-skip 5000 ' "$SCRATCH/ncu-run/log0" ||
        fail "ncu_run changed the skip it was given: $(head -1 "$SCRATCH/ncu-run/log0")"
    grep -Eq '^0\.[0-9] s ==PROF== Connected' "$SCRATCH/ncu-run/ncu0.out" &&
        grep -Eq '^([5-9]|[1-9][0-9])\.[0-9] s ==PROF== Profiling' "$SCRATCH/ncu-run/ncu0.out" ||
        fail "ncu_run: ncu's lines without their times: $(cat "$SCRATCH/ncu-run/ncu0.out")"
    [ "$(cat "$SCRATCH/ncu-run/rc1")" = 0 ] && [ -s "$SCRATCH/ncu-run/out1.csv" ] &&
        grep -q 'The application returned an error code (143)' "$SCRATCH/ncu-run/log1" ||
        fail "ncu_run, a workload killed by its bound, 3 launches profiled: $(cat "$SCRATCH/ncu-run/log1")"
    [ "$(cat "$SCRATCH/ncu-run/rc2")" = 1 ] && [ ! -e "$SCRATCH/ncu-run/out2.csv" ] &&
        grep -q 'DETAIL=ncu wrote no report in [0-9.]* s (0 of 20 launches profiled): [0-9.]* s ==ERROR== The application returned an error code (143)' \
            "$SCRATCH/ncu-run/log2" ||
        fail "ncu_run, nothing profiled: $(cat "$SCRATCH/ncu-run/log2")"
    # 4b. ncu_probe, run after an ncu step that profiled no launch: three one-launch ncu runs
    #     from the workload's start (launch statistics, one counter, SpeedOfLight), each
    #     workload bounded; DETAIL says what each profiled. Stand-in ncu that profiles: all
    #     three did, in well under the bound; one that never does: none, each ended by the
    #     bound (2 s here), with ncu's error line.
    for c in 0:3 1:0; do
        IFS=: read -r k profiled <<<"$c"
        (
            export KACE_CATALOG=$SCRATCH/ncu-run/catalog.txt KACE_FAKE_NCU_PROFILED=$profiled KACE_DEVICE_NCU_PROBE_S=2
            [ "$profiled" = 0 ] && export KACE_FAKE_NCU_SLOW=1
            export KACE_FAKE_NCU_CSV=$(dirname "$0")/data/ncu/newer.csv PATH="$DEV/fakes/bin:$PATH"
            source "$DEV/lib.sh" || exit 1
            WORK=$SCRATCH/ncu-run/p$k && mkdir -p "$WORK"
            catalog_load
            STEP_END=$(awk -v t="$EPOCHREALTIME" 'BEGIN { printf "%.3f", t + 60 }')
            ncu_probe 0 >"$SCRATCH/ncu-run/probe$k"
            rc=$?
            echo "rc=$rc DETAIL=$DETAIL" >>"$SCRATCH/ncu-run/probe$k"
        )
    done
    # (The figures are wall time: their form is checked, and where a bound ended the probe, that
    # they are not under it; a loaded machine may make any of them longer.)
    want='rc=0 DETAIL=launch-stats: 1 of 1 launch profiled in [0-9][0-9]*\.[0-9] s; one-counter: 1 of 1 launch profiled in [0-9][0-9]*\.[0-9] s; speed-of-light: 1 of 1 launch profiled in [0-9][0-9]*\.[0-9] s$'
    grep -q "$want" "$SCRATCH/ncu-run/probe0" && grep -q -- '--launch-count 1 --metrics gpu__time_duration.sum' "$SCRATCH/ncu-run/probe0" ||
        fail "ncu_probe, an ncu that profiles: $(cat "$SCRATCH/ncu-run/probe0")"
    tail -1 "$SCRATCH/ncu-run/probe1" | grep -q 'rc=1 DETAIL=launch-stats: 0 of 1 launch profiled in \([2-9]\|[1-9][0-9][0-9]*\)\.[0-9] s' &&
        [ "$(tail -1 "$SCRATCH/ncu-run/probe1" | grep -o '0 of 1 launch profiled' | wc -l)" = 3 ] &&
        grep -Eq '^[0-9]+\.[0-9] s ==PROF== Connected' "$SCRATCH/ncu-run/probe1" ||
        fail "ncu_probe, an ncu that profiles nothing: $(cat "$SCRATCH/ncu-run/probe1")"
    # An ncu that never ends: each probe is killed after its own bound and end (1 + 2 s), says
    #     so, and leaves the next probe its time; one the step has no time left for is not run
    #     (return 2), so the campaign does not keep its result.
    mkdir -p "$SCRATCH/hang-bin"
    printf '#!/bin/sh\n[ "$1" = --help ] && exit 0\nexec sleep 600\n' >"$SCRATCH/hang-bin/ncu"
    chmod +x "$SCRATCH/hang-bin/ncu"
    for c in 2:60 3:16; do
        IFS=: read -r k left <<<"$c"
        (
            export KACE_CATALOG=$SCRATCH/ncu-run/catalog.txt KACE_DEVICE_NCU_PROBE_S=1 KACE_DEVICE_NCU_PROBE_END_S=2
            export PATH="$SCRATCH/hang-bin:$PATH"
            source "$DEV/lib.sh" || exit 1
            WORK=$SCRATCH/ncu-run/p$k && mkdir -p "$WORK"
            catalog_load
            STEP_END=$(awk -v t="$EPOCHREALTIME" -v l="$left" 'BEGIN { printf "%.3f", t + l }')
            ncu_probe 0 >"$SCRATCH/ncu-run/probe$k"
            rc=$?
            echo "rc=$rc PROBES_RUN=$PROBES_RUN DETAIL=$DETAIL" >>"$SCRATCH/ncu-run/probe$k"
        )
    done
    tail -1 "$SCRATCH/ncu-run/probe2" | grep -q '^rc=1 PROBES_RUN=3 DETAIL=launch-stats: 0 of 1 launch profiled in \([3-9]\|[1-9][0-9][0-9]*\)\.[0-9] s (ncu did not end within 3 s: killed); one-counter: 0 of 1 launch profiled in \([3-9]\|[1-9][0-9][0-9]*\)\.[0-9] s (ncu did not end within 3 s: killed); speed-of-light: ' ||
        fail "ncu_probe, an ncu that hangs: $(tail -1 "$SCRATCH/ncu-run/probe2")"
    tail -1 "$SCRATCH/ncu-run/probe3" | grep -q '^rc=2 PROBES_RUN=1 DETAIL=launch-stats: 0 of 1 .*; one-counter: not run (the step has under 13 s left); speed-of-light: not run' ||
        fail "ncu_probe, a hung ncu and a step too short for three probes: $(tail -1 "$SCRATCH/ncu-run/probe3")"
    # The skip: at most 100 launches for CUDA C, three steps for PyTorch (2000 without the count).
    for case in "cuda g_batch1-inf 4899 1:100" "cuda g_batch1-inf 40 1:40" "torch b_batch8-train 50000 187.5:4500" \
        "torch b_batch8-train 50000 :2000" "torch b_batch8-train 900 187.5:900"; do
        args=${case%%:*} want=${case##*:}
        read -r kind name skip kps <<<"$args"
        got=$(source "$DEV/lib.sh" && ncu_skip "$kind" "$name" "$skip" "${kps:-}")
        [ "$got" = "$want" ] || fail "ncu_skip $args: $got, expected $want"
    done
else
    fail "$WORKER is not built"
fi
# store.py ncu-compare: the same export imported as kace's profile and as ncu's agrees on all six.
"$KACE" import-ncu --quiet --db "$SCRATCH/k.db" --workload w "$(dirname "$0")/data/ncu/newer.csv" >/dev/null &&
    "$KACE" import-ncu --quiet --db "$SCRATCH/n.db" --workload w "$(dirname "$0")/data/ncu/newer.csv" >/dev/null ||
    fail "import-ncu of tests/data/ncu/newer.csv"
python3 "$DEV/store.py" ncu-compare "$SCRATCH/k.db" w "$SCRATCH/n.db" "$(dirname "$0")/data/ncu/newer.csv" \
    "$SCRATCH/cmp.csv" >"$SCRATCH/cmp.out" || fail "store.py ncu-compare: $(cat "$SCRATCH/cmp.out")"
grep -q "^6/6 metrics in both, 6 within 10%; .* 3 kernels in ncu's report" "$SCRATCH/cmp.out" ||
    fail "ncu-compare of an export with itself: $(cat "$SCRATCH/cmp.out")"
# ncu-slim keeps what import-ncu reads: each fixture imports to the same metrics cut down.
for f in "$(dirname "$0")"/data/ncu/*.csv; do
    b=$(basename "$f" .csv)
    python3 "$DEV/store.py" ncu-slim "$f" "$SCRATCH/$b.slim.csv" >/dev/null || fail "ncu-slim $b"
    "$KACE" import-ncu --quiet --db "$SCRATCH/full-$b.db" --workload w "$f" >/dev/null &&
        "$KACE" import-ncu --quiet --db "$SCRATCH/slim-$b.db" --workload w "$SCRATCH/$b.slim.csv" >/dev/null ||
        fail "import-ncu of $b (full or slim)"
    full=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import store
print(sorted(store.metrics(store.connect(sys.argv[2]), "w").items()))' "$DEV" "$SCRATCH/full-$b.db")
    slim=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import store
print(sorted(store.metrics(store.connect(sys.argv[2]), "w").items()))' "$DEV" "$SCRATCH/slim-$b.db")
    [ -n "$full" ] && [ "$full" = "$slim" ] || fail "ncu-slim $b changes what import-ncu reads: $full against $slim"
    [ "$(wc -c <"$SCRATCH/$b.slim.csv")" -lt "$(wc -c <"$f")" ] || fail "ncu-slim $b is not smaller"
    # Kernels counted by their Duration rows (newer.csv's device table has IDs of its own).
    want=$(case $b in classic) echo 4 ;; newer) echo 3 ;; v2020) echo 2 ;; esac)
    got=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import store; print(store.ncu_kernels(sys.argv[2]))' \
        "$DEV" "$SCRATCH/$b.slim.csv")
    [ "$got" = "$want" ] || fail "ncu_kernels($b): $got, expected $want (tests/test_ncu.c's kernels)"
done
printf '"ID","Metric Name","Metric Value"\n"1","Elapsed Cycles","5"\n' >"$SCRATCH/none.csv"
python3 "$DEV/store.py" ncu-slim "$SCRATCH/none.csv" "$SCRATCH/none.slim.csv" >/dev/null &&
    fail "ncu-slim accepted an export with no metric kace reads"
# checkpoint: a store whose writer was killed (its WAL beside it) becomes one file.
python3 - "$SCRATCH/wal.db" <<'EOT' || fail "could not make a store with a WAL"
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA journal_mode=WAL"); db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE t(x)"); db.execute("INSERT INTO t VALUES (42)"); db.commit()
os._exit(0)  # no close: the rows are only in the WAL, as after a SIGKILL
EOT
[ -s "$SCRATCH/wal.db-wal" ] || fail "no WAL beside the test store"
python3 "$DEV/store.py" checkpoint "$SCRATCH/wal.db" || fail "store.py checkpoint"
mkdir -p "$SCRATCH/alone" && cp "$SCRATCH/wal.db" "$SCRATCH/alone/wal.db"
[ "$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT x FROM t").fetchone()[0])' \
    "$SCRATCH/alone/wal.db" 2>&1)" = 42 ] || fail "after checkpoint the database file alone lacks the WAL's rows"
ROOT=$(cd "$(dirname "$0")/.." && pwd)

# 4b. A campaign call given a store it cannot restore stops at once (going on would start a
#     new campaign whose store replaces the old one).
bash "$DEV/campaign.sh" "$SCRATCH/c1" --minutes 1 --store "$SCRATCH/nonexistent/store.tar.gz" >/dev/null 2>&1 &&
    fail "campaign.sh went on with a --store that does not exist"
grep -q "no such file; nothing was run" "$SCRATCH/c1/campaign.log" || fail "campaign.sh, missing store: $(cat "$SCRATCH/c1/campaign.log")"
echo "not a tar archive" >"$SCRATCH/bad.tar.gz"
bash "$DEV/campaign.sh" "$SCRATCH/c2" --minutes 1 --store "$SCRATCH/bad.tar.gz" >/dev/null 2>&1 &&
    fail "campaign.sh went on with a store it could not unpack"
grep -q "^step restore fail .*cannot unpack" "$SCRATCH/c2/campaign.log" &&
    grep -q "^end .*could not be restored: nothing else was run" "$SCRATCH/c2/campaign.log" &&
    [ "$(wc -l <"$SCRATCH/c2/campaign.log")" = 2 ] || fail "campaign.sh, bad store: $(cat "$SCRATCH/c2/campaign.log")"
[ -e "$SCRATCH/c2/store.tar.gz" ] && fail "campaign.sh wrote a store after failing to restore one"
# A store measured on another GPU model is not continued here (the batch tool may lend an
# H200 where an H100 was asked for); the dry run resumes stores of the same GPU.
mkdir -p "$SCRATCH/other"
"$KACE" workload --db "$SCRATCH/other/kace.db" add w -- true >/dev/null || fail "workload add"
printf '2026-11-20T10:00:00Z\tNVIDIA H100 80GB HBM3, 580.65, 81559 MiB\t13.0\t2.9\tkace 1\n' >"$SCRATCH/other/visits.tsv"
tar -C "$SCRATCH/other" -czf "$SCRATCH/other.tar.gz" kace.db visits.tsv
KACE_DEVICE_FAKE=1 KACE_BIN=$KACE KACE_FAKE_GPU_NAME="NVIDIA H200" \
    bash "$DEV/campaign.sh" "$SCRATCH/c3" --minutes 1 --store "$SCRATCH/other.tar.gz" >/dev/null 2>&1 &&
    fail "campaign.sh continued an H100 store on an H200"
grep -q "^step env fail .*the store was measured on NVIDIA H100 80GB HBM3 and this GPU is NVIDIA H200: give this GPU a campaign of its own" \
    "$SCRATCH/c3/campaign.log" &&
    grep -q "^end .*(the store is another GPU model's: nothing else was run)" "$SCRATCH/c3/campaign.log" &&
    [ "$(wc -l <"$SCRATCH/c3/campaign.log")" = 3 ] || fail "campaign.sh, another GPU's store: $(cat "$SCRATCH/c3/campaign.log")"
[ -e "$SCRATCH/c3/store.tar.gz" ] && fail "campaign.sh wrote a store after refusing another GPU's"
# --minutes: a long call on one's own server is fine (1440 is 24 h); 0 and 1441 are refused.
for m in 0 1441 x; do
    bash "$DEV/campaign.sh" "$SCRATCH/c4" --minutes "$m" >/dev/null 2>"$SCRATCH/c4.err"
    [ $? = 2 ] && grep -q "minutes must be in (0, 1440]" "$SCRATCH/c4.err" || fail "campaign.sh --minutes $m: $(cat "$SCRATCH/c4.err")"
done
KACE_DEVICE_FAKE=1 KACE_BIN=$KACE bash "$DEV/campaign.sh" "$SCRATCH/c4" --minutes 1440 --store "$SCRATCH/nonexistent.tar.gz" \
    >/dev/null 2>"$SCRATCH/c4.err"
grep -q "no such file; nothing was run" "$SCRATCH/c4.err" || fail "campaign.sh --minutes 1440 was refused: $(cat "$SCRATCH/c4.err")"

# 4c. dataset.sh (kace export --dataset) rebuilds a dataset folder only from a store that
#     continues its campaign: the same GPU model and every call the folder holds; anything
#     else leaves the folder as it was.
V1=$(printf '2026-11-20T10:00:00Z\tNVIDIA H100 80GB HBM3, 580.65, 81559 MiB\t13.0\t2.9\tkace 1')
V2=$(printf '2026-11-21T10:00:00Z\tNVIDIA H100 80GB HBM3, 580.65, 81559 MiB\t13.0\t2.9\tkace 1')
V3=$(printf '2026-11-22T10:00:00Z\tNVIDIA H200, 580.65, 143771 MiB\t13.0\t2.9\tkace 1')
store_with_visits() { # NAME VISIT...: NAME.tar.gz with a store and those calls
    local name=$1 d=$SCRATCH/st-$1; shift
    mkdir -p "$d" && "$KACE" workload --db "$d/kace.db" add w -- true >/dev/null || fail "workload add"
    printf '%s\n' "$@" >"$d/visits.tsv"
    tar -C "$d" -czf "$SCRATCH/$name.tar.gz" kace.db visits.tsv
}
store_with_visits older "$V1"
store_with_visits newer "$V1" "$V2"
store_with_visits h200 "$V3"
store_with_visits mixed "$V1" "$V3"
DS=$SCRATCH/dsc
ds() { (cd "$SCRATCH" && bash "$DEV/dataset.sh" --kace "$KACE" "$@" >/dev/null 2>"$SCRATCH/ds.err"); }
ds older.tar.gz "$DS" && ds newer.tar.gz "$DS" || fail "dataset.sh, a campaign continued: $(cat "$SCRATCH/ds.err")"
[ "$(wc -l <"$DS/campaign/visits.tsv")" = 2 ] || fail "dataset.sh: $DS/campaign/visits.tsv has not the newer store's 2 calls"
grep -q "^# kace's own dataset: NVIDIA H100 80GB HBM3$" "$DS/README.md" &&
    grep -q "^| 2026-11-21T10:00:00Z | NVIDIA H100 80GB HBM3, 580.65, 81559 MiB | 13.0 | 2.9 | kace 1 |$" "$DS/README.md" ||
    fail "dataset.sh: the README does not name the GPU and the calls: $(head -12 "$DS/README.md")"
ds h200.tar.gz "$DS" && fail "dataset.sh wrote an H200 campaign over an H100 dataset"
grep -q "h200.tar.gz was measured on NVIDIA H200 and $DS holds NVIDIA H100 80GB HBM3's: write it into a folder of its own; nothing written" \
    "$SCRATCH/ds.err" || fail "dataset.sh, another GPU: $(cat "$SCRATCH/ds.err")"
ds older.tar.gz "$DS" && fail "dataset.sh wrote an older call's store over a newer dataset"
grep -q "older.tar.gz does not continue $DS's campaign: the 2 calls of .* are not all in it; nothing written (pass --replace" \
    "$SCRATCH/ds.err" || fail "dataset.sh, an older store: $(cat "$SCRATCH/ds.err")"
ds mixed.tar.gz "$SCRATCH/dsm" && fail "dataset.sh took a store of two GPU models"
grep -q "mixes GPU models (NVIDIA H100 80GB HBM3, NVIDIA H200)" "$SCRATCH/ds.err" || fail "dataset.sh, mixed: $(cat "$SCRATCH/ds.err")"
cmp -s "$DS/campaign/store.tar.gz" "$SCRATCH/newer.tar.gz" && [ "$(wc -l <"$DS/campaign/visits.tsv")" = 2 ] ||
    fail "dataset.sh changed $DS although it refused"
ds older.tar.gz "$DS" --replace && cmp -s "$DS/campaign/store.tar.gz" "$SCRATCH/older.tar.gz" ||
    fail "dataset.sh --replace: $(cat "$SCRATCH/ds.err")"
# --verify: the folder is what its own store gives, and it imports; a file edited, added
# or removed by hand fails it.
ds --verify "$DS" || fail "dataset.sh --verify on a folder it made: $(cat "$SCRATCH/ds.err")"
echo "edited by hand" >>"$DS/campaign/runs.csv"
touch "$DS/notes.txt"
rm "$DS/campaign/spread.csv"
ds --verify "$DS" && fail "dataset.sh --verify passed a folder edited by hand"
grep -q "^  notes.txt: not made by kace export --dataset" "$SCRATCH/ds.err" &&
    grep -q "^  campaign/runs.csv: differs from what the store gives" "$SCRATCH/ds.err" &&
    grep -q "^  campaign/spread.csv: missing" "$SCRATCH/ds.err" || fail "dataset.sh --verify: $(cat "$SCRATCH/ds.err")"
# kace's own datasets, once a device brought them back (data/h200 since 2026-11-28):
# each generated from its store, and each imports (the CI check).
for d in "$ROOT"/data/h[0-9]*; do
    [ -d "$d" ] || continue
    (cd "$ROOT" && bash scripts/device/dataset.sh --verify "data/${d##*/}" --kace "$KACE") >"$SCRATCH/${d##*/}v.out" 2>&1 ||
        fail "data/${d##*/}: $(cat "$SCRATCH/${d##*/}v.out")"
done

# data/h200 holds first light's 3 colocations (an MPS pair, its 30/70 split and the pair
# time-sliced, measured before the campaign's first call and put into its store), and kace
# import stores them.
if [ -d "$ROOT/data/h200" ]; then
    "$KACE" import --quiet --db "$SCRATCH/h200.db" "$ROOT/data/h200" >"$SCRATCH/h200i.out" 2>&1 ||
        fail "kace import data/h200: $(cat "$SCRATCH/h200i.out")"
    got=$(sqlite3 "$SCRATCH/h200.db" "SELECT group_concat(set_name || ':' || n, ' ') FROM
          (SELECT set_name, count(*) AS n FROM runs GROUP BY set_name ORDER BY set_name)")
    [ "$got" = "mps-splits:1 pairs:1 timeslice-pairs:1" ] || fail "data/h200's colocations as imported: '$got'"
    [ "$(tail -n +2 "$ROOT/data/h200/campaign/runs.csv" | cut -d, -f1 | sort -u | wc -l)" = 3 ] ||
        fail "data/h200/campaign/runs.csv: not first light's 3 runs"
    grep -q "^- 6 stopped at their next report after SIGTERM (the step-boundary stop)$" "$ROOT/data/h200/README.md" ||
        fail "data/h200/README.md does not say how the processes ended"
fi

# 4d. The recordings a real GPU made (data/first-light/*/first-light.tar.gz, made by
#     libkace_cupti.so under CUDA 13 on the first H200): kace import-cupti reads every one,
#     and from each CUDA C profile's recording gives the six kernel metrics kace profile
#     stored on that GPU (first-light-store.tar.gz); the gemm's are its launch's own
#     arithmetic (2048 x 2048 threads, 32 registers each, 64 x 64 blocks of 8 KiB).
for fl in "$ROOT"/data/first-light/*/first-light.tar.gz; do
    [ -f "$fl" ] || continue
    R=$SCRATCH/real-$(basename "$(dirname "$fl")") && mkdir -p "$R/st" &&
        tar -C "$R" -xzf "$fl" && tar -C "$R/st" -xzf "$(dirname "$fl")/first-light-store.tar.gz" ||
        { fail "$fl: cannot unpack it and its store"; continue; }
    n=0
    for rec in "$R"/first-light/recordings/*.txt; do
        w=$(basename "$rec" .txt) && w=${w#profile-} && w=${w%_batch*}_batch1-inf
        "$KACE" import-cupti --db "$R/import.db" --workload "$w" "$rec" >"$R/$w.out" 2>&1 ||
            { fail "import-cupti of the real recording $(basename "$rec"): $(cat "$R/$w.out")"; continue; }
        n=$((n + 1))
    done
    [ "$n" -ge 10 ] || fail "$fl: $n recordings imported, expected 10"
    for w in cuda-gemm2048_batch1-inf cuda-stream1024_batch1-inf cuda-latency4x64_batch1-inf; do
        q="SELECT p.metric || '=' || printf('%.6g', p.value) FROM profiles p JOIN workloads w ON w.id = p.workload_id
           WHERE w.name = '$w' AND p.metric IN ('Threads', 'Compute (SM) Throughput', 'DRAM Throughput',
           'Memory Throughput', 'Registers', 'Static Shared Memory') ORDER BY p.metric"
        want=$(sqlite3 "$R/st/kace.db" "$q" | tr '\n' ' ') got=$(sqlite3 "$R/import.db" "$q" | tr '\n' ' ')
        [ "$(grep -o '=' <<<"$want" | wc -l)" = 6 ] && [ "$got" = "$want" ] ||
            fail "$w: import-cupti of the real recording gives '$got', kace profile stored '$want'"
    done
    got=$(sqlite3 "$R/import.db" "SELECT p.metric || '=' || p.value FROM profiles p JOIN workloads w ON w.id = p.workload_id
          WHERE w.name = 'cuda-gemm2048_batch1-inf' AND p.metric IN ('Threads', 'Registers', 'Static Shared Memory')
          ORDER BY p.metric" | tr '\n' ' ')
    [ "$got" = "Registers=134217728.0 Static Shared Memory=33554432.0 Threads=4194304.0 " ] ||
        fail "the real gemm recording: '$got'"
done

# 4e. kace demo on a dataset of profiles only (what a campaign's first visit brings back,
#     as data/h200's did): it fails and says why, rather than "cannot fit a model on 0 rows".
mkdir -p "$SCRATCH/profiles-only/profiles"
printf 'Type,Exclusive100\nw1_batch1-inf,10\nw2_batch1-inf,20\n' >"$SCRATCH/profiles-only/profiles/system.csv"
(cd "$SCRATCH" && "$KACE" demo --data "$SCRATCH/profiles-only" --out "$SCRATCH/demo-po" >/dev/null 2>"$SCRATCH/demo-po.err") &&
    fail "kace demo on profiles alone succeeded"
grep -q "profiles-only holds 0 measured pairs at 100/100 MPS; the model needs at least 2" "$SCRATCH/demo-po.err" ||
    fail "kace demo on profiles alone: $(cat "$SCRATCH/demo-po.err")"

# 5. docs/h100.md is what tools/gpu-report.py gives from data/h100 (when it exists, the
#    evaluation runs here); a stale block fails and says how to fix it.
SHARED=${2:-}
(cd "$ROOT" && python3 tools/gpu-report.py --kace "$KACE" --v100 "$SHARED/kace-v100" --work "$SCRATCH/report" \
    --check docs/h100.md) >"$SCRATCH/h100.out" 2>&1 || fail "docs/h100.md: $(cat "$SCRATCH/h100.out")"
sed 's/^<!-- END generated -->$/stale\n&/' "$ROOT/docs/h100.md" >"$SCRATCH/h100.md"
(cd "$ROOT" && python3 tools/gpu-report.py --kace "$KACE" --v100 "$SHARED/kace-v100" --check "$SCRATCH/h100.md") \
    >/dev/null 2>"$SCRATCH/h100.err" && fail "gpu-report.py --check passed a stale docs/h100.md"
grep -q "run: tools/gpu-report.py --update" "$SCRATCH/h100.err" || fail "gpu-report.py --check: $(cat "$SCRATCH/h100.err")"
# Each other dataset's page (docs/h200.md for data/h200) is what gpu-report.py gives from it.
for doc in "$ROOT"/docs/h[0-9]*.md; do
    n=$(basename "$doc" .md)
    [ "$n" = h100 ] && continue
    (cd "$ROOT" && python3 tools/gpu-report.py --kace "$KACE" --v100 "$SHARED/kace-v100" --data "data/$n" \
        --work "$SCRATCH/report-$n" --check "docs/$n.md") >"$SCRATCH/$n.out" 2>&1 ||
        fail "docs/$n.md: $(cat "$SCRATCH/$n.out")"
done

# 6. A dataset with MPS split grids and too few pairs (what an early visit brings back):
#    gpu-report.py scores its grids with the split model fitted on the V100's. Made from the
#    V100 data in the device's formats: the curve at the plan's 6 shares, 2 grids of 5 splits.
if [ -d "$SHARED/kace-v100" ]; then
    V=$SHARED/kace-v100 G=$SCRATCH/grids-only
    mkdir -p "$G/profiles" "$G/colocations"
    cp "$V/profiles/system.csv" "$G/profiles/" && cp -r "$V/profiles/kernel" "$G/profiles/"
    cut -d, -f1,2,4,6,8,10,11 "$V/profiles/exclusive_by_mps_pct.csv" >"$G/profiles/exclusive-by-mps.csv"
    # The 100/100 runs go to pairs.csv, as store.py exports them (the second pair's members swapped).
    python3 - "$V/colocations/raw/partitions_0617_train-inf.csv" "$G/colocations" <<'PYEOF' ||
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))[1:3]
header = ["workload1", "workload2", "w1throughput", "w2throughput", "w1mps_pct", "w2mps_pct"]
with open(sys.argv[2] + "/mps-splits.csv", "w", newline="") as f, \
        open(sys.argv[2] + "/pairs.csv", "w", newline="") as p:
    out, full = csv.writer(f), csv.writer(p)
    out.writerow(header)
    full.writerow(header)
    for i, r in enumerate(rows):
        for ls in (10, 30, 50, 70, 90):
            a, b = r[2 + ls // 10 - 1].strip("()").split(", ")
            if a != "None" and b != "None":
                out.writerow([r[0], r[1], a, b, ls, 100 - ls])
        a, b = r[11].strip("()").split(", ")
        full.writerow([r[0], r[1], a, b, 100, 100] if i == 0 else [r[1], r[0], b, a, 100, 100])
PYEOF
        fail "making the grids-only dataset"
    python3 "$ROOT/tools/gpu-report.py" --kace "$KACE" --data "$G" --v100 "$V" --work "$SCRATCH/grids-report" \
        >"$SCRATCH/grids.md" 2>"$SCRATCH/grids.err" || fail "gpu-report.py on grids only: $(cat "$SCRATCH/grids.err")"
    grep -q "^Too few pairs to evaluate yet" "$SCRATCH/grids.md" || fail "gpu-report.py on grids only: no too-few-pairs line"
    grep -q "^Measured value of the advised split / best measured split, mean over 2 grid(s):" "$SCRATCH/grids.md" ||
        fail "gpu-report.py on grids only: no split scores: $(grep -A3 'MPS thread splits' "$SCRATCH/grids.md")"
    # Scores in [0, 1]; 100/100 is scored too: the grids take that cell from pairs.csv.
    for policy in max-sum max-min; do
        grep -Eq "^\| $policy( \| (0\.[0-9]{3}|1\.000)){3} \|$" "$SCRATCH/grids.md" ||
            fail "gpu-report.py on grids only: no $policy scores in [0, 1]: $(grep "^| $policy" "$SCRATCH/grids.md")"
    done
    # kace predict --split-with: its own 2 grids cannot fit the model (the error says what would);
    # --split-train-db fits it on the V100's.
    GDB=$SCRATCH/grids-report/gpu.db VDB=$SCRATCH/grids-report/v100.db
    pair=$(sed -n 2p "$G/colocations/mps-splits.csv" | cut -d, -f1,2)
    "$KACE" predict --db "$GDB" --target "${pair%,*}" --split-with "${pair#*,}" >/dev/null 2>"$SCRATCH/split.err" &&
        fail "kace predict --split-with fitted a split model on 2 grids"
    grep -q -- "--split-train-db" "$SCRATCH/split.err" || fail "the too-few-grids error does not say what to do: $(cat "$SCRATCH/split.err")"
    "$KACE" predict --db "$GDB" --target "${pair%,*}" --split-with "${pair#*,}" --split-train-db "$VDB" \
        >"$SCRATCH/split.out" 2>&1 || fail "kace predict --split-train-db: $(cat "$SCRATCH/split.out")"
    grep -q "fitted on 560 measured grids of $VDB" "$SCRATCH/split.out" || fail "kace predict --split-train-db: $(head -3 "$SCRATCH/split.out")"
    [ "$(grep -c '^ \* ' "$SCRATCH/split.out")" = 1 ] || fail "kace predict --split-train-db: not exactly one split marked"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "cli_device_tools: all cases passed"
