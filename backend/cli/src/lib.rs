//! The `cairn` command, in the spirit of the `gluster` CLI.
//!
//! The crate is split so that everything but the network call is pure and unit-tested:
//! [`args`] declares the command line (clap), [`grammar`] checks it and turns it into a
//! [`plan::Plan`] (the `MgmtRequest` to send plus how to print its reply), [`format`] (and
//! [`rebalance`]) and [`json`] render replies, [`client`] talks to `cairnd`, and [`run`] ties them together
//! and decides the exit code.

pub mod args;
pub mod certs;
pub mod client;
pub mod format;
pub mod gateway;
pub mod grammar;
pub mod ha;
pub mod iscsi;
pub mod json;
pub mod plan;
pub mod rebalance;

mod exec;

pub use exec::run;

/// Exit codes a script can rely on.
pub mod exit {
    /// The command succeeded.
    pub const OK: i32 = 0;
    /// The operation failed: `cairnd` answered with an error (or the user declined a
    /// confirmation).
    pub const FAILED: i32 = 1;
    /// The command line is wrong: unknown command, bad argument, failed local validation.
    pub const USAGE: i32 = 2;
    /// `cairnd` could not be reached (nothing listening, timeout, connection lost).
    pub const UNREACHABLE: i32 = 3;
    /// `cairn gateway fence --wait-applied`: the fence is stored, but a live `cairnd` did
    /// not apply it in time.
    pub const NOT_APPLIED: i32 = 4;
}
