//! The one mapping of a config store (etcd) error to the errno a caller is answered with;
//! a leaf module, so management, certificates and heal can all use it without importing
//! each other.

use cairn_proto::{Errno, RemoteError};

pub(crate) fn cfg(e: cairn_config::ConfigError) -> RemoteError {
    use cairn_config::ConfigError as C;
    let errno = match &e {
        C::Conflict(_) => Errno::EEXIST,
        C::NotFound(_) => Errno::ENOENT,
        C::Invalid(_) => Errno::EINVAL,
        C::BadRecord { .. } => Errno::EIO,
        _ => Errno::EHOSTDOWN,
    };
    RemoteError::new(errno, e.to_string())
}
