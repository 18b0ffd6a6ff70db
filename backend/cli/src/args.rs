//! The command line, declared with clap. Words that gluster treats as keywords inside a
//! command (`replica N`, `force`, `info`) are plain positionals here and are checked by
//! [`crate::grammar`], so the grammar stays exactly gluster's.

use clap::{Parser, Subcommand, ValueEnum};

const ABOUT: &str = "Manage a Cairn cluster: peers and volumes";

const LONG_ABOUT: &str = "\
Manage a Cairn cluster: trusted peers and volumes.

cairn sends every command to one cairnd (by default the one on this machine, at \
127.0.0.1:7420), which carries it out against the cluster's config store and the other \
nodes. The grammar follows the gluster CLI: `cairn volume create vol0 replica 2 \
n1:/b1 n2:/b1` does what `gluster volume create` does.";

const EXIT_CODES: &str = "\
EXIT STATUS:
  0  success
  1  the operation failed (cairnd answered with an error, or a confirmation was declined);
     the reason is printed on stderr as \"<command>: <name>: failed: <message>\"
  2  usage error (unknown command, bad argument, failed local validation)
  3  cairnd cannot be reached (nothing listening at the address, timeout, connection lost)

ENVIRONMENT:
  CAIRN_HOST  address of the cairnd to talk to, HOST[:PORT] (overridden by --host)
  CAIRN_CREDENTIALS  credentials file to connect with (overridden by --credentials;
              default /etc/cairn/credentials.pem, /etc/cairn/admin.pem,
              /var/lib/cairn/admin.pem)
  CAIRN_TRANSPORT  tls (default) or plain (overridden by --transport)
  CAIRN_SMB_VFS_NAME  the name smbd loads vfs_cairn as, for the shares `cairn smb share`
              writes (default cairn)

EXAMPLES:
  cairn peer probe node2
  cairn volume create vol0 replica 3 node1:/bricks/b1 node2:/bricks/b1 node3:/bricks/b1
  cairn volume start vol0
  cairn volume info vol0
  cairn --json volume status all | jq '.volumes[].bricks[] | select(.online | not)'
  cairn --mode=script volume stop vol0";

#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "cairn",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = EXIT_CODES,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Address of the cairnd to talk to: HOST[:PORT], default port 7420.
    #[arg(
        long,
        global = true,
        env = "CAIRN_HOST",
        value_name = "HOST[:PORT]",
        default_value = "127.0.0.1:7420"
    )]
    pub host: String,

    /// Print the reply as JSON on stdout (read commands print their data; other commands a
    /// result object).
    #[arg(long, global = true)]
    pub json: bool,

    /// `script` never asks for confirmation (like gluster's --mode=script).
    #[arg(long, global = true, value_enum, value_name = "MODE", default_value_t = Mode::Interactive)]
    pub mode: Mode,

    /// Answer "y" to every confirmation question.
    #[arg(long, short = 'y', global = true)]
    pub yes: bool,

    /// Seconds to wait for cairnd's reply (connecting gives up after at most 10 s).
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 120)]
    pub timeout: u64,

    /// Credentials file (PEM: certificate, cluster CA certificate, key) to connect with.
    /// Default: $CAIRN_CREDENTIALS, else /etc/cairn/credentials.pem, /etc/cairn/admin.pem,
    /// /var/lib/cairn/admin.pem (the first that exists).
    #[arg(long, global = true, env = "CAIRN_CREDENTIALS", value_name = "FILE")]
    pub credentials: Option<std::path::PathBuf>,

    /// `tls` (default) or `plain`: connect without TLS, to a cluster run with
    /// `cairnd --transport plain` on an isolated network.
    #[arg(long, global = true, env = "CAIRN_TRANSPORT", value_enum, value_name = "TRANSPORT", default_value_t = TransportArg::Tls)]
    pub transport: TransportArg,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportArg {
    /// TLS 1.3, both ends authenticated by certificates of the cluster CA.
    Tls,
    /// Plain TCP: no authentication, no encryption.
    Plain,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Ask before destructive commands when stdin is a terminal.
    Interactive,
    /// Never ask.
    Script,
}

/// The `force` keyword at the end of a command.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Force {
    Force,
}

/// What `volume heal NAME` does.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealAction {
    /// List, per brick, the entries waiting to be healed.
    Info,
    /// Crawl statistics per brick: start, end, entries healed and failed, running or not.
    Statistics,
    /// Start a full crawl: every brick copies every inode from its chain head.
    Full,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Manage the trusted storage pool: probe, detach, status.
    #[command(subcommand)]
    Peer(PeerCmd),
    /// List the nodes of the trusted storage pool.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// The audit log of management actions.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Create, start, stop, delete, inspect and tune volumes.
    #[command(subcommand)]
    Volume(VolumeCmd),
    /// NFS exports served by the gateways' Ganesha (FSAL_CAIRN).
    Nfs(NfsArgs),
    /// SMB shares served by the gateways' smbd (vfs_cairn).
    Smb(SmbArgs),
    /// iSCSI LUNs and targets served by the gateways' LIO (tcmu-runner, handler_cairn).
    Iscsi(IscsiArgs),
    /// The gateways themselves: their Pacemaker cluster (`cairn gateway ha status`).
    #[command(subcommand)]
    Gateway(GatewayCmd),
    /// Credentials of clients, gateways and nodes (certificates of the cluster CA).
    #[command(subcommand)]
    Client(ClientCmd),
    /// The cluster itself: its certificate authority.
    #[command(subcommand)]
    Cluster(ClusterCmd),
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum ClusterCmd {
    /// The cluster CA.
    #[command(subcommand)]
    Ca(CaCmd),
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum CaCmd {
    /// Replace the cluster CA without downtime, in two steps (docs/security.md,
    /// "Rotation").
    #[command(long_about = CA_ROTATE_ABOUT)]
    Rotate(CaRotate),
}

const CA_ROTATE_ABOUT: &str = "\
Replace the cluster CA without downtime, in two steps, on the node that holds the CA, as \
root (like `ceph orch certmgr` / kubeadm's CA rotation: a transition with both CAs \
trusted, then the old one retired).

`cairn cluster ca rotate` creates a new CA (ca.pem, ca.key; the old certificate kept as \
ca-old.pem), writes the trust bundle ca-bundle.pem (new + old), and re-issues the admin \
credential admin.pem under the new CA with the bundle. Every cairnd whose CA dir holds the \
CA trusts both within seconds (reloaded, no restart) and keeps its certificate, so \
clients that trust only the old CA still reach it. Credentials issued from now on \
(`client certificate issue`) are of the new CA and trust both: re-issue every client, \
gateway and remote node credential now. Certificates of either CA are accepted meanwhile.

`cairn cluster ca rotate --finish` retires the old CA: the bundle holds the new CA only; \
admin.pem and every cairnd holding the CA trust only it, and those cairnd re-issue their \
node certificates under it (within seconds, reloaded). A certificate of the old CA is \
refused at the next handshake; sessions already open go on until they close.";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct CaRotate {
    /// Retire the old CA (the second step).
    #[arg(long)]
    pub finish: bool,
    /// Directory of the cluster CA. Default: $CAIRN_CA_DIR, else /var/lib/cairn.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum ClientCmd {
    /// Certificates of the cluster CA.
    #[command(subcommand)]
    Certificate(CertCmd),
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum CertCmd {
    /// Issue a certificate and key for NAME, signed by the cluster CA.
    #[command(long_about = CERT_ISSUE_ABOUT, after_long_help = CERT_ISSUE_EXAMPLES)]
    Issue(CertIssue),
    /// Every certificate recorded as issued: serial, holder, role, limits, expiry,
    /// revocation.
    List,
    /// Revoke a certificate by serial number, or every certificate of a holder by name:
    /// every node refuses it at the handshake and closes its live sessions within seconds.
    #[command(after_long_help = CERT_REVOKE_EXAMPLES)]
    Revoke {
        /// A serial number (hex, as `client certificate list` shows it) or a holder's name.
        #[arg(value_name = "NAME|SERIAL")]
        what: String,
    },
}

const CERT_REVOKE_EXAMPLES: &str = "\
EXAMPLES:
  cairn client certificate revoke web1          every certificate issued to web1
  cairn client certificate revoke 5f0c2e...     one certificate, by serial
  cairn client certificate revoke node3         a removed peer's node certificate";

const CERT_ISSUE_ABOUT: &str = "\
Issue a credential (a certificate signed by the cluster CA, with a new private key) for a \
FUSE mount, a libcairn application, a gateway, another admin, or a node joining the \
cluster.

The certificate names its holder (NAME, the subject common name) and states its role and \
limits in a subject-alternative-name URI, e.g. `cairn:role=client;volumes=a,b;ro`. Every \
cairnd checks each request against it: a client may use only the volumes listed (all when \
--volumes is not given) and, with --read-only, change nothing (EROFS); management needs \
--role admin; gateways (--role gateway) may also read gateway documents with their secrets.

Runs locally on a node that holds the cluster CA (the first node of the cluster: \
ca.pem and ca.key in its state dir, or --ca-dir), as root: the CA key is readable by root \
only. The credential file (certificate, CA certificate, key; mode 0600) is what \
mount.cairn, libcairn and the gateways read from --credentials / CAIRN_CREDENTIALS / \
/etc/cairn/credentials.pem. Without --out it is printed on stdout.

The certificate is recorded in the cluster (serial, holder, role, limits, expiry) so that \
`cairn client certificate list` shows it and `cairn client certificate revoke` can revoke \
it; this needs a running cairnd and admin credentials (a warning says when the record \
failed: the certificate can still be revoked by its serial number).";

const CERT_ISSUE_EXAMPLES: &str = "\
EXAMPLES:
  cairn client certificate issue web1 --volumes www --out /tmp/web1.pem
  cairn client certificate issue backup --read-only --days 30 --out backup.pem
  cairn client certificate issue gw1 --role gateway --out /etc/cairn/credentials.pem
  scp /tmp/web1.pem web1:/etc/cairn/credentials.pem";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct CertIssue {
    /// Name of the holder (certificate subject), e.g. a host or application name.
    pub name: String,
    /// Role: client (data only), gateway (data, gateway documents), admin (everything),
    /// node (a cairnd joining the cluster).
    #[arg(long, value_enum, default_value_t = IssueRole::Client)]
    pub role: IssueRole,
    /// Only these volumes (comma separated; roles client and gateway); default: every volume.
    #[arg(long, value_name = "VOLUME,...", value_delimiter = ',')]
    pub volumes: Option<Vec<String>>,
    /// Read-only: the holder may read but not change volume data.
    #[arg(long)]
    pub read_only: bool,
    /// Days the certificate is valid.
    #[arg(long, value_name = "N", default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Write the credential to FILE (mode 0600) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Directory of the cluster CA (ca.pem, ca.key). Default: $CAIRN_CA_DIR, else
    /// /var/lib/cairn.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueRole {
    Client,
    Gateway,
    Admin,
    Node,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum GatewayCmd {
    /// High availability of the gateways (Corosync/Pacemaker; docs/ha.md).
    #[command(subcommand)]
    Ha(GatewayHaCmd),
    /// Fence a gateway in the backend: every cairnd closes the sessions of the gateway's
    /// certificate and refuses their requests (EACCES) until it is unfenced. Pacemaker's
    /// fence agent runs it (appliance/ha/fence_cairn); admin only, audited.
    #[command(long_about = FENCE_ABOUT)]
    Fence(FenceArgs),
    /// Lift a gateway's backend fence (the OCF agent's start, when the gateway rejoins its
    /// cluster): its new sessions are served again. Admin only, audited.
    Unfence(UnfenceArgs),
    /// The gateways' fence records (fenced or not, generation, when, why).
    Fences,
}

const FENCE_ABOUT: &str = "\
Fence a gateway in the backend (docs/ha.md, \"Fencing\").

Stores a fence record for NODE (the common name of the gateway's certificate) with a \
generation one higher than its last. Every cairnd then closes the sessions of that \
gateway (its locks, share reservations and leases go at once) and refuses every later \
request of its sessions with EACCES (\"gateway NODE is fenced (generation N)...\"), so a \
gateway that froze and resumes can neither write stale data nor serve stale reads. \
Pacemaker's fence agent (appliance/ha/fence_cairn) runs it before the power fence; \
`cairn gateway unfence NODE` lifts it.

EXAMPLES:
  cairn gateway fence gw1 --reason 'pacemaker: fenced by gw2'
  cairn --json gateway fences

EXIT STATUS:
  0  the record is stored (NODE is fenced)
  1  cairnd refused or failed (not an admin certificate: EACCES)
  2  bad command line";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct FenceArgs {
    /// The gateway: its certificate's common name (= its Pacemaker node name).
    #[arg(value_name = "NODE")]
    pub node: String,
    /// Why (kept in the record and the audit log).
    #[arg(long, default_value = "")]
    pub reason: String,
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct UnfenceArgs {
    #[arg(value_name = "NODE")]
    pub node: String,
    /// Lift only the fence of this generation (a later fence stays).
    #[arg(long, value_name = "N")]
    pub generation: Option<u64>,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum GatewayHaCmd {
    /// Quorum, fencing, gateways, where each VIP runs, health and failures (from crm_mon
    /// on this gateway), and CTDB's node states and leader where it runs; exit 1 when a
    /// VIP runs nowhere or on two gateways, without quorum, or with a CTDB node unhealthy.
    Status {
        /// The crm_mon program.
        #[arg(long, env = "CAIRN_CRM_MON", value_name = "PROGRAM", default_value = "crm_mon")]
        crm_mon: std::path::PathBuf,
        /// The ctdb program (CTDB's view is shown where ctdbd runs: clustered Samba).
        #[arg(long, env = "CAIRN_CTDB", value_name = "PROGRAM", default_value = "ctdb")]
        ctdb: std::path::PathBuf,
    },
    /// Move a gateway's clients away for maintenance (`pcs node standby NODE`), wait until
    /// its VIPs run on other gateways, and print where each went.
    #[command(long_about = DRAIN_ABOUT)]
    Drain(HaDrainArgs),
    /// Let a drained gateway serve again (`pcs node unstandby NODE`), wait until it is
    /// healthy and the VIPs have settled, and print the VIPs it holds.
    #[command(long_about = UNDRAIN_ABOUT)]
    Undrain(HaDrainArgs),
}

const DRAIN_ABOUT: &str = "\
Move a gateway's clients to the other gateways before maintenance (a planned move).

Puts NODE on standby with `pcs node standby NODE` (Pacemaker then stops every resource \
there: each VIP group blocks its NFS/SMB ports, releases its NFSv4 clients so they \
reclaim on the new holder, removes the address and tickles the clients' connections), \
then watches `crm_mon` until every VIP that ran on NODE runs on exactly one other \
gateway, and prints where each went (`vip1: gw1 -> gw2`). NFS and SMB clients reconnect \
by themselves; with the Linux NFS client and Windows no application sees an error \
(docs/ha.md, \"Planned moves\").

NODE stays on standby (it keeps its cluster membership and quorum vote, serves nothing) \
until `cairn gateway ha undrain NODE`. Run it on any gateway of the cluster, as root \
(pcs and crm_mon talk to the local Pacemaker).

Draining a gateway that holds no VIP only sets standby. Draining the last gateway that \
can serve fails after --timeout with the VIPs that run nowhere (NODE stays on standby: \
undrain it).

EXAMPLES:
  cairn gateway ha drain gw1
  cairn --json gateway ha drain gw1 --timeout 300

EXIT STATUS:
  0  NODE is on standby and its VIPs run elsewhere
  1  pcs or crm_mon failed or is missing, NODE is not a gateway of this cluster, or the \
VIPs had not moved within --timeout
  2  bad command line";

const UNDRAIN_ABOUT: &str = "\
Let a drained gateway serve again.

Runs `pcs node unstandby NODE`, then watches `crm_mon` until NODE is online, not on \
standby and its `cairn-gateway` health check runs, and the VIP placement has settled \
(every VIP on exactly one gateway, unchanged for 3 s); prints the VIPs NODE holds then. \
A VIP that prefers NODE (`vipK` prefers gateway K) moves back to it: that move is a \
planned move too, as short as a drain.

EXAMPLES:
  cairn gateway ha undrain gw1

EXIT STATUS:
  0  NODE serves again
  1  pcs or crm_mon failed or is missing, NODE is not a gateway of this cluster, or it \
was not healthy within --timeout
  2  bad command line";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct HaDrainArgs {
    /// The gateway: its Pacemaker node name, as `cairn gateway ha status` lists it.
    #[arg(value_name = "NODE")]
    pub node: String,
    /// How long to wait for the VIPs to move (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub timeout: u64,
    /// The pcs program.
    #[arg(long, env = "CAIRN_PCS", value_name = "PROGRAM", default_value = "pcs")]
    pub pcs: std::path::PathBuf,
    /// The crm_mon program.
    #[arg(long, env = "CAIRN_CRM_MON", value_name = "PROGRAM", default_value = "crm_mon")]
    pub crm_mon: std::path::PathBuf,
}

const ISCSI_ABOUT: &str = "\
Manage the iSCSI LUNs and targets every gateway exports.

A LUN is a file on a volume (`cairn iscsi lun create` makes it); a target is an IQN with \
portals, the LUNs it maps and the initiators allowed to log in (ACLs, optionally with \
CHAP). Both are kept in the cluster's config store, so all gateways export the same ones \
with the same WWNs (multipath sees one device per LUN). Each gateway applies them to LIO \
with `cairn iscsi sync`, which runs the targetcli-fb commands between the running and the \
wanted configuration; on a gateway (a machine where --conf-dir exists) every change is \
also applied at once.";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(long_about = ISCSI_ABOUT)]
pub struct IscsiArgs {
    /// This gateway's Cairn iSCSI directory (targetcli preferences, applied state).
    #[arg(
        long,
        global = true,
        env = "CAIRN_ISCSI_CONF_DIR",
        value_name = "DIR",
        default_value = "/etc/cairn/iscsi"
    )]
    pub conf_dir: std::path::PathBuf,
    /// The targetcli-fb program.
    #[arg(
        long,
        global = true,
        env = "CAIRN_TARGETCLI",
        value_name = "PROGRAM",
        default_value = "targetcli"
    )]
    pub targetcli: std::path::PathBuf,
    /// This gateway's ALUA target port group tag: give each gateway its own (1, 2, ...),
    /// so initiators see one group per gateway.
    #[arg(
        long,
        global = true,
        env = "CAIRN_ISCSI_ALUA_TAG",
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub alua_tag: u16,
    /// This gateway's name in the config store (`iscsi-gateway/NAME`, what its LIO holds);
    /// default: the host name.
    #[arg(long, global = true, env = "CAIRN_ISCSI_GATEWAY", value_name = "NAME")]
    pub gateway_name: Option<String>,
    #[command(subcommand)]
    pub command: IscsiCmd,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum IscsiCmd {
    /// Create, delete, list and show LUNs (files on volumes).
    #[command(subcommand)]
    Lun(IscsiLunCmd),
    /// Create, delete, list and show targets; their portals, LUN mappings and ACLs.
    #[command(subcommand)]
    Target(IscsiTargetCmd),
    /// Bring this gateway's LIO to the LUNs and targets in the config store.
    #[command(
        long_about = "Read LIO's running configuration (targetcli saveconfig), work out the \
targetcli commands to the configuration in the store, and run them in one targetcli \
process: only what differs changes, so sessions on other targets go on. Only Cairn's \
objects are touched (user:cairn storage objects, Cairn's targets); the result is read back \
and anything targetcli did not apply is an error. --dry-run prints the commands instead \
(CHAP passwords hidden).",
        after_help = "EXAMPLES:\n  cairn iscsi sync\n  cairn iscsi sync --dry-run\n  \
cairn iscsi sync --dry-run --from-saveconfig /etc/target/saveconfig.json\n  \
cairn iscsi sync --watch --alua-tag 2"
    )]
    Sync {
        /// Print the targetcli commands, run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Take the running configuration from this saveconfig.json instead of asking
        /// targetcli (with --dry-run).
        #[arg(long, value_name = "FILE", requires = "dry_run")]
        from_saveconfig: Option<std::path::PathBuf>,
        /// Keep running; apply every change.
        #[arg(long, conflicts_with = "dry_run")]
        watch: bool,
        /// Seconds between checks with --watch.
        #[arg(long, value_name = "SECONDS", default_value_t = 10)]
        interval: u64,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum IscsiLunCmd {
    /// Create a LUN: its backing file on the volume, and its record.
    #[command(
        override_usage = "cairn iscsi lun create NAME --volume VOLUME --size SIZE [--thin] [--file PATH]",
        long_about = "Create LUN NAME: the file PATH (default luns/NAME.img) on VOLUME, SIZE \
bytes long, fully allocated (fallocate) unless --thin, then the LUN's record in the config \
store. Refused, naming the bad part, when the name or size is invalid, the volume does not \
exist or is not started, a LUN of that name exists, or the file already exists. Map it into \
a target with `cairn iscsi target lun add`.",
        after_help = "EXAMPLES:\n  cairn iscsi lun create db --volume vol0 --size 10G\n  \
cairn iscsi lun create scratch --volume vol0 --size 500G --thin\n  \
cairn iscsi lun create vm1 --volume vol0 --size 20G --file vms/vm1.img"
    )]
    Create {
        /// LUN name (1-64 of A-Z a-z 0-9 _ -).
        name: String,
        #[arg(long, value_name = "VOLUME")]
        volume: String,
        /// Bytes, or a number with K, M, G, T (powers of 1024); a multiple of 512.
        #[arg(long, value_name = "SIZE")]
        size: String,
        /// Allocate no space up front (a sparse file).
        #[arg(long)]
        thin: bool,
        /// Backing file from the volume root; default luns/NAME.img.
        #[arg(long, value_name = "PATH")]
        file: Option<String>,
    },
    /// Delete a LUN no target maps, and its backing file once no gateway's LIO holds it
    /// (each gateway's `cairn iscsi sync` lets it go; the last one removes the file).
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi lun delete db\n  cairn iscsi lun delete db --keep-file\n  cairn iscsi lun delete db --force"
    )]
    Delete {
        name: String,
        /// Leave the backing file on the volume (the record goes at once).
        #[arg(long, conflicts_with = "force")]
        keep_file: bool,
        /// Remove the backing file and the record now, even though gateways still list the
        /// LUN (for a gateway that is gone for good).
        #[arg(long)]
        force: bool,
    },
    /// List the LUNs.
    #[command(after_help = "EXAMPLES:\n  cairn iscsi lun list\n  cairn --json iscsi lun list")]
    List,
    /// Show one LUN: its file, size, allocation, config string and targets.
    #[command(after_help = "EXAMPLES:\n  cairn iscsi lun show db")]
    Show { name: String },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum IscsiTargetCmd {
    /// Create a target.
    #[command(
        long_about = "Create target IQN (iqn.YYYY-MM.reversed.domain[:name], eui. or naa.) \
with one portal group listening on each --portal (default 0.0.0.0:3260). Without --open, \
only initiators added with `cairn iscsi target acl add` may log in.",
        after_help = "EXAMPLES:\n  cairn iscsi target create iqn.2024-01.com.example:storage\n  \
cairn iscsi target create iqn.2024-01.com.example:lab --portal 10.0.0.5 --portal 10.0.1.5:3261 --open"
    )]
    Create {
        iqn: String,
        /// IP[:PORT] or [IPv6][:PORT] to listen on (repeatable; default 0.0.0.0:3260).
        #[arg(long = "portal", value_name = "IP[:PORT]")]
        portals: Vec<String>,
        /// Any initiator may log in (no ACLs; LIO's demo mode).
        #[arg(long)]
        open: bool,
    },
    /// Delete a target (its LUNs stay).
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi target delete iqn.2024-01.com.example:storage"
    )]
    Delete { iqn: String },
    /// List the targets.
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi target list\n  cairn --json iscsi target list"
    )]
    List,
    /// Show one target (CHAP passwords hidden unless --show-secrets).
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi target show iqn.2024-01.com.example:storage\n  cairn iscsi target show iqn.2024-01.com.example:storage --show-secrets"
    )]
    Show {
        iqn: String,
        /// Show CHAP passwords too. cairnd hands them only to a node of the cluster (run
        /// this there); anyone else sees them masked.
        #[arg(long)]
        show_secrets: bool,
    },
    /// Add or remove a portal.
    #[command(subcommand)]
    Portal(IscsiPortalCmd),
    /// Map or unmap a LUN.
    #[command(subcommand)]
    Lun(IscsiMapCmd),
    /// Allow or refuse an initiator (with CHAP credentials).
    #[command(subcommand)]
    Acl(IscsiAclCmd),
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum IscsiPortalCmd {
    /// Listen on IP[:PORT] too.
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi target portal add iqn.2024-01.com.example:storage 10.0.0.5"
    )]
    Add {
        iqn: String,
        #[arg(value_name = "IP[:PORT]")]
        portal: String,
    },
    /// Stop listening on IP[:PORT].
    Remove {
        iqn: String,
        #[arg(value_name = "IP[:PORT]")]
        portal: String,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum IscsiMapCmd {
    /// Map LUN NAME into the target as LUN number --lun (default: the lowest free).
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi target lun add iqn.2024-01.com.example:storage db\n  \
cairn iscsi target lun add iqn.2024-01.com.example:storage logs --lun 3"
    )]
    Add {
        iqn: String,
        name: String,
        /// LUN number initiators see (0-255).
        #[arg(long, value_name = "N")]
        lun: Option<u16>,
    },
    /// Unmap LUN NAME from the target.
    Remove { iqn: String, name: String },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum IscsiAclCmd {
    /// Allow initiator INITIATOR (its iSCSI name) to log in, optionally with CHAP.
    #[command(
        after_help = "EXAMPLES:\n  cairn iscsi target acl add iqn.2024-01.com.example:storage iqn.1994-05.com.redhat:host1\n  \
cairn iscsi target acl add iqn.2024-01.com.example:storage iqn.1994-05.com.redhat:host2 --chap-user host2 --chap-password-file /root/host2.chap\n  \
printf '%s' \"$SECRET\" | cairn iscsi target acl add iqn.2024-01.com.example:storage iqn.1994-05.com.redhat:host3 --chap-user host3 --chap-password-file -",
        group = clap::ArgGroup::new("chap_secret").args(["chap_password", "chap_password_file"])
    )]
    Add {
        iqn: String,
        initiator: String,
        /// CHAP user name the initiator presents (needs --chap-password or
        /// --chap-password-file).
        #[arg(long, value_name = "USER", requires = "chap_secret")]
        chap_user: Option<String>,
        /// CHAP secret (12-16 characters for Windows initiators). Visible in the process
        /// list: prefer --chap-password-file.
        #[arg(long, value_name = "SECRET", requires = "chap_user")]
        chap_password: Option<String>,
        /// Read the CHAP secret from FILE (its first line), or from standard input with
        /// `-`, so it is not visible in the process list.
        #[arg(long, value_name = "FILE", requires = "chap_user")]
        chap_password_file: Option<std::path::PathBuf>,
    },
    /// Remove an initiator's ACL.
    Remove { iqn: String, initiator: String },
}

const SMB_ABOUT: &str = "\
Manage the SMB shares every gateway serves.

Shares are kept in the cluster's config store, so all gateways serve the same ones. On a \
gateway (a machine where --conf-dir exists) every change is also rendered into \
CONF_DIR/shares.conf, checked with testparm, and applied to the running smbd with \
`smbcontrol smbd reload-config`, without a restart; other gateways apply it with \
`cairn smb sync`. The main smb.conf must have `include = CONF_DIR/shares.conf` in [global].";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(long_about = SMB_ABOUT)]
pub struct SmbArgs {
    /// This gateway's directory for shares.conf.
    #[arg(
        long,
        global = true,
        env = "CAIRN_SMB_CONF_DIR",
        value_name = "DIR",
        default_value = "/etc/samba/cairn"
    )]
    pub conf_dir: std::path::PathBuf,
    /// This gateway's main smb.conf (for testparm and smbcontrol).
    #[arg(
        long,
        global = true,
        env = "CAIRN_SMB_CONF",
        value_name = "FILE",
        default_value = "/etc/samba/smb.conf"
    )]
    pub smb_conf: std::path::PathBuf,
    #[command(subcommand)]
    pub command: SmbCmd,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum SmbCmd {
    /// Add, remove, list and show shares.
    #[command(subcommand)]
    Share(SmbShareCmd),
    /// Bring this gateway's smbd to the shares in the config store.
    #[command(
        long_about = "Render every share of the config store into CONF_DIR/shares.conf, check \
the configuration with testparm, and make the running smbd reload it. With --watch, keep \
doing so whenever the shares change.",
        after_help = "EXAMPLES:\n  cairn smb sync\n  cairn smb sync --watch"
    )]
    Sync {
        /// Keep running; apply every change.
        #[arg(long)]
        watch: bool,
        /// Seconds between checks with --watch.
        #[arg(long, value_name = "SECONDS", default_value_t = 5)]
        interval: u64,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum SmbShareCmd {
    /// Share a volume, or a directory in it.
    #[command(
        override_usage = "cairn smb share add NAME --volume VOLUME[/SUBDIR] [OPTIONS]",
        long_about = "Share VOLUME (or its directory SUBDIR, which must exist) as \\\\GATEWAY\\NAME. \
The share is checked first (name valid and unused, volume exists and is started, directory \
exists, user list well-formed), then stored and applied.",
        after_help = "EXAMPLES:\n  \
cairn smb share add vol0 --volume vol0\n  \
cairn smb share add projects --volume vol0/projects --users alice,@staff\n  \
cairn smb share add archive --volume vol0/archive --read-only --comment 'Old projects'"
    )]
    Add {
        /// Share name (1-80 characters, not global/homes/printers/ipc$).
        name: String,
        /// VOLUME or VOLUME/SUBDIR.
        #[arg(long, value_name = "VOLUME[/SUBDIR]")]
        volume: String,
        /// Clients may read but not change anything.
        #[arg(long)]
        read_only: bool,
        /// Only these users and @groups may connect (comma-separated); default: every
        /// authenticated user.
        #[arg(long, value_name = "LIST")]
        users: Option<String>,
        /// Description shown to clients.
        #[arg(long, value_name = "TEXT", default_value = "")]
        comment: String,
        /// Do not list the share when clients browse the server.
        #[arg(long)]
        hidden: bool,
    },
    /// Stop sharing.
    #[command(after_help = "EXAMPLES:\n  cairn smb share remove projects")]
    Remove { name: String },
    /// List the shares.
    #[command(after_help = "EXAMPLES:\n  cairn smb share list\n  cairn --json smb share list")]
    List,
    /// Show one share and the smb.conf section it renders to.
    #[command(after_help = "EXAMPLES:\n  cairn smb share show projects")]
    Show { name: String },
}

const NFS_ABOUT: &str = "\
Manage the NFS exports every gateway serves.

Exports are kept in the cluster's config store, so all gateways serve the same ones. On a \
gateway (a machine whose Ganesha config directory, --conf-dir, exists) every change is also \
applied at once to the local Ganesha through its DBus export manager, without a restart; \
other gateways apply it with `cairn nfs sync` (their cairn-nfs-sync service runs \
`cairn nfs sync --watch`). Ganesha's main config must include CONF_DIR/exports.conf.";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(long_about = NFS_ABOUT)]
pub struct NfsArgs {
    /// Ganesha config directory of this gateway (holds exports.conf and exports/).
    #[arg(
        long,
        global = true,
        env = "CAIRN_NFS_CONF_DIR",
        value_name = "DIR",
        default_value = "/etc/ganesha/cairn"
    )]
    pub conf_dir: std::path::PathBuf,
    #[command(subcommand)]
    pub command: NfsCmd,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum NfsCmd {
    /// Add, remove, list and show exports.
    #[command(subcommand)]
    Export(NfsExportCmd),
    /// Bring this gateway's Ganesha to the exports in the config store.
    #[command(
        long_about = "Render every export of the config store into CONF_DIR (one \
exports/export.ID.conf each, listed by exports.conf) and bring the running Ganesha to \
exactly that set over DBus: add new exports, update changed ones, remove the others. If \
Ganesha is not running the files are still written and it serves them when it starts. \
With --watch, keep doing so whenever the exports change.",
        after_help = "EXAMPLES:\n  cairn nfs sync\n  cairn nfs sync --watch --interval 2"
    )]
    Sync {
        /// Keep running; apply every change.
        #[arg(long)]
        watch: bool,
        /// Seconds between checks with --watch.
        #[arg(long, value_name = "SECONDS", default_value_t = 5)]
        interval: u64,
    },
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessArg {
    Rw,
    Ro,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum NfsExportCmd {
    /// Export a volume, or a directory in it.
    #[command(
        override_usage = "cairn nfs export add VOLUME[/SUBDIR] --path /PSEUDO --clients SPEC [OPTIONS]",
        long_about = "Export VOLUME (or its directory SUBDIR, which must exist) at pseudo \
path PSEUDO: NFSv4 clients mount SERVER:/PSEUDO, NFSv3 clients mount the same path. The \
export is checked first (volume exists and is started, directory exists, pseudo path and \
id unused, client list well-formed) and then stored and applied; if the local Ganesha \
still refuses it, it is removed again and the other exports are untouched.",
        after_help = "EXAMPLES:\n  \
cairn nfs export add vol0 --path /vol0 --clients '*'\n  \
cairn nfs export add vol0/projects --path /projects --clients 10.0.0.0/24,backup1 --access ro\n  \
cairn nfs export add vol0 --path /vol0-root --clients 10.0.0.5 --squash no_root_squash\n  \
cairn nfs export add vol0 --path /vol0 --clients '*' --pnfs --ds-addrs n1=10.0.0.11:2049,n2=10.0.0.12:2049"
    )]
    Add {
        /// VOLUME or VOLUME/SUBDIR.
        #[arg(value_name = "VOLUME[/SUBDIR]")]
        target: String,
        /// Pseudo path clients mount (absolute, unique).
        #[arg(long = "path", value_name = "/PSEUDO")]
        pseudo: String,
        /// Who may mount: '*', addresses, ADDRESS/PREFIXLEN networks, host names
        /// (wildcards allowed), @netgroups; comma-separated.
        #[arg(long, value_name = "SPEC")]
        clients: String,
        /// Read-write or read-only.
        #[arg(long, value_enum, default_value_t = AccessArg::Rw)]
        access: AccessArg,
        /// root_squash (root becomes the anonymous user), no_root_squash, all_squash.
        #[arg(long, value_name = "MODE", default_value = "root_squash")]
        squash: String,
        /// uid squashed callers get.
        #[arg(long, value_name = "UID", default_value_t = 65534)]
        anon_uid: u32,
        /// gid squashed callers get.
        #[arg(long, value_name = "GID", default_value_t = 65534)]
        anon_gid: u32,
        /// NFS versions: 3, 4 or 3,4.
        #[arg(long, value_name = "LIST", default_value = "3,4")]
        protocols: String,
        /// NFSv4 delegations the gateway may grant: none, read, write or readwrite. Each is
        /// held as a backend delegation, recalled when any other client of the volume
        /// (another gateway, a FUSE mount, SMB) needs the file.
        #[arg(long, value_name = "KIND", default_value = "readwrite")]
        delegations: String,
        /// pNFS: hand out NFSv4.1 FILES layouts so that clients read and write at the
        /// brick nodes' data servers (a Ganesha with FSAL_CAIRN in DS mode on each).
        #[arg(long)]
        pnfs: bool,
        /// With --pnfs: where each brick node's DS listens, NODE=IPV4:PORT, comma-separated
        /// (a node not listed: its cairnd's host, port 2049).
        #[arg(long, value_name = "LIST", requires = "pnfs")]
        ds_addrs: Option<String>,
        /// Export id (1-65535); the lowest free one by default.
        #[arg(long, value_name = "ID")]
        id: Option<u16>,
    },
    /// Stop exporting (by pseudo path or export id).
    #[command(
        after_help = "EXAMPLES:\n  cairn nfs export remove /projects\n  cairn nfs export remove 3"
    )]
    Remove {
        #[arg(value_name = "/PSEUDO|ID")]
        export: String,
    },
    /// List the exports.
    #[command(after_help = "EXAMPLES:\n  cairn nfs export list\n  cairn --json nfs export list")]
    List,
    /// Show one export and the Ganesha EXPORT block it renders to.
    #[command(
        after_help = "EXAMPLES:\n  cairn nfs export show /vol0\n  cairn --json nfs export show 1"
    )]
    Show {
        #[arg(value_name = "/PSEUDO|ID")]
        export: String,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PeerCmd {
    /// Add a node to the trusted storage pool, using up a join token.
    #[command(
        long_about = "Add the node whose cairnd listens at HOST[:PORT] to the trusted storage \
pool of the node cairn talks to. A node joins with a join token (`cairn peer token create`): \
single use, expiring; a used, revoked or expired one is refused. Probing a node that is \
already a peer needs no token, and succeeds and says so.",
        after_help = "EXAMPLES:\n  T=$(cairn peer token create --ttl 1h)\n  cairn peer probe node2 --token \"$T\"\n  CAIRN_JOIN_TOKEN=\"$T\" cairn peer probe 10.0.0.12:7420"
    )]
    Probe {
        /// The node's cairnd address; port 7420 when omitted.
        #[arg(value_name = "HOST[:PORT]")]
        peer: String,
        /// Join token (ID.SECRET) from `cairn peer token create`.
        #[arg(long, env = "CAIRN_JOIN_TOKEN", value_name = "TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Join tokens: create (shown once), list (never the secret), revoke.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Remove a node from the trusted storage pool.
    #[command(
        long_about = "Remove the peer NAME from the pool. cairnd refuses while the peer holds \
bricks of a volume or is unreachable, unless `force` is given. On a terminal cairn asks for \
confirmation first (see --mode=script, --yes).",
        after_help = "EXAMPLES:\n  cairn peer detach node3\n  cairn --mode=script peer detach node3 force"
    )]
    Detach {
        /// Peer name as shown by `cairn peer status`.
        name: String,
        /// Detach even if the peer is down or holds bricks.
        #[arg(value_enum)]
        force: Option<Force>,
    },
    /// Show the other peers of the pool and whether they are connected.
    #[command(after_help = "EXAMPLES:\n  cairn peer status\n  cairn --json peer status")]
    Status,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum TokenCmd {
    /// Create a single-use join token and print it (only this once).
    #[command(
        long_about = "Create a join token for one node to join the pool (`cairn peer probe \
HOST --token TOKEN`, or the new node's cairnd started with --join-token-file). It is printed \
once on stdout; the cluster keeps only its hash. It expires after --ttl (default 24h, at most \
7 days) and is used up by the first join.",
        after_help = "EXAMPLES:\n  cairn peer token create\n  cairn peer token create --ttl 1h\n  cairn --json peer token create --ttl 30m"
    )]
    Create {
        /// Lifetime: seconds, or a number with s, m, h or d.
        #[arg(long, default_value = "24h", value_name = "DURATION")]
        ttl: String,
    },
    /// List join tokens: id, expiry, and whether used or revoked (never the secret).
    #[command(after_help = "EXAMPLES:\n  cairn peer token list\n  cairn --json peer token list")]
    List,
    /// Revoke a join token by its id (the part before the dot).
    #[command(after_help = "EXAMPLES:\n  cairn peer token revoke 1a2b3c4d")]
    Revoke {
        #[arg(value_name = "ID")]
        id: String,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum AuditCmd {
    /// Show the audit log of management actions of the node cairn talks to.
    #[command(
        long_about = "Show the management actions the node recorded (who, what, when, result), \
oldest first: every change, and every request refused for want of rights. Read only from \
the node itself or another node of the cluster.",
        after_help = "EXAMPLES:\n  cairn audit log\n  cairn audit log --since 1h\n  cairn --json audit log --limit 10"
    )]
    Log {
        /// Only records of the last DURATION (s, m, h, d), or since Unix time N.
        #[arg(long, value_name = "DURATION|UNIX")]
        since: Option<String>,
        /// At most this many records (the newest).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PoolCmd {
    /// List every node of the pool, this one included.
    #[command(after_help = "EXAMPLES:\n  cairn pool list\n  cairn --json pool list")]
    List,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum VolumeCmd {
    /// Create a volume from bricks.
    #[command(
        override_usage = "cairn volume create NAME [replica N] HOST:/PATH... [force]",
        long_about = "Create volume NAME from the given bricks (directories on peers). With \
`replica N` (N from 1 to 3, default 1) consecutive groups of N bricks form a replica set, so \
the brick count must be a multiple of N; files are distributed over the sets. cairn refuses \
bricks of one replica set on the same host (no fault tolerance) and non-empty brick \
directories unless `force` is given last. The volume is created stopped: start it with \
`cairn volume start NAME`.\n\nVolume names are 1 to 64 characters of A-Z a-z 0-9 _ - \
(and not `all`). Brick paths must be absolute.",
        after_help = "EXAMPLES:\n  \
cairn volume create vol0 node1:/bricks/b1\n  \
cairn volume create vol0 replica 3 node1:/bricks/b1 node2:/bricks/b1 node3:/bricks/b1\n  \
cairn volume create vol0 replica 2 n1:/b/1 n2:/b/1 n3:/b/1 n4:/b/1\n  \
cairn volume create test replica 2 localhost:/b/1 localhost:/b/2 force"
    )]
    Create {
        /// Name of the new volume.
        name: String,
        /// `[replica N] HOST:/PATH... [force]`
        #[arg(value_name = "ARGS", required = true, num_args = 1.., allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Start a volume: bring its bricks online.
    #[command(
        long_about = "Start volume NAME: every node starts serving its bricks. `force` also \
restarts bricks that are down on a volume that is already started.",
        after_help = "EXAMPLES:\n  cairn volume start vol0\n  cairn volume start vol0 force"
    )]
    Start {
        name: String,
        /// Start even if already started (restarts bricks that are down).
        #[arg(value_enum)]
        force: Option<Force>,
    },
    /// Stop a volume: its data becomes inaccessible.
    #[command(
        long_about = "Stop volume NAME: bricks stop serving and clients lose access. On a \
terminal cairn asks for confirmation first (see --mode=script, --yes). `force` stops even \
when some bricks cannot be reached.",
        after_help = "EXAMPLES:\n  cairn volume stop vol0\n  cairn --mode=script volume stop vol0 force"
    )]
    Stop {
        name: String,
        /// Stop even if some bricks cannot be reached.
        #[arg(value_enum)]
        force: Option<Force>,
    },
    /// Delete a stopped volume (brick directories are left in place).
    #[command(
        long_about = "Delete volume NAME from the cluster configuration. The volume must be \
stopped. Brick directories and their data stay on disk. On a terminal cairn asks for \
confirmation first (see --mode=script, --yes); `force` is accepted for symmetry with \
start/stop and also skips the question.",
        after_help = "EXAMPLES:\n  cairn volume delete vol0\n  cairn --yes volume delete vol0"
    )]
    Delete {
        name: String,
        /// Do not ask for confirmation.
        #[arg(value_enum)]
        force: Option<Force>,
    },
    /// Show the configuration of one volume or of all.
    #[command(
        override_usage = "cairn volume info [NAME|all]",
        after_help = "EXAMPLES:\n  cairn volume info\n  cairn volume info vol0\n  cairn --json volume info all"
    )]
    Info {
        /// Volume name; `all` or nothing for every volume.
        name: Option<String>,
    },
    /// Show the bricks of one volume or of all: port, online, pid, pending heals.
    #[command(
        override_usage = "cairn volume status [NAME|all]",
        after_help = "EXAMPLES:\n  cairn volume status vol0\n  cairn --json volume status"
    )]
    Status {
        /// Volume name; `all` or nothing for every volume.
        name: Option<String>,
    },
    /// List volume names.
    #[command(after_help = "EXAMPLES:\n  cairn volume list\n  cairn --json volume list")]
    List,
    /// Set a volume option.
    #[command(
        long_about = "Set option KEY of volume NAME to VALUE. cairnd checks the key and the \
value; options in effect are shown under \"Options Reconfigured\" by `cairn volume info`.\n\n\
auth.allow / auth.reject: comma-separated client addresses that may / may not use the \
volume (reject wins): `*`, IPv4 with `*` octets (192.168.1.*, 10.1.*), IPv6, or CIDR \
(10.0.0.0/24). Matched against the client's connection address on every request; \
default auth.allow `*` (every address). Host names are not matched.",
        after_help = "EXAMPLES:\n  cairn volume set vol0 performance.cache-timeout 5\n  \
cairn volume set vol0 auth.allow 127.0.0.1,10.1.*,10.0.0.0/24\n  \
cairn volume set vol0 auth.reject 10.1.0.7"
    )]
    Set { name: String, key: String, value: String },
    /// Reset a volume option to its default.
    #[command(
        after_help = "EXAMPLES:\n  cairn volume reset vol0 auth.allow\n  cairn volume reset vol0 all"
    )]
    Reset { name: String, key: String },
    /// Self-heal: pending entries, crawl statistics, or a full crawl.
    #[command(
        override_usage = "cairn volume heal NAME info|statistics|full",
        long_about = "`cairn volume heal NAME info` lists, for each brick of the volume, the \
entries (inode ids) it holds for replicas that were away and still need to copy them.\n\n\
`statistics` shows, per brick, the running heal crawl (if any) and the last finished crawl \
of each type (index, full): start and end time, entries scanned, healed and failed, data \
copied, the time lost to `cluster.heal-bandwidth`, and a full crawl's position.\n\n\
`full` starts a full crawl on every brick: each walks the whole tree and copies every inode \
from its chain head, even inodes no pending index names. The request survives a restart \
of cairnd, and the crawl continues from the position it saved (about once a second). \
Crawls copy `cluster.heal-parallelism` inodes at a time per brick (volume option, default \
4) and at most `cluster.heal-bandwidth` bytes of file data per second per brick (e.g. \
`10M`; default 0 = unlimited).",
        after_help = "EXAMPLES:\n  cairn volume heal vol0 info\n  cairn --json volume heal vol0 info\n  \
cairn volume heal vol0 full\n  cairn volume heal vol0 statistics"
    )]
    Heal {
        name: String,
        #[arg(value_enum)]
        action: HealAction,
    },
    /// Re-initialise a brick whose disk was replaced, rebuilt from its replicas.
    #[command(
        name = "reset-brick",
        override_usage = "cairn volume reset-brick NAME HOST:/PATH start\n       \
cairn volume reset-brick NAME HOST:/PATH HOST:/PATH commit [force]",
        long_about = "Replace the disk under a brick, keeping its place in the volume.\n\n\
`start` takes the brick out of service: its node closes it and it shows down (writes go on \
on its replicas, which record what it misses). Replace or empty the disk, then `commit` \
(naming the same brick twice, as gluster does) makes the empty directory that brick again \
(marker and volume id), marks it stale in the config store and owes it a full heal: it \
serves nothing until every inode of its replica set was copied onto it from the inode's \
chain head, then turns up. `commit force` also accepts a directory that still holds this \
brick's old copy (it is brought up to date the same way) or any non-empty directory.\n\n\
A brick whose directory was emptied behind cairnd's back is never served: its node refuses \
to open it (\"not a brick\") until this command re-initialises it.",
        after_help = "EXAMPLES:\n  cairn volume reset-brick vol0 node2:/bricks/b1 start\n  \
cairn volume reset-brick vol0 node2:/bricks/b1 node2:/bricks/b1 commit\n  \
cairn volume heal vol0 statistics"
    )]
    ResetBrick {
        name: String,
        /// `HOST:/PATH start` or `HOST:/PATH HOST:/PATH commit [force]`
        #[arg(value_name = "ARGS", required = true, num_args = 2..=4)]
        args: Vec<String>,
    },
    /// Move a brick to a new, empty directory, rebuilt from its replicas.
    #[command(
        name = "replace-brick",
        override_usage = "cairn volume replace-brick NAME OLD-HOST:/PATH NEW-HOST:/PATH commit force",
        long_about = "Give brick OLD's place in the volume to the empty directory NEW (on any \
peer): OLD is closed, NEW is prepared, marked stale and rebuilt by a full heal from the \
other bricks of its replica set before it serves. Only `commit force` exists, as in \
gluster. OLD's directory is left as it is.",
        after_help = "EXAMPLES:\n  cairn volume replace-brick vol0 node2:/bricks/b1 node4:/bricks/b1 commit force"
    )]
    ReplaceBrick {
        name: String,
        old: String,
        new: String,
        /// `commit`
        commit: String,
        /// `force`
        force: String,
    },
    /// Grow a live volume by whole replica sets; new files use them at once.
    #[command(
        name = "add-brick",
        override_usage = "cairn volume add-brick NAME [replica N] HOST:/PATH... [force]",
        long_about = "Add whole replica sets to volume NAME while it serves: consecutive groups of the volume's replica count (`replica N`, if given, must equal it) form the new sets, so the brick count must be a multiple of it. Each brick is checked and prepared on its node like `volume create` does, and the volume's directories are made on the new sets (same ids, owners, modes, times and xattrs). Then the layout changes: the layout epoch moves, new names hash over the new sets too, and creates whose names hash there go there at once, with no fix-layout step. Existing files stay where they are and are still found (the volume is `rebalancing`: a name missed on the set it hashes to is looked up on the others) until a rebalance moves them. Clients with an older layout are refused by the bricks and catch up.

Refused, with nothing changed: a wrong number of bricks, a brick already in a volume (this one or another), a host that is not a peer or is down, a stopped volume (start it first), and, unless `force` is given last, two bricks of one new set on the same host, a non-empty brick directory, or a brick on its node's root filesystem (as gluster refuses).",
        after_help = "EXAMPLES:\n  \
cairn volume add-brick vol0 node3:/bricks/b1 node4:/bricks/b1\n  \
cairn volume add-brick vol0 replica 2 n1:/b/2 n2:/b/2 n3:/b/2 n4:/b/2\n  \
cairn --json volume info vol0   # layout_epoch, rebalancing"
    )]
    AddBrick {
        /// Name of the volume to grow.
        name: String,
        /// `[replica N] HOST:/PATH... [force]`
        #[arg(value_name = "ARGS", required = true, num_args = 1.., allow_hyphen_values = true)]
        args: Vec<String>,
    },
}
