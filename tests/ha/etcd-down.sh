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
ha_init
ha_cairn_up
ha_clients_up
ha_gateways_up
export HA_BACKEND_FENCE=1
ha_fencing_xml >"$HA_DIR/fencing.xml"
HA_STONITH=true HA_FENCE_XML=$HA_DIR/fencing.xml ha_configure
ha_pass "3 gateways, fencing levels: fence_cairn + fence_cairn_ns, then fence_cairn_ns alone; VIPs placed"

vip1=$(ha_vip gw1) vip2=$(ha_vip gw2) vip3=$(ha_vip gw3)
ha_writer c1 a 3 "$vip2" >/dev/null
ha_writer c2 b 4.1 "$vip1" >/dev/null
for ((i = 0; i < 30; i++)); do
    (($(acked a) >= 10 && $(acked b) >= 10)) && break
    sleep 1
done
((i < 30)) || ha_fail "writers not writing after 30s: a=$(acked a) b=$(acked b)"
ha_pass "writers running: NFSv3 on vip2 (gw2), NFSv4.1 on vip1 (gw1)"

holders() { # VIP: the live gateways that have it on eth0
    local gw
    for gw in gw1 gw2 gw3; do
        ha_alive "$gw" || continue
        [[ $(ha_gw "$gw" timeout 5 ip -o addr show dev eth0 2>/dev/null) == *" $1/"* ]] && echo "$gw"
    done
    return 0
}
one_holder_each() {
    local v h
    for v in "$vip1" "$vip2" "$vip3"; do
        h=$(holders "$v" | tr '\n' ' ')
        (($(wc -w <<<"$h") <= 1)) || ha_fail "VIP $v is held by two gateways: $h"
    done
}

# --- etcd unreachable, then gw2 dies ---------------------------------------------------------
ip -n "$HA_NS-sw" link set sw-etcd down
t_cut=$(date +%s.%N) t0=$SECONDS
ha_log "etcd cut off"
sleep 1
ha_power_off gw2 >/dev/null
ha_log "gw2 powered off"
fenced=0 seen=0
for ((i = 0; i < 150; i++)); do
    one_holder_each
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
    one_holder_each
    h2=$(holders "$vip2")
    if [[ -n $h2 ]] && (($(acked_since a "$t_back") > 0 && $(acked_since b "$t_back") > 0)); then
        ok=1
        break
    fi
    sleep 1
done
((ok)) || ha_fail "$((SECONDS - t1))s after etcd came back: vip2 on '$(holders "$vip2")', writers since: a=$(acked_since a "$t_back") b=$(acked_since b "$t_back"); $(ha_gw gw1 crm_mon -1 2>&1 | tail -20)"
ha_pass "etcd back: vip2 runs on $h2 and both writers resumed within $((SECONDS - t1))s"
doc=$(ha_cairn --json gateway fences)
python3 -c 'import json, sys
r = {f["gateway"]: f for f in json.loads(sys.argv[1])["fences"]}
assert "gw2" not in r or not r["gw2"]["fenced"], r' "$doc" ||
    ha_fail "a fence record of gw2 was stored although etcd was unreachable: $doc"
ha_pass "no backend fence record of gw2: the power fence level alone fenced it"

sleep 3
touch "$HA_DIR/res/stop"
for pid in "${HA_BG_PIDS[@]}"; do
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
t_end=$(date +%s.%N)

writers=()
declare -A W_PROTO=([a]=nfs3 [b]=nfs4.1) W_VIP=([a]=vip2 [b]=vip1) W_VER=([a]=3 [b]=4.1)
for w in a b; do
    out=$(ha_in c2 "$HA_VENV/bin/python" "$HA_LIB/writer.py" verify --host "$vip1" --version "${W_VER[$w]}" \
        --export "/$HA_VOLUME" --path "/ha-$w" --log "$HA_DIR/res/$w.jsonl" 2>&1) ||
        ha_fail "writer $w: acknowledged writes lost: $out"
    lost=$(sed -n 's/.*lost=\([0-9]*\).*/\1/p' <<<"$out")
    writers+=(--writer "$w:${W_PROTO[$w]}:${W_VIP[$w]}:$HA_DIR/res/$w.jsonl:${lost:-0}")
done
mkdir -p "$HA_LIB/results"
summary=$("$HA_VENV/bin/python" "$HA_LIB/report.py" --event "unplanned:$t_cut:$t_end:vip2" "${writers[@]}" \
    --table "$HA_LIB/results/last-run-etcd-down.txt") || ha_fail "report.py failed"
grep '^failover' <<<"$summary"
python3 - "$(tail -n 1 <<<"$summary")" <<'PY' || ha_fail "failover checks failed (above)"
import json, sys
bad = []
for r in json.loads(sys.argv[1]):
    who = f'{r["protocol"]} writer {r["writer"]} on {r["vip"]}'
    if r["estale"] or r["lost"] or r["resumed_s"] is None:
        bad.append(f"{who}: estale={r['estale']} lost={r['lost']} resumed_s={r['resumed_s']}")
for b in bad:
    print("not ok - " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
ha_pass "every acknowledged record reads back through vip1; no ESTALE, nothing lost"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
