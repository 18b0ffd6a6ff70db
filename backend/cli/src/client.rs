//! The one network call the CLI makes: connect to `cairnd`, send a management request,
//! wait for its reply.

use bytes::Bytes;
use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
use cairn_proto::msg::{PeerKind, Reply, Request};
use cairn_proto::rpc::Connection;
use cairn_proto::{Errno, RemoteError};
use std::time::Duration;

/// Longest wait for the TCP connect and HELLO.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No connection to `cairnd` (refused, timed out, HELLO failed) or it was lost before
    /// the reply came: exit code 3.
    Unreachable { addr: String, error: RemoteError },
    /// No reply within the timeout; the operation may still complete.
    Timeout { addr: String, after: Duration },
    /// `cairnd` answered with an error: exit code 1.
    Remote(RemoteError),
    /// `cairnd` answered with something that is not a management reply.
    Unexpected(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Refused by TLS or without credentials: the message says what to fix.
            CallError::Unreachable { error, .. } if error.errno == Errno::EACCES => {
                f.write_str(&error.message)
            }
            CallError::Unreachable { addr, error } => {
                let why = error.message.strip_prefix(&format!("connect to {addr}: "));
                write!(
                    f,
                    "cannot reach cairnd at {addr}: {}; check that cairnd is running there \
                     (or pass --host / set CAIRN_HOST)",
                    why.unwrap_or(&error.message)
                )
            }
            CallError::Timeout { addr, after } => write!(
                f,
                "no reply from cairnd at {addr} within {} s; the operation may still complete \
                 (check with `cairn volume info` / `cairn peer status`)",
                after.as_secs()
            ),
            CallError::Remote(e) if e.message.is_empty() => write!(f, "{}", e.errno),
            CallError::Remote(e) => f.write_str(&e.message),
            CallError::Unexpected(m) => write!(f, "unexpected reply from cairnd: {m}"),
        }
    }
}

/// Send one management request to the `cairnd` at `addr`.
pub async fn call(addr: &str, req: MgmtRequest, timeout: Duration) -> Result<MgmtReply, CallError> {
    let connect_timeout = timeout.min(CONNECT_TIMEOUT);
    let conn = Connection::connect(addr, PeerKind::Cli, "cairn-cli", None, connect_timeout)
        .await
        .map_err(|error| CallError::Unreachable { addr: addr.to_string(), error })?;
    let result = tokio::time::timeout(timeout, conn.call(Request::Mgmt(req), Bytes::new())).await;
    // An error reply leaves the connection open; a lost connection does not.
    let lost = conn.is_closed();
    conn.close();
    match result {
        Err(_) => Err(CallError::Timeout { addr: addr.to_string(), after: timeout }),
        Ok(Ok((Reply::Mgmt(r), _))) => Ok(r),
        Ok(Ok((other, _))) => Err(CallError::Unexpected(format!("{other:?}"))),
        // The connection went away before the reply: cairnd died or closed on us.
        Ok(Err(e)) if lost && e.errno == Errno::ENOTCONN => {
            Err(CallError::Unreachable { addr: addr.to_string(), error: e })
        }
        Ok(Err(e)) => Err(CallError::Remote(e)),
    }
}
