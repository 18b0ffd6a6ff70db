//! Which transport this process uses: set by the program, or chosen by the environment.

use super::*;
use crate::{Errno, RemoteError};
use parking_lot::RwLock;
use std::path::{Path, PathBuf};

static DEFAULT: RwLock<Option<Transport>> = RwLock::new(None);
static PATH: RwLock<Option<PathBuf>> = RwLock::new(None);

/// Use the credentials in `path` (loaded when the first connection is made, so a missing
/// file is reported with that connection's error).
pub fn set_credentials_path(path: &Path) {
    *PATH.write() = Some(path.to_path_buf());
    *DEFAULT.write() = None;
}

/// Set the transport of this process's connections (clients and servers).
pub fn set_default(t: Transport) {
    *DEFAULT.write() = Some(t);
}

/// The transport set with [`set_default`], or else the one the environment chooses:
/// `CAIRN_TRANSPORT=plain`, or TLS with the credentials [`find_credentials`] finds.
pub fn default_transport() -> Result<Transport, RemoteError> {
    if let Some(t) = DEFAULT.read().clone() {
        return Ok(t);
    }
    let path = PATH.read().clone();
    let t = from_env(path.as_deref())?;
    *DEFAULT.write() = Some(t.clone());
    Ok(t)
}

/// The transport for explicit options: `plain`, or TLS with `credentials` (or the
/// environment's / a default path's), reloaded when that file changes
/// ([`TlsConfig::refresh`]).
pub fn from_env(credentials: Option<&Path>) -> Result<Transport, RemoteError> {
    if std::env::var(ENV_TRANSPORT).is_ok_and(|v| v == "plain") {
        return Ok(Transport::Plain);
    }
    let path = find_credentials(credentials)?;
    // Loaded now, and again whenever the file changes (before a new connection).
    Transport::tls_file_checked(&path).map_err(|e| match e {
        Ok(e) => RemoteError::new(Errno::EACCES, format!("cannot load credentials: {e}")),
        Err(e) => RemoteError::new(Errno::EINVAL, format!("{}: {e}", path.display())),
    })
}

/// The credentials file to use: `explicit`, `$CAIRN_CREDENTIALS`, or the first of
/// [`DEFAULT_PATHS`] that exists.
pub fn find_credentials(explicit: Option<&Path>) -> Result<PathBuf, RemoteError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os(ENV_CREDENTIALS).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    for p in DEFAULT_PATHS {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    Err(RemoteError::new(
        Errno::EACCES,
        format!(
            "no credentials: pass --credentials FILE, set {ENV_CREDENTIALS}, or install one at {} \
             (issue one with 'cairn client certificate issue NAME' on an admin host)",
            DEFAULT_PATHS[0]
        ),
    ))
}
