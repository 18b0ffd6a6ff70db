//! `cairn iscsi target ...`: create, delete, list, show, and their portals, LUN mappings
//! and ACLs.

use super::output::change_out;
use super::store::{find_lun, load_luns, load_targets, load_targets_rev};
use super::sync::apply_here;
use super::{read_secret, Gw};
use crate::args::{IscsiAclCmd, IscsiMapCmd, IscsiPortalCmd, IscsiTargetCmd};
use crate::gateway::{call, store_if_unchanged, table, write_out, Failure, STORE_RETRIES};
use crate::json;
use cairn_gateway::iscsi::{self, Acl, IscsiLun, IscsiTarget, TargetLun};
use cairn_gateway::ISCSI_TARGET;
use cairn_proto::mgmt::MgmtRequest;
use serde::Serialize;
use std::io::Write;

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

pub(super) async fn target_cmd(
    g: &Gw<'_>,
    t: &IscsiTargetCmd,
    out: &mut dyn Write,
) -> Result<(), Failure> {
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
