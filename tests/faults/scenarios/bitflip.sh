#!/usr/bin/env bash
# Bit flips in files behind Cairn's back: each w/f* file and 50 bulk files get one flipped
# bit in one of their copies (at offsets past the end of small files the "flip" grows the
# file: a size change behind Cairn's back). Files of one directory share its chain order,
# so which brick heads them depends on the directory's id: the copy flipped alternates
# between the first and the second brick of each set, file by file, so that heads hold
# flipped copies whatever the chain order, and no file has both copies flipped. Reads must
# never return the corrupted data: a head whose copy fails its checksums repairs it from a
# replica before serving. Copies no client reads (where they are not the chain head) are
# found by the scrub (features.scrub-interval). At the end every replica is identical again.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
fx_bulk c1 bulk 200
fx_workload c2 writes c2 8
fx_wait_workload "$FX_WL_PID" c2
fx_wait_healthy 30 || fx_fail "not healthy before the bit flips"
# The replica sets, one --set with its brick paths each (chain order of the volume info).
sets=()
while read -r l; do sets+=(--set "$l"); done < <(fx_cli --json volume info "$FX_VOLUME" | "$FX_PY" -c '
import json, sys
doc = json.load(sys.stdin)
for v in doc.get("volumes", [doc]):
    for s in v["sets"]:
        print(" ".join(b["path"] for b in s["bricks"]))
')
((${#sets[@]})) || fx_fail "volume info lists no replica set"
flipped=0
k=0
for set in "${sets[@]}"; do
    [[ $set == --set ]] && continue
    read -ra bricks <<<"$set"
    for f in "${bricks[0]}"/data/w/f*; do
        b=${bricks[k % ${#bricks[@]}]}
        k=$((k + 1))
        [[ -f $b/data/w/${f##*/} ]] && fx_bitflip "$b/data/w/${f##*/}" $(((RANDOM % 8) * 512 + 100)) && flipped=$((flipped + 1))
    done
    for n in $(seq 0 4 199); do
        b=${bricks[k % ${#bricks[@]}]}
        k=$((k + 1))
        [[ -f $b/data/bulk/b$n ]] && fx_bitflip "$b/data/bulk/b$n" 1000 2>/dev/null && flipped=$((flipped + 1))
    done
done
((flipped > 0)) || fx_fail "no file to flip a bit in"
fx_log "flipped a bit in $flipped files, alternating between the bricks of each set"
# The bricks differ now: the check at the end must see them converge, not be blind.
"$FX_PY" "$FX_LIB/replicas.py" "${sets[@]}" >/dev/null 2>&1 &&
    fx_fail "replicas identical right after the flips: the flips did not land"

# Every read goes to a chain head; heads hold flipped copies.
fx_verify writes c2 bulk
served=$(cat "$FX_DIR"/log/cairnd-*.log | grep -c 'corrupt data not served')
fx_log "$served corrupt reads refused and repaired by a head"
((served > 0)) || fx_soft_fail "no head detected a flipped copy on read"

# The copies nobody read: the scrub finds and repairs them.
fx_cli volume set "$FX_VOLUME" features.scrub-interval 1 >/dev/null || fx_fail "volume set features.scrub-interval"
for ((i = 0; i < 90; i++)); do
    passes=$(grep -c 'scrub pass done' "$FX_DIR"/log/cairnd-n1.log)
    # Two passes per n1 brick: the first repairs, the second found nothing left. And a
    # repair logged on some node: n1's copies may all have been repaired by the reads
    # above, and the other nodes' scrubs may finish after n1's second pass.
    ((passes >= 2 * $(fx_node_bricks n1 | wc -l))) &&
        cat "$FX_DIR"/log/cairnd-*.log | grep -q 'scrub: repaired corrupt data' && break
    sleep 1
done
fx_log "scrub: $(grep 'scrub pass done' "$FX_DIR/log/cairnd-n1.log" | tail -n 2 | tr '\n' ' ')"
cat "$FX_DIR"/log/cairnd-*.log | grep -q 'scrub: repaired corrupt data' ||
    fx_soft_fail "the scrub repaired nothing"
fx_wait_healthy 30 || fx_fail "not healthy after the bit flips"
fx_verify_replicas
fx_finish
