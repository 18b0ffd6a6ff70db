//! `cairn nfs`: NFS exports.

use clap::{Subcommand, ValueEnum};

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
With --watch, keep doing so whenever the exports change. With --ds, CONF_DIR belongs to a \
brick node's pNFS data server, which gets a DS block of each pNFS export instead.",
        after_help = "EXAMPLES:\n  cairn nfs sync\n  cairn nfs sync --watch --interval 2\n  \
CAIRN_NFS_CONF_DIR=/etc/ganesha/cairn-ds cairn nfs sync --watch --ds"
    )]
    Sync {
        /// Keep running; apply every change.
        #[arg(long)]
        watch: bool,
        /// Seconds between checks with --watch.
        #[arg(long, value_name = "SECONDS", default_value_t = 5)]
        interval: u64,
        /// This is a brick node's pNFS data server (a Ganesha in DS mode), not a gateway:
        /// serve each pNFS export's data under its export id (FSAL_CAIRN `DS = true`); the
        /// other exports are not served.
        #[arg(long)]
        ds: bool,
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
cairn nfs export add vol0 --path /vol0 --clients '*' --pnfs --ds-addrs n1=10.0.0.11:2049,n2=10.0.0.12:2049\n  \
cairn nfs export add vol0 --path /vol0ff --clients '*' --pnfs flexfiles"
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
        /// pNFS: hand out layouts so that clients read and write at the brick nodes' data
        /// servers (a Ganesha with FSAL_CAIRN in DS mode on each): `files` (NFSv4.1 FILES,
        /// the default when no value is given) or `flexfiles` (Flexible Files, the replica
        /// set as mirrors).
        #[arg(
            long,
            value_name = "LAYOUT",
            num_args = 0..=1,
            default_missing_value = "files",
            value_parser = ["files", "flexfiles"]
        )]
        pnfs: Option<String>,
        /// With --pnfs: where each brick node's DS listens, NODE=IPV4:PORT, comma-separated
        /// (a node not listed: its cairnd's host, port 20490, the DS port of the appliance and
        /// `make up`).
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
