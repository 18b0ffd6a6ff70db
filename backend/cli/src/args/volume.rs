//! `cairn volume`: create, start, stop, delete, inspect, heal, tune and grow volumes.

use super::{Force, HealAction};
use clap::Subcommand;

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
    /// Shrink a live volume by whole replica sets: drain them, then drop them.
    #[command(
        name = "remove-brick",
        override_usage = "cairn volume remove-brick NAME HOST:/PATH... start|status|stop|commit [force]",
        long_about = "Take whole replica sets out of volume NAME while it serves (the bricks given must be every brick of each set, in any order).

`start` takes the sets out of the layout at once (a new layout epoch: new files never go to them; what they hold is still found) and runs a rebalance on every node with bricks that moves every regular file off them, keeping its id, so NFS handles, SMB file ids and inode numbers stay valid. It holds the volume's layout lock like add-brick; the runs are resumable like a rebalance's (a node restarting picks up its run). `start` again for the same bricks runs the moves again (for files skipped as open, locked or with hard links).

`status` shows, per node, the files and bytes moved, the files and bytes still on the draining sets, skipped files and failures (`--json` for the document). `stop` ends the runs and puts the sets back in the layout (files moved off stay where they are).

`commit` drops the sets from the volume once they hold no file; it is refused, with the number of files and bytes left, while any file is left or a run is active. `commit force` drops them whatever they hold (those files leave the volume). Ids of files that lived on a removed set keep working: before the sets go, the volume's first remaining set gets a forwarding stub for each. The bricks' directories are left on disk.",
        after_help = "EXAMPLES:\n  cairn volume remove-brick vol0 node3:/bricks/b1 node4:/bricks/b1 start\n  \
cairn volume remove-brick vol0 node3:/bricks/b1 node4:/bricks/b1 status\n  \
cairn --json volume remove-brick vol0 node3:/bricks/b1 node4:/bricks/b1 status\n  \
cairn volume remove-brick vol0 node3:/bricks/b1 node4:/bricks/b1 commit"
    )]
    RemoveBrick {
        /// Name of the volume to shrink.
        name: String,
        /// `HOST:/PATH... start|status|stop|commit [force]`
        #[arg(value_name = "ARGS", required = true, num_args = 2.., allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Move files to the replica sets their names hash to after add-brick.
    #[command(
        name = "rebalance",
        override_usage = "cairn volume rebalance NAME start [--throttle lazy|normal|aggressive]\n       cairn volume rebalance NAME status|stop|pause|resume",
        long_about = "After `add-brick`, names hash over the new replica sets too, but existing files stay where they were (the volume is `rebalancing`: lookups ask every set). `start` runs on every node with bricks of the volume: each node moves every regular file whose chain head is one of its bricks and whose name now hashes to another set. A file is fenced (writes to it wait a moment), copied to the new set with its data, xattrs, owner, mode and times, named there, and its old place turned into a forwarding stub. Its inode number, NFS handle, SMB file id and open descriptors stay valid: an operation by id at the old set is answered with the set the file moved to, and the client goes there.

Each node keeps a progress record in etcd (where its walk is; files and bytes scanned, moved, skipped, failed; its throttle), written about once a second. `status` reads them: one row per node, with the rate and an estimated time left, a node that is down included. A node whose cairnd restarts, or that comes back after a failure, resumes its run from the record, not from the start; a paused run stays paused.

`--throttle lazy` moves one file at a time per node and pauses between files as long as the move took; `normal` (the default) moves 4 files at a time, `aggressive` 16. `pause` and `resume` act after the files in flight. `stop` ends the runs (a node that is down has its record marked stopped); files moved stay moved, and `start` again walks from the beginning, skipping what is in place.

Files that are open (unlinked while open), locked, hold share reservations or delegations, or have hard links are skipped and counted; run `start` again later. When every node's run ends with nothing skipped or failed, the volume stops `rebalancing`. A rebalance running or paused refuses `add-brick`, and `start` and `add-brick` each take the volume's layout lock in etcd: one layout change at a time.",
        after_help = "EXAMPLES:\n  cairn volume rebalance vol0 start\n  cairn volume rebalance vol0 start --throttle lazy\n  cairn volume rebalance vol0 status\n  cairn --json volume rebalance vol0 status\n  cairn volume rebalance vol0 pause\n  cairn volume rebalance vol0 resume\n  cairn volume rebalance vol0 stop"
    )]
    Rebalance {
        /// Name of the volume.
        name: String,
        #[arg(value_enum)]
        action: super::RebalanceAction,
        /// With `start`: files moved at a time per node (lazy 1 with pauses, normal 4, aggressive 16).
        #[arg(long, value_enum)]
        throttle: Option<super::RebalanceThrottle>,
    },
}
