#!/usr/bin/env bash
# pjdfstest (POSIX conformance) over the FUSE mount of a 2 x 2 replicated volume, with a
# second, local filesystem for the EXDEV tests. Failures must be in
# pjdfstest-known-failures.txt with a reason.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/../integration/lib.sh"

cluster_up 1 pjd 2 4
# pjdfstest binds Unix sockets by absolute path (at most 108 bytes): mount the volume again
# at a short path, since the harness's temp dir can be deep (CI's is under build/).
short=$(mktemp -d /tmp/pjd.XXXXXX)
cl_mount pjd "$short/m"
# pjdfstest switches to unprivileged users: they must be able to reach the mount point.
d=$CL_MNT
while [[ $d != / ]]; do
    chmod o+x "$d" 2>/dev/null || true
    d=$(dirname "$d")
done
mkdir -p "$short/sec"
PJDFSTEST_SECONDARY=$short/sec PJDFSTEST_RESULTS=$CL_DIR/pjdfstest-results.txt \
    bash "$here/tools/run-pjdfstest.sh" "$CL_MNT" || fail "pjdfstest: unexpected failures (see above)"
pass "pjdfstest: every failure is a known one"
cl_umount "$short/m"
rm -rf "$short"
finish
