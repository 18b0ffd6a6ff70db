//! Errors as they cross the wire: a POSIX errno plus a message that names the context
//! (volume, brick, id or path). The errno is what callers switch on; the message is for
//! humans and logs.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A POSIX errno value (positive, as in `<errno.h>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    pub const EPROTONOSUPPORT: Errno = Errno(libc::EPROTONOSUPPORT);
    pub const EMSGSIZE: Errno = Errno(libc::EMSGSIZE);
    pub const EILSEQ: Errno = Errno(libc::EILSEQ);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const EDEADLK: Errno = Errno(libc::EDEADLK);
    pub const ENOLCK: Errno = Errno(libc::ENOLCK);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ECANCELED: Errno = Errno(libc::ECANCELED);
    pub const EHOSTDOWN: Errno = Errno(libc::EHOSTDOWN);
    /// Returned by a brick that is not (or no longer) the head of the chain for an inode,
    /// or whose map epoch is older than the request's: the client refreshes its map.
    pub const ESTALEMAP: Errno = Errno(libc::EREMCHG);
    /// COMPARE_AND_WRITE found different data (maps to SCSI MISCOMPARE).
    pub const EMISCOMPARE: Errno = Errno(libc::EILSEQ);
    /// A brick's copy of file data fails its checksums (`EUCLEAN`, as ext4/XFS report
    /// corruption). Between bricks only: the head repairs from a replica and a client
    /// sees EIO if no good copy exists.
    pub const ECORRUPT: Errno = Errno(libc::EUCLEAN);
    /// A share reservation ([`crate::msg::Op::Share`]) conflicts with another opener's
    /// access or deny mode (`ETXTBSY`, "file busy"): NFS4ERR_SHARE_DENIED, SMB
    /// NT_STATUS_SHARING_VIOLATION.
    pub const ESHAREDENIED: Errno = Errno(libc::ETXTBSY);
    /// The inode an op named by id was moved to another replica set by a rebalance
    /// (`EREMOTE`, "object is remote"): its home set keeps a moved stub that names the
    /// set it lives on now ([`RemoteError::moved`], [`RemoteError::moved_to`]). Between
    /// bricks and clients only: the client resends the op there (docs/rebalance.md).
    pub const EMOVED: Errno = Errno(libc::EREMOTE);

    pub fn from_io(e: &std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::EACCES => "EACCES",
            libc::EEXIST => "EEXIST",
            libc::EXDEV => "EXDEV",
            libc::ENOTDIR => "ENOTDIR",
            libc::EISDIR => "EISDIR",
            libc::EINVAL => "EINVAL",
            libc::ENOSPC => "ENOSPC",
            libc::EROFS => "EROFS",
            libc::ENAMETOOLONG => "ENAMETOOLONG",
            libc::ENOTEMPTY => "ENOTEMPTY",
            libc::ENODATA => "ENODATA",
            libc::ENOTSUP => "ENOTSUP",
            libc::ENOTCONN => "ENOTCONN",
            libc::ETIMEDOUT => "ETIMEDOUT",
            libc::ESTALE => "ESTALE",
            libc::EPROTO => "EPROTO",
            libc::EMSGSIZE => "EMSGSIZE",
            libc::EREMCHG => "ESTALEMAP",
            libc::EILSEQ => "EILSEQ",
            libc::EUCLEAN => "ECORRUPT",
            libc::ETXTBSY => "ESHAREDENIED",
            libc::EREMOTE => "EMOVED",
            libc::ERANGE => "ERANGE",
            libc::EDEADLK => "EDEADLK",
            libc::ENXIO => "ENXIO",
            libc::EFBIG => "EFBIG",
            libc::EBUSY => "EBUSY",
            libc::EHOSTDOWN => "EHOSTDOWN",
            _ => "errno",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// An error returned by a remote peer, or produced locally about one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}: {errno}")]
pub struct RemoteError {
    pub errno: Errno,
    pub message: String,
    /// With [`Errno::EMOVED`]: the replica set the inode lives on now
    /// ([`RemoteError::moved_to`]). Added at the end of the message, as `frame.rs` does
    /// for other fields: a peer built before it sends nothing there (decoded `None`) and
    /// ignores it in turn. Code that rewraps an error keeps it (`RemoteError { message,
    /// ..e }`).
    #[serde(default, deserialize_with = "crate::frame::trailing")]
    pub moved: Option<u32>,
}

/// The words of an EMOVED message that name the set: `... moved to replica set N`.
const MOVED_TO: &str = "moved to replica set ";

/// What an EMOVED error says (the brick adds its context around it): inode `id` lives on
/// replica set `set` now. [`RemoteError::moved_to`] reads the set back.
pub fn moved_message(id: impl fmt::Display, set: u32) -> String {
    format!("inode {id} {MOVED_TO}{set}")
}

impl RemoteError {
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        RemoteError { errno, message: message.into(), moved: None }
    }

    /// An EMOVED error: inode `id` lives on replica set `set` now.
    pub fn moved(id: impl fmt::Display, set: u32) -> Self {
        RemoteError { moved: Some(set), ..RemoteError::new(Errno::EMOVED, moved_message(id, set)) }
    }

    /// The replica set an EMOVED error names: its `moved` field; from a peer built before
    /// the field, the last set its message names (context may repeat it). `None` for any
    /// other error.
    pub fn moved_to(&self) -> Option<u32> {
        if self.errno != Errno::EMOVED {
            return None;
        }
        if self.moved.is_some() {
            return self.moved;
        }
        let at = self.message.rfind(MOVED_TO)? + MOVED_TO.len();
        let digits: String =
            self.message[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    }
}

impl From<std::io::Error> for RemoteError {
    fn from(e: std::io::Error) -> Self {
        RemoteError::new(Errno::from_io(&e), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emoved_error_names_its_set_through_added_context() {
        let e = RemoteError::moved("0000000200000000000000000000002a", 3);
        assert_eq!(e.moved_to(), Some(3));
        // The brick and the client wrap the message; the set is still read back.
        let wrapped = RemoteError::new(
            e.errno,
            format!("v: brick 0 (n1:/b0): brick v#0 (/b0): getattr: {} (errno 66)", e.message),
        );
        assert_eq!(wrapped.moved_to(), Some(3));
        assert_eq!(RemoteError::new(Errno::ESTALE, e.message).moved_to(), None);
        assert_eq!(Errno::EMOVED.name(), "EMOVED");
    }

    /// The set is a field of the error reply: read from it whatever the message says,
    /// kept across the wire, absent (and read from the message) in an older peer's
    /// reply, and ignored by an older peer.
    #[test]
    fn the_moved_to_set_is_a_trailing_field_of_the_error_reply() {
        use crate::frame::{decode, encode};
        use crate::msg::Response;
        let e = RemoteError::moved("0000000200000000000000000000002a", 3);
        assert_eq!(e.moved, Some(3));
        // Rewrapped with a message that names no set (or another one): the field rules.
        let rewrapped = RemoteError { message: "brick 0: getattr: moved".into(), ..e.clone() };
        assert_eq!(rewrapped.moved_to(), Some(3));
        let lying = RemoteError { message: moved_message("x", 9), ..e.clone() };
        assert_eq!(lying.moved_to(), Some(3));
        let r: Response = Err(rewrapped.clone());
        let bytes = encode(&r);
        assert_eq!(decode::<Response>(&bytes).unwrap(), r);
        // An older peer's reply: no field; the message still names the set.
        #[derive(Serialize, Deserialize)]
        struct Old {
            errno: Errno,
            message: String,
        }
        let old: Result<crate::msg::Reply, Old> =
            Err(Old { errno: Errno::EMOVED, message: e.message.clone() });
        let back = decode::<Response>(&encode(&old)).unwrap().unwrap_err();
        assert_eq!((back.moved, back.moved_to()), (None, Some(3)));
        // An older peer decodes a newer reply (the field is trailing bytes to it).
        let seen: Result<crate::msg::Reply, Old> = decode(&bytes).unwrap();
        assert_eq!(seen.err().map(|o| o.message), Some(rewrapped.message));
        // Other errors carry no set.
        let stale = RemoteError::new(Errno::ESTALE, e.message);
        assert_eq!(
            decode::<Response>(&encode(&Err::<crate::msg::Reply, _>(stale)))
                .unwrap()
                .unwrap_err()
                .moved_to(),
            None
        );
    }
}
