//! The command line, declared with clap. Words that gluster treats as keywords inside a
//! command (`replica N`, `force`, `info`) are plain positionals here and are checked by
//! [`crate::grammar`], so the grammar stays exactly gluster's.

mod certs;
mod gateway;
mod ha_setup;
mod iscsi;
mod nfs;
mod pool;
mod smb;
mod volume;

pub use certs::*;
pub use gateway::*;
pub use ha_setup::{HaNodeAddr, HaSetupArgs};
pub use iscsi::*;
pub use nfs::*;
pub use pool::*;
pub use smb::*;
pub use volume::*;

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

/// What `volume rebalance NAME` does.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceAction {
    /// Start a run on every node with bricks: each moves the files its bricks head to the sets their names hash to.
    Start,
    /// Progress of each node's run: files scanned, moved (and bytes), skipped, failed, rate, ETA.
    Status,
    /// Stop the runs after the files they are moving; moved files stay moved.
    Stop,
    /// Pause the runs after the files they are moving (kept across a restart of cairnd).
    Pause,
    /// Resume paused runs where they stopped.
    Resume,
}

/// How hard `volume rebalance NAME start` works.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceThrottle {
    /// One file at a time per node, pausing between files as long as the move took.
    Lazy,
    /// 4 files in flight per node.
    Normal,
    /// 16 files in flight per node.
    Aggressive,
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
