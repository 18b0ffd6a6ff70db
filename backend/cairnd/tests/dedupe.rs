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
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2")]).await;
    let vol = c.mount("v").await.unwrap();
    let root = Creds::root();
    // Both bricks up (the replica must take forwards).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !vol.map().sets[0].bricks.iter().all(|b| b.state == BrickState::Up) {
        assert!(Instant::now() < deadline, "bricks did not come up: {}", c.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
