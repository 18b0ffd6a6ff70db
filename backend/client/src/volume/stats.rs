//! Round-trip counters, per operation kind (benchmarks and `profile`).

use super::{Inner, Volume};
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests sent to bricks by every volume of this process (libcairn's round-trip trace,
/// `CAIRN_TRACE_RT`).
static PROCESS_ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

/// Requests sent to bricks so far by every volume of this process.
pub fn process_round_trips() -> u64 {
    PROCESS_ROUND_TRIPS.load(Ordering::Relaxed)
}

/// Counters of backend round trips, per operation kind (for benchmarks and `profile`).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Total requests sent to bricks.
    pub round_trips: u64,
    pub by_op: Vec<(&'static str, u64)>,
    /// Reads answered from quick-read content (no round trip).
    pub quick_reads: u64,
    /// Lookups answered "no such entry" from a complete directory (no round trip).
    pub negative_hits: u64,
}

impl Stats {
    /// Round trips of operation kind `op` ("write", "fsync", ...): 0 if none was sent.
    pub fn of(&self, op: &str) -> u64 {
        self.by_op.iter().find(|(k, _)| *k == op).map(|(_, v)| *v).unwrap_or(0)
    }
}

impl Inner {
    pub(super) fn count(&self, op: &'static str) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        PROCESS_ROUND_TRIPS.fetch_add(1, Ordering::Relaxed);
        *self.by_op.lock().entry(op).or_default() += 1;
    }
}

impl Volume {
    pub fn stats(&self) -> Stats {
        let mut by_op: Vec<(&'static str, u64)> =
            self.inner.by_op.lock().iter().map(|(k, v)| (*k, *v)).collect();
        by_op.sort();
        Stats {
            round_trips: self.inner.round_trips.load(Ordering::Relaxed),
            by_op,
            quick_reads: self.inner.quick_reads.load(Ordering::Relaxed),
            negative_hits: self.inner.negative_hits.load(Ordering::Relaxed),
        }
    }
}
