//! A file's byte-range lock state comes with its lease (`BrickRequest::locks`,
//! `Reply::Unlocked`, `cache/src/lockstate.rs`): a lock test of a file the head said no
//! other session locks costs no round trip (smbd's strict-locking test before each read
//! and write), another session's lock recalls that word before it is granted, a lock held
//! before the lease is reported, and this session's own locks (other owners) are tested
//! at the brick.

mod common;

use cairn_client::{Creds, Id};
use cairn_proto::{Lock, LockKind};
use common::Cluster;

fn lock(kind: LockKind, owner: u64, start: u64, len: u64) -> Lock {
    Lock { kind, start, len, owner, pid: owner as u32 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_tests_come_from_the_lease_until_another_session_locks() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    let b = c.mount("v").await.unwrap();
    c.wait_all_up(&a).await;
    c.wait_all_up(&b).await;
    let root = Creds::root();
    let rt = || a.stats().round_trips;
    let w = |owner| lock(LockKind::Write, owner, 0, 0);
    let d = a.mkdir(&root, Id::ROOT, b"d", 0o755).await.unwrap();

    // A file this session just made: the create's lease says nobody else locks it.
    let f = a.create(&root, d.id, b"f", 0o644, true).await.unwrap();
    let before = rt();
    assert_eq!(a.getlock(&root, f.id, w(1)).await.unwrap(), None);
    assert_eq!(a.getlock(&root, f.id, lock(LockKind::Read, 1, 5, 10)).await.unwrap(), None);
    assert_eq!(rt(), before, "answered from the lease: {:?}", a.stats().by_op);

    // Another session's lock recalls it before it is granted: the next test sees the lock.
    b.setlock(&root, f.id, lock(LockKind::Write, 7, 0, 10), false).await.unwrap();
    let got = a.getlock(&root, f.id, w(1)).await.unwrap();
    assert_eq!(got.map(|l| (l.owner, l.start, l.len)), Some((7, 0, 10)), "b's lock");
    // Leased again (a fresh xattr fetch) while b holds it: no word, the test asks.
    a.drop_caches();
    a.getxattrs(&root, f.id).await.unwrap();
    let before = rt();
    assert!(a.getlock(&root, f.id, w(1)).await.unwrap().is_some(), "still locked by b");
    assert_eq!(rt(), before + 1, "asked the brick");
    // Unlocked by b, leased again: answered here.
    b.setlock(&root, f.id, lock(LockKind::Unlock, 7, 0, 0), false).await.unwrap();
    a.drop_caches();
    a.getxattrs(&root, f.id).await.unwrap();
    let before = rt();
    assert_eq!(a.getlock(&root, f.id, w(1)).await.unwrap(), None);
    assert_eq!(rt(), before, "b let go: answered from the lease");

    // A lock held before this session first reads the file: reported.
    let g = b.create(&root, d.id, b"g", 0o644, true).await.unwrap();
    b.setlock(&root, g.id, lock(LockKind::Read, 8, 100, 1), false).await.unwrap();
    a.getattr(&root, g.id).await.unwrap();
    a.getxattrs(&root, g.id).await.unwrap();
    let got = a.getlock(&root, g.id, w(1)).await.unwrap();
    assert_eq!(got.map(|l| (l.owner, l.kind)), Some((8, LockKind::Read)), "b's earlier lock");

    // This session's own lock conflicts with its other owners (Ganesha's NFS clients):
    // tested at the brick from then on, though the lease said nobody else locks.
    let h = a.create(&root, d.id, b"h", 0o644, true).await.unwrap();
    a.setlock(&root, h.id, lock(LockKind::Write, 1, 0, 0), false).await.unwrap();
    a.getxattrs(&root, h.id).await.unwrap();
    let got = a.getlock(&root, h.id, w(2)).await.unwrap();
    assert_eq!(got.map(|l| l.owner), Some(1), "own owner 1's lock against owner 2");
    assert_eq!(a.getlock(&root, h.id, w(1)).await.unwrap(), None, "owner 1's own lock");
}
