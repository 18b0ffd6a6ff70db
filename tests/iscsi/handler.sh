#!/usr/bin/env bash
# handler_cairn.so, the tcmu-runner handler for user:cairn LUNs, driven without LIO: the
# harness tests/iscsi/handler_test.c plays tcmu-runner (dlopen, handler_init, callouts with
# fake tcmu_device/tcmur_cmd) against a real 2-node 2x2 Cairn cluster on loopback.
#  - config-string validation, offline and against the live cluster (missing volume/file)
#  - read/write/flush/unmap/write same/compare-and-write incl. MISCOMPARE sense, CAW
#    atomicity across two gateways, sizes and thin extension
#  - data written through the handler read back with libcairn and through the FUSE mount
#  - a brick node restarted during writes: no acknowledged write lost, nothing torn
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

repo=$CL_REPO
build=${ISCSI_BUILD:-$repo/build/iscsi}
libdir=$(dirname "$CAIRN_BIN_DIR")
[[ -f $CAIRN_BIN_DIR/libcairn.so ]] || fail "$CAIRN_BIN_DIR/libcairn.so missing: build first"
command -v cc >/dev/null || skip "no C compiler"

# the tcmu-runner source (headers) pinned to Debian's version; needs apt's deb-src
if ! "$repo/iscsi/fetch-tcmu-src.sh" >/dev/null; then
    skip "tcmu-runner source not available (iscsi/fetch-tcmu-src.sh failed)"
fi
make -s -C "$repo/iscsi" BUILD="$build" TARGET_DIR="$libdir" \
    PROFILE="$(basename "$CAIRN_BIN_DIR")" harness ||
    fail "building handler_cairn.so and the harness"
so=$build/handler_cairn.so
harness=$build/handler_test

"$harness" "$so" config || fail "config-string validation"

cluster_up 2 lunvol 2 4
servers=$(cl_node_addr n1),$(cl_node_addr n2)
"$harness" "$so" ops "$servers" lunvol || fail "handler ops against the cluster"

# the 1 MiB pattern the harness wrote at 10 MiB, read through the FUSE mount
python3 - "$CL_MNT/luns/ops.img" <<'PY' || fail "backing file through the FUSE mount differs"
import sys
with open(sys.argv[1], "rb") as f:
    f.seek(10 << 20)
    got = f.read(1 << 20)
want = bytes(((i * 7 + i // 4096) & 255) for i in range(1 << 20))
sys.exit(0 if got == want else 1)
PY
pass "data written through the handler reads back through the FUSE mount"
assert_eq $((16 << 20)) "$(stat -c %s "$CL_MNT/luns/ops.img")" "LUN backing file size"

# brick restart during I/O: stress for 20 s, restart node n2 (half of every replica set)
# after 4 s
"$harness" "$so" stress "$servers" lunvol 20 >"$CL_DIR/stress.out" 2>&1 &
hpid=$!
sleep 4
cl_restart_node n2
rc=0
wait "$hpid" || rc=$?
cat "$CL_DIR/stress.out"
((rc == 0)) || fail "stress with a brick restart (exit $rc)"
pass "brick restart during I/O: handler survives, no silent corruption"
finish
