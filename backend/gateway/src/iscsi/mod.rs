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
//!
//! The module by idea: `documents` (the stored LUN, target and gateway records and their
//! checks), `checks` (names, IQNs, sizes, paths, portals, CHAP secrets), `lio` (the LIO
//! state: wanted, and read from saveconfig), `plan` (the commands between two states),
//! `targetcli` (running targetcli-fb).

mod checks;
mod documents;
mod lio;
mod plan;
mod targetcli;
#[cfg(test)]
mod tests;

pub use checks::{
    check_chap, check_iqn, check_lun_name, check_path, format_size, parse_portal, parse_size,
    portal_string, ISCSI_PORT,
};
pub use documents::{deletable, holders, Acl, GatewayRecord, IscsiLun, IscsiTarget, TargetLun};
pub use lio::{alua_group, desired, parse_saveconfig, AclState, Lio, So, Tgt};
pub use plan::plan;
pub use targetcli::{redact, Targetcli, TARGETCLI_PREFS};
