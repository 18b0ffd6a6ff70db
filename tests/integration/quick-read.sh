#!/usr/bin/env bash
# Quick-read (mount option quick_read, default 64 KiB): a lookup of a small regular file
# brings its content, and the read after the open is answered from it. Two mounts of one
# 2 x 2 volume check that it is used (the mount's `client.quick_reads` counter grows and
# the brick READs do not) and that it is coherent: a reader that read a file from its
# lookup's content sees another client's same-size rewrite, truncation and extension at
# once, through a descriptor it kept open and on a new open, and never content of a file
# it may not read. Fails if the mount never answers a read from lookup content, or
# answers one with content another client replaced.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 1 qr 2 4
a=$CL_MNT
b=$CL_DIR/mnt-b
cl_mount qr "$b"

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# --- used: a cold open + read costs one round trip, the lookup --------------------------
mkdir -p "$a/d1/d2"
for i in 0 1 2 3 4 5 6 7; do
    head -c 4096 /dev/urandom >"$a/d1/d2/f$i"
done
drop_caches
q0=$(cl_mount_stat "$b" client.quick_reads)
r0=$(cl_mount_stat "$b" brick.read)
for i in 0 1 2 3 4 5 6 7; do
    cmp -s "$a/d1/d2/f$i" "$b/d1/d2/f$i" || fail "b read f$i differently from a"
done
q1=$(cl_mount_stat "$b" client.quick_reads)
r1=$(cl_mount_stat "$b" brick.read)
((q1 - q0 >= 8)) || fail "b answered $((q1 - q0)) of 8 cold reads from lookup content"
assert_eq 0 "$((r1 - r0))" "brick READs of b for 8 cold 4 KiB files"
pass "cold open+read of small files through b used the lookups' content"

# --- coherent: another client's changes reach a reader of lookup content ---------------
head -c 4096 /dev/zero | tr '\0' x >"$a/f"
drop_caches
python3 - "$a/f" "$b/f" "$b" <<'EOF' || fail "b saw stale content after a's change (see above)"
import os, subprocess, sys

fa, fb, mb = sys.argv[1:4]

def quick_reads():
    out = subprocess.run(["getfattr", "--only-values", "-n", "trusted.cairn.mount-stats", mb],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        k, v = line.split()
        if k == "client.quick_reads":
            return int(v)
    return 0

def expect(what, got, want):
    if got != want:
        print(f"FAIL - {what}: got {got[:16]!r}... ({len(got)} bytes), want {want[:16]!r}... ({len(want)} bytes)")
        sys.exit(1)
    print(f"ok - {what}")

def rewrite(data, trunc=False):
    # Through mount a; close() returns once the bricks have it and recalled b's lease.
    fd = os.open(fa, os.O_WRONLY | (os.O_TRUNC if trunc else 0))
    os.write(fd, data)
    os.close(fd)

q = quick_reads()
fd = os.open(fb, os.O_RDONLY)
expect("b's first read", os.pread(fd, 65536, 0), b"x" * 4096)
if quick_reads() <= q:
    print("FAIL - b's first read was not answered from the lookup's content")
    sys.exit(1)
# Same size, so neither size nor a later lookup would reveal it: only the recall does.
rewrite(b"y" * 4096)
expect("b's read through its open descriptor after a's same-size rewrite",
       os.pread(fd, 65536, 0), b"y" * 4096)
os.close(fd)
with open(fb, "rb") as f:
    expect("b's new open after a's rewrite", f.read(), b"y" * 4096)
# b reads it again from a lookup's content, then a truncates and extends it.
with open(fb, "rb") as f:
    expect("b's read before a's truncation", f.read(), b"y" * 4096)
rewrite(b"z" * 100, trunc=True)
with open(fb, "rb") as f:
    expect("b's read after a's truncation", f.read(), b"z" * 100)
rewrite(b"w" * 9000, trunc=True)
with open(fb, "rb") as f:
    expect("b's read after a's extension", f.read(), b"w" * 9000)
# b's own change, then its read (through a descriptor opened before the change).
fd = os.open(fb, os.O_RDWR)
expect("b's read before its own write", os.pread(fd, 65536, 0), b"w" * 9000)
os.pwrite(fd, b"v" * 10, 0)
os.fsync(fd)
expect("b's read after its own write", os.pread(fd, 65536, 0), b"v" * 10 + b"w" * 8990)
os.close(fd)
with open(fa, "rb") as f:
    expect("a reads b's write", f.read(), b"v" * 10 + b"w" * 8990)
EOF
pass "another client's rewrite, truncation and extension are seen by a reader of lookup content"

# --- not for larger files, nor for callers who may not read ----------------------------
head -c $((200 << 10)) /dev/urandom >"$a/big"
drop_caches
q0=$(cl_mount_stat "$b" client.quick_reads)
cmp -s "$a/big" "$b/big" || fail "b read big differently from a"
assert_eq "$q0" "$(cl_mount_stat "$b" client.quick_reads)" "reads of b answered from lookup content for a 200 KiB file"

printf secret >"$a/private"
chmod 0600 "$a/private"
chmod o+x "$CL_DIR" "$CL_DIR/mnt-b" 2>/dev/null || true
drop_caches
if setpriv --reuid=nobody --regid=nogroup --clear-groups cat "$b/private" >/dev/null 2>&1; then
    fail "nobody read a 0600 file of root through b"
fi
assert_eq secret "$(cat "$b/private")" "root's read of the 0600 file through b"
pass "larger files and files the caller may not read are read from the bricks"

# --- off: quick_read=0 ------------------------------------------------------------------
c=$CL_DIR/mnt-c
mkdir -p "$c"
setsid "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr n1):/qr" "$c" -o noquickread \
    </dev/null >>"$CL_DIR/log/mount-qr-c.log" 2>&1 &
CL_MOUNTS[$c]=qr
wait_mount "$c" $! 30 || fail "mount with noquickread"
drop_caches
cmp -s "$a/d1/d2/f0" "$c/d1/d2/f0" || fail "c read f0 differently from a"
assert_eq 0 "$(cl_mount_stat "$c" client.quick_reads)" "reads answered from lookup content with noquickread"
((  $(cl_mount_stat "$c" brick.read) >= 1 )) || fail "c did not read f0 from the bricks"
pass "noquickread reads from the bricks"

finish
