//! The write side of an RPC connection: a queue of frames that the sender itself drains.
//!
//! A caller that finds nobody writing the socket writes its frame (and whatever others
//! queued meanwhile) itself, with non-blocking vectored writes of prefix, header and bulk
//! data (no copy), so a request or a reply costs no wake-up of a second task. While
//! someone writes, others only append to the queue, which the writer drains before it
//! lets go: frames never interleave and go out in the order they were queued. When the
//! socket's buffer is full the rest of the queue is handed to a flusher task that waits
//! for the socket to drain. A frame is written by plain synchronous code once queued, so
//! dropping the caller's future can never leave half a frame on the socket.
//!
//! Backpressure: queued bytes are bounded by [`QUEUE_LIMIT`] (a semaphore of bytes,
//! fair, so callers get in in the order they arrived); a sender waits for room before
//! its frame is queued. Pushes and the watchdog's pings are small and sent from sync
//! code, so they skip the wait.
//!
//! A peer that is alive but never reads (a zero TCP window) is given up on: when bytes
//! are queued and none could be written for [`SEND_STALL`], the flusher drops the queue
//! and shuts the socket down both ways, so the connection's frames (and the buffers they
//! borrow), its flusher and its waiting senders do not stay forever. The client's
//! watchdog drops the queue earlier, when it declares the peer dead ([`Writer::release`]).

use crate::frame::{Frame, PREFIX_LEN};
use crate::stream::WriteHalf;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// While bytes are queued and the socket takes none of them for this long, the peer has
/// stopped reading: the connection is shut down and its queued frames dropped. Longer
/// than the client's watchdog gives a silent peer (`rpc::PEER_DEAD_AFTER`), so a peer that
/// is merely slow is not cut off. Tests shorten it with tokio's paused clock.
pub const SEND_STALL: Duration = Duration::from_secs(30);
/// Most bytes queued on one connection and not yet taken by the socket. A larger frame
/// counts as this much (it is queued alone).
pub const QUEUE_LIMIT: usize = 4 << 20;
/// Most buffers one `writev` is given.
const MAX_IOV: usize = 64;

/// The write half is closed (shut or failed): nothing more is sent.
#[derive(Debug)]
pub struct Closed;

/// Called with the ids of frames dropped before they were written whole, and why (the
/// client fails their calls: the peer never got them).
pub type OnUnsent = Box<dyn Fn(&[u64], &str) + Send + Sync>;

struct Out {
    id: u64,
    prefix: [u8; PREFIX_LEN],
    header: Bytes,
    data: Bytes,
    /// Bytes of this frame already written.
    done: usize,
    /// Permits of `space` this frame holds (released once it is written).
    charge: u32,
}

impl Out {
    fn len(&self) -> usize {
        PREFIX_LEN + self.header.len() + self.data.len()
    }

    /// Append the unwritten parts of this frame to `iov`; false if it did not fit.
    fn slices<'a>(&'a self, iov: &mut [IoSlice<'a>; MAX_IOV], n: &mut usize) -> bool {
        let mut skip = self.done;
        for part in [&self.prefix[..], &self.header[..], &self.data[..]] {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            if *n == MAX_IOV {
                return false;
            }
            iov[*n] = IoSlice::new(&part[skip..]);
            *n += 1;
            skip = 0;
        }
        true
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Out>,
    /// Someone (a sender or the flusher) is writing; the queue is theirs to drain.
    writing: bool,
    /// No new frames; the write half is shut once the queue is drained.
    shut: bool,
    /// The write half is shut (or failed): the writer is finished.
    finished: bool,
    /// The queued frames were dropped (the peer is given up on): whoever holds the
    /// `writing` turn drops what it holds too, and finishes.
    abandoned: bool,
}

enum Drained {
    /// Everything written; nobody is writing now.
    Idle,
    /// The socket is full; the rest is back in the queue and `writing` is still set.
    /// `wrote`: some bytes were written first.
    Blocked { wrote: bool },
    /// The connection failed or was shut.
    Done,
}

pub struct Writer {
    wr: WriteHalf,
    state: Mutex<State>,
    space: Semaphore,
    /// Set when the write half fails (shared with the connection's other tasks).
    closed: Arc<AtomicBool>,
    /// Holders of a [`Sender`]; the last one to go shuts the writer.
    senders: AtomicUsize,
    finished: Notify,
    /// Wakes the flusher when the queue is released under it.
    wake: Notify,
    /// Why the writer was given up on (stall, failure or release), for callers' errors.
    reason: Mutex<Option<String>>,
    on_unsent: Option<OnUnsent>,
    handle: tokio::runtime::Handle,
    peer: String,
}

impl Writer {
    /// Must be called inside a tokio runtime (the flusher is spawned on it).
    pub fn new(
        wr: WriteHalf,
        closed: Arc<AtomicBool>,
        peer: String,
        on_unsent: Option<OnUnsent>,
    ) -> Arc<Writer> {
        Arc::new(Writer {
            wr,
            state: Mutex::default(),
            space: Semaphore::new(QUEUE_LIMIT),
            closed,
            senders: AtomicUsize::new(0),
            finished: Notify::new(),
            wake: Notify::new(),
            reason: Mutex::new(None),
            on_unsent,
            handle: tokio::runtime::Handle::current(),
            peer,
        })
    }

    /// Queue `f`, waiting for room first, and write it now if nobody else is writing.
    /// Cancel-safe: the only wait is before the frame is queued.
    pub async fn send(self: &Arc<Self>, f: Frame) -> Result<(), Closed> {
        let charge = self.reserve(&f).await?;
        self.queue(f, charge)
    }

    /// Wait for room for `f`; returns the permits to hand to [`Writer::queue`].
    pub async fn reserve(&self, f: &Frame) -> Result<u32, Closed> {
        let len = PREFIX_LEN + f.header.len() + f.data.len();
        let charge = len.min(QUEUE_LIMIT) as u32;
        self.space.acquire_many(charge).await.map_err(|_| Closed)?.forget();
        Ok(charge)
    }

    /// Queue `f` without waiting for room (small frames sent from sync code).
    pub fn send_now(self: &Arc<Self>, f: Frame) -> Result<(), Closed> {
        self.queue(f, 0)
    }

    /// Queue a frame that holds `charge` permits and write the queue if nobody is.
    pub fn queue(self: &Arc<Self>, f: Frame, charge: u32) -> Result<(), Closed> {
        let out = Out {
            id: f.id,
            prefix: f.encode_prefix(),
            header: f.header,
            data: f.data,
            done: 0,
            charge,
        };
        let batch = {
            let mut st = self.state.lock();
            if st.shut {
                drop(st);
                self.space.add_permits(charge as usize);
                return Err(Closed);
            }
            st.queue.push_back(out);
            if st.writing {
                return Ok(());
            }
            st.writing = true;
            std::mem::take(&mut st.queue)
        };
        if let Drained::Blocked { .. } = self.drain(batch) {
            self.handle.spawn(self.clone().flush());
        }
        Ok(())
    }

    /// Write `batch`, then whatever was queued meanwhile, until the queue is empty or the
    /// socket is full. The caller holds the `writing` turn.
    fn drain(&self, mut batch: VecDeque<Out>) -> Drained {
        let mut wrote = false;
        loop {
            while !batch.is_empty() {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                for o in &batch {
                    if !o.slices(&mut iov, &mut n) {
                        break;
                    }
                }
                match self.wr.try_write_vectored(&iov[..n]) {
                    Ok(0) => {
                        self.fail("socket accepted no bytes", batch);
                        return Drained::Done;
                    }
                    Ok(mut written) => {
                        wrote = true;
                        let mut release = 0usize;
                        while let Some(o) = batch.front_mut() {
                            let left = o.len() - o.done;
                            if written < left {
                                o.done += written;
                                break;
                            }
                            written -= left;
                            release += o.charge as usize;
                            batch.pop_front();
                        }
                        if release > 0 {
                            self.space.add_permits(release);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        let mut st = self.state.lock();
                        if st.abandoned {
                            st.writing = false;
                            drop(st);
                            self.unsent(batch);
                            self.finish(libc::SHUT_WR);
                            return Drained::Done;
                        }
                        batch.append(&mut st.queue);
                        st.queue = batch;
                        return Drained::Blocked { wrote };
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.fail(&e.to_string(), batch);
                        return Drained::Done;
                    }
                }
            }
            // TLS: records rustls holds go out before the turn is given up.
            match self.wr.try_flush() {
                Ok(true) => {}
                Ok(false) => {
                    let mut st = self.state.lock();
                    if st.abandoned {
                        st.writing = false;
                        drop(st);
                        self.finish(libc::SHUT_WR);
                        return Drained::Done;
                    }
                    return Drained::Blocked { wrote };
                }
                Err(e) => {
                    self.fail(&e.to_string(), VecDeque::new());
                    return Drained::Done;
                }
            }
            let mut st = self.state.lock();
            if st.queue.is_empty() {
                st.writing = false;
                if st.shut {
                    drop(st);
                    self.finish(libc::SHUT_WR);
                    return Drained::Done;
                }
                return Drained::Idle;
            }
            batch = std::mem::take(&mut st.queue);
        }
    }

    /// The flusher: holds the `writing` turn while the socket is full, and gives the peer
    /// up when the socket takes nothing for [`SEND_STALL`].
    async fn flush(self: Arc<Self>) {
        let mut progress = Instant::now();
        loop {
            tokio::select! {
                r = self.wr.writable() => {
                    if let Err(e) = r {
                        self.fail(&e.to_string(), VecDeque::new());
                        return;
                    }
                }
                () = tokio::time::sleep_until(progress + SEND_STALL) => {
                    self.stalled(progress.elapsed());
                    return;
                }
                () = self.wake.notified() => {}
            }
            let batch = {
                let mut st = self.state.lock();
                if st.abandoned {
                    // Released: the queue is gone already.
                    st.writing = false;
                    drop(st);
                    self.finish(libc::SHUT_WR);
                    return;
                }
                std::mem::take(&mut st.queue)
            };
            match self.drain(batch) {
                Drained::Blocked { wrote: true } => progress = Instant::now(),
                Drained::Blocked { wrote: false } => {}
                Drained::Idle | Drained::Done => return,
            }
        }
    }

    /// The peer took no bytes for `idle`: log it once, and close the connection.
    fn stalled(&self, idle: Duration) {
        let stuck: usize = self.state.lock().queue.iter().map(|o| o.len() - o.done).sum();
        tracing::warn!(
            peer = %self.peer,
            stuck_bytes = stuck,
            idle_ms = idle.as_millis() as u64,
            "peer stopped reading; closing connection"
        );
        self.close(
            format!(
                "peer {} stopped reading: {stuck} bytes queued and none sent for {} ms",
                self.peer,
                idle.as_millis()
            ),
            VecDeque::new(),
        );
    }

    /// Take no new frames; shut the write half once the queued ones are written. Senders
    /// waiting for room fail.
    pub fn shut(&self) {
        self.space.close();
        let now = {
            let mut st = self.state.lock();
            st.shut = true;
            !st.writing && !st.finished
        };
        if now {
            self.finish(libc::SHUT_WR);
        }
    }

    /// Give the peer up (the client's watchdog): drop the frames not yet written whole
    /// (reported to `on_unsent`), fail the senders waiting for room and new ones, and
    /// shut the write half. The read half stays open for the replies to frames already
    /// sent. Returns the bytes dropped.
    pub fn release(&self, why: &str) -> usize {
        self.space.close();
        let (dropped, bytes, now) = {
            let mut st = self.state.lock();
            if st.finished {
                return 0;
            }
            let dropped = std::mem::take(&mut st.queue);
            let bytes = dropped.iter().map(|o| o.len() - o.done).sum();
            // Before the holder of the `writing` turn can see `abandoned` and report.
            self.set_reason(format!("{why}; {bytes} queued bytes dropped"));
            st.shut = true;
            st.abandoned = true;
            (dropped, bytes, !st.writing)
        };
        self.unsent(dropped);
        if now {
            self.finish(libc::SHUT_WR);
        } else {
            // The holder of the `writing` turn drops what it holds and finishes.
            self.wake.notify_one();
        }
        bytes
    }

    /// Why the writer was given up on, if it was (stalled, failed or released).
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }

    fn set_reason(&self, why: String) {
        self.reason.lock().get_or_insert(why);
    }

    /// Called by the holder of the `writing` turn, with the frames it holds.
    fn fail(&self, why: &str, held: VecDeque<Out>) {
        tracing::debug!(peer = %self.peer, error = %why, "connection write failed");
        self.close(format!("write to {} failed: {why}", self.peer), held);
    }

    /// Drop every queued frame and shut the socket down both ways. Called by the holder
    /// of the `writing` turn, with the frames it holds.
    fn close(&self, why: String, held: VecDeque<Out>) {
        self.set_reason(why);
        self.closed.store(true, Ordering::Release);
        self.space.close();
        let mut dropped = held;
        {
            let mut st = self.state.lock();
            st.shut = true;
            st.abandoned = true;
            dropped.append(&mut st.queue);
        }
        self.unsent(dropped);
        // Both directions: the reader sees the end too and fails the requests in flight.
        self.finish(libc::SHUT_RDWR);
    }

    /// Drop frames that were not written whole (their buffers go back to their owners
    /// first), then tell `on_unsent` which.
    fn unsent(&self, frames: VecDeque<Out>) {
        if frames.is_empty() {
            return;
        }
        let ids: Vec<u64> = frames.iter().map(|o| o.id).collect();
        drop(frames);
        if let Some(f) = &self.on_unsent {
            let why = self.reason().unwrap_or_default();
            f(&ids, &why);
        }
    }

    fn finish(&self, how: libc::c_int) {
        {
            let mut st = self.state.lock();
            if st.finished && how == libc::SHUT_WR {
                return;
            }
            st.finished = true;
        }
        if how == libc::SHUT_WR {
            self.wr.close_notify();
        }
        // SAFETY: the fd is the live socket this writer owns half of.
        unsafe { libc::shutdown(self.wr.raw_fd(), how) };
        self.finished.notify_waiters();
    }

    /// Wait until the write half is shut (every queued frame written) or failed.
    pub async fn finished(&self) {
        loop {
            let n = self.finished.notified();
            if self.state.lock().finished {
                return;
            }
            n.await;
        }
    }

    /// Bytes queued and not yet taken by the socket (tests).
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        QUEUE_LIMIT - self.space.available_permits()
    }

    /// Whether the queue is full, so a new sender would wait.
    pub fn is_full(&self) -> bool {
        self.space.available_permits() == 0
    }

    /// Wait until there is room in the queue (or the writer is closed).
    pub async fn room(&self) -> Result<(), Closed> {
        self.space.acquire().await.map(drop).map_err(|_| Closed)
    }
}

/// A counted handle on a [`Writer`]: the write half is shut when the last one is dropped
/// (the server side: the session and each request in flight hold one).
pub struct Sender(Arc<Writer>);

impl Sender {
    pub fn new(w: Arc<Writer>) -> Sender {
        w.senders.fetch_add(1, Ordering::AcqRel);
        Sender(w)
    }
}

impl Clone for Sender {
    fn clone(&self) -> Sender {
        Sender::new(self.0.clone())
    }
}

impl std::ops::Deref for Sender {
    type Target = Arc<Writer>;
    fn deref(&self) -> &Arc<Writer> {
        &self.0
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.shut();
        }
    }
}
