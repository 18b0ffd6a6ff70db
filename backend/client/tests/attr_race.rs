//! This client's own change of an inode against its own fetch of the inode's attributes in
//! flight (the race guard of `cache/src/attr.rs`, `AttrCache::put_change`): a real brick
//! served in-process by a test server that can hold one GETATTR's reply back.

use bytes::Bytes;
use cairn_brick::{Brick, BrickMarker, Exec};
use cairn_client::{MountOptions, Volume};
use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap, VolumeStatus};
use cairn_proto::msg::{Op, Reply, Request, Response, Welcome};
use cairn_proto::rpc::{serve, Service, Session};
use cairn_proto::{Creds, Errno, Id, RemoteError, SetAttr, PROTOCOL_VERSION};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

const VOLID: &str = "0123456789abcdef0123456789abcdef";

/// A GETATTR of `id` to hold: executed on the brick when it arrives (`served` fires), its
/// reply sent only when `release` fires.
struct Hold {
    id: Id,
    served: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

struct TestBrick {
    brick: Arc<Brick>,
    map: VolumeMap,
    hold: Mutex<Option<Hold>>,
    /// Answer the next CREATE with EIO after the brick made it (a reply lost on the way).
    fail_create: AtomicBool,
}

impl Service for TestBrick {
    fn welcome(&self, session: u64) -> Welcome {
        Welcome { version: PROTOCOL_VERSION, session, node: "test".into() }
    }

    fn call(
        &self,
        _session: Arc<Session>,
        req: Request,
        data: Bytes,
    ) -> BoxFuture<'static, (Response, Bytes)> {
        let (r, release): ((Response, Bytes), _) = match req {
            Request::Subscribe { .. } | Request::GetMap { .. } => {
                ((Ok(Reply::Map(Box::new(self.map.clone()))), Bytes::new()), None)
            }
            Request::Brick(b) => {
                let hold = match &b.op {
                    Op::GetAttr { id } => {
                        let mut h = self.hold.lock();
                        if h.as_ref().is_some_and(|h| h.id == *id) {
                            h.take()
                        } else {
                            None
                        }
                    }
                    _ => None,
                };
                let r = match self.brick.execute(&b.creds, &b.op, &data, Exec::Primary) {
                    Ok(_)
                        if matches!(b.op, Op::Create { .. })
                            && self.fail_create.swap(false, Ordering::SeqCst) =>
                    {
                        (Err(RemoteError::new(Errno::EIO, "test: reply lost")), Bytes::new())
                    }
                    Ok((r, d)) => (Ok(r), d),
                    Err(e) => (Err(e), Bytes::new()),
                };
                let release = hold.map(|h| {
                    let _ = h.served.send(());
                    h.release
                });
                (r, release)
            }
            other => (
                (
                    Err(RemoteError::new(Errno::EPROTO, format!("test brick: {other:?}"))),
                    Bytes::new(),
                ),
                None,
            ),
        };
        Box::pin(async move {
            if let Some(release) = release {
                let _ = release.await;
            }
            r
        })
    }
}

async fn start() -> (tempfile::TempDir, Arc<TestBrick>, Arc<Volume>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b0");
    let marker =
        BrickMarker { format: 1, volume: "vol0".into(), volume_id: VOLID.into(), index: 0 };
    Brick::prepare(&path, &marker, false).unwrap();
    let brick = Brick::open(&path, VOLID, 0).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let map = VolumeMap {
        name: "vol0".into(),
        id: u128::from_str_radix(VOLID, 16).unwrap(),
        epoch: 1,
        layout_epoch: 1,
        rebalancing: false,
        layout: vec![],
        status: VolumeStatus::Started,
        replica: 1,
        sets: vec![ReplicaSet {
            id: 1,
            bricks: vec![BrickInfo {
                index: 0,
                node: "test".into(),
                addr: addr.clone(),
                path: path.display().to_string(),
                state: BrickState::Up,
            }],
        }],
        options: Default::default(),
    };
    let svc = Arc::new(TestBrick {
        brick,
        map,
        hold: Mutex::new(None),
        fail_create: AtomicBool::new(false),
    });
    // TLS on both ends, with a node certificate of the test CA.
    cairn_proto::tls::test_ca::use_for_process();
    tokio::spawn(serve(listener, svc.clone()));
    let opts = MountOptions {
        servers: vec![addr],
        volume: "vol0".into(),
        client_name: "attr-race-test".into(),
        write_behind: false,
        cache_timeout: Duration::from_secs(30),
        ..MountOptions::default()
    };
    let vol = Volume::mount(opts).await.unwrap();
    (dir, svc, vol)
}

/// Hold the next GETATTR of `id`; resolves once the brick has served it.
fn hold(b: &TestBrick, id: Id) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
    let (served_tx, served) = oneshot::channel();
    let (release, release_rx) = oneshot::channel();
    *b.hold.lock() = Some(Hold { id, served: served_tx, release: release_rx });
    (served, release)
}

/// A GETATTR leaves before this client's own truncate (setattr size) and write, the brick
/// serves it before them, and its reply is handled after theirs: the older size must not
/// be cached (nothing recalls it: a client's own changes recall nothing from itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_getattr_crossing_an_own_change_does_not_cache_the_old_size() {
    let (_dir, b, vol) = start().await;
    let c = Creds::root();
    let f = vol.create(&c, Id::ROOT, b"f", 0o644, true).await.unwrap();
    vol.write(&c, f.id, 0, Bytes::from(vec![7u8; 100])).await.unwrap();
    assert_eq!(vol.getattr(&c, f.id).await.unwrap().size, 100);

    // Truncate.
    vol.drop_caches();
    let (served, release) = hold(&b, f.id);
    let v = vol.clone();
    let fetch = tokio::spawn(async move { v.getattr(&Creds::root(), f.id).await });
    served.await.unwrap();
    let set = SetAttr { size: Some(0), ..SetAttr::default() };
    assert_eq!(vol.setattr(&c, f.id, &set).await.unwrap().size, 0);
    release.send(()).unwrap();
    assert_eq!(fetch.await.unwrap().unwrap().size, 100, "the held reply is the old one");
    assert_ne!(vol.cached_attr(f.id).map(|a| a.size), Some(100), "stale size cached");
    assert_eq!(vol.getattr(&c, f.id).await.unwrap().size, 0);

    // Write (extending).
    vol.drop_caches();
    let (served, release) = hold(&b, f.id);
    let v = vol.clone();
    let fetch = tokio::spawn(async move { v.getattr(&Creds::root(), f.id).await });
    served.await.unwrap();
    vol.write(&c, f.id, 0, Bytes::from(vec![1u8; 50])).await.unwrap();
    assert_eq!(vol.cached_attr(f.id).map(|a| a.size), Some(50), "the write's reply is cached");
    release.send(()).unwrap();
    assert_eq!(fetch.await.unwrap().unwrap().size, 0);
    assert_eq!(vol.cached_attr(f.id).map(|a| a.size), Some(50), "stale size cached");
    assert_eq!(vol.getattr(&c, f.id).await.unwrap().size, 50);
    vol.unmount().await.unwrap();
}

/// A create that the brick made but whose reply was an error (lost on the way): the
/// parent's cached attributes (nlink, times) are no longer trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_failing_after_it_was_made_drops_the_parents_attributes() {
    let (_dir, b, vol) = start().await;
    let c = Creds::root();
    vol.getattr(&c, Id::ROOT).await.unwrap();
    assert!(vol.cached_attr(Id::ROOT).is_some());
    b.fail_create.store(true, Ordering::SeqCst);
    let e = vol.create(&c, Id::ROOT, b"g", 0o644, true).await.unwrap_err();
    assert_eq!(e.errno, Errno::EIO, "{e}");
    assert!(vol.cached_attr(Id::ROOT).is_none(), "the parent's attributes from before");
    vol.unmount().await.unwrap();
}
