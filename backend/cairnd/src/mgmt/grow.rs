//! Growing a live volume: `add-brick` (docs/rebalance.md).
//!
//! New replica sets join in two steps, each a compare-and-swap of the volume record:
//! 1. the sets are appended to the record but left out of its `layout`, so their bricks
//!    open and receive directory-wide operations (mkdir, rmdir) while no name hashes to
//!    them; the volume's directories are copied onto them (same ids, owners, modes,
//!    times and xattrs, read from an existing set);
//! 2. the layout takes them in (`cairn_placement::grow_layout`), `layout_epoch` moves and
//!    the volume is `rebalancing`; a second directory pass catches directories made
//!    during the first.
//!
//! If step 1 fails, the new sets are taken out of the record again: nothing changed.

use super::*;
use crate::rebalance::on_head;
use cairn_proto::map::VolumeMap;
use cairn_proto::msg::Op;
use cairn_proto::{Attr, DirEntry, FileType, Id, SetAttr, SetTime};

/// How long a new brick may take to come up after it is in the record.
const BRICK_UP_WAIT: Duration = Duration::from_secs(30);

pub(super) async fn add_brick(
    node: &Arc<Node>,
    name: &str,
    replica: Option<u32>,
    specs: &[String],
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let inval = |m: String| fail(Errno::EINVAL, m);
    let (rec, rev) = existing_volume(node, name).await?;
    if let Some(r) = replica {
        if r != rec.replica {
            return Err(inval(format!(
                "volume {name}: changing the replica count ({} to {r}) is not supported yet; add whole replica sets of {} bricks",
                rec.replica, rec.replica
            )));
        }
    }
    if rec.status == VolumeStatus::Stopped {
        return Err(fail(
            Errno::EBUSY,
            format!("Volume {name} is stopped: start it first (the new bricks get the volume's directories from its running bricks)"),
        ));
    }
    if let Some(n) = rebalance_running(node, &rec).await {
        return Err(fail(
            Errno::EBUSY,
            format!("volume {name}: a rebalance is running (on {n}): one layout change at a time; wait for it or stop it ('cairn volume rebalance {name} stop')"),
        ));
    }
    if let Some(r) = &rec.removing {
        return Err(fail(
            Errno::EBUSY,
            format!("volume {name}: remove-brick of set(s) {} is under way: one layout change at a time; commit or stop it first", ids(&r.sets)),
        ));
    }
    let r = rec.replica as usize;
    if specs.is_empty() || !specs.len().is_multiple_of(r) {
        return Err(inval(format!(
            "volume {name}: number of bricks ({}) is not a multiple of the replica count ({r}): add whole replica sets",
            specs.len()
        )));
    }
    let peers_list = node.store.list_peers().await.map_err(cfg)?;
    let live = node.store.live_nodes().await.map_err(cfg)?;
    let volumes = node.store.list_volumes().await.map_err(cfg)?;
    let mut seen = HashSet::new();
    // Sets and brick indexes of removed sets are never given again (ids homed on a
    // removed set route to the volume's first set).
    let all_sets = || rec.sets.iter().chain(&rec.retired);
    let mut next_index = all_sets().flat_map(|s| &s.bricks).map(|b| b.index + 1).max();
    let mut bricks = vec![];
    for spec in specs {
        let (host, path) = parse_spec(spec)?;
        if path == "/" {
            return Err(inval(format!("brick {spec}: the root directory cannot be a brick")));
        }
        let peer = peers_list
            .iter()
            .find(|p| p.name == host || host_of(&p.addr) == host)
            .ok_or_else(|| {
                fail(
                    Errno::ENOENT,
                    format!("brick {spec}: host {host} is not in 'Peer in Cluster' state (probe it with 'cairn peer probe')"),
                )
            })?;
        if !live.contains_key(&peer.name) {
            return Err(fail(
                Errno::EHOSTDOWN,
                format!("brick {spec}: node {} is down (its cairnd holds no lease)", peer.name),
            ));
        }
        if !seen.insert((peer.name.clone(), path.clone())) {
            return Err(inval(format!("brick {spec} is given twice")));
        }
        for v in &volumes {
            if v.sets.iter().flat_map(|s| &s.bricks).any(|b| b.node == peer.name && b.path == path)
            {
                return Err(fail(
                    Errno::EEXIST,
                    format!("brick {spec} is already a brick of volume {}", v.name),
                ));
            }
        }
        let index = next_index.unwrap_or(0);
        next_index = Some(index + 1);
        bricks.push(BrickRecord { index, node: peer.name.clone(), path });
    }
    let first_set = all_sets().map(|s| s.id).max().unwrap_or(0) + 1;
    let new_sets: Vec<SetRecord> = bricks
        .chunks(r)
        .enumerate()
        .map(|(i, ch)| SetRecord { id: first_set + i as u32, bricks: ch.to_vec() })
        .collect();
    if !force {
        for s in &new_sets {
            let nodes: HashSet<_> = s.bricks.iter().map(|b| &b.node).collect();
            if nodes.len() < s.bricks.len() {
                return Err(inval("Multiple bricks of a replicate volume are present on the same server. This setup is not optimal. Use 'force' at the end of the command if you want to override this behavior.".into()));
            }
        }
    }
    // Check and prepare every new brick on its node before the record changes.
    let volume_id = u128::from_str_radix(&rec.id, 16).unwrap_or(0);
    for b in &bricks {
        let req = MgmtRequest::BrickAdd {
            volume: name.to_string(),
            volume_id,
            index: b.index,
            path: b.path.clone(),
            force,
        };
        call_node(node, &b.node, "", req)
            .await
            .map_err(|e| fail(e.errno, format!("brick {}:{}: {}", b.node, b.path, e.message)))?;
    }
    // Step 1: the sets join, out of the layout.
    let old_layout: Vec<u32> = if rec.layout.is_empty() {
        rec.sets.iter().map(|s| s.id).collect()
    } else {
        rec.layout.clone()
    };
    let added: Vec<u32> = new_sets.iter().map(|s| s.id).collect();
    let mut joining = rec.clone();
    joining.layout = old_layout.clone();
    joining.sets.extend(new_sets.iter().cloned());
    node.store.update_volume(&joining, rev).await.map_err(|e| match e {
        cairn_config::ConfigError::Conflict(m) => fail(
            Errno::EAGAIN,
            format!("volume {name} changed while add-brick checked it ({m}); try again"),
        ),
        e => cfg(e),
    })?;
    node.kick.notify_one();
    tracing::info!(volume = name, sets = ?added, "add-brick: new sets joining");
    let started = rec.status == VolumeStatus::Started;
    let filled = if started { fill_new_sets(node, name, &bricks, &added).await } else { Ok(0) };
    let dirs = match filled {
        Ok(n) => n,
        Err(e) => {
            let undo = edit_volume(node, name, |v| {
                v.sets.retain(|s| !added.contains(&s.id));
                v.layout.retain(|s| !added.contains(s));
                let all: Vec<u32> = v.sets.iter().map(|s| s.id).collect();
                if rec.layout.is_empty() && v.layout == all {
                    v.layout.clear();
                }
                Ok(())
            })
            .await;
            let undone = match undo {
                Ok(_) => "the new bricks were taken out again; nothing changed".to_string(),
                Err(u) => format!("taking the new bricks out again failed too: {}", u.message),
            };
            return Err(fail(
                e.errno,
                format!("volume {name}: add-brick: {} ({undone})", e.message),
            ));
        }
    };
    // Step 2: the layout takes the new sets in; the layout epoch moves.
    let layout = cairn_placement::grow_layout(&old_layout, &added);
    let rec2 = edit_volume(node, name, |v| {
        v.layout = layout.clone();
        v.layout_epoch += 1;
        v.rebalancing = true;
        Ok(())
    })
    .await?;
    tracing::info!(volume = name, layout = ?layout, epoch = rec2.layout_epoch, "add-brick: layout changed");
    let late = if started {
        // Directories made by clients during the first pass, with a map in which the new
        // sets were not yet there or their parent not yet made.
        wait_map(node, name, |m| m.layout_epoch >= rec2.layout_epoch).await;
        fill(node, name, &added).await.map_err(|e| {
            fail(
                e.errno,
                format!("volume {name}: the new sets are in the layout, but the second directory pass failed: {}", e.message),
            )
        })?
    } else {
        0
    };
    let (moved, total) = cairn_placement::moved_share(&old_layout, &layout);
    Ok(done(format!(
        "{} replica set(s) added (set {}), {} directories made on them; layout epoch {}: new files go to the new sets now; {:.0}% of the existing names hash to another set now and are found there until a rebalance moves them",
        added.len(),
        added.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
        dirs + late,
        rec2.layout_epoch,
        moved as f64 * 100.0 / total.max(1) as f64
    )))
}

/// Wait for the new bricks to be up in this node's map, then copy the directory tree.
async fn fill_new_sets(
    node: &Arc<Node>,
    name: &str,
    bricks: &[BrickRecord],
    sets: &[u32],
) -> Result<u64, RemoteError> {
    let want: Vec<u32> = bricks.iter().map(|b| b.index).collect();
    let up = wait_map(node, name, |m| {
        want.iter().all(|i| m.brick(*i).map(|(_, b)| b.state == BrickState::Up).unwrap_or(false))
    })
    .await;
    if !up {
        let map = node.map(name);
        let down: Vec<String> = want
            .iter()
            .filter(|i| {
                map.as_ref()
                    .and_then(|m| m.brick(**i).map(|(_, b)| b.state != BrickState::Up))
                    .unwrap_or(true)
            })
            .map(|i| {
                let b = bricks.iter().find(|b| b.index == *i);
                b.map(|b| format!("{}:{}", b.node, b.path)).unwrap_or_default()
            })
            .collect();
        return Err(fail(
            Errno::ETIMEDOUT,
            format!(
                "new bricks {} not up {} s after they were added",
                down.join(", "),
                BRICK_UP_WAIT.as_secs()
            ),
        ));
    }
    fill(node, name, sets).await
}

/// Until `ok` holds for this node's map of `name` (true), or `BRICK_UP_WAIT` passed.
pub(super) async fn wait_map(
    node: &Arc<Node>,
    name: &str,
    ok: impl Fn(&VolumeMap) -> bool,
) -> bool {
    let deadline = Instant::now() + BRICK_UP_WAIT;
    loop {
        if node.map(name).map(|m| ok(&m)).unwrap_or(false) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        node.kick.notify_one();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Copy every directory of the volume (from its first layout set) onto sets `to`, top
/// down: same id, owner, mode, times and xattrs. Directories already there are kept
/// (their metadata is brought up to date). Returns how many were made.
async fn fill(node: &Arc<Node>, name: &str, to: &[u32]) -> Result<u64, RemoteError> {
    let map = node.map(name).ok_or_else(|| fail(Errno::ENOENT, format!("no map of {name}")))?;
    let from = map
        .layout_sets()
        .into_iter()
        .map(|s| s.id)
        .find(|s| !to.contains(s))
        .ok_or_else(|| fail(Errno::EINVAL, format!("volume {name} has no set to copy from")))?;
    let root = attr_on(node, name, from, Id::ROOT).await?;
    for &t in to {
        copy_meta(node, name, from, t, &root).await?;
    }
    let mut made = 0;
    let mut queue = vec![Id::ROOT];
    while let Some(dir) = queue.pop() {
        for e in list_dirs(node, name, from, dir).await? {
            let Some(a) = e.attr.clone() else { continue };
            for &t in to {
                let mk = Op::Mkdir { dir, name: e.name.clone(), id: e.id, perm: a.perm };
                match on_head(node, name, t, dir, mk).await {
                    Ok(_) => made += 1,
                    Err(err) if err.errno == Errno::EEXIST => {}
                    // Removed on the source meanwhile: nothing to copy.
                    Err(err) if err.errno == Errno::ENOENT || err.errno == Errno::ESTALE => {
                        continue
                    }
                    Err(err) => {
                        return Err(fail(
                            err.errno,
                            format!(
                                "making directory {} ({}) on replica set {t}: {}",
                                String::from_utf8_lossy(&e.name),
                                e.id,
                                err.message
                            ),
                        ))
                    }
                }
                copy_meta(node, name, from, t, &a).await?;
            }
            queue.push(e.id);
        }
    }
    Ok(made)
}

/// The subdirectories of `dir` on set `set` (readdirplus, every page).
async fn list_dirs(
    node: &Arc<Node>,
    name: &str,
    set: u32,
    dir: Id,
) -> Result<Vec<DirEntry>, RemoteError> {
    let mut all = list_all(node, name, set, dir).await?;
    all.retain(|e| e.kind == FileType::Directory);
    Ok(all)
}

/// Every entry of `dir` on set `set` (readdirplus, every page; linktos are not listed);
/// none if the directory is gone.
pub(super) async fn list_all(
    node: &Arc<Node>,
    name: &str,
    set: u32,
    dir: Id,
) -> Result<Vec<DirEntry>, RemoteError> {
    let mut out = vec![];
    let mut cookie = 0;
    loop {
        let op = Op::ReadDir { dir, cookie, max: 1024, plus: true };
        let (entries, eof) = match on_head(node, name, set, dir, op).await {
            Ok(Reply::Dir { entries, eof }) => (entries, eof),
            // Removed meanwhile.
            Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => return Ok(out),
            Ok(other) => {
                return Err(fail(Errno::EPROTO, format!("readdir of {dir}: unexpected {other:?}")))
            }
            Err(e) => return Err(e),
        };
        cookie = entries.last().map(|e| e.cookie).unwrap_or(cookie);
        let n = entries.len();
        out.extend(entries);
        if eof || n == 0 {
            return Ok(out);
        }
    }
}

async fn attr_on(node: &Arc<Node>, name: &str, set: u32, id: Id) -> Result<Attr, RemoteError> {
    match on_head(node, name, set, id, Op::GetAttr { id }).await? {
        Reply::Attr(a) => Ok(a),
        other => Err(fail(Errno::EPROTO, format!("getattr of {id}: unexpected {other:?}"))),
    }
}

/// Owner, mode, times and xattrs of directory `a` from set `from` onto set `to`.
async fn copy_meta(
    node: &Arc<Node>,
    name: &str,
    from: u32,
    to: u32,
    a: &Attr,
) -> Result<(), RemoteError> {
    let id = a.id;
    let ctx = |what: &str, e: RemoteError| {
        fail(e.errno, format!("directory {id}: {what} on replica set {to}: {}", e.message))
    };
    let names = match on_head(node, name, from, id, Op::ListXattr { id }).await {
        Ok(Reply::Names(n)) => n,
        Ok(_) => vec![],
        Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => return Ok(()),
        Err(e) => return Err(ctx("listing xattrs", e)),
    };
    for x in names {
        let value = match on_head(node, name, from, id, Op::GetXattr { id, name: x.clone() }).await
        {
            Ok(Reply::Bytes(v)) => v,
            _ => continue,
        };
        let set = Op::SetXattr { id, name: x, value, flags: 0 };
        on_head(node, name, to, id, set).await.map_err(|e| ctx("setting an xattr", e))?;
    }
    let set = SetAttr {
        perm: Some(a.perm),
        uid: Some(a.uid),
        gid: Some(a.gid),
        size: None,
        atime: Some(SetTime::At(a.atime)),
        mtime: Some(SetTime::At(a.mtime)),
    };
    on_head(node, name, to, id, Op::SetAttr { id, set })
        .await
        .map_err(|e| ctx("setting owner, mode and times", e))?;
    Ok(())
}

/// Node side of add-brick: refuse a directory on the root filesystem unless `force`
/// (Gluster's rule: a full root filesystem takes the node down), then prepare it.
pub(super) async fn brick_add(
    node: &Arc<Node>,
    req: MgmtRequest,
) -> Result<MgmtReply, RemoteError> {
    let MgmtRequest::BrickAdd { volume, volume_id, index, path, force } = req else {
        return Err(fail(Errno::EINVAL, "not a brick add request"));
    };
    if !force {
        let p = path.clone();
        let on_root = tokio::task::spawn_blocking(move || on_root_fs(Path::new(&p)))
            .await
            .map_err(|e| fail(Errno::EIO, format!("brick check task: {e}")))?
            .map_err(|e| fail(Errno::EIO, format!("brick {}:{path}: {e}", node.name)))?;
        if on_root {
            return Err(fail(
                Errno::EINVAL,
                format!("brick {}:{path} is on the root filesystem of {}; use a separate filesystem, or 'force' at the end of the command to override this", node.name, node.name),
            ));
        }
    }
    brick_prepare(node, MgmtRequest::BrickPrepare { volume, volume_id, index, path, force }).await
}

/// Whether `path` (or, if it does not exist yet, its nearest existing ancestor) is on the
/// same filesystem as `/`.
pub(crate) fn on_root_fs(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/")?.dev();
    let mut p = path;
    loop {
        match std::fs::metadata(p) {
            Ok(m) => return Ok(m.dev() == root),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match p.parent() {
                Some(up) => p = up,
                None => return Ok(true),
            },
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_fs_is_found_through_missing_dirs() {
        assert!(on_root_fs(Path::new("/")).unwrap());
        assert!(on_root_fs(Path::new("/no/such/dir/for/cairn")).unwrap());
        // /proc is another filesystem wherever this runs.
        assert!(!on_root_fs(Path::new("/proc/self")).unwrap());
    }
}
