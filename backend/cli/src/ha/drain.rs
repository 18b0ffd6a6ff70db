//! `cairn gateway ha drain|undrain NODE`: planned moves, and when they are done
//! ([`drain_done`], [`undrain_done`], pure).

use super::status::{crm_status, program_exists, HaStatus};
use crate::exit;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;

/// Where one VIP went in a drain (or where it runs after an undrain).
#[derive(Serialize, Debug, Default, PartialEq, Eq, Clone)]
pub struct HaMove {
    pub vip: String,
    pub from: String,
    /// The gateway it runs on now.
    pub to: String,
}

/// The result of `cairn gateway ha drain|undrain NODE`.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct HaDrain {
    pub node: String,
    /// `drain` or `undrain`.
    pub action: String,
    /// drain: the VIPs NODE held and where each went; undrain: the VIPs NODE holds now
    /// (`from` is where each ran before).
    pub vips: Vec<HaMove>,
    /// From the pcs call to the settled state.
    pub seconds: f64,
}

/// NODE must be a node of the cluster `st` describes.
pub fn check_node(st: &HaStatus, node: &str) -> Result<(), String> {
    if st.nodes.iter().any(|n| n.name == node) {
        return Ok(());
    }
    let names: Vec<&str> = st.nodes.iter().map(|n| n.name.as_str()).collect();
    Err(format!(
        "'{node}' is not a gateway of this Pacemaker cluster (its gateways: {})",
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    ))
}

/// The VIPs running on `node`.
pub fn vips_on(st: &HaStatus, node: &str) -> Vec<String> {
    st.vips
        .iter()
        .filter(|v| v.nodes.iter().any(|n| n == node))
        .map(|v| v.resource.clone())
        .collect()
}

/// Has the drain of `node` finished? `Ok(moves)` when NODE is on standby and every VIP in
/// `before` runs on exactly one other gateway; `Err(what is still pending)` otherwise.
pub fn drain_done(st: &HaStatus, node: &str, before: &[String]) -> Result<Vec<HaMove>, String> {
    let me = st.nodes.iter().find(|n| n.name == node);
    if !me.is_some_and(|n| n.standby || !n.online) {
        return Err(format!("{node} is not on standby yet"));
    }
    let mut moves = Vec::new();
    let mut pending = Vec::new();
    for vip in before {
        let at = st.vips.iter().find(|v| &v.resource == vip).map(|v| v.nodes.clone());
        match at.as_deref() {
            Some([to]) if to != node => {
                moves.push(HaMove { vip: vip.clone(), from: node.into(), to: to.clone() })
            }
            Some([]) | None => pending.push(format!("{vip} runs nowhere")),
            Some([_]) => pending.push(format!("{vip} still runs on {node}")),
            Some(many) => pending.push(format!("{vip} runs on {}", many.join(", "))),
        }
    }
    if pending.is_empty() {
        Ok(moves)
    } else {
        Err(pending.join("; "))
    }
}

/// Has the undrain of `node` finished? `Ok(VIPs on NODE)` when NODE is online, not on
/// standby, healthy, and every VIP runs on exactly one gateway.
pub fn undrain_done(st: &HaStatus, node: &str) -> Result<Vec<String>, String> {
    let me = st.nodes.iter().find(|n| n.name == node);
    match me {
        Some(n) if !n.online => return Err(format!("{node} is offline")),
        Some(n) if n.standby => return Err(format!("{node} is still on standby")),
        None => return Err(format!("{node} is not in crm_mon's node list")),
        _ => {}
    }
    if !st.healthy.iter().any(|h| h == node) {
        return Err(format!("the cairn-gateway health check does not run on {node} yet"));
    }
    let bad: Vec<String> = st
        .vips
        .iter()
        .filter(|v| v.nodes.len() != 1)
        .map(|v| format!("{} runs on {} gateways", v.resource, v.nodes.len()))
        .collect();
    if !bad.is_empty() {
        return Err(bad.join("; "));
    }
    Ok(vips_on(st, node))
}

pub(super) fn render_drain(d: &HaDrain) -> String {
    let mut s = String::new();
    if d.action == "drain" {
        s.push_str(&format!(
            "{} drained (standby) in {:.1}s; {}\n",
            d.node,
            d.seconds,
            if d.vips.is_empty() { "it held no VIP" } else { "its VIPs moved:" }
        ));
        for m in &d.vips {
            s.push_str(&format!("  {}: {} -> {}\n", m.vip, m.from, m.to));
        }
    } else {
        s.push_str(&format!(
            "{} serves again (unstandby) after {:.1}s; {}\n",
            d.node,
            d.seconds,
            if d.vips.is_empty() { "it holds no VIP" } else { "it holds:" }
        ));
        for m in &d.vips {
            s.push_str(&format!("  {}: {} -> {}\n", m.vip, m.from, m.to));
        }
    }
    s
}
/// `cairn gateway ha drain NODE` (`drain` true) or `undrain NODE`.
pub fn drain(
    a: &crate::args::HaDrainArgs,
    drain: bool,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let verb = if drain { "drain" } else { "undrain" };
    let fail = |err: &mut dyn Write, msg: String| {
        let _ = writeln!(err, "cairn gateway ha {verb} {}: {msg}", a.node);
        exit::FAILED
    };
    if !program_exists(&a.pcs) {
        return fail(
            err,
            format!(
                "{} not found (drain and undrain use pcs: install the pcs package, or point --pcs / CAIRN_PCS at it)",
                a.pcs.display()
            ),
        );
    }
    let st = match crm_status(&a.crm_mon) {
        Ok(st) => st,
        Err(e) => return fail(err, e),
    };
    if let Err(e) = check_node(&st, &a.node) {
        return fail(err, e);
    }
    let before = vips_on(&st, &a.node);
    let placed: BTreeMap<String, String> = st
        .vips
        .iter()
        .map(|v| (v.resource.clone(), v.nodes.first().cloned().unwrap_or_else(|| "-".into())))
        .collect();
    let start = std::time::Instant::now();
    let sub = if drain { "standby" } else { "unstandby" };
    match Command::new(&a.pcs).args(["node", sub, &a.node]).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return fail(
                err,
                format!(
                    "cannot run {}: not found (drain and undrain use pcs: install the pcs package, or point --pcs / CAIRN_PCS at it)",
                    a.pcs.display()
                ),
            )
        }
        Err(e) => return fail(err, format!("cannot run {}: {e}", a.pcs.display())),
        Ok(o) if !o.status.success() => {
            return fail(
                err,
                format!(
                    "`{} node {sub} {}` exited {}: {}",
                    a.pcs.display(),
                    a.node,
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            )
        }
        Ok(_) => {}
    }
    let deadline = start + std::time::Duration::from_secs(a.timeout);
    // undrain: the placement must stay the same for 3 s (a VIP that prefers NODE moves back)
    let mut stable: Option<(Vec<String>, std::time::Instant)> = None;
    let vips = loop {
        let pending = match crm_status(&a.crm_mon) {
            Err(e) => e,
            Ok(st) if drain => match drain_done(&st, &a.node, &before) {
                Ok(m) => break m,
                Err(p) => p,
            },
            Ok(st) => match undrain_done(&st, &a.node) {
                Ok(on) => {
                    let now = std::time::Instant::now();
                    let at: Vec<String> = st
                        .vips
                        .iter()
                        .map(|v| format!("{}@{}", v.resource, v.nodes.join(",")))
                        .collect();
                    match &stable {
                        Some((prev, since)) if *prev == at => {
                            if now.duration_since(*since).as_secs() >= 3 {
                                break on
                                    .into_iter()
                                    .map(|v| HaMove {
                                        from: placed.get(&v).cloned().unwrap_or_default(),
                                        to: a.node.clone(),
                                        vip: v,
                                    })
                                    .collect();
                            }
                        }
                        _ => stable = Some((at, now)),
                    }
                    "the VIP placement is still changing".to_string()
                }
                Err(p) => p,
            },
        };
        if std::time::Instant::now() >= deadline {
            return fail(
                err,
                format!(
                    "not done after {}s: {pending} ({} stays {}; see `cairn gateway ha status`)",
                    a.timeout,
                    a.node,
                    if drain { "on standby" } else { "unstandby" }
                ),
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let d = HaDrain {
        node: a.node.clone(),
        action: verb.into(),
        vips,
        seconds: (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    let shown = if json {
        serde_json::to_string_pretty(&d).map(|s| s + "\n").unwrap_or_default()
    } else {
        render_drain(&d)
    };
    let _ = out.write_all(shown.as_bytes());
    exit::OK
}
