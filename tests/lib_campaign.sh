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
