use bytes::{Bytes, BytesMut};
use cairn_proto::{Creds, Id, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;

/// Buffered, not yet sent, sequential data of one file.
struct Pending {
    creds: Creds,
    offset: u64,
    buf: BytesMut,
}

#[derive(Default)]
struct FileState {
    pending: Option<Pending>,
    /// First error of a write sent in the background; reported on the next write, flush,
    /// fsync or release, then cleared.
    error: Option<RemoteError>,
}

/// What to do with a write.
#[derive(Debug)]
pub enum Append {
    /// Taken into the buffer; nothing to send now.
    Buffered,
    /// Taken; the buffer filled up and this extent must be sent now (in the background).
    Send { creds: Creds, offset: u64, data: Bytes },
    /// Not taken: send the returned extent (if any) first and wait for everything in
    /// flight, then write this one through (it is not sequential, too large, or of another
    /// caller).
    Barrier { flushed: Option<(Creds, u64, Bytes)> },
}

/// Write-behind buffers, one per file, each at most `limit` bytes.
pub struct WriteBehind {
    limit: Mutex<usize>,
    files: Mutex<HashMap<Id, FileState>>,
}

impl WriteBehind {
    pub fn new(limit: usize) -> WriteBehind {
        WriteBehind { limit: Mutex::new(limit), files: Mutex::default() }
    }

    pub fn set_limit(&self, limit: usize) {
        *self.limit.lock() = limit;
    }

    pub fn limit(&self) -> usize {
        *self.limit.lock()
    }

    /// Offer a write. Sequential writes by the same caller accumulate until the limit.
    pub fn append(&self, id: Id, creds: &Creds, offset: u64, data: &[u8]) -> Append {
        let limit = *self.limit.lock();
        let mut files = self.files.lock();
        let f = files.entry(id).or_default();
        if data.len() >= limit {
            return Append::Barrier {
                flushed: f.pending.take().map(|p| (p.creds, p.offset, p.buf.freeze())),
            };
        }
        match &mut f.pending {
            Some(p) if p.creds == *creds && p.offset + p.buf.len() as u64 == offset => {
                p.buf.extend_from_slice(data);
                if p.buf.len() >= limit {
                    let p = f.pending.take().unwrap();
                    return Append::Send { creds: p.creds, offset: p.offset, data: p.buf.freeze() };
                }
                Append::Buffered
            }
            Some(_) => Append::Barrier {
                flushed: f.pending.take().map(|p| (p.creds, p.offset, p.buf.freeze())),
            },
            None => {
                let mut buf = BytesMut::with_capacity(limit.min(data.len().max(64 << 10)));
                buf.extend_from_slice(data);
                f.pending = Some(Pending { creds: creds.clone(), offset, buf });
                Append::Buffered
            }
        }
    }

    /// Take the buffered extent of a file (to send it now).
    pub fn take(&self, id: Id) -> Option<(Creds, u64, Bytes)> {
        let mut files = self.files.lock();
        files
            .get_mut(&id)
            .and_then(|f| f.pending.take())
            .map(|p| (p.creds, p.offset, p.buf.freeze()))
    }

    /// End of the buffered extent, if any (the size the file will have at least).
    pub fn buffered_end(&self, id: Id) -> Option<u64> {
        let files = self.files.lock();
        files.get(&id).and_then(|f| f.pending.as_ref()).map(|p| p.offset + p.buf.len() as u64)
    }

    /// Every file with something buffered.
    pub fn dirty(&self) -> Vec<Id> {
        self.files.lock().iter().filter(|(_, f)| f.pending.is_some()).map(|(id, _)| *id).collect()
    }

    pub fn set_error(&self, id: Id, e: RemoteError) {
        let mut files = self.files.lock();
        let f = files.entry(id).or_default();
        if f.error.is_none() {
            f.error = Some(e);
        }
    }

    pub fn take_error(&self, id: Id) -> Option<RemoteError> {
        let mut files = self.files.lock();
        let e = files.get_mut(&id).and_then(|f| f.error.take());
        if let Some(f) = files.get(&id) {
            if f.pending.is_none() && f.error.is_none() {
                files.remove(&id);
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::Errno;

    #[test]
    fn coalesces_sequential_and_bounds_memory() {
        let wb = WriteBehind::new(100);
        let c = Creds::root();
        let id = Id(3);
        for i in 0..9u64 {
            assert!(matches!(wb.append(id, &c, i * 10, &[i as u8; 10]), Append::Buffered));
        }
        assert_eq!(wb.buffered_end(id), Some(90));
        match wb.append(id, &c, 90, &[9; 10]) {
            Append::Send { offset, data, .. } => {
                assert_eq!(offset, 0);
                assert_eq!(data.len(), 100);
                assert_eq!(data[95], 9);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(wb.buffered_end(id), None);
    }

    #[test]
    fn non_sequential_or_other_caller_is_a_barrier() {
        let wb = WriteBehind::new(100);
        let id = Id(4);
        let root = Creds::root();
        let user = Creds { uid: 1000, gid: 1000, groups: vec![] };
        assert!(matches!(wb.append(id, &root, 0, b"abc"), Append::Buffered));
        match wb.append(id, &root, 10, b"x") {
            Append::Barrier { flushed: Some((_, 0, d)) } => assert_eq!(&d[..], b"abc"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(wb.append(id, &root, 0, b"abc"), Append::Buffered));
        assert!(matches!(wb.append(id, &user, 3, b"d"), Append::Barrier { flushed: Some(_) }));
        assert!(matches!(wb.append(id, &root, 0, &[0; 100]), Append::Barrier { flushed: None }));
    }

    #[test]
    fn errors_are_reported_once() {
        let wb = WriteBehind::new(100);
        wb.set_error(Id(1), RemoteError::new(Errno::ENOSPC, "full"));
        wb.set_error(Id(1), RemoteError::new(Errno::EIO, "later"));
        assert_eq!(wb.take_error(Id(1)).unwrap().errno, Errno::ENOSPC, "first error wins");
        assert!(wb.take_error(Id(1)).is_none());
    }
}
