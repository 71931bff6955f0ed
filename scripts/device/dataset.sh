#!/usr/bin/env bash
# A device campaign's store archive as the dataset folder kept in the
# repository (data/h200), written by `kace export --dataset`; this script only
# unpacks the archive (kace.db and visits.tsv, the calls' GPU, driver, CUDA
# and torch) and keeps it in the folder for the next call's --store.
#
#   bash scripts/device/dataset.sh [--kace BIN] STORE.tar.gz DEST [--replace]
#   bash scripts/device/dataset.sh [--kace BIN] --verify DEST
#
# DEST's profiles/, colocations/, campaign/ and README.md are replaced, only
# when the store continues DEST's campaign: one GPU model, every call DEST
# holds (campaign/visits.tsv); --replace starts DEST again. --verify fails
# unless DEST is exactly what its campaign/store.tar.gz gives, and it imports.
set -uo pipefail
KACE=${KACE_BIN:-build/kace}
VERIFY=0 REPLACE=0 ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
    --kace) KACE=$2; shift 2 ;;
    --verify) VERIFY=1; shift ;;
    --replace) REPLACE=1; shift ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
    esac
done
die() { echo "dataset.sh: $*" >&2; exit 1; }
[ ${#ARGS[@]} = $((2 - VERIFY)) ] || { sed -n '7,8p' "$0" >&2; exit 2; }
DEST=${ARGS[-1]%/}
SRC=${ARGS[0]}
[ $VERIFY = 1 ] && SRC=$DEST/campaign/store.tar.gz
[ -f "$SRC" ] || die "$SRC: no such file"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kace-dataset.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/st" && tar -C "$TMP/st" -xzf "$SRC" || die "cannot unpack $SRC"
[ -f "$TMP/st/kace.db" ] || die "$SRC holds no kace.db"
CALLS=()
[ -f "$TMP/st/visits.tsv" ] && CALLS=(--calls "$TMP/st/visits.tsv")
if [ $VERIFY = 1 ]; then exec "$KACE" export --dataset --verify --db "$TMP/st/kace.db" "${CALLS[@]}" "$DEST"; fi

# The GPU models of a calls file (its second field up to the first comma), one a line.
gpus() { [ -f "$1" ] && awk -F'\t' 'NF >= 2 { sub(/,.*/, "", $2); if ($2 != "unknown") print $2 }' "$1" | sort -u; }
new=$(gpus "$TMP/st/visits.tsv")
[ "$(grep -c . <<<"$new")" -le 1 ] || die "$SRC mixes GPU models ($(paste -sd, <<<"$new" | sed 's/,/, /g')): a dataset is one GPU model's"
if [ $REPLACE = 0 ] && [ -f "$DEST/campaign/visits.tsv" ]; then
    old=$(gpus "$DEST/campaign/visits.tsv")
    [ -z "$new" ] || [ -z "$old" ] || [ "$new" = "$old" ] ||
        die "$SRC was measured on $new and $DEST holds $old's: write it into a folder of its own; nothing written"
    n=$(wc -l <"$DEST/campaign/visits.tsv")
    head -n "$n" "$TMP/st/visits.tsv" 2>/dev/null | cmp -s - "$DEST/campaign/visits.tsv" ||
        die "$SRC does not continue $DEST's campaign: the $n calls of $DEST/campaign/visits.tsv are not all in it; nothing written (pass --replace to start $DEST again)"
fi
"$KACE" export --dataset --quiet --db "$TMP/st/kace.db" "${CALLS[@]}" "$TMP/new" || die "kace export failed; nothing written"
cp "$SRC" "$TMP/new/campaign/store.tar.gz" || exit 1
mkdir -p "$DEST" && rm -rf "$DEST/profiles" "$DEST/colocations" "$DEST/campaign" "$DEST/ncu" "$DEST/README.md" &&
    cp -r "$TMP/new/." "$DEST/" || die "cannot write $DEST"
"$KACE" export --dataset --verify --db "$TMP/st/kace.db" "${CALLS[@]}" "$DEST"
