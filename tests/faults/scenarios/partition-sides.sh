#!/usr/bin/env bash
# A partition into two sides, each with a client writing the same files:
# {n1, c1} | {n2, n3, etcd, c2}. n1 loses etcd and must fence itself; nothing either
# side acknowledged may be lost once the partition heals.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_workload c1 writes c1 20
W1=$FX_WL_PID
fx_workload c2 writes c2 20
W2=$FX_WL_PID
fx_sleep 5
fx_partition "n1 c1" "n2 n3 etcd c2"
fx_sleep 10
fx_unpartition
fx_wait_workload "$W1" c1
fx_wait_workload "$W2" c2
if fx_wait_healthy 30; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 30s after the partition"; fi
fx_verify writes c1 c2
fx_verify_replicas
fx_finish
