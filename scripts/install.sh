#!/usr/bin/env bash
# Install the built binaries, library, header and pkg-config file (`make install`).
# Usage: install.sh TARGET_DIR   (backend/target/release or .../debug)
# Env: PREFIX (/usr/local), DESTDIR (empty; for staging, skips ldconfig).
set -euo pipefail
CAIRN_LOG_TAG=install
# shellcheck source=scripts/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${1:?usage: install.sh TARGET_DIR}
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}
sbindir=$dest$prefix/sbin
bindir=$dest$prefix/bin
libdir=$dest$prefix/lib
incdir=$dest$prefix/include
pcdir=$libdir/pkgconfig

for f in cairnd cairn mount-cairn libcairn.so; do
    [[ -f $target/$f ]] || die "$target/$f is missing: run 'make build' first"
done

# Copy to a temporary name and rename, so a running binary is replaced, not overwritten.
put() {
    local mode=$1 src=$2 dst=$3
    install -D -m "$mode" "$src" "$dst.new"
    mv -f "$dst.new" "$dst"
}

put 0755 "$target/cairnd" "$sbindir/cairnd"
put 0755 "$target/mount-cairn" "$sbindir/mount.cairn"
ln -sfn mount.cairn "$sbindir/mount.fuse.cairn"
put 0755 "$target/cairn" "$bindir/cairn"
put 0755 "$target/libcairn.so" "$libdir/libcairn.so"

# cairn.h: wherever libcairn's build leaves it; else generate it with cbindgen if libcairn
# has a cbindgen.toml.
header=
for h in "$repo/backend/libcairn/include/cairn.h" "$repo/backend/libcairn/cairn.h" \
    "$target/include/cairn.h" "$target/cairn.h"; do
    if [[ -f $h ]]; then
        header=$h
        break
    fi
done
if [[ -z $header && -f $repo/backend/libcairn/cbindgen.toml ]]; then
    header=$repo/build/cairn.h
    mkdir -p "$repo/build"
    (cd "$repo/backend/libcairn" && cbindgen --quiet --config cbindgen.toml --output "$header")
fi
if [[ -n $header ]]; then
    put 0644 "$header" "$incdir/cairn.h"
else
    log "warning: no cairn.h found (libcairn does not generate one yet): not installed"
fi

# cairn.pc from libcairn's template, if there is one.
pcin=$repo/backend/libcairn/cairn.pc.in
if [[ -f $pcin ]]; then
    version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$repo/backend/Cargo.toml" | head -n1)
    mkdir -p "$pcdir"
    sed -e "s|@PREFIX@|$prefix|g; s|@prefix@|$prefix|g" \
        -e "s|@LIBDIR@|$prefix/lib|g; s|@libdir@|$prefix/lib|g" \
        -e "s|@INCLUDEDIR@|$prefix/include|g; s|@includedir@|$prefix/include|g" \
        -e "s|@VERSION@|$version|g; s|@version@|$version|g" \
        "$pcin" >"$pcdir/cairn.pc.new"
    mv -f "$pcdir/cairn.pc.new" "$pcdir/cairn.pc"
else
    log "warning: backend/libcairn/cairn.pc.in does not exist yet: cairn.pc not installed"
fi

if [[ -z $dest ]] && command -v ldconfig >/dev/null; then
    ldconfig
fi
log "installed cairnd, mount.cairn (+ mount.fuse.cairn) in $prefix/sbin, cairn in $prefix/bin, libcairn.so in $prefix/lib"
