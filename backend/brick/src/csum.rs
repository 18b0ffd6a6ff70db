//! Per-block checksums of regular files' data (CRC32C per 4 KiB block), so that data
//! changed behind Cairn's back (bit rot, a stray write on the brick's disk) is detected
//! when read and never served. See `docs/brick-format.md` ("Data checksums").
//!
//! - The table of a file is `[header | entry(block 0) | entry(block 1) | …]`: header =
//!   magic `CCS2`, block shift (12), flags (bit 0: partial), 2 zero bytes, the file size
//!   the table covers (u64 LE); then one u32 LE per block ([`enc`]: CRC of the block padded
//!   with zeros to 4 KiB, XOR that of a zero block, so a hole's entry is 0). Block `b`
//!   covers bytes `[b*4K, min((b+1)*4K, size))`. Tables of 64 KiB blocks (shift 16, and
//!   the older `CCS1`) are converted when loaded under the stripe lock: every 64 KiB block
//!   is read and checked against its old entry, then summed per 4 KiB ([`Brick::sums_convert`]).
//! - Up to 256 blocks (1 MiB) it is the xattr `trusted.cairn.csum` of the inode; larger
//!   files have a sparse sidecar file `.cairn/csum/<32 hex>` (holes are zero entries;
//!   authoritative when present; a file never moves back to the xattr). The brick knows
//!   which ids may have one ([`Sidecars`]: listed at open, kept up to date by every
//!   creation and removal here), so loading the table of any other file reads only the
//!   xattr, without a failing `openat` of the sidecar first.
//! - Every data change updates the table under the inode's stripe lock, computing only the
//!   blocks it touched (never the blocks a size change skips over: they are zeros): a block
//!   fully written is summed from the request's bytes; an append into the partial last
//!   block XORs in the entry of the appended bytes (no read); a partial overwrite reads
//!   back only the bytes it overwrites and XORs in the entry of old ^ new (`Pre::Range`);
//!   only a truncate or zeroing inside a block (or a write into an unknown entry) reads
//!   that block back (at most 4 KiB).
//! - Crash rule: before the first change of an inode the brick creates
//!   `.cairn/csum/dirty/<hex>` ("checksums may lag the data"). It is removed once the inode
//!   has been idle for a few seconds, after an fdatasync of the data and the sidecar. At
//!   open, every inode still marked has its table rebuilt from its data — a change cut by a
//!   crash was never acknowledged, so whatever bytes it left are the ones the replicas
//!   reconcile by heal; it is not reported as corruption.

use crate::dirty;
use crate::error::{fail, Ctx, Fail, R};
use crate::ids::is_reg;
use crate::store::Brick;
use crate::sys::{self, cstr, XTarget};
use bytes::Bytes;
use cairn_proto::Id;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Bytes per checksummed block.
pub const BLOCK: u64 = 4 << 10;
/// Block shift of the tables written before 4 KiB blocks (64 KiB blocks): converted at
/// load ([`Brick::sums_convert`]).
const OLD_SHIFT: u8 = 16;
const OLD_BLOCK: u64 = 1 << OLD_SHIFT;

/// Sidecars kept open (`Brick::sidecar_open`); past this many the set is emptied.
const SIDECAR_FDS: usize = 256;
/// Ids with a sidecar tracked by [`Sidecars`]; past this many it stops tracking (every
/// table load then tries the sidecar first, as if none were known).
const SIDECARS_TRACKED: usize = 1 << 20;

/// The ids that may have a sidecar (`Brick::csum_sidecars`). Never too small: an id is
/// added before its sidecar is renamed into place and removed only after this brick
/// removed the sidecar, both under the set's lock, and the set is filled by listing
/// `.cairn/csum` at open (until then it is *unknown*: every id may have one). It may hold
/// ids whose sidecar is gone (one removed behind the brick's back): their loads try the
/// open and fall back to the xattr as before.
pub(crate) struct Sidecars {
    ids: std::collections::HashSet<Id>,
    /// Not tracked: any id may have a sidecar.
    unknown: bool,
}

impl Sidecars {
    pub(crate) fn unknown() -> Sidecars {
        Sidecars { ids: Default::default(), unknown: true }
    }

    fn may_have(&self, id: Id) -> bool {
        self.unknown || self.ids.contains(&id)
    }

    fn insert(&mut self, id: Id) {
        if self.unknown {
            return;
        }
        if self.ids.len() >= SIDECARS_TRACKED {
            *self = Sidecars::unknown();
            return;
        }
        self.ids.insert(id);
    }
}

/// `sums_update` of a planned change met a block it would have to sum from disk.
const NEEDS_DATA: &str = "checksum block needs the written data";
const SHIFT: u8 = 12;
const _: () = assert!(BLOCK == 1 << SHIFT);
/// `sums_verify` without the stripe lock met a table of 64 KiB blocks: converting it
/// needs the lock (`Brick::read_fd` retries under it).
pub(crate) const OLD_TABLE: &str = "checksum table of 64 KiB blocks; converted under the lock";
pub(crate) const XATTR_CSUM: &CStr = c"trusted.cairn.csum";
/// Tables of at most this many blocks (1 MiB of file) live in the xattr (16 + 4*256 bytes:
/// leaves room in an ext4 xattr block for ACLs and user xattrs); larger files have a
/// sidecar.
pub(crate) const XATTR_MAX_BLOCKS: u64 = 256;
/// The largest table the xattr holds, in bytes (read with one `fgetxattr`).
const XATTR_BYTES: usize = (HDR + 4 * XATTR_MAX_BLOCKS) as usize;
/// Current table format: entries are [`enc`]oded (a zero block is 0).
const MAGIC: [u8; 4] = *b"CCS2";
/// First format: plain CRCs of the block's bytes (read, converted at the next change).
const MAGIC_V1: [u8; 4] = *b"CCS1";
/// Header flag: a *partial* table (of a file written before checksums existed): an entry
/// 0 is "unknown" (not verified) and a known entry is stored XOR [`KNOWN`].
const F_PARTIAL: u8 = 1;
const KNOWN: u32 = 0xFFFF_FFFF;
const HDR: u64 = 16;
/// errno of a checksum mismatch (`EUCLEAN`, "structure needs cleaning", as ext4/XFS use
/// for corruption): `cairn_proto::Errno::ECORRUPT`.
pub const ECORRUPT: i32 = libc::EUCLEAN;
/// Bytes of a sidecar read ahead when a read of entries misses the page cache (256 MiB
/// of data's entries).
const TABLE_AHEAD: u64 = 256 << 10;
/// Reads of at least this many blocks (128 KiB) read the table ahead.
const AHEAD_MIN_BLOCKS: u64 = 32;
/// Entries read or written per batch (scrub, rebuild: 1 MiB of data per read).
const BATCH: u64 = 256;
/// XORed into the entries of a block that must keep failing (a 64 KiB block that failed
/// its old entry when its table was converted): never 0, and no usual entry of a partial
/// table turns into "unknown" by it.
const FAILING: u32 = 1;

/// Zeros enough for padding an old 64 KiB block.
static ZEROS: [u8; OLD_BLOCK as usize] = [0; OLD_BLOCK as usize];

fn zero_full() -> u32 {
    static Z: OnceLock<u32> = OnceLock::new();
    *Z.get_or_init(|| crc32c::crc32c(&ZEROS[..BLOCK as usize]))
}

fn zero_full_old() -> u32 {
    static Z: OnceLock<u32> = OnceLock::new();
    *Z.get_or_init(|| crc32c::crc32c(&ZEROS))
}

/// Entry of a 64 KiB block (tables of shift 16) of `len` bytes whose CRC32C is `crc`.
fn enc_old(crc: u32, len: u64) -> u32 {
    crc32c::crc32c_append(crc, &ZEROS[..(OLD_BLOCK - len) as usize]) ^ zero_full_old()
}

fn zero_crc(len: u64) -> u32 {
    if len == BLOCK {
        zero_full()
    } else {
        crc32c::crc32c(&ZEROS[..len as usize])
    }
}

/// The table entry of a block of `len` bytes whose CRC32C is `crc`: the CRC of the block
/// padded with zeros to 4 KiB, XOR the CRC of a zero block. So a block of zeros (a hole,
/// or the part of a block past the end of file) is 0 whatever its length, growing a file
/// never changes an entry, and entries are linear: for blocks X, Y, Z of zeros and
/// changed bytes, `enc(X ^ Y) = enc(X) ^ enc(Y)`.
fn enc(crc: u32, len: u64) -> u32 {
    let c = if len == BLOCK {
        crc
    } else {
        // Appending the zeros (hardware CRC, under a µs) is much cheaper than
        // `crc32c_combine` (a GF(2) matrix power: tens of µs).
        crc32c::crc32c_append(crc, &ZEROS[..(BLOCK - len) as usize])
    };
    c ^ zero_full()
}

/// Entry of the block of bytes `d` (its first `len` bytes; `len` may exceed `d`: zeros).
fn enc_bytes(d: &[u8]) -> u32 {
    enc(crc32c::crc32c(d), d.len() as u64)
}

/// Entry of a block holding only `d` at offset `at` (zeros elsewhere).
fn enc_placed(at: u64, d: &[u8]) -> u32 {
    enc(crc32c::crc32c_append(zero_crc(at), d), at + d.len() as u64)
}

pub(crate) fn nblocks(size: u64) -> u64 {
    size.div_ceil(BLOCK)
}

/// End (exclusive) of block `b` in a file of `size` bytes.
fn bend(size: u64, b: u64) -> u64 {
    ((b + 1) * BLOCK).min(size)
}

fn header(size: u64, partial: bool) -> [u8; HDR as usize] {
    let mut h = [0u8; HDR as usize];
    h[..4].copy_from_slice(&MAGIC);
    h[4] = SHIFT;
    h[5] = if partial { F_PARTIAL } else { 0 };
    h[8..].copy_from_slice(&size.to_le_bytes());
    h
}

/// A parsed table header.
#[derive(Clone, Copy)]
struct Hdr {
    size: u64,
    /// Format 1 (plain CRCs, 64 KiB blocks) or 2.
    ver: u8,
    partial: bool,
    /// Blocks of 64 KiB (shift 16): to convert.
    old: bool,
}

fn parse_header(h: &[u8]) -> Option<Hdr> {
    if h.len() < HDR as usize {
        return None;
    }
    let ver = match h[..4].try_into().expect("4 bytes") {
        MAGIC => 2,
        MAGIC_V1 => 1,
        _ => return None,
    };
    let old = match h[4] {
        SHIFT if ver == 2 => false,
        OLD_SHIFT => true,
        _ => return None,
    };
    if h[5] & !F_PARTIAL != 0 || (ver == 1 && h[5] != 0) {
        return None;
    }
    let size = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    Some(Hdr { size, ver, partial: h[5] & F_PARTIAL != 0, old })
}

fn le32(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn to_le(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|c| c.to_le_bytes()).collect()
}

/// Convert a format-1 table (plain CRCs of 64 KiB blocks, `size` bytes of file) to format-2
/// entries of 64 KiB blocks (converted to 4 KiB ones by [`Brick::sums_convert`]).
fn from_v1(size: u64, crcs: &[u32]) -> Vec<u32> {
    let len = |b: u64| ((b + 1) * OLD_BLOCK).min(size) - b * OLD_BLOCK;
    crcs.iter().enumerate().map(|(b, &c)| enc_old(c, len(b as u64))).collect()
}

/// Write the nonzero runs of `raw` (entries from block `b0`) to sidecar `fd`; zero entries
/// are left to the file's holes.
fn write_runs(fd: RawFd, b0: u64, raw: &[u32]) -> io::Result<()> {
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == 0 {
            i += 1;
            continue;
        }
        let j = raw[i..].iter().position(|&x| x == 0).map_or(raw.len(), |k| i + k);
        sys::pwrite_all(fd, &to_le(&raw[i..j]), HDR + (b0 + i as u64) * 4)?;
        i = j;
    }
    Ok(())
}

/// The checksum table of one file, loaded for an operation.
pub(crate) struct Sums {
    /// File size the table covers.
    pub size: u64,
    /// Header as on disk (a sidecar's header is rewritten only when it changes).
    loaded: (u64, bool),
    /// A partial table (see [`F_PARTIAL`]).
    partial: bool,
    loc: Loc,
}

enum Loc {
    /// Stored entries in memory, written back whole by `sums_commit`: the xattr, or
    /// (`sidecar`) a table converted from format 1 or built for a sidecar.
    Mem { v: Vec<u32>, sidecar: bool },
    /// A sidecar changed in place; its holes are zero entries.
    Sidecar(Arc<OwnedFd>),
}

impl Sums {
    fn empty() -> Sums {
        Sums {
            size: 0,
            loaded: (0, false),
            partial: false,
            loc: Loc::Mem { v: vec![], sidecar: false },
        }
    }

    /// Stored entries of blocks `b0..b0+n` (0 for blocks the table does not hold).
    fn raw(&self, b0: u64, n: u64) -> io::Result<Vec<u32>> {
        match &self.loc {
            Loc::Mem { v, .. } => {
                Ok((b0..b0 + n).map(|b| v.get(b as usize).copied().unwrap_or(0)).collect())
            }
            Loc::Sidecar(fd) => {
                let (fd, off, want) = (fd.as_raw_fd(), HDR + b0 * 4, (n * 4) as usize);
                let mut buf: Vec<u8> = Vec::with_capacity(want);
                // From the page cache when there (a hot read: one pread). Else, for a read
                // of 128 KiB or more (sequential I/O, scrub), the table is read ahead by
                // [`TABLE_AHEAD`] first: a cold sequential read of a large file would
                // otherwise alternate between its data and small readahead windows of its
                // table (1 KiB of table per MiB of data). A small cold read (random 4 KiB)
                // reads just its page of the table.
                let got =
                    match sys::pread_uninit(fd, &mut buf.spare_capacity_mut()[..want], off, true) {
                        Ok(got) => got,
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => 0,
                        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => 0,
                        Err(e) => return Err(e),
                    };
                if got < want {
                    if n < AHEAD_MIN_BLOCKS {
                        let mut buf = vec![0u8; want];
                        sys::pread(fd, &mut buf, off)?;
                        return Ok(le32(&buf));
                    }
                    let ahead = (want as u64).max(TABLE_AHEAD);
                    // SAFETY: plain syscall on an fd we own; advice only.
                    unsafe {
                        libc::posix_fadvise(fd, off as i64, ahead as i64, libc::POSIX_FADV_WILLNEED)
                    };
                    let mut buf = vec![0u8; want];
                    sys::pread(fd, &mut buf, off)?;
                    return Ok(le32(&buf));
                }
                // SAFETY: `pread_uninit` initialized the first `got` (= `want`) bytes.
                unsafe { buf.set_len(got) };
                Ok(le32(&buf))
            }
        }
    }

    /// The first block from `b` whose stored entry may be nonzero (a sidecar's holes are
    /// skipped).
    fn next_stored(&self, b: u64) -> io::Result<u64> {
        match &self.loc {
            Loc::Mem { .. } => Ok(b),
            Loc::Sidecar(fd) => match sys::lseek(fd.as_raw_fd(), HDR + b * 4, libc::SEEK_DATA) {
                Ok(d) => Ok(((d.max(HDR) - HDR) / 4).max(b)),
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(u64::MAX),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(b),
                Err(e) => Err(e),
            },
        }
    }

    /// The entry a stored value means (`None`: unknown, in a partial table).
    fn decode(&self, raw: u32) -> Option<u32> {
        if !self.partial {
            Some(raw)
        } else {
            (raw != 0).then_some(raw ^ KNOWN)
        }
    }

    fn encode(&self, e: Option<u32>) -> u32 {
        match e {
            Some(e) if self.partial => e ^ KNOWN,
            Some(e) => e,
            None => 0,
        }
    }

    /// Entries of blocks `b0..b0+n` (`None`: unknown).
    pub(crate) fn get(&self, b0: u64, n: u64) -> io::Result<Vec<Option<u32>>> {
        Ok(self.raw(b0, n)?.into_iter().map(|r| self.decode(r)).collect())
    }

    fn put_raw(&mut self, b0: u64, raw: &[u32]) -> io::Result<()> {
        match &mut self.loc {
            Loc::Mem { v, .. } => {
                let end = b0 as usize + raw.len();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[b0 as usize..end].copy_from_slice(raw);
                Ok(())
            }
            Loc::Sidecar(fd) => sys::pwrite_all(fd.as_raw_fd(), &to_le(raw), HDR + b0 * 4),
        }
    }

    /// Store 0 (a zero block; unknown in a partial table) for blocks `b0..b1`: a hole
    /// punched in a sidecar, so zeroing a huge range costs nothing.
    fn put_zero(&mut self, b0: u64, b1: u64) -> io::Result<()> {
        if b0 >= b1 {
            return Ok(());
        }
        match &mut self.loc {
            Loc::Mem { v, .. } => {
                let end = (b1 as usize).min(v.len());
                if (b0 as usize) < end {
                    v[b0 as usize..end].fill(0);
                }
                Ok(())
            }
            Loc::Sidecar(fd) => {
                let (off, len) = (HDR + b0 * 4, (b1 - b0) * 4);
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                match sys::fallocate(fd.as_raw_fd(), mode, off, len) {
                    Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                        let z = vec![0u8; (BATCH * 1024) as usize];
                        let mut at = 0;
                        while at < len {
                            let n = (len - at).min(z.len() as u64);
                            sys::pwrite_all(fd.as_raw_fd(), &z[..n as usize], off + at)?;
                            at += n;
                        }
                        Ok(())
                    }
                    r => r,
                }
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
            Change::Zero(off, len) | Change::Disk(off, len) => Some((off, off.saturating_add(len))),
        }
    }

    /// Entry of a block at `bs` holding only the changed bytes of `[ws, we)` (zeros
    /// elsewhere).
    fn placed(&self, bs: u64, ws: u64, we: u64) -> u32 {
        match *self {
            Change::Data(off, d) if we > ws => {
                enc_placed(ws - bs, &d[(ws - off) as usize..(we - off) as usize])
            }
            _ => 0,
        }
    }
}

/// The table of a file as loaded before a change, with the old contents of the blocks the
/// change overwrites only in part, each checked against its old entry. Summing those from
/// memory (rather than re-reading them after the write) means a partial overwrite never
/// launders corruption in the rest of a block: such a block keeps an entry that fails.
pub(crate) struct Before {
    sums: Option<Sums>,
    pre: Vec<(u64, Pre)>,
}

/// What [`Before`] keeps of a block a change overwrites in part.
enum Pre {
    /// Its old bytes up to the old size, and whether they matched their entry.
    Block(Vec<u8>, bool),
    /// A write of `[at, at+len)` into a block with a known entry `entry`: only the old
    /// bytes of that range (up to the old size; zeros past it). Entries are linear, so the
    /// new entry is `entry ^ enc(old bytes ^ new bytes, placed at at)` — no read of the
    /// rest of the block. If the rest fails its old entry (corruption), the new entry
    /// fails the new data just the same: nothing is laundered.
    Range { at: u64, len: u64, old: Vec<u8>, entry: u32 },
}

pub(crate) fn corrupt(id: Id, off: u64, why: impl std::fmt::Display) -> Fail {
    fail(ECORRUPT, format!("data of {id} at offset {off} {why}; not served (checksum mismatch)"))
}

/// Iterate the data (non-hole) regions of `fd` up to `size`, block aligned: calls `f(a,
/// b)` for block ranges `[a, b)` that may hold data. Blocks not passed are holes (zeros).
fn data_blocks(fd: RawFd, size: u64, f: impl FnMut(u64, u64) -> io::Result<()>) -> io::Result<()> {
    data_blocks_in(fd, 0, size, f)
}

/// [`data_blocks`] of the bytes `[from, size)`.
fn data_blocks_in(
    fd: RawFd,
    from: u64,
    size: u64,
    f: impl FnMut(u64, u64) -> io::Result<()>,
) -> io::Result<()> {
    data_runs(fd, from, size, BLOCK, f)
}

/// [`data_blocks_in`] in blocks of `bs` bytes.
fn data_runs(
    fd: RawFd,
    from: u64,
    size: u64,
    bs: u64,
    mut f: impl FnMut(u64, u64) -> io::Result<()>,
) -> io::Result<()> {
    let mut off = from;
    while off < size {
        let d = match sys::lseek(fd, off, libc::SEEK_DATA) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
            // No SEEK_DATA: everything is data.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return f(off / bs, size.div_ceil(bs));
            }
            Err(e) => return Err(e),
        };
        if d >= size {
            break;
        }
        let h = sys::lseek(fd, d, libc::SEEK_HOLE).unwrap_or(size).min(size);
        let (a, b) = (d / bs, h.div_ceil(bs).max(d / bs + 1));
        f(a, b)?;
        off = b * bs;
    }
    Ok(())
}

impl Brick {
    fn hex(id: Id) -> std::ffi::CString {
        cstr(id.to_hex().as_bytes()).expect("hex has no NUL")
    }

    /// The sidecar of `id`, open: kept open between changes (`csum_fds`, up to
    /// [`SIDECAR_FDS`]), so a stream of writes does not open it per write. A kept fd whose
    /// file has no link left (the sidecar was removed, or replaced by a rename) is
    /// dropped and the name opened again.
    /// `ENOENT` without a system call for an id that [`Sidecars`] says has none.
    fn sidecar_open(&self, id: Id) -> io::Result<Arc<OwnedFd>> {
        if !self.sidecar_may_exist(id) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let kept = self.csum_fds.lock().get(&id).cloned();
        if let Some(sc) = kept {
            if sys::fstat(sc.as_raw_fd()).is_ok_and(|st| st.st_nlink > 0) {
                return Ok(sc);
            }
            self.csum_fds.lock().remove(&id);
        }
        let flags = libc::O_RDWR | libc::O_NOFOLLOW;
        let sc = Arc::new(sys::openat(self.csum_dir.as_raw_fd(), &Self::hex(id), flags, 0)?);
        let mut fds = self.csum_fds.lock();
        if fds.len() >= SIDECAR_FDS {
            fds.clear();
        }
        fds.insert(id, sc.clone());
        Ok(sc)
    }

    /// Whether `id` may have a sidecar ([`Sidecars`]; `false`: it has none).
    pub(crate) fn sidecar_may_exist(&self, id: Id) -> bool {
        self.csum_sidecars.lock().may_have(id)
    }

    /// Whether `id` has a sidecar (a `lstat` only if [`Sidecars`] says it may).
    fn sidecar_exists(&self, id: Id) -> bool {
        self.sidecar_may_exist(id)
            && sys::lstatat(self.csum_dir.as_raw_fd(), &Self::hex(id)).is_ok()
    }

    /// Remove the sidecar of `id` (if any) and forget it in [`Sidecars`].
    fn sidecar_remove(&self, id: Id) {
        let mut known = self.csum_sidecars.lock();
        if !known.may_have(id) {
            return;
        }
        match sys::unlinkat(self.csum_dir.as_raw_fd(), &Self::hex(id), 0) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                // Still there, as far as we know: keep it known.
                tracing::warn!(brick = %self.root.display(), %id, error = %e, "cannot remove checksum sidecar");
            }
            _ => {
                known.ids.remove(&id);
            }
        }
    }

    /// Load the table of `id` (`fd` its data; the stripe lock held, exclusively or shared
    /// with its table mutex: a table of 64 KiB blocks is converted). `None`: the file has no
    /// checksums (created before checksums existed, or never written).
    pub(crate) fn sums_load(&self, id: Id, fd: RawFd) -> R<Option<Sums>> {
        match self.sums_load_any(id, fd)? {
            Some((s, true)) => self.sums_convert(id, fd, s).map(Some),
            other => Ok(other.map(|x| x.0)),
        }
    }

    /// [`Self::sums_load`] without the stripe lock: a table of 64 KiB blocks is refused
    /// (`EAGAIN`, [`OLD_TABLE`]: run again under the lock).
    fn sums_load_unlocked(&self, id: Id, fd: RawFd) -> R<Option<Sums>> {
        match self.sums_load_any(id, fd)? {
            Some((_, true)) => Err(fail(libc::EAGAIN, format!("read of {id}: {OLD_TABLE}"))),
            other => Ok(other.map(|x| x.0)),
        }
    }

    /// The table of `id` as stored, and whether it is of 64 KiB blocks (then its entries
    /// are format-2 entries of 64 KiB blocks, a format-1 table's converted).
    fn sums_load_any(&self, id: Id, fd: RawFd) -> R<Option<(Sums, bool)>> {
        let what = || format!("checksums of {id}");
        match self.sidecar_open(id) {
            Ok(sc) => {
                let mut h = [0u8; HDR as usize];
                let n = sys::pread(sc.as_raw_fd(), &mut h, 0).ctx(what)?;
                let Hdr { size, ver, partial, old } = parse_header(&h[..n])
                    .ok_or_else(|| corrupt(id, 0, "has a damaged checksum sidecar"))?;
                if ver == 1 {
                    let mut buf = vec![0u8; (size.div_ceil(OLD_BLOCK) * 4) as usize];
                    sys::pread(sc.as_raw_fd(), &mut buf, HDR).ctx(what)?;
                    let v = from_v1(size, &le32(&buf));
                    let loc = Loc::Mem { v, sidecar: true };
                    let s = Sums { size, loaded: (size, true), partial: false, loc };
                    return Ok(Some((s, true)));
                }
                let loc = Loc::Sidecar(sc);
                return Ok(Some((Sums { size, loaded: (size, partial), partial, loc }, old)));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        let v = match XTarget::Fd(fd).get_sized(XATTR_CSUM, XATTR_BYTES) {
            Ok(v) => v,
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {
                // A new, never written file starts an empty table; a non-empty file without
                // one predates checksums.
                let st = sys::fstat(fd).ctx(what)?;
                return Ok((st.st_size == 0).then(|| (Sums::empty(), false)));
            }
            Err(e) => return Err(e).ctx(what),
        };
        let Hdr { size, ver, partial, old } =
            parse_header(&v).ok_or_else(|| corrupt(id, 0, "has a damaged checksum xattr"))?;
        let body = &v[HDR as usize..];
        let blocks = if old { size.div_ceil(OLD_BLOCK) } else { nblocks(size) };
        if body.len() % 4 != 0 || (body.len() / 4) as u64 != blocks {
            return Err(corrupt(id, 0, "has a checksum xattr of the wrong length"));
        }
        let mut entries = le32(body);
        if ver == 1 {
            entries = from_v1(size, &entries);
        }
        let loc = Loc::Mem { v: entries, sidecar: false };
        Ok(Some((Sums { size, loaded: (size, partial), partial, loc }, old)))
    }

    /// Convert `old`, a table of 64 KiB blocks (format-2 entries), to 4 KiB blocks (stripe
    /// lock held: the data does not change meanwhile). Every 64 KiB block with data is read
    /// and checked against its old entry, then summed per 4 KiB; a block that fails keeps
    /// failing: its new entries are stored XOR [`FAILING`] (logged at error level; reads of
    /// it get ECORRUPT until a heal or a full overwrite). A hole whose old entry is not that
    /// of zeros likewise. Unknown entries (a partial table) stay unknown. Holes of the file
    /// are not read. The new table replaces the old one whole (a sidecar is built under a
    /// temporary name and renamed over the old), under the dirty mark like a change (a crash
    /// meanwhile rebuilds the table).
    pub(crate) fn sums_convert(&self, id: Id, fd: RawFd, old: Sums) -> R<Sums> {
        let what = || format!("converting the checksums of {id} to 4 KiB blocks");
        let t0 = Instant::now();
        let size = old.size;
        let per = OLD_BLOCK / BLOCK;
        let nold = size.div_ceil(OLD_BLOCK);
        let nnew = nblocks(size);
        let partial = old.partial;
        let mut bad = 0u64;
        let mut convert = |out: &mut dyn FnMut(u64, &[u32]) -> io::Result<()>| -> io::Result<()> {
            let mut runs = vec![];
            data_runs(fd, 0, size, OLD_BLOCK, |a, b| {
                runs.push((a, b.min(nold)));
                Ok(())
            })?;
            runs.push((nold, nold));
            let mut buf = vec![0u8; (BATCH * BLOCK) as usize];
            let mut next = 0;
            for (a, b) in runs {
                // Holes: the old entry must be that of zeros (or unknown).
                let mut ob = next;
                while ob < a {
                    ob = old.next_stored(ob)?;
                    if ob >= a {
                        break;
                    }
                    let n = (a - ob).min(BATCH * 1024);
                    for (i, e) in old.get(ob, n)?.into_iter().enumerate() {
                        if matches!(e, Some(e) if e != 0) {
                            bad += 1;
                            let b0 = (ob + i as u64) * per;
                            let raw = vec![old.encode(Some(FAILING)); per.min(nnew - b0) as usize];
                            out(b0, &raw)?;
                        }
                    }
                    ob += n;
                }
                let mut ob = a;
                while ob < b {
                    let n = (b - ob).min(BATCH / per);
                    let (start, end) = (ob * OLD_BLOCK, ((ob + n) * OLD_BLOCK).min(size));
                    let want = (end - start) as usize;
                    let got = sys::pread(fd, &mut buf[..want], start)?;
                    // A file shorter than its table: the missing bytes fail (as zeros,
                    // unless their entry is of zeros; the size check fails anyway).
                    buf[got..want].fill(0);
                    let es = old.get(ob, n)?;
                    let mut raw = Vec::with_capacity(want.div_ceil(BLOCK as usize));
                    for (i, chunk) in buf[..want].chunks(OLD_BLOCK as usize).enumerate() {
                        let Some(e) = es[i] else {
                            raw.extend(chunk.chunks(BLOCK as usize).map(|_| 0));
                            continue;
                        };
                        let ok = enc_old(crc32c::crc32c(chunk), chunk.len() as u64) == e;
                        if !ok {
                            bad += 1;
                        }
                        let x = if ok { 0 } else { FAILING };
                        raw.extend(
                            chunk
                                .chunks(BLOCK as usize)
                                .map(|c| old.encode(Some(enc_bytes(c) ^ x))),
                        );
                    }
                    out(ob * per, &raw)?;
                    ob += n;
                }
                next = b;
            }
            Ok(())
        };
        self.sums_begin(id)?;
        let sidecar = matches!(old.loc, Loc::Sidecar(_) | Loc::Mem { sidecar: true, .. })
            || nnew > XATTR_MAX_BLOCKS;
        let loc = if sidecar {
            let sc = self.sidecar_build(id, fd, size, partial, |sc| {
                convert(&mut |b0, e| write_runs(sc, b0, e))
            })?;
            self.csum_fds.lock().remove(&id);
            Loc::Sidecar(Arc::new(sc))
        } else {
            let mut v = vec![0u32; nnew as usize];
            convert(&mut |b0, e| {
                v[b0 as usize..b0 as usize + e.len()].copy_from_slice(e);
                Ok(())
            })
            .ctx(what)?;
            let sidecar = self.xattr_put(id, fd, size, partial, &v)?;
            Loc::Mem { v, sidecar }
        };
        if bad > 0 {
            tracing::error!(brick = %self.root.display(), %id, blocks = bad, "64 KiB blocks fail their old checksums while converting to 4 KiB blocks; they keep failing until healed");
        }
        tracing::debug!(brick = %self.root.display(), %id, size, elapsed = ?t0.elapsed(), "checksums converted to 4 KiB blocks");
        Ok(Sums { size, loaded: (size, partial), partial, loc })
    }

    /// Write back a table changed in memory (xattr) or finish one changed in place (sidecar:
    /// header and length). A table grown past the xattr limit moves to a sidecar.
    fn sums_commit(&self, id: Id, fd: RawFd, s: Sums) -> R<()> {
        let what = || format!("writing checksums of {id}");
        match s.loc {
            Loc::Mem { mut v, sidecar } => {
                let n = nblocks(s.size);
                if sidecar || n > XATTR_MAX_BLOCKS {
                    v.truncate(n as usize);
                    return self.sidecar_write(id, fd, s.size, s.partial, &v).map(drop);
                }
                v.resize(n as usize, 0);
                self.xattr_put(id, fd, s.size, s.partial, &v).map(drop)
            }
            Loc::Sidecar(sc) if (s.size, s.partial) != s.loaded => {
                sys::pwrite_all(sc.as_raw_fd(), &header(s.size, s.partial), 0).ctx(what)?;
                sys::ftruncate(sc.as_raw_fd(), HDR + nblocks(s.size) * 4).ctx(what)
            }
            Loc::Sidecar(_) => Ok(()), // entries written in place; header unchanged
        }
    }

    /// Store a table of at most [`XATTR_MAX_BLOCKS`] entries in the xattr; where it does not
    /// fit (an ext4 of 1 KiB blocks has less than 1 KiB for all xattrs of an inode) in a
    /// sidecar instead. Returns whether it went to a sidecar.
    fn xattr_put(&self, id: Id, fd: RawFd, size: u64, partial: bool, v: &[u32]) -> R<bool> {
        let mut buf = header(size, partial).to_vec();
        buf.extend(to_le(v));
        match XTarget::Fd(fd).set(XATTR_CSUM, &buf, 0) {
            Ok(()) => Ok(false),
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::E2BIG | libc::ERANGE)) =>
            {
                tracing::debug!(brick = %self.root.display(), %id, bytes = buf.len(), error = %e, "checksum table does not fit the xattr; using a sidecar");
                self.sidecar_write(id, fd, size, partial, v).map(|_| true)
            }
            Err(e) => Err(e).ctx(|| format!("writing checksums of {id}")),
        }
    }

    /// Create the sidecar of `id` (written to a temporary name, renamed into place, then
    /// the xattr removed), with stored entries `raw` from block 0 (the rest zero). Returns
    /// it open.
    fn sidecar_write(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        partial: bool,
        raw: &[u32],
    ) -> R<OwnedFd> {
        self.sidecar_build(id, fd, size, partial, |sc| write_runs(sc, 0, raw))
    }

    fn sidecar_build(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        partial: bool,
        fill: impl FnOnce(RawFd) -> io::Result<()>,
    ) -> R<OwnedFd> {
        let what = || format!("writing checksum sidecar of {id}");
        let d = self.csum_dir.as_raw_fd();
        let tmp = cstr(format!(".tmp.{}", id.to_hex()).as_bytes()).ctx(what)?;
        let _ = sys::unlinkat(d, &tmp, 0);
        let sc =
            sys::openat(d, &tmp, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600).ctx(what)?;
        sys::pwrite_all(sc.as_raw_fd(), &header(size, partial), 0).ctx(what)?;
        sys::ftruncate(sc.as_raw_fd(), HDR + nblocks(size) * 4).ctx(what)?;
        fill(sc.as_raw_fd()).ctx(what)?;
        {
            // Known before it is in place (under the set's lock: a removal meanwhile
            // cannot forget it after the rename).
            let mut known = self.csum_sidecars.lock();
            known.insert(id);
            sys::renameat2(d, &tmp, d, &Self::hex(id), 0).ctx(what)?;
        }
        match XTarget::Fd(fd).remove(XATTR_CSUM) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => Err(e).ctx(what),
            _ => Ok(sc),
        }
    }

    /// Forget the checksums of an inode that is gone (its sidecar and dirty marker).
    pub(crate) fn sums_forget(&self, id: Id) {
        self.csum_fds.lock().remove(&id);
        self.sidecar_remove(id);
        self.dirty.forget(id);
    }

    /// Before changing the data of `id` (stripe lock held): make sure it is listed in the
    /// dirty log, so a crash before the table is updated is not later taken for corruption.
    pub(crate) fn sums_begin(&self, id: Id) -> R<()> {
        self.dirty.begin(id).ctx(|| format!("listing {id} in the checksum dirty log"))
    }

    /// Before a data change of `id` (stripe lock held, `sums_begin` called): load the
    /// table and read the blocks `change` (or a truncate to `trunc`) overwrites in part.
    /// A non-empty file without a table (written before checksums) gets a *partial* one:
    /// every block unknown, each becoming known as it is written (no full rebuild).
    pub(crate) fn sums_before(
        &self,
        id: Id,
        fd: RawFd,
        change: Change,
        trunc: Option<u64>,
    ) -> R<Before> {
        let s = match self.sums_load(id, fd)? {
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
                tracing::error!(brick = %self.root.display(), %id, offset = bs, "a block partly overwritten fails its checksum; it keeps failing until healed");
            }
            pre.push((blk, Pre::Block(buf, ok)));
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
            Some(s) => self.sums_update(id, fd, s, &pre, new_size, change, false).or_else(|f| {
                tracing::warn!(brick = %self.root.display(), %id, error = %f.what, "incremental checksum update failed; rebuilding");
                self.sums_rebuild(id, fd)
            }),
            None => self.sums_rebuild(id, fd),
        };
        if let Err(f) = &r {
            tracing::error!(brick = %self.root.display(), %id, error = %f.what, "cannot update data checksums; dropping them");
            let _ = XTarget::Fd(fd).remove(XATTR_CSUM);
            self.csum_fds.lock().remove(&id);
            self.sidecar_remove(id);
        }
        self.dirty.touch(id);
        r
    }

    /// Before a write of `change` whose data is not on disk yet (`Brick::op_write`: the
    /// stripe's table mutex and the write's blocks held, `sums_begin` called): store the
    /// entries and size (`new`) the table will have once it is. `Ok(false)`: this change
    /// cannot be planned (no table; a block to sum from disk); nothing was stored, the
    /// caller writes the usual way.
    pub(crate) fn sums_planned(
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
        let r = match self.sums_update(id, fd, s, &pre, new, change, true) {
            Err(f) if f.errno == libc::EAGAIN && f.what == NEEDS_DATA => Ok(false),
            Err(f) => {
                tracing::debug!(brick = %self.root.display(), %id, error = %f.what, "checksums not planned; writing under the exclusive lock");
                Ok(false)
            }
            Ok(()) => Ok(true),
        };
        self.dirty.touch(id);
        r
    }

    /// After a planned write failed (stripe held exclusively): re-sum `[off, off+len)` and
    /// the size from what is on disk.
    pub(crate) fn sums_disk(&self, id: Id, fd: RawFd, off: u64, len: u64) -> R<()> {
        let old = self.sums_before(id, fd, Change::None, None)?;
        self.sums_changed(id, fd, old, Change::Disk(off, len))
    }

    /// Update the entries a change touched: O(blocks changed), whatever the offsets. Blocks
    /// past the old end that nothing wrote are zeros (entry 0: a sidecar hole, nothing to
    /// store); entries past a new, smaller end are cut off with the table.
    fn sums_update(
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
        self.sums_commit(id, fd, s)
    }

    /// Recompute the whole table of `id` from its data (holes are skipped: they are zero
    /// entries, left as holes of the sidecar).
    pub(crate) fn sums_rebuild(&self, id: Id, fd: RawFd) -> R<()> {
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
            self.sums_commit(id, fd, Sums { size, loaded: (size, false), partial: false, loc })
        }
    }

    /// Entries of blocks `[first, first+count)` of `id` computed from its data (`size`:
    /// the file size; blocks past it and holes are 0), not from its table: what a heal
    /// compares the target's copy by, so a block that rotted there is copied again. Data
    /// regions only are read, in batches, each under the stripe lock.
    pub(crate) fn sums_of_data(
        &self,
        id: Id,
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
                    let _g = self.stripe(id).lock();
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
    pub(crate) fn sums_from_data(&self, id: Id, fd: RawFd, data: &[u8]) -> R<()> {
        let v: Vec<u32> = data.chunks(BLOCK as usize).map(enc_bytes).collect();
        let size = data.len() as u64;
        let sidecar = self.sidecar_exists(id);
        let loc = Loc::Mem { v, sidecar };
        self.sums_commit(id, fd, Sums { size, loaded: (size, false), partial: false, loc })
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
        self.sums_verify_as(id, fd, size, start, buf, true)
    }

    /// [`Self::sums_verify`]; `locked`: whether the stripe lock is held (else a table of
    /// 64 KiB blocks is refused: see [`Self::sums_load_unlocked`]).
    fn sums_verify_as(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        start: u64,
        buf: &[u8],
        locked: bool,
    ) -> R<bool> {
        let s = if locked { self.sums_load(id, fd)? } else { self.sums_load_unlocked(id, fd)? };
        let Some(s) = s else {
            // No table: created before checksums, or never written (empty).
            if size == 0 {
                return Ok(true);
            }
            return Ok(false);
        };
        self.sums_check(id, &s, size, start, buf)?;
        Ok(true)
    }

    fn sums_check(&self, id: Id, s: &Sums, size: u64, start: u64, buf: &[u8]) -> R<()> {
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
            self.sums_verify_as(id, fd, size, offset.min(size) / BLOCK * BLOCK, &[], locked)?;
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
        self.sums_verify_as(id, fd, size, a0, &buf, locked)?;
        let buf = Bytes::from(buf);
        if a0 == offset && a1 == end {
            return Ok((buf, size));
        }
        Ok((buf.slice((offset - a0) as usize..(end - a0) as usize), size))
    }

    /// Verify every block of regular file `id` (scrub): its data regions are read and
    /// checked, its holes only need zero (or unknown) entries. Returns the file size.
    pub fn scrub_file(&self, id: Id) -> Result<u64, cairn_proto::RemoteError> {
        self.with_context("scrub", || {
            let fd = self.file(id)?;
            let f = fd.as_raw_fd();
            let _g = self.stripe(id).lock();
            let st = sys::fstat(f).ctx(|| format!("stat of {id}"))?;
            let size = st.st_size as u64;
            let Some(s) = self.sums_load(id, f)? else {
                return Ok(0);
            };
            self.sums_check(id, &s, size, size / BLOCK * BLOCK, &[])?;
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
                    self.sums_check(id, &s, size, start, &buf[..want])?;
                    blk += n;
                }
                next = b;
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

    /// At open: list the sidecars ([`Sidecars`]), removing those of inodes that are gone,
    /// and rebuild the table of every inode whose change a crash may have cut.
    pub(crate) fn sums_recover(&self) -> io::Result<()> {
        let mut dropped = 0u64;
        let mut known = Sidecars { ids: Default::default(), unknown: false };
        for e in sys::read_dir(self.csum_dir.as_raw_fd())? {
            if e.name == b"dirty" {
                continue;
            }
            let name = cstr(&e.name)?;
            let gone = match std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) {
                Some(id) => {
                    let gone = self.idx.lstat_index(id).is_err();
                    if !gone {
                        known.insert(id);
                    }
                    gone
                }
                None => e.name.starts_with(b".tmp."),
            };
            if gone {
                sys::unlinkat(self.csum_dir.as_raw_fd(), &name, 0)?;
                dropped += 1;
            }
        }
        *self.csum_sidecars.lock() = known;
        let mut rebuilt = 0u64;
        for id in self.dirty.listed()? {
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
        self.dirty.recovered()?;
        if rebuilt + dropped > 0 {
            tracing::info!(brick = %self.root.display(), rebuilt, dropped, "checksum tables recovered after an unclean stop");
        }
        Ok(())
    }

    /// The brick's tidy thread: every `LOG_SYNC`, write the dirty log's appends to disk
    /// and tidy the ids idle for a while ([`sums_tidy`](Self::sums_tidy)); while nothing
    /// is listed it sleeps until the next listing wakes it (`wakes`). It holds the brick
    /// only during a round and ends once the brick (and with it the log's end of `wakes`)
    /// is dropped.
    pub(crate) fn start_tidy(self: &Arc<Self>, wakes: std::sync::mpsc::Receiver<()>) {
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("cairn-tidy-{}", self.marker.index))
            .spawn(move || loop {
                use std::sync::mpsc::RecvTimeoutError;
                // Not holding the brick while waiting.
                let Some(quiet) = weak.upgrade().map(|b| b.dirty.quiet()) else { return };
                let woken = if quiet {
                    wakes.recv().map_err(|_| RecvTimeoutError::Disconnected)
                } else {
                    wakes.recv_timeout(dirty::LOG_SYNC)
                };
                match woken {
                    // Something was listed: tick from now on.
                    Ok(()) => continue,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(b) = weak.upgrade() else { return };
                b.sums_tidy();
            });
        if let Err(e) = spawned {
            // Changes still list their ids; the next open rebuilds them all.
            tracing::error!(brick = %self.root.display(), error = %e, "cannot start the checksum tidy thread; dirty ids are rebuilt at the next open");
        }
    }

    /// Write the dirty log to disk and tidy the ids idle for a while: their data and
    /// tables made durable (`fdatasync` of each file and its sidecar, or one `syncfs` for
    /// many), their listing dropped. Errors are logged; the ids stay listed and a later
    /// round retries them.
    pub(crate) fn sums_tidy(&self) {
        let shown = self.root.display();
        if let Err(e) = self.dirty.sync_log() {
            tracing::warn!(brick = %shown, error = %e, "cannot write the checksum dirty log");
        }
        let sync_each = |ids: &[Id]| -> io::Result<()> {
            for &id in ids {
                let fd = match self.idx.file_fd(id) {
                    Ok(fd) => fd,
                    Err(_) => continue, // gone
                };
                sys::fsync(fd.as_raw_fd(), true)
                    .map_err(|e| io::Error::new(e.kind(), format!("fdatasync of {id}: {e}")))?;
                if self.sidecar_may_exist(id) {
                    if let Ok(sc) =
                        sys::openat(self.csum_dir.as_raw_fd(), &Self::hex(id), libc::O_RDONLY, 0)
                    {
                        sys::fsync(sc.as_raw_fd(), true).map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!("fdatasync of the sidecar of {id}: {e}"),
                            )
                        })?;
                    }
                }
            }
            Ok(())
        };
        let r = self.dirty.tidy(
            |id| self.stripe(id).try_lock().is_none(),
            |ids, how| match how {
                dirty::Synced::Each => sync_each(ids),
                dirty::Synced::All => sys::syncfs(self.idx.root.as_raw_fd())
                    .map_err(|e| io::Error::new(e.kind(), format!("syncfs: {e}"))),
            },
        );
        match r {
            Ok(Some((n, how))) => {
                tracing::debug!(brick = %shown, ids = n, ?how, "checksum dirty ids tidied")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(brick = %shown, error = %e, "cannot tidy the checksum dirty log; retrying later")
            }
        }
    }
}
