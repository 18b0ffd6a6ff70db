//! Share reservations (NFSv4 OPEN `share_access` / `share_deny`, SMB share modes), kept in
//! memory by the chain head of each file, like the byte-range locks (`locks.rs`).
//!
//! Every gateway and protocol asks the same head, so an NFS open through one Ganesha and
//! an open through another (or through smbd) conflict as they would on one server. A
//! reservation belongs to an opener: the client session that took it and an owner number
//! the client chooses (one per open: an NFSv4 open state, an SMB file handle). A change of
//! an opener's own reservation (an OPEN upgrade or downgrade) is checked against the
//! others only. Every reservation of a session is dropped when its connection closes, so
//! a dead gateway does not hold deny modes. Reservations are not replicated: when the head
//! changes, they are gone with the old head's sessions' connections (gateways that still
//! hold opens take them again, as with locks).
//!
//! Pure logic: the table has no I/O and is tested here.

use cairn_proto::msg::share::{READ, WRITE};
use cairn_proto::{Errno, Id, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;

/// An opener's reservation: what it may do (`access`) and what it denies others (`deny`),
/// in [`READ`] / [`WRITE`] bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    session: u64,
    owner: u64,
    access: u8,
    deny: u8,
}

/// Why `(access, deny)` cannot be granted next to `held`, if it cannot.
fn conflict(held: &Held, access: u8, deny: u8) -> Option<&'static str> {
    if access & held.deny & READ != 0 {
        Some("read access denied by another open's deny-read")
    } else if access & held.deny & WRITE != 0 {
        Some("write access denied by another open's deny-write")
    } else if deny & held.access & READ != 0 {
        Some("deny-read refused: another open reads")
    } else if deny & held.access & WRITE != 0 {
        Some("deny-write refused: another open writes")
    } else {
        None
    }
}

/// Reservation table keyed by (volume, file).
#[derive(Default)]
pub struct ShareTable {
    files: Mutex<HashMap<(String, Id), Vec<Held>>>,
}

impl ShareTable {
    /// Whether any session holds a reservation on `id` (a rebalance does not move it).
    pub fn any(&self, volume: &str, id: Id) -> bool {
        self.files.lock().get(&(volume.to_string(), id)).is_some_and(|h| !h.is_empty())
    }

    /// Set the reservation of open `owner` of `session` on `id` to `access` / `deny`
    /// (both 0: release it). Refused with `ESHAREDENIED` if it conflicts with another
    /// opener's; the opener's previous reservation then stays as it was.
    pub fn set(
        &self,
        volume: &str,
        id: Id,
        session: u64,
        owner: u64,
        access: u8,
        deny: u8,
    ) -> Result<(), RemoteError> {
        if (access | deny) & !(READ | WRITE) != 0 {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!("volume {volume}: {id}: bad share mode access {access:#x} deny {deny:#x}"),
            ));
        }
        let mut files = self.files.lock();
        let key = (volume.to_string(), id);
        let held = files.entry(key.clone()).or_default();
        let mine = |h: &Held| h.session == session && h.owner == owner;
        if access != 0 || deny != 0 {
            if let Some((h, why)) =
                held.iter().filter(|h| !mine(h)).find_map(|h| Some((h, conflict(h, access, deny)?)))
            {
                let other = if h.session == session { "this client" } else { "another client" };
                return Err(RemoteError::new(
                    Errno::ESHAREDENIED,
                    format!(
                        "volume {volume}: {id}: share reservation access {} deny {} refused: \
                         {why} ({other} holds access {} deny {})",
                        bits(access),
                        bits(deny),
                        bits(h.access),
                        bits(h.deny)
                    ),
                ));
            }
        }
        held.retain(|h| !mine(h));
        if access != 0 || deny != 0 {
            held.push(Held { session, owner, access, deny });
        }
        if held.is_empty() {
            files.remove(&key);
        }
        Ok(())
    }

    /// Drop every reservation a session holds (its connection closed).
    pub fn release_session(&self, session: u64) {
        self.files.lock().retain(|_, held| {
            held.retain(|h| h.session != session);
            !held.is_empty()
        });
    }

    /// Number of files with reservations.
    #[cfg(test)]
    fn files(&self) -> usize {
        self.files.lock().len()
    }
}

fn bits(b: u8) -> &'static str {
    match b & (READ | WRITE) {
        0 => "none",
        READ => "read",
        WRITE => "write",
        _ => "both",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::msg::share::BOTH;

    const NONE: u8 = 0;

    fn denied(r: Result<(), RemoteError>) -> bool {
        matches!(r, Err(e) if e.errno == Errno::ESHAREDENIED)
    }

    #[test]
    fn deny_modes_conflict_with_access_both_ways() {
        let t = ShareTable::default();
        let f = Id(5);
        // (first access, first deny, second access, second deny, conflict?)
        let cases = [
            (READ, WRITE, WRITE, NONE, true),
            (READ, WRITE, READ, NONE, false),
            (READ, READ, READ, NONE, true),
            (READ, READ, WRITE, NONE, false),
            (BOTH, BOTH, READ, NONE, true),
            (BOTH, BOTH, WRITE, NONE, true),
            (WRITE, NONE, READ, WRITE, true),
            (READ, NONE, READ, READ, true),
            (READ, NONE, WRITE, READ, true),
            (READ, NONE, READ, WRITE, false),
            (READ, NONE, BOTH, NONE, false),
        ];
        for (i, (a1, d1, a2, d2, clash)) in cases.into_iter().enumerate() {
            let vol = format!("v{i}");
            t.set(&vol, f, 1, 1, a1, d1).unwrap();
            // Another session, and another owner of the same session: the same answer.
            assert_eq!(denied(t.set(&vol, f, 2, 1, a2, d2)), clash, "case {i} other session");
            assert_eq!(denied(t.set(&vol, f, 1, 2, a2, d2)), clash, "case {i} other owner");
        }
    }

    #[test]
    fn own_reservation_changes_freely_and_refusal_keeps_the_old_one() {
        let t = ShareTable::default();
        let f = Id(7);
        t.set("v", f, 1, 1, READ, BOTH).unwrap();
        // The same opener again (an OPEN upgrade / a replay): no conflict with itself.
        t.set("v", f, 1, 1, BOTH, BOTH).unwrap();
        t.set("v", f, 2, 9, READ, NONE).unwrap_err();
        // Downgrade to deny-write: readers may come in, writers may not.
        t.set("v", f, 1, 1, READ, WRITE).unwrap();
        t.set("v", f, 2, 9, READ, NONE).unwrap();
        // An opener whose change is refused keeps what it had.
        assert!(denied(t.set("v", f, 2, 9, READ, READ)));
        assert!(denied(t.set("v", f, 1, 1, READ, WRITE).and(t.set("v", f, 3, 1, WRITE, NONE))));
        // Other files and volumes are independent.
        t.set("v", Id(8), 2, 9, BOTH, BOTH).unwrap();
        t.set("w", f, 2, 9, BOTH, BOTH).unwrap();
    }

    #[test]
    fn release_and_session_end_lift_the_deny() {
        let t = ShareTable::default();
        let f = Id(9);
        t.set("v", f, 1, 1, READ, BOTH).unwrap();
        t.set("v", f, 1, 2, READ, NONE).unwrap_err();
        t.set("v", f, 1, 1, NONE, NONE).unwrap();
        t.set("v", f, 2, 1, BOTH, NONE).unwrap();
        assert!(denied(t.set("v", f, 3, 1, READ, WRITE)));
        t.set("v", f, 3, 1, READ, NONE).unwrap();
        // A session that ends (a gateway's connection closed) releases all it held.
        t.set("v", Id(10), 2, 4, WRITE, BOTH).unwrap();
        t.release_session(2);
        t.set("v", f, 4, 1, READ, WRITE).unwrap();
        t.set("v", Id(10), 4, 1, BOTH, BOTH).unwrap();
        t.release_session(3);
        t.release_session(4);
        assert_eq!(t.files(), 0, "released reservations leave no entries");
    }

    #[test]
    fn bad_bits_are_refused() {
        let t = ShareTable::default();
        let e = t.set("v", Id(1), 1, 1, 4, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL);
        assert_eq!(t.files(), 0);
    }
}
