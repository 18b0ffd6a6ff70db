#!/usr/bin/env bash
# Gateway HA (issue 19): a VIP comes home by itself after a transient start failure on its
# gateway. Three gateways in one Pacemaker cluster with fencing on (tests/ha/lib.sh), VIPs
# on their home gateways:
#   - `cairn gateway ha setup` (which ha_configure ran on every gateway) refuses a broken
#     timeout budget, naming the values, and a --node list other than the cluster's,
#     changing nothing (the CIB's epoch stays);
#   - gw1 is drained (`cairn gateway ha drain gw1`): vip1 moves to another gateway;
#   - gw1's view of the recovery records' vip/ directory turns read-only (a read-only
#     tmpfs mounted over it in gw1's mount namespace: the kind of failure a mount that
#     briefly misbehaves gives), then gw1 is undrained: vip1's group starts on gw1, its
#     cairn-nfs-grace start fails ("Read-only file system"), Pacemaker bans vip1 from gw1
#     (a failed start is fatal on that node) and runs it elsewhere; `cairn gateway ha
#     status` names the failure;
#   - the fault is lifted (the tmpfs unmounted), and nobody runs `pcs resource cleanup`:
#     vip1 must go home to gw1 once the groups' failure-timeout (cib-resources
#     --vip-failure-timeout, 60 s) has passed. With no failure-timeout (before
#     2026-11-28) the ban stayed until a cleanup by hand;
#   - never two gateways hold one VIP; vip1 answers NFS on gw1 again.
set -euo pipefail
# shellcheck source=tests/ha/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HA_VIP_FAILURE_TIMEOUT=60 # cib-resources' default, the value shipped
t_start=$SECONDS
ha_cluster_up
ha_pass "3 gateways, fencing on, VIPs placed (cairn gateway ha setup on each: only the first changed something)"

# --- cairn gateway ha setup refuses, changing nothing ----------------------------------------
epoch() { ha_gw gw2 cibadmin -Q 2>/dev/null | grep -o ' epoch="[0-9]*"' | head -1; }
e0=$(epoch)
rc=0 out=$(ha_setup gw2 "${HA_SETUP_ARGS[@]}" --client-timeout 30 2>&1) || rc=$?
# corosync's running token: 3000 ms + token_coefficient 650 ms per node over two
[[ $rc == 2 && $out == *"timeout budget broken (nothing changed"* && $out == *"corosync token 3.65 s + consensus 4.38 s"* &&
    $out == *"= 43.03 s) must be shorter than the clients' I/O timeout (30 s, --client-timeout)"* ]] ||
    ha_fail "cairn gateway ha setup --client-timeout 30: rc=$rc (want 2 naming the budget's values): $out"
rc=0 out=$(ha_setup gw2 "${HA_SETUP_ARGS[@]}" --backend-timeout 8 2>&1) || rc=$?
[[ $rc == 2 && $out == *"backend failure detection (10 s, --backend-detection) must be shorter than the gateway health check's backend timeout (8 s, --backend-timeout)"* ]] ||
    ha_fail "cairn gateway ha setup --backend-timeout 8: rc=$rc (want 2): $out"
two=()
for ((i = 0; i < ${#HA_SETUP_ARGS[@]}; i++)); do
    [[ ${HA_SETUP_ARGS[i]} == --node && ${HA_SETUP_ARGS[i + 1]} == gw3=* ]] && { i=$((i + 1)) && continue; }
    [[ ${HA_SETUP_ARGS[i]} == --vip && ${HA_SETUP_ARGS[i + 1]} == "$(ha_vip gw3)" ]] && { i=$((i + 1)) && continue; }
    two+=("${HA_SETUP_ARGS[i]}")
done
rc=0 out=$(ha_setup gw2 "${two[@]}" 2>&1) || rc=$?
[[ $rc == 1 && $out == *"has the gateways gw1, gw2, gw3 but --node names gw1, gw2"* ]] ||
    ha_fail "cairn gateway ha setup with gw3 left out: rc=$rc (want 1 naming both lists): $out"
[[ $(epoch) == "$e0" ]] || ha_fail "a refused cairn gateway ha setup changed the CIB: $e0 -> $(epoch)"
ha_pass "cairn gateway ha setup refuses a broken timeout budget (naming the values) and another set of gateways; the CIB is unchanged"

# --- vip1 away from gw1 (a planned move) ------------------------------------------------------
out=$(ha_gw gw2 "$CAIRN_BIN_DIR/cairn" gateway ha drain gw1 --timeout 60 --json 2>&1) ||
    ha_fail "cairn gateway ha drain gw1: $out"
away=$(ha_where vip1)
[[ -n $away && $away != gw1 ]] || ha_fail "vip1 not moved off gw1 by the drain: '$away'; $out"
ha_pass "gw1 drained: vip1 runs on $away"

# --- the fault: gw1 cannot create the VIP's recovery directory ------------------------------
vipdir=/srv/cairn-ha/.cairn-ha/nfs/vip
ha_gw gw1 mount -t tmpfs -o ro,size=1m tmpfs "$vipdir" || ha_fail "cannot mount a read-only tmpfs on gw1's $vipdir"
faulty=1
lift_fault() {
    ((faulty)) || return 0
    ha_gw gw1 umount "$vipdir" || ha_fail "cannot unmount the read-only tmpfs from gw1's $vipdir"
    faulty=0
}
! ha_gw gw1 mkdir -p "$vipdir/$(ha_vip gw1)" 2>/dev/null || ha_fail "the fault does not take: mkdir in gw1's $vipdir works"

# gw1 serves again: vip1's group goes home, and its start fails there.
ha_gw gw2 pcs node unstandby gw1 >/dev/null 2>&1 || ha_fail "pcs node unstandby gw1 failed"
t0=$SECONDS seen=0
while ((SECONDS < t0 + 90)); do
    ha_one_holder_each
    if ha_status gw2 'any(f["node"] == "gw1" and f["operation"].startswith("vip1-grace_start")
        and "Read-only file system" in f["exit_reason"] for f in s["failures"])' 2>/dev/null; then
        seen=1
        break
    fi
    sleep 1
done
((seen)) || ha_fail "no failed start of vip1-grace on gw1 in cairn gateway ha status $((SECONDS - t0))s after the undrain: $(ha_gw gw2 crm_mon -1 2>&1 | tail -20)"
t_failed=$SECONDS
lift_fault
ha_pass "vip1's start on gw1 failed (cairn gateway ha status names 'Read-only file system') after $((t_failed - t0))s; fault lifted"

# --- Pacemaker runs vip1 elsewhere, then brings it home after the failure-timeout -------------
home='' t_home=0 other='' deadline=$((t_failed + HA_VIP_FAILURE_TIMEOUT + 60))
while ((SECONDS < deadline)); do
    ha_one_holder_each
    w=$(ha_where vip1)
    if [[ $w == gw1 ]]; then
        t_home=$SECONDS home=$((SECONDS - t_failed))
        break
    fi
    [[ -n $w ]] && other=$w
    sleep 1
done
[[ -n $home ]] ||
    ha_fail "vip1 did not go home to gw1 within $((HA_VIP_FAILURE_TIMEOUT + 60))s of its failed start (last on '$other'; no cleanup was run): $(ha_gw gw2 crm_mon -1 --failcounts 2>&1 | tail -25)"
[[ -n $other ]] || ha_fail "vip1 never ran on another gateway after its failed start on gw1"
# The failure came after the undrain (t0), so its timeout cannot end before t0 + timeout
# (t_failed is when this loop saw it, maybe late under load: not a lower bound).
((t_home - t0 >= HA_VIP_FAILURE_TIMEOUT - 1)) ||
    ha_fail "vip1 went home $((t_home - t0))s after the undrain, before the failure-timeout (${HA_VIP_FAILURE_TIMEOUT}s): was it banned at all?"
deadline=$((SECONDS + 60))
until ha_vips_placed; do
    ((SECONDS < deadline)) || ha_fail "VIPs not all home and answering 60s after vip1 went home: $(ha_where_all)"
    sleep 1
done
ha_one_holder_each
ha_pass "vip1 ran on $other, then went home to gw1 by itself ${home}s after the failed start (failure-timeout ${HA_VIP_FAILURE_TIMEOUT}s, no cleanup); all VIPs home and answering"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
