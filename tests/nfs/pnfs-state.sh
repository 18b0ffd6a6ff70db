#!/usr/bin/env bash
# pNFS layout state over time (docs/nfs.md "pNFS"): a 2-node 2 x 2 cluster, a DS Ganesha
# per node and an MDS Ganesha (/vol0 FILES, /vol0ff Flexible Files) with a 10 s lease,
# driven by tests/nfs/pnfs_state.py (a raw NFSv4.1 client with a back channel).
#  1. Layout stateids used again: LAYOUTGET READ/RW with the layout stateid, LAYOUTRETURN
#     with an ff_ioerr4 report (the MDS logs it, with the brick and node), LAYOUTERROR (what a Linux Flexible Files client sends
#     after a DS died); then clients that go away holding such layouts, whose leases the
#     MDS's reaper expires. Ganesha 4.3 dropped one reference of the layout state too many
#     per LAYOUTGET with a layout stateid (the state was freed while still listed, and the
#     reaper aborted on its mutex: the pnfs VM scenario's FF data-server kill); the FSAL
#     makes up for it (fsal/mds.c). The MDS must stay up and keep granting layouts.
#  2. Layout recalls: a client holding a layout gets CB_LAYOUTRECALL when a node of the
#     file's replica set stops (its chain head or mirror list changes), and returns it;
#     the same when the node comes back and its bricks are up again.
# About 80-100 s.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nfs_prereqs
cluster_up 2 vol0 2 4
trap 'rc=$?; set +e; nfs_cleanup_all; (exit $rc); cl_cleanup' EXIT

declare -A DS_PORT=()
for node in n1 n2; do
    dir=$CL_DIR/ds-$node
    DS_PORT[$node]=$(free_port)
    NFS_DIR[ds-$node]=$dir
    NFS_GWS+=("ds-$node")
    mkdir -p "$dir"
    {
        nfs_ds_export_block 1 vol0 "$(cl_node_addr "$node")" /vol0
        nfs_ds_export_block 3 vol0 "$(cl_node_addr "$node")" /vol0ff
    } >"$dir/ds.conf"
    nfs_render_ds_config "$dir" "${DS_PORT[$node]}" "$dir/ds.conf" "$NFS_PLUGINS"
    nfs_start_ganesha "$dir" "${DS_PORT[$node]}" || fail "DS ganesha on $node did not start"
done
ds_addrs="n1=127.0.0.1:${DS_PORT[n1]},n2=127.0.0.1:${DS_PORT[n2]}"
{
    nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW No_Root_Squash none \
        "$ds_addrs"
    nfs_export_block 3 vol0 "$(cl_node_addr n1)" /vol0ff 127.0.0.1 / RW No_Root_Squash none \
        "$ds_addrs" flexfiles
} >"$CL_DIR/exports.conf"
LEASE=10
NFS_LEASE_LIFETIME=$LEASE nfs_gw_start mds "$CL_DIR/exports.conf"
mds_pid=$(cat "${NFS_DIR[mds]}/ganesha.pid.self")
pass "MDS on port ${NFS_PORT[mds]} (lease $LEASE s), DSs on ${DS_PORT[n1]} and ${DS_PORT[n2]}"

state() { python3 "$CL_REPO/tests/nfs/pnfs_state.py" --port "${NFS_PORT[mds]}" "$@"; }
# mds_alive WHAT: the MDS Ganesha still runs (else its log's last lines, and fail)
mds_alive() {
    if ! kill -0 "$mds_pid" 2>/dev/null; then
        tail -n 20 "${NFS_DIR[mds]}/ganesha.log" >&2
        fail "the MDS Ganesha died: $1"
    fi
}

# 1. layout stateids used again, error reports, clients that go away
out=$(state --export /vol0ff --flexfiles reuse 3 --prefix ff-ret-) ||
    { echo "$out" >&2; fail "Flexible Files: layout stateid used again, returned"; }
echo "$out"
out=$(state --export /vol0 reuse 3 --prefix files-ret-) ||
    { echo "$out" >&2; fail "FILES: layout stateid used again, returned"; }
echo "$out"
mds_alive "after LAYOUTGETs with layout stateids and FF LAYOUTRETURN reports"
# the reports name the first mirror's device (a brick of the file's set) and the error
n=$(grep -c "a client reports that the data server of brick [0-9]* (node n[12], set [0-9]*) failed WRITE with NFS4ERR_NXIO at 0+18446744073709551615" \
    "${NFS_DIR[mds]}/ganesha.log" || true)
((n == 3)) || fail "the MDS logged $n of the 3 ff_ioerr4 reports (FSAL_CAIRN's layoutreturn)"
pass "LAYOUTGET with the layout stateid (READ, RW, READ), LAYOUTRETURN (FF: with an ff_ioerr4 report, logged with its brick and node), CLOSE: the MDS stays up"
out=$(state --export /vol0ff --flexfiles reuse 3 --prefix ff-away- --go-away) ||
    { echo "$out" >&2; fail "Flexible Files: a client that goes away"; }
echo "$out"
out=$(state --export /vol0 reuse 3 --prefix files-away- --go-away) ||
    { echo "$out" >&2; fail "FILES: a client that goes away"; }
echo "$out"
# the reaper runs every lease / 2 and expires a client one lease after its last renewal
t0=$SECONDS
while ((SECONDS - t0 < 3 * LEASE + 5)); do
    mds_alive "while the reaper expired clients that went away holding reused layouts ($((SECONDS - t0)) s after they left)"
    sleep 1
done
out=$(state --export /vol0ff --flexfiles probe) || { echo "$out" >&2; fail "a LAYOUTGET after the expiry"; }
out=$(state --export /vol0 probe) || { echo "$out" >&2; fail "a LAYOUTGET after the expiry"; }
mds_alive "after the expiry"
! grep -E "Layout state not destroyed|Could not complete cleanup" "${NFS_DIR[mds]}/ganesha.log" ||
    fail "the MDS could not clean up the expired clients' layouts (above)"
pass "two clients went away holding reused layouts: $((3 * LEASE + 5)) s later (their leases expired) the MDS is up and grants layouts"

# 2. layout recalls: a client holding a FILES and one holding a Flexible Files layout;
# node n2 stops, so every set loses a brick (a new chain head or one mirror less)
# hold_layouts NAME: a FILES and a Flexible Files holder of files NAME-files, NAME-ff, each
# answering CB_LAYOUTRECALL (HOLDERS: their pids), once they have their layouts
hold_layouts() {
    local t
    HOLDERS=()
    state --export /vol0 hold "$1-files" --ready "$CL_DIR/ready-$1-files" --timeout 60 \
        >"$CL_DIR/hold-$1-files.out" 2>&1 &
    HOLDERS+=($!)
    state --export /vol0ff --flexfiles hold "$1-ff" --ready "$CL_DIR/ready-$1-ff" --timeout 60 \
        >"$CL_DIR/hold-$1-ff.out" 2>&1 &
    HOLDERS+=($!)
    for t in files ff; do
        wait_until 30 test -s "$CL_DIR/ready-$1-$t" ||
            { cat "$CL_DIR/hold-$1-$t.out" >&2; fail "$1-$t holder: no layout"; }
    done
}
# check_recalled NAME WHAT: both holders of hold_layouts NAME were recalled and returned
check_recalled() {
    local t
    wait "${HOLDERS[@]}" || true
    for t in files ff; do
        cat "$CL_DIR/hold-$1-$t.out"
        grep -q "^recalled .* file " "$CL_DIR/hold-$1-$t.out" ||
            fail "$1-$t: no CB_LAYOUTRECALL within 60 s of $2"
        grep -q "^returned " "$CL_DIR/hold-$1-$t.out" || fail "$1-$t: the recalled layout was not returned"
        ! grep -q "recall-of-another-file" "$CL_DIR/hold-$1-$t.out" || fail "$1-$t: a recall named another file"
    done
    mds_alive "after the recalls of $2"
}
hold_layouts down
t0=$SECONDS
cl_stop_node n2 || fail "stopping n2"
check_recalled down "n2 stopping"
pass "n2 stopped: the FILES and Flexible Files layouts were recalled (CB_LAYOUTRECALL of the file, layout changed) and returned within $((SECONDS - t0)) s"
# n2 comes back: its bricks heal and come up again (the chains change back)
hold_layouts up
t0=$SECONDS
cl_start_node n2
check_recalled up "n2 coming back"
pass "n2 back: the layouts granted while it was down were recalled and returned within $((SECONDS - t0)) s"
grep -q "recalling the layouts of a file" "${NFS_DIR[mds]}/ganesha.log" ||
    fail "the MDS logged no layout recall"

finish
