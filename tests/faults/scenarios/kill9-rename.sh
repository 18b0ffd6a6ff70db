#!/usr/bin/env bash
# kill -9 of a brick node during a rename storm across two directories (and replica
# sets) of a 2x3 volume; c2 writes meanwhile. Verify the namespace against the model of
# acknowledged renames, every acknowledged write, and identical replicas.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_workload c1 renames c1 20
W1=$FX_WL_PID
fx_workload c2 writes c2 20
W2=$FX_WL_PID
fx_sleep 5
fx_kill9 n1
fx_sleep 6
fx_start_node n1
fx_sleep 3
fx_kill9 n3
fx_sleep 3
fx_start_node n3
fx_wait_workload "$W1" c1
fx_wait_workload "$W2" c2
if fx_wait_healthy 40; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 40s"; fi
fx_verify renames c1 c2
fx_verify_replicas
fx_finish
