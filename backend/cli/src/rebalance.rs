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
            let secs = n.updated.saturating_sub(n.started);
            vec![
                n.node.clone(),
                n.moved.to_string(),
                n.bytes.to_string(),
                n.scanned.to_string(),
                n.failures.to_string(),
                n.skipped.to_string(),
                n.state.clone(),
                format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60),
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
