//! Path-escape attempts and caller credentials.
mod common;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Errno, FileType, Id, SetAttr};
use common::*;
use std::os::unix::fs::MetadataExt;

#[test]
fn names_and_symlinks_cannot_escape_data() {
    let (t, b) = new_brick();
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    // bad names never reach the filesystem
    for bad in ["..", "../outside", "a/../../x", "/etc", "."] {
        assert_eq!(
            create_as(&b, &root(), Id::ROOT, bad, FileType::Regular, 0o644).unwrap_err().errno,
            Errno::EINVAL,
            "{bad}"
        );
        let look = run(&b, &root(), Op::Lookup { dir: Id::ROOT, name: bad.into() });
        if bad == ".." {
            // ".." is the parent lookup (gateways walking up from a handle): the root's
            // parent is the root itself, never what lies above the brick's data.
            match look {
                Ok(Reply::Entry { attr, linkto: None }) => assert_eq!(attr.id, Id::ROOT),
                other => panic!(".. of the root: {other:?}"),
            }
        } else {
            assert_eq!(errno(look), Errno::EINVAL, "{bad}");
        }
        assert_eq!(
            errno(run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: bad.into() })),
            Errno::EINVAL
        );
    }
    // symlinks in the namespace pointing at /etc and outside the brick
    let s = run(
        &b,
        &root(),
        Op::Create {
            dir: Id::ROOT,
            name: b"etc".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::Symlink,
            perm: 0o777,
            rdev: 0,
            target: Some(b"/etc".to_vec()),
            exclusive: true,
        },
    )
    .map(attr)
    .unwrap();
    let s2 = run(
        &b,
        &root(),
        Op::Create {
            dir: Id::ROOT,
            name: b"out".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::Symlink,
            perm: 0o777,
            rdev: 0,
            target: Some(outside.as_os_str().as_encoded_bytes().to_vec()),
            exclusive: true,
        },
    )
    .map(attr)
    .unwrap();
    let etc_before = std::fs::metadata("/etc").unwrap();
    let passwd_before = std::fs::metadata("/etc/passwd").unwrap();
    for id in [s.id, s2.id] {
        // the symlink is not a directory to the brick
        assert_eq!(
            create_as(&b, &root(), id, "pwned", FileType::Regular, 0o644).unwrap_err().errno,
            Errno::ENOTDIR
        );
        assert_eq!(mkdir_as(&b, &root(), id, "pwned", 0o755).unwrap_err().errno, Errno::ENOTDIR);
        assert_eq!(
            errno(run(&b, &root(), Op::Lookup { dir: id, name: b"passwd".to_vec() })),
            Errno::ENOTDIR
        );
        assert_eq!(
            errno(run(&b, &root(), Op::ReadDir { dir: id, cookie: 0, max: 10, plus: false })),
            Errno::ENOTDIR
        );
        assert_eq!(errno(run(&b, &root(), Op::Read { id, offset: 0, len: 10 })), Errno::EINVAL);
        assert_eq!(errno(run(&b, &root(), Op::Write { id, offset: 0 })), Errno::EINVAL);
        // chmod/chown act on the link, never its target
        run(
            &b,
            &root(),
            Op::SetAttr { id, set: SetAttr { uid: Some(4242), ..Default::default() } },
        )
        .unwrap();
        run(
            &b,
            &root(),
            Op::SetXattr { id, name: b"trusted.x".to_vec(), value: b"1".to_vec(), flags: 0 },
        )
        .unwrap();
    }
    // a path walk through the symlink stops
    let r = run(&b, &root(), Op::LookupPath { components: vec![b"etc".to_vec(), b"ssh".to_vec()] })
        .unwrap();
    assert_eq!(r, Reply::Attrs(vec![]));
    // a rename through the link's name moves the link itself, not /etc
    run(
        &b,
        &root(),
        Op::Rename {
            src_dir: Id::ROOT,
            src_name: b"etc".to_vec(),
            dst_dir: Id::ROOT,
            dst_name: b"etc2".to_vec(),
            flags: 0,
        },
    )
    .unwrap();
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"etc2".to_vec() }).unwrap();
    // a tampered directory index link pointing outside is refused, not followed
    let d = mkdir(&b, Id::ROOT, "d");
    let h = d.to_hex();
    let link = b.root().join(".cairn/ids").join(&h[0..2]).join(&h[2..4]).join(&h);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../etc", &link).unwrap();
    let b2 = cairn_brick::Brick::open(b.root(), VOLID, 0).unwrap();
    assert!(create_as(&b2, &root(), d, "pwned", FileType::Regular, 0o644).is_err());
    // and one pointing to a real id but a name that is a symlink to /etc is ESTALE
    run(
        &b2,
        &root(),
        Op::Create {
            dir: Id::ROOT,
            name: b"etc3".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::Symlink,
            perm: 0o777,
            rdev: 0,
            target: Some(b"/etc".to_vec()),
            exclusive: true,
        },
    )
    .unwrap();
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(format!("../../00/00/{}/etc3", Id::ROOT.to_hex()), &link).unwrap();
    let b3 = cairn_brick::Brick::open(b.root(), VOLID, 0).unwrap();
    assert_eq!(
        create_as(&b3, &root(), d, "pwned", FileType::Regular, 0o644).unwrap_err().errno,
        Errno::ESTALE
    );

    assert!(!std::path::Path::new("/etc/pwned").exists());
    assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
    let etc_after = std::fs::metadata("/etc").unwrap();
    assert_eq!((etc_before.uid(), etc_before.mode()), (etc_after.uid(), etc_after.mode()));
    let passwd_after = std::fs::metadata("/etc/passwd").unwrap();
    assert_eq!(passwd_before.uid(), passwd_after.uid());
    assert_eq!(std::fs::metadata(&outside).unwrap().uid(), 0);
}

#[test]
fn caller_credentials_are_enforced_per_thread() {
    let (_t, b) = new_brick();
    let u = user(1000);
    // root 0755 directory: EACCES
    let e = create_as(&b, &u, Id::ROOT, "nope", FileType::Regular, 0o644).unwrap_err();
    assert_eq!(e.errno, Errno::EACCES);
    assert!(e.message.contains("\"nope\""), "{e}");
    assert_eq!(mkdir_as(&b, &u, Id::ROOT, "nope", 0o755).unwrap_err().errno, Errno::EACCES);
    // 0777 directory: allowed, owned by the caller
    let open = mkdir_as(&b, &root(), Id::ROOT, "open", 0o777).unwrap();
    assert_eq!(open.perm, 0o777, "umask must not apply");
    let f = create_as(&b, &u, open.id, "mine", FileType::Regular, 0o600).unwrap();
    assert_eq!((f.uid, f.gid, f.perm), (1000, 1000, 0o600));
    let on_disk = std::fs::metadata(b.root().join("data/open/mine")).unwrap();
    assert_eq!(on_disk.uid(), 1000);
    // root again on this thread afterwards
    let r = file(&b, Id::ROOT, "rootfile");
    assert_eq!(r.uid, 0);
    // the owner may write a 0400 file it created; others may not read a 0600 file
    let ro = create_as(&b, &u, open.id, "ro", FileType::Regular, 0o400).unwrap();
    run_data(&b, &u, Op::Write { id: ro.id, offset: 0 }, b"x").unwrap();
    assert_eq!(
        run_data(&b, &user(1001), Op::Read { id: f.id, offset: 0, len: 1 }, &[]).unwrap_err().errno,
        Errno::EACCES
    );
    assert_eq!(
        run_data(&b, &user(1001), Op::Write { id: r.id, offset: 0 }, b"x").unwrap_err().errno,
        Errno::EACCES
    );
    // chmod/chown: only the owner / root
    assert_eq!(
        errno(run(
            &b,
            &user(1001),
            Op::SetAttr { id: f.id, set: SetAttr { perm: Some(0o777), ..Default::default() } }
        )),
        Errno::EPERM
    );
    run(&b, &u, Op::SetAttr { id: f.id, set: SetAttr { perm: Some(0o644), ..Default::default() } })
        .unwrap();
    assert_eq!(
        errno(run(
            &b,
            &u,
            Op::SetAttr { id: f.id, set: SetAttr { uid: Some(0), ..Default::default() } }
        )),
        Errno::EPERM
    );
    // supplementary groups: chgrp to a group the caller is in
    let ug = Creds { uid: 1000, gid: 1000, groups: vec![1000, 2000] };
    let a = attr(
        run(
            &b,
            &ug,
            Op::SetAttr { id: f.id, set: SetAttr { gid: Some(2000), ..Default::default() } },
        )
        .unwrap(),
    );
    assert_eq!(a.gid, 2000);
    assert_eq!(
        errno(run(
            &b,
            &u,
            Op::SetAttr { id: f.id, set: SetAttr { gid: Some(3000), ..Default::default() } }
        )),
        Errno::EPERM
    );
    // truncate needs write permission
    assert_eq!(
        errno(run(
            &b,
            &user(1001),
            Op::SetAttr { id: f.id, set: SetAttr { size: Some(0), ..Default::default() } }
        )),
        Errno::EACCES
    );
    // devices need root
    let dev = run(
        &b,
        &u,
        Op::Create {
            dir: open.id,
            name: b"dev".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::CharDevice,
            perm: 0o600,
            rdev: libc::makedev(1, 3),
            target: None,
            exclusive: true,
        },
    );
    assert_eq!(errno(dev), Errno::EPERM);
    // a setuid file loses setuid when someone else writes it
    let su = create_as(&b, &root(), open.id, "su", FileType::Regular, 0o4777).unwrap();
    let w = attr(run_data(&b, &u, Op::Write { id: su.id, offset: 0 }, b"x").unwrap().0);
    assert_eq!(w.perm & 0o4000, 0);
}

#[test]
fn sticky_bit_and_setgid_inheritance() {
    let (_t, b) = new_brick();
    let tmp = mkdir_as(&b, &root(), Id::ROOT, "tmp", 0o1777).unwrap();
    let (alice, bob) = (user(1000), user(1001));
    create_as(&b, &alice, tmp.id, "a", FileType::Regular, 0o666).unwrap();
    let e = run(&b, &bob, Op::Unlink { dir: tmp.id, name: b"a".to_vec() });
    assert_eq!(errno(e), Errno::EPERM);
    let e = run(
        &b,
        &bob,
        Op::Rename {
            src_dir: tmp.id,
            src_name: b"a".to_vec(),
            dst_dir: tmp.id,
            dst_name: b"b".to_vec(),
            flags: 0,
        },
    );
    assert_eq!(errno(e), Errno::EPERM);
    run(&b, &alice, Op::Unlink { dir: tmp.id, name: b"a".to_vec() }).unwrap();
    // setgid directory: new entries take the directory's group, subdirs keep setgid
    let sg = mkdir_as(&b, &root(), Id::ROOT, "sg", 0o777).unwrap();
    run(
        &b,
        &root(),
        Op::SetAttr {
            id: sg.id,
            set: SetAttr { gid: Some(500), perm: Some(0o2777), ..Default::default() },
        },
    )
    .unwrap();
    let f = create_as(&b, &alice, sg.id, "f", FileType::Regular, 0o644).unwrap();
    assert_eq!(f.gid, 500);
    let sub = mkdir_as(&b, &alice, sg.id, "sub", 0o755).unwrap();
    assert_eq!(sub.gid, 500);
    assert_eq!(sub.perm & 0o2000, 0o2000);
}

#[test]
fn concurrent_callers_keep_their_own_credentials() {
    let (_t, b) = new_brick();
    let open = mkdir_as(&b, &root(), Id::ROOT, "open", 0o777).unwrap();
    let b = std::sync::Arc::new(b);
    let mut hs = Vec::new();
    for th in 0..8u32 {
        let b = b.clone();
        hs.push(std::thread::spawn(move || {
            let uid = if th % 2 == 0 { 0 } else { 2000 + th };
            let c = user(uid);
            for i in 0..100 {
                let a = create_as(&b, &c, open.id, &format!("t{th}-{i}"), FileType::Regular, 0o644)
                    .unwrap();
                assert_eq!(a.uid, uid, "thread {th} file {i}");
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(list_all(&b, open.id, 64, true).len(), 800);
}
