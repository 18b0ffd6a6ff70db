//! The brick's errors, converted in one place.
//!
//! An operation fails with a [`Fail`]: the errno the client gets and what failed (the
//! path component, id, offset...). [`Ctx::ctx`] turns an `io::Error` into one, adding
//! that context. At the brick's edge ([`BrickError`], built by `Brick::with_context`) the
//! brick itself is added — volume, brick index, brick path, operation — and the result
//! becomes the wire's [`RemoteError`] with the same errno.

use cairn_proto::{Errno, RemoteError};
use std::io;
use std::path::PathBuf;

/// An operation's failure before the brick context is added: errno plus what failed.
#[derive(Debug, thiserror::Error)]
#[error("{what} (errno {errno})")]
pub(crate) struct Fail {
    pub errno: i32,
    pub what: String,
    /// EMOVED's set (`RemoteError::moved`).
    pub moved: Option<u32>,
}

pub(crate) type R<T> = Result<T, Fail>;

pub(crate) fn fail(errno: i32, what: impl Into<String>) -> Fail {
    Fail { errno, what: what.into(), moved: None }
}

/// Add what was being done to an `io::Error`, keeping its errno (EIO when it has none).
pub(crate) trait Ctx<T> {
    fn ctx<S: Into<String>>(self, what: impl FnOnce() -> S) -> R<T>;
}

impl<T> Ctx<T> for io::Result<T> {
    fn ctx<S: Into<String>>(self, what: impl FnOnce() -> S) -> R<T> {
        self.map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let msg = io::Error::from_raw_os_error(errno);
            Fail { errno, what: format!("{}: {}", what().into(), msg), moved: None }
        })
    }
}

impl From<RemoteError> for Fail {
    fn from(e: RemoteError) -> Fail {
        Fail { errno: e.errno.0, what: e.message, moved: e.moved }
    }
}

/// A failed operation with the brick it failed on: what a caller of the brick sees (as a
/// [`RemoteError`]: `brick VOLUME#INDEX (PATH): OP: WHAT`).
#[derive(Debug, thiserror::Error)]
#[error("brick {volume}#{index} ({}): {op}: {what}", root.display())]
pub(crate) struct BrickError {
    pub volume: String,
    pub index: u32,
    pub root: PathBuf,
    pub op: String,
    pub errno: i32,
    pub what: String,
    pub moved: Option<u32>,
}

impl From<BrickError> for RemoteError {
    fn from(e: BrickError) -> RemoteError {
        RemoteError { moved: e.moved, ..RemoteError::new(Errno(e.errno), e.to_string()) }
    }
}

/// A name for messages: UTF-8 shown as is, other bytes escaped.
pub(crate) fn show(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

/// An `io::Error` as a [`RemoteError`] saying what was being done (opening, preparing
/// or resetting a brick, before any operation context exists).
pub(crate) fn io_err(e: io::Error, what: impl std::fmt::Display) -> RemoteError {
    RemoteError::new(Errno::from_io(&e), format!("{what}: {e}"))
}
