//! POSIX.1e access ACL evaluation, as the kernel does it for path-based calls, for data
//! operations that go through a root-opened fd (see `Cx::check` in `store/`).

use std::io;

/// The entries (tag, perm, id) of the POSIX access ACL of `fd`, if it has a valid one.
pub(crate) fn posix_acl_of(fd: std::os::fd::RawFd) -> Option<Vec<(u16, u16, u32)>> {
    let mut buf = vec![0u8; 1024];
    let name = c"system.posix_acl_access";
    let mut n = unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) {
        let size = unsafe { libc::fgetxattr(fd, name.as_ptr(), std::ptr::null_mut(), 0) };
        if size <= 0 {
            return None;
        }
        buf.resize(size as usize, 0);
        n = unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    }
    // header: u32 version 2; entries: u16 tag, u16 perm, u32 id (little-endian)
    if n < 4 || !(n as usize - 4).is_multiple_of(8) || buf[..4] != 2u32.to_le_bytes() {
        return None;
    }
    Some(
        buf[4..n as usize]
            .chunks_exact(8)
            .map(|e| {
                let tag = u16::from_le_bytes([e[0], e[1]]);
                let perm = u16::from_le_bytes([e[2], e[3]]);
                (tag, perm, u32::from_le_bytes([e[4], e[5], e[6], e[7]]))
            })
            .collect(),
    )
}

/// POSIX.1e access for a caller who is not the owner (the kernel's posix_acl_permission).
pub(crate) fn acl_permits(
    acl: &[(u16, u16, u32)],
    uid: u32,
    owning_gid: u32,
    in_group: &dyn Fn(u32) -> bool,
    want: u32,
) -> bool {
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    let mask = acl.iter().find(|e| e.0 == MASK).map_or(7, |e| e.1 as u32);
    let grants = |perm: u16| perm as u32 & mask & want == want;
    if let Some(e) = acl.iter().find(|e| e.0 == USER && e.2 == uid) {
        return grants(e.1);
    }
    let mut member = false;
    for e in acl {
        let matches = (e.0 == GROUP_OBJ && in_group(owning_gid)) || (e.0 == GROUP && in_group(e.2));
        if matches {
            member = true;
            if grants(e.1) {
                return true;
            }
        }
    }
    !member && acl.iter().any(|e| e.0 == OTHER && e.1 as u32 & want == want)
}
