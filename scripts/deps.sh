#!/usr/bin/env bash
# Install what building, running and testing Cairn needs (`make deps`). Idempotent:
# `apt-get update` runs only when a package is missing. The package list is DEB_PACKAGES
# in the Makefile, passed as arguments.
set -euo pipefail
CAIRN_LOG_TAG=deps
# shellcheck source=scripts/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MIN_CARGO=${MIN_CARGO:-1.80}

installed() {
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]
}

install_debs() {
    local missing=() p sudo=()
    for p in "$@"; do
        installed "$p" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing Debian packages: ${missing[*]}"
    if [[ $(id -u) != 0 ]]; then
        command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# version_ge A B: version A >= version B (dotted numbers).
version_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }

check_rust() {
    local v
    # The machine image provides Rust through rustup in ~/.cargo/bin; Debian's cargo/rustc
    # are too old for this workspace, and rustup's downloads are not reachable from here.
    command -v cargo >/dev/null ||
        die "cargo not found: Cairn needs Rust >= $MIN_CARGO (rustup's toolchain in ~/.cargo/bin, as the machine image provides; Debian's cargo is too old)"
    v=$(cargo --version | awk '{print $2}')
    version_ge "${v%%-*}" "$MIN_CARGO" ||
        die "cargo $v is too old: Cairn needs Rust >= $MIN_CARGO (rustup's toolchain, as the machine image provides)"
    cargo fmt --version >/dev/null 2>&1 || die "cargo fmt (rustfmt) is missing from the Rust toolchain"
    cargo clippy --version >/dev/null 2>&1 || die "cargo clippy is missing from the Rust toolchain"
}

# The gateway modules build against the Debian source of the installed Ganesha, Samba and
# tcmu-runner (`apt-get source`): make sure a deb-src entry for bookworm exists.
ensure_deb_src() {
    grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
    log "adding a deb-src entry for bookworm (/etc/apt/sources.list.d/cairn-deb-src.sources)"
    cat >/etc/apt/sources.list.d/cairn-deb-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
}

ensure_deb_src
install_debs "$@"
check_rust
[[ -e /dev/fuse ]] || log "warning: /dev/fuse is missing: mounts (make up, integration tests) will fail"
