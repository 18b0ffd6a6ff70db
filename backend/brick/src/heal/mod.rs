//! Heal: fetching the full state of an inode on a brick that has it, and applying it on
//! one that was away so that it becomes identical to its peers (the pending records that
//! say what to heal are in `pending.rs`).
//!
//! Heal is a set of functions over [`Store`], the few things it needs of a brick: the id
//! index, the checksums, the lock stripes and some of the brick's helpers. The brick
//! (`store/`) implements it and `dispatch` calls in here; heal never names the brick.

mod apply;
mod source;

pub(crate) use apply::{apply, write};
pub(crate) use source::{extents, fetch, meta, sums};

use crate::csum::{self, Checksums};
use crate::error::R;
use crate::ids::Index;
use crate::stripe::Stripe;
use crate::sys;
use cairn_proto::msg::HealExtent;
use cairn_proto::{Attr, Id, RemoteError};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

/// What heal needs of a brick.
pub(crate) trait Store {
    /// The id index (inodes by id, directories' index links).
    fn index(&self) -> &Index;
    /// The data checksums.
    fn checksums(&self) -> &Checksums;
    /// The lock stripe of inode `id`.
    fn stripe(&self, id: Id) -> &Stripe;
    /// The brick's directory (for messages).
    fn root(&self) -> &Path;
    /// This brick's index in its volume (for the pending records it keeps for itself).
    fn brick_index(&self) -> u32;
    /// Run `f`, adding the brick and `what` to its error.
    fn with_context<T>(&self, what: &str, f: impl FnOnce() -> R<T>) -> Result<T, RemoteError>;
    /// An fd of directory `id` (ESTALE if unknown).
    fn dir(&self, id: Id) -> R<Arc<OwnedFd>>;
    /// An fd of regular file `id` (ESTALE if unknown).
    fn file(&self, id: Id) -> R<Arc<OwnedFd>>;
    /// The attributes of `id`.
    fn attr(&self, id: Id) -> R<Attr>;
    /// Drop the cached listing of directory `dir` (it changed).
    fn forget_listing(&self, dir: Id);
    /// Drop the index link of non-directory `id` once no name and no open refers to it.
    fn drop_if_unused(&self, id: Id) -> R<()>;
    /// The client-visible xattrs of `id`, read as root.
    fn xattr_pairs(&self, id: Id) -> R<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Make the client-visible xattrs of `id` exactly `want`, as root.
    fn set_xattrs(&self, id: Id, want: &[(Vec<u8>, Vec<u8>)]) -> R<()>;
    /// Record, durably, that `id` changed while brick `peer` was not receiving writes.
    fn pending_add(&self, peer: u32, id: Id) -> Result<(), RemoteError>;
}

/// On a placeholder created by a directory heal (symlink or device whose target / rdev is
/// not known yet): the 16-byte parent id followed by the name, so the inode's own heal can
/// replace it in place.
pub(super) const XATTR_HEAL: &std::ffi::CStr = c"trusted.cairn.heal";
pub(super) const PLACEHOLDER_TARGET: &[u8] = b".cairn-heal-pending";

pub(super) fn not_found(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESTALE))
}

/// The first block at or after block `from` of the file at `f` (of `size` bytes) that
/// holds data (`SEEK_DATA`), the block count when none does, `None` when the filesystem
/// can't tell (then a heal skips nothing). A filesystem without hole support answers
/// `from` itself.
pub(super) fn next_data_block(id: Id, f: RawFd, size: u64, from: u64) -> Option<u64> {
    let end = csum::nblocks(size);
    if from >= end {
        return Some(end);
    }
    match sys::lseek(f, from * csum::BLOCK, libc::SEEK_DATA) {
        Ok(off) => Some((off / csum::BLOCK).clamp(from, end)),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Some(end),
        Err(e) => {
            tracing::debug!(%id, block = from, error = %e, "SEEK_DATA failed; the heal skips nothing");
            None
        }
    }
}

/// Add an extent, merged with the last one when adjacent and of the same kind.
pub(super) fn push_extent(extents: &mut Vec<HealExtent>, offset: u64, len: u64, zero: bool) {
    match extents.last_mut() {
        Some(e) if e.zero == zero && e.offset + e.len == offset => e.len += len,
        _ => extents.push(HealExtent { offset, len, zero }),
    }
}

/// Runs of blocks (`[start, end)`, at most `max_run` blocks each) whose entries differ
/// between the heal source (`mine`) and the target (`theirs`), both read from block
/// `first`; an unknown entry on either side differs.
pub fn heal_diff(
    first: u64,
    mine: &[Option<u32>],
    theirs: &[Option<u32>],
    max_run: u64,
) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = vec![];
    for i in 0..mine.len().max(theirs.len()) {
        let same = matches!((mine.get(i), theirs.get(i)), (Some(Some(x)), Some(Some(y))) if x == y);
        if same {
            continue;
        }
        let b = first + i as u64;
        match runs.last_mut() {
            Some((a, e)) if *e == b && b - *a < max_run => *e = b + 1,
            _ => runs.push((b, b + 1)),
        }
    }
    runs
}

/// Largest regular file `HealFetch` hands out with its data (held whole in memory). Heal
/// itself copies regular files in ranges (`HealSums` / `HealWrite`), whatever their size;
/// the whole copy serves `cairnd`'s repair of a corrupt copy and peers without ranges.
pub(super) const HEAL_FETCH_MAX: u64 = 1 << 30;

/// The lock stripe of `id`, held exclusively.
pub(super) fn stripe_lock(br: &impl Store, id: Id) -> parking_lot::RwLockWriteGuard<'_, ()> {
    br.stripe(id).lock()
}
