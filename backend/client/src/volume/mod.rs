//! A mounted volume ([`Volume`]): its shared state ([`Inner`]), mount and unmount. The
//! rest is split by idea, one file each:
//!
//! | file | what |
//! | --- | --- |
//! | `options.rs` | [`MountOptions`] and the volume options that narrow them |
//! | `stats.rs` | round-trip counters ([`Stats`]) |
//! | `call.rs` | routing by the map and the retry loop across fail-overs |
//! | `dircache.rs` | what replies teach the caches; parents' attributes after a namespace op |
//! | `writebehind.rs` | buffered writes sent in the background, deferred errors |
//! | `push.rs` | map pushes, lease and delegation recalls, the subscription |
//! | `lookup.rs` | lookups, path resolution, `getattr`/`setattr` |
//! | `namespace.rs` | create, mkdir, link, unlink, rmdir, rename |
//! | `io.rs` | opens, reads, writes, fsync, copy |
//! | `moved.rs` | where inodes a rebalance moved off their home set live now |
//! | `placement.rs` | a file's replica set and chain order (pNFS layouts) |
//! | `readdir.rs`, `xattr.rs`, `locks.rs` | listing, extended attributes, locks and delegations |

mod call;
mod dircache;
mod io;
mod locks;
mod lookup;
mod moved;
mod namespace;
mod options;
mod placement;
mod push;
mod readdir;
mod stats;
mod writebehind;
mod xattr;

pub use options::MountOptions;
pub use placement::Placement;
pub use push::{InvalidateDone, InvalidateFn, MapChangeFn, RecallFn, INVALIDATE_ACK_WAIT};
pub use stats::{process_round_trips, Stats};

use crate::conn::Pool;
use crate::Result;
use bytes::Bytes;
use cairn_cache::{
    AttrCache, DataCache, DirStates, EntryCache, LockStates, Searchers, WriteBehind, XattrCache,
};
use cairn_proto::map::VolumeMap;
use cairn_proto::msg::{Op, Reply, Request};
use cairn_proto::{Attr, Creds, Errno, FileType, Id, RemoteError, StatFs};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Largest single WRITE/READ request.
const MAX_IO: usize = 8 << 20;

/// Most quick-read content held.
const QUICK_READ_BYTES: usize = 32 << 20;

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
    /// Every xattr of an inode, per caller, under the lease of its attributes (`xattr.rs`).
    xattrs: XattrCache,
    entries: EntryCache,
    /// Directories whose every name is known (`cache/src/dirstate.rs`): lookups of other names are
    /// answered ENOENT without a round trip.
    complete: DirStates,
    /// Quick-read content (`MountOptions::quick_read`).
    data: DataCache,
    /// Files no other session holds a byte-range lock on, under their leases (`cairn_cache::LockStates`).
    lockstate: LockStates,
    /// Callers the bricks let search a directory, until it changes (`cache/src/search.rs`).
    searchers: Searchers,
    /// File type by id. An id's type never changes, so this is exact without leases even
    /// when the attribute cache is off; it spares the getattr that per-inode ops need to
    /// know whether to update a directory's copies on every set.
    kinds: Mutex<HashMap<Id, FileType>>,
    /// Inodes a rebalance moved off their home set, by id (`moved.rs`).
    moved: moved::Relocations,
    wb: WriteBehind,
    wb_on: AtomicBool,
    opens: Mutex<HashMap<Id, OpenState>>,
    on_invalidate: RwLock<Option<InvalidateFn>>,
    on_recall: RwLock<Option<RecallFn>>,
    on_map_change: RwLock<Option<MapChangeFn>>,
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
            xattrs: XattrCache::new(opts.cache_timeout),
            entries: EntryCache::new(opts.cache_timeout),
            complete: DirStates::new(opts.cache_timeout),
            data: DataCache::new(opts.cache_timeout, QUICK_READ_BYTES),
            lockstate: LockStates::new(opts.cache_timeout),
            searchers: Searchers::new(opts.cache_timeout),
            kinds: Mutex::default(),
            moved: moved::Relocations::default(),
            wb: WriteBehind::new(opts.write_behind_bytes),
            wb_on: AtomicBool::new(opts.write_behind),
            opts,
            map: RwLock::new(Arc::new(map.clone())),
            map_changed: Notify::new(),
            pool,
            opens: Mutex::default(),
            on_invalidate: RwLock::new(None),
            on_recall: RwLock::new(None),
            on_map_change: RwLock::new(None),
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

    /// Route by `m` from now on, even if it is older than the map this client has (tests:
    /// a client that has not received a layout change yet). A map push or refresh replaces
    /// it as usual.
    #[doc(hidden)]
    pub fn set_map_for_test(&self, m: VolumeMap) {
        *self.inner.map.write() = Arc::new(m);
    }

    pub fn volume_id(&self) -> u128 {
        self.inner.map().id
    }

    /// Drop every cached attribute and entry (tests and benchmarks measure cold paths).
    pub fn drop_caches(&self) {
        self.inner.attrs.clear();
        self.inner.xattrs.clear();
        self.inner.entries.clear();
        self.inner.complete.clear();
        self.inner.data.clear();
        self.inner.lockstate.clear();
        self.inner.searchers.clear();
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
}
