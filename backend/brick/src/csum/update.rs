//! Keeping a table in step with the data: before and after every change, planned ahead
//! of a write, or rebuilt from the data.

use super::*;
use crate::error::{fail, Ctx, R};
use crate::stripe::Stripe;
use crate::sys::{self, XTarget};
use cairn_proto::Id;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

impl Checksums {
    /// Before changing the data of `id` (stripe lock held): make sure it is listed in the
    /// dirty log, so a crash before the table is updated is not later taken for corruption.
    pub(crate) fn begin(&self, id: Id) -> R<()> {
        self.dirty.begin(id).ctx(|| format!("listing {id} in the checksum dirty log"))
    }

    /// Before a data change of `id` (stripe lock held, `begin` called): load the
    /// table and read the blocks `change` (or a truncate to `trunc`) overwrites in part.
    /// A non-empty file without a table (written before checksums) gets a *partial* one:
    /// every block unknown, each becoming known as it is written (no full rebuild).
    pub(crate) fn before(
        &self,
        id: Id,
        fd: RawFd,
        change: Change,
        trunc: Option<u64>,
    ) -> R<Before> {
        let s = match self.load(id, fd)? {
            Some(s) => s,
            None => {
                let st = sys::fstat(fd).ctx(|| format!("stat of {id}"))?;
                let size = st.st_size as u64;
                let loc = Loc::Mem { v: vec![], sidecar: false };
                Sums { size, loaded: (size, true), partial: true, loc }
            }
        };
        let old = s.size;
        let mut blocks = vec![];
        if let Some((a, b)) = change.range() {
            if a < b {
                for blk in [a / BLOCK, (b - 1) / BLOCK] {
                    let (bs, be) = (blk * BLOCK, bend(old, blk));
                    if bs < old && !(a <= bs && b >= be) {
                        blocks.push(blk);
                    }
                }
            }
        }
        if let Some(t) = trunc.filter(|&t| t < old && !t.is_multiple_of(BLOCK)) {
            blocks.push(t / BLOCK);
        }
        blocks.dedup();
        let mut pre = vec![];
        for blk in blocks {
            let (bs, be) = (blk * BLOCK, bend(old, blk));
            let trunc_blk = trunc.is_some_and(|t| t / BLOCK == blk);
            if let (Change::Data(off, d), false) = (change, trunc_blk) {
                if let Some(entry) = s.get(blk, 1).ctx(|| "checksums")?[0] {
                    let (ws, we) = (off.max(bs), (off + d.len() as u64).min(bs + BLOCK));
                    let want = (we.min(old).max(ws) - ws) as usize;
                    // Bytes past the end of the file read as zeros (`buf` is zeroed). A
                    // file shorter than its table is a write in flight past this block
                    // (the table runs ahead of writes; `Brick::op_write`): the bytes it
                    // has not reached are zeros. (Any other shortfall leaves the entry
                    // failing, as it would the data it lost.)
                    let mut buf = vec![0u8; want];
                    sys::pread(fd, &mut buf, ws).ctx(|| format!("reading {id} at {ws}"))?;
                    pre.push((blk, Pre::Range { at: ws, len: we - ws, old: buf, entry }));
                    continue;
                }
            }
            let mut buf = vec![0u8; (be - bs) as usize];
            let n = sys::pread(fd, &mut buf, bs).ctx(|| format!("reading {id} at {bs}"))?;
            let ok = match s.get(blk, 1).ctx(|| "checksums")?[0] {
                Some(e) => n == buf.len() && enc_bytes(&buf) == e,
                None => true, // unknown: nothing to keep failing
            };
            buf.truncate(n);
            if !ok {
                tracing::error!(brick = %self.shown, %id, offset = bs, "a block partly overwritten fails its checksum; it keeps failing until healed");
            }
            pre.push((blk, Pre::Block(buf, ok)));
        }
        Ok(Before { sums: Some(s), pre })
    }

    /// After a data change of `id` (stripe lock held; `begin` called before it):
    /// bring its table up to date. `old`: the table loaded before the change. A table that
    /// cannot be updated incrementally is rebuilt from the data; if even that fails it is
    /// removed (the file is then unverified until its next change rebuilds it) and the
    /// error returned.
    pub(crate) fn changed(&self, id: Id, fd: RawFd, before: Before, change: Change) -> R<()> {
        let Before { sums: old, pre } = before;
        let st = sys::fstat(fd).ctx(|| format!("stat of {id}"))?;
        let new_size = st.st_size as u64;
        let r = match old {
            Some(s) => self.update(id, fd, s, &pre, new_size, change, false).or_else(|f| {
                tracing::warn!(brick = %self.shown, %id, error = %f.what, "incremental checksum update failed; rebuilding");
                self.rebuild(id, fd)
            }),
            None => self.rebuild(id, fd),
        };
        if let Err(f) = &r {
            tracing::error!(brick = %self.shown, %id, error = %f.what, "cannot update data checksums; dropping them");
            let _ = XTarget::Fd(fd).remove(XATTR_CSUM);
            self.fds.lock().remove(&id);
            self.sidecar_remove(id);
        }
        self.dirty.touch(id);
        r
    }

    /// Before a write of `change` whose data is not on disk yet (`Brick::op_write`: the
    /// stripe's table mutex and the write's blocks held, `begin` called): store the
    /// entries and size (`new`) the table will have once it is. `Ok(false)`: this change
    /// cannot be planned (no table; a block to sum from disk); nothing was stored, the
    /// caller writes the usual way.
    pub(crate) fn planned(
        &self,
        id: Id,
        fd: RawFd,
        before: Before,
        change: Change,
        new: u64,
    ) -> R<bool> {
        let Before { sums, pre } = before;
        let Some(s) = sums else { return Ok(false) };
        let new = new.max(s.size);
        let r = match self.update(id, fd, s, &pre, new, change, true) {
            Err(f) if f.errno == libc::EAGAIN && f.what == NEEDS_DATA => Ok(false),
            Err(f) => {
                tracing::debug!(brick = %self.shown, %id, error = %f.what, "checksums not planned; writing under the exclusive lock");
                Ok(false)
            }
            Ok(()) => Ok(true),
        };
        self.dirty.touch(id);
        r
    }

    /// After a planned write failed (stripe held exclusively): re-sum `[off, off+len)` and
    /// the size from what is on disk.
    pub(crate) fn disk(&self, id: Id, fd: RawFd, off: u64, len: u64) -> R<()> {
        let old = self.before(id, fd, Change::None, None)?;
        self.changed(id, fd, old, Change::Disk(off, len))
    }

    /// Update the entries a change touched: O(blocks changed), whatever the offsets. Blocks
    /// past the old end that nothing wrote are zeros (entry 0: a sidecar hole, nothing to
    /// store); entries past a new, smaller end are cut off with the table.
    pub(super) fn update(
        &self,
        id: Id,
        fd: RawFd,
        mut s: Sums,
        pre: &[(u64, Pre)],
        new: u64,
        change: Change,
        planned: bool,
    ) -> R<()> {
        let what = || format!("updating checksums of {id}");
        let old = s.size;
        // A table that is or becomes a sidecar is changed in place from here on.
        if let Loc::Mem { v, sidecar } = &s.loc {
            if *sidecar || nblocks(new) > XATTR_MAX_BLOCKS {
                let sc = self.sidecar_write(id, fd, old, s.partial, v)?;
                s.loc = Loc::Sidecar(Arc::new(sc));
                s.loaded = (old, s.partial);
            }
        }
        let old_tail = (!old.is_multiple_of(BLOCK)).then_some(old / BLOCK);
        let mut todo: Vec<u64> = vec![];
        let range = change.range().map(|(a, b)| (a, b.min(new))).filter(|(a, b)| a < b);
        if let Some((a, b)) = range {
            let (first, last) = (a / BLOCK, (b - 1) / BLOCK);
            if matches!(change, Change::Zero(..)) && last > first + 1 {
                // Blocks strictly inside a zeroed range are whole zero blocks.
                s.put_zero(first + 1, last).ctx(what)?;
                todo.extend([first, last]);
            } else if matches!(change, Change::Disk(..)) && last > first + 1 {
                // A failed change (a fallocate can span terabytes): re-sum the range's
                // data regions; its holes are zero blocks.
                s.put_zero(first + 1, last).ctx(what)?;
                todo.extend([first, last]);
                data_blocks_in(fd, (first + 1) * BLOCK, last * BLOCK, |x, y| {
                    todo.extend(x.max(first + 1)..y.min(last));
                    Ok(())
                })
                .ctx(what)?;
            } else {
                todo.extend(first..=last);
            }
        }
        if new < old && !new.is_multiple_of(BLOCK) {
            todo.push(new / BLOCK);
        }
        todo.sort_unstable();
        todo.dedup();
        let mut readbuf = vec![];
        let mut out: Vec<(u64, u32)> = Vec::with_capacity(todo.len());
        for blk in todo {
            let bs = blk * BLOCK;
            let be = bend(new, blk);
            // The part of the block the change wrote.
            let (ws, we) = match range {
                Some((x, y)) if x < be && y > bs => (x.max(bs), y.min(be)),
                _ => (be, be),
            };
            let pre_blk = pre.iter().find(|p| p.0 == blk).map(|p| &p.1);
            let e: Option<u32> = if matches!(change, Change::Disk(..)) && we > ws {
                None // re-read below
            } else if ws == bs && we == be {
                // Written whole.
                Some(match change {
                    Change::Data(off, d) => enc_bytes(&d[(ws - off) as usize..(we - off) as usize]),
                    _ => 0,
                })
            } else if bs >= old {
                // Past the old end: zeros but for what the change wrote.
                Some(change.placed(bs, ws, we))
            } else if let (Some(Pre::Range { at, len, old, entry }), Change::Data(off, d)) =
                (pre_blk, change)
            {
                if (*at, at + len) != (ws, we) {
                    return Err(fail(
                        libc::EIO,
                        format!("{}: block {blk} written at {ws}..{we}, not {at}+{len}", what()),
                    ));
                }
                // old ^ new over the written range (old bytes past the old size: zeros).
                let mut delta = d[(ws - off) as usize..(we - off) as usize].to_vec();
                for (x, o) in delta.iter_mut().zip(old) {
                    *x ^= o;
                }
                Some(entry ^ enc_placed(ws - bs, &delta))
            } else if let Some(Pre::Block(old_bytes, ok)) = pre_blk {
                readbuf.clear();
                readbuf.extend_from_slice(old_bytes);
                readbuf.resize((be - bs) as usize, 0);
                if we > ws {
                    let dst = &mut readbuf[(ws - bs) as usize..(we - bs) as usize];
                    match change {
                        Change::Data(off, d) => {
                            dst.copy_from_slice(&d[(ws - off) as usize..(we - off) as usize])
                        }
                        _ => dst.fill(0),
                    }
                }
                let e = enc_bytes(&readbuf);
                Some(if *ok { e } else { !e })
            } else if Some(blk) == old_tail && ws >= old {
                // Written past the old end inside the old partial last block: those bytes
                // were zeros, so the entry changes by the entry of what was written.
                s.get(blk, 1).ctx(what)?[0].map(|e| e ^ change.placed(bs, ws, we))
            } else {
                None
            };
            let e = match e {
                Some(e) => e,
                // Planned before the data is written: nothing on disk to sum yet (and
                // nothing stored so far).
                None if planned => return Err(fail(libc::EAGAIN, NEEDS_DATA.to_string())),
                None => {
                    readbuf.resize((be - bs) as usize, 0);
                    let n = sys::pread(fd, &mut readbuf, bs).ctx(what)?;
                    if n != readbuf.len() {
                        return Err(fail(libc::EIO, format!("{}: short read at {bs}", what())));
                    }
                    enc_bytes(&readbuf)
                }
            };
            out.push((blk, s.encode(Some(e))));
        }
        // Store runs of consecutive blocks with one write each.
        let mut i = 0;
        while i < out.len() {
            let mut j = i + 1;
            while j < out.len() && out[j].0 == out[j - 1].0 + 1 {
                j += 1;
            }
            let raw: Vec<u32> = out[i..j].iter().map(|x| x.1).collect();
            s.put_raw(out[i].0, &raw).ctx(what)?;
            i = j;
        }
        s.size = new;
        self.commit(id, fd, s)
    }

    /// Recompute the whole table of `id` from its data (holes are skipped: they are zero
    /// entries, left as holes of the sidecar).
    pub(crate) fn rebuild(&self, id: Id, fd: RawFd) -> R<()> {
        let what = || format!("rebuilding checksums of {id}");
        let st = sys::fstat(fd).ctx(what)?;
        let size = st.st_size as u64;
        let mut buf = vec![0u8; (BATCH * BLOCK) as usize];
        // Entries of blocks [a, b), in batches, to `out(block, entries)`.
        let mut sum = |out: &mut dyn FnMut(u64, &[u32]) -> io::Result<()>| {
            data_blocks(fd, size, |a, b| {
                let mut blk = a;
                while blk < b {
                    let n = (b - blk).min(BATCH);
                    let (start, end) = (blk * BLOCK, bend(size, blk + n - 1));
                    let want = (end - start) as usize;
                    let got = sys::pread(fd, &mut buf[..want], start)?;
                    if got != want {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("short read at {start}"),
                        ));
                    }
                    let e: Vec<u32> = buf[..want].chunks(BLOCK as usize).map(enc_bytes).collect();
                    out(blk, &e)?;
                    blk += n;
                }
                Ok(())
            })
        };
        if self.sidecar_exists(id) || nblocks(size) > XATTR_MAX_BLOCKS {
            self.sidecar_build(id, fd, size, false, |sc| sum(&mut |b0, e| write_runs(sc, b0, e)))
                .map(drop)
        } else {
            let mut v = vec![0u32; nblocks(size) as usize];
            sum(&mut |b0, e| {
                v[b0 as usize..b0 as usize + e.len()].copy_from_slice(e);
                Ok(())
            })
            .ctx(what)?;
            let loc = Loc::Mem { v, sidecar: false };
            self.commit(id, fd, Sums { size, loaded: (size, false), partial: false, loc })
        }
    }

    /// Entries of blocks `[first, first+count)` of `id` computed from its data (`size`:
    /// the file size; blocks past it and holes are 0), not from its table: what a heal
    /// compares the target's copy by, so a block that rotted there is copied again. Data
    /// regions only are read, in batches, each under the stripe lock.
    pub(crate) fn of_data(
        &self,
        stripe: &Stripe,
        _id: Id,
        fd: RawFd,
        size: u64,
        first: u64,
        count: u64,
    ) -> io::Result<Vec<Option<u32>>> {
        let mut out = vec![Some(0); count as usize];
        let end = ((first + count) * BLOCK).min(size);
        let mut buf = vec![0u8; (BATCH * BLOCK) as usize];
        data_blocks_in(fd, first * BLOCK, end, |a, b| {
            let mut blk = a.max(first);
            let b = b.min(first + count);
            while blk < b {
                let n = (b - blk).min(BATCH);
                let (start, stop) = (blk * BLOCK, ((blk + n) * BLOCK).min(end));
                let want = (stop - start) as usize;
                let got = {
                    let _g = stripe.lock();
                    sys::pread(fd, &mut buf[..want], start)?
                };
                // Shorter now (a truncate meanwhile): the rest reads as zeros.
                buf[got..want].fill(0);
                for (i, c) in buf[..want].chunks(BLOCK as usize).enumerate() {
                    out[(blk - first) as usize + i] = Some(enc_bytes(c));
                }
                blk += n;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The table of `id` computed from its full contents `data` (heal).
    pub(crate) fn set_from_data(&self, id: Id, fd: RawFd, data: &[u8]) -> R<()> {
        let v: Vec<u32> = data.chunks(BLOCK as usize).map(enc_bytes).collect();
        let size = data.len() as u64;
        let sidecar = self.sidecar_exists(id);
        let loc = Loc::Mem { v, sidecar };
        self.commit(id, fd, Sums { size, loaded: (size, false), partial: false, loc })
    }
}
