//! CTDB's view (clustered Samba on the gateways): `ctdb -X status` parsed, its problems,
//! and the one place that runs ctdb.

use serde::Serialize;
use std::path::Path;
use std::process::Command;

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
pub(super) fn ctdb_problems(c: &HaCtdb) -> Vec<String> {
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
/// CTDB's view from `ctdb -X status` and `ctdb leader`; None when ctdbd does not run here
/// (or the program is missing): a gateway without clustered Samba.
pub(super) fn ctdb_view(ctdb: &Path) -> Option<HaCtdb> {
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
