#!/usr/bin/env bash
# Builds the Debian package kace_<version>_<arch>.deb from a built CMake folder:
# `cmake --install` under /usr into a staging tree, Depends from the shared
# libraries of every ELF file (dpkg-shlibdeps), /etc/kace/kace.conf as a
# conffile, then `dpkg-deb --build`. No rebuild: the package holds exactly the
# binaries the tests ran.
#
#   packaging/build-deb.sh BUILD_DIR OUT_DIR      prints the .deb's path
#
# Install it with `apt install ./kace_*.deb` (pulls the libraries it needs) or
# `dpkg -i`; docs/slurm.md "Installing kace at a site" takes it from there.
set -euo pipefail
build=$(cd "${1:?usage: build-deb.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: build-deb.sh BUILD_DIR OUT_DIR}
for tool in dpkg-deb dpkg-shlibdeps cmake; do
    command -v "$tool" >/dev/null 2>&1 || { echo "build-deb.sh: $tool not found (Debian: dpkg-dev, cmake)" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/kace-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/kace

cmake --build "$build" --target kace-man kace-dynlib-probe >/dev/null
DESTDIR=$root cmake --install "$build" --prefix /usr >"$stage/install.log"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "build-deb.sh: no project version in $build/CMakeCache.txt" >&2; exit 1; }

# Depends: dpkg-shlibdeps reads a source package's debian/control; a minimal one will do.
elfs=()
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && elfs+=("$f")
done < <(find "$root" -type f -print0)
mkdir -p "$stage/src/debian"
printf 'Source: kace\n\nPackage: kace\nArchitecture: any\n' >"$stage/src/debian/control"
# The Slurm plugins use symbols slurmctld and slurmstepd export: dpkg-shlibdeps warns about them.
# kace loads LAPACKE, libxgboost, libmicrohttpd, libcurl and libslurm with dlopen; kace-dynlib-probe
# (not packaged) links them and uses the same functions, so they are in Depends as before.
depends=$(cd "$stage/src" && dpkg-shlibdeps -O --ignore-missing-info "${elfs[@]}" "$build/kace-dynlib-probe" \
    2>"$stage/shlibdeps.log" |
    sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependency" >&2; cat "$stage/shlibdeps.log" >&2; exit 1; }

mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: kace
Version: $version
Architecture: $arch
Maintainer: kace developers <kace@localhost>
Section: science
Priority: optional
Installed-Size: $size
Depends: $depends
Recommends: gnuplot-nox
Suggests: slurmctld, slurmd, slurm-client, slurmdbd
Description: kernel-aware GPU colocation: predict interference, place jobs
 kace predicts how much throughput deep-learning jobs keep when they share one
 GPU under NVIDIA MPS, from profiles of each job alone, and picks colocations
 with that prediction (the KACE paper, SoCC'24).
 .
 This package holds the kace command, libkace (static) with its headers and
 pkg-config file, the Slurm plugins job_submit/kace and spank_kace (in Slurm's
 plugin folder), man pages, bash completion, a systemd unit for kace serve
 (kace-serve.service, settings in /etc/kace/kace.conf) and sample Slurm
 configuration (/usr/share/doc/kace/examples).
EOF
printf "%s\n" /etc/kace/kace.conf /etc/kace/mps.conf >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# The store lives in /var/lib/kace; kace-serve is not started: it needs a
# store with a model first (docs/slurm.md, "Installing kace at a site").
# DPKG_ROOT: set by dpkg --root (tests/cli_package.sh installs into a folder).
set -e
if [ "$1" = configure ]; then
    mkdir -p "${DPKG_ROOT:-}/var/lib/kace"
    if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null 2>&1 || true
    fi
fi
exit 0
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
EOF
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
deb=$out/kace_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
