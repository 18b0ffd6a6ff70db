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
//!   is read and checked against its old entry, then summed per 4 KiB ([`Checksums::convert`]).
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

use crate::dirty::DirtyLog;
use crate::error::io_err;
use crate::error::{fail, Fail};
use crate::sys::{self};
use cairn_proto::Id;
use cairn_proto::RemoteError;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};

/// How often the brick's tidy thread runs a round while the dirty log lists ids.
pub(crate) const TIDY_EVERY: std::time::Duration = crate::dirty::LOG_SYNC;

mod recover;
mod table;
mod update;
mod verify;

/// The data checksums of one brick: they own `.cairn/csum` (the sidecars of large files),
/// the sidecars kept open, the set of ids that may have one, and the dirty log
/// (`.cairn/csum/dirty`). The brick holds one and calls it around every data change and
/// read; it never reaches back into the brick (the lock stripe and the id index, where
/// needed, are handed in).
pub(crate) struct Checksums {
    /// The brick, for messages (its path).
    shown: String,
    /// `.cairn/csum`: checksum sidecars of large files.
    dir: OwnedFd,
    /// `.cairn/csum/dirty/log.*`: inodes whose checksums may lag their data (see
    /// `dirty.rs`).
    dirty: DirtyLog,
    /// Sidecars kept open between changes (`sidecar_open`).
    fds: Mutex<HashMap<Id, Arc<OwnedFd>>>,
    /// Ids that may have a sidecar ([`Sidecars`]): a table load of any other id goes
    /// straight to the xattr.
    sidecars: Mutex<Sidecars>,
}

impl Checksums {
    /// Open the checksums of the brick whose root directory is `root` (`shown`: its path,
    /// for messages), creating `.cairn/csum` and `.cairn/csum/dirty` if missing (bricks
    /// prepared before data checksums existed). Returns the receiving end of the dirty
    /// log's wake-ups, for the brick's tidy thread. Call [`Checksums::recover`] before
    /// serving.
    pub(crate) fn open(
        root: RawFd,
        shown: &str,
    ) -> Result<(Checksums, std::sync::mpsc::Receiver<()>), RemoteError> {
        let ctx = |what: &str, e: io::Error| io_err(e, format!("brick {shown}: {what}"));
        for d in [c".cairn/csum", c".cairn/csum/dirty"] {
            match sys::mkdirat(root, d, 0o700) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                    return Err(ctx(&format!("mkdir {d:?}"), e))
                }
                _ => {}
            }
        }
        let dir = sys::open_dir_at(root, c".cairn/csum").map_err(|e| ctx("open .cairn/csum", e))?;
        let dirty_dir = sys::open_dir_at(root, c".cairn/csum/dirty")
            .map_err(|e| ctx("open .cairn/csum/dirty", e))?;
        let (wake, wakes) = std::sync::mpsc::sync_channel(1);
        let dirty = DirtyLog::open(dirty_dir, wake)
            .map_err(|e| ctx("opening .cairn/csum/dirty/log.*", e))?;
        let c = Checksums {
            shown: shown.to_string(),
            dir,
            dirty,
            fds: Mutex::new(HashMap::new()),
            sidecars: Mutex::new(Sidecars::unknown()),
        };
        Ok((c, wakes))
    }

    /// Whether the dirty log lists nothing (the tidy thread may sleep until woken).
    pub(crate) fn quiet(&self) -> bool {
        self.dirty.quiet()
    }
}

/// Bytes per checksummed block.
pub const BLOCK: u64 = 4 << 10;
/// Block shift of the tables written before 4 KiB blocks (64 KiB blocks): converted at
/// load ([`Checksums::convert`]).
const OLD_SHIFT: u8 = 16;
const OLD_BLOCK: u64 = 1 << OLD_SHIFT;

/// Sidecars kept open (`Checksums::sidecar_open`); past this many the set is emptied.
const SIDECAR_FDS: usize = 256;
/// Ids with a sidecar tracked by [`Sidecars`]; past this many it stops tracking (every
/// table load then tries the sidecar first, as if none were known).
const SIDECARS_TRACKED: usize = 1 << 20;

/// The ids that may have a sidecar (`Checksums::sidecars`). Never too small: an id is
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

/// `Checksums::update` of a planned change met a block it would have to sum from disk.
const NEEDS_DATA: &str = "checksum block needs the written data";
const SHIFT: u8 = 12;
const _: () = assert!(BLOCK == 1 << SHIFT);
/// `Checksums::verify` without the stripe lock met a table of 64 KiB blocks: converting it
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
/// entries of 64 KiB blocks (converted to 4 KiB ones by [`Checksums::convert`]).
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
    /// Stored entries in memory, written back whole by `Checksums::commit`: the xattr, or
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
