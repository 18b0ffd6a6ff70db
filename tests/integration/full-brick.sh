#!/usr/bin/env bash
# One brick of a replica-2 set runs out of space (its filesystem: a 24 MiB ext4 on a loop
# device), the other has room. What a user expects, as with Gluster's AFR: writes go on on
# the brick that has room and are acknowledged; the full brick is taken out of the set
# (stale) and shows pending entries in `heal info`; nothing acknowledged is lost; once
# space is freed on it, heal brings it back and both copies are identical. The same when
# the brick's filesystem turns read-only (ext4 on a disk error, triggered here through
# /sys/fs/ext4/DEV/trigger_fs_error) and is repaired (brick stopped, e2fsck, mounted again,
# brick started, `heal VOL full`). (A volume whose every brick is full gives writers ENOSPC:
# backend/cairnd/tests/bad_input.rs.)
#
# Layout: 2 nodes, volume 1 x 2: brick 0 on n1 (a plain directory), brick 1 on n2 (the
# small filesystem).
set -euo pipefail
# The brick filesystem is mounted in a mount namespace of this test's own, so namespaces
# made meanwhile by others (`ip netns exec` copies every mount) cannot keep it alive after
# the test unmounts it for repair.
if [[ -z ${FULL_BRICK_PRIVATE_NS:-} ]] && command -v unshare >/dev/null; then
    FULL_BRICK_PRIVATE_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || skip "needs root for a loop-mounted brick filesystem"
command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 not installed (e2fsprogs)"

cl_init
small=$CL_DIR/small
img=$CL_DIR/small.img
mkdir -p "$small"
truncate -s 24M "$img"
mkfs.ext4 -q -F "$img" || fail "mkfs.ext4 $img"
mount -o loop,errors=remount-ro "$img" "$small" || skip "loop mount failed (no loop devices here)"
# On exit: the daemons stop first, then the brick filesystem goes, then the harness cleans up.
full_cleanup() {
    local rc=$?
    cl_stop_all || rc=1
    umount -l "$small" 2>/dev/null
    (exit "$rc")
    cl_cleanup
}
trap full_cleanup EXIT

cl_start_etcd
cl_start_node n1
cl_start_node n2
cl_peer_probe n2
mkdir -p "$CL_DIR/bricks/b0"
cairn_cli volume create full replica 2 "n1:$CL_DIR/bricks/b0" "n2:$small/b1" >/dev/null ||
    fail "volume create"
cairn_cli volume start full >/dev/null || fail "volume start"
# shellcheck disable=SC2034 # read by the harness
CL_VOLUME=full
cl_mount full
mnt=$CL_MNT

state_of() { # BRICK: its state in n1's view
    cairn_cli volume status full --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print([b["state"].lower() for v in d["volumes"] for b in v["bricks"] if b["index"] == int(sys.argv[1])][0])' "$1"
}
is_state() { [[ $(state_of "$1" 2>/dev/null) == "$2" ]]; }

# write_files DIR FIRST LAST: 1 MiB files DIR/fN, each fsynced; prints one line per file:
# "N ok" or "N ERRNO".
write_files() {
    python3 - "$@" <<'PY'
import errno, hashlib, os, sys
d, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(first, last + 1):
    data = hashlib.sha256(str(i).encode()).digest() * (32768)
    try:
        fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        print(i, "ok", flush=True)
    except OSError as e:
        print(i, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
PY
}
# check_files DIR LIST: every file named in LIST (numbers) reads back what was written.
check_files() {
    python3 - "$1" "$2" <<'PY'
import hashlib, sys
d, acked = sys.argv[1], [int(x) for x in open(sys.argv[2]).read().split()]
bad = []
for i in acked:
    want = hashlib.sha256(str(i).encode()).digest() * 32768
    try:
        got = open(f"{d}/f{i}", "rb").read()
    except OSError as e:
        bad.append(f"f{i}: {e}")
        continue
    if got != want:
        bad.append(f"f{i}: {len(got)} bytes, differs")
if bad:
    print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
}

mkdir -p "$mnt/d"
# Brick 1's filesystem turns read-only (a disk error): writes go on, it is taken out of
# the set; repaired and restarted, it heals. (First, while the filesystem has room: what
# the journal abort loses is then only what the heal puts back.)
dev=$(basename "$(findmnt -n -o SOURCE "$small")")
[[ -w /sys/fs/ext4/$dev/trigger_fs_error ]] || skip "no /sys/fs/ext4/$dev/trigger_fs_error"
echo "full-brick test: simulated disk error" >"/sys/fs/ext4/$dev/trigger_fs_error"
write_files "$mnt/d" 101 105 >"$CL_DIR/round2.txt"
errs=$(awk '$2 != "ok"' "$CL_DIR/round2.txt" | tr '\n' ';')
[[ -z $errs ]] || fail "a read-only replica stopped writes: $errs"
seq 101 105 >"$CL_DIR/kept.txt"
check_files "$mnt/d" "$CL_DIR/kept.txt" || fail "acknowledged writes do not read back"
[[ $(state_of 1) != up ]] || fail "the read-only brick is still up after missing writes"
pass "writes go on while one brick of the set is read-only; it is out of the set ($(state_of 1))"
cl_stop_node n2
umount "$small" || fail "umount the brick filesystem"
# The loop device goes away with the last user of the filesystem; e2fsck must not run
# while a copy of the mount lives on somewhere.
loop_free() { [[ -z $(losetup -j "$img") ]]; }
wait_until 10 loop_free ||
    fail "the brick filesystem is still in use after umount: $(losetup -j "$img")"
rc=0
e2fsck -fy "$img" >"$CL_DIR/e2fsck.log" 2>&1 || rc=$?
((rc < 4)) || fail "e2fsck could not repair $img: $(tail -n 3 "$CL_DIR/e2fsck.log")"
mount -o loop,errors=remount-ro "$img" "$small" || fail "mount the repaired brick filesystem"
echo "# repaired brick filesystem: $(df -k --output=used,avail "$small" | tail -1) KiB used, available"
cl_start_node n2
# A disk error aborts the journal: the brick's last few seconds of changes (what it had
# not committed yet) may be gone after e2fsck, and no pending record names them. So, as
# after any fsck of a brick, the admin asks for a full crawl.
cairn_cli volume heal full full >/dev/null || fail "volume heal full full"
wait_until 120 is_state 1 up ||
    fail "brick 1 did not heal back ($(df -k --output=used,avail "$small" | tail -1) KiB used, available; $(du -sk "$small/b1" | cut -f1) KiB in the brick): $(cairn_cli volume heal full info)"
check_files "$mnt/d" "$CL_DIR/kept.txt" || fail "acknowledged writes do not read back after heal"
pass "repaired and restarted, the brick healed"

# 48 MiB through a set whose brick 1 holds 24: brick 1 fills part way.
write_files "$mnt/d" 1 48 >"$CL_DIR/round1.txt"
awk '$2 == "ok" {print $1}' "$CL_DIR/round1.txt" >"$CL_DIR/acked.txt"
nok=$(wc -l <"$CL_DIR/acked.txt")
errs=$(awk '$2 != "ok"' "$CL_DIR/round1.txt" | sort -k2 | uniq -c -f1 | tr '\n' ';')
echo "# round 1: $nok of 48 writes acknowledged; errors: ${errs:-none}"
echo "# brick 1 is $(state_of 1); df of its filesystem: $(df -k --output=used,avail "$small" | tail -1)"
((nok == 48)) || fail "a full replica stopped writes the other brick had room for: $errs"
pass "writes go on while one brick of the set is full"
check_files "$mnt/d" "$CL_DIR/acked.txt" || fail "acknowledged writes do not read back"
pass "every acknowledged write reads back"
[[ $(state_of 1) != up ]] || fail "the full brick is still up after missing writes"
info=$(cairn_cli volume heal full info)
grep -Eq "Number of entries: [1-9]" <<<"$info" || fail "heal info shows nothing pending: $info"
pass "the full brick is out of the set ($(state_of 1)) and heal info lists pending entries"

# Free space on the full brick (what an admin does: delete data there, grow the disk): here,
# delete files through the volume so both bricks lose them; heal then fits.
for i in $(seq 1 40); do rm -f "$mnt/d/f$i"; done
seq 41 48 >>"$CL_DIR/kept.txt"
wait_until 120 is_state 1 up || fail "brick 1 did not heal back: $(cairn_cli volume heal full info)"
info=$(cairn_cli volume heal full info)
grep -Eq "Number of entries: [1-9]" <<<"$info" && fail "entries still pending after heal: $info"
pass "after space was freed, heal brought the brick back"
check_files "$mnt/d" "$CL_DIR/kept.txt" || fail "kept files do not read back after heal"
echo "# brick 1 after heal: $(df -k --output=used,avail "$small" | tail -1) KiB used, available; by dir: $(du -sk "$small"/b1/* "$small"/b1/.cairn/* 2>/dev/null | tr '\t\n' ' ;')"

# Both copies identical: read through a mount with brick 0's node down, so every read is
# served by brick 1.
cl_umount "$mnt"
cl_stop_node n1
cl_mount full "$CL_DIR/mnt2" n2
check_files "$CL_DIR/mnt2/d" "$CL_DIR/kept.txt" || fail "brick 1's copies differ after heal"
pass "brick 1 serves the same bytes on its own"
finish
