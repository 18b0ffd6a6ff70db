#!/usr/bin/env bash
# The smallest rename + heal case: a rename storm starts with every brick up (its files
# are created on all replicas), n2 is killed 2 s in and stays down until the storm is
# over, then comes back and heals with no other traffic. Every renamed file must come
# back with its data on n2's bricks, and reads must return it.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_workload c1 renames c1 8 --readers 1
fx_sleep 2
fx_kill9 n2
fx_wait_workload "$FX_WL_PID" c1
fx_start_node n2
if fx_wait_healthy 40; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 40s"; fi
fx_verify renames c1
fx_verify_replicas
fx_finish
