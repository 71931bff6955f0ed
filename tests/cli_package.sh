#!/usr/bin/env bash
# The Debian package an admin installs (packaging/build-deb.sh), built from
# this build folder and installed with dpkg into a private root (dpkg --root:
# installing it into / would change the machine the other tests run on):
#
# - the .deb's control: package kace, the binary's version, Depends found
#   (every one installed here, so dpkg -i would accept it), the conffile;
# - every promised file is in it: the binary, libkace.a, headers, kace.pc, the
#   Slurm plugins in Slurm's plugin folder, kace(1) and a page per command,
#   bash completion, the systemd unit, /etc/kace/kace.conf, docs, examples;
# - dpkg installs it (status "install ok installed", postinst ran), and the
#   installed kace runs: --version, import + train + predict on the reference
#   data; at the end dpkg -r removes it but keeps /etc/kace/kace.conf, dpkg -P
#   removes that too;
# - man pages pass mandoc -Tlint (warnings and worse) and man -l renders them;
# - pkg-config finds the installed libkace and a program built with it runs;
# - the unit's ExecStart, with /etc/kace/kace.conf's keys, starts kace serve
#   (answers /healthz); systemd-analyze verify accepts the unit;
# - bash completion completes commands and a command's options;
# - as root with the Slurm packages: slurmctld loads the installed
#   job_submit/kace, sbatch takes --kace-workload from the installed SPANK
#   plugin (otherwise that part is skipped and says so). cli_slurm runs the
#   whole Slurm test on the build's plugins once; it is not repeated here.
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
export LC_ALL=C
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for tool in dpkg-deb dpkg-shlibdeps; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool not installed (dpkg-dev)"; exit 77; }
done

deb=$(bash "$HERE/../packaging/build-deb.sh" "$BUILD" "$SCRATCH/deb") || { echo "FAIL: build-deb.sh"; exit 1; }
[ -f "$deb" ] || { echo "FAIL: no package at '$deb'"; exit 1; }
echo "package: $deb ($(du -k "$deb" | cut -f1) KiB)"
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
version=$("$KACE" --version | awk '{ print $2 }')

# --- control ---
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = kace ] || fail "Package is '$(field Package)'"
[ "$(field Version)" = "$version" ] || fail "Version '$(field Version)', the binary says '$version'"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture '$(field Architecture)'"
depends=$(field Depends)
echo "Depends: $depends"
for lib in libsqlite3 libcjson libmicrohttpd libc6; do
    grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib"
done
# dpkg -i would accept it here: every dependency (first of each alternative) is installed.
for dep in $(tr ',' '\n' <<<"$depends" | sed 's/|.*//; s/(.*//; s/ //g'); do
    dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'install ok installed' || fail "dependency $dep is not installed"
done
for c in /etc/kace/kace.conf /etc/kace/mps.conf; do
    dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx $c || fail "$c is no conffile"
done

# --- files ---
dpkg-deb -c "$deb" | awk '{ print $NF }' | sed 's|^\./|/|' >"$SCRATCH/files"
plugins=$(sed -n "s|^\(/usr/lib/$multiarch/slurm[^/]*\)/job_submit_kace.so$|\1|p" "$SCRATCH/files")
for f in /usr/bin/kace "/usr/lib/$multiarch/libkace.a" "/usr/lib/$multiarch/pkgconfig/kace.pc" /usr/include/kace/kace.h \
    /usr/include/kace/sacct.h /usr/share/man/man1/kace.1 /usr/share/man/man1/kace-simulate.1 /usr/share/man/man1/kace-serve.1 \
    /usr/share/bash-completion/completions/kace /usr/lib/systemd/system/kace-serve.service /etc/kace/kace.conf \
    /usr/share/doc/kace/README.md /usr/share/doc/kace/docs/slurm.md /usr/share/doc/kace/examples/slurm.conf \
    /usr/share/doc/kace/examples/plugstack.conf /usr/share/doc/kace/examples/kace.conf /etc/kace/mps.conf \
    /usr/lib/kace/slurm/kace-mps-prolog /usr/lib/kace/slurm/kace-mps-epilog /usr/lib/kace/slurm/kace-mps-taskprolog \
    /usr/lib/kace/slurm/kace-mps-common.sh; do
    grep -qx "$f" "$SCRATCH/files" || fail "the package has no $f"
done
[ -n "$plugins" ] && grep -qx "$plugins/spank_kace.so" "$SCRATCH/files" || fail "Slurm plugins not in Slurm's plugin folder"
commands=$("$KACE" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
for c in $commands; do
    grep -qx "/usr/share/man/man1/kace-$c.1" "$SCRATCH/files" || fail "no man page for kace $c"
done

# --- installed by dpkg into a private root (its own package database; the
# machine's libraries stand in for the dependencies checked above) ---
R=$SCRATCH/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" && : >"$R/var/lib/dpkg/status"
dpkgr() { dpkg --root="$R" --force-script-chrootless --log=/dev/null "$@"; }
dpkgr --force-depends -i "$deb" >"$SCRATCH/dpkg-i.txt" 2>&1 || { fail "dpkg -i"; cat "$SCRATCH/dpkg-i.txt"; }
dpkgr -s kace 2>/dev/null | grep -qx 'Status: install ok installed' || fail "dpkg does not list kace as installed"
[ -d "$R/var/lib/kace" ] || fail "postinst made no /var/lib/kace"
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

# --- man pages ---
if command -v mandoc >/dev/null 2>&1; then
    mandoc -Tlint -W warning "$R"/usr/share/man/man1/*.1 || fail "mandoc -Tlint found warnings"
else
    echo "note: mandoc not installed, lint skipped"
fi
if command -v man >/dev/null 2>&1; then
    man -l "$R/usr/share/man/man1/kace.1" 2>/dev/null | grep -q 'kernel-aware GPU colocation' || fail "man -l kace.1"
    man -l "$R/usr/share/man/man1/kace-simulate.1" 2>/dev/null | grep -q -- '--sacct' || fail "man -l kace-simulate.1"
fi

# --- pkg-config and the library ---
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
flags=$(PKG_CONFIG_SYSROOT_DIR=$R PKG_CONFIG_PATH=$R/usr/lib/$multiarch/pkgconfig pkg-config --cflags --libs kace) ||
    fail "pkg-config kace"
# A sanitized build's libkace.a needs the sanitizer runtimes at link time.
san=$(grep -q '^KACE_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && echo "-fsanitize=address,undefined")
cc -std=c11 $san -o "$SCRATCH/use" "$SCRATCH/use.c" $flags && [ "$("$SCRATCH/use")" = "$version ok" ] ||
    fail "a program built with pkg-config's flags ($flags)"

# --- the systemd unit with /etc/kace/kace.conf ---
unit=$R/usr/lib/systemd/system/kace-serve.service
if command -v systemd-analyze >/dev/null 2>&1; then
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
serve_pid=$!
for _ in $(seq 1 100); do [ -s "$SCRATCH/port" ] && break; sleep 0.1; done
port=$(cat "$SCRATCH/port" 2>/dev/null)
if [ -n "$port" ] && curl -fsS "http://127.0.0.1:$port/healthz" >"$SCRATCH/health.txt" 2>&1; then
    echo "kace serve from the unit's ExecStart answers on port $port: $(head -c 80 "$SCRATCH/health.txt")"
else
    fail "kace serve from the unit's ExecStart did not answer"; cat "$SCRATCH/serve.log"
fi
kill "$serve_pid" 2>/dev/null
wait "$serve_pid" 2>/dev/null

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

# --- remove keeps the conffile, purge removes it ---
dpkgr -r kace >/dev/null 2>&1 || fail "dpkg -r"
[ ! -e "$R/usr/bin/kace" ] && [ ! -e "$R$plugins/job_submit_kace.so" ] || fail "dpkg -r left the binary or a plugin"
[ -f "$R/etc/kace/kace.conf" ] || fail "dpkg -r removed the conffile"
dpkgr -P kace >/dev/null 2>&1 || fail "dpkg -P"
[ ! -e "$R/etc/kace/kace.conf" ] || fail "dpkg -P kept the conffile"

[ $failures -eq 0 ] && echo "cli_package: all passed"
exit $((failures > 0))
