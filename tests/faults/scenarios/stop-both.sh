#!/usr/bin/env bash
# Both nodes of a replica-2 set go down one after the other under a writer, then both
# come back: n2 is stopped, n1 keeps writing alone for about a second (n2's bricks miss
# acknowledged writes and are marked stale), then n1 goes down too. n1 holds everything
# acknowledged and must come up; n2 must heal from it. Done twice: with SIGTERM (n1's
# in-flight writes are refused as its lease goes, leaving it entries to re-copy) and with
# SIGKILL. A 2x2 volume on 2 nodes; verify every acknowledged write, linearizability and
# identical replicas.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 2 2 2
for round in term kill; do
    fx_workload c1 writes "c1-$round" 12
    W=$FX_WL_PID
    fx_sleep 3
    if [[ $round == term ]]; then
        fx_stop_node n2
        fx_sleep 1
        fx_stop_node n1
    else
        fx_kill9 n2
        fx_sleep 1
        fx_kill9 n1
    fi
    fx_sleep 2
    fx_start_node n1
    fx_start_node n2
    fx_wait_workload "$W" "c1-$round"
    if fx_wait_healthy 40; then
        fx_pass "$round: both nodes back in service"
    else
        fx_fail "$round: the volume did not come back within 40s after both nodes restarted: $(fx_status | tr '\n' ';')"
    fi
done
fx_verify writes c1-term c1-kill
fx_verify_replicas
fx_finish
