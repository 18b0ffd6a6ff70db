//! Checking data against its table: reads, and a scrub of a whole file.

use super::*;
use crate::error::{fail, Ctx, R};
use crate::sys::{self};
use bytes::Bytes;
use cairn_proto::Id;
use std::os::fd::RawFd;

impl Checksums {
    /// Check `buf`, the bytes of `[start, start+buf.len())` of `id` (`start` block aligned,
    /// the end a block end or the end of file), against the table. `size`: the file size.
    pub(crate) fn verify(&self, id: Id, fd: RawFd, size: u64, start: u64, buf: &[u8]) -> R<bool> {
        self.verify_as(id, fd, size, start, buf, true)
    }

    /// [`Self::verify`]; `locked`: whether the stripe lock is held (else a table of
    /// 64 KiB blocks is refused: see [`Self::load_unlocked`]).
    pub(super) fn verify_as(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        start: u64,
        buf: &[u8],
        locked: bool,
    ) -> R<bool> {
        let s = if locked { self.load(id, fd)? } else { self.load_unlocked(id, fd)? };
        let Some(s) = s else {
            // No table: created before checksums, or never written (empty).
            if size == 0 {
                return Ok(true);
            }
            return Ok(false);
        };
        self.check(id, &s, size, start, buf)?;
        Ok(true)
    }

    pub(super) fn check(&self, id: Id, s: &Sums, size: u64, start: u64, buf: &[u8]) -> R<()> {
        if s.size != size {
            return Err(corrupt(
                id,
                s.size.min(size),
                format_args!("has size {size} but its checksums cover {}", s.size),
            ));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let b0 = start / BLOCK;
        let n = nblocks(buf.len() as u64);
        let want = s.get(b0, n).ctx(|| format!("checksums of {id}"))?;
        for (i, chunk) in buf.chunks(BLOCK as usize).enumerate() {
            let Some(want) = want[i] else { continue }; // unknown (partial table)
            let got = enc_bytes(chunk);
            if got != want {
                let b = b0 + i as u64;
                return Err(corrupt(
                    id,
                    b * BLOCK,
                    format_args!("(block {b}: stored entry {want:08x}, data {got:08x})"),
                ));
            }
        }
        Ok(())
    }

    /// Read `[offset, offset+len)` of `id` verified against its checksums: the blocks the
    /// range touches are read whole and checked. Returns the bytes and the file size.
    pub(crate) fn read_verified(
        &self,
        id: Id,
        fd: RawFd,
        offset: u64,
        len: usize,
    ) -> R<(Bytes, u64)> {
        let st = sys::fstat(fd).ctx(|| format!("read of {id} at {offset}+{len}"))?;
        self.read_verified_at(id, fd, st.st_size as u64, offset, len, false, true)
    }

    /// [`read_verified`](Self::read_verified) of a file of `size` bytes (its `fstat` just
    /// taken). The blocks are read into a buffer that is neither zeroed nor copied again:
    /// the bytes asked for are handed out as a slice of it. `nowait`: read only what the
    /// page cache holds (an `EAGAIN` or a short read fails with `EAGAIN`: run it again
    /// without). `locked`: whether the stripe lock is held (without it a table of 64 KiB
    /// blocks fails with `EAGAIN` and [`OLD_TABLE`]: run it again under the lock, which
    /// converts the table).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_verified_at(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        offset: u64,
        len: usize,
        nowait: bool,
        locked: bool,
    ) -> R<(Bytes, u64)> {
        let what = || format!("read of {id} at {offset}+{len}");
        let end = offset.saturating_add(len as u64).min(size);
        if offset >= end {
            self.verify_as(id, fd, size, offset.min(size) / BLOCK * BLOCK, &[], locked)?;
            return Ok((Bytes::new(), size));
        }
        let a0 = offset / BLOCK * BLOCK;
        let a1 = (end.div_ceil(BLOCK) * BLOCK).min(size);
        let want = (a1 - a0) as usize;
        let mut buf: Vec<u8> = Vec::with_capacity(want);
        let n =
            sys::pread_uninit(fd, &mut buf.spare_capacity_mut()[..want], a0, nowait).ctx(what)?;
        // SAFETY: `pread_uninit` initialized the first `n` bytes.
        unsafe { buf.set_len(n) };
        if n != want {
            if nowait {
                return Err(fail(libc::EAGAIN, format!("{}: not all cached", what())));
            }
            return Err(corrupt(id, a0 + n as u64, format_args!("ends before its size {size}")));
        }
        self.verify_as(id, fd, size, a0, &buf, locked)?;
        let buf = Bytes::from(buf);
        if a0 == offset && a1 == end {
            return Ok((buf, size));
        }
        Ok((buf.slice((offset - a0) as usize..(end - a0) as usize), size))
    }

    /// Verify every block of regular file `id`, open as `f`, of `size` bytes (the stripe
    /// lock held): its data regions are read and checked, its holes only need zero (or
    /// unknown) entries. A file without a table passes.
    pub(crate) fn scrub(&self, id: Id, f: RawFd, size: u64) -> R<()> {
        let Some(s) = self.load(id, f)? else {
            return Ok(());
        };
        self.check(id, &s, size, size / BLOCK * BLOCK, &[])?;
        let mut data = vec![];
        data_blocks(f, size, |a, b| {
            data.push((a, b));
            Ok(())
        })
        .ctx(|| format!("finding the data of {id}"))?;
        let mut buf = vec![0u8; (BATCH * BLOCK) as usize];
        let mut next = 0;
        data.push((nblocks(size), nblocks(size)));
        for (a, b) in data {
            // Holes: every entry must be that of a zero block.
            let mut blk = next;
            while blk < a {
                blk = s.next_stored(blk).ctx(|| format!("checksums of {id}"))?;
                if blk >= a {
                    break;
                }
                let n = (a - blk).min(BATCH * 1024);
                let es = s.get(blk, n).ctx(|| format!("checksums of {id}"))?;
                if let Some(i) = es.iter().position(|e| !matches!(e, Some(0) | None)) {
                    let b = blk + i as u64;
                    return Err(corrupt(
                        id,
                        b * BLOCK,
                        format_args!("(block {b}: a hole, but its checksum is of data)"),
                    ));
                }
                blk += n;
            }
            let mut blk = a;
            while blk < b {
                let n = (b - blk).min(BATCH);
                let (start, end) = (blk * BLOCK, bend(size, blk + n - 1));
                let want = (end - start) as usize;
                let got = sys::pread(f, &mut buf[..want], start)
                    .ctx(|| format!("reading {id} at {start}"))?;
                if got != want {
                    return Err(corrupt(id, start + got as u64, "ends before its size"));
                }
                self.check(id, &s, size, start, &buf[..want])?;
                blk += n;
            }
            next = b;
        }
        Ok(())
    }
}
