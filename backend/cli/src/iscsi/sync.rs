//! Bringing this gateway's LIO to the store (`cairn iscsi sync`, and after each change on
//! a gateway): read, plan, run targetcli, read back, record what it holds.

use super::backing::finish_deletes;
use super::output::{sync_text, SyncReport};
use super::store::{load_luns, load_targets, record_gateway};
use super::Gw;
use crate::gateway::{servers, write_out, Failure};
use crate::json;
use cairn_gateway::iscsi::{self, Lio, Targetcli};
use std::collections::BTreeSet;
use std::io::Write;

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
        let cur = tcli.read().map_err(|e| e.to_string())?;
        let mut managed = tcli.applied();
        let cmds = iscsi::plan(&cur, &want, &managed);
        if cmds.is_empty() {
            let held = cur.sos.keys().cloned().collect();
            return Ok((SyncReport { commands: vec![], dry_run: false, removed: vec![] }, held));
        }
        let log = tcli.run(&cmds).map_err(|e| e.to_string())?;
        managed.extend(iqns.iter().cloned());
        let after = tcli.read_saved(&log).map_err(|e| e.to_string())?;
        let left = iscsi::plan(&after, &want, &managed);
        // What is gone for good need not be remembered.
        tcli.set_applied(&iqns).map_err(|e| e.to_string())?;
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
pub(super) async fn apply_here(g: &Gw<'_>) -> Result<Option<SyncReport>, Failure> {
    if !g.tcli.conf_dir.is_dir() {
        return Ok(None);
    }
    apply(g).await.map(Some)
}
pub(super) async fn sync(
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
    crate::gateway::sync_loop("iscsi", watch, interval, out, || async move {
        let r = apply(g).await?;
        let text = if g.s.json { json::render(&r) } else { sync_text(&r) };
        Ok((text, !r.commands.is_empty() || !r.removed.is_empty(), 0, None))
    })
    .await
}
