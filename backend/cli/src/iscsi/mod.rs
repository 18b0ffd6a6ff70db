//! `cairn iscsi ...`: LUNs (files on volumes) and targets in the config store, applied to
//! LIO with targetcli-fb. The documents, checks and the targetcli plan are
//! `cairn_gateway::iscsi`'s; the store and cairnd helpers are shared with `cairn nfs/smb`
//! ([`crate::gateway`]).
//!
//! Here: the command's dispatch and what every subcommand needs ([`Gw`]). Then by idea:
//! `store` (the LUN, target and gateway records), `backing` (a LUN's backing file on its
//! volume), `lun` and `target` (the subcommands), `sync` (bringing this gateway's LIO to
//! the store), `output` (how a change and a sync are printed).

mod backing;
mod lun;
mod output;
mod store;
mod sync;
mod target;
#[cfg(test)]
mod tests;

use crate::args::{
    IscsiAclCmd, IscsiArgs, IscsiCmd, IscsiLunCmd, IscsiMapCmd, IscsiPortalCmd, IscsiTargetCmd,
};
use crate::gateway::{block_on, report, write_out, Failure};
use crate::json;
use crate::plan::Settings;
use cairn_gateway::iscsi::{self, IscsiLun, Targetcli};
use lun::{lun_create, lun_delete, lun_show, luns_table, new_wwn, LunsDoc};
use std::io::Write;
use store::{load_luns, load_targets};
use sync::sync;
use target::target_cmd;

/// The first line of `path` (standard input for `-`), without its line end: a secret
/// given out of the process list (`--chap-password-file`, as targetcli and iscsiadm take
/// secrets from files).
pub(super) fn read_secret(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text))
    };
    read.map_err(|e| format!("cannot read the CHAP secret from {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.is_empty() {
        return Err(format!("{}: no CHAP secret in it (empty first line)", path.display()));
    }
    Ok(line)
}

/// Run `cairn iscsi ...`; returns the exit code.
pub fn iscsi(s: &Settings, a: &IscsiArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use IscsiCmd as C;
    let (command, name): (&'static str, Option<String>) = match &a.command {
        C::Lun(IscsiLunCmd::Create { name, .. }) => ("iscsi lun create", Some(name.clone())),
        C::Lun(IscsiLunCmd::Delete { name, .. }) => ("iscsi lun delete", Some(name.clone())),
        C::Lun(IscsiLunCmd::List) => ("iscsi lun list", None),
        C::Lun(IscsiLunCmd::Show { name }) => ("iscsi lun show", Some(name.clone())),
        C::Target(t) => match t {
            IscsiTargetCmd::Create { iqn, .. } => ("iscsi target create", Some(iqn.clone())),
            IscsiTargetCmd::Delete { iqn } => ("iscsi target delete", Some(iqn.clone())),
            IscsiTargetCmd::List => ("iscsi target list", None),
            IscsiTargetCmd::Show { iqn, .. } => ("iscsi target show", Some(iqn.clone())),
            IscsiTargetCmd::Portal(IscsiPortalCmd::Add { iqn, .. }) => {
                ("iscsi target portal add", Some(iqn.clone()))
            }
            IscsiTargetCmd::Portal(IscsiPortalCmd::Remove { iqn, .. }) => {
                ("iscsi target portal remove", Some(iqn.clone()))
            }
            IscsiTargetCmd::Lun(IscsiMapCmd::Add { iqn, .. }) => {
                ("iscsi target lun add", Some(iqn.clone()))
            }
            IscsiTargetCmd::Lun(IscsiMapCmd::Remove { iqn, .. }) => {
                ("iscsi target lun remove", Some(iqn.clone()))
            }
            IscsiTargetCmd::Acl(IscsiAclCmd::Add { iqn, .. }) => {
                ("iscsi target acl add", Some(iqn.clone()))
            }
            IscsiTargetCmd::Acl(IscsiAclCmd::Remove { iqn, .. }) => {
                ("iscsi target acl remove", Some(iqn.clone()))
            }
        },
        C::Sync { .. } => ("iscsi sync", None),
    };
    let tcli = Targetcli { program: a.targetcli.clone(), conf_dir: a.conf_dir.clone() };
    let out2: &mut dyn Write = &mut *out;
    let r = block_on(async {
        let out = out2;
        let gateway = match &a.gateway_name {
            Some(n) => n.clone(),
            None => host_name()?,
        };
        let g = Gw { s, tcli: &tcli, alua_tag: a.alua_tag, gateway };
        match &a.command {
            C::Lun(IscsiLunCmd::Create { name, volume, size, thin, file }) => {
                iscsi::check_lun_name(name).map_err(Failure::usage)?;
                let (volume, sub) =
                    cairn_gateway::split_volume_path(volume).map_err(Failure::usage)?;
                if sub != "/" {
                    return Err(Failure::usage(format!(
                        "invalid volume name '{volume}{sub}': give the file with --file"
                    )));
                }
                let size = iscsi::parse_size(size).map_err(Failure::usage)?;
                let path =
                    iscsi::check_path(file.as_deref().unwrap_or(&format!("luns/{name}.img")))
                        .map_err(Failure::usage)?;
                let lun = IscsiLun {
                    name: name.clone(),
                    volume,
                    path,
                    size,
                    thin: *thin,
                    wwn: new_wwn(),
                    deleting: false,
                };
                lun.validate().map_err(Failure::usage)?;
                lun_create(&g, lun, out).await
            }
            C::Lun(IscsiLunCmd::Delete { name, keep_file, force }) => {
                lun_delete(&g, name, *keep_file, *force, out).await
            }
            C::Lun(IscsiLunCmd::List) => {
                let luns = load_luns(s).await?;
                let targets = load_targets(s).await?;
                let text = if s.json {
                    json::render(&LunsDoc { luns })
                } else {
                    luns_table(&luns, &targets)
                };
                write_out(out, &text)
            }
            C::Lun(IscsiLunCmd::Show { name }) => lun_show(&g, name, out).await,
            C::Target(t) => target_cmd(&g, t, out).await,
            C::Sync { dry_run, from_saveconfig, watch, interval } => {
                sync(&g, *dry_run, from_saveconfig.as_deref(), *watch, *interval, out).await
            }
        }
    });
    report(s, command, name, r, out, err)
}

/// What the commands need: cairnd, this gateway's targetcli, ALUA tag and name.
pub(super) struct Gw<'a> {
    pub(super) s: &'a Settings,
    pub(super) tcli: &'a Targetcli,
    pub(super) alua_tag: u16,
    /// Name of this gateway's record (`iscsi-gateway/NAME`).
    pub(super) gateway: String,
}

/// This machine's host name: the default gateway name.
fn host_name() -> Result<String, Failure> {
    let n = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| Failure::failed(format!("cannot read the host name: {e}")))?;
    let n = n.trim();
    if n.is_empty() {
        return Err(Failure::usage("the host name is empty: give --gateway-name"));
    }
    Ok(n.to_string())
}
