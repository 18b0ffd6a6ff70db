//! The namespace: lookup, attributes, and the operations that make, link, rename and remove names.

use super::*;

impl CairnFs {
    pub(super) fn op_lookup(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
    ) {
        self.count("lookup");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.run_here(async move {
            match sh.vol.lookup(&c, dir, &name).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "lookup",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_forget(&self, _req: &Request, INodeNo(ino): INodeNo, nlookup: u64) {
        self.count("forget");
        self.sh.inodes.lock().forget(ino, nlookup);
    }

    pub(super) fn op_getattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        self.count("getattr");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.run_here(async move {
            match sh.vol.getattr(&c, id).await {
                Ok(a) => reply.attr(&sh.cfg.attr_ttl, &file_attr(&a, ino)),
                Err(e) => reply.error(Errno::from_i32(fail("getattr", id, &e))),
            }
        });
    }

    // The arguments of fuser's `Filesystem` method, as the kernel sends them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn op_setattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.count("setattr");
        debug!(ino, ?mode, ?uid, ?gid, ?size, ?atime, ?mtime, ?ctime, ?fh, "setattr");
        let id = try_reply!(self.id(ino), reply);
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        // After an unlink the kernel moves the inode's ctime and, under the writeback
        // cache, sends it in a SETATTR of the times. If that unlink (ours) removed the
        // last name and nothing here has the file open, no one can reach the file any more:
        // answer without asking the bricks, which would only say it is gone.
        let times_only =
            set.perm.is_none() && set.uid.is_none() && set.gid.is_none() && set.size.is_none();
        if times_only
            && self.sh.inodes.lock().is_gone(ino)
            && !self.sh.opens.lock().contains_key(&id)
        {
            return reply.error(Errno::from_i32(libc::ENOENT));
        }
        if let Some(a) = self.times_flush_is_redundant(ino, id, &set, ctime, fh) {
            return reply.attr(&self.sh.cfg.attr_ttl, &file_attr(&a, ino));
        }
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let r = if set.is_empty() {
                sh.vol.getattr(&c, id).await
            } else {
                sh.vol.setattr(&c, id, &set).await
            };
            match r {
                Ok(a) => {
                    let mtime = set.mtime.is_some().then(|| mtime_of(&a));
                    let size = set.size.map(|_| a.size);
                    sh.inodes.lock().local_change(ino, None, size, mtime);
                    reply.attr(&sh.cfg.attr_ttl, &file_attr(&a, ino))
                }
                Err(e) => reply.error(Errno::from_i32(fail("setattr", id, &e))),
            }
        });
    }

    pub(super) fn op_readlink(&self, req: &Request, INodeNo(ino): INodeNo, reply: ReplyData) {
        self.count("readlink");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.readlink(&c, id).await {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(Errno::from_i32(fail("readlink", id, &e))),
            }
        });
    }

    pub(super) fn op_mknod(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.count("mknod");
        let dir = try_reply!(self.id(parent), reply);
        let k = try_reply!(FileType::from_mode(mode).ok_or(libc::EINVAL), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.mknod(&c, dir, &name, k, mode & 0o7777, rdev as u64).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "mknod",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_mkdir(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.count("mkdir");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.mkdir(&c, dir, &name, mode & 0o7777).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "mkdir",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_unlink(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        self.count("unlink");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            // The client library looks the name up first anyway (cached after the kernel's
            // LOOKUP): its last link tells whether the inode is gone after this.
            let victim = sh.vol.lookup(&c, dir, &name).await.ok();
            match sh.vol.unlink(&c, dir, &name).await {
                Ok(()) => {
                    let mut t = sh.inodes.lock();
                    t.remove_name(parent, &name);
                    if let Some(a) = victim.filter(|a| a.kind != FileType::Directory) {
                        let open = sh.opens.lock().contains_key(&a.id);
                        if let (Some(ino), false, true) = (t.ino_of(a.id), open, a.nlink <= 1) {
                            t.mark_gone(ino);
                        }
                    }
                    drop(t);
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "unlink",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_rmdir(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        self.count("rmdir");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.rmdir(&c, dir, &name).await {
                Ok(()) => {
                    sh.inodes.lock().remove_name(parent, &name);
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "rmdir",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_symlink(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.count("symlink");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        let (name, target) =
            (link_name.as_bytes().to_vec(), target.as_os_str().as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.symlink(&c, dir, &name, &target).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "symlink",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_rename(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.count("rename");
        let flags = flags.bits();
        use cairn_proto::rename_flags::{EXCHANGE, NOREPLACE};
        if flags & !(NOREPLACE | EXCHANGE) != 0 || flags == NOREPLACE | EXCHANGE {
            return reply.error(Errno::from_i32(libc::EINVAL)); // RENAME_WHITEOUT and nonsense
        }
        let src = try_reply!(self.id(parent), reply);
        let dst = try_reply!(self.id(newparent), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        let (name, newname) = (name.as_bytes().to_vec(), newname.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.rename(&c, src, &name, dst, &newname, flags).await {
                Ok(()) => {
                    let mut t = sh.inodes.lock();
                    if flags & EXCHANGE == 0 {
                        t.remove_name(parent, &name);
                    }
                    t.add_name(newparent, &newname);
                    drop(t);
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "rename",
                    format!("{src}/{} -> {dst}/{}", name.escape_ascii(), newname.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_link(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.count("link");
        let id = try_reply!(self.id(ino), reply);
        let dir = try_reply!(self.id(newparent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), newname.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.link(&c, id, dir, &name).await {
                Ok(a) => reply_entry(&sh, newparent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "link",
                    format!("{id} -> {dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_create(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.count("create");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        let excl = flags & libc::O_EXCL != 0;
        self.spawn(async move {
            let what = || format!("{dir}/{}", name.escape_ascii());
            let mut a = match sh.vol.create(&c, dir, &name, mode & 0o7777, excl).await {
                Ok(a) => a,
                Err(e) => return reply.error(Errno::from_i32(fail("create", what(), &e))),
            };
            // Lost a race with another creator: O_TRUNC still applies to what we open.
            if !excl && flags & libc::O_TRUNC != 0 && a.size > 0 {
                let set = SetAttr { size: Some(0), ..Default::default() };
                match sh.vol.setattr(&c, a.id, &set).await {
                    Ok(t) => a = t,
                    Err(e) => {
                        return reply.error(Errno::from_i32(fail("create(truncate)", what(), &e)))
                    }
                }
            }
            if let Err(e) = sh.vol.open(&c, a.id).await {
                return reply.error(Errno::from_i32(fail("create(open)", what(), &e)));
            }
            let ino = sh.inodes.lock().add_entry(parent, &name, a.id);
            let gen = entry_generation(&sh, ino, &a, true);
            if excl {
                // O_EXCL: created here just now, so it has no file capability and the
                // kernel's ask before the first write needs no brick.
                note_no_caps(&sh, a.id);
            }
            let fh = CairnFs::new_handle(&sh, a.id, c, flags);
            reply.created(
                &sh.cfg.entry_ttl,
                &file_attr(&a, ino),
                Generation(gen),
                FileHandle(fh),
                FopenFlags::empty(),
            );
        });
    }
}

pub(super) fn mtime_of(a: &Attr) -> (i64, u32) {
    (a.mtime.sec, a.mtime.nsec)
}

/// The FUSE generation to hand out with an entry for `a` as inode `ino`. Only regular
/// files under the writeback cache are tracked: the kernel ignores the size and mtime we
/// send for an inode it already has, so when another client changed them, a new generation
/// makes it replace the inode (at a LOOKUP, when nothing has the file open here; a lease
/// recall drops the dentry to get there sooner). `refresh` is false where the kernel does
/// not check generations (READDIRPLUS of a known dentry).
pub(super) fn entry_generation(sh: &Shared, ino: u64, a: &Attr, refresh: bool) -> u64 {
    if !sh.cfg.writeback_cache || a.kind != FileType::Regular {
        return sh.inodes.lock().generation(ino);
    }
    let refresh = refresh && !sh.opens.lock().contains_key(&a.id);
    let now = crate::inodes::Seen { size: a.size, mtime: mtime_of(a) };
    sh.inodes.lock().entry_attr(ino, now, refresh)
}

/// `id` has no `security.capability` as of now (trusted for the attribute TTL).
pub(super) fn note_no_caps(sh: &Shared, id: Id) {
    let mut m = sh.no_caps.lock();
    if m.len() > 100_000 {
        m.clear();
    }
    m.insert(id, std::time::Instant::now());
}

/// Reply to an entry-creating call: reference the inode and hand it to the kernel.
pub(super) fn reply_entry(sh: &Shared, parent: u64, name: &[u8], attr: &Attr, reply: ReplyEntry) {
    let ino = sh.inodes.lock().add_entry(parent, name, attr.id);
    let gen = entry_generation(sh, ino, attr, true);
    reply.entry(&sh.cfg.entry_ttl, &file_attr(attr, ino), Generation(gen));
}
