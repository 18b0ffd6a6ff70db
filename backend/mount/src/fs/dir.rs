//! Directories: open, list (READDIR, READDIRPLUS), release, fsync; statfs and access.

use super::*;

impl CairnFs {
    pub(super) fn op_opendir(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        _flags: OpenFlags,
        reply: ReplyOpen,
    ) {
        self.count("opendir");
        try_reply!(self.id(ino), reply);
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    pub(super) fn op_readdir(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.count("readdir");
        let dir = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let mut cookie = offset;
            loop {
                let (ents, eof) = match sh.vol.readdir(&c, dir, cookie, READDIR_BATCH, false).await
                {
                    Ok(r) => r,
                    Err(e) => {
                        return reply.error(Errno::from_i32(fail(
                            "readdir",
                            format!("{dir}@{cookie}"),
                            &e,
                        )))
                    }
                };
                let got_some = !ents.is_empty();
                for e in &ents {
                    let eino = sh.inodes.lock().ino_of(e.id).unwrap_or_else(|| e.id.ino());
                    if reply.add(INodeNo(eino), e.cookie, kind(e.kind), OsStr::from_bytes(&e.name))
                    {
                        return reply.ok();
                    }
                    cookie = e.cookie;
                }
                if eof || got_some {
                    return reply.ok();
                }
            }
        });
    }

    pub(super) fn op_readdirplus(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.count("readdirplus");
        let dir = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let mut cookie = offset;
            loop {
                let (ents, eof) =
                    match sh.vol.readdir(&c, dir, cookie, READDIRPLUS_BATCH, true).await {
                        Ok(r) => r,
                        Err(e) => {
                            return reply.error(Errno::from_i32(fail(
                                "readdirplus",
                                format!("{dir}@{cookie}"),
                                &e,
                            )))
                        }
                    };
                let got_some = !ents.is_empty();
                for e in ents {
                    let attr = match e.attr {
                        Some(a) => a,
                        None => match sh.vol.getattr(&c, e.id).await {
                            Ok(a) => a,
                            // Gone between listing and stat: skip it.
                            Err(_) => {
                                cookie = e.cookie;
                                continue;
                            }
                        },
                    };
                    // Every entry the kernel accepts holds a lookup reference.
                    let eino = sh.inodes.lock().add_entry(ino, &e.name, attr.id);
                    // The kernel does not check generations of dentries it has here.
                    let gen = entry_generation(&sh, eino, &attr, false);
                    let mut t = sh.inodes.lock();
                    let fa = file_attr(&attr, eino);
                    let ttl = sh.cfg.entry_ttl;
                    if reply.add(
                        INodeNo(eino),
                        e.cookie,
                        OsStr::from_bytes(&e.name),
                        &ttl,
                        &fa,
                        Generation(gen),
                    ) {
                        t.forget(eino, 1);
                        drop(t);
                        return reply.ok();
                    }
                    cookie = e.cookie;
                }
                if eof || got_some {
                    return reply.ok();
                }
            }
        });
    }

    pub(super) fn op_releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.count("releasedir");
        reply.ok();
    }

    pub(super) fn op_fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("fsyncdir");
        // Directory operations are synchronous on the bricks.
        reply.ok();
    }

    pub(super) fn op_statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.count("statfs");
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.statfs(&c).await {
                Ok(s) => reply.statfs(
                    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namemax, s.bsize,
                ),
                Err(e) => reply.error(Errno::from_i32(fail("statfs", "volume", &e))),
            }
        });
    }

    pub(super) fn op_access(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mask: AccessFlags,
        reply: ReplyEmpty,
    ) {
        self.count("access");
        // default_permissions: the kernel checks mode bits against our attributes.
        reply.ok();
    }
}
