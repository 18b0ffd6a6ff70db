//! POSIX byte-range locks.

use super::*;

impl CairnFs {
    pub(super) fn op_getlk(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.count("getlk");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let lock = try_reply!(to_lock(typ, start, end, lock_owner, pid), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.getlock(&c, id, lock).await {
                Ok(Some(l)) => {
                    let (s, e, t, p) = from_lock(&l);
                    reply.locked(s, e, t, p)
                }
                Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
                Err(e) => reply.error(Errno::from_i32(fail("getlk", id, &e))),
            }
        });
    }

    // The arguments of fuser's `Filesystem` method, as the kernel sends them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn op_setlk(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.count("setlk");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let lock = try_reply!(to_lock(typ, start, end, lock_owner, pid), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let taking = lock.kind != LockKind::Unlock;
            if taking {
                sh.lockers.lock().insert((id, lock_owner));
            }
            match sh.vol.setlock(&c, id, lock, sleep).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("setlk", id, &e))),
            }
        });
    }
}
