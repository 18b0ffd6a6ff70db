//! Heal support: the durable pending lists, and fetching / applying the full state of an
//! inode so a brick that was away becomes identical to its peers.

use crate::csum::{self, Change};
use crate::error::{fail, show, Ctx, R};
use crate::ids::{self, is_dir, is_lnk, is_reg, Found};
use crate::store::{Brick, Ent};
use crate::sys::{self, cstr, XTarget};
use bytes::Bytes;
use cairn_proto::msg::{HealExtent, HealState, HealSums, Reply, HEAL_SUMS_MAX};
use cairn_proto::{FileType, Id, RemoteError};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// On a placeholder created by a directory heal (symlink or device whose target / rdev is
/// not known yet): the 16-byte parent id followed by the name, so the inode's own heal can
/// replace it in place.
const XATTR_HEAL: &std::ffi::CStr = c"trusted.cairn.heal";
const PLACEHOLDER_TARGET: &[u8] = b".cairn-heal-pending";

fn not_found(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESTALE))
}

impl Brick {
    // ----- fetch -----

    pub(crate) fn heal_fetch(&self, id: Id) -> R<(Reply, Bytes)> {
        self.heal_fetch_with(id, true)
    }

    /// The state of `id` for a chunked copy: like `HealFetch`, but a regular file's data is
    /// left out (`data_len` is its size). The caller (the heal source in `cairnd`) holds the
    /// inode lock.
    pub fn heal_meta(&self, id: Id) -> Result<HealState, RemoteError> {
        self.with_context("heal_meta", || match self.heal_fetch_with(id, false)? {
            (Reply::Heal(s), _) => Ok(*s),
            _ => Err(fail(libc::EIO, format!("heal_meta of {id}: no state"))),
        })
    }

    /// Source side of one range of a chunked copy: blocks `[a, b)` of regular file `id` as
    /// they are now (entries and data read under the stripe lock; the caller holds the
    /// inode lock), as `HealWrite` extents and their bytes. Blocks of zeros (entry 0, or
    /// read as zeros) are zero extents, punched on the target; the bytes of the others
    /// are verified against the checksums. Empty once the file is gone or ends before `a`.
    pub fn heal_extents(
        &self,
        id: Id,
        a: u64,
        b: u64,
    ) -> Result<(Vec<HealExtent>, Vec<u8>), RemoteError> {
        self.with_context("heal_extents", || {
            let count = (b.saturating_sub(a)).min(HEAL_SUMS_MAX as u64) as u32;
            let now = self.heal_sums(id, a, count, false)?;
            let (mut extents, mut data) = (vec![], vec![]);
            if now.kind != Some(FileType::Regular) {
                return Ok((extents, data));
            }
            let fd = self.file(id)?;
            let _g = self.stripe_lock(id);
            let f = fd.as_raw_fd();
            let size = sys::fstat(f).ctx(|| format!("stat of {id}"))?.st_size as u64;
            if size != now.size {
                // Changed between the two looks: only a write not under the inode lock
                // (the caller's contract is broken); copy nothing rather than a mix.
                return Err(fail(libc::EAGAIN, format!("{id} changed during heal_extents")));
            }
            let b = (a + count as u64).min(csum::nblocks(size));
            let mut blk = a;
            while blk < b {
                let zero = now.entries[(blk - a) as usize] == Some(0);
                let mut end = blk + 1;
                while end < b && (now.entries[(end - a) as usize] == Some(0)) == zero {
                    end += 1;
                }
                let off = blk * csum::BLOCK;
                let len = (end * csum::BLOCK).min(size) - off;
                if zero {
                    push_extent(&mut extents, off, len, true);
                } else {
                    let (bytes, _) = self.csum.read_verified(id, f, off, len as usize)?;
                    // Blocks of zeros (no checksums yet, or zeros written) stay holes.
                    for (i, chunk) in bytes.chunks(csum::BLOCK as usize).enumerate() {
                        let z = chunk.iter().all(|&x| x == 0);
                        push_extent(
                            &mut extents,
                            off + i as u64 * csum::BLOCK,
                            chunk.len() as u64,
                            z,
                        );
                        if !z {
                            data.extend_from_slice(chunk);
                        }
                    }
                }
                blk = end;
            }
            Ok((extents, data))
        })
    }

    /// Kind, size and checksum entries of blocks `[first, first+count)` of `id` (HEAL_SUMS).
    pub(crate) fn heal_sums(&self, id: Id, first: u64, count: u32, from_data: bool) -> R<HealSums> {
        let what = || format!("heal_sums of {id}");
        // The range comes from a peer: one past the largest file offset is refused before
        // any arithmetic on it (its byte offsets would overflow).
        let last = i64::MAX as u64 / csum::BLOCK;
        if first > last || count as u64 > last - first {
            return Err(fail(
                libc::EINVAL,
                format!("{}: blocks {first}+{count} lie past the largest file offset", what()),
            ));
        }
        let st = match self.idx.lstat_index(id) {
            Ok(st) => st,
            Err(e) if not_found(&e) => {
                return Ok(HealSums { kind: None, size: 0, entries: vec![], next: None });
            }
            Err(e) => return Err(e).ctx(what),
        };
        if !is_reg(&st) {
            return Ok(HealSums {
                kind: FileType::from_mode(st.st_mode),
                size: 0,
                entries: vec![],
                next: None,
            });
        }
        let count = count.min(HEAL_SUMS_MAX) as u64;
        let fd = self.file(id)?;
        let f = fd.as_raw_fd();
        if from_data {
            let size = sys::fstat(f).ctx(what)?.st_size as u64;
            let entries =
                self.csum.of_data(self.stripe(id), id, f, size, first, count).ctx(what)?;
            let next = next_data_block(id, f, size, first + count);
            return Ok(HealSums { kind: Some(FileType::Regular), size, entries, next });
        }
        let _g = self.stripe_lock(id);
        let size = sys::fstat(f).ctx(what)?.st_size as u64;
        // Blocks past the end are zeros (what a truncate up to any size leaves).
        let mut entries = vec![Some(0); count as usize];
        let inside = csum::nblocks(size).saturating_sub(first).min(count) as usize;
        if inside > 0 {
            match self.csum.load(id, f)? {
                Some(s) if s.size == size => {
                    let got = s.get(first, inside as u64).ctx(what)?;
                    entries[..inside].copy_from_slice(&got);
                }
                // No table (written before checksums), or one that does not cover the file:
                // nothing is known.
                _ => entries[..inside].fill(None),
            }
        }
        let next = next_data_block(id, f, size, first + count);
        Ok(HealSums { kind: Some(FileType::Regular), size, entries, next })
    }

    /// Apply a range of a chunked copy (HEAL_WRITE): data extents written, zero extents
    /// punched, checksums kept current. Returns the bytes written.
    pub(crate) fn heal_write(&self, id: Id, extents: &[HealExtent], data: &[u8]) -> R<u64> {
        let what = || format!("heal_write of {id}");
        // The extents come from a peer: each must end within the largest file offset (so
        // no offset arithmetic below overflows), and their data add up to the segment.
        let max = i64::MAX as u64;
        if let Some(e) =
            extents.iter().find(|e| !matches!(e.offset.checked_add(e.len), Some(end) if end <= max))
        {
            return Err(fail(
                libc::EINVAL,
                format!(
                    "{}: extent {}+{} ends past the largest file offset",
                    what(),
                    e.offset,
                    e.len
                ),
            ));
        }
        let want = extents.iter().filter(|e| !e.zero).try_fold(0u64, |n, e| n.checked_add(e.len));
        let Some(want) = want.filter(|w| *w == data.len() as u64) else {
            let want = want.map_or("more than 2^64".to_string(), |w| w.to_string());
            return Err(fail(
                libc::EINVAL,
                format!("{}: {} data bytes for extents of {want}", what(), data.len()),
            ));
        };
        let fd = self.file(id)?;
        let _g = self.stripe_lock(id);
        let f = fd.as_raw_fd();
        self.csum.begin(id)?;
        let mut at = 0usize;
        for e in extents {
            let w = || format!("heal_write of {id} at {}+{}", e.offset, e.len);
            if e.zero {
                let change = Change::Zero(e.offset, e.len);
                let old = self.csum.before(id, f, change, None)?;
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                let r = sys::fallocate(f, mode, e.offset, e.len);
                let done = if r.is_ok() { change } else { Change::Disk(e.offset, e.len) };
                let sums = self.csum.changed(id, f, old, done);
                r.ctx(w)?;
                sums?;
            } else {
                let d = &data[at..at + e.len as usize];
                at += e.len as usize;
                let change = Change::Data(e.offset, d);
                let old = self.csum.before(id, f, change, None)?;
                let r = sys::pwrite_all(f, d, e.offset);
                let done = if r.is_ok() { change } else { Change::Disk(e.offset, e.len) };
                let sums = self.csum.changed(id, f, old, done);
                r.ctx(w)?;
                sums?;
            }
        }
        Ok(want)
    }

    fn heal_fetch_with(&self, id: Id, with_data: bool) -> R<(Reply, Bytes)> {
        let gone = HealState {
            attr: None,
            xattrs: vec![],
            symlink: None,
            entries: vec![],
            parent: None,
            data_len: 0,
            pending_for: vec![],
        };
        let found = match self.idx.find(id) {
            Ok(f) => f,
            Err(e) if not_found(&e) => return Ok((Reply::Heal(Box::new(gone)), Bytes::new())),
            Err(e) => return Err(e).ctx(|| format!("heal fetch of {id}")),
        };
        let attr = self.attr(id)?;
        let mut state = HealState {
            attr: None,
            xattrs: self.xattr_pairs(id)?,
            symlink: None,
            entries: vec![],
            parent: None,
            data_len: 0,
            pending_for: vec![],
        };
        let mut data = Bytes::new();
        match found {
            Found::Dir(fd) => {
                let d = fd.as_raw_fd();
                for e in sys::read_dir(d).ctx(|| format!("listing {id}"))? {
                    match self.entry(d, &e.name) {
                        Ok(Ent::Inode { id: eid, st }) => {
                            let kind = FileType::from_mode(st.st_mode).unwrap_or(FileType::Regular);
                            state.entries.push((e.name, eid, kind, None));
                        }
                        Ok(Ent::Linkto { target, .. }) => {
                            state.entries.push((e.name, target, FileType::Regular, Some(target)))
                        }
                        Ok(Ent::Foreign { .. }) => {}
                        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                        Err(err) => {
                            return Err(err).ctx(|| format!("entry {} of {id}", show(&e.name)))
                        }
                    }
                }
                state.entries.sort_by(|a, b| a.0.cmp(&b.0));
                if id != Id::ROOT {
                    state.parent = Some(self.idx.dir_parent(id).ctx(|| format!("parent of {id}"))?);
                }
            }
            Found::Other(st) if is_reg(&st) => {
                let fd = self.file(id)?;
                let _g = self.stripe_lock(id);
                let st = sys::fstat(fd.as_raw_fd()).ctx(|| format!("stat of {id}"))?;
                if !with_data {
                    state.data_len = st.st_size as u64;
                    state.attr = Some(attr);
                    return Ok((Reply::Heal(Box::new(state)), Bytes::new()));
                }
                // The data is copied whole, in memory (and in one frame's bulk segment,
                // `MAX_DATA`, when the peer is remote): refuse rather than abort on a
                // huge (e.g. sparse) file.
                if st.st_size as u64 > HEAL_FETCH_MAX {
                    return Err(fail(
                        libc::EFBIG,
                        format!(
                            "heal_fetch of {id}: {} bytes, more than a heal copies whole ({})",
                            st.st_size, HEAL_FETCH_MAX
                        ),
                    ));
                }
                let mut buf = vec![0u8; st.st_size as usize];
                let n = sys::pread(fd.as_raw_fd(), &mut buf, 0).ctx(|| format!("reading {id}"))?;
                buf.truncate(n);
                // Never copy data that fails its checksums to another brick.
                self.csum.verify(id, fd.as_raw_fd(), st.st_size as u64, 0, &buf)?;
                state.data_len = n as u64;
                data = Bytes::from(buf);
            }
            Found::Other(st) if is_lnk(&st) => {
                state.symlink = Some(
                    sys::readlinkat(self.idx.ids_fd(), &ids::rel(id))
                        .ctx(|| format!("readlink of {id}"))?,
                );
            }
            Found::Other(_) => {}
        }
        state.attr = Some(attr);
        Ok((Reply::Heal(Box::new(state)), data))
    }

    // ----- apply -----

    pub(crate) fn heal_apply(&self, state: &HealState, data: &[u8]) -> R<()> {
        // No attr: the inode is gone at the source; its names go with its parent's heal.
        let Some(a) = &state.attr else { return Ok(()) };
        let id = a.id;
        if a.kind == FileType::Directory {
            let fd = self.heal_dir_place(id, a.perm, state)?;
            self.heal_dir_entries(id, fd.as_raw_fd(), state)?;
            let what = || format!("heal of directory {id}");
            let d = fd.as_raw_fd();
            sys::fchown(d, a.uid, a.gid).ctx(what)?;
            sys::fchmod(d, a.perm & 0o7777).ctx(what)?;
            self.set_xattrs(id, &state.xattrs)?;
            let t = [
                libc::timespec { tv_sec: a.atime.sec, tv_nsec: a.atime.nsec as i64 },
                libc::timespec { tv_sec: a.mtime.sec, tv_nsec: a.mtime.nsec as i64 },
            ];
            sys::futimens(d, &t).ctx(what)?;
            return Ok(());
        }
        let what = || format!("heal of {id}");
        let st = match self.idx.lstat_index(id) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(fail(
                    libc::ESTALE,
                    format!("{}: not on this brick; heal its parent directory first", what()),
                ))
            }
            Err(e) => return Err(e).ctx(what),
        };
        let local_kind = FileType::from_mode(st.st_mode);
        let needs_replace = match a.kind {
            FileType::Symlink => {
                let t = sys::readlinkat(self.idx.ids_fd(), &ids::rel(id)).ctx(what)?;
                Some(&t) != state.symlink.as_ref()
            }
            FileType::CharDevice | FileType::BlockDevice => st.st_rdev != a.rdev,
            _ => false,
        };
        if local_kind != Some(a.kind) || needs_replace {
            self.heal_replace(id, a, state)?;
        }
        let ix = self.idx.ids_fd();
        let r = ids::rel(id);
        if a.kind == FileType::Regular && data.is_empty() && state.data_len > 0 {
            // A chunked copy (HealWrite) moves the data: only the size is set here.
            let fd = self.file(id)?;
            let _g = self.stripe_lock(id);
            let f = fd.as_raw_fd();
            self.csum.begin(id)?;
            let old = self.csum.before(id, f, Change::None, Some(state.data_len))?;
            let r = sys::ftruncate(f, state.data_len);
            let sums = self.csum.changed(id, f, old, Change::None);
            r.ctx(what)?;
            sums?;
        } else if a.kind == FileType::Regular {
            if data.len() as u64 != state.data_len {
                return Err(fail(
                    libc::EINVAL,
                    format!(
                        "{}: {} data bytes for data_len {}",
                        what(),
                        data.len(),
                        state.data_len
                    ),
                ));
            }
            let fd = self.file(id)?;
            let _g = self.stripe_lock(id);
            self.csum.begin(id)?;
            sys::ftruncate(fd.as_raw_fd(), state.data_len).ctx(what)?;
            sys::pwrite_all(fd.as_raw_fd(), data, 0).ctx(what)?;
            self.csum.set_from_data(id, fd.as_raw_fd(), data)?;
        }
        sys::lchownat(ix, &r, a.uid, a.gid).ctx(what)?;
        if a.kind != FileType::Symlink {
            sys::fchmodat(ix, &r, a.perm & 0o7777).ctx(what)?;
        }
        self.set_xattrs(id, &state.xattrs)?;
        let _ = self.idx.xtarget(id).map(|t| t.remove(XATTR_HEAL));
        let t = [
            libc::timespec { tv_sec: a.atime.sec, tv_nsec: a.atime.nsec as i64 },
            libc::timespec { tv_sec: a.mtime.sec, tv_nsec: a.mtime.nsec as i64 },
        ];
        sys::lutimensat(ix, &r, &t).ctx(what)?;
        Ok(())
    }

    fn stripe_lock(&self, id: Id) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.stripe(id).lock()
    }

    /// Make directory `id` exist at the place `state.parent` names, creating or moving it.
    fn heal_dir_place(&self, id: Id, perm: u32, state: &HealState) -> R<Arc<OwnedFd>> {
        let what = || format!("heal of directory {id}");
        match self.idx.find(id) {
            Ok(Found::Dir(fd)) => {
                if id == Id::ROOT {
                    return Ok(fd);
                }
                let Some((pid, name)) = &state.parent else { return Ok(fd) };
                let cur = self.idx.dir_parent(id).ctx(what)?;
                if (cur.0, &cur.1) == (*pid, name) {
                    return Ok(fd);
                }
                // Moved at the source while this brick was away: move it here too.
                let from = self.dir(cur.0)?;
                let to = self.dir(*pid)?;
                self.clear_slot(to.as_raw_fd(), name, id)?;
                sys::renameat2(
                    from.as_raw_fd(),
                    &cstr(&cur.1).ctx(what)?,
                    to.as_raw_fd(),
                    &cstr(name).ctx(what)?,
                    0,
                )
                .ctx(what)?;
                self.idx.set_dir_link(id, *pid, name).ctx(what)?;
                self.forget_listing(cur.0);
                self.forget_listing(*pid);
                Ok(fd)
            }
            Ok(Found::Other(_)) => {
                Err(fail(libc::EIO, format!("{}: id is a non-directory here", what())))
            }
            Err(e) if not_found(&e) => {
                let Some((pid, name)) = &state.parent else {
                    return Err(fail(libc::EINVAL, format!("{}: no parent in heal state", what())));
                };
                let pfd = self.dir(*pid)?;
                self.clear_slot(pfd.as_raw_fd(), name, id)?;
                self.make_dir(pfd.as_raw_fd(), *pid, name, id, perm & 0o7777).ctx(what)
            }
            Err(e) => Err(e).ctx(what),
        }
    }

    /// Remove whatever occupies `name` in `d` unless it is `keep`.
    fn clear_slot(&self, d: RawFd, name: &[u8], keep: Id) -> R<()> {
        match self.entry(d, name) {
            Ok(Ent::Inode { id, .. }) if id == keep => Ok(()),
            Ok(ent) => self.remove_entry(d, name, &ent),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e).ctx(|| format!("entry {}", show(name))),
        }
    }

    fn make_dir(
        &self,
        d: RawFd,
        parent: Id,
        name: &[u8],
        id: Id,
        perm: u32,
    ) -> io::Result<Arc<OwnedFd>> {
        let cname = cstr(name)?;
        sys::mkdirat(d, &cname, perm)?;
        let fd = sys::open_dir_at(d, &cname)?;
        XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_ID, &id.to_bytes(), 0)?;
        self.idx.set_dir_link(id, parent, name)?;
        self.forget_listing(parent);
        Ok(self.idx.remember_dir(id, fd))
    }

    /// Remove an entry (recursively for a directory), dropping index links as needed.
    fn remove_entry(&self, d: RawFd, name: &[u8], ent: &Ent) -> R<()> {
        let what = || format!("heal: removing {}", show(name));
        let cname = cstr(name).ctx(what)?;
        if is_dir(ent.st()) {
            let sub = sys::open_dir_at(d, &cname).ctx(what)?;
            for e in sys::read_dir(sub.as_raw_fd()).ctx(what)? {
                match self.entry(sub.as_raw_fd(), &e.name) {
                    Ok(child) => self.remove_entry(sub.as_raw_fd(), &e.name, &child)?,
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(err) => return Err(err).ctx(what),
                }
            }
            sys::unlinkat(d, &cname, libc::AT_REMOVEDIR).ctx(what)?;
            if let Ent::Inode { id, .. } = ent {
                self.forget_listing(*id);
                self.idx.unlink(*id).ctx(what)?;
            }
        } else {
            sys::unlinkat(d, &cname, 0).ctx(what)?;
            if let Ent::Inode { id, .. } = ent {
                self.drop_if_unused(*id)?;
            }
        }
        Ok(())
    }

    /// Whether the id index names entry `name` of directory `dir` (fd `d`), an inode
    /// `id` with stat `st`, repairing what a crash can leave half done: a create or mkdir
    /// killed after the entry got its id but before its index link, a directory rename
    /// killed before its index link moved. A missing (or, for a directory, outdated) index
    /// entry is made to name this entry; `false` when the index holds another inode under
    /// this id (the entry is then replaced by the directory heal, and the inode re-copied).
    fn index_names(&self, dir: Id, d: RawFd, name: &[u8], id: Id, st: &libc::stat) -> R<bool> {
        let what = || format!("id index of {} ({id}) in {dir}", show(name));
        if is_dir(st) {
            match self.idx.dir_parent(id) {
                Ok((p, n)) if p == dir && n == name => return Ok(true),
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e).ctx(what),
            }
            tracing::info!(brick = %self.root.display(), %id, %dir, name = %show(name), "directory index link missing or outdated (interrupted mkdir or rename); repaired");
            self.idx.forget_dir(id);
            self.idx.set_dir_link(id, dir, name).ctx(what)?;
            return Ok(true);
        }
        match self.idx.lstat_index(id) {
            Ok(ist) => {
                if ist.st_ino == st.st_ino && ist.st_dev == st.st_dev {
                    return Ok(true);
                }
                tracing::warn!(brick = %self.root.display(), %id, %dir, name = %show(name), "entry and id index are different inodes; healing the entry");
                self.pending_add(self.marker.index, id)?;
                Ok(false)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                tracing::info!(brick = %self.root.display(), %id, %dir, name = %show(name), "entry without its id index link (interrupted create); repaired");
                self.idx.link_file(id, d, name).ctx(what)?;
                Ok(true)
            }
            Err(e) => Err(e).ctx(what),
        }
    }

    /// Make the entries of directory `dir` exactly those of the state.
    fn heal_dir_entries(&self, dir: Id, d: RawFd, state: &HealState) -> R<()> {
        let what = || format!("heal of the entries of {dir}");
        let want: HashMap<&[u8], (Id, FileType, Option<Id>)> =
            state.entries.iter().map(|(n, i, k, l)| (n.as_slice(), (*i, *k, *l))).collect();
        // Phase 1: keep exact matches; park every other entry under a temporary name in
        // this directory, so no inode loses its last link (and no directory its contents)
        // before phase 2 had the chance to give it its wanted name.
        let mut have: HashMap<Vec<u8>, ()> = HashMap::new();
        let mut parked: Vec<(Vec<u8>, Ent)> = Vec::new();
        for e in sys::read_dir(d).ctx(what)? {
            let ent = match self.entry(d, &e.name) {
                Ok(ent) => ent,
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(err) => return Err(err).ctx(what),
            };
            let keep = match (want.get(e.name.as_slice()), &ent) {
                (Some((_, _, Some(t))), Ent::Linkto { target, .. }) => t == target,
                (Some((wid, kind, None)), Ent::Inode { id, st }) => {
                    wid == id
                        && FileType::from_mode(st.st_mode) == Some(*kind)
                        && self.index_names(dir, d, &e.name, *id, st)?
                }
                _ => false,
            };
            if keep {
                have.insert(e.name, ());
                continue;
            }
            let tmp = format!(".cairn-heal.{}.{}", std::process::id(), parked.len()).into_bytes();
            let w = || format!("heal: parking {} in {dir}", show(&e.name));
            sys::renameat2(d, &cstr(&e.name).ctx(w)?, d, &cstr(&tmp).ctx(w)?, 0).ctx(w)?;
            if let Ent::Inode { id, st } = &ent {
                if is_dir(st) {
                    self.idx.set_dir_link(*id, dir, &tmp).ctx(w)?;
                }
            }
            parked.push((tmp, ent));
        }
        self.forget_listing(dir);
        // Phase 2: create what is missing, reusing parked inodes by renaming them back.
        for (name, wid, kind, linkto) in &state.entries {
            if have.contains_key(name) {
                continue;
            }
            let w = || format!("heal: creating {} ({wid}) in {dir}", show(name));
            let cname = cstr(name).ctx(w)?;
            if linkto.is_none() {
                let reuse = parked.iter().position(|(_, e)| match e {
                    Ent::Inode { id, st } => {
                        id == wid && FileType::from_mode(st.st_mode) == Some(*kind)
                    }
                    _ => false,
                });
                if let Some(i) = reuse {
                    let (tmp, _) = parked.remove(i);
                    sys::renameat2(d, &cstr(&tmp).ctx(w)?, d, &cname, 0).ctx(w)?;
                    if *kind == FileType::Directory {
                        self.idx.set_dir_link(*wid, dir, name).ctx(w)?;
                    }
                    continue;
                }
            }
            if let Some(t) = linkto {
                let fd = sys::openat(
                    d,
                    &cname,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
                    0,
                )
                .ctx(w)?;
                XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_LINKTO, &t.to_bytes(), 0).ctx(w)?;
                continue;
            }
            if *kind == FileType::Directory {
                match self.idx.find(*wid) {
                    Ok(Found::Dir(_)) => {
                        // Elsewhere on this brick: move it here.
                        let (cp, cn) = self.idx.dir_parent(*wid).ctx(w)?;
                        let from = self.dir(cp)?;
                        sys::renameat2(from.as_raw_fd(), &cstr(&cn).ctx(w)?, d, &cname, 0)
                            .ctx(w)?;
                        self.idx.set_dir_link(*wid, dir, name).ctx(w)?;
                        self.forget_listing(cp);
                    }
                    _ => {
                        self.make_dir(d, dir, name, *wid, 0o700).ctx(w)?;
                    }
                }
                continue;
            }
            if self.idx.lstat_index(*wid).is_ok() {
                // A hard link (or a rename) of an inode this brick has.
                sys::linkat(self.idx.ids_fd(), &ids::rel(*wid), d, &cname).ctx(w)?;
                continue;
            }
            // An empty placeholder until the inode's own heal fills it: make sure that heal
            // happens (the inode may not be pending here, e.g. its index link was swept or
            // a rename moved it while its directories were copied one after the other).
            // Recorded first: a crash after the placeholder is made would leave it empty
            // for good, as the next heal of this directory finds the entry it wants.
            self.pending_add(self.marker.index, *wid)?;
            let mut heal_mark = false;
            match kind {
                FileType::Regular => {
                    sys::openat(
                        d,
                        &cname,
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
                        0,
                    )
                    .ctx(w)?;
                }
                FileType::Symlink => {
                    sys::symlinkat(&cstr(PLACEHOLDER_TARGET).ctx(w)?, d, &cname).ctx(w)?;
                    heal_mark = true;
                }
                k => {
                    sys::mknodat(d, &cname, k.mode_bits(), 0).ctx(w)?;
                    heal_mark = matches!(k, FileType::CharDevice | FileType::BlockDevice);
                }
            }
            let t = XTarget::at(d, name).ctx(w)?;
            t.set(ids::XATTR_ID, &wid.to_bytes(), 0).ctx(w)?;
            if heal_mark {
                let mut v = dir.to_bytes().to_vec();
                v.extend_from_slice(name);
                t.set(XATTR_HEAL, &v, 0).ctx(w)?;
            }
            self.idx.link_file(*wid, d, name).ctx(w)?;
        }
        // Phase 3: what is still parked is not wanted here. A non-directory inode keeps its
        // index link: it may be wanted by another directory healed later (a rename across
        // directories); true orphans are swept when the brick next opens.
        for (tmp, ent) in &parked {
            match ent {
                Ent::Inode { st, .. } if !is_dir(st) => {
                    let w = || format!("heal: removing {} from {dir}", show(tmp));
                    sys::unlinkat(d, &cstr(tmp).ctx(w)?, 0).ctx(w)?;
                }
                _ => self.remove_entry(d, tmp, ent)?,
            }
        }
        self.forget_listing(dir);
        Ok(())
    }

    /// Replace a placeholder symlink/device (or an inode of the wrong kind) by a correct
    /// one at the place recorded when the directory heal created it.
    fn heal_replace(&self, id: Id, a: &cairn_proto::Attr, state: &HealState) -> R<()> {
        let what = || format!("heal of {id}: replacing the local inode");
        let mark = self.idx.xtarget(id).ctx(what)?.get(XATTR_HEAL);
        let Ok(mark) = mark else {
            return Err(fail(
                libc::EIO,
                format!(
                    "{}: it differs in kind, target or device and its names are unknown",
                    what()
                ),
            ));
        };
        if mark.len() < 17 {
            return Err(fail(libc::EIO, format!("{}: bad heal mark", what())));
        }
        let pid = Id::from_bytes(mark[..16].try_into().expect("16 bytes"));
        let name = &mark[16..];
        let pfd = self.dir(pid)?;
        let d = pfd.as_raw_fd();
        // The replacement must not show as a change of the (already healed) directory.
        let pst = sys::fstat(d).ctx(what)?;
        let ptimes = [
            libc::timespec { tv_sec: pst.st_atime, tv_nsec: pst.st_atime_nsec },
            libc::timespec { tv_sec: pst.st_mtime, tv_nsec: pst.st_mtime_nsec },
        ];
        let tmp = format!(".cairn-heal.{}", id.to_hex()).into_bytes();
        let ctmp = cstr(&tmp).ctx(what)?;
        let _ = sys::unlinkat(d, &ctmp, 0);
        match a.kind {
            FileType::Symlink => {
                let t = state
                    .symlink
                    .as_ref()
                    .ok_or_else(|| fail(libc::EINVAL, "symlink without target"))?;
                sys::symlinkat(&cstr(t).ctx(what)?, d, &ctmp).ctx(what)?;
            }
            FileType::Regular => {
                sys::openat(d, &ctmp, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0)
                    .ctx(what)?;
            }
            k => sys::mknodat(d, &ctmp, k.mode_bits(), a.rdev).ctx(what)?,
        }
        XTarget::at(d, &tmp).ctx(what)?.set(ids::XATTR_ID, &id.to_bytes(), 0).ctx(what)?;
        sys::renameat2(d, &ctmp, d, &cstr(name).ctx(what)?, 0).ctx(what)?;
        self.idx.unlink(id).ctx(what)?;
        self.idx.link_file(id, d, name).ctx(what)?;
        self.forget_listing(pid);
        sys::futimens(d, &ptimes).ctx(what)?;
        Ok(())
    }
}

/// Add an extent, merged with the last one when adjacent and of the same kind.
/// The first block at or after block `from` of the file at `f` (of `size` bytes) that
/// holds data (`SEEK_DATA`), the block count when none does, `None` when the filesystem
/// can't tell (then a heal skips nothing). A filesystem without hole support answers
/// `from` itself.
fn next_data_block(id: Id, f: RawFd, size: u64, from: u64) -> Option<u64> {
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

fn push_extent(extents: &mut Vec<HealExtent>, offset: u64, len: u64, zero: bool) {
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
const HEAL_FETCH_MAX: u64 = 1 << 30;
