//! Chain replication, decided without I/O.
//!
//! The head of an inode's chain (see `cairn-placement`) applies a mutation first, then
//! forwards it to every other brick of the set that is not down — healing bricks included,
//! so that they stay current while they catch up — and acknowledges the client only when
//! all of them applied it. For every brick that is down it records the inode in its
//! durable *pending index*; a brick coming back pulls those inodes from the head before it
//! serves reads (see `docs/failure-model.md`).

use cairn_placement::chain;
use cairn_proto::map::{BrickState, ReplicaSet};
use cairn_proto::Id;

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
