#!/usr/bin/env bash
# NFSv4 share reservations (OPEN share_access / share_deny) through FSAL_CAIRN: on one
# Ganesha and across two over one volume (the one-gateway cases also against a stock
# FSAL_VFS export, which must pass them too), v4.0 and v4.1, driven by a raw NFSv4 client
# (sharemodes.py over nfs4raw.py: nfs-rs cannot ask for deny modes). Conflicting OPENs
# get NFS4ERR_SHARE_DENIED, READ/WRITE against a deny without an open that grants them
# NFS4ERR_LOCKED, a replayed OPEN succeeds, CLOSE and the death of a gateway (kill -9)
# release what it held.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nfs_suite_up vol0
LOCAL=$CL_DIR/local
mkdir -p "$LOCAL"
{
    nfs_exports_default vol0
    # the stock server: the same cases against FSAL_VFS validate the checks
    cat <<CONF
EXPORT {
    Export_Id = 2; Path = "$LOCAL"; Pseudo = "/local"; Protocols = 3, 4;
    Transports = TCP; SecType = sys; Access_Type = None; Squash = No_Root_Squash;
    CLIENT { Clients = 127.0.0.1; Access_Type = RW; }
    FSAL { Name = VFS; }
}
CONF
} >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
nfs_gw_start g2 "$CL_DIR/exports.conf"
pass "two ganesha instances on ports ${NFS_PORT[g1]} and ${NFS_PORT[g2]} over vol0 (+ /local on FSAL_VFS)"

if ! python3 "$CL_REPO/tests/nfs/sharemodes.py" --export /local --gw1 "${NFS_PORT[g1]}" --stock \
    >"$CL_DIR/sharemodes-stock.out" 2>&1; then
    cat "$CL_DIR/sharemodes-stock.out" >&2
    fail "the stock server (FSAL_VFS) fails $(grep -c '^FAIL' "$CL_DIR/sharemodes-stock.out") share checks: broken checks (above)"
fi
pass "stock FSAL_VFS export, one gateway: $(tail -n1 "$CL_DIR/sharemodes-stock.out")"

kill_g1="kill -9 $(cat "${NFS_DIR[g1]}/ganesha.pid.self")"
if ! python3 "$CL_REPO/tests/nfs/sharemodes.py" --export /vol0 \
    --gw1 "${NFS_PORT[g1]}" --gw2 "${NFS_PORT[g2]}" --kill-gw1 "$kill_g1" \
    >"$CL_DIR/sharemodes.out" 2>&1; then
    cat "$CL_DIR/sharemodes.out" >&2
    fail "share reservations: $(grep -c '^FAIL' "$CL_DIR/sharemodes.out") failed checks (above)"
fi
cat "$CL_DIR/sharemodes.out"
pass "share reservations: $(tail -n1 "$CL_DIR/sharemodes.out")"
# g1 was killed: the EXIT trap only has g2 left to stop
nfs_gw_stop g1 >/dev/null 2>&1 || true

finish
