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

mod catch_up;
mod copy;
mod full;
mod repair;
mod run;

pub use copy::{serve_heal_write, serve_sync};
pub use repair::repair_from_replica;
pub use run::spawn;

use crate::exec::OpResult;
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::mgmt::CrawlInfo;
use cairn_proto::msg::Op;
use std::sync::Arc;

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

/// Call an op on brick `index` of the volume, wherever it is served: a `HealSync` for a
/// brick of this node is served here (it copies from that brick), anything else goes
/// through [`crate::peers::call`].
pub async fn brick_call(node: &Arc<Node>, map: &VolumeMap, index: u32, op: Op) -> OpResult {
    if let (Some(slot), Op::HealSync { id, peer }) = (node.slot(&map.name, index), &op) {
        return serve_sync(node, &slot, *id, *peer).await;
    }
    crate::peers::call(node, map, index, op, Bytes::new()).await
}

fn peer_online(node: &Node, map: &VolumeMap, index: u32) -> bool {
    node.slot(&map.name, index).is_some()
        || map.brick(index).map(|(_, b)| b.state != BrickState::Down).unwrap_or(false)
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
}
