//! GETXATTRS: every xattr of an inode with its value in one round trip (vfs_cairn fills its
//! xattr cache with it: a file's first user.DOSATTRIB read and streams_xattr's listxattr
//! cost one round trip, not two). A value the caller may not read comes without it, and
//! the inode's head leases the inode to the caller as for a getxattr, so another client's
//! change recalls it before that change completes.

mod common;

use cairn_client::{Creds, Id, SetAttr};
use cairn_proto::Xattr;
use common::Cluster;
use parking_lot::Mutex;
use std::sync::Arc;

fn value<'a>(all: &'a [Xattr], name: &str) -> Option<Option<&'a [u8]>> {
    all.iter().find(|x| x.name == name.as_bytes()).map(|x| x.value.as_ref().map(|v| v.as_slice()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getxattrs_answers_names_and_the_values_the_caller_may_read() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    c.wait_all_up(&a).await;
    let root = Creds::root();
    let user = Creds { uid: 1000, gid: 1000, groups: vec![] };
    let f = a.create(&root, Id::ROOT, b"f", 0o640, true).await.unwrap();
    assert!(a.getxattrs(&root, f.id).await.unwrap().is_empty(), "a new file has no xattrs");
    a.setxattr(&root, f.id, b"user.DOSATTRIB", b"dos", 0).await.unwrap();
    a.setxattr(&root, f.id, b"security.NTACL", b"acl", 0).await.unwrap();
    let all = a.getxattrs(&root, f.id).await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(value(&all, "user.DOSATTRIB"), Some(Some(&b"dos"[..])));
    assert_eq!(value(&all, "security.NTACL"), Some(Some(&b"acl"[..])));
    // Names as listxattr gives them, values only where getxattr would answer one.
    let mut names = a.listxattr(&root, f.id).await.unwrap();
    names.sort();
    let mut got: Vec<Vec<u8>> = all.iter().map(|x| x.name.clone()).collect();
    got.sort();
    assert_eq!(names, got);
    let as_user = a.getxattrs(&user, f.id).await.unwrap();
    assert_eq!(value(&as_user, "user.DOSATTRIB"), Some(None), "mode 640: others may not read");
    assert_eq!(value(&as_user, "security.NTACL"), Some(None), "security.* needs uid 0");
    a.setattr(&root, f.id, &SetAttr { perm: Some(0o644), ..SetAttr::default() }).await.unwrap();
    let as_user = a.getxattrs(&user, f.id).await.unwrap();
    assert_eq!(value(&as_user, "user.DOSATTRIB"), Some(Some(&b"dos"[..])));
    assert_eq!(
        a.getxattr(&user, f.id, b"user.DOSATTRIB").await.unwrap(),
        b"dos".to_vec(),
        "getxattr agrees"
    );
    let missing = a.getxattrs(&root, Id::new_on_set(f.id.home_set())).await;
    assert!(missing.is_err(), "an unknown id is an error: {missing:?}");
}

/// What a getxattrs answered may be kept until a recall: another client's setxattr,
/// removexattr or chmod of the inode recalls this client's lease before it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_change_recalls_what_getxattrs_answered() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    let b = c.mount("v").await.unwrap();
    c.wait_all_up(&a).await;
    let root = Creds::root();
    let recalled: Arc<Mutex<Vec<Id>>> = Arc::default();
    let r = recalled.clone();
    a.on_invalidate(Arc::new(move |id, _| {
        r.lock().push(id);
        None
    }));
    let mut missed = vec![];
    for round in 0..6 {
        let f = b.create(&root, Id::ROOT, format!("f{round}").as_bytes(), 0o644, true).await;
        let f = f.unwrap();
        b.setxattr(&root, f.id, b"user.x", b"1", 0).await.unwrap();
        let change: &str = match round % 3 {
            0 => "setxattr",
            1 => "removexattr",
            _ => "chmod",
        };
        a.getxattrs(&root, f.id).await.unwrap();
        recalled.lock().clear();
        match change {
            "setxattr" => b.setxattr(&root, f.id, b"user.x", b"2", 0).await.unwrap(),
            "removexattr" => b.removexattr(&root, f.id, b"user.x").await.unwrap(),
            _ => {
                let s = SetAttr { perm: Some(0o600), ..SetAttr::default() };
                b.setattr(&root, f.id, &s).await.unwrap();
            }
        }
        if !recalled.lock().contains(&f.id) {
            missed.push(format!("round {round}: {change} recalled nothing"));
        }
    }
    assert!(missed.is_empty(), "getxattrs took no lease:\n{}", missed.join("\n"));
}
