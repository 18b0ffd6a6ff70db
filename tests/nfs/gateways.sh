#!/usr/bin/env bash
# NFS gateway suite: handle stability across a Ganesha restart, two Ganesha instances over
# one volume (a change through one is seen through the other at once), and bad input
# (an export of a missing volume or subdir is refused with a clear message while the
# good exports keep working; a client outside the allowed clients is denied).
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nfs_suite_up vol0
nfs_exports_default vol0 >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
nfs_gw_start g2 "$CL_DIR/exports.conf"
pass "two ganesha instances on ports ${NFS_PORT[g1]} and ${NFS_PORT[g2]} over vol0"

# --- handle stability --------------------------------------------------------------------
nfs_client g1 4.1 mkdir /top || fail "mkdir /top"
nfs_client g1 4.1 mkdir /top/keep || fail "mkdir /top/keep"
nfs_client g1 4.1 write /top/keep/inside "x" || fail "write /top/keep/inside"
fh1=$(nfs_client g1 4.1 fh /top keep) || fail "get the handle of /top/keep"
fh_other=$(nfs_client g2 4.1 fh /top keep) || fail "get the handle of /top/keep through g2"
assert_eq "$fh1" "$fh_other" "the same file has the same handle on two gateways"
fh3=$(nfs_client g1 3 fh /top keep) || fail "get the NFSv3 handle of /top/keep"
fh3_other=$(nfs_client g2 3 fh /top keep) || fail "get the NFSv3 handle of /top/keep through g2"
assert_eq "$fh3" "$fh3_other" "the same file has the same NFSv3 handle on two gateways"
# statfh reads the directory through the handle alone (the path is only a label): a
# corrupt handle fails, so these checks can fail
# (the byte is inverted, not set: a handle that already holds 0xff there stays valid)
bad3=${fh3:0:20}$(printf '%02x' $((0x${fh3:20:2} ^ 0xff)))${fh3:22}
nfs_client g1 3 expect-error statfh /top/keep "$bad3" >/dev/null ||
    fail "a corrupt NFSv3 handle resolved"
# Walking up from a handle: after a restart Ganesha knows /top/keep only by its handle, and
# NFSv4 LOOKUPP (NFSv3 READDIR's "..") asks the FSAL for ".." (nfsacl.c sends the raw ops).
cc -Wall -Werror -O1 -o "$CL_DIR/nfs4raw" "$CL_REPO/tests/nfs/nfsacl.c" -lnfs ||
    fail "building tests/nfs/nfsacl.c against libnfs-dev"
v4raw() { "$CL_DIR/nfs4raw" "nfs://127.0.0.1/vol0?version=4&nfsport=${NFS_PORT[g1]}&uid=0&gid=0" "$@"; }
keep_fh=$(v4raw top/keep getfh) || fail "GETFH of /top/keep"
top_id=$(v4raw top fileid) || fail "fileid of /top"
root_id=$(v4raw "" fileid) || fail "fileid of the export root"
[[ $top_id != "$root_id" ]] || fail "/top and the export root have the same fileid ($top_id)"
nfs_gw_stop g1
nfs_gw_start g1 "$CL_DIR/exports.conf"
out=$(v4raw "" parent "${keep_fh#fh }") || fail "LOOKUPP from /top/keep's handle after a restart"
assert_eq "$top_id" "$out" "after a Ganesha restart, LOOKUPP from a directory's handle finds its real parent"
out=$(nfs_client g1 4.1 statfh /top/keep "$fh1") || fail "a v4 handle taken before the restart does not resolve"
assert_eq "1 inside" "$out" "v4.1 handle resolves after a Ganesha restart"
out=$(nfs_client g1 3 statfh /elsewhere "$fh3") || fail "a v3 handle taken before the restart does not resolve"
assert_eq "1 inside" "$out" "v3 handle resolves after a Ganesha restart"
cl_restart_node n1
sleep 2
out=$(nfs_client g1 4.1 statfh /top/keep "$fh1") || fail "handle does not resolve after a cairnd restart"
assert_eq "1 inside" "$out" "v4.1 handle resolves after a cairnd restart"
out=$(nfs_client g1 3 statfh /elsewhere "$fh3") || fail "a v3 handle does not resolve after a cairnd restart"
assert_eq "1 inside" "$out" "v3 handle resolves after a cairnd restart"
out=$(nfs_client g2 3 statfh /elsewhere "$fh3") || fail "g1's v3 handle does not resolve on g2"
assert_eq "1 inside" "$out" "a v3 handle from g1 resolves on g2 (after both restarts)"

# --- two gateways ------------------------------------------------------------------------
nfs_client g1 4.1 write /shared "version one" || fail "write through g1"
assert_eq "version one" "$(nfs_client g2 4.1 read /shared)" "g2 reads what g1 wrote"
nfs_client g1 4.1 write /shared "version two, longer" || fail "rewrite through g1"
assert_eq "version two, longer" "$(nfs_client g2 4.1 read /shared)" "g2 sees g1's overwrite at once"
nfs_client g1 3 write /shared "v3 rewrite" || fail "NFSv3 rewrite through g1"
assert_eq "v3 rewrite" "$(nfs_client g2 3 read /shared)" "g2 (v3) sees g1's v3 overwrite at once"
nfs_client g1 4.1 rename /shared /renamed || fail "rename through g1"
nfs_client g2 4.1 expect-error read /shared >/dev/null || fail "g2 still reads the old name after a rename through g1"
assert_eq "v3 rewrite" "$(nfs_client g2 4.1 read /renamed)" "g2 reads the new name after a rename through g1"
nfs_client g2 4.1 chmod /renamed 640 || fail "chmod through g2"
read -r _ mode _ <<<"$(nfs_client g1 4.1 stat /renamed)"
assert_eq "0o640" "$mode" "g1 sees g2's chmod"

# --- bad input ---------------------------------------------------------------------------
{
    cat "$CL_DIR/exports.conf"
    nfs_export_block 2 novol "$(cl_node_addr n1)" /novol
    nfs_export_block 3 vol0 "$(cl_node_addr n1)" /nosub 127.0.0.1 /no/such/dir
} >"$CL_DIR/bad.conf"
nfs_gw_stop g1
nfs_gw_start g1 "$CL_DIR/bad.conf"
grep -q "cannot mount volume novol" "${NFS_DIR[g1]}/ganesha.log" ||
    fail "no clear message for the export of a missing volume"
grep -q "no such directory in volume vol0" "${NFS_DIR[g1]}/ganesha.log" ||
    fail "no clear message for the export of a missing subdir"
pass "exports of a missing volume and a missing subdir are refused with a clear message"
assert_eq "v3 rewrite" "$(nfs_client g1 4.1 read /renamed)" "the good export keeps working next to refused ones"
nfs_client g1 4.1 --export /novol ls / >/dev/null 2>&1 && fail "the refused export /novol is reachable"
pass "the refused export is not served"

# A client outside the allowed clients is denied.
nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 10.99.99.99 >"$CL_DIR/deny.conf"
nfs_gw_stop g2
nfs_gw_start g2 "$CL_DIR/deny.conf"
if nfs-cat "$(nfs_url g2 /vol0/renamed)" >/dev/null 2>&1; then
    fail "NFSv3 client 127.0.0.1 outside Clients = 10.99.99.99 read a file"
fi
if nfs_client g2 4.1 read /renamed >/dev/null 2>&1; then
    fail "NFSv4.1 client 127.0.0.1 outside Clients = 10.99.99.99 read a file"
fi
pass "a client outside the export's clients is denied (v3 and v4.1)"

finish
