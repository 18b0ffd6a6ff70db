//! Requests, replies and pushes.
//!
//! A client sends [`Request::Brick`] to the `cairnd` serving a brick. Mutations go to the
//! chain head of the inode's replica set, which applies them and forwards them to the rest
//! of the set as [`Request::Replicate`]; reads go to the head too (it is the coherence
//! point for leases and locks). Bulk data (WRITE payloads, READ results) travels in the
//! frame's data segment, never inside the bincode header.

use crate::map::VolumeMap;
use crate::mgmt::{MgmtReply, MgmtRequest};
use crate::types::*;
use crate::RemoteError;
use serde::{Deserialize, Serialize};

mod op;
pub use op::{share, Op};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First message on every connection.
    Hello(Hello),
    Ping,
    /// An operation on one brick.
    Brick(BrickRequest),
    /// A mutation forwarded by a chain head to another brick of the same replica set.
    Replicate(ReplicateRequest),
    /// Fetch the current volume map.
    GetMap {
        volume: String,
    },
    /// Subscribe this connection to map changes and invalidations for a volume.
    Subscribe {
        volume: String,
    },
    /// Acknowledge a [`Push::Invalidate`] (a lease recall).
    InvalidateAck {
        seq: u64,
    },
    /// Management call from the `cairn` CLI or another `cairnd`.
    Mgmt(MgmtRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerKind {
    Client,
    Daemon,
    Cli,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u16,
    pub kind: PeerKind,
    /// Free text naming the peer in logs, e.g. `ganesha@gw1` or `mount.cairn pid 42`.
    pub name: String,
    /// Shared cluster secret proof (HMAC of the nonce); empty when auth is off.
    pub auth: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    pub version: u16,
    /// Session id the server assigned; scopes lock owners and lease holders.
    pub session: u64,
    /// Node name of the server.
    pub node: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrickRequest {
    pub volume: String,
    pub brick: u32,
    /// Map epoch the client routed by; a brick with a newer map answers ESTALEMAP.
    pub epoch: u64,
    pub creds: Creds,
    pub op: Op,
    /// Identifies a mutation across the client's retries of it: a brick that already
    /// applied it answers with the first result instead of applying it again. Last field,
    /// decoded as `None` when absent (a peer built before it).
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub req: Option<ReqId>,
    /// Ask for the attributes of the op's parent directories after a namespace op
    /// ([`Op::parent_dirs`]): answered as [`Reply::WithParents`]. A brick built before it
    /// ignores it and answers plainly; decoded as `false` when absent, so a client built
    /// before it never gets the new reply.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub parents: bool,
    /// Quick-read: on a `Lookup` that finds a regular file of at most this many bytes,
    /// also send its whole content, as [`Reply::EntryData`] (0: never). A brick built
    /// before it ignores it and answers plainly; decoded as 0 when absent, so a client
    /// built before it never gets the new reply.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub inline: u32,
    /// The layout epoch ([`crate::map::VolumeMap::layout_epoch`]) of the map the client
    /// routed this op by. A head refuses an op that makes a name ([`Op::makes_name`])
    /// routed by an older layout than its own (ESTALEMAP): the client fetches the map and
    /// routes the op again (docs/rebalance.md). Decoded as `None` from a client built
    /// before it (only a `Create`'s name is then checked, by its hash).
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub layout_epoch: Option<u64>,
    /// On a `Write`: the head also makes the file durable on every brick of the set that
    /// applied the write (an [`Op::Fsync`] of the file, metadata included, run through the
    /// chain after it) before answering, as [`Reply::Synced`]: a write and its fsync in one
    /// round trip (NFS FILE_SYNC, a COMMIT folded into the write). A brick built before it
    /// ignores it and answers plainly (the client then sends the fsync itself); decoded as
    /// `false` when absent.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub sync: bool,
    /// Lock state with the lease: when the head leases this client's session the
    /// attributes of a regular file with this op's reply (a getattr, lookup, GETXATTRS, or
    /// the session's own change of it) and no other session holds a byte-range lock on that
    /// file, it answers [`Reply::Unlocked`]; another session's lock of the file then
    /// recalls the lease before it is granted, so until a recall the client knows that no
    /// other session holds one (a gateway's lock test costs no round trip). A brick built
    /// before it ignores it and answers plainly; decoded as `false` when absent.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub locks: bool,
}

impl BrickRequest {
    /// A request for `op` at `brick` of `volume`, routed by map `epoch`, as `creds`, with
    /// every optional field off: no request id (not deduplicated), no parents' attributes,
    /// no quick-read, no layout epoch, no sync, no lock state. Set a field after it for more.
    pub fn new(volume: impl Into<String>, brick: u32, epoch: u64, creds: Creds, op: Op) -> Self {
        BrickRequest {
            volume: volume.into(),
            brick,
            epoch,
            creds,
            op,
            req: None,
            parents: false,
            inline: 0,
            layout_epoch: None,
            sync: false,
            locks: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicateRequest {
    pub volume: String,
    pub brick: u32,
    pub epoch: u64,
    /// The head that applied the op first.
    pub from_brick: u32,
    /// Credentials of the original caller (replicas apply the op as root, then give new
    /// inodes the owner the head gave them).
    pub creds: Creds,
    /// The op as the head applied it: ids are fixed by the head.
    pub op: Op,
    /// Attributes the head's copy ended with, for ops that create an inode: replicas copy
    /// owner and permission bits from it so every copy is identical. For a rename: the
    /// inode the head moved, which a replica checks it holds under the source name.
    pub result: Option<Attr>,
    /// Bricks of the set known to miss this op (down): every replica that applies it
    /// records them as pending too, so the record survives the head.
    pub missed: Vec<u32>,
    /// The client's request id of the op, remembered by every brick that applies it, so a
    /// brick that becomes head knows the client's retry of it (decoded as `None` when
    /// absent).
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub req: Option<ReqId>,
    /// Apply nothing: answer with the result of request `req` if this brick applied it,
    /// `ENOENT` if not. Sent by a head answering a client's retry of an op that it applied
    /// as a replica (its predecessor did not answer), so that every replica that missed
    /// the op is marked for heal. Decoded as `false` when absent.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub confirm: bool,
    /// With a heal's `HealApply`: the request ids whose effects the copy holds (the
    /// records the source has of requests that changed the inode, taken under its lock
    /// with the copy). The healed brick takes them as applied, not acknowledged, so a
    /// client's retry of one that it heads later is not applied twice. Last field, decoded
    /// as empty from a peer built before it.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub applied: Vec<AppliedRequest>,
}

/// One request-id record a heal copy carries (`ReplicateRequest::applied`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedRequest {
    pub req: ReqId,
    /// The result the source remembers for it, answered to a confirmed retry.
    pub reply: Reply,
    #[serde(with = "serde_bytes")]
    pub out: Vec<u8>,
}

/// How long a client resends one mutation (with the same [`ReqId`]) while bricks fail
/// over, from its first attempt.
pub const RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(30);

/// The id of one mutation a client sent: the same on every retry of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReqId {
    /// Random per mounted volume (client instance).
    pub client: u64,
    /// Grows with every mutation the client sends.
    pub seq: u64,
}

/// Most checksum entries one `HealSums` returns (65536 blocks of 4 KiB: 256 MiB of file,
/// about 320 KiB of header).
pub const HEAL_SUMS_MAX: u32 = 65536;

/// One extent of a `HealWrite`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealExtent {
    pub offset: u64,
    pub len: u64,
    /// Zeros: punched (a hole), no bytes in the data segment.
    pub zero: bool,
}

/// Reply to `HealSums`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealSums {
    /// Kind of the local inode (`None`: not on this brick).
    pub kind: Option<FileType>,
    pub size: u64,
    /// One per block asked for: the block's entry (see docs/brick-format.md "Data
    /// checksums"; 0 is a block of zeros, and every block past the end is one), `None`
    /// when unknown (a partial table, or a file without checksums).
    pub entries: Vec<Option<u32>>,
    /// Where a heal compares next: the first block at or after the end of the range asked
    /// for that holds data in this brick's file (`SEEK_DATA`), or the file's block count
    /// when none does. The blocks before the lower of both sides' hints are holes on both,
    /// zeros on both, so a heal of a sparse file skips them. `None`: no hint (a
    /// filesystem error, or a brick built before it: decoded as absent), nothing skipped.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub next: Option<u64>,
}

/// Everything a replica needs to become identical to its source for one inode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealState {
    pub attr: Option<Attr>,
    /// Cairn-visible xattrs (internal ones excluded).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub symlink: Option<Name>,
    /// For directories: every entry (name, id, kind, linkto target).
    pub entries: Vec<(Name, Id, FileType, Option<Id>)>,
    /// For directories: where the directory sits (parent id, name), to re-create it.
    pub parent: Option<(Id, Name)>,
    /// For regular files: the data is sent in the frame's data segment. A `HealApply`
    /// with no data and a nonzero `data_len` does not touch the data: it sets the size to
    /// `data_len` (a chunked copy: the data goes by `HealWrite`).
    pub data_len: u64,
    /// Other bricks the source holds this inode pending for: the healed copy records them
    /// too, so it can vouch for them once it is up.
    pub pending_for: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Welcome(Welcome),
    Pong,
    Unit,
    Attr(Attr),
    /// Lookup of a name: the entry's attributes, or a pointer to the inode's home set.
    Entry {
        attr: Attr,
        linkto: Option<Id>,
    },
    Attrs(Vec<Attr>),
    /// READ: `len` bytes are in the frame's data segment; `eof` if the read reached EOF.
    Data {
        eof: bool,
    },
    Written {
        count: u32,
        attr: Attr,
    },
    Offset(u64),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    Names(Vec<Name>),
    StatFs(StatFs),
    Dir {
        entries: Vec<DirEntry>,
        eof: bool,
    },
    Lock(Option<Lock>),
    /// Pending records: id and the generation of its last recording.
    Pending(Vec<(Id, u64)>),
    Heal(Box<HealState>),
    Map(Box<VolumeMap>),
    Mgmt(MgmtReply),
    /// HEAL_SUMS.
    Sums(Box<HealSums>),
    /// HEAL_WRITE, as answered by `cairnd`: bytes written, and how long the heal source
    /// should pause before its next range (`cluster.heal-bandwidth` of the target brick).
    HealWritten {
        bytes: u64,
        wait_ms: u64,
    },
    /// A namespace op's reply with the attributes of the brick's copies of its parent
    /// directories ([`Op::parent_dirs`], in that order) right after the op, taken under
    /// the op's inode locks. Sent only to a client that set [`BrickRequest::parents`].
    WithParents {
        reply: Box<Reply>,
        parents: Vec<Attr>,
    },
    /// LOOKUP asked with [`BrickRequest::inline`] that found a regular file small enough:
    /// the entry's attributes (not a linkto) and its whole content, `attr.size` bytes, in
    /// the frame's data segment. Attributes and data were read together under the inode's
    /// read lock, after the brick granted the caller a lease on the inode, so a later
    /// change of the file by another client recalls them both.
    EntryData {
        attr: Attr,
    },
    /// GETXATTRS: every client-visible xattr of the inode, in the brick's listing order.
    Xattrs(Vec<Xattr>),
    /// A `Write` asked with [`BrickRequest::sync`]: its reply, sent once the file was made
    /// durable on every brick that applied the write. Sent only to a client that set it.
    Synced(Box<Reply>),
    /// Asked with [`BrickRequest::locks`]: the reply leased file `id` to the session and
    /// no other session held a byte-range lock on it then (checked after the lease was
    /// granted; a lock another session takes later recalls the lease first). Wraps the
    /// other wrappers. Sent only to a client that set it.
    Unlocked {
        id: Id,
        reply: Box<Reply>,
    },
}

/// What a response frame carries.
pub type Response = Result<Reply, RemoteError>;

/// Unsolicited messages from a `cairnd` to a subscribed client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Push {
    MapChanged(Box<VolumeMap>),
    /// Lease recall: drop cached attributes (and, for a directory, cached entries) of `id`
    /// then send [`Request::InvalidateAck`] with `seq`.
    Invalidate {
        volume: String,
        id: Id,
        entries: bool,
        seq: u64,
    },
    /// Delegation recall: another session needs `id`; flush what is held for it and send
    /// [`Op::DelegReturn`]. The conflicting access waits for that return (or for the
    /// delegation to be revoked, see `cairnd/src/delegs.rs`).
    Recall {
        volume: String,
        id: Id,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode, encode};

    #[test]
    /// (Here rather than in `frame`, which knows no message type: `frame` stays below `msg`.)
    fn decode_garbage_header_fails_cleanly() {
        let r: Result<Request, _> = decode(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
        assert!(r.is_err());
        // A length prefix claiming 2^60 elements must not allocate.
        let mut evil = vec![2u8, 0, 0, 0]; // Request::Brick, whose first field is a string
        evil.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let r: Result<Request, _> = decode(&evil);
        assert!(r.is_err());
    }

    /// `BrickRequest` as peers built before request ids encode it.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum OldRequest {
        Hello(Hello),
        Ping,
        Brick(OldBrickRequest),
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct OldBrickRequest {
        volume: String,
        brick: u32,
        epoch: u64,
        creds: Creds,
        op: Op,
    }

    #[test]
    fn request_ids_are_compatible_with_peers_built_before_them() {
        let op = Op::Write { id: Id(7), offset: 3 };
        let old = OldRequest::Brick(OldBrickRequest {
            volume: "v".into(),
            brick: 1,
            epoch: 9,
            creds: Creds::root(),
            op: op.clone(),
        });
        // Old to new: no id.
        let Request::Brick(new) = decode::<Request>(&encode(&old)).unwrap() else { panic!() };
        assert_eq!((new.brick, new.epoch, new.req), (1, 9, None));
        assert_eq!(new.op, op);
        // New to old: the id is ignored.
        let req = Some(ReqId { client: 5, seq: 6 });
        let new = Request::Brick(BrickRequest { req, ..new });
        assert_eq!(decode::<OldRequest>(&encode(&new)).unwrap(), old);
        // New to new: kept.
        let Request::Brick(back) = decode::<Request>(&encode(&new)).unwrap() else { panic!() };
        assert_eq!(back.req, req);
        assert!(!back.parents, "absent: the client did not ask for parent attributes");
        // The parent-attributes flag: ignored by an old peer, kept by a new one, with or
        // without a request id before it.
        for req in [None, req] {
            let Request::Brick(b) = decode::<Request>(&encode(&new)).unwrap() else { panic!() };
            let ask = Request::Brick(BrickRequest { req, parents: true, ..b });
            let Request::Brick(back) = decode::<Request>(&encode(&ask)).unwrap() else { panic!() };
            assert!(back.parents);
            assert_eq!(back.req, req);
            let Request::Brick(b) = ask else { panic!() };
            let Request::Brick(plain) =
                decode::<Request>(&encode(&Request::Brick(b.clone()))).unwrap()
            else {
                panic!()
            };
            assert_eq!(plain, b);
            let OldRequest::Brick(o) = decode::<OldRequest>(&encode(&Request::Brick(b))).unwrap()
            else {
                panic!()
            };
            assert_eq!(o.op, op);
        }
    }

    /// The quick-read size: ignored by a peer built before it, decoded as 0 (never inline)
    /// from one, kept between new peers, with or without the fields before it set.
    #[test]
    fn quick_read_size_is_compatible_with_older_peers() {
        let op = Op::Lookup { dir: Id(1), name: b"f".to_vec() };
        let old = OldRequest::Brick(OldBrickRequest {
            volume: "v".into(),
            brick: 2,
            epoch: 3,
            creds: Creds::root(),
            op: op.clone(),
        });
        let Request::Brick(plain) = decode::<Request>(&encode(&old)).unwrap() else { panic!() };
        assert_eq!(plain.inline, 0, "absent: the client did not ask for inline data");
        assert_eq!(plain.layout_epoch, None, "absent: a client built before layout epochs");
        for (req, parents) in [(None, false), (Some(ReqId { client: 1, seq: 2 }), true)] {
            let ask = BrickRequest { req, parents, inline: 65536, ..plain.clone() };
            let Request::Brick(back) =
                decode::<Request>(&encode(&Request::Brick(ask.clone()))).unwrap()
            else {
                panic!()
            };
            assert_eq!(back, ask);
            let OldRequest::Brick(o) = decode::<OldRequest>(&encode(&Request::Brick(ask))).unwrap()
            else {
                panic!()
            };
            assert_eq!(o.op, op);
        }
        let t = crate::Timespec { sec: 5, nsec: 6 };
        let attr = Attr {
            id: Id(9),
            kind: crate::FileType::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: 4096,
            blocks: 8,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
            change: 7,
        };
        let r: Response = Ok(Reply::EntryData { attr });
        assert_eq!(decode::<Response>(&encode(&r)).unwrap(), r);
    }

    /// The `HealSums` reply's `next` hint: kept between new peers, and decoded as `None`
    /// (no hint, so a heal skips nothing) from a brick that sends the reply without it.
    #[test]
    fn heal_sums_hint_is_absent_from_older_peers() {
        let sums = HealSums {
            kind: Some(crate::FileType::Regular),
            size: 1 << 40,
            entries: vec![Some(0), None, Some(7)],
            next: Some(1 << 28),
        };
        let r: Response = Ok(Reply::Sums(Box::new(sums.clone())));
        let bytes = encode(&r);
        assert_eq!(decode::<Response>(&bytes).unwrap(), r);
        // Without the field: 1 byte of Option tag and 8 of u64 fewer.
        let old = &bytes[..bytes.len() - 9];
        let Ok(Reply::Sums(back)) = decode::<Response>(old).unwrap() else { panic!() };
        assert_eq!(*back, HealSums { next: None, ..sums });
    }

    /// The etcd member fields came at the end of `Enroll` and its answer, without a
    /// protocol version change: an older peer's message decodes with them absent, and an
    /// older peer decodes a newer message (it ignores the trailing bytes).
    #[test]
    fn etcd_member_fields_are_trailing() {
        use crate::mgmt::{EnrollReply, EnrollRequest, EtcdClientCert};
        #[derive(Serialize, Deserialize)]
        struct OldRequest(String, String, String, String, String, bool, Option<String>);
        #[derive(Serialize, Deserialize)]
        struct OldReply(String, String, String, Option<EtcdClientCert>);
        let s = |v: &str| v.to_string();
        let old =
            OldRequest(s("t"), s("csr"), s("n2"), s("10.0.0.2:7420"), s("u"), false, Some(s("e")));
        let new: EnrollRequest = decode(&encode(&old)).unwrap();
        assert_eq!((new.etcd_csr.as_deref(), new.etcd_member_csr), (Some("e"), None));
        let new = EnrollRequest { etcd_member_csr: Some(s("m")), ..new };
        let back: OldRequest = decode(&encode(&new)).unwrap();
        assert_eq!((back.2, back.6), (s("n2"), Some(s("e"))));
        let etcd = Some(EtcdClientCert { cert: s("c"), ca: s("ca") });
        let r: EnrollReply =
            decode(&encode(&OldReply(s("c"), s("ca"), s("n1"), etcd.clone()))).unwrap();
        assert_eq!((r.etcd, r.etcd_member), (etcd, None));
        // inside the messages that carry them (nothing follows them in a header)
        let req = Request::Mgmt(MgmtRequest::Enroll(EnrollRequest {
            etcd_member_csr: Some(s("m")),
            ..decode(&encode(&old)).unwrap()
        }));
        match decode::<Request>(&encode(&req)).unwrap() {
            Request::Mgmt(MgmtRequest::Enroll(r)) => assert_eq!(r.etcd_member_csr, Some(s("m"))),
            other => panic!("{other:?}"),
        }
        let rep = Reply::Mgmt(MgmtReply::Enrolled(EnrollReply {
            cert: s("c"),
            ca: s("ca"),
            by: s("n1"),
            etcd: None,
            etcd_member: Some(s("m")),
        }));
        assert_eq!(decode::<Reply>(&encode(&rep)).unwrap(), rep);
    }
}
