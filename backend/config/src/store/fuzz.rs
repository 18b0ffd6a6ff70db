//! Property tests ("fuzzing") of records read back from etcd: whatever bytes a corrupted or
//! hand-edited record holds, reading it gives a record that keeps the rules it was stored
//! under, or an error naming its key; never a panic. Default 1024 cases each (about a
//! second); `PROPTEST_CASES=100000 cargo test -p cairn-config fuzz` for long runs.

use super::check::{check_name, check_volume, decode_value};
use super::*;
use crate::records::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

fn config() -> proptest::test_runner::Config {
    let mut c = proptest::test_runner::Config {
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 1024;
    }
    c
}

const VOL_KEY: &str = "/cairn/volumes/vol0";
const PEER_KEY: &str = "/cairn/peers/n1";

fn volume() -> VolumeRecord {
    let brick = |index, node: &str| BrickRecord { index, node: node.into(), path: "/b".into() };
    VolumeRecord {
        name: "vol0".into(),
        id: "0123456789abcdef0123456789abcdef".into(),
        status: cairn_proto::map::VolumeStatus::Started,
        replica: 2,
        sets: vec![SetRecord { id: 0, bricks: vec![brick(0, "n1"), brick(1, "n2")] }],
        options: BTreeMap::from([("performance.cache-timeout".into(), "1".into())]),
        layout_epoch: 3,
        rebalancing: false,
        layout: vec![],
        reset_bricks: Default::default(),
        removing: None,
        retired: vec![],
    }
}

/// A JSON value to put somewhere in a record.
fn json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{json, Value};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(
            &[
                "",
                "vol0",
                "n1",
                "/b",
                "a/b",
                "zz",
                "0123456789abcdef0123456789abcdef",
                "Started",
                "\0",
                " "
            ][..]
        )
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Replace the value at a random path (objects by key, arrays by index) of `v`.
fn replace(v: &mut serde_json::Value, path: &[usize], with: serde_json::Value) {
    let Some((&i, rest)) = path.split_first() else {
        *v = with;
        return;
    };
    let child = match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            let k = m.keys().nth(i % m.len()).cloned();
            k.and_then(|k| m.get_mut(&k))
        }
        serde_json::Value::Array(a) if !a.is_empty() => {
            let n = a.len();
            a.get_mut(i % n)
        }
        _ => None,
    };
    match child {
        Some(c) => replace(c, rest, with),
        None => *v = with,
    }
}

fn check_read<T: Record>(
    key: &str,
    bytes: &[u8],
    rules: impl Fn(&T) -> Result<(), String>,
) -> Result<Option<T>, TestCaseError> {
    match decode_value::<T>(key.as_bytes(), bytes) {
        Ok(r) => {
            rules(&r).map_err(|e| {
                TestCaseError::fail(format!(
                    "record at {key} read without error but breaks the rules: {e}\n{}",
                    String::from_utf8_lossy(bytes)
                ))
            })?;
            Ok(Some(r))
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(matches!(e, ConfigError::BadRecord { .. }), "{msg}");
            prop_assert!(msg.contains(key), "error does not name the key: {msg}");
            Ok(None)
        }
    }
}

fn volume_rules(key: &str) -> impl Fn(&VolumeRecord) -> Result<(), String> + '_ {
    move |v| {
        check_volume(v).map_err(|e| e.to_string())?;
        if !key.ends_with(&format!("/{}", v.name)) {
            return Err(format!("record names volume {:?}", v.name));
        }
        Ok(())
    }
}

fn peer_rules(key: &str) -> impl Fn(&PeerRecord) -> Result<(), String> + '_ {
    move |p| {
        check_name("peer", &p.name).map_err(|e| e.to_string())?;
        if !key.ends_with(&format!("/{}", p.name)) {
            return Err(format!("record names peer {:?}", p.name));
        }
        Ok(())
    }
}

/// What the fuzzing below found: these hand-edited records were read as if good (the
/// volume's id silently became 0; a record under one name served as another).
#[test]
fn hand_edited_records_name_their_key() {
    let good = encode(&volume());
    assert!(decode_value::<VolumeRecord>(VOL_KEY.as_bytes(), good.as_bytes()).is_ok());
    for (key, bad) in [
        (VOL_KEY, good.replace("0123456789abcdef0123456789abcdef", "not-hex")),
        (VOL_KEY, good.replace("\"path\":\"/b\"", "\"path\":\"b\"")),
        ("/cairn/volumes/other", good.clone()),
    ] {
        let e = decode_value::<VolumeRecord>(key.as_bytes(), bad.as_bytes()).unwrap_err();
        assert!(e.to_string().starts_with(&format!("bad record at {key}: ")), "{e}");
    }
    let peer = r#"{"name":"n 1","addr":"127.0.0.1:7420","uuid":"u"}"#;
    let e = decode_value::<PeerRecord>(PEER_KEY.as_bytes(), peer.as_bytes()).unwrap_err();
    assert!(e.to_string().contains(PEER_KEY), "{e}");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn edited_volume_record(path in prop::collection::vec(any::<usize>(), 0..4), with in json()) {
        let mut v = serde_json::to_value(volume()).unwrap();
        replace(&mut v, &path, with);
        let bytes = serde_json::to_vec(&v).unwrap();
        if let Some(r) = check_read(VOL_KEY, &bytes, volume_rules(VOL_KEY))? {
            let map = build_map(&r, &[], &HashMap::new(), 1);
            prop_assert_eq!(&map.name, &r.name);
            let again: VolumeRecord = decode_value(VOL_KEY.as_bytes(), encode(&r).as_bytes()).unwrap();
            prop_assert_eq!(again, r);
        }
    }

    #[test]
    fn corrupted_volume_record(cuts in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4), truncate in any::<bool>()) {
        let mut bytes = encode(&volume()).into_bytes();
        for (at, b) in cuts {
            let at = at % bytes.len();
            bytes[at] = b;
        }
        if truncate {
            bytes.truncate(bytes.len() / 2);
        }
        if let Some(r) = check_read(VOL_KEY, &bytes, volume_rules(VOL_KEY))? {
            build_map(&r, &[], &HashMap::new(), 1);
        }
    }

    #[test]
    fn edited_peer_record(path in prop::collection::vec(any::<usize>(), 0..2), with in json()) {
        let p = PeerRecord { name: "n1".into(), addr: "127.0.0.1:7420".into(), uuid: "u".into() };
        let mut v = serde_json::to_value(p).unwrap();
        replace(&mut v, &path, with);
        check_read(PEER_KEY, &serde_json::to_vec(&v).unwrap(), peer_rules(PEER_KEY))?;
    }
}

/// Records refused for their content keep the messages they had when the rules returned
/// strings, and carry the typed reason (`RecordError`).
#[test]
fn refused_records_keep_their_messages() {
    fn refused<T: Record + std::fmt::Debug>(key: &str, json: &str) -> (RecordError, String) {
        match decode_value::<T>(key.as_bytes(), json.as_bytes()) {
            Err(ConfigError::BadRecord { key: k, source }) => {
                assert_eq!(k, key);
                let msg = ConfigError::BadRecord { key: k, source }.to_string();
                match decode_value::<T>(key.as_bytes(), json.as_bytes()) {
                    Err(ConfigError::BadRecord { source, .. }) => (source, msg),
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    use crate::{CertRecord, JoinTokenRecord};
    let cert = r#"{"serial":"ab","name":"n","role":"node","issued":1,"expires":2}"#;
    let (e, msg) = refused::<CertRecord>("/cairn/certs/cd", cert);
    assert!(matches!(e, RecordError::NotItsKey { what: "certificate", .. }), "{e:?}");
    assert_eq!(
        msg,
        r#"bad record at /cairn/certs/cd: it names certificate "ab", not the one of its key"#
    );
    let cert = r#"{"serial":"AB","name":"n","role":"node","issued":1,"expires":2}"#;
    let (e, msg) = refused::<CertRecord>("/cairn/certs/AB", cert);
    assert!(matches!(e, RecordError::CertSerial(_)), "{e:?}");
    assert_eq!(
        msg,
        r#"bad record at /cairn/certs/AB: certificate serial "AB" is not lower-case hex"#
    );
    let tok = r#"{"id":"0123456z","hash":"00","created":1,"expires":2}"#;
    let (e, msg) = refused::<JoinTokenRecord>("/cairn/join-tokens/0123456z", tok);
    assert!(matches!(e, RecordError::TokenId(_)), "{e:?}");
    assert_eq!(
        msg,
        r#"bad record at /cairn/join-tokens/0123456z: join token id "0123456z" is not 8 hex digits"#
    );
    let tok = r#"{"id":"01234567","hash":"00","created":1,"expires":2}"#;
    let (e, msg) = refused::<JoinTokenRecord>("/cairn/join-tokens/01234567", tok);
    assert!(matches!(e, RecordError::TokenHash(_)), "{e:?}");
    assert_eq!(
        msg,
        "bad record at /cairn/join-tokens/01234567: join token 01234567: hash is not a SHA-256 in hex"
    );
    let peer = r#"{"name":"a/b","addr":"x:1","uuid":"u"}"#;
    let (e, msg) = refused::<PeerRecord>("/cairn/peers/a/b", peer);
    assert!(matches!(e, RecordError::Invalid(_)), "{e:?}");
    assert!(
        msg.starts_with(r#"bad record at /cairn/peers/a/b: invalid peer name "a/b": must be"#),
        "{msg}"
    );
    let (e, msg) = refused::<PeerRecord>("/cairn/peers/x", "{");
    assert!(matches!(e, RecordError::Json(_)), "{e:?}");
    assert!(msg.starts_with("bad record at /cairn/peers/x: EOF"), "{msg}");
}
