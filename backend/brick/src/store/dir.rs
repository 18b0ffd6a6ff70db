//! Directory listings: every entry of a directory, sorted by cookie and cached until the
//! directory changes, and READDIR pages over them.

use super::{attr_of, Brick};
use crate::error::{show, Ctx, R};
use crate::ids::{self, Ent};
use crate::sys::{self, cstr};
use cairn_proto::msg::Reply;
use cairn_proto::{DirEntry, FileType, Id};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// One entry of a cached directory listing.
#[derive(Clone)]
pub(crate) struct LEntry {
    pub cookie: u64,
    pub name: Vec<u8>,
    pub id: Id,
    pub kind: FileType,
}

pub(crate) struct Listing {
    key: (i64, i64, i64, i64, u64),
    entries: Vec<LEntry>,
}

/// Cookie of a directory entry: stable, hash based, 56 bits, never 0, 1 or 2.
pub fn cookie(name: &[u8]) -> u64 {
    let c = xxhash_rust::xxh3::xxh3_64(name) & ((1u64 << 56) - 1);
    c.max(3)
}

pub(crate) fn kind_of_dtype(d: u8) -> Option<FileType> {
    Some(match d {
        libc::DT_REG => FileType::Regular,
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::Fifo,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => return None,
    })
}

impl Brick {
    /// Every entry of directory `dir` (with linkto entries when `linktos`), sorted by
    /// cookie. Cached per directory, keyed by its mtime/ctime and dropped on every change
    /// made through this brick.
    pub(crate) fn listing(&self, dir: Id, d: RawFd) -> R<Arc<Listing>> {
        let what = || format!("listing directory {dir}");
        let st = sys::fstat(d).ctx(what)?;
        let key = (st.st_mtime, st.st_mtime_nsec, st.st_ctime, st.st_ctime_nsec, st.st_ino);
        if let Some(l) = self.listings.lock().get(&dir) {
            if l.key == key {
                return Ok(l.clone());
            }
        }
        let mut entries = Vec::new();
        for e in sys::read_dir(d).ctx(what)? {
            match ids::entry(d, &e.name) {
                Ok(Ent::Inode { id, st }) => {
                    let kind = kind_of_dtype(e.d_type)
                        .or_else(|| FileType::from_mode(st.st_mode))
                        .unwrap_or(FileType::Regular);
                    entries.push(LEntry { cookie: cookie(&e.name), name: e.name, id, kind });
                }
                Ok(_) => {}
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                Err(err) => return Err(err).ctx(|| format!("{}: {}", what(), show(&e.name))),
            }
        }
        entries.sort_by(|a, b| a.cookie.cmp(&b.cookie).then_with(|| a.name.cmp(&b.name)));
        let l = Arc::new(Listing { key, entries });
        let mut cache = self.listings.lock();
        if cache.len() >= 64 {
            cache.clear(); // bounded memory; listings are cheap to rebuild once
        }
        cache.insert(dir, l.clone());
        Ok(l)
    }

    pub(crate) fn op_readdir(&self, dir: Id, cookie: u64, max: u32, plus: bool) -> R<Reply> {
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let l = self.listing(dir, d)?;
        let start = l.entries.partition_point(|e| e.cookie <= cookie);
        let mut end = (start + max.max(1) as usize).min(l.entries.len());
        // Never split entries whose cookies collide across two pages.
        while end < l.entries.len()
            && end > start
            && l.entries[end].cookie == l.entries[end - 1].cookie
        {
            end += 1;
        }
        let mut out = Vec::with_capacity(end - start);
        for e in &l.entries[start..end] {
            let attr = if plus {
                match sys::lstatat(d, &cstr(&e.name).ctx(|| show(&e.name))?) {
                    Ok(st) => Some(attr_of(e.id, &st, true)),
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
                    Err(err) => return Err(err).ctx(|| format!("stat of {}", show(&e.name))),
                }
            } else {
                None
            };
            out.push(DirEntry {
                name: e.name.clone(),
                id: e.id,
                kind: e.kind,
                cookie: e.cookie,
                attr,
            });
        }
        Ok(Reply::Dir { entries: out, eof: end == l.entries.len() })
    }
}
