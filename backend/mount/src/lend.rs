//! A FUSE WRITE's data handed to the runtime without a copy.
//!
//! fuser passes `write` a slice of the session thread's read buffer, valid only until the
//! handler returns: the thread then reads the next request into the same buffer. The
//! request runs on the runtime, so the data used to be copied out first (a 1 MiB
//! `memmove` per 1 MiB WRITE, ~15% of the mount's CPU for a sequential write). Instead
//! [`with_lent`] wraps the slice in a `Bytes` and keeps the session thread (and so the
//! buffer) waiting until every clone of it is gone: the WRITE has been answered by the
//! bricks, or has failed. The thread cannot read other requests meanwhile, so only some
//! of the session threads may lend at a time ([`Slots`]); the others copy.

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Writes smaller than this are copied: cheap to copy, and write-behind copies them into
/// its buffer anyway.
pub const LEND_MIN: usize = 64 << 10;
/// How long a session thread waits for a lending slot before it copies instead.
pub const SLOT_WAIT: Duration = Duration::from_millis(5);

/// The lent memory; dropping the last `Bytes` of it drops the sender, which wakes the
/// waiting session thread.
struct Lent {
    ptr: *const u8,
    len: usize,
    _back: mpsc::Sender<()>,
}

// SAFETY: `Lent` only reads memory that nobody writes or frees while any `Bytes` of it
// exists: `with_lent` does not return (nor unwind past its guard) before that.
unsafe impl Send for Lent {}
unsafe impl Sync for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: see the `Send` / `Sync` impls: the slice outlives every `Lent`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Waits, when dropped (also while unwinding), until every `Bytes` of the loan is gone.
struct Returned(mpsc::Receiver<()>);

impl Drop for Returned {
    fn drop(&mut self) {
        // Err once every sender (one per loan, inside its `Lent`) is dropped.
        let _ = self.0.recv();
    }
}

/// Run `f` with `data` as `Bytes` that share its memory, then wait until every clone of
/// them is dropped before returning. `f` typically spawns the work that owns them; if it
/// leaked them (`mem::forget`), this would wait forever rather than let them dangle.
pub fn with_lent<R>(data: &[u8], f: impl FnOnce(Bytes) -> R) -> R {
    let (tx, rx) = mpsc::channel();
    let back = Returned(rx);
    let bytes = Bytes::from_owner(Lent { ptr: data.as_ptr(), len: data.len(), _back: tx });
    let r = f(bytes);
    drop(back);
    r
}

/// How many session threads wait on the runtime at a time, at most: lending a WRITE's
/// data here, or running a LOOKUP / GETATTR to completion (`CairnFs::run_here`).
pub struct Slots {
    busy: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

/// One lending thread; frees its slot when dropped.
pub struct Slot<'a>(&'a Slots);

impl Slots {
    pub fn new(max: usize) -> Slots {
        Slots { busy: Mutex::new(0), freed: Condvar::new(), max }
    }

    /// A slot, waiting up to `wait` for one while `max` threads are lending: a thread
    /// that finds them all busy would otherwise copy every WRITE queued meanwhile (the
    /// kernel queues dozens during writeback), where waiting briefly leaves them queued
    /// in the kernel for the lenders. `None` after `wait`: copy, and read on.
    pub fn take(&self, wait: Duration) -> Option<Slot<'_>> {
        let deadline = Instant::now() + wait;
        let mut busy = self.busy.lock();
        while *busy >= self.max {
            let gave_up = self.max == 0 || self.freed.wait_until(&mut busy, deadline).timed_out();
            if gave_up && *busy >= self.max {
                return None;
            }
        }
        *busy += 1;
        Some(Slot(self))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock() -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_every_clone() {
        let buf = vec![7u8; 1 << 20];
        let (tx, rx) = mpsc::channel::<Bytes>();
        let t = std::thread::spawn(move || {
            let b = rx.recv().unwrap();
            let c = b.slice(10..20);
            drop(b);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(&c[..], &[7u8; 10]);
            std::time::Instant::now()
        });
        let n = with_lent(&buf, |b| {
            assert_eq!(b.as_ptr(), buf.as_ptr(), "no copy");
            let n = b.len();
            tx.send(b).unwrap();
            n
        });
        let returned = std::time::Instant::now();
        let dropped = t.join().unwrap();
        assert_eq!(n, 1 << 20);
        assert!(returned >= dropped, "with_lent returned while a clone was alive");
    }

    #[test]
    fn slots_cap_the_lenders() {
        let (now, w) = (Duration::ZERO, Duration::from_millis(20));
        let s = Slots::new(2);
        let a = s.take(now).unwrap();
        let b = s.take(now).unwrap();
        let t0 = Instant::now();
        assert!(s.take(w).is_none());
        assert!(t0.elapsed() >= w, "gave up before the wait");
        drop(a);
        let _c = s.take(now).unwrap();
        assert!(Slots::new(0).take(w).is_none());
        // A slot freed while waiting is taken.
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(10));
                drop(b);
            });
            assert!(s.take(Duration::from_secs(60)).is_some());
        });
    }
}
