//! Run one command line: parse, check, ask, call, print, and pick the exit code.

use crate::args::Cli;
use crate::client::{self, CallError};
use crate::grammar::{failed_message, UsageError};
use crate::json::{
    self, AuditDoc, CertsDoc, HealDoc, HealStatsDoc, JoinTokenDoc, JoinTokensDoc, PeersDoc,
    RebalanceDoc, RemoveBrickDoc, ResultDoc, VolumeListDoc, VolumeStatusDoc,
};
use crate::plan::{self, Output, Plan, Settings};
use crate::{exit, format};
use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
use clap::Parser;
use std::ffi::OsString;
use std::io::{BufRead, Write};

/// Run `cairn` with `args` (including the program name) and return the exit code.
/// `interactive` says whether `input` is a terminal a question may be asked on.
pub fn run<I, T>(
    args: I,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: &mut dyn BufRead,
    interactive: bool,
) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are "errors" with exit code 0 that go to stdout.
            let text = e.render().to_string();
            let _ = if e.use_stderr() { write!(err, "{text}") } else { write!(out, "{text}") };
            return e.exit_code();
        }
    };
    // How to connect: plain, or TLS with the credentials given (or found by default),
    // loaded when connecting.
    match (cli.transport, &cli.credentials) {
        (crate::args::TransportArg::Plain, _) => {
            cairn_proto::tls::set_default(cairn_proto::tls::Transport::Plain)
        }
        (crate::args::TransportArg::Tls, Some(path)) => {
            cairn_proto::tls::set_credentials_path(path)
        }
        (crate::args::TransportArg::Tls, None) => {}
    }
    match &cli.command {
        crate::args::Command::Client(crate::args::ClientCmd::Certificate(
            crate::args::CertCmd::Issue(a),
        )) => {
            return match plan::settings(&cli) {
                Ok(s) => crate::certs::issue(a, &s, out, err),
                Err(e) => usage(err, &e),
            }
        }
        crate::args::Command::Client(crate::args::ClientCmd::Certificate(
            crate::args::CertCmd::Renew(a),
        )) => {
            return match plan::settings(&cli) {
                Ok(s) => crate::certs::renew(a, &s, cli.credentials.as_deref(), out, err),
                Err(e) => usage(err, &e),
            }
        }
        crate::args::Command::Cluster(crate::args::ClusterCmd::Ca(crate::args::CaCmd::Rotate(
            a,
        ))) => return crate::certs::rotate(a, cli.json, out, err),
        crate::args::Command::Nfs(nfs) => {
            return match plan::settings(&cli) {
                Ok(s) => crate::gateway::nfs(&s, nfs, out, err),
                Err(e) => usage(err, &e),
            }
        }
        crate::args::Command::Smb(smb) => {
            return match plan::settings(&cli) {
                Ok(s) => crate::gateway::smb(&s, smb, out, err),
                Err(e) => usage(err, &e),
            }
        }
        crate::args::Command::Gateway(crate::args::GatewayCmd::Ha(
            crate::args::GatewayHaCmd::Status { crm_mon, ctdb },
        )) => return crate::ha::status(crm_mon, ctdb, cli.json, out, err),
        crate::args::Command::Gateway(crate::args::GatewayCmd::Ha(
            crate::args::GatewayHaCmd::Drain(a),
        )) => return crate::ha::drain(a, true, cli.json, out, err),
        crate::args::Command::Gateway(crate::args::GatewayCmd::Ha(
            crate::args::GatewayHaCmd::Undrain(a),
        )) => return crate::ha::drain(a, false, cli.json, out, err),
        crate::args::Command::Gateway(crate::args::GatewayCmd::Ha(
            crate::args::GatewayHaCmd::Setup(a),
        )) => return crate::ha::setup(a, cli.json, out, err),
        crate::args::Command::Gateway(
            g @ (crate::args::GatewayCmd::Fence(_)
            | crate::args::GatewayCmd::Unfence(_)
            | crate::args::GatewayCmd::Fences),
        ) => {
            return match plan::settings(&cli) {
                Ok(s) => crate::ha::fence(&s, g, out, err),
                Err(e) => usage(err, &e),
            }
        }
        crate::args::Command::Iscsi(a) => {
            return match plan::settings(&cli) {
                Ok(s) => crate::iscsi::iscsi(&s, a, out, err),
                Err(e) => usage(err, &e),
            }
        }
        _ => {}
    }
    let prepared = plan::settings(&cli).and_then(|s| Ok((s, plan::plan(&cli.command)?)));
    let (settings, plan) = match prepared {
        Ok(p) => p,
        Err(e) => return usage(err, &e),
    };
    if let Some(question) = plan.confirm {
        if settings.may_ask && interactive && !confirm(out, input, question) {
            let _ = writeln!(
                err,
                "{}",
                failed_message(plan.command, plan.name.as_deref(), "cancelled")
            );
            return exit::FAILED;
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(err, "cairn: cannot start the I/O runtime: {e}");
            return exit::FAILED;
        }
    };
    let result = rt.block_on(client::call(&settings.addr, plan.request.clone(), settings.timeout));
    match result {
        Ok(reply @ MgmtReply::JoinToken { .. }) => {
            let s = Settings { addr: rt.block_on(join_address(&settings)), ..settings.clone() };
            show(out, err, &s, &plan, reply)
        }
        Ok(reply) => show(out, err, &settings, &plan, reply),
        Err(e) => fail(out, err, &settings, &plan, &e),
    }
}

/// The member a new node enrolls through (`cairnd --join`, user-data `cluster.join`): the
/// node cairn talked to, by the address it advertises to the pool when cairn reached it
/// over loopback (on the node itself, as on an appliance: `127.0.0.1:7420` is no address
/// for another machine). Falls back to the address cairn used.
async fn join_address(s: &Settings) -> String {
    let loopback = match cairn_proto::HostPort::parse(&s.addr, cairn_proto::DEFAULT_PORT) {
        Ok(h) => h.host() == "localhost" || h.ip().is_some_and(|ip| ip.is_loopback()),
        Err(_) => false,
    };
    if !loopback {
        return s.addr.clone();
    }
    match client::call(&s.addr, MgmtRequest::PeerStatus, s.timeout).await {
        Ok(MgmtReply::Peers(peers)) => {
            peers.into_iter().find(|p| p.local).map(|p| p.addr).unwrap_or_else(|| s.addr.clone())
        }
        _ => s.addr.clone(),
    }
}

fn usage(err: &mut dyn Write, e: &UsageError) -> i32 {
    let _ = writeln!(err, "{e}");
    exit::USAGE
}

/// Ask `question`; true only for an answer starting with y.
fn confirm(out: &mut dyn Write, input: &mut dyn BufRead, question: &str) -> bool {
    let _ = write!(out, "{question}");
    let _ = out.flush();
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(n) if n > 0 => matches!(line.trim().chars().next(), Some('y' | 'Y')),
        _ => false,
    }
}

fn fail(out: &mut dyn Write, err: &mut dyn Write, s: &Settings, p: &Plan, e: &CallError) -> i32 {
    let code = match e {
        // Refused at the handshake or without credentials: reached, but not allowed.
        CallError::Unreachable { error, .. } if error.errno == cairn_proto::Errno::EACCES => {
            exit::FAILED
        }
        CallError::Unreachable { .. } => exit::UNREACHABLE,
        CallError::Timeout { .. } | CallError::Remote(_) | CallError::Unexpected(_) => exit::FAILED,
    };
    let _ = writeln!(err, "{}", failed_message(p.command, p.name.as_deref(), e));
    if s.json {
        let errno = match e {
            CallError::Remote(r) => Some(r.errno.name().to_string()),
            _ => None,
        };
        let doc = ResultDoc {
            command: p.command.to_string(),
            name: p.name.clone(),
            result: "failed".into(),
            errno,
            message: e.to_string(),
        };
        let _ = write!(out, "{}", json::render(&doc));
    }
    code
}

fn show(out: &mut dyn Write, err: &mut dyn Write, s: &Settings, p: &Plan, reply: MgmtReply) -> i32 {
    let text = match (p.output, reply) {
        (Output::Done, MgmtReply::Done { message }) => {
            if s.json {
                json::render(&ResultDoc {
                    command: p.command.to_string(),
                    name: p.name.clone(),
                    result: "success".into(),
                    errno: None,
                    message,
                })
            } else {
                let mut line = match &p.name {
                    Some(n) => format!("{}: {n}: success", p.command),
                    None => format!("{}: success", p.command),
                };
                if !message.is_empty() {
                    line.push_str(": ");
                    line.push_str(&message);
                }
                line.push('\n');
                line
            }
        }
        (Output::PeerStatus, MgmtReply::Peers(peers)) => {
            if s.json {
                let peers = peers.into_iter().filter(|p| !p.local).collect();
                json::render(&PeersDoc { peers })
            } else {
                format::peer_status(&peers)
            }
        }
        (Output::PoolList, MgmtReply::Peers(peers)) => {
            if s.json {
                json::render(&PeersDoc { peers })
            } else {
                format::pool_list(&peers)
            }
        }
        (Output::VolumeInfo, MgmtReply::Volumes(vols)) => {
            if s.json {
                json::volume_info(&vols)
            } else {
                format::volume_info(&vols)
            }
        }
        (Output::VolumeStatus, MgmtReply::Status(vols)) => {
            if s.json {
                json::render(&VolumeStatusDoc { volumes: vols })
            } else {
                format::volume_status(&vols)
            }
        }
        (Output::VolumeList, MgmtReply::Names(names)) => {
            if s.json {
                json::render(&VolumeListDoc { volumes: names })
            } else {
                format::volume_list(&names)
            }
        }
        (Output::HealInfo, MgmtReply::Heal(bricks)) => {
            if s.json {
                let volume = p.name.clone().unwrap_or_default();
                json::render(&HealDoc { volume, bricks })
            } else {
                format::heal_info(&bricks)
            }
        }
        (Output::RebalanceStatus, MgmtReply::Rebalance(nodes)) => {
            let volume = p.name.clone().unwrap_or_default();
            if s.json {
                json::render(&RebalanceDoc { volume, nodes })
            } else {
                crate::rebalance::status(&volume, &nodes)
            }
        }
        (Output::RemoveBrickStatus, MgmtReply::RemoveBrick(status)) => {
            let volume = p.name.clone().unwrap_or_default();
            if s.json {
                json::render(&RemoveBrickDoc { volume, status })
            } else {
                crate::rebalance::remove_brick_status(&volume, &status)
            }
        }
        (Output::HealStatistics, MgmtReply::HealStats(bricks)) => {
            let volume = p.name.clone().unwrap_or_default();
            if s.json {
                json::render(&HealStatsDoc { volume, bricks })
            } else {
                format::heal_statistics(&volume, &bricks)
            }
        }
        (Output::JoinToken, MgmtReply::JoinToken { token, info }) => {
            let ca_cert_hash = match cairn_proto::tls::default_transport() {
                Ok(cairn_proto::tls::Transport::Tls(t)) => Some(t.ca_cert_hash.clone()),
                _ => None,
            };
            if s.json {
                json::render(&JoinTokenDoc { token, info, ca_cert_hash, join: s.addr.clone() })
            } else {
                // The token alone on stdout, so `T=$(cairn peer token create)` works.
                let _ = writeln!(
                    err,
                    "join token {} expires {}; it is shown only now and works once",
                    info.id,
                    format::utc(info.expires)
                );
                if let Some(h) = ca_cert_hash {
                    let _ = writeln!(
                        err,
                        "a new node joins with it (the token in FILE, mode 0600):\n  \
                         cairnd --name NAME --join {} --ca-cert-hash {h} --join-token-file FILE\n\
                         or, on an appliance, user-data:\n  cairn:\n    cluster:\n      \
                         join: {}\n      ca_cert_hash: {h}\n      token: <the token>",
                        s.addr, s.addr
                    );
                }
                format!("{token}\n")
            }
        }
        (Output::JoinTokens, MgmtReply::JoinTokens(tokens)) => {
            if s.json {
                json::render(&JoinTokensDoc { tokens })
            } else {
                format::join_tokens(&tokens)
            }
        }
        (Output::Certs, MgmtReply::Certs(certs)) => {
            if s.json {
                json::render(&CertsDoc { certificates: certs })
            } else if p.command == "client certificate revoke" {
                certs
                    .iter()
                    .map(|c| {
                        format!(
                            "client certificate revoke: {}: success: serial {} revoked{}\n",
                            p.name.as_deref().unwrap_or_default(),
                            c.serial,
                            if c.name.is_empty() {
                                String::new()
                            } else {
                                format!(" ({} {})", c.role, c.name)
                            }
                        )
                    })
                    .collect()
            } else {
                format::certs(&certs)
            }
        }
        (Output::Audit, MgmtReply::Audit(lines)) => {
            if s.json {
                let records = lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
                json::render(&AuditDoc { records })
            } else {
                format::audit(&lines)
            }
        }
        (_, other) => {
            let e = CallError::Unexpected(format!("{other:?}"));
            return fail(out, err, s, p, &e);
        }
    };
    if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
        // stdout closed (e.g. `| head`): nothing useful left to do.
        return exit::FAILED;
    }
    exit::OK
}
