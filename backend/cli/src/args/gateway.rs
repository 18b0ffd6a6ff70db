//! `cairn gateway`: fencing and the gateways' Pacemaker cluster (`ha status|drain|undrain`).

use super::ha_setup::HaSetupArgs;
use clap::Subcommand;

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

With --wait-applied SECS (the fence agent's way), it then waits until every live cairnd \
(a node whose lease in etcd is alive) reports in fence-applied/<node> that it applied \
this generation, and fails with exit 4, naming the nodes, when one has not after SECS. \
A node whose lease expired serves nothing and is not waited for.

EXAMPLES:
  cairn gateway fence gw1 --reason 'pacemaker: fenced by gw2' --wait-applied 10
  cairn --json gateway fences

EXIT STATUS:
  0  the record is stored (NODE is fenced; with --wait-applied: by every live cairnd)
  1  cairnd refused or failed (not an admin certificate: EACCES)
  2  bad command line
  3  cairnd could not be reached
  4  with --wait-applied: stored, but a live cairnd did not apply it in time";

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct FenceArgs {
    /// The gateway: its certificate's common name (= its Pacemaker node name).
    #[arg(value_name = "NODE")]
    pub node: String,
    /// Why (kept in the record and the audit log).
    #[arg(long, default_value = "")]
    pub reason: String,
    /// After storing the record, wait up to SECS until every live cairnd reports that it
    /// applied this generation (closed the gateway's sessions); exit 4 if one did not.
    #[arg(long, value_name = "SECS")]
    pub wait_applied: Option<u64>,
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
    /// Form the gateways' Pacemaker cluster (pcs) or take the running one, render this
    /// gateway's Ganesha HA config and load the HA resources, fencing on; checks the timeout
    /// budget first. Idempotent.
    #[command(long_about = super::ha_setup::SETUP_ABOUT)]
    Setup(Box<HaSetupArgs>),
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
