# Shared by the campaign tests that run without a GPU (cli_campaign_pool,
# cli_campaign_device, cli_campaign_kill): after sourcing lib_test.sh and
# setting kace, scratch and build, `campaign_standins NAME` copies the
# stand-in worker and MPS control daemon under $scratch/bin (so that pgrep -f
# "$marker" finds this test's processes and no other's), points kace at them,
# makes a private run folder and kills every such process on exit.
campaign_standins() { # NAME
    rm -rf "$scratch" && mkdir -p "$scratch/bin" || exit 1
    cp "$build/tests/kace-test-worker" "$scratch/bin/worker" || exit 1
    cp "$build/tests/kace-test-mps-control" "$scratch/bin/mps-control" || exit 1
    marker="$scratch/bin/"
    export KACE_DB="$scratch/kace.db"
    export KACE_MPS_CONTROL="$scratch/bin/mps-control"
    export KACE_TEST_MPS_MODE=normal
    run_dir=$(mktemp -d "/tmp/kace-cli-$1-XXXXXX")
    trap 'kill_pids; for p in $(pgrep -f "$marker"); do kill -KILL "$p" 2>/dev/null; done; rm -rf "$run_dir"' EXIT
}
sql() { sqlite3 -cmd ".timeout 5000" "$KACE_DB" "$1"; }
# Fails unless every process of this test has ended (polled, 5 s at most).
no_strays() { # WHAT
    local left
    for _ in $(seq 50); do
        left=$(pgrep -f "$marker") || break
        sleep 0.1
    done
    left=$(pgrep -af "$marker")
    [ -z "$left" ] || fail "$1: processes left behind: $left"
}

# Shared by the campaign tests on the fake CUDA stack (cli_profile_ahead,
# cli_campaign_pool_ahead, cli_campaign_cold_ahead): after sourcing
# lib_test.sh and setting KACE and SCRATCH, `fake_cuda_standins` skips the test
# (77) where the fake CUDA stack is not built, makes SCRATCH, copies the
# stand-in program (APP) and the MPS control daemon under $SCRATCH/bin (so
# that pgrep -f finds this test's processes and no other's), points kace at the
# fake CUDA, NVML and injection libraries with stand-ins 20 times faster, sets
# EV (the stand-ins' event file, for KACE_FAKE_EVENTS) and kills every such
# process on exit: kace's workloads lead process groups of their own, which
# the test's group does not hold.
fake_cuda_standins() {
    BUILD=$(cd "$(dirname "$KACE")" && pwd)
    FAKE_DIR=$BUILD/tests/fake_cuda
    if [ ! -x "$FAKE_DIR/kace-fake-cuda-app" ] || [ ! -e "$BUILD/libkace_cupti.so" ]; then
        echo "skipped: libkace_cupti.so and the fake CUDA stack are built only where CUPTI is installed"
        exit 77
    fi
    rm -rf "$SCRATCH"
    mkdir -p "$SCRATCH/tmp" "$SCRATCH/bin" "$SCRATCH/gpu" || exit 1
    cp "$FAKE_DIR/kace-fake-cuda-app" "$BUILD/tests/kace-test-mps-control" "$SCRATCH/bin/" || exit 1
    mv "$SCRATCH/bin/kace-test-mps-control" "$SCRATCH/bin/mps-control" || exit 1
    APP=$SCRATCH/bin/kace-fake-cuda-app
    export TMPDIR=$SCRATCH/tmp KACE_DB=$SCRATCH/kace.db
    export KACE_NVML_LIBRARY=$BUILD/tests/libfake_nvml_mps.so KACE_CUPTI_LIBRARY=$BUILD/libkace_cupti.so
    export LD_LIBRARY_PATH=$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} # the fake libcuda.so.1, libcupti.so.13
    export KACE_MPS_CONTROL=$SCRATCH/bin/mps-control KACE_TEST_MPS_MODE=cuda-start KACE_FAKE_MPS_CONNECT=1
    export KACE_FAKE_GPU_DIR=$SCRATCH/gpu KACE_FAKE_KERNELS=5 KACE_FAKE_REPLAY_S=0.01 KACE_CAMPAIGN_TIME_SCALE=20
    unset CUDA_INJECTION64_PATH KACE_CUPTI_OUTPUT KACE_CUPTI_GATE KACE_FAKE_START_S
    EV=$SCRATCH/events
    trap 'kill_pids; for p in $(pgrep -f "$SCRATCH/bin/"); do kill -KILL "$p" 2>/dev/null; done' EXIT
}
