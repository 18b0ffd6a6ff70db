#!/usr/bin/env bash
# Prepare the Samba source tree vfs_cairn compiles against: the source package of the
# *installed* samba (`apt-get source samba=VERSION`), configured once and cached under
# build/samba-VERSION/, plus the generated headers a VFS module includes (pidl output,
# param tables, ntstatus/werror tables). Only those are generated: nothing of Samba itself
# is compiled. Prints the tree's path. Idempotent: a finished tree has .cairn-prepared.
#
# Needs: a deb-src entry for the Debian suite (see docs/smb.md), dpkg-dev, the build deps
# listed in SAMBA_BUILD_DEPS below.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
version=$(dpkg-query -W -f='${Version}' samba 2>/dev/null) ||
    { echo "samba is not installed (apt-get install samba)" >&2; exit 1; }
upstream=${version#*:}          # 2:4.17.12+dfsg-0+deb12u4 -> 4.17.12+dfsg-0+deb12u4
upstream_src=${upstream%-*}      # -> 4.17.12+dfsg
top=$repo/build/samba-$upstream
tree=$top/samba-$upstream_src
log() { echo "prepare-samba: $*" >&2; }

if [[ -f $tree/.cairn-prepared ]]; then
    echo "$tree"
    exit 0
fi

SAMBA_BUILD_DEPS="dpkg-dev libtalloc-dev libtevent-dev libtdb-dev libldb-dev libpopt-dev
  zlib1g-dev flex bison libacl1-dev libattr1-dev libcap-dev libtirpc-dev libbsd-dev
  libjansson-dev libarchive-dev libparse-yapp-perl libicu-dev pkg-config libgnutls28-dev
  libkeyutils-dev libreadline-dev"
missing=$(for p in $SAMBA_BUILD_DEPS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [[ -n $missing ]]; then
    log "installing build deps: ${missing//$'\n'/ }"
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
fi

mkdir -p "$top"
if [[ ! -d $tree ]]; then
    log "fetching samba=$version sources"
    (cd "$top" && apt-get source -qq "samba=$version" >&2)
fi

cd "$tree"
if [[ ! -f bin/c4che/_cache.py ]]; then
    log "configuring (takes a few minutes)"
    PYTHONHASHSEED=1 ./configure \
        --without-ad-dc --without-ldap --without-ads --without-pam --disable-python \
        --without-systemd --without-json --without-libarchive --without-gpgme \
        --without-ldb-lmdb --disable-cups --disable-iprint --without-winbind \
        --without-quotas --with-profiling-data --with-cluster-support \
        --bundled-libraries=NONE,ldb,cmocka --enable-fhs --prefix=/usr \
        --sysconfdir=/etc --localstatedir=/var \
        --with-modulesdir=/usr/lib/x86_64-linux-gnu/samba \
        --with-lockdir=/run/samba --with-piddir=/run/samba --with-statedir=/var/lib/samba \
        --with-cachedir=/var/cache/samba --with-privatedir=/var/lib/samba/private \
        >"$top/configure.log" 2>&1 ||
        { tail -n 20 "$top/configure.log" >&2; exit 1; }
fi

log "generating headers"
"$repo/vfs-module/gen-headers.sh" "$tree" >"$top/gen-headers.log" 2>&1 ||
    { tail -n 20 "$top/gen-headers.log" >&2; exit 1; }
touch "$tree/.cairn-prepared"
echo "$tree"
