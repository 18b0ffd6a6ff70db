//! Fuzzing helpers for the wire protocol's tests (feature `testing`): structure-aware
//! mutations of encoded frames, and a catalog of real messages that covers every [`Op`].
//! Used by this crate's decoder fuzz tests and by `cairnd`'s live wire fuzz test.

use crate::frame::{Frame, PREFIX_LEN};
use crate::mgmt::{MgmtRequest, VolumeCreate};
use crate::msg::{HealExtent, HealState, Op};
use crate::types::*;
use proptest::prelude::*;

/// One change to an encoded message. Positions are taken modulo the length of what they
/// apply to, so any mutation applies to any message.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Flip bit `bit % 8` of byte `pos`.
    Flip(usize, u8),
    /// Overwrite byte `pos`.
    Set(usize, u8),
    /// Insert a byte before `pos`.
    Insert(usize, u8),
    /// Remove byte `pos`.
    Remove(usize),
    /// Keep only the first `len` bytes.
    Truncate(usize),
    /// Overwrite the 8 bytes at `pos` with a little-endian `u64`: bincode's (fixed-width)
    /// length of a string, byte string or sequence there, or any integer field, set to a
    /// value a hostile peer would choose.
    Len(usize, u64),
}

/// Values a hostile length field takes.
fn evil_len() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..64u64,
        Just(u32::MAX as u64),
        Just(u32::MAX as u64 + 1),
        Just(1 << 32),
        Just(1 << 60),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        any::<u64>(),
    ]
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Flip(p, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Set(p, b)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Insert(p, b)),
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        2 => (any::<usize>(), evil_len()).prop_map(|(p, v)| Mutation::Len(p, v)),
    ]
}

/// One to four mutations.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..=4)
}

/// Apply `muts` to `b` in order.
pub fn apply(b: &mut Vec<u8>, muts: &[Mutation]) {
    for m in muts {
        let n = b.len();
        match *m {
            Mutation::Flip(p, bit) if n > 0 => b[p % n] ^= 1 << (bit % 8),
            Mutation::Set(p, v) if n > 0 => b[p % n] = v,
            Mutation::Insert(p, v) => b.insert(p % (n + 1), v),
            Mutation::Remove(p) if n > 0 => {
                b.remove(p % n);
            }
            Mutation::Truncate(len) => b.truncate(len % (n + 1)),
            Mutation::Len(p, v) if n >= 8 => {
                let p = p % (n - 7);
                b[p..p + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
    }
}

/// Where a mutation of a whole frame applies.
#[derive(Debug, Clone)]
pub enum FrameMutation {
    /// None: the frame as a peer sends it (so the frames after a mutated one on the same
    /// connection are read too, and generated messages reach the code behind the decoder).
    Intact,
    /// To the header (the bincode message); the prefix's header length follows it, so the
    /// frame stays well framed.
    Header(Vec<Mutation>),
    /// To the 24-byte prefix (magic, version, kind, id, lengths): the frame's lengths may
    /// then disagree with what follows.
    Prefix(Vec<Mutation>),
    /// To the frame's bytes as sent.
    Raw(Vec<Mutation>),
}

pub fn frame_mutation() -> impl Strategy<Value = FrameMutation> {
    frame_mutation_or_intact(4)
}

/// A frame mutation, or [`FrameMutation::Intact`] `intact` times in `intact + 8`.
pub fn frame_mutation_or_intact(intact: u32) -> impl Strategy<Value = FrameMutation> {
    prop_oneof![
        intact => Just(FrameMutation::Intact),
        6 => mutations().prop_map(FrameMutation::Header),
        1 => mutations().prop_map(FrameMutation::Prefix),
        1 => mutations().prop_map(FrameMutation::Raw),
    ]
}

/// The bytes of `f` as sent, mutated by `m`.
pub fn mutate_frame(f: &Frame, m: &FrameMutation) -> Vec<u8> {
    match m {
        FrameMutation::Intact => encode_frame(f),
        FrameMutation::Header(muts) => {
            let mut h = f.header.to_vec();
            apply(&mut h, muts);
            let g = Frame { header: h.into(), ..f.clone() };
            encode_frame(&g)
        }
        FrameMutation::Prefix(muts) => {
            let mut p = f.encode_prefix().to_vec();
            apply(&mut p, muts);
            // Keep the prefix 24 bytes long: a shorter or longer one is a Raw mutation.
            p.resize(PREFIX_LEN, 0);
            p.extend_from_slice(&f.header);
            p.extend_from_slice(&f.data);
            p
        }
        FrameMutation::Raw(muts) => {
            let mut b = encode_frame(f);
            apply(&mut b, muts);
            b
        }
    }
}

/// The bytes of a frame as [`crate::frame::write_frame`] sends them.
pub fn encode_frame(f: &Frame) -> Vec<u8> {
    let mut b = f.encode_prefix().to_vec();
    b.extend_from_slice(&f.header);
    b.extend_from_slice(&f.data);
    b
}

/// One op of every kind, on directory `dir` and file `file`, with names starting with
/// `prefix`, and the data segment each carries. [`op_kind`] checks that every [`Op`]
/// variant is here.
pub fn sample_ops(dir: Id, file: Id, prefix: &str) -> Vec<(Op, Vec<u8>)> {
    let name = |s: &str| format!("{prefix}{s}").into_bytes();
    let lock = Lock { kind: LockKind::Write, start: 0, len: 100, owner: 7, pid: 42 };
    let t = Timespec { sec: 1_700_000_000, nsec: 5 };
    let attr = Attr {
        id: file,
        kind: FileType::Regular,
        perm: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 10,
        blocks: 8,
        rdev: 0,
        atime: t,
        mtime: t,
        ctime: t,
        change: 3,
    };
    let none = Vec::new;
    vec![
        (Op::Lookup { dir, name: name("f") }, none()),
        (Op::LookupPath { components: vec![name("d"), name("e")] }, none()),
        (Op::GetAttr { id: file }, none()),
        (
            Op::SetAttr {
                id: file,
                set: SetAttr {
                    perm: Some(0o600),
                    uid: None,
                    gid: Some(0),
                    size: Some(5),
                    atime: Some(SetTime::Now),
                    mtime: Some(SetTime::At(t)),
                },
            },
            none(),
        ),
        (
            Op::Create {
                dir,
                name: name("c"),
                id: Id(file.0 ^ 0xc),
                kind: FileType::Regular,
                perm: 0o644,
                rdev: 0,
                target: None,
                exclusive: true,
            },
            none(),
        ),
        (
            Op::Create {
                dir,
                name: name("l"),
                id: Id(file.0 ^ 0x1),
                kind: FileType::Symlink,
                perm: 0o777,
                rdev: 0,
                target: Some(name("target")),
                exclusive: false,
            },
            none(),
        ),
        (Op::Mkdir { dir, name: name("d"), id: Id(dir.0 ^ 0xd), perm: 0o755 }, none()),
        (Op::MkLinkto { dir, name: name("k"), target: Id(file.0 ^ 0x4) }, none()),
        (Op::Link { id: file, dir, name: name("h") }, none()),
        (Op::Unlink { dir, name: name("c") }, none()),
        (Op::Rmdir { dir, name: name("d") }, none()),
        (
            Op::Rename {
                src_dir: dir,
                src_name: name("h"),
                dst_dir: dir,
                dst_name: name("r"),
                flags: 0,
            },
            none(),
        ),
        (Op::Readlink { id: Id(file.0 ^ 0x1) }, none()),
        (Op::Open { id: file }, none()),
        (Op::Release { id: file }, none()),
        (Op::Read { id: file, offset: 0, len: 4096 }, none()),
        (Op::Write { id: file, offset: 3 }, b"fuzzed write".to_vec()),
        (Op::Fsync { id: file, datasync: true }, none()),
        (Op::Fallocate { id: file, mode: falloc::KEEP_SIZE, offset: 0, len: 8192 }, none()),
        (Op::Seek { id: file, offset: 0, whence: SeekWhence::Data }, none()),
        (Op::CompareAndWrite { id: file, offset: 0 }, b"abcdABCD".to_vec()),
        (Op::GetXattr { id: file, name: b"user.fz".to_vec() }, none()),
        (
            Op::SetXattr {
                id: file,
                name: b"user.fz".to_vec(),
                value: b"value".to_vec(),
                flags: xattr_flags::CREATE,
            },
            none(),
        ),
        (Op::ListXattr { id: file }, none()),
        (Op::RemoveXattr { id: file, name: b"user.fz".to_vec() }, none()),
        (Op::StatFs, none()),
        (Op::ReadDir { dir, cookie: 0, max: 64, plus: true }, none()),
        (Op::SetLock { id: file, lock: lock.clone(), wait: false }, none()),
        (Op::GetLock { id: file, lock }, none()),
        (Op::PendingList { peer: 1 }, none()),
        (Op::HealFetch { id: file }, none()),
        (Op::PendingClear { peer: 1, ids: vec![(file, 1)] }, none()),
        (Op::PendingAdd { peer: 1, ids: vec![file] }, none()),
        (
            Op::HealApply {
                state: Box::new(HealState {
                    attr: Some(attr.clone()),
                    xattrs: vec![(b"user.a".to_vec(), b"b".to_vec())],
                    symlink: None,
                    entries: vec![],
                    parent: Some((dir, name("f"))),
                    data_len: 4,
                    pending_for: vec![],
                }),
            },
            b"heal".to_vec(),
        ),
        (Op::HealSync { id: file, peer: 1 }, none()),
        (Op::HealSums { id: file, first: 0, count: 16, from_data: true }, none()),
        (
            Op::HealWrite {
                id: file,
                extents: vec![
                    HealExtent { offset: 0, len: 4, zero: false },
                    HealExtent { offset: 4096, len: 4096, zero: true },
                ],
            },
            b"data".to_vec(),
        ),
        (
            Op::CopyRange { src: file, src_offset: 0, dst: file, dst_offset: 8192, len: 4096 },
            none(),
        ),
        (Op::Share { id: file, owner: 7, access: 1, deny: 2 }, none()),
        (Op::Delegate { id: file, write: true }, none()),
        (Op::DelegReturn { id: file }, none()),
        (Op::UnlinkLinkto { dir, name: name("c") }, none()),
        (Op::GetXattrs { id: file }, none()),
        (Op::MigrateMark { id: file, to: Some(2) }, none()),
        (Op::MigrateIn { id: file, attr }, none()),
        (Op::MigrateOut { dir, name: name("f"), id: file, to: 2 }, none()),
        (Op::MigrateDrop { id: file }, none()),
        (Op::MigrateStub { id: file, to: 2 }, none()),
    ]
}

/// Number of [`Op`] variants.
pub const OP_KINDS: usize = 47;

/// Index of an op's variant; the match is exhaustive, so a new variant fails to build
/// until it is given an index here (and [`OP_KINDS`] and [`sample_ops`] follow).
pub fn op_kind(op: &Op) -> usize {
    match op {
        Op::Lookup { .. } => 0,
        Op::LookupPath { .. } => 1,
        Op::GetAttr { .. } => 2,
        Op::SetAttr { .. } => 3,
        Op::Create { .. } => 4,
        Op::Mkdir { .. } => 5,
        Op::MkLinkto { .. } => 6,
        Op::Link { .. } => 7,
        Op::Unlink { .. } => 8,
        Op::Rmdir { .. } => 9,
        Op::Rename { .. } => 10,
        Op::Readlink { .. } => 11,
        Op::Open { .. } => 12,
        Op::Release { .. } => 13,
        Op::Read { .. } => 14,
        Op::Write { .. } => 15,
        Op::Fsync { .. } => 16,
        Op::Fallocate { .. } => 17,
        Op::Seek { .. } => 18,
        Op::CompareAndWrite { .. } => 19,
        Op::GetXattr { .. } => 20,
        Op::SetXattr { .. } => 21,
        Op::ListXattr { .. } => 22,
        Op::RemoveXattr { .. } => 23,
        Op::StatFs => 24,
        Op::ReadDir { .. } => 25,
        Op::SetLock { .. } => 26,
        Op::GetLock { .. } => 27,
        Op::PendingList { .. } => 28,
        Op::HealFetch { .. } => 29,
        Op::PendingClear { .. } => 30,
        Op::PendingAdd { .. } => 31,
        Op::HealApply { .. } => 32,
        Op::HealSync { .. } => 33,
        Op::HealSums { .. } => 34,
        Op::HealWrite { .. } => 35,
        Op::CopyRange { .. } => 36,
        Op::Share { .. } => 37,
        Op::Delegate { .. } => 38,
        Op::DelegReturn { .. } => 39,
        Op::UnlinkLinkto { .. } => 40,
        Op::GetXattrs { .. } => 41,
        Op::MigrateMark { .. } => 42,
        Op::MigrateIn { .. } => 43,
        Op::MigrateOut { .. } => 44,
        Op::MigrateDrop { .. } => 45,
        Op::MigrateStub { .. } => 46,
    }
}

/// Management requests that name only volume `vol` (never a path, a peer address or
/// another volume), so mutating them cannot touch anything outside it: `cairnd`'s live
/// fuzz test sends these. Read-only ones too.
pub fn sample_mgmt(vol: &str) -> Vec<MgmtRequest> {
    let name = vol.to_string();
    vec![
        MgmtRequest::PeerStatus,
        MgmtRequest::VolumeList,
        MgmtRequest::VolumeInfo { name: Some(name.clone()) },
        MgmtRequest::VolumeInfo { name: None },
        MgmtRequest::VolumeStatus { name: Some(name.clone()) },
        MgmtRequest::HealInfo { name: name.clone() },
        MgmtRequest::HealStatistics { name: name.clone() },
        MgmtRequest::GatewayList { kind: "nfs".into() },
        MgmtRequest::VolumeSet {
            name: name.clone(),
            key: "performance.cache-size".into(),
            value: "1MB".into(),
        },
        MgmtRequest::VolumeReset { name: name.clone(), key: "performance.cache-size".into() },
        MgmtRequest::VolumeStop { name: name.clone(), force: true },
        MgmtRequest::VolumeStart { name: name.clone(), force: true },
        MgmtRequest::VolumeDelete { name: name.clone() },
        MgmtRequest::VolumeCreate(VolumeCreate {
            name,
            replica: 1,
            bricks: vec!["nosuchnode:/nonexistent/fuzz".into()],
            force: false,
        }),
    ]
}

/// One request of every kind: every op (as a brick request, and as a forward when it is a
/// mutation), every management call, and the connection-level ones. For checks that must
/// cover every request kind (cairnd's authorization).
pub fn sample_requests() -> Vec<crate::msg::Request> {
    use crate::msg::{BrickRequest, Hello, PeerKind, ReplicateRequest, Request};
    let dir = Id(0x0000_0001_0000_0000_0000_0000_dead_beef);
    let file = Id(0x0000_0001_0000_0000_0000_0000_0000_f11e);
    let mut v = vec![
        Request::Hello(Hello {
            version: crate::PROTOCOL_VERSION,
            kind: PeerKind::Client,
            name: "t".into(),
            auth: vec![],
        }),
        Request::Ping,
        Request::GetMap { volume: "vol".into() },
        Request::Subscribe { volume: "vol".into() },
        Request::InvalidateAck { seq: 7 },
    ];
    for (op, _) in sample_ops(dir, file, "n") {
        v.push(Request::Brick(BrickRequest::new("vol", 1, 5, Creds::root(), op.clone())));
        if op.is_mutation() {
            v.push(Request::Replicate(ReplicateRequest {
                volume: "vol".into(),
                brick: 2,
                epoch: 5,
                from_brick: 1,
                creds: Creds::root(),
                op,
                result: None,
                missed: vec![],
                req: None,
                confirm: false,
                applied: vec![],
            }));
        }
    }
    let mut m = sample_mgmt("vol");
    m.extend([
        MgmtRequest::PeerProbe { addr: "10.0.0.2:7420".into(), token: None },
        MgmtRequest::PeerDetach { name: "n2".into(), force: true },
        MgmtRequest::BrickPrepare {
            volume: "vol".into(),
            volume_id: 7,
            index: 3,
            path: "/b/3".into(),
            force: false,
        },
        MgmtRequest::GatewayPut {
            kind: "smb".into(),
            name: "share".into(),
            doc: "{}".into(),
            if_unchanged_since: None,
        },
        MgmtRequest::GatewayDelete { kind: "iscsi".into(), name: "lun0".into() },
        MgmtRequest::HealFull { name: "vol".into() },
        MgmtRequest::HealLocal { name: "vol".into(), full: true },
        MgmtRequest::ResetBrick {
            name: "vol".into(),
            brick: "n1:/b/0".into(),
            commit: true,
            force: false,
        },
        MgmtRequest::ReplaceBrick {
            name: "vol".into(),
            old: "n1:/b/0".into(),
            new: "n1:/b/9".into(),
        },
        MgmtRequest::BrickReset {
            volume: "vol".into(),
            volume_id: 7,
            index: 0,
            path: "/b/0".into(),
            force: true,
        },
    ]);
    v.extend(m.into_iter().map(Request::Mgmt));
    v
}

// --- strategies for valid messages ---------------------------------------------------

/// A `u64` as a hostile peer picks it: small, around the top, or anything.
pub fn num64() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![
        2 => 0..16u64,
        1 => (u64::MAX - 16)..=u64::MAX,
        1 => Just(u32::MAX as u64),
        1 => Just(1u64 << 63),
        3 => any::<u64>(),
    ]
}

/// A `u32` as a hostile peer picks it.
pub fn num32() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![2 => 0..16u32, 1 => (u32::MAX - 16)..=u32::MAX, 3 => any::<u32>()]
}

/// Any file type.
pub fn file_type() -> impl Strategy<Value = FileType> {
    prop_oneof![
        Just(FileType::Regular),
        Just(FileType::Directory),
        Just(FileType::Symlink),
        Just(FileType::Fifo),
        Just(FileType::Socket),
        Just(FileType::CharDevice),
        Just(FileType::BlockDevice),
    ]
}

fn timespec() -> impl Strategy<Value = Timespec> {
    (any::<i64>(), num32()).prop_map(|(sec, nsec)| Timespec { sec, nsec })
}

/// Attributes of inode `id`, any values.
pub fn attr(id: BoxedStrategy<Id>) -> BoxedStrategy<Attr> {
    (
        (id, file_type(), num32(), num32(), num32(), num32()),
        (num64(), num64(), num64(), timespec(), timespec(), timespec()),
        num64(),
    )
        .prop_map(
            |(
                (id, kind, perm, nlink, uid, gid),
                (size, blocks, rdev, atime, mtime, ctime),
                change,
            )| {
                Attr {
                    id,
                    kind,
                    perm,
                    nlink,
                    uid,
                    gid,
                    size,
                    blocks,
                    rdev,
                    atime,
                    mtime,
                    ctime,
                    change,
                }
            },
        )
        .boxed()
}

/// Any credentials.
pub fn creds() -> impl Strategy<Value = Creds> {
    (num32(), num32(), prop::collection::vec(num32(), 0..4)).prop_map(|(uid, gid, groups)| Creds {
        uid,
        gid,
        groups,
    })
}

/// Any lock.
pub fn lock() -> impl Strategy<Value = Lock> {
    (
        prop_oneof![Just(LockKind::Read), Just(LockKind::Write), Just(LockKind::Unlock)],
        num64(),
        num64(),
        num64(),
        num32(),
    )
        .prop_map(|(kind, start, len, owner, pid)| Lock { kind, start, len, owner, pid })
}

fn set_time() -> impl Strategy<Value = Option<SetTime>> {
    prop::option::of(prop_oneof![Just(SetTime::Now), timespec().prop_map(SetTime::At)])
}

/// A heal state of ids from `id` and names from `name`.
pub fn heal_state(id: BoxedStrategy<Id>, name: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<HealState> {
    (
        prop::option::of(attr(id.clone())),
        prop::collection::vec((name.clone(), name.clone()), 0..3),
        prop::option::of(name.clone()),
        prop::collection::vec(
            (name.clone(), id.clone(), file_type(), prop::option::of(id.clone())),
            0..3,
        ),
        prop::option::of((id, name)),
        num64(),
        prop::collection::vec(num32(), 0..3),
    )
        .prop_map(|(attr, xattrs, symlink, entries, parent, data_len, pending_for)| HealState {
            attr,
            xattrs,
            symlink,
            entries,
            parent,
            data_len,
            pending_for,
        })
        .boxed()
}

/// Any op on ids from `id` and names from `name`, with any values (hostile ones often) in
/// its other fields.
pub fn op(id: BoxedStrategy<Id>, name: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<Op> {
    let (n, i) = (name.clone(), id.clone());
    let name = move || n.clone();
    let id = move || i.clone();
    prop_oneof![
        (id(), name()).prop_map(|(dir, name)| Op::Lookup { dir, name }),
        prop::collection::vec(name(), 0..4).prop_map(|components| Op::LookupPath { components }),
        id().prop_map(|id| Op::GetAttr { id }),
        (
            id(),
            prop::option::of(num32()),
            prop::option::of(num32()),
            prop::option::of(num32()),
            prop::option::of(num64()),
            set_time(),
            set_time()
        )
            .prop_map(|(id, perm, uid, gid, size, atime, mtime)| Op::SetAttr {
                id,
                set: SetAttr { perm, uid, gid, size, atime, mtime }
            }),
        (
            (id(), name(), id(), file_type()),
            (num32(), num64(), prop::option::of(name()), any::<bool>())
        )
            .prop_map(|((dir, name, id, kind), (perm, rdev, target, exclusive))| {
                Op::Create { dir, name, id, kind, perm, rdev, target, exclusive }
            }),
        (id(), name(), id(), num32()).prop_map(|(dir, name, id, perm)| Op::Mkdir {
            dir,
            name,
            id,
            perm
        }),
        (id(), name(), id()).prop_map(|(dir, name, target)| Op::MkLinkto { dir, name, target }),
        (id(), id(), name()).prop_map(|(id, dir, name)| Op::Link { id, dir, name }),
        (id(), name()).prop_map(|(dir, name)| Op::Unlink { dir, name }),
        (id(), name()).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        (id(), name(), id(), name(), num32()).prop_map(
            |(src_dir, src_name, dst_dir, dst_name, flags)| Op::Rename {
                src_dir,
                src_name,
                dst_dir,
                dst_name,
                flags
            }
        ),
        id().prop_map(|id| Op::Readlink { id }),
        id().prop_map(|id| Op::Open { id }),
        id().prop_map(|id| Op::Release { id }),
        (id(), num64(), num32()).prop_map(|(id, offset, len)| Op::Read { id, offset, len }),
        (id(), num64()).prop_map(|(id, offset)| Op::Write { id, offset }),
        (id(), any::<bool>()).prop_map(|(id, datasync)| Op::Fsync { id, datasync }),
        (id(), num32(), num64(), num64()).prop_map(|(id, mode, offset, len)| Op::Fallocate {
            id,
            mode,
            offset,
            len
        }),
        (id(), num64(), prop_oneof![Just(SeekWhence::Data), Just(SeekWhence::Hole)])
            .prop_map(|(id, offset, whence)| Op::Seek { id, offset, whence }),
        (id(), num64()).prop_map(|(id, offset)| Op::CompareAndWrite { id, offset }),
        (id(), name()).prop_map(|(id, name)| Op::GetXattr { id, name }),
        (id(), name(), name(), num32()).prop_map(|(id, name, value, flags)| Op::SetXattr {
            id,
            name,
            value,
            flags
        }),
        id().prop_map(|id| Op::ListXattr { id }),
        (id(), name()).prop_map(|(id, name)| Op::RemoveXattr { id, name }),
        Just(Op::StatFs),
        (id(), num64(), num32(), any::<bool>()).prop_map(|(dir, cookie, max, plus)| Op::ReadDir {
            dir,
            cookie,
            max,
            plus
        }),
        (id(), lock(), any::<bool>()).prop_map(|(id, lock, wait)| Op::SetLock { id, lock, wait }),
        (id(), lock()).prop_map(|(id, lock)| Op::GetLock { id, lock }),
        (id(), num64(), any::<u8>(), any::<u8>()).prop_map(|(id, owner, access, deny)| Op::Share {
            id,
            owner,
            access,
            deny
        }),
        num32().prop_map(|peer| Op::PendingList { peer }),
        id().prop_map(|id| Op::HealFetch { id }),
        (num32(), prop::collection::vec((id(), num64()), 0..4))
            .prop_map(|(peer, ids)| Op::PendingClear { peer, ids }),
        (num32(), prop::collection::vec(id(), 0..4))
            .prop_map(|(peer, ids)| Op::PendingAdd { peer, ids }),
        heal_state(id(), name()).prop_map(|s| Op::HealApply { state: Box::new(s) }),
        (id(), num32()).prop_map(|(id, peer)| Op::HealSync { id, peer }),
        (id(), num64(), num32(), any::<bool>())
            .prop_map(|(id, first, count, from_data)| Op::HealSums { id, first, count, from_data }),
        (
            id(),
            prop::collection::vec(
                (num64(), num64(), any::<bool>()).prop_map(|(offset, len, zero)| HealExtent {
                    offset,
                    len,
                    zero
                }),
                0..4
            )
        )
            .prop_map(|(id, extents)| Op::HealWrite { id, extents }),
        (id(), num64(), id(), num64(), num32()).prop_map(
            |(src, src_offset, dst, dst_offset, len)| Op::CopyRange {
                src,
                src_offset,
                dst,
                dst_offset,
                len
            }
        ),
        (id(), any::<bool>()).prop_map(|(id, write)| Op::Delegate { id, write }),
        id().prop_map(|id| Op::DelegReturn { id }),
        (id(), name()).prop_map(|(dir, name)| Op::UnlinkLinkto { dir, name }),
        id().prop_map(|id| Op::GetXattrs { id }),
        (id(), proptest::option::of(num32())).prop_map(|(id, to)| Op::MigrateMark { id, to }),
        attr(id()).prop_map(|attr| Op::MigrateIn { id: attr.id, attr }),
        (id(), name(), id(), num32()).prop_map(|(dir, name, id, to)| Op::MigrateOut {
            dir,
            name,
            id,
            to
        }),
        id().prop_map(|id| Op::MigrateDrop { id }),
        (id(), num32()).prop_map(|(id, to)| Op::MigrateStub { id, to }),
    ]
    .boxed()
}
