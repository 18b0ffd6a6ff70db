//! `cairn gateway ha status`: the state of the gateways' Pacemaker cluster (docs/ha.md);
//! `cairn gateway ha drain|undrain NODE`: planned moves (`pcs node standby|unstandby`, then
//! a wait on `crm_mon` until the VIPs have moved: [`drain_done`], [`undrain_done`]).
//!
//! Runs `crm_mon --one-shot --output-as=xml` on this gateway and summarises it: quorum,
//! fencing, the gateways (online, standby, unclean), where each virtual IP (IPaddr2
//! resource) runs, which gateways pass the `cairn-gateway` health check, and the failed
//! actions with their exit reasons. Where CTDB (clustered Samba) runs on the gateway, it
//! adds CTDB's view from `ctdb -X status` and `ctdb leader`: each node's state and which
//! node is the leader (the holder of the cluster lock). CTDB owns no address here: the
//! VIPs above serve SMB too. The summaries are pure ([`summarize`], [`parse_ctdb_status`])
//! and unit-tested; only [`status`] runs programs.
//!
//! Exit code: 0 when the cluster has quorum and every VIP runs on exactly one gateway,
//! 1 otherwise (also when crm_mon cannot be run or its output cannot be read), or when a
//! connected CTDB node is banned or unhealthy.

use crate::exit;
use serde::Serialize;
use std::collections::BTreeMap;
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

#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaCtdb {
    /// The leader's pnn (it holds the cluster lock), if CTDB knows one.
    pub leader: Option<u32>,
    pub nodes: Vec<HaCtdbNode>,
}

#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub struct HaCtdbNode {
    pub pnn: u32,
    pub address: String,
    /// OK, or the first of DISCONNECTED, BANNED, STOPPED, DISABLED, UNHEALTHY, UNKNOWN.
    pub state: String,
    /// The node this command ran on.
    pub this_node: bool,
}

/// Parse `ctdb -X status` (`|Node|IP|Disconnected|...|ThisNode|` and one row per node).
pub fn parse_ctdb_status(text: &str) -> Result<Vec<HaCtdbNode>, String> {
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').collect())
        .collect();
    let head = rows
        .first()
        .filter(|h| h.first() == Some(&"Node"))
        .ok_or("not `ctdb -X status` output (no |Node| header)")?;
    let col = |name: &str| head.iter().position(|h| *h == name);
    let ip = col("IP").ok_or("no IP column in `ctdb -X status`")?;
    let flags = ["Disconnected", "Banned", "Stopped", "Disabled", "Unhealthy", "Unknown"];
    let mut nodes = Vec::new();
    for r in &rows[1..] {
        let pnn = r[0].parse::<u32>().map_err(|_| format!("bad pnn '{}' in ctdb status", r[0]))?;
        let set = |name: &str| col(name).and_then(|i| r.get(i)).is_some_and(|v| *v == "1");
        let state = flags.iter().find(|f| set(f)).map_or("OK".into(), |f| f.to_uppercase());
        nodes.push(HaCtdbNode {
            pnn,
            address: r.get(ip).unwrap_or(&"").to_string(),
            state,
            this_node: col("ThisNode").and_then(|i| r.get(i)) == Some(&"Y"),
        });
    }
    Ok(nodes)
}

/// Problems of CTDB's view: a connected node that cannot serve (a disconnected one is a
/// gateway that is down, which Pacemaker's part reports).
fn ctdb_problems(c: &HaCtdb) -> Vec<String> {
    let mut p = Vec::new();
    for n in &c.nodes {
        if n.state == "BANNED" || n.state == "UNHEALTHY" {
            p.push(format!(
                "CTDB node {} ({}) is {}: its smbd cannot serve",
                n.pnn, n.address, n.state
            ));
        }
    }
    if c.leader.is_none() && c.nodes.iter().any(|n| n.state == "OK") {
        p.push("CTDB has no leader (is its cluster lock reachable?)".into());
    }
    p
}

/// One XML start (or empty) tag: its name and attributes.
struct Tag {
    name: String,
    attrs: BTreeMap<String, String>,
    closing: bool,
    empty: bool,
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The tags of `xml` in order (comments, declarations and text skipped). crm_mon's output
/// is machine-written and flat enough for this; a malformed tag ends the scan.
fn tags(xml: &str) -> Vec<Tag> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let Some(end) = rest.find('>') else { break };
        let body = &rest[..end];
        rest = &rest[end + 1..];
        if body.starts_with('?') || body.starts_with('!') {
            continue;
        }
        let closing = body.starts_with('/');
        let body = body.trim_start_matches('/');
        let empty = body.ends_with('/');
        let body = body.trim_end_matches('/');
        let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let mut tag =
            Tag { name: body[..name_end].to_string(), attrs: BTreeMap::new(), closing, empty };
        let mut a = &body[name_end..];
        while let Some(eq) = a.find("=\"") {
            let key = a[..eq].trim().to_string();
            let v = &a[eq + 2..];
            let Some(q) = v.find('"') else { break };
            tag.attrs.insert(key, unescape(&v[..q]));
            a = &v[q + 1..];
        }
        out.push(tag);
    }
    out
}

fn is_true(t: &Tag, k: &str) -> bool {
    t.attrs.get(k).map(String::as_str) == Some("true")
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

fn render(st: &HaStatus) -> String {
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
    for f in &st.failures {
        s.push_str(&format!("Failed: {} on {}: {}\n", f.operation, f.node, f.exit_reason));
    }
    for p in &st.problems {
        s.push_str(&format!("Problem: {p}\n"));
    }
    s
}

/// CTDB's view from `ctdb -X status` and `ctdb leader`; None when ctdbd does not run here
/// (or the program is missing): a gateway without clustered Samba.
fn ctdb_view(ctdb: &Path) -> Option<HaCtdb> {
    let run = |args: &[&str]| {
        Command::new(ctdb)
            .args(["-t", "3"])
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let nodes = parse_ctdb_status(&run(&["-X", "status"])?).ok()?;
    let leader = run(&["leader"]).and_then(|s| s.trim().parse().ok());
    Some(HaCtdb { leader, nodes })
}

/// `cairn gateway ha status [--json]`: run `crm_mon` (and `ctdb`) and print the summary.
pub fn status(
    crm_mon: &Path,
    ctdb: &Path,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut st = match crm_status(crm_mon) {
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

fn render_drain(d: &HaDrain) -> String {
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

/// Run crm_mon and summarise it; the error names the program and what it said.
fn crm_status(crm_mon: &Path) -> Result<HaStatus, String> {
    let o =
        Command::new(crm_mon).args(["--one-shot", "--output-as=xml"]).output().map_err(|e| {
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
fn program_exists(prog: &Path) -> bool {
    if prog.components().count() > 1 {
        return prog.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
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

// ---- backend fencing: `cairn gateway fence|unfence NODE`, `cairn gateway fences` ----

/// The gateway-object kind of fence records (`cairnd/src/fence.rs` reads them).
pub const FENCE_KIND: &str = "fence";

/// A fence record, as `cairnd/src/fence.rs`'s `FenceDoc`.
#[derive(Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FenceRecord {
    pub gateway: String,
    pub fenced: bool,
    pub generation: u64,
    #[serde(default)]
    pub at: u64,
    #[serde(default)]
    pub reason: String,
}

/// The record after a fence (`fence` true) or an unfence of `node` whose record is `old`.
/// A fence raises the generation; an unfence keeps it. `Err` when an unfence names a
/// generation that is not the current one (a later fence must stay).
pub fn fence_next(
    node: &str,
    old: Option<&FenceRecord>,
    fence: bool,
    generation: Option<u64>,
    reason: &str,
    now: u64,
) -> Result<FenceRecord, String> {
    let last = old.map_or(0, |o| o.generation);
    if !fence {
        if let Some(g) = generation {
            if old.is_some_and(|o| o.fenced) && g != last {
                return Err(format!(
                    "{node} was fenced again since generation {g} (now generation {last}): not unfenced"
                ));
            }
        }
    }
    Ok(FenceRecord {
        gateway: node.to_string(),
        fenced: fence,
        generation: if fence { last + 1 } else { last },
        at: now,
        reason: reason.to_string(),
    })
}

async fn fence_records(
    s: &crate::plan::Settings,
) -> Result<(Vec<FenceRecord>, u64), crate::gateway::Failure> {
    crate::gateway::load_kind::<FenceRecord>(s, FENCE_KIND).await
}

/// `cairn gateway fence NODE`, `unfence NODE`, `fences`.
pub fn fence(
    s: &crate::plan::Settings,
    cmd: &crate::args::GatewayCmd,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    use crate::args::GatewayCmd as G;
    use crate::gateway::{block_on, report, store_if_unchanged, write_out, Failure};
    let (command, name) = match cmd {
        G::Fence(a) => ("gateway fence", Some(a.node.clone())),
        G::Unfence(a) => ("gateway unfence", Some(a.node.clone())),
        _ => ("gateway fences", None),
    };
    let mut text = String::new();
    let r = block_on(async {
        if let G::Fences = cmd {
            let (mut recs, _) = fence_records(s).await?;
            recs.sort_by(|a, b| a.gateway.cmp(&b.gateway));
            text = if s.json {
                crate::json::render(&serde_json::json!({ "fences": recs }))
            } else if recs.is_empty() {
                "no fence records\n".into()
            } else {
                recs.iter()
                    .map(|r| {
                        format!(
                            "{}: {} (generation {}, at {}){}\n",
                            r.gateway,
                            if r.fenced { "FENCED" } else { "not fenced" },
                            r.generation,
                            r.at,
                            if r.reason.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", r.reason)
                            }
                        )
                    })
                    .collect()
            };
            return Ok(());
        }
        let (node, fencing, generation, reason) = match cmd {
            G::Fence(a) => (&a.node, true, None, a.reason.as_str()),
            G::Unfence(a) => (&a.node, false, a.generation, ""),
            G::Fences => unreachable!(),
            G::Ha(_) => return Err(Failure::usage("not a fence command")),
        };
        if node.is_empty() || node.contains(['/', ' ']) {
            return Err(Failure::usage(format!("'{node}' is not a gateway name")));
        }
        for _ in 0..crate::gateway::STORE_RETRIES {
            let (recs, revision) = fence_records(s).await?;
            let old = recs.iter().find(|r| &r.gateway == node);
            if !fencing && !old.is_some_and(|o| o.fenced) {
                text = if s.json {
                    crate::json::render(&serde_json::json!({"gateway": node, "fenced": false,
                        "generation": old.map_or(0, |o| o.generation), "changed": false}))
                } else {
                    format!("{node} is not fenced\n")
                };
                return Ok(());
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let next =
                fence_next(node, old, fencing, generation, reason, now).map_err(Failure::failed)?;
            let doc = serde_json::to_string(&next).expect("plain data always serializes");
            if store_if_unchanged(s, FENCE_KIND, node, doc, revision).await? {
                text = if s.json {
                    crate::json::render(&serde_json::json!({"gateway": node, "fenced": fencing,
                        "generation": next.generation, "changed": true}))
                } else if fencing {
                    format!(
                        "{node} fenced (generation {}): every cairnd closes its sessions and refuses its requests\n",
                        next.generation
                    )
                } else {
                    format!(
                        "{node} unfenced (generation {}): its new sessions are served\n",
                        next.generation
                    )
                };
                return Ok(());
            }
        }
        Err(Failure::failed("fence records kept changing concurrently; try again"))
    });
    let r = r.and_then(|()| write_out(out, &text));
    report(s, command, name, r, out, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<?xml version="1.0"?>
<pacemaker-result api-version="2.30" request="crm_mon --one-shot --output-as=xml">
  <summary>
    <stack type="corosync"/>
    <current_dc present="true" version="2.1.5" name="gw2" id="2" with_quorum="true"/>
    <cluster_options stonith-enabled="true" symmetric-cluster="true" no-quorum-policy="stop"/>
  </summary>
  <nodes>
    <node name="gw1" id="1" online="false" standby="false" unclean="true" type="member"/>
    <node name="gw2" id="2" online="true" standby="true" unclean="false" type="member"/>
    <node name="gw3" id="3" online="true" standby="false" unclean="false" type="member"/>
  </nodes>
  <resources>
    <clone id="cairn-gw-clone" multi_state="false" unique="false">
      <resource id="cairn-gw" resource_agent="ocf:cairn:cairn-gateway" role="Started" active="true" nodes_running_on="1">
        <node name="gw3" id="3" cached="true"/>
      </resource>
      <resource id="cairn-gw" resource_agent="ocf:cairn:cairn-gateway" role="Stopped" active="false" nodes_running_on="0"/>
    </clone>
    <group id="vip1-grp" number_resources="2">
      <resource id="vip1-grace" resource_agent="ocf:cairn:cairn-nfs-grace" role="Started" nodes_running_on="1">
        <node name="gw3" id="3" cached="true"/>
      </resource>
      <resource id="vip1" resource_agent="ocf:heartbeat:IPaddr2" role="Started" nodes_running_on="1">
        <node name="gw3" id="3" cached="true"/>
      </resource>
    </group>
    <group id="vip2-grp" number_resources="1">
      <resource id="vip2" resource_agent="ocf:heartbeat:IPaddr2" role="Stopped" nodes_running_on="0"/>
    </group>
  </resources>
  <failures>
    <failure op_key="cairn-gw_monitor_3000" node="gw2" exitstatus="error" exitreason="Ganesha does not answer an NFSv4 NULL RPC on 127.0.0.1:2049 &amp; more" exitcode="1" call="42"/>
  </failures>
  <status code="0" message="OK"/>
</pacemaker-result>
"#;

    #[test]
    fn summarizes_crm_mon_xml() {
        let st = summarize(XML).unwrap();
        assert!(st.quorum && st.stonith_enabled);
        assert_eq!(st.dc.as_deref(), Some("gw2"));
        assert_eq!(st.nodes.len(), 3);
        assert!(st.nodes[0].unclean && !st.nodes[0].online);
        assert!(st.nodes[1].standby);
        assert_eq!(st.healthy, vec!["gw3".to_string()]);
        assert_eq!(st.vips.len(), 2);
        assert_eq!(st.vips[0].nodes, vec!["gw3".to_string()]);
        assert!(st.vips[1].nodes.is_empty());
        assert_eq!(st.failures.len(), 1);
        assert_eq!(
            st.failures[0].exit_reason,
            "Ganesha does not answer an NFSv4 NULL RPC on 127.0.0.1:2049 & more"
        );
        assert_eq!(
            st.problems,
            vec![
                "gateway gw1 is lost and not fenced yet".to_string(),
                "VIP vip2 runs nowhere".to_string()
            ]
        );
        let text = render(&st);
        assert!(text.contains("gw2              standby"), "{text}");
        assert!(text.contains("vip1             gw3"), "{text}");
    }

    #[test]
    fn a_vip_on_two_gateways_is_a_problem() {
        let xml = XML.replace(
            r#"<node name="gw3" id="3" cached="true"/>
      </resource>
    </group>"#,
            r#"<node name="gw3" id="3" cached="true"/>
        <node name="gw1" id="1" cached="true"/>
      </resource>
    </group>"#,
        );
        let st = summarize(&xml).unwrap();
        assert!(
            st.problems.iter().any(|p| p == "VIP vip1 runs on 2 gateways: gw3, gw1"),
            "{:?}",
            st.problems
        );
    }

    #[test]
    fn ctdb_status() {
        let x = "|Node|IP|Disconnected|Unknown|Banned|Disabled|Unhealthy|Stopped|Inactive|PartiallyOnline|ThisNode|
|0|10.78.0.21|1|0|0|0|1|0|1|0|N|
|1|10.78.0.22|0|0|0|0|0|0|0|0|N|
|2|10.78.0.23|0|0|0|0|1|0|0|0|Y|
";
        let nodes = parse_ctdb_status(x).unwrap();
        let states: Vec<&str> = nodes.iter().map(|n| n.state.as_str()).collect();
        assert_eq!(states, ["DISCONNECTED", "OK", "UNHEALTHY"]);
        assert!(nodes[2].this_node && !nodes[0].this_node);
        assert_eq!(nodes[1].address, "10.78.0.22");
        let c = HaCtdb { leader: Some(1), nodes };
        assert_eq!(
            ctdb_problems(&c),
            vec!["CTDB node 2 (10.78.0.23) is UNHEALTHY: its smbd cannot serve".to_string()]
        );
        let mut st = summarize(XML).unwrap();
        st.ctdb = Some(c);
        let text = render(&st);
        assert!(text.contains("CTDB (clustered Samba): leader pnn 1"), "{text}");
        assert!(text.contains("pnn 2   10.78.0.23       UNHEALTHY (this gateway)"), "{text}");
        assert!(parse_ctdb_status("connect() failed, errno=2").is_err());
    }

    #[test]
    fn no_quorum_and_garbage() {
        let st =
            summarize(&XML.replace(r#"with_quorum="true""#, r#"with_quorum="false""#)).unwrap();
        assert!(st.problems[0].starts_with("no quorum"));
        assert!(summarize("Connection to cluster failed").is_err());
        let down = r#"<pacemaker-result api-version="2.25" request="crm_mon --one-shot --output-as=xml">
  <status code="102" message="Not connected">
    <errors>
      <error>crm_mon: Connection to cluster failed: Connection refused</error>
    </errors>
  </status>
</pacemaker-result>"#;
        let e = summarize(down).unwrap_err();
        assert!(
            e.contains("status 102, Not connected): crm_mon: Connection to cluster failed"),
            "{e}"
        );
    }

    #[test]
    fn drain_parsing_and_progress() {
        use crate::args::{Cli, Command as C, GatewayCmd, GatewayHaCmd};
        use clap::Parser;
        let cli =
            Cli::try_parse_from(["cairn", "--json", "gateway", "ha", "drain", "gw2"]).unwrap();
        assert!(cli.json);
        let C::Gateway(GatewayCmd::Ha(GatewayHaCmd::Drain(a))) = cli.command else {
            panic!("not drain: {:?}", cli.command)
        };
        assert_eq!((a.node.as_str(), a.timeout), ("gw2", 120));
        let cli =
            Cli::try_parse_from(["cairn", "gateway", "ha", "undrain", "gw1", "--timeout", "9"])
                .unwrap();
        assert!(matches!(
            cli.command,
            C::Gateway(GatewayCmd::Ha(GatewayHaCmd::Undrain(ref a))) if a.node == "gw1" && a.timeout == 9
        ));
        assert!(Cli::try_parse_from(["cairn", "gateway", "ha", "drain"]).is_err());
        assert!(Cli::try_parse_from(["cairn", "gateway", "ha", "drain", "gw1", "--timeout", "x"])
            .is_err());

        let st = summarize(XML).unwrap();
        assert_eq!(check_node(&st, "gw3"), Ok(()));
        assert_eq!(
            check_node(&st, "gw9"),
            Err("'gw9' is not a gateway of this Pacemaker cluster (its gateways: gw1, gw2, gw3)"
                .to_string())
        );
        assert_eq!(vips_on(&st, "gw3"), vec!["vip1".to_string()]);
        // gw3 still holds vip1 and is not on standby
        assert_eq!(
            drain_done(&st, "gw3", &["vip1".into()]),
            Err("gw3 is not on standby yet".into())
        );
        let on_standby = XML.replace(
            r#"name="gw3" id="3" online="true" standby="false""#,
            r#"name="gw3" id="3" online="true" standby="true""#,
        );
        let st = summarize(&on_standby).unwrap();
        assert_eq!(drain_done(&st, "gw3", &["vip1".into()]), Err("vip1 still runs on gw3".into()));
        assert_eq!(drain_done(&st, "gw3", &["vip2".into()]), Err("vip2 runs nowhere".into()));
        let moved = on_standby.replace(
            r#"<resource id="vip1" resource_agent="ocf:heartbeat:IPaddr2" role="Started" nodes_running_on="1">
        <node name="gw3" id="3" cached="true"/>"#,
            r#"<resource id="vip1" resource_agent="ocf:heartbeat:IPaddr2" role="Started" nodes_running_on="1">
        <node name="gw2" id="2" cached="true"/>"#,
        );
        let st = summarize(&moved).unwrap();
        let m = drain_done(&st, "gw3", &["vip1".into()]).unwrap();
        assert_eq!(m, vec![HaMove { vip: "vip1".into(), from: "gw3".into(), to: "gw2".into() }]);
        let d = HaDrain { node: "gw3".into(), action: "drain".into(), vips: m, seconds: 2.5 };
        assert_eq!(
            render_drain(&d),
            "gw3 drained (standby) in 2.5s; its VIPs moved:\n  vip1: gw3 -> gw2\n"
        );

        // undrain: gw2 is on standby, gw3 healthy but vip2 runs nowhere
        let st = summarize(XML).unwrap();
        assert_eq!(undrain_done(&st, "gw2"), Err("gw2 is still on standby".into()));
        assert_eq!(undrain_done(&st, "gw1"), Err("gw1 is offline".into()));
        assert_eq!(undrain_done(&st, "gw3"), Err("vip2 runs on 0 gateways".into()));
    }

    #[test]
    fn a_fence_raises_the_generation_and_an_unfence_keeps_it() {
        let f1 = fence_next("gw1", None, true, None, "pacemaker", 5).unwrap();
        assert_eq!((f1.fenced, f1.generation, f1.reason.as_str()), (true, 1, "pacemaker"));
        let u1 = fence_next("gw1", Some(&f1), false, Some(1), "", 6).unwrap();
        assert_eq!((u1.fenced, u1.generation), (false, 1));
        let f2 = fence_next("gw1", Some(&u1), true, None, "", 7).unwrap();
        assert_eq!((f2.fenced, f2.generation), (true, 2));
        // An unfence of generation 1 does not lift the fence of generation 2.
        let e = fence_next("gw1", Some(&f2), false, Some(1), "", 8).unwrap_err();
        assert!(e.contains("fenced again since generation 1 (now generation 2)"), "{e}");
        assert!(!fence_next("gw1", Some(&f2), false, None, "", 8).unwrap().fenced);
    }
}
