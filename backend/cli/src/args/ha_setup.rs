//! `cairn gateway ha setup`: its command line (what it does: `crate::ha::setup`).

use std::path::PathBuf;

pub(super) const SETUP_ABOUT: &str = "\
Form the gateways' Pacemaker cluster and configure Cairn's HA resources on it (docs/ha.md, \
\"Setting it up\").

Run it as root on each gateway, one gateway at a time, with the same arguments (the \
Ansible role `ha` does). In order, it:

  1. checks the timeout budget (below) and refuses a configuration that breaks it, naming \
the values (--force overrides);
  2. forms the cluster: when no Pacemaker runs here, `pcs host auth` (user hacluster, \
password from --password-file), `pcs cluster setup NAME NODE addr=ADDRESS... totem \
token=--token-ms`, `pcs cluster start --all --wait`, `pcs cluster enable --all`. When a \
cluster already runs here it is taken as it is, if its nodes are exactly the --node names \
(otherwise it stops, naming both lists); its corosync token is read for the budget;
  3. renders this gateway's Ganesha HA configuration (ganesha-ha-conf: recovery records on \
the volume, lease and grace) into --ganesha-conf, when it differs (restart Ganesha to load \
a changed one: it says so);
  4. sets stonith-enabled=true and no-quorum-policy=stop (fencing is never off: a cluster \
without a fence device, in --fencing or already in the CIB, is refused before anything \
changes), renders the resources and constraints (cib-resources: the cairn-gateway health clone, \
one VIP group per gateway, the fence devices of --fencing) and loads them with cibadmin: \
created when absent, replaced when they differ, left alone when equal; the fencing \
topology of --fencing-topology likewise;
  5. waits (--wait) until every VIP runs on exactly one gateway.

A second run with the same arguments changes nothing and says so (`changed: false` in \
--json). The pcs steps need pcsd running on every gateway and the hacluster password set \
on each (the `ha` role does both).

TIMEOUT BUDGET (checked before anything is changed):
  backend failure detection (--backend-detection, 10 s: cairnd's node lease 6 s, the \
client's connection watchdog 10 s) must be shorter than the gateway health check's \
backend timeout (--backend-timeout, 15 s), so a backend failover never looks like a dead \
gateway; and the worst gateway failover, corosync token + consensus (1.2 x token unless \
set) + fencing (--fence-timeout) + the VIP group's start (5 s) + the NFSv4 grace period \
(--grace) + Ganesha's grace check (--lease / 2), must be shorter than the clients' I/O \
timeout (--client-timeout, 60 s: the Linux NFS client's timeo=600, Windows' SessTimeout), \
so clients wait for the move instead of failing. The lease must be at least 10 s and the \
grace at least the lease (ganesha-ha-conf's rules).

EXAMPLES:
  cairn gateway ha setup --node gw1=10.0.0.21 --node gw2=10.0.0.22 \\
      --vip 10.0.0.31 --vip 10.0.0.32 --nic eth0 --volume vol0 \\
      --servers 10.0.0.11:7420,10.0.0.12:7420 --fencing /etc/cairn/ha/fencing.xml \\
      --password-file /etc/cairn/ha/hacluster.password
  cairn --json gateway ha setup ...   (what it did, and the budget)

EXIT STATUS:
  0  the cluster is set up (or was already)
  1  a step failed (pcs, cibadmin, crm_attribute, a renderer), the running cluster's \
nodes differ from --node, no fence device, or the VIPs did not settle within --wait
  2  bad command line, or the timeout budget is broken (without --force)";

/// A gateway: its Pacemaker node name and the address corosync uses for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaNodeAddr {
    pub name: String,
    pub addr: String,
}

pub(super) fn parse_node_addr(s: &str) -> Result<HaNodeAddr, String> {
    let (name, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not NAME=ADDRESS (e.g. gw1=10.0.0.21)"))?;
    let ok_name = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if !ok_name {
        return Err(format!("'{name}' is not a node name (letters, digits, '-', '_', '.')"));
    }
    if addr.is_empty() || addr.contains(char::is_whitespace) || addr.contains(',') {
        return Err(format!("'{addr}' is not an address of node {name}"));
    }
    Ok(HaNodeAddr { name: name.into(), addr: addr.into() })
}

pub(super) fn parse_ipv4(s: &str) -> Result<String, String> {
    s.parse::<std::net::Ipv4Addr>()
        .map(|a| a.to_string())
        .map_err(|_| format!("'{s}' is not an IPv4 address"))
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct HaSetupArgs {
    /// A gateway, NAME=ADDRESS (its Pacemaker node name and corosync address); once per
    /// gateway, at least two. The Kth gateway is the home of the Kth --vip.
    #[arg(long = "node", value_name = "NAME=ADDRESS", required = true, value_parser = parse_node_addr)]
    pub nodes: Vec<HaNodeAddr>,
    /// A virtual IP (IPv4), once per gateway, in the order of --node.
    #[arg(long = "vip", value_name = "ADDRESS", required = true, value_parser = parse_ipv4)]
    pub vips: Vec<String>,
    /// The VIPs' netmask length.
    #[arg(long, value_name = "BITS", default_value_t = 24, value_parser = clap::value_parser!(u8).range(1..=32))]
    pub cidr: u8,
    /// The interface the VIPs go on (default: the one IPaddr2 finds for the subnet).
    #[arg(long, value_name = "NIC")]
    pub nic: Option<String>,
    /// The volume the gateways serve (health check, NFSv4 recovery records).
    #[arg(long, value_name = "VOLUME")]
    pub volume: String,
    /// cairnd addresses, HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT,...")]
    pub servers: String,
    /// The cluster's name (pcs cluster setup).
    #[arg(long, value_name = "NAME", default_value = "cairn-gw")]
    pub cluster_name: String,
    /// Where the gateways' mount of the volume keeps the HA state (NFSv4 recovery records).
    #[arg(long, value_name = "DIR", default_value = "/srv/cairn-ha/.cairn-ha")]
    pub recovery_root: PathBuf,
    /// Clustered Samba (CTDB) on the gateways too: the health check covers smbd and CTDB,
    /// and the VIPs block and tickle 445.
    #[arg(long)]
    pub smb: bool,
    /// XML of the stonith primitives (fence_aws, fence_sbd, fence_cairn...), loaded with
    /// the resources.
    #[arg(long, value_name = "FILE")]
    pub fencing: Option<PathBuf>,
    /// XML of a <fencing-topology> (e.g. fence_cairn then the power fence per gateway).
    #[arg(long, value_name = "FILE")]
    pub fencing_topology: Option<PathBuf>,
    /// An admin credential the health clone lifts this gateway's backend fence with when
    /// it rejoins (backend fencing, docs/ha.md).
    #[arg(long, value_name = "FILE")]
    pub unfence_credentials: Option<PathBuf>,
    /// With --unfence-credentials: what restarts the gateway's daemons around the unfence.
    #[arg(long, value_name = "CMD")]
    pub services_ctl: Option<String>,
    /// Where this gateway's Ganesha configuration is written.
    #[arg(long, value_name = "FILE", default_value = "/etc/ganesha/ganesha.conf")]
    pub ganesha_conf: PathBuf,
    /// Ganesha's FSAL plugin directory, when not the packaged one.
    #[arg(long, value_name = "DIR")]
    pub ganesha_plugins: Option<PathBuf>,
    /// The hacluster password for `pcs host auth` (only read when the cluster is formed).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// corosync's token timeout for a new cluster (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub token_ms: u64,
    /// NFSv4 Lease_Lifetime (seconds, at least 10).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub lease: u64,
    /// NFSv4 Grace_Period (seconds, at least the lease; default: the lease).
    #[arg(long, value_name = "SECS")]
    pub grace: Option<u64>,
    /// How long the backend takes to detect a failure and fail over (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub backend_detection: u64,
    /// How long the gateway health check waits for the backend (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 15)]
    pub backend_timeout: u64,
    /// How long fencing a gateway may take (seconds): fence_cairn's apply_timeout plus the
    /// power fence.
    #[arg(long, value_name = "SECS", default_value_t = 15)]
    pub fence_timeout: u64,
    /// The clients' I/O timeout (seconds) the failover must stay under.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub client_timeout: u64,
    /// Set up even when the timeout budget is broken (it is still printed).
    #[arg(long)]
    pub force: bool,
    /// Wait up to SECS for every VIP to run on exactly one gateway (0: do not wait).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub wait: u64,
    /// The directory of the HA helpers (cib-resources, ganesha-ha-conf, bin/).
    #[arg(long, env = "CAIRN_HA_DIR", value_name = "DIR", default_value = "/usr/lib/cairn/ha")]
    pub ha_dir: PathBuf,
    /// The pcs program.
    #[arg(long, env = "CAIRN_PCS", value_name = "PROGRAM", default_value = "pcs")]
    pub pcs: PathBuf,
    /// The crm_mon program.
    #[arg(long, env = "CAIRN_CRM_MON", value_name = "PROGRAM", default_value = "crm_mon")]
    pub crm_mon: PathBuf,
}
