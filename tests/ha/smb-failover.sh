#!/usr/bin/env bash
# Gateway HA suite (issue 19, SMB): three gateways in one Pacemaker cluster (fencing on,
# tests/ha/fence_cairn_ns), each running Ganesha and a clustered smbd (vfs_cairn) on CTDB
# whose cluster lock is in etcd (appliance/ha/ctdb-etcd-reclock); CTDB owns no address:
# the per-gateway VIPs of Pacemaker serve NFS and SMB. SMB writers (smbprotocol, a
# reconnecting client as Windows is) in client namespaces. Checks:
#   - the cluster lock: exactly one CTDB node holds it, in etcd;
#   - share modes are one table across the gateways: a deny-write open through one gateway
#     makes a write open through another fail with STATUS_SHARING_VIOLATION;
#   - kill -9 of a whole gateway namespace: its VIP moves, the SMB writer on it reconnects
#     and goes on (within 45 s: reset by tickle ACKs, not by its 60 s request timeout), the
#     writer on another VIP never stalls, the dead gateway is fenced;
#   - a planned move (node standby) of a VIP with an SMB writer on it: no client error, a
#     pause under 20 s (a client waiting for an answer is reset by tickle ACKs);
#   - every acknowledged record reads back byte for byte over SMB through another gateway
#     and through a FUSE mount of the volume; no VIP is held by two gateways.
# Prints `failover smb <kind> resumed_s=.. errors=.. lost=.. estale=..` lines and saves them
# to tests/ha/results/last-run-smb.txt.
set -euo pipefail
# shellcheck source=tests/ha/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t_start=$SECONDS
ha_init
ha_smb_prereqs
ha_cairn_up
ha_clients_up
ha_gateways_up
ha_smb_up
ha_fencing_xml >"$HA_DIR/fencing.xml"
HA_SMB=true HA_STONITH=true HA_FENCE_XML=$HA_DIR/fencing.xml ha_configure
ha_pass "3 gateways (corosync + pacemaker + ganesha + ctdb + clustered smbd) formed a cluster with fencing on; VIPs on their home gateways"

# --- the cluster lock: one holder, in etcd ---------------------------------------------------
reclock_holder() {
    ha_in etcd curl -s -m 5 "http://${HA_IP[etcd]}:2379/v3/kv/range" -d \
        "{\"key\":\"$(printf %s "$HA_RECLOCK_KEY" | base64)\"}" |
        python3 -c 'import base64, json, sys; kv = json.load(sys.stdin).get("kvs", []); print(base64.b64decode(kv[0]["value"]).decode() if kv else "")'
}
holder=$(reclock_holder)
[[ $holder == gw[123]:* ]] || ha_fail "the CTDB cluster lock $HA_RECLOCK_KEY is not held in etcd (value '$holder')"
leader=$(ha_gw gw1 ctdb leader 2>/dev/null) || ha_fail "ctdb leader on gw1"
[[ ${holder%%:*} == "gw$((leader + 1))" ]] ||
    ha_fail "the cluster lock is held by ${holder%%:*} but the CTDB leader is pnn $leader"
ha_pass "the CTDB cluster lock is held in etcd by the leader (${holder%%:*})"
# the helper's answers to CTDB: '1' while another node holds the lock, '3' (and why, on
# stderr) when etcd cannot be reached
reclock=$HA_REPO/appliance/ha/ctdb-etcd-reclock
out=$(ha_gw gw3 timeout 20 "$reclock" "http://${HA_IP[etcd]}:2379" "$HA_RECLOCK_KEY" 5 2>&1) || true
[[ $out == 1 ]] || ha_fail "ctdb-etcd-reclock while ${holder%%:*} holds the lock: '$out' (want '1', contention)"
out=$(ha_gw gw3 timeout 20 "$reclock" "http://$HA_NET.99:2379" "$HA_RECLOCK_KEY" 5 2>&1) || true
[[ $out == *"cannot take lock $HA_RECLOCK_KEY"*3 || $out == 3*"cannot take lock $HA_RECLOCK_KEY"* ]] ||
    ha_fail "ctdb-etcd-reclock with etcd unreachable: '$out' (want '3' and the reason)"
ha_pass "ctdb-etcd-reclock answers contention ('1') and an unreachable etcd ('3', with the reason)"
ha_status gw3 'rc == 0 and s["healthy"] == ["gw1", "gw2", "gw3"] and
    [n["state"] for n in s["ctdb"]["nodes"]] == ["OK"] * 3 and s["ctdb"]["leader"] == '"$leader" ||
    ha_fail "cairn gateway ha status does not show the healthy cluster with CTDB's nodes and leader"
ha_pass "cairn gateway ha status --json: 3 healthy gateways, 3 CTDB nodes OK, leader pnn $leader"

# --- writers --------------------------------------------------------------------------------
vip1=$(ha_vip gw1) vip2=$(ha_vip gw2) vip3=$(ha_vip gw3)
declare -A W_VIP=([s1]=vip1 [s2]=vip2)
ha_smb_writer c1 s1 "$vip1" >/dev/null
ha_smb_writer c2 s2 "$vip2" >/dev/null
for ((i = 0; i < 30; i++)); do
    (($(acked s1) >= 10 && $(acked s2) >= 10)) && break
    sleep 1
done
(($(acked s1) >= 10 && $(acked s2) >= 10)) ||
    ha_fail "SMB writers not writing after 30s: s1=$(acked s1) s2=$(acked s2) ($(tail -n 3 "$HA_DIR"/log/writer-*.log))"
ha_pass "SMB writers running: s1 on vip1 (gw1), s2 on vip2 (gw2)"
# share modes are one table across the gateways (CTDB; kernel share modes = no): s2's file
# opened with deny-write through vip2 cannot be opened for writing through vip3
out=$(ha_in c1 "$HA_VENV/bin/python" "$HA_LIB/smb_writer.py" sharemode --host "$vip2" --other "$vip3" \
    --share vol0 --user "$HA_SMB_USER" --password "$HA_SMB_PASS" --path ha-sharemode --log /dev/null 2>&1) ||
    ha_fail "share modes across gateways: $out"
ha_pass "a deny-write open through gw2 refuses a write open through gw3 (share modes in CTDB)"
sleep 2

# --- unplanned: kill -9 of gw1 ---------------------------------------------------------------
t_kill=$(date +%s.%N)
n=$(ha_power_off gw1)
ha_log "gw1 powered off: cable cut, $n processes killed (SIGKILL)"
# (a write in flight at the kill may be acknowledged just after it: wait for vip1 to run on
# a live gateway, then for a write acknowledged after that)
took='' t_took=''
for ((i = 0; i < 180; i++)); do
    if [[ -z $took ]]; then
        w=$(ha_where vip1)
        [[ -n $w && $w != gw1 ]] && took=$w t_took=$(date +%s.%N)
    fi
    [[ -n $took ]] && (($(acked_since s1 "$t_took") > 0)) && break
    sleep 0.5
done
{ [[ -n $took ]] && (($(acked_since s1 "$t_took") > 0)); } ||
    ha_fail "the SMB writer of vip1 did not resume within 90s of gw1's death (vip1 on '${took:-nowhere}'): $(ha_where_all); $(tail -n 3 "$HA_DIR/res/s1.jsonl")"
ha_pass "vip1 moved to $took and its SMB writer reconnected and resumed"
sleep 3
hist=$(ha_gw "$took" stonith_admin --history gw1 2>&1) || true
[[ $hist == *"reboot of gw1"*"successful"* || $hist == *"off of gw1"*"successful"* ]] ||
    ha_fail "gw1 was not fenced: $hist"
ha_pass "gw1 was fenced by fence_cairn_ns ($(grep -m1 -o '[a-z]* of gw1 successful' <<<"$hist"))"
# CTDB on the survivors: gw1 disconnected, a live leader that holds the cluster lock (a dead
# leader's lease in etcd expired, HA_RECLOCK_TTL)
for ((i = 0; i < 30; i++)); do
    holder=$(reclock_holder)
    leader=$(ha_gw "$took" ctdb leader 2>/dev/null) || leader=''
    [[ -n $leader && $holder == "gw$((leader + 1)):"* && $leader != 0 ]] && break
    sleep 1
done
[[ -n $leader && $leader != 0 && $holder == "gw$((leader + 1)):"* ]] ||
    ha_fail "after gw1's death, the CTDB cluster lock is held by '$holder' and the leader is pnn '$leader' (want a live gateway)"
ha_status "$took" '[n["state"] for n in s["ctdb"]["nodes"]] == ["DISCONNECTED", "OK", "OK"] and s["ctdb"]["leader"] == '"$leader" ||
    ha_fail "cairn gateway ha status on $took does not show gw1 disconnected from CTDB"
ha_pass "CTDB: gw1 disconnected, leader pnn $leader (${holder%%:*}) holds the cluster lock in etcd; status shows it"
t_planned=$(date +%s.%N)

# --- planned: standby of the node holding vip2 -----------------------------------------------
from=$(ha_where vip2)
moving="vip2"
[[ $(ha_where vip1) == "$from" ]] && moving="vip1+vip2"
ha_gw "$took" crm_attribute --node "$from" --name standby --update on ||
    ha_fail "crm_attribute standby $from"
for ((i = 0; i < 60; i++)); do
    w=$(ha_where vip2)
    [[ -n $w && $w != "$from" ]] && break
    sleep 1
done
[[ -n $w && $w != "$from" ]] || ha_fail "vip2 did not leave $from (standby) in 60s"
t_moved=$(date +%s.%N)
for ((i = 0; i < 120; i++)); do
    (($(acked_since s1 "$t_moved") > 0 && $(acked_since s2 "$t_moved") > 0)) && break
    sleep 0.5
done
(($(acked_since s1 "$t_moved") > 0 && $(acked_since s2 "$t_moved") > 0)) ||
    ha_fail "SMB writers did not both resume after the planned move of $moving from $from"
ha_pass "planned move ($from on standby) of $moving to $(ha_where vip2)"
sleep 3
t_end=$(date +%s.%N)
touch "$HA_DIR/res/stop"
for pid in "${HA_BG_PIDS[@]}"; do
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done

# --- one holder per VIP ------------------------------------------------------------------------
for v in "$vip1" "$vip2" "$vip3"; do
    holders=()
    for gw in gw1 gw2 gw3; do
        ha_alive "$gw" || continue
        addrs=$(ha_gw "$gw" ip -o addr show dev eth0)
        [[ $addrs == *" $v/"* ]] && holders+=("$gw")
    done
    ((${#holders[@]} == 1)) || ha_fail "VIP $v is held by ${#holders[@]} gateways (${holders[*]})"
done
ha_pass "every VIP is held by exactly one gateway"

# --- verification: over SMB through vip3, and through gw3's FUSE mount ------------------------
writers=()
for w in s1 s2; do
    out=$(ha_in c1 "$HA_VENV/bin/python" "$HA_LIB/smb_writer.py" verify --host "$vip3" --share vol0 \
        --user "$HA_SMB_USER" --password "$HA_SMB_PASS" --path "ha-$w" --log "$HA_DIR/res/$w.jsonl" 2>&1) ||
        ha_fail "SMB writer $w (on ${W_VIP[$w]}): acknowledged writes lost (read over SMB through $vip3): $out"
    lost=$(sed -n 's/.*lost=\([0-9]*\).*/\1/p' <<<"$out")
    fuse=$(ha_gw gw3 "$HA_VENV/bin/python" "$HA_LIB/smb_writer.py" verify --local /srv/cairn-ha/smb \
        --path "ha-$w" --log "$HA_DIR/res/$w.jsonl" 2>&1) ||
        ha_fail "SMB writer $w (on ${W_VIP[$w]}): acknowledged writes lost (read through gw3's FUSE mount): $fuse"
    writers+=(--writer "$w:smb:${W_VIP[$w]}:$HA_DIR/res/$w.jsonl:${lost:-0}")
    ha_log "SMB writer $w (on ${W_VIP[$w]}): over SMB $out; FUSE $fuse"
done
ha_pass "every acknowledged SMB write reads back byte for byte over SMB through $vip3 and through FUSE"

ha_report last-run-smb.txt "$t_kill:$t_planned:vip1" "$t_planned:$t_end:$moving" "${writers[@]}"
python3 - "$HA_REPORT_JSON" <<'PY' || ha_fail "failover checks failed (above)"
import json, sys
bad = []
for r in json.loads(sys.argv[1]):
    who = f'{r["protocol"]} writer {r["writer"]} on {r["vip"]} ({r["kind"]})'
    if r["lost"]:
        bad.append(f"{who}: {r['lost']} acknowledged records lost")
    if r["resumed_s"] is None:
        bad.append(f"{who}: never resumed")
    if r["errors"]:
        bad.append(f"{who}: {r['errors']} errors {r['error_kinds']}")
    if r["moved"] and r["kind"] == "unplanned" and (r["resumed_s"] or 0) > 45:
        # the target is 15 s; without tickle ACKs the client waits for its request timeout
        # (60 s, Windows' SessTimeout): a stall this long means the reset did not come
        bad.append(f"{who}: resumed only after {r['resumed_s']}s (tickle ACKs not received?)")
    if r["moved"] and r["kind"] == "planned" and (r["resumed_s"] or 0) > 20:
        # a client waiting for an answer from the old node never hears it is gone unless
        # the tickle ACKs reset it: without them it sits out its request timeout (60 s)
        bad.append(f"{who}: paused {r['resumed_s']}s in a planned move (tickle ACKs not received?)")
    if not r["moved"] and r["retries"]:
        bad.append(f"{who}: its VIP did not move but it reconnected {r['retries']} times {r['retry_kinds']}")
    if not r["moved"] and (r["max_gap_s"] or 0) > 3:
        bad.append(f"{who}: its VIP did not move but it stalled {r['max_gap_s']}s")
for b in bad:
    print("not ok - " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
ha_pass "nothing lost, no SMB error (reconnects only), the other VIP's writer never stalled"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
