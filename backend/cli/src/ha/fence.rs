//! Backend fencing: `cairn gateway fence|unfence NODE`, `cairn gateway fences`.

use serde::Serialize;
use std::io::Write;

/// The gateway-object kind of fence records (`cairnd/src/fence.rs` reads them).
pub const FENCE_KIND: &str = "fence";

/// The gateway-object kind of each cairnd's report of the fence generations it applied
/// (`cairnd/src/fence.rs` writes `fence-applied/<node>` under its node lease).
pub const APPLIED_KIND: &str = "fence-applied";

/// One cairnd's report, as `cairnd/src/fence.rs`'s `AppliedDoc`.
#[derive(Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AppliedReport {
    pub node: String,
    /// gateway -> the generation of its record this node applied.
    pub generations: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    pub at: u64,
}

/// The live nodes that do not enforce generation `generation` of `gateway` yet, each with
/// what it reports ("generation N", "no record of GW", "no report"). A node that is not live
/// (its lease expired: it serves nothing) does not count.
pub fn pending_nodes(
    live: &[String],
    reports: &[AppliedReport],
    gateway: &str,
    generation: u64,
) -> Vec<(String, String)> {
    live.iter()
        .filter_map(|n| match reports.iter().find(|r| &r.node == n) {
            None => Some((n.clone(), "no report".to_string())),
            Some(r) => match r.generations.get(gateway) {
                Some(g) if *g >= generation => None,
                Some(g) => Some((n.clone(), format!("generation {g}"))),
                None => Some((n.clone(), format!("no record of {gateway}"))),
            },
        })
        .collect()
}

/// Wait (up to `secs`) until every live cairnd reports generation `generation` of
/// `gateway` applied; the live nodes that did. On timeout, exit code `NOT_APPLIED`: the
/// record stays stored (the gateway is fenced wherever it is applied), but a cairnd may
/// still serve the gateway's sessions.
async fn wait_applied(
    s: &crate::plan::Settings,
    gateway: &str,
    generation: u64,
    secs: u64,
) -> Result<(Vec<String>, f64), crate::gateway::Failure> {
    use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
    let t0 = std::time::Instant::now();
    loop {
        let live: Vec<String> = match crate::gateway::call(s, MgmtRequest::PeerStatus).await? {
            MgmtReply::Peers(p) => p.into_iter().filter(|p| p.connected).map(|p| p.name).collect(),
            other => {
                return Err(crate::gateway::Failure::failed(format!(
                    "unexpected reply from cairnd: {other:?}"
                )))
            }
        };
        let (reports, _) = crate::gateway::load_kind::<AppliedReport>(s, APPLIED_KIND).await?;
        let pending = pending_nodes(&live, &reports, gateway, generation);
        let took = t0.elapsed().as_secs_f64();
        if pending.is_empty() {
            return Ok((live, took));
        }
        if took >= secs as f64 {
            let who: Vec<String> =
                pending.iter().map(|(n, what)| format!("cairnd {n} ({what})")).collect();
            return Err(crate::gateway::Failure {
                code: crate::exit::NOT_APPLIED,
                message: format!(
                    "{gateway} is fenced in the config store (generation {generation}), but after \
                     {secs} s not every live cairnd applied it: {}; those may still serve \
                     {gateway}'s sessions (a cairnd applies a record at its watch event or its \
                     2 s re-read; one cut off from etcd drops out at its lease's end)",
                    who.join(", ")
                ),
                errno: None,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

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
            // what each live cairnd applied (its report goes with its lease)
            let (mut applied, _) =
                crate::gateway::load_kind::<AppliedReport>(s, APPLIED_KIND).await?;
            applied.sort_by(|a, b| a.node.cmp(&b.node));
            text = if s.json {
                crate::json::render(&serde_json::json!({ "fences": recs, "applied": applied }))
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
                    .chain(applied.iter().map(|a| {
                        let g: Vec<String> =
                            a.generations.iter().map(|(g, n)| format!("{g} {n}")).collect();
                        format!("applied by cairnd {}: {}\n", a.node, g.join(", "))
                    }))
                    .collect()
            };
            return Ok(());
        }
        let (node, fencing, generation, reason, wait) = match cmd {
            G::Fence(a) => (&a.node, true, None, a.reason.as_str(), a.wait_applied),
            G::Unfence(a) => (&a.node, false, a.generation, "", None),
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
                let applied = match wait {
                    Some(secs) => Some(wait_applied(s, node, next.generation, secs).await?),
                    None => None,
                };
                text = if s.json {
                    let mut doc = serde_json::json!({"gateway": node, "fenced": fencing,
                        "generation": next.generation, "changed": true});
                    if let Some((by, took)) = &applied {
                        doc["applied_by"] = serde_json::json!(by);
                        doc["applied_s"] = serde_json::json!((took * 1000.0).round() / 1000.0);
                    }
                    crate::json::render(&doc)
                } else if let Some((by, took)) = &applied {
                    format!(
                        "{node} fenced (generation {}): applied by every live cairnd ({}) in {took:.3} s: \
                         its sessions are closed and its requests refused\n",
                        next.generation,
                        by.join(", ")
                    )
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
