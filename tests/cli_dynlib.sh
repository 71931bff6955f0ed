#!/usr/bin/env bash
# Optional libraries loaded on first use (include/kace/dynlib.h):
#
#   bash cli_dynlib.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - kace's NEEDED list names none of LAPACKE/BLAS, libxgboost, libmicrohttpd,
#   libcurl, libslurm;
# - kace predict and kace eval --no-kace --mode paper (the paper's linear
#   model) load none of them (LD_DEBUG=files, dlopen included), kace
#   train loads LAPACKE and not libxgboost, kace train --kind forest loads
#   libxgboost; their answers are those of a run that loaded them all;
# - a missing library ($KACE_*_LIBRARY pointing nowhere): kace train (LAPACKE),
#   kace train --kind forest (libxgboost) and kace serve (libmicrohttpd) fail
#   with an error naming the library, the command and the Debian package, and
#   the store is unchanged (sqlite3 .dump).
set -u

KACE=${1:?usage: cli_dynlib.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
REF="$SHARED/kace-v100"
export LC_ALL=C

source "$(dirname "$0")/lib_test.sh" # fail, failures
for tool in sqlite3 objdump; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/store"
DB="$SCRATCH/store/kace.db"
OPTIONAL='liblapacke|liblapack\.|libblas|libopenblas|libxgboost|libmicrohttpd|libcurl|libslurm'

# --- not linked
needed=$(objdump -p "$KACE" | awk '$1 == "NEEDED" { print $2 }')
if grep -Eq "$OPTIONAL" <<<"$needed"; then
    fail "kace still links an optional library: $(grep -E "$OPTIONAL" <<<"$needed" | tr '\n' ' ')"
fi
grep -q '^libsqlite3' <<<"$needed" || fail "NEEDED lacks libsqlite3 (is objdump reading kace?): $needed"

# loaded FILE: the libraries one run mapped (LD_DEBUG=files writes one line per library).
loaded() { grep -o 'file=[^ ]*' "$1" | sed 's/^file=//; s|.*/||' | sort -u | tr '\n' ' '; }

"$KACE" import --db "$DB" "$REF" >"$SCRATCH/import.out" 2>&1 || fail "import: $(tail -3 "$SCRATCH/import.out")"
LD_DEBUG=files "$KACE" train --db "$DB" >"$SCRATCH/train.out" 2>"$SCRATCH/train.ld" ||
    fail "train: $(grep -v '^ *[0-9]*:' "$SCRATCH/train.ld" | tail -3)"
libs=$(loaded "$SCRATCH/train.ld")
grep -q 'liblapacke' <<<"$libs" || fail "kace train did not load LAPACKE: $libs"
grep -q 'libxgboost' <<<"$libs" && fail "kace train (slowdown) loaded libxgboost: $libs"

# --- predict loads none of them, and answers as before (the same model, loaded by
# the same code: the answer of a run with every library preloaded is the reference).
LD_DEBUG=files "$KACE" predict --db "$DB" --target bert-base-cased_batch8-train >"$SCRATCH/predict.out" \
    2>"$SCRATCH/predict.ld" || fail "predict: $(grep -v '^ *[0-9]*:' "$SCRATCH/predict.ld" | tail -3)"
libs=$(loaded "$SCRATCH/predict.ld")
if grep -Eq "$OPTIONAL" <<<"$libs"; then
    fail "kace predict loaded an optional library: $libs"
fi
grep -q 'libsqlite3' <<<"$libs" || fail "LD_DEBUG=files shows no libsqlite3 for predict (the check proves nothing): $libs"
grep -q 'vit-base-patch16-224_batch16-inf' "$SCRATCH/predict.out" || fail "predict's answer: $(head -5 "$SCRATCH/predict.out")"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
preload=""
for so in liblapacke.so.3 libxgboost.so.0 libmicrohttpd.so.12 libcurl.so.4; do
    [ -e "/usr/lib/$multiarch/$so" ] && preload="$preload /usr/lib/$multiarch/$so"
done
# (Under ASan the runtime must come first; the preloaded libraries come before it here.)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 LD_PRELOAD="${preload# }" "$KACE" predict --db "$DB" --target bert-base-cased_batch8-train >"$SCRATCH/predict-all.out" 2>"$SCRATCH/predict-all.err" ||
    fail "predict with every library preloaded"
cmp -s "$SCRATCH/predict.out" "$SCRATCH/predict-all.out" || fail "predict answers differently with the libraries loaded"

# --- eval with the paper's models loads none of them either: their least squares
# are small and well conditioned, solved by QR (lib/base/lstsq.c), not LAPACK.
LD_DEBUG=files "$KACE" eval --db "$DB" --no-xu --no-kace --mode paper --no-figures --out "$SCRATCH/eval" \
    >"$SCRATCH/eval.out" 2>"$SCRATCH/eval.ld" || fail "eval: $(grep -v '^ *[0-9]*:' "$SCRATCH/eval.ld" | tail -3)"
libs=$(loaded "$SCRATCH/eval.ld")
if grep -Eq "$OPTIONAL" <<<"$libs"; then
    fail "kace eval --no-kace --mode paper loaded an optional library: $libs"
fi
grep -q 'Unseen workload families' "$SCRATCH/eval.out" || fail "eval's tables: $(head -5 "$SCRATCH/eval.out")"

# --- a forest loads libxgboost through the forwarding functions and works
LD_DEBUG=files "$KACE" train --db "$DB" --kind forest --search-iter 2 >"$SCRATCH/forest.out" 2>"$SCRATCH/forest.ld" ||
    fail "train --kind forest: $(grep -v '^ *[0-9]*:' "$SCRATCH/forest.ld" | tail -3)"
grep -q 'libxgboost' <<<"$(loaded "$SCRATCH/forest.ld")" || fail "kace train --kind forest did not load libxgboost"
"$KACE" predict --db "$DB" --model forest --target bert-base-cased_batch8-train >"$SCRATCH/forest-predict.out" 2>&1 ||
    fail "predict --model forest: $(tail -3 "$SCRATCH/forest-predict.out")"

# --- missing libraries: a clear error, the store unchanged
sqlite3 "$DB" .dump >"$SCRATCH/before.dump"
expect_missing() { # NAME ENV SONAME_PART COMMAND_WORD PACKAGE_PART -- kace args...
    local name=$1 env=$2 so=$3 word=$4 pkg=$5
    shift 6
    env "$env=$SCRATCH/nowhere/$so.so" "$KACE" "$@" >"$SCRATCH/$name.out" 2>"$SCRATCH/$name.err" &
    local pid=$!
    # kace serve would keep running if the library were found: give it 20 s.
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        wait "$pid" 2>/dev/null
        fail "$name: still running without $so"
        return
    fi
    wait "$pid" && fail "$name: exit status 0 without $so"
    grep -q "$so" "$SCRATCH/$name.err" || fail "$name: the error does not name $so: $(cat "$SCRATCH/$name.err")"
    grep -q "kace $word" "$SCRATCH/$name.err" || fail "$name: the error does not name kace $word: $(cat "$SCRATCH/$name.err")"
    grep -q "Debian package $pkg" "$SCRATCH/$name.err" || fail "$name: no Debian package $pkg: $(cat "$SCRATCH/$name.err")"
    echo "$name: $(tail -1 "$SCRATCH/$name.err")"
}
expect_missing train KACE_LAPACKE_LIBRARY liblapacke train liblapacke -- train --db "$DB" --name nolapack
expect_missing forest KACE_XGBOOST_LIBRARY libxgboost train libxgboost0 -- train --db "$DB" --kind forest \
    --search-iter 2 --name noxgb
expect_missing serve KACE_MHD_LIBRARY libmicrohttpd serve libmicrohttpd12 -- serve --db "$DB" \
    --listen 127.0.0.1:0 --no-nvml --quiet
sqlite3 "$DB" .dump >"$SCRATCH/after.dump"
cmp -s "$SCRATCH/before.dump" "$SCRATCH/after.dump" || fail "a failed command changed the store"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "cli_dynlib: ok"
