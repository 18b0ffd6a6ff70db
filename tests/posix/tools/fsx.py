#!/usr/bin/env python3
"""fsx-style randomized file checker.

Applies the same random sequence of operations to a file in the directory under test and
to a reference file in a local temporary directory, and compares the two after every read
and at the end: write (random offset, up to --maxlen bytes), truncate (grow and shrink),
punch hole (fallocate PUNCH_HOLE|KEEP_SIZE), read-and-compare, rename to a new name and
back, close/reopen, fsync. No mmap.

Usage: fsx.py DIR [--ops N] [--seed S] [--maxlen B] [--maxsize B] [--corrupt-at N]

Exit 0 when every comparison matched, 1 on the first mismatch or unexpected error (the
seed, the failing op number, the recent op log and a hex diff are printed), 2 on bad usage.
--corrupt-at N is a self-test: after op N it flips one byte of the file under test behind
fsx's back (through a separate descriptor), which fsx must then report.
"""

import argparse
import ctypes
import ctypes.util
import errno
import os
import random
import shutil
import sys
import tempfile

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def punch_hole(fd, off, length):
    if _libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Mismatch(Exception):
    pass


def hexdump_diff(want, got, base, context=32):
    """A hex diff of the first difference between two byte strings read at offset base."""
    n = min(len(want), len(got))
    first = next((i for i in range(n) if want[i] != got[i]), n)
    lo = max(0, first - context) // 16 * 16
    hi = min(max(len(want), len(got)), first + context)
    lines = [f"first difference at file offset {base + first} (0x{base + first:x}); "
             f"reference has {len(want)} bytes, target {len(got)}"]
    for row in range(lo, hi, 16):
        w = want[row:row + 16]
        g = got[row:row + 16]
        mark = " " if w == g else "!"
        lines.append(f"{mark} {base + row:08x}  ref {w.hex(' '):<47}  got {g.hex(' ')}")
    return "\n".join(lines)


class Fsx:
    def __init__(self, target_dir, ref_dir, seed, maxlen, maxsize, corrupt_at):
        self.rng = random.Random(seed)
        self.seed = seed
        self.maxlen = maxlen
        self.maxsize = maxsize
        self.corrupt_at = corrupt_at
        self.tname = os.path.join(target_dir, f"fsx.{seed}.dat")
        self.tname_alt = os.path.join(target_dir, f"fsx.{seed}.renamed")
        self.rname = os.path.join(ref_dir, "ref.dat")
        self.size = 0  # the reference's size, as fsx believes it
        self.log = []
        self.opno = 0
        for p in (self.tname, self.tname_alt):
            if os.path.exists(p):
                os.unlink(p)
        self.tfd = os.open(self.tname, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self.rfd = os.open(self.rname, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def note(self, s):
        self.log.append(f"{self.opno:6d} {s}")
        if len(self.log) > 50:
            del self.log[:-30]

    def both(self, what, f_target, f_ref):
        """Run an op on the reference, then the target; any target-only error fails."""
        f_ref()
        try:
            f_target()
        except OSError as e:
            raise Mismatch(f"{what} failed on the target but not the reference: {e}")

    # ---- operations ----
    def op_write(self):
        # Mostly near the current end (appends, overwrites), sometimes anywhere (sparse).
        if self.rng.random() < 0.8:
            off = self.rng.randrange(0, min(self.maxsize, self.size + self.maxlen))
        else:
            off = self.rng.randrange(0, self.maxsize)
        length = self.rng.randrange(1, self.maxlen + 1)
        length = min(length, self.maxsize - off) or 1
        data = self.rng.randbytes(length)
        self.note(f"write {off}+{length}")
        self.both("write", lambda: self.full_pwrite(self.tfd, data, off),
                  lambda: self.full_pwrite(self.rfd, data, off))
        self.size = max(self.size, off + length)

    @staticmethod
    def full_pwrite(fd, data, off):
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, off)
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            view = view[n:]
            off += n

    def op_truncate(self):
        if self.rng.random() < 0.5:
            new = self.rng.randrange(0, self.size + 1)  # shrink (or same)
        else:
            new = self.rng.randrange(self.size, self.maxsize + 1)  # grow
        self.note(f"truncate {self.size} -> {new}")
        self.both("truncate", lambda: os.ftruncate(self.tfd, new),
                  lambda: os.ftruncate(self.rfd, new))
        self.size = new

    def op_punch(self):
        if self.size == 0:
            return self.op_write()
        off = self.rng.randrange(0, self.size)
        length = self.rng.randrange(1, self.maxlen + 1)
        self.note(f"punch {off}+{length} (size {self.size})")
        # The reference emulates the hole with zeros, so it does not depend on the local
        # filesystem supporting PUNCH_HOLE.
        zero_len = max(0, min(off + length, self.size) - off)
        self.both("punch hole", lambda: punch_hole(self.tfd, off, length),
                  lambda: self.full_pwrite(self.rfd, bytes(zero_len), off))

    def op_copy_range(self):
        # copy_file_range(2) within the file (on a Cairn mount the bricks copy: Op::CopyRange;
        # the kernel flushes the cached pages of both ranges first). The reference copies by
        # read and write. Ranges of one file may not overlap (EINVAL), so they never do here.
        if self.size == 0:
            return self.op_write()
        src = self.rng.randrange(0, self.size)
        dst = self.rng.randrange(0, min(self.maxsize, self.size + self.maxlen))
        length = min(self.rng.randrange(1, self.maxlen + 1), abs(src - dst), self.maxsize - dst)
        if length <= 0:
            return None
        n = min(length, self.size - src)  # short at the end of the file
        self.note(f"copy_range {src}+{length} -> {dst} (size {self.size})")
        data = self.pread_all(self.rfd, src, n)

        def target():
            # Asked for `length`; a short count means the end of the file. Then the copy
            # itself may have extended the file past `src + n`, so stop there.
            done = os.copy_file_range(self.tfd, self.tfd, length, src, dst)
            while 0 < done < n:
                k = os.copy_file_range(self.tfd, self.tfd, n - done, src + done, dst + done)
                if k == 0:
                    break
                done += k
            if done != n:
                raise Mismatch(f"copy_range copied {done} bytes, expected {n}")

        self.both("copy_range", target, lambda: self.full_pwrite(self.rfd, data, dst))
        self.size = max(self.size, dst + n)

    def op_read(self):
        if self.size == 0 or self.rng.random() < 0.1:
            off = self.rng.randrange(0, self.size + 1024)  # at/after EOF too
        else:
            off = self.rng.randrange(0, self.size)
        length = self.rng.randrange(1, self.maxlen + 1)
        self.note(f"read {off}+{length}")
        self.compare(off, length)

    def op_rename(self):
        self.note("rename away and back")
        os.rename(self.tname, self.tname_alt)
        if os.path.exists(self.tname):
            raise Mismatch("old name still exists after rename")
        st = os.fstat(self.tfd)
        if st.st_size != self.size:
            raise Mismatch(f"size after rename is {st.st_size}, expected {self.size}")
        os.rename(self.tname_alt, self.tname)
        if os.path.exists(self.tname_alt):
            raise Mismatch("temporary name still exists after renaming back")

    def op_reopen(self):
        self.note("close/reopen")
        os.close(self.tfd)
        self.tfd = os.open(self.tname, os.O_RDWR)
        os.close(self.rfd)
        self.rfd = os.open(self.rname, os.O_RDWR)
        self.compare_all()

    def op_fsync(self):
        self.note("fsync")
        self.both("fsync", lambda: os.fsync(self.tfd), lambda: os.fsync(self.rfd))

    # ---- checks ----
    def pread_all(self, fd, off, length):
        out = bytearray()
        while len(out) < length:
            b = os.pread(fd, length - len(out), off + len(out))
            if not b:
                break
            out += b
        return bytes(out)

    def compare(self, off, length):
        want = self.pread_all(self.rfd, off, length)
        got = self.pread_all(self.tfd, off, length)
        if want != got:
            raise Mismatch(f"data mismatch reading {off}+{length}\n"
                           + hexdump_diff(want, got, off))

    def compare_all(self):
        tsize = os.fstat(self.tfd).st_size
        if tsize != self.size:
            raise Mismatch(f"target size {tsize}, expected {self.size}")
        chunk = 1 << 20
        for off in range(0, self.size, chunk):
            self.compare(off, min(chunk, self.size - off))

    def corrupt(self):
        """Self-test: flip one byte of the target behind fsx's back."""
        if self.size == 0:
            self.full_pwrite(self.rfd, b"\0", 0)
            self.full_pwrite(self.tfd, b"\0", 0)
            self.size = 1
        pos = self.rng.randrange(0, self.size)
        fd = os.open(self.tname, os.O_RDWR)
        try:
            b = os.pread(fd, 1, pos)
            os.pwrite(fd, bytes([b[0] ^ 0x5A]), pos)
        finally:
            os.close(fd)
        self.note(f"(self-test) corrupted byte at {pos}")

    def run(self, nops):
        ops = [(self.op_write, 30), (self.op_read, 30), (self.op_truncate, 8),
               (self.op_punch, 8), (self.op_copy_range, 8), (self.op_rename, 4),
               (self.op_reopen, 4), (self.op_fsync, 4)]
        fns = [f for f, _ in ops]
        weights = [w for _, w in ops]
        for self.opno in range(1, nops + 1):
            self.rng.choices(fns, weights)[0]()
            if self.corrupt_at == self.opno:
                self.corrupt()
        self.opno += 1
        self.note("final compare (open) and after close/reopen")
        self.compare_all()
        self.op_reopen()

    def close(self, remove):
        for fd in (self.tfd, self.rfd):
            try:
                os.close(fd)
            except OSError:
                pass
        if remove:
            for p in (self.tname, self.tname_alt):
                if os.path.exists(p):
                    os.unlink(p)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory under test (e.g. a Cairn mount)")
    ap.add_argument("--ops", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--maxlen", type=int, default=256 * 1024, help="largest write/read/punch")
    ap.add_argument("--maxsize", type=int, default=4 * 1024 * 1024, help="largest file size")
    ap.add_argument("--corrupt-at", type=int, default=None, metavar="N",
                    help="self-test: corrupt one byte of the target after op N")
    ap.add_argument("--keep", action="store_true", help="keep the file on failure")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.dir):
        print(f"fsx: {a.dir}: not a directory", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 2**31)
    print(f"fsx: seed={seed} ops={a.ops} maxlen={a.maxlen} maxsize={a.maxsize} dir={a.dir}",
          flush=True)
    ref_dir = tempfile.mkdtemp(prefix="fsx-ref-")
    fsx = None
    ok = False
    try:
        fsx = Fsx(a.dir, ref_dir, seed, a.maxlen, a.maxsize, a.corrupt_at)
        fsx.run(a.ops)
        ok = True
        print(f"fsx: {a.ops} ops passed (seed={seed}, final size {fsx.size})")
        return 0
    except (Mismatch, OSError) as e:
        opno = fsx.opno if fsx else 0
        print(f"fsx: FAILED at op {opno} (seed={seed}): {e}", file=sys.stderr)
        if fsx:
            print("fsx: recent ops:\n" + "\n".join(fsx.log[-20:]), file=sys.stderr)
            print(f"fsx: rerun with --seed {seed} --ops {opno}", file=sys.stderr)
        return 1
    finally:
        if fsx:
            fsx.close(remove=ok or not a.keep)
        shutil.rmtree(ref_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
