//! `cairn nfs ...` and `cairn smb ...`: gateway commands. Unlike the volume commands they take several calls
//! to `cairnd` (read the exports, check the volume, store conditionally) plus local work on
//! the gateway (render Ganesha's or smbd's config and apply it), so they are run here rather
//! than planned as one request. The documents, checks and rendering are `cairn_gateway`'s.

use crate::args::{AccessArg, NfsArgs, NfsCmd, NfsExportCmd, SmbArgs, SmbCmd, SmbShareCmd};
use crate::client::{self, CallError};
use crate::exit;
use crate::grammar::failed_message;
use crate::json;
use crate::plan::Settings;
use cairn_gateway::nfs::{self, Access, ApplyReport, Ganesha, NfsExport, Squash};
use cairn_gateway::smb::{self, SmbShare, Smbd};
use cairn_gateway::{NFS_EXPORT, SMB_SHARE};
use cairn_proto::map::VolumeStatus;
use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
use cairn_proto::Errno;
use serde::Serialize;
use std::io::Write;
use std::time::Duration;

/// Why a gateway command failed: its exit code and the message after
/// `<command>: <name>: failed: `.
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
    pub(crate) errno: Option<String>,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure { code: exit::USAGE, message: message.into(), errno: None }
    }

    pub(crate) fn failed(message: impl Into<String>) -> Failure {
        Failure { code: exit::FAILED, message: message.into(), errno: None }
    }
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        let code = match e {
            CallError::Unreachable { .. } => exit::UNREACHABLE,
            _ => exit::FAILED,
        };
        let errno = match &e {
            CallError::Remote(r) => Some(r.errno.name().to_string()),
            _ => None,
        };
        Failure { code, message: e.to_string(), errno }
    }
}

/// How many times a conditional store is retried when another admin changed the exports
/// between our read and our write.
pub(crate) const STORE_RETRIES: usize = 5;

/// Run `cairn nfs ...`; returns the exit code.
pub fn nfs(s: &Settings, a: &NfsArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (command, name) = match &a.command {
        NfsCmd::Export(NfsExportCmd::Add { pseudo, .. }) => {
            ("nfs export add", Some(pseudo.clone()))
        }
        NfsCmd::Export(NfsExportCmd::Remove { export }) => {
            ("nfs export remove", Some(export.clone()))
        }
        NfsCmd::Export(NfsExportCmd::List) => ("nfs export list", None),
        NfsCmd::Export(NfsExportCmd::Show { export }) => ("nfs export show", Some(export.clone())),
        NfsCmd::Sync { .. } => ("nfs sync", None),
    };
    let ganesha = Ganesha { conf_dir: a.conf_dir.clone(), bus: None };
    let out2: &mut dyn Write = &mut *out;
    let r = block_on(async {
        let out = out2;
        match &a.command {
            NfsCmd::Export(NfsExportCmd::Add {
                target,
                pseudo,
                clients,
                access,
                squash,
                anon_uid,
                anon_gid,
                protocols,
                id,
            }) => {
                let (volume, subdir) =
                    cairn_gateway::split_volume_path(target).map_err(Failure::usage)?;
                let new = NfsExport {
                    export_id: id.unwrap_or(1),
                    volume,
                    subdir,
                    pseudo: pseudo.clone(),
                    clients: nfs::parse_clients(clients).map_err(Failure::usage)?,
                    access: match access {
                        AccessArg::Rw => Access::Rw,
                        AccessArg::Ro => Access::Ro,
                    },
                    squash: Squash::parse(squash).map_err(Failure::usage)?,
                    anon_uid: *anon_uid,
                    anon_gid: *anon_gid,
                    protocols: parse_protocols(protocols).map_err(Failure::usage)?,
                };
                new.validate().map_err(Failure::usage)?;
                add(s, &ganesha, new, id.is_none(), out).await
            }
            NfsCmd::Export(NfsExportCmd::Remove { export }) => {
                remove(s, &ganesha, export, out).await
            }
            NfsCmd::Export(NfsExportCmd::List) => {
                let (exports, _) = load(s).await?;
                let text = if s.json {
                    json::render(&ExportsDoc { exports })
                } else {
                    list_table(&exports)
                };
                write_out(out, &text)
            }
            NfsCmd::Export(NfsExportCmd::Show { export }) => {
                let (exports, _) = load(s).await?;
                let e = find(&exports, export)?;
                let block = e.render(&servers(s).await?);
                let text = if s.json {
                    json::render(&ShowDoc { export: e.clone(), ganesha_block: block })
                } else {
                    show_text(e, &block)
                };
                write_out(out, &text)
            }
            NfsCmd::Sync { watch, interval } => sync(s, &ganesha, *watch, *interval, out).await,
        }
    });
    report(s, command, name, r, out, err)
}

/// Run a command's future on a one-thread runtime.
pub(crate) fn block_on<F: std::future::Future<Output = Result<(), Failure>>>(
    f: F,
) -> Result<(), Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the I/O runtime: {e}")))?
        .block_on(f)
}

/// The exit code of a command, printing its failure (and the JSON result document).
pub(crate) fn report(
    s: &Settings,
    command: &'static str,
    name: Option<String>,
    r: Result<(), Failure>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    match r {
        Ok(()) => exit::OK,
        Err(f) => {
            let _ = writeln!(err, "{}", failed_message(command, name.as_deref(), &f.message));
            if s.json {
                let doc = json::ResultDoc {
                    command: command.into(),
                    name,
                    result: "failed".into(),
                    errno: f.errno.clone(),
                    message: f.message.clone(),
                };
                let _ = write!(out, "{}", json::render(&doc));
            }
            f.code
        }
    }
}

pub(crate) fn write_out(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::failed(format!("cannot write the output: {e}")))
}

fn parse_protocols(s: &str) -> Result<Vec<u8>, String> {
    let mut v = vec![];
    for p in s.split(',').map(str::trim) {
        match p {
            "3" | "v3" => v.push(3),
            "4" | "v4" | "4.0" | "4.1" | "4.2" => v.push(4),
            _ => return Err(format!("invalid protocol '{p}': expected 3, 4 or 3,4")),
        }
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

pub(crate) async fn call(s: &Settings, req: MgmtRequest) -> Result<MgmtReply, Failure> {
    Ok(client::call(&s.addr, req, s.timeout).await?)
}

/// Every object of `kind` in the config store and the revision they were read at.
pub(crate) async fn load_kind<T: serde::de::DeserializeOwned>(
    s: &Settings,
    kind: &str,
) -> Result<(Vec<T>, u64), Failure> {
    match call(s, MgmtRequest::GatewayList { kind: kind.into() }).await? {
        MgmtReply::Gateway { revision, objects } => {
            let mut out = Vec::with_capacity(objects.len());
            for o in objects {
                let e: T = serde_json::from_str(&o.doc).map_err(|e| {
                    Failure::failed(format!("stored {kind} {} is not readable: {e}", o.name))
                })?;
                out.push(e);
            }
            Ok((out, revision))
        }
        other => Err(Failure::failed(format!("unexpected reply from cairnd: {other:?}"))),
    }
}

/// Every export in the config store, by id, and the revision they were read at.
async fn load(s: &Settings) -> Result<(Vec<NfsExport>, u64), Failure> {
    let (mut v, rev) = load_kind::<NfsExport>(s, NFS_EXPORT).await?;
    v.sort_by_key(|e| e.export_id);
    Ok((v, rev))
}

/// Store `doc` as `kind`/`name` if nothing of that kind changed since `revision`; false if
/// something did (re-read, re-check, retry).
pub(crate) async fn store_if_unchanged(
    s: &Settings,
    kind: &str,
    name: &str,
    doc: String,
    revision: u64,
) -> Result<bool, Failure> {
    let put = MgmtRequest::GatewayPut {
        kind: kind.into(),
        name: name.into(),
        doc,
        if_unchanged_since: Some(revision),
    };
    match call(s, put).await {
        Ok(_) => Ok(true),
        Err(f) if f.errno.as_deref() == Some(Errno::EEXIST.name()) => Ok(false),
        Err(f) => Err(f),
    }
}

/// `host:port` of every node of the pool: the FSAL's map servers.
pub(crate) async fn servers(s: &Settings) -> Result<Vec<String>, Failure> {
    match call(s, MgmtRequest::PeerStatus).await? {
        MgmtReply::Peers(peers) => {
            let mut v: Vec<String> = peers.into_iter().map(|p| p.addr).collect();
            v.sort();
            v.dedup();
            Ok(v)
        }
        other => Err(Failure::failed(format!("unexpected reply from cairnd: {other:?}"))),
    }
}

/// The volume exists and is started, and the subdirectory exists in it and is a directory.
pub(crate) async fn check_target(
    s: &Settings,
    volume: &str,
    subdir: &str,
    servers: &[String],
) -> Result<(), Failure> {
    let e = Target { volume: volume.to_string(), subdir: subdir.to_string() };
    let vols = match call(s, MgmtRequest::VolumeInfo { name: Some(e.volume.clone()) }).await {
        Ok(MgmtReply::Volumes(v)) => v,
        Ok(other) => {
            return Err(Failure::failed(format!("unexpected reply from cairnd: {other:?}")))
        }
        Err(f) if f.errno.as_deref() == Some(Errno::ENOENT.name()) => {
            return Err(Failure::failed(format!("volume {} does not exist", e.volume)))
        }
        Err(f) => return Err(f),
    };
    if vols.first().map(|v| v.status) != Some(VolumeStatus::Started) {
        return Err(Failure::failed(format!(
            "volume {} is not started (cairn volume start {})",
            e.volume, e.volume
        )));
    }
    if e.subdir == "/" {
        return Ok(());
    }
    let opts = cairn_client::MountOptions {
        servers: servers.to_vec(),
        volume: e.volume.clone(),
        client_name: "cairn-cli".into(),
        connect_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let vol = cairn_client::Volume::mount(opts)
        .await
        .map_err(|x| Failure::failed(format!("cannot mount volume {}: {}", e.volume, x.message)))?;
    let r = vol.resolve(&cairn_proto::types::Creds::root(), e.subdir.as_bytes()).await;
    let _ = vol.unmount().await;
    match r {
        Ok(a) if a.kind == cairn_proto::types::FileType::Directory => Ok(()),
        Ok(_) => Err(Failure::failed(format!("{}{} is not a directory", e.volume, e.subdir))),
        Err(x) if x.errno == Errno::ENOENT => Err(Failure::failed(format!(
            "{}{}: no such directory in the volume",
            e.volume, e.subdir
        ))),
        Err(x) => Err(Failure::failed(format!("{}{}: {}", e.volume, e.subdir, x.message))),
    }
}

struct Target {
    volume: String,
    subdir: String,
}

fn find<'a>(exports: &'a [NfsExport], key: &str) -> Result<&'a NfsExport, Failure> {
    exports
        .iter()
        .find(|e| e.pseudo == key || key.parse::<u16>().ok() == Some(e.export_id))
        .ok_or_else(|| Failure::failed(format!("no export with pseudo path or id {key}")))
}

#[derive(Serialize)]
struct ExportsDoc {
    exports: Vec<NfsExport>,
}

#[derive(Serialize)]
struct ShowDoc {
    export: NfsExport,
    ganesha_block: String,
}

#[derive(Serialize)]
struct ChangeDoc {
    command: String,
    name: String,
    result: String,
    message: String,
    export: NfsExport,
    /// What happened on this gateway's Ganesha; null where this machine is not a gateway.
    applied: Option<ApplyReport>,
}

fn describe(e: &NfsExport) -> String {
    let access = match e.access {
        Access::Rw => "rw",
        Access::Ro => "ro",
    };
    let protos: Vec<String> = e.protocols.iter().map(|p| format!("v{p}")).collect();
    format!(
        "export {} of {}{} for {} ({access}, {}, NFS {})",
        e.export_id,
        e.volume,
        if e.subdir == "/" { String::new() } else { e.subdir.clone() },
        e.clients.join(","),
        e.squash.as_str(),
        protos.join("+")
    )
}

fn list_table(exports: &[NfsExport]) -> String {
    if exports.is_empty() {
        return "No NFS exports\n".into();
    }
    let rows: Vec<[String; 6]> = exports
        .iter()
        .map(|e| {
            [
                e.export_id.to_string(),
                e.pseudo.clone(),
                format!("{}{}", e.volume, if e.subdir == "/" { "" } else { &e.subdir }),
                e.clients.join(","),
                match e.access {
                    Access::Rw => "rw".into(),
                    Access::Ro => "ro".into(),
                },
                e.squash.as_str().into(),
            ]
        })
        .collect();
    let head = ["Id", "Pseudo", "Volume", "Clients", "Access", "Squash"];
    let mut w = head.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(&head);
    for r in &rows {
        out.push_str(&line(&r.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out
}

fn show_text(e: &NfsExport, block: &str) -> String {
    format!(
        "Export Id: {}\nPseudo path: {}\nVolume: {}\nDirectory: {}\nClients: {}\nAccess: {}\n\
         Squash: {} (anonymous uid {}, gid {})\nProtocols: {}\n\nGanesha configuration:\n{block}",
        e.export_id,
        e.pseudo,
        e.volume,
        e.subdir,
        e.clients.join(", "),
        match e.access {
            Access::Rw => "rw",
            Access::Ro => "ro",
        },
        e.squash.as_str(),
        e.anon_uid,
        e.anon_gid,
        e.protocols.iter().map(|p| format!("NFSv{p}")).collect::<Vec<_>>().join(", ")
    )
}

/// Apply the store's exports to this gateway's Ganesha, if this machine is a gateway.
async fn apply_here(s: &Settings, g: &Ganesha) -> Result<Option<ApplyReport>, Failure> {
    if !nfs::is_gateway_dir(&g.conf_dir) {
        return Ok(None);
    }
    let (exports, _) = load(s).await?;
    let servers = servers(s).await?;
    let g = Ganesha { conf_dir: g.conf_dir.clone(), bus: g.bus.clone() };
    tokio::task::spawn_blocking(move || g.apply(&exports, &servers))
        .await
        .map_err(|e| Failure::failed(format!("apply task failed: {e}")))?
        .map(Some)
        .map_err(|e| Failure::failed(format!("cannot write the Ganesha config: {e}")))
}

fn applied_text(g: &Ganesha, r: &Option<ApplyReport>) -> String {
    match r {
        None => format!(
            "stored; {} is not a Ganesha config directory here, so gateways apply it with \
             `cairn nfs sync`\n",
            g.conf_dir.display()
        ),
        Some(r) if !r.live => format!(
            "stored and written to {}; the local Ganesha is not reachable over DBus ({}), it \
             serves the exports when it starts\n",
            g.conf_dir.display(),
            r.offline_reason.as_deref().unwrap_or("unknown reason")
        ),
        Some(r) => {
            let ids = |v: &[u16]| v.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
            let mut parts = vec![];
            if !r.added.is_empty() {
                parts.push(format!("added {}", ids(&r.added)));
            }
            if !r.updated.is_empty() {
                parts.push(format!("updated {}", ids(&r.updated)));
            }
            if !r.removed.is_empty() {
                parts.push(format!("removed {}", ids(&r.removed)));
            }
            for (id, why) in &r.failed {
                parts.push(format!("export {id} refused: {why}"));
            }
            if parts.is_empty() {
                parts.push("nothing to change".into());
            }
            format!("applied to the local Ganesha: {}\n", parts.join("; "))
        }
    }
}

async fn add(
    s: &Settings,
    g: &Ganesha,
    mut new: NfsExport,
    pick_id: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let servers = servers(s).await?;
    check_target(s, &new.volume, &new.subdir, &servers).await?;
    let mut stored = false;
    for _ in 0..STORE_RETRIES {
        let (exports, revision) = load(s).await?;
        if pick_id {
            new.export_id =
                nfs::next_id(&exports).ok_or_else(|| Failure::failed("no free export id"))?;
        }
        nfs::check_unique(&new, &exports).map_err(Failure::failed)?;
        let doc = serde_json::to_string(&new).expect("plain data always serializes");
        // Someone changed the exports since we read them: read and check again.
        if store_if_unchanged(s, NFS_EXPORT, &new.export_id.to_string(), doc, revision).await? {
            stored = true;
            break;
        }
    }
    if !stored {
        return Err(Failure::failed("the exports kept changing concurrently; try again"));
    }
    let applied = apply_here(s, g).await?;
    if let Some(r) = &applied {
        if let Some((_, why)) = r.failed.iter().find(|(id, _)| *id == new.export_id) {
            // Ganesha refused what our checks let through: take it back so no gateway
            // keeps a broken export, and leave the running ones as they were.
            let del = MgmtRequest::GatewayDelete {
                kind: NFS_EXPORT.into(),
                name: new.export_id.to_string(),
            };
            call(s, del).await?;
            apply_here(s, g).await?;
            return Err(Failure::failed(format!("Ganesha refused the export (not kept): {why}")));
        }
    }
    let message = describe(&new);
    let text = if s.json {
        json::render(&ChangeDoc {
            command: "nfs export add".into(),
            name: new.pseudo.clone(),
            result: "success".into(),
            message,
            export: new,
            applied,
        })
    } else {
        format!("nfs export add: {}: success: {message}\n{}", new.pseudo, applied_text(g, &applied))
    };
    write_out(out, &text)
}

async fn remove(s: &Settings, g: &Ganesha, key: &str, out: &mut dyn Write) -> Result<(), Failure> {
    let (exports, _) = load(s).await?;
    let e = find(&exports, key)?.clone();
    let del = MgmtRequest::GatewayDelete { kind: NFS_EXPORT.into(), name: e.export_id.to_string() };
    call(s, del).await?;
    let applied = apply_here(s, g).await?;
    let message = describe(&e);
    let text = if s.json {
        json::render(&ChangeDoc {
            command: "nfs export remove".into(),
            name: key.into(),
            result: "success".into(),
            message,
            export: e,
            applied,
        })
    } else {
        format!("nfs export remove: {key}: success: {message}\n{}", applied_text(g, &applied))
    };
    write_out(out, &text)
}

async fn sync(
    s: &Settings,
    g: &Ganesha,
    watch: bool,
    interval: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    if !g.conf_dir.is_dir() {
        std::fs::create_dir_all(&g.conf_dir)
            .map_err(|e| Failure::failed(format!("cannot create {}: {e}", g.conf_dir.display())))?;
    }
    sync_loop("nfs", watch, interval, out, || async move {
        let (_, revision) = load(s).await?;
        let report = apply_here(s, g).await?.expect("the config directory exists");
        let changed = !(report.added.is_empty()
            && report.updated.is_empty()
            && report.removed.is_empty()
            && report.failed.is_empty());
        let err = (!report.failed.is_empty())
            .then(|| Failure::failed(format!("Ganesha refused {} export(s)", report.failed.len())));
        let text =
            if s.json { json::render(&report) } else { applied_text(g, &Some(report.clone())) };
        Ok((text, changed, revision * 2 + report.live as u64, err))
    })
    .await
}

// ---- SMB shares ----

/// Run `cairn smb ...`; returns the exit code.
pub fn smb(s: &Settings, a: &SmbArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (command, name) = match &a.command {
        SmbCmd::Share(SmbShareCmd::Add { name, .. }) => ("smb share add", Some(name.clone())),
        SmbCmd::Share(SmbShareCmd::Remove { name }) => ("smb share remove", Some(name.clone())),
        SmbCmd::Share(SmbShareCmd::List) => ("smb share list", None),
        SmbCmd::Share(SmbShareCmd::Show { name }) => ("smb share show", Some(name.clone())),
        SmbCmd::Sync { .. } => ("smb sync", None),
    };
    let smbd = Smbd { conf_dir: a.conf_dir.clone(), smb_conf: a.smb_conf.clone() };
    let out2: &mut dyn Write = &mut *out;
    let r = block_on(async {
        let out = out2;
        match &a.command {
            SmbCmd::Share(SmbShareCmd::Add { name, volume, read_only, users, comment, hidden }) => {
                let (volume, subdir) =
                    cairn_gateway::split_volume_path(volume).map_err(Failure::usage)?;
                let users = match users {
                    Some(u) => smb::parse_users(u).map_err(Failure::usage)?,
                    None => vec![],
                };
                let new = SmbShare {
                    name: name.clone(),
                    volume,
                    subdir,
                    read_only: *read_only,
                    users,
                    comment: comment.clone(),
                    browseable: !hidden,
                };
                new.validate().map_err(Failure::usage)?;
                smb_add(s, &smbd, new, out).await
            }
            SmbCmd::Share(SmbShareCmd::Remove { name }) => smb_remove(s, &smbd, name, out).await,
            SmbCmd::Share(SmbShareCmd::List) => {
                let (shares, _) = load_shares(s).await?;
                let text = if s.json {
                    json::render(&SharesDoc { shares })
                } else {
                    shares_table(&shares)
                };
                write_out(out, &text)
            }
            SmbCmd::Share(SmbShareCmd::Show { name }) => {
                let (shares, _) = load_shares(s).await?;
                let sh = find_share(&shares, name)?;
                let section = sh.render(&servers(s).await?);
                let text = if s.json {
                    json::render(&ShareShowDoc { share: sh.clone(), smb_conf_section: section })
                } else {
                    format!(
                        "Share: {}\nVolume: {}\nDirectory: {}\nRead only: {}\nUsers: {}\n\
                         Comment: {}\nBrowseable: {}\n\nsmb.conf section:\n{section}",
                        sh.name,
                        sh.volume,
                        sh.subdir,
                        if sh.read_only { "yes" } else { "no" },
                        if sh.users.is_empty() {
                            "(any authenticated user)".into()
                        } else {
                            sh.users.join(", ")
                        },
                        sh.comment,
                        if sh.browseable { "yes" } else { "no" },
                    )
                };
                write_out(out, &text)
            }
            SmbCmd::Sync { watch, interval } => smb_sync(s, &smbd, *watch, *interval, out).await,
        }
    });
    report(s, command, name, r, out, err)
}

async fn load_shares(s: &Settings) -> Result<(Vec<SmbShare>, u64), Failure> {
    let (mut v, rev) = load_kind::<SmbShare>(s, SMB_SHARE).await?;
    v.sort_by_key(|a| a.name.to_lowercase());
    Ok((v, rev))
}

/// Share names are case-insensitive, as for SMB clients.
fn find_share<'a>(shares: &'a [SmbShare], name: &str) -> Result<&'a SmbShare, Failure> {
    shares
        .iter()
        .find(|sh| sh.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| Failure::failed(format!("no share named {name}")))
}

#[derive(Serialize)]
struct SharesDoc {
    shares: Vec<SmbShare>,
}

#[derive(Serialize)]
struct ShareShowDoc {
    share: SmbShare,
    smb_conf_section: String,
}

#[derive(Serialize)]
struct ShareChangeDoc {
    command: String,
    name: String,
    result: String,
    message: String,
    share: SmbShare,
    /// What happened on this gateway's smbd; null where this machine is not a gateway.
    applied: Option<smb::ApplyReport>,
}

fn describe_share(sh: &SmbShare) -> String {
    format!(
        "share {} of {}{} ({}{})",
        sh.name,
        sh.volume,
        if sh.subdir == "/" { String::new() } else { sh.subdir.clone() },
        if sh.read_only { "read-only" } else { "read-write" },
        if sh.users.is_empty() { String::new() } else { format!(", users {}", sh.users.join(",")) }
    )
}

fn shares_table(shares: &[SmbShare]) -> String {
    if shares.is_empty() {
        return "No SMB shares\n".into();
    }
    let mut w = [5usize, 6, 6];
    let rows: Vec<[String; 4]> = shares
        .iter()
        .map(|sh| {
            [
                sh.name.clone(),
                format!("{}{}", sh.volume, if sh.subdir == "/" { "" } else { &sh.subdir }),
                if sh.read_only { "ro".into() } else { "rw".into() },
                if sh.users.is_empty() { "*".into() } else { sh.users.join(",") },
            ]
        })
        .collect();
    for r in &rows {
        for i in 0..3 {
            w[i] = w[i].max(r[i].len());
        }
    }
    let mut out = format!(
        "{:<a$}  {:<b$}  {:<c$}  Users\n",
        "Share",
        "Volume",
        "Access",
        a = w[0],
        b = w[1],
        c = w[2]
    );
    for r in rows {
        out.push_str(&format!(
            "{:<a$}  {:<b$}  {:<c$}  {}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            a = w[0],
            b = w[1],
            c = w[2]
        ));
    }
    out
}

async fn smb_apply_here(
    s: &Settings,
    smbd: &Smbd,
    reload_unchanged: bool,
) -> Result<Option<smb::ApplyReport>, Failure> {
    if !smb::is_gateway(&smbd.conf_dir) {
        return Ok(None);
    }
    let (shares, _) = load_shares(s).await?;
    let servers = servers(s).await?;
    let smbd = Smbd { conf_dir: smbd.conf_dir.clone(), smb_conf: smbd.smb_conf.clone() };
    tokio::task::spawn_blocking(move || smbd.apply(&shares, &servers, reload_unchanged))
        .await
        .map_err(|e| Failure::failed(format!("apply task failed: {e}")))?
        .map(Some)
        .map_err(Failure::failed)
}

fn smb_applied_text(smbd: &Smbd, r: &Option<smb::ApplyReport>) -> String {
    match r {
        None => format!(
            "stored; {} does not exist here, so gateways apply it with `cairn smb sync`\n",
            smbd.conf_dir.display()
        ),
        Some(r) if r.reloaded => format!(
            "{} and the local smbd reloaded its configuration\n",
            if r.changed { "shares.conf updated" } else { "shares.conf unchanged" }
        ),
        Some(r) => format!(
            "written to {}; the local smbd was not told ({}), it reads the file when it starts\n",
            smbd.shares_file().display(),
            r.offline_reason.as_deref().unwrap_or("unknown reason")
        ),
    }
}

async fn smb_add(
    s: &Settings,
    smbd: &Smbd,
    new: SmbShare,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let servers = servers(s).await?;
    check_target(s, &new.volume, &new.subdir, &servers).await?;
    let mut stored = false;
    for _ in 0..STORE_RETRIES {
        let (shares, revision) = load_shares(s).await?;
        if shares.iter().any(|sh| sh.name.eq_ignore_ascii_case(&new.name)) {
            return Err(Failure::failed(format!("share {} already exists", new.name)));
        }
        let doc = serde_json::to_string(&new).expect("plain data always serializes");
        if store_if_unchanged(s, SMB_SHARE, &new.name.to_lowercase(), doc, revision).await? {
            stored = true;
            break;
        }
    }
    if !stored {
        return Err(Failure::failed("the shares kept changing concurrently; try again"));
    }
    let applied = match smb_apply_here(s, smbd, true).await {
        Ok(a) => a,
        Err(f) => {
            // The local check refused the configuration: take the share back out so no
            // gateway gets it, and leave smbd as it was.
            let del = MgmtRequest::GatewayDelete {
                kind: SMB_SHARE.into(),
                name: new.name.to_lowercase(),
            };
            call(s, del).await?;
            return Err(Failure::failed(format!("{} (share not kept)", f.message)));
        }
    };
    let message = describe_share(&new);
    let text = if s.json {
        json::render(&ShareChangeDoc {
            command: "smb share add".into(),
            name: new.name.clone(),
            result: "success".into(),
            message,
            share: new,
            applied,
        })
    } else {
        format!(
            "smb share add: {}: success: {message}\n{}",
            new.name,
            smb_applied_text(smbd, &applied)
        )
    };
    write_out(out, &text)
}

async fn smb_remove(
    s: &Settings,
    smbd: &Smbd,
    name: &str,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (shares, _) = load_shares(s).await?;
    let sh = find_share(&shares, name)?.clone();
    let del = MgmtRequest::GatewayDelete { kind: SMB_SHARE.into(), name: sh.name.to_lowercase() };
    call(s, del).await?;
    let applied = smb_apply_here(s, smbd, true).await?;
    let message = describe_share(&sh);
    let text = if s.json {
        json::render(&ShareChangeDoc {
            command: "smb share remove".into(),
            name: name.into(),
            result: "success".into(),
            message,
            share: sh,
            applied,
        })
    } else {
        format!(
            "smb share remove: {name}: success: {message}\n{}",
            smb_applied_text(smbd, &applied)
        )
    };
    write_out(out, &text)
}

async fn smb_sync(
    s: &Settings,
    smbd: &Smbd,
    watch: bool,
    interval: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    std::fs::create_dir_all(&smbd.conf_dir)
        .map_err(|e| Failure::failed(format!("cannot create {}: {e}", smbd.conf_dir.display())))?;
    sync_loop("smb", watch, interval, out, || async move {
        let r = smb_apply_here(s, smbd, !watch).await?.expect("the config directory exists");
        let text = if s.json { json::render(&r) } else { smb_applied_text(smbd, &Some(r.clone())) };
        Ok((text, r.changed, 0, None))
    })
    .await
}

/// The loop of every gateway's `sync [--watch]`. `pass` applies the store's objects once
/// and returns its report text, whether it changed anything, a key of the state it saw
/// (a change of key is reported too) and a failure to return after printing (one-shot
/// only). With `watch`, quiet passes print nothing and errors are printed and retried.
pub(crate) async fn sync_loop<F, Fut>(
    what: &str,
    watch: bool,
    interval: u64,
    out: &mut dyn Write,
    mut pass: F,
) -> Result<(), Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(String, bool, u64, Option<Failure>), Failure>>,
{
    let mut last = None;
    loop {
        match pass().await {
            Ok((text, changed, key, err)) => {
                if !watch || changed || last != Some(key) {
                    write_out(out, &text)?;
                }
                last = Some(key);
                if !watch {
                    return err.map_or(Ok(()), Err);
                }
            }
            Err(f) if watch => {
                let _ = writeln!(out, "{what} sync: {} (retrying)", f.message);
            }
            Err(f) => return Err(f),
        }
        tokio::time::sleep(Duration::from_secs(interval.max(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols() {
        assert_eq!(parse_protocols("3,4").unwrap(), [3, 4]);
        assert_eq!(parse_protocols("4.1, 3, 4").unwrap(), [3, 4]);
        assert!(parse_protocols("2").is_err());
    }
}
