//! LIO's state as Cairn sees it: the wanted one ([`desired`]) and the running one
//! ([`parse_saveconfig`]).

use super::checks::parse_portal;
use super::documents::{IscsiLun, IscsiTarget};
use crate::error::{invalid, Error};
use std::collections::{BTreeMap, BTreeSet};

/// A `user:cairn` storage object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct So {
    pub size: u64,
    /// Config string as LIO holds it (`cairn/...`).
    pub config: String,
    pub wwn: String,
    /// ALUA target port groups other than `default_tg_pt_gp`: name -> tag.
    pub alua: BTreeMap<String, u16>,
}

/// An initiator ACL of a TPG.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclState {
    pub userid: String,
    pub password: String,
    pub mapped: BTreeSet<u16>,
}

/// An iSCSI target with its TPG 1.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tgt {
    pub portals: BTreeSet<(String, u16)>,
    /// LUN number -> (storage object as `user:cairn/NAME` or `PLUGIN/NAME`, ALUA group).
    pub luns: BTreeMap<u16, (String, String)>,
    pub acls: BTreeMap<String, AclState>,
    /// The TPG attributes Cairn sets.
    pub attrs: BTreeMap<String, u32>,
    pub enabled: bool,
}

/// The part of LIO's configuration Cairn looks at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lio {
    /// `user:cairn` storage objects by name.
    pub sos: BTreeMap<String, So>,
    /// iSCSI targets by IQN.
    pub targets: BTreeMap<String, Tgt>,
}

const TPG_ATTRS: &[&str] =
    &["authentication", "generate_node_acls", "demo_mode_write_protect", "cache_dynamic_acls"];

fn so_ref(name: &str) -> String {
    format!("user:cairn/{name}")
}

/// Name of the ALUA target port group of the gateway with tag `tag`.
pub fn alua_group(tag: u16) -> String {
    format!("gw{tag}")
}

/// The LIO state every gateway should have for these LUNs and targets. `servers`: the
/// cairnd `host:port`s the handler mounts from; `alua_tag`: this gateway's ALUA group tag
/// (1, 2, ... one per gateway). LUNs no target maps are still created (ready to map).
pub fn desired(
    luns: &[IscsiLun],
    targets: &[IscsiTarget],
    servers: &[String],
    alua_tag: u16,
) -> Result<Lio, Error> {
    let group = alua_group(alua_tag);
    let mut lio = Lio::default();
    for l in luns.iter().filter(|l| !l.deleting) {
        lio.sos.insert(
            l.name.clone(),
            So {
                size: l.size,
                config: format!("cairn/{}", l.cfgstring(servers)?),
                wwn: l.wwn.clone(),
                alua: BTreeMap::from([(group.clone(), alua_tag)]),
            },
        );
    }
    for t in targets {
        let mut tg = Tgt { enabled: true, ..Default::default() };
        for p in &t.portals {
            tg.portals.insert(parse_portal(p)?);
        }
        for m in &t.luns {
            if !lio.sos.contains_key(&m.name) {
                let why = if luns.iter().any(|l| l.name == m.name) {
                    "which is being deleted"
                } else {
                    "which does not exist"
                };
                return Err(invalid(format!("target {} maps LUN {}, {why}", t.iqn, m.name)));
            }
            tg.luns.insert(m.lun, (so_ref(&m.name), group.clone()));
        }
        let chap = t.acls.iter().any(|a| a.chap_user.is_some());
        if !t.open {
            for a in &t.acls {
                tg.acls.insert(
                    a.initiator.clone(),
                    AclState {
                        userid: a.chap_user.clone().unwrap_or_default(),
                        password: a.chap_password.clone().unwrap_or_default(),
                        mapped: tg.luns.keys().copied().collect(),
                    },
                );
            }
        }
        let open = u32::from(t.open);
        for (k, v) in TPG_ATTRS.iter().zip([u32::from(chap && !t.open), open, 0, open]) {
            tg.attrs.insert(k.to_string(), v);
        }
        lio.targets.insert(t.iqn.clone(), tg);
    }
    Ok(lio)
}

/// The running state from `targetcli saveconfig` JSON (rtslib's dump): every `user:cairn`
/// storage object and every iSCSI target.
pub fn parse_saveconfig(text: &str) -> Result<Lio, Error> {
    use serde_json::Value;
    let v: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(text)
            .map_err(|e| invalid(format!("not a targetcli saveconfig file: {e}")))?
    };
    let arr = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut lio = Lio::default();
    for so in arr(&v, "storage_objects") {
        let config = s(&so, "config");
        if s(&so, "plugin") != "user" || !config.starts_with("cairn/") {
            continue;
        }
        let alua = arr(&so, "alua_tpgs")
            .iter()
            .filter(|g| s(g, "name") != "default_tg_pt_gp")
            .map(|g| (s(g, "name"), n(g, "tg_pt_gp_id") as u16))
            .collect();
        lio.sos
            .insert(s(&so, "name"), So { size: n(&so, "size"), config, wwn: s(&so, "wwn"), alua });
    }
    for t in arr(&v, "targets") {
        if s(&t, "fabric") != "iscsi" {
            continue;
        }
        let Some(tpg) = arr(&t, "tpgs").into_iter().find(|g| n(g, "tag") == 1) else {
            lio.targets.insert(s(&t, "wwn"), Tgt::default());
            continue;
        };
        let mut tg = Tgt {
            enabled: tpg.get("enable").and_then(Value::as_bool).unwrap_or(false)
                || n(&tpg, "enable") == 1,
            ..Default::default()
        };
        for p in arr(&tpg, "portals") {
            tg.portals.insert((s(&p, "ip_address"), n(&p, "port") as u16));
        }
        for l in arr(&tpg, "luns") {
            // "/backstores/user/NAME" -> user:cairn/NAME (only cairn's are user: here)
            let path = s(&l, "storage_object");
            let so = match path.strip_prefix("/backstores/user/") {
                Some(name) if lio.sos.contains_key(name) => so_ref(name),
                _ => path.trim_start_matches("/backstores/").to_string(),
            };
            let group = match s(&l, "alua_tg_pt_gp_name") {
                g if g.is_empty() => "default_tg_pt_gp".to_string(),
                g => g,
            };
            tg.luns.insert(n(&l, "index") as u16, (so, group));
        }
        for a in arr(&tpg, "node_acls") {
            let mapped = arr(&a, "mapped_luns").iter().map(|m| n(m, "index") as u16).collect();
            tg.acls.insert(
                s(&a, "node_wwn"),
                AclState { userid: s(&a, "chap_userid"), password: s(&a, "chap_password"), mapped },
            );
        }
        if let Some(attrs) = tpg.get("attributes") {
            for k in TPG_ATTRS {
                if let Some(x) = attrs.get(*k).and_then(Value::as_u64) {
                    tg.attrs.insert(k.to_string(), x as u32);
                }
            }
        }
        lio.targets.insert(s(&t, "wwn"), tg);
    }
    Ok(lio)
}
