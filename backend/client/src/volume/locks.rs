//! Byte-range locks, share reservations and delegations (held on a file's home set).

use super::{unexpected, Volume};
use crate::Result;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Id, Lock, LockKind};

impl Volume {
    pub async fn setlock(&self, c: &Creds, id: Id, lock: Lock, wait: bool) -> Result<()> {
        let i = &self.inner;
        if lock.kind != LockKind::Unlock {
            // This session's other owners' tests must see it: they go to the brick now.
            i.lockstate.own_lock(id);
        }
        i.on_home(c, id, Op::SetLock { id, lock, wait }).await.map(|_| ())
    }

    /// Set the share reservation of open `owner` (of this client's session) on file `id`
    /// to `access` / `deny` (`cairn_proto::msg::share` bits; both 0 releases it). A
    /// conflict with another opener, through any client, is `ESHAREDENIED`.
    pub async fn share(&self, c: &Creds, id: Id, owner: u64, access: u8, deny: u8) -> Result<()> {
        let i = &self.inner;
        i.on_home(c, id, Op::Share { id, owner, access, deny }).await.map(|_| ())
    }

    /// Take a delegation of regular file `id` for this client (`write`: exclusive, else
    /// shared with other readers): until it is given back with
    /// [`deleg_return`](Self::deleg_return), another client's conflicting access of `id`
    /// first recalls it through [`on_recall`](Self::on_recall) and waits. `EAGAIN` when
    /// another client holds a conflicting one.
    pub async fn delegate(&self, id: Id, write: bool) -> Result<()> {
        let i = &self.inner;
        i.on_home(&Creds::root(), id, Op::Delegate { id, write }).await.map(|_| ())
    }

    /// Give back the delegation of `id`, after sending what is buffered of it.
    pub async fn deleg_return(&self, id: Id) -> Result<()> {
        self.inner.deleg_return(id).await
    }

    /// The first conflicting lock, if any. No round trip while this session holds a lease
    /// on `id` that came with the head's word that no other session holds a lock of it, and
    /// this session never locked it (`cairn_cache::LockStates`).
    pub async fn getlock(&self, c: &Creds, id: Id, lock: Lock) -> Result<Option<Lock>> {
        let i = &self.inner;
        if lock.kind != LockKind::Unlock && i.lockstate.unlocked(id) {
            return Ok(None);
        }
        match i.on_home(c, id, Op::GetLock { id, lock }).await? {
            Reply::Lock(l) => Ok(l),
            other => Err(unexpected("getlock", &other)),
        }
    }
}
