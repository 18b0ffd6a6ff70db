//! Extended attributes (and the mount-stats virtual attribute of the root).

use super::*;

impl CairnFs {
    pub(super) fn op_setxattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.count("setxattr");
        let id = try_reply!(self.id(ino), reply);
        self.sh.no_caps.lock().remove(&id);
        let (c, sh) = (self.creds(req), self.sh.clone());
        let (name, value) = (name.as_bytes().to_vec(), value.to_vec());
        self.spawn(async move {
            match sh.vol.setxattr(&c, id, &name, &value, flags as u32).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "setxattr",
                    format!("{id} {}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_getxattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.count("getxattr");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        if ino == crate::inodes::ROOT_INO && name == STATS_XATTR {
            return reply_xattr(self.stats_text(), size, reply);
        }
        if name == CAPS {
            let fresh =
                sh.no_caps.lock().get(&id).map(|t| t.elapsed() < sh.cfg.attr_ttl).unwrap_or(false);
            if fresh {
                return reply.error(Errno::from_i32(libc::ENODATA));
            }
        }
        self.spawn(async move {
            match sh.vol.getxattr(&c, id, &name).await {
                Ok(v) => reply_xattr(v, size, reply),
                Err(e) if name == CAPS && e.errno.0 == libc::ENODATA => {
                    note_no_caps(&sh, id);
                    reply.error(Errno::from_i32(libc::ENODATA))
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "getxattr",
                    format!("{id} {}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_listxattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.count("listxattr");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.listxattr(&c, id).await {
                Ok(names) => {
                    let mut buf = Vec::new();
                    for n in names {
                        buf.extend_from_slice(&n);
                        buf.push(0);
                    }
                    reply_xattr(buf, size, reply)
                }
                Err(e) => reply.error(Errno::from_i32(fail("listxattr", id, &e))),
            }
        });
    }

    pub(super) fn op_removexattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        self.count("removexattr");
        let id = try_reply!(self.id(ino), reply);
        self.sh.no_caps.lock().remove(&id);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.removexattr(&c, id, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "removexattr",
                    format!("{id} {}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }
}
