//! The client's xattr cache (`cache/src/xattr.rs`, docs/libcairn.md "The xattr cache"):
//! one GETXATTRS answers later getxattr/listxattr calls until a recall; another client's
//! change is seen at once; a file this client creates is known to have no xattrs, unless
//! its directory has a default POSIX ACL (which the new file inherits).

mod common;

use cairn_client::{Creds, Id};
use cairn_proto::Errno;
use common::Cluster;

/// A POSIX ACL in the kernel's xattr form: user::rwx user:1234:r-- group::r-x mask::r-x
/// other::r-x (an extended ACL: a file made under it as default gets an access ACL).
fn acl() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 7u16, u32::MAX),
        (0x02, 4, 1234),
        (0x04, 5, u32::MAX),
        (0x10, 5, u32::MAX),
        (0x20, 5, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattrs_are_cached_under_the_lease_and_a_new_file_has_none() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;
    let a = c.mount("v").await.unwrap();
    let b = c.mount("v").await.unwrap();
    c.wait_all_up(&a).await;
    let root = Creds::root();
    let rt = || a.stats().round_trips;
    let d = a.mkdir(&root, Id::ROOT, b"d", 0o755).await.unwrap();
    assert!(a.getxattrs(&root, d.id).await.unwrap().is_empty(), "no default ACL on d");

    // A file made here under a directory known to have no default ACL: no fetch at all.
    let before = rt();
    let f = a.create(&root, d.id, b"f", 0o644, true).await.unwrap();
    let nodata = a.getxattr(&root, f.id, b"user.DOSATTRIB").await.unwrap_err();
    assert_eq!(nodata.errno, Errno::ENODATA);
    assert!(a.listxattr(&root, f.id).await.unwrap().is_empty());
    assert_eq!(rt() - before, 1, "the create only: {:?}", a.stats().by_op);

    // This client's own setxattr keeps the list current; reads cost nothing.
    a.setxattr(&root, f.id, b"user.DOSATTRIB", b"one", 0).await.unwrap();
    let before = rt();
    assert_eq!(a.getxattr(&root, f.id, b"user.DOSATTRIB").await.unwrap(), b"one");
    assert_eq!(a.listxattr(&root, f.id).await.unwrap(), vec![b"user.DOSATTRIB".to_vec()]);
    assert_eq!(rt(), before, "answered from the cache");

    // Another client's change recalls the lease: the next read sees it.
    b.setxattr(&root, f.id, b"user.DOSATTRIB", b"two", 0).await.unwrap();
    assert_eq!(a.getxattr(&root, f.id, b"user.DOSATTRIB").await.unwrap(), b"two");
    b.removexattr(&root, f.id, b"user.DOSATTRIB").await.unwrap();
    let gone = a.getxattr(&root, f.id, b"user.DOSATTRIB").await.unwrap_err();
    assert_eq!(gone.errno, Errno::ENODATA, "another client's removal");

    // With a default ACL on the directory the new file inherits an access ACL: no seed.
    a.setxattr(&root, d.id, b"system.posix_acl_default", &acl(), 0).await.unwrap();
    let names = a.listxattr(&root, d.id).await.unwrap();
    assert!(names.contains(&b"system.posix_acl_default".to_vec()), "{names:?}");
    let g = a.create(&root, d.id, b"g", 0o644, true).await.unwrap();
    let names = a.listxattr(&root, g.id).await.unwrap();
    assert!(names.contains(&b"system.posix_acl_access".to_vec()), "inherited ACL: {names:?}");
    assert_eq!(
        b.listxattr(&root, g.id).await.unwrap(),
        names,
        "another client reads the same list"
    );
}
