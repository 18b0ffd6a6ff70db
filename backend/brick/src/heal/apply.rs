//! The target side of a heal: an inode made as the source has it (a directory at its
//! place with its entries, a file's data in ranges or whole, attributes and xattrs).

use super::{not_found, stripe_lock, Store, PLACEHOLDER_TARGET, XATTR_HEAL};
use crate::csum::Change;
use crate::error::{fail, show, Ctx, R};
use crate::ids::{self, is_dir, Ent, Found};
use crate::sys::{self, cstr, XTarget};
use cairn_proto::msg::{HealExtent, HealState};
use cairn_proto::{FileType, Id};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Apply a range of a chunked copy (HEAL_WRITE): data extents written, zero extents
/// punched, checksums kept current. Returns the bytes written.
pub(crate) fn write(br: &impl Store, id: Id, extents: &[HealExtent], data: &[u8]) -> R<u64> {
    let what = || format!("heal_write of {id}");
    // The extents come from a peer: each must end within the largest file offset (so
    // no offset arithmetic below overflows), and their data add up to the segment.
    let max = i64::MAX as u64;
    if let Some(e) =
        extents.iter().find(|e| !matches!(e.offset.checked_add(e.len), Some(end) if end <= max))
    {
        return Err(fail(
            libc::EINVAL,
            format!("{}: extent {}+{} ends past the largest file offset", what(), e.offset, e.len),
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
    let fd = br.file(id)?;
    let _g = stripe_lock(br, id);
    let f = fd.as_raw_fd();
    br.checksums().begin(id)?;
    let mut at = 0usize;
    for e in extents {
        let w = || format!("heal_write of {id} at {}+{}", e.offset, e.len);
        if e.zero {
            let change = Change::Zero(e.offset, e.len);
            let old = br.checksums().before(id, f, change, None)?;
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            let r = sys::fallocate(f, mode, e.offset, e.len);
            let done = if r.is_ok() { change } else { Change::Disk(e.offset, e.len) };
            let sums = br.checksums().changed(id, f, old, done);
            r.ctx(w)?;
            sums?;
        } else {
            let d = &data[at..at + e.len as usize];
            at += e.len as usize;
            let change = Change::Data(e.offset, d);
            let old = br.checksums().before(id, f, change, None)?;
            let r = sys::pwrite_all(f, d, e.offset);
            let done = if r.is_ok() { change } else { Change::Disk(e.offset, e.len) };
            let sums = br.checksums().changed(id, f, old, done);
            r.ctx(w)?;
            sums?;
        }
    }
    Ok(want)
}

pub(crate) fn apply(br: &impl Store, state: &HealState, data: &[u8]) -> R<()> {
    // No attr: the inode is gone at the source; its names go with its parent's heal.
    let Some(a) = &state.attr else { return Ok(()) };
    let id = a.id;
    if let Some(set) = super::source::stub_of(state) {
        // A moved stub (docs/rebalance.md): made as the source has it, whatever this
        // brick's index entry was (the inode it still had, or nothing: a stub has no
        // name, so no directory heal makes its entry).
        let _g = stripe_lock(br, id);
        br.index().make_stub(id, set).ctx(|| format!("heal of moved stub {id} to set {set}"))?;
        br.checksums().forget(id);
        return Ok(());
    }
    if a.kind == FileType::Directory {
        let fd = dir_place(br, id, a.perm, state)?;
        dir_entries(br, id, fd.as_raw_fd(), state)?;
        let what = || format!("heal of directory {id}");
        let d = fd.as_raw_fd();
        sys::fchown(d, a.uid, a.gid).ctx(what)?;
        sys::fchmod(d, a.perm & 0o7777).ctx(what)?;
        br.set_xattrs(id, &state.xattrs)?;
        let t = [
            libc::timespec { tv_sec: a.atime.sec, tv_nsec: a.atime.nsec as i64 },
            libc::timespec { tv_sec: a.mtime.sec, tv_nsec: a.mtime.nsec as i64 },
        ];
        sys::futimens(d, &t).ctx(what)?;
        return Ok(());
    }
    let what = || format!("heal of {id}");
    let st = match br.index().lstat_index(id) {
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
            let t = sys::readlinkat(br.index().ids_fd(), &ids::rel(id)).ctx(what)?;
            Some(&t) != state.symlink.as_ref()
        }
        FileType::CharDevice | FileType::BlockDevice => st.st_rdev != a.rdev,
        _ => false,
    };
    if local_kind != Some(a.kind) || needs_replace {
        replace(br, id, a, state)?;
    }
    let ix = br.index().ids_fd();
    let r = ids::rel(id);
    if a.kind == FileType::Regular && data.is_empty() && state.data_len > 0 {
        // A chunked copy (HealWrite) moves the data: only the size is set here.
        let fd = br.file(id)?;
        let _g = stripe_lock(br, id);
        let f = fd.as_raw_fd();
        br.checksums().begin(id)?;
        let old = br.checksums().before(id, f, Change::None, Some(state.data_len))?;
        let r = sys::ftruncate(f, state.data_len);
        let sums = br.checksums().changed(id, f, old, Change::None);
        r.ctx(what)?;
        sums?;
    } else if a.kind == FileType::Regular {
        if data.len() as u64 != state.data_len {
            return Err(fail(
                libc::EINVAL,
                format!("{}: {} data bytes for data_len {}", what(), data.len(), state.data_len),
            ));
        }
        let fd = br.file(id)?;
        let _g = stripe_lock(br, id);
        br.checksums().begin(id)?;
        sys::ftruncate(fd.as_raw_fd(), state.data_len).ctx(what)?;
        sys::pwrite_all(fd.as_raw_fd(), data, 0).ctx(what)?;
        br.checksums().set_from_data(id, fd.as_raw_fd(), data)?;
    }
    sys::lchownat(ix, &r, a.uid, a.gid).ctx(what)?;
    if a.kind != FileType::Symlink {
        sys::fchmodat(ix, &r, a.perm & 0o7777).ctx(what)?;
    }
    br.set_xattrs(id, &state.xattrs)?;
    let _ = br.index().xtarget(id).map(|t| t.remove(XATTR_HEAL));
    let t = [
        libc::timespec { tv_sec: a.atime.sec, tv_nsec: a.atime.nsec as i64 },
        libc::timespec { tv_sec: a.mtime.sec, tv_nsec: a.mtime.nsec as i64 },
    ];
    sys::lutimensat(ix, &r, &t).ctx(what)?;
    Ok(())
}

/// Make directory `id` exist at the place `state.parent` names, creating or moving it.
pub(super) fn dir_place(br: &impl Store, id: Id, perm: u32, state: &HealState) -> R<Arc<OwnedFd>> {
    let what = || format!("heal of directory {id}");
    match br.index().find(id) {
        Ok(Found::Dir(fd)) => {
            if id == Id::ROOT {
                return Ok(fd);
            }
            let Some((pid, name)) = &state.parent else { return Ok(fd) };
            let cur = br.index().dir_parent(id).ctx(what)?;
            if (cur.0, &cur.1) == (*pid, name) {
                return Ok(fd);
            }
            // Moved at the source while this brick was away: move it here too.
            let from = br.dir(cur.0)?;
            let to = br.dir(*pid)?;
            clear_slot(br, to.as_raw_fd(), name, id)?;
            sys::renameat2(
                from.as_raw_fd(),
                &cstr(&cur.1).ctx(what)?,
                to.as_raw_fd(),
                &cstr(name).ctx(what)?,
                0,
            )
            .ctx(what)?;
            br.index().set_dir_link(id, *pid, name).ctx(what)?;
            br.forget_listing(cur.0);
            br.forget_listing(*pid);
            Ok(fd)
        }
        Ok(Found::Other(_)) => {
            Err(fail(libc::EIO, format!("{}: id is a non-directory here", what())))
        }
        Err(e) if not_found(&e) => {
            let Some((pid, name)) = &state.parent else {
                return Err(fail(libc::EINVAL, format!("{}: no parent in heal state", what())));
            };
            let pfd = br.dir(*pid)?;
            clear_slot(br, pfd.as_raw_fd(), name, id)?;
            make_dir(br, pfd.as_raw_fd(), *pid, name, id, perm & 0o7777).ctx(what)
        }
        Err(e) => Err(e).ctx(what),
    }
}

/// Remove whatever occupies `name` in `d` unless it is `keep`.
pub(super) fn clear_slot(br: &impl Store, d: RawFd, name: &[u8], keep: Id) -> R<()> {
    match ids::entry(d, name) {
        Ok(Ent::Inode { id, .. }) if id == keep => Ok(()),
        Ok(ent) => remove_entry(br, d, name, &ent),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e).ctx(|| format!("entry {}", show(name))),
    }
}

pub(super) fn make_dir(
    br: &impl Store,
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
    br.index().set_dir_link(id, parent, name)?;
    br.forget_listing(parent);
    Ok(br.index().remember_dir(id, fd))
}

/// Remove an entry (recursively for a directory), dropping index links as needed.
pub(super) fn remove_entry(br: &impl Store, d: RawFd, name: &[u8], ent: &Ent) -> R<()> {
    let what = || format!("heal: removing {}", show(name));
    let cname = cstr(name).ctx(what)?;
    if is_dir(ent.st()) {
        let sub = sys::open_dir_at(d, &cname).ctx(what)?;
        for e in sys::read_dir(sub.as_raw_fd()).ctx(what)? {
            match ids::entry(sub.as_raw_fd(), &e.name) {
                Ok(child) => remove_entry(br, sub.as_raw_fd(), &e.name, &child)?,
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                Err(err) => return Err(err).ctx(what),
            }
        }
        sys::unlinkat(d, &cname, libc::AT_REMOVEDIR).ctx(what)?;
        if let Ent::Inode { id, .. } = ent {
            br.forget_listing(*id);
            br.index().unlink(*id).ctx(what)?;
        }
    } else {
        sys::unlinkat(d, &cname, 0).ctx(what)?;
        if let Ent::Inode { id, .. } = ent {
            br.drop_if_unused(*id)?;
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
pub(super) fn index_names(
    br: &impl Store,
    dir: Id,
    d: RawFd,
    name: &[u8],
    id: Id,
    st: &libc::stat,
) -> R<bool> {
    let what = || format!("id index of {} ({id}) in {dir}", show(name));
    if is_dir(st) {
        match br.index().dir_parent(id) {
            Ok((p, n)) if p == dir && n == name => return Ok(true),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        tracing::info!(brick = %br.root().display(), %id, %dir, name = %show(name), "directory index link missing or outdated (interrupted mkdir or rename); repaired");
        br.index().forget_dir(id);
        br.index().set_dir_link(id, dir, name).ctx(what)?;
        return Ok(true);
    }
    match br.index().lstat_index(id) {
        Ok(ist) => {
            if ist.st_ino == st.st_ino && ist.st_dev == st.st_dev {
                return Ok(true);
            }
            tracing::warn!(brick = %br.root().display(), %id, %dir, name = %show(name), "entry and id index are different inodes; healing the entry");
            br.pending_add(br.brick_index(), id)?;
            Ok(false)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            tracing::info!(brick = %br.root().display(), %id, %dir, name = %show(name), "entry without its id index link (interrupted create); repaired");
            br.index().link_file(id, d, name).ctx(what)?;
            Ok(true)
        }
        Err(e) => Err(e).ctx(what),
    }
}

/// Make the entries of directory `dir` exactly those of the state.
pub(super) fn dir_entries(br: &impl Store, dir: Id, d: RawFd, state: &HealState) -> R<()> {
    let what = || format!("heal of the entries of {dir}");
    let want: HashMap<&[u8], (Id, FileType, Option<Id>)> =
        state.entries.iter().map(|(n, i, k, l)| (n.as_slice(), (*i, *k, *l))).collect();
    // Phase 1: keep exact matches; park every other entry under a temporary name in
    // this directory, so no inode loses its last link (and no directory its contents)
    // before phase 2 had the chance to give it its wanted name.
    let mut have: HashMap<Vec<u8>, ()> = HashMap::new();
    let mut parked: Vec<(Vec<u8>, Ent)> = Vec::new();
    for e in sys::read_dir(d).ctx(what)? {
        let ent = match ids::entry(d, &e.name) {
            Ok(ent) => ent,
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(err) => return Err(err).ctx(what),
        };
        let keep = match (want.get(e.name.as_slice()), &ent) {
            (Some((_, _, Some(t))), Ent::Linkto { target, .. }) => t == target,
            (Some((wid, kind, None)), Ent::Inode { id, st }) => {
                wid == id
                    && FileType::from_mode(st.st_mode) == Some(*kind)
                    && index_names(br, dir, d, &e.name, *id, st)?
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
                br.index().set_dir_link(*id, dir, &tmp).ctx(w)?;
            }
        }
        parked.push((tmp, ent));
    }
    br.forget_listing(dir);
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
                    br.index().set_dir_link(*wid, dir, name).ctx(w)?;
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
            match br.index().find(*wid) {
                Ok(Found::Dir(_)) => {
                    // Elsewhere on this brick: move it here.
                    let (cp, cn) = br.index().dir_parent(*wid).ctx(w)?;
                    let from = br.dir(cp)?;
                    sys::renameat2(from.as_raw_fd(), &cstr(&cn).ctx(w)?, d, &cname, 0).ctx(w)?;
                    br.index().set_dir_link(*wid, dir, name).ctx(w)?;
                    br.forget_listing(cp);
                }
                _ => {
                    make_dir(br, d, dir, name, *wid, 0o700).ctx(w)?;
                }
            }
            continue;
        }
        if br.index().lstat_index(*wid).is_ok() {
            // A hard link (or a rename) of an inode this brick has.
            sys::linkat(br.index().ids_fd(), &ids::rel(*wid), d, &cname).ctx(w)?;
            continue;
        }
        // An empty placeholder until the inode's own heal fills it: make sure that heal
        // happens (the inode may not be pending here, e.g. its index link was swept or
        // a rename moved it while its directories were copied one after the other).
        // Recorded first: a crash after the placeholder is made would leave it empty
        // for good, as the next heal of this directory finds the entry it wants.
        br.pending_add(br.brick_index(), *wid)?;
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
        br.index().link_file(*wid, d, name).ctx(w)?;
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
            _ => remove_entry(br, d, tmp, ent)?,
        }
    }
    br.forget_listing(dir);
    Ok(())
}

/// Replace a placeholder symlink/device (or an inode of the wrong kind) by a correct
/// one at the place recorded when the directory heal created it.
pub(super) fn replace(br: &impl Store, id: Id, a: &cairn_proto::Attr, state: &HealState) -> R<()> {
    let what = || format!("heal of {id}: replacing the local inode");
    let mark = br.index().xtarget(id).ctx(what)?.get(XATTR_HEAL);
    let Ok(mark) = mark else {
        return Err(fail(
            libc::EIO,
            format!("{}: it differs in kind, target or device and its names are unknown", what()),
        ));
    };
    if mark.len() < 17 {
        return Err(fail(libc::EIO, format!("{}: bad heal mark", what())));
    }
    let pid = Id::from_bytes(mark[..16].try_into().expect("16 bytes"));
    let name = &mark[16..];
    let pfd = br.dir(pid)?;
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
            sys::openat(d, &ctmp, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0).ctx(what)?;
        }
        k => sys::mknodat(d, &ctmp, k.mode_bits(), a.rdev).ctx(what)?,
    }
    XTarget::at(d, &tmp).ctx(what)?.set(ids::XATTR_ID, &id.to_bytes(), 0).ctx(what)?;
    sys::renameat2(d, &ctmp, d, &cstr(name).ctx(what)?, 0).ctx(what)?;
    br.index().unlink(id).ctx(what)?;
    br.index().link_file(id, d, name).ctx(what)?;
    br.forget_listing(pid);
    sys::futimens(d, &ptimes).ctx(what)?;
    Ok(())
}
