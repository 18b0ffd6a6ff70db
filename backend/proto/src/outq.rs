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

use crate::frame::{Frame, PREFIX_LEN};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{Notify, Semaphore};

/// Most bytes queued on one connection and not yet taken by the socket. A larger frame
/// counts as this much (it is queued alone).
pub const QUEUE_LIMIT: usize = 4 << 20;
/// Most buffers one `writev` is given.
const MAX_IOV: usize = 64;

/// The write half is closed (shut or failed): nothing more is sent.
#[derive(Debug)]
pub struct Closed;

struct Out {
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
}

enum Drained {
    /// Everything written; nobody is writing now.
    Idle,
    /// The socket is full; the rest is back in the queue and `writing` is still set.
    Blocked,
    /// The connection failed or was shut.
    Done,
}

pub struct Writer {
    wr: OwnedWriteHalf,
    state: Mutex<State>,
    space: Semaphore,
    /// Set when the write half fails (shared with the connection's other tasks).
    closed: Arc<AtomicBool>,
    /// Holders of a [`Sender`]; the last one to go shuts the writer.
    senders: AtomicUsize,
    finished: Notify,
    handle: tokio::runtime::Handle,
    peer: String,
}

impl Writer {
    /// Must be called inside a tokio runtime (the flusher is spawned on it).
    pub fn new(wr: OwnedWriteHalf, closed: Arc<AtomicBool>, peer: String) -> Arc<Writer> {
        Arc::new(Writer {
            wr,
            state: Mutex::default(),
            space: Semaphore::new(QUEUE_LIMIT),
            closed,
            senders: AtomicUsize::new(0),
            finished: Notify::new(),
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
        let out =
            Out { prefix: f.encode_prefix(), header: f.header, data: f.data, done: 0, charge };
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
        if let Drained::Blocked = self.drain(batch) {
            self.handle.spawn(self.clone().flush());
        }
        Ok(())
    }

    /// Write `batch`, then whatever was queued meanwhile, until the queue is empty or the
    /// socket is full. The caller holds the `writing` turn.
    fn drain(&self, mut batch: VecDeque<Out>) -> Drained {
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
                        self.fail("socket accepted no bytes");
                        return Drained::Done;
                    }
                    Ok(mut written) => {
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
                        batch.append(&mut st.queue);
                        st.queue = batch;
                        return Drained::Blocked;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.fail(&e.to_string());
                        return Drained::Done;
                    }
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

    /// The flusher: holds the `writing` turn while the socket is full.
    async fn flush(self: Arc<Self>) {
        loop {
            if let Err(e) = self.wr.writable().await {
                self.fail(&e.to_string());
                return;
            }
            let batch = std::mem::take(&mut self.state.lock().queue);
            match self.drain(batch) {
                Drained::Blocked => continue,
                Drained::Idle | Drained::Done => return,
            }
        }
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

    /// Senders waiting for room fail, and new ones too; frames queued already (and
    /// [`Writer::send_now`]) still go out.
    pub fn refuse(&self) {
        self.space.close();
    }

    fn fail(&self, why: &str) {
        tracing::debug!(peer = %self.peer, error = %why, "connection write failed");
        self.closed.store(true, Ordering::Release);
        self.space.close();
        {
            let mut st = self.state.lock();
            st.shut = true;
            st.queue.clear();
        }
        // Both directions: the reader sees the end too and fails the requests in flight.
        self.finish(libc::SHUT_RDWR);
    }

    fn finish(&self, how: libc::c_int) {
        {
            let mut st = self.state.lock();
            if st.finished && how == libc::SHUT_WR {
                return;
            }
            st.finished = true;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: the fd is the live socket this writer owns half of.
        unsafe { libc::shutdown(self.wr.as_ref().as_raw_fd(), how) };
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
