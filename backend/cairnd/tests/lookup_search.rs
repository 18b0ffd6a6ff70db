//! The client's name caches (positive entries, complete directories, warm path walks)
//! answer a caller only when the cache knows it may search the directory
//! (`Volume::may_search`): a name cached by root's lookup is not handed to a user the
//! directory's mode refuses (the brick's EACCES instead), nor is a complete directory's
//! "no such entry"; a user the mode lets in (no POSIX ACL cached), or whom the brick let
//! search the directory since its last change, is answered from memory.

mod common;

use cairn_client::{Creds, Id};
use cairn_proto::{Errno, SetAttr};
use common::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_names_answer_only_callers_that_may_search() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    c.wait_all_up(&a).await;
    let root = Creds::root();
    let user = Creds { uid: 1000, gid: 1000, groups: vec![] };
    let rt = || a.stats().round_trips;

    let d = a.mkdir(&root, Id::ROOT, b"private", 0o700).await.unwrap();
    a.create(&root, d.id, b"f", 0o644, true).await.unwrap();
    a.lookup(&root, d.id, b"f").await.unwrap();
    let e = a.lookup(&root, d.id, b"missing").await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT);
    a.getattr(&root, d.id).await.unwrap();
    // Root's cached entry and complete listing are not the user's answers.
    let e = a.lookup(&user, d.id, b"f").await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "cached entry handed to a user without x: {e}");
    let e = a.lookup(&user, d.id, b"other").await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "complete directory's ENOENT for a user without x: {e}");
    let e = a.resolve(&user, b"private/f").await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "warm path walk through private: {e}");

    // Opened to everyone: the user's lookups come from the cache once the directory's
    // attributes and its (ACL-free) xattr list are cached.
    let open = SetAttr { perm: Some(0o755), ..SetAttr::default() };
    a.setattr(&root, d.id, &open).await.unwrap();
    a.getattr(&root, d.id).await.unwrap();
    a.getxattrs(&root, d.id).await.unwrap();
    a.lookup(&user, d.id, b"f").await.unwrap();
    let before = rt();
    a.lookup(&user, d.id, b"f").await.unwrap();
    let e = a.lookup(&user, d.id, b"none").await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT);
    assert_eq!(rt(), before, "answered from the cache: {:?}", a.stats().by_op);

    // Where the mode alone cannot tell (no xattr list cached: an ACL may name the user),
    // the brick's answer to the user's own lookup lets the next ones come from memory,
    // until another client's chmod recalls it.
    let b = c.mount("v").await.unwrap();
    c.wait_all_up(&b).await;
    let d2 = a.mkdir(&root, Id::ROOT, b"shared", 0o711).await.unwrap();
    a.create(&root, d2.id, b"g", 0o644, true).await.unwrap();
    a.lookup(&user, d2.id, b"g").await.unwrap();
    let before = rt();
    a.lookup(&user, d2.id, b"g").await.unwrap();
    assert_eq!(rt(), before, "the brick let the user search it");
    let close = SetAttr { perm: Some(0o700), ..SetAttr::default() };
    b.setattr(&root, d2.id, &close).await.unwrap();
    let e = a.lookup(&user, d2.id, b"g").await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "after another client's chmod: {e}");
}
