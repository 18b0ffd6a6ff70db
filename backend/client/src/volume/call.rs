//! Routing and the retry loop: the volume map, where an op goes (home or hashed set, the
//! chain head), and resending across fail-overs until [`RETRY_BUDGET`] runs out.

use super::{err, Inner, Target};
use crate::Result;
use bytes::Bytes;
use cairn_placement::{hashed_set, home_set};
use cairn_proto::map::VolumeMap;
use cairn_proto::msg::{self, BrickRequest, Op, Reply, Request};
use cairn_proto::{Attr, Backoff, Creds, Errno, Id, RemoteError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long an operation keeps retrying while bricks fail over (map refreshes, re-dials).
const RETRY_BUDGET: Duration = msg::RETRY_BUDGET;
/// Wait between attempts (cut short by a map push): 25 ms more each time, at most 500 ms.
const RETRY_BACKOFF: Backoff =
    Backoff::linear(Duration::from_millis(25), Duration::from_millis(500));

/// Most resends of one op to another set because its inode moved (`moved.rs`).
const MAX_HOPS: u32 = 4;

/// How long an op on directory `key` at a set other than its home keeps being resent while
/// that set answers ESTALE ("no directory with id"): another client's mkdir makes a
/// directory on its home set (the set its name hashes to) first and on the other sets
/// just after, and this client can find it in between (a lookup of it, then an op in it:
/// `mkdir -p` of one path on several gateways at once, `cairnd/tests/mkdir_race.rs`). A
/// directory still missing there after this (its mkdir's client died between the steps)
/// answers ESTALE as before.
const HALF_MADE_WAIT: Duration = Duration::from_secs(3);
const HALF_MADE_BACKOFF: Backoff =
    Backoff::linear(Duration::from_millis(10), Duration::from_millis(100));

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

/// An op that makes a name refused (ESTALEMAP) by a head whose layout is newer than the
/// one this client routed it by (`layout`), or a create refused by the head of `set` whose
/// name hashes to another set in the map we have now (an add-brick changed the layout
/// and this client routed by the old one): resending it to `set` can only be refused
/// again until the retry budget runs out (ESTALEMAP, which the mount turns into EIO). The
/// caller routes it again by the map it has now (`make_entry`, `mkdir`, `link`,
/// `rename`: a new id on the set the name hashes to, the new sets, the linkto's set).
pub(super) fn rerouted(map: &VolumeMap, op: &Op, set: u32, layout: u64, e: &RemoteError) -> bool {
    if e.errno != Errno::ESTALEMAP || !op.makes_name() {
        return false;
    }
    map.layout_epoch > layout
        || matches!(op, Op::Create { dir, name, .. } | Op::MkLinkto { dir, name, .. }
            if hashed_set(map, *dir, name).id != set)
}

/// Whether an ESTALE from set `set` for a directory homed elsewhere may be a mkdir on its
/// way there ([`HALF_MADE_WAIT`]): not on a set an add-brick is still filling with the
/// volume's directories (outside the layout), nor while a rebalance runs (then a missing
/// name or directory is looked for on the other sets instead, `lookup_remote`).
fn half_made_possible(map: &VolumeMap, set: u32) -> bool {
    !map.rebalancing && (map.layout.is_empty() || map.layout.contains(&set))
}

impl Inner {
    pub(super) fn set_map(&self, m: VolumeMap) {
        let mut cur = self.map.write();
        if m.epoch >= cur.epoch {
            let (epoch, newer) = (m.epoch, m.epoch > cur.epoch);
            self.apply_options(&m);
            *cur = Arc::new(m);
            drop(cur);
            self.map_changed.notify_waiters();
            if newer {
                // A new head knows nothing of the leases that said a file was unlocked.
                self.lockstate.clear();
                if let Some(cb) = self.on_map_change.read().clone() {
                    cb(epoch);
                }
            }
        }
    }

    /// Ask the nodes for a newer map (after a brick said ours is stale).
    pub(super) async fn refresh_map(&self) {
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

    /// Send one op to the chain head of `t`, retrying across fail-overs.
    pub(super) async fn call(
        &self,
        t: Target,
        c: &Creds,
        op: Op,
        data: Bytes,
    ) -> Result<(Reply, Bytes)> {
        self.call_with(t, c, op, data, false, 0, false).await
    }

    /// A namespace op at the head of `t`, asking for its copies of the op's parent
    /// directories after it: the reply and those copies (`None` from a brick that did not
    /// send them: one built before them, or a retry answered from its first result).
    pub(super) async fn call_ns(
        &self,
        t: Target,
        c: &Creds,
        op: Op,
    ) -> Result<(Reply, Option<Vec<Attr>>)> {
        match self.call_with(t, c, op, Bytes::new(), true, 0, false).await?.0 {
            Reply::WithParents { reply, parents } => Ok((*reply, Some(parents))),
            r => Ok((r, None)),
        }
    }

    pub(super) async fn call_with(
        &self,
        t: Target,
        c: &Creds,
        op: Op,
        data: Bytes,
        parents: bool,
        inline: u32,
        sync: bool,
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
        let r = self.call_loop(t, c, op, data, parents, inline, sync).await;
        if mutation {
            self.data.invalidate(t.key);
        }
        r
    }

    pub(super) async fn call_loop(
        &self,
        mut t: Target,
        c: &Creds,
        op: Op,
        data: Bytes,
        parents: bool,
        inline: u32,
        sync: bool,
    ) -> Result<(Reply, Bytes)> {
        let deadline = tokio::time::Instant::now() + RETRY_BUDGET;
        // The layout the caller routed the op by (it read the map just before): sent
        // with every attempt, so a head with a newer layout refuses it rather than take
        // a name where lookups by that layout do not look (`rerouted`).
        let layout = self.map().layout_epoch;
        let mut backoff = RETRY_BACKOFF;
        let started = tokio::time::Instant::now();
        let mut half_made = HALF_MADE_BACKOFF;
        // Resends to another set because the inode moved (EMOVED) or is no longer where
        // the relocation cache said (ESTALE): each needs another move meanwhile.
        let mut hops = 0;
        // One id for every attempt of this op.
        let req_id = op.is_mutation().then(|| msg::ReqId {
            client: self.client_id,
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
        });
        // Whether a file is locked by another session comes with its lease (`cairn_cache::LockStates`).
        let lock_token = self.lockstate.begin();
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
                        layout_epoch: Some(layout),
                        sync,
                        locks: true,
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
                        // Keeps the errno and an EMOVED's set.
                        RemoteError {
                            message: format!(
                                "{}: brick {} ({}:{}): {}",
                                map.name, b.index, b.node, b.path, e.message
                            ),
                            ..e
                        }
                    })
                }
            };
            match res {
                Err(e) if e.errno == Errno::EMOVED => {
                    match e.moved_to().filter(|s| *s != t.set && hops < MAX_HOPS) {
                        Some(to) => {
                            tracing::debug!(id = %t.key, from = t.set, to, "inode moved; resending");
                            self.moved.put(t.key, to);
                            t.set = to;
                            hops += 1;
                        }
                        None => return Err(err(Errno::ESTALE, e.message)),
                    }
                }
                Err(e)
                    if e.errno == Errno::ESTALE
                        && hops < MAX_HOPS
                        && self.moved.drop_if(t.key, t.set) =>
                {
                    // Moved again, or gone: the home set's stub says which.
                    t.set = home_set(&self.map(), t.key).id;
                    hops += 1;
                }
                Err(e)
                    if e.errno == Errno::ESTALE
                        && started.elapsed() < HALF_MADE_WAIT
                        && t.set != self.home(t.key)
                        && half_made_possible(&self.map(), t.set) =>
                {
                    tracing::debug!(dir = %t.key, set = t.set, error = %e, "directory not on this set yet (its mkdir on its way?): resending");
                    tokio::time::sleep(half_made.next_delay()).await;
                }
                Err(e) if is_retryable(&e) && !last => {
                    if rerouted(&self.map(), &op, t.set, layout, &e) {
                        return Err(e);
                    }
                    let wait = backoff.next_delay();
                    let attempt = backoff.attempts();
                    tracing::debug!(error = %e, attempt, "retrying after map refresh");
                    tokio::select! {
                        _ = self.map_changed.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                    self.refresh_map().await;
                    if rerouted(&self.map(), &op, t.set, layout, &e) {
                        return Err(e);
                    }
                }
                Ok((Reply::Unlocked { id, reply }, out)) => {
                    self.lockstate.put(lock_token, id);
                    return Ok((*reply, out));
                }
                other => return other,
            }
        }
    }

    /// An op on inode `id` at the head of its home set, with no bulk data; the reply only.
    pub(super) async fn on_home(&self, c: &Creds, id: Id, op: Op) -> Result<Reply> {
        Ok(self.call(Target { set: self.home(id), key: id }, c, op, Bytes::new()).await?.0)
    }

    /// The set to send an op on inode `id` to: where a rebalance moved it if this client
    /// learnt that (`moved.rs`), else its home set.
    pub(super) fn home(&self, id: Id) -> u32 {
        let map = self.map();
        match self.moved.get(id) {
            Some(set) if map.set_by_id(set).is_some() => set,
            _ => home_set(&map, id).id,
        }
    }

    /// A fresh id for an entry made in `dir` on set `set`, headed by the brick that heads
    /// `dir` there (`cairn_placement::new_id_like`): the create's reply is then the copy of
    /// the inode every later getattr reads.
    pub(super) fn new_id(&self, set: u32, dir: Id) -> Id {
        match self.map().set_by_id(set) {
            Some(s) => cairn_placement::new_id_like(s, dir),
            None => Id::new_on_set(set),
        }
    }

    /// Whether attributes of inode `id` that the head of `dir` on `id`'s hashed set `set`
    /// answered (a create, lookup or listing in `dir`) are the copy the head of `id` keeps,
    /// leased where they change: `id` is homed on `set` and has `dir`'s chain order there.
    /// Older ids, and names linked or renamed into another directory, may be headed by
    /// another brick of the set, whose copy has its own ctime; those are fetched by getattr.
    pub(super) fn read_at_head(&self, set: u32, dir: Id, id: Id) -> bool {
        let map = self.map();
        id.home_set() == set
            && map.set_by_id(set).is_some_and(|s| cairn_placement::same_chain(s, dir, id))
    }

    /// Whether `e` is a head's refusal of an op this client routed by layout epoch
    /// `layout`, and the map it has now has a newer layout: the op is routed again.
    pub(super) fn layout_moved(&self, layout: u64, e: &RemoteError) -> bool {
        e.errno == Errno::ESTALEMAP && self.map().layout_epoch > layout
    }

    pub(super) fn hashed(&self, dir: Id, name: &[u8]) -> u32 {
        hashed_set(&self.map(), dir, name).id
    }

    pub(super) fn set_ids(&self) -> Vec<u32> {
        self.map().sets.iter().map(|s| s.id).collect()
    }
}
