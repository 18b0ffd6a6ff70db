//! `cairn peer` (with its join tokens), `cairn pool` and `cairn audit`: the trusted pool.

use super::Force;
use clap::Subcommand;

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PeerCmd {
    /// Add a node to the trusted storage pool, using up a join token.
    #[command(
        long_about = "Add the node whose cairnd listens at HOST[:PORT] to the trusted storage \
pool of the node cairn talks to. A node joins with a join token (`cairn peer token create`): \
single use, expiring; a used, revoked or expired one is refused. Probing a node that is \
already a peer needs no token, and succeeds and says so.",
        after_help = "EXAMPLES:\n  T=$(cairn peer token create --ttl 1h)\n  cairn peer probe node2 --token \"$T\"\n  CAIRN_JOIN_TOKEN=\"$T\" cairn peer probe 10.0.0.12:7420"
    )]
    Probe {
        /// The node's cairnd address; port 7420 when omitted.
        #[arg(value_name = "HOST[:PORT]")]
        peer: String,
        /// Join token (ID.SECRET) from `cairn peer token create`.
        #[arg(long, env = "CAIRN_JOIN_TOKEN", value_name = "TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Join tokens: create (shown once), list (never the secret), revoke.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Remove a node from the trusted storage pool.
    #[command(
        long_about = "Remove the peer NAME from the pool. cairnd refuses while the peer holds \
bricks of a volume or is unreachable, unless `force` is given. On a terminal cairn asks for \
confirmation first (see --mode=script, --yes).",
        after_help = "EXAMPLES:\n  cairn peer detach node3\n  cairn --mode=script peer detach node3 force"
    )]
    Detach {
        /// Peer name as shown by `cairn peer status`.
        name: String,
        /// Detach even if the peer is down or holds bricks.
        #[arg(value_enum)]
        force: Option<Force>,
    },
    /// Show the other peers of the pool and whether they are connected.
    #[command(after_help = "EXAMPLES:\n  cairn peer status\n  cairn --json peer status")]
    Status,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum TokenCmd {
    /// Create a single-use join token and print it (only this once).
    #[command(
        long_about = "Create a join token for one node to join the pool (`cairn peer probe \
HOST --token TOKEN`, or the new node's cairnd started with --join-token-file). It is printed \
once on stdout; the cluster keeps only its hash. It expires after --ttl (default 24h, at most \
7 days) and is used up by the first join.",
        after_help = "EXAMPLES:\n  cairn peer token create\n  cairn peer token create --ttl 1h\n  cairn --json peer token create --ttl 30m"
    )]
    Create {
        /// Lifetime: seconds, or a number with s, m, h or d.
        #[arg(long, default_value = "24h", value_name = "DURATION")]
        ttl: String,
    },
    /// List join tokens: id, expiry, and whether used or revoked (never the secret).
    #[command(after_help = "EXAMPLES:\n  cairn peer token list\n  cairn --json peer token list")]
    List,
    /// Revoke a join token by its id (the part before the dot).
    #[command(after_help = "EXAMPLES:\n  cairn peer token revoke 1a2b3c4d")]
    Revoke {
        #[arg(value_name = "ID")]
        id: String,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum AuditCmd {
    /// Show the audit log of management actions of the node cairn talks to.
    #[command(
        long_about = "Show the management actions the node recorded (who, what, when, result), \
oldest first: every change, and every request refused for want of rights. Read only from \
the node itself or another node of the cluster.",
        after_help = "EXAMPLES:\n  cairn audit log\n  cairn audit log --since 1h\n  cairn --json audit log --limit 10"
    )]
    Log {
        /// Only records of the last DURATION (s, m, h, d), or since Unix time N.
        #[arg(long, value_name = "DURATION|UNIX")]
        since: Option<String>,
        /// At most this many records (the newest).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PoolCmd {
    /// List every node of the pool, this one included.
    #[command(after_help = "EXAMPLES:\n  cairn pool list\n  cairn --json pool list")]
    List,
}
