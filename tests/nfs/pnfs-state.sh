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
#     the same when the node comes back and its bricks are up again. A FILES device
#     whose DS was n2's still names n2's DS after n2 stopped (a device never changes),
#     and the file's new layout names n1's DS through another device.
# About 80-100 s.
set -euo pipefail
# shellcheck source=tests/nfs/lib-pnfs.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-pnfs.sh"

LEASE=10
pnfs_up $LEASE
pass "MDS on port ${NFS_PORT[mds]} (lease $LEASE s), DSs on ${DS_PORT[n1]} and ${DS_PORT[n2]}"

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
# a FILES device names one brick's DS, so what a client cached of it never changes (RFC
# 8881 12.2.10): a file whose head is on n2, its device asked for again once n2 stopped
imm_dev=""
for i in 0 1 2 3 4 5 6 7; do
    out=$(state --export /vol0 layout "imm-$i") || { echo "$out" >&2; fail "FILES layout of imm-$i"; }
    if [[ $(sed -n 's/^layout //p' <<<"$out") == "${DS_PORT[n2]}" ]]; then
        imm_file=imm-$i
        imm_dev=$(sed -n 's/^devices //p' <<<"$out")
        break
    fi
done
[[ -n $imm_dev ]] || fail "none of 8 files has its FILES layout at n2's DS"
hold_layouts down
t0=$SECONDS
cl_stop_node n2 || fail "stopping n2"
check_recalled down "n2 stopping"
pass "n2 stopped: the FILES and Flexible Files layouts were recalled (CB_LAYOUTRECALL of the file, layout changed) and returned within $((SECONDS - t0)) s"
out=$(state --export /vol0 device "$imm_dev")
[[ $out == "device ${DS_PORT[n2]}" ]] ||
    fail "the FILES device $imm_dev of $imm_file named n2's DS (${DS_PORT[n2]}) before n2 stopped and '$out' after: a device must not change"
out=$(state --export /vol0 layout "$imm_file") || { echo "$out" >&2; fail "FILES layout of $imm_file after n2 stopped"; }
[[ $(sed -n 's/^layout //p' <<<"$out") == "${DS_PORT[n1]}" && $(sed -n 's/^devices //p' <<<"$out") != "$imm_dev" ]] ||
    { echo "$out" >&2; fail "the FILES layout of $imm_file after n2 stopped: want n1's DS (${DS_PORT[n1]}) through another device than $imm_dev"; }
pass "a FILES device stays the same (n2's DS) after n2 stopped; $imm_file's new layout names n1's DS through another device"
# n2 comes back: its bricks heal and come up again (the chains change back)
hold_layouts up
t0=$SECONDS
cl_start_node n2
check_recalled up "n2 coming back"
pass "n2 back: the layouts granted while it was down were recalled and returned within $((SECONDS - t0)) s"
grep -q "recalling the layouts of a file" "${NFS_DIR[mds]}/ganesha.log" ||
    fail "the MDS logged no layout recall"

finish
