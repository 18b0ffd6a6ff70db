#!/usr/bin/env bash
# NFS byte-range locks: NFSv4 LOCK / LOCKT / LOCKU (libnfs' NFSv4 client) and NLM4 LOCK /
# TEST / UNLOCK for NFSv3, driven by tests/nfs/nfslock.c (built here against libnfs-dev),
# between two clients of one gateway and between two gateways over the same volume, and
# against a lock held through the FUSE mount (locks live on the bricks, so every client of
# the volume sees them).
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -f /usr/include/nfsc/libnfs.h ]] || skip "libnfs-dev is not installed"
nfs_suite_up vol0
nfs_exports_default vol0 >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
nfs_gw_start g2 "$CL_DIR/exports.conf"
cc -Wall -Werror -O1 -o "$CL_DIR/nfslock" "$CL_REPO/tests/nfs/nfslock.c" -lnfs ||
    fail "building tests/nfs/nfslock.c against libnfs-dev"

url4() { echo "nfs://127.0.0.1/vol0?version=4&nfsport=${NFS_PORT[$1]}"; }

# clients PROTO GW_A GW_B: nfslock's client list; a, e and h use GW_A, the others GW_B.
clients() {
    local proto=$1 c gw
    for c in a b c d e f g h; do
        [[ $c == [aeh] ]] && gw=$2 || gw=$3
        if [[ $proto == v4 ]]; then
            echo "$c=$(url4 "$gw")"
        else
            echo "$c=$(nfs_url "$gw" /vol0),${NFS_NLM_PORT[$gw]}"
        fi
    done
}

# run_steps WHAT PROTO GW_A GW_B EXPECTED STEP...: EXPECTED holds the result words,
# one per step, space-separated.
run_steps() {
    local what=$1 proto=$2 ga=$3 gb=$4 want=$5 out got cl
    shift 5
    mapfile -t cl < <(clients "$proto" "$ga" "$gb")
    out=$("$CL_DIR/nfslock" "$proto" /locked "${cl[@]}" -- "$@" 2>&1) ||
        fail "$what: nfslock: $out"
    awk -v w="$what" '{ print "    [" w "] " $0 }' <<<"$out"
    got=$(awk '{ print $2 }' <<<"$out" | tr '\n' ' ' | sed 's/ $//')
    assert_eq "$want" "$got" "$what"
}

echo "lock me" >"$CL_MNT/locked"

# The conflict sequence: a holds [0,100); an overlapping test/lock through the other
# client(s) is refused, a disjoint range granted (and then seen by a test); after a
# unlocks, the overlapping range is free and granted. A fresh client for every lock
# attempt that may fail: libnfs 4.0's NFSv4 client keeps sending a refused lock's state
# (its next LOCK of any range comes back DENIED) and does not track the stateid LOCKU
# returns (a second LOCKU gets OLD_STATEID). NLM has no such state; it runs the same steps.
CONFLICT=(a:lock:w:0:100 b:test:w:50:100 c:lock:w:50:100 d:lock:w:200:100 e:test:w:250:1
    a:unlock:0:100 f:test:w:50:100 g:lock:w:50:100 h:test:w:60:1)
CONFLICT_WANT="granted locked denied granted locked unlocked free granted locked"
# Shared read locks; a write under them is refused. (libnfs' LOCKT always tests for a
# write lock, so only NLM tests for a read lock.)
SHARED=(a:lock:r:0:10 b:lock:r:0:10 c:lock:w:5:1 f:test:w:9:1)
SHARED_WANT="granted granted denied locked"

for proto in v4 nlm; do
    run_steps "$proto, one gateway: conflicting ranges" $proto g1 g1 "$CONFLICT_WANT" "${CONFLICT[@]}"
    run_steps "$proto, two gateways: conflicting ranges" $proto g1 g2 "$CONFLICT_WANT" "${CONFLICT[@]}"
    run_steps "$proto, two gateways: shared read locks" $proto g1 g2 "$SHARED_WANT" "${SHARED[@]}"
done
run_steps "nlm, two gateways: a read test under read locks" nlm g1 g2 "granted granted free free locked" \
    a:lock:r:0:10 b:lock:r:0:10 e:test:r:0:10 f:test:r:5:10 h:test:w:5:1

# The holder's range comes back in NLM TEST (through the other gateway).
mapfile -t cl < <(clients nlm g1 g2)
out=$("$CL_DIR/nfslock" nlm /locked "${cl[@]}" -- a:lock:w:10:20 b:test:w:0:100 a:unlock:10:20)
assert_eq "locked 10 20" "$(sed -n 2p <<<"$out" | cut -d' ' -f2-)" "NLM TEST names the holder's range"

# A lock held through the FUSE mount is seen by NFS clients of both protocols.
ready=$CL_DIR/fuse-lock.ready
python3 - "$CL_MNT/locked" "$ready" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
open(sys.argv[2], "w").write("held")
time.sleep(120)
PY
holder=$!
wait_until 10 test -s "$ready" || fail "could not lock through the FUSE mount"
for proto in v4 nlm; do
    run_steps "$proto vs a FUSE holder" $proto g1 g2 "locked denied granted unlocked" \
        a:test:w:0:5 e:lock:w:5:1 b:lock:w:10:10 b:unlock:10:10
done
kill "$holder"
wait "$holder" 2>/dev/null || true
run_steps "v4 after the FUSE holder exited" v4 g1 g2 "granted unlocked" a:lock:w:0:10 a:unlock:0:10
pass "byte-range locks: NFSv4 and NLM, one and two gateways, and against FUSE"

finish
