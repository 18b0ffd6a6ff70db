//! Client-side caches, pure data structures (the client drives all I/O):
//!
//! - [`AttrCache`] and [`EntryCache`]: attributes by id and `(directory, name) → id`,
//!   trusted for at most the cache timeout and dropped at once when a brick recalls the
//!   lease (`Push::Invalidate`).
//!
//! The caches a reply fills (attributes, entries, quick-read content, complete
//! directories) share one race guard (`guard.rs`): a reply that was in flight across a
//! recall of what it describes is not installed.
//! - [`DataCache`]: small files' content that came with their lookup (quick-read), trusted
//!   only while the attributes it came with are.
//! - [`DirStates`]: directories whose every name is known (listed on every set under
//!   leases), so a lookup of another name is answered "no such entry" without a round
//!   trip (GlusterFS's nl-cache idea).
//! - [`XattrCache`]: an inode's every xattr with its value, per caller, under the lease
//!   that covers its attributes (one GETXATTRS fills it), dropped with them by a recall.
//! - [`LockStates`]: files no other session holds a byte-range lock on, as the head said
//!   with its lease (a lock test then costs no round trip), dropped by a recall.
//! - [`Searchers`]: which callers the bricks let search a directory, until it changes: the
//!   name caches answer only those (or callers the cached mode alone lets in).
//! - [`WriteBehind`]: per-file buffers of small sequential writes, coalesced into large
//!   requests and bounded in size, and the extents in flight: a write waits only for the
//!   earlier in-flight writes it overlaps, so random writes to one file are pipelined.

mod attr;
mod data;
mod dirstate;
mod guard;
mod lockstate;
mod search;
mod writebehind;
mod xattr;

pub use attr::{merge_dir_copy, AttrCache, EntryCache};
pub use data::DataCache;
pub use dirstate::DirStates;
pub use lockstate::LockStates;
pub use search::Searchers;
pub use writebehind::{Append, Done, Send, Waiter, WriteBehind};
pub use xattr::{XattrCache, XattrChange, XattrList};
