//! `cairn smb`: SMB shares.

use clap::Subcommand;

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
