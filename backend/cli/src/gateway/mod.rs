//! `cairn nfs ...`, `cairn smb ...` and `cairn iscsi ...`: gateway commands. Unlike the
//! volume commands they take several calls to `cairnd` (read the stored objects, check the
//! volume, store conditionally) plus local work on the gateway (render Ganesha's, smbd's or
//! LIO's config and apply it), so they are run here rather than planned as one request. The
//! documents, checks and rendering are `cairn_gateway`'s.
//!
//! This module holds what every gateway kind shares: the config store calls, the `add`,
//! `remove`, `list` and `show` flows over a [`Managed`] object kind applied to a
//! [`LocalServer`], and the `sync [--watch]` loop. `nfs.rs` and `smb.rs` say what is
//! particular to an export and a share.

mod nfs;
mod smb;

pub use nfs::nfs;
pub use smb::smb;

use crate::client::{self, CallError};
use crate::exit;
use crate::grammar::failed_message;
use crate::json;
use crate::plan::Settings;
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
    pub(crate) fn usage(message: impl std::fmt::Display) -> Failure {
        Failure { code: exit::USAGE, message: message.to_string(), errno: None }
    }

    pub(crate) fn failed(message: impl std::fmt::Display) -> Failure {
        Failure { code: exit::FAILED, message: message.to_string(), errno: None }
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

/// A table: the header and the rows, columns two spaces apart, the last one unpadded.
pub(crate) fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
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
    let mut out = line(head.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// One kind of gateway object kept in the config store (an NFS export, an SMB share): what
/// the shared `add`, `remove`, `list` and `show` flows need to know of it.
pub(crate) trait Managed:
    Serialize + serde::de::DeserializeOwned + Clone + Send + 'static
{
    /// The config store kind (`/cairn/gateway/<KIND>/<name>`).
    const KIND: &'static str;
    /// The command group, as in messages: `nfs export`, `smb share`.
    const COMMAND: &'static str;
    /// The JSON keys: `list` -> `{PLURAL: [...]}`, `show` -> `{SINGULAR: {...}, RENDERED: "..."}`.
    const PLURAL: &'static str;
    const SINGULAR: &'static str;
    const RENDERED: &'static str;

    /// Sort a freshly loaded list into listing order.
    fn order(items: &mut [Self]);
    /// Its name in the config store.
    fn store_name(&self) -> String;
    /// The volume and the directory in it that it serves.
    fn target(&self) -> (&str, &str);
    /// Whether `key` (as typed on the command line) names it.
    fn matches(&self, key: &str) -> bool;
    /// The message when nothing matches `key`.
    fn not_found(key: &str) -> String;
    /// The name messages use for it.
    fn label(&self) -> String;
    /// The object to store for this new one among the stored ones: a clash is refused,
    /// what was left to pick (an export id) is picked.
    fn admit(&self, existing: &[Self]) -> Result<Self, Failure>;
    /// One line for `add`/`remove` messages.
    fn describe(&self) -> String;
    /// The `list` table (or the line saying there are none).
    fn table(items: &[Self]) -> String;
    /// The server configuration it renders to on a gateway.
    fn render(&self, servers: &[String]) -> String;
    /// `show`'s text, given the rendered configuration.
    fn show_text(&self, rendered: &str) -> String;
}

/// The local server of a gateway (Ganesha, smbd) that stored objects are applied to.
pub(crate) trait LocalServer {
    type Object: Managed;
    type Report: Serialize + Clone;
    /// Apply every stored object to the local server; None where this machine is not a
    /// gateway of this kind.
    async fn apply_here(&self, s: &Settings) -> Result<Option<Self::Report>, Failure>;
    /// Why the server refused `o` in report `r`, if it did.
    fn refused(&self, r: &Self::Report, o: &Self::Object) -> Option<String>;
    /// What happened on this machine, for people.
    fn applied_text(&self, r: &Option<Self::Report>) -> String;
}

/// Every stored object of kind `T`, in listing order, and the revision they were read at.
pub(crate) async fn load_all<T: Managed>(s: &Settings) -> Result<(Vec<T>, u64), Failure> {
    let (mut v, rev) = load_kind::<T>(s, T::KIND).await?;
    T::order(&mut v);
    Ok((v, rev))
}

fn find_in<'a, T: Managed>(items: &'a [T], key: &str) -> Result<&'a T, Failure> {
    items.iter().find(|o| o.matches(key)).ok_or_else(|| Failure::failed(T::not_found(key)))
}

/// `<group> list`.
pub(crate) async fn list<T: Managed>(s: &Settings, out: &mut dyn Write) -> Result<(), Failure> {
    let (items, _) = load_all::<T>(s).await?;
    let text = if s.json {
        json::render(&serde_json::json!({ T::PLURAL: items }))
    } else {
        T::table(&items)
    };
    write_out(out, &text)
}

/// `<group> show KEY`.
pub(crate) async fn show<T: Managed>(
    s: &Settings,
    key: &str,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (items, _) = load_all::<T>(s).await?;
    let o = find_in(&items, key)?;
    let rendered = o.render(&servers(s).await?);
    let text = if s.json {
        json::render(&serde_json::json!({ T::SINGULAR: o, T::RENDERED: rendered }))
    } else {
        o.show_text(&rendered)
    };
    write_out(out, &text)
}

/// The result of `add`/`remove`: a JSON document or a line and what the gateway did.
fn change_text<G: LocalServer>(
    s: &Settings,
    g: &G,
    verb: &str,
    name: &str,
    o: &G::Object,
    applied: Option<G::Report>,
) -> String {
    let message = o.describe();
    if s.json {
        json::render(&serde_json::json!({
            "command": format!("{} {verb}", G::Object::COMMAND),
            "name": name,
            "result": "success",
            "message": message,
            G::Object::SINGULAR: o,
            // What happened on this gateway's server; null where this machine is not one.
            "applied": applied,
        }))
    } else {
        format!(
            "{} {verb}: {name}: success: {message}\n{}",
            G::Object::COMMAND,
            g.applied_text(&applied)
        )
    }
}

/// `<group> add`: check the target, store the object unless another admin's change got
/// in between (then re-read, re-check), apply it here; if the local server refuses it,
/// take it back out so no gateway keeps a broken one.
pub(crate) async fn add<G: LocalServer>(
    s: &Settings,
    g: &G,
    request: G::Object,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let servers = servers(s).await?;
    let (volume, subdir) = request.target();
    check_target(s, volume, subdir, &servers).await?;
    let mut stored = None;
    for _ in 0..STORE_RETRIES {
        let (items, revision) = load_all::<G::Object>(s).await?;
        let new = request.admit(&items)?;
        let doc = serde_json::to_string(&new).expect("plain data always serializes");
        if store_if_unchanged(s, G::Object::KIND, &new.store_name(), doc, revision).await? {
            stored = Some(new);
            break;
        }
    }
    let Some(new) = stored else {
        return Err(Failure::failed(format!(
            "the {}s kept changing concurrently; try again",
            G::Object::SINGULAR
        )));
    };
    let refused = match g.apply_here(s).await {
        Ok(applied) => match applied.as_ref().and_then(|r| g.refused(r, &new)) {
            None => {
                let text = change_text(s, g, "add", &new.label(), &new, applied);
                return write_out(out, &text);
            }
            Some(why) => why,
        },
        Err(f) => f.message,
    };
    let del = MgmtRequest::GatewayDelete { kind: G::Object::KIND.into(), name: new.store_name() };
    call(s, del).await?;
    // Best effort: a gateway that cannot apply now catches up at its next sync.
    let _ = g.apply_here(s).await;
    Err(Failure::failed(format!("{refused} ({} not kept)", G::Object::SINGULAR)))
}

/// `<group> remove KEY`.
pub(crate) async fn remove<G: LocalServer>(
    s: &Settings,
    g: &G,
    key: &str,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (items, _) = load_all::<G::Object>(s).await?;
    let o = find_in(&items, key)?.clone();
    call(s, MgmtRequest::GatewayDelete { kind: G::Object::KIND.into(), name: o.store_name() })
        .await?;
    let applied = g.apply_here(s).await?;
    write_out(out, &change_text(s, g, "remove", key, &o, applied))
}
