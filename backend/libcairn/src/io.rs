//! File I/O entry points: open/release, synchronous and asynchronous read/write, flush,
//! fsync, fallocate, seek and compare-and-write.
//!
//! The synchronous and asynchronous variants share one async body each; the synchronous
//! call blocks on it, the `cairn_aio_*` call spawns it and runs the C callback on a
//! blocking-pool thread of the library (never inline, never on a runtime worker, so the
//! callback may call synchronous libcairn functions).

use crate::ffi::{self, guard_count, guard_int, out, Error, Res};
use crate::types::{cairn_aio_cb, cairn_creds_t, cairn_id_t};
use crate::{bytes_in, cairn_fs_t, fs_ref};
use bytes::Bytes;
use cairn_client::{Creds, Id, SeekWhence, Volume};
use futures::FutureExt;
use libc::{c_int, c_void};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// Largest single request handed to the client; longer calls loop.
const MAX_IO: usize = 8 << 20;

/// A caller's buffer carried into a task. The C contract keeps it valid until the call (or
/// the aio callback) returns.
struct OutBuf(*mut u8, usize);
// SAFETY: the buffer is written by exactly one task; the caller does not touch it until the
// call or its completion callback returns.
unsafe impl Send for OutBuf {}

fn range(off: u64, len: usize, what: &str) -> Res<()> {
    if len > isize::MAX as usize
        || off.checked_add(len as u64).is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(Error::new(
            libc::EFBIG,
            format!("{what}: offset {off} + length {len} out of range"),
        ));
    }
    Ok(())
}

/// How much of a read of `len` bytes at `off` can be file data: none at or past the
/// largest file offset (`i64::MAX`), where a read is end of file (NFSv4 READ near 2^64 - 1
/// must return eof, RFC 7530 §16.23), never EFBIG as a write there is.
fn read_len(off: u64, len: usize) -> usize {
    len.min((i64::MAX as u64).saturating_sub(off).min(usize::MAX as u64) as usize)
}

async fn read_into(
    vol: Arc<Volume>,
    c: Creds,
    id: Id,
    off: u64,
    buf: OutBuf,
    label: String,
) -> Res<usize> {
    let mut done = 0usize;
    while done < buf.1 {
        let want = (buf.1 - done).min(MAX_IO) as u32;
        let at = off + done as u64;
        let (data, eof) = vol
            .read(&c, id, at, want)
            .await
            .map_err(|e| Error::remote(e, format!("{label}: read {id} at {at}+{want}")))?;
        let n = data.len().min(buf.1 - done);
        // SAFETY: `buf` holds `buf.1` bytes and `done + n <= buf.1`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.0.add(done), n) };
        done += n;
        if eof || n == 0 {
            break;
        }
    }
    Ok(done)
}

/// How a write reaches the bricks.
#[derive(Clone, Copy)]
enum How {
    /// Write-behind (`cairn_write`).
    Behind,
    /// To every live replica before returning (`cairn_write_through`).
    Through,
    /// Through, and the file durable before returning (`cairn_write_sync`): the last
    /// chunk's write carries the fsync.
    Sync,
}

async fn write_all(
    vol: Arc<Volume>,
    c: Creds,
    id: Id,
    off: u64,
    data: Bytes,
    how: How,
    label: String,
) -> Res<usize> {
    if data.is_empty() && matches!(how, How::Sync) {
        vol.fsync(&c, id, false)
            .await
            .map_err(|e| Error::remote(e, format!("{label}: fsync {id}")))?;
        return Ok(0);
    }
    let mut done = 0usize;
    while done < data.len() {
        let chunk = data.slice(done..data.len().min(done + MAX_IO));
        let (at, len) = (off + done as u64, chunk.len());
        let last = done + len == data.len();
        let r = match how {
            How::Behind => vol.write(&c, id, at, chunk).await,
            How::Sync if last => vol.write_sync(&c, id, at, chunk).await,
            How::Through | How::Sync => vol.write_through(&c, id, at, chunk).await,
        };
        let n =
            r.map_err(|e| Error::remote(e, format!("{label}: write {id} at {at}+{len}")))? as usize;
        if n == 0 {
            return Err(Error::new(
                libc::EIO,
                format!("{label}: write {id} at {at}+{len}: server accepted 0 bytes"),
            ));
        }
        done += n.min(len);
    }
    Ok(done)
}

/// Copy `len` bytes from a caller buffer (the client needs owned data for the wire).
unsafe fn data_in(buf: *const c_void, len: usize) -> Res<Bytes> {
    // SAFETY: forwarded contract.
    Ok(Bytes::copy_from_slice(unsafe { bytes_in(buf, len, "buf") }?))
}

unsafe fn fs_creds<'a>(
    fs: *mut cairn_fs_t,
    c: *const cairn_creds_t,
) -> Res<(&'a cairn_fs_t, Creds)> {
    // SAFETY: forwarded contract.
    Ok((unsafe { fs_ref(fs) }?, unsafe { ffi::creds(c) }?))
}

/// Note an open of `id`: an unlinked file stays readable until the matching cairn_release.
#[no_mangle]
pub unsafe extern "C" fn cairn_open(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
) -> c_int {
    guard_int("cairn_open", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let id = Id::from(id);
        fs.block_on(fs.vol.open(&c, id))
            .map_err(|e| Error::remote(e, format!("{}: open {id}", fs.label)))
    })
}

/// Drop one open of `id` after flushing its buffered writes; returns any deferred write
/// error (the open is dropped anyway).
#[no_mangle]
pub unsafe extern "C" fn cairn_release(fs: *mut cairn_fs_t, id: cairn_id_t) -> c_int {
    guard_int("cairn_release", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let id = Id::from(id);
        fs.block_on(fs.vol.release(id))
            .map_err(|e| Error::remote(e, format!("{}: release {id}", fs.label)))
    })
}

/// Read up to `len` bytes at `offset` into `buf`; returns the count (short only at end of
/// file; 0 at or past it, also at any offset past the largest file offset) or a negative
/// errno.
#[no_mangle]
pub unsafe extern "C" fn cairn_read(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> libc::ssize_t {
    guard_count("cairn_read", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let len = read_len(offset, len);
        if len == 0 {
            return Ok(0);
        }
        if buf.is_null() {
            return Err(Error::inval("buf is NULL"));
        }
        fs.block_on(read_into(
            fs.vol.clone(),
            c,
            id.into(),
            offset,
            OutBuf(buf as *mut u8, len),
            fs.label.clone(),
        ))
    })
}

fn write_common(
    op: &str,
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
    how: How,
) -> libc::ssize_t {
    guard_count(op, || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        range(offset, len, "write")?;
        let data = unsafe { data_in(buf, len) }?;
        fs.block_on(write_all(fs.vol.clone(), c, id.into(), offset, data, how, fs.label.clone()))
    })
}

/// Write `len` bytes at `offset`; returns `len` or a negative errno. With write-behind the
/// data may be buffered: a failure then surfaces on a later write, flush, fsync or release
/// of the same file.
#[no_mangle]
pub unsafe extern "C" fn cairn_write(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> libc::ssize_t {
    write_common("cairn_write", fs, creds, id, offset, buf, len, How::Behind)
}

/// Write `len` bytes at `offset` to every live replica before returning (NFS FILE_SYNC,
/// SCSI FUA); returns `len` or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn cairn_write_through(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> libc::ssize_t {
    write_common("cairn_write_through", fs, creds, id, offset, buf, len, How::Through)
}

/// Write `len` bytes at `offset` and make the file durable (data and metadata, as
/// `cairn_fsync` with `datasync` false) on every live replica before returning: a
/// `cairn_write_through` and a `cairn_fsync` in one round trip for a write of at most
/// 8 MiB (NFS FILE_SYNC, a COMMIT folded into the write). Returns `len` or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn cairn_write_sync(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> libc::ssize_t {
    write_common("cairn_write_sync", fs, creds, id, offset, buf, len, How::Sync)
}

/// Send the buffered writes of `id` to the servers; returns any deferred write error.
#[no_mangle]
pub unsafe extern "C" fn cairn_flush(fs: *mut cairn_fs_t, id: cairn_id_t) -> c_int {
    guard_int("cairn_flush", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let id = Id::from(id);
        fs.block_on(fs.vol.flush(id))
            .map_err(|e| Error::remote(e, format!("{}: flush {id}", fs.label)))
    })
}

/// Make the data (and with `datasync` false, the metadata) of `id` durable on the servers.
#[no_mangle]
pub unsafe extern "C" fn cairn_fsync(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    datasync: bool,
) -> c_int {
    guard_int("cairn_fsync", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let id = Id::from(id);
        fs.block_on(fs.vol.fsync(&c, id, datasync))
            .map_err(|e| Error::remote(e, format!("{}: fsync {id}", fs.label)))
    })
}

/// fallocate(2) on `id`: `mode` 0 or FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE (with
/// KEEP_SIZE), FALLOC_FL_ZERO_RANGE; other modes give -EOPNOTSUPP.
#[no_mangle]
pub unsafe extern "C" fn cairn_fallocate(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    mode: u32,
    offset: u64,
    len: u64,
) -> c_int {
    guard_int("cairn_fallocate", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        use cairn_proto::falloc::{KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE};
        if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0 {
            return Err(Error::new(
                libc::EOPNOTSUPP,
                format!("fallocate mode {mode:#x} not supported"),
            ));
        }
        if len == 0 {
            return Err(Error::inval("fallocate: length 0"));
        }
        range(offset, 0, "fallocate")?;
        let id = Id::from(id);
        fs.block_on(fs.vol.fallocate(&c, id, mode, offset, len)).map_err(|e| {
            Error::remote(e, format!("{}: fallocate {id} mode {mode:#x} {offset}+{len}", fs.label))
        })
    })
}

/// lseek(2) with SEEK_DATA or SEEK_HOLE from `offset`; the result goes to `*result`
/// (-ENXIO past the end, as lseek).
#[no_mangle]
pub unsafe extern "C" fn cairn_seek(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    whence: c_int,
    result: *mut u64,
) -> c_int {
    guard_int("cairn_seek", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let result = unsafe { out(result, "result") }?;
        let w = match whence {
            libc::SEEK_DATA => SeekWhence::Data,
            libc::SEEK_HOLE => SeekWhence::Hole,
            _ => {
                return Err(Error::inval(format!(
                    "seek: whence {whence} (only SEEK_DATA, SEEK_HOLE)"
                )))
            }
        };
        let id = Id::from(id);
        *result = fs.block_on(fs.vol.seek(&c, id, offset, w)).map_err(|e| {
            Error::remote(e, format!("{}: seek {id} {w:?} from {offset}", fs.label))
        })?;
        Ok(())
    })
}

/// Atomically on the server: if the `len` bytes at `offset` equal `cmp`, write `data`
/// (`len` bytes) there. Returns 0, or -CAIRN_EMISCOMPARE (-EILSEQ) when they differ.
#[no_mangle]
pub unsafe extern "C" fn cairn_compare_and_write(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    cmp: *const c_void,
    data: *const c_void,
    len: usize,
) -> c_int {
    guard_int("cairn_compare_and_write", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        range(offset, len, "compare_and_write")?;
        let (cmp, data) = (unsafe { data_in(cmp, len) }?, unsafe { data_in(data, len) }?);
        let id = Id::from(id);
        fs.block_on(fs.vol.compare_and_write(&c, id, offset, cmp, data)).map_err(|e| {
            Error::remote(e, format!("{}: compare_and_write {id} at {offset}+{len}", fs.label))
        })
    })
}

/// Server-side copy, as copy_file_range(2): copy up to `len` bytes of regular file `src`
/// from `src_offset` into regular file `dst` at `dst_offset`, and return the bytes copied
/// (short at the end of `src`, 0 at or past it) or a negative errno. The bricks copy: the
/// chain head of `dst` reads `src` (its own copy, or from the chain head of `src` over the
/// brick network) and replicates a write, so no byte of the data passes through this
/// process, and `cairn_stats` counts `copy_range` requests instead of `read`/`write`.
/// Against bricks that cannot, the library copies by reading and writing. Buffered writes
/// of both files are sent first. `len` is capped at `SSIZE_MAX`.
#[no_mangle]
pub unsafe extern "C" fn cairn_copy_file_range(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    src: cairn_id_t,
    src_offset: u64,
    dst: cairn_id_t,
    dst_offset: u64,
    len: usize,
) -> libc::ssize_t {
    guard_count("cairn_copy_file_range", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let len = len.min(isize::MAX as usize);
        range(src_offset, len, "copy_file_range (source)")?;
        range(dst_offset, len, "copy_file_range (destination)")?;
        let (src, dst) = (Id::from(src), Id::from(dst));
        fs.block_on(fs.vol.copy_range(&c, src, src_offset, dst, dst_offset, len as u64))
            .map(|n| n as usize)
            .map_err(|e| {
                Error::remote(
                    e,
                    format!(
                        "{}: copy_file_range {src} at {src_offset} to {dst} at {dst_offset}, {len} bytes",
                        fs.label
                    ),
                )
            })
    })
}

// ---------------------------------------------------------------------------------------
// Asynchronous I/O
// ---------------------------------------------------------------------------------------

/// Spawn `fut` and run `cb(result, arg)` on a library thread when it completes.
fn submit<F>(
    fs: &cairn_fs_t,
    op: &'static str,
    cb: unsafe extern "C" fn(i32, *mut c_void),
    arg: *mut c_void,
    fut: F,
) where
    F: Future<Output = Res<usize>> + Send + 'static,
{
    fs.inflight.begin();
    let (inflight, rt, arg) = (fs.inflight.clone(), fs.rt.clone(), arg as usize);
    fs.rt.spawn(async move {
        let r = match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(r) => r,
            Err(p) => Err(ffi::panic_error(p.as_ref())),
        };
        let (code, msg) = match r {
            Ok(n) => (n.min(i32::MAX as usize) as i32, None),
            Err(e) => {
                tracing::debug!(errno = e.errno, "{op}: {}", e.message);
                (-e.errno, Some(format!("{op}: {}", e.text())))
            }
        };
        rt.spawn_blocking(move || {
            // SAFETY: the caller's C callback with its own argument.
            ffi::run_callback(msg.as_deref(), || unsafe { cb(code, arg as *mut c_void) });
            inflight.end();
        });
    });
}

fn aio_len(len: usize) -> Res<()> {
    if len > i32::MAX as usize {
        return Err(Error::inval(format!("aio length {len} > INT_MAX")));
    }
    Ok(())
}

/// Start reading up to `len` bytes at `offset` into `buf`; `cb` gets the byte count (short
/// only at end of file, 0 past it as with `cairn_read`) or a negative errno. `buf` must
/// stay valid until `cb` runs. Returns 0 when submitted (then `cb` runs exactly once),
/// else a negative errno (and `cb` never runs).
#[no_mangle]
pub unsafe extern "C" fn cairn_aio_read(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
    cb: cairn_aio_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_aio_read", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let cb = cb.ok_or_else(|| Error::inval("callback is NULL"))?;
        aio_len(len)?;
        if buf.is_null() && len > 0 {
            return Err(Error::inval("buf is NULL"));
        }
        let b = OutBuf(buf as *mut u8, read_len(offset, len));
        submit(
            fs,
            "cairn_aio_read",
            cb,
            arg,
            read_into(fs.vol.clone(), c, id.into(), offset, b, fs.label.clone()),
        );
        Ok(())
    })
}

unsafe fn aio_write_common(
    op: &'static str,
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
    cb: cairn_aio_cb,
    arg: *mut c_void,
    how: How,
) -> c_int {
    guard_int(op, || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let cb = cb.ok_or_else(|| Error::inval("callback is NULL"))?;
        range(offset, len, "aio_write")?;
        aio_len(len)?;
        let data = unsafe { data_in(buf, len) }?;
        submit(
            fs,
            op,
            cb,
            arg,
            write_all(fs.vol.clone(), c, id.into(), offset, data, how, fs.label.clone()),
        );
        Ok(())
    })
}

/// Start writing `len` bytes at `offset` (copied before the call returns, so `buf` may be
/// reused at once); `cb` gets `len` or a negative errno. Same submission rules as
/// cairn_aio_read.
#[no_mangle]
pub unsafe extern "C" fn cairn_aio_write(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
    cb: cairn_aio_cb,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        aio_write_common("cairn_aio_write", fs, creds, id, offset, buf, len, cb, arg, How::Behind)
    }
}

/// As cairn_aio_write, but complete only once every live replica has the data (FUA).
#[no_mangle]
pub unsafe extern "C" fn cairn_aio_write_through(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
    cb: cairn_aio_cb,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        aio_write_common(
            "cairn_aio_write_through",
            fs,
            creds,
            id,
            offset,
            buf,
            len,
            cb,
            arg,
            How::Through,
        )
    }
}

/// Start an fsync of `id`; `cb` gets 0 or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn cairn_aio_fsync(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    datasync: bool,
    cb: cairn_aio_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_aio_fsync", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let cb = cb.ok_or_else(|| Error::inval("callback is NULL"))?;
        let (vol, id, label) = (fs.vol.clone(), Id::from(id), fs.label.clone());
        submit(fs, "cairn_aio_fsync", cb, arg, async move {
            vol.fsync(&c, id, datasync)
                .await
                .map_err(|e| Error::remote(e, format!("{label}: fsync {id}")))?;
            Ok(0)
        });
        Ok(())
    })
}

/// Start a cairn_compare_and_write (both buffers copied before the call returns); `cb` gets
/// 0 or a negative errno (-EILSEQ on miscompare).
#[no_mangle]
pub unsafe extern "C" fn cairn_aio_compare_and_write(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    offset: u64,
    cmp: *const c_void,
    data: *const c_void,
    len: usize,
    cb: cairn_aio_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_aio_compare_and_write", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let cb = cb.ok_or_else(|| Error::inval("callback is NULL"))?;
        range(offset, len, "aio_compare_and_write")?;
        let (cmp, data) = (unsafe { data_in(cmp, len) }?, unsafe { data_in(data, len) }?);
        let (vol, id, label) = (fs.vol.clone(), Id::from(id), fs.label.clone());
        submit(fs, "cairn_aio_compare_and_write", cb, arg, async move {
            vol.compare_and_write(&c, id, offset, cmp, data).await.map_err(|e| {
                Error::remote(e, format!("{label}: compare_and_write {id} at {offset}+{len}"))
            })?;
            Ok(0)
        });
        Ok(())
    })
}
