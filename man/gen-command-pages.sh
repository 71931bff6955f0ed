#!/usr/bin/env bash
# Writes a man page kace-<command>.1 for every command `kace --help` lists,
# from that command's --help text (so the pages never drift from the binary).
#
#   man/gen-command-pages.sh KACE_BINARY OUT_DIR VERSION
set -euo pipefail
kace=$1 out=$2 version=$3
mkdir -p "$out"
# roff: a backslash is \e; a line may not start with '.' or "'".
escape() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
"$kace" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { name = $1; $1 = ""; sub(/^ +/, ""); print name "\t" $0 }' |
while IFS=$'\t' read -r cmd summary; do
    page=$out/kace-$cmd.1
    help=$("$kace" "$cmd" --help 2>&1 || true)
    {
        printf '.TH KACE-%s 1 "2026-11-24" "kace %s" "kace manual"\n' "$(echo "$cmd" | tr a-z A-Z)" "$version"
        printf '.SH NAME\nkace-%s \\- %s\n' "$cmd" "$(printf '%s' "$summary" | escape)"
        printf '.SH SYNOPSIS\n.B kace %s\n[\\fIoptions\\fR]\n' "$cmd"
        printf '.SH DESCRIPTION\nThe text of\n.BR "kace %s --help" :\n.PP\n.nf\n' "$cmd"
        printf '%s\n' "$help" | escape
        printf '.fi\n.SH SEE ALSO\n.BR kace (1);\nthe documents in\n.IR /usr/share/doc/kace/docs .\n'
    } >"$page"
done
