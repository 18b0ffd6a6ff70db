//! `remove-brick` against a real `cairnd` (docs/rebalance.md, "remove-brick"): whole
//! replica sets are drained (out of the layout, every file moved off them with its id),
//! `stop` puts them back, `commit` is refused while a file is left and then drops them;
//! after the commit every file keeps its content, its id and its path, for a client
//! mounted before and a new one, including ids homed on the removed set.

mod common;

use bytes::Bytes;
use cairn_client::{Attr, Creds, Errno, Id, Volume};
use cairn_proto::mgmt::{MgmtReply, MgmtRequest, RemoveBrickStatus};
use cairn_proto::msg::{BrickRequest, Op, Request};
use common::Cluster;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn content(i: usize) -> Vec<u8> {
    match i % 5 {
        0 => vec![],
        1 => b"x".to_vec(),
        2 => format!("file {i} ").repeat(500).into_bytes(),
        // Several copy chunks with a hole.
        3 => {
            let mut v = vec![i as u8; (2 << 20) + 3];
            v[1 << 20..(3 << 19)].fill(0);
            v
        }
        _ => vec![i as u8; (1 << 20) + 17],
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

/// A file made by [`tree`]: its directory, name, content number and attributes.
struct File {
    dir: Id,
    path: String,
    name: String,
    i: usize,
    attr: Attr,
}

/// Nested directories (`a`, `a/b`, `a/b/c`, `d`) with `n` files spread over them.
async fn tree(vol: &Volume, n: usize) -> (Vec<File>, Vec<(String, Attr)>) {
    let root = Creds::root();
    let a = vol.mkdir(&root, Id::ROOT, b"a", 0o755).await.unwrap();
    let b = vol.mkdir(&root, a.id, b"b", 0o750).await.unwrap();
    let c = vol.mkdir(&root, b.id, b"c", 0o700).await.unwrap();
    let d = vol.mkdir(&root, Id::ROOT, b"d", 0o755).await.unwrap();
    let dirs = vec![
        ("a".to_string(), a),
        ("a/b".to_string(), b),
        ("a/b/c".to_string(), c),
        ("d".to_string(), d),
    ];
    let mut files = vec![];
    for i in 0..n {
        let (dpath, dattr) = &dirs[i % dirs.len()];
        let name = format!("f{i}");
        let at = vol.create(&root, dattr.id, name.as_bytes(), 0o640, true).await.unwrap();
        let data = content(i);
        if !data.is_empty() {
            vol.write_through(&root, at.id, 0, Bytes::from(data)).await.unwrap();
        }
        vol.setxattr(&root, at.id, b"user.tag", name.as_bytes(), 0).await.unwrap();
        let attr = vol.getattr(&root, at.id).await.unwrap();
        files.push(File { dir: dattr.id, path: format!("{dpath}/{name}"), name, i, attr });
    }
    (files, dirs)
}

/// Content, id, size, mode, mtime and xattr of every file by id, and its path resolves
/// to the same id, through client `v`.
async fn check_files(v: &Volume, files: &[File], dirs: &[(String, Attr)], what: &str) {
    let root = Creds::root();
    for f in files {
        let got = read_all(v, f.attr.id)
            .await
            .unwrap_or_else(|e| panic!("{what}: {} ({}): {e}", f.path, f.attr.id));
        assert!(got == content(f.i), "{what}: {}: content changed ({} bytes)", f.path, got.len());
        let now = v.getattr(&root, f.attr.id).await.unwrap();
        assert_eq!(
            (now.id, now.size, now.perm, now.mtime),
            (f.attr.id, f.attr.size, f.attr.perm, f.attr.mtime),
            "{what}: {}",
            f.path
        );
        let l = v.lookup(&root, f.dir, f.name.as_bytes()).await.unwrap();
        assert_eq!(l.id, f.attr.id, "{what}: {}: the path names the same inode", f.path);
        let x = v.getxattr(&root, f.attr.id, b"user.tag").await.unwrap();
        assert_eq!(x, f.name.as_bytes(), "{what}: {}", f.path);
    }
    for (p, d) in dirs {
        let now = v.getattr(&root, d.id).await.unwrap_or_else(|e| panic!("{what}: dir {p}: {e}"));
        assert_eq!((now.id, now.perm), (d.id, d.perm), "{what}: dir {p}");
    }
}

fn spec(b: &std::path::Path) -> String {
    format!("t1:{}", b.display())
}

fn req(bricks: &[&PathBuf], action: &str, force: bool) -> MgmtRequest {
    MgmtRequest::VolumeRemoveBrick {
        name: "v".into(),
        bricks: bricks.iter().map(|b| spec(b)).collect(),
        action: action.into(),
        force,
    }
}

async fn status(c: &Cluster, bricks: &[&PathBuf]) -> RemoveBrickStatus {
    match c.mgmt(req(bricks, "status", false)).await.unwrap() {
        MgmtReply::RemoveBrick(s) => s,
        other => panic!("unexpected {other:?}"),
    }
}

/// Until the node's run ended.
async fn drained(c: &Cluster, bricks: &[&PathBuf]) -> RemoveBrickStatus {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = status(c, bricks).await;
        if s.nodes.iter().all(|n| n.state != "running" && n.state != "not started") {
            return s;
        }
        assert!(Instant::now() < deadline, "still draining: {s:?}\n{}", c.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Until client `vol` has a map with the layout `layout` (set ids in ring order; an
/// empty layout in the map means every set).
async fn layout_is(vol: &Volume, layout: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = vol.map();
        let now: Vec<u32> = if m.layout.is_empty() {
            m.sets.iter().map(|s| s.id).collect()
        } else {
            m.layout.clone()
        };
        if now == layout {
            return;
        }
        assert!(Instant::now() < deadline, "layout {now:?}, want {layout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Volume `v` of `sets` x 2 on bricks b0, b1, ... (set 1 is b0 b1), mounted, all up.
async fn volume(c: &Cluster, sets: usize) -> (Vec<PathBuf>, Arc<Volume>) {
    let bricks: Vec<PathBuf> = (0..sets * 2).map(|i| c.path(&format!("b{i}"))).collect();
    for b in &bricks {
        std::fs::create_dir_all(b).unwrap();
    }
    let refs: Vec<&std::path::Path> = bricks.iter().map(|b| b.as_path()).collect();
    c.volume("v", 2, &refs).await;
    let vol = c.mount("v").await.unwrap();
    c.wait_all_up(&vol).await;
    (bricks, vol)
}

/// Send `op` on `id` to the head brick of `id` on set `set`, as a node; the connection
/// (whose close would drop an `Op::Open`).
async fn at_head(
    c: &Cluster,
    vol: &Volume,
    set: u32,
    id: Id,
    op: Op,
) -> Arc<cairn_proto::rpc::Connection> {
    let map = vol.map();
    let head = cairn_placement::head(map.set_by_id(set).unwrap(), id).unwrap().index;
    let conn = c.as_node().await;
    let r = BrickRequest::new("v", head, map.epoch, Creds::root(), op);
    conn.call(Request::Brick(r), Bytes::new()).await.unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_brick_drains_a_set_and_commit_keeps_every_file_and_id() {
    let c = Cluster::start();
    let (b, vol) = volume(&c, 2).await;
    let (mut files, dirs) = tree(&vol, 40).await;
    // Set 1 (b0 b1) goes: the volume's first set, whose ids then route to set 2.
    let on1: Vec<&File> = files.iter().filter(|f| f.attr.id.home_set() == 1).collect();
    assert!(on1.len() >= 8, "files on set 1: {}", on1.len());

    // Not a whole set: refused, naming the set; nothing changed.
    let e = c.mgmt(req(&[&b[0]], "start", false)).await.unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "{e}");
    assert!(e.message.contains("replica set 1") && e.message.contains("whole"), "{e}");
    let e = c.mgmt(req(&[&b[0], &b[2]], "start", false)).await.unwrap_err();
    assert!(e.message.contains("replica set"), "{e}");
    // Nothing under way: status, stop and commit say so.
    let e = c.mgmt(req(&[&b[0], &b[1]], "commit", false)).await.unwrap_err();
    assert!(e.message.contains("no remove-brick"), "{e}");
    // Every set: refused.
    let e = c.mgmt(req(&[&b[0], &b[1], &b[2], &b[3]], "start", false)).await.unwrap_err();
    assert!(e.message.contains("at least one must stay"), "{e}");
    assert_eq!(vol.map().layout_epoch, 1);

    // A file held open on set 1 is skipped by the drain.
    let held = on1[0];
    let _open = at_head(&c, &vol, 1, held.attr.id, Op::Open { id: held.attr.id }).await;

    let set1 = [&b[0], &b[1]];
    c.mgmt(req(&set1, "start", false)).await.unwrap();
    layout_is(&vol, &[2]).await;
    // New files never go to the draining set.
    for i in 0..20 {
        let n = format!("new{i}");
        let a = vol.create(&Creds::root(), Id::ROOT, n.as_bytes(), 0o644, true).await.unwrap();
        assert_eq!(a.id.home_set(), 2, "{n} made on the draining set");
        vol.unlink(&Creds::root(), Id::ROOT, n.as_bytes()).await.unwrap();
    }
    let s = drained(&c, &set1).await;
    assert_eq!(s.sets, vec![1]);
    assert_eq!((s.left_files, s.nodes[0].failures), (1, 0), "the held file is left: {s:?}");
    assert_eq!(s.nodes[0].moved as usize, on1.len() - 1, "{s:?}");
    assert_eq!(s.nodes[0].left_bytes, held.attr.size, "{s:?}");

    // Commit refused while a file is left, saying how much.
    let e = c.mgmt(req(&set1, "commit", false)).await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOTEMPTY, "{e}");
    assert!(e.message.contains("1 file(s)"), "{e}");
    assert!(e.message.contains(&format!("({} bytes)", held.attr.size)), "{e}");
    // Another layout change meanwhile: refused.
    let e = c
        .mgmt(MgmtRequest::VolumeAddBrick {
            name: "v".into(),
            replica: None,
            bricks: vec![spec(&c.path("x0")), spec(&c.path("x1"))],
            force: true,
        })
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "{e}");

    // Stop: set 1 is in the layout again (a new epoch); moved files stay readable.
    let epoch = vol.map().layout_epoch;
    c.mgmt(req(&set1, "stop", false)).await.unwrap();
    layout_is(&vol, &[1, 2]).await;
    assert!(vol.map().layout_epoch > epoch);
    let e = c.mgmt(req(&set1, "status", false)).await.unwrap_err();
    assert!(e.message.contains("no remove-brick"), "{e}");
    check_files(&vol, &files, &dirs, "after stop").await;

    // Start again with the file released: everything moves, commit goes through.
    at_head(&c, &vol, 1, held.attr.id, Op::Release { id: held.attr.id }).await;
    c.mgmt(req(&set1, "start", false)).await.unwrap();
    let s = drained(&c, &set1).await;
    assert_eq!((s.left_files, s.left_bytes, s.nodes[0].failures), (0, 0, 0), "{s:?}");
    let msg = match c.mgmt(req(&set1, "commit", false)).await.unwrap() {
        MgmtReply::Done { message } => message,
        other => panic!("unexpected {other:?}"),
    };
    assert!(msg.contains("removed"), "{msg}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while vol.map().sets.len() != 1 {
        assert!(Instant::now() < deadline, "the client never lost set 1");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(vol.map().sets[0].id, 2);

    // Every file and directory: same content and id, by id and by path, through the
    // client mounted before and a new one; the removed set's data is on set 2 now.
    let fresh = c.mount("v").await.unwrap();
    check_files(&vol, &files, &dirs, "old client").await;
    check_files(&fresh, &files, &dirs, "new client").await;
    for f in &on1 {
        let disk = b[2].join("data").join(&f.path);
        assert_eq!(std::fs::metadata(&disk).unwrap().len(), f.attr.size, "{} on set 2", f.path);
    }
    // Writes and new files work; add-brick never gives set 1's id again.
    vol.write_through(&Creds::root(), held.attr.id, 0, Bytes::from_static(b"NEW")).await.unwrap();
    assert_eq!(&read_all(&fresh, held.attr.id).await.unwrap()[..3], b"NEW");
    let held = held.attr.id;
    files.retain(|f| f.attr.id != held);
    let (x0, x1) = (c.path("x0"), c.path("x1"));
    std::fs::create_dir_all(&x0).unwrap();
    std::fs::create_dir_all(&x1).unwrap();
    c.mgmt(MgmtRequest::VolumeAddBrick {
        name: "v".into(),
        replica: None,
        bricks: vec![spec(&x0), spec(&x1)],
        force: true,
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fresh.map().sets.len() != 2 {
        assert!(Instant::now() < deadline, "the client never got the new set");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fresh.map().sets[1].id, 3, "a removed set's id is not given again");
    check_files(&fresh, &files, &dirs, "after add-brick").await;
}

/// Three sets, the middle one removed (layout [1, 2, 3] to [1, 3]): files homed on it
/// move to both other sets; those on set 3 are reached by their ids through the stubs
/// commit leaves on set 1 (the first remaining set, which routes the removed set's ids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_a_removed_set_are_forwarded_to_where_their_files_went() {
    let c = Cluster::start();
    let (b, vol) = volume(&c, 3).await;
    let (files, dirs) = tree(&vol, 45).await;
    let set2 = [&b[2], &b[3]];
    c.mgmt(req(&set2, "start", false)).await.unwrap();
    let s = drained(&c, &set2).await;
    assert_eq!((s.left_files, s.nodes[0].failures, s.nodes[0].skipped), (0, 0, 0), "{s:?}");
    let to3 = files
        .iter()
        .filter(|f| f.attr.id.home_set() == 2)
        .filter(|f| b[4].join("data").join(&f.path).exists())
        .count();
    assert!(to3 > 0, "some of set 2's files went to set 3: {s:?}\n{}", c.log());
    c.mgmt(req(&set2, "commit", false)).await.unwrap();
    let fresh = c.mount("v").await.unwrap();
    assert_eq!(fresh.map().sets.len(), 2);
    check_files(&fresh, &files, &dirs, "new client").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while vol.map().sets.len() != 2 {
        assert!(Instant::now() < deadline, "the client never lost set 2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check_files(&vol, &files, &dirs, "old client").await;
}
