#!/usr/bin/env bash
# kill -9 during a heal: n1 is down while 1500 files are created (a heal backlog); it
# comes back and is killed again mid-heal, then a heal source (n3) is killed mid-heal.
# Writers run throughout. Heal must resume and converge with nothing lost.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_workload c2 writes c2 40
W2=$FX_WL_PID
fx_sleep 2
fx_kill9 n1
fx_bulk c1 bulk 1500
fx_start_node n1
fx_wait_state healing 10 || fx_fail "n1's bricks never showed healing"
fx_sleep 1
fx_kill9 n1
fx_sleep 2
fx_start_node n1
fx_wait_state healing 10 || fx_log "n1 not healing after its second start"
fx_sleep 1
fx_kill9 n3
fx_sleep 3
fx_start_node n3
fx_wait_workload "$W2" c2
if fx_wait_healthy 45; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 45s"; fi
fx_verify writes c2 bulk
fx_verify_replicas
fx_finish
