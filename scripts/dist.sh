#!/usr/bin/env bash
# Pack what a Cairn node needs from a build into one tarball, laid out from / (`make dist`;
# ansible/roles/common unpacks it on the image and on plain Debian hosts).
# Usage: dist.sh TARGET_DIR OUT_TARBALL   (TARGET_DIR: backend/target/release or .../debug)
#
# Holds: cairnd, mount.cairn (+ mount.fuse.cairn), cairn, libcairn.so.1 (+ libcairn.so),
# cairn.h and cairn.pc under /usr/local (scripts/install.sh with DESTDIR); the gateway
# modules in their hosts' module dirs: FSAL_CAIRN (make -C fsal), vfs_cairn (make -C
# vfs-module), handler_cairn (make -C iscsi), built against TARGET_DIR's libcairn; and the
# appliance: cairn-appliance, its Python package, systemd units, the scripts/ helpers it
# reuses, and docs/appliance.md; the gateway HA helpers (/usr/lib/cairn/ha, the OCF agents
# in /usr/lib/ocf/resource.d/cairn, /usr/sbin/fence_cairn). A manifest (sha256 of every file) is at
# /usr/local/share/cairn/MANIFEST.
set -euo pipefail
CAIRN_LOG_TAG=dist
# shellcheck source=scripts/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
target=$(realpath "${1:?usage: dist.sh TARGET_DIR OUT_TARBALL}")
out=$(realpath -m "${2:?usage: dist.sh TARGET_DIR OUT_TARBALL}")
[[ -f $target/libcairn.so ]] || die "$target/libcairn.so is missing: build the backend first (make build)"

stage=$(mktemp -d "${TMPDIR:-/tmp}/cairn-dist.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# --- backend: the same files `make install` puts in /usr/local ---------------------------
DESTDIR=$stage PREFIX=/usr/local "$repo/scripts/install.sh" "$target" >&2
# the library under its SONAME, the dev name a link to it
mv "$stage/usr/local/lib/libcairn.so" "$stage/usr/local/lib/libcairn.so.1"
ln -s libcairn.so.1 "$stage/usr/local/lib/libcairn.so"

# --- gateway modules, built against this libcairn ----------------------------------------
log "building FSAL_CAIRN, vfs_cairn and handler_cairn against $target"
make -s -C "$repo/fsal" LIBCAIRN_DIR="$target" >&2 ||
    die "make -C fsal failed (needs nfs-ganesha and its prepared source tree: make deps)"
make -s -C "$repo/fsal" install LIBCAIRN_DIR="$target" DESTDIR="$stage" \
    FSAL_DIR=/usr/lib/x86_64-linux-gnu/ganesha >&2
make -s -C "$repo/vfs-module" CAIRN_LIB_DIR="$target" >&2 ||
    die "make -C vfs-module failed (needs Samba's prepared source tree: make deps)"
make -s -C "$repo/vfs-module" install CAIRN_LIB_DIR="$target" DESTDIR="$stage" \
    SAMBA_MODULES_DIR=/usr/lib/x86_64-linux-gnu/samba >&2
make -s -C "$repo/iscsi" LIBDIR="$target" >&2 ||
    die "make -C iscsi failed (needs tcmu-runner's source: make deps)"
make -s -C "$repo/iscsi" install LIBDIR="$target" DESTDIR="$stage" \
    HANDLER_DIR=/usr/lib/x86_64-linux-gnu/tcmu-runner >&2

# --- the appliance -----------------------------------------------------------------------
lib=$stage/usr/local/lib/cairn-appliance
install -d "$lib/cairn_appliance" "$lib/scripts" "$stage/usr/local/lib/systemd/system" \
    "$stage/usr/local/share/doc/cairn" "$stage/usr/local/share/cairn"
install -m 0644 "$repo"/appliance/lib/cairn_appliance/*.py "$lib/cairn_appliance/"
install -m 0755 "$repo/appliance/bin/cairnd-start" "$repo/appliance/bin/cairn-wait-port" "$lib/"
install -m 0755 "$repo/appliance/bin/cairn-appliance" "$stage/usr/local/sbin/cairn-appliance"
# first boot renders ganesha.conf as `make up` does, and makes etcd's certificates with etcd-tls.sh
install -m 0644 "$repo/scripts/common.sh" "$repo/scripts/nfs-ganesha.sh" "$repo/scripts/etcd-tls.sh" "$lib/scripts/"
cp -r "$repo"/appliance/systemd/. "$stage/usr/local/lib/systemd/system/"
find "$stage/usr/local/lib/systemd/system" -type f -exec chmod 0644 {} +
[[ ! -f $repo/docs/appliance.md ]] || install -m 0644 "$repo/docs/appliance.md" "$stage/usr/local/share/doc/cairn/"

# --- gateway HA (docs/ha.md): what `cairn gateway ha setup` runs (the renderers), the OCF
# agents, the backend fence agent (stonith agents are found in /usr/sbin), portblock's shims
ha=$stage/usr/lib/cairn/ha
install -d "$ha/bin" "$stage/usr/lib/ocf/resource.d/cairn" "$stage/usr/sbin"
install -m 0755 "$repo"/appliance/ha/{cib-resources,ganesha-ha-conf,ctdb-etcd-reclock,fence_cairn} "$ha/"
install -m 0755 "$repo"/appliance/ha/bin/* "$ha/bin/"
install -m 0755 "$repo"/appliance/ha/ocf/* "$stage/usr/lib/ocf/resource.d/cairn/"
ln -s /usr/lib/cairn/ha/fence_cairn "$stage/usr/sbin/fence_cairn"

version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$repo/backend/Cargo.toml" | head -n1)
commit=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
echo "cairn $version ($commit)" >"$stage/usr/local/share/cairn/VERSION"
(cd "$stage" && find . -type f ! -path ./usr/local/share/cairn/MANIFEST -printf '%P\0' | sort -z |
    xargs -0 sha256sum) >"$stage/usr/local/share/cairn/MANIFEST"

for f in usr/local/sbin/cairnd usr/local/sbin/mount.cairn usr/local/bin/cairn \
    usr/local/lib/libcairn.so.1 usr/local/include/cairn.h \
    usr/lib/x86_64-linux-gnu/ganesha/libfsalcairn.so \
    usr/lib/x86_64-linux-gnu/samba/vfs/cairn.so \
    usr/lib/x86_64-linux-gnu/tcmu-runner/handler_cairn.so \
    usr/local/sbin/cairn-appliance usr/local/lib/systemd/system/cairnd.service; do
    [[ -e $stage/$f ]] || die "the tarball would lack /$f"
done

mkdir -p "$(dirname "$out")"
# Members are usr/... (no "./" entry: extracting that into / would give / the stage's
# mode); unpack with: tar -xzf TARBALL -C / --no-overwrite-dir
tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name -czf "$out.tmp" usr
mv -f "$out.tmp" "$out"
log "wrote $out ($(du -h "$out" | cut -f1), cairn $version $commit)"
