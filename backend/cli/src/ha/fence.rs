//! Backend fencing: `cairn gateway fence|unfence NODE`, `cairn gateway fences`.

use serde::Serialize;
use std::io::Write;

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
