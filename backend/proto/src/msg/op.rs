//! [`Op`]: the operations a client asks of one brick, and what each one is (a mutation
//! that goes through the chain, a read, its name in metrics).

use super::*;

/// Operations on one brick. Names are single components; ids are Cairn inode ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    Lookup {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
    },
    /// Resolve a directory path from the root in one round trip. Replies with the attrs of
    /// every component that resolved ([`Reply::Attrs`]); fewer than asked means the next
    /// one does not exist (or is not a directory).
    LookupPath {
        components: Vec<Name>,
    },
    GetAttr {
        id: Id,
    },
    SetAttr {
        id: Id,
        set: SetAttr,
    },
    /// Create a regular file, fifo, socket, device or symlink named `name` in `dir`.
    Create {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
        id: Id,
        kind: FileType,
        perm: u32,
        rdev: u64,
        /// Symlink target.
        target: Option<Name>,
        /// Fail with EEXIST if the name exists (O_EXCL).
        exclusive: bool,
    },
    Mkdir {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
        id: Id,
        perm: u32,
    },
    /// Make `name` in `dir` a pointer to an inode homed on another replica set.
    MkLinkto {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
        target: Id,
    },
    Link {
        id: Id,
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
    },
    Unlink {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
    },
    Rmdir {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
    },
    Rename {
        src_dir: Id,
        #[serde(with = "serde_bytes")]
        src_name: Name,
        dst_dir: Id,
        #[serde(with = "serde_bytes")]
        dst_name: Name,
        flags: u32,
    },
    Readlink {
        id: Id,
    },
    /// Keep an inode alive while a client holds it open, even after its last name is
    /// unlinked, until Release. Replicated, so every copy stays writable.
    Open {
        id: Id,
    },
    Release {
        id: Id,
    },
    Read {
        id: Id,
        offset: u64,
        len: u32,
    },
    /// Payload is the frame's data segment.
    Write {
        id: Id,
        offset: u64,
    },
    Fsync {
        id: Id,
        datasync: bool,
    },
    Fallocate {
        id: Id,
        mode: u32,
        offset: u64,
        len: u64,
    },
    Seek {
        id: Id,
        offset: u64,
        whence: SeekWhence,
    },
    /// Compare the data at `offset` with the first half of the payload; if equal, write
    /// the second half. Atomic with respect to every other op on the inode.
    CompareAndWrite {
        id: Id,
        offset: u64,
    },
    GetXattr {
        id: Id,
        #[serde(with = "serde_bytes")]
        name: Vec<u8>,
    },
    SetXattr {
        id: Id,
        #[serde(with = "serde_bytes")]
        name: Vec<u8>,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        flags: u32,
    },
    ListXattr {
        id: Id,
    },
    RemoveXattr {
        id: Id,
        #[serde(with = "serde_bytes")]
        name: Vec<u8>,
    },
    StatFs,
    ReadDir {
        dir: Id,
        cookie: u64,
        max: u32,
        plus: bool,
    },
    SetLock {
        id: Id,
        lock: Lock,
        wait: bool,
    },
    GetLock {
        id: Id,
        lock: Lock,
    },
    /// Heal: ids this brick changed while `peer` was away, each with the generation of
    /// its record (`Reply::Pending`).
    PendingList {
        peer: u32,
    },
    /// Heal: the full state of an inode, for a peer to copy.
    HealFetch {
        id: Id,
    },
    /// Heal: `peer` has copied these ids; forget each record if its generation is still
    /// the one `PendingList` gave before the copy (a record re-added since stays).
    PendingClear {
        peer: u32,
        ids: Vec<(Id, u64)>,
    },
    /// Heal: record that `peer` missed changes of these ids (sent by a head to the replicas
    /// that did get a write another replica missed).
    PendingAdd {
        peer: u32,
        ids: Vec<Id>,
    },
    /// Heal: make this brick's copy of an inode equal to `state` (sent by the healer).
    HealApply {
        state: Box<HealState>,
    },
    /// Heal, handled by `cairnd` around the brick: under the inode's lock, fetch `id`
    /// here and apply it on brick `peer`, then forget it from the pending index. Sent by a
    /// brick catching up to the brick that holds the pending entry.
    HealSync {
        id: Id,
        peer: u32,
    },
    /// Heal of a regular file in ranges: its kind, size and the checksum entries of blocks
    /// `[first, first + count)` (at most [`HEAL_SUMS_MAX`]), for the heal source to compare
    /// with its own. Sent by a heal source to the brick it copies onto, with `from_data`:
    /// the entries are computed from the data there (holes are not read), not taken from
    /// its table, so a copy that rotted (the scrub's repair) is not taken for a good one.
    HealSums {
        id: Id,
        first: u64,
        count: u32,
        from_data: bool,
    },
    /// Heal of a regular file in ranges: write the data extents (their bytes concatenated
    /// in the data segment) and punch the zero extents, checksums kept current. Sent by a
    /// heal source, under its inode lock, to the brick it copies onto; the file is then
    /// finished by a `HealApply` without data (size and metadata).
    HealWrite {
        id: Id,
        extents: Vec<HealExtent>,
    },
    /// Server-side copy: copy up to `len` bytes of regular file `src` from `src_offset`
    /// into regular file `dst` at `dst_offset`, on the bricks, so the bytes never travel
    /// through the client. Sent to the chain head of `dst`, which reads `src` with the
    /// caller's credentials (its own copy when `src` lives in its replica set, else a READ
    /// at the chain head of `src` over the brick network) and applies the bytes as a
    /// `Write` of `dst`, forwarded down the chain as any write. Answered `Written { count,
    /// attr }` (`count` short at the end of `src`, 0 at or past it). `EXDEV`: the bricks
    /// could not read `src` (no head up, a bad checksum, a timeout); the client copies by
    /// READ and WRITE.
    /// Added without a version change (a new variant at the end): an older brick refuses
    /// it as undecodable (`EPROTO`), and the client falls back the same way.
    CopyRange {
        src: Id,
        src_offset: u64,
        dst: Id,
        dst_offset: u64,
        len: u32,
    },
    /// Share reservation (NFSv4 OPEN share_access / share_deny, SMB share modes): set the
    /// reservation that open `owner` of this session holds on regular file `id` to
    /// `access` / `deny` (bits [`share::READ`], [`share::WRITE`]); both 0 releases it.
    /// Refused with `ESHAREDENIED` when it conflicts with another opener's (another
    /// owner, or another session): its access with their deny, or its deny with their
    /// access. Kept by the file's chain head in memory, released when the session ends.
    Share {
        id: Id,
        owner: u64,
        access: u8,
        deny: u8,
    },
    /// Take a delegation of regular file `id` for this session (an NFSv4 delegation a
    /// gateway hands out): shared with other sessions' read delegations when `!write`,
    /// exclusive when `write`. Until it is returned, an access of `id` by another session
    /// that conflicts (a change for a read delegation, any access for a write one) first
    /// recalls it ([`Push::Recall`]) and waits for [`Op::DelegReturn`]. `EAGAIN` when a
    /// conflicting delegation is held or being recalled. Answered by the chain head; not
    /// replicated (it lives with the holder's session).
    Delegate {
        id: Id,
        write: bool,
    },
    /// Give back this session's delegation of `id` (after a recall or not).
    DelegReturn {
        id: Id,
    },
    /// Remove `name` from `dir` only if it is a linkto (a pointer to an inode on another
    /// replica set); `ENOENT` if the name is missing or anything else (a real file of that
    /// name that another client made meanwhile stays). Sent by clients removing the
    /// linkto of an unlinked or renamed name on the sets that do not hold the file.
    /// Added without a version change (a new variant at the end): an older brick refuses
    /// it as undecodable (`EPROTO`), and the client falls back to `Unlink`.
    UnlinkLinkto {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
    },
    /// Every client-visible xattr of `id` with its value, in one round trip: what
    /// `ListXattr` and a `GetXattr` of each listed name answer ([`Reply::Xattrs`]; a value
    /// the caller may not read comes without it). Answered by the chain head, which leases
    /// `id` to the caller as for `GetXattr`, so a gateway may keep the whole set until a
    /// recall (vfs_cairn reads `user.DOSATTRIB` and lists the names of every file it opens).
    GetXattrs {
        id: Id,
    },
    /// Rebalance (docs/rebalance.md), at the set a file leaves: fence regular file `id`
    /// while it is copied to replica set `to` (`Some`), or lift the fence (`None`). While
    /// fenced, the chain head refuses other mutations of `id` with ESTALEMAP, which
    /// clients retry, so no write lands behind the copy. Refused (EBUSY) while the file is
    /// open (`Op::Open`) or holds locks, share reservations or delegations at the head.
    /// Durable on every brick of the set (`.cairn/migrating/`).
    MigrateMark {
        id: Id,
        to: Option<u32>,
    },
    /// Rebalance, at the set a file moves to: make regular file `id` here outside the
    /// namespace (its index entry only), empty, with the owner and mode of `attr`. An
    /// entry of `id` already here without a name (a copy that was cut) is emptied.
    MigrateIn {
        id: Id,
        attr: Attr,
    },
    /// Rebalance, the switch at the set a file leaves: `name` in `dir` (regular file `id`,
    /// no other name, fenced to `to`) becomes a linkto to `id`, `id`'s index entry a moved
    /// stub naming set `to` (an op by id here then answers EMOVED), and the fence lifts.
    MigrateOut {
        dir: Id,
        #[serde(with = "serde_bytes")]
        name: Name,
        id: Id,
        to: u32,
    },
    /// Rebalance, at the set a file was being copied to: drop the copy of `id` if it has
    /// no name (an aborted move); anything else is left.
    MigrateDrop {
        id: Id,
    },
    /// Rebalance and remove-brick, at the set that routes `id` (its home set, or the
    /// volume's first set for an id whose home set was removed): make `id`'s index entry
    /// a moved stub naming set `to`, or rewrite the stub there. An entry that is the
    /// inode itself is left (EEXIST).
    MigrateStub {
        id: Id,
        to: u32,
    },
}

/// Bits of [`Op::Share`]'s `access` and `deny`.
pub mod share {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const BOTH: u8 = READ | WRITE;
}

impl Op {
    /// True for operations that change state and must go through the chain.
    pub fn is_mutation(&self) -> bool {
        matches!(
            self,
            Op::SetAttr { .. }
                | Op::Create { .. }
                | Op::Mkdir { .. }
                | Op::MkLinkto { .. }
                | Op::Link { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
                | Op::Rename { .. }
                | Op::Write { .. }
                | Op::Fallocate { .. }
                | Op::CompareAndWrite { .. }
                | Op::SetXattr { .. }
                | Op::RemoveXattr { .. }
                | Op::Fsync { .. }
                | Op::Open { .. }
                | Op::Release { .. }
                | Op::CopyRange { .. }
                | Op::UnlinkLinkto { .. }
                | Op::MigrateMark { .. }
                | Op::MigrateIn { .. }
                | Op::MigrateOut { .. }
                | Op::MigrateDrop { .. }
                | Op::MigrateStub { .. }
        )
    }

    /// True for operations that put a name in a directory, routed by the name's hash
    /// (the entry, its linkto, or a directory's home): the ones a head refuses when the
    /// client routed them by an older layout.
    pub fn makes_name(&self) -> bool {
        matches!(
            self,
            Op::Create { .. }
                | Op::Mkdir { .. }
                | Op::MkLinkto { .. }
                | Op::Link { .. }
                | Op::Rename { .. }
        )
    }

    /// Directories whose entries a namespace op changes (the parent attributes a
    /// [`Reply::WithParents`] carries), each once.
    pub fn parent_dirs(&self) -> Vec<Id> {
        match self {
            Op::Create { dir, .. }
            | Op::Mkdir { dir, .. }
            | Op::MkLinkto { dir, .. }
            | Op::Link { dir, .. }
            | Op::Unlink { dir, .. }
            | Op::UnlinkLinkto { dir, .. }
            | Op::MigrateOut { dir, .. }
            | Op::Rmdir { dir, .. } => vec![*dir],
            Op::Rename { src_dir, dst_dir, .. } if src_dir == dst_dir => vec![*src_dir],
            Op::Rename { src_dir, dst_dir, .. } => vec![*src_dir, *dst_dir],
            _ => vec![],
        }
    }

    /// Short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } => "lookup",
            Op::LookupPath { .. } => "lookup_path",
            Op::GetAttr { .. } => "getattr",
            Op::SetAttr { .. } => "setattr",
            Op::Create { .. } => "create",
            Op::Mkdir { .. } => "mkdir",
            Op::MkLinkto { .. } => "mklinkto",
            Op::Link { .. } => "link",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Readlink { .. } => "readlink",
            Op::Open { .. } => "open",
            Op::Release { .. } => "release",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Fsync { .. } => "fsync",
            Op::Fallocate { .. } => "fallocate",
            Op::Seek { .. } => "seek",
            Op::CompareAndWrite { .. } => "compare_and_write",
            Op::GetXattr { .. } => "getxattr",
            Op::SetXattr { .. } => "setxattr",
            Op::ListXattr { .. } => "listxattr",
            Op::RemoveXattr { .. } => "removexattr",
            Op::StatFs => "statfs",
            Op::ReadDir { .. } => "readdir",
            Op::SetLock { .. } => "setlock",
            Op::GetLock { .. } => "getlock",
            Op::PendingList { .. } => "pending_list",
            Op::HealFetch { .. } => "heal_fetch",
            Op::PendingClear { .. } => "pending_clear",
            Op::PendingAdd { .. } => "pending_add",
            Op::HealApply { .. } => "heal_apply",
            Op::HealSums { .. } => "heal_sums",
            Op::HealWrite { .. } => "heal_write",
            Op::HealSync { .. } => "heal_sync",
            Op::CopyRange { .. } => "copy_range",
            Op::Share { .. } => "share",
            Op::Delegate { .. } => "delegate",
            Op::DelegReturn { .. } => "deleg_return",
            Op::UnlinkLinkto { .. } => "unlink_linkto",
            Op::GetXattrs { .. } => "getxattrs",
            Op::MigrateMark { .. } => "migrate_mark",
            Op::MigrateIn { .. } => "migrate_in",
            Op::MigrateOut { .. } => "migrate_out",
            Op::MigrateDrop { .. } => "migrate_drop",
            Op::MigrateStub { .. } => "migrate_stub",
        }
    }
}
