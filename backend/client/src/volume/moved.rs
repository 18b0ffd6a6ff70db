//! The relocation cache: where inodes that a rebalance moved off their home replica set
//! live now (docs/rebalance.md, "How an id finds its file after the file moves").
//!
//! An id names its home set; after a move its home set's bricks keep a moved stub and
//! answer an op by id with EMOVED naming the set the inode lives on. `call_loop` resends
//! the op there and remembers `id → set` here, so later ops on the id go there first
//! (`Inner::home`). ESTALE from a set this cache named (the inode moved again, or is
//! gone) drops the entry and the op asks the home set again.

use cairn_proto::Id;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};

/// Most relocations remembered; the oldest are forgotten first (a forgotten one costs
/// one more round trip to the home set, which still answers EMOVED).
const CAPACITY: usize = 1 << 16;

#[derive(Default)]
pub(super) struct Relocations {
    inner: Mutex<(HashMap<Id, u32>, VecDeque<Id>)>,
}

impl Relocations {
    /// The set `id` was last found moved to.
    pub fn get(&self, id: Id) -> Option<u32> {
        self.inner.lock().0.get(&id).copied()
    }

    pub fn put(&self, id: Id, set: u32) {
        let mut g = self.inner.lock();
        let (map, order) = &mut *g;
        if map.insert(id, set).is_none() {
            order.push_back(id);
            while map.len() > CAPACITY {
                match order.pop_front() {
                    Some(old) => {
                        map.remove(&old);
                    }
                    None => break,
                }
            }
        }
    }

    /// Forget `id`'s relocation if it still names `set`.
    pub fn drop_if(&self, id: Id, set: u32) -> bool {
        let mut g = self.inner.lock();
        if g.0.get(&id) == Some(&set) {
            g.0.remove(&id);
            g.1.retain(|x| *x != id);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relocations_are_bounded_and_dropped_only_for_their_set() {
        let r = Relocations::default();
        r.put(Id(1), 2);
        assert_eq!(r.get(Id(1)), Some(2));
        assert!(!r.drop_if(Id(1), 3));
        r.put(Id(1), 3);
        assert!(r.drop_if(Id(1), 3));
        assert_eq!(r.get(Id(1)), None);
        for i in 0..(CAPACITY as u128 + 10) {
            r.put(Id(i + 10), 1);
        }
        assert_eq!(r.get(Id(10)), None, "the oldest forgotten");
        assert_eq!(r.get(Id(CAPACITY as u128 + 19)), Some(1));
        assert!(r.inner.lock().0.len() <= CAPACITY);
    }
}
