//! The pending records of a brick: for each peer, the ids that changed while it was not
//! receiving writes (one empty file per id under `.cairn/pending/<peer>/`, fsynced), each
//! with the generation of its last recording.
//!
//! Generations make a heal's clear conditional: the healer lists the records (with their
//! generations) before it copies, and `PendingClear` removes a record only if it was not
//! recorded again since — a write that landed after the copy re-records the id, and its
//! record must survive so the next pass copies it. Generations live in memory only: the
//! counter starts from the clock when the brick opens, so a generation read before a
//! restart never matches one handed out after it (the record then stays, and is copied
//! once more).

use crate::error::{Ctx, R};
use crate::sys::{self, cstr};
use cairn_proto::Id;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `.cairn/pending` of one brick and its records in memory.
pub(crate) struct PendingLog {
    dir: OwnedFd,
    state: Mutex<State>,
}

struct State {
    last: u64,
    by_peer: HashMap<u32, HashMap<Id, u64>>,
}

impl State {
    fn next(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

impl PendingLog {
    /// The records under `dir` (`.cairn/pending`, open), each given a fresh generation.
    pub(crate) fn open(dir: OwnedFd) -> io::Result<PendingLog> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut p = State { last: now, by_peer: HashMap::new() };
        for peer in sys::read_dir(dir.as_raw_fd())? {
            let Some(n) = std::str::from_utf8(&peer.name).ok().and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let fd = sys::open_dir_at(dir.as_raw_fd(), &cstr(&peer.name)?)?;
            for e in sys::read_dir(fd.as_raw_fd())? {
                if let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) {
                    let g = p.next();
                    p.by_peer.entry(n).or_default().insert(id, g);
                }
            }
        }
        Ok(PendingLog { dir, state: Mutex::new(p) })
    }

    /// Record, durably, that `id` changed while brick `peer` was not receiving writes.
    /// Recording an id already pending gives its record a new generation.
    pub(crate) fn add(&self, peer: u32, id: Id) -> io::Result<()> {
        let mut p = self.state.lock();
        let g = p.next();
        if let Some(cur) = p.by_peer.get_mut(&peer).and_then(|s| s.get_mut(&id)) {
            *cur = g;
            return Ok(());
        }
        let pd = cstr(peer.to_string().as_bytes())?;
        match sys::mkdirat(self.dir.as_raw_fd(), &pd, 0o700) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
            _ => {}
        }
        let dfd = sys::open_dir_at(self.dir.as_raw_fd(), &pd)?;
        sys::openat(
            dfd.as_raw_fd(),
            &cstr(id.to_hex().as_bytes())?,
            libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW,
            0o600,
        )?;
        sys::fsync(dfd.as_raw_fd(), false)?;
        p.by_peer.entry(peer).or_default().insert(id, g);
        Ok(())
    }

    /// Number of ids pending for each peer.
    pub(crate) fn counts(&self) -> Vec<(u32, u64)> {
        let p = self.state.lock();
        let mut v: Vec<(u32, u64)> = p
            .by_peer
            .iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(k, s)| (*k, s.len() as u64))
            .collect();
        v.sort();
        v
    }

    /// Peers `id` is pending for.
    pub(crate) fn peers(&self, id: Id) -> Vec<u32> {
        let p = self.state.lock();
        let mut v: Vec<u32> =
            p.by_peer.iter().filter(|(_, s)| s.contains_key(&id)).map(|(k, _)| *k).collect();
        v.sort();
        v
    }

    /// The ids pending for `peer`, sorted, each with its record's generation.
    pub(crate) fn list(&self, peer: u32) -> Vec<(Id, u64)> {
        let p = self.state.lock();
        let mut v: Vec<(Id, u64)> = p
            .by_peer
            .get(&peer)
            .map(|s| s.iter().map(|(id, g)| (*id, *g)).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Forget the records of `peer` for these ids, each only if its generation is still
    /// the one given (read by `list` before the copy): a record given a new generation
    /// since stays. Returns the ids whose records stayed.
    pub(crate) fn clear(&self, peer: u32, ids: &[(Id, u64)]) -> R<Vec<Id>> {
        let mut p = self.state.lock();
        let pd = cstr(peer.to_string().as_bytes()).ctx(|| "peer")?;
        let dfd = match sys::open_dir_at(self.dir.as_raw_fd(), &pd) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(vec![]),
            Err(e) => return Err(e).ctx(|| format!("pending list of peer {peer}")),
        };
        let mut kept = Vec::new();
        for (id, gen) in ids {
            let cur = p.by_peer.get(&peer).and_then(|s| s.get(id)).copied();
            if cur.is_some_and(|g| g != *gen) {
                kept.push(*id);
                continue;
            }
            match sys::unlinkat(dfd.as_raw_fd(), &cstr(id.to_hex().as_bytes()).ctx(|| "id")?, 0) {
                Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                    return Err(e).ctx(|| format!("clearing pending {id} of peer {peer}"))
                }
                _ => {}
            }
            if let Some(s) = p.by_peer.get_mut(&peer) {
                s.remove(id);
            }
        }
        Ok(kept)
    }
}
