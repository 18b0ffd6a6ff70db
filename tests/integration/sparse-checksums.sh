#!/usr/bin/env bash
# Data checksums on sparse files, through a mounted replica-2 volume: a write at 1 TiB and
# truncates to 2 TiB and back touch only the blocks they change (timings printed, not
# asserted), the bricks' checksum sidecars stay sparse, data reads back, and a bit flipped
# on one brick near 1 TiB is caught and repaired from the other.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 sp 2 2
f=$CL_MNT/sparse

python3 - "$f" <<'PY' || fail "sparse write/truncate/read through the mount"
import os, sys, time
TIB = 1 << 40
p = sys.argv[1]
fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b"head" * 1024, 0)
t = time.monotonic()
os.pwrite(fd, b"tail" * 1024, TIB)
os.fsync(fd)
print(f"# pwrite of 4 KiB at 1 TiB: {time.monotonic() - t:.3f} s")
t = time.monotonic()
os.ftruncate(fd, 2 * TIB)
print(f"# truncate to 2 TiB: {time.monotonic() - t:.3f} s")
t = time.monotonic()
os.ftruncate(fd, TIB + 4096)
print(f"# truncate back to 1 TiB + 4 KiB: {time.monotonic() - t:.3f} s")
assert os.pread(fd, 4096, TIB) == b"tail" * 1024
assert os.pread(fd, 4096, 0) == b"head" * 1024
assert os.pread(fd, 4096, TIB // 2) == bytes(4096)
assert os.fstat(fd).st_size == TIB + 4096
os.close(fd)
PY
pass "write at 1 TiB, truncates to 2 TiB and back, data reads back"

for b in 0 1; do
    brick=$CL_DIR/bricks/sp-b$b
    id=$(getfattr --absolute-names -n trusted.cairn.id -e hex "$brick/data/sparse" 2>/dev/null |
        sed -n 's/^trusted.cairn.id=0x//p')
    [[ -n $id ]] || fail "no id on brick $b's copy"
    sc=$brick/.cairn/csum/$id
    [[ -f $sc ]] || fail "brick $b has no checksum sidecar for the 1 TiB file"
    kib=$(du -k "$sc" | cut -f1)
    ((kib < 1024)) || fail "brick $b's sidecar is not sparse: $kib KiB allocated"
    pass "brick $b: sidecar of $(stat -c %s "$sc") bytes, $kib KiB allocated"
done

# Flip a bit near 1 TiB on brick 0: the flipped data is never served. If brick 0 heads the
# file, the read finds the bad block and repairs it from brick 1 first; else brick 1
# serves the read and the scrub finds and repairs brick 0's copy. Either repair compares
# only the ranges that hold data on either copy (the holes of 1 TiB are skipped).
python3 - "$CL_DIR/bricks/sp-b0/data/sparse" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = (1 << 40) + 100
b = os.pread(fd, 1, off)
os.pwrite(fd, bytes([b[0] ^ 0x10]), off)
os.close(fd)
PY
got=$(python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    d = os.pread(fd, 4096, 1 << 40)
    print("right" if d == b"tail" * 1024 else "WRONG")
except OSError as e:
    print(f"errno {e.errno}")' "$f")
echo "# read near 1 TiB after a bit flip on brick 0: $got"
[[ $got == right ]] || fail "read after a bit flip on brick 0: $got"
pass "the flipped bit near 1 TiB was not served"

cairn_cli volume set sp features.scrub-interval 1 >/dev/null || fail "volume set features.scrub-interval 1"
b0=$CL_DIR/bricks/sp-b0/data/sparse
tail_ok() { python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
sys.exit(0 if os.pread(fd, 4096, 1 << 40) == b"tail" * 1024 else 1)' "$b0"; }
for _ in $(seq 120); do
    tail_ok && break
    sleep 1
done
tail_ok || fail "brick 0's copy near 1 TiB was not repaired within 120 s (by the read or the scrub)"
how=$(grep -ho 'scrub: repaired corrupt data\|repaired corrupt data from a replica' "$CL_DIR"/log/cairnd-n*.log | head -n 1)
[[ -n $how ]] || fail "brick 0's copy changed, but no repair was logged"
pass "brick 0's copy near 1 TiB repaired from brick 1 ($how)"
rm -f "$f" || fail "rm of the sparse file"
finish
