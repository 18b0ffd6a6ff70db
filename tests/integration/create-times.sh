#!/usr/bin/env bash
# Create + write + close through the FUSE mount costs no SETATTR round trip. Under the
# writeback cache the kernel stamps mtime/ctime at write(2) and flushes them at close in a
# SETATTR (mtime = ctime, with the file handle); mount.cairn answers that one itself when a
# WRITE of the file reached it since, because the write moves the times on the bricks.
# Checks with two mounts of one 2 x 2 volume that the kernel sent such SETATTRs but none
# reached the bricks, that the other mount sees the data and a write-time mtime, and that
# explicit time, mode and size changes (futimens on a file open for writing, utime by
# path, UTIME_NOW, chmod, ftruncate) and a later write still reach the bricks. Fails if
# the SETATTR round trip comes back, or if a user's time change is lost.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 2 ct 2 4
a=$CL_MNT
b=$CL_DIR/mnt-b
cl_mount ct "$b" n2


# --- no round trip: the kernel's times flush after a write is answered by the mount ------
mkdir -p "$a/d1/d2"
f0=$(cl_mount_stat "$a" fuse.setattr)
s0=$(cl_mount_stat "$a" brick.setattr)
# The pause between create and write makes the kernel's write(2) stamp a time other than
# the create's, so every close flushes times (without it, about half do on this machine).
python3 - "$a/d1/d2" <<'EOF' || fail "create+write+close through a"
import os, sys, time
d = sys.argv[1]
for i in range(16):
    fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    time.sleep(0.02)
    os.write(fd, bytes([65 + i]) * 4096)
    os.close(fd)
EOF
f1=$(cl_mount_stat "$a" fuse.setattr)
s1=$(cl_mount_stat "$a" brick.setattr)
((f1 - f0 >= 8)) || fail "the kernel flushed times on only $((f1 - f0)) of 16 closes: the check below proves nothing"
assert_eq 0 "$((s1 - s0))" "brick SETATTRs for 16 create+write+close ($((f1 - f0)) kernel SETATTRs)"

# The other mount sees the data, and an mtime/ctime from the write (not the create's).
python3 - "$a/d1/d2" "$b/d1/d2" <<'EOF' || fail "b's view of the files a created (see above)"
import os, sys
da, db = sys.argv[1:3]
for i in range(16):
    with open(f"{db}/f{i}", "rb") as f:
        data = f.read()
    assert data == bytes([65 + i]) * 4096, f"f{i}: b read {len(data)} bytes, not a's"
    sa, sb = os.stat(f"{da}/f{i}"), os.stat(f"{db}/f{i}")
    assert sb.st_size == 4096, f"f{i}: size {sb.st_size} on b"
    # a's kernel stamped the write; the bricks stamped it too, no earlier (one clock here).
    assert sb.st_mtime_ns >= sa.st_mtime_ns - 1_000_000, f"f{i}: mtime on b {sb.st_mtime_ns} < a's {sa.st_mtime_ns}"
    assert sb.st_ctime_ns >= sb.st_mtime_ns, f"f{i}: ctime {sb.st_ctime_ns} < mtime {sb.st_mtime_ns} on b"
EOF
pass "b reads the 16 files with a's data and a write-time mtime"

# --- explicit changes still reach the bricks ---------------------------------------------
python3 - "$a/d1" "$b/d1" <<'EOF' || fail "explicit changes through a not seen through b (see above)"
import os, stat, sys, time
da, db = sys.argv[1:3]

def on_b(name):
    return os.stat(f"{db}/{name}")

# futimens on a file open for writing, after a write (the write's flush comes first).
fd = os.open(f"{da}/u1", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, b"y" * 100)
time.sleep(0.02)
os.utime(fd, ns=(1000 * 10**9, 2000 * 10**9))
os.close(fd)
s = on_b("u1")
assert (s.st_mtime_ns, s.st_atime_ns, s.st_size) == (2000 * 10**9, 1000 * 10**9, 100), f"u1 on b: {s}"

# futimens(fd, {UTIME_OMIT, t}) only: mtime alone, on an open file after a write.
fd = os.open(f"{da}/u2", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, b"z" * 10)
t = 3000 * 10**9
os.utime(fd, ns=(os.fstat(fd).st_atime_ns, t))
os.close(fd)
assert on_b("u2").st_mtime_ns == t, f"u2 mtime on b: {on_b('u2').st_mtime_ns}"

# utime by path while open for writing, then close.
fd = os.open(f"{da}/u3", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, b"w" * 10)
os.utime(f"{da}/u3", ns=(4000 * 10**9, 5000 * 10**9))
os.close(fd)
assert on_b("u3").st_mtime_ns == 5000 * 10**9, f"u3 mtime on b: {on_b('u3').st_mtime_ns}"

# UTIME_NOW on an open file long after its write: the time of the call, not the write's.
fd = os.open(f"{da}/u4", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, b"v" * 10)
os.fsync(fd)
time.sleep(1.1)
before = time.time_ns()
os.utime(fd)
os.close(fd)
m = on_b("u4").st_mtime_ns
assert m >= before - 10_000_000, f"u4: UTIME_NOW lost on b: mtime {m} < {before}"

# chmod and ftruncate on an open file after a write.
fd = os.open(f"{da}/u5", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
os.write(fd, b"q" * 5000)
os.fchmod(fd, 0o600)
os.ftruncate(fd, 123)
os.close(fd)
s = on_b("u5")
assert (stat.S_IMODE(s.st_mode), s.st_size) == (0o600, 123), f"u5 on b: mode {oct(s.st_mode)} size {s.st_size}"

# A later write to an existing file moves its mtime on the bricks.
old = on_b("u1").st_mtime_ns
fd = os.open(f"{da}/u1", os.O_WRONLY)
os.pwrite(fd, b"x", 0)
os.close(fd)
# b stat'ed u1 just before: its kernel keeps that mtime for attr_timeout (1 s) even after
# the recall (so before this change too); read it once that has passed.
time.sleep(1.2)
new = on_b("u1").st_mtime_ns
assert new > old and new > 2000 * 10**9, f"u1 mtime on b after a write: {new} (was {old})"
EOF
pass "futimens, utime, UTIME_NOW, chmod, ftruncate and a later write through a reach b"
finish
