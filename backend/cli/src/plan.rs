//! From a parsed command line to what to do: the request to send, how to name the command
//! in messages, how to print the reply, and whether to ask first. Pure, so the whole
//! grammar is unit-tested without a server.

use crate::args::{
    AuditCmd, CertCmd, Cli, ClientCmd, Command, HealAction, PeerCmd, PoolCmd, TokenCmd, VolumeCmd,
};
use crate::grammar::{self, UsageError};
use cairn_proto::mgmt::MgmtRequest;
use std::time::Duration;

/// How the reply of a command is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A state change: `<command>: <name>: success[: message]`.
    Done,
    PeerStatus,
    PoolList,
    VolumeInfo,
    VolumeStatus,
    VolumeList,
    HealInfo,
    HealStatistics,
    JoinToken,
    JoinTokens,
    Audit,
    /// Certificate records (`client certificate list|revoke`).
    Certs,
    /// `volume rebalance NAME status`.
    RebalanceStatus,
    /// `volume remove-brick NAME BRICK... status`.
    RemoveBrickStatus,
}

impl Output {
    /// Read commands print data (and data as JSON with `--json`).
    pub fn is_read(self) -> bool {
        self != Output::Done
    }
}

/// One command ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Command words as gluster prints them, e.g. `volume create`.
    pub command: &'static str,
    /// The object of the command in messages (volume, peer, address), if any.
    pub name: Option<String>,
    pub request: MgmtRequest,
    pub output: Output,
    /// A question to ask on a terminal before sending, for destructive commands.
    pub confirm: Option<&'static str>,
}

/// Connection and presentation settings from the global options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `host:port` of the cairnd to talk to.
    pub addr: String,
    pub json: bool,
    /// Whether confirmations may be asked at all (not `--mode=script`, not `--yes`).
    pub may_ask: bool,
    pub timeout: Duration,
}

pub const REMOVE_FORCE_QUESTION: &str = "Removing brick(s) with 'commit force' drops the \
    files still on them from the volume. Do you want to continue? (y/n) ";
pub const STOP_QUESTION: &str =
    "Stopping volume will make its data inaccessible. Do you want to continue? (y/n) ";
pub const DELETE_QUESTION: &str = "Deleting volume will erase all information about the \
    volume. Do you want to continue? (y/n) ";
pub const DETACH_QUESTION: &str = "All clients mounted through the peer which is getting \
    detached need to be remounted using one of the other active peers in the pool. Do you \
    want to continue? (y/n) ";

pub fn settings(cli: &Cli) -> Result<Settings, UsageError> {
    let addr = grammar::with_default_port(&cli.host)
        .map_err(|e| UsageError { message: format!("cairn: --host: {e}"), usage: None })?;
    if cli.timeout == 0 {
        return Err(UsageError {
            message: "cairn: --timeout must be at least 1".into(),
            usage: None,
        });
    }
    Ok(Settings {
        addr,
        json: cli.json,
        may_ask: cli.mode == crate::args::Mode::Interactive && !cli.yes,
        timeout: Duration::from_secs(cli.timeout),
    })
}

fn volume(command: &'static str, name: &str) -> Result<String, UsageError> {
    grammar::check_volume_name(name).map_err(|e| UsageError::new(command, name, e))?;
    Ok(name.to_string())
}

/// `NAME|all|nothing` → `None` for every volume.
fn volume_or_all(
    command: &'static str,
    name: &Option<String>,
) -> Result<Option<String>, UsageError> {
    match name.as_deref() {
        None | Some("all") => Ok(None),
        Some(n) => volume(command, n).map(Some),
    }
}

fn done(command: &'static str, name: String, request: MgmtRequest) -> Plan {
    Plan { command, name: Some(name), request, output: Output::Done, confirm: None }
}

fn read(command: &'static str, name: Option<String>, request: MgmtRequest, output: Output) -> Plan {
    Plan { command, name, request, output, confirm: None }
}

/// `90`, `90s`, `30m`, `1h`, `7d` as seconds (at least 1).
pub fn duration_secs(s: &str) -> Result<u64, String> {
    let (num, unit) = match s.trim().char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s.trim()[..i], c),
        _ => (s.trim(), 's'),
    };
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => return Err(format!("unknown unit '{unit}' (s, m, h or d)")),
    };
    match num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)) {
        Some(n) if n > 0 => Ok(n),
        _ => Err("not a positive duration (e.g. 90s, 30m, 1h, 7d)".into()),
    }
}

/// `--since`: a duration back from now, or Unix seconds (a bare number above 10^9).
fn since_unix(s: &str) -> Result<u64, String> {
    if let Ok(n) = s.parse::<u64>() {
        if n > 1_000_000_000 {
            return Ok(n);
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(now.saturating_sub(duration_secs(s)?))
}

pub fn plan(command: &Command) -> Result<Plan, UsageError> {
    Ok(match command {
        // (Not named `host`: that id belongs to the global --host option.)
        Command::Peer(PeerCmd::Probe { peer, token }) => {
            let addr = grammar::with_default_port(peer)
                .map_err(|e| UsageError::new("peer probe", peer, e))?;
            let token = token.as_ref().map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
            done("peer probe", peer.clone(), MgmtRequest::PeerProbe { addr, token })
        }
        Command::Peer(PeerCmd::Token(TokenCmd::Create { ttl })) => {
            let secs =
                duration_secs(ttl).map_err(|e| UsageError::new("peer token create", ttl, e))?;
            let req = MgmtRequest::PeerTokenCreate { ttl_secs: secs };
            read("peer token create", None, req, Output::JoinToken)
        }
        Command::Peer(PeerCmd::Token(TokenCmd::List)) => {
            read("peer token list", None, MgmtRequest::PeerTokenList, Output::JoinTokens)
        }
        Command::Peer(PeerCmd::Token(TokenCmd::Revoke { id })) => {
            done("peer token revoke", id.clone(), MgmtRequest::PeerTokenRevoke { id: id.clone() })
        }
        Command::Client(ClientCmd::Certificate(CertCmd::List)) => {
            read("client certificate list", None, MgmtRequest::CertList, Output::Certs)
        }
        Command::Client(ClientCmd::Certificate(CertCmd::Revoke { what })) => {
            if what.trim().is_empty() {
                return Err(UsageError::new(
                    "client certificate revoke",
                    what,
                    "empty name or serial",
                ));
            }
            let req = MgmtRequest::CertRevoke { what: what.trim().to_string() };
            Plan { output: Output::Certs, ..done("client certificate revoke", what.clone(), req) }
        }
        Command::Audit(AuditCmd::Log { since, limit }) => {
            let since = match since {
                None => None,
                Some(s) => Some(since_unix(s).map_err(|e| UsageError::new("audit log", s, e))?),
            };
            read("audit log", None, MgmtRequest::AuditLog { since, limit: *limit }, Output::Audit)
        }
        Command::Peer(PeerCmd::Detach { name, force }) => {
            if name.is_empty() {
                return Err(UsageError::new("peer detach", name, "empty peer name"));
            }
            Plan {
                confirm: Some(DETACH_QUESTION),
                ..done(
                    "peer detach",
                    name.clone(),
                    MgmtRequest::PeerDetach { name: name.clone(), force: force.is_some() },
                )
            }
        }
        Command::Peer(PeerCmd::Status) => {
            read("peer status", None, MgmtRequest::PeerStatus, Output::PeerStatus)
        }
        Command::Pool(PoolCmd::List) => {
            read("pool list", None, MgmtRequest::PeerStatus, Output::PoolList)
        }
        Command::Volume(v) => plan_volume(v)?,
        // Several calls and local work: run by `crate::gateway`, never planned.
        Command::Nfs(_)
        | Command::Smb(_)
        | Command::Iscsi(_)
        | Command::Gateway(_)
        | Command::Client(_)
        | Command::Cluster(_) => {
            return Err(UsageError {
                message: "cairn: gateway and certificate commands are not single requests".into(),
                usage: None,
            })
        }
    })
}

fn plan_volume(cmd: &VolumeCmd) -> Result<Plan, UsageError> {
    Ok(match cmd {
        VolumeCmd::Create { name, args } => {
            let create = grammar::parse_create(name, args)?;
            done("volume create", name.clone(), MgmtRequest::VolumeCreate(create))
        }
        VolumeCmd::Start { name, force } => {
            let name = volume("volume start", name)?;
            let req = MgmtRequest::VolumeStart { name: name.clone(), force: force.is_some() };
            done("volume start", name, req)
        }
        VolumeCmd::Stop { name, force } => {
            let name = volume("volume stop", name)?;
            let req = MgmtRequest::VolumeStop { name: name.clone(), force: force.is_some() };
            Plan { confirm: Some(STOP_QUESTION), ..done("volume stop", name, req) }
        }
        VolumeCmd::Delete { name, force } => {
            let name = volume("volume delete", name)?;
            let req = MgmtRequest::VolumeDelete { name: name.clone() };
            let confirm = if force.is_some() { None } else { Some(DELETE_QUESTION) };
            Plan { confirm, ..done("volume delete", name, req) }
        }
        VolumeCmd::Info { name } => {
            let n = volume_or_all("volume info", name)?;
            let label = Some(n.clone().unwrap_or_else(|| "all".into()));
            read("volume info", label, MgmtRequest::VolumeInfo { name: n }, Output::VolumeInfo)
        }
        VolumeCmd::Status { name } => {
            let n = volume_or_all("volume status", name)?;
            let label = Some(n.clone().unwrap_or_else(|| "all".into()));
            let req = MgmtRequest::VolumeStatus { name: n };
            read("volume status", label, req, Output::VolumeStatus)
        }
        VolumeCmd::List => read("volume list", None, MgmtRequest::VolumeList, Output::VolumeList),
        VolumeCmd::Set { name, key, value } => {
            let name = volume("volume set", name)?;
            check_key("volume set", &name, key)?;
            let req = MgmtRequest::VolumeSet {
                name: name.clone(),
                key: key.clone(),
                value: value.clone(),
            };
            done("volume set", name, req)
        }
        VolumeCmd::Reset { name, key } => {
            let name = volume("volume reset", name)?;
            check_key("volume reset", &name, key)?;
            let req = MgmtRequest::VolumeReset { name: name.clone(), key: key.clone() };
            done("volume reset", name, req)
        }
        VolumeCmd::Heal { name, action: HealAction::Info } => {
            let name = volume("volume heal", name)?;
            let req = MgmtRequest::HealInfo { name: name.clone() };
            read("volume heal", Some(name), req, Output::HealInfo)
        }
        VolumeCmd::Heal { name, action: HealAction::Statistics } => {
            let name = volume("volume heal", name)?;
            let req = MgmtRequest::HealStatistics { name: name.clone() };
            read("volume heal", Some(name), req, Output::HealStatistics)
        }
        VolumeCmd::Heal { name, action: HealAction::Full } => {
            let name = volume("volume heal", name)?;
            done("volume heal", name.clone(), MgmtRequest::HealFull { name })
        }
        VolumeCmd::ResetBrick { name, args } => {
            let name = volume("volume reset-brick", name)?;
            let req = grammar::parse_reset_brick(&name, args)?;
            done("volume reset-brick", name, req)
        }
        VolumeCmd::ReplaceBrick { name, old, new, commit, force } => {
            let name = volume("volume replace-brick", name)?;
            let req = grammar::parse_replace_brick(&name, old, new, commit, force)?;
            done("volume replace-brick", name, req)
        }
        VolumeCmd::AddBrick { name, args } => {
            let name = volume("volume add-brick", name)?;
            let req = grammar::parse_add_brick(&name, args)?;
            done("volume add-brick", name, req)
        }
        VolumeCmd::RemoveBrick { name, args } => {
            let name = volume("volume remove-brick", name)?;
            let req = grammar::parse_remove_brick(&name, args)?;
            match &req {
                MgmtRequest::VolumeRemoveBrick { action, .. } if action == "status" => {
                    read("volume remove-brick", Some(name), req, Output::RemoveBrickStatus)
                }
                MgmtRequest::VolumeRemoveBrick { force: true, .. } => Plan {
                    confirm: Some(REMOVE_FORCE_QUESTION),
                    ..done("volume remove-brick", name, req)
                },
                _ => done("volume remove-brick", name, req),
            }
        }
        VolumeCmd::Rebalance { name, action, throttle } => {
            use crate::args::{RebalanceAction as A, RebalanceThrottle as T};
            let name = volume("volume rebalance", name)?;
            let verb = match action {
                A::Start => "start",
                A::Status => "status",
                A::Stop => "stop",
                A::Pause => "pause",
                A::Resume => "resume",
            };
            let verb = match (action, throttle) {
                (A::Start, Some(t)) => {
                    let t = match t {
                        T::Lazy => "lazy",
                        T::Normal => "normal",
                        T::Aggressive => "aggressive",
                    };
                    format!("start:{t}")
                }
                (_, Some(_)) => {
                    return Err(UsageError::new(
                        "volume rebalance",
                        &name,
                        "--throttle goes with start".to_string(),
                    ))
                }
                _ => verb.to_string(),
            };
            let req = MgmtRequest::VolumeRebalance { name: name.clone(), action: verb };
            match action {
                A::Status => read("volume rebalance", Some(name), req, Output::RebalanceStatus),
                _ => done("volume rebalance", name, req),
            }
        }
    })
}

fn check_key(command: &'static str, name: &str, key: &str) -> Result<(), UsageError> {
    if key.is_empty() || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UsageError::new(command, name, format!("invalid option name '{key}'")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Cli;
    use cairn_proto::mgmt::VolumeCreate;
    use clap::Parser;

    fn parse(line: &str) -> Cli {
        Cli::try_parse_from(std::iter::once("cairn").chain(line.split_whitespace()))
            .unwrap_or_else(|e| panic!("{line}: {e}"))
    }

    fn req(line: &str) -> MgmtRequest {
        plan(&parse(line).command).unwrap_or_else(|e| panic!("{line}: {e}")).request
    }

    fn usage_err(line: &str) -> String {
        plan(&parse(line).command).expect_err(line).message
    }

    fn clap_fails(line: &str) {
        let e = Cli::try_parse_from(std::iter::once("cairn").chain(line.split_whitespace()))
            .expect_err(line);
        assert_eq!(e.exit_code(), 2, "{line}: {e}");
    }

    #[test]
    fn peer_commands() {
        assert_eq!(
            req("peer probe node2"),
            MgmtRequest::PeerProbe { addr: "node2:7420".into(), token: None }
        );
        assert_eq!(
            req("peer probe n:99 --token ab.cd"),
            MgmtRequest::PeerProbe { addr: "n:99".into(), token: Some("ab.cd".into()) }
        );
        assert_eq!(
            req("peer token create --ttl 1h"),
            MgmtRequest::PeerTokenCreate { ttl_secs: 3600 }
        );
        assert_eq!(req("peer token create"), MgmtRequest::PeerTokenCreate { ttl_secs: 86400 });
        assert_eq!(req("peer token list"), MgmtRequest::PeerTokenList);
        assert_eq!(
            req("peer token revoke 0123abcd"),
            MgmtRequest::PeerTokenRevoke { id: "0123abcd".into() }
        );
        assert_eq!(
            req("audit log --since 1700000000 --limit 5"),
            MgmtRequest::AuditLog { since: Some(1_700_000_000), limit: 5 }
        );
        assert!(usage_err("peer token create --ttl 0").starts_with("peer token create: 0: failed:"));
        assert!(usage_err("peer token create --ttl 3y").contains("unknown unit"));
        let cli = parse("--host 127.0.0.1:1 peer probe node2");
        assert_eq!(settings(&cli).unwrap().addr, "127.0.0.1:1");
        assert_eq!(
            req("peer detach node2 force"),
            MgmtRequest::PeerDetach { name: "node2".into(), force: true }
        );
        assert_eq!(
            req("peer detach node2"),
            MgmtRequest::PeerDetach { name: "node2".into(), force: false }
        );
        assert_eq!(req("peer status"), MgmtRequest::PeerStatus);
        assert_eq!(req("pool list"), MgmtRequest::PeerStatus);
        assert_eq!(plan(&parse("pool list").command).unwrap().output, Output::PoolList);
        assert!(usage_err("peer probe node2:0").starts_with("peer probe: node2:0: failed:"));
        clap_fails("peer detach node2 now");
        clap_fails("peer probe");
    }

    #[test]
    fn volume_commands() {
        assert_eq!(
            req("volume create vol0 replica 2 a:/b b:/b force"),
            MgmtRequest::VolumeCreate(VolumeCreate {
                name: "vol0".into(),
                replica: 2,
                bricks: vec!["a:/b".into(), "b:/b".into()],
                force: true
            })
        );
        assert_eq!(
            req("volume start vol0"),
            MgmtRequest::VolumeStart { name: "vol0".into(), force: false }
        );
        assert_eq!(
            req("volume start vol0 force"),
            MgmtRequest::VolumeStart { name: "vol0".into(), force: true }
        );
        assert_eq!(
            req("volume stop vol0 force"),
            MgmtRequest::VolumeStop { name: "vol0".into(), force: true }
        );
        assert_eq!(req("volume delete vol0"), MgmtRequest::VolumeDelete { name: "vol0".into() });
        assert_eq!(req("volume info"), MgmtRequest::VolumeInfo { name: None });
        assert_eq!(req("volume info all"), MgmtRequest::VolumeInfo { name: None });
        assert_eq!(req("volume info v1"), MgmtRequest::VolumeInfo { name: Some("v1".into()) });
        assert_eq!(req("volume status all"), MgmtRequest::VolumeStatus { name: None });
        assert_eq!(req("volume status v1"), MgmtRequest::VolumeStatus { name: Some("v1".into()) });
        assert_eq!(req("volume list"), MgmtRequest::VolumeList);
        assert_eq!(
            req("volume set v1 performance.cache-size 256MB"),
            MgmtRequest::VolumeSet {
                name: "v1".into(),
                key: "performance.cache-size".into(),
                value: "256MB".into()
            }
        );
        assert_eq!(
            req("volume reset v1 network.ping-timeout"),
            MgmtRequest::VolumeReset { name: "v1".into(), key: "network.ping-timeout".into() }
        );
        assert_eq!(req("volume heal v1 info"), MgmtRequest::HealInfo { name: "v1".into() });
        assert_eq!(
            req("volume heal v1 statistics"),
            MgmtRequest::HealStatistics { name: "v1".into() }
        );
        assert_eq!(req("volume heal v1 full"), MgmtRequest::HealFull { name: "v1".into() });
        for a in ["start", "status", "stop"] {
            assert_eq!(
                req(&format!("volume rebalance v1 {a}")),
                MgmtRequest::VolumeRebalance { name: "v1".into(), action: a.into() }
            );
        }
        assert_eq!(
            plan(&parse("volume rebalance v1 status").command).unwrap().output,
            Output::RebalanceStatus
        );
        assert_eq!(plan(&parse("volume rebalance v1 start").command).unwrap().output, Output::Done);
        assert_eq!(
            plan(&parse("volume heal v1 statistics").command).unwrap().output,
            Output::HealStatistics
        );
        assert_eq!(
            req("volume reset-brick v1 n2:/b/1 start"),
            MgmtRequest::ResetBrick {
                name: "v1".into(),
                brick: "n2:/b/1".into(),
                commit: false,
                force: false
            }
        );
        assert_eq!(
            req("volume reset-brick v1 n2:/b/1/ n2://b/1 commit force"),
            MgmtRequest::ResetBrick {
                name: "v1".into(),
                brick: "n2:/b/1".into(),
                commit: true,
                force: true
            }
        );
        assert_eq!(
            req("volume replace-brick v1 n2:/b/1 n4:/b/9 commit force"),
            MgmtRequest::ReplaceBrick {
                name: "v1".into(),
                old: "n2:/b/1".into(),
                new: "n4:/b/9".into()
            }
        );
    }

    #[test]
    fn volume_usage_errors() {
        clap_fails("volume start");
        clap_fails("volume start v1 now");
        clap_fails("volume heal v1 split-brain");
        clap_fails("volume reset-brick v1 n2:/b");
        assert!(usage_err("volume reset-brick v1 n2:/b n3:/b commit").contains("same brick"));
        assert!(usage_err("volume reset-brick v1 n2:/b stop").contains("start"));
        assert!(usage_err("volume reset-brick v1 n2:/b n2:/b commit now").contains("force"));
        assert!(usage_err("volume reset-brick v1 n2:b start").contains("absolute"));
        clap_fails("volume replace-brick v1 a:/x b:/y commit");
        assert!(usage_err("volume replace-brick v1 a:/x b:/y commit now").contains("commit force"));
        assert!(usage_err("volume replace-brick v1 a:/x a:/x commit force").contains("differ"));
        clap_fails("volume create v1");
        clap_fails("volume set v1 key");
        clap_fails("volume frobnicate v1");
        assert!(usage_err("volume start a.b").starts_with("volume start: a.b: failed: invalid"));
        assert!(usage_err("volume info a.b").contains("invalid volume name"));
        assert!(usage_err("volume create all a:/b").contains("reserved"));
    }

    #[test]
    fn confirmations() {
        let q = |l: &str| plan(&parse(l).command).unwrap().confirm;
        assert_eq!(q("volume stop v"), Some(STOP_QUESTION));
        assert_eq!(q("volume stop v force"), Some(STOP_QUESTION));
        assert_eq!(q("volume delete v"), Some(DELETE_QUESTION));
        assert_eq!(q("volume delete v force"), None);
        assert_eq!(q("peer detach n"), Some(DETACH_QUESTION));
        assert_eq!(q("volume start v"), None);
        assert_eq!(q("volume info"), None);
    }

    #[test]
    fn global_options() {
        let s = settings(&parse("--host node1 volume list")).unwrap();
        assert_eq!(s.addr, "node1:7420");
        assert!(s.may_ask && !s.json);
        let s = settings(&parse("volume list --json --mode=script --host 1.2.3.4:5")).unwrap();
        assert_eq!(s.addr, "1.2.3.4:5");
        assert!(!s.may_ask && s.json);
        assert!(!settings(&parse("-y volume list")).unwrap().may_ask);
        assert!(settings(&parse("--host a:b volume list")).is_err());
        assert!(settings(&parse("--timeout 0 volume list")).is_err());
        clap_fails("--mode=batch volume list");
    }
}
