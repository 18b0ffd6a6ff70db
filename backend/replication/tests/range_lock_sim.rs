//! Deterministic simulation of a chain head serving one file with range locks
//! (`cairn_replication::range_lock`), the way `cairnd`'s `chain::mutate` does: a mutation
//! takes its lock, is applied at the head and forwarded to every replica, and the lock is
//! released once every replica answered. The network delivers forwards in any order (a
//! seeded random schedule interleaves arrivals, deliveries and answers), so only the locks
//! keep conflicting writes in one order.
//!
//! Checked: at the end every replica holds exactly the head's bytes and size; and every
//! read granted at the head (shared lock from its offset to the end of any file) sees,
//! from its offset on, what every replica holds (no change its replicas do not have yet).
//! A run with a lock that lets writes overlap shows that the check can fail.

use cairn_replication::range_lock::{Mode, Range, Table, Ticket};
use std::collections::BTreeMap;

mod common;
use common::Rng;

/// Bytes of the model file are the version of the write that left them (0: zeros).
type File = Vec<u32>;

#[derive(Clone, Copy, Debug)]
enum Op {
    Write { offset: u64, len: u64, version: u32 },
    Truncate { size: u64 },
    Read { offset: u64 },
}

fn apply(f: &mut File, op: Op) {
    match op {
        Op::Write { offset, len, version } => {
            let end = (offset + len) as usize;
            if f.len() < end {
                f.resize(end, 0);
            }
            f[offset as usize..end].fill(version);
        }
        Op::Truncate { size } => f.resize(size as usize, 0),
        Op::Read { .. } => {}
    }
}

const BLOCK: u64 = 64;
const SPAN: u64 = 1024;
const REPLICAS: usize = 2;

/// The lock an op takes; `sound == false` locks writes on nothing (shared, empty range).
fn lock_of(op: Op, sound: bool) -> (Range, Mode) {
    match op {
        Op::Write { offset, len, .. } if sound => {
            (Range::blocks(offset, len, BLOCK), Mode::Exclusive)
        }
        Op::Write { .. } => (Range::new(0, 0), Mode::Shared),
        Op::Truncate { .. } => (Range::WHOLE, Mode::Exclusive),
        Op::Read { offset } => (Range::from(offset), Mode::Shared),
    }
}

/// Run one schedule; `Err` describes the first broken promise, `Ok` gives the most
/// mutations that were in flight down the chain at once.
fn run(seed: u64, sound: bool) -> Result<usize, String> {
    let mut rng = Rng(seed | 1);
    let mut locks: Table<u8, usize> = Table::default();
    let mut head: File = vec![];
    let mut replicas: Vec<File> = vec![vec![]; REPLICAS];
    let mut ops: Vec<(Op, Ticket)> = vec![];
    // Forwards not delivered yet: (replica, op index); answers not processed: op -> count.
    let mut wire: Vec<(usize, usize)> = vec![];
    let mut answers: BTreeMap<usize, usize> = BTreeMap::new();
    let mut version = 0u32;
    let mut arrivals = 400;
    let mut most = 0;

    // A granted op: applied at the head and forwarded (a read is served and released).
    fn start(
        i: usize,
        ops: &[(Op, Ticket)],
        head: &mut File,
        replicas: &[File],
        wire: &mut Vec<(usize, usize)>,
        done: &mut Vec<usize>,
    ) -> Result<(), String> {
        let op = ops[i].0;
        if let Op::Read { offset } = op {
            let o = offset as usize;
            for (r, rep) in replicas.iter().enumerate() {
                let view = |f: &File| (f.len().max(o), f.get(o..).unwrap_or(&[]).to_vec());
                if view(head) != view(rep) {
                    return Err(format!("read #{i} at {offset} sees a change replica {r} lacks"));
                }
            }
            done.push(i);
            return Ok(());
        }
        apply(head, op);
        wire.extend((0..REPLICAS).map(|r| (r, i)));
        Ok(())
    }

    loop {
        let mut done = vec![];
        let choice = rng.below(10);
        if arrivals > 0 && (choice < 4 || wire.is_empty() && answers.is_empty()) {
            arrivals -= 1;
            let op = match rng.below(20) {
                0 => Op::Truncate { size: rng.below(SPAN) },
                1..=4 => Op::Read { offset: rng.below(SPAN) },
                _ => {
                    version += 1;
                    let offset = rng.below(SPAN);
                    Op::Write { offset, len: 1 + rng.below(3 * BLOCK / 2), version }
                }
            };
            let i = ops.len();
            let (range, mode) = lock_of(op, sound);
            let (t, granted) = locks.acquire(0, range, mode, i);
            ops.push((op, t));
            if granted {
                start(i, &ops, &mut head, &replicas, &mut wire, &mut done)?;
            }
        } else if !wire.is_empty() && (choice < 8 || answers.is_empty()) {
            // Any forward in flight may arrive next: the network reorders.
            let (r, i) = wire.swap_remove(rng.below(wire.len() as u64) as usize);
            apply(&mut replicas[r], ops[i].0);
            *answers.entry(i).or_default() += 1;
        } else if let Some(&i) = answers.keys().nth(rng.below(answers.len().max(1) as u64) as usize)
        {
            // The head takes in an answer; with all of them in, the op is done.
            if answers[&i] == REPLICAS && !wire.iter().any(|&(_, j)| j == i) {
                answers.remove(&i);
                done.push(i);
            }
        } else if arrivals == 0 {
            break;
        }
        let mut flying: Vec<usize> =
            wire.iter().map(|&(_, i)| i).chain(answers.keys().copied()).collect();
        flying.sort_unstable();
        flying.dedup();
        most = most.max(flying.len());
        while let Some(i) = done.pop() {
            for j in locks.release(&0, ops[i].1) {
                start(j, &ops, &mut head, &replicas, &mut wire, &mut done)?;
            }
        }
    }
    if !locks.is_empty() {
        return Err("locks left held at the end".into());
    }
    for (r, rep) in replicas.iter().enumerate() {
        if *rep != head {
            let at = rep.iter().zip(&head).position(|(a, b)| a != b);
            return Err(format!(
                "replica {r} differs from the head (sizes {} / {}, first differing byte {at:?})",
                rep.len(),
                head.len()
            ));
        }
    }
    Ok(most)
}

#[test]
fn replicas_end_identical_and_reads_see_only_replicated_changes() {
    let mut most = 0;
    for seed in 1..=200u64 {
        match run(seed, true) {
            Ok(m) => most = most.max(m),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(most >= 4, "disjoint writes were not in flight together (at most {most})");
}

#[test]
fn without_write_locks_the_check_catches_diverging_replicas() {
    let failures = (1..=50u64).filter(|&s| run(s, false).is_err()).count();
    assert!(failures > 25, "only {failures} of 50 unsound runs caught");
}
