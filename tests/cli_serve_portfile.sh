#!/usr/bin/env bash
# kace serve's port files name a port only while it listens there:
#
#   bash cli_serve_portfile.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - after SIGTERM and after SIGINT, --port-file and --extender-port-file are
#   gone (a script waiting on them never calls a port nobody holds);
# - a start that fails (the extender's port taken) leaves neither behind.
set -u

KACE=${1:?usage: cli_serve_portfile.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
export LC_ALL=C
source "$(dirname "$0")/lib_test.sh"
need curl
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1
DB="$SCRATCH/store.db"
"$KACE" import --db "$DB" "$SHARED/kace-v100" >"$SCRATCH/import.out" 2>&1 || { cat "$SCRATCH/import.out" >&2; exit 1; }
"$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>&1 || { cat "$SCRATCH/train.out" >&2; exit 1; }

for sig in TERM INT; do
    "$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 1 --no-nvml \
        --extender-listen 127.0.0.1:0 --extender-port-file "$SCRATCH/ext.port" >"$SCRATCH/serve-$sig.log" 2>&1 &
    pid=$!
    started "$SCRATCH/port" "kace serve" "$SCRATCH/serve-$sig.log"
    [ -s "$SCRATCH/ext.port" ] || fail "no extender port file while serving"
    got=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(cat "$SCRATCH/ext.port")/healthz")
    check_eq "/healthz on the extender port" 200 "$got"
    kill -"$sig" "$pid"
    wait "$pid"
    check_eq "exit status after SIG$sig" 0 "$?"
    PIDS=""
    [ -e "$SCRATCH/port" ] && fail "--port-file left behind after SIG$sig"
    [ -e "$SCRATCH/ext.port" ] && fail "--extender-port-file left behind after SIG$sig"
done

# the extender's port is taken: kace serve fails and writes no port file
python3 -c '
import os, signal, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1] + ".tmp", "w").write("%d\n" % s.getsockname()[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.pause()' "$SCRATCH/taken" &
started "$SCRATCH/taken" "the port holder"
"$KACE" serve --db "$DB" --listen 127.0.0.1:0 --port-file "$SCRATCH/port" --watch 0 --threads 1 --no-nvml \
    --extender-listen "127.0.0.1:$(cat "$SCRATCH/taken")" --extender-port-file "$SCRATCH/ext.port" \
    >"$SCRATCH/serve-taken.log" 2>&1
status=$?
[ "$status" != 0 ] || fail "kace serve started on a taken extender port"
grep -q 'cannot listen on 127.0.0.1:' "$SCRATCH/serve-taken.log" || fail "no reason given: $(cat "$SCRATCH/serve-taken.log")"
[ -e "$SCRATCH/port" ] && fail "--port-file left behind by a failed start"
[ -e "$SCRATCH/ext.port" ] && fail "--extender-port-file left behind by a failed start"
finish cli_serve_portfile
