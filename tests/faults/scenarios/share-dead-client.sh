#!/usr/bin/env bash
# A client (as a gateway would) holds a share reservation with deny both when its host
# is cut off (its link at the switch: no FIN or RST ever reaches the brick). Its session,
# and the deny, must end within the head's TCP keepalive (~25 s), not never: another
# client is refused while it holds, then granted once the dead one is gone.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 1 1 1
share() {
    local client=$1
    shift
    fx_in "$client" "$FX_PY" "$FX_LIB/share.py" "$@" --lib "$CAIRN_BIN_DIR/libcairn.so" \
        --servers "$(fx_servers)" --volume "$FX_VOLUME" --name held-file
}
share c1 hold >"$FX_DIR/log/share-hold.log" 2>&1 &
FX_PID[share-hold]=$!
for ((i = 0; i < 100; i++)); do
    grep -q '^held' "$FX_DIR/log/share-hold.log" && break
    sleep 0.2
done
grep -q '^held' "$FX_DIR/log/share-hold.log" ||
    fx_fail "c1 did not take its reservation: $(cat "$FX_DIR/log/share-hold.log")"
res=$(share c2 probe --first denied --timeout 0) && fx_fail "c2 granted while c1 holds deny both: $res"
grep -q "still denied" <<<"$res" || fx_fail "c2's probe: $res"
fx_pass "c2 is refused while c1 holds deny both"
fx_isolate c1
if res=$(share c2 probe --timeout 60); then
    fx_pass "c1 cut off: its deny ended with its session ($res)"
else
    fx_fail "c1 cut off 60 s ago and its deny still holds: $res"
fi
fx_finish
