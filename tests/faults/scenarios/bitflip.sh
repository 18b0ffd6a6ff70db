#!/usr/bin/env bash
# Bit flips in files on one brick node (behind Cairn's back): each w/f* file and 50 bulk
# files get one flipped bit on n1's bricks. Reads must never return the corrupted data,
# and the bad copies must be healed from a good replica.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_bulk c1 bulk 200
fx_workload c2 writes c2 8
fx_wait_workload "$FX_WL_PID" c2
fx_wait_healthy 30 || fx_fail "not healthy before the bit flips"
for b in $(fx_node_bricks n1); do
    for f in "$b"/data/w/f* ; do
        [[ -f $f ]] && fx_bitflip "$f" $(( (RANDOM % 8) * 512 + 100 ))
    done
    for n in $(seq 0 4 199); do
        [[ -f $b/data/bulk/b$n ]] && fx_bitflip "$b/data/bulk/b$n" 1000 2>/dev/null
    done
done
fx_verify writes c2 bulk
fx_sleep 5
fx_wait_healthy 30 || fx_fail "not healthy after the bit flips"
fx_verify_replicas
fx_finish
