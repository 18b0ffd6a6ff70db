//! `cairn volume rebalance NAME status`: the per-node progress table.

use crate::format::table;
use std::fmt::Write as _;

/// `volume rebalance NAME status`, in gluster's columns.
pub fn status(volume: &str, nodes: &[cairn_proto::mgmt::RebalanceNode]) -> String {
    if nodes.is_empty() {
        return format!(
            "volume rebalance: {volume}: no node ran a rebalance since its cairnd started\n"
        );
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let secs = if n.elapsed > 0 { n.elapsed } else { n.updated.saturating_sub(n.started) };
            let eta = match (n.state.as_str(), n.eta) {
                ("running" | "paused", Some(e)) => hms(e),
                _ => "-".into(),
            };
            vec![
                n.node.clone(),
                n.moved.to_string(),
                n.bytes.to_string(),
                n.scanned.to_string(),
                n.failures.to_string(),
                n.skipped.to_string(),
                n.state.clone(),
                hms(secs),
                format!("{}/s", n.rate),
                eta,
                n.throttle.clone(),
                n.resumes.to_string(),
            ]
        })
        .collect();
    let mut o = table(
        &[
            "Node",
            "Rebalanced-files",
            "size",
            "scanned",
            "failures",
            "skipped",
            "status",
            "run time in h:m:s",
            "rate (bytes)",
            "ETA",
            "throttle",
            "resumed",
        ],
        &rows,
    );
    for n in nodes {
        if let Some(e) = &n.last_error {
            let _ = writeln!(o, "{}: last failure: {e}", n.node);
        }
    }
    let _ = writeln!(o, "volume rebalance: {volume}: success");
    o
}

/// `volume remove-brick NAME BRICK... status`, in gluster's columns plus what is left.
pub fn remove_brick_status(volume: &str, s: &cairn_proto::mgmt::RemoveBrickStatus) -> String {
    let rows: Vec<Vec<String>> = s
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.node.clone(),
                n.moved.to_string(),
                n.bytes.to_string(),
                n.left_files.to_string(),
                n.left_bytes.to_string(),
                n.skipped.to_string(),
                n.failures.to_string(),
                n.state.clone(),
            ]
        })
        .collect();
    let mut o = table(
        &["Node", "Rebalanced-files", "size", "left", "left size", "skipped", "failures", "status"],
        &rows,
    );
    for n in &s.nodes {
        if let Some(e) = &n.last_error {
            let _ = writeln!(o, "{}: last failure: {e}", n.node);
        }
    }
    let sets: Vec<String> = s.sets.iter().map(|x| x.to_string()).collect();
    let _ = writeln!(
        o,
        "volume remove-brick: {volume}: set(s) {}: {} file(s) ({} bytes) left{}",
        sets.join(", "),
        s.left_files,
        s.left_bytes,
        if s.left_files == 0 { "; ready to commit" } else { "" }
    );
    o
}

fn hms(secs: u64) -> String {
    format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use cairn_proto::mgmt::RebalanceNode;

    #[test]
    fn the_table_shows_rate_eta_throttle_and_resumes() {
        let n = RebalanceNode {
            node: "n1".into(),
            state: "running".into(),
            scanned: 10,
            moved: 3,
            bytes: 3000,
            elapsed: 3661,
            rate: 1000,
            eta: Some(75),
            throttle: "lazy".into(),
            resumes: 2,
            ..Default::default()
        };
        let t = super::status("v", &[n]);
        for want in ["n1", "1:01:01", "1000/s", "0:01:15", "lazy", "running", "ETA", "resumed"] {
            assert!(t.contains(want), "{want} in\n{t}");
        }
    }
}
