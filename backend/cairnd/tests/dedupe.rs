//! Idempotent mutations against a real `cairnd`: a write retried with its request id after
//! newer writes is answered with its first result and not applied again, on the head and on
//! its replica; a replica asked to confirm a request says whether it applied it.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id};
use cairn_proto::map::BrickState;
use cairn_proto::msg::{BrickRequest, Op, ReplicateRequest, Reply, ReqId, Request};
use common::Cluster;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_write_is_answered_not_applied_again() {
    let c = Cluster::start();
    let vol = c.replica2_up().await;
    let root = Creds::root();
    let f = vol.create(&root, Id::ROOT, b"f", 0o644, true).await.unwrap();
    let map = vol.map();
    let set = &map.sets[0];
    let head = cairn_placement::head(set, f.id).unwrap().index;
    let replica = set.bricks.iter().find(|b| b.index != head).unwrap().index;
    // Forwards are accepted from cluster members only.
    let conn = c.as_node().await;
    let write = |req: Option<ReqId>, byte: u8| {
        let r = BrickRequest {
            volume: "v".into(),
            brick: head,
            epoch: map.epoch,
            creds: Creds::root(),
            op: Op::Write { id: f.id, offset: 0 },
            req,
            parents: false,
            inline: 0,
            layout_epoch: None,
            sync: false,
            locks: false,
        };
        conn.call(Request::Brick(r), Bytes::from(vec![byte; 4096]))
    };
    let copy = |brick: u32| {
        let r = BrickRequest {
            volume: "v".into(),
            brick,
            epoch: map.epoch,
            creds: Creds::root(),
            op: Op::HealFetch { id: f.id },
            req: None,
            parents: false,
            inline: 0,
            layout_epoch: None,
            sync: false,
            locks: false,
        };
        let conn = conn.clone();
        async move {
            match conn.call(Request::Brick(r), Bytes::new()).await.unwrap() {
                (Reply::Heal(_), data) => data,
                other => panic!("heal_fetch: {other:?}"),
            }
        }
    };
    let r1 = ReqId { client: 77, seq: 1 };
    let first = write(Some(r1), b'a').await.unwrap();
    assert!(matches!(first.0, Reply::Written { count: 4096, .. }), "{first:?}");
    write(Some(ReqId { client: 77, seq: 2 }), b'b').await.unwrap();
    // Another client's request with the same sequence number is a different request.
    write(Some(ReqId { client: 78, seq: 1 }), b'c').await.unwrap();
    // The retry of the first write, after the newer ones: its first result, nothing applied.
    let again = write(Some(r1), b'a').await.unwrap();
    assert_eq!(again, first, "a retry gets the first result");
    for b in [head, replica] {
        assert_eq!(&copy(b).await[..], &[b'c'; 4096][..], "brick {b}: the retry was applied");
    }
    // The same bytes under a new id, or with no id (an older client), are applied.
    write(Some(ReqId { client: 77, seq: 3 }), b'a').await.unwrap();
    assert_eq!(&copy(replica).await[..], &[b'a'; 4096][..]);
    write(None, b'd').await.unwrap();
    write(None, b'd').await.unwrap();
    assert_eq!(&copy(head).await[..], &[b'd'; 4096][..]);

    // The replica remembers what it applied through the head's forwards: asked to confirm,
    // it answers for a request it applied and refuses one it did not, applying nothing.
    let confirm = |req: ReqId| ReplicateRequest {
        volume: "v".into(),
        brick: replica,
        epoch: map.epoch,
        from_brick: head,
        creds: Creds::root(),
        op: Op::Write { id: f.id, offset: 0 },
        result: None,
        missed: vec![],
        req: Some(req),
        confirm: true,
        applied: vec![],
    };
    let (r, _) =
        conn.call(Request::Replicate(confirm(r1)), Bytes::from(vec![b'z'; 4096])).await.unwrap();
    assert!(matches!(r, Reply::Written { count: 4096, .. }), "{r:?}");
    let e = conn
        .call(
            Request::Replicate(confirm(ReqId { client: 77, seq: 99 })),
            Bytes::from(vec![b'z'; 4096]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "{e}");
    assert_eq!(&copy(replica).await[..], &[b'd'; 4096][..], "a confirmation applied nothing");
}

/// A rename whose head died before answering, applied by the replica it reached, and copied
/// onto the brick that heads the client's retry by that brick's catch-up: the copy carries
/// the replica's record of the request id, so the retry is confirmed with the replica and
/// answered, not applied again and failed with ENOENT (the client then never made the new
/// name's linkto, and the file was under neither name: faults/kill9-rename, seed
/// 889378966). Without the records the catch-up copies (before: a 40 s window after a
/// catch-up in which a failing namespace op asked the replicas) the retry fails ENOENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_rename_the_head_holds_from_a_catch_up_is_answered() {
    let c = Cluster::start();
    let vol = c.replica2_up().await;
    let root = Creds::root();
    let f = vol.create(&root, Id::ROOT, b"s", 0o644, true).await.unwrap();
    let map = vol.map();
    let set = &map.sets[0];
    // A rename is headed by its source directory's head.
    let head = cairn_placement::head(set, Id::ROOT).unwrap().index;
    let replica = set.bricks.iter().find(|b| b.index != head).unwrap().index;
    let conn = c.as_node().await;
    let rename = |src: &[u8]| Op::Rename {
        src_dir: Id::ROOT,
        src_name: src.to_vec(),
        dst_dir: Id::ROOT,
        dst_name: b"d".to_vec(),
        flags: 0,
    };
    let forward = |brick: u32, from: u32, req: Option<ReqId>| ReplicateRequest {
        volume: "v".into(),
        brick,
        epoch: map.epoch,
        from_brick: from,
        creds: Creds::root(),
        op: rename(b"s"),
        result: Some(f.clone()),
        missed: vec![],
        req,
        confirm: false,
        applied: vec![],
    };
    let client = |req: ReqId| BrickRequest {
        volume: "v".into(),
        brick: head,
        epoch: map.epoch,
        creds: Creds::root(),
        op: rename(b"s"),
        req: Some(req),
        parents: true,
        inline: 0,
        layout_epoch: None,
        sync: false,
        locks: false,
    };
    let r1 = ReqId { client: 91, seq: 1 };
    // The old head's forward reached the replica, which remembers the request and records
    // that the head brick misses it...
    let missed = ReplicateRequest { missed: vec![head], ..forward(replica, head, Some(r1)) };
    conn.call(Request::Replicate(missed), Bytes::new()).await.unwrap();
    // ...and the head brick, failing a forward it cannot apply (a rename of a name it does
    // not hold), stops serving and catches up from the replica: its copy of the directory
    // now holds the rename, and the request id with it.
    let bad = ReplicateRequest {
        op: rename(b"nothing-here"),
        req: None,
        missed: vec![],
        ..forward(head, replica, None)
    };
    let e = conn.call(Request::Replicate(bad), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "{e}");
    let fetch = |brick: u32| BrickRequest {
        volume: "v".into(),
        brick,
        epoch: map.epoch,
        creds: Creds::root(),
        op: Op::HealFetch { id: Id::ROOT },
        req: None,
        parents: false,
        inline: 0,
        layout_epoch: None,
        sync: false,
        locks: false,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the head brick did not catch up: {}", c.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
        let healed = match conn.call(Request::Brick(fetch(head)), Bytes::new()).await {
            Ok((Reply::Heal(st), _)) => st.entries.iter().any(|e| e.0 == b"d"),
            _ => false,
        };
        let m = vol.map();
        if healed && m.sets[0].bricks.iter().all(|b| b.state == BrickState::Up) {
            break;
        }
    }
    let r = conn.call(Request::Brick(client(r1)), Bytes::new()).await;
    assert!(r.is_ok(), "the retry of an applied rename failed: {r:?}\n{}", c.log());
    let fresh = c.mount("v").await.unwrap();
    let d = fresh.lookup(&root, Id::ROOT, b"d").await.unwrap();
    assert_eq!(d.id, f.id, "the renamed file is at its new name");
    let e = fresh.lookup(&root, Id::ROOT, b"s").await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "{e}");
    // A new request for a source that is not there still fails.
    let e = conn
        .call(Request::Brick(client(ReqId { client: 91, seq: 2 })), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "{e}");

    // The rename's next step, its new name's linkto, retried on a head that got it from a
    // catch-up, with no replica remembering it either: made already, not EEXIST.
    let mk = Op::MkLinkto { dir: Id::ROOT, name: b"lt".to_vec(), target: f.id };
    for (brick, from) in [(head, replica), (replica, head)] {
        let copy = ReplicateRequest { op: mk.clone(), result: None, ..forward(brick, from, None) };
        conn.call(Request::Replicate(copy), Bytes::new()).await.unwrap();
    }
    let retry = BrickRequest { op: mk, ..client(ReqId { client: 91, seq: 3 }) };
    let r = conn.call(Request::Brick(retry), Bytes::new()).await;
    assert!(r.is_ok(), "the retry of a made linkto failed: {r:?}");
}
