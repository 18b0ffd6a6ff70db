//! Request dispatch: one operation in, checked for its byte range and run by the module
//! that holds it (namespace, data, attributes, xattrs, directories in `store/`; pending
//! records in `pending`; heal in `heal`), its failure given the brick's context.

use crate::error::{fail, R};
use crate::heal;
use crate::store::{Brick, Cx};
use bytes::Bytes;
use cairn_proto::msg::{HealExtent, HealState, Op, Reply};
use cairn_proto::{Attr, Creds, Id, RemoteError};

/// How an operation is executed.
#[derive(Debug, Clone, Copy)]
pub enum Exec<'a> {
    /// The chain head: apply with the caller's credentials.
    Primary,
    /// A forwarded copy: apply as root, idempotently (an entry that already exists with the
    /// same id is success, a missing one on unlink is success), then copy owner and
    /// permission bits from the head's result when one is given.
    Replica { result: Option<&'a Attr> },
}

/// Byte ranges come from peers: one that ends past the largest file offset (`i64::MAX`)
/// is refused before any arithmetic on it (the checksum code adds and multiplies offsets),
/// with the errno the kernel gives for it: EFBIG for a write, an allocation or a size,
/// EINVAL for a seek offset. A READ is not refused: one that crosses that offset is cut
/// short there, one at or past it is end of file (`read_fd`), as NFS READ must answer.
fn check_range(op: &Op, data: &[u8]) -> R<()> {
    let (id, off, len, errno) = match op {
        Op::Write { id, offset } => (id, *offset, data.len() as u64, libc::EFBIG),
        Op::CompareAndWrite { id, offset } => (id, *offset, data.len() as u64 / 2, libc::EFBIG),
        Op::Fallocate { id, offset, len, .. } => (id, *offset, *len, libc::EFBIG),
        Op::SetAttr { id, set } => (id, set.size.unwrap_or(0), 0, libc::EFBIG),
        Op::Seek { id, offset, .. } => (id, *offset, 0, libc::EINVAL),
        _ => return Ok(()),
    };
    match off.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(fail(
            errno,
            format!("{} of {id} at {off}+{len}: past the largest file offset", op.name()),
        )),
    }
}

impl Brick {
    /// Execute one operation. `data` is the request's bulk segment (WRITE payload,
    /// COMPARE_AND_WRITE pair); the returned `Bytes` is the reply's bulk segment (READ
    /// data, HEAL_FETCH file contents). Lock ops (`SetLock`, `GetLock`) are not brick
    /// operations and return ENOTSUP here (`cairnd` keeps locks in memory).
    pub fn execute(
        &self,
        creds: &Creds,
        op: &Op,
        data: &[u8],
        mode: Exec<'_>,
    ) -> Result<(Reply, Bytes), RemoteError> {
        let cx = match mode {
            Exec::Primary => Cx {
                caller: if creds.uid == 0 { None } else { Some(creds) },
                replica: false,
                result: None,
            },
            Exec::Replica { result } => Cx { caller: None, replica: true, result },
        };
        self.with_context(op.name(), || self.run(&cx, op, data))
    }

    pub(crate) fn run(&self, cx: &Cx, op: &Op, data: &[u8]) -> R<(Reply, Bytes)> {
        let unit = |r: R<Reply>| r.map(|r| (r, Bytes::new()));
        check_range(op, data)?;
        match op {
            Op::Lookup { dir, name } => unit(self.op_lookup(cx, *dir, name)),
            Op::LookupPath { components } => unit(self.op_lookup_path(cx, components)),
            Op::GetAttr { id } => unit(self.attr(*id).map(Reply::Attr)),
            Op::SetAttr { id, set } => unit(self.op_setattr(cx, *id, set)),
            Op::Create { dir, name, id, kind, perm, rdev, target, exclusive } => {
                unit(self.op_create(
                    cx,
                    *dir,
                    name,
                    *id,
                    *kind,
                    *perm,
                    *rdev,
                    target.as_deref(),
                    *exclusive,
                ))
            }
            Op::Mkdir { dir, name, id, perm } => unit(self.op_mkdir(cx, *dir, name, *id, *perm)),
            Op::MkLinkto { dir, name, target } => unit(self.op_mklinkto(cx, *dir, name, *target)),
            Op::Link { id, dir, name } => unit(self.op_link(cx, *id, *dir, name)),
            Op::Unlink { dir, name } => unit(self.op_unlink(cx, *dir, name)),
            Op::UnlinkLinkto { dir, name } => unit(self.op_unlink_linkto(cx, *dir, name)),
            Op::Rmdir { dir, name } => unit(self.op_rmdir(cx, *dir, name)),
            Op::Rename { src_dir, src_name, dst_dir, dst_name, flags } => {
                unit(self.op_rename(cx, *src_dir, src_name, *dst_dir, dst_name, *flags))
            }
            Op::Readlink { id } => unit(self.op_readlink(*id)),
            Op::Open { id } => unit(self.op_open(*id)),
            Op::Release { id } => unit(self.op_release(*id)),
            Op::Read { id, offset, len } => self.op_read(cx, *id, *offset, *len),
            Op::Write { id, offset } => unit(self.op_write(cx, *id, *offset, data)),
            Op::Fsync { id, datasync } => unit(self.op_fsync(*id, *datasync)),
            Op::Fallocate { id, mode, offset, len } => {
                unit(self.op_fallocate(cx, *id, *mode, *offset, *len))
            }
            Op::Seek { id, offset, whence } => unit(self.op_seek(*id, *offset, *whence)),
            Op::CompareAndWrite { id, offset } => unit(self.op_caw(cx, *id, *offset, data)),
            Op::GetXattr { id, name } => unit(self.op_getxattr(cx, *id, name)),
            Op::SetXattr { id, name, value, flags } => {
                unit(self.op_setxattr(cx, *id, name, value, *flags))
            }
            Op::ListXattr { id } => unit(self.op_listxattr(*id)),
            Op::GetXattrs { id } => unit(self.op_getxattrs(cx, *id)),
            Op::MigrateMark { id, to } => unit(self.op_migrate_mark(cx, *id, *to)),
            Op::MigrateIn { id, attr } => unit(self.op_migrate_in(cx, *id, attr)),
            Op::MigrateOut { dir, name, id, to } => {
                unit(self.op_migrate_out(cx, *dir, name, *id, *to))
            }
            Op::MigrateDrop { id } => unit(self.op_migrate_drop(*id)),
            Op::MigrateStub { id, to } => unit(self.op_migrate_stub(*id, *to)),
            Op::RemoveXattr { id, name } => unit(self.op_removexattr(cx, *id, name)),
            Op::StatFs => unit(self.op_statfs()),
            Op::ReadDir { dir, cookie, max, plus } => {
                unit(self.op_readdir(*dir, *cookie, *max, *plus))
            }
            Op::SetLock { .. } | Op::GetLock { .. } | Op::Share { .. } => Err(fail(
                libc::ENOTSUP,
                "locks and share reservations are kept by cairnd, not by the brick store",
            )),
            Op::PendingList { peer } => unit(Ok(Reply::Pending(self.pending_list(*peer)))),
            Op::PendingAdd { peer, ids } => {
                for id in ids {
                    self.pending_add(*peer, *id)?;
                }
                Ok((Reply::Unit, Bytes::new()))
            }
            Op::PendingClear { peer, ids } => {
                unit(self.pending_clear(*peer, ids).map(|_| Reply::Unit))
            }
            Op::HealFetch { id } => heal::fetch(self, *id),
            Op::HealApply { state } => unit(heal::apply(self, state, data).map(|_| Reply::Unit)),
            Op::HealSums { id, first, count, from_data } => unit(
                heal::sums(self, *id, *first, *count, *from_data).map(|s| Reply::Sums(Box::new(s))),
            ),
            Op::HealWrite { id, extents } => unit(
                heal::write(self, *id, extents, data)
                    .map(|bytes| Reply::HealWritten { bytes, wait_ms: 0 }),
            ),
            Op::HealSync { .. } => Err(fail(
                libc::ENOTSUP,
                "heal_sync is coordinated by cairnd, not by the brick store",
            )),
            Op::CopyRange { .. } => Err(fail(
                libc::ENOTSUP,
                "copy_range is run by cairnd as a read and a replicated write",
            )),
            Op::Delegate { .. } | Op::DelegReturn { .. } => Err(fail(
                libc::ENOTSUP,
                "delegations are kept by cairnd at the chain head, not by the brick store",
            )),
        }
    }

    /// Answer a READ (as chain head, `creds` the caller's) only if that needs no disk I/O:
    /// the file is open in the fd cache and the blocks it covers are in the page cache
    /// (`RWF_NOWAIT`), so it can run on an async thread rather than hop to a blocking
    /// one. `None`: anything else (not a READ, not cached, any error — a checksum mismatch
    /// included): run it with [`Brick::execute`].
    pub fn execute_cached(&self, creds: &Creds, op: &Op) -> Option<(Reply, Bytes)> {
        let Op::Read { id, offset, len } = *op else { return None };
        check_range(op, &[]).ok()?;
        let cx = Cx {
            caller: if creds.uid == 0 { None } else { Some(creds) },
            replica: false,
            result: None,
        };
        self.read_cached(&cx, id, offset, len)
    }

    /// The state of `id` for a chunked copy: like `HealFetch`, but a regular file's data is
    /// left out (`data_len` is its size). The caller (the heal source in `cairnd`) holds the
    /// inode lock.
    pub fn heal_meta(&self, id: Id) -> Result<HealState, RemoteError> {
        heal::meta(self, id)
    }

    /// Source side of one range of a chunked copy: blocks `[a, b)` of regular file `id` as
    /// they are now, as `HealWrite` extents and their bytes (see `heal::extents`).
    pub fn heal_extents(
        &self,
        id: Id,
        a: u64,
        b: u64,
    ) -> Result<(Vec<HealExtent>, Vec<u8>), RemoteError> {
        heal::extents(self, id, a, b)
    }
}
