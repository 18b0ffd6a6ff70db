//! Thin wrappers over the `*at` syscalls the store uses. Every path argument is a single
//! component (or a path inside `.cairn/` built by the store); callers pass `O_NOFOLLOW` /
//! `AT_SYMLINK_NOFOLLOW` where a user-controlled name is the final component.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_ss(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

pub fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

pub fn openat(dir: RawFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let fd = cvt(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn open_dir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    openat(dir, name, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
}

pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

pub fn lstatat(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn mkdirat(dir: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    cvt(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: RawFd, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    cvt(unsafe { libc::mknodat(dir, name.as_ptr(), mode, rdev) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: RawFd, name: &CStr) -> io::Result<()> {
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) }).map(drop)
}

/// `linkat` without `AT_SYMLINK_FOLLOW`: a symlink is linked, never followed.
pub fn linkat(odir: RawFd, old: &CStr, ndir: RawFd, new: &CStr) -> io::Result<()> {
    cvt(unsafe { libc::linkat(odir, old.as_ptr(), ndir, new.as_ptr(), 0) }).map(drop)
}

pub fn unlinkat(dir: RawFd, name: &CStr, flags: i32) -> io::Result<()> {
    cvt(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(odir: RawFd, old: &CStr, ndir: RawFd, new: &CStr, flags: u32) -> io::Result<()> {
    let r = unsafe {
        libc::syscall(libc::SYS_renameat2, odir, old.as_ptr(), ndir, new.as_ptr(), flags)
    };
    cvt(r as libc::c_int).map(drop)
}

pub fn readlinkat(dir: RawFd, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let n = cvt_ss(unsafe {
        libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len())
    })?;
    buf.truncate(n);
    Ok(buf)
}

/// Fills `buf` from `off` until it is full or at end of file; returns how many bytes were
/// read.
pub fn pread(fd: RawFd, buf: &mut [u8], off: u64) -> io::Result<usize> {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and `pread_uninit` only stores
    // initialized bytes, so `buf` stays initialized.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(
            buf.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
            buf.len(),
        )
    };
    pread_uninit(fd, buf, off, false)
}

/// [`pread`] into uninitialized memory (no zero fill): fills `buf` from `off` until it is
/// full or at end of file; returns how many bytes were read (those are initialized).
/// `nowait`: only from the page cache (`preadv2(RWF_NOWAIT)`): data not cached is
/// `EAGAIN` (a short read may come first), a file system without it `EOPNOTSUPP`.
pub fn pread_uninit(
    fd: RawFd,
    buf: &mut [std::mem::MaybeUninit<u8>],
    mut off: u64,
    nowait: bool,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let p = buf[done..].as_mut_ptr() as *mut libc::c_void;
        let len = buf.len() - done;
        let r = unsafe {
            if nowait {
                let iov = libc::iovec { iov_base: p, iov_len: len };
                libc::preadv2(fd, &iov, 1, off as libc::off_t, libc::RWF_NOWAIT)
            } else {
                libc::pread(fd, p, len, off as libc::off_t)
            }
        };
        match cvt_ss(r) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// One `pwrite` (the count it wrote may be short).
pub fn pwrite(fd: RawFd, buf: &[u8], off: u64) -> io::Result<usize> {
    cvt_ss(unsafe {
        libc::pwrite(fd, buf.as_ptr() as *const libc::c_void, buf.len(), off as libc::off_t)
    })
}

pub fn pwrite_all(fd: RawFd, buf: &[u8], mut off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let r = unsafe {
            libc::pwrite(
                fd,
                buf[done..].as_ptr() as *const libc::c_void,
                buf.len() - done,
                off as libc::off_t,
            )
        };
        match cvt_ss(r) {
            Ok(0) => return Err(errno(libc::EIO)),
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub fn ftruncate(fd: RawFd, size: u64) -> io::Result<()> {
    cvt(unsafe { libc::ftruncate(fd, size as libc::off_t) }).map(drop)
}

pub fn fallocate(fd: RawFd, mode: i32, off: u64, len: u64) -> io::Result<()> {
    cvt(unsafe { libc::fallocate(fd, mode, off as libc::off_t, len as libc::off_t) }).map(drop)
}

pub fn lseek(fd: RawFd, off: u64, whence: i32) -> io::Result<u64> {
    let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

pub fn fsync(fd: RawFd, datasync: bool) -> io::Result<()> {
    cvt(unsafe {
        if datasync {
            libc::fdatasync(fd)
        } else {
            libc::fsync(fd)
        }
    })
    .map(drop)
}

/// Write the whole filesystem `fd` is on to disk (`syncfs(2)`: data, metadata, journal).
pub fn syncfs(fd: RawFd) -> io::Result<()> {
    cvt(unsafe { libc::syncfs(fd) }).map(drop)
}

pub fn fchmod(fd: RawFd, mode: u32) -> io::Result<()> {
    cvt(unsafe { libc::fchmod(fd, mode) }).map(drop)
}

pub fn fchown(fd: RawFd, uid: u32, gid: u32) -> io::Result<()> {
    cvt(unsafe { libc::fchown(fd, uid, gid) }).map(drop)
}

/// `chmod` of `name` in `dir`; only ever called on entries known not to be symlinks.
pub fn fchmodat(dir: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    cvt(unsafe { libc::fchmodat(dir, name.as_ptr(), mode, 0) }).map(drop)
}

pub fn lchownat(dir: RawFd, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    cvt(unsafe { libc::fchownat(dir, name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
        .map(drop)
}

pub fn futimens(fd: RawFd, ts: &[libc::timespec; 2]) -> io::Result<()> {
    cvt(unsafe { libc::futimens(fd, ts.as_ptr()) }).map(drop)
}

pub fn lutimensat(dir: RawFd, name: &CStr, ts: &[libc::timespec; 2]) -> io::Result<()> {
    cvt(unsafe { libc::utimensat(dir, name.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
        .map(drop)
}

pub fn fstatvfs(fd: RawFd) -> io::Result<libc::statvfs> {
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatvfs(fd, &mut st) })?;
    Ok(st)
}

/// Where an extended attribute operation applies: an open fd, or a path whose final
/// component is never followed (`l*xattr`).
pub enum XTarget {
    Fd(RawFd),
    Path(CString),
}

impl XTarget {
    /// `name` inside the directory `dir`, without following a final symlink: the
    /// `/proc/self/fd/<dir>` magic link pins the directory, `name` is one component.
    pub fn at(dir: RawFd, name: &[u8]) -> io::Result<XTarget> {
        let mut p = format!("/proc/self/fd/{dir}/").into_bytes();
        p.extend_from_slice(name);
        Ok(XTarget::Path(cstr(&p)?))
    }

    pub fn get(&self, name: &CStr) -> io::Result<Vec<u8>> {
        self.get_sized(name, 256)
    }

    /// [`get`](Self::get), first trying a buffer of `size` bytes (one syscall for a value
    /// that fits).
    pub fn get_sized(&self, name: &CStr, mut size: usize) -> io::Result<Vec<u8>> {
        loop {
            let mut buf = vec![0u8; size];
            let p = buf.as_mut_ptr() as *mut libc::c_void;
            let r = unsafe {
                match self {
                    XTarget::Fd(fd) => libc::fgetxattr(*fd, name.as_ptr(), p, size),
                    XTarget::Path(path) => libc::lgetxattr(path.as_ptr(), name.as_ptr(), p, size),
                }
            };
            match cvt_ss(r) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(e) if e.raw_os_error() == Some(libc::ERANGE) && size < 1 << 20 => {
                    size *= 8;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn set(&self, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
        let v = value.as_ptr() as *const libc::c_void;
        cvt(unsafe {
            match self {
                XTarget::Fd(fd) => libc::fsetxattr(*fd, name.as_ptr(), v, value.len(), flags),
                XTarget::Path(p) => {
                    libc::lsetxattr(p.as_ptr(), name.as_ptr(), v, value.len(), flags)
                }
            }
        })
        .map(drop)
    }

    pub fn remove(&self, name: &CStr) -> io::Result<()> {
        cvt(unsafe {
            match self {
                XTarget::Fd(fd) => libc::fremovexattr(*fd, name.as_ptr()),
                XTarget::Path(p) => libc::lremovexattr(p.as_ptr(), name.as_ptr()),
            }
        })
        .map(drop)
    }

    pub fn list(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut size = 1024usize;
        loop {
            let mut buf = vec![0u8; size];
            let p = buf.as_mut_ptr() as *mut libc::c_char;
            let r = unsafe {
                match self {
                    XTarget::Fd(fd) => libc::flistxattr(*fd, p, size),
                    XTarget::Path(path) => libc::llistxattr(path.as_ptr(), p, size),
                }
            };
            match cvt_ss(r) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf
                        .split(|&c| c == 0)
                        .filter(|s| !s.is_empty())
                        .map(|s| s.to_vec())
                        .collect());
                }
                Err(e) if e.raw_os_error() == Some(libc::ERANGE) && size < 1 << 22 => {
                    size *= 8;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// One raw directory entry.
pub struct RawEntry {
    pub name: Vec<u8>,
    pub d_type: u8,
}

/// Every entry of the directory `dir` except `.` and `..`, read through a fresh fd so the
/// shared fd's offset is never touched.
pub fn read_dir(dir: RawFd) -> io::Result<Vec<RawEntry>> {
    let fd = openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = unsafe {
            libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len())
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        let mut pos = 0usize;
        while pos < n as usize {
            // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
            let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
            let d_type = buf[pos + 18];
            let name_bytes = &buf[pos + 19..pos + reclen];
            let len = name_bytes.iter().position(|&c| c == 0).unwrap_or(name_bytes.len());
            let name = &name_bytes[..len];
            if name != b"." && name != b".." {
                out.push(RawEntry { name: name.to_vec(), d_type });
            }
            pos += reclen;
        }
    }
    Ok(out)
}
