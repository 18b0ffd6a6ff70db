#!/usr/bin/env bash
# Heal of a big sparse file (an iSCSI LUN backing file, a VM image) copies only what
# changed, in ranges, and keeps holes.
#
# 1. A 1.5 GiB sparse file with 8 MiB of data is written through the mount (both copies);
#    n2 is killed; ~40 MiB are written into it; n2 comes back: its heal converges (both
#    brick copies byte-identical, the target's holes still holes), and n2's index crawl
#    statistics show about 40 MiB copied, not 1.5 GiB.
# 2. The same with writes going on while n2 heals, at cluster.heal-bandwidth 8M (so the
#    heal takes a few seconds and the writes land between its ranges): no write is lost
#    or overwritten by an older range: the copies end identical and hold the last writes.
# 3. `heal full` of the healthy volume copies no file data.
# 4. A flipped bit in each brick's copy of the 1.5 GiB file (a different block on each):
#    reads of both blocks return the written data; the head of the file repaired its copy
#    from the other brick by copying the bad block, not the file (whole-file repair was
#    refused over 1 GiB, so the read failed with EIO).
#
# Layout: 2 nodes, volume bh = one replica set of 2 bricks (b0 on n1, b1 on n2).
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 bh 2 2
mnt=$CL_MNT
b0=$CL_DIR/bricks/bh-b0/data
b1=$CL_DIR/bricks/bh-b1/data
MIB=$((1 << 20))

# stats_of_n2 PY_EXPR: PY_EXPR with `b` = n2's brick heal statistics (JSON).
stats_of_n2() { cl_heal_stats bh n2 "$1"; }
all_up() { cl_all_up bh; }

# put FILE OFFSET_MIB COUNT_MIB SEED: write COUNT_MIB MiB of pseudo-random data at OFFSET_MIB
# MiB (plus 4097 bytes, so ranges are not block aligned) through the mount.
put() {
    python3 - "$@" <<'PY' || fail "writing $1 at $2 MiB"
import os, random, sys
path, off, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed)
fd = os.open(path, os.O_WRONLY)
for i in range(n):
    os.pwrite(fd, r.randbytes(1 << 20), (off + i) * (1 << 20) + 4097)
os.fsync(fd)
os.close(fd)
PY
}

# copies_identical WHAT FILE: the two brick copies hold the same bytes, the target's holes
# are still holes (it allocates no more than the source, plus 1 MiB).
copies_identical() {
    cmp "$b0/$2" "$b1/$2" >"$CL_DIR/cmp.txt" 2>&1 || fail "$1: copies differ: $(cat "$CL_DIR/cmp.txt")"
    local a b
    a=$(($(stat -c %b "$b0/$2") * 512))
    b=$(($(stat -c %b "$b1/$2") * 512))
    echo "# $1: source allocates $((a / MIB)) MiB, target $((b / MIB)) MiB of $(($(stat -c %s "$b0/$2") / MIB)) MiB"
    ((b <= a + MIB)) || fail "$1: target allocates $b bytes, source $a: holes were written"
    pass "$1: brick copies identical, holes kept"
}

# last_index_bytes: bytes the last finished index crawl of n2 copied.
last_index_bytes() {
    stats_of_n2 '[c["bytes"] for c in b["crawls"] if c["kind"] == "index" and c["ended"]][0]'
}

# --- 1. a brick away while 40 MiB of a 1.5 GiB sparse file changed ---------------------------
truncate -s 1536M "$mnt/lun" || fail "truncate -s 1536M"
put "$mnt/lun" 0 4 1
put "$mnt/lun" 1000 4 2
wait_until 30 all_up || fail "bricks not up"
copies_identical "before" lun
kill -9 "${CL_PID[n2]}"
CL_PID[n2]=
for at in 10 300 700 1200 1500; do put "$mnt/lun" "$at" 8 "$at"; done
pass "wrote 40 MiB into the 1.5 GiB file with n2 down"
t0=$SECONDS
cl_start_node n2
wait_until 180 all_up || fail "n2's brick did not heal: $(cairn_cli volume status bh)"
echo "# n2 back and healed in $((SECONDS - t0)) s (including its start)"
copies_identical "catch-up" lun
bytes=$(last_index_bytes)
echo "# index crawl of n2 copied $bytes bytes ($((bytes / MIB)) MiB) for 40 MiB changed"
((bytes >= 40 * MIB && bytes <= 42 * MIB)) ||
    fail "index crawl copied $bytes bytes, expected about 40 MiB (not the 1.5 GiB file)"
pass "heal copied only the changed data ($bytes bytes)"

# --- 2. writes while n2 heals, throttled --------------------------------------------------
cairn_cli volume set bh cluster.heal-bandwidth 8M || fail "volume set cluster.heal-bandwidth 8M"
kill -9 "${CL_PID[n2]}"
CL_PID[n2]=
for at in 20 400 800; do put "$mnt/lun" "$at" 8 "$((at + 7))"; done
pass "wrote 24 MiB with n2 down"
cl_start_node n2
healing() { cairn_cli volume status bh | grep -qi healing; }
wait_until 60 healing || fail "n2 did not start healing"
# While it heals (24 MiB at 8 MiB/s): overwrite parts of the ranges it copies, and more.
n=0
while healing && ((n < 40)); do
    put "$mnt/lun" $((20 + n % 24)) 1 $((9000 + n))
    n=$((n + 1))
done
pass "$n writes of 1 MiB during n2's heal"
wait_until 180 all_up || fail "n2's brick did not heal: $(cairn_cli volume status bh)"
# One more write once up: both copies take it.
put "$mnt/lun" 21 1 424242
copies_identical "heal with concurrent writes" lun
python3 - "$mnt/lun" "$n" <<'PY' || fail "the last writes do not read back"
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
want = {21: 424242}
for i in range(n):
    if 20 + i % 24 != 21:
        want[20 + i % 24] = 9000 + i
with open(path, "rb") as f:
    for mib, seed in want.items():
        f.seek(mib * (1 << 20) + 4097)
        if f.read(1 << 20) != random.Random(seed).randbytes(1 << 20):
            sys.exit(f"MiB {mib}: not the last write (seed {seed})")
PY
pass "every write during the heal reads back"
cairn_cli volume set bh cluster.heal-bandwidth 0 || fail "volume set cluster.heal-bandwidth 0"

# --- 3. a full heal of a healthy volume copies no data -------------------------------------
cairn_cli volume heal bh full || fail "heal full"
# Both bricks' crawls (each starts at its heal loop's next poll): one still to run would
# copy part 4's flipped blocks back and hide what part 4 checks.
full_done() {
    local n q='(not b["full_pending"]) and any(c["kind"] == "full" and c["ended"] for c in b["crawls"])'
    for n in n1 n2; do
        [[ $(cl_heal_stats bh "$n" "$q") == True ]] || return 1
    done
}
wait_until 120 full_done || fail "the full crawls did not finish: $(cairn_cli volume heal bh statistics)"
fbytes=$(stats_of_n2 '[c["bytes"] for c in b["crawls"] if c["kind"] == "full" and c["ended"]][0]')
assert_eq 0 "$fbytes" "a full heal of identical copies copies no data"
copies_identical "after heal full" lun

# --- 4. bit rot in a copy bigger than 1 GiB is repaired on read -----------------------------
# flip BRICK_FILE OFFSET: invert one byte behind Cairn's back.
flip() {
    python3 - "$1" "$2" <<'PY' || fail "flipping a byte of $1 at $2"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = int(sys.argv[2])
b = os.pread(fd, 1, off)
os.pwrite(fd, bytes([b[0] ^ 0xFF]), off)
os.fsync(fd)
os.close(fd)
PY
}
at_b0=$((21 * MIB + 5000))   # MiB 21 + 4097 holds seed 424242 (written last in part 2)
at_b1=$((1000 * MIB + 9000)) # MiB 1000 + 4097 holds seed 2 (part 1)
flip "$b0/lun" "$at_b0"
flip "$b1/lun" "$at_b1"
cmp -s "$b0/lun" "$b1/lun" && fail "the flips did not land"
sync
echo 3 >/proc/sys/vm/drop_caches
python3 - "$mnt/lun" <<'PY' || fail "reading the flipped blocks through the mount"
import random, sys
with open(sys.argv[1], "rb", buffering=0) as f:
    for mib, seed in ((21, 424242), (1000, 2)):
        f.seek(mib * (1 << 20) + 4097)
        if f.read(1 << 20) != random.Random(seed).randbytes(1 << 20):
            sys.exit(f"MiB {mib}: read back wrong data after a bit flip on a brick")
PY
pass "reads of the flipped blocks return the written data"
# byte_at FILE OFFSET: the byte at OFFSET of FILE, as a number.
byte_at() { python3 -c 'import os,sys; f=os.open(sys.argv[1],os.O_RDONLY); print(os.pread(f,1,int(sys.argv[2]))[0])' "$1" "$2"; }
fixed=0
[[ $(byte_at "$b0/lun" "$at_b0") == $(byte_at "$b1/lun" "$at_b0") ]] && fixed=$((fixed + 1))
[[ $(byte_at "$b1/lun" "$at_b1") == $(byte_at "$b0/lun" "$at_b1") ]] && fixed=$((fixed + 1))
assert_eq 1 "$fixed" "the head's flipped byte repaired, the other copy's left to the scrub"
grep -q 'repaired corrupt data from a replica' "$CL_DIR"/log/cairnd-*.log ||
    fail "no brick logged a repair"
pass "the head repaired its >1 GiB copy from the other brick"
finish
