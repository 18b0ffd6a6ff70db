//! The gateway crate's one error type. Its message is what the `cairn` CLI prints, so each
//! says what was refused or failed and on what (the value, the file, the program).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument, or a field of a stored document, that fails its check: the message
    /// names the value and why (`invalid LUN name 'a b': ...`).
    #[error("{0}")]
    Invalid(String),
    /// A file or directory of a gateway's configuration that could not be created, read,
    /// written or removed.
    #[error("cannot {op} {}: {source}", path.display())]
    File {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A program (targetcli, testparm, smbcontrol, dbus-send) that could not be started.
    #[error("cannot run {}: {source}{hint}", program.display())]
    Spawn {
        program: PathBuf,
        /// What to do about it, when there is something (` (install the dbus package)`).
        hint: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Talking to a running program failed (its standard input, its exit).
    #[error("{what}: {source}")]
    Pipe {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A program ran and refused or failed: the message is what it said.
    #[error("{message}")]
    Program { program: &'static str, message: String },
}

impl Error {
    /// The errno of an I/O failure (a file, a program that would not start), if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::File { source, .. }
            | Error::Spawn { source, .. }
            | Error::Pipe { source, .. } => source.raw_os_error(),
            Error::Invalid(_) | Error::Program { .. } => None,
        }
    }

    /// The file error `op` (create, read, write, remove) of `path`.
    pub(crate) fn file(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::File { op, path, source }
    }
}

/// [`Error::Invalid`] with `message`.
pub(crate) fn invalid(message: String) -> Error {
    Error::Invalid(message)
}
