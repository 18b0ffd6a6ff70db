//! Management calls: what the `cairn` CLI asks of the local `cairnd`, which carries them
//! out against the config store and the other nodes. Replies are plain data so the CLI can
//! print them as tables or as `--json`.

use crate::map::VolumeMap;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgmtRequest {
    /// Add the node whose `cairnd` listens at `addr` to the cluster, using up join token
    /// `token` (`ID.SECRET`, from `PeerTokenCreate`). Refused (EACCES) without a valid one.
    PeerProbe {
        addr: String,
        token: Option<String>,
    },
    PeerDetach {
        name: String,
        force: bool,
    },
    PeerStatus,
    VolumeCreate(VolumeCreate),
    VolumeStart {
        name: String,
        force: bool,
    },
    VolumeStop {
        name: String,
        force: bool,
    },
    VolumeDelete {
        name: String,
    },
    /// `None`: every volume.
    VolumeInfo {
        name: Option<String>,
    },
    VolumeStatus {
        name: Option<String>,
    },
    VolumeList,
    VolumeSet {
        name: String,
        key: String,
        value: String,
    },
    VolumeReset {
        name: String,
        key: String,
    },
    /// Prepare (`create == true`) or check a brick directory on this node; sent by the
    /// node that runs `volume create` to each node that holds one of its bricks.
    BrickPrepare {
        volume: String,
        volume_id: u128,
        index: u32,
        path: String,
        force: bool,
    },
    HealInfo {
        name: String,
    },
    /// Gateway objects (NFS exports, SMB shares, iSCSI LUNs and targets) of one `kind`,
    /// kept in the config store as JSON documents whose schema is `cairn-gateway`'s.
    GatewayList {
        kind: String,
    },
    /// Store object `name` of `kind`; with `if_unchanged_since`, only if no object of that
    /// kind changed after that revision (EAGAIN otherwise: re-read, re-check, retry).
    GatewayPut {
        kind: String,
        name: String,
        doc: String,
        if_unchanged_since: Option<u64>,
    },
    GatewayDelete {
        kind: String,
        name: String,
    },
    /// Crawl statistics of every brick of the volume.
    HealStatistics {
        name: String,
    },
    /// Start a full crawl on every brick of the volume.
    HealFull {
        name: String,
    },
    /// Node to node: heal state of this node's bricks of `name` (pending entries, crawl
    /// statistics); with `full`, first request a full crawl on each of them.
    HealLocal {
        name: String,
        full: bool,
    },
    /// `reset-brick VOL BRICK start` / `reset-brick VOL BRICK BRICK commit [force]`.
    ResetBrick {
        name: String,
        brick: String,
        commit: bool,
        force: bool,
    },
    /// `replace-brick VOL OLD NEW commit force`: brick OLD's place is taken by the empty
    /// directory NEW, rebuilt by a full heal.
    ReplaceBrick {
        name: String,
        old: String,
        new: String,
    },
    /// Node to node: make `path` (empty, or an old copy of this same brick with `force`)
    /// brick `index` of the volume again, flagged for a full heal before it serves.
    BrickReset {
        volume: String,
        volume_id: u128,
        index: u32,
        path: String,
        force: bool,
    },
    // Appended (bincode numbers variants in order): older peers keep their numbering.
    /// Create a single-use join token valid for `ttl_secs` (0: the default, 24 h).
    PeerTokenCreate {
        ttl_secs: u64,
    },
    /// Join tokens: ids, expiry, use; never the secret.
    PeerTokenList,
    PeerTokenRevoke {
        id: String,
    },
    /// This node's audit log: records at or after `since` (Unix seconds), at most `limit`
    /// (the newest), as JSON lines.
    AuditLog {
        since: Option<u64>,
        limit: u32,
    },
    /// Enrollment of a new node (`cairnd --join`): a join token and a certificate request,
    /// answered with a node certificate of the cluster CA. The one request a connection
    /// without a certificate may make (docs/security.md, "Joining a node").
    Enroll(EnrollRequest),
    /// Record a certificate the cluster CA issued (`cairn client certificate issue`).
    CertRecord(CertInfo),
    /// Every recorded certificate (`cairn client certificate list`).
    CertList,
    /// Revoke the certificates a serial number or a holder's name names.
    CertRevoke {
        what: String,
    },
    /// `add-brick VOL [replica N] BRICK... [force]`: add whole replica sets of the
    /// volume's replica count (`replica`, when given, must equal it). New names hash to
    /// the new sets at once; the layout epoch moves and the volume is `rebalancing`
    /// (a name missed on its hashed set is looked up on the others) until a rebalance.
    VolumeAddBrick {
        name: String,
        replica: Option<u32>,
        bricks: Vec<String>,
        force: bool,
    },
    /// Node to node: check a brick directory of add-brick on this node (not on the root
    /// filesystem unless `force`, empty unless `force`) and prepare it as brick `index`.
    BrickAdd {
        volume: String,
        volume_id: u128,
        index: u32,
        path: String,
        force: bool,
    },
    /// `rebalance VOL start|status|stop`: move files to the replica sets their names hash
    /// to after add-brick (docs/rebalance.md). The node asked sends the action to every
    /// node with bricks of the volume (`RebalanceLocal`): each runs for the files its
    /// bricks head; `status` gathers their progress.
    VolumeRebalance {
        name: String,
        action: String,
    },
    /// Node to node: `VolumeRebalance`'s action (`start`, `status`, `stop`) on this node's
    /// own run of the volume.
    RebalanceLocal {
        name: String,
        action: String,
    },
    /// A node or a gateway asks the member holding the cluster CA for a new certificate
    /// of its own identity: near its end, or during a CA rotation (docs/security.md,
    /// "Rotation"). The certificate of the connection is the proof; the request carries
    /// only the new key's request (or none: the cluster's trusted CA certificates only).
    CertRenew(RenewRequest),
    /// `remove-brick VOL BRICK... start|status|stop|commit [force]` (docs/rebalance.md):
    /// `bricks` must make whole replica sets. `start` takes them out of the layout and
    /// moves every file off them (a rebalance); `status` shows what moved and what is
    /// left; `stop` puts them back in the layout; `commit` drops them from the volume
    /// once they hold no file (`force`: whatever they hold).
    VolumeRemoveBrick {
        name: String,
        bricks: Vec<String>,
        action: String,
        force: bool,
    },
}

/// A renewal ([`MgmtRequest::CertRenew`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewRequest {
    /// PKCS#10 request (PEM) for the holder's new key, subject CN = the holder's name;
    /// empty: no certificate, only the CA certificates the cluster trusts now.
    pub csr: String,
    /// Set by a member without the CA key that passes a holder's request on: the
    /// holder's name and `cairn:` URI as that member authenticated them. Taken only from
    /// a node's connection, and not passed on again.
    pub on_behalf: Option<(String, String)>,
}

/// The answer to [`RenewRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewReply {
    /// The new certificate (PEM) for the request's key and the holder's identity (its
    /// role and limits unchanged); empty when none was asked.
    pub cert: String,
    /// The cluster CA certificate(s) the cluster trusts now (PEM): the new CA alone, or
    /// during a rotation the new and the old one.
    pub cas: String,
    /// The member that issued it.
    pub by: String,
}

/// What a joining node presents to a member: its token and the request for its node
/// certificate (its key never leaves it). The member makes it a member of the pool under
/// `name`, `addr` and `uuid` in the same step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollRequest {
    /// `ID.SECRET`, from `cairn peer token create`.
    pub token: String,
    /// PKCS#10 certificate request (PEM): subject CN = `name`, SAN `cairn:role=node`.
    pub csr: String,
    pub name: String,
    /// The address other nodes reach the joining node at (its `--advertise`).
    pub addr: String,
    /// Its node uuid (`STATE_DIR/node-uuid`).
    pub uuid: String,
    /// Set by a member without the CA key that passes the request on to the members that
    /// may hold it (they do not pass it on again).
    pub forwarded: bool,
    /// A PKCS#10 request (PEM, CN `cairn-NAME`) for the node's etcd client certificate,
    /// when it talks to an etcd that requires one (docs/security.md, "etcd"). The member
    /// holding the etcd CA signs it; its key stays on the joining node too.
    pub etcd_csr: Option<String>,
    /// A PKCS#10 request (PEM) for an etcd server and peer certificate, when the joining
    /// node is to run an etcd member (only with `etcd_csr`). The member holding the etcd CA
    /// signs the request's key alone, for `addr`'s host, 127.0.0.1 and localhost (names
    /// asked in the request are ignored). Added at the end: absent from an older peer.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub etcd_member_csr: Option<String>,
}

/// A member's answer to [`EnrollRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollReply {
    /// The node certificate (PEM), signed by the cluster CA.
    pub cert: String,
    /// The cluster CA's certificate (PEM): the joining node checks it against its pin.
    pub ca: String,
    /// The member that answered.
    pub by: String,
    /// The node's etcd client certificate, when the request carried `etcd_csr` and the
    /// member holds the etcd CA.
    pub etcd: Option<EtcdClientCert>,
    /// The node's etcd server and peer certificate (PEM, of the etcd CA in `etcd.ca`), when
    /// the request carried `etcd_member_csr`. Added at the end: absent from an older peer.
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub etcd_member: Option<String>,
}

/// An etcd client certificate (PEM) and the etcd CA's certificate (PEM), which also signed
/// etcd's server certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdClientCert {
    pub cert: String,
    pub ca: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeCreate {
    pub name: String,
    pub replica: u32,
    /// `host:/path` brick specs in order; consecutive groups of `replica` form a set.
    pub bricks: Vec<String>,
    /// Allow bricks of one set on the same node, and non-empty brick directories.
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub name: String,
    pub addr: String,
    pub uuid: String,
    pub connected: bool,
    /// True for the node that answered.
    pub local: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickStatus {
    pub index: u32,
    pub node: String,
    pub path: String,
    pub online: bool,
    pub state: String,
    pub port: u16,
    pub pid: u32,
    pub pending_heal: u64,
    pub total_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStatusInfo {
    pub name: String,
    pub status: String,
    pub bricks: Vec<BrickStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealBrickInfo {
    pub index: u32,
    pub node: String,
    pub path: String,
    pub online: bool,
    /// Ids this brick holds for peers that were away.
    pub pending: Vec<String>,
}

/// One crawl of a brick's heal: `index` (the pending entries peers recorded for it) or
/// `full` (every inode of the replica set, from each inode's chain head).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrawlInfo {
    /// `index` or `full`.
    pub kind: String,
    /// Unix seconds.
    pub started: u64,
    /// Unix seconds; `None` while the crawl runs.
    pub ended: Option<u64>,
    /// Inodes looked at (a full crawl counts every inode it walked).
    pub scanned: u64,
    /// Inodes copied onto this brick from their head.
    pub healed: u64,
    /// Inodes that could not be copied (retried by the next crawl).
    pub failed: u64,
    /// File data bytes copied onto this brick.
    #[serde(default)]
    pub bytes: u64,
    /// `cluster.heal-bandwidth` in effect (bytes/s; 0 = unlimited).
    #[serde(default)]
    pub bandwidth: u64,
    /// Milliseconds the crawl waited for that limit.
    #[serde(default)]
    pub throttled_ms: u64,
    /// Full crawl: directories done, and discovered but not done yet (its position).
    #[serde(default)]
    pub dirs_done: u64,
    #[serde(default)]
    pub dirs_left: u64,
    /// Full crawl continued from the position saved by an earlier run (cut by a restart)
    /// after this many directories; 0: started from the root.
    #[serde(default)]
    pub resumed_after: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealBrickStats {
    pub index: u32,
    pub node: String,
    pub path: String,
    pub online: bool,
    /// `up`, `healing` or `down`.
    pub state: String,
    /// A crawl is running now (it is also the first of `crawls`).
    pub in_progress: bool,
    /// A full crawl is requested and not finished (it survives restarts).
    pub full_pending: bool,
    /// Entries this brick holds for peers.
    pub pending: u64,
    /// The running crawl, then the last finished one of each kind; newest first.
    pub crawls: Vec<CrawlInfo>,
}

/// What one node reports for one of its bricks (`HealLocal`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealLocalBrick {
    pub index: u32,
    pub pending: Vec<String>,
    pub stats: HealBrickStats,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgmtReply {
    Done {
        message: String,
    },
    Peers(Vec<PeerInfo>),
    Volumes(Vec<VolumeMap>),
    Names(Vec<String>),
    Status(Vec<VolumeStatusInfo>),
    Heal(Vec<HealBrickInfo>),
    /// Gateway objects of one kind and the store revision they were read at.
    Gateway {
        revision: u64,
        objects: Vec<GatewayObject>,
    },
    HealStats(Vec<HealBrickStats>),
    HealLocal(Vec<HealLocalBrick>),
    /// A new join token: shown once, never stored in clear.
    JoinToken {
        token: String,
        info: JoinTokenInfo,
    },
    JoinTokens(Vec<JoinTokenInfo>),
    /// Audit records, one JSON object per line, oldest first.
    Audit(Vec<String>),
    Enrolled(EnrollReply),
    /// Recorded certificates (listed, or revoked by `CertRevoke`).
    Certs(Vec<CertInfo>),
    /// A rebalance's progress, one entry per node that ran one.
    Rebalance(Vec<RebalanceNode>),
    Renewed(RenewReply),
    /// `remove-brick ... status`.
    RemoveBrick(RemoveBrickStatus),
}

/// `remove-brick VOL BRICK... status`: the sets being drained and, per node with bricks
/// of the volume, what its run moved and what is left on those sets (files and bytes of
/// the names this node's bricks head there).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RemoveBrickStatus {
    pub sets: Vec<u32>,
    pub nodes: Vec<RemoveBrickNode>,
    /// Files (and their bytes) still on the draining sets, all nodes together.
    pub left_files: u64,
    pub left_bytes: u64,
}

/// One node's row of [`RemoveBrickStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RemoveBrickNode {
    pub node: String,
    /// The node's rebalance run: `running`, `paused`, `stopped`, `completed`, `failed`,
    /// or `not started`.
    pub state: String,
    pub moved: u64,
    pub bytes: u64,
    pub left_files: u64,
    pub left_bytes: u64,
    pub skipped: u64,
    pub failures: u64,
    pub last_error: Option<String>,
}

/// An issued certificate as recorded in the config store (docs/security.md, "Revocation").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertInfo {
    /// Serial number, lower-case hex.
    pub serial: String,
    pub name: String,
    /// `admin`, `node`, `gateway`, `client` (empty: revoked by serial, never recorded).
    pub role: String,
    pub volumes: Option<Vec<String>>,
    pub read_only: bool,
    /// Unix seconds.
    pub issued: u64,
    pub expires: u64,
    pub revoked_at: Option<u64>,
    pub revoked_by: Option<String>,
}

/// A join token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenInfo {
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    pub expires: u64,
    pub used_at: Option<u64>,
    pub used_by: Option<String>,
    pub revoked_at: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayObject {
    pub name: String,
    /// JSON document (schema: the cairn-gateway crate).
    pub doc: String,
    /// Store revision of its last change.
    pub revision: u64,
}

/// `unix_secs` as an RFC 3339 UTC time, e.g. `2026-11-27T10:40:00Z`.
pub fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86400) as i64;
    let rem = unix_secs % 86400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_795_737_600 + 3661), "2026-11-27T01:01:01Z");
    }
}

/// One node's rebalance of a volume (`cairn volume rebalance VOL status`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RebalanceNode {
    pub node: String,
    /// `running`, `paused`, `stopped`, `completed`, `failed` (completed with failures).
    pub state: String,
    /// The layout epoch the run moves files to.
    pub layout_epoch: u64,
    /// Regular files looked at (on the sets whose heads are this node's bricks).
    pub scanned: u64,
    /// Files moved to the set their name hashes to, and their bytes.
    pub moved: u64,
    pub bytes: u64,
    /// Files left where they are: open, locked, hard-linked, moved before.
    pub skipped: u64,
    pub failures: u64,
    /// The last failure, with the file and errno.
    pub last_error: Option<String>,
    /// Unix seconds.
    pub started: u64,
    pub updated: u64,
    /// `lazy` (one file at a time, pausing between files), `normal` (4 in flight) or
    /// `aggressive` (16 in flight).
    #[serde(default)]
    pub throttle: String,
    /// How many times the run picked up from its record (its `cairnd` restarted, or the
    /// node came back after a failure) instead of starting over.
    #[serde(default)]
    pub resumes: u32,
    /// Seconds spent running (paused time and time while `cairnd` was down left out).
    #[serde(default)]
    pub elapsed: u64,
    /// Entries to scan, counted when the run started (0: not counted yet).
    #[serde(default)]
    pub estimate: u64,
    /// Bytes moved per second of running, and the seconds left at the scan rate so far
    /// (`None` until there is a rate).
    #[serde(default)]
    pub rate: u64,
    #[serde(default)]
    pub eta: Option<u64>,
    /// The most files this run (since its last start or resume) moved at a time: the
    /// throttle at work.
    #[serde(default)]
    pub in_flight_max: u32,
    /// Where the walk is: what a restarted run resumes from.
    #[serde(default)]
    pub position: RebalancePosition,
}

impl RebalanceNode {
    /// Still to finish: `running` or `paused` (a layout change waits for it).
    pub fn active(&self) -> bool {
        self.state == "running" || self.state == "paused"
    }
}

/// Where a node's rebalance walk is (`RebalanceNode::position`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RebalancePosition {
    /// Replica sets walked to the end.
    pub sets_done: Vec<u32>,
    /// The set being walked, and the walk's stack: the root directory at the bottom, the
    /// directory being listed on top.
    pub set: Option<u32>,
    pub stack: Vec<RebalanceFrame>,
}

/// One directory of the walk's stack: every entry up to `cookie` is done; `pending`
/// are the subdirectories listed so far that are still to walk; `eof` once the listing
/// reached its end.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RebalanceFrame {
    pub dir: crate::Id,
    pub cookie: u64,
    pub pending: Vec<crate::Id>,
    pub eof: bool,
}
