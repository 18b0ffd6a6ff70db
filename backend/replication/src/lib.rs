//! Chain replication, decided without I/O.
//!
//! The head of an inode's chain (see `cairn-placement`) applies a mutation first, then
//! forwards it to every other brick of the set that is not down — healing bricks included,
//! so that they stay current while they catch up — and acknowledges the client only when
//! all of them applied it. For every brick that is down it records the inode in its
//! durable *pending index*; a brick coming back pulls those inodes from the head before it
//! serves reads (see `docs/failure-model.md`).
//!
//! The rules that keep acknowledged writes from being lost, checked by the deterministic
//! simulation in `tests/simulation.rs`:
//! 1. A brick that misses a write is recorded as *pending* for that inode by the head
//!    **and by every replica that applied it**, so the record survives the head.
//! 2. It is also marked *stale* in the config store before the write is acknowledged; a
//!    stale brick is never a head and never read from.
//! 3. A heal copies an inode from its current head, along with the pending records the
//!    head holds for other bricks.
//! 4. A stale brick turns `Up` only after catching up from an `Up` peer ([`may_come_up`]).

use cairn_placement::chain;
use cairn_proto::map::{BrickState, ReplicaSet};
use cairn_proto::Id;
use std::collections::BTreeMap;

/// What the head does with a mutation of `id`: forward to every other brick that is not
/// down (healing bricks included, so they stay current), and record a pending heal for
/// every brick that is down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainPlan {
    pub head: u32,
    pub forward: Vec<u32>,
    pub pending: Vec<u32>,
}

pub fn plan(set: &ReplicaSet, id: Id) -> Option<ChainPlan> {
    let h = cairn_placement::head(set, id)?;
    let mut forward = vec![];
    let mut pending = vec![];
    for b in chain(set, id) {
        if b.index == h.index {
            continue;
        }
        match b.state {
            BrickState::Down => pending.push(b.index),
            BrickState::Up | BrickState::Healing => forward.push(b.index),
        }
    }
    Some(ChainPlan { head: h.index, forward, pending })
}

/// One inode a returning brick must copy: from `source` (the inode's current head, which
/// is up to date), then forget it at every brick in `clear` that recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealStep {
    pub id: Id,
    pub source: u32,
    pub clear: Vec<u32>,
}

/// Plan the catch-up of brick `me`, given what each peer recorded as pending for it.
/// Fails with the first id no brick can be copied from (no `Up` brick heads it): the brick
/// must then stay out of service rather than serve what it has.
pub fn heal_plan(
    set: &ReplicaSet,
    me: u32,
    recorded: &BTreeMap<Id, Vec<u32>>,
) -> Result<Vec<HealStep>, Id> {
    recorded
        .iter()
        .map(|(id, by)| match cairn_placement::head(set, *id) {
            Some(h) if h.index != me => {
                Ok(HealStep { id: *id, source: h.index, clear: by.clone() })
            }
            _ => Err(*id),
        })
        .collect()
}

/// May a brick turn `Up` after its catch-up? One that was never marked stale missed no
/// acknowledged write. A stale one must have caught up from at least one `Up` peer that
/// *answered* (an `Up` peer holds every pending record for it); a peer the map still shows
/// up but that did not answer vouches for nothing. Otherwise it waits out of service.
pub fn may_come_up(stale: bool, up_peers_heard: usize) -> bool {
    !stale || up_peers_heard > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::map::BrickInfo;

    fn set(states: &[BrickState]) -> ReplicaSet {
        ReplicaSet {
            id: 1,
            bricks: states
                .iter()
                .enumerate()
                .map(|(i, s)| BrickInfo {
                    index: i as u32,
                    node: format!("n{i}"),
                    addr: String::new(),
                    path: String::new(),
                    state: *s,
                })
                .collect(),
        }
    }

    #[test]
    fn plan_forwards_to_live_and_records_pending_for_down() {
        use BrickState::*;
        let s = set(&[Down, Healing, Up]);
        for _ in 0..300 {
            let p = plan(&s, Id::new_on_set(1)).unwrap();
            assert_eq!(p.head, 2, "only brick 2 is Up");
            assert_eq!(p.forward, vec![1], "healing bricks still receive writes");
            assert_eq!(p.pending, vec![0]);
        }
        assert!(plan(&set(&[Down, Healing]), Id(5)).is_none(), "no Up brick: no head");
        let p = plan(&set(&[Up, Up, Up]), Id(9)).unwrap();
        assert_eq!(p.forward.len(), 2);
        assert!(p.pending.is_empty());
    }
}
