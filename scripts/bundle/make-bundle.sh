#!/usr/bin/env bash
# Builds kace for a GPU server that has none of kace's libraries (no package
# manager, no network) and puts everything it needs into ONE folder:
#
#   build-bundle/kace-bundle/
#     bin/kace                      RPATH $ORIGIN/../lib (DT_RPATH: applies to the libraries too)
#     lib/*.so*                     every non-glibc library kace needs, stripped
#     lib/libkace_cupti.so          the CUPTI injection library (built against this CUDA)
#     src/cupti/                    its sources, to build it again against the server's CUPTI
#     workloads/                    workload sources + catalog.txt (CUDA C built there with nvcc)
#     scripts/device/               campaign.sh (one call around kace campaign --device), lib.sh
#     docs/gpu.md, campaign.md, VERSION
#   build-bundle/kace-bundle.tar.gz
#
#   bash scripts/bundle/make-bundle.sh [BUILD_ROOT]      (default build-bundle)
#
# BLAS/LAPACK: kace calls only LAPACKE_dgelsd and LAPACKE_dposv, so the bundle
# uses Debian's reference LAPACK and BLAS (liblapack3, libblas3: ~7 MB) rather
# than OpenBLAS (36 MB). Not copied: glibc's own libraries, and libcuda,
# libnvidia-ml, libcupti, libnvperf_* (the server's driver and toolkit give them).
# Fails when the folder is larger than 48 MiB (BUNDLE_MAX_BYTES).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
broot=${1:-$root/build-bundle}
mkdir -p "$broot"
broot=$(cd "$broot" && pwd)
max_bytes=${BUNDLE_MAX_BYTES:-$((48 * 1024 * 1024))}
multiarch=/usr/lib/x86_64-linux-gnu
ref_blas=$multiarch/blas/libblas.so.3
ref_lapack=$multiarch/lapack/liblapack.so.3
for f in "$ref_blas" "$ref_lapack"; do
    [ -e "$f" ] || { echo "make-bundle: $f is missing (Debian packages libblas3 liblapack3)" >&2; exit 1; }
done

# 1. kace, Release, no tests, no Slurm (libslurm belongs to the cluster), reference BLAS.
cmake -S "$root" -B "$broot/cmake" -DCMAKE_BUILD_TYPE=Release -DKACE_TESTS=OFF -DKACE_BUNDLE=ON \
    -DSLURM_LIB=OFF -DOPENBLAS_LIB="$ref_blas" >"$broot/cmake.log" 2>&1 ||
    { cat "$broot/cmake.log" >&2; exit 1; }
cmake --build "$broot/cmake" -j"$(nproc)" --target kace-cli kace_cupti >>"$broot/cmake.log" 2>&1 ||
    { tail -40 "$broot/cmake.log" >&2; exit 1; }
[ -f "$broot/cmake/libkace_cupti.so" ] || { echo "make-bundle: libkace_cupti.so was not built (CUPTI not found)" >&2; exit 1; }

# 2. The folder, from scratch.
b=$broot/kace-bundle
rm -rf "$b" "$broot/kace-bundle.tar.gz"
mkdir -p "$b/bin" "$b/lib" "$b/src/cupti" "$b/scripts" "$b/docs"
install -m 755 "$broot/cmake/kace" "$b/bin/kace"
install -m 755 "$broot/cmake/libkace_cupti.so" "$b/lib/libkace_cupti.so"

# glibc's libraries stay out: the server's newer glibc runs what was linked here.
is_glibc() {
    case $1 in
    libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        libutil.so.* | libanl.so.* | libnsl.so.* | libBrokenLocale.so.* | libnss_*.so.* | ld-linux*.so.* | \
        linux-vdso.so.*) return 0 ;;
    esac
    return 1
}
# The server's driver and CUDA toolkit provide these; a copy would mismatch them.
is_from_server() {
    case $1 in libcuda.so* | libcupti.so* | libnvperf_*.so* | libnvidia-ml.so* | libcudart.so*) return 0 ;; esac
    return 1
}
# Where the dynamic linker would find SONAME here; the reference LAPACK/BLAS
# first (Debian's alternatives may point liblapack.so.3 at OpenBLAS).
resolve() {
    case $1 in
    libblas.so.3) echo "$ref_blas"; return ;;
    liblapack.so.3) echo "$ref_lapack"; return ;;
    esac
    local d
    for d in $multiarch /lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib; do
        [ -e "$d/$1" ] && { echo "$d/$1"; return; }
    done
    # awk reads to the end (no 'exit'): an early exit SIGPIPEs ldconfig, which fails under pipefail.
    ldconfig -p | awk -v n="$1" '!found && $1 == n && /x86-64/ { print $NF; found = 1 }'
}
needed() { objdump -p "$1" | awk '$1 == "NEEDED" { print $2 }'; }

# Recursive walk over NEEDED, from kace (libkace_cupti.so needs only glibc + server libraries)
# and from the libraries kace loads with dlopen when a command needs them (LAPACKE,
# libxgboost, libmicrohttpd, libcurl: include/kace/dynlib.h), which the build lists in
# kace-dlopen.txt ("SONAME PATH"); kace's DT_RPATH finds them and their own libraries here.
queue=("$b/bin/kace")
declare -A seen=()
take() { # SONAME WHO_NEEDS_IT
    local so=$1 src
    if is_glibc "$so" || is_from_server "$so" || [ -n "${seen[$so]:-}" ]; then return; fi
    seen[$so]=1
    src=$(resolve "$so")
    [ -n "$src" ] && [ -e "$src" ] || { echo "make-bundle: cannot find $so (needed by $2)" >&2; exit 1; }
    cp -L "$src" "$b/lib/$so"
    chmod 644 "$b/lib/$so"
    strip --strip-unneeded "$b/lib/$so" 2>/dev/null || true
    queue+=("$b/lib/$so")
}
[ -f "$broot/cmake/kace-dlopen.txt" ] || { echo "make-bundle: $broot/cmake/kace-dlopen.txt is missing" >&2; exit 1; }
dlopened=$(awk 'NF { print $1 }' "$broot/cmake/kace-dlopen.txt")
for so in $dlopened; do take "$so" "kace (dlopen)"; done
while [ ${#queue[@]} -gt 0 ]; do
    f=${queue[0]}
    queue=("${queue[@]:1}")
    for so in $(needed "$f"); do take "$so" "${f##*/}"; done
done
strip --strip-unneeded "$b/bin/kace" "$b/lib/libkace_cupti.so"

# Self-check: every NEEDED of every file is in lib/, glibc's, or the server's.
bad=0
for f in "$b/bin/kace" "$b"/lib/*.so*; do
    for so in $(needed "$f"); do
        if is_glibc "$so" || is_from_server "$so" || [ -e "$b/lib/$so" ]; then continue; fi
        echo "make-bundle: ${f#"$b"/} needs $so, which is not in the bundle" >&2
        bad=1
    done
done
for f in "$b"/lib/*; do
    case ${f##*/} in libopenblas* | libcuda.so* | libcupti* | libnvperf* | libnvidia-ml*)
        echo "make-bundle: ${f##*/} must not be in the bundle" >&2; bad=1 ;;
    esac
done
for so in $dlopened; do
    [ -e "$b/lib/$so" ] || { echo "make-bundle: $so (kace loads it with dlopen) is not in the bundle" >&2; bad=1; }
done
# And kace loads them from the bundle, with nothing in the environment helping.
env -i PATH=/usr/bin:/bin "$b/bin/kace" --help >/dev/null ||
    { echo "make-bundle: the bundle's kace does not start" >&2; bad=1; }
outside=$(env -i ldd "$b/bin/kace" | awk '/=>/ { print $1, $3 }' | while read -r so path; do
    is_glibc "$so" || case $(readlink -f "$path") in "$b"/lib/*) ;; *) echo "$so=>$path" ;; esac
done)
[ -z "$outside" ] || { echo "make-bundle: kace loads from outside the bundle: $outside" >&2; bad=1; }
[ $bad = 0 ] || exit 1

# 3. Sources and scripts the server needs.
cp "$root/gpu/cupti/inject.c" "$root/gpu/cupti/profiler_host.h" "$root/gpu/cupti/replay_list.h" "$b/src/cupti/"
(cd "$root" && tar --exclude=build --exclude=__pycache__ -cf - workloads) | tar -xf - -C "$b"
cp -r "$root/scripts/device" "$b/scripts/device"
[ -f "$root/docs/gpu.md" ] && cp "$root/docs/gpu.md" "$b/docs/"
[ -f "$root/docs/campaign.md" ] && cp "$root/docs/campaign.md" "$b/docs/" # the engine campaign.sh runs
[ -f "$root/docs/progress-protocol.md" ] && cp "$root/docs/progress-protocol.md" "$b/docs/"
{
    echo "kace $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | awk 'NR == 1 { print $NF }')"
    echo "cuda $(sed -n 's/.*CUDA_VERSION \([0-9]*\).*/\1/p' /usr/local/cuda/include/cuda.h 2>/dev/null | sed -n 1p)"
} >"$b/VERSION"

# 4. Size, then the tarball to carry.
size=$(du -sb "$b" | cut -f1)
printf 'kace-bundle: %s bytes (%.1f MiB, limit %.0f MiB) in %s\n' "$size" "$(echo "$size / 1048576" | bc -l)" \
    "$(echo "$max_bytes / 1048576" | bc -l)" "$b"
if [ "$size" -gt "$max_bytes" ]; then
    echo "make-bundle: the bundle is larger than $max_bytes bytes; largest files:" >&2
    (cd "$b" && du -ab . | sort -rn | sed -n 1,8p) >&2
    exit 1
fi
tar -C "$broot" -czf "$broot/kace-bundle.tar.gz" kace-bundle
echo "kace-bundle: $(du -b "$broot/kace-bundle.tar.gz" | cut -f1) bytes in $broot/kace-bundle.tar.gz"
