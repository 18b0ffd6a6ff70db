//! The source side of a heal: an inode's state (whole, or without its data for a
//! chunked copy), and the checksums and extents of a range of a regular file.

use super::{next_data_block, push_extent};
use super::{not_found, stripe_lock, Store, HEAL_FETCH_MAX};
use crate::csum;
use crate::error::{fail, show, Ctx, R};
use crate::ids::{self, is_lnk, is_reg, Ent, Found};
use crate::sys;
use bytes::Bytes;
use cairn_proto::msg::{HealExtent, HealState, HealSums, Reply, HEAL_SUMS_MAX};
use cairn_proto::{FileType, Id, RemoteError};
use std::os::fd::AsRawFd;

pub(crate) fn fetch(br: &impl Store, id: Id) -> R<(Reply, Bytes)> {
    fetch_with(br, id, true)
}

/// The state of `id` for a chunked copy: like `HealFetch`, but a regular file's data is
/// left out (`data_len` is its size). The caller (the heal source in `cairnd`) holds the
/// inode lock.
pub(crate) fn meta(br: &impl Store, id: Id) -> Result<HealState, RemoteError> {
    br.with_context("heal_meta", || match fetch_with(br, id, false)? {
        (Reply::Heal(s), _) => Ok(*s),
        _ => Err(fail(libc::EIO, format!("heal_meta of {id}: no state"))),
    })
}

/// Source side of one range of a chunked copy: blocks `[a, b)` of regular file `id` as
/// they are now (entries and data read under the stripe lock; the caller holds the
/// inode lock), as `HealWrite` extents and their bytes. Blocks of zeros (entry 0, or
/// read as zeros) are zero extents, punched on the target; the bytes of the others
/// are verified against the checksums. Empty once the file is gone or ends before `a`.
pub(crate) fn extents(
    br: &impl Store,
    id: Id,
    a: u64,
    b: u64,
) -> Result<(Vec<HealExtent>, Vec<u8>), RemoteError> {
    br.with_context("heal_extents", || {
        let count = (b.saturating_sub(a)).min(HEAL_SUMS_MAX as u64) as u32;
        let now = sums(br, id, a, count, false)?;
        let (mut extents, mut data) = (vec![], vec![]);
        if now.kind != Some(FileType::Regular) {
            return Ok((extents, data));
        }
        let fd = br.file(id)?;
        let _g = stripe_lock(br, id);
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
                let (bytes, _) = br.checksums().read_verified(id, f, off, len as usize)?;
                // Blocks of zeros (no checksums yet, or zeros written) stay holes.
                for (i, chunk) in bytes.chunks(csum::BLOCK as usize).enumerate() {
                    let z = chunk.iter().all(|&x| x == 0);
                    push_extent(&mut extents, off + i as u64 * csum::BLOCK, chunk.len() as u64, z);
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
pub(crate) fn sums(
    br: &impl Store,
    id: Id,
    first: u64,
    count: u32,
    from_data: bool,
) -> R<HealSums> {
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
    let st = match br.index().lstat_index(id) {
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
    let fd = br.file(id)?;
    let f = fd.as_raw_fd();
    if from_data {
        let size = sys::fstat(f).ctx(what)?.st_size as u64;
        let entries = br.checksums().of_data(br.stripe(id), id, f, size, first, count).ctx(what)?;
        let next = next_data_block(id, f, size, first + count);
        return Ok(HealSums { kind: Some(FileType::Regular), size, entries, next });
    }
    let _g = stripe_lock(br, id);
    let size = sys::fstat(f).ctx(what)?.st_size as u64;
    // Blocks past the end are zeros (what a truncate up to any size leaves).
    let mut entries = vec![Some(0); count as usize];
    let inside = csum::nblocks(size).saturating_sub(first).min(count) as usize;
    if inside > 0 {
        match br.checksums().load(id, f)? {
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

/// The heal state of a moved stub: an empty regular file, mode 0, whose only xattr is
/// the internal `trusted.cairn.moved` (heal leaves internal xattrs out of every other
/// state), so the target makes a stub too (`apply`) rather than an empty file.
fn stub_state(br: &impl Store, id: Id) -> R<(Reply, Bytes)> {
    let what = || format!("heal fetch of moved stub {id}");
    let st = br.index().lstat_index(id).ctx(what)?;
    let Some(set) = br.index().moved(id).ctx(what)? else {
        return Err(fail(libc::EAGAIN, format!("{}: replaced meanwhile", what())));
    };
    let state = HealState {
        attr: Some(stub_attr(id, &st)),
        xattrs: vec![(ids::XATTR_MOVED.to_bytes().to_vec(), set.to_le_bytes().to_vec())],
        symlink: None,
        entries: vec![],
        parent: None,
        data_len: 0,
        pending_for: vec![],
    };
    Ok((Reply::Heal(Box::new(state)), Bytes::new()))
}

/// A stub's attributes (an empty regular file, mode 0) from its `lstat`.
fn stub_attr(id: Id, st: &libc::stat) -> cairn_proto::Attr {
    let t = |sec: i64, nsec: i64| cairn_proto::Timespec { sec, nsec: nsec as u32 };
    cairn_proto::Attr {
        id,
        kind: FileType::Regular,
        perm: st.st_mode & 0o7777,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        rdev: 0,
        atime: t(st.st_atime, st.st_atime_nsec),
        mtime: t(st.st_mtime, st.st_mtime_nsec),
        ctime: t(st.st_ctime, st.st_ctime_nsec),
        change: 0,
    }
}

/// The set a heal state's moved stub names, if the state is one ([`stub_state`]).
pub(super) fn stub_of(state: &HealState) -> Option<u32> {
    let a = state.attr.as_ref()?;
    if a.kind != FileType::Regular || a.perm & 0o7777 != 0 || a.size != 0 {
        return None;
    }
    state.xattrs.iter().find_map(|(n, v)| {
        (n.as_slice() == ids::XATTR_MOVED.to_bytes())
            .then(|| <[u8; 4]>::try_from(v.as_slice()).ok().map(u32::from_le_bytes))
            .flatten()
    })
}

pub(super) fn fetch_with(br: &impl Store, id: Id, with_data: bool) -> R<(Reply, Bytes)> {
    let gone = HealState {
        attr: None,
        xattrs: vec![],
        symlink: None,
        entries: vec![],
        parent: None,
        data_len: 0,
        pending_for: vec![],
    };
    let found = match br.index().find(id) {
        Ok(f) => f,
        Err(e) if not_found(&e) => return Ok((Reply::Heal(Box::new(gone)), Bytes::new())),
        Err(e) if e.raw_os_error() == Some(libc::EREMOTE) => return stub_state(br, id),
        Err(e) => return Err(e).ctx(|| format!("heal fetch of {id}")),
    };
    let attr = br.attr(id)?;
    let mut state = HealState {
        attr: None,
        xattrs: br.xattr_pairs(id)?,
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
                match ids::entry(d, &e.name) {
                    Ok(Ent::Inode { id: eid, st }) => {
                        let kind = FileType::from_mode(st.st_mode).unwrap_or(FileType::Regular);
                        state.entries.push((e.name, eid, kind, None));
                    }
                    Ok(Ent::Linkto { target, .. }) => {
                        state.entries.push((e.name, target, FileType::Regular, Some(target)))
                    }
                    Ok(Ent::Foreign { .. }) => {}
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(err) => return Err(err).ctx(|| format!("entry {} of {id}", show(&e.name))),
                }
            }
            state.entries.sort_by(|a, b| a.0.cmp(&b.0));
            if id != Id::ROOT {
                state.parent = Some(br.index().dir_parent(id).ctx(|| format!("parent of {id}"))?);
            }
        }
        Found::Other(st) if is_reg(&st) => {
            let fd = br.file(id)?;
            let _g = stripe_lock(br, id);
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
            br.checksums().verify(id, fd.as_raw_fd(), st.st_size as u64, 0, &buf)?;
            state.data_len = n as u64;
            data = Bytes::from(buf);
        }
        Found::Other(st) if is_lnk(&st) => {
            state.symlink = Some(
                sys::readlinkat(br.index().ids_fd(), &ids::rel(id))
                    .ctx(|| format!("readlink of {id}"))?,
            );
        }
        Found::Other(_) => {}
    }
    state.attr = Some(attr);
    Ok((Reply::Heal(Box::new(state)), data))
}
