//! Lookups and attributes: names to inodes (cached, complete directories, whole paths),
//! `getattr` merging a directory's copies, and per-inode `setattr`.

use super::{attr_of, err, unexpected, Target, Volume};
use crate::Result;
use bytes::Bytes;
use cairn_cache::merge_dir_copy;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{valid_name, Attr, Creds, Errno, FileType, Id, Name, SetAttr};
use std::sync::atomic::Ordering;

/// Most names a listing that makes a directory complete reads per set (one READDIR each);
/// a bigger directory is not made complete.
const LIST_MAX: u32 = 1024;

impl Volume {
    pub(super) async fn lookup_remote(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        let i = &self.inner;
        let map = i.map();
        let hashed = i.hashed(dir, name);
        let inline = if i.opts.quick_read > 0 && i.data.want() { i.opts.quick_read } else { 0 };
        let token = i.data.begin();
        let searched = i.searchers.begin();
        let found = i.begin_tokens();
        let look = |set: u32| {
            let op = Op::Lookup { dir, name: name.to_vec() };
            i.call_with(Target { set, key: dir }, c, op, Bytes::new(), false, inline, false)
        };
        let mut at = hashed;
        let r = look(hashed).await;
        let r = match r {
            // ESTALE: a set added by add-brick that does not have the directory yet.
            Err(e) if (e.errno == Errno::ENOENT || e.errno == Errno::ESTALE) && map.rebalancing => {
                // The layout changed (add-brick) and a rebalance has not settled it: the
                // name may be on the set it hashed to before, or moving. Ask every other
                // set at once (one more round trip, not one per set).
                let sets: Vec<u32> =
                    map.sets.iter().filter(|s| s.id != hashed).map(|s| s.id).collect();
                let answers = futures::future::join_all(sets.iter().map(|&s| look(s))).await;
                let mut found = Err(e);
                for (s, r) in sets.into_iter().zip(answers) {
                    match r {
                        Ok(r) if found.is_err() => {
                            found = Ok(r);
                            at = s;
                        }
                        Ok(_) => {}
                        Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => {}
                        // Not knowing is not "no such name".
                        Err(e) if found.is_err() => found = Err(e),
                        Err(_) => {}
                    }
                }
                found
            }
            r => r,
        };
        // Found or not, the brick let `c` search `dir`.
        if r.is_ok() || matches!(&r, Err(e) if e.errno == Errno::ENOENT) {
            i.searchers.put(searched, dir, c);
        }
        let attr = match r? {
            (Reply::EntryData { attr }, data) => {
                i.remember_found(found, at, dir, name, &attr);
                i.data.put(token, &attr, c, data);
                return Ok(attr);
            }
            (r, _) => r,
        };
        let attr = match attr {
            Reply::Entry { attr, linkto: None } => attr,
            Reply::Entry { linkto: Some(target), .. } => {
                // Fetched (and cached) at its own head: only the name is learnt here.
                at = u32::MAX;
                self.getattr_remote(c, target).await?
            }
            other => return Err(unexpected("lookup", &other)),
        };
        i.remember_found(found, at, dir, name, &attr);
        Ok(attr)
    }

    pub(super) fn adjust(&self, mut a: Attr) -> Attr {
        if let Some(end) = self.inner.wb.buffered_end(a.id) {
            a.size = a.size.max(end);
        }
        a
    }

    /// The attributes of `id` as cached now (a buffered write's end folded into the size),
    /// if they are: no round trip and no flush of write-behind.
    pub fn cached_attr(&self, id: Id) -> Option<Attr> {
        self.inner.attrs.get(id).map(|a| self.adjust(a))
    }

    pub async fn lookup(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        let r = self.lookup_cached(c, dir, name).await;
        if matches!(&r, Err(e) if e.errno == Errno::ENOENT) {
            self.list_complete(c, dir).await;
        }
        r
    }

    /// After a lookup in `dir` found nothing: list `dir` on every set (leased there), so
    /// the next lookups of names not in it are answered from memory (`cache/src/dirstate.rs`).
    pub(super) async fn list_complete(&self, c: &Creds, dir: Id) {
        let i = &self.inner;
        let map = i.map();
        if map.rebalancing || !i.complete.want(dir, map.epoch) {
            return;
        }
        let token = i.complete.begin();
        let list = |set: u32| {
            let op = Op::ReadDir { dir, cookie: 0, max: LIST_MAX, plus: false };
            i.call(Target { set, key: dir }, c, op, Bytes::new())
        };
        let lists = futures::future::join_all(map.sets.iter().map(|s| list(s.id))).await;
        let mut names = std::collections::HashSet::new();
        for r in lists {
            match r {
                Ok((Reply::Dir { entries, eof: true }, _)) => {
                    names.extend(entries.into_iter().map(|e| e.name))
                }
                _ => {
                    i.complete.give_up(dir);
                    return;
                }
            }
        }
        i.complete.install(token, dir, names, map.epoch);
    }

    /// Whether `c` may search (look names up in) directory `dir`, as far as the cache
    /// knows exactly: root may; a caller the bricks let search it since its last change
    /// may (`cache/src/search.rs`); others by `dir`'s cached attributes (its merged copy,
    /// under the lease), the owner by the owner bits, anyone else by the group or other
    /// bits only while `dir`'s cached xattrs show no POSIX ACL (whose named entries may say
    /// otherwise). `false` when not known: the brick answers (EACCES or the entry). A
    /// cached entry or a complete directory answers only a caller this says yes to.
    pub(super) fn may_search(&self, c: &Creds, dir: Id) -> bool {
        if c.uid == 0 || self.inner.searchers.may(dir, c) {
            return true;
        }
        let Some(a) = self.inner.attrs.get(dir) else { return false };
        if c.uid == a.uid {
            return a.perm & 0o100 != 0;
        }
        if !self.inner.xattrs.lacks(dir, b"system.posix_acl_access") {
            return false;
        }
        if c.gid == a.gid || c.groups.contains(&a.gid) {
            a.perm & 0o010 != 0
        } else {
            a.perm & 0o001 != 0
        }
    }

    pub(super) async fn lookup_cached(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        valid_name(name)?;
        if !self.may_search(c, dir) {
            return self.lookup_remote(c, dir, name).await;
        }
        if let Some(id) = self.inner.entries.get(dir, name) {
            if let Some(a) = self.inner.attrs.get(id) {
                return Ok(self.adjust(a));
            }
            // A directory's attributes are cached only merged (`remember_found`): fetch
            // them so, and later lookups are answered from the cache again.
            if self.inner.kinds.lock().get(&id) == Some(&FileType::Directory) {
                match self.getattr_remote(c, id).await {
                    Ok(a) => return Ok(a),
                    Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => {
                        self.inner.entries.remove(dir, name);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let map = self.inner.map();
        if !map.rebalancing && self.inner.complete.absent(dir, name, map.epoch) {
            self.inner.negative_hits.fetch_add(1, Ordering::Relaxed);
            return Err(err(
                Errno::ENOENT,
                format!(
                    "{}: no such entry (directory {dir} listed)",
                    String::from_utf8_lossy(name)
                ),
            ));
        }
        self.lookup_remote(c, dir, name).await
    }

    /// The parent directory of directory `dir` (the root's is the root), as the bricks know
    /// it now: for a gateway that knows a directory only by handle (after a restart) and is
    /// asked for `..` (NFSv4 LOOKUPP, NFSv3 READDIR's `..`). Not cached: a rename moves it.
    pub async fn lookup_parent(&self, c: &Creds, dir: Id) -> Result<Attr> {
        let i = &self.inner;
        let target = Target { set: i.home(dir), key: dir };
        let look = Op::Lookup { dir, name: b"..".to_vec() };
        match i.call(target, c, look, Bytes::new()).await?.0 {
            Reply::Entry { attr, .. } => self.getattr(c, attr.id).await,
            other => Err(unexpected("lookup of ..", &other)),
        }
    }

    /// Resolve a `/`-separated path relative to the volume root (no symlinks followed):
    /// the directory chain on one brick, then the entry on its hashed set.
    pub async fn resolve(&self, c: &Creds, path: &[u8]) -> Result<Attr> {
        let comps: Vec<&[u8]> =
            path.split(|&b| b == b'/').filter(|p| !p.is_empty() && *p != b".").collect();
        for p in &comps {
            valid_name(p)?;
        }
        let Some((last, dirs)) = comps.split_last() else {
            return self.getattr(c, Id::ROOT).await;
        };
        // Warm path: every directory of the chain is cached.
        let mut cur = Id::ROOT;
        let mut cached = true;
        for d in dirs {
            match self.inner.entries.get(cur, d).filter(|_| self.may_search(c, cur)) {
                Some(id) => cur = id,
                None => {
                    cached = false;
                    break;
                }
            }
        }
        if !cached {
            let i = &self.inner;
            let first = i.set_ids()[0];
            let comps: Vec<Name> = dirs.iter().map(|d| d.to_vec()).collect();
            let found = i.begin_tokens();
            let (r, _) = i
                .call(
                    Target { set: first, key: Id::ROOT },
                    c,
                    Op::LookupPath { components: comps },
                    Bytes::new(),
                )
                .await?;
            let attrs = match r {
                Reply::Attrs(v) => v,
                other => return Err(unexpected("lookup_path", &other)),
            };
            cur = Id::ROOT;
            for (d, a) in dirs.iter().zip(attrs.iter()) {
                i.remember_found(found, first, cur, d, a);
                cur = a.id;
            }
            if attrs.len() < dirs.len() {
                // Find out exactly why the chain stopped.
                let failed = dirs[attrs.len()];
                let a = self.lookup_remote(c, cur, failed).await?;
                if a.kind != FileType::Directory {
                    return Err(err(
                        Errno::ENOTDIR,
                        format!("{}: not a directory", String::from_utf8_lossy(failed)),
                    ));
                }
                return Err(err(
                    Errno::ENOENT,
                    format!("{}: no such directory", String::from_utf8_lossy(failed)),
                ));
            }
        }
        self.lookup(c, cur, last).await
    }

    pub(super) async fn getattr_remote(&self, c: &Creds, id: Id) -> Result<Attr> {
        let i = &self.inner;
        let home = i.home(id);
        let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != home).collect();
        let get = |s: u32| i.call(Target { set: s, key: id }, c, Op::GetAttr { id }, Bytes::new());
        let token = i.attrs.begin();
        // A directory known as one asks every set at once (one round trip, not two).
        let known_dir = i.kinds.lock().get(&id) == Some(&FileType::Directory);
        let (r, early) = if known_dir && !others.is_empty() {
            let (home_r, rest) = futures::future::join(
                get(home),
                futures::future::join_all(others.iter().map(|s| get(*s))),
            )
            .await;
            (home_r?.0, Some(rest))
        } else {
            (get(home).await?.0, None)
        };
        let mut a = attr_of("getattr", r)?;
        if a.kind == FileType::Directory {
            // A directory exists on every set; entries changed on other sets moved their
            // copies' times.
            let rest = match early {
                Some(rest) => rest,
                None => futures::future::join_all(others.iter().map(|s| get(*s))).await,
            };
            for (r, _) in rest.into_iter().flatten() {
                if let Reply::Attr(o) = r {
                    merge_dir_copy(&mut a, &o, false);
                }
            }
        }
        i.attrs.put(token, &a);
        i.remember_kind(&a);
        Ok(a)
    }

    pub async fn getattr(&self, c: &Creds, id: Id) -> Result<Attr> {
        if self.inner.has_pending(id) {
            self.inner.flush(id).await?;
        }
        if let Some(a) = self.inner.attrs.get(id) {
            return Ok(a);
        }
        self.getattr_remote(c, id).await
    }

    pub(super) async fn kind_of(&self, c: &Creds, id: Id) -> Result<FileType> {
        if let Some(k) = self.inner.kinds.lock().get(&id) {
            return Ok(*k);
        }
        if let Some(a) = self.inner.attrs.get(id) {
            return Ok(a.kind);
        }
        Ok(self.getattr_remote(c, id).await?.kind)
    }

    /// Run a per-inode op on the right set(s): a file's home set, or every set of a
    /// directory (home set first, so its errors win). The caller drops or replaces the
    /// inode's cached attributes.
    pub(super) async fn on_inode(&self, c: &Creds, id: Id, op: Op) -> Result<(Reply, Bytes)> {
        let i = &self.inner;
        let home = i.home(id);
        let r = i.call(Target { set: home, key: id }, c, op.clone(), Bytes::new()).await?;
        if self.kind_of(c, id).await? == FileType::Directory {
            let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != home).collect();
            let calls = others
                .iter()
                .map(|s| i.call(Target { set: *s, key: id }, c, op.clone(), Bytes::new()));
            for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
                if let Err(e) = r {
                    tracing::warn!(%id, set = s, op = op.name(), error = %e, "directory copy not updated on one set");
                }
            }
        }
        Ok(r)
    }

    pub async fn setattr(&self, c: &Creds, id: Id, set: &SetAttr) -> Result<Attr> {
        if self.inner.has_pending(id) {
            self.inner.flush(id).await?;
        }
        let i = &self.inner;
        // Taken before the op leaves: a recall crossing it voids its reply (and an
        // invalidation here, between the op and the put, would void its own reply). Its
        // install voids fetches of the inode in flight, which may carry the attributes
        // from before it (`AttrCache::put_change`); invalidating does too.
        let token = i.attrs.begin();
        // A new mode or owner changes who may read which xattr: the cached lists go.
        if set.perm.is_some() || set.uid.is_some() || set.gid.is_some() {
            i.xattrs.invalidate(id);
        }
        let r = self.on_inode(c, id, Op::SetAttr { id, set: set.clone() }).await;
        if set.perm.is_some() || set.uid.is_some() || set.gid.is_some() {
            i.xattrs.invalidate(id);
            i.searchers.invalidate(id);
        }
        let a = r.and_then(|(r, _)| attr_of("setattr", r));
        match &a {
            // One set's copy of a directory: the next getattr merges every set's.
            Ok(a) if a.kind != FileType::Directory => {
                i.attrs.put_change(token, a);
            }
            _ => i.attrs.invalidate(id),
        }
        a
    }
}
