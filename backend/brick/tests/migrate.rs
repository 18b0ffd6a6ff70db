//! The brick's part of a rebalance's move (docs/rebalance.md): the fence, the switch that
//! leaves a moved stub, ops by id on a stub answered EMOVED naming the set, and heal
//! carrying the stub (not copying it as an empty file).
mod common;
use cairn_brick::{Brick, Exec};
use cairn_proto::msg::{HealState, Op, Reply};
use cairn_proto::{Errno, FileType, Id};
use common::*;

fn fetch(b: &Brick, id: Id) -> HealState {
    match b.execute(&root(), &Op::HealFetch { id }, &[], Exec::Primary).unwrap() {
        (Reply::Heal(s), _) => *s,
        other => panic!("{other:?}"),
    }
}

fn moved_to(r: Result<Reply, cairn_proto::RemoteError>) -> Option<u32> {
    let e = r.expect_err("refused");
    assert_eq!(e.errno, Errno::EMOVED, "{e}");
    e.moved_to()
}

#[test]
fn a_switched_file_leaves_a_stub_that_forwards_its_id_and_heals_as_a_stub() {
    let (_t, a) = new_brick();
    let d = mkdir(&a, Id::ROOT, "d");
    let f = file(&a, d, "f");
    write(&a, f.id, 0, b"hello");
    let out = Op::MigrateOut { dir: d, name: b"f".to_vec(), id: f.id, to: 2 };
    // Not fenced: refused.
    assert_eq!(errno(run(&a, &root(), out.clone())), Errno::EBUSY);
    run(&a, &root(), Op::MigrateMark { id: f.id, to: Some(2) }).unwrap();
    assert_eq!(a.migrating(f.id), Some(2));
    run(&a, &root(), out.clone()).unwrap();
    assert_eq!(a.migrating(f.id), None, "the switch lifts the fence");

    // Every op by id: EMOVED naming set 2.
    assert_eq!(moved_to(run(&a, &root(), Op::GetAttr { id: f.id })), Some(2));
    assert_eq!(moved_to(run(&a, &root(), Op::Read { id: f.id, offset: 0, len: 5 })), Some(2));
    assert_eq!(
        moved_to(run_data(&a, &root(), Op::Write { id: f.id, offset: 0 }, b"x").map(|r| r.0)),
        Some(2)
    );
    assert_eq!(moved_to(run(&a, &root(), Op::ListXattr { id: f.id })), Some(2));
    assert_eq!(moved_to(run(&a, &root(), Op::Open { id: f.id })), Some(2));
    // The name is a linkto to the id now.
    let (_, linkto) = lookup(&a, d, "f").unwrap();
    assert_eq!(linkto, Some(f.id));
    // A release of the id (a client that still routes here) keeps the stub.
    run(&a, &root(), Op::Release { id: f.id }).unwrap();
    assert_eq!(moved_to(run(&a, &root(), Op::GetAttr { id: f.id })), Some(2));
    // The switch again (a retry, a replica that got it twice): done.
    run(&a, &root(), out).unwrap();

    // Heal onto a brick that still has the file: it becomes the stub, not an empty file.
    let (_t2, b) = new_brick();
    run(&b, &root(), Op::Mkdir { dir: Id::ROOT, name: b"d".to_vec(), id: d, perm: 0o755 }).unwrap();
    run(&b, &root(), create_op(d, "f", f.id, FileType::Regular, 0o644)).unwrap();
    write(&b, f.id, 0, b"stale");
    let s = fetch(&a, f.id);
    assert!(s.attr.is_some() && s.xattrs.len() == 1, "{s:?}");
    b.execute(
        &root(),
        &Op::HealApply { state: Box::new(s.clone()) },
        &[],
        Exec::Replica { result: None },
    )
    .unwrap();
    assert_eq!(moved_to(run(&b, &root(), Op::GetAttr { id: f.id })), Some(2));
    // And onto a brick that never had the id.
    let (_t3, c) = new_brick();
    c.execute(&root(), &Op::HealApply { state: Box::new(s) }, &[], Exec::Replica { result: None })
        .unwrap();
    assert_eq!(moved_to(run(&c, &root(), Op::Read { id: f.id, offset: 0, len: 1 })), Some(2));
    // The stub survives the brick's sweep of unnamed index entries when it opens again.
    let path = c.root().to_path_buf();
    drop(c);
    let c = Brick::open(&path, VOLID, 0).unwrap();
    assert_eq!(moved_to(run(&c, &root(), Op::GetAttr { id: f.id })), Some(2));
}

#[test]
fn a_copy_is_made_outside_the_namespace_and_dropped_unless_named() {
    let (_t, b) = new_brick();
    let d = mkdir(&b, Id::ROOT, "d");
    let mut a = file(&b, d, "tmpl");
    a.id = Id::new_on_set(1);
    a.perm = 0o600;
    run(&b, &root(), Op::MigrateIn { id: a.id, attr: a.clone() }).unwrap();
    write(&b, a.id, 0, b"copied");
    assert_eq!(getattr(&b, a.id).unwrap().perm, 0o600);
    assert!(lookup(&b, d, "f").is_err(), "no name yet");
    // Made again (a cut copy restarts): emptied.
    run(&b, &root(), Op::MigrateIn { id: a.id, attr: a.clone() }).unwrap();
    assert_eq!(getattr(&b, a.id).unwrap().size, 0);
    run(&b, &root(), Op::MigrateDrop { id: a.id }).unwrap();
    assert_eq!(errno(run(&b, &root(), Op::GetAttr { id: a.id })), Errno::ESTALE);
    // Named, it stays.
    run(&b, &root(), Op::MigrateIn { id: a.id, attr: a.clone() }).unwrap();
    run(&b, &root(), Op::Link { id: a.id, dir: d, name: b"f".to_vec() }).unwrap();
    run(&b, &root(), Op::MigrateDrop { id: a.id }).unwrap();
    assert_eq!(lookup(&b, d, "f").unwrap().0.id, a.id);
    // A fence refuses nothing at the brick itself (the head checks it) but an open file.
    run(&b, &root(), Op::Open { id: a.id }).unwrap();
    assert_eq!(errno(run(&b, &root(), Op::MigrateMark { id: a.id, to: Some(3) })), Errno::EBUSY);
}
