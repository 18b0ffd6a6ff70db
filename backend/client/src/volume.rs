use crate::conn::Pool;
use crate::Result;
use bytes::Bytes;
use cairn_cache::{
    merge_dir_copy, Append, AttrCache, DataCache, DirStates, EntryCache, WriteBehind,
};
use cairn_placement::{hashed_set, home_set};
use cairn_proto::map::BrickState;
use cairn_proto::map::VolumeMap;
use cairn_proto::msg::{self, BrickRequest, Op, Push, Reply, Request};
use cairn_proto::*;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct MountOptions {
    /// `host:port` of one or more `cairnd`s to fetch the map from.
    pub servers: Vec<String>,
    pub volume: String,
    /// Label in the bricks' logs, e.g. `mount.cairn@host`.
    pub client_name: String,
    /// Coalesce small sequential writes (flushed on fsync, flush, release, or a
    /// conflicting access).
    pub write_behind: bool,
    /// Bytes buffered per file before a flush is forced.
    pub write_behind_bytes: usize,
    /// Longest time cached attributes and entries are trusted without a lease recall.
    pub cache_timeout: Duration,
    pub connect_timeout: Duration,
    /// Quick-read: lookups ask the bricks for the content of regular files up to this
    /// size, and reads of it are answered from memory while the file's attributes are
    /// cached unchanged (0: off). Each lookup of such a file then reads it on the brick.
    pub quick_read: u32,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            servers: vec![format!("127.0.0.1:{}", cairn_proto::DEFAULT_PORT)],
            volume: String::new(),
            client_name: "libcairn".into(),
            write_behind: true,
            write_behind_bytes: 1 << 20,
            cache_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            quick_read: 0,
        }
    }
}

/// Counters of backend round trips, per operation kind (for benchmarks and `profile`).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Total requests sent to bricks.
    pub round_trips: u64,
    pub by_op: Vec<(&'static str, u64)>,
    /// Reads answered from quick-read content (no round trip).
    pub quick_reads: u64,
    /// Lookups answered "no such entry" from a complete directory (no round trip).
    pub negative_hits: u64,
}

/// Called when a brick recalls a lease on `id` (`entries`: its directory entries too).
/// Returns `None` if the upcall's work is done, or an [`InvalidateDone`] that fires when work
/// it handed to another thread is: the recall is acknowledged to the brick only then (or
/// after [`INVALIDATE_ACK_WAIT`]), so the other client's change does not complete while
/// this client's caches (a FUSE mount's kernel caches) still hold what it changed.
pub type InvalidateFn = Arc<dyn Fn(Id, bool) -> Option<InvalidateDone> + Send + Sync>;
/// Delegation recall upcall (see [`Volume::on_recall`]): the file whose delegation a
/// brick recalls. Called on the push task: it must not block.
pub type RecallFn = Arc<dyn Fn(Id) + Send + Sync>;
/// Completion of an upcall's deferred work (fired, or dropped, when it is done).
pub type InvalidateDone = tokio::sync::oneshot::Receiver<()>;
/// Longest wait for an upcall's deferred work before acknowledging the recall anyway: a
/// kernel notification can block on a request that itself waits on the recall, and the
/// brick waits for acknowledgements only 500 ms (`cairnd/src/leases.rs` RECALL_WAIT).
pub const INVALIDATE_ACK_WAIT: Duration = Duration::from_millis(400);

/// How long an operation keeps retrying while bricks fail over (map refreshes, re-dials).
const RETRY_BUDGET: Duration = Duration::from_secs(30);
/// Largest single WRITE/READ request.
const MAX_IO: usize = 8 << 20;
/// Write-behind extents in flight per file (random small writes are pipelined up to this)...
const MAX_INFLIGHT: usize = 32;
/// ...and at most this many write-behind buffers' worth of bytes.
const MAX_INFLIGHT_BUFFERS: u64 = 4;
/// Most quick-read content held.
const QUICK_READ_BYTES: usize = 32 << 20;
/// Most names a listing that makes a directory complete reads per set (one READDIR each);
/// a bigger directory is not made complete.
const LIST_MAX: u32 = 1024;
/// Bound of the file-type memo (cleared wholesale when full, like the other caches).
const KINDS_MAX: usize = 200_000;

fn is_retryable(e: &RemoteError) -> bool {
    matches!(
        e.errno.0,
        libc::EREMCHG
            | libc::ENOTCONN
            | libc::ECONNREFUSED
            | libc::ECONNRESET
            | libc::EHOSTDOWN
            | libc::ETIMEDOUT
            | libc::EPIPE
    )
}

fn err(errno: Errno, msg: impl Into<String>) -> RemoteError {
    RemoteError::new(errno, msg)
}

fn unexpected(op: &str, r: &Reply) -> RemoteError {
    err(Errno::EPROTO, format!("{op}: unexpected reply {r:?}"))
}

fn attr_of(op: &str, r: Reply) -> Result<Attr> {
    match r {
        Reply::Attr(a)
        | Reply::Entry { attr: a, linkto: None }
        | Reply::Written { attr: a, .. } => Ok(a),
        other => Err(unexpected(op, &other)),
    }
}

/// A namespace op's effect on the cached attributes of the directories it changes: the
/// copies of them each step's reply carried (from the set that ran it), folded into the
/// cached merged attributes at the end with the merge `getattr` uses, so no GETATTR of
/// the directory follows a create or unlink. A step whose effect is not known (no copies
/// in its reply, or an error that may have applied it) drops the directory's cached
/// attributes instead, as does any lease recall or re-fetch of them meanwhile
/// ([`AttrCache::begin_amend`]).
struct DirChange {
    amends: Vec<(Id, Option<u64>)>,
    copies: Vec<(u32, Attr)>,
    unknown: Vec<Id>,
}

impl DirChange {
    /// A step of the op on set `set` changing directories `dirs`, and its outcome.
    fn step<T>(&mut self, set: u32, dirs: &[Id], r: &Result<(T, Option<Vec<Attr>>)>) {
        match r {
            Ok((_, Some(parents))) => {
                for d in dirs {
                    match parents.iter().find(|a| a.id == *d) {
                        Some(a) => self.copies.push((set, a.clone())),
                        None => self.unknown.push(*d),
                    }
                }
            }
            // The name was not there: nothing changed.
            Err(e) if e.errno == Errno::ENOENT => {}
            _ => self.unknown.extend_from_slice(dirs),
        }
    }

    fn finish(self, i: &Inner) {
        for (dir, amend) in self.amends {
            let home = i.home(dir);
            let unknown = self.unknown.contains(&dir);
            i.attrs.amend(dir, amend, |merged| {
                if unknown || merged.kind != FileType::Directory {
                    return false;
                }
                for (set, copy) in self.copies.iter().filter(|(_, a)| a.id == dir) {
                    merge_dir_copy(merged, copy, *set == home);
                }
                true
            });
        }
    }
}

/// The race-guard tokens (`cache/src/guard.rs`) of a request whose reply fills both the
/// entry and the attribute caches ([`Inner::remember`]): taken together, before it leaves.
#[derive(Clone, Copy)]
struct Tokens {
    entry: u64,
    attr: u64,
}

/// Where an operation goes: the chain head of `key` in replica set `set`.
#[derive(Clone, Copy)]
struct Target {
    set: u32,
    key: Id,
}

#[derive(Default)]
struct OpenState {
    count: u32,
    /// The bricks were told (the file was unlinked while open here).
    registered: bool,
}

struct Inner {
    opts: MountOptions,
    map: RwLock<Arc<VolumeMap>>,
    map_changed: Notify,
    pool: Pool,
    attrs: AttrCache,
    entries: EntryCache,
    /// Directories whose every name is known (`cache/src/dirstate.rs`): lookups of other names are
    /// answered ENOENT without a round trip.
    complete: DirStates,
    /// Quick-read content (`MountOptions::quick_read`).
    data: DataCache,
    /// File type by id. An id's type never changes, so this is exact without leases even
    /// when the attribute cache is off; it spares the getattr that per-inode ops need to
    /// know whether to update a directory's copies on every set.
    kinds: Mutex<HashMap<Id, FileType>>,
    wb: WriteBehind,
    wb_on: AtomicBool,
    opens: Mutex<HashMap<Id, OpenState>>,
    on_invalidate: RwLock<Option<InvalidateFn>>,
    on_recall: RwLock<Option<RecallFn>>,
    by_op: Mutex<HashMap<&'static str, u64>>,
    round_trips: AtomicU64,
    quick_reads: AtomicU64,
    negative_hits: AtomicU64,
    closed: AtomicBool,
    /// Request ids of mutations: this client instance's random id, and the next sequence
    /// number. A retry of an op keeps its id, so a brick that applied it answers with the
    /// first result instead of applying it again (see docs/failure-model.md).
    client_id: u64,
    next_seq: AtomicU64,
}

/// A mounted volume. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Volume {
    inner: Arc<Inner>,
}

impl Inner {
    fn map(&self) -> Arc<VolumeMap> {
        self.map.read().clone()
    }

    fn apply_options(&self, m: &VolumeMap) {
        let mut ttl = self.opts.cache_timeout;
        if let Some(t) = m.option("performance.cache-timeout").and_then(|v| v.parse::<u64>().ok()) {
            ttl = ttl.min(Duration::from_secs(t));
        }
        self.attrs.set_ttl(ttl);
        self.entries.set_ttl(ttl);
        self.complete.set_ttl(ttl);
        self.data.set_ttl(ttl);
        let on = self.opts.write_behind && m.option("performance.write-behind") != Some("off");
        self.wb_on.store(on, Ordering::Release);
        if let Some(n) =
            m.option("performance.write-behind-window-size").and_then(|v| v.parse::<usize>().ok())
        {
            self.wb.set_limit(n.min(self.opts.write_behind_bytes.max(4096)));
        }
    }

    fn set_map(&self, m: VolumeMap) {
        let mut cur = self.map.write();
        if m.epoch >= cur.epoch {
            self.apply_options(&m);
            *cur = Arc::new(m);
            drop(cur);
            self.map_changed.notify_waiters();
        }
    }

    /// Ask the nodes for a newer map (after a brick said ours is stale).
    async fn refresh_map(&self) {
        let map = self.map();
        let mut addrs: Vec<String> =
            map.sets.iter().flat_map(|s| s.bricks.iter().map(|b| b.addr.clone())).collect();
        addrs.extend(self.opts.servers.iter().cloned());
        addrs.sort();
        addrs.dedup();
        for a in addrs {
            let Ok(c) = self.pool.get(&a).await else { continue };
            if let Ok((Reply::Map(m), _)) =
                c.call(Request::GetMap { volume: map.name.clone() }, Bytes::new()).await
            {
                self.set_map(*m);
                return;
            }
        }
    }

    fn count(&self, op: &'static str) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        *self.by_op.lock().entry(op).or_default() += 1;
    }

    /// Send one op to the chain head of `t`, retrying across fail-overs.
    async fn call(&self, t: Target, c: &Creds, op: Op, data: Bytes) -> Result<(Reply, Bytes)> {
        self.call_with(t, c, op, data, false, 0).await
    }

    /// A namespace op at the head of `t`, asking for its copies of the op's parent
    /// directories after it: the reply and those copies (`None` from a brick that did not
    /// send them: one built before them, or a retry answered from its first result).
    async fn call_ns(&self, t: Target, c: &Creds, op: Op) -> Result<(Reply, Option<Vec<Attr>>)> {
        match self.call_with(t, c, op, Bytes::new(), true, 0).await?.0 {
            Reply::WithParents { reply, parents } => Ok((*reply, Some(parents))),
            r => Ok((r, None)),
        }
    }

    async fn call_with(
        &self,
        t: Target,
        c: &Creds,
        op: Op,
        data: Bytes,
        parents: bool,
        inline: u32,
    ) -> Result<(Reply, Bytes)> {
        if self.closed.load(Ordering::Acquire) {
            return Err(err(Errno::ENOTCONN, "volume is unmounted"));
        }
        // A change of an inode's data or attributes by this client: quick-read content of
        // it is dropped before (so no read is answered from it meanwhile) and after (what
        // a lookup in flight meanwhile brought is refused).
        let mutation = op.is_mutation();
        if mutation {
            self.data.invalidate(t.key);
        }
        let r = self.call_loop(t, c, op, data, parents, inline).await;
        if mutation {
            self.data.invalidate(t.key);
        }
        r
    }

    async fn call_loop(
        &self,
        t: Target,
        c: &Creds,
        op: Op,
        data: Bytes,
        parents: bool,
        inline: u32,
    ) -> Result<(Reply, Bytes)> {
        let deadline = tokio::time::Instant::now() + RETRY_BUDGET;
        let mut attempt = 0u32;
        // One id for every attempt of this op.
        let req_id = op.is_mutation().then(|| msg::ReqId {
            client: self.client_id,
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
        });
        loop {
            let map = self.map();
            let set = map.set_by_id(t.set).or_else(|| map.sets.first()).ok_or_else(|| {
                err(Errno::EIO, format!("{}: volume has no replica sets", map.name))
            })?;
            let last = tokio::time::Instant::now() >= deadline;
            let head = cairn_placement::head(set, t.key);
            let res = match head {
                None => Err(err(
                    Errno::EHOSTDOWN,
                    format!("{}: no brick of replica set {} is up", map.name, set.id),
                )),
                Some(b) => {
                    let req = BrickRequest {
                        volume: map.name.clone(),
                        brick: b.index,
                        epoch: map.epoch,
                        creds: c.clone(),
                        op: op.clone(),
                        req: req_id,
                        parents,
                        inline,
                    };
                    self.count(op.name());
                    match self.pool.get(&b.addr).await {
                        Ok(conn) => conn.call(Request::Brick(req), data.clone()).await,
                        Err(e) => Err(e),
                    }
                    .map_err(|e| {
                        if matches!(
                            e.errno.0,
                            libc::ENOTCONN | libc::ECONNREFUSED | libc::ECONNRESET
                        ) {
                            self.pool.forget(&b.addr);
                        }
                        RemoteError::new(
                            e.errno,
                            format!(
                                "{}: brick {} ({}:{}): {}",
                                map.name, b.index, b.node, b.path, e.message
                            ),
                        )
                    })
                }
            };
            match res {
                Err(e) if is_retryable(&e) && !last => {
                    attempt += 1;
                    tracing::debug!(error = %e, attempt, "retrying after map refresh");
                    let wait = Duration::from_millis((25 * attempt as u64).min(500));
                    tokio::select! {
                        _ = self.map_changed.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                    self.refresh_map().await;
                }
                other => return other,
            }
        }
    }

    /// An op on inode `id` at the head of its home set, with no bulk data; the reply only.
    async fn on_home(&self, c: &Creds, id: Id, op: Op) -> Result<Reply> {
        Ok(self.call(Target { set: self.home(id), key: id }, c, op, Bytes::new()).await?.0)
    }

    /// Send what is buffered of `id`, then give back its delegation (even when the flush
    /// failed: the flush's error is returned).
    async fn deleg_return(self: &Arc<Self>, id: Id) -> Result<()> {
        let flushed = self.flush(id).await;
        self.on_home(&Creds::root(), id, Op::DelegReturn { id }).await?;
        flushed
    }

    fn home(&self, id: Id) -> u32 {
        home_set(&self.map(), id).id
    }

    fn hashed(&self, dir: Id, name: &[u8]) -> u32 {
        hashed_set(&self.map(), dir, name).id
    }

    fn set_ids(&self) -> Vec<u32> {
        self.map().sets.iter().map(|s| s.id).collect()
    }

    /// Before a request whose reply will be [`remember`](Self::remember)ed: its tokens.
    fn begin_tokens(&self) -> Tokens {
        Tokens { entry: self.entries.begin(), attr: self.attrs.begin() }
    }

    /// What a request begun with `t` (taken before it left) found or made: `name` in
    /// `dir` is `a`. The entry is not cached if a recall of `dir`'s entries, or this
    /// client's change of the name, came since; the attributes are not if a recall of
    /// `a.id`, or this client's change of it, came since (`cache/src/guard.rs`).
    fn remember(&self, t: Tokens, dir: Id, name: &[u8], a: &Attr) {
        self.entries.put(t.entry, dir, name, a.id);
        self.attrs.put(t.attr, a);
        self.remember_kind(a);
    }

    /// As [`remember`](Self::remember), for an op that changed the existing inode `a` (a
    /// link: its nlink and ctime): its attributes are installed as this client's change
    /// ([`AttrCache::put_change`]), so a fetch of them in flight across it is refused.
    fn remember_changed(&self, t: Tokens, dir: Id, name: &[u8], a: &Attr) {
        self.entries.put(t.entry, dir, name, a.id);
        self.attrs.put_change(t.attr, a);
        self.remember_kind(a);
    }

    /// A name found by a lookup or a listing: as [`remember`](Self::remember), except that
    /// on a volume of several sets a directory's attributes are not cached. They are one
    /// set's copy (the others' may be newer) and only that set leased them, so a change
    /// through another set would recall nothing; the next `getattr` fetches them merged
    /// from every set (and leased by each), and namespace ops amend only those.
    fn remember_found(&self, t: Tokens, dir: Id, name: &[u8], a: &Attr) {
        if a.kind == FileType::Directory && self.map().sets.len() > 1 {
            self.entries.put(t.entry, dir, name, a.id);
            self.remember_kind(a);
        } else {
            self.remember(t, dir, name, a);
        }
    }

    fn remember_kind(&self, a: &Attr) {
        let mut k = self.kinds.lock();
        if k.len() >= KINDS_MAX {
            k.clear();
        }
        k.insert(a.id, a.kind);
    }

    /// Before a namespace op changing directories `dirs`: see [`DirChange`].
    fn begin_dirs(&self, dirs: &[Id]) -> DirChange {
        DirChange {
            amends: dirs.iter().map(|d| (*d, self.attrs.begin_amend(*d))).collect(),
            copies: vec![],
            unknown: vec![],
        }
    }

    /// After this client's op that makes `name` in `dir` (its own changes recall nothing
    /// here): the name exists if the op succeeded or found it there; otherwise what the
    /// directory holds is not known.
    fn named<T>(&self, dir: Id, name: &[u8], r: &Result<T>) {
        match r {
            Ok(_) => self.complete.added(dir, name),
            Err(e) if e.errno == Errno::EEXIST => self.complete.added(dir, name),
            Err(_) => self.complete.invalidate(dir),
        }
        self.complete.touch(dir);
    }

    /// After this client's op that removes `name` from `dir`: as [`named`](Self::named).
    fn unnamed<T>(&self, dir: Id, name: &[u8], r: &Result<T>) {
        match r {
            Ok(_) => self.complete.removed(dir, name),
            Err(_) => self.complete.invalidate(dir),
        }
        self.complete.touch(dir);
    }

    fn forget_entry(&self, dir: Id, name: &[u8]) {
        self.entries.remove(dir, name);
        self.attrs.invalidate(dir);
    }

    // ---- write-behind ----

    fn has_pending(&self, id: Id) -> bool {
        self.wb.busy(id)
    }

    /// Send an extent in the background, once the earlier writes it overlaps are done.
    fn spawn_send(self: &Arc<Self>, id: Id, s: cairn_cache::Send) {
        let me = self.clone();
        tokio::spawn(async move {
            let cairn_cache::Send { creds, offset, data, after, done } = s;
            for w in after {
                w.wait().await;
            }
            if let Err(e) = me.write_now(&creds, id, offset, data).await {
                tracing::warn!(%id, offset, error = %e, "write-behind flush failed; reporting on next call");
                me.wb.set_error(id, e);
            }
            drop(done);
        });
    }

    /// Wait while the file has too much in flight (the oldest flight first).
    async fn wait_room(&self, id: Id) {
        let max_bytes = self.wb.limit() as u64 * MAX_INFLIGHT_BUFFERS;
        while let Some(w) = self.wb.full(id, MAX_INFLIGHT, max_bytes) {
            w.wait().await;
        }
    }

    /// Send what is buffered and wait for every write of `id` in flight: a barrier.
    async fn flush(self: &Arc<Self>, id: Id) -> Result<()> {
        if let Some(s) = self.wb.take(id) {
            self.spawn_send(id, s);
        }
        for w in self.wb.flights(id) {
            w.wait().await;
        }
        match self.wb.take_error(id) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn write_now(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        let t = Target { set: self.home(id), key: id };
        let mut done = 0usize;
        while done < data.len() {
            let n = (data.len() - done).min(MAX_IO);
            let chunk = data.slice(done..done + n);
            let token = self.attrs.begin();
            let (r, _) =
                self.call(t, c, Op::Write { id, offset: offset + done as u64 }, chunk).await?;
            match r {
                Reply::Written { count, attr } => {
                    // This client's own change: voids fetches in flight (which may have
                    // been served before it); writes of one file in flight together
                    // answer in any order, and the newest is kept (`AttrCache::put_change`).
                    self.attrs.put_change(token, &attr);
                    done += count as usize;
                    if (count as usize) < n {
                        break;
                    }
                }
                other => return Err(unexpected("write", &other)),
            }
        }
        Ok(done as u32)
    }

    // ---- pushes ----

    async fn run_pushes(
        self: Arc<Self>,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<(String, Push)>,
    ) {
        while let Some((addr, p)) = rx.recv().await {
            match p {
                Push::MapChanged(m) => self.set_map(*m),
                Push::Recall { id, .. } => {
                    let cb = self.on_recall.read().clone();
                    match cb {
                        Some(cb) => cb(id),
                        // Nobody to return it: give it back at once.
                        None => {
                            let me = self.clone();
                            tokio::spawn(async move {
                                let _ = me.deleg_return(id).await;
                            });
                        }
                    }
                }
                Push::Invalidate { id, entries, seq, .. } => {
                    self.attrs.invalidate(id);
                    self.data.invalidate(id);
                    if entries {
                        self.entries.invalidate_dir(id);
                        self.complete.invalidate(id);
                    }
                    let cb = self.on_invalidate.read().clone();
                    let done = cb.and_then(|cb| cb(id, entries));
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Some(done) = done {
                            if tokio::time::timeout(INVALIDATE_ACK_WAIT, done).await.is_err() {
                                tracing::debug!(%id, "recall upcall still running; acknowledging");
                            }
                        }
                        if let Ok(c) = me.pool.get(&addr).await {
                            let _ = c.call(Request::InvalidateAck { seq }, Bytes::new()).await;
                        }
                    });
                }
            }
        }
    }

    /// Keep one subscription for map pushes alive.
    async fn run_subscription(self: Arc<Self>) {
        let mut current: Option<Arc<cairn_proto::rpc::Connection>> = None;
        while !self.closed.load(Ordering::Acquire) {
            if current.as_ref().map(|c| c.is_closed()).unwrap_or(true) {
                current = None;
                let map = self.map();
                let mut addrs: Vec<String> = self.opts.servers.clone();
                addrs.extend(map.sets.iter().flat_map(|s| {
                    s.bricks.iter().filter(|b| b.state != BrickState::Down).map(|b| b.addr.clone())
                }));
                for a in addrs {
                    let Ok(c) = self.pool.get(&a).await else { continue };
                    if let Ok((Reply::Map(m), _)) =
                        c.call(Request::Subscribe { volume: map.name.clone() }, Bytes::new()).await
                    {
                        self.set_map(*m);
                        current = Some(c);
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Volume {
    pub async fn mount(opts: MountOptions) -> Result<Arc<Volume>> {
        if opts.volume.is_empty() {
            return Err(err(Errno::EINVAL, "no volume name given"));
        }
        if opts.servers.is_empty() {
            return Err(err(Errno::EINVAL, "no server given"));
        }
        let (pool, rx) = Pool::new(opts.client_name.clone(), opts.connect_timeout);
        let mut last = err(Errno::ENOTCONN, "no server answered");
        let mut found = None;
        for s in &opts.servers {
            match pool.get(s).await {
                Ok(c) => match c
                    .call(Request::Subscribe { volume: opts.volume.clone() }, Bytes::new())
                    .await
                {
                    Ok((Reply::Map(m), _)) => {
                        found = Some(*m);
                        break;
                    }
                    Ok((other, _)) => last = unexpected("subscribe", &other),
                    Err(e) => last = RemoteError::new(e.errno, format!("{s}: {}", e.message)),
                },
                Err(e) => last = e,
            }
        }
        let map = found.ok_or(last)?;
        if map.status != cairn_proto::map::VolumeStatus::Started {
            return Err(err(
                Errno::ENOTCONN,
                format!("volume {} is not started (status {})", map.name, map.status),
            ));
        }
        let inner = Arc::new(Inner {
            attrs: AttrCache::new(opts.cache_timeout),
            entries: EntryCache::new(opts.cache_timeout),
            complete: DirStates::new(opts.cache_timeout),
            data: DataCache::new(opts.cache_timeout, QUICK_READ_BYTES),
            kinds: Mutex::default(),
            wb: WriteBehind::new(opts.write_behind_bytes),
            wb_on: AtomicBool::new(opts.write_behind),
            opts,
            map: RwLock::new(Arc::new(map.clone())),
            map_changed: Notify::new(),
            pool,
            opens: Mutex::default(),
            on_invalidate: RwLock::new(None),
            on_recall: RwLock::new(None),
            by_op: Mutex::default(),
            round_trips: AtomicU64::new(0),
            quick_reads: AtomicU64::new(0),
            negative_hits: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            // 64 random bits (an id's low bits are random).
            client_id: Id::new_on_set(0).0 as u64,
            next_seq: AtomicU64::new(1),
        });
        inner.apply_options(&map);
        tokio::spawn(inner.clone().run_pushes(rx));
        tokio::spawn(inner.clone().run_subscription());
        Ok(Arc::new(Volume { inner }))
    }

    /// Flush everything buffered and close all connections.
    pub async fn unmount(&self) -> Result<()> {
        let i = &self.inner;
        if i.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut first_err = None;
        let ids = i.wb.dirty();
        for id in ids {
            if let Err(e) = i.flush(id).await {
                first_err.get_or_insert(e);
            }
        }
        let registered: Vec<Id> =
            i.opens.lock().drain().filter(|(_, o)| o.registered).map(|(id, _)| id).collect();
        for id in registered {
            let _ = i.on_home(&Creds::root(), id, Op::Release { id }).await;
        }
        i.closed.store(true, Ordering::Release);
        i.pool.close_all();
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn map(&self) -> Arc<VolumeMap> {
        self.inner.map()
    }

    pub fn volume_id(&self) -> u128 {
        self.inner.map().id
    }

    pub fn stats(&self) -> Stats {
        let mut by_op: Vec<(&'static str, u64)> =
            self.inner.by_op.lock().iter().map(|(k, v)| (*k, *v)).collect();
        by_op.sort();
        Stats {
            round_trips: self.inner.round_trips.load(Ordering::Relaxed),
            by_op,
            quick_reads: self.inner.quick_reads.load(Ordering::Relaxed),
            negative_hits: self.inner.negative_hits.load(Ordering::Relaxed),
        }
    }

    /// Register the upcall for lease recalls (Ganesha's and Samba's cache invalidation).
    pub fn on_invalidate(&self, f: InvalidateFn) {
        *self.inner.on_invalidate.write() = Some(f);
    }

    /// Register (or with `None` remove) the upcall for delegation recalls.
    pub fn on_recall(&self, f: Option<RecallFn>) {
        *self.inner.on_recall.write() = f;
    }

    /// Drop every cached attribute and entry (tests and benchmarks measure cold paths).
    pub fn drop_caches(&self) {
        self.inner.attrs.clear();
        self.inner.entries.clear();
        self.inner.complete.clear();
        self.inner.data.clear();
    }

    async fn lookup_remote(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        let i = &self.inner;
        let map = i.map();
        let hashed = i.hashed(dir, name);
        let inline = if i.opts.quick_read > 0 && i.data.want() { i.opts.quick_read } else { 0 };
        let token = i.data.begin();
        let found = i.begin_tokens();
        let look = |set: u32| {
            let op = Op::Lookup { dir, name: name.to_vec() };
            i.call_with(Target { set, key: dir }, c, op, Bytes::new(), false, inline)
        };
        let r = look(hashed).await;
        let r = match r {
            Err(e) if e.errno == Errno::ENOENT && map.rebalancing => {
                // A rebalance may have moved the name: look everywhere.
                let mut found = Err(e);
                for s in map.sets.iter().filter(|s| s.id != hashed) {
                    let r = look(s.id).await;
                    if r.is_ok() {
                        found = r;
                        break;
                    }
                }
                found
            }
            r => r,
        };
        let attr = match r? {
            (Reply::EntryData { attr }, data) => {
                i.remember_found(found, dir, name, &attr);
                i.data.put(token, &attr, c, data);
                return Ok(attr);
            }
            (r, _) => r,
        };
        let attr = match attr {
            Reply::Entry { attr, linkto: None } => attr,
            Reply::Entry { linkto: Some(target), .. } => self.getattr_remote(c, target).await?,
            other => return Err(unexpected("lookup", &other)),
        };
        i.remember_found(found, dir, name, &attr);
        Ok(attr)
    }

    fn adjust(&self, mut a: Attr) -> Attr {
        if let Some(end) = self.inner.wb.buffered_end(a.id) {
            a.size = a.size.max(end);
        }
        a
    }

    /// The attributes of `id` as cached now (a buffered write's end folded into the size),
    /// if they are: no round trip and no flush of write-behind.
    pub fn cached_attr(&self, id: Id) -> Option<Attr> {
        self.inner.attrs.get(id).map(|a| self.adjust(a))
    }

    pub async fn lookup(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        let r = self.lookup_cached(c, dir, name).await;
        if matches!(&r, Err(e) if e.errno == Errno::ENOENT) {
            self.list_complete(c, dir).await;
        }
        r
    }

    /// After a lookup in `dir` found nothing: list `dir` on every set (leased there), so
    /// the next lookups of names not in it are answered from memory (`cache/src/dirstate.rs`).
    async fn list_complete(&self, c: &Creds, dir: Id) {
        let i = &self.inner;
        let map = i.map();
        if map.rebalancing || !i.complete.want(dir, map.epoch) {
            return;
        }
        let token = i.complete.begin();
        let list = |set: u32| {
            let op = Op::ReadDir { dir, cookie: 0, max: LIST_MAX, plus: false };
            i.call(Target { set, key: dir }, c, op, Bytes::new())
        };
        let lists = futures::future::join_all(map.sets.iter().map(|s| list(s.id))).await;
        let mut names = std::collections::HashSet::new();
        for r in lists {
            match r {
                Ok((Reply::Dir { entries, eof: true }, _)) => {
                    names.extend(entries.into_iter().map(|e| e.name))
                }
                _ => {
                    i.complete.give_up(dir);
                    return;
                }
            }
        }
        i.complete.install(token, dir, names, map.epoch);
    }

    async fn lookup_cached(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        valid_name(name)?;
        if let Some(id) = self.inner.entries.get(dir, name) {
            if let Some(a) = self.inner.attrs.get(id) {
                return Ok(self.adjust(a));
            }
            // A directory's attributes are cached only merged (`remember_found`): fetch
            // them so, and later lookups are answered from the cache again.
            if self.inner.kinds.lock().get(&id) == Some(&FileType::Directory) {
                match self.getattr_remote(c, id).await {
                    Ok(a) => return Ok(a),
                    Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => {
                        self.inner.entries.remove(dir, name);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let map = self.inner.map();
        if !map.rebalancing && self.inner.complete.absent(dir, name, map.epoch) {
            self.inner.negative_hits.fetch_add(1, Ordering::Relaxed);
            return Err(err(
                Errno::ENOENT,
                format!(
                    "{}: no such entry (directory {dir} listed)",
                    String::from_utf8_lossy(name)
                ),
            ));
        }
        self.lookup_remote(c, dir, name).await
    }

    /// The parent directory of directory `dir` (the root's is the root), as the bricks know
    /// it now: for a gateway that knows a directory only by handle (after a restart) and is
    /// asked for `..` (NFSv4 LOOKUPP, NFSv3 READDIR's `..`). Not cached: a rename moves it.
    pub async fn lookup_parent(&self, c: &Creds, dir: Id) -> Result<Attr> {
        let i = &self.inner;
        let target = Target { set: i.home(dir), key: dir };
        let look = Op::Lookup { dir, name: b"..".to_vec() };
        match i.call(target, c, look, Bytes::new()).await?.0 {
            Reply::Entry { attr, .. } => self.getattr(c, attr.id).await,
            other => Err(unexpected("lookup of ..", &other)),
        }
    }

    /// Resolve a `/`-separated path relative to the volume root (no symlinks followed):
    /// the directory chain on one brick, then the entry on its hashed set.
    pub async fn resolve(&self, c: &Creds, path: &[u8]) -> Result<Attr> {
        let comps: Vec<&[u8]> =
            path.split(|&b| b == b'/').filter(|p| !p.is_empty() && *p != b".").collect();
        for p in &comps {
            valid_name(p)?;
        }
        let Some((last, dirs)) = comps.split_last() else {
            return self.getattr(c, Id::ROOT).await;
        };
        // Warm path: every directory of the chain is cached.
        let mut cur = Id::ROOT;
        let mut cached = true;
        for d in dirs {
            match self.inner.entries.get(cur, d) {
                Some(id) => cur = id,
                None => {
                    cached = false;
                    break;
                }
            }
        }
        if !cached {
            let i = &self.inner;
            let first = i.set_ids()[0];
            let comps: Vec<Name> = dirs.iter().map(|d| d.to_vec()).collect();
            let found = i.begin_tokens();
            let (r, _) = i
                .call(
                    Target { set: first, key: Id::ROOT },
                    c,
                    Op::LookupPath { components: comps },
                    Bytes::new(),
                )
                .await?;
            let attrs = match r {
                Reply::Attrs(v) => v,
                other => return Err(unexpected("lookup_path", &other)),
            };
            cur = Id::ROOT;
            for (d, a) in dirs.iter().zip(attrs.iter()) {
                i.remember_found(found, cur, d, a);
                cur = a.id;
            }
            if attrs.len() < dirs.len() {
                // Find out exactly why the chain stopped.
                let failed = dirs[attrs.len()];
                let a = self.lookup_remote(c, cur, failed).await?;
                if a.kind != FileType::Directory {
                    return Err(err(
                        Errno::ENOTDIR,
                        format!("{}: not a directory", String::from_utf8_lossy(failed)),
                    ));
                }
                return Err(err(
                    Errno::ENOENT,
                    format!("{}: no such directory", String::from_utf8_lossy(failed)),
                ));
            }
        }
        self.lookup(c, cur, last).await
    }

    async fn getattr_remote(&self, c: &Creds, id: Id) -> Result<Attr> {
        let i = &self.inner;
        let home = i.home(id);
        let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != home).collect();
        let get = |s: u32| i.call(Target { set: s, key: id }, c, Op::GetAttr { id }, Bytes::new());
        let token = i.attrs.begin();
        // A directory known as one asks every set at once (one round trip, not two).
        let known_dir = i.kinds.lock().get(&id) == Some(&FileType::Directory);
        let (r, early) = if known_dir && !others.is_empty() {
            let (home_r, rest) = futures::future::join(
                get(home),
                futures::future::join_all(others.iter().map(|s| get(*s))),
            )
            .await;
            (home_r?.0, Some(rest))
        } else {
            (get(home).await?.0, None)
        };
        let mut a = attr_of("getattr", r)?;
        if a.kind == FileType::Directory {
            // A directory exists on every set; entries changed on other sets moved their
            // copies' times.
            let rest = match early {
                Some(rest) => rest,
                None => futures::future::join_all(others.iter().map(|s| get(*s))).await,
            };
            for (r, _) in rest.into_iter().flatten() {
                if let Reply::Attr(o) = r {
                    merge_dir_copy(&mut a, &o, false);
                }
            }
        }
        i.attrs.put(token, &a);
        i.remember_kind(&a);
        Ok(a)
    }

    pub async fn getattr(&self, c: &Creds, id: Id) -> Result<Attr> {
        if self.inner.has_pending(id) {
            self.inner.flush(id).await?;
        }
        if let Some(a) = self.inner.attrs.get(id) {
            return Ok(a);
        }
        self.getattr_remote(c, id).await
    }

    async fn kind_of(&self, c: &Creds, id: Id) -> Result<FileType> {
        if let Some(k) = self.inner.kinds.lock().get(&id) {
            return Ok(*k);
        }
        if let Some(a) = self.inner.attrs.get(id) {
            return Ok(a.kind);
        }
        Ok(self.getattr_remote(c, id).await?.kind)
    }

    /// Run a per-inode op on the right set(s): a file's home set, or every set of a
    /// directory (home set first, so its errors win). The caller drops or replaces the
    /// inode's cached attributes.
    async fn on_inode(&self, c: &Creds, id: Id, op: Op) -> Result<(Reply, Bytes)> {
        let i = &self.inner;
        let home = i.home(id);
        let r = i.call(Target { set: home, key: id }, c, op.clone(), Bytes::new()).await?;
        if self.kind_of(c, id).await? == FileType::Directory {
            let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != home).collect();
            let calls = others
                .iter()
                .map(|s| i.call(Target { set: *s, key: id }, c, op.clone(), Bytes::new()));
            for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
                if let Err(e) = r {
                    tracing::warn!(%id, set = s, op = op.name(), error = %e, "directory copy not updated on one set");
                }
            }
        }
        Ok(r)
    }

    pub async fn setattr(&self, c: &Creds, id: Id, set: &SetAttr) -> Result<Attr> {
        if self.inner.has_pending(id) {
            self.inner.flush(id).await?;
        }
        let i = &self.inner;
        // Taken before the op leaves: a recall crossing it voids its reply (and an
        // invalidation here, between the op and the put, would void its own reply). Its
        // install voids fetches of the inode in flight, which may carry the attributes
        // from before it (`AttrCache::put_change`); invalidating does too.
        let token = i.attrs.begin();
        let r = self.on_inode(c, id, Op::SetAttr { id, set: set.clone() }).await;
        let a = r.and_then(|(r, _)| attr_of("setattr", r));
        match &a {
            // One set's copy of a directory: the next getattr merges every set's.
            Ok(a) if a.kind != FileType::Directory => {
                i.attrs.put_change(token, a);
            }
            _ => i.attrs.invalidate(id),
        }
        a
    }

    async fn make_entry(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        kind: FileType,
        perm: u32,
        rdev: u64,
        target: Option<Name>,
        exclusive: bool,
    ) -> Result<Attr> {
        valid_name(name)?;
        let i = &self.inner;
        let set = i.hashed(dir, name);
        let id = Id::new_on_set(set);
        let op =
            Op::Create { dir, name: name.to_vec(), id, kind, perm, rdev, target, exclusive: true };
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let made = i.begin_tokens();
        let r = i.call_ns(Target { set, key: dir }, c, op).await;
        i.named(dir, name, &r);
        change.step(set, &[dir], &r);
        match r {
            Ok((r, _)) => {
                let a = attr_of("create", r)?;
                i.remember(made, dir, name, &a);
                change.finish(i);
                Ok(a)
            }
            Err(e) if e.errno == Errno::EEXIST => {
                i.entries.remove(dir, name);
                let existing = self.lookup_remote(c, dir, name).await;
                match existing {
                    // Our own create, answered on a retry after a fail-over.
                    Ok(a) if a.id == id => {
                        i.attrs.invalidate(dir);
                        Ok(a)
                    }
                    Ok(a)
                        if !exclusive
                            && kind == FileType::Regular
                            && a.kind == FileType::Regular =>
                    {
                        Ok(a)
                    }
                    _ => Err(e),
                }
            }
            // The op may have been applied (a connection lost after it was sent): the
            // parent's cached attributes are not trusted, as mkdir and link do.
            Err(e) => {
                change.finish(i);
                Err(e)
            }
        }
    }

    pub async fn create(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        perm: u32,
        exclusive: bool,
    ) -> Result<Attr> {
        self.make_entry(c, dir, name, FileType::Regular, perm, 0, None, exclusive).await
    }

    pub async fn mknod(
        &self,
        c: &Creds,
        dir: Id,
        name: &[u8],
        kind: FileType,
        perm: u32,
        rdev: u64,
    ) -> Result<Attr> {
        if kind == FileType::Directory || kind == FileType::Symlink {
            return Err(err(Errno::EINVAL, "mknod cannot make directories or symlinks"));
        }
        self.make_entry(c, dir, name, kind, perm, rdev, None, true).await
    }

    pub async fn mkdir(&self, c: &Creds, dir: Id, name: &[u8], perm: u32) -> Result<Attr> {
        valid_name(name)?;
        let i = &self.inner;
        let hashed = i.hashed(dir, name);
        let id = Id::new_on_set(hashed);
        let op = Op::Mkdir { dir, name: name.to_vec(), id, perm };
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let made = i.begin_tokens();
        let r = i.call_ns(Target { set: hashed, key: dir }, c, op.clone()).await;
        i.named(dir, name, &r);
        change.step(hashed, &[dir], &r);
        let a = match r {
            Ok((r, _)) => attr_of("mkdir", r)?,
            Err(e) if e.errno == Errno::EEXIST => {
                i.entries.remove(dir, name);
                i.attrs.invalidate(dir);
                match self.lookup_remote(c, dir, name).await {
                    Ok(a) if a.id == id => a,
                    _ => return Err(e),
                }
            }
            Err(e) => {
                change.finish(i);
                return Err(e);
            }
        };
        // The directory and its new entry exist on every set: each set's copy of the
        // parent changed (times, nlink).
        let others: Vec<u32> = i.set_ids().into_iter().filter(|s| *s != hashed).collect();
        let calls = others.iter().map(|s| i.call_ns(Target { set: *s, key: dir }, c, op.clone()));
        for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
            change.step(*s, &[dir], &r);
            match r {
                Ok(_) => {}
                Err(e) if e.errno == Errno::EEXIST => {}
                Err(e) => {
                    tracing::warn!(%dir, set = s, error = %e, "mkdir did not reach one replica set")
                }
            }
        }
        i.remember(made, dir, name, &a);
        change.finish(i);
        Ok(a)
    }

    pub async fn symlink(&self, c: &Creds, dir: Id, name: &[u8], target: &[u8]) -> Result<Attr> {
        if target.is_empty() || target.len() > 4095 || target.contains(&0) {
            return Err(err(Errno::EINVAL, "symlink target must be 1-4095 bytes without NUL"));
        }
        self.make_entry(c, dir, name, FileType::Symlink, 0o777, 0, Some(target.to_vec()), true)
            .await
    }

    pub async fn readlink(&self, c: &Creds, id: Id) -> Result<Vec<u8>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::Readlink { id }).await? {
            Reply::Bytes(b) => Ok(b),
            other => Err(unexpected("readlink", &other)),
        }
    }

    pub async fn link(&self, c: &Creds, id: Id, dir: Id, name: &[u8]) -> Result<Attr> {
        valid_name(name)?;
        let i = &self.inner;
        let home = i.home(id);
        let hashed = i.hashed(dir, name);
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let made = i.begin_tokens();
        let r = i
            .call_ns(Target { set: home, key: dir }, c, Op::Link { id, dir, name: name.to_vec() })
            .await;
        i.named(dir, name, &r);
        change.step(home, &[dir], &r);
        let r = match r {
            Ok((r, _)) => r,
            Err(e) => {
                change.finish(i);
                return Err(e);
            }
        };
        let a = attr_of("link", r)?;
        if hashed != home {
            let mk = Op::MkLinkto { dir, name: name.to_vec(), target: id };
            let r = i.call_ns(Target { set: hashed, key: dir }, c, mk).await;
            change.step(hashed, &[dir], &r);
            if let Err(e) = r {
                i.attrs.invalidate(dir);
                i.complete.invalidate(dir);
                // Undo so the name does not exist half-way.
                let _ = i
                    .call(
                        Target { set: home, key: dir },
                        c,
                        Op::Unlink { dir, name: name.to_vec() },
                        Bytes::new(),
                    )
                    .await;
                return Err(e);
            }
        }
        i.remember_changed(made, dir, name, &a);
        change.finish(i);
        Ok(a)
    }

    pub async fn unlink(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        valid_name(name)?;
        let a = self.lookup(c, dir, name).await?;
        let i = &self.inner;
        let hashed = i.hashed(dir, name);
        let (home, is_dir) = (i.home(a.id), a.kind == FileType::Directory);
        if !is_dir {
            // Keep the inode alive on the bricks if it is open here.
            let register = {
                let mut o = i.opens.lock();
                match o.get_mut(&a.id) {
                    Some(s) if s.count > 0 && !s.registered => {
                        s.registered = true;
                        true
                    }
                    _ => false,
                }
            };
            if register {
                i.call(Target { set: home, key: a.id }, c, Op::Open { id: a.id }, Bytes::new())
                    .await?;
            }
        }
        let real = if is_dir { hashed } else { home };
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let r = i
            .call_ns(Target { set: real, key: dir }, c, Op::Unlink { dir, name: name.to_vec() })
            .await;
        i.unnamed(dir, name, &r);
        change.step(real, &[dir], &r);
        i.entries.remove(dir, name);
        i.attrs.invalidate(a.id);
        if let Err(e) = r {
            i.attrs.invalidate(dir);
            return Err(e);
        }
        if !is_dir && hashed != home {
            let r = i
                .call_ns(
                    Target { set: hashed, key: dir },
                    &Creds::root(),
                    Op::Unlink { dir, name: name.to_vec() },
                )
                .await;
            change.step(hashed, &[dir], &r);
            if let Err(e) = r {
                if e.errno != Errno::ENOENT {
                    tracing::warn!(%dir, name = %String::from_utf8_lossy(name), error = %e, "stale linkto left behind");
                }
            }
        }
        change.finish(i);
        Ok(())
    }

    /// A directory's entries are spread over the sets: it is empty only if it is empty on
    /// every one of them (a single set's rmdir/rename would not notice the others).
    async fn check_empty(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        let i = &self.inner;
        let sets = i.set_ids();
        if sets.len() < 2 {
            return Ok(());
        }
        let probes = sets.iter().map(|s| {
            i.call(
                Target { set: *s, key: dir },
                c,
                Op::ReadDir { dir, cookie: 0, max: 1, plus: false },
                Bytes::new(),
            )
        });
        for r in futures::future::join_all(probes).await {
            if let (Reply::Dir { entries, .. }, _) = r? {
                if !entries.is_empty() {
                    return Err(err(
                        Errno::ENOTEMPTY,
                        format!("{}: directory not empty", String::from_utf8_lossy(name)),
                    ));
                }
            }
        }
        Ok(())
    }

    pub async fn rmdir(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        valid_name(name)?;
        let a = self.lookup(c, dir, name).await?;
        if a.kind != FileType::Directory {
            return Err(err(
                Errno::ENOTDIR,
                format!("{}: not a directory", String::from_utf8_lossy(name)),
            ));
        }
        let i = &self.inner;
        let sets = i.set_ids();
        self.check_empty(c, a.id, name).await?;
        let hashed = i.hashed(dir, name);
        let op = Op::Rmdir { dir, name: name.to_vec() };
        let others: Vec<u32> = sets.iter().copied().filter(|s| *s != hashed).collect();
        let mut change = i.begin_dirs(&[dir]);
        i.complete.touch(dir);
        let calls = others.iter().map(|s| i.call_ns(Target { set: *s, key: dir }, c, op.clone()));
        for (s, r) in others.iter().zip(futures::future::join_all(calls).await) {
            change.step(*s, &[dir], &r);
            match r {
                Ok(_) => {}
                Err(e) if e.errno == Errno::ENOENT => {}
                Err(e) => {
                    i.forget_entry(dir, name);
                    i.complete.invalidate(dir);
                    return Err(e);
                }
            }
        }
        let r = i.call_ns(Target { set: hashed, key: dir }, c, op).await;
        i.unnamed(dir, name, &r);
        i.complete.invalidate(a.id);
        change.step(hashed, &[dir], &r);
        i.entries.remove(dir, name);
        i.attrs.invalidate(a.id);
        i.entries.invalidate_dir(a.id);
        match r {
            Ok(_) => {
                change.finish(i);
                Ok(())
            }
            Err(e) => {
                i.attrs.invalidate(dir);
                Err(e)
            }
        }
    }

    pub async fn rename(
        &self,
        c: &Creds,
        src_dir: Id,
        src: &[u8],
        dst_dir: Id,
        dst: &[u8],
        flags: u32,
    ) -> Result<()> {
        valid_name(src)?;
        valid_name(dst)?;
        let i = &self.inner;
        let s = self.lookup(c, src_dir, src).await?;
        let d = match self.lookup(c, dst_dir, dst).await {
            Ok(a) => Some(a),
            Err(e) if e.errno == Errno::ENOENT => None,
            Err(e) => return Err(e),
        };
        if flags & rename_flags::NOREPLACE != 0 && d.is_some() {
            return Err(err(Errno::EEXIST, format!("{}: exists", String::from_utf8_lossy(dst))));
        }
        if flags & rename_flags::EXCHANGE != 0 && (i.set_ids().len() > 1 || d.is_none()) {
            return Err(err(
                Errno::EINVAL,
                "RENAME_EXCHANGE is only supported on single-set volumes",
            ));
        }
        if let Some(d) = &d {
            if d.id == s.id {
                return Ok(()); // Two names of one inode: POSIX says do nothing.
            }
        }
        let op =
            Op::Rename { src_dir, src_name: src.to_vec(), dst_dir, dst_name: dst.to_vec(), flags };
        if s.kind == FileType::Directory {
            if let Some(d) = &d {
                if d.kind != FileType::Directory {
                    return Err(err(
                        Errno::ENOTDIR,
                        format!("{}: not a directory", String::from_utf8_lossy(dst)),
                    ));
                }
                self.check_empty(c, d.id, dst).await?;
            }
        } else if let Some(d) = &d {
            if d.kind == FileType::Directory {
                return Err(err(
                    Errno::EISDIR,
                    format!("{}: is a directory", String::from_utf8_lossy(dst)),
                ));
            }
        }
        let dirs = op.parent_dirs();
        let mut change = i.begin_dirs(&dirs);
        i.complete.touch(src_dir);
        i.complete.touch(dst_dir);
        let r = self.rename_steps(c, &op, &s, d.as_ref(), &mut change).await;
        if r.is_ok() {
            i.complete.removed(src_dir, src);
            i.complete.added(dst_dir, dst);
            i.complete.touch(src_dir);
            i.complete.touch(dst_dir);
        } else {
            i.complete.invalidate(src_dir);
            i.complete.invalidate(dst_dir);
        }
        i.entries.remove(src_dir, src);
        i.entries.remove(dst_dir, dst);
        i.attrs.invalidate(s.id);
        if let Some(d) = &d {
            i.attrs.invalidate(d.id);
        }
        change.finish(i);
        if s.kind == FileType::Directory {
            i.entries.invalidate_dir(s.id);
        }
        r
    }

    /// The bricks' part of `rename` (`op`) of `s` over `d`, each step noted in `change`.
    async fn rename_steps(
        &self,
        c: &Creds,
        op: &Op,
        s: &Attr,
        d: Option<&Attr>,
        change: &mut DirChange,
    ) -> Result<()> {
        let i = &self.inner;
        let Op::Rename { src_dir, src_name: src, dst_dir, dst_name: dst, .. } = op else {
            return Err(unexpected("rename", &Reply::Unit));
        };
        let (src_dir, dst_dir) = (*src_dir, *dst_dir);
        let dirs = op.parent_dirs();
        if s.kind == FileType::Directory {
            let first = i.hashed(dst_dir, dst);
            let r = i.call_ns(Target { set: first, key: src_dir }, c, op.clone()).await;
            change.step(first, &dirs, &r);
            r?;
            let others: Vec<u32> = i.set_ids().into_iter().filter(|x| *x != first).collect();
            let calls =
                others.iter().map(|x| i.call_ns(Target { set: *x, key: src_dir }, c, op.clone()));
            for (x, r) in others.iter().zip(futures::future::join_all(calls).await) {
                change.step(*x, &dirs, &r);
                if let Err(e) = r {
                    tracing::warn!(set = x, error = %e, "directory rename did not reach one replica set");
                }
            }
            return Ok(());
        }
        let home = i.home(s.id);
        let unlink = |dir: Id, name: &[u8]| Op::Unlink { dir, name: name.to_vec() };
        // A replaced file homed elsewhere loses its real entry there first.
        if let Some(d) = d {
            let dh = i.home(d.id);
            if dh != home {
                let r = i.call_ns(Target { set: dh, key: dst_dir }, c, unlink(dst_dir, dst)).await;
                change.step(dh, &[dst_dir], &r);
                r?;
            }
        }
        let r = i.call_ns(Target { set: home, key: src_dir }, c, op.clone()).await;
        change.step(home, &dirs, &r);
        r?;
        let (hd, hs) = (i.hashed(dst_dir, dst), i.hashed(src_dir, src));
        let root = Creds::root();
        if hd != home {
            let r = i.call_ns(Target { set: hd, key: dst_dir }, &root, unlink(dst_dir, dst)).await;
            change.step(hd, &[dst_dir], &r);
            let mk = Op::MkLinkto { dir: dst_dir, name: dst.to_vec(), target: s.id };
            let r = i.call_ns(Target { set: hd, key: dst_dir }, &root, mk).await;
            change.step(hd, &[dst_dir], &r);
            r?;
        }
        if hs != home {
            let r = i.call_ns(Target { set: hs, key: src_dir }, &root, unlink(src_dir, src)).await;
            change.step(hs, &[src_dir], &r);
        }
        Ok(())
    }

    /// Note an open (keeps an unlinked file readable until `release`). No round trip.
    pub async fn open(&self, _c: &Creds, id: Id) -> Result<()> {
        self.note_open(id);
        Ok(())
    }

    /// [`open`](Self::open) without the async call (it never waits).
    pub fn note_open(&self, id: Id) {
        self.inner.opens.lock().entry(id).or_default().count += 1;
    }

    /// [`release`](Self::release) at once if it has nothing to wait for: nothing of the file
    /// buffered or in flight, and the bricks need not hear of it (the file was not unlinked
    /// while open here, or another open remains). A deferred write error stays for the
    /// next flush/fsync/release. Returns false, having done nothing, otherwise.
    pub fn release_if_idle(&self, id: Id) -> bool {
        let i = &self.inner;
        if i.wb.busy(id) {
            return false;
        }
        let mut o = i.opens.lock();
        match o.get_mut(&id) {
            Some(s) if s.count > 1 => s.count -= 1,
            Some(s) if s.registered => return false,
            Some(_) => {
                o.remove(&id);
            }
            None => {}
        }
        true
    }

    /// A read answered from memory, if it can be (quick-read content, nothing of the file
    /// buffered or in flight): what [`read`](Self::read) would return, without waiting.
    pub fn read_cached(&self, c: &Creds, id: Id, offset: u64, len: u32) -> Option<(Bytes, bool)> {
        let i = &self.inner;
        if i.has_pending(id) {
            return None;
        }
        let data = i.attrs.get(id).and_then(|a| i.data.get(&a, c))?;
        i.quick_reads.fetch_add(1, Ordering::Relaxed);
        let start = offset.min(data.len() as u64) as usize;
        let end = offset.saturating_add(len.min(MAX_IO as u32) as u64).min(data.len() as u64);
        let end = end as usize;
        Some((data.slice(start..end), end == data.len()))
    }

    /// Flush write-behind for `id` and drop the open; returns any deferred write error.
    pub async fn release(&self, id: Id) -> Result<()> {
        let i = &self.inner;
        let r = i.flush(id).await;
        let unregister = {
            let mut o = i.opens.lock();
            match o.get_mut(&id) {
                Some(s) => {
                    s.count = s.count.saturating_sub(1);
                    if s.count == 0 {
                        o.remove(&id).map(|s| s.registered).unwrap_or(false)
                    } else {
                        false
                    }
                }
                None => false,
            }
        };
        if unregister {
            let _ = i.on_home(&Creds::root(), id, Op::Release { id }).await;
        }
        r
    }

    /// Read up to `len` bytes; the bool is true at end of file.
    pub async fn read(&self, c: &Creds, id: Id, offset: u64, len: u32) -> Result<(Bytes, bool)> {
        let i = &self.inner;
        if i.has_pending(id) {
            i.flush(id).await?;
        }
        // Quick-read: the content that came with the lookup, while the attributes it came
        // with are still the cached (leased) ones.
        if let Some(r) = self.read_cached(c, id, offset, len) {
            return Ok(r);
        }
        let len = len.min(MAX_IO as u32);
        match i
            .call(
                Target { set: i.home(id), key: id },
                c,
                Op::Read { id, offset, len },
                Bytes::new(),
            )
            .await?
        {
            (Reply::Data { eof }, data) => Ok((data, eof)),
            (other, _) => Err(unexpected("read", &other)),
        }
    }

    /// Write; buffered by write-behind when enabled (an error surfaces on a later write,
    /// flush, fsync or release of the same file).
    pub async fn write(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        let i = &self.inner;
        if let Some(e) = i.wb.take_error(id) {
            return Err(e);
        }
        if !i.wb_on.load(Ordering::Acquire) {
            if i.has_pending(id) {
                i.flush(id).await?;
            }
            return i.write_now(c, id, offset, data).await;
        }
        let len = data.len() as u32;
        i.wait_room(id).await;
        match i.wb.append(id, c, offset, &data) {
            Append::Taken { send } => {
                i.attrs.invalidate(id);
                if let Some(s) = send {
                    i.spawn_send(id, s);
                }
                Ok(len)
            }
            Append::Through { flushed, after, done } => {
                if let Some(s) = flushed {
                    i.spawn_send(id, s);
                }
                for w in after {
                    w.wait().await;
                }
                let r = match i.wb.take_error(id) {
                    Some(e) => Err(e),
                    None => i.write_now(c, id, offset, data).await,
                };
                drop(done);
                r
            }
        }
    }

    /// Write through to every live replica before returning (NFS FILE_SYNC, SCSI FUA
    /// also call `fsync`).
    pub async fn write_through(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        let i = &self.inner;
        i.flush(id).await?;
        i.write_now(c, id, offset, data).await
    }

    /// Send buffered writes of `id` to the bricks; returns any deferred error.
    pub async fn flush(&self, id: Id) -> Result<()> {
        self.inner.flush(id).await
    }

    pub async fn fsync(&self, c: &Creds, id: Id, datasync: bool) -> Result<()> {
        let i = &self.inner;
        i.flush(id).await?;
        i.on_home(c, id, Op::Fsync { id, datasync }).await.map(|_| ())
    }

    pub async fn fallocate(
        &self,
        c: &Creds,
        id: Id,
        mode: u32,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let i = &self.inner;
        i.flush(id).await?;
        let r = i.on_home(c, id, Op::Fallocate { id, mode, offset, len }).await;
        i.attrs.invalidate(id);
        r.map(|_| ())
    }

    pub async fn seek(&self, c: &Creds, id: Id, offset: u64, whence: SeekWhence) -> Result<u64> {
        let i = &self.inner;
        i.flush(id).await?;
        match i.on_home(c, id, Op::Seek { id, offset, whence }).await? {
            Reply::Offset(o) => Ok(o),
            other => Err(unexpected("seek", &other)),
        }
    }

    /// Atomically, on the brick: if the data at `offset` equals `cmp`, write `data`
    /// (same length). EILSEQ (`Errno::EMISCOMPARE`) when it differs.
    pub async fn compare_and_write(
        &self,
        c: &Creds,
        id: Id,
        offset: u64,
        cmp: Bytes,
        data: Bytes,
    ) -> Result<()> {
        if cmp.len() != data.len() || cmp.is_empty() {
            return Err(err(
                Errno::EINVAL,
                "compare_and_write: compare and write buffers must have the same, non-zero length",
            ));
        }
        let i = &self.inner;
        i.flush(id).await?;
        let mut both = bytes::BytesMut::with_capacity(cmp.len() * 2);
        both.extend_from_slice(&cmp);
        both.extend_from_slice(&data);
        let r = i
            .call(
                Target { set: i.home(id), key: id },
                c,
                Op::CompareAndWrite { id, offset },
                both.freeze(),
            )
            .await;
        i.attrs.invalidate(id);
        r.map(|_| ())
    }

    /// Copy up to `len` bytes of regular file `src` from `src_offset` into regular file
    /// `dst` at `dst_offset`; returns the bytes copied (short at the end of `src`, 0 at or
    /// past it), as copy_file_range(2). The bricks copy (`Op::CopyRange` at the chain head
    /// of `dst`, in pieces of at most 8 MiB), reading `src` in their own replica set or
    /// over the brick network, and no byte of the data comes through this client; from a
    /// brick that cannot (`EXDEV`) or does not know the op (`EPROTO`, a brick built before
    /// it), by READ and WRITE here. `Stats::by_op` tells which (`copy_range` against
    /// `read`/`write`).
    pub async fn copy_range(
        &self,
        c: &Creds,
        src: Id,
        src_offset: u64,
        dst: Id,
        dst_offset: u64,
        len: u64,
    ) -> Result<u64> {
        let i = &self.inner;
        let fits = |off: u64| off.checked_add(len).is_some_and(|e| e <= i64::MAX as u64);
        if !fits(src_offset) || !fits(dst_offset) {
            return Err(err(
                Errno::EINVAL,
                format!(
                    "copy_range {src} at {src_offset} to {dst} at {dst_offset}, {len} bytes: past the largest file offset"
                ),
            ));
        }
        // Write-behind of either file reaches the bricks first (a barrier, as for a read).
        i.flush(src).await?;
        i.flush(dst).await?;
        let mut done = 0u64;
        let mut local = false;
        while done < len {
            let n = (len - done).min(MAX_IO as u64) as u32;
            let (so, dof) = (src_offset + done, dst_offset + done);
            let count = if local {
                self.copy_by_client(c, src, so, dst, dof, n).await?
            } else {
                let token = i.attrs.begin();
                let op = Op::CopyRange { src, src_offset: so, dst, dst_offset: dof, len: n };
                let t = Target { set: i.home(dst), key: dst };
                match i.call(t, c, op, Bytes::new()).await {
                    Ok((Reply::Written { count, attr }, _)) => {
                        i.attrs.put_change(token, &attr);
                        count
                    }
                    Ok((other, _)) => return Err(unexpected("copy_range", &other)),
                    Err(e) if e.errno == Errno::EXDEV || e.errno == Errno::EPROTO => {
                        tracing::debug!(%src, %dst, error = %e, "copy on the bricks refused; copying by read and write");
                        local = true;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            done += count as u64;
            if count < n {
                break;
            }
        }
        Ok(done)
    }

    /// One piece of [`copy_range`](Self::copy_range) through this client.
    async fn copy_by_client(
        &self,
        c: &Creds,
        src: Id,
        src_offset: u64,
        dst: Id,
        dst_offset: u64,
        len: u32,
    ) -> Result<u32> {
        let mut done = 0u32;
        while done < len {
            let (data, eof) = self.read(c, src, src_offset + done as u64, len - done).await?;
            if data.is_empty() {
                break;
            }
            let n = data.len() as u32;
            let w = self.inner.write_now(c, dst, dst_offset + done as u64, data).await?;
            done += w;
            if eof || w < n {
                break;
            }
        }
        Ok(done)
    }

    /// List a directory from `cookie` (0 = start). Cookies are stable across calls and
    /// changes; the bool is true at the end.
    pub async fn readdir(
        &self,
        c: &Creds,
        dir: Id,
        cookie: u64,
        max: u32,
        plus: bool,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let i = &self.inner;
        let sets = i.set_ids();
        let (mut idx, mut sub) = if cookie == 0 {
            (0usize, 0u64)
        } else {
            (((cookie >> 56) as usize).saturating_sub(1), cookie & ((1 << 56) - 1))
        };
        if idx >= sets.len() {
            return Ok((vec![], true));
        }
        let max = max.clamp(1, 4096);
        let mut out = vec![];
        while idx < sets.len() && out.len() < max as usize {
            let want = max - out.len() as u32;
            let op = Op::ReadDir { dir, cookie: sub, max: want, plus };
            let found = i.begin_tokens();
            let (r, _) = i.call(Target { set: sets[idx], key: dir }, c, op, Bytes::new()).await?;
            let (entries, eof) = match r {
                Reply::Dir { entries, eof } => (entries, eof),
                other => return Err(unexpected("readdir", &other)),
            };
            let last_cookie = entries.last().map(|e| e.cookie);
            for mut e in entries {
                // Directories exist on every set: list them from the first one only.
                if e.kind == FileType::Directory && idx != 0 {
                    continue;
                }
                if let Some(a) = &e.attr {
                    i.remember_found(found, dir, &e.name, a);
                }
                e.cookie = ((idx as u64 + 1) << 56) | (e.cookie & ((1 << 56) - 1));
                out.push(e);
            }
            if eof {
                idx += 1;
                sub = 0;
            } else if let Some(lc) = last_cookie {
                sub = lc & ((1 << 56) - 1);
                if out.is_empty() {
                    continue;
                }
                break;
            }
        }
        Ok((out, idx >= sets.len()))
    }

    pub async fn getxattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<Vec<u8>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::GetXattr { id, name: name.to_vec() }).await? {
            Reply::Bytes(b) => Ok(b),
            other => Err(unexpected("getxattr", &other)),
        }
    }

    pub async fn setxattr(
        &self,
        c: &Creds,
        id: Id,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<()> {
        let op = Op::SetXattr { id, name: name.to_vec(), value: value.to_vec(), flags };
        let r = self.on_inode(c, id, op).await;
        self.inner.attrs.invalidate(id);
        r.map(|_| ())
    }

    pub async fn listxattr(&self, c: &Creds, id: Id) -> Result<Vec<Vec<u8>>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::ListXattr { id }).await? {
            Reply::Names(n) => Ok(n),
            other => Err(unexpected("listxattr", &other)),
        }
    }

    pub async fn removexattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<()> {
        let r = self.on_inode(c, id, Op::RemoveXattr { id, name: name.to_vec() }).await;
        self.inner.attrs.invalidate(id);
        r.map(|_| ())
    }

    pub async fn statfs(&self, c: &Creds) -> Result<StatFs> {
        let i = &self.inner;
        let calls = i
            .set_ids()
            .into_iter()
            .map(|s| i.call(Target { set: s, key: Id::ROOT }, c, Op::StatFs, Bytes::new()));
        let mut total = StatFs::default();
        for r in futures::future::join_all(calls).await {
            match r?.0 {
                Reply::StatFs(s) => {
                    let scale = |v: u64| v * s.bsize as u64;
                    total.bsize = 4096;
                    total.blocks += scale(s.blocks) / 4096;
                    total.bfree += scale(s.bfree) / 4096;
                    total.bavail += scale(s.bavail) / 4096;
                    total.files += s.files;
                    total.ffree += s.ffree;
                    total.namemax = 255;
                }
                other => return Err(unexpected("statfs", &other)),
            }
        }
        Ok(total)
    }

    /// Set or release a POSIX byte-range lock; `wait` blocks until granted.
    pub async fn setlock(&self, c: &Creds, id: Id, lock: Lock, wait: bool) -> Result<()> {
        let i = &self.inner;
        i.on_home(c, id, Op::SetLock { id, lock, wait }).await.map(|_| ())
    }

    /// Set the share reservation of open `owner` (of this client's session) on file `id`
    /// to `access` / `deny` (`cairn_proto::msg::share` bits; both 0 releases it). A
    /// conflict with another opener, through any client, is `ESHAREDENIED`.
    pub async fn share(&self, c: &Creds, id: Id, owner: u64, access: u8, deny: u8) -> Result<()> {
        let i = &self.inner;
        i.on_home(c, id, Op::Share { id, owner, access, deny }).await.map(|_| ())
    }

    /// Take a delegation of regular file `id` for this client (`write`: exclusive, else
    /// shared with other readers): until it is given back with
    /// [`deleg_return`](Self::deleg_return), another client's conflicting access of `id`
    /// first recalls it through [`on_recall`](Self::on_recall) and waits. `EAGAIN` when
    /// another client holds a conflicting one.
    pub async fn delegate(&self, id: Id, write: bool) -> Result<()> {
        let i = &self.inner;
        i.on_home(&Creds::root(), id, Op::Delegate { id, write }).await.map(|_| ())
    }

    /// Give back the delegation of `id`, after sending what is buffered of it.
    pub async fn deleg_return(&self, id: Id) -> Result<()> {
        self.inner.deleg_return(id).await
    }

    /// The first conflicting lock, if any.
    pub async fn getlock(&self, c: &Creds, id: Id, lock: Lock) -> Result<Option<Lock>> {
        let i = &self.inner;
        match i.on_home(c, id, Op::GetLock { id, lock }).await? {
            Reply::Lock(l) => Ok(l),
            other => Err(unexpected("getlock", &other)),
        }
    }
}
