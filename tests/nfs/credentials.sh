#!/usr/bin/env bash
# The FSAL block's Credentials (docs/nfs.md): Ganesha connects to the cluster with the
# credential it names, not the one of its environment (here the admin's). With a client
# certificate limited to another volume, or a gateway certificate held to another volume,
# the export cannot mount its volume, and Ganesha says why; with a gateway-role certificate
# held to its volume (as site.yml and first boot issue them) it serves the volume.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nfs_suite_up vol0
echo "served with the gateway credential" >"$CL_MNT/f"
cairn_cli client certificate issue gw1 --role gateway --volumes vol0 --out "$CL_DIR/gw1.pem" >/dev/null ||
    fail "issue gw1 (role gateway, vol0 only)"
cairn_cli client certificate issue gw2 --role gateway --volumes other --out "$CL_DIR/gw2.pem" >/dev/null ||
    fail "issue gw2 (role gateway, volume other only)"
cairn_cli client certificate issue elsewhere --volumes other --out "$CL_DIR/elsewhere.pem" >/dev/null ||
    fail "issue elsewhere"

# with_credentials FILE: the default export block, its FSAL connecting with FILE.
with_credentials() {
    nfs_exports_default vol0 | sed "s|Name = CAIRN;|Name = CAIRN; Credentials = \"$1\";|"
}

with_credentials "$CL_DIR/elsewhere.pem" >"$CL_DIR/exports.conf"
grep -q "Credentials = " "$CL_DIR/exports.conf" || fail "could not add Credentials to the export block"
nfs_gw_start g1 "$CL_DIR/exports.conf"
if out=$(timeout 30 nfs-cat "$(nfs_url g1 /vol0/f)" 2>&1); then
    fail "the export served vol0 with a certificate limited to volume 'other': $out"
fi
grep -rq "only volume(s) other" "$CL_DIR/ganesha-g1/" ||
    fail "ganesha does not say why the export did not mount: $(grep -rh CAIRN "$CL_DIR/ganesha-g1/" | tail -3)"
pass "FSAL Credentials = a client certificate for volume 'other': the export of vol0 is refused"
nfs_gw_stop g1

with_credentials "$CL_DIR/gw2.pem" >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
if out=$(timeout 30 nfs-cat "$(nfs_url g1 /vol0/f)" 2>&1); then
    fail "the export served vol0 with a gateway certificate held to volume 'other': $out"
fi
grep -rq "gateway gw2.*only volume(s) other" "$CL_DIR/ganesha-g1/" ||
    fail "ganesha does not say why the export did not mount: $(grep -rh CAIRN "$CL_DIR/ganesha-g1/" | tail -3)"
pass "FSAL Credentials = a gateway certificate held to volume 'other': the export of vol0 is refused"
nfs_gw_stop g1

with_credentials "$CL_DIR/gw1.pem" >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
out=$(nfs-cat "$(nfs_url g1 /vol0/f)") || fail "nfs-cat with the gateway credential"
assert_eq "served with the gateway credential" "$out" "NFSv3 read through the gateway-credential export"
pass "FSAL Credentials = a gateway certificate held to vol0: ganesha serves vol0 with it"

finish
