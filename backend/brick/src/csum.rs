//! Per-block checksums of regular files' data (CRC32C per 64 KiB block), so that data
//! changed behind Cairn's back (bit rot, a stray write on the brick's disk) is detected
//! when read and never served. See `docs/brick-format.md` ("Data checksums").
//!
//! - The table of a file is `[header | crc(block 0) | crc(block 1) | …]`: header = magic
//!   `CCS1`, block shift (16), 3 zero bytes, the file size the table covers (u64 LE); then
//!   one u32 LE per block. Block `b` covers bytes `[b*64K, min((b+1)*64K, size))`.
//! - Up to 256 blocks (16 MiB) it is the xattr `trusted.cairn.csum` of the inode; larger
//!   files have a sidecar file `.cairn/csum/<32 hex>` (authoritative when present; a file
//!   never moves back to the xattr).
//! - Every data change updates the table under the inode's stripe lock, computing only the
//!   blocks it touched: a block fully written is summed from the request's bytes; an append
//!   into the partial last block extends its CRC (no read); only a partial overwrite of a
//!   block reads that block back (at most 64 KiB).
//! - Crash rule: before the first change of an inode the brick creates
//!   `.cairn/csum/dirty/<hex>` ("checksums may lag the data"). It is removed once the inode
//!   has been idle for a few seconds, after an fdatasync of the data and the sidecar. At
//!   open, every inode still marked has its table rebuilt from its data — a change cut by a
//!   crash was never acknowledged, so whatever bytes it left are the ones the replicas
//!   reconcile by heal; it is not reported as corruption.

use crate::ids::is_reg;
use crate::store::{fail, Brick, Ctx, Fail, R};
use crate::sys::{self, cstr, XTarget};
use cairn_proto::Id;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Bytes per checksummed block.
pub const BLOCK: u64 = 64 << 10;
const SHIFT: u8 = 16;
pub(crate) const XATTR_CSUM: &CStr = c"trusted.cairn.csum";
/// Tables of at most this many blocks live in the xattr (16 + 4*256 bytes: leaves room in
/// an ext4 xattr block for ACLs and user xattrs).
pub(crate) const XATTR_MAX_BLOCKS: u64 = 256;
const MAGIC: [u8; 4] = *b"CCS1";
const HDR: u64 = 16;
/// errno of a checksum mismatch (`EUCLEAN`, "structure needs cleaning", as ext4/XFS use
/// for corruption): `cairn_proto::Errno::ECORRUPT`.
pub const ECORRUPT: i32 = libc::EUCLEAN;
/// An inode idle this long has its dirty marker removed.
const IDLE: Duration = Duration::from_secs(3);

static ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];

fn zero_full() -> u32 {
    static Z: OnceLock<u32> = OnceLock::new();
    *Z.get_or_init(|| crc32c::crc32c(&ZEROS))
}

fn zero_crc(len: u64) -> u32 {
    if len == BLOCK {
        zero_full()
    } else {
        crc32c::crc32c(&ZEROS[..len as usize])
    }
}

fn append_zeros(crc: u32, len: u64) -> u32 {
    crc32c::crc32c_append(crc, &ZEROS[..len as usize])
}

pub(crate) fn nblocks(size: u64) -> u64 {
    size.div_ceil(BLOCK)
}

/// End (exclusive) of block `b` in a file of `size` bytes.
fn bend(size: u64, b: u64) -> u64 {
    ((b + 1) * BLOCK).min(size)
}

fn header(size: u64) -> [u8; HDR as usize] {
    let mut h = [0u8; HDR as usize];
    h[..4].copy_from_slice(&MAGIC);
    h[4] = SHIFT;
    h[8..].copy_from_slice(&size.to_le_bytes());
    h
}

fn parse_header(h: &[u8]) -> Option<u64> {
    if h.len() < HDR as usize || h[..4] != MAGIC || h[4] != SHIFT {
        return None;
    }
    Some(u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")))
}

/// The checksum table of one file, loaded for an operation.
pub(crate) struct Sums {
    /// File size the table covers.
    pub size: u64,
    /// The size as loaded (a sidecar's header is rewritten only when it changes).
    loaded: u64,
    loc: Loc,
}

enum Loc {
    Xattr(Vec<u32>),
    Sidecar(OwnedFd),
}

impl Sums {
    fn empty() -> Sums {
        Sums { size: 0, loaded: 0, loc: Loc::Xattr(vec![]) }
    }

    /// CRCs of blocks `b0..b0+n` (0 for blocks the table does not hold: a damaged table).
    fn get(&self, b0: u64, n: u64) -> io::Result<Vec<u32>> {
        match &self.loc {
            Loc::Xattr(v) => {
                Ok((b0..b0 + n).map(|b| v.get(b as usize).copied().unwrap_or(0)).collect())
            }
            Loc::Sidecar(fd) => {
                let mut buf = vec![0u8; (n * 4) as usize];
                sys::pread(fd.as_raw_fd(), &mut buf, HDR + b0 * 4)?;
                Ok(buf.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect())
            }
        }
    }

    fn put(&mut self, b0: u64, crcs: &[u32]) -> io::Result<()> {
        match &mut self.loc {
            Loc::Xattr(v) => {
                let end = b0 as usize + crcs.len();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[b0 as usize..end].copy_from_slice(crcs);
                Ok(())
            }
            Loc::Sidecar(fd) => {
                let buf: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
                sys::pwrite_all(fd.as_raw_fd(), &buf, HDR + b0 * 4)
            }
        }
    }
}

/// What a data change did to the bytes of `[off, off+len)`: new bytes, or zeros.
#[derive(Clone, Copy)]
pub(crate) enum Change<'a> {
    /// Only the size may have changed (truncate, fallocate).
    None,
    Data(u64, &'a [u8]),
    Zero(u64, u64),
    /// A change that failed part way: `[off, off+len)` holds whatever is on disk.
    Disk(u64, u64),
}

impl Change<'_> {
    fn range(&self) -> Option<(u64, u64)> {
        match *self {
            Change::None => None,
            Change::Data(off, d) => Some((off, off + d.len() as u64)),
            Change::Zero(off, len) | Change::Disk(off, len) => Some((off, off + len)),
        }
    }

    /// CRC of `crc` extended with the changed bytes of `[from, to)` (inside the range).
    fn append(&self, crc: u32, from: u64, to: u64) -> u32 {
        match *self {
            Change::Data(off, d) => {
                crc32c::crc32c_append(crc, &d[(from - off) as usize..(to - off) as usize])
            }
            _ => append_zeros(crc, to - from),
        }
    }
}

/// The table of a file as loaded before a change, with the old contents of the blocks the
/// change overwrites only in part, each checked against its old CRC. Summing those from
/// memory (rather than re-reading them after the write) means a partial overwrite never
/// launders corruption in the rest of a block: such a block keeps a CRC that fails.
pub(crate) struct Before {
    sums: Option<Sums>,
    /// (block, its old bytes up to the old size, whether they matched their CRC)
    pre: Vec<(u64, Vec<u8>, bool)>,
}

pub(crate) fn corrupt(id: Id, off: u64, why: impl std::fmt::Display) -> Fail {
    fail(ECORRUPT, format!("data of {id} at offset {off} {why}; not served (checksum mismatch)"))
}

impl Brick {
    fn hex(id: Id) -> std::ffi::CString {
        cstr(id.to_hex().as_bytes()).expect("hex has no NUL")
    }

    /// Load the table of `id` (`fd` its data). `None`: the file has no checksums (created
    /// before checksums existed, or never written).
    pub(crate) fn sums_load(&self, id: Id, fd: RawFd) -> R<Option<Sums>> {
        let what = || format!("checksums of {id}");
        match sys::openat(
            self.csum_dir.as_raw_fd(),
            &Self::hex(id),
            libc::O_RDWR | libc::O_NOFOLLOW,
            0,
        ) {
            Ok(sc) => {
                let mut h = [0u8; HDR as usize];
                let n = sys::pread(sc.as_raw_fd(), &mut h, 0).ctx(what)?;
                let size = parse_header(&h[..n])
                    .ok_or_else(|| corrupt(id, 0, "has a damaged checksum sidecar"))?;
                return Ok(Some(Sums { size, loaded: size, loc: Loc::Sidecar(sc) }));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        let v = match XTarget::Fd(fd).get(XATTR_CSUM) {
            Ok(v) => v,
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {
                // A new, never written file starts an empty table; a non-empty file without
                // one predates checksums.
                let st = sys::fstat(fd).ctx(what)?;
                return Ok((st.st_size == 0).then(Sums::empty));
            }
            Err(e) => return Err(e).ctx(what),
        };
        let size =
            parse_header(&v).ok_or_else(|| corrupt(id, 0, "has a damaged checksum xattr"))?;
        let body = &v[HDR as usize..];
        if body.len() % 4 != 0 || (body.len() / 4) as u64 != nblocks(size) {
            return Err(corrupt(id, 0, "has a checksum xattr of the wrong length"));
        }
        let crcs =
            body.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        Ok(Some(Sums { size, loaded: size, loc: Loc::Xattr(crcs) }))
    }

    /// Write back a table changed in memory (xattr) or finish one changed in place (sidecar:
    /// header and length). A table grown past the xattr limit moves to a sidecar.
    fn sums_commit(&self, id: Id, fd: RawFd, s: Sums) -> R<()> {
        let what = || format!("writing checksums of {id}");
        match s.loc {
            Loc::Xattr(mut v) => {
                v.truncate(nblocks(s.size) as usize);
                if v.len() as u64 > XATTR_MAX_BLOCKS {
                    return self.sidecar_write(id, fd, s.size, &v);
                }
                let mut buf = header(s.size).to_vec();
                buf.extend(v.iter().flat_map(|c| c.to_le_bytes()));
                XTarget::Fd(fd).set(XATTR_CSUM, &buf, 0).ctx(what)
            }
            Loc::Sidecar(sc) if s.size != s.loaded => {
                sys::pwrite_all(sc.as_raw_fd(), &header(s.size), 0).ctx(what)?;
                sys::ftruncate(sc.as_raw_fd(), HDR + nblocks(s.size) * 4).ctx(what)
            }
            Loc::Sidecar(_) => Ok(()), // CRCs written in place; header unchanged
        }
    }

    /// Replace the table of `id` by a sidecar holding `crcs` (written to a temporary name,
    /// renamed into place, then the xattr removed).
    fn sidecar_write(&self, id: Id, fd: RawFd, size: u64, crcs: &[u32]) -> R<()> {
        let what = || format!("writing checksum sidecar of {id}");
        let d = self.csum_dir.as_raw_fd();
        let tmp = cstr(format!(".tmp.{}", id.to_hex()).as_bytes()).ctx(what)?;
        let _ = sys::unlinkat(d, &tmp, 0);
        let sc =
            sys::openat(d, &tmp, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600).ctx(what)?;
        let mut buf = header(size).to_vec();
        buf.extend(crcs.iter().flat_map(|c| c.to_le_bytes()));
        sys::pwrite_all(sc.as_raw_fd(), &buf, 0).ctx(what)?;
        sys::renameat2(d, &tmp, d, &Self::hex(id), 0).ctx(what)?;
        match XTarget::Fd(fd).remove(XATTR_CSUM) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => Err(e).ctx(what),
            _ => Ok(()),
        }
    }

    /// Forget the checksums of an inode that is gone (its sidecar and dirty marker).
    pub(crate) fn sums_forget(&self, id: Id) {
        let h = Self::hex(id);
        let _ = sys::unlinkat(self.csum_dir.as_raw_fd(), &h, 0);
        if self.csum_dirty.lock().remove(&id).is_some() {
            let _ = sys::unlinkat(self.dirty_dir.as_raw_fd(), &h, 0);
        }
    }

    /// Before changing the data of `id` (stripe lock held): make sure its dirty marker
    /// exists, so a crash before the table is updated is not later taken for corruption.
    pub(crate) fn sums_begin(&self, id: Id) -> R<()> {
        let mut d = self.csum_dirty.lock();
        if let Some(t) = d.get_mut(&id) {
            *t = Instant::now();
            return Ok(());
        }
        sys::openat(
            self.dirty_dir.as_raw_fd(),
            &Self::hex(id),
            libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW,
            0o600,
        )
        .ctx(|| format!("marking the checksums of {id} in flux"))?;
        d.insert(id, Instant::now());
        Ok(())
    }

    /// Before a data change of `id` (stripe lock held, `sums_begin` called): load the
    /// table and read the blocks `change` (or a truncate to `trunc`) overwrites in part.
    pub(crate) fn sums_before(
        &self,
        id: Id,
        fd: RawFd,
        change: Change,
        trunc: Option<u64>,
    ) -> R<Before> {
        let Some(s) = self.sums_load(id, fd)? else {
            return Ok(Before { sums: None, pre: vec![] });
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
            let mut buf = vec![0u8; (be - bs) as usize];
            let n = sys::pread(fd, &mut buf, bs).ctx(|| format!("reading {id} at {bs}"))?;
            let ok =
                n == buf.len() && crc32c::crc32c(&buf) == s.get(blk, 1).ctx(|| "checksums")?[0];
            buf.truncate(n);
            if !ok {
                tracing::error!(brick = %self.root.display(), %id, offset = bs, "a block partly overwritten fails its checksum; it keeps failing until healed");
            }
            pre.push((blk, buf, ok));
        }
        Ok(Before { sums: Some(s), pre })
    }

    /// After a data change of `id` (stripe lock held; `sums_begin` called before it):
    /// bring its table up to date. `old`: the table loaded before the change. A table that
    /// cannot be updated incrementally is rebuilt from the data; if even that fails it is
    /// removed (the file is then unverified until its next change rebuilds it) and the
    /// error returned.
    pub(crate) fn sums_changed(&self, id: Id, fd: RawFd, before: Before, change: Change) -> R<()> {
        let Before { sums: old, pre } = before;
        let st = sys::fstat(fd).ctx(|| format!("stat of {id}"))?;
        let new_size = st.st_size as u64;
        let r = match old {
            Some(s) => self.sums_update(id, fd, s, &pre, new_size, change).or_else(|f| {
                tracing::warn!(brick = %self.root.display(), %id, error = %f.what, "incremental checksum update failed; rebuilding");
                self.sums_rebuild(id, fd)
            }),
            None => self.sums_rebuild(id, fd),
        };
        if let Err(f) = &r {
            tracing::error!(brick = %self.root.display(), %id, error = %f.what, "cannot update data checksums; dropping them");
            let _ = XTarget::Fd(fd).remove(XATTR_CSUM);
            let _ = sys::unlinkat(self.csum_dir.as_raw_fd(), &Self::hex(id), 0);
        }
        if let Some(t) = self.csum_dirty.lock().get_mut(&id) {
            *t = Instant::now();
        }
        r
    }

    fn sums_update(
        &self,
        id: Id,
        fd: RawFd,
        mut s: Sums,
        pre: &[(u64, Vec<u8>, bool)],
        new: u64,
        change: Change,
    ) -> R<()> {
        let what = || format!("updating checksums of {id}");
        let old = s.size;
        let old_tail = (!old.is_multiple_of(BLOCK)).then_some(old / BLOCK);
        let nb = nblocks(new);
        // Blocks whose CRC changes: those the change touched, the old partial tail and every
        // block past it when the file grew, the new partial tail when it shrank.
        let mut ranges: Vec<(u64, u64)> = vec![];
        if let Some((a, b)) = change.range() {
            let b = b.min(new);
            if a < b {
                ranges.push((a / BLOCK, (b - 1) / BLOCK + 1));
            }
        }
        if new > old {
            ranges.push((old / BLOCK, nb));
        } else if new < old && !new.is_multiple_of(BLOCK) {
            ranges.push((new / BLOCK, new / BLOCK + 1));
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = vec![];
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let tail_crc = match old_tail {
            Some(t) if merged.iter().any(|&(a, b)| a <= t && t < b) => {
                Some(s.get(t, 1).ctx(what)?[0])
            }
            _ => None,
        };
        let mut readbuf = vec![];
        for (a, b) in merged {
            let mut crcs = Vec::with_capacity((b - a) as usize);
            for blk in a..b {
                let bs = blk * BLOCK;
                let be = bend(new, blk);
                // The part of the block the change wrote.
                let (ws, we) = match change.range() {
                    Some((x, y)) if x < be && y > bs => (x.max(bs), y.min(be)),
                    _ => (be, be),
                };
                // Prefix of the block that still holds the bytes the old CRC covered.
                let base = if matches!(change, Change::Disk(..)) && we > ws {
                    None
                } else if ws == bs && we == be {
                    Some((0, bs))
                } else if Some(blk) == old_tail && ws >= old {
                    tail_crc.map(|c| (c, old))
                } else if bs >= old {
                    Some((0, bs))
                } else {
                    None
                };
                let crc = match base {
                    Some((_, from)) if from == bs && ws == be => zero_crc(be - bs),
                    Some((c, from)) => {
                        let c = append_zeros(c, ws.max(from) - from);
                        let c = if we > ws { change.append(c, ws, we) } else { c };
                        append_zeros(c, be - we.max(from))
                    }
                    None if !matches!(change, Change::Disk(..))
                        && pre.iter().any(|p| p.0 == blk) =>
                    {
                        let (_, old_bytes, ok) = pre.iter().find(|p| p.0 == blk).expect("found");
                        readbuf.clear();
                        readbuf.extend_from_slice(old_bytes);
                        readbuf.resize((be - bs) as usize, 0);
                        if we > ws {
                            let dst = &mut readbuf[(ws - bs) as usize..(we - bs) as usize];
                            match change {
                                Change::Data(off, d) => dst
                                    .copy_from_slice(&d[(ws - off) as usize..(we - off) as usize]),
                                _ => dst.fill(0),
                            }
                        }
                        let c = crc32c::crc32c(&readbuf);
                        if *ok {
                            c
                        } else {
                            !c
                        }
                    }
                    None => {
                        readbuf.resize((be - bs) as usize, 0);
                        let n = sys::pread(fd, &mut readbuf, bs).ctx(what)?;
                        if n != readbuf.len() {
                            return Err(fail(libc::EIO, format!("{}: short read at {bs}", what())));
                        }
                        crc32c::crc32c(&readbuf)
                    }
                };
                crcs.push(crc);
            }
            s.put(a, &crcs).ctx(what)?;
        }
        s.size = new;
        self.sums_commit(id, fd, s)
    }

    /// Recompute the whole table of `id` from its data.
    pub(crate) fn sums_rebuild(&self, id: Id, fd: RawFd) -> R<()> {
        let what = || format!("rebuilding checksums of {id}");
        let st = sys::fstat(fd).ctx(what)?;
        let size = st.st_size as u64;
        let mut crcs = Vec::with_capacity(nblocks(size) as usize);
        let mut buf = vec![0u8; (16 * BLOCK) as usize];
        let mut off = 0;
        while off < size {
            let want = ((size - off).min(buf.len() as u64)) as usize;
            let n = sys::pread(fd, &mut buf[..want], off).ctx(what)?;
            if n != want {
                return Err(fail(libc::EIO, format!("{}: short read at {off}", what())));
            }
            crcs.extend(buf[..n].chunks(BLOCK as usize).map(crc32c::crc32c));
            off += n as u64;
        }
        self.sums_set(id, fd, size, &crcs)
    }

    /// The table of `id` computed from its full contents `data` (heal).
    pub(crate) fn sums_from_data(&self, id: Id, fd: RawFd, data: &[u8]) -> R<()> {
        let crcs: Vec<u32> = data.chunks(BLOCK as usize).map(crc32c::crc32c).collect();
        self.sums_set(id, fd, data.len() as u64, &crcs)
    }

    fn sums_set(&self, id: Id, fd: RawFd, size: u64, crcs: &[u32]) -> R<()> {
        let sidecar_exists = sys::lstatat(self.csum_dir.as_raw_fd(), &Self::hex(id)).is_ok();
        if sidecar_exists || crcs.len() as u64 > XATTR_MAX_BLOCKS {
            self.sidecar_write(id, fd, size, crcs)
        } else {
            self.sums_commit(id, fd, Sums { size, loaded: size, loc: Loc::Xattr(crcs.to_vec()) })
        }
    }

    /// Check `buf`, the bytes of `[start, start+buf.len())` of `id` (`start` block aligned,
    /// the end a block end or the end of file), against the table. `size`: the file size.
    pub(crate) fn sums_verify(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        start: u64,
        buf: &[u8],
    ) -> R<bool> {
        let Some(s) = self.sums_load(id, fd)? else {
            // No table: created before checksums, or never written (empty).
            if size == 0 {
                return Ok(true);
            }
            return Ok(false);
        };
        if s.size != size {
            return Err(corrupt(
                id,
                s.size.min(size),
                format_args!("has size {size} but its checksums cover {}", s.size),
            ));
        }
        if buf.is_empty() {
            return Ok(true);
        }
        let b0 = start / BLOCK;
        let n = nblocks(buf.len() as u64);
        let want = s.get(b0, n).ctx(|| format!("checksums of {id}"))?;
        for (i, chunk) in buf.chunks(BLOCK as usize).enumerate() {
            let got = crc32c::crc32c(chunk);
            if got != want[i] {
                let b = b0 + i as u64;
                return Err(corrupt(
                    id,
                    b * BLOCK,
                    format_args!("(block {b}: stored crc {:08x}, data {got:08x})", want[i]),
                ));
            }
        }
        Ok(true)
    }

    /// Read `[offset, offset+len)` of `id` verified against its checksums: the blocks the
    /// range touches are read whole and checked. Returns the bytes and the file size.
    pub(crate) fn read_verified(
        &self,
        id: Id,
        fd: RawFd,
        offset: u64,
        len: usize,
    ) -> R<(Vec<u8>, u64)> {
        let what = || format!("read of {id} at {offset}+{len}");
        let st = sys::fstat(fd).ctx(what)?;
        let size = st.st_size as u64;
        let end = offset.saturating_add(len as u64).min(size);
        if offset >= end {
            self.sums_verify(id, fd, size, offset.min(size) / BLOCK * BLOCK, &[])?;
            return Ok((vec![], size));
        }
        let a0 = offset / BLOCK * BLOCK;
        let a1 = (end.div_ceil(BLOCK) * BLOCK).min(size);
        let mut buf = vec![0u8; (a1 - a0) as usize];
        let n = sys::pread(fd, &mut buf, a0).ctx(what)?;
        if n != buf.len() {
            return Err(corrupt(id, a0 + n as u64, format_args!("ends before its size {size}")));
        }
        self.sums_verify(id, fd, size, a0, &buf)?;
        if a0 == offset && a1 == end {
            return Ok((buf, size));
        }
        Ok((buf[(offset - a0) as usize..(end - a0) as usize].to_vec(), size))
    }

    /// Verify every block of regular file `id` (scrub). Returns the bytes checked.
    pub fn scrub_file(&self, id: Id) -> Result<u64, cairn_proto::RemoteError> {
        self.with_context("scrub", || {
            let fd = self.file(id)?;
            let _g = self.stripe(id).lock();
            let st = sys::fstat(fd.as_raw_fd()).ctx(|| format!("stat of {id}"))?;
            let size = st.st_size as u64;
            let mut off = 0;
            let mut buf = vec![0u8; (16 * BLOCK) as usize];
            if self.sums_load(id, fd.as_raw_fd())?.is_none() {
                return Ok(0);
            }
            self.sums_verify(id, fd.as_raw_fd(), size, size / BLOCK * BLOCK, &[])?;
            while off < size {
                let want = ((size - off).min(buf.len() as u64)) as usize;
                let n = sys::pread(fd.as_raw_fd(), &mut buf[..want], off)
                    .ctx(|| format!("reading {id}"))?;
                if n != want {
                    return Err(corrupt(id, off + n as u64, "ends before its size"));
                }
                self.sums_verify(id, fd.as_raw_fd(), size, off, &buf[..n])?;
                off += n as u64;
            }
            Ok(size)
        })
    }

    /// Ids of the regular files of this brick (for a scrub).
    pub fn scrub_ids(&self) -> Result<Vec<Id>, cairn_proto::RemoteError> {
        self.with_context("scrub", || {
            let mut out = vec![];
            let ids = self.idx.ids_fd();
            let w = || "listing the id index".to_string();
            for a in sys::read_dir(ids).ctx(w)? {
                let Ok(afd) = sys::open_dir_at(ids, &cstr(&a.name).ctx(w)?) else { continue };
                for b in sys::read_dir(afd.as_raw_fd()).ctx(w)? {
                    let Ok(bfd) = sys::open_dir_at(afd.as_raw_fd(), &cstr(&b.name).ctx(w)?) else {
                        continue;
                    };
                    for e in sys::read_dir(bfd.as_raw_fd()).ctx(w)? {
                        let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex)
                        else {
                            continue;
                        };
                        if e.d_type == libc::DT_REG
                            || (e.d_type == libc::DT_UNKNOWN
                                && sys::lstatat(bfd.as_raw_fd(), &cstr(&e.name).ctx(w)?)
                                    .map(|st| is_reg(&st))
                                    .unwrap_or(false))
                        {
                            out.push(id);
                        }
                    }
                }
            }
            Ok(out)
        })
    }

    /// At open: rebuild the table of every inode whose change a crash may have cut, and
    /// remove sidecars of inodes that are gone.
    pub(crate) fn sums_recover(&self) -> io::Result<()> {
        let mut rebuilt = 0u64;
        for e in sys::read_dir(self.dirty_dir.as_raw_fd())? {
            let name = cstr(&e.name)?;
            if let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) {
                if let Ok(fd) = self.idx.file_fd(id) {
                    if let Err(f) = self.sums_rebuild(id, fd.as_raw_fd()) {
                        return Err(io::Error::new(
                            io::Error::from_raw_os_error(f.errno).kind(),
                            f.what,
                        ));
                    }
                    rebuilt += 1;
                }
            }
            sys::unlinkat(self.dirty_dir.as_raw_fd(), &name, 0)?;
        }
        sys::fsync(self.dirty_dir.as_raw_fd(), false)?;
        let mut dropped = 0u64;
        for e in sys::read_dir(self.csum_dir.as_raw_fd())? {
            if e.name == b"dirty" {
                continue;
            }
            let name = cstr(&e.name)?;
            let gone = match std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) {
                Some(id) => self.idx.lstat_index(id).is_err(),
                None => e.name.starts_with(b".tmp."),
            };
            if gone {
                sys::unlinkat(self.csum_dir.as_raw_fd(), &name, 0)?;
                dropped += 1;
            }
        }
        if rebuilt + dropped > 0 {
            tracing::info!(brick = %self.root.display(), rebuilt, dropped, "checksum tables recovered after an unclean stop");
        }
        Ok(())
    }

    /// Remove the dirty markers of inodes idle for a while, once their data and tables
    /// are on disk. Cheap when nothing is due; called after operations.
    pub(crate) fn sums_tidy(&self) {
        {
            let mut last = self.csum_tidied.lock();
            if last.elapsed() < IDLE {
                return;
            }
            *last = Instant::now();
        }
        let due: Vec<Id> = self
            .csum_dirty
            .lock()
            .iter()
            .filter(|(_, t)| t.elapsed() >= IDLE)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(_g) = self.stripe(id).try_lock() else { continue };
            if self.csum_dirty.lock().get(&id).is_none_or(|t| t.elapsed() < IDLE) {
                continue;
            }
            let h = Self::hex(id);
            let synced = match self.idx.file_fd(id) {
                Ok(fd) => {
                    sys::fsync(fd.as_raw_fd(), true).is_ok()
                        && match sys::openat(self.csum_dir.as_raw_fd(), &h, libc::O_RDONLY, 0) {
                            Ok(sc) => sys::fsync(sc.as_raw_fd(), true).is_ok(),
                            Err(_) => true,
                        }
                }
                Err(_) => true, // gone
            };
            if synced && sys::unlinkat(self.dirty_dir.as_raw_fd(), &h, 0).is_ok() {
                self.csum_dirty.lock().remove(&id);
            }
        }
    }
}
