#!/usr/bin/env bash
# pNFS FILES and Flexible Files layouts (docs/nfs.md "pNFS"): a 2-node 2 x 2 cluster, an
# MDS Ganesha whose /vol0 export has PNFS = true (FILES) and /vol0ff Layout = flexfiles,
# and a DS Ganesha per node (FSAL_CAIRN in DS mode over that node's cairnd). tests/nfs/pnfs.py (a raw NFSv4.1 client) gets layouts and devices,
# decodes them against RFC 8881's XDR, writes and reads at the DS the device names first
# (checked to be the file's chain head), LAYOUTCOMMITs, reads back through the MDS, and
# sends the bad input (directory, symlink, FIFO, iomode, range, layout type, stateid,
# commit size) the server must refuse; then the Flexible Files layouts and devices (RFC
# 8435) the same way, reading every mirror. The data is then compared through the FUSE mount,
# and a DS handle is read again after its DS restarted. About 30-60 s.
set -euo pipefail
# shellcheck source=tests/nfs/lib-pnfs.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-pnfs.sh"

pnfs_ds_up
pass "a DS per node: n1 on port ${DS_PORT[n1]}, n2 on port ${DS_PORT[n2]}"

{
    nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW No_Root_Squash none \
        "$DS_ADDRS"
    nfs_export_block 2 vol0 "$(cl_node_addr n1)" /vol0np 127.0.0.1 / RW No_Root_Squash none
    nfs_export_block 3 vol0 "$(cl_node_addr n1)" /vol0ff 127.0.0.1 / RW No_Root_Squash none \
        "$DS_ADDRS" flexfiles
} >"$CL_DIR/exports.conf"
nfs_gw_start mds "$CL_DIR/exports.conf"
pass "MDS on port ${NFS_PORT[mds]}: /vol0 with PNFS = true, /vol0np without, /vol0ff with Flexible Files"

mkdir "$CL_MNT/pdir"
ln -s pdir "$CL_MNT/plink"
mkfifo "$CL_MNT/pfifo"
export PNFS_OUT=$CL_DIR/pnfs-data
mkdir -p "$PNFS_OUT"
# volume create puts bricks round-robin: each set is [n1's brick, n2's brick], so a
# file's chain starts on n1 for rotation 0 and on n2 for rotation 1
files=small:1000,empty:0,mid:300001,big:3145728
if ! python3 "$CL_REPO/tests/nfs/pnfs.py" --mds "${NFS_PORT[mds]}" --export /vol0 \
    --plain-export /vol0np --ds "n1=${DS_PORT[n1]},n2=${DS_PORT[n2]}" \
    --head-node-of-rotation n1,n2 --files "$files" --special plink,pfifo,pdir \
    --ff-export /vol0ff --race-dir "$CL_MNT" --keep-fh "$CL_DIR/kept-fh" >"$CL_DIR/pnfs.out" 2>&1; then
    cat "$CL_DIR/pnfs.out" >&2
    fail "pnfs.py: $(grep -c '^FAIL' "$CL_DIR/pnfs.out" || true) failed checks (above)"
fi
cat "$CL_DIR/pnfs.out"
pass "layouts, devices, DS I/O and bad input: $(tail -n1 "$CL_DIR/pnfs.out")"

IFS=, read -ra specs <<<"$files"
for spec in "${specs[@]}"; do
    name=${spec%%:*}
    cmp "$PNFS_OUT/$name" "$CL_MNT/$name" || fail "$name through FUSE differs from what the DS wrote"
    assert_eq "$(stat -c %s "$CL_MNT/$name")" "${spec#*:}" "$name: size through FUSE"
    # pnfs.py's LAYOUTCOMMIT reported mtime 2000000000.000000005 (later than now)
    assert_eq "$(stat -c %Y "$CL_MNT/$name")" 2000000000 "$name: LAYOUTCOMMIT's mtime through FUSE"
done
assert_eq "$(stat -c %s "$CL_MNT/grown")" 65536 "grown: LAYOUTCOMMIT's size through FUSE"
pass "the data written at the DSs reads back identical through FUSE (${#specs[@]} files); LAYOUTCOMMIT's size and mtime are the backend's"
for spec in "${specs[@]}"; do
    name=ff-${spec%%:*}
    cmp "$PNFS_OUT/$name" "$CL_MNT/$name" || fail "$name through FUSE differs from what the FF mirror wrote"
    assert_eq "$(stat -c %s "$CL_MNT/$name")" "${spec#*:}" "$name: size through FUSE"
done
pass "the data written through Flexible Files layouts reads back identical through FUSE (${#specs[@]} files)"

# DS handles survive a restart of the DS (they carry the volume and inode ids only)
read -r _ kept_port _ <"$CL_DIR/kept-fh"
for node in n1 n2; do
    if [[ ${DS_PORT[$node]} == "$kept_port" ]]; then
        nfs_stop_ganesha "$CL_DIR/ds-$node"
        ds_start "$node"
    fi
done
out=$(python3 "$CL_REPO/tests/nfs/pnfs.py" --mds "${NFS_PORT[mds]}" --export /vol0 \
    --plain-export /vol0np --ds x=0 --head-node-of-rotation x --files x:0 --special a,b,c \
    --reuse-fh "$CL_DIR/kept-fh" 2>&1) || { echo "$out" >&2; fail "DS handle after a DS restart"; }
echo "$out"
pass "a DS handle kept across its DS's restart still reads the file"

finish
