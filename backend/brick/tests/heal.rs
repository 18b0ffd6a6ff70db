//! Heal: fetch the state of every inode on one brick, apply it on another, and compare.
mod common;
use cairn_brick::{Brick, Exec};
use cairn_proto::msg::{HealState, Op, Reply};
use cairn_proto::{Attr, Errno, FileType, Id, SetAttr, SetTime, Timespec};
use common::*;
use std::collections::BTreeMap;

fn fetch(b: &Brick, id: Id) -> (HealState, Vec<u8>) {
    match b.execute(&root(), &Op::HealFetch { id }, &[], Exec::Primary).unwrap() {
        (Reply::Heal(s), d) => (*s, d.to_vec()),
        other => panic!("{other:?}"),
    }
}

fn apply(b: &Brick, s: HealState, d: &[u8]) {
    b.execute(&root(), &Op::HealApply { state: Box::new(s) }, d, Exec::Replica { result: None })
        .unwrap();
}

/// Heal every inode reachable from the root of `src` onto `dst`, directories first.
fn heal_all(src: &Brick, dst: &Brick) {
    let mut queue = vec![Id::ROOT];
    let mut files = Vec::new();
    while let Some(id) = queue.pop() {
        let (s, d) = fetch(src, id);
        for (_, eid, kind, linkto) in &s.entries {
            if linkto.is_none() {
                if *kind == FileType::Directory {
                    queue.push(*eid);
                } else {
                    files.push(*eid);
                }
            }
        }
        apply(dst, s, &d);
    }
    for id in files {
        let (s, d) = fetch(src, id);
        apply(dst, s, &d);
    }
}

type Tree = BTreeMap<String, (Attr, Option<Id>, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

/// Everything observable about a brick's tree, by path (atime excluded).
fn snapshot(b: &Brick) -> Tree {
    let mut out = BTreeMap::new();
    let mut stack = vec![(Id::ROOT, String::new())];
    while let Some((dir, path)) = stack.pop() {
        let (s, _) = fetch(b, dir);
        for (name, id, kind, linkto) in s.entries {
            let p = format!("{path}/{}", String::from_utf8_lossy(&name));
            let (mut a, lt) = lookup(b, dir, std::str::from_utf8(&name).unwrap()).unwrap();
            a.atime = Timespec::default();
            a.ctime = Timespec::default();
            a.change = 0;
            a.blocks = 0;
            let (st, data) = if linkto.is_some() {
                (None, vec![])
            } else {
                let f = fetch(b, id);
                (Some(f.0), f.1)
            };
            let content = match (&st, kind) {
                (Some(s), FileType::Symlink) => s.symlink.clone().unwrap(),
                _ => format!("{} bytes, xxh3 {:x}", data.len(), xxhash_rust::xxh3::xxh3_64(&data))
                    .into_bytes(),
            };
            if linkto.is_some() {
                a.mtime = Timespec::default();
            }
            let x = st.map(|s| s.xattrs).unwrap_or_default();
            if kind == FileType::Directory && linkto.is_none() {
                stack.push((id, p.clone()));
                a.size = 0;
            }
            out.insert(p, (a, lt, content, x));
        }
    }
    out
}

fn assert_same(a: &Tree, b: &Tree) {
    for (k, v) in a {
        match b.get(k) {
            None => panic!("{k} missing on the healed brick"),
            Some(w) => assert_eq!(v, w, "{k} differs"),
        }
    }
    for k in b.keys() {
        assert!(a.contains_key(k), "{k} only on the healed brick");
    }
}

#[test]
fn heal_round_trip_between_two_bricks() {
    let t = tempfile::tempdir().unwrap();
    let a = new_brick_at(&t.path().join("a"), 0);
    let b = new_brick_at(&t.path().join("b"), 1);
    // a tree on A
    let d1 = mkdir(&a, Id::ROOT, "d1");
    let d2 = mkdir(&a, d1, "d2");
    let f = file(&a, d1, "f");
    write(&a, f.id, 0, b"file data on A");
    run(
        &a,
        &root(),
        Op::SetAttr {
            id: f.id,
            set: SetAttr {
                uid: Some(1000),
                gid: Some(1001),
                perm: Some(0o640),
                mtime: Some(SetTime::At(Timespec { sec: 12345, nsec: 6 })),
                ..Default::default()
            },
        },
    )
    .unwrap();
    run(
        &a,
        &root(),
        Op::SetXattr { id: f.id, name: b"user.k".to_vec(), value: b"v".to_vec(), flags: 0 },
    )
    .unwrap();
    run(
        &a,
        &root(),
        Op::SetXattr { id: f.id, name: b"trusted.t".to_vec(), value: b"tv".to_vec(), flags: 0 },
    )
    .unwrap();
    run(&a, &root(), Op::Link { id: f.id, dir: d2, name: b"hard".to_vec() }).unwrap();
    run(
        &a,
        &root(),
        Op::Create {
            dir: d2,
            name: b"sym".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::Symlink,
            perm: 0o777,
            rdev: 0,
            target: Some(b"../f".to_vec()),
            exclusive: true,
        },
    )
    .unwrap();
    run(
        &a,
        &root(),
        Op::Create {
            dir: d2,
            name: b"dev".to_vec(),
            id: Id::new_on_set(1),
            kind: FileType::BlockDevice,
            perm: 0o600,
            rdev: libc::makedev(7, 0),
            target: None,
            exclusive: true,
        },
    )
    .unwrap();
    create_as(&a, &root(), d2, "fifo", FileType::Fifo, 0o644).unwrap();
    run(
        &a,
        &root(),
        Op::MkLinkto { dir: d1, name: b"elsewhere".to_vec(), target: Id::new_on_set(5) },
    )
    .unwrap();
    run(
        &a,
        &root(),
        Op::SetAttr {
            id: d2,
            set: SetAttr { perm: Some(0o2750), gid: Some(77), ..Default::default() },
        },
    )
    .unwrap();
    let big = file(&a, Id::ROOT, "big");
    write(&a, big.id, 0, &vec![0x5a; 300_000]);

    heal_all(&a, &b);
    let (sa, sb) = (snapshot(&a), snapshot(&b));
    assert!(sa.len() >= 8, "{:?}", sa.keys());
    assert_same(&sa, &sb);
    // ids work on B like on A
    assert_eq!(read(&b, f.id, 0, 100).0, b"file data on A");
    assert_eq!(getattr(&b, f.id).unwrap().nlink, 2);

    // B is away; A changes: delete, rename a directory, rewrite, truncate
    run(&a, &root(), Op::Unlink { dir: d2, name: b"fifo".to_vec() }).unwrap();
    run(
        &a,
        &root(),
        Op::Rename {
            src_dir: d1,
            src_name: b"d2".to_vec(),
            dst_dir: Id::ROOT,
            dst_name: b"d2-moved".to_vec(),
            flags: 0,
        },
    )
    .unwrap();
    run(
        &a,
        &root(),
        Op::SetAttr { id: big.id, set: SetAttr { size: Some(10), ..Default::default() } },
    )
    .unwrap();
    run(&a, &root(), Op::Unlink { dir: d1, name: b"elsewhere".to_vec() }).unwrap();
    mkdir(&a, d1, "new-dir");
    run(&a, &root(), Op::RemoveXattr { id: f.id, name: b"user.k".to_vec() }).unwrap();
    // and B has a stray entry A never had
    file(&b, d1, "stray");

    heal_all(&a, &b);
    assert_same(&snapshot(&a), &snapshot(&b));
    assert_eq!(read(&b, big.id, 0, 100).0, vec![0x5a; 10]);
    assert!(t.path().join("b/data/d2-moved/sym").symlink_metadata().is_ok());
    assert!(!t.path().join("b/data/d1/d2").exists());

    // a heal of an id that is gone at the source is a no-op fetch
    let (gone, _) = fetch(&a, Id::new_on_set(1));
    assert!(gone.attr.is_none());
    apply(&b, gone, &[]);
    // ids still resolve on B after a restart
    let bp = b.root().to_path_buf();
    drop(b);
    let b = Brick::open(&bp, VOLID, 1).unwrap();
    assert_eq!(getattr(&b, d2).unwrap().kind, FileType::Directory);
    assert_same(&snapshot(&a), &snapshot(&b));
}

#[test]
fn full_heal_flag_survives_reopen_and_reset_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let b = new_brick_at(&path, 0);
    assert!(!b.full_heal_requested());
    b.request_full_heal("test").unwrap();
    drop(b);
    let b = Brick::open(&path, &marker(0).volume_id, 0).unwrap();
    assert!(b.full_heal_requested(), "the request is durable");
    b.clear_full_heal().unwrap();
    assert!(!b.full_heal_requested());
    drop(b);

    // The same brick still there: only `force` rebuilds it in place.
    let e = Brick::reset(&path, &marker(0), false).unwrap_err();
    assert!(e.message.contains("commit force"), "{e}");
    Brick::reset(&path, &marker(0), true).unwrap();
    assert!(Brick::open(&path, &marker(0).volume_id, 0).unwrap().full_heal_requested());
    // Another brick's directory is never taken.
    assert!(Brick::reset(&path, &marker(1), true).unwrap_err().message.contains("brick 0"));

    // A replaced (empty) disk: prepared again, flagged for a full heal.
    let empty = dir.path().join("new");
    std::fs::create_dir(&empty).unwrap();
    Brick::reset(&empty, &marker(0), false).unwrap();
    let b = Brick::open(&empty, &marker(0).volume_id, 0).unwrap();
    assert!(b.full_heal_requested());
    // A non-empty directory that is not a brick needs force.
    let junk = dir.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("x"), b"x").unwrap();
    assert!(Brick::reset(&junk, &marker(0), false).is_err());
}

/// A directory heal that has to create an empty placeholder for an inode this brick does
/// not have records that inode as pending for the brick itself, so its own heal fills it
/// even when no peer recorded it.
#[test]
fn a_placeholder_flags_its_inode_for_heal() {
    let (_t1, src) = new_brick();
    let t2 = tempfile::tempdir().unwrap();
    let dst = new_brick_at(t2.path(), 1);
    let d = mkdir(&src, Id::ROOT, "d");
    let f = file(&src, d, "f");
    write(&src, f.id, 0, b"hello");
    for id in [Id::ROOT, d] {
        let (s, data) = fetch(&src, id);
        apply(&dst, s, &data);
    }
    let own: Vec<(u32, u64)> = dst.pending_counts().into_iter().filter(|(p, _)| *p == 1).collect();
    assert_eq!(own, vec![(1, 1)], "the placeholder of f is pending here");
    assert_eq!(lookup(&dst, d, "f").unwrap().0.size, 0, "an empty placeholder so far");
    let (s, data) = fetch(&src, f.id);
    apply(&dst, s, &data);
    assert_eq!(read(&dst, f.id, 0, 10).0, b"hello");
}

/// A forwarded rename whose two names are already one inode on the replica (a heal linked
/// the destination before the rename arrived) leaves only the destination, as at the head;
/// a client's own rename of two names of one inode does nothing (POSIX).
#[test]
fn a_replica_rename_between_two_names_of_one_inode_drops_the_source() {
    let (_t, b) = new_brick();
    let a = mkdir(&b, Id::ROOT, "a");
    let c = mkdir(&b, Id::ROOT, "c");
    let f = file(&b, a, "x");
    run(&b, &root(), Op::Link { id: f.id, dir: c, name: b"y".to_vec() }).unwrap();
    let rename = Op::Rename {
        src_dir: a,
        src_name: b"x".to_vec(),
        dst_dir: c,
        dst_name: b"y".to_vec(),
        flags: 0,
    };
    b.execute(&root(), &rename, &[], Exec::Primary).unwrap();
    assert!(lookup(&b, a, "x").is_ok(), "primary: POSIX rename of one inode does nothing");
    b.execute(&root(), &rename, &[], Exec::Replica { result: None }).unwrap();
    assert!(lookup(&b, a, "x").is_err(), "replica: the source name is gone");
    assert_eq!(lookup(&b, c, "y").unwrap().0.id, f.id);
    assert_eq!(getattr(&b, f.id).unwrap().nlink, 1);
}

/// A forwarded rename names the inode the head moved. A replica that holds it under the
/// source name applies it; one where the destination already holds it (a re-sent forward,
/// or a heal copied the directories first) does nothing; one that lacks it, or holds
/// another inode under the source name, missed an earlier change and must say so (the
/// head then records the miss and the replica heals) instead of answering success.
#[test]
fn a_replica_rename_it_cannot_apply_is_an_error() {
    let (_t, b) = new_brick();
    let a = mkdir(&b, Id::ROOT, "a");
    let c = mkdir(&b, Id::ROOT, "c");
    let f = file(&b, a, "x");
    let rename = |from: &str, to: &str| Op::Rename {
        src_dir: a,
        src_name: from.as_bytes().to_vec(),
        dst_dir: c,
        dst_name: to.as_bytes().to_vec(),
        flags: 0,
    };
    let rep = Exec::Replica { result: Some(&f) };
    b.execute(&root(), &rename("x", "y"), &[], rep).unwrap();
    assert_eq!(lookup(&b, c, "y").unwrap().0.id, f.id);
    // The same forward again: applied already, nothing changes.
    b.execute(&root(), &rename("x", "y"), &[], rep).unwrap();
    assert_eq!(lookup(&b, c, "y").unwrap().0.id, f.id);
    // ... even once the source name holds another inode.
    let g = file(&b, a, "x");
    b.execute(&root(), &rename("x", "y"), &[], rep).unwrap();
    assert_eq!(lookup(&b, a, "x").unwrap().0.id, g.id);
    assert_eq!(lookup(&b, c, "y").unwrap().0.id, f.id);
    // The head moved f from a name where this replica has nothing.
    let e = b.execute(&root(), &rename("gone", "z"), &[], rep).unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "{e}");
    assert!(lookup(&b, c, "z").is_err());
    // ... or from a name where this replica has another inode (g): not moved.
    let h = file(&b, a, "w");
    let rep_h = Exec::Replica { result: Some(&h) };
    let e = b.execute(&root(), &rename("x", "z"), &[], rep_h).unwrap_err();
    assert_eq!(e.errno, Errno::ESTALE, "{e}");
    assert_eq!(lookup(&b, a, "x").unwrap().0.id, g.id);
    assert!(lookup(&b, c, "z").is_err());
    // Without the moved id (an older head), a missing source is still a miss.
    let e = b.execute(&root(), &rename("gone", "z"), &[], Exec::Replica { result: None });
    assert_eq!(e.unwrap_err().errno, Errno::ENOENT);
    b.execute(&root(), &rename("w", "v"), &[], Exec::Replica { result: None }).unwrap();
    assert_eq!(lookup(&b, c, "v").unwrap().0.id, h.id);
}

/// The index path of `id` in the brick at `path` (`.cairn/ids/ab/cd/<hex>`).
fn index_path_at(path: &std::path::Path, id: Id) -> std::path::PathBuf {
    let h = id.to_hex();
    path.join(".cairn/ids").join(&h[0..2]).join(&h[2..4]).join(&h)
}

/// A kill -9 can stop a brick between any two syscalls of a create (entry made, id xattr
/// set, index link not yet made), of a mkdir (the same for a directory's index symlink)
/// or of a directory rename (entry moved, index symlink not yet). Such a brick has a name
/// whose inode it cannot find by id. The head records the create for it (the forward
/// failed), so its restart heals the directory: the heal completes the index, and the
/// inode's own heal then finds it.
#[test]
fn a_heal_repairs_entries_a_crash_left_without_their_index_link() {
    let t = tempfile::tempdir().unwrap();
    let a = new_brick_at(&t.path().join("a"), 0);
    let bp = t.path().join("b");
    let b = new_brick_at(&bp, 1);
    let d = mkdir(&a, Id::ROOT, "d");
    let f = file(&a, d, "f");
    write(&a, f.id, 0, b"acknowledged");
    let sub = mkdir(&a, d, "sub");
    let moved = mkdir(&a, Id::ROOT, "moved");
    heal_all(&a, &b);
    run(
        &a,
        &root(),
        Op::Rename {
            src_dir: Id::ROOT,
            src_name: b"moved".to_vec(),
            dst_dir: d,
            dst_name: b"moved".to_vec(),
            flags: 0,
        },
    )
    .unwrap();
    // B is killed: f's create and sub's mkdir stopped before their index links, the
    // rename of `moved` after its renameat2 (the index still names the old place); and
    // an entry whose create stopped before its id xattr.
    drop(b);
    std::fs::remove_file(index_path_at(&bp, f.id)).unwrap();
    std::fs::remove_file(index_path_at(&bp, sub)).unwrap();
    std::fs::rename(bp.join("data/moved"), bp.join("data/d/moved")).unwrap();
    std::fs::write(bp.join("data/d/half"), b"").unwrap();
    let b = Brick::open(&bp, VOLID, 1).unwrap();
    assert_eq!(errno(run(&b, &root(), Op::GetAttr { id: f.id })), Errno::ESTALE);
    assert!(getattr(&b, sub).is_err());
    assert!(getattr(&b, moved).is_err());
    assert!(lookup(&b, d, "half").is_err());

    // The restart heals what the head recorded: the directories, then the file.
    for id in [Id::ROOT, d, sub, moved, f.id] {
        let (s, data) = fetch(&a, id);
        apply(&b, s, &data);
    }
    assert_eq!(read(&b, f.id, 0, 100).0, b"acknowledged");
    assert_eq!(getattr(&b, f.id).unwrap().nlink, 1);
    assert_eq!(getattr(&b, sub).unwrap().kind, FileType::Directory);
    assert_eq!(getattr(&b, moved).unwrap().kind, FileType::Directory);
    assert_eq!(lookup(&b, d, "moved").unwrap().0.id, moved);
    assert!(lookup(&b, d, "half").is_err());
    assert_same(&snapshot(&a), &snapshot(&b));
    // And after another restart (nothing left for the sweep to remove).
    drop(b);
    let b = Brick::open(&bp, VOLID, 1).unwrap();
    assert_eq!(read(&b, f.id, 0, 100).0, b"acknowledged");
    assert_same(&snapshot(&a), &snapshot(&b));
}
