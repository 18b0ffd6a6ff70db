//! Placement: which replica set holds a name, and the chain order of bricks for an inode.
//!
//! *Elastic hashing.* A name in directory `d` hashes (xxh3-64 seeded by `d`'s id, top 32
//! bits) into a 32-bit ring split into one contiguous range per replica set. Seeding by
//! the directory spreads each directory's files differently over the sets. Nothing is
//! stored per directory: the layout is a function of the volume map — its `layout` (the
//! sets names hash over, in ring order; `grow_layout` places new sets where they move
//! the fewest names), `layout_epoch` tells when it changed, and while `rebalancing` a
//! miss must be looked up on every set.
//!
//! *Chains.* Within a set the bricks form a chain whose order is rotated by the inode id,
//! so each brick heads an equal share of the inodes. The head (first brick in the chain
//! that is `Up`) serves reads, locks and leases for the inode; `cairn-replication` decides
//! what happens to a mutation from there.
//!
//! Everything here is pure and deterministic; `tests` simulates it.

use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap};
use cairn_proto::Id;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Fold an id into the 64-bit seed of its directory's hash.
fn dir_seed(dir: Id) -> u64 {
    (dir.0 as u64) ^ ((dir.0 >> 64) as u64)
}

/// The 32-bit ring position of `name` in directory `dir`.
pub fn name_hash(dir: Id, name: &[u8]) -> u32 {
    (xxh3_64_with_seed(name, dir_seed(dir)) >> 32) as u32
}

/// Index (into `sets`) of the set whose range holds `hash`, for `n` equal ranges.
pub fn range_index(hash: u32, n: usize) -> usize {
    assert!(n > 0, "a volume has at least one replica set");
    // Equal ranges: set i owns [i * 2^32 / n, (i+1) * 2^32 / n).
    ((hash as u64 * n as u64) >> 32) as usize
}

/// The replica set a name hashes to: one of the map's layout sets (`VolumeMap::layout`,
/// every set when it is empty), each owning an equal range of the ring in layout order.
pub fn hashed_set<'a>(map: &'a VolumeMap, dir: Id, name: &[u8]) -> &'a ReplicaSet {
    let h = name_hash(dir, name);
    if !map.layout.is_empty() {
        let ring = map.layout_sets();
        if !ring.is_empty() {
            return ring[range_index(h, ring.len())];
        }
    }
    &map.sets[range_index(h, map.sets.len())]
}

/// Share of the ring (of names) whose set differs between layouts `old` and `new` (set
/// ids in ring order, equal ranges each), as `(numerator, denominator)`: what a rebalance
/// from `old` to `new` moves.
pub fn moved_share(old: &[u32], new: &[u32]) -> (u64, u64) {
    let (n, m) = (old.len() as u64, new.len() as u64);
    if n == 0 || m == 0 {
        return (0, 1);
    }
    // Work in units of 1/(n*m) of the ring: old range i is [i*m, (i+1)*m), new range j is
    // [j*n, (j+1)*n). Walk the boundaries of both.
    let total = n * m;
    let (mut pos, mut moved) = (0u64, 0u64);
    let (mut i, mut j) = (0usize, 0usize);
    while pos < total {
        let end = ((i as u64 + 1) * m).min((j as u64 + 1) * n);
        if old[i] != new[j] {
            moved += end - pos;
        }
        pos = end;
        if pos == (i as u64 + 1) * m {
            i += 1;
        }
        if pos == (j as u64 + 1) * n {
            j += 1;
        }
    }
    (moved, total)
}

/// The layout after adding sets `added` to layout `old`: each new set goes, one after the
/// other, into the ring position that moves the fewest names (`moved_share`). Existing
/// sets keep their relative order, so a file's set changes only when its range moves to
/// a neighbour or to a new set. Deterministic: the same inputs give the same layout.
pub fn grow_layout(old: &[u32], added: &[u32]) -> Vec<u32> {
    let mut cur = old.to_vec();
    for &s in added {
        let mut best: Option<((u64, u64), Vec<u32>)> = None;
        for pos in 0..=cur.len() {
            let mut cand = cur.clone();
            cand.insert(pos, s);
            let (num, den) = moved_share(old, &cand);
            // Exact comparison of the fractions; a tie goes to the later position (so one
            // set added to one is appended).
            let better = best.as_ref().map(|((bn, bd), _)| {
                (num as u128) * (*bd as u128) <= (*bn as u128) * (den as u128)
            });
            if better.unwrap_or(true) {
                best = Some(((num, den), cand));
            }
        }
        cur = best.map(|(_, c)| c).unwrap_or(cur);
    }
    cur
}

/// The set an inode id is homed on; falls back to the first set for ids whose home is
/// unknown (the root, which lives on every set).
pub fn home_set(map: &VolumeMap, id: Id) -> &ReplicaSet {
    map.set_by_id(id.home_set()).unwrap_or(&map.sets[0])
}

fn rotation(id: Id, n: usize) -> usize {
    (id.ino() % n as u64) as usize
}

/// Chain order of the set's bricks for inode `id`.
pub fn chain(set: &ReplicaSet, id: Id) -> Vec<&BrickInfo> {
    let n = set.bricks.len();
    let r = rotation(id, n);
    (0..n).map(|i| &set.bricks[(r + i) % n]).collect()
}

/// Whether inodes `a` and `b` have the same chain order in `set` (so the same head
/// brick, whichever bricks are down).
pub fn same_chain(set: &ReplicaSet, a: Id, b: Id) -> bool {
    let n = set.bricks.len();
    n <= 1 || rotation(a, n) == rotation(b, n)
}

/// A fresh id homed on `set` whose chain order there is that of directory `dir`: the
/// brick that heads `dir` (and so orders the create of a name in it on this set) heads
/// the new inode too. Its create's reply, a lookup or listing of it and every later
/// getattr then read the same copy of the inode (each copy has its own ctime: it cannot
/// be set), and the lease a lookup takes on it is held where its attributes change.
/// For files only: a directory made so would pass its parent's head down the whole tree.
pub fn new_id_like(set: &ReplicaSet, dir: Id) -> Id {
    // An id's rotation is its 64-bit fold modulo the set's size: draw until it matches
    // (n draws on average, n = the replica count). Bounded, in case of a broken random
    // source; the fallback is only a spread-out id.
    let mut id = Id::new_on_set(set.id);
    for _ in 0..1024 {
        if same_chain(set, id, dir) {
            break;
        }
        id = Id::new_on_set(set.id);
    }
    id
}

/// The brick that heads `id`'s chain: the first `Up` brick in chain order.
pub fn head(set: &ReplicaSet, id: Id) -> Option<&BrickInfo> {
    chain(set, id).into_iter().find(|b| b.state == BrickState::Up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::map::VolumeStatus;
    use std::collections::BTreeMap;

    fn map(sets: usize, replica: usize) -> VolumeMap {
        VolumeMap {
            name: "v".into(),
            id: 7,
            epoch: 1,
            layout_epoch: 1,
            rebalancing: false,
            layout: vec![],
            status: VolumeStatus::Started,
            replica: replica as u32,
            sets: (0..sets)
                .map(|s| ReplicaSet {
                    id: s as u32 + 1,
                    bricks: (0..replica)
                        .map(|r| BrickInfo {
                            index: (s * replica + r) as u32,
                            node: format!("n{r}"),
                            addr: String::new(),
                            path: format!("/b{s}{r}"),
                            state: BrickState::Up,
                        })
                        .collect(),
                })
                .collect(),
            options: BTreeMap::new(),
        }
    }

    #[test]
    fn hash_is_stable_across_builds() {
        // Placement is persistent (files live where their names hashed): the function must
        // never change. These values pin it.
        assert_eq!(name_hash(Id::ROOT, b"a"), 3539390617);
        assert_eq!(name_hash(Id(42), b"a"), 1279491540, "seeded by directory");
        assert_eq!(name_hash(Id(0x1234), b"hello.txt"), 2979469470);
    }

    #[test]
    fn ranges_cover_the_ring_evenly() {
        for n in 1..=7 {
            assert_eq!(range_index(0, n), 0);
            assert_eq!(range_index(u32::MAX, n), n - 1);
            let mut counts = vec![0u32; n];
            for h in (0..u32::MAX).step_by(65_537) {
                counts[range_index(h, n)] += 1;
            }
            let min = *counts.iter().min().unwrap() as f64;
            let max = *counts.iter().max().unwrap() as f64;
            assert!(max / min < 1.01, "n={n} counts={counts:?}");
        }
    }

    #[test]
    fn names_spread_over_sets() {
        let m = map(4, 2);
        let mut counts = [0u32; 4];
        for i in 0..40_000 {
            let s = hashed_set(&m, Id(99), format!("f{i}").as_bytes());
            counts[(s.id - 1) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn new_ids_share_their_directory_s_head() {
        for replica in 1..=4 {
            let mut m = map(2, replica);
            for _ in 0..50 {
                let dir = Id::new_on_set(1);
                let set = &m.sets[1];
                let id = new_id_like(set, dir);
                assert_eq!(id.home_set(), set.id);
                assert!(same_chain(set, id, dir));
                assert_eq!(head(set, id).unwrap().index, head(set, dir).unwrap().index);
            }
            // Still the same head with the first brick of the chain down.
            let dir = Id::new_on_set(1);
            let id = new_id_like(&m.sets[0], dir);
            let first = chain(&m.sets[0], dir)[0].index;
            for b in m.sets[0].bricks.iter_mut().filter(|b| b.index == first) {
                b.state = BrickState::Down;
            }
            if replica > 1 {
                let h = head(&m.sets[0], dir).unwrap().index;
                assert_ne!(h, first);
                assert_eq!(head(&m.sets[0], id).unwrap().index, h);
            }
        }
    }

    #[test]
    fn heads_rotate_and_skip_dead_bricks() {
        let mut m = map(1, 3);
        let mut heads = [0u32; 3];
        for i in 0..3000u128 {
            let id = Id::new_on_set(1);
            let _ = i;
            heads[head(&m.sets[0], id).unwrap().index as usize] += 1;
        }
        assert!(heads.iter().all(|&h| h > 800), "{heads:?}");
        m.sets[0].bricks[0].state = BrickState::Down;
        for _ in 0..300 {
            assert_ne!(head(&m.sets[0], Id::new_on_set(1)).unwrap().index, 0);
        }
        for b in &mut m.sets[0].bricks {
            b.state = BrickState::Down;
        }
        assert!(head(&m.sets[0], Id(5)).is_none(), "no Up brick: no head");
    }

    #[test]
    fn layout_limits_the_sets_names_hash_to() {
        let mut m = map(3, 2);
        m.layout = vec![1, 2];
        for i in 0..5000 {
            let s = hashed_set(&m, Id(99), format!("f{i}").as_bytes()).id;
            assert_ne!(s, 3, "set 3 is not in the layout yet");
        }
        // The same ring split as a two-set volume's: names do not move while a set joins.
        let two = map(2, 2);
        for i in 0..5000 {
            let n = format!("f{i}");
            assert_eq!(
                hashed_set(&m, Id(99), n.as_bytes()).id,
                hashed_set(&two, Id(99), n.as_bytes()).id
            );
        }
        // Layout order is ring order.
        m.layout = vec![3, 1, 2];
        let mut counts = [0u32; 3];
        for i in 0..30_000 {
            counts[(hashed_set(&m, Id(5), format!("g{i}").as_bytes()).id - 1) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (9_000..11_000).contains(c)), "{counts:?}");
        // A layout naming no set of the map falls back to every set.
        m.layout = vec![9];
        assert_eq!(hashed_set(&m, Id(5), b"x").id, hashed_set(&map(3, 2), Id(5), b"x").id);
    }

    #[test]
    fn moved_share_is_exact() {
        assert_eq!(moved_share(&[1], &[1, 2]), (1, 2));
        assert_eq!(moved_share(&[1, 2], &[1, 2, 3]), (3, 6), "appending moves half");
        assert_eq!(moved_share(&[1, 2], &[1, 3, 2]), (2, 6), "in the middle: a third");
        assert_eq!(moved_share(&[1, 2], &[1, 2]), (0, 4));
        assert_eq!(moved_share(&[1, 2], &[2, 1]), (4, 4));
    }

    #[test]
    fn grow_layout_moves_the_least() {
        assert_eq!(grow_layout(&[1], &[2]), [1, 2]);
        // 2 -> 3 sets: a third of the names move (the new set's share), not half.
        let l = grow_layout(&[1, 2], &[3]);
        assert_eq!(l, [1, 3, 2]);
        assert_eq!(moved_share(&[1, 2], &l), (2, 6));
        // Existing sets keep their order, whatever is added.
        for n in 1..8u32 {
            let old: Vec<u32> = (1..=n).collect();
            let added: Vec<u32> = (n + 1..=n + 3).collect();
            let new = grow_layout(&old, &added);
            let kept: Vec<u32> = new.iter().copied().filter(|s| *s <= n).collect();
            assert_eq!(kept, old);
            assert_eq!(new.len(), old.len() + added.len());
            // Never worse than appending.
            let mut appended = old.clone();
            appended.extend(&added);
            let (a, b) = moved_share(&old, &new);
            let (c, d) = moved_share(&old, &appended);
            assert!(a * d <= c * b, "n={n}: {new:?} moves {a}/{b}, appending {c}/{d}");
        }
        // Checked against a count of real names.
        let mut before = map(3, 2);
        before.layout = vec![1, 3, 2];
        let mut after = map(4, 2);
        after.layout = grow_layout(&[1, 3, 2], &[4]);
        let moved = (0..40_000)
            .filter(|i| {
                let n = format!("h{i}");
                hashed_set(&before, Id(7), n.as_bytes()).id
                    != hashed_set(&after, Id(7), n.as_bytes()).id
            })
            .count();
        let (a, b) = moved_share(&[1, 3, 2], &after.layout);
        let want = 40_000 * a / b;
        assert!((moved as u64).abs_diff(want) < 800, "moved {moved}, share {a}/{b}");
    }

    #[test]
    fn home_set_routes_ids() {
        let m = map(4, 2);
        let id = Id::new_on_set(3);
        assert_eq!(home_set(&m, id).id, 3);
        assert_eq!(home_set(&m, Id::ROOT).id, 1);
    }
}
