//! `cairnd`: the Cairn brick daemon. One per node; serves every brick of the node, heads
//! and replicates chains, heals returning bricks, and answers the `cairn` CLI.

mod access;
mod audit;
mod authz;
mod certs;
mod chain;
mod config_error;
mod delegs;
mod enroll;
mod etcd_cert;
mod exec;
mod fence;
mod heal;
mod heal_stats;
mod identity;
mod inode_locks;
mod leases;
mod locks;
mod metrics;
mod mgmt;
mod node;
mod ops;
mod peers;
mod rebalance;
mod renew;
mod scrub;
mod service;
mod shares;

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "cairnd",
    version,
    about = "The Cairn brick daemon",
    long_about = "cairnd serves the bricks of this node: it stores files on local \
directories, replicates writes along each replica set's chain, heals bricks that come back, \
and answers clients (mount.cairn, the NFS, SMB and iSCSI gateways) and the `cairn` CLI.\n\n\
The cluster configuration lives in etcd; cairnd registers this node there under a lease \
and opens the bricks the configuration assigns to it.",
    after_help = "EXAMPLES:\n    cairnd --name node1 --listen 127.0.0.1:7420 --etcd http://127.0.0.1:2379 \\\n           --state-dir /var/lib/cairn\n\nLOG LEVELS:\n    --log-level takes a tracing filter: error, warn, info (default), debug, or e.g. cairnd=debug."
)]
struct Args {
    /// Node name, as used in brick specs (HOST:/path). Defaults to the short host name.
    #[arg(long)]
    name: Option<String>,
    /// Address to listen on for clients, peers and the CLI.
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: String,
    /// Address other nodes and clients use to reach this node (default: --listen).
    #[arg(long)]
    advertise: Option<String>,
    /// etcd endpoints, comma separated.
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    etcd: Vec<String>,
    /// CA certificate (PEM) that signed etcd's server certificate; https:// endpoints.
    #[arg(long, value_name = "PEM")]
    etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) cairnd presents to etcd (`--client-cert-auth`; with etcd
    /// auth on, its CN is the etcd user).
    #[arg(long, value_name = "PEM", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// Key of --etcd-cert (PEM; keep it 0600).
    #[arg(long, value_name = "PEM", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// Key prefix of this cluster in etcd.
    #[arg(long, default_value = "/cairn")]
    etcd_prefix: String,
    /// Directory for node state (node uuid).
    #[arg(long, default_value = "/var/lib/cairn")]
    state_dir: PathBuf,
    /// Liveness lease in seconds: a node silent this long is considered down.
    #[arg(long, default_value_t = 6)]
    lease_ttl: u64,
    /// Serve Prometheus metrics on this address (GET /metrics).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Log filter (error, warn, info, debug, or a tracing directive).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Append logs to this file instead of stderr.
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// Connections: `tls` (mutual certificates of the cluster CA; the default) or `plain`
    /// (neither authenticated nor encrypted: isolated networks only). Default from
    /// CAIRN_TRANSPORT, else tls.
    #[arg(long)]
    transport: Option<String>,
    /// Directory of the cluster CA (ca.pem, ca.key, admin.pem): used to issue this node's
    /// certificate, and created there (with the admin credential) by the first node.
    /// Default from CAIRN_CA_DIR, else --state-dir.
    #[arg(long)]
    ca_dir: Option<PathBuf>,
    /// Audit log of management actions (JSON lines, mode 0640). Default: audit.log beside
    /// --log-file, or in --state-dir without one.
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// File holding a join token (`cairn peer token create`): a node that is not a member
    /// yet uses it up at start to join the cluster. Without one it waits to be added with
    /// `cairn peer probe HOST --token TOKEN`.
    #[arg(long)]
    join_token_file: Option<PathBuf>,
    /// Join through the member at HOST:PORT with --join-token-file and --ca-cert-hash: a
    /// node without a certificate gets its node certificate from the cluster CA and
    /// becomes a member in one step (`cairn peer token create` prints the command).
    #[arg(long, value_name = "HOST:PORT", requires_all = ["join_token_file", "ca_cert_hash"])]
    join: Option<String>,
    /// The pinned hash of the cluster CA (`sha256:` and 64 hex digits) --join trusts.
    #[arg(long, value_name = "sha256:HEX", requires = "join")]
    ca_cert_hash: Option<String>,
    /// With --join and --etcd-cert: the enrollment also brings an etcd server and peer
    /// certificate for --advertise's host (of the etcd CA), stored here, so the node can
    /// run an etcd member (docs/security.md, "etcd").
    #[arg(long, value_name = "PEM", requires_all = ["etcd_member_key", "join", "etcd_cert"])]
    etcd_member_cert: Option<PathBuf>,
    /// Key of --etcd-member-cert (written 0600).
    #[arg(long, value_name = "PEM", requires = "etcd_member_cert")]
    etcd_member_key: Option<PathBuf>,
}

fn node_uuid(state_dir: &std::path::Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating state dir {}", state_dir.display()))?;
    let p = state_dir.join("node-uuid");
    if let Ok(s) = std::fs::read_to_string(&p) {
        let s = s.trim().to_string();
        if !s.is_empty() {
            return Ok(s);
        }
    }
    let id = cairn_proto::Id::new_on_set(0).to_hex();
    let uuid =
        format!("{}-{}-{}-{}-{}", &id[0..8], &id[8..12], &id[12..16], &id[16..20], &id[20..32]);
    std::fs::write(&p, &uuid).with_context(|| format!("writing {}", p.display()))?;
    Ok(uuid)
}

fn init_logging(args: &Args) -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_new(&args.log_level).context("bad --log-level")?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    match &args.log_file {
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening log file {}", path.display()))?;
            let b = builder.with_ansi(false).with_writer(std::sync::Mutex::new(f));
            if args.log_json {
                b.json().init()
            } else {
                b.init()
            }
        }
        None => {
            if args.log_json {
                builder.json().init()
            } else {
                builder.init()
            }
        }
    }
    Ok(())
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .split('.')
        .next()
        .unwrap_or("localhost")
        .to_string()
}

/// Makes this node a member of the pool. A node already a member (same uuid) or the first
/// node of a new cluster registers itself; any other node joins with a join token from
/// `--join-token-file`, or, without one, waits for `cairn peer probe HOST --token TOKEN`.
async fn join_pool(
    store: &cairn_config::Store,
    args: &Args,
    name: &str,
    addr: &str,
    uuid: &str,
) -> anyhow::Result<()> {
    let me = cairn_config::PeerRecord { name: name.into(), addr: addr.into(), uuid: uuid.into() };
    match store.get_peer(name).await? {
        Some(p) if p.uuid != uuid => anyhow::bail!(
            "node name {name} is already used by another node (uuid {}); pick another --name or remove {}",
            p.uuid,
            args.state_dir.join("node-uuid").display()
        ),
        Some(p) if p.addr == addr => return Ok(()),
        // A member whose address changed.
        Some(_) => {
            return store.add_peer(me).await.context("updating this node's address in the config store")
        }
        None => {}
    }
    if store.list_peers().await?.is_empty() {
        tracing::info!(node = name, "first node: founding the cluster");
        return store.add_peer(me).await.context("registering this node in the config store");
    }
    let Some(file) = &args.join_token_file else {
        tracing::warn!(
            node = name,
            "not a member of the cluster yet: waiting for 'cairn peer probe {addr} --token TOKEN' \
             (or restart with --join-token-file)"
        );
        return Ok(());
    };
    let token = std::fs::read_to_string(file)
        .with_context(|| format!("reading the join token from {}", file.display()))?;
    let grant = cairn_config::consume_join_token(store, &token, &format!("{name} at {addr}"))
        .await
        .map_err(|e| {
            let e = mgmt::join_refused(e);
            anyhow::anyhow!(
                "cannot join the cluster with {}: {} ({})",
                file.display(),
                e.message,
                e.errno
            )
        })?;
    store.add_peer(me).await.context("registering this node in the config store")?;
    tracing::info!(node = name, token = grant.token_id, "joined the cluster with a join token");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(&args)?;
    let name = args.name.clone().unwrap_or_else(hostname);
    let addr = args.advertise.clone().unwrap_or_else(|| args.listen.clone());
    let uuid = node_uuid(&args.state_dir)?;
    let transport = args
        .transport
        .clone()
        .or_else(|| std::env::var(cairn_proto::tls::ENV_TRANSPORT).ok())
        .unwrap_or_else(|| "tls".into());
    let ca_dir = args
        .ca_dir
        .clone()
        .or_else(|| std::env::var_os("CAIRN_CA_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| args.state_dir.clone());
    if let (Some(member), Some(pin), Some(file), "tls") =
        (&args.join, &args.ca_cert_hash, &args.join_token_file, transport.as_str())
    {
        let spec = enroll::JoinSpec {
            member: member.clone(),
            ca_cert_hash: pin.clone(),
            token_file: file.clone(),
            // etcd with client certificates (--etcd-cert): the enrollment brings this
            // node's, unless it has one
            etcd: match (&args.etcd_ca, &args.etcd_cert, &args.etcd_key) {
                (Some(ca), Some(cert), Some(key)) if !cert.exists() => Some(enroll::EtcdPaths {
                    ca: ca.clone(),
                    cert: cert.clone(),
                    key: key.clone(),
                    member: args.etcd_member_cert.clone().zip(args.etcd_member_key.clone()),
                }),
                _ => None,
            },
        };
        enroll::join(&spec, &name, &addr, &uuid, &args.state_dir, &ca_dir).await?;
    }
    let ca_for_enroll = (transport == "tls").then(|| ca_dir.clone());
    let transport = identity::setup(
        &name,
        &args.state_dir,
        &ca_dir,
        &transport,
        args.join_token_file.is_some(),
    )?;
    // This node's connections to its peers use its node certificate too.
    cairn_proto::tls::set_default(transport.clone());
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let security = cairn_config::EtcdSecurity {
        ca: args.etcd_ca.clone(),
        cert: args.etcd_cert.clone(),
        key: args.etcd_key.clone(),
    };
    let store = cairn_config::Store::connect_secure(
        &args.etcd,
        &args.etcd_prefix,
        cairn_config::DEFAULT_CONNECT_TIMEOUT,
        &security,
    )
    .await
    .with_context(|| format!("cannot reach the config store at {}", args.etcd.join(",")))?;
    let store = Arc::new(store);
    if let cairn_proto::tls::Transport::Tls(t) = &transport {
        certs::record_local(&store, &[&args.state_dir.join("node.pem"), &ca_dir.join("admin.pem")])
            .await;
        tokio::spawn(certs::run_revocation_sync(store.clone(), t.revoked.clone()));
        tokio::spawn(certs::run_credentials_watch(
            store.clone(),
            t.clone(),
            args.state_dir.join("node.pem"),
            ca_dir.clone(),
            identity::RENEW_BEFORE_SECS,
        ));
    }
    join_pool(&store, &args, &name, &addr, &uuid).await?;
    let lease = store
        .register_node(&name, &addr, args.lease_ttl)
        .await
        .context("registering the node lease")?;
    let (mut node, events) = node::Node::new(name.clone(), addr.clone(), store, lease);
    node.uuid = uuid.clone();
    let node = Arc::new(node);
    tokio::spawn(route_events(node.clone(), events));
    if let cairn_proto::tls::Transport::Tls(t) = &transport {
        tokio::spawn(certs::run_own_revocation_watch(node.clone(), t.clone()));
        tokio::spawn(renew::run(
            node.clone(),
            t.clone(),
            args.state_dir.join("node.pem"),
            ca_dir.clone(),
            identity::RENEW_BEFORE_SECS,
        ));
    }
    let audit_path = args.audit_log.clone().unwrap_or_else(|| match &args.log_file {
        Some(f) => f.with_file_name("audit.log"),
        None => args.state_dir.join("audit.log"),
    });
    let audit = Arc::new(audit::Audit::open(&audit_path)?);
    if let Some(m) = &args.metrics_listen {
        let l = tokio::net::TcpListener::bind(m)
            .await
            .with_context(|| format!("cannot listen on {m} for metrics"))?;
        tokio::spawn(metrics::serve(l));
    }
    tracing::info!(node = %name, listen = %args.listen, "cairnd started");
    tokio::spawn(node.clone().run_reconciler());
    tokio::spawn(rebalance::resume_all(node.clone()));
    tokio::spawn(node.clone().run_lease_keeper(args.lease_ttl));
    tokio::spawn(scrub::run_scrubber(node.clone()));
    tracing::info!(path = %audit.path().unwrap_or(&audit_path).display(), "audit log");
    let fences = Arc::new(fence::Fences::default());
    let n = node.clone();
    tokio::spawn(fence::run(fences.clone(), node.store.clone(), node.name.clone(), move || {
        n.current_lease()
    }));
    let service =
        Arc::new(service::Daemon { node: node.clone(), audit, ca_dir: ca_for_enroll, fences });
    tokio::select! {
        _ = cairn_proto::rpc::serve_with(listener, service, transport) => {}
        _ = shutdown_signal() => {
            tracing::info!(node = %name, "shutting down");
        }
    }
    // Flush and close bricks; the lease is revoked so peers see this node down at once.
    let slots: Vec<_> = node.bricks.read().values().cloned().collect();
    for s in slots {
        let _ = node.lease().clear_brick_state(&s.volume, s.index).await;
    }
    if let Some(lease) = node.take_lease() {
        let _ = lease.revoke().await;
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Route what the node reports to the parts that act on it (`node::Event`).
async fn route_events(
    node: Arc<node::Node>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<node::Event>,
) {
    while let Some(e) = events.recv().await {
        match e {
            node::Event::BrickOpened(slot) => heal::spawn(node.clone(), slot),
            node::Event::OpensLeft(opens) => {
                let node = node.clone();
                tokio::spawn(async move {
                    for (volume, brick, id) in opens {
                        peers::release_everywhere(&node, &volume, brick, id).await;
                    }
                });
            }
        }
    }
}
