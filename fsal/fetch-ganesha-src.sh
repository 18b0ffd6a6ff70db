#!/usr/bin/env bash
# Fetch the Debian source of the installed nfs-ganesha and generate its config.h with
# cmake (nothing else is built). Usage: fetch-ganesha-src.sh VERSION SRC_DIR CMAKE_DIR
# Needs a deb-src entry for bookworm (see docs/nfs.md); the Debian packaging tarball may be
# missing from the mirror, only the upstream orig tarball is needed.
set -euo pipefail
version=$1 src=$2 cmake_dir=$3
upstream=${version%-*}
upstream=${upstream#*:}

if [[ -z $(compgen -G "$src/nfs-ganesha-*/src/include/fsal_api.h") ]]; then
    mkdir -p "$src"
    orig=$src/nfs-ganesha_$upstream.orig.tar.gz
    if [[ ! -f $orig ]]; then
        (cd "$src" && apt-get source --download-only -qq "nfs-ganesha=$version") || true
    fi
    if [[ ! -f $orig ]]; then
        echo "fetch-ganesha-src: could not download the source of nfs-ganesha $version" >&2
        echo "  add a deb-src entry (Types: deb-src) for bookworm and run apt-get update" >&2
        exit 1
    fi
    tar -C "$src" -xzf "$orig"
fi
tree=$(compgen -G "$src/nfs-ganesha-*/src" | head -n1)

# Options matching Debian's build where they change structure layouts (NFSv3, NLM,
# RQUOTA, NFSACL, 9P, DBus, GSS are on in Debian's ganesha); all FSALs off.
mkdir -p "$cmake_dir"
fsals=()
for f in PROXY_V4 PROXY_V3 VFS LUSTRE LIZARDFS KVSFS CEPH GPFS XFS GLUSTER NULL RGW MEM; do
    fsals+=("-DUSE_FSAL_$f=OFF")
done
if ! cmake -S "$tree" -B "$cmake_dir" -DUSE_SYSTEM_NTIRPC=ON "${fsals[@]}" \
    -DUSE_LTTNG=OFF -DUSE_RADOS_RECOV=OFF -DRADOS_URLS=OFF -DUSE_GUI_ADMIN_TOOLS=OFF \
    -DUSE_ACL_MAPPING=ON -DUSE_MAN_PAGE=OFF >"$cmake_dir/cmake.log" 2>&1; then
    tail -n 30 "$cmake_dir/cmake.log" >&2
    echo "fetch-ganesha-src: cmake failed; see $cmake_dir/cmake.log" >&2
    exit 1
fi
[[ -f $cmake_dir/include/config.h ]] || { echo "fetch-ganesha-src: no config.h generated" >&2; exit 1; }
touch "$cmake_dir/include/config.h"
