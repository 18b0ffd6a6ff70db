//! `cairn iscsi ...`: LUNs (files on volumes) and targets in the config store, applied to
//! LIO with targetcli-fb. The documents, checks and the targetcli plan are
//! `cairn_gateway::iscsi`'s; the store and cairnd helpers are shared with `cairn nfs/smb`
//! ([`crate::gateway`]).

use crate::args::{
    IscsiAclCmd, IscsiArgs, IscsiCmd, IscsiLunCmd, IscsiMapCmd, IscsiPortalCmd, IscsiTargetCmd,
};
use crate::gateway::{
    block_on, call, check_target, load_kind, report, servers, store_if_unchanged, table, write_out,
    Failure, STORE_RETRIES,
};
use crate::json;
use crate::plan::Settings;
use cairn_gateway::iscsi::{
    self, format_size, Acl, GatewayRecord, IscsiLun, IscsiTarget, Lio, TargetLun, Targetcli,
};
use cairn_gateway::{ISCSI_GATEWAY, ISCSI_LUN, ISCSI_TARGET};
use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::types::{Creds, FileType, Id, SetAttr};
use cairn_proto::Errno;
use serde::Serialize;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// The first line of `path` (standard input for `-`), without its line end: a secret
/// given out of the process list (`--chap-password-file`, as targetcli and iscsiadm take
/// secrets from files).
fn read_secret(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text))
    };
    read.map_err(|e| format!("cannot read the CHAP secret from {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.is_empty() {
        return Err(format!("{}: no CHAP secret in it (empty first line)", path.display()));
    }
    Ok(line)
}

/// Run `cairn iscsi ...`; returns the exit code.
pub fn iscsi(s: &Settings, a: &IscsiArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use IscsiCmd as C;
    let (command, name): (&'static str, Option<String>) = match &a.command {
        C::Lun(IscsiLunCmd::Create { name, .. }) => ("iscsi lun create", Some(name.clone())),
        C::Lun(IscsiLunCmd::Delete { name, .. }) => ("iscsi lun delete", Some(name.clone())),
        C::Lun(IscsiLunCmd::List) => ("iscsi lun list", None),
        C::Lun(IscsiLunCmd::Show { name }) => ("iscsi lun show", Some(name.clone())),
        C::Target(t) => match t {
            IscsiTargetCmd::Create { iqn, .. } => ("iscsi target create", Some(iqn.clone())),
            IscsiTargetCmd::Delete { iqn } => ("iscsi target delete", Some(iqn.clone())),
            IscsiTargetCmd::List => ("iscsi target list", None),
            IscsiTargetCmd::Show { iqn, .. } => ("iscsi target show", Some(iqn.clone())),
            IscsiTargetCmd::Portal(IscsiPortalCmd::Add { iqn, .. }) => {
                ("iscsi target portal add", Some(iqn.clone()))
            }
            IscsiTargetCmd::Portal(IscsiPortalCmd::Remove { iqn, .. }) => {
                ("iscsi target portal remove", Some(iqn.clone()))
            }
            IscsiTargetCmd::Lun(IscsiMapCmd::Add { iqn, .. }) => {
                ("iscsi target lun add", Some(iqn.clone()))
            }
            IscsiTargetCmd::Lun(IscsiMapCmd::Remove { iqn, .. }) => {
                ("iscsi target lun remove", Some(iqn.clone()))
            }
            IscsiTargetCmd::Acl(IscsiAclCmd::Add { iqn, .. }) => {
                ("iscsi target acl add", Some(iqn.clone()))
            }
            IscsiTargetCmd::Acl(IscsiAclCmd::Remove { iqn, .. }) => {
                ("iscsi target acl remove", Some(iqn.clone()))
            }
        },
        C::Sync { .. } => ("iscsi sync", None),
    };
    let tcli = Targetcli { program: a.targetcli.clone(), conf_dir: a.conf_dir.clone() };
    let out2: &mut dyn Write = &mut *out;
    let r = block_on(async {
        let out = out2;
        let gateway = match &a.gateway_name {
            Some(n) => n.clone(),
            None => host_name()?,
        };
        let g = Gw { s, tcli: &tcli, alua_tag: a.alua_tag, gateway };
        match &a.command {
            C::Lun(IscsiLunCmd::Create { name, volume, size, thin, file }) => {
                iscsi::check_lun_name(name).map_err(Failure::usage)?;
                let (volume, sub) =
                    cairn_gateway::split_volume_path(volume).map_err(Failure::usage)?;
                if sub != "/" {
                    return Err(Failure::usage(format!(
                        "invalid volume name '{volume}{sub}': give the file with --file"
                    )));
                }
                let size = iscsi::parse_size(size).map_err(Failure::usage)?;
                let path =
                    iscsi::check_path(file.as_deref().unwrap_or(&format!("luns/{name}.img")))
                        .map_err(Failure::usage)?;
                let lun = IscsiLun {
                    name: name.clone(),
                    volume,
                    path,
                    size,
                    thin: *thin,
                    wwn: new_wwn(),
                    deleting: false,
                };
                lun.validate().map_err(Failure::usage)?;
                lun_create(&g, lun, out).await
            }
            C::Lun(IscsiLunCmd::Delete { name, keep_file, force }) => {
                lun_delete(&g, name, *keep_file, *force, out).await
            }
            C::Lun(IscsiLunCmd::List) => {
                let luns = load_luns(s).await?;
                let targets = load_targets(s).await?;
                let text = if s.json {
                    json::render(&LunsDoc { luns })
                } else {
                    luns_table(&luns, &targets)
                };
                write_out(out, &text)
            }
            C::Lun(IscsiLunCmd::Show { name }) => lun_show(&g, name, out).await,
            C::Target(t) => target_cmd(&g, t, out).await,
            C::Sync { dry_run, from_saveconfig, watch, interval } => {
                sync(&g, *dry_run, from_saveconfig.as_deref(), *watch, *interval, out).await
            }
        }
    });
    report(s, command, name, r, out, err)
}

/// What the commands need: cairnd, this gateway's targetcli, ALUA tag and name.
struct Gw<'a> {
    s: &'a Settings,
    tcli: &'a Targetcli,
    alua_tag: u16,
    /// Name of this gateway's record (`iscsi-gateway/NAME`).
    gateway: String,
}

/// This machine's host name: the default gateway name.
fn host_name() -> Result<String, Failure> {
    let n = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| Failure::failed(format!("cannot read the host name: {e}")))?;
    let n = n.trim();
    if n.is_empty() {
        return Err(Failure::usage("the host name is empty: give --gateway-name"));
    }
    Ok(n.to_string())
}

async fn load_gateways(s: &Settings) -> Result<(Vec<GatewayRecord>, u64), Failure> {
    let (mut v, rev) = load_kind::<GatewayRecord>(s, ISCSI_GATEWAY).await?;
    v.sort_by(|a, b| a.gateway.cmp(&b.gateway));
    Ok((v, rev))
}

/// Store what this gateway's LIO holds (the `user:cairn` objects read back).
async fn record_gateway(g: &Gw<'_>, held: BTreeSet<String>) -> Result<(), Failure> {
    let rec = GatewayRecord { gateway: g.gateway.clone(), luns: held };
    let doc = serde_json::to_string(&rec).expect("plain data always serializes");
    call(
        g.s,
        MgmtRequest::GatewayPut {
            kind: ISCSI_GATEWAY.into(),
            name: g.gateway.clone(),
            doc,
            if_unchanged_since: None,
        },
    )
    .await
    .map_err(|f| {
        Failure::failed(format!("cannot store gateway record {}: {}", g.gateway, f.message))
    })?;
    Ok(())
}

/// Remove the backing file and the record of LUN `lun` (being deleted, held by no gateway,
/// or `--force`).
async fn finish_delete(s: &Settings, lun: &IscsiLun) -> Result<(), Failure> {
    let vol = mount(s, &lun.volume).await?;
    let r = remove_backing_file(&vol, lun).await;
    let _ = vol.unmount().await;
    r?;
    call(s, MgmtRequest::GatewayDelete { kind: ISCSI_LUN.into(), name: lun.name.clone() }).await?;
    Ok(())
}

/// After a sync: remove the files (and records) of the LUNs being deleted that no gateway
/// holds any more. Returns what was removed, for the report.
async fn finish_deletes(s: &Settings) -> Result<Vec<String>, Failure> {
    let luns = load_luns(s).await?;
    if !luns.iter().any(|l| l.deleting) {
        return Ok(vec![]);
    }
    let (gws, _) = load_gateways(s).await?;
    let mut done = vec![];
    for l in iscsi::deletable(&luns, &gws) {
        finish_delete(s, l).await?;
        done.push(format!(
            "LUN {}: no gateway holds it any more; removed {}/{}",
            l.name, l.volume, l.path
        ));
    }
    Ok(done)
}

/// A random UUID (v4), the unit serial LIO reports for a LUN on every gateway.
fn new_wwn() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn load_luns(s: &Settings) -> Result<Vec<IscsiLun>, Failure> {
    let (mut v, _) = load_kind::<IscsiLun>(s, ISCSI_LUN).await?;
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

async fn load_targets_rev(s: &Settings) -> Result<(Vec<IscsiTarget>, u64), Failure> {
    let (mut v, rev) = load_kind::<IscsiTarget>(s, ISCSI_TARGET).await?;
    v.sort_by(|a, b| a.iqn.cmp(&b.iqn));
    Ok((v, rev))
}

async fn load_targets(s: &Settings) -> Result<Vec<IscsiTarget>, Failure> {
    Ok(load_targets_rev(s).await?.0)
}

fn find_lun<'a>(luns: &'a [IscsiLun], name: &str) -> Result<&'a IscsiLun, Failure> {
    luns.iter()
        .find(|l| l.name == name)
        .ok_or_else(|| Failure::failed(format!("no LUN named {name}")))
}

fn mapped_by<'a>(targets: &'a [IscsiTarget], name: &str) -> Vec<&'a str> {
    targets
        .iter()
        .filter(|t| t.luns.iter().any(|m| m.name == name))
        .map(|t| t.iqn.as_str())
        .collect()
}

async fn mount(s: &Settings, volume: &str) -> Result<Arc<cairn_client::Volume>, Failure> {
    let opts = cairn_client::MountOptions {
        servers: servers(s).await?,
        volume: volume.to_string(),
        client_name: "cairn-cli".into(),
        connect_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    cairn_client::Volume::mount(opts)
        .await
        .map_err(|x| Failure::failed(format!("cannot mount volume {volume}: {}", x.message)))
}

/// Make the LUN's backing file: parent directories as needed, the file exclusively (an
/// existing one is refused), then its size (fallocated unless thin).
async fn make_backing_file(vol: &cairn_client::Volume, lun: &IscsiLun) -> Result<(), Failure> {
    let c = Creds::root();
    let where_ = |m: String| Failure::failed(format!("{}/{}: {m}", lun.volume, lun.path));
    let comps: Vec<&str> = lun.path.split('/').collect();
    let (file, dirs) = comps.split_last().expect("checked: non-empty path");
    let mut dir = Id::ROOT;
    for d in dirs {
        let a = match vol.lookup(&c, dir, d.as_bytes()).await {
            Ok(a) => a,
            Err(e) if e.errno == Errno::ENOENT => {
                match vol.mkdir(&c, dir, d.as_bytes(), 0o755).await {
                    Ok(a) => a,
                    Err(e) if e.errno == Errno::EEXIST => {
                        vol.lookup(&c, dir, d.as_bytes()).await.map_err(|e| where_(e.message))?
                    }
                    Err(e) => {
                        return Err(where_(format!("cannot create directory {d}: {}", e.message)))
                    }
                }
            }
            Err(e) => return Err(where_(e.message)),
        };
        if a.kind != FileType::Directory {
            return Err(where_(format!("{d} is not a directory")));
        }
        dir = a.id;
    }
    let a = match vol.create(&c, dir, file.as_bytes(), 0o600, true).await {
        Ok(a) => a,
        Err(e) if e.errno == Errno::EEXIST => {
            return Err(Failure::failed(format!(
                "backing file {}/{} already exists (give another --file, or delete it)",
                lun.volume, lun.path
            )))
        }
        Err(e) => return Err(where_(format!("cannot create: {}", e.message))),
    };
    let sized = if lun.thin {
        vol.setattr(&c, a.id, &SetAttr { size: Some(lun.size), ..Default::default() })
            .await
            .map(|_| ())
    } else {
        vol.fallocate(&c, a.id, 0, 0, lun.size).await
    };
    if let Err(e) = sized {
        let _ = vol.unlink(&c, dir, file.as_bytes()).await;
        return Err(where_(format!(
            "cannot {} {}: {}",
            if lun.thin { "size it to" } else { "allocate" },
            format_size(lun.size),
            e.message
        )));
    }
    Ok(())
}

async fn remove_backing_file(vol: &cairn_client::Volume, lun: &IscsiLun) -> Result<(), Failure> {
    let c = Creds::root();
    let (dir, file) = match lun.path.rsplit_once('/') {
        Some((d, f)) => {
            let a = vol.resolve(&c, format!("/{d}").as_bytes()).await;
            (a.map(|a| a.id), f)
        }
        None => (Ok(Id::ROOT), lun.path.as_str()),
    };
    let r = match dir {
        Ok(d) => vol.unlink(&c, d, file.as_bytes()).await,
        Err(e) => Err(e),
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.errno == Errno::ENOENT => Ok(()),
        Err(e) => Err(Failure::failed(format!(
            "record deleted, but {}/{} could not be removed: {}",
            lun.volume, lun.path, e.message
        ))),
    }
}

async fn lun_create(g: &Gw<'_>, lun: IscsiLun, out: &mut dyn Write) -> Result<(), Failure> {
    let s = g.s;
    let srv = servers(s).await?;
    check_target(s, &lun.volume, "/", &srv).await?;
    lun.cfgstring(&srv).map_err(Failure::failed)?;
    let (luns, revision) = load_kind::<IscsiLun>(s, ISCSI_LUN).await?;
    check_new_lun(&lun, &luns)?;
    let vol = mount(s, &lun.volume).await?;
    let made = make_backing_file(&vol, &lun).await;
    if let Err(f) = made {
        let _ = vol.unmount().await;
        return Err(f);
    }
    let mut stored = false;
    let mut revision = revision;
    let mut refusal = None;
    for _ in 0..STORE_RETRIES {
        let doc = serde_json::to_string(&lun).expect("plain data always serializes");
        if store_if_unchanged(s, ISCSI_LUN, &lun.name, doc, revision).await? {
            stored = true;
            break;
        }
        let (luns, rev) = load_kind::<IscsiLun>(s, ISCSI_LUN).await?;
        if let Err(f) = check_new_lun(&lun, &luns) {
            refusal = Some(f);
            break;
        }
        revision = rev;
    }
    if !stored {
        let _ = remove_backing_file(&vol, &lun).await;
        let _ = vol.unmount().await;
        return Err(refusal
            .unwrap_or_else(|| Failure::failed("the LUNs kept changing concurrently; try again")));
    }
    let _ = vol.unmount().await;
    let applied = apply_here(g).await;
    let message = format!(
        "LUN {} is {}/{} ({}, {})",
        lun.name,
        lun.volume,
        lun.path,
        format_size(lun.size),
        if lun.thin { "thin" } else { "allocated" }
    );
    change_out(g, "iscsi lun create", &lun.name, message, serde_json::to_value(&lun), applied, out)
}

fn check_new_lun(lun: &IscsiLun, luns: &[IscsiLun]) -> Result<(), Failure> {
    if let Some(l) = luns.iter().find(|l| l.name == lun.name) {
        return Err(Failure::failed(if l.deleting {
            format!(
                "LUN {} is being deleted (gateways have not all synced yet; see cairn iscsi lun show {})",
                lun.name, lun.name
            )
        } else {
            format!("LUN {} already exists", lun.name)
        }));
    }
    if let Some(l) = luns.iter().find(|l| l.volume == lun.volume && l.path == lun.path) {
        return Err(Failure::failed(format!(
            "backing file {}/{} is already LUN {}",
            lun.volume, lun.path, l.name
        )));
    }
    Ok(())
}

/// Delete a LUN. The backing file may only go once no gateway's LIO holds it: the record
/// is marked `deleting` (no gateway creates it any more; each sync takes it out of LIO and
/// records that), and the file and record are removed here if no gateway record lists the
/// LUN, else by the sync that lets it go last. `--keep-file` drops the record at once and
/// leaves the file; `--force` removes both at once (a gateway that is gone for good).
async fn lun_delete(
    g: &Gw<'_>,
    name: &str,
    keep: bool,
    force: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let s = g.s;
    let targets = load_targets(s).await?;
    let by = mapped_by(&targets, name);
    if let Some(t) = by.first() {
        return Err(Failure::failed(format!(
            "LUN {name} is mapped by target {} (cairn iscsi target lun remove {t} {name})",
            by.join(", ")
        )));
    }
    let mut lun = None;
    for _ in 0..STORE_RETRIES {
        let (luns, rev) = load_kind::<IscsiLun>(s, ISCSI_LUN).await?;
        let mut l = find_lun(&luns, name)?.clone();
        if keep || force || l.deleting {
            lun = Some(l);
            break;
        }
        l.deleting = true;
        let doc = serde_json::to_string(&l).expect("plain data always serializes");
        if store_if_unchanged(s, ISCSI_LUN, name, doc, rev).await? {
            lun = Some(l);
            break;
        }
    }
    let Some(mut lun) = lun else {
        return Err(Failure::failed("the LUNs kept changing concurrently; try again"));
    };
    let (message, applied) = if keep || force {
        let (gws, _) = load_gateways(s).await?;
        let held: Vec<String> = iscsi::holders(name, &gws).into_iter().map(String::from).collect();
        call(s, MgmtRequest::GatewayDelete { kind: ISCSI_LUN.into(), name: name.into() }).await?;
        // LIO lets go of the file before it goes.
        let applied = apply_here(g).await;
        if force {
            let vol = mount(s, &lun.volume).await?;
            let r = remove_backing_file(&vol, &lun).await;
            let _ = vol.unmount().await;
            r?;
            forget_holders(s, name).await?;
        }
        let still = if held.is_empty() {
            String::new()
        } else {
            format!(" (gateways {} still listed it)", held.join(", "))
        };
        let m = if keep {
            format!("LUN {name} deleted; {}/{} kept{still}", lun.volume, lun.path)
        } else {
            format!(
                "LUN {name} deleted; {}/{} removed at once (--force){still}",
                lun.volume, lun.path
            )
        };
        (m, applied)
    } else {
        // A gateway here takes it out of its LIO (and may finish the delete) first.
        let applied = apply_here(g).await;
        let luns = load_luns(s).await?;
        let m = match luns.iter().find(|l| l.name == name) {
            None => format!("LUN {name} deleted; {}/{} removed", lun.volume, lun.path),
            Some(l) => {
                lun = l.clone();
                let (gws, _) = load_gateways(s).await?;
                let held = iscsi::holders(name, &gws);
                if held.is_empty() {
                    finish_delete(s, &lun).await?;
                    format!("LUN {name} deleted; {}/{} removed", lun.volume, lun.path)
                } else {
                    format!(
                        "LUN {name} is being deleted: still in the LIO of gateway(s) {}; \
                         {}/{} is removed by the `cairn iscsi sync` that lets it go last \
                         (`cairn iscsi lun delete {name} --force` for a gateway that is \
                         gone for good)",
                        held.join(", "),
                        lun.volume,
                        lun.path
                    )
                }
            }
        };
        (m, applied)
    };
    change_out(g, "iscsi lun delete", name, message, serde_json::to_value(&lun), applied, out)
}

/// Take LUN `name` out of every gateway record (after `--force`): a gateway still running
/// puts it back in its next sync only if its LIO still has it.
async fn forget_holders(s: &Settings, name: &str) -> Result<(), Failure> {
    // one record per round; a lost race costs a round
    for _ in 0..STORE_RETRIES * 20 {
        let (gws, rev) = load_gateways(s).await?;
        let Some(mut r) = gws.into_iter().find(|r| r.luns.contains(name)) else {
            return Ok(());
        };
        r.luns.remove(name);
        let doc = serde_json::to_string(&r).expect("plain data always serializes");
        store_if_unchanged(s, ISCSI_GATEWAY, &r.gateway, doc, rev).await?;
    }
    Err(Failure::failed("the gateway records kept changing concurrently; try again"))
}

#[derive(Serialize)]
struct LunsDoc {
    luns: Vec<IscsiLun>,
}

#[derive(Serialize)]
struct LunShowDoc {
    lun: IscsiLun,
    targets: Vec<String>,
    cfgstring: String,
    file_size: u64,
    allocated_bytes: u64,
}

async fn lun_show(g: &Gw<'_>, name: &str, out: &mut dyn Write) -> Result<(), Failure> {
    let s = g.s;
    let luns = load_luns(s).await?;
    let lun = find_lun(&luns, name)?.clone();
    let targets: Vec<String> =
        mapped_by(&load_targets(s).await?, name).into_iter().map(String::from).collect();
    let cfg = lun.cfgstring(&servers(s).await?).map_err(Failure::failed)?;
    let vol = mount(s, &lun.volume).await?;
    let a = vol.resolve(&Creds::root(), format!("/{}", lun.path).as_bytes()).await;
    let _ = vol.unmount().await;
    let a = a.map_err(|e| {
        Failure::failed(format!("backing file {}/{}: {}", lun.volume, lun.path, e.message))
    })?;
    let doc = LunShowDoc {
        targets,
        cfgstring: format!("cairn/{cfg}"),
        file_size: a.size,
        allocated_bytes: a.blocks * 512,
        lun,
    };
    let text = if s.json {
        json::render(&doc)
    } else {
        let l = &doc.lun;
        format!(
            "LUN: {}\nVolume: {}\nFile: {}\nSize: {} ({} bytes)\nProvisioning: {}\n\
             Allocated: {} bytes\nWWN: {}\nTargets: {}\nConfig string: {}\n",
            l.name,
            l.volume,
            l.path,
            format_size(l.size),
            l.size,
            if l.thin { "thin" } else { "allocated" },
            doc.allocated_bytes,
            l.wwn,
            if doc.targets.is_empty() { "(none)".into() } else { doc.targets.join(", ") },
            doc.cfgstring
        )
    };
    write_out(out, &text)
}

fn luns_table(luns: &[IscsiLun], targets: &[IscsiTarget]) -> String {
    if luns.is_empty() {
        return "No iSCSI LUNs\n".into();
    }
    let rows: Vec<Vec<String>> = luns
        .iter()
        .map(|l| {
            let by = mapped_by(targets, &l.name);
            vec![
                if l.deleting { format!("{} (deleting)", l.name) } else { l.name.clone() },
                l.volume.clone(),
                l.path.clone(),
                format_size(l.size),
                if l.thin { "thin".into() } else { "allocated".into() },
                if by.is_empty() { "-".into() } else { by.join(",") },
            ]
        })
        .collect();
    table(&["Name", "Volume", "File", "Size", "Provisioning", "Targets"], &rows)
}

// ---- targets ----

/// A target as shown: CHAP passwords hidden.
fn shown(t: &IscsiTarget) -> IscsiTarget {
    let mut t = t.clone();
    for a in &mut t.acls {
        if a.chap_password.is_some() {
            a.chap_password = Some("********".into());
        }
    }
    t
}

#[derive(Serialize)]
struct TargetsDoc {
    targets: Vec<IscsiTarget>,
}

#[derive(Serialize)]
struct TargetShowDoc {
    target: IscsiTarget,
}

fn target_text(t: &IscsiTarget) -> String {
    let mut s = format!(
        "Target: {}\nPortals: {}\nAccess: {}\n",
        t.iqn,
        t.portals.join(", "),
        if t.open { "any initiator" } else { "initiators in the ACL list" }
    );
    s.push_str("LUNs:\n");
    if t.luns.is_empty() {
        s.push_str("  (none)\n");
    }
    for m in &t.luns {
        s.push_str(&format!("  lun{} {}\n", m.lun, m.name));
    }
    s.push_str("ACLs:\n");
    if t.acls.is_empty() {
        s.push_str("  (none)\n");
    }
    for a in &t.acls {
        match &a.chap_user {
            Some(u) => s.push_str(&format!("  {} (CHAP user {u})\n", a.initiator)),
            None => s.push_str(&format!("  {}\n", a.initiator)),
        }
    }
    s
}

fn targets_table(targets: &[IscsiTarget]) -> String {
    if targets.is_empty() {
        return "No iSCSI targets\n".into();
    }
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            vec![
                t.iqn.clone(),
                t.portals.join(","),
                if t.luns.is_empty() {
                    "-".into()
                } else {
                    t.luns
                        .iter()
                        .map(|m| format!("{}:{}", m.lun, m.name))
                        .collect::<Vec<_>>()
                        .join(",")
                },
                if t.open {
                    "open".into()
                } else if t.acls.iter().any(|a| a.chap_user.is_some()) {
                    format!("{} ACL(s), CHAP", t.acls.len())
                } else {
                    format!("{} ACL(s)", t.acls.len())
                },
            ]
        })
        .collect();
    table(&["Target", "Portals", "LUNs", "Access"], &rows)
}

fn find_target<'a>(targets: &'a [IscsiTarget], iqn: &str) -> Result<&'a IscsiTarget, Failure> {
    targets.iter().find(|t| t.iqn == iqn).ok_or_else(|| Failure::failed(format!("no target {iqn}")))
}

async fn target_cmd(g: &Gw<'_>, t: &IscsiTargetCmd, out: &mut dyn Write) -> Result<(), Failure> {
    let s = g.s;
    match t {
        IscsiTargetCmd::Create { iqn, portals, open } => {
            iscsi::check_iqn(iqn, "target IQN").map_err(Failure::usage)?;
            let mut ps = vec![];
            for p in if portals.is_empty() { vec!["0.0.0.0".to_string()] } else { portals.clone() }
            {
                let (ip, port) = iscsi::parse_portal(&p).map_err(Failure::usage)?;
                ps.push(iscsi::portal_string(&ip, port));
            }
            let new = IscsiTarget {
                iqn: iqn.clone(),
                portals: ps,
                luns: vec![],
                acls: vec![],
                open: *open,
            };
            new.validate().map_err(Failure::usage)?;
            let mut stored = false;
            for _ in 0..STORE_RETRIES {
                let (targets, rev) = load_targets_rev(s).await?;
                if targets.iter().any(|t| t.iqn == *iqn) {
                    return Err(Failure::failed(format!("target {iqn} already exists")));
                }
                let doc = serde_json::to_string(&new).expect("plain data always serializes");
                if store_if_unchanged(s, ISCSI_TARGET, iqn, doc, rev).await? {
                    stored = true;
                    break;
                }
            }
            if !stored {
                return Err(Failure::failed("the targets kept changing concurrently; try again"));
            }
            let applied = apply_here(g).await;
            let message = format!(
                "target {iqn} on {}{}",
                new.portals.join(", "),
                if new.open { ", open to any initiator" } else { "" }
            );
            change_out(
                g,
                "iscsi target create",
                iqn,
                message,
                serde_json::to_value(shown(&new)),
                applied,
                out,
            )
        }
        IscsiTargetCmd::Delete { iqn } => {
            let targets = load_targets(s).await?;
            let t = find_target(&targets, iqn)?.clone();
            call(s, MgmtRequest::GatewayDelete { kind: ISCSI_TARGET.into(), name: iqn.clone() })
                .await?;
            let applied = apply_here(g).await;
            change_out(
                g,
                "iscsi target delete",
                iqn,
                format!("target {iqn} deleted"),
                serde_json::to_value(shown(&t)),
                applied,
                out,
            )
        }
        IscsiTargetCmd::List => {
            let targets = load_targets(s).await?;
            let text = if s.json {
                json::render(&TargetsDoc { targets: targets.iter().map(shown).collect() })
            } else {
                targets_table(&targets)
            };
            write_out(out, &text)
        }
        IscsiTargetCmd::Show { iqn, show_secrets } => {
            let targets = load_targets(s).await?;
            let t = find_target(&targets, iqn)?;
            let t = if *show_secrets { t.clone() } else { shown(t) };
            let text =
                if s.json { json::render(&TargetShowDoc { target: t }) } else { target_text(&t) };
            write_out(out, &text)
        }
        IscsiTargetCmd::Portal(IscsiPortalCmd::Add { iqn, portal }) => {
            let (ip, port) = iscsi::parse_portal(portal).map_err(Failure::usage)?;
            let p = iscsi::portal_string(&ip, port);
            update(g, "iscsi target portal add", iqn, out, |t, _| {
                if t.portals.contains(&p) {
                    return Err(Failure::failed(format!("target {iqn} already listens on {p}")));
                }
                t.portals.push(p.clone());
                Ok(format!("target {iqn} listens on {p}"))
            })
            .await
        }
        IscsiTargetCmd::Portal(IscsiPortalCmd::Remove { iqn, portal }) => {
            let (ip, port) = iscsi::parse_portal(portal).map_err(Failure::usage)?;
            let p = iscsi::portal_string(&ip, port);
            update(g, "iscsi target portal remove", iqn, out, |t, _| {
                let before = t.portals.len();
                t.portals.retain(|x| *x != p);
                if t.portals.len() == before {
                    return Err(Failure::failed(format!("target {iqn} has no portal {p}")));
                }
                Ok(format!("target {iqn} no longer listens on {p}"))
            })
            .await
        }
        IscsiTargetCmd::Lun(IscsiMapCmd::Add { iqn, name, lun }) => {
            if lun.is_some_and(|n| n > 255) {
                return Err(Failure::usage(format!(
                    "invalid LUN number {}: 0 to 255",
                    lun.unwrap_or(0)
                )));
            }
            update(g, "iscsi target lun add", iqn, out, |t, luns| {
                if find_lun(luns, name)?.deleting {
                    return Err(Failure::failed(format!("LUN {name} is being deleted")));
                }
                if let Some(m) = t.luns.iter().find(|m| m.name == *name) {
                    return Err(Failure::failed(format!(
                        "LUN {name} is already lun{} of {iqn}",
                        m.lun
                    )));
                }
                let n = match lun {
                    Some(n) => {
                        if let Some(m) = t.luns.iter().find(|m| m.lun == *n) {
                            return Err(Failure::failed(format!(
                                "lun{n} of {iqn} is already {}",
                                m.name
                            )));
                        }
                        *n
                    }
                    None => (0..=255u16)
                        .find(|n| !t.luns.iter().any(|m| m.lun == *n))
                        .ok_or_else(|| Failure::failed(format!("{iqn} has no free LUN number")))?,
                };
                t.luns.push(TargetLun { lun: n, name: name.clone() });
                t.luns.sort_by_key(|m| m.lun);
                Ok(format!("LUN {name} is lun{n} of {iqn}"))
            })
            .await
        }
        IscsiTargetCmd::Lun(IscsiMapCmd::Remove { iqn, name }) => {
            update(g, "iscsi target lun remove", iqn, out, |t, _| {
                let before = t.luns.len();
                t.luns.retain(|m| m.name != *name);
                if t.luns.len() == before {
                    return Err(Failure::failed(format!("{iqn} does not map LUN {name}")));
                }
                Ok(format!("LUN {name} unmapped from {iqn}"))
            })
            .await
        }
        IscsiTargetCmd::Acl(IscsiAclCmd::Add {
            iqn,
            initiator,
            chap_user,
            chap_password,
            chap_password_file,
        }) => {
            iscsi::check_iqn(initiator, "initiator name").map_err(Failure::usage)?;
            let from_file = match chap_password_file {
                Some(f) => Some(read_secret(f).map_err(Failure::usage)?),
                None => None,
            };
            let chap_password = &from_file.or_else(|| chap_password.clone());
            if let (Some(u), Some(p)) = (chap_user, chap_password) {
                iscsi::check_chap("user", u).map_err(Failure::usage)?;
                iscsi::check_chap("password", p).map_err(Failure::usage)?;
            }
            update(g, "iscsi target acl add", iqn, out, |t, _| {
                if t.acls.iter().any(|a| a.initiator == *initiator) {
                    return Err(Failure::failed(format!(
                        "{initiator} is already in the ACLs of {iqn}"
                    )));
                }
                t.acls.push(Acl {
                    initiator: initiator.clone(),
                    chap_user: chap_user.clone(),
                    chap_password: chap_password.clone(),
                });
                Ok(format!(
                    "{initiator} may log in to {iqn}{}{}",
                    if chap_user.is_some() { " with CHAP" } else { "" },
                    if t.open { " (the target is open: ACLs apply once it is not)" } else { "" }
                ))
            })
            .await
        }
        IscsiTargetCmd::Acl(IscsiAclCmd::Remove { iqn, initiator }) => {
            update(g, "iscsi target acl remove", iqn, out, |t, _| {
                let before = t.acls.len();
                t.acls.retain(|a| a.initiator != *initiator);
                if t.acls.len() == before {
                    return Err(Failure::failed(format!(
                        "{initiator} is not in the ACLs of {iqn}"
                    )));
                }
                Ok(format!("{initiator} removed from the ACLs of {iqn}"))
            })
            .await
        }
    }
}

/// Change target `iqn` with `f` (given the LUNs), check it and store it if no target
/// changed meanwhile (else read, change and check again).
async fn update<F>(
    g: &Gw<'_>,
    command: &str,
    iqn: &str,
    out: &mut dyn Write,
    mut f: F,
) -> Result<(), Failure>
where
    F: FnMut(&mut IscsiTarget, &[IscsiLun]) -> Result<String, Failure>,
{
    let s = g.s;
    for _ in 0..STORE_RETRIES {
        let (targets, rev) = load_targets_rev(s).await?;
        let luns = load_luns(s).await?;
        let mut t = find_target(&targets, iqn)?.clone();
        let message = f(&mut t, &luns)?;
        t.validate().map_err(Failure::failed)?;
        let doc = serde_json::to_string(&t).expect("plain data always serializes");
        if store_if_unchanged(s, ISCSI_TARGET, iqn, doc, rev).await? {
            let applied = apply_here(g).await;
            return change_out(
                g,
                command,
                iqn,
                message,
                serde_json::to_value(shown(&t)),
                applied,
                out,
            );
        }
    }
    Err(Failure::failed("the targets kept changing concurrently; try again"))
}

#[derive(Serialize)]
struct ChangeDoc {
    command: String,
    name: String,
    result: String,
    message: String,
    object: serde_json::Value,
    /// What happened on this gateway's LIO; null where this machine is not a gateway.
    applied: Option<SyncReport>,
    /// Why applying on this gateway failed (the change is stored all the same).
    apply_error: Option<String>,
}

fn change_out(
    g: &Gw<'_>,
    command: &str,
    name: &str,
    message: String,
    object: serde_json::Result<serde_json::Value>,
    applied: Result<Option<SyncReport>, Failure>,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (applied, apply_error) = match applied {
        Ok(a) => (a, None),
        Err(f) => (None, Some(f.message)),
    };
    let text = if g.s.json {
        json::render(&ChangeDoc {
            command: command.into(),
            name: name.into(),
            result: "success".into(),
            message,
            object: object.unwrap_or_default(),
            applied,
            apply_error,
        })
    } else {
        let how = match (&applied, &apply_error) {
            (_, Some(e)) => format!("stored, but applying it to the local LIO failed: {e}\n"),
            (None, None) => format!(
                "stored; {} does not exist here, so gateways apply it with `cairn iscsi sync`\n",
                g.tcli.conf_dir.display()
            ),
            (Some(r), None) => {
                format!("applied to the local LIO ({} targetcli commands)\n", r.commands.len())
            }
        };
        format!("{command}: {name}: success: {message}\n{how}")
    };
    write_out(out, &text)
}

// ---- sync ----

#[derive(Serialize, Clone, Debug)]
struct SyncReport {
    /// The targetcli commands (CHAP passwords hidden); run, or to run with --dry-run.
    commands: Vec<String>,
    dry_run: bool,
    /// LUNs being deleted whose backing file this sync removed (no gateway holds them).
    removed: Vec<String>,
}

/// The wanted LIO state, from the store.
async fn wanted(g: &Gw<'_>) -> Result<(Lio, BTreeSet<String>), Failure> {
    let luns = load_luns(g.s).await?;
    let targets = load_targets(g.s).await?;
    let srv = servers(g.s).await?;
    let want = iscsi::desired(&luns, &targets, &srv, g.alua_tag).map_err(Failure::failed)?;
    let iqns = targets.into_iter().map(|t| t.iqn).collect();
    Ok((want, iqns))
}

/// Bring this gateway's LIO to the store: read, plan, run, read back; then record what it
/// holds and finish the deletes of LUNs no gateway holds any more.
async fn apply(g: &Gw<'_>) -> Result<SyncReport, Failure> {
    let (mut report, held) = apply_lio(g).await?;
    record_gateway(g, held).await?;
    report.removed = finish_deletes(g.s).await?;
    Ok(report)
}

async fn apply_lio(g: &Gw<'_>) -> Result<(SyncReport, BTreeSet<String>), Failure> {
    let (want, iqns) = wanted(g).await?;
    let tcli = Targetcli { program: g.tcli.program.clone(), conf_dir: g.tcli.conf_dir.clone() };
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&tcli.conf_dir)
            .map_err(|e| format!("cannot create {}: {e}", tcli.conf_dir.display()))?;
        let cur = tcli.read()?;
        let mut managed = tcli.applied();
        let cmds = iscsi::plan(&cur, &want, &managed);
        if cmds.is_empty() {
            let held = cur.sos.keys().cloned().collect();
            return Ok((SyncReport { commands: vec![], dry_run: false, removed: vec![] }, held));
        }
        let log = tcli.run(&cmds)?;
        managed.extend(iqns.iter().cloned());
        let after = tcli.read_saved(&log)?;
        let left = iscsi::plan(&after, &want, &managed);
        // What is gone for good need not be remembered.
        tcli.set_applied(&iqns)?;
        if !left.is_empty() {
            let errors: Vec<&str> = log
                .lines()
                .filter(|l| {
                    !l.trim().is_empty()
                        && !l.contains("Created")
                        && !l.contains("Deleted")
                        && !l.starts_with("Parameter")
                        && !l.contains("Global pref")
                })
                .collect();
            return Err(format!(
                "targetcli did not apply {} of {} commands; still to do: {}; targetcli said: {}",
                left.len(),
                cmds.len(),
                left.iter().map(|c| iscsi::redact(c)).collect::<Vec<_>>().join(" | "),
                errors.join(" | ")
            ));
        }
        let held = after.sos.keys().cloned().collect();
        let commands = cmds.iter().map(|c| iscsi::redact(c)).collect();
        Ok((SyncReport { commands, dry_run: false, removed: vec![] }, held))
    })
    .await
    .map_err(|e| Failure::failed(format!("apply task failed: {e}")))?
    .map_err(Failure::failed)
}

/// Apply on this gateway if it is one (its conf dir exists).
async fn apply_here(g: &Gw<'_>) -> Result<Option<SyncReport>, Failure> {
    if !g.tcli.conf_dir.is_dir() {
        return Ok(None);
    }
    apply(g).await.map(Some)
}

fn sync_text(r: &SyncReport) -> String {
    let mut s = String::new();
    for m in &r.removed {
        s.push_str(&format!("{m}\n"));
    }
    if r.commands.is_empty() {
        return s + "LIO is up to date: nothing to change\n";
    }
    s += &if r.dry_run {
        format!("would run {} targetcli commands:\n", r.commands.len())
    } else {
        format!("ran {} targetcli commands:\n", r.commands.len())
    };
    for c in &r.commands {
        s.push_str(&format!("  {c}\n"));
    }
    s
}

async fn sync(
    g: &Gw<'_>,
    dry_run: bool,
    from: Option<&std::path::Path>,
    watch: bool,
    interval: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    if dry_run {
        let (want, _) = wanted(g).await?;
        let cur = match from {
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .map_err(|e| Failure::failed(format!("cannot read {}: {e}", f.display())))?;
                iscsi::parse_saveconfig(&text)
                    .map_err(|e| Failure::failed(format!("{}: {e}", f.display())))?
            }
            None => {
                std::fs::create_dir_all(&g.tcli.conf_dir).map_err(|e| {
                    Failure::failed(format!("cannot create {}: {e}", g.tcli.conf_dir.display()))
                })?;
                g.tcli.read().map_err(Failure::failed)?
            }
        };
        let cmds = iscsi::plan(&cur, &want, &g.tcli.applied());
        let r = SyncReport {
            commands: cmds.iter().map(|c| iscsi::redact(c)).collect(),
            dry_run: true,
            removed: vec![],
        };
        let text = if g.s.json { json::render(&r) } else { sync_text(&r) };
        return write_out(out, &text);
    }
    super::gateway::sync_loop("iscsi", watch, interval, out, || async move {
        let r = apply(g).await?;
        let text = if g.s.json { json::render(&r) } else { sync_text(&r) };
        Ok((text, !r.commands.is_empty() || !r.removed.is_empty(), 0, None))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wwns_are_uuids() {
        let a = new_wwn();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_ne!(a, new_wwn());
    }

    #[test]
    fn chap_secrets_come_from_a_file_not_argv() {
        use crate::args::{Cli, Command, IscsiAclCmd, IscsiCmd, IscsiTargetCmd};
        use clap::Parser;
        let dir = std::env::temp_dir().join(format!("cairn-chap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        std::fs::write(&f, "S3cret-pass.12\nignored\n").unwrap();
        assert_eq!(read_secret(&f).unwrap(), "S3cret-pass.12");
        std::fs::write(&f, "\n").unwrap();
        assert!(read_secret(&f).unwrap_err().contains("no CHAP secret"));
        assert!(read_secret(&dir.join("missing")).unwrap_err().contains("cannot read"));
        let _ = std::fs::remove_dir_all(&dir);

        let base = [
            "cairn",
            "iscsi",
            "target",
            "acl",
            "add",
            "iqn.2024-01.com.example:t",
            "iqn.1994-05.com.redhat:h",
        ];
        let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
        let cli = parse(&["--chap-user", "h", "--chap-password-file", "-"]).unwrap();
        let Command::Iscsi(a) = cli.command else { panic!() };
        let IscsiCmd::Target(IscsiTargetCmd::Acl(IscsiAclCmd::Add { chap_password_file, .. })) =
            a.command
        else {
            panic!()
        };
        assert_eq!(chap_password_file.as_deref(), Some(std::path::Path::new("-")));
        // A user needs a secret; one secret only.
        assert!(parse(&["--chap-user", "h"]).is_err());
        assert!(parse(&["--chap-user", "h", "--chap-password", "x", "--chap-password-file", "f"])
            .is_err());
        assert!(parse(&["--chap-password-file", "f"]).is_err());
    }
}
