use bytes::Bytes;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Attr, Creds, Id, RemoteError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Contents of `.cairn/brick.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickMarker {
    pub format: u32,
    pub volume: String,
    /// 32 hex digits.
    pub volume_id: String,
    pub index: u32,
}

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

pub struct Brick {
    root: PathBuf,
    marker: BrickMarker,
}

impl Brick {
    /// Make `path` a brick of a volume: create it if missing, refuse it if it is not a
    /// directory, if it already is a brick (of any volume), or if it is not empty (unless
    /// `force`). Writes the marker, `.cairn/` and `data/` (mode 0755, root-owned).
    pub fn prepare(path: &Path, marker: &BrickMarker, force: bool) -> Result<(), RemoteError> {
        let _ = (path, marker, force);
        todo!()
    }

    /// Open an existing brick, checking its marker names `volume_id` and `index`.
    /// Errors name the path and what did not match.
    pub fn open(path: &Path, volume_id: &str, index: u32) -> Result<Brick, RemoteError> {
        let _ = (path, volume_id, index);
        todo!()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn marker(&self) -> &BrickMarker {
        &self.marker
    }

    /// Execute one operation. `data` is the request's bulk segment (WRITE payload,
    /// COMPARE_AND_WRITE pair); the returned `Bytes` is the reply's bulk segment (READ
    /// data, HEAL_FETCH file contents). Lock ops (`SetLock`, `GetLock`) are not brick
    /// operations and return ENOTSUP here (`cairnd` keeps locks in memory).
    pub fn execute(&self, creds: &Creds, op: &Op, data: &[u8], mode: Exec<'_>) -> Result<(Reply, Bytes), RemoteError> {
        let _ = (creds, op, data, mode);
        todo!()
    }

    /// Record, durably, that `id` changed while brick `peer` was not receiving writes.
    pub fn pending_add(&self, peer: u32, id: Id) -> Result<(), RemoteError> {
        let _ = (peer, id);
        todo!()
    }

    /// Number of ids pending for each peer.
    pub fn pending_counts(&self) -> Vec<(u32, u64)> {
        todo!()
    }
}
