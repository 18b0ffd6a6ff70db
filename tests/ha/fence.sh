#!/usr/bin/env bash
# Gateway HA suite (issue 19): backend-enforced fencing, and a gateway frozen (SIGSTOP)
# until it is fenced. Three gateways in one Pacemaker cluster (tests/ha/lib.sh), each with
# its own certificate (role gateway, common name gwK); each gateway's fencing level is
# appliance/ha/fence_cairn (the backend fence: `cairn gateway fence NODE`) then
# tests/ha/fence_cairn_ns in freeze mode (a power fence that does not take effect: the
# processes stay frozen, the addresses go). Checks:
#   - `cairn gateway fence|unfence` are admin-only (EACCES for a gateway's certificate);
#   - gw1 frozen (every process SIGSTOPped) while an NFSv3 client writes through vip1 and
#     while gw1 itself writes (its FUSE mount of the volume, and an NFS client on the
#     gateway going through its Ganesha): Pacemaker fences gw1, the fence record is
#     stored (generation 1), cairnd closes gw1's sessions, vip1 moves, the client resumes
#     on another gateway, the writer on vip2 never stops;
#   - gw1 thawed (SIGCONT): its late writes are refused by cairnd (EACCES, "gateway gw1 is
#     fenced"): nothing gw1 writes after the freeze is acknowledged; every VIP is held by
#     one gateway; every acknowledged record of the clients reads back byte for byte and
#     gw1's own file holds exactly what it had acknowledged before the freeze;
#   - gw1 rejoins the membership but, while its thawed processes run, serves nothing: its
#     health clone fails ("fenced"), vip1 stays away, `cairn gateway ha status` says why;
#   - gw1 comes back clean by itself: the clone's start, retried after its failure-timeout,
#     stops gw1's Ganesha, lifts the fence, drops gw1's stale NFSv4 recovery records, starts
#     Ganesha again (services_ctl); the new Ganesha's startup grace has no client to wait
#     for; vip1 goes home to gw1 and new NFSv4.1 and NFSv3 writers write through it;
#   - bad input: gw3's Ganesha restarted on a broken config: vip3 moves away and is not
#     placed there again; status names the failure; never two holders of a VIP.
# Prints `failover nfs3 unplanned resumed_s=.. errors=.. lost=.. estale=..` lines (kind
# unplanned: a freeze is an unplanned failure) and saves them to
# tests/ha/results/last-run-fence.txt.
set -euo pipefail
# shellcheck source=tests/ha/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t_start=$SECONDS
export HA_BACKEND_FENCE=1 HA_FENCE_MODE=freeze
ha_cluster_up
ha_pass "3 gateways with their own certificates; fencing levels: fence_cairn (backend) + fence_cairn_ns (freeze); VIPs placed"

cli() { ha_cairn "$@"; } # the admin credential (CAIRN_CREDENTIALS)
fences_json() { cli --json gateway fences; }

# --- fence / unfence are admin-only -----------------------------------------------------------
rc=0 out=$(ha_gw gw2 timeout 30 "$CAIRN_BIN_DIR/cairn" --host "$(ha_servers)" gateway fence gw3 2>&1) || rc=$?
[[ $rc != 0 && ($out == *EACCES* || $out == *"permission denied for gateway gw2"*) ]] ||
    ha_fail "a gateway's certificate could fence gw3: rc=$rc: $out"
[[ $(fences_json) == *'"fences": []'* ]] || ha_fail "a refused fence left a record: $(fences_json)"
ha_pass "cairn gateway fence with a gateway's certificate is refused (EACCES) and stores nothing"

# --- writers ----------------------------------------------------------------------------------
vip1=$(ha_vip gw1) vip2=$(ha_vip gw2) vip3=$(ha_vip gw3)
ha_writer c1 a 3 "$vip1" >/dev/null
ha_writer c2 b 4.1 "$vip2" >/dev/null
ha_writer c2 c 4.1 "$vip1" >/dev/null # an NFSv4 client of gw1: a recovery record of gw1
# gw1's own writes, frozen with it: an NFS client on the gateway (through its Ganesha) and
# a loop on its FUSE mount of the volume (the identity of both: gw1's certificate).
ha_gw gw1 "$HA_VENV/bin/python" "$HA_LIB/writer.py" --host 127.0.0.1 --version 3 \
    --export "/$HA_VOLUME" --path /ha-g --log "$HA_DIR/res/g.jsonl" --op-timeout 10 \
    --stop-file "$HA_DIR/res/stop" >>"$HA_DIR/log/writer-g.log" 2>&1 &
HA_BG_PIDS+=($!)
# shellcheck disable=SC2016 # expanded by the inner shell
ha_gw gw1 bash -c 'i=0
    while [ ! -e "$1" ]; do
        if printf "%015d\n" "$i" | dd of=/srv/cairn-ha/late-gw1 bs=16 seek="$i" conv=notrunc oflag=sync status=none 2>>"$2.err"; then
            echo "ack $i $(date +%s.%N)"
            i=$((i + 1))
        else
            echo "err $i $(date +%s.%N)"
        fi
        sleep 0.2
    done >>"$2"' late "$HA_DIR/res/stop" "$HA_DIR/res/late.log" &
HA_BG_PIDS+=($!)
for ((i = 0; i < 30; i++)); do
    (($(acked a) >= 10 && $(acked b) >= 10 && $(acked c) >= 10 && $(acked g) >= 10)) &&
        (($(grep -c '^ack' "$HA_DIR/res/late.log" 2>/dev/null || true) >= 5)) && break
    sleep 1
done
((i < 30)) || ha_fail "writers not all writing after 30s: a=$(acked a) b=$(acked b) c=$(acked c) g=$(acked g) late=$(grep -c '^ack' "$HA_DIR/res/late.log" || true)"
ha_pass "writers running: NFSv3 and NFSv4.1 on vip1 (gw1), NFSv4.1 on vip2 (gw2), and on gw1 itself (its Ganesha, its mount)"
sleep 1

# --- freeze gw1 until it is fenced ---------------------------------------------------------------
gpid_frozen=$(ha_gw gw1 cat /run/ganesha/ganesha.pid)
t_freeze=$(date +%s.%N)
ha_ns_signal gw1 STOP
t_frozen=$(date +%s.%N) # every process of gw1 stopped: nothing it does is acknowledged until the thaw
ha_log "gw1 frozen (SIGSTOP of every process of its namespace)"
took=''
for ((i = 0; i < 60; i++)); do
    took=$(ha_where vip1)
    [[ -n $took && $took != gw1 ]] && break
    sleep 1
done
[[ -n $took && $took != gw1 ]] || ha_fail "vip1 is on '$took' 60s after gw1 froze: $(ha_where_all)"
t_moved=$(date +%s.%N)
for ((i = 0; i < 60; i++)); do
    (($(acked_since a "$t_moved") > 0)) && break
    sleep 0.5
done
(($(acked_since a "$t_moved") > 0)) || ha_fail "the writer of vip1 did not resume within 30s of vip1's move to $took"
ha_pass "vip1 moved to $took and its NFSv3 writer resumed"
hist=$(ha_gw "$took" stonith_admin --history gw1 2>&1) || true
[[ $hist == *"of gw1"*"successful"* ]] || ha_fail "gw1 was not fenced: $hist"
doc=$(fences_json)
python3 -c 'import json, sys
r = {f["gateway"]: f for f in json.loads(sys.argv[1])["fences"]}
assert r["gw1"]["fenced"] and r["gw1"]["generation"] == 1 and "pacemaker" in r["gw1"]["reason"], r
assert set(r) == {"gw1"}, r' "$doc" || ha_fail "the fence record of gw1 is not as expected: $doc"
grep -q 'gateway fenced.*gateway=gw1\|gateway=gw1.*gateway fenced' "$HA_DIR/log/cairnd-n1.log" ||
    ha_fail "cairnd did not log the fence of gw1: $(grep -i fence "$HA_DIR/log/cairnd-n1.log" | tail -5)"
closed=$(grep 'gateway fenced' "$HA_DIR/log/cairnd-n1.log" | grep -o 'sessions_closed=[0-9]*' | tail -1)
[[ ${closed#sessions_closed=} -gt 0 ]] || ha_fail "cairnd closed no session of gw1 ($closed)"
ha_status "$took" 'any(f["target"] == "gw1" and f["action"] in ("off", "reboot") and f["status"] == "success"
    and f["executed_by"] in ("gw2", "gw3") and f["requested_by"] in ("gw2", "gw3") and f["completed"] for f in s["fences"])' ||
    ha_fail "cairn gateway ha status --json does not list gw1's fence"
fence_line=$(ha_gw "$took" "$CAIRN_BIN_DIR/cairn" gateway ha status 2>/dev/null | grep -A3 '^Fencing history:' | grep ' gw1 ' || true)
[[ $fence_line == *"gw1"*"by gw"*"success at "* ]] || ha_fail "cairn gateway ha status does not print gw1's fence: '$fence_line'"
ha_pass "gw1 was fenced by its fencing level: backend record generation 1 ($(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["fences"][0]["reason"])' "$doc")), cairnd closed its sessions ($closed); ha status lists it:$fence_line"

# --- thaw gw1: its late writes are refused ------------------------------------------------------
sleep 2
t_thaw=$(date +%s.%N)
ha_ns_signal gw1 CONT
ha_log "gw1 thawed (SIGCONT)"
for ((i = 0; i < 40; i++)); do
    grep -q "^err .* " "$HA_DIR/res/late.log" &&
        python3 -c 'import json, sys; sys.exit(0 if any(not e["ok"] and e["t"] > float(sys.argv[2]) for e in map(json.loads, open(sys.argv[1]))) else 1)' \
            "$HA_DIR/res/g.jsonl" "$t_thaw" && break
    sleep 0.5
done
sleep 3
# After the freeze, one acknowledgement may still come per writer (each writes one record
# at a time): the reply to a write that cairnd did before the fence, read at the thaw.
late_acks=$(awk -v t="$t_frozen" '$1 == "ack" && $3 > t' "$HA_DIR/res/late.log" | wc -l)
late_errs=$(awk -v t="$t_thaw" '$1 == "err" && $3 > t' "$HA_DIR/res/late.log" | wc -l)
((late_acks <= 1)) || ha_fail "gw1's mount wrote $late_acks records after it was frozen and fenced: $(awk '$1 == "ack"' "$HA_DIR/res/late.log" | tail -3)"
((late_errs > 0)) || ha_fail "gw1's mount did not try to write after the thaw: $(tail -3 "$HA_DIR/res/late.log")"
grep -q 'Permission denied' "$HA_DIR/res/late.log.err" ||
    ha_fail "gw1's refused writes are not EACCES: $(tail -3 "$HA_DIR/res/late.log.err")"
g_late=$(acked_since g "$t_frozen")
((g_late <= 1)) || ha_fail "gw1's Ganesha acknowledged $g_late writes after gw1 was frozen and fenced"
g_err=$(python3 -c 'import json, sys; print(sum(1 for e in map(json.loads, open(sys.argv[1])) if not e["ok"] and e["t"] > float(sys.argv[2])))' "$HA_DIR/res/g.jsonl" "$t_thaw")
((g_err > 0)) || ha_fail "the NFS client on gw1 saw no refusal after the thaw: $(tail -3 "$HA_DIR/log/writer-g.log")"
ha_pass "gw1 thawed: its late writes are refused by cairnd (mount: $late_errs x EACCES, $late_acks in-flight acknowledged; its Ganesha: $g_err errors, $g_late in-flight acknowledged)"

# --- gw1 rejoins the membership; while it is fenced, it serves nothing ----------------------------
# Its processes resumed (not a reboot): its health monitor fails there (cairnd refuses it),
# so no VIP goes to it while they run. Pacemaker then recovers the clone on gw1, and the
# clone's start restarts gw1's services around the unfence (checked below). Sampled every
# second until gw1 is unfenced: never two holders of a VIP, never vip1 on gw1 while fenced.
still_fenced='import json, sys
sys.exit(0 if any(r["gateway"] == "gw1" and r["fenced"] for r in json.loads(sys.argv[1])["fences"]) else 1)'
seen=''
for ((i = 0; i < 120; i++)); do
    ha_one_holder_each
    h1=$(ha_holders "$vip1")
    doc=$(fences_json)
    python3 -c "$still_fenced" "$doc" || break
    [[ $h1 != gw1 ]] || ha_fail "vip1 is on gw1 while gw1 is still fenced: $doc"
    [[ -n $seen ]] || seen=$(ha_gw "$took" timeout 20 "$CAIRN_BIN_DIR/cairn" --json gateway ha status 2>/dev/null | python3 -c 'import json, sys
print(next((f["exit_reason"] for f in json.load(sys.stdin)["failures"] if f["node"] == "gw1" and "fenced" in f["exit_reason"]), ""))' 2>/dev/null) || true
    sleep 1
done
((i < 120)) || ha_fail "gw1 still fenced 120s after the thaw: $(ha_gw "$took" crm_mon -1 2>&1 | tail -15)"
grep -q 'ocf-exit-reason:this gateway is fenced in the backend' "$HA_DIR/gw1/log/pacemaker.log" ||
    ha_fail "gw1's health monitor never failed on its backend fence after the thaw"
ha_pass "gw1 rejoined the membership; while fenced its health monitor failed (\"this gateway is fenced in the backend\"; cairn gateway ha status on $took: ${seen:-not sampled in time}) and vip1 stayed off it; no VIP on two gateways"

ha_writers_stop
t_end=$(date +%s.%N)

# --- the data: what was acknowledged, nothing else ------------------------------------------------
# checked, not reported: gw1's own writer, and the NFSv4.1 writer on vip1 (there for its
# recovery record on gw1; nfs-rs's v4.1 client may not resume before the writers stop,
# its resume time is measured by ha/nfs-failover)
ha_verify c1 "$vip3" g:nfs3:none c:nfs4.1:vip1
ha_verify c1 "$vip3" a:nfs3:vip1 b:nfs4.1:vip2
acks=$(grep -c '^ack' "$HA_DIR/res/late.log")
want=$(for ((i = 0; i < acks; i++)); do printf '%015d\n' "$i"; done | sha256sum)
got=$(ha_gw "$took" cat /srv/cairn-ha/late-gw1 | sha256sum)
[[ $got == "$want" ]] || ha_fail "gw1's file holds other data than the $acks records it acknowledged: $(ha_gw "$took" tail -c 64 /srv/cairn-ha/late-gw1 | od -c | head -4)"
ha_pass "every acknowledged record reads back byte for byte through $vip3; gw1's file holds exactly its $acks acknowledged records"

ha_report_check last-run-fence.txt "$t_freeze:$t_end:vip1" 3
ha_pass "no ESTALE, nothing lost, the writer of vip2 never stalled"

# --- rejoin: the fenced gw1 comes back clean, by itself ------------------------------------------
# Pacemaker recovers the clone on gw1 after its failed monitor (stop, start); the start
# (services_ctl = tests/ha/gw-services) stops gw1's Ganesha, which ran through the fence, lifts the fence, drops gw1's NFSv4 recovery records (vip1, the only VIP gw1 held,
# was taken over: writer c's record is stale there), starts Ganesha and waits for it. No
# manual restart, no cleanup. Then vip1 goes home to gw1 and clients write through it.
unfenced='import json, sys
r = json.loads(sys.argv[1])["fences"][0]
sys.exit(0 if r["gateway"] == "gw1" and not r["fenced"] and r["generation"] == 1 else 1)'
for ((i = 0; i < 150; i++)); do
    ha_one_holder_each
    doc=$(fences_json)
    python3 -c "$unfenced" "$doc" && ha_status "$took" '"gw1" in s["healthy"]' 2>/dev/null && break
    sleep 1
done
((i < 150)) || ha_fail "gw1 did not rejoin (unfenced, healthy) in 150s: $doc; $(ha_gw "$took" crm_mon -1 2>&1 | tail -15); $(tail -n 5 "$HA_DIR/gw1/log/services.log" 2>&1)"
t_rejoined=$(python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$t_thaw")
gpid=$(ha_gw gw1 cat /run/ganesha/ganesha.pid)
[[ $gpid != "$gpid_frozen" ]] || ha_fail "gw1 rejoined with the Ganesha that ran through the fence (pid $gpid)"
grep -q "Ganesha $gpid_frozen stopped" "$HA_DIR/gw1/log/services.log" ||
    ha_fail "the agent did not stop gw1's old Ganesha: $(cat "$HA_DIR/gw1/log/services.log" 2>&1)"
# The restarted Ganesha's startup grace: no stale client to wait for (its first grace check
# sees clid count(0), and grace lifts at once).
check=$(awk '/nfs-ganesha Starting/ {n = ""} /check grace:/ && n == "" {n = $0} END {print n}' "$HA_DIR/gw1/ganesha.log")
[[ $check == *"clid count(0)"* ]] ||
    ha_fail "gw1's restarted Ganesha loaded stale NFSv4 recovery records: '$check'"
ha_pass "gw1 came back by itself (unfenced and healthy ${t_rejoined}s after the thaw): its start stopped the Ganesha that ran through the fence (pid $gpid_frozen), lifted the fence (generation 1 kept), dropped its stale NFSv4 records and started Ganesha (pid $gpid; startup grace: clid count(0))"

for ((i = 0; i < 60; i++)); do
    ha_one_holder_each
    [[ $(ha_holders "$vip1") == gw1 ]] && break
    sleep 1
done
[[ $(ha_holders "$vip1") == gw1 ]] || ha_fail "vip1 did not go home to gw1 60s after gw1 rejoined: $(ha_where_all)"
t_home=$(date +%s.%N)
rm -f "$HA_DIR/res/stop"
ha_writer c1 e 4.1 "$vip1" >/dev/null
ha_writer c1 f 3 "$vip1" >/dev/null
ha_writers_wait e f
e_first=$(python3 -c 'import json, sys; print(round(min(e["t"] for e in map(json.loads, open(sys.argv[1])) if e["ok"]) - float(sys.argv[2]), 1))' "$HA_DIR/res/e.jsonl" "$t_home")
for ((i = 0; i < 30; i++)); do
    ha_gw gw1 bash -c 'echo back | dd of=/srv/cairn-ha/back-gw1 oflag=sync status=none' 2>/dev/null && break
    sleep 1
done
((i < 30)) || ha_fail "gw1's mount still cannot write 30s after it was unfenced"
ha_writers_stop
ha_verify c2 "$vip2" e:nfs4.1:vip1 f:nfs3:vip1
ha_pass "vip1 went home to gw1; new NFSv4.1 and NFSv3 writers write through it (the v4.1 writer's first write ${e_first}s after the move) and read back; gw1's mount writes again"

# --- bad input: a gateway with a broken Ganesha config ------------------------------------------
# gw3's Ganesha restarted on a config with a syntax error: it does not come up, gw3's
# health fails, vip3 moves away and is never placed on gw3 again while it is broken (the
# clone's retry after failure-timeout fails too); status names the failure.
d3=$HA_DIR/gw3
{ cat "$d3/ganesha.conf" && echo 'EXPORT { Export_Id = 77; Path = "/"; '; } >"$d3/ganesha-broken.conf"
pid=$(ha_gw gw3 cat /run/ganesha/ganesha.pid)
kill -TERM "$pid"
for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -KILL "$pid" 2>/dev/null || true
t0=$SECONDS
# Ganesha 4.3 logs the syntax error and runs on without the export (or exits, when it
# cannot bind while the old instance lets go of its ports): either way gw3 is unhealthy.
ha_gw gw3 setsid ganesha.nfsd -F -f "$d3/ganesha-broken.conf" -L "$d3/ganesha-broken.log" \
    -p /run/ganesha/ganesha.pid -N NIV_EVENT </dev/null >>"$d3/log/ganesha.out" 2>&1 &
disown $!
seen=0 moved=''
for ((i = 0; i < 60; i++)); do
    ha_one_holder_each
    h3=$(ha_holders "$vip3")
    if [[ -z $moved ]]; then
        [[ -n $h3 && $h3 != gw3 ]] && moved=$h3 && t_moved=$SECONDS
    else
        [[ $h3 != gw3 ]] || ha_fail "vip3 went back to gw3 whose Ganesha config is broken"
    fi
    ((seen)) || ! ha_status "$took" 'any(f["node"] == "gw3" and ("Ganesha does not answer" in f["exit_reason"] or "Ganesha does not serve export 1" in f["exit_reason"]) for f in s["failures"])
        and "gw3" not in s["healthy"]' 2>/dev/null || seen=1
    # watched past the clone's failure-timeout (20 s): its retry on gw3 fails too
    [[ -n $moved ]] && ((seen && SECONDS - t_moved >= 25)) && break
    sleep 1
done
[[ -n $moved ]] || ha_fail "vip3 did not leave gw3 whose Ganesha config is broken: $(ha_gw "$took" crm_mon -1 2>&1 | tail -15)"
((seen)) || ha_fail "cairn gateway ha status never named gw3's failure (Ganesha does not answer / serve export 1)"
ha_pass "gw3 with a broken Ganesha config: vip3 moved to $moved in $((t_moved - t0))s and stayed off gw3 for 25s; status names it; no VIP on two gateways"

ha_log "suite time $((SECONDS - t_start))s"
ha_finish
