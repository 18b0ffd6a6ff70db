#!/usr/bin/env bash
# Gateway HA bad input (issue 19): etcd unreachable while a gateway dies. Three gateways in
# one Pacemaker cluster with fencing on: level 1 = fence_cairn (the backend record, stored
# in etcd through cairnd) + fence_cairn_ns (the power fence), level 2 = the power fence
# alone (docs/ha.md, "Fencing"). An NFSv3 writer on vip2 (gw2) and an NFSv4.1 writer on
# vip1 (gw1). etcd's cable is cut, then gw2 is powered off:
#   - level 1 cannot store a record, level 2 fences gw2 (stonith history: successful), and
#     no fence record of gw2 exists once etcd is back (the power fence alone did it);
#   - meanwhile cairnd cannot renew its lease and stops serving (docs/failure-model.md),
#     so every gateway's backend check fails: `cairn gateway ha status` names it, and
#     no VIP is ever held by two gateways;
#   - once etcd is back, the backend and the gateways recover by themselves: vip2 runs on a
#     live gateway, both writers resume, every acknowledged record reads back, no ESTALE.
# Prints `failover ...` lines and saves them to tests/ha/results/last-run-etcd-down.txt.
set -euo pipefail
# shellcheck source=tests/ha/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t_start=$SECONDS
export HA_BACKEND_FENCE=1
ha_cluster_up
ha_pass "3 gateways, fencing levels: fence_cairn + fence_cairn_ns, then fence_cairn_ns alone; VIPs placed"

vip1=$(ha_vip gw1) vip2=$(ha_vip gw2)
ha_writer c1 a 3 "$vip2" >/dev/null
ha_writer c2 b 4.1 "$vip1" >/dev/null
ha_writers_wait a b
ha_pass "writers running: NFSv3 on vip2 (gw2), NFSv4.1 on vip1 (gw1)"

# --- etcd unreachable, then gw2 dies ---------------------------------------------------------
ip -n "$HA_NS-sw" link set sw-etcd down
t_cut=$(date +%s.%N) t0=$SECONDS
ha_log "etcd cut off"
sleep 1
ha_power_off gw2 >/dev/null
ha_log "gw2 powered off"
fenced=0 seen=0
for ((i = 0; i < 150; i++)); do
    ha_one_holder_each
    if ((!seen)); then
        ha_status gw1 'any("answers for volume vol0" in f["exit_reason"] for f in s["failures"]) and rc == 1' 2>/dev/null && seen=1
    fi
    if ((!fenced)); then
        hist=$(ha_gw gw1 stonith_admin --history gw2 2>&1) || true
        [[ $hist == *"of gw2"*"successful"* ]] && fenced=1 && t_fenced=$((SECONDS - t0))
    fi
    ((fenced && seen)) && break
    sleep 1
done
((fenced)) || ha_fail "gw2 not fenced $((SECONDS - t0))s after it died with etcd unreachable: $hist"
((seen)) || ha_fail "cairn gateway ha status never named the unreachable backend: $(ha_gw gw1 "$CAIRN_BIN_DIR/cairn" gateway ha status 2>&1 | tail -15)"
ha_pass "etcd unreachable, gw2 powered off: gw2 fenced after ${t_fenced}s (the power fence level), status (exit 1) names the backend failure; never two holders of a VIP"

# --- etcd back ----------------------------------------------------------------------------------
ip -n "$HA_NS-sw" link set sw-etcd up
t_back=$(date +%s.%N) t1=$SECONDS
ha_log "etcd back"
ok=0
for ((i = 0; i < 150; i++)); do
    ha_one_holder_each
    h2=$(ha_holders "$vip2")
    if [[ -n $h2 ]] && (($(acked_since a "$t_back") > 0 && $(acked_since b "$t_back") > 0)); then
        ok=1
        break
    fi
    sleep 1
done
((ok)) || ha_fail "$((SECONDS - t1))s after etcd came back: vip2 on '$(ha_holders "$vip2")', writers since: a=$(acked_since a "$t_back") b=$(acked_since b "$t_back"); $(ha_gw gw1 crm_mon -1 2>&1 | tail -20)"
ha_pass "etcd back: vip2 runs on $h2 and both writers resumed within $((SECONDS - t1))s"
doc=$(ha_cairn --json gateway fences)
python3 -c 'import json, sys
r = {f["gateway"]: f for f in json.loads(sys.argv[1])["fences"]}
assert "gw2" not in r or not r["gw2"]["fenced"], r' "$doc" ||
    ha_fail "a fence record of gw2 was stored although etcd was unreachable: $doc"
ha_pass "no backend fence record of gw2: the power fence level alone fenced it"

sleep 3
ha_writers_stop
t_end=$(date +%s.%N)

ha_verify c2 "$vip1" a:nfs3:vip2 b:nfs4.1:vip1
ha_report_check last-run-etcd-down.txt "$t_cut:$t_end:vip2" 0
ha_pass "every acknowledged record reads back through vip1; no ESTALE, nothing lost"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
