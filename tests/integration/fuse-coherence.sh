#!/usr/bin/env bash
# Two FUSE mounts of one 2 x 2 volume, with the default options (kernel writeback cache on):
# a change made through one mount must be seen through the other. With the writeback cache
# the kernel keeps its own size and mtime of a regular file and ignores the ones a GETATTR
# returns, so mount.cairn must make it drop the inode: on a lease recall (at once) and, once
# the lease has lapsed, at the next LOOKUP (a new FUSE generation). Also: many small
# appends through the cache arrive whole, and a write-only open by a user who may not read
# the file can still write part of a page (the kernel reads the rest of the page first).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 1 coh 2 4
a=$CL_MNT
b=$CL_DIR/mnt-b
cl_mount coh "$b"

# --- recalls: the other mount sees appends and truncations at once ---------------------
printf hello >"$a/f"
assert_eq hello "$(cat "$b/f")" "b reads what a wrote"
printf ' world' >>"$a/f"
assert_eq "hello world" "$(cat "$b/f")" "b reads a's append (size grew elsewhere)"
assert_eq 11 "$(stat -c %s "$b/f")" "b's stat size after a's append"
truncate -s 2 "$a/f"
assert_eq he "$(cat "$b/f")" "b reads a's truncation"
assert_eq 2 "$(stat -c %s "$b/f")" "b's stat size after a's truncation"
printf 'xyz' >>"$b/f"
assert_eq hexyz "$(cat "$a/f")" "a reads b's append"
pass "appends and truncations through one mount are seen at once through the other"

# --- no lease left: the next lookup replaces the stale inode -------------------------
printf 12345 >"$a/g"
assert_eq 12345 "$(cat "$b/g")" "b reads g"
# Let b's lease (10 s, cairnd's leases.rs) and both kernel timeouts (1 s) run out, so no
# recall reaches b: only the lookup can notice.
sleep 12
printf 6789 >>"$a/g"
assert_eq 123456789 "$(cat "$b/g")" "b reads a's append after its lease lapsed"
assert_eq 9 "$(stat -c %s "$b/g")" "b's stat size after its lease lapsed"
pass "after the lease lapsed, the next lookup sees the other mount's change"

# --- small appends through the writeback cache arrive whole --------------------------
python3 - "$b/log" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for i in range(5000):
    os.write(fd, b"%039d\n" % i)
os.close(fd)
EOF
assert_eq 200000 "$(stat -c %s "$a/log")" "a's size of b's 5000 40-byte appends"
assert_eq "$(printf '%039d' 4320)" "$(sed -n '4321p' "$a/log")" "line 4321 of b's appends, read through a"
pass "5000 40-byte appends through one mount read back whole through the other"

# --- write-only open by a user who may not read: partial-page write ------------------
d=$CL_DIR
while [[ $d != / ]]; do
    chmod o+x "$d" 2>/dev/null || true
    d=$(dirname "$d")
done
printf 'AAAAAAAA' >"$a/wo"
chown nobody "$a/wo"
chmod 0200 "$a/wo"
printf 'B' | setpriv --reuid=nobody --regid=nogroup --clear-groups \
    dd of="$b/wo" bs=1 seek=3 conv=notrunc status=none ||
    fail "nobody could not write one byte into a 0200 file it owns"
chmod 0644 "$a/wo"
assert_eq AAABAAAA "$(cat "$a/wo")" "the one-byte write landed, the rest of the page kept"
pass "write-only open by a user without read permission writes part of a page"

finish
