//! The documents kept in the config store: LUNs, targets, gateway records, and their checks.

use super::checks::{check_chap, check_iqn, check_lun_name, check_path, parse_portal, parse_size};
use crate::error::{invalid, Error};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

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

impl IscsiLun {
    pub fn validate(&self) -> Result<(), Error> {
        check_lun_name(&self.name)?;
        crate::split_volume_path(&self.volume)?;
        if self.volume.contains('/') {
            return Err(invalid(format!("invalid volume name '{}'", self.volume)));
        }
        // the handler's config string cannot start with '-' (iscsi/cairn_cfg.h)
        if self.volume.starts_with('-') {
            return Err(invalid(format!(
                "volume '{}': the iSCSI handler takes no volume name starting with '-'",
                self.volume
            )));
        }
        if check_path(&self.path)? != self.path {
            return Err(invalid(format!(
                "backing file path '{}' must not start with '/'",
                self.path
            )));
        }
        parse_size(&self.size.to_string())?;
        if self.wwn.is_empty() || !self.wwn.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(invalid(format!("invalid WWN '{}'", self.wwn)));
        }
        Ok(())
    }

    /// The handler's config string (without the `cairn/` prefix targetcli adds), in LIO's
    /// spelling: `VOLUME@HOST~PORT+HOST~PORT/PATH` (iscsi/cairn_cfg.h).
    pub fn cfgstring(&self, servers: &[String]) -> Result<String, Error> {
        let mut lio = vec![];
        for s in servers {
            if s.starts_with('[') || s.matches(':').count() > 1 {
                return Err(invalid(format!(
                    "server {s}: LIO's config string cannot carry IPv6 addresses; give the \
                     nodes host names or IPv4 addresses"
                )));
            }
            lio.push(s.replace(':', "~"));
        }
        if lio.is_empty() {
            return Err(invalid("no servers for the config string".into()));
        }
        Ok(format!("{}@{}/{}", self.volume, lio.join("+"), self.path))
    }
}

impl IscsiTarget {
    pub fn validate(&self) -> Result<(), Error> {
        check_iqn(&self.iqn, "target IQN")?;
        let mut seen = BTreeSet::new();
        for p in &self.portals {
            if !seen.insert(parse_portal(p)?) {
                return Err(invalid(format!("portal {p} is listed twice")));
            }
        }
        let mut nums = BTreeSet::new();
        let mut names = BTreeSet::new();
        for l in &self.luns {
            check_lun_name(&l.name)?;
            if l.lun > 255 {
                return Err(invalid(format!("LUN number {} is out of range 0-255", l.lun)));
            }
            if !nums.insert(l.lun) {
                return Err(invalid(format!("LUN number {} is used twice", l.lun)));
            }
            if !names.insert(&l.name) {
                return Err(invalid(format!("LUN {} is mapped twice", l.name)));
            }
        }
        let mut inits = BTreeSet::new();
        for a in &self.acls {
            check_iqn(&a.initiator, "initiator name")?;
            if !inits.insert(&a.initiator) {
                return Err(invalid(format!("initiator {} is listed twice", a.initiator)));
            }
            match (&a.chap_user, &a.chap_password) {
                (Some(u), Some(p)) => {
                    check_chap("user", u)?;
                    check_chap("password", p)?;
                }
                (None, None) => {}
                _ => return Err(invalid("CHAP needs both a user and a password".into())),
            }
        }
        let with_chap = self.acls.iter().filter(|a| a.chap_user.is_some()).count();
        if with_chap != 0 && with_chap != self.acls.len() {
            return Err(invalid(format!(
                "target {}: either every ACL has CHAP credentials or none (LIO turns \
                 authentication on for the whole portal group)",
                self.iqn
            )));
        }
        Ok(())
    }
}
