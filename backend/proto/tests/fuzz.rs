//! Fuzzing of every decoder a peer's bytes reach: the frame prefix and `read_frame` (on
//! in-memory readers, whole and in small pieces), and the bincode headers of requests,
//! responses, pushes, management calls and the volume map. Properties:
//!
//! - arbitrary bytes never panic, and decoding allocates at most a bounded amount (a
//!   length field claiming 4 GiB is refused before anything that size is allocated);
//! - structure-aware mutations of real messages (one of every `Op`, `Request`, `Reply`,
//!   `MgmtRequest`, `MgmtReply` and `Push`) decode to some value or fail, never panic;
//! - generated messages round-trip: `decode(encode(m)) == m`.
//!
//! Cases per property: `PROPTEST_CASES` (default 256); a failure is saved under
//! `proptest-regressions/` and replayed first by the next run (docs/wire-protocol.md,
//! "Fuzzing").

use bytes::Bytes;
use cairn_proto::frame::{self, Frame, FrameError, FrameKind, MAX_DATA, MAX_HEADER, PREFIX_LEN};
use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap, VolumeStatus};
use cairn_proto::mgmt::*;
use cairn_proto::msg::*;
use cairn_proto::testing::{self, apply, frame_mutation, mutate_frame, mutations};
use cairn_proto::*;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};

// --- allocation accounting --------------------------------------------------------------

/// Counts the bytes each thread has live, and their peak, so a property can bound what one
/// decode allocates.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as isize));
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            note(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f`; return its result and the most bytes it had allocated at once on this thread.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let r = f();
    let peak = PEAK.with(|p| p.get());
    (r, (peak - base).max(0) as usize)
}

/// Most a header decode may allocate: serde preallocates a sequence by its claimed length
/// only up to 1 MiB (`size_hint::cautious`), one per nesting level, and bincode reads
/// strings and byte strings only once the input holds them. Anything more means a length
/// field is trusted.
const DECODE_BUDGET: usize = 8 << 20;

fn budget(input: usize) -> usize {
    DECODE_BUDGET + 64 * input
}

/// Decode `b` as every header type a peer sends; panics (failing the property) if one
/// allocates more than its budget.
fn decode_all(b: &[u8]) {
    fn one<T: serde::de::DeserializeOwned + std::fmt::Debug>(what: &str, b: &[u8]) {
        let (r, peak) = peak_of(|| frame::decode::<T>(b).map(|v| format!("{v:?}").len()));
        let _ = r;
        assert!(
            peak <= budget(b.len()),
            "decoding {} bytes as {what} allocated {peak} bytes: {:02x?}",
            b.len(),
            &b[..b.len().min(64)]
        );
    }
    one::<Request>("Request", b);
    one::<Response>("Response", b);
    one::<Push>("Push", b);
    one::<BrickRequest>("BrickRequest", b);
    one::<ReplicateRequest>("ReplicateRequest", b);
    one::<Op>("Op", b);
    one::<MgmtRequest>("MgmtRequest", b);
    one::<MgmtReply>("MgmtReply", b);
    one::<EnrollRequest>("EnrollRequest", b);
    one::<VolumeMap>("VolumeMap", b);
    one::<HealState>("HealState", b);
    one::<HealSums>("HealSums", b);
}

// --- representative messages ------------------------------------------------------------

fn t() -> Timespec {
    Timespec { sec: 1_700_000_000, nsec: 999_999_999 }
}

fn attr(id: Id) -> Attr {
    Attr {
        id,
        kind: FileType::Directory,
        perm: 0o1777,
        nlink: 3,
        uid: 1000,
        gid: 1000,
        size: 4096,
        blocks: 8,
        rdev: 0,
        atime: t(),
        mtime: t(),
        ctime: t(),
        change: 9,
    }
}

fn map() -> VolumeMap {
    VolumeMap {
        name: "vol".into(),
        id: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
        epoch: 5,
        layout_epoch: 2,
        rebalancing: true,
        layout: vec![],
        status: VolumeStatus::Started,
        replica: 2,
        sets: vec![ReplicaSet {
            id: 1,
            bricks: vec![
                BrickInfo {
                    index: 0,
                    node: "n1".into(),
                    addr: "127.0.0.1:7420".into(),
                    path: "/b/0".into(),
                    state: BrickState::Up,
                },
                BrickInfo {
                    index: 1,
                    node: "n2".into(),
                    addr: "127.0.0.2:7420".into(),
                    path: "/b/1".into(),
                    state: BrickState::Healing,
                },
            ],
        }],
        options: [("performance.cache-size".to_string(), "32MB".to_string())].into(),
    }
}

fn token_info() -> JoinTokenInfo {
    JoinTokenInfo {
        id: "0123abcd".into(),
        created: 1,
        expires: 2,
        used_at: Some(2),
        used_by: Some("n2 at 10.0.0.2:7420".into()),
        revoked_at: None,
    }
}

fn cert_info() -> CertInfo {
    CertInfo {
        serial: "0a1b2c".into(),
        name: "web1".into(),
        role: "client".into(),
        volumes: Some(vec!["www".into()]),
        read_only: true,
        issued: 1,
        expires: 2,
        revoked_at: Some(2),
        revoked_by: Some("admin".into()),
    }
}

/// A real enrollment request (a joining node's CSR), made once.
fn enroll_request() -> EnrollRequest {
    static CSR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let csr = CSR.get_or_init(|| cairn_proto::tls::NodeRequest::new("n2").unwrap().csr_pem.clone());
    EnrollRequest {
        token: "0123abcd.0123456789abcdef0123456789abcdef".into(),
        csr: csr.clone(),
        name: "n2".into(),
        addr: "10.0.0.2:7420".into(),
        uuid: "0b8f1c2e-0000-4000-8000-000000000001".into(),
        forwarded: true,
        etcd_csr: Some(csr.clone()),
        etcd_member_csr: Some(csr.clone()),
    }
}

fn every_mgmt_request() -> Vec<MgmtRequest> {
    let mut v = testing::sample_mgmt("vol");
    v.extend([
        MgmtRequest::Enroll(enroll_request()),
        MgmtRequest::CertRenew(RenewRequest {
            csr: enroll_request().csr,
            on_behalf: Some(("gw1".into(), "cairn:role=gateway;volumes=a".into())),
        }),
        MgmtRequest::CertRenew(RenewRequest { csr: String::new(), on_behalf: None }),
        MgmtRequest::PeerProbe {
            addr: "10.0.0.2:7420".into(),
            token: Some("0123abcd.0123456789abcdef0123456789abcdef".into()),
        },
        MgmtRequest::PeerProbe { addr: "10.0.0.3:7420".into(), token: None },
        MgmtRequest::PeerTokenCreate { ttl_secs: 3600 },
        MgmtRequest::PeerTokenList,
        MgmtRequest::PeerTokenRevoke { id: "0123abcd".into() },
        MgmtRequest::AuditLog { since: Some(5), limit: 100 },
        MgmtRequest::CertRecord(cert_info()),
        MgmtRequest::CertList,
        MgmtRequest::CertRevoke { what: "web1".into() },
        MgmtRequest::VolumeAddBrick {
            name: "vol".into(),
            replica: Some(2),
            bricks: vec!["n1:/b/5".into(), "n2:/b/5".into()],
            force: false,
        },
        MgmtRequest::VolumeRemoveBrick {
            name: "vol".into(),
            bricks: vec!["n1:/b/5".into(), "n2:/b/5".into()],
            action: "commit".into(),
            force: true,
        },
        MgmtRequest::BrickAdd {
            volume: "vol".into(),
            volume_id: 7,
            index: 5,
            path: "/b/5".into(),
            force: true,
        },
        MgmtRequest::PeerDetach { name: "n2".into(), force: true },
        MgmtRequest::VolumeStatus { name: None },
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
            doc: "{\"path\":\"/\"}".into(),
            if_unchanged_since: Some(12),
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
    v
}

/// Every request variant, every op (on ids and names the way a client sends them), every
/// management call, with the data segment each carries.
fn every_request() -> Vec<(Request, Vec<u8>)> {
    let dir = Id(0x0000_0001_0000_0000_0000_0000_dead_beef);
    let file = Id(0x0000_0001_0000_0000_0000_0000_0000_f11e);
    let mut v = vec![
        (
            Request::Hello(Hello {
                version: PROTOCOL_VERSION,
                kind: PeerKind::Client,
                name: "fuzz".into(),
                auth: vec![1, 2, 3],
            }),
            vec![],
        ),
        (Request::Ping, vec![]),
        (Request::GetMap { volume: "vol".into() }, vec![]),
        (Request::Subscribe { volume: "vol".into() }, vec![]),
        (Request::InvalidateAck { seq: 77 }, vec![]),
    ];
    for (i, (op, data)) in testing::sample_ops(dir, file, "n").into_iter().enumerate() {
        let req = if i % 2 == 0 { Some(ReqId { client: 3, seq: i as u64 }) } else { None };
        v.push((
            Request::Brick(BrickRequest {
                volume: "vol".into(),
                brick: 1,
                epoch: 5,
                creds: Creds { uid: 1000, gid: 100, groups: vec![4, 24, 27] },
                op: op.clone(),
                req,
                parents: i % 3 == 0,
                inline: if i % 5 == 0 { 65536 } else { 0 },
                layout_epoch: (i % 4 == 0).then_some(i as u64),
                sync: i % 6 == 0,
                locks: i % 7 == 0,
            }),
            data.clone(),
        ));
        if op.is_mutation() {
            v.push((
                Request::Replicate(ReplicateRequest {
                    volume: "vol".into(),
                    brick: 2,
                    epoch: 5,
                    from_brick: 1,
                    creds: Creds::root(),
                    op,
                    result: Some(attr(file)),
                    missed: vec![3],
                    req,
                    confirm: i % 2 == 1,
                    applied: vec![],
                }),
                data,
            ));
        }
    }
    v.extend(every_mgmt_request().into_iter().map(|m| (Request::Mgmt(m), vec![])));
    v
}

fn every_response() -> Vec<Response> {
    let id = Id(0x0000_0002_0000_0000_0000_0000_0000_0042);
    let crawl = CrawlInfo {
        kind: "full".into(),
        started: 1,
        ended: Some(2),
        scanned: 3,
        healed: 4,
        failed: 5,
        bytes: 6,
        bandwidth: 7,
        throttled_ms: 8,
        dirs_done: 9,
        dirs_left: 10,
        resumed_after: 11,
    };
    let stats = HealBrickStats {
        index: 0,
        node: "n1".into(),
        path: "/b/0".into(),
        online: true,
        state: "up".into(),
        in_progress: false,
        full_pending: true,
        pending: 2,
        crawls: vec![crawl.clone(), CrawlInfo::default()],
    };
    let replies = vec![
        Reply::Welcome(Welcome { version: PROTOCOL_VERSION, session: 9, node: "n1".into() }),
        Reply::Pong,
        Reply::Unit,
        Reply::Attr(attr(id)),
        Reply::Entry { attr: attr(id), linkto: Some(Id(5)) },
        Reply::Attrs(vec![attr(Id::ROOT), attr(id)]),
        Reply::Data { eof: true },
        Reply::Written { count: 4096, attr: attr(id) },
        Reply::Synced(Box::new(Reply::Written { count: 4096, attr: attr(id) })),
        Reply::Unlocked { id, reply: Box::new(Reply::Attr(attr(id))) },
        Reply::Offset(1 << 40),
        Reply::Bytes(b"xattr value".to_vec()),
        Reply::Names(vec![b"user.a".to_vec(), b"user.b".to_vec()]),
        Reply::Xattrs(vec![
            Xattr { name: b"user.a".to_vec(), value: Some(b"1".to_vec().into()) },
            Xattr { name: b"trusted.b".to_vec(), value: None },
        ]),
        Reply::StatFs(StatFs {
            bsize: 4096,
            blocks: 1,
            bfree: 2,
            bavail: 3,
            files: 4,
            ffree: 5,
            namemax: 255,
        }),
        Reply::Dir {
            entries: vec![
                DirEntry {
                    name: b"a".to_vec(),
                    id,
                    kind: FileType::Regular,
                    cookie: 1,
                    attr: Some(attr(id)),
                },
                DirEntry { name: b"b".to_vec(), id, kind: FileType::Fifo, cookie: 2, attr: None },
            ],
            eof: false,
        },
        Reply::Lock(Some(Lock { kind: LockKind::Read, start: 1, len: 0, owner: 2, pid: 3 })),
        Reply::Pending(vec![(id, 4), (Id::ROOT, 5)]),
        Reply::Heal(Box::new(HealState {
            attr: Some(attr(id)),
            xattrs: vec![(b"user.x".to_vec(), vec![0; 3])],
            symlink: Some(b"/t".to_vec()),
            entries: vec![(b"e".to_vec(), id, FileType::Symlink, Some(Id(8)))],
            parent: Some((Id::ROOT, b"p".to_vec())),
            data_len: 12,
            pending_for: vec![1, 2],
        })),
        Reply::Map(Box::new(map())),
        Reply::Sums(Box::new(HealSums {
            kind: Some(FileType::Regular),
            size: 1 << 30,
            entries: vec![Some(1), None, Some(0)],
            next: Some(100),
        })),
        Reply::HealWritten { bytes: 1 << 20, wait_ms: 5 },
        Reply::WithParents { reply: Box::new(Reply::Attr(attr(id))), parents: vec![attr(id)] },
        Reply::EntryData { attr: attr(id) },
        Reply::Mgmt(MgmtReply::Done { message: "ok".into() }),
        Reply::Mgmt(MgmtReply::Peers(vec![PeerInfo {
            name: "n1".into(),
            addr: "a:1".into(),
            uuid: "u".into(),
            connected: true,
            local: false,
        }])),
        Reply::Mgmt(MgmtReply::Volumes(vec![map(), map()])),
        Reply::Mgmt(MgmtReply::Names(vec!["a".into(), "b".into()])),
        Reply::Mgmt(MgmtReply::Status(vec![VolumeStatusInfo {
            name: "vol".into(),
            status: "Started".into(),
            bricks: vec![BrickStatus {
                index: 0,
                node: "n1".into(),
                path: "/b".into(),
                online: true,
                state: "up".into(),
                port: 7420,
                pid: 5,
                pending_heal: 0,
                total_bytes: 10,
                free_bytes: 5,
            }],
        }])),
        Reply::Mgmt(MgmtReply::Heal(vec![HealBrickInfo {
            index: 0,
            node: "n1".into(),
            path: "/b".into(),
            online: false,
            pending: vec!["x".into()],
        }])),
        Reply::Mgmt(MgmtReply::Gateway {
            revision: 4,
            objects: vec![GatewayObject { name: "e".into(), doc: "{}".into(), revision: 3 }],
        }),
        Reply::Mgmt(MgmtReply::HealStats(vec![stats.clone()])),
        Reply::Mgmt(MgmtReply::HealLocal(vec![HealLocalBrick {
            index: 0,
            pending: vec!["y".into()],
            stats,
        }])),
        Reply::Mgmt(MgmtReply::JoinToken { token: "a.b".into(), info: token_info() }),
        Reply::Mgmt(MgmtReply::JoinTokens(vec![token_info()])),
        Reply::Mgmt(MgmtReply::Audit(vec!["{}".into()])),
        Reply::Mgmt(MgmtReply::Enrolled(EnrollReply {
            cert: "-----BEGIN CERTIFICATE-----\n...".into(),
            ca: "-----BEGIN CERTIFICATE-----\n...".into(),
            by: "n1".into(),
            etcd: None,
            etcd_member: None,
        })),
        Reply::Mgmt(MgmtReply::Renewed(RenewReply {
            cert: "-----BEGIN CERTIFICATE-----\n...".into(),
            cas: "-----BEGIN CERTIFICATE-----\n...".into(),
            by: "n1".into(),
        })),
        Reply::Mgmt(MgmtReply::Enrolled(EnrollReply {
            cert: "-----BEGIN CERTIFICATE-----\n...".into(),
            ca: "-----BEGIN CERTIFICATE-----\n...".into(),
            by: "n1".into(),
            etcd: Some(EtcdClientCert {
                cert: "-----BEGIN CERTIFICATE-----\netcd".into(),
                ca: "-----BEGIN CERTIFICATE-----\netcd ca".into(),
            }),
            etcd_member: Some("-----BEGIN CERTIFICATE-----\netcd member".into()),
        })),
        Reply::Mgmt(MgmtReply::Certs(vec![cert_info()])),
    ];
    let mut v: Vec<Response> = replies.into_iter().map(Ok).collect();
    v.push(Err(RemoteError::new(Errno::ESTALEMAP, "brick 1 of vol: map epoch 4 < 5")));
    v
}

fn every_push() -> Vec<Push> {
    vec![
        Push::MapChanged(Box::new(map())),
        Push::Invalidate { volume: "vol".into(), id: Id(77), entries: true, seq: 3 },
        Push::Recall { volume: "vol".into(), id: Id(78) },
    ]
}

/// The catalog covers every `Op` variant (the index is an exhaustive match in
/// `cairn_proto::testing`) and every request and reply decodes back to itself.
#[test]
fn the_catalog_covers_every_op_and_round_trips() {
    let reqs = every_request();
    let mut seen = [false; testing::OP_KINDS];
    for (r, _) in &reqs {
        if let Request::Brick(b) = r {
            seen[testing::op_kind(&b.op)] = true;
        }
        assert_eq!(&frame::decode::<Request>(&frame::encode(r)).unwrap(), r);
    }
    assert!(seen.iter().all(|s| *s), "ops missing from the catalog: {seen:?}");
    for r in every_response() {
        assert_eq!(frame::decode::<Response>(&frame::encode(&r)).unwrap(), r);
    }
    for p in every_push() {
        assert_eq!(frame::decode::<Push>(&frame::encode(&p)).unwrap(), p);
    }
}

// --- readers ----------------------------------------------------------------------------

/// An in-memory reader that hands out at most `step` bytes per read, so `read_frame`
/// sees a frame arrive in pieces as from a socket.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl tokio::io::AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.data.len().min(self.step).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// Read every frame from `bytes` (delivered `step` bytes at a time) until an error, and
/// check what `read_frame` allocated for each: nothing large for a frame over the limits,
/// at most its declared lengths otherwise.
fn read_all(bytes: &[u8], step: usize) -> Vec<Result<Frame, String>> {
    let mut r = Trickle { data: bytes, step: step.max(1) };
    let mut out = vec![];
    loop {
        let declared = r.data.get(..PREFIX_LEN).map(|p| {
            let h = u32::from_le_bytes(p[16..20].try_into().unwrap()) as usize;
            let d = u32::from_le_bytes(p[20..24].try_into().unwrap()) as usize;
            h + d
        });
        let (f, peak) = peak_of(|| futures::executor::block_on(frame::read_frame(&mut r)));
        match f {
            Ok(f) => {
                // Aligned segments round up to a page (and to the 1 MiB pool size).
                let most = declared.unwrap_or(0) + (1 << 20) + 4096;
                assert!(peak <= most, "read_frame allocated {peak} for {declared:?} bytes");
                out.push(Ok(f));
            }
            Err(e) => {
                if let FrameError::TooLarge { .. } = e {
                    assert!(
                        peak < 4096,
                        "an oversized frame was refused only after {peak} bytes were allocated"
                    );
                }
                assert!(peak <= (MAX_HEADER + MAX_DATA) as usize + (1 << 20) + 4096);
                out.push(Err(e.to_string()));
                return out;
            }
        }
    }
}

fn kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![Just(FrameKind::Request), Just(FrameKind::Response), Just(FrameKind::Push)]
}

/// A prefix with the right magic and any lengths, as a hostile peer sends it: lengths
/// around the limits and far over them (up to 4 GiB).
fn hostile_prefix() -> impl Strategy<Value = Vec<u8>> {
    let len = |max: u32| {
        prop_oneof![
            0..64u32,
            (max - 16)..=max,
            (max + 1)..=(max + 16),
            Just(u32::MAX),
            any::<u32>(),
        ]
    };
    (any::<u16>(), 0..4u8, any::<u64>(), len(MAX_HEADER), len(MAX_DATA)).prop_map(
        |(version, kind, id, h, d)| {
            let mut p = frame::MAGIC.to_vec();
            p.extend_from_slice(&version.to_le_bytes());
            p.extend_from_slice(&[kind, 0]);
            p.extend_from_slice(&id.to_le_bytes());
            p.extend_from_slice(&h.to_le_bytes());
            p.extend_from_slice(&d.to_le_bytes());
            p
        },
    )
}

// --- strategies for valid messages ------------------------------------------------------

fn id() -> BoxedStrategy<Id> {
    prop_oneof![Just(Id::ROOT), any::<u128>().prop_map(Id)].boxed()
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9./:-]{0,12}".prop_map(String::from),
        any::<String>().prop_map(|s| s.chars().take(16).collect())
    ]
}

fn op() -> impl Strategy<Value = Op> {
    testing::op(id(), bytes(12).boxed())
}

fn gen_attr() -> impl Strategy<Value = Attr> {
    testing::attr(id())
}

fn file_type() -> impl Strategy<Value = FileType> {
    testing::file_type()
}

fn creds() -> impl Strategy<Value = Creds> {
    testing::creds()
}

fn heal_state() -> impl Strategy<Value = HealState> {
    testing::heal_state(id(), bytes(8).boxed())
}

fn req_id() -> impl Strategy<Value = Option<ReqId>> {
    prop::option::of((any::<u64>(), any::<u64>()).prop_map(|(client, seq)| ReqId { client, seq }))
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u16>(), text(), bytes(8)).prop_map(|(version, name, auth)| Request::Hello(Hello {
            version,
            kind: PeerKind::Daemon,
            name,
            auth
        })),
        Just(Request::Ping),
        (
            text(),
            any::<u32>(),
            any::<u64>(),
            creds(),
            op(),
            req_id(),
            any::<bool>(),
            any::<u32>(),
            prop::option::of(any::<u64>()),
            any::<bool>()
        )
            .prop_map(
                |(volume, brick, epoch, creds, op, req, parents, inline, layout_epoch, sync)| {
                    Request::Brick(BrickRequest {
                        volume,
                        brick,
                        epoch,
                        creds,
                        op,
                        req,
                        parents,
                        inline,
                        layout_epoch,
                        sync,
                        locks: sync && parents,
                    })
                }
            ),
        (
            (text(), any::<u32>(), any::<u64>(), any::<u32>(), creds(), op()),
            (
                prop::option::of(gen_attr()),
                prop::collection::vec(any::<u32>(), 0..3),
                req_id(),
                any::<bool>()
            )
        )
            .prop_map(
                |(
                    (volume, brick, epoch, from_brick, creds, op),
                    (result, missed, req, confirm),
                )| {
                    Request::Replicate(ReplicateRequest {
                        volume,
                        brick,
                        epoch,
                        from_brick,
                        creds,
                        op,
                        result,
                        missed,
                        req,
                        confirm,
                        applied: vec![],
                    })
                }
            ),
        text().prop_map(|volume| Request::GetMap { volume }),
        text().prop_map(|volume| Request::Subscribe { volume }),
        any::<u64>().prop_map(|seq| Request::InvalidateAck { seq }),
        (0..every_mgmt_request().len())
            .prop_map(|i| Request::Mgmt(every_mgmt_request()[i].clone())),
    ]
}

fn volume_map() -> impl Strategy<Value = VolumeMap> {
    let brick =
        (any::<u32>(), text(), text(), text(), 0..3u8).prop_map(|(index, node, addr, path, s)| {
            BrickInfo {
                index,
                node,
                addr,
                path,
                state: [BrickState::Down, BrickState::Healing, BrickState::Up][s as usize],
            }
        });
    (
        (text(), any::<u128>(), any::<u64>(), any::<u64>(), any::<bool>(), 0..3u8, any::<u32>()),
        prop::collection::vec(
            (any::<u32>(), prop::collection::vec(brick, 0..3))
                .prop_map(|(id, bricks)| ReplicaSet { id, bricks }),
            0..3,
        ),
        prop::collection::btree_map(text(), text(), 0..3),
    )
        .prop_map(
            |((name, id, epoch, layout_epoch, rebalancing, s, replica), sets, options)| VolumeMap {
                name,
                id,
                epoch,
                layout_epoch,
                rebalancing,
                layout: vec![],
                status: [VolumeStatus::Created, VolumeStatus::Started, VolumeStatus::Stopped]
                    [s as usize],
                replica,
                sets,
                options,
            },
        )
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        (any::<i32>(), text()).prop_map(|(e, m)| Err(RemoteError::new(Errno(e), m))),
        gen_attr().prop_map(|a| Ok(Reply::Attr(a))),
        (gen_attr(), prop::option::of(id()))
            .prop_map(|(attr, linkto)| Ok(Reply::Entry { attr, linkto })),
        prop::collection::vec(gen_attr(), 0..3).prop_map(|v| Ok(Reply::Attrs(v))),
        prop::collection::vec(
            (bytes(8), id(), file_type(), any::<u64>(), prop::option::of(gen_attr())).prop_map(
                |(name, id, kind, cookie, attr)| DirEntry { name, id, kind, cookie, attr }
            ),
            0..3
        )
        .prop_map(|entries| Ok(Reply::Dir { entries, eof: false })),
        heal_state().prop_map(|s| Ok(Reply::Heal(Box::new(s)))),
        volume_map().prop_map(|m| Ok(Reply::Map(Box::new(m)))),
        (
            prop::option::of(file_type()),
            any::<u64>(),
            prop::collection::vec(prop::option::of(any::<u32>()), 0..8),
            prop::option::of(any::<u64>())
        )
            .prop_map(|(kind, size, entries, next)| Ok(Reply::Sums(Box::new(HealSums {
                kind,
                size,
                entries,
                next
            })))),
        (gen_attr(), prop::collection::vec(gen_attr(), 0..2)).prop_map(|(a, parents)| Ok(
            Reply::WithParents { reply: Box::new(Reply::Attr(a)), parents }
        )),
        (0..every_response().len()).prop_map(|i| every_response()[i].clone()),
    ]
}

/// Standard base64 with padding (a test needs no crate for it).
fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

// --- properties ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: ProptestConfig::default().cases, ..ProptestConfig::default() })]

    /// Arbitrary bytes, as any header type: an error or a value, never a panic, and a
    /// bounded allocation.
    #[test]
    fn arbitrary_headers_never_panic(b in bytes(512)) {
        decode_all(&b);
    }

    /// Arbitrary bytes after a hostile prefix, as a stream of frames, read whole and in
    /// pieces: frames or an error, never a panic or an oversized allocation.
    #[test]
    fn arbitrary_frames_never_panic(prefix in hostile_prefix(), rest in bytes(256), step in 1..64usize) {
        let mut b = prefix;
        b.extend_from_slice(&rest);
        for f in read_all(&b, usize::MAX).into_iter().chain(read_all(&b, step)).flatten() {
            decode_all(&f.header);
        }
        let mut raw = rest.clone();
        raw.resize(raw.len().max(PREFIX_LEN), 0);
        read_all(&raw, step);
    }

    /// Real requests, mutated: some value or an error, never a panic or an oversized
    /// allocation.
    #[test]
    fn mutated_requests_decode_or_fail(i in 0..every_request().len(), muts in mutations()) {
        let (req, _) = &every_request()[i];
        let mut b = frame::encode(req).to_vec();
        apply(&mut b, &muts);
        decode_all(&b);
    }

    /// Real responses and pushes, mutated.
    #[test]
    fn mutated_responses_decode_or_fail(i in 0..every_response().len() + 2, muts in mutations()) {
        let mut b = match every_response().get(i) {
            Some(r) => frame::encode(r).to_vec(),
            None => frame::encode(&every_push()[i - every_response().len()]).to_vec(),
        };
        apply(&mut b, &muts);
        decode_all(&b);
    }

    /// Whole frames of real requests (with their data segments), mutated anywhere,
    /// including the prefix's lengths, read as a stream in pieces.
    #[test]
    fn mutated_frames_read_or_fail(
        picks in prop::collection::vec((0..every_request().len(), frame_mutation()), 1..4),
        step in 1..4096usize,
    ) {
        let reqs = every_request();
        let mut stream = vec![];
        for (n, (i, m)) in picks.iter().enumerate() {
            let (req, data) = &reqs[*i];
            let f = Frame::new(FrameKind::Request, n as u64, frame::encode(req), Bytes::from(data.clone()));
            stream.extend(mutate_frame(&f, m));
        }
        for f in read_all(&stream, step).into_iter().flatten() {
            decode_all(&f.header);
        }
    }

    /// The certificate request inside an enrollment (read by a member before the peer has
    /// any certificate), mutated in its PEM text and in its DER: a name and role or an
    /// error, never a panic.
    #[test]
    fn mutated_enrollment_csrs_parse_or_fail(muts in mutations(), der in any::<bool>()) {
        use rustls::pki_types::pem::PemObject;
        let pem = enroll_request().csr;
        let text = if der {
            let mut d = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec();
            apply(&mut d, &muts);
            let b64 = base64_encode(&d);
            format!("-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n")
        } else {
            let mut b = pem.into_bytes();
            apply(&mut b, &muts);
            String::from_utf8_lossy(&b).into_owned()
        };
        let _ = cairn_proto::tls::csr_subject(&text);
    }

    /// Generated requests round-trip.
    #[test]
    fn requests_round_trip(req in request()) {
        prop_assert_eq!(frame::decode::<Request>(&frame::encode(&req)).unwrap(), req);
    }

    /// Generated responses round-trip, and pushes of generated maps.
    #[test]
    fn responses_round_trip(resp in response(), m in volume_map()) {
        prop_assert_eq!(frame::decode::<Response>(&frame::encode(&resp)).unwrap(), resp);
        let p = Push::MapChanged(Box::new(m));
        prop_assert_eq!(frame::decode::<Push>(&frame::encode(&p)).unwrap(), p);
    }

    /// Frames round-trip through `write_frame` and `read_frame`, read in pieces, with data
    /// segments small and large (a large one lands in a page-aligned buffer).
    #[test]
    fn frames_round_trip(
        k in kind(),
        id in any::<u64>(),
        header in bytes(256),
        big in any::<bool>(),
        fill in any::<u8>(),
        len in 0..4096usize,
        step in 1..100_000usize,
    ) {
        let len = if big { cairn_proto::aligned::MIN_ALIGNED + len * 61 } else { len };
        let data = Bytes::from(vec![fill; len]);
        let f = Frame::new(k, id, Bytes::from(header), data);
        let mut buf = vec![];
        futures::executor::block_on(frame::write_frame(&mut buf, &f)).unwrap();
        prop_assert_eq!(&buf, &testing::encode_frame(&f));
        let got = read_all(&buf, step);
        prop_assert_eq!(got.len(), 2, "one frame, then the end");
        let g = got[0].as_ref().unwrap();
        prop_assert_eq!((g.kind, g.version, g.id), (f.kind, f.version, f.id));
        prop_assert_eq!(&g.header, &f.header);
        prop_assert_eq!(&g.data, &f.data);
        prop_assert_eq!(got[1].as_ref().unwrap_err(), "connection closed");
    }
}

/// The hostile lengths the properties draw, checked once each: a prefix claiming 4 GiB
/// is refused from the prefix alone, and a header claiming 2^60 elements or bytes fails
/// without allocating them.
#[test]
fn hostile_lengths_are_refused_before_allocating() {
    for (h, d) in [(u32::MAX, 0), (0, u32::MAX), (MAX_HEADER + 1, 0), (0, MAX_DATA + 1)] {
        let mut p = Frame::new(FrameKind::Request, 1, Bytes::new(), Bytes::new()).encode_prefix();
        p[16..20].copy_from_slice(&h.to_le_bytes());
        p[20..24].copy_from_slice(&d.to_le_bytes());
        let r = read_all(&p, PREFIX_LEN);
        assert!(r[0].as_ref().unwrap_err().contains("too large"), "{r:?}");
    }
    for (req, _) in every_request() {
        let b = frame::encode(&req).to_vec();
        for pos in 0..b.len().saturating_sub(7) {
            for v in [1u64 << 32, 1 << 60, u64::MAX] {
                let mut c = b.clone();
                apply(&mut c, &[testing::Mutation::Len(pos, v)]);
                decode_all(&c);
            }
        }
    }
}
