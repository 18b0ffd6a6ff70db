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
//! 5. When no brick of a set is `Up`, the bricks that are not stale (they missed no
//!    acknowledged write) agree on one of them as the source ([`heal_plan`]), so a set
//!    whose bricks all restarted comes back instead of each waiting for the other.
//!
//! What a head does once its own apply and the forwards are done (acknowledge, record,
//! demote, step aside, re-send, fail) is decided by [`ack::AfterWrite`], which `cairnd`
//! executes and the simulation drives.

pub mod ack;
pub mod dedupe;
pub mod range_lock;

use cairn_placement::chain;
use cairn_proto::map::{BrickState, ReplicaSet};
use cairn_proto::Id;
use std::collections::{BTreeMap, BTreeSet};

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
///
/// `source == me` means no brick can give this brick anything newer (see [`heal_plan`]):
/// it keeps its own copy, records the inode as pending for every other brick of the set
/// (so they re-copy it from here), then clears the records in `clear`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealStep {
    pub id: Id,
    pub source: u32,
    pub clear: Vec<u32>,
}

/// Plan the catch-up of brick `me`, given what each peer recorded as pending for it and
/// the bricks marked stale in the config store (`stale`, read before the catch-up).
///
/// An inode is copied from its current head: its first `Up` brick other than `me`. `me` is
/// catching up, so it is not up whatever the map says (a map that still shows it `Up`, as
/// after a forward it missed right as it came up, would otherwise make it its own source
/// for the inodes it heads, and its catch-up would fail on them for as long as the map
/// says so). When no other brick of the set is `Up` (every brick restarted, e.g. both nodes
/// of a replica-2 set went down one after the other), a brick that is **not** stale missed
/// no acknowledged write: what it holds for the inode is at least as new as anything
/// acknowledged, and what it was asked to re-copy are writes nobody acknowledged. Such
/// inodes are taken from the first brick of the chain that is neither down nor stale —
/// this brick itself (`source == me`) or another one that is not stale either, so all of
/// them pick the same copy. A stale brick never takes this way: it copies only from an
/// `Up` head.
///
/// Fails with the first id no brick can be copied from: the brick must then stay out of
/// service rather than serve what it has.
pub fn heal_plan(
    set: &ReplicaSet,
    me: u32,
    recorded: &BTreeMap<Id, Vec<u32>>,
    stale: &BTreeSet<u32>,
) -> Result<Vec<HealStep>, Id> {
    recorded
        .iter()
        .map(|(id, by)| {
            let order = chain(set, *id);
            let head = order.iter().find(|b| b.state == BrickState::Up && b.index != me);
            let source = match head {
                Some(h) => Some(h.index),
                // No other brick of the set is up.
                None if !stale.contains(&me) => order
                    .into_iter()
                    .find(|b| b.state != BrickState::Down && !stale.contains(&b.index))
                    .map(|b| b.index),
                None => None,
            };
            match source {
                Some(source) => Ok(HealStep { id: *id, source, clear: by.clone() }),
                None => Err(*id),
            }
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

/// Write quorum of a replica set (the volume's `cluster.quorum-type` and
/// `cluster.quorum-count`, as in gluster). Bricks that are `Healing` do not count: they
/// cannot head or vouch for anything yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quorum {
    /// Writes go on while any brick of the set is up (the default: availability; safe
    /// because a stale brick never serves before it caught up, see docs/failure-model.md).
    None,
    /// More than half of the set's bricks up, or exactly half including the set's first
    /// brick (so of the two halves of an even set, exactly one may write).
    Auto,
    /// At least this many bricks up.
    Fixed(usize),
}

impl Quorum {
    /// From the option values; `None` for a missing or unknown type.
    pub fn from_options(kind: Option<&str>, count: Option<&str>) -> Quorum {
        match kind {
            Some("auto") => Quorum::Auto,
            Some("fixed") => Quorum::Fixed(count.and_then(|c| c.parse().ok()).unwrap_or(1)),
            _ => Quorum::None,
        }
    }

    /// `Err` if a write to `set` must be refused.
    pub fn check(self, set: &ReplicaSet) -> Result<(), QuorumLost> {
        let n = set.bricks.len();
        let up = set.bricks.iter().filter(|b| b.state == BrickState::Up).count();
        let first_up = set.bricks.first().map(|b| b.state == BrickState::Up).unwrap_or(false);
        let ok = match self {
            Quorum::None => true,
            Quorum::Auto => 2 * up > n || (2 * up == n && first_up),
            Quorum::Fixed(k) => up >= k,
        };
        if ok {
            return Ok(());
        }
        let need = match self {
            Quorum::Auto if n.is_multiple_of(2) => {
                format!("more than {} of {n}, or {} including the set's first brick", n / 2, n / 2)
            }
            Quorum::Auto => format!("more than {} of {n}", n / 2),
            Quorum::Fixed(k) => format!("{k} of {n}"),
            Quorum::None => unreachable!(),
        };
        Err(QuorumLost { up, of: n, need })
    }
}

/// A replica set without its write quorum ([`Quorum::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quorum not met: {up} of {of} bricks up, {need} needed")]
pub struct QuorumLost {
    pub up: usize,
    pub of: usize,
    /// What the quorum type asks for, in words.
    pub need: String,
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

    #[test]
    fn quorum_rules() {
        use BrickState::{Down, Healing, Up};
        // Replica 2, auto: exactly half is enough only with the first brick.
        assert!(Quorum::Auto.check(&set(&[Up, Up])).is_ok());
        assert!(Quorum::Auto.check(&set(&[Up, Down])).is_ok());
        let e = Quorum::Auto.check(&set(&[Down, Up])).unwrap_err().to_string();
        assert!(e.contains("1 of 2 bricks up") && e.contains("first brick"), "{e}");
        assert!(Quorum::Auto.check(&set(&[Healing, Up])).is_err());
        // Replica 3, auto: two of three.
        assert!(Quorum::Auto.check(&set(&[Down, Up, Up])).is_ok());
        assert!(Quorum::Auto.check(&set(&[Up, Down, Healing])).is_err());
        // Fixed and none.
        assert!(Quorum::Fixed(2).check(&set(&[Up, Down, Up])).is_ok());
        assert!(Quorum::Fixed(3)
            .check(&set(&[Up, Down, Up]))
            .unwrap_err()
            .to_string()
            .contains("3 of 3"));
        assert!(Quorum::None.check(&set(&[Down, Up])).is_ok());
        assert_eq!(Quorum::from_options(Some("fixed"), Some("2")), Quorum::Fixed(2));
        assert_eq!(Quorum::from_options(None, None), Quorum::None);
    }

    #[test]
    fn a_set_whose_bricks_all_restarted_heals_from_the_brick_that_is_not_stale() {
        use BrickState::*;
        // Replica 2, both healing after a restart; brick 1 was marked stale (it was down
        // while brick 0 took writes); each recorded the same inode for the other or itself.
        let s = set(&[Healing, Healing]);
        let stale = BTreeSet::from([1]);
        for _ in 0..100 {
            let id = Id::new_on_set(1);
            let rec = BTreeMap::from([(id, vec![0])]);
            let steps = heal_plan(&s, 0, &rec, &stale).unwrap();
            assert_eq!(steps, vec![HealStep { id, source: 0, clear: vec![0] }], "keeps its copy");
            assert_eq!(
                heal_plan(&s, 1, &rec, &stale),
                Err(id),
                "a stale brick waits for an up one"
            );
        }
        // Neither stale: both pick the same source, the first of the chain.
        let none = BTreeSet::new();
        for _ in 0..100 {
            let id = Id::new_on_set(1);
            let rec = BTreeMap::from([(id, vec![0, 1])]);
            let a = heal_plan(&s, 0, &rec, &none).unwrap();
            let b = heal_plan(&s, 1, &rec, &none).unwrap();
            assert_eq!(a[0].source, b[0].source);
            assert_eq!(a[0].source, chain(&s, id)[0].index);
        }
        // The only brick that is not stale is down: nobody may take its place.
        let s = set(&[Down, Healing, Healing]);
        let stale = BTreeSet::from([1, 2]);
        let rec = BTreeMap::from([(Id(7), vec![1])]);
        assert_eq!(heal_plan(&s, 1, &rec, &stale), Err(Id(7)));
        assert_eq!(heal_plan(&s, 2, &rec, &stale), Err(Id(7)));
        // An up head is always the source, stale or not.
        let s = set(&[Up, Healing]);
        let rec = BTreeMap::from([(Id(7), vec![0])]);
        assert_eq!(heal_plan(&s, 1, &rec, &BTreeSet::from([1])).unwrap()[0].source, 0);
    }

    /// faults kill9-rename (seed 267990776): a brick missed a forwarded rename right as it
    /// came up, flagged the renamed inode (homed on the other replica set) for its own
    /// catch-up, and its map went on showing it `Up`. For each inode it headed there it
    /// was its own "head": no source, and the catch-up failed on every retry.
    #[test]
    fn a_catching_up_brick_the_map_still_shows_up_is_not_its_own_source() {
        use BrickState::*;
        let s = set(&[Up, Up, Up]);
        let none = BTreeSet::new();
        let mut headed = 0;
        for _ in 0..300 {
            // An inode of another set (id 2's), recorded by brick 0 for itself.
            let id = Id::new_on_set(2);
            let rec = BTreeMap::from([(id, vec![0])]);
            let order: Vec<u32> = chain(&s, id).iter().map(|b| b.index).collect();
            let steps = heal_plan(&s, 0, &rec, &none).expect("an up peer can be copied from");
            let want = *order.iter().find(|&&b| b != 0).unwrap();
            assert_eq!(steps, vec![HealStep { id, source: want, clear: vec![0] }]);
            headed += usize::from(order[0] == 0);
        }
        assert!(headed > 0, "some of the inodes are headed by brick 0 in the map");
        // No other brick up: a brick that is not stale keeps its copy (the set's rule when
        // all restarted); a stale one waits for an up peer.
        let s = set(&[Up, Healing, Down]);
        let id = Id::new_on_set(2);
        let rec = BTreeMap::from([(id, vec![0])]);
        let first = chain(&s, id).into_iter().find(|b| b.state != Down).unwrap().index;
        assert_eq!(heal_plan(&s, 0, &rec, &none).unwrap()[0].source, first);
        assert_eq!(heal_plan(&s, 0, &rec, &BTreeSet::from([0])), Err(id));
    }
}
