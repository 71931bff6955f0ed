#!/usr/bin/env bash
# Builds kace's three Debian packages from this source tree:
#
#   kace          the kace command, kace-serve.service (runs as the system user
#                 kace, sandboxed), /etc/kace/kace.conf, man pages, completion, docs
#   kace-slurm    the Slurm plugins job_submit/kace and spank_kace (in Slurm's
#                 plugin folder), the MPS node scripts, /etc/kace/mps.conf
#   libkace-dev   headers, libkace.a, kace.pc
#
#   packaging/build-deb.sh BUILD_DIR OUT_DIR     prints the three .debs' paths
#
# The packages are not built from BUILD_DIR's binaries (the test tree, built
# without Debian's flags) but in BUILD_DIR/package-build: configured here
# (once) with Debian's hardening flags (dpkg-buildflags, hardening=+all:
# fortify, stack protector, relro, bind now, PIE) and without the test suite,
# then built incrementally. Binaries are stripped; Depends come from dpkg-shlibdeps;
# the version is the changelog's (packaging/changelog).
#
# Install with `apt install ./kace_*.deb ./kace-slurm_*.deb ./libkace-dev_*.deb`;
# docs/install.md takes it from there.
set -euo pipefail
usage="usage: build-deb.sh BUILD_DIR OUT_DIR"
build=${1:?$usage}
out=${2:?$usage}
src=$(cd "$(dirname "$0")/.." && pwd)
pkg=$src/packaging
for tool in dpkg-deb dpkg-shlibdeps dpkg-buildflags dpkg-parsechangelog cmake strip gzip; do
    command -v "$tool" >/dev/null 2>&1 || { echo "build-deb.sh: $tool not found (Debian: dpkg-dev, cmake, binutils)" >&2; exit 2; }
done
mkdir -p "$build/package-build" "$out"
build=$(cd "$build/package-build" && pwd -P)
out=$(cd "$out" && pwd)

# --- the hardened build ---
flags() { DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get "$1"; }
cflags="$(flags CPPFLAGS) $(flags CFLAGS)"
ldflags=$(flags LDFLAGS)
for f in -D_FORTIFY_SOURCE=2 -fstack-protector-strong; do
    [[ " $cflags " == *" $f "* ]] || { echo "build-deb.sh: dpkg-buildflags gave no $f" >&2; exit 1; }
done
[[ $ldflags == *-z,relro* && $ldflags == *-z,now* ]] || { echo "build-deb.sh: dpkg-buildflags gave no relro/now" >&2; exit 1; }
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKACE_TESTS=OFF -DKACE_SANITIZE=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON "-DCMAKE_C_FLAGS=$cflags" \
    "-DCMAKE_EXE_LINKER_FLAGS=$ldflags -pie" "-DCMAKE_SHARED_LINKER_FLAGS=$ldflags" \
    "-DCMAKE_MODULE_LINKER_FLAGS=$ldflags" >"$build/configure-deb.log" 2>&1 ||
    { cat "$build/configure-deb.log" >&2; exit 1; }
targets=(kace-cli kace kace-man kace-dynlib-probe)
# The Slurm plugins exist where CMake found Slurm's headers (slurm/CMakeLists.txt).
[ -d "$build/slurm" ] && targets+=(job_submit_kace spank_kace)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$build/build-deb.log" 2>&1 ||
    { tail -n 30 "$build/build-deb.log" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/kace-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
all=$stage/install
DESTDIR=$all cmake --install "$build" --prefix /usr >"$stage/install.log"
upstream=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
version=$(dpkg-parsechangelog -l "$pkg/changelog" -S Version)
[ "${version%-*}" = "$upstream" ] ||
    { echo "build-deb.sh: packaging/changelog is at $version, the project at $upstream: add a changelog entry" >&2; exit 1; }
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
maintainer="kace Packaging Team <packaging@kace-project.org>"

# Moves PATHs (relative to the install tree) into package PKG's tree.
take() {
    local p=$1; shift
    local f
    for f in "$@"; do
        [ -e "$all/$f" ] || { echo "build-deb.sh: $f was not installed" >&2; exit 1; }
        mkdir -p "$stage/$p/$(dirname "$f")"
        mv "$all/$f" "$stage/$p/$f"
    done
}
plugindir=$(cd "$all" && find usr/lib -name job_submit_kace.so -printf '%h\n' | head -1)
take kace usr/bin/kace usr/share/man/man1 usr/share/bash-completion etc/kace/kace.conf \
    usr/share/doc/kace/README.md usr/share/doc/kace/docs usr/share/doc/kace/examples/kace.conf
# Debian 12 keeps units in /lib/systemd/system (no merged /usr for packages yet).
mkdir -p "$stage/kace/lib/systemd/system" "$stage/kace/usr/lib/sysusers.d" "$stage/kace/usr/share/man/man5"
mv "$all/usr/lib/systemd/system/kace-serve.service" "$stage/kace/lib/systemd/system/"
install -m 644 "$pkg/kace.sysusers" "$stage/kace/usr/lib/sysusers.d/kace.conf"
install -m 644 "$src/man/kace.conf.5" "$stage/kace/usr/share/man/man5/"
take libkace-dev usr/include/kace "usr/lib/$multiarch/libkace.a" "usr/lib/$multiarch/pkgconfig/kace.pc"
if [ -n "$plugindir" ]; then
    take kace-slurm "$plugindir/job_submit_kace.so" "$plugindir/spank_kace.so" usr/lib/kace/slurm etc/kace/mps.conf
    mkdir -p "$stage/kace-slurm/usr/share/doc/kace-slurm/examples" "$stage/kace-slurm/usr/share/man/man8"
    for f in gres.conf plugstack.conf slurm.conf; do
        mv "$all/usr/share/doc/kace/examples/$f" "$stage/kace-slurm/usr/share/doc/kace-slurm/examples/"
    done
    # The placer's kace.conf (beside slurm.conf) is the Slurm package's example too.
    cp "$stage/kace/usr/share/doc/kace/examples/kace.conf" "$stage/kace-slurm/usr/share/doc/kace-slurm/examples/"
    install -m 644 "$src/man/job_submit_kace.8" "$src/man/spank_kace.8" "$stage/kace-slurm/usr/share/man/man8/"
fi
left=$(cd "$all" && find . -type f | sed 's|^\./||')
[ -z "$left" ] || { echo "build-deb.sh: installed but in no package:" >&2; echo "$left" >&2; exit 1; }

# --- per-package files: strip, compress man pages, copyright, changelog ---
is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }
for p in kace kace-slurm libkace-dev; do
    root=$stage/$p
    [ -d "$root" ] || continue
    while IFS= read -r -d '' f; do
        if [[ $f == *.a ]]; then
            strip --strip-debug --remove-section=.comment --enable-deterministic-archives "$f"
        elif is_elf "$f"; then
            strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
            chmod 644 "$f"
            [[ $f == */bin/* ]] && chmod 755 "$f"
        fi
    done < <(find "$root" -type f -print0)
    find "$root/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} + 2>/dev/null || true
    doc=$root/usr/share/doc/$p
    mkdir -p "$doc"
    install -m 644 "$pkg/copyright" "$doc/copyright"
    gzip -9nc "$pkg/changelog" >"$doc/changelog.Debian.gz"
    chmod 644 "$doc/changelog.Debian.gz"
    find "$root" -type d -exec chmod 755 {} +
    chmod -R go-w "$root"
done

# --- Depends: dpkg-shlibdeps reads a source package's debian/control; a minimal one will do ---
mkdir -p "$stage/src/debian"
printf 'Source: kace\n\nPackage: kace\nArchitecture: any\n' >"$stage/src/debian/control"
shlibdeps() { (cd "$stage/src" && dpkg-shlibdeps -O --ignore-missing-info "$@" 2>>"$stage/shlibdeps.log" |
    sed -n 's/^shlibs:Depends=//p'); }
# kace loads LAPACKE, libxgboost, libmicrohttpd, libcurl and libslurm with dlopen;
# kace-dynlib-probe (not packaged) links them and uses the same functions. libslurm
# only serves `kace slurm`: it is the Slurm package's dependency, not the CLI's.
kace_deps=$(shlibdeps "$stage/kace/usr/bin/kace" "$build/kace-dynlib-probe" |
    tr ',' '\n' | sed 's/^ *//' | grep -v '^libslurm' | paste -sd, | sed 's/,/, /g')
[ -n "$kace_deps" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependency" >&2; cat "$stage/shlibdeps.log" >&2; exit 1; }

size() { du -sk --exclude=DEBIAN "$1" | cut -f1; }
control() { # PACKAGE FIELDS...: DEBIAN/control, md5sums, the .deb
    local p=$1 root=$stage/$1
    mkdir -p "$root/DEBIAN"
    {
        printf 'Package: %s\nSource: kace\nVersion: %s\nArchitecture: %s\nMaintainer: %s\n' "$p" "$version" "$arch" "$maintainer"
        printf 'Installed-Size: %s\nHomepage: https://kace-project.org/\n' "$(size "$root")"
        cat
    } >"$root/DEBIAN/control"
    (cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
    chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
    local deb=$out/${p}_${version}_${arch}.deb
    dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
    echo "$deb"
}

mkdir -p "$stage/kace/DEBIAN"
printf '%s\n' /etc/kace/kace.conf >"$stage/kace/DEBIAN/conffiles"
install -m 755 "$pkg/kace.postinst" "$stage/kace/DEBIAN/postinst"
install -m 755 "$pkg/kace.postrm" "$stage/kace/DEBIAN/postrm"
chmod 644 "$stage/kace/DEBIAN/conffiles"
control kace <<EOF
Section: science
Priority: optional
Depends: adduser, $kace_deps
Suggests: gnuplot-nox, kace-slurm, libkace-dev
Description: kernel-aware GPU colocation: predict interference, place jobs
 kace predicts how much throughput deep-learning jobs keep when they share one
 GPU under NVIDIA MPS, from profiles of each job alone, and picks colocations
 with that prediction (the KACE paper, SoCC'24).
 .
 This package holds the kace command, its man pages and bash completion, and
 kace-serve.service: the colocation advisor (JSON API, Kubernetes scheduler
 extender, Prometheus metrics), running as the system user kace with systemd
 sandboxing, settings in /etc/kace/kace.conf. Figures need gnuplot-nox.
EOF

if [ -d "$stage/kace-slurm" ]; then
    slurm_deps=$(shlibdeps "$stage/kace-slurm/$plugindir"/*.so)
    slurm_ver=$(dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
    [ -n "$slurm_ver" ] || { echo "build-deb.sh: libslurm-dev is not installed: cannot tell Slurm's version" >&2; exit 1; }
    # A Slurm plugin loads only into the Slurm release it was built against.
    next=$(awk -F. '{ printf "%d.%02d", $1, $2 + 1 }' <<<"$slurm_ver")
    mkdir -p "$stage/kace-slurm/DEBIAN"
    printf '%s\n' /etc/kace/mps.conf >"$stage/kace-slurm/DEBIAN/conffiles"
    chmod 644 "$stage/kace-slurm/DEBIAN/conffiles"
    control kace-slurm <<EOF
Section: admin
Priority: optional
Depends: $slurm_deps, slurm-wlm-basic-plugins (>= $slurm_ver), slurm-wlm-basic-plugins (<< $next)
Recommends: kace (= $version)
Suggests: slurmctld, slurmd, slurm-client
Description: kernel-aware GPU colocation: Slurm plugins and MPS node scripts
 kace predicts how much throughput deep-learning jobs keep when they share one
 GPU under NVIDIA MPS and picks colocations with that prediction.
 .
 This package holds the Slurm side: job_submit/kace (slurmctld steers jobs
 that name their workload to the best shared GPU, with an MPS share),
 spank_kace (the --kace-workload and --kace-profile options of sbatch, srun
 and salloc), the MPS Prolog, Epilog and TaskProlog for the GPU nodes
 (/usr/lib/kace/slurm, settings in /etc/kace/mps.conf) and sample Slurm
 configuration. The kace package builds the store the plugins read.
EOF
fi

control libkace-dev <<EOF
Section: libdevel
Priority: optional
Depends: libsqlite3-dev, libcjson-dev, libc6-dev | libc-dev
Suggests: kace
Description: kernel-aware GPU colocation: static library and headers
 kace predicts how much throughput deep-learning jobs keep when they share one
 GPU under NVIDIA MPS and picks colocations with that prediction.
 .
 This package holds libkace.a, its headers (<kace/kace.h>) and kace.pc: link
 with "pkg-config --static --cflags --libs kace". At run time, training and
 evaluation load LAPACKE and libxgboost with dlopen (packages liblapacke and
 libxgboost0).
EOF
