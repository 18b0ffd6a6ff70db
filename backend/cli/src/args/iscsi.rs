//! `cairn iscsi`: LUNs, targets, portals, LUN maps and initiator ACLs.

use clap::Subcommand;

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
