#![allow(dead_code)]
use bytes::Bytes;
use cairn_brick::{Brick, BrickMarker, Exec};
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Attr, Creds, Errno, FileType, Id, RemoteError};
use std::path::Path;
use std::sync::Arc;

pub const VOLID: &str = "0123456789abcdef0123456789abcdef";

pub fn marker(index: u32) -> BrickMarker {
    BrickMarker { format: 1, volume: "vol0".into(), volume_id: VOLID.into(), index }
}

pub fn new_brick_at(path: &Path, index: u32) -> Arc<Brick> {
    Brick::prepare(path, &marker(index), false).expect("prepare");
    Brick::open(path, VOLID, index).expect("open")
}

pub fn new_brick() -> (tempfile::TempDir, Arc<Brick>) {
    let t = tempfile::tempdir().expect("tempdir");
    let b = new_brick_at(&t.path().join("b0"), 0);
    (t, b)
}

pub fn root() -> Creds {
    Creds::root()
}

pub fn user(uid: u32) -> Creds {
    Creds { uid, gid: uid, groups: vec![] }
}

pub fn run(b: &Brick, c: &Creds, op: Op) -> Result<Reply, RemoteError> {
    b.execute(c, &op, &[], Exec::Primary).map(|r| r.0)
}

pub fn run_data(b: &Brick, c: &Creds, op: Op, data: &[u8]) -> Result<(Reply, Bytes), RemoteError> {
    b.execute(c, &op, data, Exec::Primary)
}

pub fn errno(r: Result<Reply, RemoteError>) -> Errno {
    match r {
        Ok(r) => panic!("expected an error, got {r:?}"),
        Err(e) => e.errno,
    }
}

pub fn attr(r: Reply) -> Attr {
    match r {
        Reply::Attr(a) => a,
        Reply::Entry { attr, .. } => attr,
        Reply::Written { attr, .. } => attr,
        other => panic!("expected attrs, got {other:?}"),
    }
}

/// An exclusive create of `name` in `dir` as inode `id` (a symlink points at "target").
pub fn create_op(dir: Id, name: &str, id: Id, kind: FileType, perm: u32) -> Op {
    let target = (kind == FileType::Symlink).then(|| b"target".to_vec());
    Op::Create { dir, name: name.into(), id, kind, perm, rdev: 0, target, exclusive: true }
}

pub fn create_as(
    b: &Brick,
    c: &Creds,
    dir: Id,
    name: &str,
    kind: FileType,
    perm: u32,
) -> Result<Attr, RemoteError> {
    run(b, c, create_op(dir, name, Id::new_on_set(1), kind, perm)).map(attr)
}

pub fn file(b: &Brick, dir: Id, name: &str) -> Attr {
    create_as(b, &root(), dir, name, FileType::Regular, 0o644).expect("create")
}

pub fn mkdir_as(b: &Brick, c: &Creds, dir: Id, name: &str, perm: u32) -> Result<Attr, RemoteError> {
    run(b, c, Op::Mkdir { dir, name: name.into(), id: Id::new_on_set(1), perm }).map(attr)
}

pub fn mkdir(b: &Brick, dir: Id, name: &str) -> Id {
    mkdir_as(b, &root(), dir, name, 0o755).expect("mkdir").id
}

pub fn getattr(b: &Brick, id: Id) -> Result<Attr, RemoteError> {
    run(b, &root(), Op::GetAttr { id }).map(attr)
}

pub fn write(b: &Brick, id: Id, off: u64, data: &[u8]) -> Attr {
    attr(run_data(b, &root(), Op::Write { id, offset: off }, data).expect("write").0)
}

pub fn read(b: &Brick, id: Id, off: u64, len: u32) -> (Vec<u8>, bool) {
    match run_data(b, &root(), Op::Read { id, offset: off, len }, &[]).expect("read") {
        (Reply::Data { eof }, d) => (d.to_vec(), eof),
        other => panic!("{other:?}"),
    }
}

pub fn lookup(b: &Brick, dir: Id, name: &str) -> Result<(Attr, Option<Id>), RemoteError> {
    match run(b, &root(), Op::Lookup { dir, name: name.into() })? {
        Reply::Entry { attr, linkto } => Ok((attr, linkto)),
        other => panic!("{other:?}"),
    }
}

/// Every entry of a directory, through pages of `page`.
pub fn list_all(b: &Brick, dir: Id, page: u32, plus: bool) -> Vec<cairn_proto::DirEntry> {
    let mut out = Vec::new();
    let mut cookie = 0;
    for _ in 0..1_000_000 {
        match run(b, &root(), Op::ReadDir { dir, cookie, max: page, plus }).expect("readdir") {
            Reply::Dir { entries, eof } => {
                if let Some(l) = entries.last() {
                    cookie = l.cookie;
                }
                out.extend(entries);
                if eof {
                    return out;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("readdir never reached eof");
}

/// `n` pseudo-random bytes (xorshift) from `seed`: test data that no two seeds share.
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
