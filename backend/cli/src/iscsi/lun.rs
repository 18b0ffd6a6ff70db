//! `cairn iscsi lun create|delete|list|show`.

use super::backing::{finish_delete, make_backing_file, mount, remove_backing_file};
use super::output::change_out;
use super::store::{find_lun, forget_holders, load_gateways, load_luns, load_targets, mapped_by};
use super::sync::apply_here;
use super::Gw;
use crate::gateway::{
    call, check_target, load_kind, servers, store_if_unchanged, table, write_out, Failure,
    STORE_RETRIES,
};
use crate::json;
use cairn_gateway::iscsi::{self, format_size, IscsiLun, IscsiTarget};
use cairn_gateway::ISCSI_LUN;
use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::types::Creds;
use serde::Serialize;
use std::io::Write;

/// A random UUID (v4), the unit serial LIO reports for a LUN on every gateway.
pub(super) fn new_wwn() -> String {
    uuid::Uuid::new_v4().to_string()
}
pub(super) async fn lun_create(
    g: &Gw<'_>,
    lun: IscsiLun,
    out: &mut dyn Write,
) -> Result<(), Failure> {
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
pub(super) async fn lun_delete(
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
#[derive(Serialize)]
pub(super) struct LunsDoc {
    pub(super) luns: Vec<IscsiLun>,
}

#[derive(Serialize)]
struct LunShowDoc {
    lun: IscsiLun,
    targets: Vec<String>,
    cfgstring: String,
    file_size: u64,
    allocated_bytes: u64,
}

pub(super) async fn lun_show(g: &Gw<'_>, name: &str, out: &mut dyn Write) -> Result<(), Failure> {
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

pub(super) fn luns_table(luns: &[IscsiLun], targets: &[IscsiTarget]) -> String {
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
