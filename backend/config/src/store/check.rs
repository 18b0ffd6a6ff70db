//! Records read back from etcd are held to the rules they were stored under; names that
//! become key components are checked before any write.

use super::*;
use crate::records::*;
use etcd_client::KeyValue;
use std::collections::HashMap;

pub(crate) fn decode<T: Record>(kv: &KeyValue) -> Result<T, ConfigError> {
    decode_value(kv.key(), kv.value())
}

/// A record as read back from `key`: parsed, then held to the rules it was stored under
/// (a corrupted or hand-edited record is an error naming its key, never data the rest of
/// the cluster trips over).
pub(super) fn decode_value<T: Record>(key: &[u8], value: &[u8]) -> Result<T, ConfigError> {
    let key = String::from_utf8_lossy(key).into_owned();
    let r: T = match serde_json::from_slice(value) {
        Ok(r) => r,
        Err(e) => return Err(ConfigError::BadRecord { key, source: e.into() }),
    };
    match r.check(&key) {
        Ok(()) => Ok(r),
        Err(source) => Err(ConfigError::BadRecord { key, source }),
    }
}

/// What a stored record must hold; `key` is where it was read from.
pub(crate) trait Record: serde::de::DeserializeOwned {
    fn check(&self, key: &str) -> Result<(), RecordError>;
}

/// The record's name is the last component of its key.
pub(crate) fn named_at(what: &'static str, name: &str, key: &str) -> Result<(), RecordError> {
    match key.rsplit_once('/') {
        Some((_, last)) if last == name => Ok(()),
        _ => Err(RecordError::NotItsKey { what, name: name.to_string() }),
    }
}

impl Record for PeerRecord {
    fn check(&self, key: &str) -> Result<(), RecordError> {
        check_name("peer", &self.name)?;
        named_at("peer", &self.name, key)
    }
}

impl Record for VolumeRecord {
    fn check(&self, key: &str) -> Result<(), RecordError> {
        check_volume(self)?;
        named_at("volume", &self.name, key)
    }
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> String {
    // Records are plain data (strings, integers, maps with string keys): cannot fail.
    serde_json::to_string(v).expect("config records always serialize")
}

/// Peer, node and volume names become key components: keep them boring.
pub(super) fn check_name(what: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty()
        || name.len() > 255
        || name.chars().any(|c| c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::Invalid(format!(
            "invalid {what} name {name:?}: must be 1-255 characters without '/' or whitespace"
        )));
    }
    Ok(())
}

pub(super) fn check_volume(v: &VolumeRecord) -> Result<(), ConfigError> {
    check_name("volume", &v.name)?;
    if v.id.len() != 32 || u128::from_str_radix(&v.id, 16).is_err() {
        return Err(ConfigError::Invalid(format!(
            "volume {}: id {:?} is not 32 hex digits",
            v.name, v.id
        )));
    }
    let mut indices = HashMap::new();
    let mut places = HashMap::new();
    for b in v.sets.iter().flat_map(|s| &s.bricks) {
        check_name("node", &b.node).map_err(|e| {
            ConfigError::Invalid(format!("volume {}: brick {}: {e}", v.name, b.index))
        })?;
        if !b.path.starts_with('/') {
            return Err(ConfigError::Invalid(format!(
                "volume {}: brick {}:{} path is not absolute",
                v.name, b.node, b.path
            )));
        }
        if indices.insert(b.index, ()).is_some() {
            return Err(ConfigError::Invalid(format!(
                "volume {}: brick index {} used twice",
                v.name, b.index
            )));
        }
        if places.insert((b.node.as_str(), b.path.as_str()), ()).is_some() {
            return Err(ConfigError::Invalid(format!(
                "volume {}: brick {}:{} listed twice",
                v.name, b.node, b.path
            )));
        }
    }
    Ok(())
}
