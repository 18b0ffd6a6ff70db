#!/usr/bin/env bash
# Share modes between NFS and SMB over one volume: smbd with vfs_cairn and 'kernel share
# modes = yes' (the module's filesystem_sharemode takes reservations on the backend) and
# a Ganesha with FSAL_CAIRN, both on one cluster. An NFSv4 deny mode refuses a
# conflicting SMB open and an open SMB file refuses an NFS OPEN that denies what it
# does; CLOSE on either side lifts it (nfs-sharemodes.py).
set -uo pipefail
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/nfs/lib.sh
. "$CL_REPO/tests/nfs/lib.sh"

SMB_CAIRN_EXTRA="kernel share modes = yes"
smb_up 1
nfs_prereqs
trap 'rc=$?; set +e; nfs_cleanup_all; (exit $rc); smb_cleanup' EXIT
nfs_exports_default vol0 >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
pass "smbd (kernel share modes = yes) on port $SMB_PORT and ganesha on ${NFS_PORT[g1]} over vol0"

smbclient_cmd="smbclient //127.0.0.1/vol0 -p $SMB_PORT -s $SMB_CONF -m SMB3 -U $SMB_USER%$SMB_PASS"
if ! python3 "$CL_REPO/tests/smb/nfs-sharemodes.py" --nfs-port "${NFS_PORT[g1]}" \
    --export /vol0 --smbclient "$smbclient_cmd" --smbstatus "smbstatus -L -s $SMB_CONF" \
    >"$CL_DIR/nfs-sharemodes.out" 2>&1; then
    cat "$CL_DIR/nfs-sharemodes.out" >&2
    fail "NFS against SMB share modes: $(grep -c '^FAIL' "$CL_DIR/nfs-sharemodes.out") failed checks (above)"
fi
cat "$CL_DIR/nfs-sharemodes.out"
pass "NFS against SMB share modes: $(tail -n1 "$CL_DIR/nfs-sharemodes.out")"

finish
