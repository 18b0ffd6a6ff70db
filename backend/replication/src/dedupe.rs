//! Idempotent mutations: the request ids a brick applied, with their results.
//!
//! A client that loses its connection to a head (or whose head is deposed mid-write)
//! retries the mutation, possibly at another brick, possibly after newer writes landed.
//! Applying it again would make one write take effect twice (a reader could see the old
//! value come back). Every mutation carries a [`ReqId`] (client, sequence), the same on
//! every retry; each brick that applies it (the head, and every replica through the
//! forward) remembers the id with its result, and a duplicate gets that result back.
//!
//! What the head does with a request is [`Table::check`]: apply it ([`Dup::New`]), answer
//! the remembered result ([`Dup::Answer`]: this brick acknowledged it as head), or
//! ([`Dup::Confirm`]: this brick applied it as a replica, its head never answered) answer
//! it only if every other replica confirms it applied it too, and apply it again otherwise
//! (the forward re-applies it everywhere, so every copy ends the same). A head remembers
//! only what it acknowledged: a write it applied but could not acknowledge is re-copied by
//! that brick when it catches up, never answered from it.
//!
//! Each record names the inodes its request changed, so that a heal copying an inode to
//! a brick that missed it carries the records of the requests whose effects the copy
//! holds ([`Table::touching`], taken under the inode lock with the copy): the healed
//! brick takes them as applied, not acknowledged ([`Table::adopt`]), and a client's retry
//! of one of them that it heads later is confirmed with the replicas, not applied again.
//!
//! Memory is bounded: the last `per_client` ids of each client, and `max_clients`
//! clients (the least recently seen is forgotten first). The table is not persisted: a
//! brick that restarts forgets it, and heals what it missed from a head that remembers.

use cairn_proto::msg::ReqId;
use cairn_proto::Id;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a head does with a mutation carrying a request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dup<R> {
    /// Never applied here: apply it.
    New,
    /// Applied and acknowledged by this brick as head: answer this, apply nothing.
    Answer(R),
    /// Applied here as a replica, never acknowledged by this brick: answer this if every
    /// other replica applied it too, else apply it again.
    Confirm(R),
}

struct Done<R> {
    result: R,
    acked: bool,
    /// The inodes the request changed (the index `by_inode` lists it under each).
    inodes: Vec<Id>,
}

struct Window<R> {
    done: BTreeMap<u64, Done<R>>,
    used: u64,
}

/// The request ids one brick applied, per client, with their results.
pub struct Table<R> {
    clients: HashMap<u64, Window<R>>,
    /// The requests each inode's records name, for a heal copy of the inode.
    by_inode: HashMap<Id, BTreeSet<ReqId>>,
    per_client: usize,
    max_clients: usize,
    tick: u64,
}

/// Ids kept per client: far more than a client has in flight (write-behind keeps a few
/// per file), so a retry always finds its id.
pub const PER_CLIENT: usize = 512;
/// Clients remembered per brick.
pub const MAX_CLIENTS: usize = 1024;

impl<R: Clone> Default for Table<R> {
    fn default() -> Self {
        Table::new(PER_CLIENT, MAX_CLIENTS)
    }
}

impl<R: Clone> Table<R> {
    pub fn new(per_client: usize, max_clients: usize) -> Table<R> {
        Table {
            clients: HashMap::new(),
            by_inode: HashMap::new(),
            per_client: per_client.max(1),
            max_clients: max_clients.max(1),
            tick: 0,
        }
    }

    fn touch(&mut self, client: u64) -> Option<&mut Window<R>> {
        self.tick += 1;
        let tick = self.tick;
        let w = self.clients.get_mut(&client)?;
        w.used = tick;
        Some(w)
    }

    /// What the head does with request `id` (see [`Dup`]).
    pub fn check(&mut self, id: ReqId) -> Dup<R> {
        match self.touch(id.client).and_then(|w| w.done.get(&id.seq)) {
            None => Dup::New,
            Some(d) if d.acked => Dup::Answer(d.result.clone()),
            Some(d) => Dup::Confirm(d.result.clone()),
        }
    }

    /// The result of request `id` if this brick applied it (for a replica asked to
    /// confirm).
    pub fn applied(&mut self, id: ReqId) -> Option<R> {
        self.touch(id.client).and_then(|w| w.done.get(&id.seq)).map(|d| d.result.clone())
    }

    /// Remember that this brick applied request `id` with `result`, changing `inodes`;
    /// `acked` if it is the head and acknowledged it (an id once acknowledged stays so).
    pub fn record(&mut self, id: ReqId, result: R, acked: bool, inodes: &[Id]) {
        if self.touch(id.client).is_none() {
            if self.clients.len() >= self.max_clients {
                if let Some(oldest) =
                    self.clients.iter().min_by_key(|(_, w)| w.used).map(|(c, _)| *c)
                {
                    if let Some(w) = self.clients.remove(&oldest) {
                        for (seq, d) in &w.done {
                            unindex(&mut self.by_inode, ReqId { client: oldest, seq: *seq }, d);
                        }
                    }
                }
            }
            self.clients.insert(id.client, Window { done: BTreeMap::new(), used: self.tick });
        }
        let w = self.clients.get_mut(&id.client).expect("just inserted");
        let done = Done { result, acked, inodes: inodes.to_vec() };
        for &i in &done.inodes {
            self.by_inode.entry(i).or_default().insert(id);
        }
        if let Some(old) = w.done.insert(id.seq, done) {
            let d = w.done.get_mut(&id.seq).expect("just inserted");
            d.acked |= old.acked;
            let kept: Vec<Id> = d.inodes.clone();
            for i in old.inodes.iter().filter(|i| !kept.contains(i)) {
                unindex_one(&mut self.by_inode, *i, id);
            }
        }
        while w.done.len() > self.per_client {
            if let Some((seq, d)) = w.done.pop_first() {
                unindex(&mut self.by_inode, ReqId { client: id.client, seq }, &d);
            }
        }
    }

    /// The records of the requests that changed `inode`, for a heal copy of it: the copy,
    /// taken under the inode lock, holds their effects.
    pub fn touching(&self, inode: Id) -> Vec<(ReqId, R)> {
        let Some(ids) = self.by_inode.get(&inode) else { return vec![] };
        ids.iter()
            .filter_map(|id| {
                let d = self.clients.get(&id.client)?.done.get(&id.seq)?;
                Some((*id, d.result.clone()))
            })
            .collect()
    }

    /// Take a record a heal copy carried: this brick now holds the effects of request `id`
    /// (on `inodes`) without having applied it, and never acknowledged it, so a retry of it
    /// is confirmed with the replicas ([`Dup::Confirm`]). A record of its own is kept (it
    /// is listed under `inodes` too, so this brick's own copies of them carry it).
    pub fn adopt(&mut self, id: ReqId, result: R, inodes: &[Id]) {
        match self.clients.get_mut(&id.client).and_then(|w| w.done.get_mut(&id.seq)) {
            Some(d) => {
                for &i in inodes {
                    if !d.inodes.contains(&i) {
                        d.inodes.push(i);
                        self.by_inode.entry(i).or_default().insert(id);
                    }
                }
            }
            None => self.record(id, result, false, inodes),
        }
    }

    /// Mark request `id` acknowledged by this brick as head, keeping its result.
    pub fn ack(&mut self, id: ReqId) {
        if let Some(d) = self.touch(id.client).and_then(|w| w.done.get_mut(&id.seq)) {
            d.acked = true;
        }
    }
}

/// Drop request `id`'s entries from the inode index (its record `d` is gone).
fn unindex<R>(by_inode: &mut HashMap<Id, BTreeSet<ReqId>>, id: ReqId, d: &Done<R>) {
    for &i in &d.inodes {
        unindex_one(by_inode, i, id);
    }
}

fn unindex_one(by_inode: &mut HashMap<Id, BTreeSet<ReqId>>, inode: Id, id: ReqId) {
    if let Some(set) = by_inode.get_mut(&inode) {
        set.remove(&id);
        if set.is_empty() {
            by_inode.remove(&inode);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register on one brick that counts how often it was written, behind a table.
    struct Brick {
        value: u64,
        applied: u32,
        table: Table<u64>,
    }

    impl Brick {
        fn new() -> Brick {
            Brick { value: 0, applied: 0, table: Table::new(4, 2) }
        }
        /// The head's path in `cairnd`: check, apply if new, record and acknowledge.
        fn write(&mut self, id: ReqId, v: u64) -> u64 {
            match self.table.check(id) {
                Dup::Answer(r) | Dup::Confirm(r) => r,
                Dup::New => {
                    self.value = v;
                    self.applied += 1;
                    self.table.record(id, v, false, &[]);
                    self.table.ack(id);
                    v
                }
            }
        }
    }

    fn id(client: u64, seq: u64) -> ReqId {
        ReqId { client, seq }
    }

    #[test]
    fn a_duplicate_after_success_gets_the_first_result_and_is_not_applied_again() {
        let mut b = Brick::new();
        assert_eq!(b.write(id(1, 1), 10), 10);
        assert_eq!(b.write(id(2, 1), 20), 20, "another client, same seq: a different request");
        assert_eq!(b.write(id(1, 2), 30), 30, "same client, next seq: applied");
        assert_eq!(b.applied, 3);
        // The retry of the first write, after the newer ones: answered, not applied.
        assert_eq!(b.write(id(1, 1), 10), 10);
        assert_eq!(b.value, 30, "the retry did not bring the old value back");
        assert_eq!(b.applied, 3);
    }

    #[test]
    fn applied_but_not_acknowledged_asks_for_confirmation() {
        let mut t = Table::new(4, 2);
        t.record(id(1, 1), "r", false, &[]);
        assert_eq!(t.check(id(1, 1)), Dup::Confirm("r"));
        assert_eq!(t.applied(id(1, 1)), Some("r"));
        assert_eq!(t.applied(id(1, 2)), None);
        t.ack(id(1, 1));
        assert_eq!(t.check(id(1, 1)), Dup::Answer("r"));
        // A replica applying the same id again (a new head re-sent it) keeps it acked.
        t.record(id(1, 1), "r2", false, &[]);
        assert_eq!(t.check(id(1, 1)), Dup::Answer("r2"));
    }

    #[test]
    fn memory_is_bounded_per_client_and_in_clients() {
        let mut t = Table::new(4, 2);
        for s in 1..=10 {
            t.record(id(1, s), s, true, &[]);
        }
        assert_eq!(t.check(id(1, 6)), Dup::New, "only the last 4 ids are kept");
        assert_eq!(t.check(id(1, 7)), Dup::Answer(7));
        t.record(id(2, 1), 1, true, &[]);
        assert_eq!(t.check(id(1, 10)), Dup::Answer(10), "client 1 seen last");
        t.record(id(3, 1), 1, true, &[]);
        assert_eq!(t.check(id(2, 1)), Dup::New, "client 2, least recently seen, forgotten");
        assert_eq!(t.check(id(3, 1)), Dup::Answer(1));
        assert_eq!(t.clients.len(), 2);
    }

    fn ino(n: u128) -> Id {
        Id(n)
    }

    #[test]
    fn a_heal_copy_carries_the_records_of_the_requests_that_changed_the_inode() {
        // The source: a rename (client 1, seq 1) changed two directories, a create
        // (client 2) one of them and a file.
        let mut src = Table::new(4, 2);
        src.record(id(1, 1), "renamed", false, &[ino(10), ino(11)]);
        src.record(id(2, 1), "created", true, &[ino(10), ino(20)]);
        assert_eq!(src.touching(ino(11)), vec![(id(1, 1), "renamed")]);
        assert_eq!(src.touching(ino(10)), vec![(id(1, 1), "renamed"), (id(2, 1), "created")]);
        assert_eq!(src.touching(ino(99)), vec![]);
        // The healed brick takes them as applied, not acknowledged: a retry is confirmed
        // with the replicas, never applied again nor answered unconfirmed.
        let mut healed = Table::new(4, 2);
        assert_eq!(healed.check(id(1, 1)), Dup::New, "without the records: applied again");
        healed.record(id(2, 1), "own", true, &[ino(10)]);
        for (r, res) in src.touching(ino(10)) {
            healed.adopt(r, res, &[ino(10)]);
        }
        assert_eq!(healed.check(id(1, 1)), Dup::Confirm("renamed"));
        assert_eq!(healed.check(id(2, 1)), Dup::Answer("own"), "its own record is kept");
        assert_eq!(healed.touching(ino(10)).len(), 2, "and passed on by its own copies");
        // The rename's record comes again with the copy of its other directory.
        healed.adopt(id(1, 1), "renamed", &[ino(11)]);
        assert_eq!(healed.touching(ino(11)), vec![(id(1, 1), "renamed")]);
        assert_eq!(healed.check(id(1, 1)), Dup::Confirm("renamed"));
    }

    #[test]
    fn the_inode_index_forgets_what_the_table_forgets() {
        let mut t = Table::new(2, 2);
        for s in 1..=3 {
            t.record(id(1, s), s, false, &[ino(s as u128)]);
        }
        assert_eq!(t.touching(ino(1)), vec![], "seq 1 fell out of client 1's window");
        assert_eq!(t.touching(ino(3)), vec![(id(1, 3), 3)]);
        // The same request recorded again with other inodes: indexed under those only.
        t.record(id(1, 3), 3, false, &[ino(4)]);
        assert_eq!(t.touching(ino(3)), vec![]);
        assert_eq!(t.touching(ino(4)), vec![(id(1, 3), 3)]);
        t.record(id(2, 1), 21, false, &[ino(4)]);
        t.record(id(3, 1), 31, false, &[ino(5)]);
        assert_eq!(t.touching(ino(4)), vec![(id(2, 1), 21)], "client 1 forgotten");
        let indexed: usize = t.by_inode.values().map(|s| s.len()).sum();
        assert_eq!(indexed, 2, "no entry left behind: {:?}", t.by_inode);
    }
}
