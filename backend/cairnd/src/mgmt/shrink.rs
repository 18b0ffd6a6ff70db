//! Shrinking a live volume: `remove-brick VOL BRICK... start|status|stop|commit [force]`
//! (docs/rebalance.md, "remove-brick").
//!
//! - `start` (under the layout lock): the bricks must make whole replica sets; one
//!   compare-and-swap takes those sets out of the layout (they stay in `sets`, serving
//!   what they hold: `VolumeRecord::removing`, with the layout before), moves the layout
//!   epoch and sets `rebalancing`; then a rebalance runs on every node with bricks. Every
//!   name on a draining set hashes to another set now, so the walk moves every regular
//!   file off it, keeping its id. Again on the same sets: the runs start again (files
//!   skipped by the first run).
//! - `status`: each node's run (from its record) and what is left on the draining sets.
//! - `stop`: the runs stop and the layout before `start` comes back (a new epoch).
//! - `commit`: refused while a run is active, and while the draining sets hold a file
//!   (unless `force`); then every file that lives on another set than the one routing
//!   its id gets its stub there (ids homed on a removed set route to the volume's first
//!   remaining set: `cairn_placement::home_set`), and the sets leave the record for
//!   `retired` (their ids and brick indexes are never given again).

use super::*;
use crate::rebalance::on_head;
use cairn_config::Removal;
use cairn_proto::mgmt::{RemoveBrickNode, RemoveBrickStatus};
use cairn_proto::msg::Op;
use cairn_proto::{FileType, Id};
use std::collections::HashMap;

pub(super) fn ids(sets: &[u32]) -> String {
    sets.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
}

/// The whole replica sets that bricks `specs` make; EINVAL naming the set of a brick
/// given without the rest of its set.
async fn sets_of(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    specs: &[String],
) -> Result<Vec<u32>, RemoteError> {
    let name = &rec.name;
    if specs.is_empty() {
        return Err(fail(Errno::EINVAL, format!("volume remove-brick {name}: no bricks given")));
    }
    let mut given: Vec<(u32, &String)> = vec![];
    for spec in specs {
        let (index, ..) = find_brick(node, rec, spec).await?;
        if given.iter().any(|(i, _)| *i == index) {
            return Err(fail(
                Errno::EINVAL,
                format!("volume remove-brick {name}: brick {spec} is given twice"),
            ));
        }
        given.push((index, spec));
    }
    let mut sets = vec![];
    for s in &rec.sets {
        let named: Vec<&String> = s
            .bricks
            .iter()
            .filter_map(|b| given.iter().find(|(i, _)| *i == b.index).map(|(_, spec)| *spec))
            .collect();
        if named.is_empty() {
            continue;
        }
        if named.len() != s.bricks.len() {
            let all: Vec<String> =
                s.bricks.iter().map(|b| format!("{}:{}", b.node, b.path)).collect();
            return Err(fail(
                Errno::EINVAL,
                format!(
                    "volume remove-brick {name}: brick {} is in replica set {} ({}): remove-brick takes whole replica sets; give every brick of set {}",
                    named[0],
                    s.id,
                    all.join(" "),
                    s.id
                ),
            ));
        }
        sets.push(s.id);
    }
    Ok(sets)
}

/// The removal under way, checked to be of the sets `specs` name.
async fn removal(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    specs: &[String],
) -> Result<Removal, RemoteError> {
    let name = &rec.name;
    let Some(r) = rec.removing.clone() else {
        return Err(fail(
            Errno::EINVAL,
            format!("volume remove-brick {name}: no remove-brick is under way (start it first)"),
        ));
    };
    let sets = sets_of(node, rec, specs).await?;
    let (mut a, mut b) = (sets.clone(), r.sets.clone());
    a.sort();
    b.sort();
    if a != b {
        return Err(fail(
            Errno::EINVAL,
            format!(
                "volume remove-brick {name}: the bricks given make set(s) {}, but the remove-brick under way is of set(s) {}",
                ids(&sets),
                ids(&r.sets)
            ),
        ));
    }
    Ok(r)
}

pub(super) async fn remove_brick(
    node: &Arc<Node>,
    name: &str,
    specs: &[String],
    action: &str,
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = existing_volume(node, name).await?;
    let (verb, throttle) = action.split_once(':').unwrap_or((action, ""));
    match verb {
        "start" => start(node, &rec, specs, throttle_of(name, throttle)?).await,
        "status" => {
            let r = removal(node, &rec, specs).await?;
            Ok(MgmtReply::RemoveBrick(status(node, &rec, &r).await?))
        }
        "stop" => stop(node, &rec, specs).await,
        "commit" => commit(node, &rec, specs, force).await,
        other => Err(fail(
            Errno::EINVAL,
            format!("volume remove-brick {name}: unknown action {other:?} (start, status, stop or commit)"),
        )),
    }
}

async fn start(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    specs: &[String],
    throttle: crate::rebalance::Throttle,
) -> Result<MgmtReply, RemoteError> {
    let name = &rec.name;
    if rec.status != VolumeStatus::Started {
        return Err(fail(
            Errno::EBUSY,
            format!(
                "volume remove-brick {name}: volume is not started (its files cannot move off)"
            ),
        ));
    }
    if let Some(n) = rebalance_running(node, rec).await {
        return Err(fail(
            Errno::EBUSY,
            format!("volume remove-brick {name}: a rebalance is running (on {n}): one layout change at a time; wait for it or stop it"),
        ));
    }
    let sets = sets_of(node, rec, specs).await?;
    let nodes = brick_nodes(rec);
    if let Some(r) = &rec.removing {
        // The same removal again: its runs start again (for what the first ones skipped).
        let r = removal(node, rec, specs).await.map_err(|_| {
            fail(
                Errno::EBUSY,
                format!("volume remove-brick {name}: remove-brick of set(s) {} is under way: commit or stop it first", ids(&r.sets)),
            )
        })?;
        let started = launch_runs(node, name, &nodes, throttle).await?;
        return Ok(done(format!(
            "volume remove-brick start: {name}: moving the files left on set(s) {} again on {} node(s)",
            ids(&r.sets),
            started.len()
        )));
    }
    let before: Vec<u32> = if rec.layout.is_empty() {
        rec.sets.iter().map(|s| s.id).collect()
    } else {
        rec.layout.clone()
    };
    let layout: Vec<u32> = before.iter().copied().filter(|s| !sets.contains(s)).collect();
    if layout.is_empty() {
        return Err(fail(
            Errno::EINVAL,
            format!("volume remove-brick {name}: set(s) {} are every set the volume places files on: at least one must stay", ids(&sets)),
        ));
    }
    let rec2 = edit_volume(node, name, |v| {
        if v.removing.is_some() || v.layout_epoch != rec.layout_epoch {
            return Err(fail(
                Errno::EAGAIN,
                format!("volume {name} changed while remove-brick checked it; try again"),
            ));
        }
        v.removing = Some(Removal { sets: sets.clone(), layout: before.clone() });
        v.layout = layout.clone();
        v.layout_epoch += 1;
        v.rebalancing = true;
        Ok(())
    })
    .await?;
    tracing::info!(volume = %name, sets = ?sets, layout = ?layout, epoch = rec2.layout_epoch, "remove-brick: sets out of the layout, draining");
    wait_map(node, name, |m| m.layout_epoch >= rec2.layout_epoch).await;
    match launch_runs(node, name, &nodes, throttle).await {
        Ok(started) => Ok(done(format!(
            "volume remove-brick start: {name}: set(s) {} take no new files from layout epoch {}; {} node(s) move their files off. Check with 'cairn volume remove-brick {name} {} status', then 'commit'",
            ids(&sets),
            rec2.layout_epoch,
            started.len(),
            specs.join(" ")
        ))),
        Err(e) => {
            let undo = put_back(node, name).await;
            let undone = match undo {
                Ok(_) => "the sets are in the layout again".to_string(),
                Err(u) => format!("putting them back failed too: {}", u.message),
            };
            Err(fail(e.errno, format!("volume remove-brick {name}: {} ({undone})", e.message)))
        }
    }
}

/// The layout of before `start` back, with a new epoch; the removal is over.
async fn put_back(node: &Arc<Node>, name: &str) -> Result<VolumeRecord, RemoteError> {
    edit_volume(node, name, |v| {
        let Some(r) = v.removing.take() else {
            return Err(fail(Errno::EINVAL, format!("volume {name}: no remove-brick under way")));
        };
        v.layout = r.layout;
        v.layout_epoch += 1;
        Ok(())
    })
    .await
}

async fn stop(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    specs: &[String],
) -> Result<MgmtReply, RemoteError> {
    let name = &rec.name;
    let r = removal(node, rec, specs).await?;
    // The runs first: none moves a file by the layout being abandoned.
    let _ = rebalance(node, name, "stop").await;
    let rec2 = put_back(node, name).await?;
    tracing::info!(volume = %name, sets = ?r.sets, epoch = rec2.layout_epoch, "remove-brick stopped; sets back in the layout");
    Ok(done(format!(
        "volume remove-brick stop: {name}: set(s) {} are in the layout again (layout epoch {}); files moved off them stay where they are and are found there (a rebalance moves them back to the sets their names hash to)",
        ids(&r.sets),
        rec2.layout_epoch
    )))
}

/// A regular file (or symlink, device...) seen by a walk: the set it is on, its
/// directory and entry.
struct Found {
    set: u32,
    entry: cairn_proto::DirEntry,
}

/// Every non-directory entry on sets `sets` (their namespace: linktos are not listed).
async fn entries(node: &Arc<Node>, name: &str, sets: &[u32]) -> Result<Vec<Found>, RemoteError> {
    let mut out = vec![];
    for &set in sets {
        let mut stack = vec![Id::ROOT];
        while let Some(dir) = stack.pop() {
            let listed = list_all(node, name, set, dir).await.map_err(|e| {
                fail(e.errno, format!("volume {name}: listing {dir} on set {set}: {}", e.message))
            })?;
            for e in listed {
                if e.kind == FileType::Directory {
                    stack.push(e.id);
                } else {
                    out.push(Found { set, entry: e });
                }
            }
        }
    }
    Ok(out)
}

/// Files and bytes left on the draining sets, by the node whose brick heads each.
async fn left(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    r: &Removal,
) -> Result<HashMap<String, (u64, u64)>, RemoteError> {
    let mut by_node: HashMap<String, (u64, u64)> = HashMap::new();
    let map = node.map(&rec.name);
    for f in entries(node, &rec.name, &r.sets).await? {
        let head = map
            .as_ref()
            .and_then(|m| m.set_by_id(f.set))
            .and_then(|s| cairn_placement::chain(s, f.entry.id).first().map(|b| b.node.clone()))
            .unwrap_or_default();
        let e = by_node.entry(head).or_default();
        e.0 += 1;
        e.1 += f.entry.attr.as_ref().map(|a| a.size).unwrap_or(0);
    }
    Ok(by_node)
}

async fn status(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    r: &Removal,
) -> Result<RemoveBrickStatus, RemoteError> {
    let records = records(node, &rec.name).await?;
    let left = left(node, rec, r).await?;
    let mut out = RemoveBrickStatus { sets: r.sets.clone(), ..Default::default() };
    for n in brick_nodes(rec) {
        let (files, bytes) = left.get(&n).copied().unwrap_or_default();
        let mut row = RemoveBrickNode {
            node: n.clone(),
            state: "not started".into(),
            left_files: files,
            left_bytes: bytes,
            ..Default::default()
        };
        if let Some(x) = records.iter().find(|x| x.node == n && x.layout_epoch == rec.layout_epoch)
        {
            row.state = x.state.clone();
            row.moved = x.moved;
            row.bytes = x.bytes;
            row.skipped = x.skipped;
            row.failures = x.failures;
            row.last_error = x.last_error.clone();
        }
        out.left_files += files;
        out.left_bytes += bytes;
        out.nodes.push(row);
    }
    Ok(out)
}

async fn commit(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    specs: &[String],
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let name = &rec.name;
    let r = removal(node, rec, specs).await?;
    if let Some(n) = rebalance_running(node, rec).await {
        return Err(fail(
            Errno::EBUSY,
            format!("volume remove-brick commit: {name}: files are still moving off set(s) {} (on {n}): wait for 'status' to show them done, or 'stop'", ids(&r.sets)),
        ));
    }
    let left = left(node, rec, &r).await?;
    let (files, bytes) = left.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    if files > 0 && !force {
        return Err(fail(
            Errno::ENOTEMPTY,
            format!("volume remove-brick commit: {name}: set(s) {} still hold {files} file(s) ({bytes} bytes): 'start' again to move what was skipped (open, locked, hard-linked files; symlinks and device files do not move), or 'commit force' to drop them with the sets", ids(&r.sets)),
        ));
    }
    let stubs = forward(node, rec, &r).await?;
    let gone = r.sets.clone();
    let rec2 = edit_volume(node, name, |v| {
        if v.removing.as_ref() != Some(&r) {
            return Err(fail(
                Errno::EAGAIN,
                format!("volume {name} changed while remove-brick commit checked it; try again"),
            ));
        }
        let (removed, kept): (Vec<SetRecord>, Vec<SetRecord>) =
            v.sets.drain(..).partition(|s| gone.contains(&s.id));
        v.sets = kept;
        v.retired.extend(removed);
        v.layout.retain(|s| !gone.contains(s));
        v.removing = None;
        Ok(())
    })
    .await?;
    tracing::info!(volume = %name, sets = ?gone, stubs, files, "remove-brick committed");
    // Answered once this node's map (the one its clients fetch) is without the sets.
    wait_map(node, name, |m| m.sets.iter().all(|s| !gone.contains(&s.id))).await;
    let dropped = if files > 0 {
        format!("; {files} file(s) ({bytes} bytes) left on them are no longer in the volume")
    } else {
        String::new()
    };
    Ok(done(format!(
        "volume remove-brick commit: {name}: set(s) {} removed; ids homed on them are forwarded by set {} ({stubs} stub(s)){dropped}. The bricks' directories are left as they are",
        ids(&gone),
        rec2.sets.first().map(|s| s.id).unwrap_or(0)
    )))
}

/// Before the sets go: every file on a remaining set whose id the volume will route
/// to another set (ids homed on a removed set route to the first remaining set) gets
/// a moved stub there naming the set it is on. The number of stubs written.
async fn forward(node: &Arc<Node>, rec: &VolumeRecord, r: &Removal) -> Result<u64, RemoteError> {
    let name = &rec.name;
    let kept: Vec<u32> = rec.sets.iter().map(|s| s.id).filter(|s| !r.sets.contains(s)).collect();
    let Some(&heir) = kept.first() else { return Ok(0) };
    let mut n = 0;
    for f in entries(node, name, &kept).await? {
        let home = f.entry.id.home_set();
        let routed = if kept.contains(&home) { home } else { heir };
        if routed == f.set || kept.contains(&home) {
            // Homed on a remaining set: its stub there was written when it moved.
            continue;
        }
        let id = f.entry.id;
        match on_head(node, name, heir, id, Op::MigrateStub { id, to: f.set }).await {
            Ok(_) => n += 1,
            Err(e) if e.errno == Errno::EEXIST => {}
            Err(e) => {
                return Err(fail(
                    e.errno,
                    format!("volume remove-brick commit: {name}: forwarding {id} ({:?}) from set {heir} to set {}: {}; nothing removed", String::from_utf8_lossy(&f.entry.name), f.set, e.message),
                ))
            }
        }
    }
    Ok(n)
}
