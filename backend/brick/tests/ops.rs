//! Every brick operation, its replies and its errors (run as root, in temp dirs).
mod common;
use cairn_brick::{Brick, Exec};
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{falloc, Errno, FileType, Id, SeekWhence, SetAttr, SetTime, Timespec};
use common::*;

#[test]
fn prepare_refuses_bad_paths_and_open_checks_marker() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("file");
    std::fs::write(&f, b"x").unwrap();
    let e = Brick::prepare(&f, &marker(0), false).unwrap_err();
    assert_eq!(e.errno, Errno::ENOTDIR);
    assert!(e.message.contains("not a directory"), "{e}");

    let full = t.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("junk"), b"x").unwrap();
    let e = Brick::prepare(&full, &marker(0), false).unwrap_err();
    assert_eq!(e.errno, Errno::ENOTEMPTY);
    Brick::prepare(&full, &marker(0), true).expect("force reuses a non-empty dir");

    let b = t.path().join("b");
    Brick::prepare(&b, &marker(3), false).unwrap();
    let mut other = marker(1);
    other.volume_id = "ffffffffffffffffffffffffffffffff".into();
    let e = Brick::prepare(&b, &other, true).unwrap_err();
    assert_eq!(e.errno, Errno::EEXIST);
    assert!(e.message.contains("already brick 3 of volume vol0"), "{e}");

    let e = Brick::open(&b, "ffffffffffffffffffffffffffffffff", 3).err().unwrap();
    assert!(e.message.contains("belongs to volume vol0"), "{e}");
    let e = Brick::open(&b, VOLID, 4).err().unwrap();
    assert!(e.message.contains("is brick 3"), "{e}");
    let e = Brick::open(&t.path().join("nope"), VOLID, 0).err().unwrap();
    assert!(e.message.contains("is not a brick"), "{e}");
    let br = Brick::open(&b, VOLID, 3).unwrap();
    assert_eq!(br.marker().index, 3);
    assert_eq!(getattr(&br, Id::ROOT).unwrap().kind, FileType::Directory);
}

#[test]
fn create_every_kind_lookup_getattr() {
    let (_t, b) = new_brick();
    for (name, kind) in [
        ("reg", FileType::Regular),
        ("fifo", FileType::Fifo),
        ("sock", FileType::Socket),
        ("sym", FileType::Symlink),
    ] {
        let a = create_as(&b, &root(), Id::ROOT, name, kind, 0o640).unwrap();
        assert_eq!(a.kind, kind, "{name}");
        assert_eq!(a.nlink, 1, "{name}: index link not counted");
        if kind != FileType::Symlink {
            assert_eq!(a.perm, 0o640, "{name}");
        }
        let (l, linkto) = lookup(&b, Id::ROOT, name).unwrap();
        assert_eq!(linkto, None);
        assert_eq!(l.id, a.id);
        assert_eq!(getattr(&b, a.id).unwrap().kind, kind);
        let path = b.root().join("data").join(name);
        assert!(std::fs::symlink_metadata(&path).is_ok());
    }
    // character device
    let id = Id::new_on_set(1);
    let a = attr(
        run(
            &b,
            &root(),
            Op::Create {
                dir: Id::ROOT,
                name: b"null".to_vec(),
                id,
                kind: FileType::CharDevice,
                perm: 0o600,
                rdev: libc::makedev(1, 3),
                target: None,
                exclusive: true,
            },
        )
        .unwrap(),
    );
    assert_eq!(a.rdev, libc::makedev(1, 3));
    assert_eq!(a.id, id);
    // Reading a device through the brick never opens it.
    assert_eq!(errno(run(&b, &root(), Op::Read { id, offset: 0, len: 10 })), Errno::EINVAL);

    let sym = lookup(&b, Id::ROOT, "sym").unwrap().0;
    assert_eq!(
        run(&b, &root(), Op::Readlink { id: sym.id }).unwrap(),
        Reply::Bytes(b"target".to_vec())
    );
    let reg = lookup(&b, Id::ROOT, "reg").unwrap().0;
    assert_eq!(errno(run(&b, &root(), Op::Readlink { id: reg.id })), Errno::EINVAL);

    // exclusive create of an existing name
    assert_eq!(
        create_as(&b, &root(), Id::ROOT, "reg", FileType::Regular, 0o644).unwrap_err().errno,
        Errno::EEXIST
    );
    // non-exclusive create returns the existing file
    let r = run(
        &b,
        &root(),
        Op::Create {
            dir: Id::ROOT,
            name: b"reg".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::Regular,
            perm: 0o600,
            rdev: 0,
            target: None,
            exclusive: false,
        },
    )
    .unwrap();
    assert_eq!(attr(r).id, reg.id);
    // a create whose id is already in use fails and leaves no name behind
    let r = run(
        &b,
        &root(),
        Op::Create {
            dir: Id::ROOT,
            name: b"dupid".to_vec(),
            id: reg.id,
            kind: FileType::Regular,
            perm: 0o600,
            rdev: 0,
            target: None,
            exclusive: true,
        },
    );
    assert_eq!(errno(r), Errno::EEXIST);
    assert_eq!(lookup(&b, Id::ROOT, "dupid").unwrap_err().errno, Errno::ENOENT);

    // errors
    assert_eq!(lookup(&b, Id::ROOT, "missing").unwrap_err().errno, Errno::ENOENT);
    let e = getattr(&b, Id::new_on_set(1)).unwrap_err();
    assert_eq!(e.errno, Errno::ESTALE);
    assert!(e.message.contains("vol0#0") && e.message.contains("getattr"), "{e}");
    for bad in ["", ".", "..", "a/b", "a\0b"] {
        assert_eq!(
            create_as(&b, &root(), Id::ROOT, bad, FileType::Regular, 0o644).unwrap_err().errno,
            Errno::EINVAL,
            "{bad:?}"
        );
    }
    let long = "x".repeat(256);
    assert_eq!(
        create_as(&b, &root(), Id::ROOT, &long, FileType::Regular, 0o644).unwrap_err().errno,
        Errno::ENAMETOOLONG
    );
    // create in a non-directory
    assert_eq!(
        create_as(&b, &root(), reg.id, "x", FileType::Regular, 0o644).unwrap_err().errno,
        Errno::ENOTDIR
    );
}

#[test]
fn mkdir_rmdir_link_unlink_rename() {
    let (_t, b) = new_brick();
    let d = mkdir(&b, Id::ROOT, "d");
    assert_eq!(mkdir_as(&b, &root(), Id::ROOT, "d", 0o755).unwrap_err().errno, Errno::EEXIST);
    let f = file(&b, d, "f");
    // link
    let a =
        attr(run(&b, &root(), Op::Link { id: f.id, dir: Id::ROOT, name: b"f2".to_vec() }).unwrap());
    assert_eq!(a.nlink, 2);
    assert_eq!(
        errno(run(&b, &root(), Op::Link { id: d, dir: Id::ROOT, name: b"d2".to_vec() })),
        Errno::EPERM
    );
    // rmdir of a non-empty dir
    assert_eq!(
        errno(run(&b, &root(), Op::Rmdir { dir: Id::ROOT, name: b"d".to_vec() })),
        Errno::ENOTEMPTY
    );
    assert_eq!(
        errno(run(&b, &root(), Op::Rmdir { dir: Id::ROOT, name: b"f2".to_vec() })),
        Errno::ENOTDIR
    );
    assert_eq!(
        errno(run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"d".to_vec() })),
        Errno::EISDIR
    );
    // unlink one name: the inode stays; unlink the last: the id is gone
    run(&b, &root(), Op::Unlink { dir: d, name: b"f".to_vec() }).unwrap();
    assert_eq!(getattr(&b, f.id).unwrap().nlink, 1);
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"f2".to_vec() }).unwrap();
    assert_eq!(getattr(&b, f.id).unwrap_err().errno, Errno::ESTALE);
    assert_eq!(
        errno(run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"f2".to_vec() })),
        Errno::ENOENT
    );
    // a dir holding only linkto entries is empty to the user
    run(&b, &root(), Op::MkLinkto { dir: d, name: b"lt".to_vec(), target: Id::new_on_set(7) })
        .unwrap();
    run(&b, &root(), Op::Rmdir { dir: Id::ROOT, name: b"d".to_vec() }).unwrap();
    assert_eq!(getattr(&b, d).unwrap_err().errno, Errno::ESTALE);

    // rename file over file: the replaced inode's id goes away
    let x = file(&b, Id::ROOT, "x");
    let y = file(&b, Id::ROOT, "y");
    let ren = |s: &str, dd: Id, t: &str, flags: u32| {
        run(
            &b,
            &root(),
            Op::Rename {
                src_dir: Id::ROOT,
                src_name: s.into(),
                dst_dir: dd,
                dst_name: t.into(),
                flags,
            },
        )
    };
    assert_eq!(errno(ren("x", Id::ROOT, "y", cairn_proto::rename_flags::NOREPLACE)), Errno::EEXIST);
    ren("x", Id::ROOT, "y", 0).unwrap();
    assert_eq!(lookup(&b, Id::ROOT, "y").unwrap().0.id, x.id);
    assert_eq!(getattr(&b, y.id).unwrap_err().errno, Errno::ESTALE);
    assert_eq!(errno(ren("x", Id::ROOT, "z", 0)), Errno::ENOENT);
    assert_eq!(errno(ren("y", Id::ROOT, "z", 3)), Errno::EINVAL);

    // directory renames keep ids resolvable, exchange swaps both index links
    let a1 = mkdir(&b, Id::ROOT, "a");
    let a2 = mkdir(&b, a1, "b");
    let a3 = mkdir(&b, a2, "c");
    let deep = file(&b, a3, "deep");
    let o = mkdir(&b, Id::ROOT, "other");
    let o2 = mkdir(&b, o, "inner");
    ren("a", o, "a-moved", 0).unwrap();
    let c3 = file(&b, a3, "after-rename");
    assert_eq!(lookup(&b, a3, "after-rename").unwrap().0.id, c3.id);
    assert!(b.root().join("data/other/a-moved/b/c/after-rename").exists());
    run(
        &b,
        &root(),
        Op::Rename {
            src_dir: o,
            src_name: b"a-moved".to_vec(),
            dst_dir: Id::ROOT,
            dst_name: b"other".to_vec(),
            flags: cairn_proto::rename_flags::EXCHANGE,
        },
    )
    .expect_err("cannot exchange a directory with its own parent");
    ren("y", o, "y", 0).unwrap();
    run(
        &b,
        &root(),
        Op::Rename {
            src_dir: o,
            src_name: b"a-moved".to_vec(),
            dst_dir: o,
            dst_name: b"inner".to_vec(),
            flags: cairn_proto::rename_flags::EXCHANGE,
        },
    )
    .unwrap();
    // fresh brick handle: no caches, ids resolved from the index only
    let root_path = b.root().to_path_buf();
    drop(b);
    let b = Brick::open(&root_path, VOLID, 0).unwrap();
    assert!(root_path.join("data/other/inner/b/c/deep").exists());
    let ff = file(&b, a3, "fresh");
    assert!(root_path.join("data/other/inner/b/c/fresh").exists(), "{ff:?}");
    let o2f = file(&b, o2, "o2f");
    assert!(root_path.join("data/other/a-moved/o2f").exists(), "{o2f:?}");
    assert_eq!(getattr(&b, deep.id).unwrap().kind, FileType::Regular);
    assert_eq!(getattr(&b, a2).unwrap().kind, FileType::Directory);
}

#[test]
fn data_ops_read_write_truncate_fallocate_seek_caw() {
    let (_t, b) = new_brick();
    let f = file(&b, Id::ROOT, "f");
    let w = run_data(&b, &root(), Op::Write { id: f.id, offset: 0 }, b"hello world").unwrap().0;
    match w {
        Reply::Written { count, attr } => {
            assert_eq!(count, 11);
            assert_eq!(attr.size, 11);
            assert!(attr.change > f.change || attr.change >= f.change);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(read(&b, f.id, 0, 5), (b"hello".to_vec(), false));
    assert_eq!(read(&b, f.id, 6, 100), (b"world".to_vec(), true));
    assert_eq!(read(&b, f.id, 6, 5), (b"world".to_vec(), true));
    assert_eq!(read(&b, f.id, 100, 5), (vec![], true));

    // compare and write
    let cw = |cmp: &[u8], new: &[u8]| {
        let mut d = cmp.to_vec();
        d.extend_from_slice(new);
        run_data(&b, &root(), Op::CompareAndWrite { id: f.id, offset: 6 }, &d).map(|r| r.0)
    };
    cw(b"world", b"there").unwrap();
    assert_eq!(read(&b, f.id, 0, 100).0, b"hello there");
    let e = cw(b"world", b"again").unwrap_err();
    assert_eq!(e.errno, Errno::EMISCOMPARE);
    assert!(e.message.contains("miscompare at byte 6"), "{e}");
    assert_eq!(read(&b, f.id, 0, 100).0, b"hello there");
    assert_eq!(
        errno(
            run_data(&b, &root(), Op::CompareAndWrite { id: f.id, offset: 0 }, b"abc").map(|r| r.0)
        ),
        Errno::EINVAL
    );

    // truncate, times
    let set = SetAttr {
        size: Some(1 << 20),
        mtime: Some(SetTime::At(Timespec { sec: 1_000_000, nsec: 5 })),
        atime: Some(SetTime::Now),
        perm: Some(0o600),
        ..Default::default()
    };
    let a = attr(run(&b, &root(), Op::SetAttr { id: f.id, set }).unwrap());
    assert_eq!(a.size, 1 << 20);
    assert_eq!(a.perm, 0o600);
    assert_eq!(a.mtime, Timespec { sec: 1_000_000, nsec: 5 });
    assert!(a.atime.sec > 1_600_000_000);

    // seek data / hole
    let seek = |off: u64, whence| run(&b, &root(), Op::Seek { id: f.id, offset: off, whence });
    assert_eq!(seek(0, SeekWhence::Data).unwrap(), Reply::Offset(0));
    match seek(0, SeekWhence::Hole).unwrap() {
        Reply::Offset(o) => assert!((11..1 << 20).contains(&o), "{o}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(errno(seek(2 << 20, SeekWhence::Data)), Errno::ENXIO);

    // fallocate
    let fa = |mode, off, len| run(&b, &root(), Op::Fallocate { id: f.id, mode, offset: off, len });
    let a = attr(fa(0, 0, 4 << 20).unwrap());
    assert_eq!(a.size, 4 << 20);
    assert!(a.blocks >= (4 << 20) / 512);
    let a = attr(fa(falloc::KEEP_SIZE, 0, 8 << 20).unwrap());
    assert_eq!(a.size, 4 << 20);
    write(&b, f.id, 0, &[7u8; 8192]);
    fa(falloc::PUNCH_HOLE | falloc::KEEP_SIZE, 0, 4096).unwrap();
    assert_eq!(read(&b, f.id, 0, 8).0, vec![0u8; 8]);
    assert_eq!(read(&b, f.id, 4096, 4).0, vec![7u8; 4]);
    fa(falloc::ZERO_RANGE, 4096, 4096).unwrap();
    assert_eq!(read(&b, f.id, 4096, 4).0, vec![0u8; 4]);
    assert_eq!(errno(fa(0x40, 0, 1)), Errno::ENOTSUP);

    run(&b, &root(), Op::Fsync { id: f.id, datasync: true }).unwrap();
    run(&b, &root(), Op::Fsync { id: Id::ROOT, datasync: false }).unwrap();
    // data ops on a directory
    assert_eq!(
        errno(run(&b, &root(), Op::Read { id: Id::ROOT, offset: 0, len: 1 })),
        Errno::EISDIR
    );
    let d = mkdir(&b, Id::ROOT, "d");
    assert_eq!(errno(run(&b, &root(), Op::Write { id: d, offset: 0 })), Errno::EISDIR);
    match run(&b, &root(), Op::StatFs).unwrap() {
        Reply::StatFs(s) => assert!(s.blocks > 0 && s.namemax >= 255),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        errno(run(
            &b,
            &root(),
            Op::GetLock {
                id: f.id,
                lock: cairn_proto::Lock {
                    kind: cairn_proto::LockKind::Read,
                    start: 0,
                    len: 0,
                    owner: 1,
                    pid: 1
                }
            }
        )),
        Errno::ENOTSUP
    );
}

#[test]
fn setattr_on_symlinks_dirs_and_owner() {
    let (_t, b) = new_brick();
    let s = create_as(&b, &root(), Id::ROOT, "s", FileType::Symlink, 0o777).unwrap();
    let a = attr(
        run(
            &b,
            &root(),
            Op::SetAttr {
                id: s.id,
                set: SetAttr { uid: Some(42), gid: Some(43), ..Default::default() },
            },
        )
        .unwrap(),
    );
    assert_eq!((a.uid, a.gid, a.kind), (42, 43, FileType::Symlink));
    let a = attr(
        run(
            &b,
            &root(),
            Op::SetAttr {
                id: s.id,
                set: SetAttr {
                    mtime: Some(SetTime::At(Timespec { sec: 5, nsec: 0 })),
                    ..Default::default()
                },
            },
        )
        .unwrap(),
    );
    assert_eq!(a.mtime.sec, 5);
    assert_eq!(
        errno(run(
            &b,
            &root(),
            Op::SetAttr { id: s.id, set: SetAttr { perm: Some(0o600), ..Default::default() } }
        )),
        Errno::ENOTSUP
    );
    let d = mkdir(&b, Id::ROOT, "d");
    let a = attr(
        run(
            &b,
            &root(),
            Op::SetAttr {
                id: d,
                set: SetAttr { perm: Some(0o1777), uid: Some(7), ..Default::default() },
            },
        )
        .unwrap(),
    );
    assert_eq!((a.perm, a.uid), (0o1777, 7));
    assert_eq!(
        errno(run(
            &b,
            &root(),
            Op::SetAttr { id: d, set: SetAttr { size: Some(0), ..Default::default() } }
        )),
        Errno::EISDIR
    );
    let fifo = create_as(&b, &root(), Id::ROOT, "p", FileType::Fifo, 0o600).unwrap();
    let a = attr(
        run(
            &b,
            &root(),
            Op::SetAttr { id: fifo.id, set: SetAttr { perm: Some(0o644), ..Default::default() } },
        )
        .unwrap(),
    );
    assert_eq!(a.perm, 0o644);
    // the on-disk symlink target was not followed by any of this
    assert_eq!(std::fs::read_link(b.root().join("data/s")).unwrap().to_str(), Some("target"));
}

#[test]
fn xattrs_namespaces_and_hiding() {
    let (_t, b) = new_brick();
    let f = file(&b, Id::ROOT, "f");
    let set = |c: &cairn_proto::Creds, n: &str, v: &str, flags| {
        run(&b, c, Op::SetXattr { id: f.id, name: n.into(), value: v.into(), flags })
    };
    let get =
        |c: &cairn_proto::Creds, n: &str| run(&b, c, Op::GetXattr { id: f.id, name: n.into() });
    set(&root(), "user.a", "1", 0).unwrap();
    assert_eq!(get(&root(), "user.a").unwrap(), Reply::Bytes(b"1".to_vec()));
    assert_eq!(errno(set(&root(), "user.a", "2", cairn_proto::xattr_flags::CREATE)), Errno::EEXIST);
    assert_eq!(
        errno(set(&root(), "user.b", "2", cairn_proto::xattr_flags::REPLACE)),
        Errno::ENODATA
    );
    set(&root(), "trusted.foo", "t", 0).unwrap();
    set(&root(), "security.bar", "s", 0).unwrap();
    assert_eq!(get(&root(), "trusted.foo").unwrap(), Reply::Bytes(b"t".to_vec()));
    // stored under the cairn prefix on disk
    let disk = std::process::Command::new("getfattr")
        .args(["-m", "-", "-d"])
        .arg(b.root().join("data/f"))
        .output();
    if let Ok(o) = disk {
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(s.contains("trusted.cairn.x.trusted.foo") || !o.status.success(), "{s}");
    }
    assert_eq!(errno(set(&user(1000), "trusted.foo", "x", 0)), Errno::EPERM);
    assert_eq!(errno(get(&user(1000), "security.bar")), Errno::EPERM);
    assert_eq!(errno(set(&root(), "weird.x", "x", 0)), Errno::ENOTSUP);
    assert_eq!(errno(set(&root(), "system.foo", "x", 0)), Errno::ENOTSUP);
    match run(&b, &root(), Op::ListXattr { id: f.id }).unwrap() {
        Reply::Names(mut n) => {
            n.sort();
            assert_eq!(
                n,
                vec![b"security.bar".to_vec(), b"trusted.foo".to_vec(), b"user.a".to_vec()]
            );
        }
        other => panic!("{other:?}"),
    }
    run(&b, &root(), Op::RemoveXattr { id: f.id, name: b"user.a".to_vec() }).unwrap();
    assert_eq!(errno(get(&root(), "user.a")), Errno::ENODATA);
    // user.* on a file the caller cannot write
    assert_eq!(errno(set(&user(1000), "user.x", "1", 0)), Errno::EACCES);
    // xattrs on a directory and a symlink (trusted.* is allowed on symlinks)
    run(
        &b,
        &root(),
        Op::SetXattr { id: Id::ROOT, name: b"user.d".to_vec(), value: b"v".to_vec(), flags: 0 },
    )
    .unwrap();
    let s = create_as(&b, &root(), Id::ROOT, "s", FileType::Symlink, 0o777).unwrap();
    run(
        &b,
        &root(),
        Op::SetXattr { id: s.id, name: b"trusted.s".to_vec(), value: b"v".to_vec(), flags: 0 },
    )
    .unwrap();
    assert_eq!(
        run(&b, &root(), Op::GetXattr { id: s.id, name: b"trusted.s".to_vec() }).unwrap(),
        Reply::Bytes(b"v".to_vec())
    );
}

#[test]
fn linkto_lookup_and_readdir() {
    let (_t, b) = new_brick();
    let target = Id::new_on_set(9);
    run(&b, &root(), Op::MkLinkto { dir: Id::ROOT, name: b"lt".to_vec(), target }).unwrap();
    // The same linkto again is made already (a retry); one to another inode is refused.
    run(&b, &root(), Op::MkLinkto { dir: Id::ROOT, name: b"lt".to_vec(), target }).unwrap();
    let other = Id::new_on_set(9);
    assert_eq!(
        errno(run(
            &b,
            &root(),
            Op::MkLinkto { dir: Id::ROOT, name: b"lt".to_vec(), target: other }
        )),
        Errno::EEXIST
    );
    let (a, linkto) = lookup(&b, Id::ROOT, "lt").unwrap();
    assert_eq!(linkto, Some(target));
    assert_eq!(a.id, target);
    assert_eq!(a.perm, 0);
    file(&b, Id::ROOT, "real");
    let names: Vec<_> = list_all(&b, Id::ROOT, 10, false).into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b"real".to_vec()]);
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"lt".to_vec() }).unwrap();
    assert_eq!(lookup(&b, Id::ROOT, "lt").unwrap_err().errno, Errno::ENOENT);
}

#[test]
fn readdir_pagination_of_10000_entries() {
    let (_t, b) = new_brick();
    let d = mkdir(&b, Id::ROOT, "big");
    let mut want = std::collections::HashSet::new();
    for i in 0..10_000 {
        let n = format!("entry-{i:05}");
        file(&b, d, &n);
        want.insert(n.into_bytes());
    }
    let t0 = std::time::Instant::now();
    let got = list_all(&b, d, 100, false);
    let elapsed = t0.elapsed();
    assert_eq!(got.len(), 10_000);
    let mut seen = std::collections::HashSet::new();
    for e in &got {
        assert!(seen.insert(e.name.clone()), "duplicate {:?}", e.name);
        assert!(e.cookie >= 3 && e.cookie < 1 << 56);
        assert_eq!(e.cookie, cairn_brick::cookie(&e.name));
    }
    assert_eq!(seen, want);
    assert!(elapsed < std::time::Duration::from_secs(20), "paging took {elapsed:?}");
    // plus carries attrs; cookies are stable across a new listing
    let plus = list_all(&b, d, 1000, true);
    assert!(plus.iter().all(|e| e.attr.as_ref().is_some_and(|a| a.id == e.id && a.nlink == 1)));
    assert_eq!(
        plus.iter().map(|e| e.cookie).collect::<Vec<_>>(),
        got.iter().map(|e| e.cookie).collect::<Vec<_>>()
    );
    // a change shows up right away (cache invalidated)
    let extra = file(&b, d, "zz-new");
    run(&b, &root(), Op::Unlink { dir: d, name: b"entry-00000".to_vec() }).unwrap();
    let again = list_all(&b, d, 500, false);
    assert_eq!(again.len(), 10_000);
    assert!(again.iter().any(|e| e.id == extra.id));
    assert!(!again.iter().any(|e| e.name == b"entry-00000"));
    // resuming from a cookie after the last entry: empty and eof
    let last = again.iter().map(|e| e.cookie).max().unwrap();
    assert_eq!(
        run(&b, &root(), Op::ReadDir { dir: d, cookie: last, max: 10, plus: false }).unwrap(),
        Reply::Dir { entries: vec![], eof: true }
    );
}

#[test]
fn lookup_path_resolves_directory_chains() {
    let (_t, b) = new_brick();
    let a = mkdir(&b, Id::ROOT, "a");
    let bb = mkdir(&b, a, "b");
    file(&b, bb, "f");
    let r = run(
        &b,
        &root(),
        Op::LookupPath {
            components: vec![b"a".to_vec(), b"b".to_vec(), b"f".to_vec(), b"x".to_vec()],
        },
    )
    .unwrap();
    match r {
        Reply::Attrs(v) => {
            assert_eq!(v.iter().map(|a| a.id).collect::<Vec<_>>(), vec![a, bb]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        errno(run(&b, &root(), Op::LookupPath { components: vec![b"..".to_vec()] })),
        Errno::EINVAL
    );
}

#[test]
fn open_unlinked_file_readable_until_release() {
    let (_t, b) = new_brick();
    let f = file(&b, Id::ROOT, "f");
    write(&b, f.id, 0, b"still here");
    run(&b, &root(), Op::Open { id: f.id }).unwrap();
    run(&b, &root(), Op::Open { id: f.id }).unwrap();
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"f".to_vec() }).unwrap();
    assert_eq!(lookup(&b, Id::ROOT, "f").unwrap_err().errno, Errno::ENOENT);
    assert_eq!(read(&b, f.id, 0, 100).0, b"still here");
    assert_eq!(getattr(&b, f.id).unwrap().nlink, 0);
    write(&b, f.id, 0, b"STILL");
    run(&b, &root(), Op::Release { id: f.id }).unwrap();
    assert_eq!(read(&b, f.id, 0, 100).0, b"STILL here");
    run(&b, &root(), Op::Release { id: f.id }).unwrap();
    assert_eq!(getattr(&b, f.id).unwrap_err().errno, Errno::ESTALE);
    assert_eq!(errno(run(&b, &root(), Op::Read { id: f.id, offset: 0, len: 1 })), Errno::ESTALE);
    assert_eq!(errno(run(&b, &root(), Op::Open { id: f.id })), Errno::ESTALE);
}

#[test]
fn ids_survive_restart_and_sweep_removes_orphans() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("b");
    let b = new_brick_at(&path, 0);
    let d1 = mkdir(&b, Id::ROOT, "d1");
    let d2 = mkdir(&b, d1, "d2");
    let d3 = mkdir(&b, d2, "d3");
    let f = file(&b, d3, "f");
    let s = create_as(&b, &root(), d3, "s", FileType::Symlink, 0o777).unwrap();
    let orphan = file(&b, Id::ROOT, "orphan");
    // rename a directory in the middle of the chain
    run(
        &b,
        &root(),
        Op::Rename {
            src_dir: d1,
            src_name: b"d2".to_vec(),
            dst_dir: Id::ROOT,
            dst_name: b"moved".to_vec(),
            flags: 0,
        },
    )
    .unwrap();
    drop(b);
    // simulate a crash between unlinking the name and its index link
    std::fs::remove_file(path.join("data/orphan")).unwrap();
    let b = Brick::open(&path, VOLID, 0).unwrap();
    assert_eq!(getattr(&b, f.id).unwrap().kind, FileType::Regular);
    assert_eq!(getattr(&b, s.id).unwrap().kind, FileType::Symlink);
    assert_eq!(getattr(&b, d3).unwrap().kind, FileType::Directory);
    assert_eq!(getattr(&b, d2).unwrap().id, d2);
    assert_eq!(getattr(&b, orphan.id).unwrap_err().errno, Errno::ESTALE);
    assert!(path.join("data/moved/d3/f").exists());
    let g = file(&b, d3, "g");
    assert!(path.join("data/moved/d3/g").exists(), "{g:?}");
}

#[test]
fn replica_ops_are_idempotent_and_copy_owner() {
    let (_t, b) = new_brick();
    let id = Id::new_on_set(1);
    let mut head = file(&b, Id::ROOT, "seed");
    head.uid = 1234;
    head.gid = 99;
    head.perm = 0o640;
    head.id = id;
    let op = Op::Create {
        dir: Id::ROOT,
        name: b"r".to_vec(),
        id,
        kind: FileType::Regular,
        perm: 0o600,
        rdev: 0,
        target: None,
        exclusive: true,
    };
    let rep = Exec::Replica { result: Some(&head) };
    for _ in 0..2 {
        let a = attr(b.execute(&user(1234), &op, &[], rep).unwrap().0);
        assert_eq!((a.id, a.uid, a.gid, a.perm), (id, 1234, 99, 0o640));
    }
    // the same name under another id is a conflict for a replica too, of any kind
    for kind in [FileType::Regular, FileType::Symlink] {
        let target = (kind == FileType::Symlink).then(|| b"t".to_vec());
        let clash = Op::Create {
            dir: Id::ROOT,
            name: b"r".to_vec(),
            id: Id::new_on_set(1),
            kind,
            perm: 0o600,
            rdev: 0,
            target,
            exclusive: true,
        };
        let e = b.execute(&root(), &clash, &[], Exec::Replica { result: None }).unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST, "{kind:?}");
    }
    assert_eq!(lookup(&b, Id::ROOT, "r").unwrap().0.id, id);
    let did = Id::new_on_set(1);
    let mut dh = head.clone();
    dh.id = did;
    dh.kind = FileType::Directory;
    dh.perm = 0o2775;
    let mk = Op::Mkdir { dir: Id::ROOT, name: b"rd".to_vec(), id: did, perm: 0o700 };
    for _ in 0..2 {
        let a = attr(b.execute(&root(), &mk, &[], Exec::Replica { result: Some(&dh) }).unwrap().0);
        assert_eq!((a.id, a.uid, a.perm), (did, 1234, 0o2775));
    }
    // another id under the same name is still a conflict
    let other =
        Op::Mkdir { dir: Id::ROOT, name: b"rd".to_vec(), id: Id::new_on_set(1), perm: 0o700 };
    assert_eq!(
        b.execute(&root(), &other, &[], Exec::Replica { result: None }).unwrap_err().errno,
        Errno::EEXIST
    );
    for op in [
        Op::Unlink { dir: Id::ROOT, name: b"r".to_vec() },
        Op::Unlink { dir: Id::ROOT, name: b"r".to_vec() },
        Op::Rmdir { dir: Id::ROOT, name: b"rd".to_vec() },
        Op::Rmdir { dir: Id::ROOT, name: b"rd".to_vec() },
    ] {
        b.execute(&root(), &op, &[], Exec::Replica { result: None }).unwrap();
    }
    let lk = Op::Link { id: head_id(&b), dir: Id::ROOT, name: b"l2".to_vec() };
    b.execute(&root(), &lk, &[], Exec::Replica { result: None }).unwrap();
    b.execute(&root(), &lk, &[], Exec::Replica { result: None }).unwrap();
}

fn head_id(b: &cairn_brick::Brick) -> Id {
    lookup(b, Id::ROOT, "seed").unwrap().0.id
}

#[test]
fn pending_lists_are_durable() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("b");
    let b = new_brick_at(&path, 0);
    let (i1, i2, i3) = (Id::new_on_set(1), Id::new_on_set(1), Id::new_on_set(1));
    b.pending_add(1, i1).unwrap();
    b.pending_add(1, i1).unwrap();
    b.pending_add(1, i2).unwrap();
    b.pending_add(2, i3).unwrap();
    assert_eq!(b.pending_counts(), vec![(1, 2), (2, 1)]);
    drop(b);
    let b = Brick::open(&path, VOLID, 0).unwrap();
    assert_eq!(b.pending_counts(), vec![(1, 2), (2, 1)]);
    let mut want = vec![i1, i2];
    want.sort();
    let listed = pending(&b, 1);
    assert_eq!(listed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), want);
    let gen1 = listed.iter().find(|(id, _)| *id == i1).unwrap().1;
    run(&b, &root(), Op::PendingClear { peer: 1, ids: vec![(i1, gen1)] }).unwrap();
    assert_eq!(pending(&b, 1).iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![i2]);
    drop(b);
    let b = Brick::open(&path, VOLID, 0).unwrap();
    assert_eq!(b.pending_counts(), vec![(1, 1), (2, 1)]);
    assert_eq!(pending(&b, 5), vec![]);
}

fn pending(b: &cairn_brick::Brick, peer: u32) -> Vec<(Id, u64)> {
    match run(b, &root(), Op::PendingList { peer }).unwrap() {
        Reply::Pending(v) => v,
        r => panic!("PendingList answered {r:?}"),
    }
}

/// A heal lists the records, copies, then clears what it listed: a record re-added by a
/// write that landed after the listing (a new generation) must survive the clear, or that
/// write never reaches the peer.
#[test]
fn pending_clear_keeps_records_added_again() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("b");
    let b = new_brick_at(&path, 0);
    let (i1, i2) = (Id::new_on_set(1), Id::new_on_set(1));
    b.pending_add(1, i1).unwrap();
    b.pending_add(1, i2).unwrap();
    let listed = pending(&b, 1);
    // A write to i1 after the heal listed (and copied) it records it again.
    b.pending_add(1, i1).unwrap();
    let again = pending(&b, 1);
    let gen = |v: &[(Id, u64)], id: Id| v.iter().find(|(x, _)| *x == id).unwrap().1;
    assert_ne!(gen(&listed, i1), gen(&again, i1), "re-recording gives a new generation");
    assert_eq!(gen(&listed, i2), gen(&again, i2));
    run(&b, &root(), Op::PendingClear { peer: 1, ids: listed.clone() }).unwrap();
    assert_eq!(pending(&b, 1), vec![(i1, gen(&again, i1))], "the re-added record stays");
    // It stays on disk too.
    drop(b);
    let b = Brick::open(&path, VOLID, 0).unwrap();
    assert_eq!(pending(&b, 1).iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![i1]);
    // A generation from before the restart never matches: the record stays (copied again).
    run(&b, &root(), Op::PendingClear { peer: 1, ids: again.clone() }).unwrap();
    assert_eq!(pending(&b, 1).len(), 1);
    // The current generation clears it, and a record cleared is gone for good.
    let now = pending(&b, 1);
    run(&b, &root(), Op::PendingClear { peer: 1, ids: now.clone() }).unwrap();
    assert_eq!(pending(&b, 1), vec![]);
    assert_eq!(b.pending_counts(), vec![]);
    run(&b, &root(), Op::PendingClear { peer: 1, ids: now }).unwrap();
    drop(b);
    let b = Brick::open(&path, VOLID, 0).unwrap();
    assert_eq!(pending(&b, 1), vec![]);
}

/// A replica's new regular file takes the head's owner, mode and times, whether they
/// already match what its own create gave (nothing to change but the times), differ in
/// mode only, or differ in owner (a chown clears set-id bits: the mode is set after it);
/// its reply agrees with a later getattr (but for ctime, this copy's own).
#[test]
fn replica_create_copies_owner_mode_and_times_and_replies_what_it_made() {
    let (_t, b) = new_brick();
    let seed = file(&b, Id::ROOT, "seed");
    let cases = [
        ("same", root(), 0o644, (0, 0, 0o644)),
        ("mode", root(), 0o600, (0, 0, 0o640)),
        ("owner", root(), 0o4755, (1234, 99, 0o4755)),
        ("setgid", user(1234), 0o2750, (1234, 1234, 0o2750)),
    ];
    for (i, (name, creds, perm, (uid, gid, hperm))) in cases.into_iter().enumerate() {
        let id = Id::new_on_set(1);
        let mut head = seed.clone();
        (head.id, head.uid, head.gid, head.perm) = (id, uid, gid, hperm);
        head.atime = Timespec { sec: 1_000_000 + i as i64, nsec: 123 };
        head.mtime = Timespec { sec: 2_000_000 + i as i64, nsec: 456_789 };
        let op = create_op(Id::ROOT, name, id, FileType::Regular, perm);
        let rep = Exec::Replica { result: Some(&head) };
        let a = attr(b.execute(&creds, &op, &[], rep).unwrap().0);
        let g = getattr(&b, id).unwrap();
        let key =
            |a: &cairn_proto::Attr| (a.id, a.uid, a.gid, a.perm, a.nlink, a.size, a.atime, a.mtime);
        assert_eq!(key(&g), (id, uid, gid, hperm, 1, 0, head.atime, head.mtime), "{name}");
        assert_eq!(key(&a), key(&g), "{name}: the reply is what the create made");
    }
}

/// A quick-read lookup opens the file it found by its name (`Brick::open_found`), not by
/// its index link: the fd is kept only if it is the inode of the id, GETATTR and READ use
/// it, and it is forgotten when the file goes.
#[test]
fn open_found_keeps_only_the_inode_of_the_id() {
    let (_t, b) = new_brick();
    let d = mkdir(&b, Id::ROOT, "d");
    let f = file(&b, d, "f");
    let g = file(&b, d, "g");
    write(&b, f.id, 0, b"f's data");
    write(&b, g.id, 0, b"g's data, longer");
    // Reopened twice (the first open finishes the checksum marks the writes left, and
    // keeps those files open), so no fd of f or g is cached.
    let path = b.root().to_path_buf();
    drop(b);
    drop(Brick::open(&path, VOLID, 0).unwrap());
    let b = Brick::open(&path, VOLID, 0).unwrap();
    // A name that is not (or no longer) the id's: nothing is kept under f's id.
    b.open_found(d, b"g", f.id);
    b.open_found(d, b"missing", f.id);
    assert_eq!(read(&b, f.id, 0, 100).0, b"f's data");
    assert_eq!(getattr(&b, f.id).unwrap().size, 8);
    // The name that is the id's: GETATTR and READ see that inode.
    b.open_found(d, b"g", g.id);
    assert_eq!(getattr(&b, g.id).unwrap().size, 16);
    assert_eq!(read(&b, g.id, 0, 100).0, b"g's data, longer");
    // Once the file is gone, its id is stale, whatever fd was cached.
    run(&b, &root(), Op::Unlink { dir: d, name: b"g".to_vec() }).unwrap();
    assert_eq!(getattr(&b, g.id).unwrap_err().errno, Errno::ESTALE);
    assert_eq!(errno(run(&b, &root(), Op::Read { id: g.id, offset: 0, len: 1 })), Errno::ESTALE);
    // A hard link's other name is the same inode: kept.
    run(&b, &root(), Op::Link { id: f.id, dir: Id::ROOT, name: b"f2".to_vec() }).unwrap();
    b.open_found(Id::ROOT, b"f2", f.id);
    assert_eq!(read(&b, f.id, 0, 100).0, b"f's data");
}

/// Byte ranges past the largest file offset, as a hostile or broken peer may send them
/// (found by `cairnd/tests/wire_fuzz.rs`: a write at 2^64 - 17 and a fallocate of
/// 2^64 - 17 bytes overflowed the checksum arithmetic and panicked the request): refused
/// with the kernel's errno for them, naming the op, the file untouched; a read that only
/// crosses that offset is cut short there.
#[test]
fn ranges_past_the_largest_offset_are_refused() {
    let (_t, b) = new_brick();
    let f = file(&b, Id::ROOT, "f");
    write(&b, f.id, 0, &pattern(1, 8192));
    let max = i64::MAX as u64;
    let big = |offset| Op::Write { id: f.id, offset };
    for (op, data, want) in [
        (big(u64::MAX - 16), &b"data"[..], Errno::EFBIG),
        (big(max - 1), b"data", Errno::EFBIG),
        (Op::CompareAndWrite { id: f.id, offset: u64::MAX }, b"abab", Errno::EFBIG),
        (Op::Fallocate { id: f.id, mode: 0, offset: 0, len: u64::MAX - 16 }, b"", Errno::EFBIG),
        (
            Op::Fallocate {
                id: f.id,
                mode: falloc::PUNCH_HOLE | falloc::KEEP_SIZE,
                offset: 1,
                len: max,
            },
            b"",
            Errno::EFBIG,
        ),
        (
            Op::SetAttr { id: f.id, set: SetAttr { size: Some(u64::MAX), ..SetAttr::default() } },
            b"",
            Errno::EFBIG,
        ),
        (Op::Seek { id: f.id, offset: u64::MAX, whence: SeekWhence::Data }, b"", Errno::EINVAL),
    ] {
        let what = format!("{op:?}");
        let e = run_data(&b, &root(), op, data).unwrap_err();
        assert_eq!(e.errno, want, "{what}: {e}");
        assert!(e.message.contains("past the largest file offset"), "{e}");
        assert!(e.message.contains(&f.id.to_string()), "names the file: {e}");
    }
    assert_eq!(read(&b, f.id, 0, 8192).0, pattern(1, 8192), "nothing written");
    assert_eq!(getattr(&b, f.id).unwrap().size, 8192);
    let (data, eof) = read(&b, f.id, max - 10, 4096);
    assert!(data.is_empty() && eof, "a read crossing the largest offset is cut there");
    // A read at or past it is end of file, not an error (NFSv4 READ near 2^64 - 1 must
    // answer eof, RFC 7530 §16.23).
    for offset in [max, max + 1, u64::MAX - 16, u64::MAX] {
        let (data, eof) = read(&b, f.id, offset, 4096);
        assert!(data.is_empty() && eof, "read at {offset}: {} bytes, eof {eof}", data.len());
    }
    // The page-cache-only READ path (cairnd tries it first) answers them the same way,
    // when it answers at all.
    for offset in [max + 1, u64::MAX - 16] {
        if let Some((reply, data)) =
            b.execute_cached(&root(), &Op::Read { id: f.id, offset, len: 2 })
        {
            assert!(matches!(reply, Reply::Data { eof: true }) && data.is_empty(), "{reply:?}");
        }
    }
    assert!(b.execute_cached(&root(), &Op::Read { id: f.id, offset: 0, len: 2 }).is_some());
}

/// A READ larger than one reply frame carries (found by `cairnd/tests/wire_fuzz.rs`: a
/// READ of 4 GiB of a file grown past 32 MiB returned 64 MiB, which no peer accepts in
/// one frame) is a short read of `MAX_DATA` bytes, not at the end of the file.
#[test]
fn a_read_is_at_most_one_frame() {
    let (_t, b) = new_brick();
    let f = file(&b, Id::ROOT, "big");
    let max = cairn_proto::frame::MAX_DATA as u64;
    write(&b, f.id, 2 * max, b"end");
    let (data, eof) = read(&b, f.id, 0, u32::MAX);
    assert_eq!(data.len() as u64, max);
    assert!(!eof, "a short read is not the end of the file");
    let (data, eof) = read(&b, f.id, 2 * max, u32::MAX);
    assert_eq!((&data[..], eof), (&b"end"[..], true));
}
