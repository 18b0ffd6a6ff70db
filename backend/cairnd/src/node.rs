//! The node: what one `cairnd` holds — its bricks, the volume maps it builds from the
//! config store and pushes to clients, connections to the other nodes, and the
//! coordination state of the chains it heads (inode locks, byte-range locks, leases).

use crate::access::Rules;
use crate::inode_locks::{InodeGuard, InodeLocks};
use crate::leases::Leases;
use crate::locks::LockTable;
use crate::shares::ShareTable;
use cairn_brick::Brick;
use cairn_config::{NodeLease, Store};
use cairn_proto::map::{BrickState, VolumeMap, VolumeStatus};
use cairn_proto::msg::{PeerKind, Push, Reply, Request};
use cairn_proto::rpc::{Connection, Session};
use cairn_proto::{Errno, Id, RemoteError};
use cairn_replication::range_lock::{Mode, Range};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// An inode a session holds open on a brick: (volume, brick, id).
pub type OpenRef = (String, u32, Id);

/// What the node reports to the parts above it, on a channel (`main` routes each event):
/// the node never calls heal or the chain itself, so they may depend on it and not the
/// other way round.
pub enum Event {
    /// A brick was opened and starts out Healing: its heal loop must run.
    BrickOpened(Arc<BrickSlot>),
    /// A closed session still held these opens: drop them on the head and every replica.
    OpensLeft(Vec<OpenRef>),
}

pub struct BrickSlot {
    pub volume: String,
    pub index: u32,
    pub brick: Arc<Brick>,
    /// True until the brick caught up with its peers (state Healing in the config store).
    pub healing: AtomicBool,
    /// Set when the volume stops: the heal task and the syncer end.
    pub stopped: AtomicBool,
    /// Heal crawl statistics (`cairn volume heal VOL statistics`).
    pub heal: Mutex<crate::heal_stats::HealStats>,
    /// Request ids of the mutations this brick applied, with their results, so a client's
    /// retry is answered instead of applied twice (`cairn_replication::dedupe`).
    pub dedupe: Mutex<cairn_replication::dedupe::Table<(Reply, bytes::Bytes)>>,
    /// Inodes being copied onto this brick by a heal: (source brick, changed meanwhile by
    /// a forward from another brick). See `heal::sync_from`.
    pub heal_watch: Mutex<HashMap<Id, (u32, bool)>>,
    /// Set when this brick fails to apply a forwarded mutation (`heal::missed_forward`);
    /// a catch-up that started before it does not bring the brick up.
    pub missed: AtomicBool,
}

/// Connections to other nodes' `cairnd`, made on demand and re-made after a failure.
#[derive(Default)]
pub struct PeerPool {
    conns: Mutex<HashMap<String, Arc<Connection>>>,
    dialing: tokio::sync::Mutex<()>,
    /// The address this node advertises, when it is a specific one: connections to the
    /// other nodes come from it, since they believe a `Daemon` HELLO only from a peer's
    /// address (`Node::is_member`), also on a host with several addresses.
    source: Option<IpAddr>,
}

impl PeerPool {
    pub async fn get(&self, addr: &str, me: &str) -> Result<Arc<Connection>, RemoteError> {
        if let Some(c) = self.conns.lock().get(addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let _g = self.dialing.lock().await;
        if let Some(c) = self.conns.lock().get(addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let dial = |from| {
            Connection::connect_from(addr, from, PeerKind::Daemon, me, None, Duration::from_secs(2))
        };
        let c = match self.source {
            // Not an address of this host (behind NAT, say): from wherever routing says.
            Some(ip) => match dial(Some(ip)).await {
                Err(e) if e.errno == Errno(libc::EADDRNOTAVAIL) => dial(None).await?,
                r => r?,
            },
            None => dial(None).await?,
        };
        self.conns.lock().insert(addr.to_string(), c.clone());
        Ok(c)
    }

    pub fn forget(&self, addr: &str) {
        if let Some(c) = self.conns.lock().remove(addr) {
            c.close();
        }
    }

    pub async fn call(
        &self,
        addr: &str,
        me: &str,
        req: Request,
        data: bytes::Bytes,
    ) -> Result<(Reply, bytes::Bytes), RemoteError> {
        let c = self.get(addr, me).await?;
        let r = c.call(req, data).await;
        if let Err(e) = &r {
            if e.errno == Errno::ENOTCONN {
                self.conns.lock().remove(addr);
            }
        }
        r
    }
}

pub struct Node {
    pub name: String,
    pub addr: String,
    /// This node's uuid (state dir `node-uuid`); set once before the node is shared.
    pub uuid: String,
    pub store: Arc<Store>,
    lease: Mutex<Option<Arc<NodeLease>>>,
    pub bricks: RwLock<HashMap<(String, u32), Arc<BrickSlot>>>,
    pub maps: RwLock<HashMap<String, Arc<VolumeMap>>>,
    pub peers: PeerPool,
    subs: Mutex<HashMap<String, Vec<Weak<Session>>>>,
    pub locks: LockTable,
    /// Share reservations (access / deny modes) of the files this node's bricks head.
    pub shares: ShareTable,
    pub leases: Leases,
    /// NFSv4 delegations held by gateway sessions on files this node heads.
    pub delegs: crate::delegs::Delegations,
    /// Byte-range locks of the inodes this node's bricks head (`cairn_replication::
    /// range_lock`): a mutation holds what it changes exclusively until its replicas have
    /// it, a read holds what it may see shared, so a read at the head never sees a write
    /// its replicas do not have yet.
    inode_locks: InodeLocks,
    pub kick: Notify,
    opens: Mutex<HashMap<u64, Vec<OpenRef>>>,
    /// Bricks this node already marked stale while they were down (cleared once the map
    /// shows them back, so a brick that healed and fell again is marked again).
    marked_stale: Mutex<std::collections::HashSet<(String, u32)>>,
    /// Who may use each volume (`auth.allow` / `auth.reject`), from its map's options.
    access: RwLock<HashMap<String, Arc<Rules>>>,
    /// Addresses of the peer nodes (canonical): a HELLO as `Daemon` is believed only from
    /// one of them. With the peer list they were resolved from.
    members: RwLock<(Vec<String>, HashSet<IpAddr>)>,
    /// (volume, address) refusals already logged.
    refused: Mutex<HashSet<(String, IpAddr)>>,
    /// Where this node reports its [`Event`]s.
    events: tokio::sync::mpsc::UnboundedSender<Event>,
    /// This node's own certificate is revoked: the other nodes refuse it, so its bricks
    /// are out of service (healing, marked stale) until it has a new one
    /// (`certs::own_revocation`).
    pub cert_revoked: AtomicBool,
}

impl Node {
    /// The node, and the receiving end of its [`Event`]s (someone must route them).
    pub fn new(
        name: String,
        addr: String,
        store: Arc<Store>,
        lease: NodeLease,
    ) -> (Node, tokio::sync::mpsc::UnboundedReceiver<Event>) {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let source = addr
            .parse::<std::net::SocketAddr>()
            .ok()
            .map(|a| a.ip())
            .filter(|ip| !ip.is_unspecified());
        let node = Node {
            name,
            addr,
            uuid: String::new(),
            store,
            lease: Mutex::new(Some(Arc::new(lease))),
            bricks: RwLock::default(),
            maps: RwLock::default(),
            peers: PeerPool { source, ..PeerPool::default() },
            subs: Mutex::default(),
            locks: LockTable::default(),
            shares: ShareTable::default(),
            leases: Leases::default(),
            delegs: crate::delegs::Delegations::default(),
            inode_locks: InodeLocks::default(),
            kick: Notify::new(),
            opens: Mutex::default(),
            marked_stale: Mutex::default(),
            access: RwLock::default(),
            members: RwLock::default(),
            refused: Mutex::default(),
            events,
            cert_revoked: AtomicBool::new(false),
        };
        (node, rx)
    }

    fn report(&self, e: Event) {
        // Closed only when the router ended, i.e. at shutdown.
        let _ = self.events.send(e);
    }

    /// The node's liveness lease (brick states are published under it).
    pub fn lease(&self) -> Arc<NodeLease> {
        self.lease.lock().clone().expect("lease is held until shutdown")
    }

    /// The lease, or None once given up at shutdown.
    pub fn current_lease(&self) -> Option<Arc<NodeLease>> {
        self.lease.lock().clone()
    }

    /// Give up the lease at shutdown (so peers see this node down at once).
    pub fn take_lease(&self) -> Option<NodeLease> {
        let l = self.lease.lock().take()?;
        Arc::try_unwrap(l).ok()
    }

    /// False once the lease could not be renewed for half its time: the node must stop
    /// accepting writes (the config store may already consider it dead).
    pub fn lease_alive(&self) -> bool {
        self.lease.lock().as_ref().map(|l| l.is_alive()).unwrap_or(false)
    }

    /// Mark a brick stale in the config store (once per outage for down bricks).
    pub async fn mark_stale(
        &self,
        volume: &str,
        brick: u32,
        by: u32,
    ) -> Result<(), cairn_config::ConfigError> {
        let key = (volume.to_string(), brick);
        let down = self
            .map(volume)
            .and_then(|m| m.brick(brick).map(|(_, b)| b.state == BrickState::Down))
            .unwrap_or(false);
        if down && self.marked_stale.lock().contains(&key) {
            return Ok(());
        }
        self.store.mark_stale(volume, brick, by).await?;
        if down {
            self.marked_stale.lock().insert(key);
        }
        Ok(())
    }

    pub fn slot(&self, volume: &str, index: u32) -> Option<Arc<BrickSlot>> {
        self.bricks.read().get(&(volume.to_string(), index)).cloned()
    }

    pub fn map(&self, volume: &str) -> Option<Arc<VolumeMap>> {
        self.maps.read().get(volume).cloned()
    }

    /// Lock `range` of inode `id` on this brick in `mode` (see `inode_locks`).
    pub async fn lock_range(
        &self,
        volume: &str,
        brick: u32,
        id: Id,
        range: Range,
        mode: Mode,
    ) -> InodeGuard {
        self.inode_locks.lock((volume.to_string(), brick, id), range, mode).await
    }

    /// [`Self::lock_range`] if it needs no wait, else `None` (see `InodeLocks::try_lock`).
    pub fn try_lock_range(
        &self,
        volume: &str,
        brick: u32,
        id: Id,
        range: Range,
        mode: Mode,
    ) -> Option<InodeGuard> {
        self.inode_locks.try_lock((volume.to_string(), brick, id), range, mode)
    }

    /// Serialize mutations of the given inodes on this brick: each whole (every byte and
    /// the metadata), exclusively; taken in key order so two multi-inode ops cannot
    /// deadlock.
    pub async fn lock_inodes(&self, volume: &str, brick: u32, ids: &[Id]) -> Vec<InodeGuard> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut guards = Vec::with_capacity(ids.len());
        for id in ids {
            guards.push(self.lock_range(volume, brick, id, Range::WHOLE, Mode::Exclusive).await);
        }
        guards
    }

    /// Wait out any mutation of `range` of `id` in flight on this brick, and keep new ones
    /// out while the guard lives.
    pub async fn read_lock(&self, volume: &str, brick: u32, id: Id, range: Range) -> InodeGuard {
        self.lock_range(volume, brick, id, range, Mode::Shared).await
    }

    pub fn subscribe(&self, volume: &str, s: &Arc<Session>) {
        let mut subs = self.subs.lock();
        let v = subs.entry(volume.to_string()).or_default();
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(s));
    }

    fn push_map(&self, map: &Arc<VolumeMap>) {
        let targets: Vec<Arc<Session>> = {
            let mut subs = self.subs.lock();
            let Some(v) = subs.get_mut(&map.name) else { return };
            v.retain(|w| w.strong_count() > 0);
            v.iter().filter_map(|w| w.upgrade()).filter(|s| self.allowed(s, &map.name)).collect()
        };
        let p = Push::MapChanged(Box::new((**map).clone()));
        for s in targets {
            s.push(&p);
        }
    }

    /// Bring the bricks and maps of this node in line with the config store.
    pub async fn reconcile(self: &Arc<Self>) -> Result<(), RemoteError> {
        let cfg = |e: cairn_config::ConfigError| RemoteError::new(Errno::EHOSTDOWN, e.to_string());
        self.note_members().await?;
        let volumes = self.store.list_volumes().await.map_err(cfg)?;
        let mut wanted = std::collections::HashSet::new();
        for v in &volumes {
            for set in &v.sets {
                for b in &set.bricks {
                    // Bricks taken out by `reset-brick start` are closed until the commit.
                    if b.node != self.name
                        || v.status != VolumeStatus::Started
                        || v.reset_bricks.contains(&b.index)
                    {
                        continue;
                    }
                    if let Some(s) = self.slot(&v.name, b.index) {
                        // Same brick, same place: keep it. Moved by replace-brick: close
                        // the old one (below) and open the new one on the next pass.
                        if s.brick.root() == std::path::Path::new(&b.path) {
                            wanted.insert((v.name.clone(), b.index));
                        }
                        continue;
                    }
                    wanted.insert((v.name.clone(), b.index));
                    let path = PathBuf::from(&b.path);
                    let opened = {
                        let (path, id, index) = (path.clone(), v.id.clone(), b.index);
                        tokio::task::spawn_blocking(move || Brick::open(&path, &id, index)).await
                    };
                    match opened {
                        Ok(Ok(brick)) => {
                            let slot = Arc::new(BrickSlot {
                                volume: v.name.clone(),
                                index: b.index,
                                brick,
                                healing: AtomicBool::new(true),
                                stopped: AtomicBool::new(false),
                                heal: Mutex::default(),
                                dedupe: Mutex::default(),
                                heal_watch: Mutex::default(),
                                missed: AtomicBool::new(false),
                            });
                            self.bricks.write().insert((v.name.clone(), b.index), slot.clone());
                            if let Err(e) = self
                                .lease()
                                .set_brick_state(&v.name, b.index, BrickState::Healing)
                                .await
                            {
                                tracing::warn!(volume = %v.name, brick = b.index, error = %e, "cannot publish brick state");
                            }
                            tracing::info!(volume = %v.name, brick = b.index, path = %b.path, "brick opened; catching up with peers");
                            self.report(Event::BrickOpened(slot));
                        }
                        Ok(Err(e)) => {
                            // Never served as is: an emptied directory (disk replaced) is
                            // rebuilt only through reset-brick, which flags a full heal.
                            let hint = if e.errno == Errno::ENOENT {
                                format!("; if its disk was replaced, run 'cairn volume reset-brick {} {}:{} start' then '... commit'", v.name, b.node, b.path)
                            } else {
                                String::new()
                            };
                            tracing::error!(volume = %v.name, brick = b.index, path = %b.path, error = %e, "cannot open brick{hint}")
                        }
                        Err(e) => tracing::error!(error = %e, "brick open task failed"),
                    }
                }
            }
        }
        // Close bricks of stopped or deleted volumes.
        let gone: Vec<_> =
            self.bricks.read().keys().filter(|k| !wanted.contains(*k)).cloned().collect();
        for k in gone {
            let removed = self.bricks.write().remove(&k);
            if let Some(slot) = removed {
                slot.stopped.store(true, Ordering::Release);
                let _ = self.lease().clear_brick_state(&k.0, k.1).await;
                tracing::info!(volume = %k.0, brick = k.1, "brick closed");
            }
        }
        // Rebuild maps from one consistent read.
        let (_, all) = self.store.volume_maps().await.map_err(cfg)?;
        let maps: HashMap<String, Arc<VolumeMap>> =
            all.into_iter().map(|m| (m.name.clone(), Arc::new(m))).collect();
        let changed: Vec<Arc<VolumeMap>> = {
            let old = self.maps.read();
            maps.values()
                .filter(|m| old.get(&m.name).map(|o| o.as_ref() != m.as_ref()).unwrap_or(true))
                .cloned()
                .collect()
        };
        self.update_access(&maps, &changed);
        self.marked_stale.lock().retain(|(v, i)| {
            maps.get(v)
                .and_then(|m| m.brick(*i).map(|(_, b)| b.state == BrickState::Down))
                .unwrap_or(false)
        });
        *self.maps.write() = maps;
        for m in changed {
            tracing::debug!(volume = %m.name, epoch = m.epoch, bricks = ?m.sets.iter().flat_map(|s| s.bricks.iter().map(|b| (b.index, b.state))).collect::<Vec<_>>(), "map changed");
            self.push_map(&m);
        }
        Ok(())
    }

    /// Keep a liveness lease: if the node lost its lease for good (partitioned from etcd
    /// for longer than the TTL), register a new one and send every brick back through
    /// heal — peers have marked it stale meanwhile, and it must not serve until caught up.
    pub async fn run_lease_keeper(self: Arc<Self>, ttl: u64) {
        let mut dead_since: Option<std::time::Instant> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if self.lease_alive() {
                dead_since = None;
                continue;
            }
            // Fenced: stop serving reads too until the lease is back.
            for s in self.bricks.read().values() {
                s.healing.store(true, Ordering::Release);
            }
            let since = *dead_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() < Duration::from_secs(ttl) {
                continue;
            }
            match self.store.register_node(&self.name, &self.addr, ttl).await {
                Ok(lease) => {
                    *self.lease.lock() = Some(Arc::new(lease));
                    dead_since = None;
                    let slots: Vec<_> = self.bricks.read().values().cloned().collect();
                    for s in slots {
                        if let Err(e) = self
                            .lease()
                            .set_brick_state(&s.volume, s.index, BrickState::Healing)
                            .await
                        {
                            tracing::warn!(volume = %s.volume, brick = s.index, error = %e, "cannot publish brick state");
                        }
                    }
                    tracing::warn!(node = %self.name, "lease was lost; registered a new one, bricks catch up before serving");
                    self.kick.notify_one();
                }
                Err(e) => {
                    tracing::warn!(node = %self.name, error = %e, "cannot register a new lease; retrying")
                }
            }
        }
    }

    /// Watch the config store and reconcile on every change (and every few seconds).
    pub async fn run_reconciler(self: Arc<Self>) {
        let mut backoff = cairn_proto::Backoff::constant(Duration::from_secs(1));
        let mut watch = loop {
            match self.store.watch().await {
                Ok(w) => break w,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the config store; retrying");
                    backoff.wait().await;
                }
            }
        };
        loop {
            if let Err(e) = self.reconcile().await {
                tracing::warn!(error = %e, "reconcile failed; retrying");
            }
            tokio::select! {
                _ = watch.recv() => {
                    // Coalesce bursts of changes.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    while watch.try_recv().is_ok() {}
                }
                _ = self.kick.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(3)) => {}
            }
        }
    }
}

/// Access control: which sessions may use a volume (`crate::access`).
impl Node {
    /// A session is another `cairnd` of this cluster if it said so in its HELLO and comes
    /// from the address of a node in the peer list.
    pub fn is_member(&self, s: &Session) -> bool {
        s.hello.kind == PeerKind::Daemon
            && self.members.read().1.contains(&s.peer.ip().to_canonical())
    }

    /// A session may change who may use a volume (`mgmt::changes_access`) if it comes
    /// from this host (the local CLI) or from a peer node's address.
    pub fn may_manage(&self, s: &Session) -> bool {
        let ip = s.peer.ip().to_canonical();
        ip.is_loopback() || self.members.read().1.contains(&ip)
    }

    fn allowed(&self, s: &Session, volume: &str) -> bool {
        if self.is_member(s) {
            return true;
        }
        // A volume this node does not know: the request fails on its own (ENOENT).
        self.access.read().get(volume).is_none_or(|r| r.allows(s.peer.ip()))
    }

    /// Bind a request of session `s` to `volume`: refused with EACCES unless the session
    /// is a cluster member or its address passes the volume's `auth.allow` / `auth.reject`.
    /// Checked on every request, so a change of the options reaches connected clients at
    /// their next call.
    pub fn admit(&self, s: &Session, volume: &str) -> Result<(), RemoteError> {
        if self.allowed(s, volume) {
            return Ok(());
        }
        let ip = s.peer.ip().to_canonical();
        {
            let mut refused = self.refused.lock();
            if refused.len() >= 4096 {
                refused.clear();
            }
            if refused.insert((volume.to_string(), ip)) {
                tracing::warn!(volume, client = %ip, session = %s.label(), "client refused by auth.allow / auth.reject");
            }
        }
        Err(RemoteError::new(
            Errno::EACCES,
            format!("volume {volume}: client {ip} is not allowed (auth.allow / auth.reject)"),
        ))
    }

    /// Rebuild the access rules of the volumes whose map changed (before the new maps are
    /// served, so a map is never served with older rules).
    fn update_access(&self, maps: &HashMap<String, Arc<VolumeMap>>, changed: &[Arc<VolumeMap>]) {
        let mut access = self.access.write();
        access.retain(|v, _| maps.contains_key(v));
        for m in changed {
            let rules = Rules::from_options(&m.options).unwrap_or_else(|(none, e)| {
                tracing::error!(volume = %m.name, error = %e, "bad access option in the config store; no client may use the volume");
                none
            });
            if access.get(&m.name).map(|r| **r != rules).unwrap_or(true) {
                self.refused.lock().retain(|(v, _)| *v != m.name);
                access.insert(m.name.clone(), Arc::new(rules));
            }
        }
    }

    /// Refresh the addresses of the peer nodes when the peer list changed (host names are
    /// resolved here, once per change).
    async fn note_members(&self) -> Result<(), RemoteError> {
        let cfg = |e: cairn_config::ConfigError| RemoteError::new(Errno::EHOSTDOWN, e.to_string());
        let mut addrs: Vec<String> =
            self.store.list_peers().await.map_err(cfg)?.into_iter().map(|p| p.addr).collect();
        addrs.sort();
        if self.members.read().0 == addrs {
            return Ok(());
        }
        let mut ips = HashSet::new();
        let mut resolved = true;
        for a in &addrs {
            let found: Vec<IpAddr> = match a.parse::<std::net::SocketAddr>() {
                Ok(sa) => vec![sa.ip()],
                Err(_) => {
                    match tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host(a))
                        .await
                    {
                        Ok(Ok(it)) => it.map(|sa| sa.ip()).collect(),
                        _ => {
                            tracing::warn!(peer = %a, "cannot resolve a peer's address; its daemon connections count as clients");
                            resolved = false;
                            vec![]
                        }
                    }
                }
            };
            ips.extend(
                found.into_iter().map(|ip| ip.to_canonical()).filter(|ip| !ip.is_unspecified()),
            );
        }
        // Resolved again on the next pass if a name did not resolve.
        *self.members.write() = (if resolved { addrs } else { vec![] }, ips);
        Ok(())
    }
}

impl Node {
    pub fn note_open(&self, session: u64, volume: &str, brick: u32, id: Id) {
        self.opens.lock().entry(session).or_default().push((volume.to_string(), brick, id));
    }

    pub fn note_release(&self, session: u64, volume: &str, brick: u32, id: Id) {
        if let Some(v) = self.opens.lock().get_mut(&session) {
            if let Some(i) = v.iter().position(|(vv, b, x)| vv == volume && *b == brick && *x == id)
            {
                v.swap_remove(i);
            }
        }
    }

    /// A client connection closed: release its locks, share reservations, leases,
    /// delegations and opens.
    pub fn session_closed(&self, session: u64) {
        self.locks.release_session(session);
        self.shares.release_session(session);
        self.leases.drop_session(session);
        self.delegs.drop_session(session);
        let opens = self.opens.lock().remove(&session).unwrap_or_default();
        if opens.is_empty() {
            return;
        }
        self.report(Event::OpensLeft(opens));
    }
}
