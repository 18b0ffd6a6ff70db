//! add-brick against a real `cairnd` (docs/rebalance.md): after a 1-set volume grows to
//! 2 sets, a client that was mounted before still finds every old file, cannot create a
//! second file of a name that now hashes to the new set, and a brick refuses a create of a
//! name that does not hash to its set (what a client with the old layout would send).

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id};
use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::msg::{BrickRequest, Op, Request};
use cairn_proto::FileType;
use common::grow::OneSet;
use common::Cluster;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_volume_finds_old_files_and_refuses_duplicates() {
    let c = Cluster::start();
    let OneSet { b0, b1, vol, d } = c.one_set_volume().await;
    let root = Creds::root();
    let mut old = vec![];
    for i in 0..40 {
        let name = format!("f{i}");
        old.push((
            name.clone(),
            vol.create(&root, d.id, name.as_bytes(), 0o644, true).await.unwrap(),
        ));
    }

    // Bad input first: nothing changes.
    let e = c
        .mgmt(MgmtRequest::VolumeAddBrick {
            name: "v".into(),
            replica: Some(2),
            bricks: vec![format!("t1:{}", b1.display()), format!("t1:{}/x", b1.display())],
            force: true,
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("replica count"), "{e}");
    let e = c
        .mgmt(MgmtRequest::VolumeAddBrick {
            name: "v".into(),
            replica: None,
            bricks: vec![format!("t1:{}", b0.display())],
            force: true,
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("already a brick of volume v"), "{e}");
    assert_eq!(vol.map().sets.len(), 1);

    // The mounted client gets the new map pushed.
    c.add_set(&b1, &vol).await;
    let map = vol.map();
    assert!(map.rebalancing);
    assert_eq!(map.layout, [1, 2]);
    assert!(b1.join("data/d").is_dir(), "directory d made on the new set");

    let moved: Vec<_> = old
        .iter()
        .filter(|(n, _)| cairn_placement::hashed_set(&map, d.id, n.as_bytes()).id == 2)
        .collect();
    assert!(moved.len() >= 5, "{} of 40 names hash to the new set", moved.len());
    for (name, a) in &old {
        let found = vol.lookup(&root, d.id, name.as_bytes()).await.unwrap();
        assert_eq!(found.id, a.id, "{name}");
    }
    for (name, a) in &moved {
        // Exclusive: EEXIST, though the name is not on the set it hashes to now.
        let e = vol.create(&root, d.id, name.as_bytes(), 0o644, true).await.unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST, "{name}: {e}");
        // Not exclusive: the existing file.
        let got = vol.create(&root, d.id, name.as_bytes(), 0o644, false).await.unwrap();
        assert_eq!(got.id, a.id, "{name}");
        let e = vol.mkdir(&root, d.id, name.as_bytes(), 0o755).await.unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST, "mkdir {name}: {e}");
        assert!(!b1.join("data/d").join(name).exists(), "{name} made on the new set");
    }
    let (entries, _) = vol.readdir(&root, d.id, 0, 4096, false).await.unwrap();
    let files = entries.iter().filter(|e| e.kind == FileType::Regular).count();
    assert_eq!(files, 40, "each name listed once");

    // A create by a client routing by the old layout (every name to set 1) is refused
    // by set 1's head: the client refreshes its map and retries.
    let conn = c.cli().await;
    let name = (0..1000)
        .map(|i| format!("new{i}"))
        .find(|n| cairn_placement::hashed_set(&map, d.id, n.as_bytes()).id == 2)
        .unwrap();
    let req = BrickRequest {
        volume: "v".into(),
        brick: 0,
        epoch: map.epoch,
        creds: Creds::root(),
        op: Op::Create {
            dir: d.id,
            name: name.clone().into_bytes(),
            id: Id::new_on_set(1),
            kind: FileType::Regular,
            perm: 0o644,
            rdev: 0,
            target: None,
            exclusive: true,
        },
        req: None,
        parents: false,
        inline: 0,
        layout_epoch: None,
        sync: false,
        locks: false,
    };
    let e = conn.call(Request::Brick(req), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::ESTALEMAP, "{e}");
    assert!(e.message.contains("hashes to replica set 2"), "{e}");
    // Through the client it lands on the new set.
    vol.create(&root, d.id, name.as_bytes(), 0o644, true).await.unwrap();
    assert!(b1.join("data/d").join(&name).is_file());
    assert!(!b0.join("data/d").join(&name).exists());
}

/// A client that creates by the layout of before an add-brick (the map push has not reached
/// it yet) is refused by the old set's head (ESTALEMAP); it must send the create again to
/// the set the name hashes to now, not resend it to the old set until its retry budget runs
/// out (ESTALEMAP, turned into EIO by the mount: the grow.sh writer's "Input/output error").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_by_the_old_layout_goes_to_the_new_set() {
    let c = Cluster::start();
    let OneSet { b0, b1, vol, d } = c.one_set_volume().await;
    let root = Creds::root();
    let old = (*vol.map()).clone();
    c.add_set(&b1, &vol).await;
    let map = vol.map();
    let names: Vec<String> = (0..1000)
        .map(|i| format!("late{i}"))
        .filter(|n| cairn_placement::hashed_set(&map, d.id, n.as_bytes()).id == 2)
        .take(3)
        .collect();
    for name in &names {
        // Every name hashes to set 1 in the old map.
        vol.set_map_for_test(old.clone());
        let t = Instant::now();
        let a = vol
            .create(&root, d.id, name.as_bytes(), 0o644, true)
            .await
            .unwrap_or_else(|e| panic!("create {name} by the old layout: {e}"));
        assert!(t.elapsed() < Duration::from_secs(5), "create {name} took {:?}", t.elapsed());
        assert_eq!(cairn_placement::home_set(&vol.map(), a.id).id, 2, "{name}: id on set 2");
        assert!(b1.join("data/d").join(name).is_file(), "{name} on the new set");
        assert!(!b0.join("data/d").join(name).exists(), "{name} not on the old set");
        let found = vol.lookup(&root, d.id, name.as_bytes()).await.unwrap();
        assert_eq!(found.id, a.id, "{name}");
    }
}

/// Every op that puts a name in a directory, sent by a client that still routes by the
/// layout of before an add-brick (mkdir, symlink, mknod, link, rename's destination), is
/// refused by a head with the new layout and routed again: the directory reaches the new
/// set, and a name that hashes to the new set has its entry or linkto there, where
/// lookups by the new layout look once the volume is no longer rebalancing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_name_made_by_the_old_layout_follows_the_new_one() {
    let c = Cluster::start();
    let OneSet { b1, vol, d, .. } = c.one_set_volume().await;
    let root = Creds::root();
    let f = vol.create(&root, d.id, b"f", 0o644, true).await.unwrap();
    let src = vol.create(&root, d.id, b"src", 0o644, true).await.unwrap();
    let old = (*vol.map()).clone();
    c.add_set(&b1, &vol).await;
    let map = vol.map();
    let mut names = (0..1000)
        .map(|i| format!("n{i}"))
        .filter(|n| cairn_placement::hashed_set(&map, d.id, n.as_bytes()).id == 2);
    let mut next = || names.next().unwrap();
    let on_b1 = |n: &str| b1.join("data/d").join(n).symlink_metadata().ok();
    let (dname, sname, mname, lname, rname) = (next(), next(), next(), next(), next());

    // The head's check itself: a mkdir routed by layout epoch 1 is refused; one from a
    // client that sends no layout epoch (built before it) is not; a linkto whose name
    // hashes to another set is refused whatever the client sends.
    let conn = c.cli().await;
    let raw = |op: Op, layout_epoch: Option<u64>| BrickRequest {
        volume: "v".into(),
        brick: 0,
        epoch: map.epoch,
        creds: Creds::root(),
        op,
        req: None,
        parents: false,
        inline: 0,
        layout_epoch,
        sync: false,
        locks: false,
    };
    let mkdir =
        |name: &str| Op::Mkdir { dir: d.id, name: name.into(), id: Id::new_on_set(1), perm: 0o755 };
    let e = conn.call(Request::Brick(raw(mkdir("raw1"), Some(1))), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::ESTALEMAP, "{e}");
    assert!(e.message.contains("routed by layout epoch 1"), "{e}");
    conn.call(Request::Brick(raw(mkdir("raw2"), None)), Bytes::new()).await.unwrap();
    let mk = Op::MkLinkto { dir: d.id, name: lname.clone().into_bytes(), target: f.id };
    let e = conn.call(Request::Brick(raw(mk, Some(2))), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::ESTALEMAP, "{e}");
    assert!(e.message.contains("hashes to replica set 2"), "{e}");

    vol.set_map_for_test(old.clone());
    let t = Instant::now();
    let sub = vol.mkdir(&root, d.id, dname.as_bytes(), 0o755).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "mkdir took {:?}", t.elapsed());
    assert!(on_b1(&dname).is_some_and(|m| m.is_dir()), "mkdir {dname}: not on the new set");
    // A file in it that hashes to the new set can be made there.
    let inner = (0..1000)
        .map(|i| format!("g{i}"))
        .find(|n| cairn_placement::hashed_set(&vol.map(), sub.id, n.as_bytes()).id == 2)
        .unwrap();
    vol.create(&root, sub.id, inner.as_bytes(), 0o644, true)
        .await
        .unwrap_or_else(|e| panic!("create {dname}/{inner} on the new set: {e}"));

    vol.set_map_for_test(old.clone());
    vol.symlink(&root, d.id, sname.as_bytes(), b"target").await.unwrap();
    assert!(on_b1(&sname).is_some_and(|m| m.file_type().is_symlink()), "symlink {sname}");

    vol.set_map_for_test(old.clone());
    vol.mknod(&root, d.id, mname.as_bytes(), FileType::Fifo, 0o644, 0).await.unwrap();
    assert!(on_b1(&mname).is_some(), "mknod {mname}: not on the new set");

    vol.set_map_for_test(old.clone());
    let t = Instant::now();
    let l = vol.link(&root, f.id, d.id, lname.as_bytes()).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "link took {:?}", t.elapsed());
    assert_eq!(l.id, f.id);
    assert!(on_b1(&lname).is_some(), "link {lname}: no linkto on the set it hashes to");

    vol.set_map_for_test(old.clone());
    let t = Instant::now();
    vol.rename(&root, d.id, b"src", d.id, rname.as_bytes(), 0).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "rename took {:?}", t.elapsed());
    assert!(on_b1(&rname).is_some(), "rename to {rname}: no linkto on the set it hashes to");
    assert_eq!(vol.lookup(&root, d.id, rname.as_bytes()).await.unwrap().id, src.id);
    assert_eq!(
        vol.lookup(&root, d.id, b"src").await.unwrap_err().errno,
        Errno::ENOENT,
        "the source name is gone"
    );
}

/// While rebalancing, an unlink removes the name's linkto on every set but the file's,
/// and a rename the source name's: only a linkto (`Op::UnlinkLinkto`). A real file of
/// that name on another set (here an old file the new layout hashes elsewhere, and a
/// second file of its name that a client made on the new set, which a racing create can
/// leave) stays; before, it was removed as if it were a linkto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_linktos_never_removes_a_real_file() {
    let c = Cluster::start();
    let OneSet { b0, b1, vol, d } = c.one_set_volume().await;
    let root = Creds::root();
    let mut old = vec![];
    for i in 0..40 {
        let name = format!("f{i}");
        old.push((
            name.clone(),
            vol.create(&root, d.id, name.as_bytes(), 0o644, true).await.unwrap(),
        ));
    }
    c.add_set(&b1, &vol).await;
    let map = vol.map();
    let set2 = map.sets.iter().find(|s| s.id == 2).unwrap();
    let conn = c.cli().await;
    let mut twins: Vec<_> = old
        .iter()
        .filter(|(n, _)| cairn_placement::hashed_set(&map, d.id, n.as_bytes()).id == 2)
        .take(2)
        .collect();
    assert_eq!(twins.len(), 2);
    // A second file of each name, made on the new set past the client's duplicate check.
    for (name, _) in &twins {
        let req = BrickRequest {
            volume: "v".into(),
            brick: cairn_placement::head(set2, d.id).unwrap().index,
            epoch: map.epoch,
            creds: Creds::root(),
            op: Op::Create {
                dir: d.id,
                name: name.clone().into_bytes(),
                id: Id::new_on_set(2),
                kind: FileType::Regular,
                perm: 0o644,
                rdev: 0,
                target: None,
                exclusive: true,
            },
            req: None,
            parents: false,
            inline: 0,
            layout_epoch: Some(map.layout_epoch),
            sync: false,
            locks: false,
        };
        conn.call(Request::Brick(req), Bytes::new()).await.unwrap();
        assert!(b1.join("data/d").join(name).is_file());
    }
    // Unlink finds the file on the set the name hashes to (the new one) and removes it;
    // the old file of that name on set 1 is no linkto and stays.
    let (uname, uold) = twins.remove(0);
    vol.drop_caches();
    vol.unlink(&root, d.id, uname.as_bytes()).await.unwrap();
    assert!(!b1.join("data/d").join(uname).exists(), "{uname}: unlinked on the new set");
    assert!(b0.join("data/d").join(uname).is_file(), "{uname}: the real file on set 1 removed");
    vol.drop_caches();
    assert_eq!(vol.lookup(&root, d.id, uname.as_bytes()).await.unwrap().id, uold.id);
    // Rename likewise removes only the source name's linktos.
    let (rname, _) = twins.remove(0);
    vol.drop_caches();
    vol.rename(&root, d.id, rname.as_bytes(), d.id, b"renamed", 0).await.unwrap();
    assert!(b0.join("data/d").join(rname).is_file(), "{rname}: the real file on set 1 removed");
}
