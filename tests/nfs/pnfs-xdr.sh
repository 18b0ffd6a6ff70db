#!/usr/bin/env bash
# Unit tests of FSAL_CAIRN's Flexible Files XDR encoders (fsal/ff.c, docs/nfs.md "pNFS"):
# tests/nfs/ff_xdr_test.c encodes ff_layout4, ff_device_addr4 and Ganesha's DS file handle
# into memory and compares every byte with dumps written out by hand from RFC 8435's
# structures. No cluster, no Ganesha; under a second after the build.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

command -v cc >/dev/null || skip "no C compiler"
[[ -f /usr/include/ntirpc/rpc/xdr.h ]] || skip "no ntirpc headers (apt-get install libntirpc-dev)"
build=$CL_REPO/build/fsal
make -s -C "$CL_REPO/fsal" ff-test || fail "building ff_xdr_test"
out=$("$build/ff_xdr_test" 2>&1) || { echo "$out" >&2; fail "ff.c encoders: $(grep -c '^FAIL' <<<"$out") failed checks (above)"; }
echo "$out"
pass "Flexible Files encoders: $(tail -n1 <<<"$out")"
finish
