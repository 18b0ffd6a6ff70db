//! The attributes a create returns are those every later getattr reads, from any client:
//! a create is ordered by the directory's chain head, a getattr goes to the file's, and
//! each copy of an inode keeps its own ctime (it cannot be set). New inodes are headed by
//! their directory's head (`cairn_placement::new_id_like`), so the two agree. Before, about
//! half of the files (those whose head was the other brick of the set) disagreed by the
//! replication delay, which broke SMB durable reconnects once libcairn cached the create's
//! attributes (docs/smb.md, Coherence). Also checks that a lookup and a listing in a fresh
//! client answer with the same ctime.

mod common;

use cairn_client::{Creds, Id, SetAttr, Volume};
use common::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_attributes_match_every_later_read() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    let root = Creds::root();
    c.wait_all_up(&a).await;
    let d = a.mkdir(&root, Id::ROOT, b"d", 0o755).await.unwrap();
    let mut made = vec![];
    for dir in [Id::ROOT, d.id] {
        for i in 0..24 {
            let name = format!("f{i}");
            let f = a.create(&root, dir, name.as_bytes(), 0o644, true).await.unwrap();
            made.push((dir, name, f));
        }
    }
    let b = c.mount("v").await.unwrap();
    let l_mount = c.mount("v").await.unwrap();
    let mut differ = vec![];
    for (dir, name, f) in &made {
        let g = b.getattr(&root, f.id).await.unwrap();
        let l = l_mount.lookup(&root, *dir, name.as_bytes()).await.unwrap();
        if (g.ctime, g.mtime, g.change) != (f.ctime, f.mtime, f.change) || l.ctime != f.ctime {
            differ.push(format!(
                "{name} in {dir}: create {:?}, getattr {:?}, lookup {:?}",
                f.ctime, g.ctime, l.ctime
            ));
        }
    }
    // A listing with attributes (readdirplus) reads the same copies.
    let (entries, _) = b.readdir(&root, d.id, 0, 100, true).await.unwrap();
    for e in entries {
        let Some(at) = e.attr else { continue };
        let f = made.iter().find(|(_, _, f)| f.id == at.id).map(|(_, _, f)| f).unwrap();
        if at.ctime != f.ctime {
            differ.push(format!("listing of {:?}: {:?} vs create {:?}", e.name, at.ctime, f.ctime));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} reads disagree with the create:\n{}",
        differ.len(),
        made.len(),
        differ.join("\n")
    );
}

/// What a client caches from its own create, mkdir, write or readdirplus is held under a
/// lease the bricks granted it there, so another client's change recalls it before that
/// change completes: the first client's next getattr (within its cache timeout) reads the
/// change. Before, a create's, mkdir's and listing's attributes were leased nowhere and an
/// own write renewed nothing: the first client kept the old mode for its cache timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_replies_of_own_changes_and_listings_are_recalled() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    let b = c.mount("v").await.unwrap();
    let root = Creds::root();
    c.wait_all_up(&a).await;
    let mut stale = vec![];
    // Each round: a's cached value, b's change, a's getattr at once (cache timeout 1 s).
    for round in 0..8 {
        let d = a.mkdir(&root, Id::ROOT, format!("d{round}").as_bytes(), 0o755).await.unwrap();
        let f = a.create(&root, d.id, b"f", 0o644, true).await.unwrap();
        let w = a.create(&root, d.id, b"w", 0o644, true).await.unwrap();
        a.write_through(&root, w.id, 0, bytes::Bytes::from_static(b"data")).await.unwrap();
        // A new directory draws its own chain order (placement spreads the heads): its
        // mkdir's attributes are leased only when its head is the parent's, which served
        // the mkdir; otherwise they are cached unleased for the timeout, as before.
        // Each round checks one directory that drew it (more mkdirs until one does).
        let same = |id: Id| {
            let map = a.map();
            cairn_placement::same_chain(map.set_by_id(id.home_set()).unwrap(), Id::ROOT, id)
        };
        let mut leased = d.clone();
        for k in 0..64 {
            if same(leased.id) {
                break;
            }
            let name = format!("d{round}-{k}");
            leased = a.mkdir(&root, Id::ROOT, name.as_bytes(), 0o755).await.unwrap();
        }
        assert!(same(leased.id), "64 mkdirs drew no directory with the root's chain order");
        check(&a, &b, &mut stale, round, "mkdir", leased.id).await;
        check(&a, &b, &mut stale, round, "create", f.id).await;
        check(&a, &b, &mut stale, round, "write", w.id).await;
        // b's create recalls a's lease on d's entries and attributes, not on what is in d.
        let l = b.create(&root, d.id, b"l", 0o644, true).await.unwrap();
        let (entries, _) = a.readdir(&root, d.id, 0, 100, true).await.unwrap();
        assert!(entries.iter().any(|e| e.id == l.id && e.attr.is_some()));
        check(&a, &b, &mut stale, round, "listing", l.id).await;
    }
    assert!(stale.is_empty(), "another client's chmod was not seen:\n{}", stale.join("\n"));
}

/// `what` left `id`'s attributes cached in `a`; `b` changes its mode and `a` reads it.
async fn check(a: &Volume, b: &Volume, stale: &mut Vec<String>, round: u32, what: &str, id: Id) {
    let root = Creds::root();
    assert!(a.cached_attr(id).is_some(), "{what}'s attributes are not cached");
    b.setattr(&root, id, &SetAttr { perm: Some(0o700), ..SetAttr::default() }).await.unwrap();
    let got = a.getattr(&root, id).await.unwrap().perm & 0o7777;
    if got != 0o700 {
        stale.push(format!("round {round}: after a {what}, mode {got:o}"));
    }
}
