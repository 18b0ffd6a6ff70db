#!/usr/bin/env bash
# Gateway HA suite (issue 19): the backend fence waits for every cairnd. No Pacemaker and no
# gateway daemons: etcd and two cairnd (n1, n2) in namespaces of their own (tests/ha/lib.sh),
# a gateway certificate gw1, and the fence agent appliance/ha/fence_cairn run by hand the
# way Pacemaker's fencer runs it (options on stdin). Checks:
#   - both cairnd up: `off` of gw1 succeeds once both applied generation 1 (each reports it
#     in fence-applied/<node>, `cairn --json gateway fences` lists them), and both refuse
#     gw1's requests (EACCES naming the generation);
#   - n2's cairnd stopped (SIGSTOP: its lease is still alive for up to 6 s, so it counts as
#     live, but it applies nothing): `off` with apply_timeout=2 FAILS (exit 1) within ~2 s,
#     naming cairnd n2 and the generation it still enforces -- Pacemaker would go on to the
#     next fencing level; the record stays stored (the safe side);
#   - still stopped, `off` with the default apply_timeout (10 s) waits until n2's lease
#     expired (it then serves nothing) and succeeds, applied by n1 alone;
#   - n2 continued (SIGCONT): it registers a new lease, reports the latest generation, and
#     refuses gw1; an unfence is applied by both.
# 20-40 s.
set -euo pipefail
# shellcheck source=tests/ha/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t_start=$SECONDS
ha_init
ha_cairn_up

# --- a second cairnd, joined by peer probe --------------------------------------------------------
ha_member n2 "$HA_NET.12"
mkdir -p "$HA_DIR/state/n2"
ha_in n2 setsid "$CAIRN_BIN_DIR/cairnd" --name n2 --listen "${HA_IP[n2]}:7420" \
    --etcd "http://${HA_IP[etcd]}:2379" --state-dir "$HA_DIR/state/n2" \
    --log-file "$HA_DIR/log/cairnd-n2.log" --log-level info \
    </dev/null >>"$HA_DIR/log/cairnd-n2.out" 2>&1 &
disown $!
ha_wait_tcp n2 "${HA_IP[n2]}" 7420 30 || ha_fail "cairnd n2 does not listen on ${HA_IP[n2]}:7420"
token=$(ha_cairn peer token create --ttl 10m) || ha_fail "cairn peer token create"
ha_cairn peer probe "${HA_IP[n2]}:7420" --token "$token" >/dev/null || ha_fail "cairn peer probe n2"
ha_cairn client certificate issue gw1 --role gateway --days 2 \
    --out "$HA_DIR/gw1.pem" >/dev/null || ha_fail "cannot issue the gateway certificate of gw1"

# gw NODE ARGS: the CLI with gw1's certificate against cairnd NODE (every request of a
# gateway's session goes through the fence check).
gw() {
    local node=$1
    shift
    ha_in n1 timeout 20 "$CAIRN_BIN_DIR/cairn" --host "${HA_IP[$node]}:7420" \
        --credentials "$HA_DIR/gw1.pem" "$@" 2>&1
}
# applied NODE: the generation of gw1 that cairnd NODE reports applied ('' if none).
applied() {
    ha_cairn --json gateway fences | python3 -c 'import json, sys
d = json.load(sys.stdin)
print(next((str(a["generations"].get("gw1", "")) for a in d.get("applied", []) if a["node"] == sys.argv[1]), ""))' "$1"
}
# agent ACTION [name=value...]: appliance/ha/fence_cairn as the fencer runs it (stdin).
agent() {
    local action=$1
    shift
    printf '%s\n' "action=$action" plug=gw1 "servers=${HA_IP[n1]}:7420,${HA_IP[n2]}:7420" \
        "credentials=$CAIRN_CREDENTIALS" "cairn=$CAIRN_BIN_DIR/cairn" "$@" |
        ha_in n1 "$HA_REPO/appliance/ha/fence_cairn" 2>&1
}
now() { date +%s.%N; }
since() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$1"; }

for ((i = 0; i < 60; i++)); do
    ha_cairn --json gateway fences | grep -q '"node": "n2"' && break
    sleep 0.5
done
((i < 60)) || ha_fail "cairnd n2 never published its fence report: $(ha_cairn --json gateway fences)"
out=$(gw n2 volume info "$HA_VOLUME") || ha_fail "gw1 (not fenced) refused by n2: $out"
ha_pass "two cairnd (n1, n2) up and both publish what they applied; gw1's certificate is served"

# --- both up: the fence is applied by both ----------------------------------------------------------
t0=$(now)
rc=0 out=$(agent off) || rc=$?
took=$(since "$t0")
((rc == 0)) || ha_fail "fence_cairn off gw1 with both cairnd up failed (rc=$rc): $out"
[[ $out == *"generation 1"*"applied by every live cairnd (n1, n2)"* ]] ||
    ha_fail "fence_cairn did not wait for both cairnd: $out"
[[ $(applied n1) == 1 && $(applied n2) == 1 ]] ||
    ha_fail "the reports say n1=$(applied n1) n2=$(applied n2), not generation 1 both"
for n in n1 n2; do
    rc=0 out=$(gw "$n" volume info "$HA_VOLUME") || rc=$?
    [[ $rc != 0 && $out == *"gateway gw1 is fenced (generation 1"* ]] ||
        ha_fail "cairnd $n still serves the fenced gw1 after fence_cairn returned (rc=$rc): $out"
done
ha_pass "fence_cairn off gw1: returned in ${took}s once n1 and n2 applied generation 1; both refuse gw1 (EACCES)"
ha_cairn gateway unfence gw1 >/dev/null || ha_fail "cairn gateway unfence gw1"
for ((i = 0; i < 40; i++)); do
    gw n2 volume info "$HA_VOLUME" >/dev/null && gw n1 volume info "$HA_VOLUME" >/dev/null && break
    sleep 0.25
done
((i < 40)) || ha_fail "gw1 still refused 10s after its unfence: $(gw n2 volume info "$HA_VOLUME")"

# --- n2 stopped while its lease lives: the fence fails ----------------------------------------------
ha_ns_signal n2 STOP
t_stop=$(now)
ha_log "cairnd n2 stopped (SIGSTOP)"
t0=$(now)
rc=0 out=$(agent off apply_timeout=2) || rc=$?
took=$(since "$t0")
((rc != 0)) || ha_fail "fence_cairn off gw1 succeeded ${took}s after cairnd n2 stopped (its lease alive, nothing applied there): $out"
[[ $out == *"cairnd n2 (generation 1)"* ]] || ha_fail "the failure does not name cairnd n2 and what it enforces: $out"
[[ $out != *"cairnd n1 ("* ]] || ha_fail "the failure names n1, which applied the fence: $out"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 6 else 1)' "$took" ||
    ha_fail "fence_cairn with apply_timeout=2 took ${took}s"
[[ $(ha_cairn --json gateway fences) == *'"fenced": true'* ]] || ha_fail "the record was not kept"
ha_pass "cairnd n2 stopped: fence_cairn off gw1 with apply_timeout=2 fails after ${took}s (the next fencing level would run): $(grep -o 'not every live cairnd.*' <<<"$out" | cut -c1-120)"

# --- still stopped: with the default timeout, the fence waits for n2's lease to end -------------------
t0=$(now)
rc=0 out=$(agent off) || rc=$?
took=$(since "$t0")
((rc == 0)) || ha_fail "fence_cairn off gw1 (apply_timeout 10 s) failed with n2 stopped for $(since "$t_stop")s: $out"
[[ $out == *"generation 3"*"applied by every live cairnd (n1) "* ]] ||
    ha_fail "fence_cairn did not report generation 3 applied by n1 alone: $out"
live=$(ha_cairn --json pool list | python3 -c 'import json, sys
d = json.load(sys.stdin)
peers = d["peers"] if isinstance(d, dict) else d
print(" ".join(p["name"] for p in peers if p["connected"]))')
[[ $live == n1 ]] || ha_fail "live nodes after the fence: '$live' (n2 is stopped)"
ha_pass "still stopped: fence_cairn off gw1 waited ${took}s, until n2's lease ended ($(since "$t_stop")s after the stop), and succeeded: generation 3 applied by n1, the one live cairnd"

# --- n2 continued: it enforces the latest fence --------------------------------------------------------
ha_ns_signal n2 CONT
t_cont=$(now)
ha_log "cairnd n2 continued (SIGCONT)"
for ((i = 0; i < 60; i++)); do
    [[ $(applied n2) == 3 ]] && break
    sleep 0.5
done
[[ $(applied n2) == 3 ]] || ha_fail "n2 does not report generation 3 30s after it continued: $(ha_cairn --json gateway fences)"
rc=0 out=$(gw n2 volume info "$HA_VOLUME") || rc=$?
[[ $rc != 0 && $out == *"gateway gw1 is fenced (generation 3"* ]] ||
    ha_fail "n2 serves the fenced gw1 after it continued (rc=$rc): $out"
ha_pass "n2 continued: it reports generation 3 ($(since "$t_cont")s after SIGCONT, under a new lease) and refuses gw1"
t0=$(now)
ha_cairn gateway unfence gw1 >/dev/null || ha_fail "cairn gateway unfence gw1"
for ((i = 0; i < 40; i++)); do
    gw n2 volume info "$HA_VOLUME" >/dev/null && gw n1 volume info "$HA_VOLUME" >/dev/null && break
    sleep 0.25
done
((i < 40)) || ha_fail "gw1 still refused 10s after its unfence: $(gw n2 volume info "$HA_VOLUME")"
text=$(ha_cairn gateway fences)
[[ $text == *"applied by cairnd n1: gw1 3"*"applied by cairnd n2: gw1 3"* ]] ||
    ha_fail "cairn gateway fences does not list what each cairnd applied: $text"
ha_pass "gw1 unfenced: served by both again after $(since "$t0")s; cairn gateway fences lists each cairnd's applied generation"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
