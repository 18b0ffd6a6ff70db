//! Namespace operations: create, mknod, mkdir, symlink, link, unlink, rmdir and rename
//! over the replica sets (real entries, linkto entries, a directory on every set).

use super::dircache::DirChange;
use super::{attr_of, err, unexpected, Target, Volume};
use crate::Result;
use bytes::Bytes;
use cairn_cache::merge_dir_copy;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{rename_flags, valid_name, Attr, Creds, Errno, FileType, Id, Name, SetAttr};

/// How many times one create is routed again after a layout change (each one needs
/// another add-brick while it is in flight).
const MAX_REROUTES: u32 = 4;

impl Volume {
    pub(super) async fn make_entry(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        kind: FileType,
        perm: u32,
        rdev: u64,
        target: Option<Name>,
        exclusive: bool,
    ) -> Result<Attr> {
        valid_name(name)?;
        let i = &self.inner;
        // A create sent by a layout this client no longer has (refused ESTALEMAP by a
        // head with the new map, `call::rerouted`) goes again to the set the name hashes to
        // now, with an id on that set: a few times at most (each needs a layout change).
        let mut reroutes = 0;
        let (set, id, change, made, r) = loop {
            let layout = i.map().layout_epoch;
            let set = i.hashed(dir, name);
            if i.map().rebalancing {
                // Since an add-brick the name may still be on the set it hashed to before:
                // creating it on its new set would make a second file of that name.
                if let Some(a) = self.lookup_elsewhere(c, dir, name, set).await? {
                    if !exclusive && kind == FileType::Regular && a.kind == FileType::Regular {
                        return Ok(a);
                    }
                    return Err(err(
                        Errno::EEXIST,
                        format!(
                            "{}: exists (on another replica set)",
                            String::from_utf8_lossy(name)
                        ),
                    ));
                }
            }
            let id = i.new_id(set, dir);
            let op = Op::Create {
                dir,
                name: name.to_vec(),
                id,
                kind,
                perm,
                rdev,
                target: target.clone(),
                exclusive: true,
            };
            let mut change = i.begin_dirs(&[dir]);
            i.complete.touch(dir);
            let made = i.begin_tokens();
            let xt = i.xattrs.begin();
            let r = i.call_ns(Target { set, key: dir }, c, op).await;
            i.named(dir, name, &r);
            change.step(set, &[dir], &r);
            match &r {
                Err(e)
                    if e.errno == Errno::ESTALEMAP
                        && (i.hashed(dir, name) != set || i.layout_moved(layout, e)) =>
                {
                    reroutes += 1;
                    let to = i.hashed(dir, name);
                    let n = String::from_utf8_lossy(name);
                    let why = "create routed by an old layout; sending it again";
                    tracing::debug!(%dir, name = %n, from = set, to, reroutes, "{why}");
                    change.finish(i);
                    if reroutes >= MAX_REROUTES {
                        return Err(e.clone());
                    }
                }
                _ => break (set, id, change, (made, xt), r),
            }
        };
        let (made, xt) = made;
        match r {
            Ok((r, _)) => {
                let a = attr_of("create", r)?;
                i.remember(made, set, dir, name, &a);
                i.seed_xattrs(xt, c, set, dir, &a);
                change.finish(i);
                Ok(a)
            }
            Err(e) if e.errno == Errno::EEXIST => {
                i.entries.remove(dir, name);
                let existing = self.lookup_remote(c, dir, name).await;
                match existing {
                    // Our own create, answered on a retry after a fail-over.
                    Ok(a) if a.id == id => {
                        i.attrs.invalidate(dir);
                        Ok(a)
                    }
                    Ok(a)
                        if !exclusive
                            && kind == FileType::Regular
                            && a.kind == FileType::Regular =>
                    {
                        Ok(a)
                    }
                    _ => Err(e),
                }
            }
            // The op may have been applied (a connection lost after it was sent): the
            // parent's cached attributes are not trusted, as mkdir and link do.
            Err(e) => {
                change.finish(i);
                Err(e)
            }
        }
    }

    /// While the volume is `rebalancing`: `name` in `dir` as found on a set other than
    /// `hashed` (all asked at once), if any.
    async fn lookup_elsewhere(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        hashed: u32,
    ) -> Result<Option<Attr>> {
        let i = &self.inner;
        let map = i.map();
        let look = |set: u32| {
            let op = Op::Lookup { dir, name: name.to_vec() };
            i.call(Target { set, key: dir }, c, op, Bytes::new())
        };
        let others = map.sets.iter().filter(|s| s.id != hashed).map(|s| look(s.id));
        for r in futures::future::join_all(others).await {
            match r {
                Ok((Reply::Entry { attr, linkto: None }, _)) => return Ok(Some(attr)),
                Ok((Reply::Entry { linkto: Some(target), .. }, _)) => {
                    return self.getattr_remote(c, target).await.map(Some)
                }
                Ok((other, _)) => return Err(unexpected("lookup", &other)),
                Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    pub async fn create(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        perm: u32,
        exclusive: bool,
    ) -> Result<Attr> {
        self.make_entry(c, dir, name, FileType::Regular, perm, 0, None, exclusive).await
    }

    pub async fn mknod(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        kind: FileType,
        perm: u32,
        rdev: u64,
    ) -> Result<Attr> {
        if kind == FileType::Directory || kind == FileType::Symlink {
            return Err(err(Errno::EINVAL, "mknod cannot make directories or symlinks"));
        }
        self.make_entry(c, dir, name, kind, perm, rdev, None, true).await
    }

    pub async fn mkdir(&self, c: &Creds, dir: Id, name: &[u8], perm: u32) -> Result<Attr> {
        valid_name(name)?;
        let i = &self.inner;
        // Refused by a head with a newer layout (this client has not received an
        // add-brick's map yet): routed again, so the directory reaches the new sets too.
        let mut reroutes = 0;
        let (hashed, id, op, mut change, made, r) = loop {
            let layout = i.map().layout_epoch;
            let hashed = i.hashed(dir, name);
            if i.map().rebalancing && self.lookup_elsewhere(c, dir, name, hashed).await?.is_some() {
                return Err(err(
                    Errno::EEXIST,
                    format!("{}: exists (on another replica set)", String::from_utf8_lossy(name)),
                ));
            }
            // A directory gets a spread-out chain order, not its parent's: the files made
            // in it follow *it* (`new_id`), so if directories followed their parents every
            // inode of the volume would have the root's head on each set, one brick
            // serving all reads, locks and leases and the other replicas only following.
            let id = Id::new_on_set(hashed);
            let op = Op::Mkdir { dir, name: name.to_vec(), id, perm };
            let mut change = i.begin_dirs(&[dir]);
            i.complete.touch(dir);
            let made = i.begin_tokens();
            let r = i.call_ns(Target { set: hashed, key: dir }, c, op.clone()).await;
            i.named(dir, name, &r);
            change.step(hashed, &[dir], &r);
            match &r {
                Err(e) if i.layout_moved(layout, e) && reroutes < MAX_REROUTES => {
                    reroutes += 1;
                    tracing::debug!(%dir, name = %String::from_utf8_lossy(name), reroutes, "mkdir routed by an old layout; sending it again");
                    change.finish(i);
                }
                _ => break (hashed, id, op, change, made, r),
            }
        };
        let a = match r {
            Ok((r, _)) => attr_of("mkdir", r)?,
            Err(e) if e.errno == Errno::EEXIST => {
                i.entries.remove(dir, name);
                i.attrs.invalidate(dir);
                match self.lookup_remote(c, dir, name).await {
                    Ok(a) if a.id == id => a,
                    Ok(a) if a.kind == FileType::Directory => {
                        self.spread_dir(c, dir, name, &a, hashed).await;
                        return Err(e);
                    }
                    _ => return Err(e),
                }
            }
            Err(e) => {
                change.finish(i);
                return Err(e);
            }
        };
        // The directory and its new entry exist on every set: each set's copy of the
        // parent changed (times, nlink).
        let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != hashed).collect();
        let a_hashed = a.clone();
        // The new directory's attributes merged over every set's copy, as a getattr
        // merges them (each copy has its own times): cached when every set answered with
        // its copy. Leased to this session only when each set's head of the parent, which
        // served the mkdir, heads the new directory too (the id drew the parent's chain
        // order); otherwise they are held for the cache timeout unleased, as a directory's
        // attributes were before leases at create: the mount answers the kernel's
        // permission checks on a new directory from memory (`integration/fuse-threads`).
        let mut merged = Some(a);
        // The other sets as the map has them now (an add-brick since the first step
        // added sets), each sent again if a head with a newer layout refuses it.
        let calls =
            others.iter().map(|s| self.resend_on_new_layout(Target { set: *s, key: dir }, c, &op));
        for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
            change.step(*s, &[dir], &r);
            match r {
                Ok((r, _)) => match (attr_of("mkdir", r), merged.as_mut()) {
                    (Ok(copy), Some(m)) if copy.id == id => merge_dir_copy(m, &copy, false),
                    _ => merged = None,
                },
                Err(e) => {
                    merged = None;
                    if e.errno != Errno::EEXIST {
                        tracing::warn!(%dir, set = s, error = %e, "mkdir did not reach one replica set")
                    }
                }
            }
        }
        let a = match merged {
            Some(m) => {
                i.remember(made, hashed, dir, name, &m);
                m
            }
            None => {
                i.remember_found(made, hashed, dir, name, &a_hashed);
                a_hashed
            }
        };
        change.finish(i);
        Ok(a)
    }

    /// `name` in `dir` is directory `a`, which another client's mkdir made on set `hashed`:
    /// make sure it is on every other set too before this client, told EEXIST, goes into
    /// it. That mkdir makes it on the other sets only after the hashed one, so a client
    /// making the next component of the same path at once (`mkdir -p` on several
    /// gateways) would reach a set that has no such directory yet and get ESTALE for it.
    /// Made there with the same id and mode (and owner, if the brick made it as another);
    /// EEXIST from a set means it is there already (or that a name of another kind is,
    /// which is left as it is).
    async fn spread_dir(&self, c: &Creds, dir: Id, name: &[u8], a: &Attr, hashed: u32) {
        let i = &self.inner;
        let op = Op::Mkdir { dir, name: name.to_vec(), id: a.id, perm: a.perm & 0o7777 };
        let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != hashed).collect();
        let calls =
            others.iter().map(|s| self.resend_on_new_layout(Target { set: *s, key: dir }, c, &op));
        let n = String::from_utf8_lossy(name);
        for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
            match r.and_then(|(r, _)| attr_of("mkdir", r)) {
                Ok(copy) if (copy.uid, copy.gid) != (a.uid, a.gid) => {
                    let own = SetAttr { uid: Some(a.uid), gid: Some(a.gid), ..SetAttr::default() };
                    let t = Target { set: *s, key: a.id };
                    if let Err(e) =
                        i.call(t, c, Op::SetAttr { id: a.id, set: own }, Bytes::new()).await
                    {
                        tracing::warn!(%dir, name = %n, set = s, error = %e, "directory made on one more set, but not given its owner");
                    }
                }
                Ok(_) => {
                    tracing::debug!(%dir, name = %n, set = s, "another client's new directory made on one more set")
                }
                Err(e) if e.errno == Errno::EEXIST => {}
                Err(e) => {
                    tracing::warn!(%dir, name = %n, set = s, error = %e, "another client's new directory not made on one more set")
                }
            }
        }
        i.attrs.invalidate(dir);
        i.attrs.invalidate(a.id);
    }

    pub async fn symlink(&self, c: &Creds, dir: Id, name: &[u8], target: &[u8]) -> Result<Attr> {
        if target.is_empty() || target.len() > 4095 || target.contains(&0) {
            return Err(err(Errno::EINVAL, "symlink target must be 1-4095 bytes without NUL"));
        }
        self.make_entry(c, dir, name, FileType::Symlink, 0o777, 0, Some(target.to_vec()), true)
            .await
    }

    pub async fn readlink(&self, c: &Creds, id: Id) -> Result<Vec<u8>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::Readlink { id }).await? {
            Reply::Bytes(b) => Ok(b),
            other => Err(unexpected("readlink", &other)),
        }
    }

    pub async fn link(&self, c: &Creds, id: Id, dir: Id, name: &[u8]) -> Result<Attr> {
        valid_name(name)?;
        let i = &self.inner;
        let home = i.home(id);
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let made = i.begin_tokens();
        let op = Op::Link { id, dir, name: name.to_vec() };
        let mut reroutes = 0;
        let r = loop {
            // Refused by a head with a newer layout: sent again (its routing, the home
            // set, does not change; the linkto below follows the new layout).
            let layout = i.map().layout_epoch;
            let r = i.call_ns(Target { set: home, key: dir }, c, op.clone()).await;
            match &r {
                Err(e) if i.layout_moved(layout, e) && reroutes < MAX_REROUTES => reroutes += 1,
                _ => break r,
            }
        };
        i.named(dir, name, &r);
        change.step(home, &[dir], &r);
        let r = match r {
            Ok((r, _)) => r,
            Err(e) => {
                change.finish(i);
                return Err(e);
            }
        };
        let a = attr_of("link", r)?;
        if let Err(e) = self.linkto_on_hashed(c, dir, name, id, home, false, &mut change).await {
            i.attrs.invalidate(dir);
            i.complete.invalidate(dir);
            // Undo so the name does not exist half-way.
            let _ = i
                .call(
                    Target { set: home, key: dir },
                    c,
                    Op::Unlink { dir, name: name.to_vec() },
                    Bytes::new(),
                )
                .await;
            return Err(e);
        }
        i.remember_changed(made, home, dir, name, &a);
        change.finish(i);
        Ok(a)
    }

    /// Make `name` in `dir` a linkto to `target` (homed on `home`) on the set the name
    /// hashes to, unless that is `home`; with `replace`, whatever that set has under the
    /// name is removed first (rename's destination). The set is chosen right before the
    /// linkto is sent and again whenever a head with a newer layout refuses it, so the
    /// linkto lands where lookups by the current layout look.
    #[allow(clippy::too_many_arguments)]
    async fn linkto_on_hashed(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        target: Id,
        home: u32,
        replace: bool,
        change: &mut DirChange,
    ) -> Result<()> {
        let i = &self.inner;
        let mut reroutes = 0;
        loop {
            let layout = i.map().layout_epoch;
            let hashed = i.hashed(dir, name);
            if hashed == home {
                return Ok(());
            }
            if replace {
                let r = self.unlink_linkto(hashed, dir, name).await;
                change.step(hashed, &[dir], &r);
            }
            let mk = Op::MkLinkto { dir, name: name.to_vec(), target };
            let r = i.call_ns(Target { set: hashed, key: dir }, c, mk).await;
            change.step(hashed, &[dir], &r);
            match r {
                Err(e) if i.layout_moved(layout, &e) && reroutes < MAX_REROUTES => {
                    reroutes += 1;
                    tracing::debug!(%dir, name = %String::from_utf8_lossy(name), reroutes, "linkto routed by an old layout; sending it again");
                }
                r => return r.map(|_| ()),
            }
        }
    }

    /// Remove `name` in `dir` on set `set` if it is a linkto (`Op::UnlinkLinkto`, as
    /// root): a real file of that name another client made there meanwhile stays
    /// (ENOENT). A brick built before the op refuses it as undecodable (EPROTO): then a
    /// plain unlink, as before.
    async fn unlink_linkto(
        &self,
        set: u32,
        dir: Id,
        name: &[u8],
    ) -> Result<(Reply, Option<Vec<Attr>>)> {
        let i = &self.inner;
        let (root, t) = (Creds::root(), Target { set, key: dir });
        match i.call_ns(t, &root, Op::UnlinkLinkto { dir, name: name.to_vec() }).await {
            Err(e) if e.errno == Errno::EPROTO => {
                i.call_ns(t, &root, Op::Unlink { dir, name: name.to_vec() }).await
            }
            r => r,
        }
    }

    pub async fn unlink(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        valid_name(name)?;
        let i = &self.inner;
        // What the name leads to: the unlink needs only its id and type, which the entry
        // cache (under the lease of the directory's entries) and the type memo (exact)
        // know without its attributes — a read that moved the file's atime dropped
        // those, and a lookup for them would cost a round trip.
        let known =
            i.entries.get(dir, name).and_then(|id| i.kinds.lock().get(&id).map(|k| (id, *k)));
        let (id, kind) = match known {
            Some(k) => k,
            None => {
                let a = self.lookup(c, dir, name).await?;
                (a.id, a.kind)
            }
        };
        let hashed = i.hashed(dir, name);
        let (home, is_dir) = (i.home(id), kind == FileType::Directory);
        if !is_dir {
            // Keep the inode alive on the bricks if it is open here.
            let register = {
                let mut o = i.opens.lock();
                match o.get_mut(&id) {
                    Some(s) if s.count > 0 && !s.registered => {
                        s.registered = true;
                        true
                    }
                    _ => false,
                }
            };
            if register {
                i.call(Target { set: home, key: id }, c, Op::Open { id }, Bytes::new()).await?;
            }
        }
        let real = if is_dir { hashed } else { home };
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let r = i
            .call_ns(Target { set: real, key: dir }, c, Op::Unlink { dir, name: name.to_vec() })
            .await;
        i.unnamed(dir, name, &r);
        change.step(real, &[dir], &r);
        i.entries.remove(dir, name);
        i.attrs.invalidate(id);
        i.xattrs.invalidate(id);
        if let Err(e) = r {
            i.attrs.invalidate(dir);
            return Err(e);
        }
        // The name's linkto, if it has one: on its hashed set, or, since an add-brick
        // changed the layout (rebalancing), on the set it hashed to before: any set.
        let linktos: Vec<u32> = if is_dir {
            vec![]
        } else if i.map().rebalancing {
            i.set_ids().into_iter().filter(|s| *s != home).collect()
        } else if hashed != home {
            vec![hashed]
        } else {
            vec![]
        };
        let calls = linktos.iter().map(|s| self.unlink_linkto(*s, dir, name));
        for (s, r) in linktos.iter().zip(futures::future::join_all(calls).await) {
            change.step(*s, &[dir], &r);
            if let Err(e) = r {
                if e.errno != Errno::ENOENT && e.errno != Errno::ESTALE {
                    tracing::warn!(%dir, name = %String::from_utf8_lossy(name), set = s, error = %e, "stale linkto left behind");
                }
            }
        }
        change.finish(i);
        Ok(())
    }

    /// A directory's entries are spread over the sets: it is empty only if it is empty on
    /// every one of them (a single set's rmdir/rename would not notice the others).
    pub(super) async fn check_empty(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        let i = &self.inner;
        let sets = i.set_ids();
        if sets.len() < 2 {
            return Ok(());
        }
        let probes = sets.iter().map(|s| {
            i.call(
                Target { set: *s, key: dir },
                c,
                Op::ReadDir { dir, cookie: 0, max: 1, plus: false },
                Bytes::new(),
            )
        });
        for r in futures::future::join_all(probes).await {
            if let (Reply::Dir { entries, .. }, _) = r? {
                if !entries.is_empty() {
                    return Err(err(
                        Errno::ENOTEMPTY,
                        format!("{}: directory not empty", String::from_utf8_lossy(name)),
                    ));
                }
            }
        }
        Ok(())
    }

    pub async fn rmdir(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        valid_name(name)?;
        let a = self.lookup(c, dir, name).await?;
        if a.kind != FileType::Directory {
            return Err(err(
                Errno::ENOTDIR,
                format!("{}: not a directory", String::from_utf8_lossy(name)),
            ));
        }
        let i = &self.inner;
        let sets = i.set_ids();
        self.check_empty(c, a.id, name).await?;
        let hashed = i.hashed(dir, name);
        let op = Op::Rmdir { dir, name: name.to_vec() };
        let others: Vec<u32> = sets.iter().copied().filter(|s| *s != hashed).collect();
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let calls = others.iter().map(|s| i.call_ns(Target { set: *s, key: dir }, c, op.clone()));
        for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
            change.step(*s, &[dir], &r);
            match r {
                Ok(_) => {}
                Err(e) if e.errno == Errno::ENOENT => {}
                Err(e) => {
                    i.forget_entry(dir, name);
                    i.complete.invalidate(dir);
                    return Err(e);
                }
            }
        }
        let r = i.call_ns(Target { set: hashed, key: dir }, c, op).await;
        i.unnamed(dir, name, &r);
        i.complete.invalidate(a.id);
        change.step(hashed, &[dir], &r);
        i.entries.remove(dir, name);
        i.attrs.invalidate(a.id);
        i.entries.invalidate_dir(a.id);
        match r {
            Ok(_) => {
                change.finish(i);
                Ok(())
            }
            Err(e) => {
                i.attrs.invalidate(dir);
                Err(e)
            }
        }
    }

    pub async fn rename(
        &self,
        c: &Creds,
        src_dir: Id,
        src: &[u8],
        dst_dir: Id,
        dst: &[u8],
        flags: u32,
    ) -> Result<()> {
        valid_name(src)?;
        valid_name(dst)?;
        let i = &self.inner;
        let s = self.lookup(c, src_dir, src).await?;
        let d = match self.lookup(c, dst_dir, dst).await {
            Ok(a) => Some(a),
            Err(e) if e.errno == Errno::ENOENT => None,
            Err(e) => return Err(e),
        };
        if flags & rename_flags::NOREPLACE != 0 && d.is_some() {
            return Err(err(Errno::EEXIST, format!("{}: exists", String::from_utf8_lossy(dst))));
        }
        if flags & rename_flags::EXCHANGE != 0 && (i.set_ids().len() > 1 || d.is_none()) {
            return Err(err(
                Errno::EINVAL,
                "RENAME_EXCHANGE is only supported on single-set volumes",
            ));
        }
        if let Some(d) = &d {
            if d.id == s.id {
                return Ok(()); // Two names of one inode: POSIX says do nothing.
            }
        }
        let op =
            Op::Rename { src_dir, src_name: src.to_vec(), dst_dir, dst_name: dst.to_vec(), flags };
        if s.kind == FileType::Directory {
            if let Some(d) = &d {
                if d.kind != FileType::Directory {
                    return Err(err(
                        Errno::ENOTDIR,
                        format!("{}: not a directory", String::from_utf8_lossy(dst)),
                    ));
                }
                self.check_empty(c, d.id, dst).await?;
            }
        } else if let Some(d) = &d {
            if d.kind == FileType::Directory {
                return Err(err(
                    Errno::EISDIR,
                    format!("{}: is a directory", String::from_utf8_lossy(dst)),
                ));
            }
        }
        let dirs = op.parent_dirs();
        let mut change = i.begin_dirs(&dirs);
        i.complete.touch(src_dir);
        i.complete.touch(dst_dir);
        let r = self.rename_steps(c, &op, &s, d.as_ref(), &mut change).await;
        if r.is_ok() {
            i.complete.removed(src_dir, src);
            i.complete.added(dst_dir, dst);
            i.complete.touch(src_dir);
            i.complete.touch(dst_dir);
        } else {
            i.complete.invalidate(src_dir);
            i.complete.invalidate(dst_dir);
        }
        i.entries.remove(src_dir, src);
        i.entries.remove(dst_dir, dst);
        i.attrs.invalidate(s.id);
        if let Some(d) = &d {
            i.attrs.invalidate(d.id);
        }
        change.finish(i);
        if s.kind == FileType::Directory {
            i.entries.invalidate_dir(s.id);
        }
        r
    }

    /// A namespace op whose routing does not depend on the layout (a rename at the
    /// file's home set, a directory rename's first set), sent again when a head with a
    /// newer layout refuses it (the client had not received an add-brick's map).
    async fn resend_on_new_layout(
        &self,
        t: Target,
        c: &Creds,
        op: &Op,
    ) -> Result<(Reply, Option<Vec<Attr>>)> {
        let i = &self.inner;
        let mut reroutes = 0;
        loop {
            let layout = i.map().layout_epoch;
            let r = i.call_ns(t, c, op.clone()).await;
            match &r {
                Err(e) if i.layout_moved(layout, e) && reroutes < MAX_REROUTES => reroutes += 1,
                _ => return r,
            }
        }
    }

    /// The bricks' part of `rename` (`op`) of `s` over `d`, each step noted in `change`.
    pub(super) async fn rename_steps(
        &self,
        c: &Creds,
        op: &Op,
        s: &Attr,
        d: Option<&Attr>,
        change: &mut DirChange,
    ) -> Result<()> {
        let i = &self.inner;
        let Op::Rename { src_dir, src_name: src, dst_dir, dst_name: dst, .. } = op else {
            return Err(unexpected("rename", &Reply::Unit));
        };
        let (src_dir, dst_dir) = (*src_dir, *dst_dir);
        let dirs = op.parent_dirs();
        if s.kind == FileType::Directory {
            let first = i.hashed(dst_dir, dst);
            let r = self.resend_on_new_layout(Target { set: first, key: src_dir }, c, op).await;
            change.step(first, &dirs, &r);
            r?;
            let others: Vec<u32> = i.set_ids().into_iter().filter(|x| *x != first).collect();
            let calls = others
                .iter()
                .map(|x| self.resend_on_new_layout(Target { set: *x, key: src_dir }, c, op));
            for (x, r) in others.iter().zip(futures::future::join_all(calls).await) {
                change.step(*x, &dirs, &r);
                if let Err(e) = r {
                    tracing::warn!(set = x, error = %e, "directory rename did not reach one replica set");
                }
            }
            return Ok(());
        }
        let home = i.home(s.id);
        let unlink = |dir: Id, name: &[u8]| Op::Unlink { dir, name: name.to_vec() };
        // A replaced file homed elsewhere loses its real entry there first.
        if let Some(d) = d {
            let dh = i.home(d.id);
            if dh != home {
                let r = i.call_ns(Target { set: dh, key: dst_dir }, c, unlink(dst_dir, dst)).await;
                change.step(dh, &[dst_dir], &r);
                r?;
            }
        }
        let r = self.resend_on_new_layout(Target { set: home, key: src_dir }, c, op).await;
        change.step(home, &dirs, &r);
        r?;
        let root = Creds::root();
        self.linkto_on_hashed(&root, dst_dir, dst, s.id, home, true, change).await?;
        let hs = i.hashed(src_dir, src);
        // The source name's linkto: on its hashed set, or, while rebalancing (the name may
        // have hashed to another set before add-brick), on any set but the file's.
        let src_linktos: Vec<u32> = if i.map().rebalancing {
            i.set_ids().into_iter().filter(|x| *x != home).collect()
        } else if hs != home {
            vec![hs]
        } else {
            vec![]
        };
        let calls = src_linktos.iter().map(|x| self.unlink_linkto(*x, src_dir, src));
        for (x, r) in src_linktos.iter().zip(futures::future::join_all(calls).await) {
            change.step(*x, &[src_dir], &r);
        }
        Ok(())
    }
}
