#!/usr/bin/env bash
# cairnd and etcd restarts during a write stream: n1 restarted (SIGTERM), etcd killed
# (SIGKILL) and restarted, n3 restarted, n2 killed and restarted while etcd is down.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_workload c1 writes c1 30
W1=$FX_WL_PID
fx_workload c2 writes c2 30
W2=$FX_WL_PID
fx_sleep 4
fx_stop_node n1
fx_start_node n1
fx_sleep 4
fx_etcd_kill9
fx_sleep 3
fx_kill9 n2
fx_sleep 1
fx_start_etcd
fx_start_node n2
fx_sleep 4
fx_stop_node n3
fx_start_node n3
fx_wait_workload "$W1" c1
fx_wait_workload "$W2" c2
if fx_wait_healthy 40; then fx_pass "healed"; else fx_soft_fail "volume did not heal within 40s"; fi
fx_verify writes c1 c2
fx_verify_replicas
fx_finish
