//! A harness for counting the syscalls of one small-file create (head and replica) and
//! one quick-read lookup: `strace -f` the (ignored) test; each step is fenced by a
//! failing `access("/cairn-mark/<step>")` so its syscalls can be cut out of the trace.
//! Not a test of behaviour (it asserts only that the steps succeed).
mod common;
use cairn_brick::Exec;
use cairn_proto::msg::Op;
use cairn_proto::{FileType, Id};
use common::*;

fn mark(step: &str) {
    let p = std::ffi::CString::new(format!("/cairn-mark/{step}")).unwrap();
    unsafe { libc::access(p.as_ptr(), 0) };
}

#[test]
#[ignore = "a measuring harness, run under strace -f (docs/benchmarks.md); the create, write and lookup paths it drives are tested in ops.rs, csum.rs and quick-read"]
fn syscalls_of_create_and_lookup() {
    let (_t, b) = new_brick();
    let (_t2, r) = new_brick();
    let mut dh = Id::ROOT;
    for n in ["a", "b", "c", "d"] {
        let id = mkdir(&b, dh, n);
        run(&r, &root(), Op::Mkdir { dir: dh, name: n.into(), id, perm: 0o755 }).unwrap();
        dh = id;
    }
    let data = pattern(1, 4096);
    for i in 0..3 {
        let name = format!("f{i}");
        let id = Id::new_on_set(1);
        let op = create_op(dh, &name, id, FileType::Regular, 0o644);
        mark(&format!("create-head-{i}"));
        let a = attr(b.execute(&root(), &op, &[], Exec::Primary).unwrap().0);
        mark(&format!("create-replica-{i}"));
        r.execute(&root(), &op, &[], Exec::Replica { result: Some(&a) }).unwrap();
        mark(&format!("write-head-{i}"));
        b.execute(&root(), &Op::Write { id, offset: 0 }, &data, Exec::Primary).unwrap();
        mark(&format!("write-replica-{i}"));
        r.execute(&root(), &Op::Write { id, offset: 0 }, &data, Exec::Replica { result: None })
            .unwrap();
        mark(&format!("release-{i}"));
        b.execute(&root(), &Op::Release { id }, &[], Exec::Primary).unwrap();
        mark("end");
    }
    // The quick-read lookup of a file not in the fd caches: the brick opened again, twice
    // (the first open finishes the checksum marks the writes left and opens the files).
    let root_path = b.root().to_path_buf();
    drop(b);
    drop(cairn_brick::Brick::open(&root_path, VOLID, 0).unwrap());
    let b = cairn_brick::Brick::open(&root_path, VOLID, 0).unwrap();
    for i in 0..3 {
        let name = format!("f{i}");
        mark(&format!("lookup-{i}"));
        let (a, _) = lookup(&b, dh, &name).unwrap();
        b.open_found(dh, name.as_bytes(), a.id);
        mark(&format!("getattr-{i}"));
        let a2 = getattr(&b, a.id).unwrap();
        mark(&format!("read-{i}"));
        let (d, _) = read(&b, a.id, 0, a2.size as u32);
        mark("end");
        assert_eq!(d, data);
    }
}
