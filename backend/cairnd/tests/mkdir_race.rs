//! `mkdir -p` of one path by several clients at once (the HA agents of three gateways
//! making the same recovery directories on their own mounts, `tests/ha/bad-input.sh`).
//! A mkdir makes the directory on the set its name hashes to first, then on the other
//! sets. A second client whose mkdir found it on the hashed set (EEXIST) went on into it
//! at once and made the next component on another set, which the first mkdir had not
//! reached yet: ESTALE for the parent there ("no inode with id"), and `mkdir -p` failed.
//! A client that gets EEXIST for a directory now makes sure it is on every set first.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id, Volume};
use cairn_proto::msg::{BrickRequest, Op, Reply, Request};
use common::Cluster;
use std::sync::Arc;

/// `mkdir -p` as coreutils does it: mkdir each component, and on EEXIST look it up.
async fn mkdir_p(v: &Volume, path: &[&str]) -> Result<Id, String> {
    let root = Creds::root();
    let mut cur = Id::ROOT;
    for comp in path {
        cur = match v.mkdir(&root, cur, comp.as_bytes(), 0o755).await {
            Ok(a) => a.id,
            Err(e) if e.errno == Errno::EEXIST => match v.lookup(&root, cur, comp.as_bytes()).await
            {
                Ok(a) => a.id,
                Err(e) => return Err(format!("lookup of {comp} after EEXIST: {e}")),
            },
            Err(e) => return Err(format!("mkdir {comp} in {cur}: {e}")),
        };
    }
    Ok(cur)
}

/// One step of another client's mkdir of `name` (id `id`, mode 0750) in the root: the
/// directory made on set `set` only, by a raw request to that set's head.
async fn raw_mkdir(c: &Cluster, v: &Volume, set: u32, name: &str, id: Id) {
    let map = v.map();
    let s = map.set_by_id(set).unwrap();
    let head = cairn_placement::head(s, Id::ROOT).expect("a head");
    let op = Op::Mkdir { dir: Id::ROOT, name: name.as_bytes().to_vec(), id, perm: 0o750 };
    let mut req = BrickRequest::new("v", head.index, map.epoch, Creds::root(), op);
    req.layout_epoch = Some(map.layout_epoch);
    match c.cli().await.call(Request::Brick(req), Bytes::new()).await {
        Ok((Reply::Attr(a), _)) => assert_eq!(a.id, id),
        other => panic!("mkdir of {name} on set {set} only: {other:?}"),
    }
}

/// Another client's mkdir caught between its two steps (made on the hashed set only),
/// made here deterministically with a raw request to that set's head: `mkdir -p` of a
/// path through it, whose next component hashes to the other set, succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_p_through_a_directory_made_on_one_set_so_far() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let b = c.mount("v").await.unwrap();
    c.wait_all_up(&b).await;
    let map = b.map();
    assert_eq!(map.sets.len(), 2);
    let hashed = |dir: Id, name: &str| cairn_placement::hashed_set(&map, dir, name.as_bytes()).id;
    let top = "half";
    let set = hashed(Id::ROOT, top);
    let id = Id::new_on_set(set);
    let child = (0..64)
        .map(|k| format!("c{k}"))
        .find(|n| hashed(id, n) != set)
        .expect("a name hashing to the other set");

    // The first client's mkdir, first step only: the directory on its hashed set.
    raw_mkdir(&c, &b, set, top, id).await;
    let made = mkdir_p(&b, &[top, &child, "leaf"]).await;
    let leaf = made.unwrap_or_else(|e| panic!("mkdir -p {top}/{child}/leaf: {e}"));
    // The directory is whole: a file whose name hashes to either set can be made in it,
    // and its copy on the other set has the first mkdir's mode.
    let root = Creds::root();
    for k in 0..8 {
        b.create(&root, id, format!("f{k}").as_bytes(), 0o644, true).await.unwrap();
    }
    let a = b.getattr(&root, id).await.unwrap();
    assert_eq!(a.perm & 0o7777, 0o750, "{a:?}");
    assert_eq!(b.lookup(&root, leaf, b"nothing").await.unwrap_err().errno, Errno::ENOENT);
}

/// The kernel's path (FUSE): a lookup finds the directory on its hashed set (so the
/// kernel never sends the mkdir), then a mkdir in it goes to the other set, which the
/// first client's mkdir reaches only later: the op waits for it instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_in_a_directory_not_yet_on_its_set_waits_for_it() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let b = c.mount("v").await.unwrap();
    c.wait_all_up(&b).await;
    let map = b.map();
    let hashed = |dir: Id, name: &str| cairn_placement::hashed_set(&map, dir, name.as_bytes()).id;
    let set = hashed(Id::ROOT, "late");
    let other = map.sets.iter().map(|s| s.id).find(|s| *s != set).unwrap();
    let id = Id::new_on_set(set);
    let child = (0..64).map(|k| format!("c{k}")).find(|n| hashed(id, n) == other).unwrap();
    raw_mkdir(&c, &b, set, "late", id).await;
    let root = Creds::root();
    assert_eq!(b.lookup(&root, Id::ROOT, b"late").await.unwrap().id, id);
    let t0 = std::time::Instant::now();
    let mk = {
        let b = b.clone();
        let child = child.clone();
        tokio::spawn(async move { b.mkdir(&Creds::root(), id, child.as_bytes(), 0o755).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    raw_mkdir(&c, &b, other, "late", id).await;
    let made = mk.await.unwrap();
    made.unwrap_or_else(|e| panic!("mkdir of {child} in late/ on set {other}: {e}"));
    assert!(t0.elapsed().as_millis() >= 300, "answered before the directory reached set {other}");
}

/// Three clients run `mkdir -p` of the same new deep path at once, many times: every
/// one of them succeeds every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_mkdir_p_of_one_path_all_succeed() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let mut clients: Vec<Arc<Volume>> = vec![];
    for _ in 0..3 {
        clients.push(c.mount("v").await.unwrap());
    }
    c.wait_all_up(&clients[0]).await;
    let mut failures = vec![];
    for round in 0..30 {
        let top = format!("r{round}");
        let path = [top.as_str(), "nfs", "vip", "10.78.0.33"];
        let runs = clients.iter().map(|v| mkdir_p(v, &path));
        for (k, r) in futures::future::join_all(runs).await.into_iter().enumerate() {
            if let Err(e) = r {
                failures.push(format!("round {round}, client {k}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}
