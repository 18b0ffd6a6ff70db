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
//! Memory is bounded: the last `per_client` ids of each client, and `max_clients`
//! clients (the least recently seen is forgotten first). The table is not persisted: a
//! brick that restarts forgets it, and heals what it missed from a head that remembers.

use cairn_proto::msg::ReqId;
use std::collections::{BTreeMap, HashMap};

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
}

struct Window<R> {
    done: BTreeMap<u64, Done<R>>,
    used: u64,
}

/// The request ids one brick applied, per client, with their results.
pub struct Table<R> {
    clients: HashMap<u64, Window<R>>,
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

    /// Remember that this brick applied request `id` with `result`; `acked` if it is the
    /// head and acknowledged it (an id once acknowledged stays so).
    pub fn record(&mut self, id: ReqId, result: R, acked: bool) {
        if self.touch(id.client).is_none() {
            if self.clients.len() >= self.max_clients {
                if let Some(oldest) =
                    self.clients.iter().min_by_key(|(_, w)| w.used).map(|(c, _)| *c)
                {
                    self.clients.remove(&oldest);
                }
            }
            self.clients.insert(id.client, Window { done: BTreeMap::new(), used: self.tick });
        }
        let w = self.clients.get_mut(&id.client).expect("just inserted");
        let acked = acked || w.done.get(&id.seq).map(|d| d.acked).unwrap_or(false);
        w.done.insert(id.seq, Done { result, acked });
        while w.done.len() > self.per_client {
            w.done.pop_first();
        }
    }

    /// Mark request `id` acknowledged by this brick as head, keeping its result.
    pub fn ack(&mut self, id: ReqId) {
        if let Some(d) = self.touch(id.client).and_then(|w| w.done.get_mut(&id.seq)) {
            d.acked = true;
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
                    self.table.record(id, v, false);
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
        t.record(id(1, 1), "r", false);
        assert_eq!(t.check(id(1, 1)), Dup::Confirm("r"));
        assert_eq!(t.applied(id(1, 1)), Some("r"));
        assert_eq!(t.applied(id(1, 2)), None);
        t.ack(id(1, 1));
        assert_eq!(t.check(id(1, 1)), Dup::Answer("r"));
        // A replica applying the same id again (a new head re-sent it) keeps it acked.
        t.record(id(1, 1), "r2", false);
        assert_eq!(t.check(id(1, 1)), Dup::Answer("r2"));
    }

    #[test]
    fn memory_is_bounded_per_client_and_in_clients() {
        let mut t = Table::new(4, 2);
        for s in 1..=10 {
            t.record(id(1, s), s, true);
        }
        assert_eq!(t.check(id(1, 6)), Dup::New, "only the last 4 ids are kept");
        assert_eq!(t.check(id(1, 7)), Dup::Answer(7));
        t.record(id(2, 1), 1, true);
        assert_eq!(t.check(id(1, 10)), Dup::Answer(10), "client 1 seen last");
        t.record(id(3, 1), 1, true);
        assert_eq!(t.check(id(2, 1)), Dup::New, "client 2, least recently seen, forgotten");
        assert_eq!(t.check(id(3, 1)), Dup::Answer(1));
        assert_eq!(t.clients.len(), 2);
    }
}
