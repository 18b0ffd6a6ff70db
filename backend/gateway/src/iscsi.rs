//! iSCSI LUNs and targets: the documents kept in the config store, their checks, the LIO
//! configuration they stand for, and the targetcli-fb commands that bring a gateway's LIO
//! to it.
//!
//! A LUN ([`IscsiLun`], kind [`crate::ISCSI_LUN`]) is a regular file on a volume, exported
//! as a `user:cairn` storage object (tcmu-runner + handler_cairn); a target
//! ([`IscsiTarget`], kind [`crate::ISCSI_TARGET`]) is an IQN with one TPG: its portals, the
//! LUNs it maps, and who may log in (initiator ACLs with optional CHAP, or any initiator).
//! Every gateway exports every target, with the same storage object WWNs (so multipath
//! sees one device behind every gateway) and, per LUN, an ALUA target port group of its
//! own (`gwN`, tag N: one group per gateway, all active/optimized, as the backend has no
//! owner and COMPARE AND WRITE is atomic on the bricks).
//!
//! Applying is a difference, not a reload: [`desired`] builds the wanted [`Lio`] state,
//! [`parse_saveconfig`] reads the running one from `targetcli saveconfig` output, and
//! [`plan`] lists the targetcli commands from one to the other, so targets and LUNs that
//! did not change keep their sessions. (`targetcli restoreconfig` would need
//! `clear_existing`, dropping every session of every target on any change, and would
//! also wipe targets Cairn does not manage.)

use cairn_proto::{HostPort, Size};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One LUN, as stored (named by its name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IscsiLun {
    pub name: String,
    pub volume: String,
    /// Backing file from the volume root, without a leading `/` (`luns/NAME.img`).
    pub path: String,
    /// Bytes; a multiple of 512.
    pub size: u64,
    /// Created sparse (no blocks allocated) rather than fallocated.
    pub thin: bool,
    /// Unit serial number LIO reports (VPD 0x80/0x83): the same on every gateway.
    pub wwn: String,
    /// `cairn iscsi lun delete` ran: no gateway creates it any more, each one's sync takes
    /// it out of LIO, and the backing file and this record go once no [`GatewayRecord`]
    /// lists it ([`deletable`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
}

/// What one gateway's LIO holds, stored by each `cairn iscsi sync` (kind
/// [`crate::ISCSI_GATEWAY`], named by the gateway): the `user:cairn` storage objects read
/// back after applying. A LUN being deleted keeps its backing file while any record lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayRecord {
    pub gateway: String,
    /// Names of the `user:cairn` storage objects in this gateway's LIO.
    pub luns: BTreeSet<String>,
}

/// The gateways whose LIO still holds LUN `name`.
pub fn holders<'a>(name: &str, gateways: &'a [GatewayRecord]) -> Vec<&'a str> {
    gateways.iter().filter(|g| g.luns.contains(name)).map(|g| g.gateway.as_str()).collect()
}

/// The LUNs being deleted that no gateway holds any more: their backing files (and
/// records) can go.
pub fn deletable<'a>(luns: &'a [IscsiLun], gateways: &[GatewayRecord]) -> Vec<&'a IscsiLun> {
    luns.iter().filter(|l| l.deleting && holders(&l.name, gateways).is_empty()).collect()
}

/// An initiator allowed to log in to a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acl {
    pub initiator: String,
    /// CHAP credentials the initiator must present (both or neither).
    pub chap_user: Option<String>,
    pub chap_password: Option<String>,
}

/// A LUN mapped in a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetLun {
    /// LUN number initiators see.
    pub lun: u16,
    /// The [`IscsiLun`]'s name.
    pub name: String,
}

/// One target, as stored (named by its IQN).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IscsiTarget {
    pub iqn: String,
    /// `IP:PORT` (IPv6 as `[ADDR]:PORT`) every gateway listens on; `0.0.0.0:3260` = all
    /// addresses.
    pub portals: Vec<String>,
    pub luns: Vec<TargetLun>,
    pub acls: Vec<Acl>,
    /// Any initiator may log in (LIO's demo mode: generate_node_acls=1); the ACLs are then
    /// ignored.
    pub open: bool,
}

/// Default iSCSI port.
pub const ISCSI_PORT: u16 = 3260;

/// A LUN name: 1 to 64 of `A-Z a-z 0-9 _ -`, starting with a letter or digit (it names the
/// storage object and the default backing file).
pub fn check_lun_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("invalid LUN name '{name}': {why}"));
    if name.is_empty() || name.len() > 64 {
        return bad("must be 1 to 64 characters");
    }
    if let Some(c) = name.chars().find(|c| !c.is_ascii_alphanumeric() && *c != '_' && *c != '-') {
        return bad(&format!("'{c}' is not allowed (A-Z a-z 0-9 _ -)"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("must start with a letter or digit");
    }
    Ok(())
}

/// An iSCSI name (RFC 3720 3.2.6): `iqn.YYYY-MM.reversed.domain[:anything]`,
/// `eui.` + 16 hex digits, or `naa.` + 16 or 32 hex digits. `what` names it in messages
/// ("target IQN", "initiator name").
pub fn check_iqn(iqn: &str, what: &str) -> Result<(), String> {
    let bad = |why: String| Err(format!("invalid {what} '{iqn}': {why}"));
    if iqn.len() > 223 {
        return bad("longer than 223 bytes".into());
    }
    let hex =
        |s: &str, n: &[usize]| n.contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit());
    if let Some(h) = iqn.strip_prefix("eui.") {
        return if hex(h, &[16]) {
            Ok(())
        } else {
            bad("eui. must be followed by 16 hex digits".into())
        };
    }
    if let Some(h) = iqn.strip_prefix("naa.") {
        return if hex(h, &[16, 32]) {
            Ok(())
        } else {
            bad("naa. must be followed by 16 or 32 hex digits".into())
        };
    }
    let Some(rest) = iqn.strip_prefix("iqn.") else {
        return bad(
            "must start with iqn., eui. or naa. (e.g. iqn.2024-01.com.example:disk1)".into()
        );
    };
    if let Some(c) =
        iqn.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || ".-:".contains(*c)))
    {
        return bad(format!(
            "'{c}' is not allowed (iSCSI names are lowercase letters, digits, '.', '-' and ':')"
        ));
    }
    let (date, authority) = rest.split_once('.').unwrap_or((rest, ""));
    let ok_date = date.len() == 7
        && date.as_bytes()[4] == b'-'
        && date[..4].chars().all(|c| c.is_ascii_digit())
        && matches!(date[5..].parse::<u8>(), Ok(1..=12));
    if !ok_date {
        return bad(format!("date '{date}' after iqn. must be YYYY-MM"));
    }
    let domain = authority.split(':').next().unwrap_or("");
    if domain.is_empty() || domain.split('.').any(str::is_empty) {
        return bad(
            "no naming authority after the date (a reversed domain name, e.g. com.example)".into(),
        );
    }
    Ok(())
}

/// A LUN size: a [`Size`] (bytes, or a number with a K, M, G, T or P suffix, powers of
/// 1024 like targetcli), at least 1 MiB, at most 1 EiB and a multiple of 512.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = |why: &str| Err(format!("invalid size '{s}': {why}"));
    let bytes = s.parse::<Size>().map_err(|e| e.to_string())?.bytes();
    if bytes > 1 << 60 {
        return bad("too large (at most 1 EiB)");
    }
    if bytes < 1 << 20 {
        return bad("a LUN is at least 1M");
    }
    if !bytes.is_multiple_of(512) {
        return bad("must be a multiple of 512 bytes (the block size)");
    }
    Ok(bytes)
}

/// Human-readable size, exact: `10G`, `1536M`, `1048576` ([`Size`]'s spelling).
pub fn format_size(b: u64) -> String {
    Size(b).to_string()
}

/// A backing file path inside the volume: relative, no empty, `.` or `..` components, and
/// nothing LIO's config string cannot carry (`,` `:` whitespace, control characters).
/// Returns it without leading slashes.
pub fn check_path(p: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("invalid backing file path '{p}': {why}"));
    let t = p.trim_start_matches('/');
    if t.is_empty() || t.ends_with('/') {
        return bad("it must name a file inside the volume");
    }
    if t.len() > 1024 {
        return bad("longer than 1024 bytes");
    }
    if t.split('/').any(|c| c.is_empty() || c == "." || c == ".." || c.len() > 255) {
        return bad("components must be non-empty, not . or .., at most 255 bytes");
    }
    if let Some(c) = t.chars().find(|c| c.is_control() || c.is_whitespace() || ",:\"'".contains(*c))
    {
        return bad(&format!("{c:?} cannot be carried in LIO's config string"));
    }
    Ok(t.to_string())
}

/// A portal: `IP[:PORT]` or `[IPv6][:PORT]` (a [`HostPort`] whose host is an IP address),
/// port 3260 by default. Returns (ip, port).
pub fn parse_portal(p: &str) -> Result<(String, u16), String> {
    let hp =
        HostPort::parse(p, ISCSI_PORT).map_err(|e| format!("invalid portal '{p}': {}", e.why))?;
    match hp.ip() {
        Some(ip) => Ok((ip.to_string(), hp.port())),
        None => Err(format!(
            "invalid portal '{p}': expected IP[:PORT] or [IPv6][:PORT] (e.g. 0.0.0.0:3260, \
             10.0.0.5)"
        )),
    }
}

/// Canonical spelling of a portal (`IP:PORT`, `[IPv6]:PORT`).
pub fn portal_string(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// CHAP user name or secret: 1 to 255 printable ASCII characters without whitespace,
/// quotes, `=` or `\` (targetcli parses `key=value`).
pub fn check_chap(what: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > 255 {
        return Err(format!("invalid CHAP {what}: must be 1 to 255 characters"));
    }
    if v.chars().any(|c| !c.is_ascii_graphic() || "\"'=\\".contains(c)) {
        return Err(format!(
            "invalid CHAP {what}: printable ASCII only, no whitespace, quotes, '=' or '\\'"
        ));
    }
    Ok(())
}

impl IscsiLun {
    pub fn validate(&self) -> Result<(), String> {
        check_lun_name(&self.name)?;
        crate::split_volume_path(&self.volume)?;
        if self.volume.contains('/') {
            return Err(format!("invalid volume name '{}'", self.volume));
        }
        // the handler's config string cannot start with '-' (iscsi/cairn_cfg.h)
        if self.volume.starts_with('-') {
            return Err(format!(
                "volume '{}': the iSCSI handler takes no volume name starting with '-'",
                self.volume
            ));
        }
        if check_path(&self.path)? != self.path {
            return Err(format!("backing file path '{}' must not start with '/'", self.path));
        }
        parse_size(&self.size.to_string())?;
        if self.wwn.is_empty() || !self.wwn.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(format!("invalid WWN '{}'", self.wwn));
        }
        Ok(())
    }

    /// The handler's config string (without the `cairn/` prefix targetcli adds), in LIO's
    /// spelling: `VOLUME@HOST~PORT+HOST~PORT/PATH` (iscsi/cairn_cfg.h).
    pub fn cfgstring(&self, servers: &[String]) -> Result<String, String> {
        let mut lio = vec![];
        for s in servers {
            if s.starts_with('[') || s.matches(':').count() > 1 {
                return Err(format!(
                    "server {s}: LIO's config string cannot carry IPv6 addresses; give the \
                     nodes host names or IPv4 addresses"
                ));
            }
            lio.push(s.replace(':', "~"));
        }
        if lio.is_empty() {
            return Err("no servers for the config string".into());
        }
        Ok(format!("{}@{}/{}", self.volume, lio.join("+"), self.path))
    }
}

impl IscsiTarget {
    pub fn validate(&self) -> Result<(), String> {
        check_iqn(&self.iqn, "target IQN")?;
        let mut seen = BTreeSet::new();
        for p in &self.portals {
            if !seen.insert(parse_portal(p)?) {
                return Err(format!("portal {p} is listed twice"));
            }
        }
        let mut nums = BTreeSet::new();
        let mut names = BTreeSet::new();
        for l in &self.luns {
            check_lun_name(&l.name)?;
            if l.lun > 255 {
                return Err(format!("LUN number {} is out of range 0-255", l.lun));
            }
            if !nums.insert(l.lun) {
                return Err(format!("LUN number {} is used twice", l.lun));
            }
            if !names.insert(&l.name) {
                return Err(format!("LUN {} is mapped twice", l.name));
            }
        }
        let mut inits = BTreeSet::new();
        for a in &self.acls {
            check_iqn(&a.initiator, "initiator name")?;
            if !inits.insert(&a.initiator) {
                return Err(format!("initiator {} is listed twice", a.initiator));
            }
            match (&a.chap_user, &a.chap_password) {
                (Some(u), Some(p)) => {
                    check_chap("user", u)?;
                    check_chap("password", p)?;
                }
                (None, None) => {}
                _ => return Err("CHAP needs both a user and a password".into()),
            }
        }
        let with_chap = self.acls.iter().filter(|a| a.chap_user.is_some()).count();
        if with_chap != 0 && with_chap != self.acls.len() {
            return Err(format!(
                "target {}: either every ACL has CHAP credentials or none (LIO turns \
                 authentication on for the whole portal group)",
                self.iqn
            ));
        }
        Ok(())
    }
}

// ---- LIO state and the commands between two states ----

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
) -> Result<Lio, String> {
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
                return Err(format!("target {} maps LUN {}, {why}", t.iqn, m.name));
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
pub fn parse_saveconfig(text: &str) -> Result<Lio, String> {
    use serde_json::Value;
    let v: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(text).map_err(|e| format!("not a targetcli saveconfig file: {e}"))?
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

/// The targetcli commands that take LIO from `cur` to `want`, in an order targetcli
/// accepts. Only Cairn's objects are touched: `user:cairn` storage objects, targets in
/// `want`, and targets that `managed` lists (applied earlier) or that map a Cairn LUN.
/// Expects targetcli preferences `auto_add_default_portal=false`,
/// `auto_add_mapped_luns=true`, `auto_enable_tpgt=true` ([`TARGETCLI_PREFS`]).
pub fn plan(cur: &Lio, want: &Lio, managed: &BTreeSet<String>) -> Vec<String> {
    let mut cmds = vec![];
    // Storage objects that must be (re)created: deleting one also unmaps it everywhere.
    let recreate: BTreeSet<&String> = want
        .sos
        .iter()
        .filter(|(n, so)| {
            cur.sos
                .get(*n)
                .map(|c| c.size != so.size || c.config != so.config || c.wwn != so.wwn)
                .unwrap_or(true)
        })
        .map(|(n, _)| n)
        .collect();
    let stale = |so: &str| {
        so.strip_prefix("user:cairn/").is_some_and(|n| recreate.contains(&n.to_string()))
    };

    // 1. targets that are ours and no longer wanted; unwanted parts of wanted ones
    for (iqn, t) in &cur.targets {
        if want.targets.contains_key(iqn) {
            continue;
        }
        let ours =
            managed.contains(iqn) || t.luns.values().any(|(so, _)| so.starts_with("user:cairn/"));
        if ours {
            cmds.push(format!("/iscsi delete {iqn}"));
        }
    }
    for (iqn, w) in &want.targets {
        let Some(c) = cur.targets.get(iqn) else { continue };
        let tpg = format!("/iscsi/{iqn}/tpg1");
        for (n, l) in &c.luns {
            if w.luns.get(n).map(|x| &x.0) != Some(&l.0) && !stale(&l.0) {
                cmds.push(format!("{tpg}/luns delete lun={n}"));
            }
        }
        for a in c.acls.keys() {
            if !w.acls.contains_key(a) {
                cmds.push(format!("{tpg}/acls delete {a}"));
            }
        }
        for (ip, port) in &c.portals {
            if !w.portals.contains(&(ip.clone(), *port)) {
                cmds.push(format!("{tpg}/portals delete {ip} {port}"));
            }
        }
    }
    // 2. storage objects
    for name in cur.sos.keys() {
        if !want.sos.contains_key(name) || recreate.contains(name) {
            cmds.push(format!("/backstores/user:cairn delete {name}"));
        }
    }
    for (name, so) in &want.sos {
        let fresh = recreate.contains(name);
        if fresh {
            cmds.push(format!(
                "/backstores/user:cairn create name={name} size={} cfgstring={} wwn={}",
                so.size,
                so.config.trim_start_matches("cairn/"),
                so.wwn
            ));
        }
        let have = if fresh { BTreeMap::new() } else { cur.sos[name].alua.clone() };
        for (g, tag) in &have {
            if so.alua.get(g) != Some(tag) {
                cmds.push(format!("/backstores/user:cairn/{name}/alua delete {g}"));
            }
        }
        for (g, tag) in &so.alua {
            if have.get(g) != Some(tag) {
                cmds.push(format!("/backstores/user:cairn/{name}/alua create name={g} tag={tag}"));
                cmds.push(format!(
                    "/backstores/user:cairn/{name}/alua/{g} set alua alua_access_type=1 \
                     alua_access_state=0"
                ));
            }
        }
    }
    // 3. targets: create, then portals, LUNs, ACLs (which map every LUN), attributes
    for (iqn, w) in &want.targets {
        let tpg = format!("/iscsi/{iqn}/tpg1");
        let empty = Tgt::default();
        let c = match cur.targets.get(iqn) {
            Some(c) => c,
            None => {
                cmds.push(format!("/iscsi create {iqn}"));
                &empty
            }
        };
        for (ip, port) in &w.portals {
            if !c.portals.contains(&(ip.clone(), *port)) {
                cmds.push(format!("{tpg}/portals create {ip} {port}"));
            }
        }
        let mut created = BTreeSet::new();
        for (n, (so, group)) in &w.luns {
            let have = c.luns.get(n).filter(|l| &l.0 == so && !stale(so));
            if have.is_none() {
                created.insert(*n);
                cmds.push(format!("{tpg}/luns create /backstores/{so} lun={n}"));
            }
            if have.map(|l| &l.1) != Some(group) {
                cmds.push(format!("{tpg}/luns/lun{n} set alua alua_tg_pt_gp_name={group}"));
            }
        }
        for (init, a) in &w.acls {
            let acl = format!("{tpg}/acls/{init}");
            // targetcli cannot clear CHAP credentials: an ACL losing them is made again
            let have = c.acls.get(init).filter(|h| h.userid.is_empty() || !a.userid.is_empty());
            match have {
                None => {
                    if c.acls.contains_key(init) {
                        cmds.push(format!("{tpg}/acls delete {init}"));
                    }
                    cmds.push(format!("{tpg}/acls create {init}"));
                }
                Some(h) => {
                    for n in a.mapped.difference(&h.mapped) {
                        if !created.contains(n) {
                            cmds.push(format!(
                                "{acl} create mapped_lun={n} tpg_lun_or_backstore={n}"
                            ));
                        }
                    }
                }
            }
            let (u, p) = have.map(|h| (h.userid.as_str(), h.password.as_str())).unwrap_or(("", ""));
            if !a.userid.is_empty() && (u, p) != (a.userid.as_str(), a.password.as_str()) {
                cmds.push(format!("{acl} set auth userid={} password={}", a.userid, a.password));
            }
        }
        let changed: Vec<String> = w
            .attrs
            .iter()
            .filter(|(k, v)| c.attrs.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !changed.is_empty() {
            cmds.push(format!("{tpg} set attribute {}", changed.join(" ")));
        }
        if cur.targets.contains_key(iqn) && !c.enabled {
            cmds.push(format!("{tpg} enable"));
        }
    }
    cmds
}

/// targetcli preferences [`plan`] relies on, set first in every batch (targetcli runs with
/// its own `TARGETCLI_HOME`, so the administrator's preferences are untouched).
pub const TARGETCLI_PREFS: &str = "set global auto_add_default_portal=false \
auto_add_mapped_luns=true auto_enable_tpgt=true auto_cd_after_create=false \
auto_save_on_exit=false";

/// Hide a CHAP password in a command shown to people.
pub fn redact(cmd: &str) -> String {
    match cmd.find(" password=") {
        Some(i) if !cmd[i..].starts_with(" password=NULL") => {
            let rest = &cmd[i + 10..];
            let end = rest.find(' ').unwrap_or(rest.len());
            format!("{} password=********{}", &cmd[..i], &rest[end..])
        }
        _ => cmd.to_string(),
    }
}

/// A gateway's targetcli-fb: the program and the private `TARGETCLI_HOME` it runs with.
pub struct Targetcli {
    pub program: std::path::PathBuf,
    /// This gateway's Cairn iSCSI directory: targetcli's preferences (`targetcli/`), the
    /// last read state (`running.json`) and the targets applied last (`applied.json`).
    pub conf_dir: std::path::PathBuf,
}

impl Targetcli {
    fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.program);
        c.env("TARGETCLI_HOME", self.conf_dir.join("targetcli"));
        c
    }

    fn running_file(&self) -> std::path::PathBuf {
        self.conf_dir.join("running.json")
    }

    /// LIO's running configuration, through `targetcli saveconfig` into a file of ours.
    pub fn read(&self) -> Result<Lio, String> {
        let _ = std::fs::remove_file(self.running_file());
        let out = self
            .command()
            .arg(format!("saveconfig savefile={}", self.running_file().display()))
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        self.read_saved(&format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// The configuration the last [`Targetcli::run`] saved when it finished (what it left
    /// LIO with: no second targetcli start, which takes seconds). `said`: targetcli's
    /// output, for the error.
    pub fn read_saved(&self, said: &str) -> Result<Lio, String> {
        let text = std::fs::read_to_string(self.running_file())
            .map_err(|_| format!("targetcli could not read LIO's configuration: {said}"))?;
        parse_saveconfig(&text)
    }

    /// Run `cmds` in one targetcli process (commands on stdin: one start-up, which takes
    /// seconds), after [`TARGETCLI_PREFS`] and followed by `saveconfig` (LIO's own
    /// configuration survives a reboot) and by a `saveconfig` into our `running.json`.
    /// targetcli goes on after a failed command, so the caller checks the outcome by
    /// reading that state ([`Targetcli::read_saved`]). Returns targetcli's output.
    pub fn run(&self, cmds: &[String]) -> Result<String, String> {
        use std::io::Write;
        std::fs::create_dir_all(self.conf_dir.join("targetcli"))
            .map_err(|e| format!("cannot create {}: {e}", self.conf_dir.display()))?;
        let _ = std::fs::remove_file(self.running_file());
        let mut child = self
            .command()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        let mut script = format!("{TARGETCLI_PREFS}\n");
        for c in cmds {
            script.push_str(c);
            script.push('\n');
        }
        script.push_str(&format!(
            "/ saveconfig\n/ saveconfig savefile={}\nexit\n",
            self.running_file().display()
        ));
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(script.as_bytes())
            .map_err(|e| format!("cannot talk to targetcli: {e}"))?;
        let out = child.wait_with_output().map_err(|e| format!("targetcli: {e}"))?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    fn applied_file(&self) -> std::path::PathBuf {
        self.conf_dir.join("applied.json")
    }

    /// Targets this gateway applied last (so a target deleted from the store is removed
    /// even when it maps no LUN any more).
    pub fn applied(&self) -> BTreeSet<String> {
        std::fs::read_to_string(self.applied_file())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    pub fn set_applied(&self, iqns: &BTreeSet<String>) -> Result<(), String> {
        let text = serde_json::to_string(iqns).expect("strings serialize");
        crate::write_atomic(&self.applied_file(), &text)
            .map_err(|e| format!("cannot write {}: {e}", self.applied_file().display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lun(name: &str) -> IscsiLun {
        IscsiLun {
            name: name.into(),
            volume: "vol0".into(),
            path: format!("luns/{name}.img"),
            size: 10 << 30,
            thin: true,
            wwn: "0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f".into(),
            deleting: false,
        }
    }

    fn gw(name: &str, luns: &[&str]) -> GatewayRecord {
        GatewayRecord { gateway: name.into(), luns: luns.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn deleting_luns_leave_lio_and_go_when_no_gateway_holds_them() {
        let mut a = lun("a");
        let b = lun("b");
        a.deleting = true;
        // the document of a LUN that is not being deleted is unchanged (older readers)
        assert!(!serde_json::to_string(&b).unwrap().contains("deleting"));
        let back: IscsiLun = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert!(back.deleting);
        // no gateway creates a LUN being deleted
        let want = desired(&[a.clone(), b.clone()], &[], &["h:7420".into()], 1).unwrap();
        assert_eq!(want.sos.keys().collect::<Vec<_>>(), vec!["b"]);
        // and a sync removes it from a LIO that has it
        let mut cur = want.clone();
        cur.sos.insert("a".into(), want.sos["b"].clone());
        assert_eq!(plan(&cur, &want, &BTreeSet::new()), vec!["/backstores/user:cairn delete a"]);
        let luns = [a.clone(), b.clone()];
        // held by two gateways: the file stays until the last one lets go
        let mut gws = vec![gw("gw1", &["a", "b"]), gw("gw2", &["a"])];
        assert_eq!(holders("a", &gws), vec!["gw1", "gw2"]);
        assert!(deletable(&luns, &gws).is_empty());
        gws[0] = gw("gw1", &["b"]);
        assert!(deletable(&luns, &gws).is_empty());
        gws[1] = gw("gw2", &[]);
        assert_eq!(deletable(&luns, &gws), vec![&a]);
        // no gateway at all: at once; a LUN not being deleted never
        assert_eq!(deletable(&luns, &[]), vec![&a]);
        assert!(deletable(std::slice::from_ref(&b), &[]).is_empty());
        // a target may not map a LUN being deleted
        let mut t = target();
        t.luns = vec![TargetLun { lun: 0, name: "a".into() }];
        let e = desired(&luns, &[t], &["h:7420".into()], 1).unwrap_err();
        assert!(e.contains("being deleted"), "{e}");
    }

    fn target() -> IscsiTarget {
        IscsiTarget {
            iqn: "iqn.2024-01.io.cairn:t1".into(),
            portals: vec!["0.0.0.0:3260".into()],
            luns: vec![TargetLun { lun: 0, name: "db".into() }],
            acls: vec![Acl {
                initiator: "iqn.1994-05.com.redhat:client1".into(),
                chap_user: Some("alice".into()),
                chap_password: Some("s3cret-pass12".into()),
            }],
            open: false,
        }
    }

    const SERVERS: &[&str] = &["10.0.0.1:7420", "10.0.0.2:7420"];

    fn servers() -> Vec<String> {
        SERVERS.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_sizes_portals() {
        for ok in [
            "iqn.2024-01.io.cairn:t1",
            "iqn.2003-01.org.linux-iscsi.host.x8664:sn.1",
            "eui.02004567a425678d",
            "naa.52004567ba64678d",
        ] {
            assert!(check_iqn(ok, "target IQN").is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("iqn.2024-13.io.cairn:t", "date '2024-13'"),
            ("iqn.24-01.io.cairn", "date '24-01'"),
            ("iqn.2024-01", "no naming authority"),
            ("iqn.2024-01.IO.cairn", "'I' is not allowed"),
            ("iqn.2024-01.io.cairn:a b", "' ' is not allowed"),
            ("target1", "must start with iqn."),
            ("eui.123", "16 hex digits"),
        ] {
            let e = check_iqn(bad, "target IQN").unwrap_err();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
        assert_eq!(parse_size("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        for (bad, why) in [
            ("10X", "suffix"),
            ("", "empty"),
            ("1K", "at least 1M"),
            ("1048577", "multiple of 512"),
            ("-1G", "number"),
            ("99999999999P", "too large"),
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(format_size(10 << 30), "10G");
        assert_eq!(format_size(1536 << 20), "1536M");
        assert_eq!(parse_portal("10.0.0.5").unwrap(), ("10.0.0.5".into(), 3260));
        assert_eq!(parse_portal("[::1]:3261").unwrap(), ("::1".into(), 3261));
        for bad in ["host.example:3260", "10.0.0.5:0", "::1", "1.2.3.4:x"] {
            assert!(parse_portal(bad).is_err(), "{bad}");
        }
        for bad in ["", "a/b", "-x", "a.b", &"n".repeat(65)] {
            assert!(check_lun_name(bad).is_err(), "{bad}");
        }
        assert_eq!(check_path("/luns/a.img").unwrap(), "luns/a.img");
        for bad in ["luns/", "a/../b", "a,b", "a b", "a:b", "/"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation() {
        assert!(lun("db").validate().is_ok());
        assert!(target().validate().is_ok());
        // a cluster volume may start with '-', the handler's config string may not (found
        // by the render fuzz tests)
        let mut l = lun("db");
        l.volume = "-vol".into();
        assert!(l.validate().unwrap_err().contains("starting with '-'"));
        let mut t = target();
        t.acls.push(Acl {
            initiator: "iqn.2024-01.io.cairn:c2".into(),
            chap_user: None,
            chap_password: None,
        });
        assert!(t.validate().unwrap_err().contains("every ACL has CHAP"));
        let mut t = target();
        t.acls[0].chap_password = None;
        assert!(t.validate().unwrap_err().contains("both a user and a password"));
        let mut t = target();
        t.luns.push(TargetLun { lun: 0, name: "other".into() });
        assert!(t.validate().unwrap_err().contains("LUN number 0 is used twice"));
        let mut t = target();
        t.acls[0].chap_user = Some("a b".into());
        assert!(t.validate().unwrap_err().contains("CHAP user"));
    }

    #[test]
    fn cfgstring_is_lio_safe() {
        assert_eq!(
            lun("db").cfgstring(&servers()).unwrap(),
            "vol0@10.0.0.1~7420+10.0.0.2~7420/luns/db.img"
        );
        assert!(lun("db").cfgstring(&["[::1]:7420".into()]).unwrap_err().contains("IPv6"));
    }

    fn want() -> Lio {
        desired(&[lun("db"), lun("spare")], &[target()], &servers(), 2).unwrap()
    }

    #[test]
    fn plan_from_nothing() {
        let cmds = plan(&Lio::default(), &want(), &BTreeSet::new());
        let expect = [
            "/backstores/user:cairn create name=db size=10737418240 cfgstring=vol0@10.0.0.1~7420+10.0.0.2~7420/luns/db.img wwn=0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f",
            "/backstores/user:cairn/db/alua create name=gw2 tag=2",
            "/backstores/user:cairn/db/alua/gw2 set alua alua_access_type=1 alua_access_state=0",
            "/backstores/user:cairn create name=spare size=10737418240 cfgstring=vol0@10.0.0.1~7420+10.0.0.2~7420/luns/spare.img wwn=0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f",
            "/backstores/user:cairn/spare/alua create name=gw2 tag=2",
            "/backstores/user:cairn/spare/alua/gw2 set alua alua_access_type=1 alua_access_state=0",
            "/iscsi create iqn.2024-01.io.cairn:t1",
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/portals create 0.0.0.0 3260",
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/luns create /backstores/user:cairn/db lun=0",
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/luns/lun0 set alua alua_tg_pt_gp_name=gw2",
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/acls create iqn.1994-05.com.redhat:client1",
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/acls/iqn.1994-05.com.redhat:client1 set auth userid=alice password=s3cret-pass12",
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1 set attribute authentication=1 cache_dynamic_acls=0 demo_mode_write_protect=0 generate_node_acls=0",
        ];
        assert_eq!(cmds, expect);
        assert_eq!(
            redact(&cmds[11]),
            "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/acls/iqn.1994-05.com.redhat:client1 set auth userid=alice password=********"
        );
    }

    /// rtslib's dump of the state `want()` describes, plus a foreign fileio target and a
    /// stale Cairn target.
    fn saveconfig(extra_portal: bool) -> String {
        let portals = if extra_portal {
            r#"[{"ip_address": "0.0.0.0", "port": 3260, "iser": false}, {"ip_address": "10.9.9.9", "port": 3260, "iser": false}]"#
        } else {
            r#"[{"ip_address": "0.0.0.0", "port": 3260, "iser": false}]"#
        };
        let so = |name: &str| {
            format!(
                r#"{{"plugin": "user", "name": "{name}", "size": 10737418240,
                "config": "cairn/vol0@10.0.0.1~7420+10.0.0.2~7420/luns/{name}.img",
                "wwn": "0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f", "attributes": {{}},
                "alua_tpgs": [{{"name": "default_tg_pt_gp", "tg_pt_gp_id": 0}},
                              {{"name": "gw2", "tg_pt_gp_id": 2, "alua_access_state": 0}}]}}"#
            )
        };
        format!(
            r#"{{"fabric_modules": [], "storage_objects": [{}, {},
              {{"plugin": "fileio", "name": "flun0", "dev": "/var/tmp/f.img", "size": 1048576}},
              {{"plugin": "user", "name": "old", "size": 1048576, "config": "cairn/vol0@h~1/luns/old.img", "wwn": "x"}}],
             "targets": [
              {{"fabric": "iscsi", "wwn": "iqn.2024-01.io.cairn:t1", "tpgs": [{{"tag": 1, "enable": true,
                "attributes": {{"authentication": 1, "generate_node_acls": 0, "demo_mode_write_protect": 0, "cache_dynamic_acls": 0}},
                "portals": {portals},
                "luns": [{{"index": 0, "storage_object": "/backstores/user/db", "alua_tg_pt_gp_name": "gw2"}}],
                "node_acls": [{{"node_wwn": "iqn.1994-05.com.redhat:client1", "chap_userid": "alice", "chap_password": "s3cret-pass12",
                   "mapped_luns": [{{"index": 0, "tpg_lun": 0, "write_protect": false}}]}}]}}]}},
              {{"fabric": "iscsi", "wwn": "iqn.2024-01.io.cairn:fileio", "tpgs": [{{"tag": 1, "enable": true,
                "luns": [{{"index": 0, "storage_object": "/backstores/fileio/flun0"}}]}}]}},
              {{"fabric": "iscsi", "wwn": "iqn.2024-01.io.cairn:gone", "tpgs": [{{"tag": 1, "enable": true,
                "luns": [{{"index": 0, "storage_object": "/backstores/user/old"}}]}}]}}]}}"#,
            so("db"),
            so("spare")
        )
    }

    #[test]
    fn plan_only_changes_what_differs() {
        let cur = parse_saveconfig(&saveconfig(false)).unwrap();
        assert_eq!(cur.sos.len(), 3, "user:cairn objects only: {cur:?}");
        assert_eq!(cur.targets.len(), 3);
        // Same state except the stale Cairn target and storage object; the foreign fileio
        // target stays.
        assert_eq!(
            plan(&cur, &want(), &BTreeSet::new()),
            ["/iscsi delete iqn.2024-01.io.cairn:gone", "/backstores/user:cairn delete old"]
        );
        let mut exact = cur.clone();
        exact.sos.remove("old");
        exact.targets.remove("iqn.2024-01.io.cairn:gone");
        assert!(plan(&exact, &want(), &BTreeSet::new()).is_empty());
        // An extra portal goes; a changed password is set; a new LUN is mapped and the
        // existing ACL gets it automatically (auto_add_mapped_luns).
        let cur = parse_saveconfig(&saveconfig(true)).unwrap();
        let mut t = target();
        t.acls[0].chap_password = Some("an0ther-pass12".into());
        t.luns.push(TargetLun { lun: 1, name: "spare".into() });
        let w = desired(&[lun("db"), lun("spare")], &[t], &servers(), 2).unwrap();
        let tpg = "/iscsi/iqn.2024-01.io.cairn:t1/tpg1";
        assert_eq!(
            plan(&cur, &w, &BTreeSet::new()),
            [
                "/iscsi delete iqn.2024-01.io.cairn:gone".to_string(),
                format!("{tpg}/portals delete 10.9.9.9 3260"),
                "/backstores/user:cairn delete old".into(),
                format!("{tpg}/luns create /backstores/user:cairn/spare lun=1"),
                format!("{tpg}/luns/lun1 set alua alua_tg_pt_gp_name=gw2"),
                format!("{tpg}/acls/iqn.1994-05.com.redhat:client1 set auth userid=alice password=an0ther-pass12"),
            ]
        );
        // A resized LUN is recreated and mapped again; the foreign target is never touched.
        let mut big = lun("db");
        big.size = 20 << 30;
        let w = desired(&[big, lun("spare")], &[target()], &servers(), 2).unwrap();
        let p = plan(&cur, &w, &BTreeSet::new());
        assert!(p.contains(&"/backstores/user:cairn delete db".to_string()), "{p:#?}");
        assert!(
            p.contains(&format!("{tpg}/luns create /backstores/user:cairn/db lun=0")),
            "{p:#?}"
        );
        assert!(!p.iter().any(|c| c.contains("fileio")), "{p:#?}");
        // Open target: no ACLs, demo mode.
        let mut t = target();
        t.open = true;
        let w = desired(&[lun("db"), lun("spare")], &[t], &servers(), 2).unwrap();
        let p = plan(&cur, &w, &BTreeSet::new());
        assert!(p.contains(&format!("{tpg}/acls delete iqn.1994-05.com.redhat:client1")), "{p:#?}");
        assert!(
            p.contains(&format!(
                "{tpg} set attribute authentication=0 cache_dynamic_acls=1 generate_node_acls=1"
            )),
            "{p:#?}"
        );
    }

    /// The batch one `Targetcli::run` feeds targetcli: preferences, the commands, the
    /// system `saveconfig`, then the saveconfig [`Targetcli::read_saved`] reads back (a fake
    /// targetcli that records its stdin and writes the file the last line names).
    #[test]
    fn run_saves_the_state_it_leaves() {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("gateway-test-targetcli.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("fake-targetcli");
        let dump = saveconfig(false).replace('\'', "");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\ncat >\"$TARGETCLI_HOME/stdin\"\n\
                 f=$(sed -n 's/^\\/ saveconfig savefile=//p' \"$TARGETCLI_HOME/stdin\")\n\
                 [ -n \"$f\" ] && printf '%s' '{dump}' >\"$f\"\necho Created\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = Targetcli { program: fake, conf_dir: dir.clone() };
        let log = t.run(&["/iscsi create iqn.2024-01.io.cairn:t1".into()]).unwrap();
        let stdin = std::fs::read_to_string(dir.join("targetcli/stdin")).unwrap();
        let running = dir.join("running.json");
        assert_eq!(
            stdin.lines().collect::<Vec<_>>(),
            [
                TARGETCLI_PREFS,
                "/iscsi create iqn.2024-01.io.cairn:t1",
                "/ saveconfig",
                &format!("/ saveconfig savefile={}", running.display()),
                "exit"
            ]
        );
        assert_eq!(t.read_saved(&log).unwrap(), parse_saveconfig(&saveconfig(false)).unwrap());
        std::fs::remove_file(&running).unwrap();
        assert!(t.read_saved("boom").unwrap_err().contains("boom"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn desired_needs_mapped_luns() {
        let e = desired(&[], &[target()], &servers(), 1).unwrap_err();
        assert!(e.contains("maps LUN db, which does not exist"), "{e}");
    }
}
