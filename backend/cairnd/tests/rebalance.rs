//! The rebalance against a real `cairnd` (docs/rebalance.md): after a 1-set volume grows
//! to 2 sets, `rebalance start` moves every file whose name hashes to the new set there,
//! keeping its id: a client mounted before the move (which still routes each id to its
//! home set) reads, writes and stats every file by the id it had, follows the moved stub
//! (EMOVED) to the new set, and gets ESTALE, not an error it cannot handle, for a moved
//! file that was removed since.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id, Volume};
use cairn_proto::mgmt::{MgmtReply, MgmtRequest, RebalanceNode};
use common::grow::OneSet;
use common::Cluster;
use std::time::{Duration, Instant};

fn content(i: usize) -> Vec<u8> {
    if i == 0 {
        // Several copy chunks, with a hole.
        let mut v = vec![7u8; 3 << 20];
        v[1 << 20..(2 << 20)].fill(0);
        v.extend_from_slice(b"tail");
        v
    } else {
        format!("file {i} ").repeat(i).into_bytes()
    }
}

async fn read_all(vol: &Volume, id: Id) -> Result<Vec<u8>, cairn_proto::RemoteError> {
    let mut out = vec![];
    loop {
        let (b, eof) = vol.read(&Creds::root(), id, out.len() as u64, 1 << 20).await?;
        out.extend_from_slice(&b);
        if eof || b.is_empty() {
            return Ok(out);
        }
    }
}

async fn status(c: &Cluster) -> RebalanceNode {
    match c
        .mgmt(MgmtRequest::VolumeRebalance { name: "v".into(), action: "status".into() })
        .await
        .unwrap()
    {
        MgmtReply::Rebalance(mut v) => {
            assert_eq!(v.len(), 1, "one node ran it: {v:?}");
            v.remove(0)
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn rebalance_to_the_end(c: &Cluster) -> RebalanceNode {
    c.mgmt(MgmtRequest::VolumeRebalance { name: "v".into(), action: "start".into() })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = status(c).await;
        if s.state != "running" {
            return s;
        }
        assert!(Instant::now() < deadline, "rebalance still running: {s:?}\n{}", c.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_moves_files_to_their_hashed_set_and_ids_stay_valid() {
    let c = Cluster::start();
    let OneSet { b0, b1, vol, d } = c.one_set_volume().await;
    let root = Creds::root();
    let mut files = vec![];
    for i in 0..40 {
        let name = format!("f{i}");
        let a = vol.create(&root, d.id, name.as_bytes(), 0o640, true).await.unwrap();
        vol.write_through(&root, a.id, 0, Bytes::from(content(i))).await.unwrap();
        vol.setxattr(&root, a.id, b"user.tag", name.as_bytes(), 0).await.unwrap();
        let a = vol.getattr(&root, a.id).await.unwrap();
        files.push((name, a));
    }
    // Nothing to move before a layout change.
    let e = c
        .mgmt(MgmtRequest::VolumeRebalance { name: "v".into(), action: "start".into() })
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "{e}");

    c.add_set(&b1, &vol).await;
    let map = vol.map();
    let moving: Vec<usize> = (0..files.len())
        .filter(|i| cairn_placement::hashed_set(&map, d.id, files[*i].0.as_bytes()).id == 2)
        .collect();
    assert!(moving.len() >= 5, "some names hash to the new set: {moving:?}");
    // A file held open (Op::Open, as a client does for an unlinked-while-open file) is
    // not moved: the first version skips it.
    let held = moving[moving.len() - 1];
    vol.open(&root, files[held].1.id).await.unwrap();
    // The bricks are told of an open only when the file is unlinked while open: send it.
    let conn = c.as_node().await;
    let op = cairn_proto::msg::Op::Open { id: files[held].1.id };
    let req = cairn_proto::msg::BrickRequest::new("v", 0, map.epoch, Creds::root(), op);
    conn.call(cairn_proto::msg::Request::Brick(req), Bytes::new()).await.unwrap();

    let s = rebalance_to_the_end(&c).await;
    assert_eq!(s.state, "completed", "{s:?}\n{}", c.log());
    assert_eq!(s.failures, 0, "{s:?}");
    assert_eq!(s.moved as usize, moving.len() - 1, "{s:?}");
    assert_eq!(s.skipped, 1, "the open file: {s:?}");
    // Every file on the old set, and the moved ones again on the new set's walk.
    assert_eq!(s.scanned as usize, files.len() + moving.len() - 1, "{s:?}");
    let big = content(0).len() as u64;
    assert!(s.bytes >= if moving.contains(&0) { big } else { 1 }, "{s:?}");

    // Every file: same content, id and xattr, through the client mounted before (which
    // routes each id to its home set and follows the stub) and through a new one.
    let fresh = c.mount("v").await.unwrap();
    for (i, (name, a)) in files.iter().enumerate() {
        for v in [&vol, &fresh] {
            let got = read_all(v, a.id).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == content(i), "{name}: content changed ({} bytes)", got.len());
            let now = v.getattr(&root, a.id).await.unwrap();
            assert_eq!(
                (now.id, now.size, now.perm, now.mtime),
                (a.id, a.size, a.perm, a.mtime),
                "{name}"
            );
            let l = v.lookup(&root, d.id, name.as_bytes()).await.unwrap();
            assert_eq!(l.id, a.id, "{name}: the name still names the same inode");
            let x = v.getxattr(&root, a.id, b"user.tag").await.unwrap();
            assert_eq!(x, name.as_bytes(), "{name}");
        }
        // On disk: a moved file's data is on the new set's brick, a linkto on the old.
        let (on0, on1) = (b0.join("data/d").join(name), b1.join("data/d").join(name));
        if moving.contains(&i) && i != held {
            assert_eq!(std::fs::metadata(&on1).unwrap().len(), a.size, "{name} on the new set");
            assert_eq!(std::fs::metadata(&on0).unwrap().len(), 0, "{name}: a linkto on the old");
        } else {
            assert_eq!(std::fs::metadata(&on0).unwrap().len(), a.size, "{name} stays");
            assert!(!on1.exists(), "{name} not on the new set");
        }
    }

    // Writes by the old id reach the moved file.
    let m = moving[0];
    let (name, a) = &files[m];
    vol.write_through(&root, a.id, 0, Bytes::from_static(b"NEW")).await.unwrap();
    let got = read_all(&fresh, a.id).await.unwrap();
    assert_eq!(&got[..3], b"NEW");
    let disk = std::fs::read(b1.join("data/d").join(name)).unwrap();
    assert_eq!(&disk[..3], b"NEW", "the write landed on the new set");

    // A moved file removed since: its id is ESTALE for a client that cached where it
    // went (not EMOVED, not a hang).
    let (gone, ga) = &files[moving[1]];
    fresh.unlink(&root, d.id, gone.as_bytes()).await.unwrap();
    let e = vol.getattr(&root, ga.id).await.unwrap_err();
    assert_eq!(e.errno, Errno::ESTALE, "{e}");
    let e = read_all(&vol, ga.id).await.unwrap_err();
    assert_eq!(e.errno, Errno::ESTALE, "{e}");

    // The held file was skipped, so the volume stays `rebalancing` (a lookup of a name
    // not yet on its hashed set asks every set).
    assert!(fresh.map().rebalancing);
    let _ = vol.release(files[held].1.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_rebalance_clears_rebalancing_and_a_restart_keeps_files_whole() {
    let mut c = Cluster::start();
    let OneSet { b0, b1, vol, d } = c.one_set_volume().await;
    let root = Creds::root();
    let mut files = vec![];
    for i in 1..60 {
        let name = format!("g{i}");
        let a = vol.create(&root, d.id, name.as_bytes(), 0o644, true).await.unwrap();
        vol.write_through(&root, a.id, 0, Bytes::from(content(i))).await.unwrap();
        files.push((i, name, a.id));
    }
    c.add_set(&b1, &vol).await;
    drop(vol);
    // Cut a run short by restarting cairnd: it resumes from its record by itself (no
    // second `start`) and finishes.
    c.mgmt(MgmtRequest::VolumeRebalance { name: "v".into(), action: "start".into() })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    c.kill_daemon();
    c.start_daemon();
    let s = status_until(&c, "the run ends after the restart", |s| !s.active()).await;
    assert_eq!((s.state.as_str(), s.failures, s.skipped), ("completed", 0, 0), "{s:?}");
    let vol = c.mount("v").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while vol.map().rebalancing {
        assert!(Instant::now() < deadline, "rebalancing not cleared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let map = vol.map();
    for (i, name, id) in &files {
        let got = read_all(&vol, *id).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == content(*i), "{name}: content changed");
        let l = vol.lookup(&root, d.id, name.as_bytes()).await.unwrap();
        assert_eq!(l.id, *id, "{name}");
        let hashed = cairn_placement::hashed_set(&map, d.id, name.as_bytes()).id;
        let brick = if hashed == 1 { &b0 } else { &b1 };
        assert_eq!(
            std::fs::metadata(brick.join("data/d").join(name)).unwrap().len(),
            content(*i).len() as u64,
            "{name} on the set it hashes to ({hashed})"
        );
    }
}

async fn start_with(c: &Cluster, action: &str) {
    c.mgmt(MgmtRequest::VolumeRebalance { name: "v".into(), action: action.into() })
        .await
        .unwrap_or_else(|e| panic!("rebalance {action}: {e}\n{}", c.log()));
}

/// Poll `status` (the record in etcd) until `done` holds for it.
async fn status_until(
    c: &Cluster,
    what: &str,
    done: impl Fn(&RebalanceNode) -> bool,
) -> RebalanceNode {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(MgmtReply::Rebalance(v)) =
            c.mgmt(MgmtRequest::VolumeRebalance { name: "v".into(), action: "status".into() }).await
        {
            assert!(v.len() <= 1, "one node: {v:?}");
            if let Some(s) = v.into_iter().next() {
                if done(&s) {
                    return s;
                }
                assert!(Instant::now() < deadline, "{what}: {s:?}\n{}", c.log());
            }
        }
        assert!(Instant::now() < deadline, "{what}: no record\n{}", c.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Files in `d` and in `d/sub`, by (directory, name, content index, id).
async fn many_files(vol: &Volume, d: Id, n: usize) -> Vec<(Id, String, usize, Id)> {
    let root = Creds::root();
    let sub = vol.mkdir(&root, d, b"sub", 0o755).await.unwrap();
    let mut files = vec![];
    for i in 1..=n {
        let dir = if i % 4 == 0 { sub.id } else { d };
        let name = format!("r{i}");
        let a = vol.create(&root, dir, name.as_bytes(), 0o644, true).await.unwrap();
        vol.write_through(&root, a.id, 0, Bytes::from(content(i % 50 + 1))).await.unwrap();
        files.push((dir, name, i % 50 + 1, a.id));
    }
    files
}

/// Every file whole, under its id, by its name, on the set its name hashes to.
async fn check_files(c: &Cluster, files: &[(Id, String, usize, Id)]) {
    let vol = c.mount("v").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while vol.map().rebalancing {
        assert!(Instant::now() < deadline, "rebalancing not cleared\n{}", c.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let map = vol.map();
    let root = Creds::root();
    let mut on_new = 0;
    for (dir, name, i, id) in files {
        let got = read_all(&vol, *id).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == content(*i), "{name}: content changed");
        let l = vol.lookup(&root, *dir, name.as_bytes()).await.unwrap();
        assert_eq!(l.id, *id, "{name}: the name names the same inode");
        let hashed = cairn_placement::hashed_set(&map, *dir, name.as_bytes()).id;
        let attr = vol.getattr(&root, *id).await.unwrap();
        assert_eq!(attr.size, content(*i).len() as u64, "{name}");
        if hashed == 2 {
            on_new += 1;
        }
    }
    assert!(on_new > 0, "some files hash to the new set");
}

/// A node's cairnd killed (SIGKILL) in the middle of a rebalance: started again, its run
/// picks up from the record it kept in etcd — the scan does not start over (the count of
/// entries scanned ends where one uninterrupted walk ends, give or take the entries done
/// after the last record) — and ends complete, every file whole under its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_resumes_from_its_record_after_cairnd_is_killed() {
    let mut c = Cluster::start();
    let OneSet { b1, vol, d, .. } = c.one_set_volume().await;
    let files = many_files(&vol, d.id, 240).await;
    c.add_set(&b1, &vol).await;
    drop(vol);
    // Lazy: one file at a time with a pause, so the run is well under way, not done,
    // when cairnd is killed.
    start_with(&c, "start:lazy").await;
    let before = status_until(&c, "the run records its progress", |s| {
        s.scanned >= 80 && s.moved >= 10 && !s.position.stack.is_empty()
    })
    .await;
    assert_eq!((before.state.as_str(), before.throttle.as_str()), ("running", "lazy"));
    assert_eq!(before.estimate, files.len() as u64, "entries counted at the start: {before:?}");
    assert!(before.rate > 0 && before.eta.is_some(), "rate and ETA: {before:?}");
    c.kill_daemon();
    c.start_daemon();
    // No new `start`: the restarted cairnd resumes by itself.
    let s = status_until(&c, "the resumed run ends", |s| s.resumes >= 1 && !s.active()).await;
    assert_eq!(
        (s.state.as_str(), s.failures, s.skipped),
        ("completed", 0, 0),
        "{s:?}\n{}",
        c.log()
    );
    assert_eq!(s.throttle, "lazy", "the throttle survives the restart");
    assert!(s.scanned >= before.scanned && s.moved >= before.moved, "{before:?}\n{s:?}");
    // One walk scans every entry of the old set once and every moved file again on the
    // new set; a walk that started over would scan `before.scanned` (80 or more) more.
    // What the resumed run redoes is what the killed one did after its last record
    // (written every second): entries it scans again, and moves it does not count again.
    let once = files.len() as u64 + s.moved;
    assert!(
        s.scanned <= once + 40,
        "the scan started over: {} scanned, {} for one walk (before the kill: {before:?})",
        s.scanned,
        once
    );
    check_files(&c, &files).await;
}

fn rebalance_req(action: &str) -> MgmtRequest {
    MgmtRequest::VolumeRebalance { name: "v".into(), action: action.into() }
}

/// `pause` holds a run between files, across a restart of cairnd too; `resume` lets it
/// finish. `lazy` moves one file at a time, pausing between moves at least 50 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_rebalance_stays_paused_across_a_restart_and_resume_finishes_it() {
    let mut c = Cluster::start();
    let OneSet { b1, vol, d, .. } = c.one_set_volume().await;
    let files = many_files(&vol, d.id, 160).await;
    // Nothing runs: nothing to pause or resume; a throttle that does not exist.
    c.add_set(&b1, &vol).await;
    drop(vol);
    for (action, errno) in
        [("pause", Errno::EINVAL), ("resume", Errno::EINVAL), ("start:fast", Errno::EINVAL)]
    {
        let e = c.mgmt(rebalance_req(action)).await.unwrap_err();
        assert_eq!(e.errno, errno, "{action}: {e}");
    }
    let t0 = Instant::now();
    start_with(&c, "start:lazy").await;
    let e = c.mgmt(rebalance_req("start")).await.unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "a second start: {e}");
    status_until(&c, "the run moves files", |s| s.moved >= 5).await;
    start_with(&c, "pause").await;
    let e = c.mgmt(rebalance_req("start")).await.unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "start while paused: {e}");
    let paused = status_until(&c, "the run pauses", |s| s.state == "paused").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still = status_until(&c, "paused", |_| true).await;
    assert_eq!(
        (still.state.as_str(), still.scanned, still.moved),
        ("paused", paused.scanned, paused.moved),
        "no progress while paused"
    );
    // A restart keeps it paused (resumed from its record, in the paused state).
    c.kill_daemon();
    c.start_daemon();
    let after = status_until(&c, "resumed paused", |s| s.resumes >= 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after2 = status_until(&c, "paused", |_| true).await;
    assert_eq!(after2.state, "paused", "{after2:?}");
    assert_eq!((after2.scanned, after2.moved), (after.scanned, after.moved), "{after2:?}");
    // Resume (retried while cairnd still opens the bricks).
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = c.mgmt(rebalance_req("resume")).await {
        assert!(Instant::now() < deadline, "resume: {e}\n{}", c.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = status_until(&c, "the resumed run ends", |s| !s.active()).await;
    assert_eq!((s.state.as_str(), s.failures, s.skipped), ("completed", 0, 0), "{s:?}");
    assert_eq!((s.throttle.as_str(), s.in_flight_max), ("lazy", 1), "one file at a time: {s:?}");
    // Each move is followed by a pause of at least 50 ms.
    assert!(
        t0.elapsed() >= Duration::from_millis(50) * s.moved as u32,
        "{} files moved in {:?}",
        s.moved,
        t0.elapsed()
    );
    let e = c.mgmt(rebalance_req("pause")).await.unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "pause after the end: {e}");
    check_files(&c, &files).await;
}

/// `aggressive` moves several files at a time (16 at most per node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggressive_rebalance_moves_several_files_at_a_time() {
    let c = Cluster::start();
    let OneSet { b1, vol, d, .. } = c.one_set_volume().await;
    let files = many_files(&vol, d.id, 120).await;
    c.add_set(&b1, &vol).await;
    drop(vol);
    start_with(&c, "start:aggressive").await;
    let s = status_until(&c, "the run ends", |s| !s.active()).await;
    assert_eq!((s.state.as_str(), s.failures, s.skipped), ("completed", 0, 0), "{s:?}");
    assert_eq!(s.throttle, "aggressive");
    assert!((2..=16).contains(&s.in_flight_max), "files in flight: {s:?}");
    check_files(&c, &files).await;
}

/// The volume's layout lock in etcd (`layout-lock/v`): while another layout change holds
/// it, add-brick and a rebalance start are refused (EBUSY, naming the holder) and change
/// nothing; released, both go ahead, and neither leaves it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_layout_lock_refuses_add_brick_and_rebalance_start() {
    let c = Cluster::start();
    let OneSet { b1, vol, d, .. } = c.one_set_volume().await;
    let files = many_files(&vol, d.id, 40).await;
    let store = cairn_config::Store::connect(&c.etcd.endpoints(), "/cairn").await.unwrap();
    let other = "add-brick on elsewhere";
    store.take_layout_lock("v", other, None).await.unwrap();
    std::fs::create_dir_all(&b1).unwrap();
    let add = MgmtRequest::VolumeAddBrick {
        name: "v".into(),
        replica: None,
        bricks: vec![format!("t1:{}", b1.display())],
        force: true,
    };
    let e = c.mgmt(add).await.unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "{e}");
    assert!(e.message.contains(other), "names the holder: {e}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(vol.map().sets.len(), 1, "nothing changed");
    store.release_layout_lock("v", other).await.unwrap();
    c.add_set(&b1, &vol).await;
    drop(vol);

    store.take_layout_lock("v", other, None).await.unwrap();
    let e = c.mgmt(rebalance_req("start")).await.unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "{e}");
    assert!(e.message.contains(other), "names the holder: {e}");
    store.release_layout_lock("v", other).await.unwrap();
    start_with(&c, "start").await;
    let s = status_until(&c, "the run ends", |s| !s.active()).await;
    assert_eq!((s.state.as_str(), s.failures, s.skipped), ("completed", 0, 0), "{s:?}");
    // Free again: the lock went with the start that took it.
    store.take_layout_lock("v", other, None).await.unwrap();
    store.release_layout_lock("v", other).await.unwrap();
    check_files(&c, &files).await;
}
