//! Page-aligned receive buffers for large data segments.
//!
//! A WRITE's payload is read from the socket into a buffer aligned to [`ALIGN`] bytes, so
//! a brick can hand it to an `O_DIRECT` `pwrite` as it is (the kernel needs the memory,
//! the offset and the length aligned to the device's logical block) instead of copying it
//! into the page cache. Buffers of the common size (1 MiB: the FUSE mount's, the client
//! library's and the gateways' large requests) are kept in a small pool when dropped, so
//! the next segment lands in memory that is already mapped (no page faults while the
//! socket copies into it).

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Alignment of large data segments (the page size; a multiple of every logical block
/// size a brick's disk has).
pub const ALIGN: usize = 4096;
/// Data segments at least this large are read into aligned buffers.
pub const MIN_ALIGNED: usize = 64 << 10;
/// Capacity of pooled buffers.
const POOL_CAP: usize = 1 << 20;
/// Pooled buffers kept at most (per process).
const POOL_MAX: usize = 32;

static POOL: parking_lot::Mutex<Vec<Raw>> = parking_lot::Mutex::new(Vec::new());

/// An allocation of `cap` bytes aligned to [`ALIGN`].
struct Raw(NonNull<u8>, usize);

// SAFETY: `Raw` owns its allocation exclusively; nothing else points into it.
unsafe impl Send for Raw {}

impl Raw {
    fn layout(cap: usize) -> Layout {
        Layout::from_size_align(cap, ALIGN).expect("aligned buffer layout")
    }

    fn new(cap: usize) -> Raw {
        if cap == POOL_CAP {
            if let Some(r) = POOL.lock().pop() {
                return r;
            }
        }
        let layout = Self::layout(cap.max(1));
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        match NonNull::new(p) {
            Some(p) => Raw(p, cap.max(1)),
            None => std::alloc::handle_alloc_error(layout),
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if self.1 == POOL_CAP {
            let mut pool = POOL.lock();
            if pool.len() < POOL_MAX {
                pool.push(Raw(self.0, self.1));
                return;
            }
        }
        // SAFETY: allocated in `Raw::new` with this layout, and not pooled.
        unsafe { std::alloc::dealloc(self.0.as_ptr(), Self::layout(self.1)) }
    }
}

/// A buffer of up to `cap` bytes aligned to [`ALIGN`]; filled with [`BufMut`] and turned
/// into [`Bytes`] without a copy.
pub struct AlignedBuf {
    raw: Raw,
    len: usize,
}

impl AlignedBuf {
    pub fn with_capacity(cap: usize) -> AlignedBuf {
        let cap = if cap <= POOL_CAP && cap > POOL_CAP / 2 { POOL_CAP } else { cap };
        AlignedBuf { raw: Raw::new(cap), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written (`advance_mut`'s contract).
        unsafe { std::slice::from_raw_parts(self.raw.0.as_ptr(), self.len) }
    }
}

// SAFETY: `chunk_mut` is the unwritten rest of the allocation, and `advance_mut` only
// moves `len` over bytes the caller wrote (checked against the capacity).
unsafe impl BufMut for AlignedBuf {
    fn remaining_mut(&self) -> usize {
        self.raw.1 - self.len
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        assert!(cnt <= self.raw.1 - self.len, "advance_mut past the end of an aligned buffer");
        self.len += cnt;
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        // SAFETY: `len <= cap`, so the range is inside the allocation this buffer owns.
        unsafe {
            UninitSlice::from_raw_parts_mut(
                self.raw.0.as_ptr().add(self.len),
                self.raw.1 - self.len,
            )
        }
    }
}

/// Whether `data` may be written with `O_DIRECT` at `offset`: memory, offset and length
/// all aligned to [`ALIGN`].
pub fn direct_ok(data: &[u8], offset: u64) -> bool {
    !data.is_empty()
        && (data.as_ptr() as usize).is_multiple_of(ALIGN)
        && data.len().is_multiple_of(ALIGN)
        && offset.is_multiple_of(ALIGN as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_filled_and_pooled() {
        for cap in [MIN_ALIGNED, POOL_CAP, POOL_CAP + 4096, 3 * POOL_CAP] {
            let mut b = AlignedBuf::with_capacity(cap);
            let v: Vec<u8> = (0..cap).map(|i| (i * 7) as u8).collect();
            b.put_slice(&v);
            assert_eq!(b.len(), cap);
            let bytes = b.freeze();
            assert!(direct_ok(&bytes, 0), "segment of {cap} bytes aligned");
            assert_eq!(&bytes[..], &v[..]);
            let part = bytes.slice(4096..);
            drop(bytes);
            assert_eq!(&part[..], &v[4096..], "a slice keeps the buffer alive");
        }
        // A dropped 1 MiB buffer is reused, still aligned.
        let b = AlignedBuf::with_capacity(POOL_CAP).freeze();
        drop(b);
        let mut b = AlignedBuf::with_capacity(POOL_CAP);
        b.put_bytes(1, 100);
        assert!((b.as_ref().as_ptr() as usize).is_multiple_of(ALIGN));
        assert!(!direct_ok(b.as_ref(), 0), "100 bytes are not a whole block");
    }
}
