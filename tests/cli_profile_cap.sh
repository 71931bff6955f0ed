#!/usr/bin/env bash
# kace profile's cap on kernel replay, end to end on the fake CUDA stack
# (tests/fake_cuda: the real libkace_cupti.so on a fake libcuda and CUPTI,
# with a fake NVML): a stand-in workload whose step launches 60 kernel
# signatures, their GPU times falling off as 1/rank^1.5. The fake CUPTI logs
# every replay (FAKE_CUPTI_REPLAY_LOG), so the test counts the counters run's
# replay work, never its time:
#   - no cap (--replay-cover 1 --replay-max 0): all 60 signatures replayed;
#   - the default cap (0.95, at most 40): the fewest that cover 95% of the
#     clean run's GPU time (28 of 60 for this distribution), the longest ones;
#   - --replay-max 10: the 10 longest.
# In each, the stored cap (replay_signatures, replay_signatures_seen,
# replay_time_share, replay_cover, replay_max) says what was replayed, and
# the counter metrics cover the replayed signatures' share of the counters
# run's kernel time.
#
#   bash cli_profile_cap.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
KACE=${1:?usage: cli_profile_cap.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
BUILD=$(cd "$(dirname "$KACE")" && pwd)
FAKE_DIR=$BUILD/tests/fake_cuda
APP=$FAKE_DIR/kace-fake-cuda-app
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh" # fail, failures
if [ ! -x "$APP" ] || [ ! -e "$BUILD/libkace_cupti.so" ]; then
    echo "skipped: libkace_cupti.so and the fake CUDA stack are built only where CUPTI is installed"
    exit 77
fi
need sqlite3
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB=$SCRATCH/store.db

export KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_full.so KACE_CUPTI_LIBRARY=$BUILD/libkace_cupti.so
export LD_LIBRARY_PATH=$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} # the fake libcuda.so.1, libcupti.so.13
# 60 signatures a step; each replay costs 10 ms beyond its passes (the H200's 0.24 s, scaled down).
export KACE_FAKE_KERNELS=60 KACE_FAKE_REPLAY_S=0.01
P=(profile --db "$DB" --warmup 0.3 --window 0.8 --counters-warmup 0.3 --counters-window 0.6 --timeout 60)

# profile NAME OPTIONS...: profiles the stand-in; the replays it made are in $SCRATCH/NAME.replays.
profile() {
    local name=$1
    shift
    rm -f "$SCRATCH/$name.replays"
    FAKE_CUPTI_REPLAY_LOG=$SCRATCH/$name.replays "$KACE" "${P[@]}" "$@" --name "${name}_batch1-train" -- \
        "$APP" gemm >"$SCRATCH/$name.out" 2>"$SCRATCH/$name.err" || {
        fail "$name: exit $?: $(cat "$SCRATCH/$name.err")"
        return 1
    }
    touch "$SCRATCH/$name.replays"
}
stored() { # stored NAME METRIC: the value stored, rounded to 3 places ("null" when missing)
    sqlite3 "$DB" "SELECT coalesce(round(p.value, 3), 'null') FROM profiles p JOIN workloads w ON w.id=p.workload_id
                   WHERE w.name='${1}_batch1-train' AND p.metric='$2'"
}
replays() { wc -l <"$SCRATCH/$1.replays" | tr -d ' '; }
# The signatures replayed, by rank (the stand-in names signature r "..._sigR"), sorted.
ranks() { sed -E 's/.*_sig([0-9]+)$/\1/' "$SCRATCH/$1.replays" | sort -n | tr '\n' ' '; }
upto() { seq 0 $(($1 - 1)) | tr '\n' ' '; }

# The share of 60 signatures' time the first k cover, ranks' times 1/(r+1)^1.5.
share() { awk -v k="$1" 'BEGIN { for (r = 1; r <= 60; r++) { w = r ^ -1.5; t += w; if (r <= k) c += w }
                                 printf "%.3f", c / t }'; }

if profile all --replay-cover 1 --replay-max 0; then
    [ "$(replays all)" = 60 ] || fail "all: $(replays all) replays, expected every signature's (60)"
    [ "$(stored all replay_signatures)" = null ] && [ "$(stored all replay_time_share)" = 1.0 ] &&
        [ "$(stored all replay_max)" = 0.0 ] ||
        fail "all: stored $(stored all replay_signatures) signatures, share $(stored all replay_time_share)"
fi

if profile default --keep-recording "$SCRATCH/default.cupti"; then
    # The clean run recorded launches in its warm-up only: the library stopped when the
    # window started (kace made the file it waits for), and no kernel came after.
    clean=$SCRATCH/default.cupti.clean
    stop=$(sed -nE 's/^# activity recording stopped at ([0-9]+):.*/\1/p' "$clean" 2>/dev/null)
    [ -n "$stop" ] || fail "default: the clean run's recording never stopped: $(grep '^#' "$clean" 2>&1 | head -5)"
    [ "$(grep -c '^kernel ' "$clean")" -gt 60 ] || fail "default: the clean run recorded too few kernels to rank"
    awk -v s="${stop:-0}" '$1 == "kernel" && $2 > s { late++ } END { exit late > 0 }' "$clean" ||
        fail "default: kernels recorded after the clean run's recording stopped"
    n=$(replays default)
    # 95% of 1/r^1.5 over 60 ranks needs the first 28 (27 cover 94.7%, 28 95.01%); a window
    # that starts or ends inside a step adds a part of one step's launches: 27 to 29.
    [ "$n" -ge 27 ] && [ "$n" -le 29 ] || fail "default: $n replays, expected the 28 that cover 95% of the GPU time"
    [ "$(ranks default)" = "$(upto "$n")" ] || fail "default: replayed ranks $(ranks default), expected 0..$((n - 1))"
    [ "$(stored default replay_signatures)" = "$n.0" ] && [ "$(stored default replay_signatures_seen)" = 60.0 ] &&
        [ "$(stored default replay_cover)" = 0.95 ] && [ "$(stored default replay_max)" = 40.0 ] ||
        fail "default: stored $(stored default replay_signatures) of $(stored default replay_signatures_seen)" \
            "cover $(stored default replay_cover) max $(stored default replay_max)"
    got=$(stored default replay_time_share) want=$(share "$n")
    awk -v g="$got" -v w="$want" 'BEGIN { exit !(g > w - 0.01 && g < w + 0.01) }' ||
        fail "default: stored share $got, expected about $want"
    grep -q "replay cap: $n of 60 kernel signatures replayed" "$SCRATCH/default.err" ||
        fail "default: no replay cap line: $(cat "$SCRATCH/default.err")"
    # The counter metrics are weighted over the replayed signatures: they cover about
    # their share of the counters run's kernel time.
    cov=$(stored default counters_time_share)
    awk -v c="$cov" -v w="$want" 'BEGIN { exit !(c > w - 0.05 && c < w + 0.05) }' ||
        fail "default: counters cover ${cov} of the window's kernel time, expected about $want"
fi

if profile top10 --replay-max 10; then
    [ "$(replays top10)" = 10 ] && [ "$(ranks top10)" = "$(upto 10)" ] ||
        fail "top10: replayed ranks $(ranks top10), expected 0..9"
    [ "$(stored top10 replay_signatures)" = 10.0 ] || fail "top10: stored $(stored top10 replay_signatures)"
fi
[ -s "$SCRATCH/all.replays" ] && [ "$(replays top10)" -lt "$(replays default)" ] &&
    [ "$(replays default)" -lt "$(replays all)" ] || fail "the cap does not cut the replays"

finish cli_profile_cap
