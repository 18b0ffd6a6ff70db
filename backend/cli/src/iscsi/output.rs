//! How a stored change and a sync are reported (text or JSON).

use super::Gw;
use crate::gateway::{write_out, Failure};
use crate::json;
use serde::Serialize;
use std::io::Write;

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

pub(super) fn change_out(
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
#[derive(Serialize, Clone, Debug)]
pub(super) struct SyncReport {
    /// The targetcli commands (CHAP passwords hidden); run, or to run with --dry-run.
    pub(super) commands: Vec<String>,
    pub(super) dry_run: bool,
    /// LUNs being deleted whose backing file this sync removed (no gateway holds them).
    pub(super) removed: Vec<String>,
}
pub(super) fn sync_text(r: &SyncReport) -> String {
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
