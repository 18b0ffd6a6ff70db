//! The config store against a real etcd (one per test, see `cairn_config::testing`).

use cairn_config::testing::Etcd;
use cairn_config::{
    build_map, BrickRecord, ConfigError, PeerRecord, SetRecord, Store, VolumeRecord,
};
use cairn_proto::map::{BrickState, VolumeStatus};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::{Duration, Instant};

const PREFIX: &str = "/cairn";

fn volume(name: &str, bricks: &[(&str, &str)]) -> VolumeRecord {
    VolumeRecord {
        name: name.into(),
        id: format!("{:032x}", 0xc0ffee_u128 + name.len() as u128),
        status: VolumeStatus::Created,
        replica: bricks.len() as u32,
        sets: vec![SetRecord {
            id: 1,
            bricks: bricks
                .iter()
                .enumerate()
                .map(|(i, (node, path))| BrickRecord {
                    index: i as u32,
                    node: node.to_string(),
                    path: path.to_string(),
                })
                .collect(),
        }],
        options: BTreeMap::new(),
        layout_epoch: 1,
        rebalancing: false,
        layout: vec![],
        reset_bricks: Default::default(),
        removing: None,
        retired: vec![],
    }
}

fn peer(name: &str, addr: &str, uuid: &str) -> PeerRecord {
    PeerRecord { name: name.into(), addr: addr.into(), uuid: uuid.into() }
}

async fn store(etcd: &Etcd) -> Store {
    Store::connect(&etcd.endpoints(), PREFIX).await.expect("connect to test etcd")
}

fn conflict(r: Result<impl std::fmt::Debug, ConfigError>) -> String {
    match r {
        Err(ConfigError::Conflict(m)) => m,
        other => panic!("expected Conflict, got {other:?}"),
    }
}

/// Polls `f` until it yields true, or panics after `limit`.
async fn eventually<F, Fut>(what: &str, limit: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f().await {
            return t0.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not true after {limit:?}");
}

#[tokio::test]
async fn volumes_conflicts_and_cas() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let v1 = volume("v1", &[("n1", "/b1"), ("n2", "/b1")]);
    let created = s.create_volume(&v1).await.unwrap();
    let m = conflict(s.create_volume(&v1).await);
    assert!(m.contains("v1") && m.contains("exists"), "{m}");

    // A brick node:path belongs to one volume only.
    let clash = volume("v2", &[("n3", "/b1"), ("n2", "/b1")]);
    let m = conflict(s.create_volume(&clash).await);
    assert!(m.contains("n2:/b1") && m.contains("v1") && m.contains("v2"), "{m}");
    assert!(s.get_volume("v2").await.unwrap().is_none(), "failed create left a record");
    let v2 = volume("v2", &[("n1", "/b2"), ("n2", "/b2")]);
    s.create_volume(&v2).await.unwrap();

    let (got, rev) = s.get_volume("v1").await.unwrap().unwrap();
    assert_eq!(got, v1);
    assert_eq!(rev, created);

    // CAS: a stale revision loses.
    let mut started = v1.clone();
    started.status = VolumeStatus::Started;
    let rev2 = s.update_volume(&started, rev).await.unwrap();
    assert!(rev2 > rev);
    let mut stopped = v1.clone();
    stopped.status = VolumeStatus::Stopped;
    let m = conflict(s.update_volume(&stopped, rev).await);
    assert!(m.contains("v1"), "{m}");
    assert_eq!(s.get_volume("v1").await.unwrap().unwrap(), (started.clone(), rev2));

    // Two writers racing from the same revision: exactly one wins.
    let mut a = started.clone();
    a.options.insert("writer".into(), "a".into());
    let mut b = started.clone();
    b.options.insert("writer".into(), "b".into());
    let (ra, rb) = tokio::join!(s.update_volume(&a, rev2), s.update_volume(&b, rev2));
    let (winner, loser) = match (ra, rb) {
        (Ok(r), Err(ConfigError::Conflict(_))) => ((a, r), "b"),
        (Err(ConfigError::Conflict(_)), Ok(r)) => ((b, r), "a"),
        other => panic!("expected one winner and one Conflict, got {other:?}"),
    };
    let (now, now_rev) = s.get_volume("v1").await.unwrap().unwrap();
    assert_eq!((now, now_rev), winner);
    assert_ne!(s.get_volume("v1").await.unwrap().unwrap().0.options["writer"], loser);

    // An update may not grab another volume's brick either.
    let (cur2, r2) = s.get_volume("v2").await.unwrap().unwrap();
    let mut grow = cur2.clone();
    grow.sets[0].bricks.push(BrickRecord { index: 2, node: "n1".into(), path: "/b1".into() });
    let m = conflict(s.update_volume(&grow, r2).await);
    assert!(m.contains("n1:/b1") && m.contains("v1"), "{m}");

    let names: Vec<String> = s.list_volumes().await.unwrap().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["v1", "v2"]);

    s.delete_volume("v1").await.unwrap();
    assert!(s.get_volume("v1").await.unwrap().is_none());
    assert!(
        matches!(s.delete_volume("v1").await, Err(ConfigError::NotFound(m)) if m.contains("v1"))
    );
    // Once v1 is gone its bricks are free.
    s.update_volume(&grow, r2).await.unwrap();
    assert!(matches!(s.update_volume(&grow, 1).await, Err(ConfigError::Conflict(_))));
    assert!(matches!(s.update_volume(&v1, 1).await, Err(ConfigError::NotFound(_))));

    // Records that cannot be stored are refused up front.
    let mut bad = volume("v/3", &[("n1", "/b9")]);
    assert!(matches!(s.create_volume(&bad).await, Err(ConfigError::Invalid(_))));
    bad.name = "v3".into();
    bad.id = "xyz".into();
    assert!(
        matches!(s.create_volume(&bad).await, Err(ConfigError::Invalid(m)) if m.contains("v3"))
    );
}

#[tokio::test]
async fn peers_unique_names_and_addresses() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let p1 = peer("p1", "127.0.1.1:24007", "u1");
    s.add_peer(p1.clone()).await.unwrap();
    s.add_peer(p1.clone()).await.unwrap(); // idempotent
    let m = conflict(s.add_peer(peer("p1", "127.0.1.9:24007", "u9")).await);
    assert!(m.contains("p1") && m.contains("u1"), "{m}");
    let m = conflict(s.add_peer(peer("p2", "127.0.1.1:24007", "u2")).await);
    assert!(m.contains("127.0.1.1:24007") && m.contains("p1"), "{m}");
    let m = conflict(s.add_peer(peer("p9", "127.0.1.9:24007", "u1")).await);
    assert!(m.contains("u1"), "{m}");

    // Same node, new address: allowed.
    let p1b = peer("p1", "127.0.1.11:24007", "u1");
    s.add_peer(p1b.clone()).await.unwrap();
    let p2 = peer("p2", "127.0.1.1:24007", "u2"); // p1's old address is free again
    s.add_peer(p2.clone()).await.unwrap();
    assert_eq!(s.list_peers().await.unwrap(), vec![p1b.clone(), p2.clone()]);
    assert_eq!(s.get_peer("p2").await.unwrap(), Some(p2));
    assert_eq!(s.get_peer("p3").await.unwrap(), None);

    s.remove_peer("p2").await.unwrap();
    assert_eq!(s.get_peer("p2").await.unwrap(), None);
    assert!(matches!(s.remove_peer("p2").await, Err(ConfigError::NotFound(m)) if m.contains("p2")));

    // A peer serving a brick stays.
    s.create_volume(&volume("v1", &[("p1", "/bricks/a")])).await.unwrap();
    let m = conflict(s.remove_peer("p1").await);
    assert!(m.contains("p1") && m.contains("v1"), "{m}");
    s.delete_volume("v1").await.unwrap();
    s.remove_peer("p1").await.unwrap();
    assert!(s.list_peers().await.unwrap().is_empty());
}

#[tokio::test]
async fn lease_keys_vanish_on_revoke_and_drop() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let lease = s.register_node("n1", "127.0.0.1:7001", 5).await.unwrap();
    assert!(lease.is_alive());
    assert_ne!(lease.lease_id(), 0);
    assert_eq!(s.live_nodes().await.unwrap().get("n1").map(String::as_str), Some("127.0.0.1:7001"));

    lease.set_brick_state("vol", 0, BrickState::Up).await.unwrap();
    lease.set_brick_state("vol", 1, BrickState::Healing).await.unwrap();
    lease.set_brick_state("vol", 2, BrickState::Up).await.unwrap();
    lease.set_brick_state("vol", 2, BrickState::Down).await.unwrap();
    let want = HashMap::from([(0, BrickState::Up), (1, BrickState::Healing)]);
    assert_eq!(s.brick_states("vol").await.unwrap(), want);
    assert!(s.brick_states("vol2").await.unwrap().is_empty());
    lease.clear_brick_state("vol", 1).await.unwrap();
    assert_eq!(s.brick_states("vol").await.unwrap(), HashMap::from([(0, BrickState::Up)]));

    // A node's own report (the fence generations it applied) goes with its lease.
    lease.publish_gateway_object("fence-applied", "n1", r#"{"node":"n1"}"#).await.unwrap();
    let (objs, _) = s.gateway_objects("fence-applied").await.unwrap();
    assert_eq!(
        objs.iter().map(|(n, d, _)| (n.as_str(), d.as_str())).collect::<Vec<_>>(),
        [("n1", r#"{"node":"n1"}"#)]
    );

    lease.revoke().await.unwrap();
    assert!(s.live_nodes().await.unwrap().is_empty());
    assert!(s.brick_states("vol").await.unwrap().is_empty());
    assert!(s.gateway_objects("fence-applied").await.unwrap().0.is_empty());

    // Dropping the handle releases the lease too.
    let lease = s.register_node("n2", "127.0.0.1:7002", 30).await.unwrap();
    lease.set_brick_state("vol", 3, BrickState::Up).await.unwrap();
    drop(lease);
    eventually("keys of a dropped lease vanish", Duration::from_secs(5), || async {
        s.live_nodes().await.unwrap().is_empty() && s.brick_states("vol").await.unwrap().is_empty()
    })
    .await;
}

#[tokio::test]
async fn lease_expires_after_ttl_without_keepalive() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let lease = s.register_node("n1", "127.0.0.1:7001", 2).await.unwrap();
    let ttl = lease.ttl();
    assert!(ttl >= Duration::from_secs(2), "granted ttl {ttl:?}");
    lease.set_brick_state("vol", 0, BrickState::Up).await.unwrap();

    // Keep-alive holds the lease well past its TTL.
    tokio::time::sleep(ttl + Duration::from_millis(800)).await;
    assert!(lease.is_alive());
    assert_eq!(s.brick_states("vol").await.unwrap().len(), 1);
    assert!(s.live_nodes().await.unwrap().contains_key("n1"));

    // Node stops renewing (hung/crashed): it fences itself at TTL/2, etcd drops its keys at TTL.
    lease.stop_keepalive();
    let fenced = eventually("lease reported not alive", ttl, || async { !lease.is_alive() }).await;
    assert!(fenced <= ttl / 2 + Duration::from_millis(500), "fenced after {fenced:?}");
    let err = lease.set_brick_state("vol", 1, BrickState::Up).await.unwrap_err();
    assert!(matches!(&err, ConfigError::LeaseLost { node, .. } if node == "n1"), "{err:?}");
    eventually("lease keys expire", ttl + Duration::from_secs(3), || async {
        s.live_nodes().await.unwrap().is_empty() && s.brick_states("vol").await.unwrap().is_empty()
    })
    .await;
    assert!(!lease.is_alive());
}

#[tokio::test]
async fn lease_fences_while_etcd_hangs() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let lease = s.register_node("n1", "127.0.0.1:7001", 4).await.unwrap();
    let ttl = lease.ttl();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(lease.is_alive());

    etcd.pause();
    let fenced =
        eventually("fenced while etcd is stopped", ttl, || async { !lease.is_alive() }).await;
    etcd.resume();
    assert!(fenced <= ttl / 2 + Duration::from_millis(500), "fenced after {fenced:?}");
    // etcd is back before the lease expired: renewals resume and the node may serve again.
    eventually("alive again after etcd resumed", ttl, || async { lease.is_alive() }).await;
    assert!(s.live_nodes().await.unwrap().contains_key("n1"));
}

/// Over a slow link (here 1.2 s per round trip, against a lease that counts as alive for
/// 2 s after a renewal is sent) granting the lease and publishing the node's address take
/// longer than half the TTL. The lease must still come back alive, so that what the node
/// publishes next under it (a brick back from a partition announcing it is Healing, so
/// heads forward writes to it) is not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_registered_over_a_slow_link_is_alive() {
    let etcd = Etcd::start();
    let target = etcd.endpoint().trim_start_matches("http://").to_string();
    let proxy = cairn_config::testing::DelayProxy::start(target).await;
    let s = Store::connect(&[proxy.endpoint()], PREFIX).await.expect("connect through proxy");
    proxy.set_delay(Duration::from_millis(600));
    let lease = s.register_node("n1", "127.0.0.1:7001", 4).await.unwrap();
    assert!(lease.is_alive(), "a freshly registered lease is alive");
    lease.set_brick_state("vol", 0, BrickState::Healing).await.unwrap();
    proxy.set_delay(Duration::ZERO);
    let states = s.brick_states("vol").await.unwrap();
    assert_eq!(states.get(&0), Some(&BrickState::Healing));
}

#[tokio::test]
async fn lease_lost_for_good_once_expired() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let lease = s.register_node("n1", "127.0.0.1:7001", 2).await.unwrap();
    let ttl = lease.ttl();
    lease.set_brick_state("vol", 0, BrickState::Up).await.unwrap();
    // etcd hangs for longer than the TTL: when it comes back the lease has expired, and a
    // late keep-alive must not bring the node back to life.
    etcd.pause();
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    etcd.resume();
    eventually("expired lease keys vanish", Duration::from_secs(5), || async {
        s.brick_states("vol").await.map(|m| m.is_empty()).unwrap_or(false)
    })
    .await;
    tokio::time::sleep(ttl).await;
    assert!(!lease.is_alive());
    assert!(s.live_nodes().await.unwrap().is_empty());
    let err = lease.set_brick_state("vol", 0, BrickState::Up).await.unwrap_err();
    assert!(matches!(err, ConfigError::LeaseLost { .. }), "{err:?}");
    // A fresh registration works.
    let again = s.register_node("n1", "127.0.0.1:7001", 2).await.unwrap();
    assert_ne!(again.lease_id(), lease.lease_id());
    assert!(again.is_alive());
    assert!(s.live_nodes().await.unwrap().contains_key("n1"));
}

#[tokio::test]
async fn volume_maps_from_one_snapshot() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;
    s.add_peer(peer("n1", "127.0.1.1:7000", "u1")).await.unwrap();
    s.add_peer(peer("n2", "127.0.1.2:7000", "u2")).await.unwrap();
    s.create_volume(&volume("va", &[("n1", "/a"), ("n2", "/a")])).await.unwrap();
    s.create_volume(&volume("vb", &[("n1", "/b")])).await.unwrap();
    let lease = s.register_node("n1", "127.0.1.1:7000", 5).await.unwrap();
    lease.set_brick_state("va", 0, BrickState::Up).await.unwrap();
    lease.set_brick_state("vb", 0, BrickState::Healing).await.unwrap();

    let (rev, maps) = s.volume_maps().await.unwrap();
    assert_eq!(rev, s.revision().await.unwrap());
    assert_eq!(maps.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["va", "vb"]);
    assert!(maps.iter().all(|m| m.epoch == rev));
    let state = |m: &cairn_proto::map::VolumeMap, i| m.brick(i).unwrap().1.state;
    assert_eq!((state(&maps[0], 0), state(&maps[0], 1)), (BrickState::Up, BrickState::Down));
    assert_eq!(maps[0].brick(1).unwrap().1.addr, "127.0.1.2:7000");
    assert_eq!(state(&maps[1], 0), BrickState::Healing);
    // Same answer as assembling it by hand.
    let (va, _) = s.get_volume("va").await.unwrap().unwrap();
    let by_hand =
        build_map(&va, &s.list_peers().await.unwrap(), &s.brick_states("va").await.unwrap(), rev);
    assert_eq!(maps[0], by_hand);

    lease.revoke().await.unwrap();
    let (rev2, maps) = s.volume_maps().await.unwrap();
    assert!(rev2 > rev);
    assert_eq!(state(&maps[0], 0), BrickState::Down);
    assert_eq!(state(&maps[1], 0), BrickState::Down);
}

#[tokio::test]
async fn watch_fires_and_survives_etcd_restart() {
    let mut etcd = Etcd::start();
    let s = store(&etcd).await;
    let other = Store::connect(&etcd.endpoints(), "/cairn-other").await.unwrap();
    let lease = s.register_node("n1", "127.0.0.1:7001", 5).await.unwrap();

    let before = s.revision().await.unwrap();
    let mut rx = s.watch().await.unwrap();
    s.add_peer(peer("p1", "127.0.1.1:1", "u1")).await.unwrap();
    let r1 = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.unwrap().unwrap();
    assert!(r1 > before);
    assert_eq!(r1, s.revision().await.unwrap());

    // Changes outside the prefix are not reported.
    other.add_peer(peer("x", "127.0.1.2:1", "ux")).await.unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(300), rx.recv()).await.is_err());
    lease.set_brick_state("vol", 0, BrickState::Up).await.unwrap();
    let r2 = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.unwrap().unwrap();
    assert!(r2 > r1);

    etcd.kill();
    etcd.restart();
    // Write at once through a fresh connection, before the watch is back (it retries after
    // a back-off): the change must still be reported.
    let t0 = Instant::now();
    let created = store(&etcd).await.create_volume(&volume("v1", &[("p1", "/b")])).await.unwrap();
    assert!(created > r2, "revisions only grow across restarts");
    let mut seen = Vec::new();
    while seen.last() != Some(&created) {
        match tokio::time::timeout(Duration::from_secs(15), rx.recv()).await {
            Ok(Some(r)) => seen.push(r),
            other => panic!("watch did not report revision {created} (saw {seen:?}): {other:?}"),
        }
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]) && seen[0] > r2, "{seen:?}");
    assert!(t0.elapsed() < Duration::from_secs(10), "watch back after {:?}", t0.elapsed());
    // The old connection recovers too.
    eventually("store usable after restart", Duration::from_secs(5), || async {
        s.get_volume("v1").await.map(|v| v.is_some()).unwrap_or(false)
    })
    .await;

    // The lease survived the restart and is still renewed.
    eventually("lease alive after restart", Duration::from_secs(5), || async { lease.is_alive() })
        .await;
    tokio::time::sleep(lease.ttl() + Duration::from_millis(500)).await;
    assert!(lease.is_alive());
    assert!(s.live_nodes().await.unwrap().contains_key("n1"));
    assert_eq!(s.brick_states("vol").await.unwrap().get(&0), Some(&BrickState::Up));

    // Dropping the receiver ends the watch task (nothing to assert but no hang/panic).
    drop(rx);
    s.delete_volume("v1").await.unwrap();
}

#[tokio::test]
async fn connect_to_dead_endpoint_is_unreachable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ep = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    let err = Store::connect_with_timeout(&[ep], PREFIX, Duration::from_secs(1)).await.unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(4), "took {:?}", t0.elapsed());
    assert!(matches!(err, ConfigError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
}

#[test]
fn build_map_fills_addresses_and_states() {
    let mut v = volume("vm", &[("n1", "/a"), ("n2", "/a")]);
    v.sets.push(SetRecord {
        id: 7,
        bricks: vec![
            BrickRecord { index: 2, node: "n3".into(), path: "/c".into() },
            BrickRecord { index: 3, node: "n1".into(), path: "/d".into() },
        ],
    });
    v.status = VolumeStatus::Started;
    v.layout_epoch = 4;
    v.rebalancing = true;
    v.options.insert("cache.size".into(), "1G".into());
    let peers = [peer("n1", "127.0.1.1:7000", "u1"), peer("n2", "127.0.1.2:7000", "u2")];
    // Brick 2 claims Up but its node is not a peer: Down. Brick 3 has no state: Down.
    let states =
        HashMap::from([(0, BrickState::Up), (1, BrickState::Healing), (2, BrickState::Up)]);
    let m = build_map(&v, &peers, &states, 42);

    assert_eq!(m.name, "vm");
    assert_eq!(m.id, u128::from_str_radix(&v.id, 16).unwrap());
    assert_eq!((m.epoch, m.layout_epoch, m.rebalancing), (42, 4, true));
    assert_eq!((m.status, m.replica), (VolumeStatus::Started, 2));
    assert_eq!(m.option("cache.size"), Some("1G"));
    assert_eq!(m.sets.iter().map(|s| s.id).collect::<Vec<_>>(), [1, 7]);
    assert!(m.layout.is_empty(), "names hash over every set");
    // A set left out of the layout (add-brick filling it with directories) stays out.
    v.layout = vec![1];
    assert_eq!(build_map(&v, &peers, &states, 43).layout, [1]);
    v.layout.clear();
    let b = |i| m.brick(i).unwrap().1.clone();
    assert_eq!(
        (b(0).addr.as_str(), b(0).state, b(0).path.as_str()),
        ("127.0.1.1:7000", BrickState::Up, "/a")
    );
    assert_eq!(
        (b(1).addr.as_str(), b(1).state, b(1).node.as_str()),
        ("127.0.1.2:7000", BrickState::Healing, "n2")
    );
    assert_eq!((b(2).addr.as_str(), b(2).state), ("", BrickState::Down));
    assert_eq!((b(3).addr.as_str(), b(3).state), ("127.0.1.1:7000", BrickState::Down));
    assert_eq!(m.set_by_id(7).unwrap().bricks.len(), 2);
}

#[tokio::test]
async fn stale_markers_demote_and_only_one_side_wins() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;
    s.add_peer(peer("n1", "127.0.1.1:7000", "u1")).await.unwrap();
    s.add_peer(peer("n2", "127.0.1.2:7000", "u2")).await.unwrap();
    s.create_volume(&volume("vs", &[("n1", "/s"), ("n2", "/s")])).await.unwrap();
    let l1 = s.register_node("n1", "127.0.1.1:7000", 5).await.unwrap();
    let l2 = s.register_node("n2", "127.0.1.2:7000", 5).await.unwrap();
    l1.set_brick_state("vs", 0, BrickState::Up).await.unwrap();
    l2.set_brick_state("vs", 1, BrickState::Up).await.unwrap();

    // Brick 0 demotes brick 1: maps and brick_states show 1 Healing.
    s.mark_stale("vs", 1, 0).await.unwrap();
    let (_, maps) = s.volume_maps().await.unwrap();
    assert_eq!(maps[0].brick(1).unwrap().1.state, BrickState::Healing);
    assert_eq!(s.brick_states("vs").await.unwrap()[&1], BrickState::Healing);
    // The demoted brick cannot demote the other back (both would be stuck).
    let m = conflict(s.mark_stale("vs", 0, 1).await);
    assert!(m.contains("stale itself"), "{m}");
    assert_eq!(s.brick_states("vs").await.unwrap()[&0], BrickState::Up);
    // Nor can a brick that is not published up (its node lost its lease, or it is
    // catching up): it acts on an old map.
    l1.set_brick_state("vs", 0, BrickState::Healing).await.unwrap();
    let m = conflict(s.mark_stale("vs", 1, 0).await);
    assert!(m.contains("not up"), "{m}");
    l1.set_brick_state("vs", 0, BrickState::Up).await.unwrap();

    // Clearing needs the revision seen when the heal started.
    let markers = s.stale_bricks("vs").await.unwrap();
    assert_eq!(markers.len(), 1);
    let (idx, rev) = markers[0];
    assert_eq!(idx, 1);
    s.mark_stale("vs", 1, 0).await.unwrap(); // marked again during the heal
    assert!(
        !s.clear_stale("vs", 1, rev).await.unwrap(),
        "an older marker must not clear a newer one"
    );
    let rev2 = s.stale_bricks("vs").await.unwrap()[0].1;
    assert!(s.clear_stale("vs", 1, rev2).await.unwrap());
    assert_eq!(s.brick_states("vs").await.unwrap()[&1], BrickState::Up);
    // Deleting the volume drops its markers.
    s.mark_stale("vs", 1, 0).await.unwrap();
    let mut v = s.get_volume("vs").await.unwrap().unwrap();
    v.0.status = VolumeStatus::Stopped;
    s.update_volume(&v.0, v.1).await.unwrap();
    s.delete_volume("vs").await.unwrap();
    assert!(s.stale_bricks("vs").await.unwrap().is_empty());
}

#[tokio::test]
async fn gateway_objects_by_kind_with_conditional_put() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let (objs, rev0) = s.gateway_objects("nfs-export").await.unwrap();
    assert!(objs.is_empty());
    s.put_gateway_object("nfs-export", "1", r#"{"pseudo":"/a"}"#, Some(rev0)).await.unwrap();
    // A put conditional on an older revision of the kind loses: someone changed it since.
    let m =
        conflict(s.put_gateway_object("nfs-export", "2", r#"{"pseudo":"/a"}"#, Some(rev0)).await);
    assert!(m.contains("nfs-export") && m.contains("concurrently"), "{m}");
    // Other kinds are separate.
    s.put_gateway_object("smb-share", "vol0", "{}", Some(rev0)).await.unwrap();

    let (objs, rev1) = s.gateway_objects("nfs-export").await.unwrap();
    assert_eq!(objs.len(), 1);
    assert_eq!((objs[0].0.as_str(), objs[0].1.as_str()), ("1", r#"{"pseudo":"/a"}"#));
    assert!(rev1 > rev0);
    s.put_gateway_object("nfs-export", "2", r#"{"pseudo":"/b"}"#, Some(rev1)).await.unwrap();
    assert_eq!(s.gateway_objects("nfs-export").await.unwrap().0.len(), 2);

    s.delete_gateway_object("nfs-export", "1").await.unwrap();
    match s.delete_gateway_object("nfs-export", "1").await {
        Err(ConfigError::NotFound(m)) => assert!(m.contains("nfs-export 1"), "{m}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let names: Vec<_> =
        s.gateway_objects("nfs-export").await.unwrap().0.into_iter().map(|o| o.0).collect();
    assert_eq!(names, ["2"]);
    assert!(s.put_gateway_object("nfs-export", "a/b", "{}", None).await.is_err());
}
