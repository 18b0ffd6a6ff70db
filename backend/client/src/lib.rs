//! The Cairn client library (the Rust side of `libcairn`).
//!
//! A [`Volume`] is a mounted volume: it fetches the volume map from any `cairnd`, keeps
//! one multiplexed connection per node, routes each operation by the map (a name to its
//! hashed replica set, an id to its home set, a mutation to the chain head), caches
//! attributes and entries under the bricks' leases, and coalesces small sequential writes
//! (write-behind). Every call takes the caller's credentials.
//!
//! Threading: all methods are `async` and `Send`; a `Volume` is shared by `Arc` across
//! tasks and threads. It owns no threads itself: the caller's tokio runtime drives it
//! (`libcairn` creates one runtime per process at the first mount, so a process that
//! forks — smbd — must mount after the fork).

mod conn;
mod volume;

pub use cairn_proto::{
    Attr, Creds, DirEntry, Errno, FileType, Id, Lock, LockKind, RemoteError, SeekWhence, SetAttr,
    SetTime, StatFs, Timespec,
};
pub use volume::{
    process_round_trips, InvalidateDone, InvalidateFn, MapChangeFn, MountOptions, Placement,
    RecallFn, Stats, Volume, INVALIDATE_ACK_WAIT,
};

pub type Result<T> = std::result::Result<T, RemoteError>;
