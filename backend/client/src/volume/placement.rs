//! Where a file's data lives, for callers that send I/O to the bricks' nodes themselves
//! (pNFS layouts, docs/libcairn.md `cairn_layout`): its home replica set and that set's
//! bricks in the file's chain order, from the current volume map. Pure: no round trip.

use super::Volume;
use crate::Result;
use cairn_proto::map::{BrickInfo, BrickState};
use cairn_proto::{Errno, Id};

/// A replica set's bricks in one chain order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Map epoch the answer was read from (moves on every membership or liveness change).
    pub epoch: u64,
    /// The replica set's id.
    pub set: u32,
    /// Chain order's starting position in the set's brick list (`id`'s rotation).
    pub rotation: u32,
    /// The set's bricks in chain order from `rotation`: the first `Up` one is the head.
    pub bricks: Vec<BrickInfo>,
}

impl Placement {
    /// The chain head (first brick that is up), if any.
    pub fn head(&self) -> Option<&BrickInfo> {
        self.bricks.iter().find(|b| b.state == BrickState::Up)
    }
}

impl Volume {
    /// The placement of inode `id`: its home set and the chain order for `id` (the order
    /// in which `cairn_placement::chain` puts the set's bricks).
    pub fn placement(&self, id: Id) -> Placement {
        let map = self.inner.map();
        let set = cairn_placement::home_set(&map, id);
        let n = set.bricks.len().max(1);
        let rotation = (id.ino() % n as u64) as u32;
        let bricks: Vec<BrickInfo> = cairn_placement::chain(set, id).into_iter().cloned().collect();
        debug_assert!(bricks.first() == set.bricks.get(rotation as usize));
        Placement { epoch: map.epoch, set: set.id, rotation, bricks }
    }

    /// Set `set`'s bricks in chain order starting at position `rotation` (what
    /// [`Volume::placement`] returns for the files of that set and rotation).
    pub fn set_placement(&self, set: u32, rotation: u32) -> Result<Placement> {
        let map = self.inner.map();
        let s = map.set_by_id(set).ok_or_else(|| {
            super::err(Errno::ENOENT, format!("no replica set {set} in volume {}", map.name))
        })?;
        let n = s.bricks.len();
        if rotation as usize >= n {
            return Err(super::err(
                Errno::EINVAL,
                format!("rotation {rotation} out of range for set {set} of {n} bricks"),
            ));
        }
        let bricks = (0..n).map(|i| s.bricks[(rotation as usize + i) % n].clone()).collect();
        Ok(Placement { epoch: map.epoch, set, rotation, bricks })
    }
}
