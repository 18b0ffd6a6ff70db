#!/usr/bin/env bash
# Cached directory attributes after namespace ops, on a 2 x 2 volume through two FUSE mounts.
# A create or unlink answers with the brick's copy of the parent directory, and the client
# amends its cached (merged over every set) attributes of the directory instead of dropping
# them, so the GETATTR the kernel sends after each create/unlink costs no brick round trip.
# They must stay right: this mount's own ops move the directory's times and nlink, and
# another mount's create/mkdir/unlink in the same directory is seen at once (its lease
# recall drops the amended copy).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 1 dattr 2 4
a=$CL_MNT
b=$CL_DIR/mnt-b
cl_mount dattr "$b"

# stat_of NAME: the stats counter NAME of mount $a (0 if absent).
stat_of() { cl_mount_stat "$a" "$1" 2>/dev/null; }
# times DIR: mtime, ctime (nanoseconds) and nlink.
times() { stat -c '%.9Y %.9Z %h' "$1"; }

# --- brick GETATTRs per create / unlink ------------------------------------------------
mkdir "$a/d"
stat "$a/d" >/dev/null
n=60
g0=$(stat_of brick.getattr)
for ((i = 0; i < n; i++)); do
    : >"$a/d/f$i"
done
g1=$(stat_of brick.getattr)
for ((i = 0; i < n; i++)); do
    rm "$a/d/f$i"
done
g2=$(stat_of brick.getattr)
echo "# brick getattrs: $((g1 - g0)) for $n creates, $((g2 - g1)) for $n unlinks"
# Before: every create/unlink dropped the directory's attributes and the kernel's next
# GETATTR asked both sets (about 1.5 per file). Now only cache expiry (1 s) re-fetches.
((g1 - g0 < n / 2)) || fail "$((g1 - g0)) brick getattrs for $n creates (want < $((n / 2)))"
((g2 - g1 < n / 2)) || fail "$((g2 - g1)) brick getattrs for $n unlinks (want < $((n / 2)))"
pass "creates and unlinks do not re-fetch the directory's attributes from the bricks"

# --- this mount's own changes, then another mount's, in the directory's attributes --------
# Through an open fd of d on each mount, so each stat is a GETATTR of d (never a LOOKUP,
# which answers one set's copy of a directory). Sleeps: file timestamps tick in jiffies, two
# ops within one could share an mtime.
python3 - "$a/d" "$b/d" <<'PY' || fail "directory attributes after namespace ops (see above)"
import os, sys, time
da, db = sys.argv[1], sys.argv[2]
fa = os.open(da, os.O_RDONLY | os.O_DIRECTORY)
def st():
    s = os.fstat(fa)
    return s.st_mtime_ns, s.st_ctime_ns, s.st_nlink
def check(what, ok, before, after):
    if not ok:
        print(f"FAIL: {what}: {before} -> {after}")
        sys.exit(1)
def touch(path):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
# a's own ops
t0 = st(); time.sleep(0.05)
touch(f"{da}/own")
t1 = st()
check("a's create moves d's mtime and ctime for a", t1[0] > t0[0] and t1[1] > t0[1], t0, t1)
time.sleep(0.05)
os.mkdir(f"{da}/sub")
t2 = st()
check("a's mkdir adds one to d's nlink for a", t2[2] == t1[2] + 1 and t2[0] > t1[0], t1, t2)
time.sleep(0.05)
os.rmdir(f"{da}/sub")
t3 = st()
check("a's rmdir takes one from d's nlink for a", t3[2] == t1[2] and t3[0] > t2[0], t2, t3)
time.sleep(0.05)
os.rename(f"{da}/own", f"{da}/own2")
t4 = st()
check("a's rename moves d's mtime for a", t4[0] > t3[0], t3, t4)
time.sleep(0.05)
os.unlink(f"{da}/own2")
t5 = st()
check("a's unlink moves d's mtime for a", t5[0] > t4[0], t4, t5)
print("ok - a's own create/mkdir/rmdir/rename/unlink show in a's cached attributes of d")
# b's ops while a keeps (and amends) its cached attributes of d; names over both sets
for i in range(8):
    touch(f"{da}/mine{i}")
    before = st(); time.sleep(0.05)
    touch(f"{db}/theirs{i}")
    after = st()
    check(f"b's create of theirs{i} moves d's mtime as a sees it", after[0] > before[0], before, after)
before = st()
os.mkdir(f"{db}/bsub")
after = st()
check("b's mkdir adds one to d's nlink as a sees it", after[2] == before[2] + 1, before, after)
time.sleep(0.05)
os.unlink(f"{db}/mine3")
after2 = st()
check("b's unlink moves d's mtime as a sees it", after2[0] > after[0], after, after2)
print("ok - b's create/mkdir/unlink in d are seen by a at once")
PY
pass "directory attributes stay right after this mount's and another mount's namespace ops"

finish
