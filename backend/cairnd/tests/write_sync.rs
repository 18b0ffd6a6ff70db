//! A write and its fsync in one round trip (`BrickRequest::sync`, `Volume::write_sync`:
//! NFS FILE_SYNC and a new file's first WRITE through FSAL_CAIRN) against a real `cairnd`
//! on a replica-2 volume: the head answers `Reply::Synced` only once the write is on both
//! bricks, the client sends no fsync of its own, and a request without the flag (a client
//! built before it) is answered plainly. An fsync of a file whose last write is still
//! buffered (write-behind) sends that write with the fsync: one round trip, not two.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Id};
use cairn_proto::msg::{BrickRequest, Op, Reply, Request};
use common::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_write_is_one_round_trip_and_on_every_replica() {
    let c = Cluster::start();
    let vol = c.replica2_up().await;
    let root = Creds::root();
    let f = vol.create(&root, Id::ROOT, b"f", 0o644, true).await.unwrap();

    // Through the client: one "write" round trip, no "fsync".
    let before = vol.stats();
    let n = vol.write_sync(&root, f.id, 0, Bytes::from(vec![b'a'; 4096])).await.unwrap();
    assert_eq!(n, 4096);
    let after = vol.stats();
    assert_eq!(after.round_trips - before.round_trips, 1, "{before:?} -> {after:?}");
    assert_eq!(after.of("write") - before.of("write"), 1);
    assert_eq!(after.of("fsync"), before.of("fsync"), "the head fsynced, not a second call");
    // The write's attributes are cached: a getattr now costs nothing.
    let a = vol.getattr(&root, f.id).await.unwrap();
    assert_eq!(a.size, 4096);
    assert_eq!(vol.stats().round_trips, after.round_trips, "getattr after write_sync");

    // On the wire: answered Synced, and by then both bricks hold the data.
    let map = vol.map();
    let set = &map.sets[0];
    let head = cairn_placement::head(set, f.id).unwrap().index;
    let conn = c.as_node().await;
    let send = |sync: bool, byte: u8| {
        let r = BrickRequest {
            sync,
            ..BrickRequest::new(
                "v",
                head,
                map.epoch,
                Creds::root(),
                Op::Write { id: f.id, offset: 0 },
            )
        };
        conn.call(Request::Brick(r), Bytes::from(vec![byte; 4096]))
    };
    let copy = |brick: u32| {
        let op = Op::HealFetch { id: f.id };
        let r = BrickRequest::new("v", brick, map.epoch, Creds::root(), op);
        let conn = conn.clone();
        async move {
            match conn.call(Request::Brick(r), Bytes::new()).await.unwrap() {
                (Reply::Heal(_), data) => data,
                other => panic!("heal_fetch: {other:?}"),
            }
        }
    };
    let (r, _) = send(true, b'b').await.unwrap();
    match r {
        Reply::Synced(w) => {
            assert!(matches!(*w, Reply::Written { count: 4096, .. }), "{w:?}")
        }
        other => panic!("a write asked with sync: {other:?}"),
    }
    for b in &set.bricks {
        assert_eq!(&copy(b.index).await[..], &[b'b'; 4096][..], "brick {}", b.index);
    }
    // Without the flag: the plain reply, as before.
    let (r, _) = send(false, b'c').await.unwrap();
    assert!(matches!(r, Reply::Written { count: 4096, .. }), "{r:?}");
    vol.unmount().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fsync_carries_the_buffered_write() {
    let c = Cluster::start();
    let vol = c.replica2_up().await;
    let root = Creds::root();
    let f = vol.create(&root, Id::ROOT, b"f", 0o644, true).await.unwrap();
    for round in 0..3u64 {
        let before = vol.stats();
        // Buffered: no round trip yet.
        let at = round * 8192;
        vol.write(&root, f.id, at, Bytes::from(vec![b'a' + round as u8; 8192])).await.unwrap();
        assert_eq!(vol.stats().round_trips, before.round_trips, "write-behind buffers it");
        vol.fsync(&root, f.id, round == 1).await.unwrap();
        let after = vol.stats();
        assert_eq!(after.round_trips - before.round_trips, 1, "{before:?} -> {after:?}");
        assert_eq!(after.of("fsync"), before.of("fsync"), "no fsync of its own");
    }
    // Nothing buffered: a plain fsync.
    let before = vol.stats();
    vol.fsync(&root, f.id, false).await.unwrap();
    assert_eq!(vol.stats().of("fsync") - before.of("fsync"), 1);
    // Everything arrived, in order, and the size is right.
    let a = vol.getattr(&root, f.id).await.unwrap();
    assert_eq!(a.size, 3 * 8192);
    let (data, _) = vol.read(&root, f.id, 8192, 8192).await.unwrap();
    assert_eq!(&data[..], &[b'b'; 8192][..]);
    vol.unmount().await.unwrap();
}
