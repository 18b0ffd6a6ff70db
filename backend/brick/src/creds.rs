//! Per-thread caller credentials.
//!
//! glibc's `setfsuid`/`setgroups` wrappers change every thread of the process (they
//! broadcast the change); the raw syscalls change only the calling thread, which is what a
//! multi-threaded daemon needs. [`AsCaller`] applies a caller's fsuid/fsgid/groups for the
//! duration of one syscall sequence and restores root when dropped.

use cairn_proto::Creds;
use std::io;

fn set_fsuid(uid: u32) {
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) };
}

fn set_fsgid(gid: u32) {
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) };
}

fn set_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The caller's credentials applied to this thread; root again when dropped.
pub struct AsCaller {
    active: bool,
}

impl AsCaller {
    /// Apply `creds` to the current thread. `None` (or uid 0) leaves root in place.
    pub fn apply(creds: Option<&Creds>) -> io::Result<AsCaller> {
        let Some(c) = creds.filter(|c| c.uid != 0) else {
            return Ok(AsCaller { active: false });
        };
        let mut groups: Vec<libc::gid_t> = c.groups.clone();
        groups.truncate(65536);
        set_groups(&groups)?;
        set_fsgid(c.gid);
        set_fsuid(c.uid);
        // setfsuid reports the previous value only; check the switch really happened.
        let now = unsafe { libc::syscall(libc::SYS_setfsuid, -1i64 as libc::c_long) } as u32;
        let guard = AsCaller { active: true };
        if now != c.uid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(guard)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if self.active {
            set_fsuid(0);
            set_fsgid(0);
            let _ = set_groups(&[]);
        }
    }
}
