#!/usr/bin/env bash
# Unpack the tcmu-runner source the handler is built against (tcmu-runner ships no -dev
# package with its handler header) into DEST (default build/tcmu-src), pinned to the
# version Debian bookworm installs. Adds a bookworm deb-src entry if apt has none.
#
#   iscsi/fetch-tcmu-src.sh [DEST]     prints the source directory on success
set -euo pipefail

TCMU_DEB_VERSION=${TCMU_DEB_VERSION:-1.5.4-4.1}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
dest=${1:-$repo/build/tcmu-src}
upstream=${TCMU_DEB_VERSION%-*}
src=$dest/tcmu-$upstream

if [[ -f $src/.cairn-version && $(cat "$src/.cairn-version") == "$TCMU_DEB_VERSION" ]]; then
    echo "$src"
    exit 0
fi

have_deb_src() {
    grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/
}
if ! have_deb_src; then
    [[ $(id -u) == 0 ]] || {
        echo "fetch-tcmu-src: no deb-src entry in apt's sources and not root to add one" >&2
        exit 1
    }
    cat >/etc/apt/sources.list.d/cairn-deb-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq >&2
fi
command -v dpkg-source >/dev/null || {
    echo "fetch-tcmu-src: dpkg-source missing (apt-get install dpkg-dev)" >&2
    exit 1
}

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get source -qq --download-only "tcmu-runner=$TCMU_DEB_VERSION" >&2) || {
    echo "fetch-tcmu-src: apt-get source tcmu-runner=$TCMU_DEB_VERSION failed" \
        "(apt-get update? is the deb-src entry for bookworm there?)" >&2
    exit 1
}
rm -rf "$src"
dpkg-source -x "$tmp/tcmu_$TCMU_DEB_VERSION.dsc" "$src" >&2
echo "$TCMU_DEB_VERSION" >"$src/.cairn-version"
echo "$src"
