//! Certificate records against a real etcd: recorded once, listed, revoked by serial or by
//! name, and the revoked serials every node reads.

use cairn_config::testing::Etcd;
use cairn_config::{CertRecord, Store};

fn rec(serial: &str, name: &str) -> CertRecord {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    CertRecord {
        serial: serial.into(),
        name: name.into(),
        role: "client".into(),
        volumes: Some(vec!["www".into()]),
        read_only: true,
        issued: now,
        expires: now + 86400,
        revoked_at: None,
        revoked_by: None,
    }
}

#[tokio::test]
async fn certificates_are_recorded_listed_and_revoked() {
    let etcd = Etcd::start();
    let s = Store::connect(&etcd.endpoints(), "/cairn").await.expect("connect to test etcd");
    s.record_cert(&rec("0a01", "web1")).await.unwrap();
    s.record_cert(&rec("0a02", "web1")).await.unwrap();
    s.record_cert(&rec("0b01", "backup")).await.unwrap();
    // Recording again changes nothing.
    s.record_cert(&rec("0a01", "other")).await.unwrap();
    let all = s.certs().await.unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all.iter().any(|r| r.serial == "0a01" && r.name == "web1"));
    assert!(s.revoked_serials().await.unwrap().is_empty());
    assert!(s.record_cert(&rec("XYZ", "bad")).await.is_err());

    // By name: every certificate of the holder.
    let r = s.revoke_cert("web1", "admin(admin)").await.unwrap();
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(r.iter().all(|r| r.revoked_by.as_deref() == Some("admin(admin)")));
    // By serial (with colons and upper case, as openssl prints it).
    let r = s.revoke_cert("0B:01", "admin").await.unwrap();
    assert_eq!(r.len(), 1);
    let set = s.revoked_serials().await.unwrap();
    assert_eq!(set.len(), 3, "{set:?}");
    // A serial never recorded is revoked all the same; an unknown name is an error.
    s.revoke_cert("ff00ff", "admin").await.unwrap();
    assert!(s.revoked_serials().await.unwrap().contains("ff00ff"));
    assert!(s.revoke_cert("nobody", "admin").await.is_err());
    // A revoked certificate stays revoked when its holder records it again.
    s.record_cert(&rec("0a01", "web1")).await.unwrap();
    assert!(s.revoked_serials().await.unwrap().contains("0a01"));
}
