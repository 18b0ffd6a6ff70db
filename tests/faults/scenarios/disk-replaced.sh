#!/usr/bin/env bash
# A brick node restarted with emptied brick directories (disk replaced): 1000 files and
# a write stream exist before; n2 is killed, its bricks wiped, and it comes back. Heal
# must rebuild the full replica.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_bulk c1 bulk 1000
fx_workload c2 writes c2 20
W2=$FX_WL_PID
fx_sleep 5
fx_kill9 n2
fx_wipe_node_bricks n2
fx_sleep 2
fx_start_node n2
fx_wait_workload "$W2" c2
if fx_wait_healthy 60; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 60s after the disk replacement"; fi
fx_verify writes c2 bulk
fx_verify_replicas
fx_finish
