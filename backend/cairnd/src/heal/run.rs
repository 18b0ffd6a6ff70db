//! The heal loop of one brick: catch up while Healing, come Up, watch for a backlog.

use super::catch_up::catch_up;
use super::full::run_full_crawl;
use super::{brick_call, crawl_begin, crawl_end, peer_online};
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_proto::map::BrickState;
use cairn_proto::msg::{Op, Reply, Request};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a reopened brick waits for the other bricks of its set to come back before it
/// heals from whoever is there.
pub(super) const PEER_WAIT: Duration = Duration::from_secs(15);

const POLL: Duration = Duration::from_secs(5);

/// The wait after a catch-up that failed, doubled after each failure in a row.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Heal loop of one brick, for as long as it is open.
pub fn spawn(node: Arc<Node>, slot: Arc<BrickSlot>) {
    tokio::spawn(async move {
        let mut first = true;
        // Entries copied since the brick last came up (a catch-up may start over).
        let mut healed = 0;
        // Between failed catch-ups: doubled after each, up to `RETRY_MAX`.
        let mut retry = RETRY_MIN;
        loop {
            if slot.stopped.load(Ordering::Acquire) {
                return;
            }
            if slot.healing.load(Ordering::Acquire) {
                // This node's certificate is revoked (said once, `certs::enter_revoked`):
                // no peer accepts it, so there is nothing to heal from until it has a new
                // one.
                if node.cert_revoked.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
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
                        retry = RETRY_MIN;
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
                    Err(e)
                        if cairn_proto::tls::refused_as_revoked(&e.message)
                            && crate::certs::own_revoked(&node).await => {}
                    Err(e) => {
                        tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, retry_in = ?retry, "heal incomplete; retrying");
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(RETRY_MAX);
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

/// Wait (bounded) until this node's map shows this brick Healing (publishing it again
/// until it does) and every online peer's map shows it not Down.
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
        let mine = map.brick(slot.index).map(|(_, b)| b.state);
        if mine != Some(BrickState::Healing) {
            why = format!("own map (epoch {}) shows it {mine:?}", map.epoch);
            // Published Healing before, but not seen: the publication may have been refused
            // (lease not alive yet) or lost with an old lease, or it raced this loop's own
            // `Up` (a forward missed right as the brick came up, `peers::missed_forward`)
            // and lost. Publishing again is harmless.
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
