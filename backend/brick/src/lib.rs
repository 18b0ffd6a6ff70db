//! The brick store: one Cairn brick kept on a local filesystem.
//!
//! On-disk format (see `docs/brick-format.md`):
//!
//! ```text
//! <brick>/                       mode 0711, owned by root
//!   .cairn/brick.json            marker: {"format":1,"volume":"vol0","volume_id":"<32 hex>","index":3}
//!   .cairn/ids/ab/cd/<32 hex>    every non-directory inode: a hard link (ab, cd = first hex digits)
//!                                every directory: a symlink "../../pp/qq/<parent hex>/<name>"
//!   .cairn/pending/<peer>/<hex>  empty files: ids this brick changed while brick <peer> was away
//!   data/                        the volume's root directory (Id::ROOT)
//! ```
//! Each inode under `data/` carries xattr `trusted.cairn.id` (16 bytes, big endian). A
//! *linkto* entry (a name whose inode is homed on another replica set) is an empty regular
//! file with mode 0 and xattr `trusted.cairn.linkto` (16-byte target id); it has no id of
//! its own and no index link.
//!
//! Every operation is addressed by ids and single name components. Directories are opened
//! by walking the index symlinks (in userspace, never by the kernel following them) and
//! every final component is opened with `O_NOFOLLOW` relative to its parent's fd, so no
//! request can reach outside `data/`, whatever the names or symlinks it holds.
//!
//! Primary operations run with the caller's credentials applied to the calling thread
//! (`setfsuid`/`setfsgid`/`setgroups` raw syscalls, per thread), so the brick's own
//! filesystem enforces POSIX permission semantics; replica operations run as root and
//! copy owner and mode from the head's result.

mod acl;
mod creds;
mod csum;
mod dirty;
mod dispatch;
mod error;
mod heal;
mod ids;
mod marker;
mod pending;
mod store;
mod stripe;
mod sys;
mod writeback;

pub use csum::{BLOCK as CSUM_BLOCK, ECORRUPT};
pub use dispatch::Exec;
pub use heal::heal_diff;
pub use marker::BrickMarker;
pub use store::{cookie, Brick, FENCE_TTL};
