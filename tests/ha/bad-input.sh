#!/usr/bin/env bash
# Gateway HA bad input (issue 19): a gateway cut off from the bricks. Three gateways in
# one Pacemaker cluster with fencing on (tests/ha/lib.sh: fence_cairn, then the power
# fence fence_cairn_ns), an NFSv3 writer on vip1 (gw1) and an NFSv4.1 writer on vip2 (gw2).
# gw1's packets to the brick node are dropped (iptables in gw1's namespace: a partition,
# nothing answers, not even a reset) while every other path stays up (corosync, clients):
#   - gw1's health check fails ("no cairnd ... answers for volume vol0") and Pacemaker
#     stops vip1's group there and starts it on another gateway; gw1 is not fenced: no
#     stop of the group waits for the volume (portblock's tickle lists are local, shared
#     through the volume in the background by appliance/ha/bin/cairn-tickle-sync; with
#     the lists on the volume the stop hung, gw1 was fenced, and vip1 moved after 51 s);
#   - the writer of vip1 resumes there; the writer of vip2 never stalls over 3 s;
#   - never two gateways hold one VIP; every acknowledged record reads back (lost=0),
#     no ESTALE.
# Prints `failover nfs3 unplanned ...` lines and saves them to
# tests/ha/results/last-run-bad-input.txt.
set -euo pipefail
# shellcheck source=tests/ha/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t_start=$SECONDS
export HA_BACKEND_FENCE=1
ha_cluster_up
ha_pass "3 gateways, fencing on (fence_cairn + fence_cairn_ns), VIPs placed"

vip1=$(ha_vip gw1) vip2=$(ha_vip gw2)
ha_writer c1 a 3 "$vip1" >/dev/null
ha_writer c2 b 4.1 "$vip2" >/dev/null
ha_writers_wait a b
ha_pass "writers running: NFSv3 on vip1 (gw1), NFSv4.1 on vip2 (gw2)"

# --- gw1 cut off from the brick node ---------------------------------------------------------
n1=${HA_IP[n1]}
ha_gw gw1 iptables -I OUTPUT -d "$n1" -j DROP || ha_fail "iptables in gw1's namespace"
ha_gw gw1 iptables -I INPUT -s "$n1" -j DROP || ha_fail "iptables in gw1's namespace"
t_cut=$(date +%s.%N) t0=$SECONDS
ha_log "gw1 cut off from the brick node $n1"
took='' seen=0
for ((i = 0; i < 120; i++)); do
    ha_one_holder_each
    if ((!seen)); then
        for gw in gw2 gw3; do
            ha_status "$gw" 'any(f["node"] == "gw1" and "answers for volume vol0" in f["exit_reason"] for f in s["failures"])' 2>/dev/null &&
                seen=1 && break
        done
    fi
    took=$(ha_holders "$vip1" | tr -d '\n')
    [[ -n $took && $took != gw1 ]] && break
    sleep 1
done
[[ -n $took && $took != gw1 ]] ||
    ha_fail "vip1 not moved off gw1 $((SECONDS - t0))s after gw1 was cut off from the bricks: holders '$took'; $(ha_gw gw2 crm_mon -1 2>&1 | tail -20)"
t_moved=$(date +%s.%N) moved_s=$((SECONDS - t0))
fenced=no
hist=$(ha_gw "$took" stonith_admin --history gw1 2>&1) || true
[[ $hist == *"of gw1"*"successful"* ]] && fenced=yes
for ((i = 0; i < 60; i++)); do
    (($(acked_since a "$t_moved") > 0)) && break
    sleep 0.5
done
(($(acked_since a "$t_moved") > 0)) || ha_fail "the writer of vip1 did not resume within 30s of vip1's move to $took"
[[ $fenced == no ]] || ha_fail "gw1 was fenced: a stop of vip1's group hung on the unreachable volume: $hist"
ha_pass "gw1 cut off from the bricks: vip1 moved to $took after ${moved_s}s (gw1 fenced: $fenced; status named the backend failure: $([[ $seen == 1 ]] && echo yes || echo no)); its NFSv3 writer resumed"

# Watched for 20 s more: vip1 stays off gw1, no VIP on two gateways.
for ((i = 0; i < 20; i++)); do
    ha_one_holder_each
    [[ $(ha_holders "$vip1") != gw1 ]] || ha_fail "vip1 went back to gw1, which still cannot reach the bricks"
    sleep 1
done
ha_pass "vip1 stays off gw1 while it is cut off; never two holders of a VIP"

ha_writers_stop
t_end=$(date +%s.%N)

# --- the data ---------------------------------------------------------------------------------
ha_verify c2 "$vip2" a:nfs3:vip1 b:nfs4.1:vip2
ha_report_check last-run-bad-input.txt "$t_cut:$t_end:vip1" 3
ha_pass "every acknowledged record reads back through vip2; no ESTALE, nothing lost, the writer of vip2 never stalled"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
