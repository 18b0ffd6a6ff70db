//! Moving one regular file from the replica set it lives on (`from`) to the set its name
//! hashes to (`to`), keeping its id (docs/rebalance.md, "Moving one file"):
//!
//! 1. **fence** it at `from` (`MigrateMark`): refused (skipped) while it is open or holds
//!    locks, share reservations or delegations; from then on the head retries every
//!    other change of it (ESTALEMAP), so the copy misses nothing;
//! 2. **copy**: its inode made at `to` outside the namespace (`MigrateIn`), then data
//!    (READ at `from`, WRITE at `to`), xattrs, owner, mode and times, each through `to`'s
//!    chain, so every brick of the set gets it;
//! 3. **name** it at `to` (a linkto of the name there goes first, then `Link`): the name
//!    is on both sets for a moment, with the same id and the same content;
//! 4. **switch** at `from` (`MigrateOut`): the name there becomes a linkto, the id's index
//!    entry a moved stub naming `to` (ops by id then answer EMOVED and clients resend to
//!    `to`), the fence lifts. The mutation recalls clients' leases on the file.
//!
//! Any failure before the switch takes the copy and its name off `to` and lifts the
//! fence: the file stays where it was, unchanged.

use super::on_head;
use super::on_head_data;
use crate::node::Node;
use bytes::Bytes;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Attr, Errno, FileType, Id, RemoteError, SetAttr, SetTime};
use std::sync::Arc;

/// Bytes copied per READ/WRITE pair.
const CHUNK: u32 = 1 << 20;

/// What became of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Moved, with its size in bytes.
    Moved(u64),
    /// Left where it is, and why (open, locked, hard links, not a regular file...).
    Skipped(String),
}

fn proto(what: &str, r: &Reply) -> RemoteError {
    RemoteError::new(Errno::EPROTO, format!("{what}: unexpected reply {r:?}"))
}

/// Move regular file `id`, named `name` in directory `dir`, from set `from` to set `to`.
pub(crate) async fn migrate_file(
    node: &Arc<Node>,
    vol: &str,
    dir: Id,
    name: &[u8],
    id: Id,
    from: u32,
    to: u32,
) -> Result<Outcome, RemoteError> {
    let shown = String::from_utf8_lossy(name);
    let ctx = |what: &str, e: RemoteError| {
        RemoteError::new(
            e.errno,
            format!(
                "{vol}: moving {shown:?} ({id}) in {dir} from set {from} to {to}: {what}: {}",
                e.message
            ),
        )
    };
    let a = match on_head(node, vol, from, id, Op::GetAttr { id }).await {
        Ok(Reply::Attr(a)) => a,
        Ok(r) => return Err(proto("getattr", &r)),
        Err(e) if e.errno == Errno::ESTALE || e.errno == Errno::EMOVED => {
            return Ok(Outcome::Skipped("gone or moved meanwhile".into()))
        }
        Err(e) => return Err(ctx("getattr", e)),
    };
    if a.kind != FileType::Regular {
        return Ok(Outcome::Skipped(format!("a {:?}, not a regular file", a.kind)));
    }
    if a.nlink != 1 {
        return Ok(Outcome::Skipped(format!("{} hard links", a.nlink)));
    }
    match on_head(node, vol, from, id, Op::MigrateMark { id, to: Some(to) }).await {
        Ok(_) => {}
        Err(e) if e.errno == Errno::EBUSY => return Ok(Outcome::Skipped(e.message)),
        Err(e) => return Err(ctx("fencing it", e)),
    }
    match copy_and_switch(node, vol, dir, name, &a, from, to).await {
        // A file that moved before (it lives off the set that routes its id): that set's
        // stub names `to` now (`from` forwards there meanwhile, until it is removed).
        Ok(bytes) => match restub(node, vol, id, to).await {
            Ok(()) => Ok(Outcome::Moved(bytes)),
            Err(e) => Err(ctx("moved; its forwarding stub", e)),
        },
        Err((linked, e)) => {
            // The file stays at `from`: take the copy and its name off `to`, lift the fence.
            if linked {
                let _ = on_head(node, vol, to, dir, Op::Unlink { dir, name: name.to_vec() }).await;
            }
            let _ = on_head(node, vol, to, id, Op::MigrateDrop { id }).await;
            let lift = on_head(node, vol, from, id, Op::MigrateMark { id, to: None }).await;
            if let Err(le) = lift {
                tracing::error!(volume = vol, %id, error = %le, "could not lift a rebalance fence; the brick lifts it when it opens again");
            }
            if e.errno == Errno::EBUSY {
                return Ok(Outcome::Skipped(e.message));
            }
            Err(ctx("copying", e))
        }
    }
}

/// The set that routes `id` (its home set; the volume's first set for an id homed on a
/// removed set: `cairn_placement::home_set`) forwards it to `to` with a moved stub,
/// unless that set is `to` or holds the inode itself.
pub(crate) async fn restub(
    node: &Arc<Node>,
    vol: &str,
    id: Id,
    to: u32,
) -> Result<(), RemoteError> {
    let map =
        node.map(vol).ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("no map of {vol}")))?;
    let home = cairn_placement::home_set(&map, id).id;
    if home == to {
        return Ok(());
    }
    match on_head(node, vol, home, id, Op::MigrateStub { id, to }).await {
        Ok(_) => Ok(()),
        Err(e) if e.errno == Errno::EEXIST => Ok(()),
        Err(e) => Err(RemoteError::new(
            e.errno,
            format!("{vol}: stub of {id} on set {home} naming set {to}: {}", e.message),
        )),
    }
}

/// Steps 2-4; on failure, whether the name was linked at `to` already.
async fn copy_and_switch(
    node: &Arc<Node>,
    vol: &str,
    dir: Id,
    name: &[u8],
    a: &Attr,
    from: u32,
    to: u32,
) -> Result<u64, (bool, RemoteError)> {
    let id = a.id;
    let e0 = |e| (false, e);
    on_head(node, vol, to, id, Op::MigrateIn { id, attr: a.clone() }).await.map_err(e0)?;
    let mut off = 0u64;
    let mut marked = std::time::Instant::now();
    loop {
        // The fence lapses unless set again (`cairn_brick::FENCE_TTL`).
        if marked.elapsed() > cairn_brick::FENCE_TTL / 3 {
            let mark = Op::MigrateMark { id, to: Some(to) };
            on_head(node, vol, from, id, mark).await.map_err(e0)?;
            marked = std::time::Instant::now();
        }
        let read = Op::Read { id, offset: off, len: CHUNK };
        let (r, data) = on_head_data(node, vol, from, id, read, Bytes::new()).await.map_err(e0)?;
        let Reply::Data { eof } = r else { return Err((false, proto("read", &r))) };
        let n = data.len() as u64;
        if n > 0 && data.iter().any(|b| *b != 0) {
            on_head_data(node, vol, to, id, Op::Write { id, offset: off }, data)
                .await
                .map_err(e0)?;
        }
        off += n;
        if eof || n == 0 {
            break;
        }
    }
    let names = match on_head(node, vol, from, id, Op::ListXattr { id }).await.map_err(e0)? {
        Reply::Names(n) => n,
        r => return Err((false, proto("listxattr", &r))),
    };
    for x in names {
        let value = match on_head(node, vol, from, id, Op::GetXattr { id, name: x.clone() }).await {
            Ok(Reply::Bytes(v)) => v,
            Err(e) if e.errno == Errno::ENODATA => continue,
            Ok(r) => return Err((false, proto("getxattr", &r))),
            Err(e) => return Err((false, e)),
        };
        let set = Op::SetXattr { id, name: x, value, flags: 0 };
        on_head(node, vol, to, id, set).await.map_err(e0)?;
    }
    let set = SetAttr {
        perm: Some(a.perm),
        uid: Some(a.uid),
        gid: Some(a.gid),
        size: Some(a.size),
        atime: Some(SetTime::At(a.atime)),
        mtime: Some(SetTime::At(a.mtime)),
    };
    on_head(node, vol, to, id, Op::SetAttr { id, set }).await.map_err(e0)?;
    // A linkto of the name at `to` (a renamed or linked name made after the layout
    // changed) gives way to the name itself.
    match on_head(node, vol, to, dir, Op::UnlinkLinkto { dir, name: name.to_vec() }).await {
        Ok(_) => {}
        Err(e) if e.errno == Errno::ENOENT => {}
        Err(e) => return Err((false, e)),
    }
    match on_head(node, vol, to, dir, Op::Link { id, dir, name: name.to_vec() }).await {
        Ok(_) => {}
        // Linked by a move cut before its switch.
        Err(e) if e.errno == Errno::EEXIST => {
            match on_head(node, vol, to, dir, Op::Lookup { dir, name: name.to_vec() }).await {
                Ok(Reply::Entry { attr, linkto: None }) if attr.id == id => {}
                _ => return Err((false, e)),
            }
        }
        Err(e) => return Err((false, e)),
    }
    let out = Op::MigrateOut { dir, name: name.to_vec(), id, to };
    on_head(node, vol, from, id, out).await.map_err(|e| (true, e))?;
    Ok(off)
}
