//! Join tokens against a real etcd: single use (also under a race), expiry, revocation,
//! and that only a hash is stored.

use cairn_config::testing::Etcd;
use cairn_config::{consume_join_token, JoinTokenError, Store};
use std::time::Duration;

async fn store(etcd: &Etcd) -> Store {
    Store::connect(&etcd.endpoints(), "/cairn").await.expect("connect to test etcd")
}

#[tokio::test]
async fn tokens_are_single_use_expiring_and_revocable() {
    let etcd = Etcd::start();
    let s = store(&etcd).await;

    let (token, rec) = s.create_join_token(Duration::from_secs(3600)).await.unwrap();
    assert!(token.starts_with(&format!("{}.", rec.id)), "{token}");
    assert!(!rec.hash.contains(token.split_once('.').unwrap().1));

    // A wrong secret for a real id, and a malformed token, are refused without using it.
    let wrong = format!("{}.{}", rec.id, "0".repeat(32));
    assert!(matches!(
        consume_join_token(&s, &wrong, "x").await,
        Err(JoinTokenError::Invalid { .. })
    ));
    assert!(matches!(
        consume_join_token(&s, "nonsense", "x").await,
        Err(JoinTokenError::Malformed)
    ));

    // Two joins race with one token: exactly one wins, the other is told it was used.
    let (a, b) = tokio::join!(
        consume_join_token(&s, &token, "n2 at 10.0.0.2:7420"),
        consume_join_token(&s, &token, "n3 at 10.0.0.3:7420")
    );
    let (ok, used) = match (a, b) {
        (Ok(g), Err(e)) | (Err(e), Ok(g)) => (g, e),
        other => panic!("expected one winner: {other:?}"),
    };
    assert_eq!(ok.token_id, rec.id);
    let msg = used.to_string();
    assert!(matches!(used, JoinTokenError::Used { .. }), "{msg}");
    assert!(msg.contains("already used") && msg.contains(&ok.by), "{msg}");
    let listed = s.join_tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].used_by.as_deref(), Some(ok.by.as_str()));

    // Revoked.
    let (t2, r2) = s.create_join_token(Duration::from_secs(60)).await.unwrap();
    s.revoke_join_token(&r2.id).await.unwrap();
    let e = consume_join_token(&s, &t2, "n4").await.unwrap_err();
    assert!(
        matches!(e, JoinTokenError::Revoked { .. }) && e.to_string().contains("revoked"),
        "{e}"
    );
    assert!(s.revoke_join_token("0badf00d").await.is_err());

    // Expired.
    let (t3, _) = s.create_join_token(Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let e = consume_join_token(&s, &t3, "n5").await.unwrap_err();
    assert!(
        matches!(e, JoinTokenError::Expired { .. }) && e.to_string().contains("expired"),
        "{e}"
    );

    // Lifetimes out of range are refused.
    assert!(s.create_join_token(Duration::ZERO).await.is_err());
    assert!(s.create_join_token(Duration::from_secs(8 * 24 * 3600)).await.is_err());

    // The store holds no secret: nothing under the prefix contains one.
    let dump = etcd_dump(&etcd).await;
    for t in [&token, &t2, &t3] {
        let secret = t.split_once('.').unwrap().1;
        assert!(!dump.contains(secret), "secret of {t} stored in etcd");
    }
}

async fn etcd_dump(etcd: &Etcd) -> String {
    let mut c = etcd_client::Client::connect(etcd.endpoints(), None).await.unwrap();
    let r = c.get("/", Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    r.kvs()
        .iter()
        .map(|kv| format!("{}={}\n", kv.key_str().unwrap(), kv.value_str().unwrap()))
        .collect()
}
