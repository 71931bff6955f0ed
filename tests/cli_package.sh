#!/usr/bin/env bash
# The Debian packages an admin installs (packaging/build-deb.sh: kace,
# kace-slurm, libkace-dev), built with Debian's hardening flags in the
# build folder's package-build/, and installed with dpkg into a private root
# (dpkg --root: installing them into / would change the machine the other
# tests run on):
#
# - lintian reports no error on any of them (skipped, exit 77 at the end, only
#   where lintian is not installed);
# - each .deb's control: package, version (the binary's, with a Debian
#   revision), a real maintainer, Depends found (every one installed here, so
#   dpkg -i would accept it; libkace-dev's give pkg-config what kace.pc
#   requires), gnuplot-nox suggested, not recommended; the conffiles;
# - every promised file is in the package it belongs to; man pages are
#   compressed; each package has its copyright and changelog.Debian.gz;
# - the binary and the plugins are stripped and hardened: RELRO, BIND_NOW,
#   PIE, stack protector, fortified functions;
# - dpkg installs all three (postinst made the user kace and its
#   /var/lib/kace), and the installed kace runs: --version, import + train +
#   predict on the reference data; at the end dpkg -r removes them but keeps
#   the conffiles, dpkg -P removes those too;
# - man pages pass mandoc -Tlint (warnings and worse) and man -l renders them;
# - pkg-config finds the installed libkace and a program built with it runs;
# - the unit runs as the user kace, `systemd-analyze security --offline=true`
#   scores it 5 or less, systemd-analyze verify accepts it, and its
#   ExecStart, with /etc/kace/kace.conf's keys, starts kace serve (answers
#   /healthz);
# - bash completion completes commands and a command's options;
# - as root with the Slurm packages: slurmctld loads the installed
#   job_submit/kace, sbatch takes --kace-workload from the installed SPANK
#   plugin (otherwise that part is skipped and says so). cli_slurm runs the
#   whole Slurm test on the build's plugins once; it is not repeated here;
# - as root with debootstrap and a reachable Debian mirror: the three install
#   with apt into a clean Debian 12 root (cached as a tarball in the package
#   build folder) and `pkg-config --libs kace` works there.
#
#   bash cli_package.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
set -u
# Runs the test in a process group of its own, killed whole at the end.
source "$(dirname "$0")/lib_test.sh"
KACE=${1:?usage: cli_package.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SHARED=${2:?missing SHARED_DATA_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$(dirname "$KACE")" && pwd)
PKGBUILD=$BUILD/package-build
export LC_ALL=C
# A run killed half-way may have left the clean root's /proc mounted: never remove through it.
umount "$SCRATCH/debian12/proc" 2>/dev/null
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
for tool in dpkg-deb dpkg-shlibdeps dpkg-buildflags readelf; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool not installed (dpkg-dev, binutils)"; exit 77; }
done

bash "$HERE/../packaging/build-deb.sh" "$BUILD" "$SCRATCH/deb" >"$SCRATCH/debs.txt" || { echo "FAIL: build-deb.sh"; exit 1; }
deb_of() { grep "/${1}_[^/]*\.deb$" "$SCRATCH/debs.txt"; }
debs=()
for p in kace kace-slurm libkace-dev; do
    d=$(deb_of $p)
    [ -f "$d" ] || { echo "FAIL: no package $p in: $(cat "$SCRATCH/debs.txt")"; exit 1; }
    debs+=("$d")
    echo "package: $d ($(du -k "$d" | cut -f1) KiB)"
done
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
version=$("$KACE" --version | awk '{ print $2 }')

# --- lintian: no error tags ---
have_lintian=0
if command -v lintian >/dev/null 2>&1; then
    have_lintian=1
    lintian --display-info "${debs[@]}" >"$SCRATCH/lintian.txt" 2>&1
    echo "lintian: $(grep -c '^E:' "$SCRATCH/lintian.txt") errors, $(grep -c '^W:' "$SCRATCH/lintian.txt") warnings," \
        "$(grep -c '^I:' "$SCRATCH/lintian.txt") infos"
    grep '^[EW]:' "$SCRATCH/lintian.txt"
    grep -q '^E:' "$SCRATCH/lintian.txt" && fail "lintian reports errors"
fi

# --- control ---
field() { dpkg-deb -f "$(deb_of "$1")" "$2"; }
for p in kace kace-slurm libkace-dev; do
    [ "$(field $p Package)" = $p ] || fail "$p: Package is '$(field $p Package)'"
    [ "$(field $p Version | sed 's/-[^-]*$//')" = "$version" ] || fail "$p: Version '$(field $p Version)', the binary says '$version'"
    [[ $(field $p Version) == *-* ]] || fail "$p: Version '$(field $p Version)' has no Debian revision"
    [ "$(field $p Architecture)" = "$arch" ] || fail "$p: Architecture '$(field $p Architecture)'"
    m=$(field $p Maintainer)
    [[ $m =~ ^[^\<]+\ \<[^@\>]+@[^\>]+\.[a-z]+\>$ && $m != *localhost* ]] || fail "$p: Maintainer '$m'"
    # dpkg -i would accept it here: every dependency (first of each alternative) is installed.
    for dep in $(field $p Depends | tr ',' '\n' | sed 's/|.*//; s/(.*//; s/ //g'); do
        dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'install ok installed' || fail "$p: dependency $dep is not installed"
    done
done
echo "kace Depends: $(field kace Depends)"
for lib in libsqlite3 libcjson libmicrohttpd libc6 adduser; do
    grep -q "$lib" <<<"$(field kace Depends)" || fail "kace: Depends lacks $lib"
done
grep -q libslurm <<<"$(field kace Depends)" && fail "kace depends on libslurm (kace-slurm's)"
grep -q gnuplot <<<"$(field kace Depends) $(field kace Recommends)" && fail "kace depends on or recommends gnuplot"
grep -q gnuplot-nox <<<"$(field kace Suggests)" || fail "kace does not suggest gnuplot-nox"
for dep in libsqlite3-dev libcjson-dev; do
    grep -q "$dep" <<<"$(field libkace-dev Depends)" || fail "libkace-dev: Depends lacks $dep (kace.pc requires it)"
done
grep -q slurm-wlm-basic-plugins <<<"$(field kace-slurm Depends)" || fail "kace-slurm: Depends lacks Slurm's plugin package"
conffiles() { dpkg-deb --ctrl-tarfile "$(deb_of "$1")" | tar -xO ./conffiles 2>/dev/null; }
grep -qx /etc/kace/kace.conf <<<"$(conffiles kace)" || fail "/etc/kace/kace.conf is no conffile of kace"
grep -qx /etc/kace/mps.conf <<<"$(conffiles kace-slurm)" || fail "/etc/kace/mps.conf is no conffile of kace-slurm"

# --- files, each in its package ---
for p in kace kace-slurm libkace-dev; do
    dpkg-deb -c "$(deb_of $p)" | awk '{ print $NF }' | sed 's|^\./|/|' >"$SCRATCH/files-$p"
    for f in "/usr/share/doc/$p/copyright" "/usr/share/doc/$p/changelog.Debian.gz"; do
        grep -qx "$f" "$SCRATCH/files-$p" || fail "$p has no $f"
    done
    while read -r page; do
        fail "$p: man page not compressed: $page"
    done < <(grep '^/usr/share/man/.*[^/]$' "$SCRATCH/files-$p" | grep -v '\.gz$')
done
has() { # PACKAGE FILE...
    local p=$1 f; shift
    for f in "$@"; do grep -qx "$f" "$SCRATCH/files-$p" || fail "$p has no $f"; done
}
plugins=$(sed -n "s|^\(/usr/lib/$multiarch/slurm[^/]*\)/job_submit_kace.so$|\1|p" "$SCRATCH/files-kace-slurm")
has kace /usr/bin/kace /usr/share/man/man1/kace.1.gz /usr/share/man/man1/kace-simulate.1.gz \
    /usr/share/man/man1/kace-serve.1.gz /usr/share/man/man5/kace.conf.5.gz /usr/share/bash-completion/completions/kace \
    /lib/systemd/system/kace-serve.service /usr/lib/sysusers.d/kace.conf /etc/kace/kace.conf \
    /usr/share/doc/kace/README.md /usr/share/doc/kace/docs/slurm.md /usr/share/doc/kace/examples/kace.conf
has kace-slurm /etc/kace/mps.conf /usr/lib/kace/slurm/kace-mps-prolog /usr/lib/kace/slurm/kace-mps-epilog \
    /usr/lib/kace/slurm/kace-mps-taskprolog /usr/lib/kace/slurm/kace-mps-common.sh \
    /usr/share/man/man8/job_submit_kace.8.gz /usr/share/man/man8/spank_kace.8.gz \
    /usr/share/doc/kace-slurm/examples/slurm.conf /usr/share/doc/kace-slurm/examples/plugstack.conf
[ -n "$plugins" ] && grep -qx "$plugins/spank_kace.so" "$SCRATCH/files-kace-slurm" || fail "Slurm plugins not in Slurm's plugin folder"
has libkace-dev "/usr/lib/$multiarch/libkace.a" "/usr/lib/$multiarch/pkgconfig/kace.pc" /usr/include/kace/kace.h \
    /usr/include/kace/sacct.h
grep -e '^/usr/include/' -e '\.a$' -e '\.so$' -e '^/usr/lib/kace/slurm/' "$SCRATCH/files-kace" &&
    fail "kace holds headers, a library, a plugin or Slurm's node scripts"
commands=$("$KACE" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
for c in $commands; do
    grep -qx "/usr/share/man/man1/kace-$c.1.gz" "$SCRATCH/files-kace" || fail "no man page for kace $c"
done

# --- stripped and hardened ---
X=$SCRATCH/extract
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$X"; done
for elf in "$X/usr/bin/kace" "$X$plugins/job_submit_kace.so" "$X$plugins/spank_kace.so"; do
    name=${elf#$X}
    readelf -S "$elf" | grep -q -e '\.symtab' -e '\.debug_' && fail "$name is not stripped"
    readelf -lW "$elf" | grep -q GNU_RELRO || fail "$name has no RELRO"
    readelf -dW "$elf" | grep -q -e 'BIND_NOW' -e 'FLAGS.*NOW' || fail "$name is not linked with -z now"
    readelf -dW --dyn-syms "$elf" | grep -q '__stack_chk_fail' || fail "$name has no stack protector"
done
readelf -hW "$X/usr/bin/kace" | grep -q 'DYN' && readelf -dW "$X/usr/bin/kace" | grep -q 'FLAGS_1.*PIE' || fail "kace is no PIE"
readelf -W --dyn-syms "$X/usr/bin/kace" | grep -q '__[a-z]*_chk@' || fail "kace calls no fortified function (-D_FORTIFY_SOURCE)"

# --- installed by dpkg into a private root (its own package database; the
# machine's libraries stand in for the dependencies checked above) ---
R=$SCRATCH/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/etc" && : >"$R/var/lib/dpkg/status"
dpkgr() { dpkg --root="$R" --force-script-chrootless --log=/dev/null "$@"; }
dpkgr --force-depends -i "${debs[@]}" >"$SCRATCH/dpkg-i.txt" 2>&1 || { fail "dpkg -i"; cat "$SCRATCH/dpkg-i.txt"; }
for p in kace kace-slurm libkace-dev; do
    dpkgr -s $p 2>/dev/null | grep -qx 'Status: install ok installed' || fail "dpkg does not list $p as installed"
done
kace_ids=$(awk -F: '$1 == "kace" { print $3 ":" $4 }' "$R/etc/passwd" 2>/dev/null)
[ -n "$kace_ids" ] || fail "postinst made no user kace"
[ -d "$R/var/lib/kace" ] && [ "$(stat -c %u:%g "$R/var/lib/kace")" = "$kace_ids" ] ||
    fail "postinst made no /var/lib/kace owned by kace ($kace_ids)"
for s in prolog epilog taskprolog; do
    [ -x "$R/usr/lib/kace/slurm/kace-mps-$s" ] || fail "kace-mps-$s is not installed executable"
done
K=$R/usr/bin/kace
[ "$("$K" --version)" = "kace $version" ] || fail "installed kace --version: $("$K" --version)"
db=$SCRATCH/kace.db
"$K" import --db "$db" "$SHARED/kace-v100" >/dev/null && "$K" train --db "$db" >/dev/null &&
    "$K" predict --db "$db" --target bert-base-cased_batch8-train --top 3 >"$SCRATCH/predict.txt" ||
    fail "installed kace: import, train, predict"
grep -q 'bert-base-cased_batch8-train' "$SCRATCH/predict.txt" || fail "installed kace predict printed no ranking"

# --- man pages (mandoc and man read them compressed) ---
if command -v mandoc >/dev/null 2>&1; then
    mkdir -p "$SCRATCH/man"
    for page in "$R"/usr/share/man/man[158]/*.gz; do
        f=${page##*/}
        gzip -dc "$page" >"$SCRATCH/man/${f%.gz}"
    done
    mandoc -Tlint -W warning "$SCRATCH"/man/* || fail "mandoc -Tlint found warnings"
else
    echo "note: mandoc not installed, lint skipped"
fi
if command -v man >/dev/null 2>&1; then
    man -l "$R/usr/share/man/man1/kace.1.gz" 2>/dev/null | grep -q 'kernel-aware GPU colocation' || fail "man -l kace.1"
    man -l "$R/usr/share/man/man1/kace-simulate.1.gz" 2>/dev/null | grep -q -- '--sacct' || fail "man -l kace-simulate.1"
    man -l "$R/usr/share/man/man5/kace.conf.5.gz" 2>/dev/null | grep -q 'KACE_SERVE_LISTEN' || fail "man -l kace.conf.5"
    man -l "$R/usr/share/man/man8/job_submit_kace.8.gz" 2>/dev/null | grep -q 'JobSubmitPlugins' || fail "man -l job_submit_kace.8"
    man -l "$R/usr/share/man/man8/spank_kace.8.gz" 2>/dev/null | grep -q -- '--kace-workload' || fail "man -l spank_kace.8"
fi

# --- pkg-config and the library (static: --static adds kace.pc's private libraries) ---
cat >"$SCRATCH/use.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <kace/sacct.h>
int main(void)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_sacct *s = NULL;
    const char *text = "JobID|JobName|Submit|Start|End|AllocTRES|NodeList|State\n"
                       "1|a|2026-01-01T00:00:00|2026-01-01T00:00:01|2026-01-01T01:00:00|gres/gpu=2,node=1|n1|COMPLETED\n";
    kace_status st = kace_sacct_parse(ctx, text, strlen(text), "use", &s);
    int ok = st == KACE_OK && s->n_jobs == 1 && s->jobs[0].gpus == 2;
    printf("%s %s\n", KACE_VERSION, ok ? "ok" : kace_errmsg(ctx));
    kace_sacct_free(&s);
    kace_ctx_free(&ctx);
    return ok ? 0 : 1;
}
EOF
pc() { PKG_CONFIG_SYSROOT_DIR=$R PKG_CONFIG_PATH=$R/usr/lib/$multiarch/pkgconfig pkg-config "$@"; }
libs=$(pc --libs kace) && [[ $libs == *-lkace* ]] || fail "pkg-config --libs kace: '$libs'"
flags=$(pc --static --cflags --libs kace) || fail "pkg-config --static kace"
[[ $flags == *-lsqlite3* && $flags == *-lcjson* ]] || fail "pkg-config --static --libs kace lacks sqlite3 or cjson: $flags"
cc -std=c11 -o "$SCRATCH/use" "$SCRATCH/use.c" $flags && [ "$("$SCRATCH/use")" = "$version ok" ] ||
    fail "a program built with pkg-config's flags ($flags)"

# --- the systemd unit: its user, its sandbox, /etc/kace/kace.conf ---
unit=$R/lib/systemd/system/kace-serve.service
grep -qx 'User=kace' "$unit" || fail "the unit does not run as the user kace"
if command -v systemd-analyze >/dev/null 2>&1; then
    systemd-analyze security --offline=true "$unit" >"$SCRATCH/security.txt" 2>&1
    score=$(sed -n 's/.*Overall exposure level for kace-serve.service: \([0-9.]*\).*/\1/p' "$SCRATCH/security.txt")
    echo "systemd-analyze security --offline=true: ${score:-none}"
    [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 5) }' ||
        { fail "the unit's exposure is '${score:-?}' (at most 5)"; tail -n 40 "$SCRATCH/security.txt"; }
    # verify resolves ExecStart: give it the installed binary's path.
    sed "s|/usr/bin/kace|$K|; s|EnvironmentFile=/etc/kace/kace.conf|EnvironmentFile=$R/etc/kace/kace.conf|" "$unit" \
        >"$SCRATCH/kace-serve.service"
    systemd-analyze verify --man=no "$SCRATCH/kace-serve.service" >"$SCRATCH/verify.txt" 2>&1 || { fail "systemd-analyze verify"; cat "$SCRATCH/verify.txt"; }
fi
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[[ $exec_start == /usr/bin/kace\ serve* ]] || fail "ExecStart is '$exec_start'"
# The conf's keys, with this test's store, an ephemeral port and no NVML; then ExecStart as systemd expands it
# (${X}: one word; $X: split at spaces).
conf=$SCRATCH/kace.conf
sed -e "s|^KACE_DB=.*|KACE_DB=$db|" -e 's|^KACE_SERVE_LISTEN=.*|KACE_SERVE_LISTEN=127.0.0.1:0|' \
    -e "s|^KACE_SERVE_ARGS=.*|KACE_SERVE_ARGS=--no-nvml --port-file $SCRATCH/port --quiet|" "$R/etc/kace/kace.conf" >"$conf"
for key in KACE_DB KACE_SERVE_LISTEN KACE_SERVE_MODEL KACE_SERVE_WATCH KACE_SERVE_ARGS; do
    grep -q "^$key=" "$conf" || fail "kace.conf has no $key"
    grep -B3 "^$key=" "$R/etc/kace/kace.conf" | grep -q '^#' || fail "kace.conf does not document $key"
done
(
    # systemd's EnvironmentFile: KEY=value lines (values may hold spaces), '#' comments.
    while IFS= read -r line; do
        [[ $line =~ ^([A-Z_][A-Z0-9_]*)=(.*)$ ]] && export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
    done <"$conf"
    cmd=${exec_start/#\/usr\/bin\/kace/$K}
    cmd=$(sed -E 's/\$\{([A-Z_]+)\}/"$\1"/g' <<<"$cmd")
    eval "exec $cmd"
) >"$SCRATCH/serve.log" 2>&1 &
started "$SCRATCH/port" "kace serve from the unit's ExecStart" "$SCRATCH/serve.log"
port=$(cat "$SCRATCH/port")
if curl -fsS "http://127.0.0.1:$port/healthz" >"$SCRATCH/health.txt" 2>&1; then
    echo "kace serve from the unit's ExecStart answers on port $port: $(head -c 80 "$SCRATCH/health.txt")"
else
    fail "kace serve from the unit's ExecStart did not answer"; cat "$SCRATCH/serve.log"
fi
kill_pids

# --- bash completion ---
completion=$(bash -c "source '$R/usr/share/bash-completion/completions/kace'
    COMP_WORDS=('$K' sim); COMP_CWORD=1; _kace; echo \"\${COMPREPLY[*]}\"
    COMP_WORDS=('$K' simulate --sac); COMP_CWORD=2; _kace; echo \"\${COMPREPLY[*]}\"")
grep -qx 'simulate' <<<"$(head -1 <<<"$completion")" || fail "completion of 'kace sim': $(head -1 <<<"$completion")"
[ "$(tail -1 <<<"$completion")" = "--sacct --sacct-map" ] || fail "completion of 'kace simulate --sac': $(tail -1 <<<"$completion")"

# --- Slurm loads the installed plugins ---
if [ "$(id -u)" -eq 0 ] && [ -f "$R$plugins/job_submit_kace.so" ] && source "$HERE/slurm_cluster.sh" &&
    ! missing=$(slurm_cluster_missing); then
    C=$(mktemp -d /tmp/kace-pkg.XXXXXX)
    trap 'kill_pids; slurm_cluster_stop; rm -rf "$C"' EXIT
    if slurm_cluster_start "$C/cluster" "$R$plugins"; then
        slurm_wait 10 grep -q 'job_submit/kace loaded' "$C/cluster/log/slurmctld.log" ||
            fail "slurmctld did not load the installed job_submit/kace"
        grep -q "$R$plugins" "$C/cluster/plugstack.conf" || fail "plugstack.conf does not name the installed SPANK plugin"
        id=$(sbatch --parsable --kace-workload=bert-base-cased_batch8-train -o /dev/null --wrap true 2>"$C/sbatch.err")
        [[ $id =~ ^[0-9]+ ]] || { fail "sbatch --kace-workload with the installed SPANK plugin"; cat "$C/sbatch.err"; }
        scontrol ping >/dev/null 2>&1 || fail "slurmctld down"
        echo "slurm: slurmctld loaded $R$plugins/job_submit_kace.so; sbatch --kace-workload gave job $id"
    else
        fail "the Slurm cluster did not start with the installed plugins"
        tail -n 20 "$C"/cluster/log/slurmctld.log
    fi
    scancel --quiet --user=root 2>/dev/null
    slurm_cluster_stop
else
    echo "note: Slurm part skipped (needs root, the Slurm packages and the plugins in the package)"
fi

# --- remove keeps the conffiles, purge removes them ---
dpkgr -r kace kace-slurm libkace-dev >/dev/null 2>&1 || fail "dpkg -r"
[ ! -e "$R/usr/bin/kace" ] && [ ! -e "$R$plugins/job_submit_kace.so" ] && [ ! -e "$R/usr/include/kace/kace.h" ] ||
    fail "dpkg -r left the binary, a plugin or a header"
[ -f "$R/etc/kace/kace.conf" ] && [ -f "$R/etc/kace/mps.conf" ] || fail "dpkg -r removed a conffile"
dpkgr -P kace kace-slurm libkace-dev >/dev/null 2>&1 || fail "dpkg -P"
[ ! -e "$R/etc/kace/kace.conf" ] && [ ! -e "$R/etc/kace/mps.conf" ] || fail "dpkg -P kept a conffile"

# --- a clean Debian 12 root: apt installs the three, pkg-config --libs kace works there ---
mirror=${KACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=$PKGBUILD/debian12-minbase.tar
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null 2>&1 || ! command -v chroot >/dev/null 2>&1; then
    echo "note: clean-root part skipped (needs root, debootstrap and chroot)"
elif [ ! -f "$cache" ] && ! curl -fsS --max-time 20 -o /dev/null "$mirror/dists/bookworm/Release"; then
    echo "note: clean-root part skipped (no Debian mirror at $mirror; set KACE_DEBIAN_MIRROR)"
else
    D=$SCRATCH/debian12
    mkdir -p "$D"
    if [ -f "$cache" ]; then
        tar -xf "$cache" -C "$D"
    elif debootstrap --variant=minbase bookworm "$D" "$mirror" >"$SCRATCH/debootstrap.log" 2>&1; then
        tar -cf "$cache.tmp" -C "$D" . && mv "$cache.tmp" "$cache"
    else
        fail "debootstrap bookworm"; tail -n 20 "$SCRATCH/debootstrap.log"
    fi
    if [ -x "$D/usr/bin/apt-get" ]; then
        trap 'kill_pids; umount "$D/proc" 2>/dev/null' EXIT
        mount -t proc proc "$D/proc"
        cp /etc/resolv.conf "$D/etc/resolv.conf"
        cp "${debs[@]}" "$D/tmp/"
        in_root() { chroot "$D" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
        if in_root apt-get update -qq >"$SCRATCH/apt.log" 2>&1 &&
            in_root apt-get install -y -qq --no-install-recommends pkg-config $(printf '/tmp/%s ' "${debs[@]##*/}") \
                >>"$SCRATCH/apt.log" 2>&1; then
            libs=$(in_root pkg-config --libs kace 2>&1)
            echo "Debian 12 root: pkg-config --libs kace: $libs"
            [[ $libs == *-lkace* ]] || fail "pkg-config --libs kace in a clean Debian 12 root: $libs"
            slibs=$(in_root pkg-config --static --libs kace 2>&1)
            [[ $slibs == *-lsqlite3* && $slibs == *-lcjson* ]] || fail "pkg-config --static --libs kace there: $slibs"
            [ "$(in_root kace --version)" = "kace $version" ] || fail "kace --version in the clean root"
            in_root getent passwd kace >/dev/null || fail "no user kace in the clean root"
            [ "$(in_root stat -c %U /var/lib/kace)" = kace ] || fail "/var/lib/kace is not kace's in the clean root"
            in_root dpkg-query -W -f='${Status}' gnuplot-nox 2>/dev/null | grep -q 'ok installed' &&
                fail "installing kace pulled gnuplot-nox"
            echo "Debian 12 root: $(in_root dpkg-query -W -f='${Status}\n' | grep -c 'ok installed') packages installed"
        else
            fail "apt-get install of the three packages in a clean Debian 12 root"; tail -n 30 "$SCRATCH/apt.log"
        fi
        umount "$D/proc"
    fi
    rm -rf "$D"
fi

if [ "$have_lintian" -eq 0 ] && [ "$failures" -eq 0 ]; then
    echo "SKIP: lintian not installed (bash .ci/install-deps); every other check passed"
    exit 77
fi
[ "$have_lintian" -eq 0 ] && echo "note: lintian not installed, its check skipped"
[ $failures -eq 0 ] && echo "cli_package: all passed"
exit $((failures > 0))
