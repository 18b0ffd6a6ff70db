#!/usr/bin/env bash
# Disk replaced: 1000 files and a write stream exist; n2 is killed and its brick
# directories emptied. Restarted, n2 must refuse the emptied bricks (never serve them as
# healthy); the admin then runs the gluster flow, with the writer still running:
#   cairn volume reset-brick vol0 n2:/b start
#   cairn volume reset-brick vol0 n2:/b n2:/b commit
# which re-initialises each brick, marks it stale and owes it a full heal. The full crawl
# must rebuild it from its peers before it serves. Finally `heal full` on the healthy
# volume must converge too. Checks: acknowledged writes, bulk contents, replicas identical.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_bulk c1 bulk 1000
fx_workload c2 writes c2 40
W2=$FX_WL_PID
fx_sleep 5
fx_kill9 n2
fx_wipe_node_bricks n2
fx_sleep 2
fx_start_node n2

# The emptied bricks are refused: down, and n2's log says why.
n2_bricks=$(fx_node_bricks n2)
fx_sleep 4
st=$(fx_status)
fx_log "status after restart on empty disks: $(tr '\n' ';' <<<"$st")"
if grep -E ' n2 ' <<<"$st" | grep -qviE ' down '; then
    fx_soft_fail "an emptied brick of n2 is not down: $(grep ' n2 ' <<<"$st" | tr '\n' ';')"
else
    fx_pass "emptied bricks of n2 refused (down)"
fi
grep -q 'is not a brick' "$FX_DIR/log/cairnd-n2.log" ||
    fx_soft_fail "n2's log does not say its emptied bricks are not bricks"

for b in $n2_bricks; do
    fx_cli volume reset-brick "$FX_VOLUME" "n2:$b" start || fx_fail "reset-brick start n2:$b"
    fx_cli volume reset-brick "$FX_VOLUME" "n2:$b" "n2:$b" commit || fx_fail "reset-brick commit n2:$b"
    [[ -f $b/.cairn/brick.json ]] || fx_fail "reset-brick commit did not re-initialise $b"
done
# The crawl runs while the writer writes; show its progress once.
fx_sleep 1
fx_cli volume heal "$FX_VOLUME" statistics >"$FX_DIR/log/heal-statistics-during.txt" 2>&1
fx_log "heal statistics during the rebuild: $(grep -cE '^Crawl is in progress' "$FX_DIR/log/heal-statistics-during.txt") crawl(s) running"

fx_wait_workload "$W2" c2
if fx_wait_healthy 90; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 90s after the disk replacement"; fi

# Each rebuilt brick finished a full crawl that copied at least its share of the bulk
# files (1000 files over 2 sets), with no failure left and no full crawl still owed.
stats=$(fx_cli --json volume heal "$FX_VOLUME" statistics) || fx_fail "heal statistics"
echo "$stats" >"$FX_DIR/log/heal-statistics.json"
if "$FX_PY" - "$stats" <<'PY'; then
import json, sys
doc = json.loads(sys.argv[1])
bad = []
for b in doc["bricks"]:
    if b["node"] != "n2":
        continue
    full = [c for c in b["crawls"] if c["kind"] == "full" and c["ended"] is not None]
    if b["full_pending"] or b["in_progress"] or not full:
        bad.append(f"brick {b['index']}: full crawl not finished ({b})")
    elif full[0]["healed"] < 300 or full[0]["failed"] != 0:
        bad.append(f"brick {b['index']}: full crawl healed {full[0]['healed']}, failed {full[0]['failed']}")
for m in bad:
    print(m)
sys.exit(1 if bad else 0)
PY
    fx_pass "full crawls rebuilt n2's bricks"
else
    fx_soft_fail "full crawl statistics of n2's bricks (see $FX_DIR/log/heal-statistics.json)"
fi
info=$(fx_cli volume heal "$FX_VOLUME" info)
if [[ $(grep -c '^Number of entries: 0$' <<<"$info") == 6 ]]; then
    fx_pass "heal info: no entries pending on any brick"
else
    fx_soft_fail "heal info shows pending entries: $(tr '\n' ';' <<<"$info")"
fi

# heal full on the healthy volume: every brick crawls, and the volume stays healthy.
fx_cli volume heal "$FX_VOLUME" full || fx_fail "heal full"
ok=0
for ((i = 0; i < 90; i++)); do
    if fx_cli --json volume heal "$FX_VOLUME" statistics | "$FX_PY" -c '
import json, sys
b = json.load(sys.stdin)["bricks"]
sys.exit(0 if all(not x["full_pending"] and not x["in_progress"] for x in b) else 1)'; then
        ok=1
        break
    fi
    sleep 1
done
if ((ok)); then fx_pass "heal full converged on every brick"; else fx_soft_fail "heal full did not finish within 90s"; fi

fx_verify writes c2 bulk
fx_verify_replicas
fx_finish
