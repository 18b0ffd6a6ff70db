//! Catching up: a brick that (re)opens starts *Healing*. It receives forwarded writes but
//! serves no client until it has pulled every inode its peers recorded as pending for it,
//! each copied from the inode's current chain head under the head's inode lock (so no
//! concurrent write can slip between the copy and the forwarded stream). Then it turns
//! *Up*. While Up it keeps polling its peers' pending lists, and goes back to Healing if a
//! peer recorded a write it missed (or it flagged for itself a write it applied that was not
//! acknowledged).
//!
//! A *full crawl* (after `reset-brick ... commit`, or asked for by `cairn volume heal VOL
//! full`) walks the whole tree top-down instead: each directory, then its entries, is
//! copied from its chain head, so the brick ends identical to its peers even for inodes
//! no pending index names. The request is a file on the brick (`.cairn/full-heal`), removed
//! only when a crawl finished without failures. The crawl saves its position (the
//! directories still to walk, and its counters) on the brick about once a second while
//! nothing failed, so a crawl cut by a crash continues from there when the brick reopens.
//! A brick owing a full crawl does not turn `Up` before it is done.
//!
//! Crawls copy up to `cluster.heal-parallelism` inodes at a time (volume option, default
//! 4), at most `cluster.heal-bandwidth` bytes of file data per second per brick (a token
//! bucket with one second of burst at the target, charged with the bytes each range of a
//! file copy wrote: see `copy_file`), and
//! keep statistics per brick (`cairn volume heal VOL statistics`); they log one info line
//! when they start and one when they end.

use crate::chain::{exec_local, OpResult};
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_brick::{heal_diff, CSUM_BLOCK as BLOCK};
use cairn_proto::map::{BrickState, ReplicaSet, VolumeMap};
use cairn_proto::mgmt::CrawlInfo;
use cairn_proto::msg::{
    BrickRequest, HealState, HealSums, Op, ReplicateRequest, Reply, Request, HEAL_SUMS_MAX,
};
use cairn_proto::{Creds, Errno, FileType, Id, RemoteError};
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a reopened brick waits for the other bricks of its set to come back before it
/// heals from whoever is there.
const PEER_WAIT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_secs(5);

/// Volume option: inodes a crawl copies at a time, per brick.
pub const PARALLELISM_OPTION: &str = "cluster.heal-parallelism";
pub const DEFAULT_PARALLELISM: usize = 4;
pub const MAX_PARALLELISM: usize = 64;

fn parallelism(map: &VolumeMap) -> usize {
    map.option(PARALLELISM_OPTION)
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(DEFAULT_PARALLELISM)
        .clamp(1, MAX_PARALLELISM)
}

/// Volume option: bytes of file data a brick's heal copies per second (0 = unlimited).
pub const BANDWIDTH_OPTION: &str = "cluster.heal-bandwidth";

/// A `cluster.heal-bandwidth` value: bytes per second, a [`cairn_proto::Size`] (an
/// optional K, M, G, T or P suffix, powers of 1024; `KB`, `KiB` and the like too).
/// 0 = unlimited.
pub fn parse_bandwidth(v: &str) -> Option<u64> {
    v.parse::<cairn_proto::Size>().ok().map(cairn_proto::Size::bytes)
}

fn bandwidth(map: &VolumeMap) -> u64 {
    map.option(BANDWIDTH_OPTION).and_then(parse_bandwidth).unwrap_or(0)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Crawl statistics of one brick (kept in memory; the running crawl and the last finished
/// one of each kind).
#[derive(Default)]
pub struct HealStats {
    current: Option<CrawlInfo>,
    last_index: Option<CrawlInfo>,
    last_full: Option<CrawlInfo>,
    /// Token bucket of `cluster.heal-bandwidth`: bytes available (negative: owed), as of.
    tokens: f64,
    tokens_at: Option<Instant>,
}

impl HealStats {
    /// Newest first: the running crawl, then the last finished ones.
    pub fn crawls(&self) -> Vec<CrawlInfo> {
        let mut v: Vec<CrawlInfo> =
            [&self.last_index, &self.last_full].into_iter().flatten().cloned().collect();
        v.sort_by_key(|c| std::cmp::Reverse(c.ended));
        if let Some(c) = &self.current {
            v.insert(0, c.clone());
        }
        v
    }

    pub fn in_progress(&self) -> bool {
        self.current.is_some()
    }

    /// Take `n` bytes from the bucket (`rate` bytes/s, one second of burst); returns how
    /// long to wait before copying on, and by how much this take pushed back the moment
    /// the bucket is out of debt (summed, that is the crawl's wall time lost to the limit,
    /// however many copies wait side by side).
    fn take(&mut self, rate: u64, n: u64) -> (Duration, Duration) {
        let now = Instant::now();
        let rate = rate as f64;
        let have = match self.tokens_at {
            Some(at) => (self.tokens + now.duration_since(at).as_secs_f64() * rate).min(rate),
            None => rate,
        };
        let owed_before = Duration::from_secs_f64((-have).max(0.0) / rate);
        self.tokens = have - n as f64;
        self.tokens_at = Some(now);
        let wait = Duration::from_secs_f64((-self.tokens).max(0.0) / rate);
        (wait, wait.saturating_sub(owed_before))
    }
}

fn crawl_begin(node: &Node, slot: &BrickSlot, kind: &str) {
    let bw = node.map(&slot.volume).map(|m| bandwidth(&m)).unwrap_or(0);
    slot.heal.lock().current = Some(CrawlInfo {
        kind: kind.to_string(),
        started: unix_now(),
        bandwidth: bw,
        ..Default::default()
    });
}

fn crawl_count(slot: &BrickSlot, scanned: u64, healed: u64, failed: u64) {
    if let Some(c) = slot.heal.lock().current.as_mut() {
        c.scanned += scanned;
        c.healed += healed;
        c.failed += failed;
    }
}

fn crawl_end(slot: &BrickSlot) -> Option<CrawlInfo> {
    let mut st = slot.heal.lock();
    let mut c = st.current.take()?;
    c.ended = Some(unix_now());
    if c.kind == "full" {
        st.last_full = Some(c.clone());
    } else {
        st.last_index = Some(c.clone());
    }
    Some(c)
}

/// Call an op on brick `index` of the volume, wherever it is served.
pub async fn brick_call(node: &Arc<Node>, map: &VolumeMap, index: u32, op: Op) -> OpResult {
    if let Some(slot) = node.slot(&map.name, index) {
        if let Op::HealSync { id, peer } = op {
            return serve_sync(node, &slot, id, peer).await;
        }
        return exec_local(&slot, Creds::root(), op, Bytes::new(), None, false).await;
    }
    let (_, b) = map.brick(index).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("{}: no brick {index}", map.name))
    })?;
    let req = BrickRequest {
        volume: map.name.clone(),
        brick: index,
        epoch: map.epoch,
        creds: Creds::root(),
        op,
        req: None,
        parents: false,
        inline: 0,
    };
    node.peers.call(&b.addr, &node.name, Request::Brick(req), Bytes::new()).await
}

/// Serve a HEAL_SYNC: copy `id` from this brick (its chain head) onto brick `peer`.
///
/// A regular file is copied in ranges (`copy_file`); anything else whole, in one
/// `HealApply` taken under the inode lock.
pub async fn serve_sync(node: &Arc<Node>, slot: &Arc<BrickSlot>, id: Id, peer: u32) -> OpResult {
    let map = node.map(&slot.volume).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("volume {} not found", slot.volume))
    })?;
    let guard = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
    let mut state = match meta(slot, id).await {
        Ok(s) => s,
        // Gone here too: the directory heal removes its names.
        Err(e) if e.errno == Errno::ENOENT => return Ok((Reply::Unit, Bytes::new())),
        Err(e) => return Err(e),
    };
    let Some(attr) = state.attr.clone() else {
        // Gone: the directory heal removes its names.
        return apply(node, &map, slot, peer, state, Bytes::new()).await;
    };
    if attr.nlink == 0 {
        // Open but unlinked here: it has no name to heal under and lives only until its
        // last release.
        return Ok((Reply::Unit, Bytes::new()));
    }
    if attr.kind == FileType::Regular {
        drop(guard);
        return copy_file(node, &map, slot, id, peer).await;
    }
    state.pending_for = slot.brick.pending_peers(id).into_iter().filter(|&p| p != peer).collect();
    apply(node, &map, slot, peer, state, Bytes::new()).await
}

/// Checksum blocks (4 KiB) a `HealWrite` carries at most (4 MiB, well under a frame's
/// data).
const RANGE_BLOCKS: u64 = (4 << 20) / BLOCK;

/// Copy regular file `id` from this brick onto brick `peer`, in ranges:
/// 1. under the inode lock, a `HealApply` without data gives the target the inode's kind,
///    size and metadata;
/// 2. without the lock, the two checksum tables are compared (`HealSums`, 256 MiB of file
///    at a time, skipping what is a hole on both sides) and the blocks that differ (or are
///    unknown on either side) listed;
/// 3. each run of them (up to 4 MiB) is copied under the inode lock, from the source as
///    it is *then* (entries read again: a block of zeros is punched, not sent), by a
///    `HealWrite`; the lock is released (and the pause `cluster.heal-bandwidth` asks for
///    taken) between runs;
/// 4. under the lock, a last `HealApply` without data sets the size and metadata (and
///    the pending records the source holds for others).
///
/// Why that is enough: every write the source heads locks a range of the same inode (the
/// heal's whole-inode lock waits for it and keeps it out) and is forwarded to the target (a healing brick gets forwards) before the lock is released.
/// A write that lands after a run was copied reaches the target by its forward; one that
/// lands before is in the data the run reads. A block compared equal and then written is
/// written on both. So no run can carry data older than what the target already has.
/// A crash anywhere leaves the pending record (cleared only after this returns) or the
/// full-heal request, so the copy is done again.
async fn copy_file(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    id: Id,
    peer: u32,
) -> OpResult {
    let size = {
        let _g = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
        let mut state = meta(slot, id).await?;
        if state.attr.is_none() {
            return apply(node, map, slot, peer, state, Bytes::new()).await;
        }
        state.pending_for = vec![];
        let size = state.data_len;
        apply(node, map, slot, peer, state, Bytes::new()).await?;
        size
    };
    let nb = size.div_ceil(BLOCK);
    let mut first = 0;
    let mut wait = Duration::ZERO;
    while first < nb {
        let count = (nb - first).min(HEAL_SUMS_MAX as u64) as u32;
        // Ours from the table (our data is verified as each range is read); the target's
        // from its data, so a block that rotted there differs.
        let op = Op::HealSums { id, first, count, from_data: false };
        let mine = sums(exec_local(slot, Creds::root(), op, Bytes::new(), None, false).await)?;
        let op = Op::HealSums { id, first, count, from_data: true };
        let theirs = sums(target_call(node, map, slot, peer, op, Bytes::new()).await)?;
        if theirs.kind != Some(FileType::Regular) {
            return Err(RemoteError::new(
                Errno::EAGAIN,
                format!("{}: brick {peer}: {id} is no longer a regular file there", map.name),
            ));
        }
        let runs = heal_diff(first, &mine.entries, &theirs.entries, RANGE_BLOCKS);
        for (a, b) in runs {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            wait = copy_range(node, map, slot, id, peer, a, b).await?;
        }
        first += count as u64;
        // Blocks that are holes on both sides are zeros on both: skip to the next data
        // either side has (a write landing there meanwhile is forwarded, as above).
        if let (Some(a), Some(b)) = (mine.next, theirs.next) {
            first = first.max(a.min(b));
        }
    }
    let _g = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
    let mut state = meta(slot, id).await?;
    state.pending_for = slot.brick.pending_peers(id).into_iter().filter(|&p| p != peer).collect();
    let r = apply(node, map, slot, peer, state, Bytes::new()).await;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    r
}

/// Copy blocks `[a, b)` of `id` onto brick `peer` under the inode lock, as they are now.
/// Returns the pause the target asks for.
async fn copy_range(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    id: Id,
    peer: u32,
    a: u64,
    b: u64,
) -> Result<Duration, RemoteError> {
    let _g = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
    let brick = slot.brick.clone();
    let (extents, data) = tokio::task::spawn_blocking(move || brick.heal_extents(id, a, b))
        .await
        .map_err(|e| RemoteError::new(Errno::EIO, format!("heal_extents task failed: {e}")))??;
    if extents.is_empty() {
        return Ok(Duration::ZERO);
    }
    let op = Op::HealWrite { id, extents };
    match target_call(node, map, slot, peer, op, Bytes::from(data)).await? {
        (Reply::HealWritten { wait_ms, .. }, _) => Ok(Duration::from_millis(wait_ms)),
        (other, _) => Err(RemoteError::new(
            Errno::EPROTO,
            format!("{}: brick {peer}: heal_write {id}: unexpected reply {other:?}", map.name),
        )),
    }
}

/// The state of `id` on this brick (regular file data left out), as `HealFetch` gives it.
async fn meta(slot: &Arc<BrickSlot>, id: Id) -> Result<Box<HealState>, RemoteError> {
    let brick = slot.brick.clone();
    tokio::task::spawn_blocking(move || brick.heal_meta(id).map(Box::new))
        .await
        .map_err(|e| RemoteError::new(Errno::EIO, format!("heal_meta task failed: {e}")))?
}

fn sums(r: OpResult) -> Result<Box<HealSums>, RemoteError> {
    match r? {
        (Reply::Sums(s), _) => Ok(s),
        (other, _) => {
            Err(RemoteError::new(Errno::EPROTO, format!("heal_sums: unexpected reply {other:?}")))
        }
    }
}

/// Send a heal op (not a HealApply) to brick `peer`, local or remote.
async fn target_call(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    peer: u32,
    op: Op,
    data: Bytes,
) -> OpResult {
    if let Some(target) = node.slot(&slot.volume, peer) {
        if matches!(op, Op::HealWrite { .. }) {
            return serve_heal_write(node, &target, op, data).await;
        }
        return exec_local(&target, Creds::root(), op, data, None, false).await;
    }
    let (_, b) = map
        .brick(peer)
        .ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("{}: no brick {peer}", map.name)))?;
    let req = BrickRequest {
        volume: map.name.clone(),
        brick: peer,
        epoch: map.epoch,
        creds: Creds::root(),
        op,
        req: None,
        parents: false,
        inline: 0,
    };
    node.peers.call(&b.addr, &node.name, Request::Brick(req), data).await
}

/// Send a HealApply of `state` (and whole `data`) to brick `peer`: as a replicate request
/// when remote, so the pending records it carries are taken there.
async fn apply(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    peer: u32,
    state: Box<HealState>,
    data: Bytes,
) -> OpResult {
    let req = ReplicateRequest {
        volume: slot.volume.clone(),
        brick: peer,
        epoch: map.epoch,
        from_brick: slot.index,
        creds: Creds::root(),
        op: Op::HealApply { state },
        result: None,
        missed: vec![],
        req: None,
        confirm: false,
    };
    if let Some(target) = node.slot(&slot.volume, peer) {
        exec_local(&target, Creds::root(), req.op, data, None, true).await?;
    } else {
        let (_, b) = map.brick(peer).ok_or_else(|| {
            RemoteError::new(Errno::ENOENT, format!("{}: no brick {peer}", map.name))
        })?;
        node.peers.call(&b.addr.clone(), &node.name, Request::Replicate(req), data).await?;
    }
    Ok((Reply::Unit, Bytes::new()))
}

/// Serve a HEAL_WRITE on this brick (the target of a chunked copy): apply it, count the
/// bytes in the running crawl's statistics and charge them to `cluster.heal-bandwidth`;
/// the reply tells the source how long to pause (it pauses with the inode lock released).
pub async fn serve_heal_write(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    op: Op,
    data: Bytes,
) -> OpResult {
    let bytes = match exec_local(slot, Creds::root(), op, data, None, false).await? {
        (Reply::HealWritten { bytes, .. }, _) => bytes,
        (other, _) => {
            return Err(RemoteError::new(
                Errno::EIO,
                format!(
                    "volume {} brick {}: heal write answered {other:?}, not HealWritten",
                    slot.volume, slot.index
                ),
            ))
        }
    };
    let rate = node.map(&slot.volume).map(|m| bandwidth(&m)).unwrap_or(0);
    let wait = {
        let mut st = slot.heal.lock();
        let (wait, added) =
            if rate == 0 || bytes == 0 { Default::default() } else { st.take(rate, bytes) };
        if let Some(c) = st.current.as_mut() {
            c.bytes += bytes;
            c.bandwidth = rate;
            c.throttled_ms += added.as_millis() as u64;
        }
        wait
    };
    Ok((Reply::HealWritten { bytes, wait_ms: wait.as_millis() as u64 }, Bytes::new()))
}

fn peer_online(node: &Node, map: &VolumeMap, index: u32) -> bool {
    node.slot(&map.name, index).is_some()
        || map.brick(index).map(|(_, b)| b.state != BrickState::Down).unwrap_or(false)
}

/// Pull every pending entry recorded for this brick (`stale`: the bricks marked stale in
/// the config store, read before). Returns how many were copied and how many `Up` peers
/// answered the final (empty) round.
async fn catch_up(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    wait_for_peers: bool,
    stale: &BTreeSet<u32>,
) -> Result<(usize, usize), RemoteError> {
    let started = Instant::now();
    let mut copied = 0;
    for pass in 0..20 {
        let map = node.map(&slot.volume).ok_or_else(|| {
            RemoteError::new(Errno::ENOENT, format!("volume {} not in map", slot.volume))
        })?;
        let (set, _) = map.brick(slot.index).ok_or_else(|| {
            RemoteError::new(Errno::ENOENT, format!("brick {} not in map", slot.index))
        })?;
        let peers: Vec<u32> =
            set.bricks.iter().map(|b| b.index).filter(|&i| i != slot.index).collect();
        if wait_for_peers && pass == 0 {
            // Peers restarted with this one show up in later maps.
            while started.elapsed() < PEER_WAIT
                && !node
                    .map(&slot.volume)
                    .map(|m| peers.iter().all(|&p| peer_online(node, &m, p)))
                    .unwrap_or(false)
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        }
        // Collect what each peer recorded for us, and what we flagged ourselves (writes we
        // applied but could not get acknowledged).
        let mut recorded: BTreeMap<Id, Vec<u32>> = BTreeMap::new();
        // The generation of each record (id, recorder), read before the copy: the clear
        // after the copy keeps a record that a write re-added meanwhile.
        let mut gens: HashMap<(Id, u32), u64> = HashMap::new();
        let mut up_heard = 0;
        if let Ok((Reply::Pending(ids), _)) = exec_local(
            slot,
            Creds::root(),
            Op::PendingList { peer: slot.index },
            Bytes::new(),
            None,
            false,
        )
        .await
        {
            for (id, gen) in ids {
                recorded.entry(id).or_default().push(slot.index);
                gens.insert((id, slot.index), gen);
            }
        }
        for &p in &peers {
            if !peer_online(node, &map, p) {
                continue;
            }
            match brick_call(node, &map, p, Op::PendingList { peer: slot.index }).await {
                Ok((Reply::Pending(ids), _)) => {
                    if map.brick(p).map(|(_, b)| b.state == BrickState::Up).unwrap_or(false) {
                        up_heard += 1;
                    }
                    for (id, gen) in ids {
                        recorded.entry(id).or_default().push(p);
                        gens.insert((id, p), gen);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(volume = %slot.volume, brick = slot.index, peer = p, error = %e, "pending list unavailable")
                }
            }
        }
        if recorded.is_empty() {
            return Ok((copied, up_heard));
        }
        let total = recorded.len();
        let steps =
            cairn_replication::heal_plan(set, slot.index, &recorded, stale).map_err(|id| {
                RemoteError::new(
                    Errno::EAGAIN,
                    format!(
                        "{}: brick {}: no up brick to copy {id} from; staying out of service",
                        slot.volume, slot.index
                    ),
                )
            })?;
        let par = parallelism(&map);
        crawl_count(slot, total as u64, 0, 0);
        let mut copies = futures::stream::iter(steps)
            .map(|step| {
                let (map, gens) = (&map, &gens);
                async move {
                    let r = if step.source == slot.index {
                        // No up brick, and none newer than this one: keep this copy, and
                        // the others re-copy it from here.
                        let others =
                            set.bricks.iter().map(|b| b.index).filter(|&b| b != slot.index);
                        keep_own(slot, others.collect(), step.id).await
                    } else {
                        sync_from(node, map, step.source, step.id, slot.index).await
                    };
                    if r.is_ok() {
                        clear(node, map, &step.clear, slot.index, step.id, gens).await;
                    }
                    (step.id, r)
                }
            })
            .buffer_unordered(par);
        let mut failed = 0;
        while let Some((id, r)) = copies.next().await {
            match r {
                Ok(()) => {
                    copied += 1;
                    crawl_count(slot, 0, 1, 0);
                }
                Err(e) => {
                    tracing::warn!(volume = %slot.volume, brick = slot.index, %id, error = %e, "heal failed; will retry");
                    failed += 1;
                    crawl_count(slot, 0, 0, 1);
                }
            }
        }
        drop(copies);
        tracing::debug!(volume = %slot.volume, brick = slot.index, pass, total, failed, "heal pass done");
        if failed > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Err(RemoteError::new(
        Errno::EAGAIN,
        format!("{}: brick {}: heal did not converge in 20 passes", slot.volume, slot.index),
    ))
}

/// Copy `id` onto brick `me` from its chain head. False when `me` heads it (nothing to
/// copy: this brick is the source others copy from).
async fn sync_one(
    node: &Arc<Node>,
    map: &VolumeMap,
    set: &ReplicaSet,
    id: Id,
    me: u32,
) -> Result<bool, RemoteError> {
    let chain = cairn_placement::chain(set, id);
    match chain.iter().find(|b| b.state == BrickState::Up) {
        Some(h) if h.index == me => {
            // Head only because the bricks before this one in the chain are not up: their
            // copies are the reference once they are back, and nothing recorded how they
            // differ (a full heal looks for what no record says). Compared when they are.
            match chain.first() {
                Some(b) if b.index != me => Err(RemoteError::new(
                    Errno::EAGAIN,
                    format!(
                        "{}: brick {}, which heads {id}, is {:?}; compared when it is up",
                        map.name, b.index, b.state
                    ),
                )),
                _ => Ok(false),
            }
        }
        Some(h) => sync_from(node, map, h.index, id, me).await.map(|()| true),
        None => Err(RemoteError::new(
            Errno::EAGAIN,
            format!("{}: no up brick heads {id} in replica set {}", map.name, set.id),
        )),
    }
}

/// Where a full crawl is: saved on the brick so that a crawl cut by a restart continues.
#[derive(serde::Serialize, serde::Deserialize)]
struct Position {
    /// Directories discovered and not walked yet (hex ids), in crawl order.
    queue: Vec<String>,
    dirs_done: u64,
    scanned: u64,
    healed: u64,
    bytes: u64,
}

/// How often a full crawl saves its position.
const SAVE_EVERY: Duration = Duration::from_secs(1);

async fn save_position(slot: &Arc<BrickSlot>, queue: &VecDeque<Id>, dirs_done: u64) {
    let (scanned, healed, bytes) = match slot.heal.lock().current.as_ref() {
        Some(c) => (c.scanned, c.healed, c.bytes),
        None => (0, 0, 0),
    };
    let pos = Position {
        queue: queue.iter().map(|id| id.to_hex()).collect(),
        dirs_done,
        scanned,
        healed,
        bytes,
    };
    let body = serde_json::to_vec(&pos).expect("position serializes");
    let brick = slot.brick.clone();
    match tokio::task::spawn_blocking(move || brick.save_full_heal_position(&body)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "full heal: position not saved")
        }
        Err(e) => {
            tracing::warn!(volume = %slot.volume, brick = slot.index, "full heal: saving the position failed: {e}")
        }
    }
}

/// The queue and directory count to start a full crawl from: the saved position (its
/// counters restored into the running crawl's statistics), else the root.
fn start_position(slot: &BrickSlot) -> (VecDeque<Id>, u64) {
    let saved = slot.brick.full_heal_position().and_then(|b| {
        let p: Position = serde_json::from_slice(&b).ok()?;
        let q: Option<VecDeque<Id>> = p.queue.iter().map(|h| Id::from_hex(h)).collect();
        Some((p, q?))
    });
    match saved {
        Some((p, queue)) if !queue.is_empty() => {
            tracing::info!(volume = %slot.volume, brick = slot.index, dirs_done = p.dirs_done, dirs_left = queue.len(), "full heal: continuing from the saved position");
            if let Some(c) = slot.heal.lock().current.as_mut() {
                c.scanned = p.scanned;
                c.healed = p.healed;
                c.bytes = p.bytes;
                c.dirs_done = p.dirs_done;
                c.dirs_left = queue.len() as u64;
                c.resumed_after = p.dirs_done;
            }
            (queue, p.dirs_done)
        }
        _ => (VecDeque::from([Id::ROOT]), 0),
    }
}

/// Walk the whole tree top-down and copy every inode onto this brick from its chain head.
/// Returns the number of inodes copied; fails if any could not be (the request stays, the
/// next crawl starts again from the last position saved before the first failure).
async fn full_crawl(node: &Arc<Node>, slot: &Arc<BrickSlot>) -> Result<u64, RemoteError> {
    let me = slot.index;
    let (mut queue, mut dirs_done) = start_position(slot);
    let (mut healed, mut failed) = (0u64, 0u64);
    let mut saved = Instant::now();
    while let Some(&dir) = queue.front() {
        if slot.stopped.load(Ordering::Acquire) {
            return Err(RemoteError::new(
                Errno::ECANCELED,
                format!("{}: brick {me} closed during its full heal", slot.volume),
            ));
        }
        let (h, f, subdirs) = crawl_dir(node, slot, dir).await?;
        queue.pop_front();
        queue.extend(subdirs);
        healed += h;
        failed += f;
        dirs_done += 1;
        if let Some(c) = slot.heal.lock().current.as_mut() {
            c.dirs_done = dirs_done;
            c.dirs_left = queue.len() as u64;
        }
        // A failure dropped a subtree from the queue: from then on the saved position (the
        // last one before it) is the one to continue from.
        if failed == 0 && saved.elapsed() >= SAVE_EVERY {
            save_position(slot, &queue, dirs_done).await;
            saved = Instant::now();
        }
    }
    if failed > 0 {
        return Err(RemoteError::new(
            Errno::EAGAIN,
            format!(
                "{}: brick {me}: full heal copied {healed} inodes, {failed} failed; starting over",
                slot.volume
            ),
        ));
    }
    Ok(healed)
}

/// One directory of a full crawl: the directory, then its non-directory entries, copied
/// from their heads. Returns (copied, failed, its subdirectories).
async fn crawl_dir(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    dir: Id,
) -> Result<(u64, u64, Vec<Id>), RemoteError> {
    let me = slot.index;
    let map = node.map(&slot.volume).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("volume {} not in map", slot.volume))
    })?;
    let Some((set, _)) = map.brick(me) else {
        return Err(RemoteError::new(
            Errno::ENOENT,
            format!("{}: brick {me} not in the map", slot.volume),
        ));
    };
    let mut healed = 0;
    // The directory first: it creates (placeholders of) its entries here.
    match sync_one(node, &map, set, dir, me).await {
        Ok(copied) => healed += copied as u64,
        Err(e) => {
            tracing::warn!(volume = %slot.volume, brick = me, id = %dir, error = %e, "full heal: directory not copied; its subtree is retried by the next crawl");
            crawl_count(slot, 1, 0, 1);
            return Ok((0, 1, vec![]));
        }
    }
    // Its entries as they now are here (identical to the head's at the copy).
    let state =
        match exec_local(slot, Creds::root(), Op::HealFetch { id: dir }, Bytes::new(), None, false)
            .await
        {
            Ok((Reply::Heal(s), _)) => s,
            Ok(_) => return Ok((healed, 0, vec![])),
            // Removed at the source meanwhile: its parent's copy dropped it.
            Err(e) if matches!(e.errno, Errno::ENOENT | Errno::ESTALE) => {
                return Ok((healed, 0, vec![]))
            }
            Err(e) => return Err(e),
        };
    if state.attr.is_none() {
        return Ok((healed, 0, vec![]));
    }
    // This brick's own records (placeholders the directory copy flagged), read before the
    // copies: a copy clears only the record it answers.
    let gens: HashMap<(Id, u32), u64> =
        slot.brick.pending_list(me).into_iter().map(|(id, g)| ((id, me), g)).collect();
    let (mut files, mut subdirs) = (vec![], vec![]);
    for (_, id, kind, linkto) in &state.entries {
        match (linkto, kind) {
            (Some(_), _) => {}
            (None, FileType::Directory) => subdirs.push(*id),
            (None, _) => files.push(*id),
        }
    }
    crawl_count(slot, 1 + files.len() as u64, 0, 0);
    let mut copies = futures::stream::iter(files)
        .map(|id| {
            let map = &map;
            async move { (id, sync_one(node, map, set, id, me).await) }
        })
        .buffer_unordered(parallelism(&map));
    let mut failed = 0;
    while let Some((id, r)) = copies.next().await {
        match r {
            Ok(copied) => {
                healed += copied as u64;
                crawl_count(slot, 0, copied as u64, 0);
                if copied {
                    // Copied from its head: a placeholder the directory copy flagged for
                    // this brick is filled.
                    clear(node, &map, &[me], me, id, &gens).await;
                }
            }
            Err(e) => {
                tracing::warn!(volume = %slot.volume, brick = me, %id, error = %e, "full heal: inode not copied; retried by the next crawl");
                failed += 1;
                crawl_count(slot, 0, 0, 1);
            }
        }
    }
    Ok((healed, failed, subdirs))
}

/// Run a full crawl with statistics and start/end log lines; clear the request when it
/// completed. True on success.
async fn run_full_crawl(node: &Arc<Node>, slot: &Arc<BrickSlot>) -> bool {
    crawl_begin(node, slot, "full");
    tracing::info!(volume = %slot.volume, brick = slot.index, kind = "full", "heal crawl started");
    let r = full_crawl(node, slot).await;
    let c =
        crawl_end(slot).unwrap_or_else(|| CrawlInfo { kind: "full".into(), ..Default::default() });
    match r {
        Ok(_) => match slot.brick.clear_full_heal() {
            Ok(()) => {
                tracing::info!(volume = %slot.volume, brick = slot.index, kind = "full", scanned = c.scanned, healed = c.healed, failed = c.failed, secs = c.ended.unwrap_or(0).saturating_sub(c.started), "heal crawl finished");
                true
            }
            Err(e) => {
                tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "full heal done but its request could not be cleared");
                false
            }
        },
        Err(e) => {
            tracing::warn!(volume = %slot.volume, brick = slot.index, kind = "full", scanned = c.scanned, healed = c.healed, failed = c.failed, error = %e, "heal crawl incomplete; retrying");
            false
        }
    }
}

async fn sync_from(
    node: &Arc<Node>,
    map: &VolumeMap,
    source: u32,
    id: Id,
    me: u32,
) -> Result<(), RemoteError> {
    // The copy is taken under the source's inode lock, so no write the source heads can
    // slip between the copy and the forwarded stream. A rename headed by another brick
    // (its source directory's head) changes this inode too, and reaches this brick and
    // the source in either order: if one lands here while the copy is under way, the copy
    // may undo it (or miss it). Then copy again.
    let slot = node.slot(&map.name, me);
    if let Some(s) = &slot {
        s.heal_watch.lock().insert(id, (source, false));
    }
    let r = brick_call(node, map, source, Op::HealSync { id, peer: me }).await.map(|_| ());
    let touched = slot.and_then(|s| s.heal_watch.lock().remove(&id)).is_some_and(|(_, t)| t);
    if r.is_ok() && touched {
        return Err(RemoteError::new(
            Errno::EAGAIN,
            format!(
                "{}: brick {me}: {id} was changed by another brick's forward during its copy from brick {source}; copying again",
                map.name
            ),
        ));
    }
    r
}

/// Record `id` on this brick as pending for each of `peers`, durably.
async fn keep_own(slot: &Arc<BrickSlot>, peers: Vec<u32>, id: Id) -> Result<(), RemoteError> {
    let brick = slot.brick.clone();
    let (volume, index) = (slot.volume.clone(), slot.index);
    tokio::task::spawn_blocking(move || {
        peers.into_iter().try_for_each(|p| brick.pending_add(p, id))
    })
    .await
    .unwrap_or_else(|e| {
        Err(RemoteError::new(
            Errno::EIO,
            format!("{volume}: brick {index}: pending_add task failed: {e}"),
        ))
    })
}

/// Clear the records of `id` for brick `me` held by `recorders`, each only if it still has
/// the generation read before the copy (`gens`).
async fn clear(
    node: &Arc<Node>,
    map: &VolumeMap,
    recorders: &[u32],
    me: u32,
    id: Id,
    gens: &HashMap<(Id, u32), u64>,
) {
    for &r in recorders {
        let Some(&gen) = gens.get(&(id, r)) else {
            // Not listed by that brick before the copy: nothing this copy answers.
            continue;
        };
        let op = Op::PendingClear { peer: me, ids: vec![(id, gen)] };
        if let Err(e) = brick_call(node, map, r, op).await {
            tracing::debug!(volume = %map.name, brick = r, %id, error = %e, "pending clear failed");
        }
    }
}

/// This brick could not apply a forwarded mutation (full, read-only, failing disk, or a
/// copy that diverged): its head records the miss and demotes it in the config store, but
/// this brick hears of that only when its map catches up, and meanwhile a client could
/// still pick it as the head of an inode it now holds an old copy of. So it stops serving
/// clients at once, publishes itself healing, and the heal loop takes it from there.
pub fn missed_forward(node: &Arc<Node>, slot: &Arc<BrickSlot>, e: &RemoteError) {
    // Before `healing`: the heal loop checks this after it clears `healing` (see `spawn`).
    slot.missed.store(true, Ordering::Release);
    if slot.healing.swap(true, Ordering::AcqRel) {
        tracing::debug!(volume = %slot.volume, brick = slot.index, error = %e, "missed a forwarded mutation while healing; healing again");
        return;
    }
    tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "missed a forwarded mutation; not serving clients until healed");
    let (node, slot) = (node.clone(), slot.clone());
    tokio::spawn(async move {
        if let Err(e) =
            node.lease().set_brick_state(&slot.volume, slot.index, BrickState::Healing).await
        {
            tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "cannot publish brick state");
        }
        node.kick.notify_one();
    });
}

/// Heal loop of one brick, for as long as it is open.
pub fn spawn(node: Arc<Node>, slot: Arc<BrickSlot>) {
    tokio::spawn(async move {
        let mut first = true;
        // Entries copied since the brick last came up (a catch-up may start over).
        let mut healed = 0;
        loop {
            if slot.stopped.load(Ordering::Acquire) {
                return;
            }
            if slot.healing.load(Ordering::Acquire) {
                // Fenced (no valid lease): peers see this brick Down and record its writes
                // rather than forward them; nothing can be published until the lease keeper
                // registers again, so a catch-up now would only race those records.
                if !node.lease_alive() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                // Make sure the heads forward to us before we pull the backlog, or writes
                // recorded as pending after the pull would be missed.
                wait_until_seen_healing(&node, &slot).await;
                // Unknown staleness is not "not stale": wait for the config store.
                let markers = match node.store.stale_bricks(&slot.volume).await {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "cannot read stale markers; retrying");
                        tokio::time::sleep(POLL).await;
                        continue;
                    }
                };
                let marker = markers.iter().find(|(i, _)| *i == slot.index).map(|(_, rev)| *rev);
                let stale: BTreeSet<u32> = markers.iter().map(|(i, _)| *i).collect();
                // A brick owing a full crawl (reset, replaced) never comes up before it.
                if slot.brick.full_heal_requested() && !run_full_crawl(&node, &slot).await {
                    first = false;
                    tokio::time::sleep(POLL).await;
                    continue;
                }
                // A forward this brick fails from now on is recorded here before it
                // fails (`chain::replicate`); one failed before is in the backlog.
                slot.missed.store(false, Ordering::Release);
                crawl_begin(&node, &slot, "index");
                let caught = catch_up(&node, &slot, first, &stale).await;
                if let Some(c) = crawl_end(&slot) {
                    if c.scanned > 0 || caught.is_err() {
                        tracing::info!(volume = %slot.volume, brick = slot.index, kind = "index", scanned = c.scanned, healed = c.healed, failed = c.failed, ok = caught.is_ok(), "heal crawl finished");
                    }
                }
                match caught {
                    Ok((n, up_heard)) => {
                        healed += n;
                        if !cairn_replication::may_come_up(marker.is_some(), up_heard) {
                            tracing::warn!(volume = %slot.volume, brick = slot.index, "brick missed writes and no up peer can vouch for it; waiting");
                            tokio::time::sleep(POLL).await;
                            continue;
                        }
                        if slot.missed.load(Ordering::Acquire) {
                            // A forward failed during the catch-up: its record may have come
                            // after the last pass read the backlog.
                            first = false;
                            continue;
                        }
                        if let Some(rev) = marker {
                            match node.store.clear_stale(&slot.volume, slot.index, rev).await {
                                Ok(true) => {}
                                // Marked again while we healed: heal again.
                                Ok(false) => continue,
                                Err(e) => {
                                    tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "cannot clear stale marker");
                                    tokio::time::sleep(POLL).await;
                                    continue;
                                }
                            }
                        }
                        slot.healing.store(false, Ordering::Release);
                        if slot.missed.load(Ordering::Acquire) {
                            // Failed as we came up (`missed_forward` saw us still healing).
                            slot.healing.store(true, Ordering::Release);
                            first = false;
                            continue;
                        }
                        if let Err(e) = node
                            .lease()
                            .set_brick_state(&slot.volume, slot.index, BrickState::Up)
                            .await
                        {
                            tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "cannot publish brick state");
                            slot.healing.store(true, Ordering::Release);
                        } else {
                            tracing::info!(volume = %slot.volume, brick = slot.index, healed, "brick is up");
                            healed = 0;
                            node.kick.notify_one();
                        }
                    }
                    Err(e) => {
                        tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "heal incomplete; retrying")
                    }
                }
                first = false;
            } else if demoted(&node, &slot) || has_backlog(&node, &slot).await {
                tracing::warn!(volume = %slot.volume, brick = slot.index, "a peer recorded writes this brick missed; healing");
                slot.healing.store(true, Ordering::Release);
                let _ = node
                    .lease()
                    .set_brick_state(&slot.volume, slot.index, BrickState::Healing)
                    .await;
                node.kick.notify_one();
                continue;
            } else if slot.brick.full_heal_requested() {
                // Asked for by `heal full` while serving: crawl without leaving service.
                if !run_full_crawl(&node, &slot).await {
                    tokio::time::sleep(POLL).await;
                }
                continue;
            }
            tokio::time::sleep(POLL).await;
        }
    });
}

/// The map shows this brick Healing while it serves as Up: a head marked it stale.
fn demoted(node: &Node, slot: &BrickSlot) -> bool {
    node.map(&slot.volume)
        .and_then(|m| m.brick(slot.index).map(|(_, b)| b.state == BrickState::Healing))
        .unwrap_or(false)
}

/// A peer recorded writes this brick missed, or this brick flagged writes it applied but
/// that were not acknowledged (a replica refused its forward): either way it re-copies.
async fn has_backlog(node: &Arc<Node>, slot: &Arc<BrickSlot>) -> bool {
    if slot.brick.pending_counts().iter().any(|(p, n)| *p == slot.index && *n > 0) {
        return true;
    }
    let Some(map) = node.map(&slot.volume) else { return false };
    let Some((set, _)) = map.brick(slot.index) else { return false };
    for b in &set.bricks {
        if b.index == slot.index || !peer_online(node, &map, b.index) {
            continue;
        }
        if let Ok((Reply::Pending(ids), _)) =
            brick_call(node, &map, b.index, Op::PendingList { peer: slot.index }).await
        {
            if !ids.is_empty() {
                return true;
            }
        }
    }
    false
}

/// Wait (bounded) until every online peer's map shows this brick as not Down.
async fn wait_until_seen_healing(node: &Arc<Node>, slot: &Arc<BrickSlot>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut why = String::from("no map");
    let mut published = Instant::now();
    while Instant::now() < deadline {
        if slot.stopped.load(Ordering::Acquire) {
            return;
        }
        let Some(map) = node.map(&slot.volume) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let me_seen_locally =
            map.brick(slot.index).map(|(_, b)| b.state != BrickState::Down).unwrap_or(false);
        if !me_seen_locally {
            why = format!("own map (epoch {}) shows it down", map.epoch);
            // Published Healing before, but not seen: the publication may have been refused
            // (lease not alive yet) or lost with an old lease. Publishing again is harmless.
            if published.elapsed() >= Duration::from_secs(1) {
                published = Instant::now();
                if let Err(e) = node
                    .lease()
                    .set_brick_state(&slot.volume, slot.index, BrickState::Healing)
                    .await
                {
                    tracing::debug!(volume = %slot.volume, brick = slot.index, error = %e, "cannot publish brick state");
                }
                if slot.stopped.load(Ordering::Acquire) {
                    // Closed meanwhile (its key cleared): do not leave it published.
                    let _ = node.lease().clear_brick_state(&slot.volume, slot.index).await;
                    return;
                }
                node.kick.notify_one();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let Some((set, _)) = map.brick(slot.index) else { return };
        let mut all = true;
        for b in &set.bricks {
            if b.index == slot.index || b.node == node.name || b.state == BrickState::Down {
                continue;
            }
            match node
                .peers
                .call(
                    &b.addr,
                    &node.name,
                    Request::GetMap { volume: map.name.clone() },
                    Bytes::new(),
                )
                .await
            {
                Ok((Reply::Map(m), _)) => {
                    if m.brick(slot.index).map(|(_, x)| x.state == BrickState::Down).unwrap_or(true)
                    {
                        why = format!("node {}'s map (epoch {}) shows it down", b.node, m.epoch);
                        all = false;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    why = format!("node {} did not answer: {e}", b.node);
                    all = false;
                }
            }
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!(volume = %slot.volume, brick = slot.index, why, "peers did not confirm this brick is healing within 10s; catching up anyway");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_values() {
        assert_eq!(parse_bandwidth("0"), Some(0));
        assert_eq!(parse_bandwidth("1000"), Some(1000));
        assert_eq!(parse_bandwidth("512K"), Some(512 << 10));
        assert_eq!(parse_bandwidth("10M"), Some(10 << 20));
        assert_eq!(parse_bandwidth("10MB"), Some(10 << 20));
        assert_eq!(parse_bandwidth("2GiB"), Some(2 << 30));
        assert_eq!(parse_bandwidth("1g"), Some(1 << 30));
        assert_eq!(parse_bandwidth("10T"), Some(10 << 40));
        for bad in ["", "K", "-1", "1.5M", "10X", "ten"] {
            assert_eq!(parse_bandwidth(bad), None, "{bad}");
        }
    }

    #[test]
    fn bucket_allows_a_second_of_burst_then_paces() {
        let mut st = HealStats::default();
        assert_eq!(st.take(1000, 1000), (Duration::ZERO, Duration::ZERO));
        let (w, a) = st.take(1000, 500);
        assert!(w > Duration::from_millis(400) && w <= Duration::from_millis(500), "{w:?}");
        assert_eq!(w, a);
        // A second copy waiting side by side: it waits longer, the crawl loses 1 s more.
        let (w, a) = st.take(1000, 1000);
        assert!(w > Duration::from_millis(1400), "{w:?}");
        assert!(a > Duration::from_millis(990) && a <= Duration::from_millis(1000), "{a:?}");
    }
}
