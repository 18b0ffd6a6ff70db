//! `cairn gateway ha status`: crm_mon's XML summarised ([`summarize`], pure), printed, and
//! the one place that runs crm_mon.

use super::ctdb::{ctdb_problems, ctdb_view, HaCtdb};
use super::xml::{is_true, tags, unescape};
use crate::exit;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::process::Command;

#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaStatus {
    /// The partition this gateway is in has quorum.
    pub quorum: bool,
    pub stonith_enabled: bool,
    /// Designated controller (Pacemaker's coordinating node), if any.
    pub dc: Option<String>,
    pub nodes: Vec<HaNode>,
    pub vips: Vec<HaVip>,
    /// Gateways where the `cairn-gateway` health clone runs (healthy stack).
    pub healthy: Vec<String>,
    pub failures: Vec<HaFailure>,
    /// Pacemaker's fence history (the fencer's, as `stonith_admin --history '*'` shows it),
    /// oldest first: who was fenced, when, by whom, with what result.
    pub fences: Vec<HaFence>,
    /// CTDB's view, when ctdbd runs on this gateway (clustered Samba).
    pub ctdb: Option<HaCtdb>,
    /// Why the cluster is not fine (empty when it is).
    pub problems: Vec<String>,
}

#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaNode {
    pub name: String,
    pub online: bool,
    pub standby: bool,
    /// Lost and not fenced yet.
    pub unclean: bool,
}

#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaVip {
    /// The IPaddr2 resource id (e.g. `vip1`).
    pub resource: String,
    /// Gateways it runs on (one when all is well).
    pub nodes: Vec<String>,
    pub role: String,
}

#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaFailure {
    pub operation: String,
    pub node: String,
    pub exit_reason: String,
}

/// One fencing operation of Pacemaker's fence history (`<fence_event>`).
#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaFence {
    /// The gateway fenced.
    pub target: String,
    /// `off`, `reboot` or `on`.
    pub action: String,
    /// `success`, `failed` or `pending`.
    pub status: String,
    /// The gateway whose fencer ran the fence devices.
    pub executed_by: String,
    /// The gateway whose Pacemaker asked for it.
    pub requested_by: String,
    /// When it completed, as Pacemaker prints it ("" while pending).
    pub completed: String,
    /// Why it failed, when it did: the fencer's extended status and exit reason.
    pub reason: String,
}

/// Summarise `crm_mon --output-as=xml`. `Err` when it is not crm_mon's XML.
pub fn summarize(xml: &str) -> Result<HaStatus, String> {
    let all = tags(xml);
    if !all.iter().any(|t| t.name == "pacemaker-result" || t.name == "crm_mon") {
        return Err("not crm_mon XML output (no <pacemaker-result>)".into());
    }
    if let Some(t) = all.iter().find(|t| t.name == "status" && !t.closing) {
        let code = t.attrs.get("code").map(String::as_str).unwrap_or("0");
        if code != "0" {
            let errors: Vec<String> = xml
                .split("<error>")
                .skip(1)
                .filter_map(|e| e.split("</error>").next())
                .map(|e| unescape(e.trim()))
                .collect();
            return Err(format!(
                "crm_mon cannot read the cluster (status {code}, {}): {} (is pacemaker running on this gateway?)",
                t.attrs.get("message").map(String::as_str).unwrap_or("?"),
                errors.join("; ")
            ));
        }
    }
    let mut st = HaStatus::default();
    // the resource being read (between <resource> and </resource>) and its agent
    let mut current: Option<(String, String, String)> = None;
    for t in &all {
        match (t.name.as_str(), t.closing) {
            ("current_dc", false) => {
                st.quorum = is_true(t, "with_quorum");
                if is_true(t, "present") {
                    st.dc = t.attrs.get("name").cloned();
                }
            }
            ("cluster_options", false) => st.stonith_enabled = is_true(t, "stonith-enabled"),
            ("node", false) if current.is_none() && t.attrs.contains_key("online") => {
                st.nodes.push(HaNode {
                    name: t.attrs.get("name").cloned().unwrap_or_default(),
                    online: is_true(t, "online"),
                    standby: is_true(t, "standby"),
                    unclean: is_true(t, "unclean"),
                })
            }
            ("resource", false) => {
                let id = t.attrs.get("id").cloned().unwrap_or_default();
                let agent = t.attrs.get("resource_agent").cloned().unwrap_or_default();
                let role = t.attrs.get("role").cloned().unwrap_or_default();
                if agent == "ocf:heartbeat:IPaddr2" {
                    st.vips.push(HaVip { resource: id.clone(), nodes: vec![], role: role.clone() });
                }
                if !t.empty {
                    current = Some((id, agent, role));
                }
            }
            ("resource", true) => current = None,
            ("node", false) => {
                if let (Some((id, agent, role)), Some(name)) = (&current, t.attrs.get("name")) {
                    if agent == "ocf:heartbeat:IPaddr2" {
                        if let Some(v) = st.vips.iter_mut().find(|v| &v.resource == id) {
                            v.nodes.push(name.clone());
                        }
                    } else if agent == "ocf:cairn:cairn-gateway" && role == "Started" {
                        st.healthy.push(name.clone());
                    }
                }
            }
            ("fence_event", false) => {
                let a = |k: &str| t.attrs.get(k).cloned().unwrap_or_default();
                let reason = [a("extended-status"), a("exit-reason")]
                    .into_iter()
                    .filter(|r| !r.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ");
                st.fences.push(HaFence {
                    target: a("target"),
                    action: a("action"),
                    status: a("status"),
                    executed_by: a("delegate"),
                    requested_by: a("origin"),
                    completed: a("completed"),
                    reason,
                });
            }
            ("failure", false) => st.failures.push(HaFailure {
                operation: t.attrs.get("op_key").cloned().unwrap_or_default(),
                node: t.attrs.get("node").cloned().unwrap_or_default(),
                exit_reason: t.attrs.get("exitreason").cloned().unwrap_or_default(),
            }),
            _ => {}
        }
    }
    st.healthy.sort();
    st.healthy.dedup();
    // oldest first; pending operations (not completed) last
    st.fences.sort_by(|a, b| {
        (a.completed.is_empty(), &a.completed).cmp(&(b.completed.is_empty(), &b.completed))
    });
    if !st.quorum {
        st.problems.push("no quorum: this gateway's partition runs no resources".into());
    }
    if !st.stonith_enabled {
        st.problems.push("fencing is disabled (stonith-enabled=false)".into());
    }
    for n in &st.nodes {
        if n.unclean {
            st.problems.push(format!("gateway {} is lost and not fenced yet", n.name));
        }
    }
    for v in &st.vips {
        match v.nodes.len() {
            0 => st.problems.push(format!("VIP {} runs nowhere", v.resource)),
            1 => {}
            _ => st.problems.push(format!(
                "VIP {} runs on {} gateways: {}",
                v.resource,
                v.nodes.len(),
                v.nodes.join(", ")
            )),
        }
    }
    if st.vips.is_empty() {
        st.problems.push("no VIP (IPaddr2 resource) is configured".into());
    }
    Ok(st)
}

pub(super) fn render(st: &HaStatus) -> String {
    let mut s = String::new();
    let yn = |b: bool| if b { "yes" } else { "no" };
    s.push_str(&format!(
        "Quorum: {}   Fencing: {}   DC: {}\n",
        yn(st.quorum),
        if st.stonith_enabled { "enabled" } else { "DISABLED" },
        st.dc.as_deref().unwrap_or("none")
    ));
    s.push_str("Gateways:\n");
    for n in &st.nodes {
        let state = if n.unclean {
            "lost, not fenced yet"
        } else if !n.online {
            "offline"
        } else if n.standby {
            "standby"
        } else {
            "online"
        };
        let health = if st.healthy.contains(&n.name) { "healthy" } else { "not serving" };
        s.push_str(&format!("  {:<16} {:<22} {}\n", n.name, state, health));
    }
    s.push_str("VIPs:\n");
    for v in &st.vips {
        let at = if v.nodes.is_empty() { "-".to_string() } else { v.nodes.join(", ") };
        s.push_str(&format!("  {:<16} {}\n", v.resource, at));
    }
    if let Some(c) = &st.ctdb {
        let leader = c.leader.map_or("none".to_string(), |l| format!("pnn {l}"));
        s.push_str(&format!("CTDB (clustered Samba): leader {leader}\n"));
        for n in &c.nodes {
            let me = if n.this_node { " (this gateway)" } else { "" };
            s.push_str(&format!("  pnn {:<3} {:<16} {}{}\n", n.pnn, n.address, n.state, me));
        }
    }
    if !st.fences.is_empty() {
        s.push_str("Fencing history:\n");
        for f in &st.fences {
            let by = if f.executed_by.is_empty() { "?" } else { f.executed_by.as_str() };
            let at =
                if f.completed.is_empty() { String::new() } else { format!(" at {}", f.completed) };
            let why = if f.reason.is_empty() { String::new() } else { format!(" ({})", f.reason) };
            s.push_str(&format!(
                "  {:<16} {} by {} for {}: {}{}{}\n",
                f.target, f.action, by, f.requested_by, f.status, why, at
            ));
        }
    }
    for f in &st.failures {
        s.push_str(&format!("Failed: {} on {}: {}\n", f.operation, f.node, f.exit_reason));
    }
    for p in &st.problems {
        s.push_str(&format!("Problem: {p}\n"));
    }
    s
}
/// `cairn gateway ha status [--json]`: run `crm_mon` (and `ctdb`) and print the summary.
pub fn status(
    crm_mon: &Path,
    ctdb: &Path,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut st = match crm_status_with(crm_mon, true) {
        Ok(st) => st,
        Err(e) => {
            let _ = writeln!(err, "cairn gateway ha status: {e}");
            return exit::FAILED;
        }
    };
    st.ctdb = ctdb_view(ctdb);
    if let Some(c) = &st.ctdb {
        st.problems.extend(ctdb_problems(c));
    }
    let shown = if json {
        serde_json::to_string_pretty(&st).map(|s| s + "\n").unwrap_or_default()
    } else {
        render(&st)
    };
    let _ = out.write_all(shown.as_bytes());
    if st.problems.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}
/// Run crm_mon and summarise it; the error names the program and what it said.
pub(super) fn crm_status(crm_mon: &Path) -> Result<HaStatus, String> {
    crm_status_with(crm_mon, false)
}

/// [`crm_status`], with the whole fence history when `fences` (`--fence-history=3`).
fn crm_status_with(crm_mon: &Path, fences: bool) -> Result<HaStatus, String> {
    let history = if fences { "--fence-history=3" } else { "--fence-history=0" };
    let o = Command::new(crm_mon)
        .args(["--one-shot", "--output-as=xml", history])
        .output()
        .map_err(|e| {
            format!(
                "cannot run {}: {e} (is pacemaker installed on this gateway?)",
                crm_mon.display()
            )
        })?;
    summarize(&String::from_utf8_lossy(&o.stdout)).map_err(|e| {
        let stderr = String::from_utf8_lossy(&o.stderr);
        let stderr = stderr.trim();
        let stderr = if stderr.is_empty() { String::new() } else { format!(" ({stderr})") };
        format!("{} ({}): {e}{stderr}", crm_mon.display(), o.status)
    })
}

/// Is `prog` a path to an existing file, or a name found in `PATH`?
pub(super) fn program_exists(prog: &Path) -> bool {
    if prog.components().count() > 1 {
        return prog.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}
