//! Extended attributes (on a directory's every set when they change).

use super::{unexpected, Volume};
use crate::Result;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Id, Xattr};

impl Volume {
    pub async fn getxattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<Vec<u8>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::GetXattr { id, name: name.to_vec() }).await? {
            Reply::Bytes(b) => Ok(b),
            other => Err(unexpected("getxattr", &other)),
        }
    }

    pub async fn setxattr(
        &self,
        c: &Creds,
        id: Id,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<()> {
        let op = Op::SetXattr { id, name: name.to_vec(), value: value.to_vec(), flags };
        let r = self.on_inode(c, id, op).await;
        self.inner.attrs.invalidate(id);
        r.map(|_| ())
    }

    pub async fn listxattr(&self, c: &Creds, id: Id) -> Result<Vec<Vec<u8>>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::ListXattr { id }).await? {
            Reply::Names(n) => Ok(n),
            other => Err(unexpected("listxattr", &other)),
        }
    }

    /// Every xattr of `id` with its value (`None`: the caller may not read it), in one
    /// round trip to the inode's head, which leases `id` to this session as a getxattr does.
    pub async fn getxattrs(&self, c: &Creds, id: Id) -> Result<Vec<Xattr>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::GetXattrs { id }).await? {
            Reply::Xattrs(x) => Ok(x),
            other => Err(unexpected("getxattrs", &other)),
        }
    }

    pub async fn removexattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<()> {
        let r = self.on_inode(c, id, Op::RemoveXattr { id, name: name.to_vec() }).await;
        self.inner.attrs.invalidate(id);
        r.map(|_| ())
    }
}
