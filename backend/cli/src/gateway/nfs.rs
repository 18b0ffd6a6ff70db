//! `cairn nfs export add|remove|list|show` and `cairn nfs sync`: NFS exports, applied to
//! the gateway's Ganesha through its DBus export manager.

use super::{
    add, block_on, list, load_all, remove, report, servers, show, sync_loop, table, Failure,
    LocalServer, Managed,
};
use crate::args::{AccessArg, NfsArgs, NfsCmd, NfsExportCmd};
use crate::json;
use crate::plan::Settings;
use cairn_gateway::nfs::{
    self, Access, ApplyReport, Delegations, Ganesha, NfsExport, PnfsLayout, Squash,
};
use cairn_gateway::NFS_EXPORT;
use std::io::Write;

/// Run `cairn nfs ...`; returns the exit code.
pub fn nfs(s: &Settings, a: &NfsArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (command, name) = match &a.command {
        NfsCmd::Export(NfsExportCmd::Add { pseudo, .. }) => {
            ("nfs export add", Some(pseudo.clone()))
        }
        NfsCmd::Export(NfsExportCmd::Remove { export }) => {
            ("nfs export remove", Some(export.clone()))
        }
        NfsCmd::Export(NfsExportCmd::List) => ("nfs export list", None),
        NfsCmd::Export(NfsExportCmd::Show { export }) => ("nfs export show", Some(export.clone())),
        NfsCmd::Sync { .. } => ("nfs sync", None),
    };
    let ganesha = Ganesha { conf_dir: a.conf_dir.clone(), bus: None };
    let out2: &mut dyn Write = &mut *out;
    let r = block_on(async {
        let out = out2;
        match &a.command {
            NfsCmd::Export(NfsExportCmd::Add {
                target,
                pseudo,
                clients,
                access,
                squash,
                anon_uid,
                anon_gid,
                protocols,
                delegations,
                pnfs,
                ds_addrs,
                id,
            }) => {
                let (volume, subdir) =
                    cairn_gateway::split_volume_path(target).map_err(Failure::usage)?;
                let mut new = NfsExport {
                    export_id: id.unwrap_or(1),
                    volume,
                    subdir,
                    pseudo: pseudo.clone(),
                    clients: nfs::parse_clients(clients).map_err(Failure::usage)?,
                    access: match access {
                        AccessArg::Rw => Access::Rw,
                        AccessArg::Ro => Access::Ro,
                    },
                    squash: Squash::parse(squash).map_err(Failure::usage)?,
                    anon_uid: *anon_uid,
                    anon_gid: *anon_gid,
                    protocols: parse_protocols(protocols).map_err(Failure::usage)?,
                    delegations: Delegations::parse(delegations).map_err(Failure::usage)?,
                    pnfs: pnfs.is_some(),
                    pnfs_layout: match pnfs {
                        Some(l) => PnfsLayout::parse(l).map_err(Failure::usage)?,
                        None => PnfsLayout::Files,
                    },
                    ds_addrs: ds_addrs
                        .as_deref()
                        .map(|l| l.split(',').map(|d| d.trim().to_string()).collect())
                        .unwrap_or_default(),
                };
                new.validate().map_err(Failure::usage)?;
                if id.is_none() {
                    new.export_id = PICK_ID;
                }
                add(s, &ganesha, new, out).await
            }
            NfsCmd::Export(NfsExportCmd::Remove { export }) => {
                remove(s, &ganesha, export, out).await
            }
            NfsCmd::Export(NfsExportCmd::List) => list::<NfsExport>(s, out).await,
            NfsCmd::Export(NfsExportCmd::Show { export }) => {
                show::<NfsExport>(s, export, out).await
            }
            NfsCmd::Sync { watch, interval, ds } => {
                sync(s, &ganesha, *watch, *interval, *ds, out).await
            }
        }
    });
    report(s, command, name, r, out, err)
}

/// The export id of an `add` without `--id`: the lowest free one is picked when storing.
const PICK_ID: u16 = 0;

fn parse_protocols(s: &str) -> Result<Vec<u8>, String> {
    let mut v = vec![];
    for p in s.split(',').map(str::trim) {
        match p {
            "3" | "v3" => v.push(3),
            "4" | "v4" | "4.0" | "4.1" | "4.2" => v.push(4),
            _ => return Err(format!("invalid protocol '{p}': expected 3, 4 or 3,4")),
        }
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn access_str(a: Access) -> &'static str {
    match a {
        Access::Rw => "rw",
        Access::Ro => "ro",
    }
}

fn volume_path(e: &NfsExport) -> String {
    format!("{}{}", e.volume, if e.subdir == "/" { "" } else { &e.subdir })
}

impl Managed for NfsExport {
    const KIND: &'static str = NFS_EXPORT;
    const COMMAND: &'static str = "nfs export";
    const PLURAL: &'static str = "exports";
    const SINGULAR: &'static str = "export";
    const RENDERED: &'static str = "ganesha_block";

    fn order(items: &mut [Self]) {
        items.sort_by_key(|e| e.export_id);
    }

    fn store_name(&self) -> String {
        self.export_id.to_string()
    }

    fn target(&self) -> (&str, &str) {
        (&self.volume, &self.subdir)
    }

    fn matches(&self, key: &str) -> bool {
        self.pseudo == key || key.parse::<u16>().ok() == Some(self.export_id)
    }

    fn not_found(key: &str) -> String {
        format!("no export with pseudo path or id {key}")
    }

    fn label(&self) -> String {
        self.pseudo.clone()
    }

    fn admit(&self, existing: &[Self]) -> Result<Self, Failure> {
        let mut new = self.clone();
        if new.export_id == PICK_ID {
            new.export_id =
                nfs::next_id(existing).ok_or_else(|| Failure::failed("no free export id"))?;
        }
        nfs::check_unique(&new, existing).map_err(Failure::failed)?;
        Ok(new)
    }

    fn describe(&self) -> String {
        let protos: Vec<String> = self.protocols.iter().map(|p| format!("v{p}")).collect();
        format!(
            "export {} of {} for {} ({}, {}, NFS {})",
            self.export_id,
            volume_path(self),
            self.clients.join(","),
            access_str(self.access),
            self.squash.as_str(),
            protos.join("+")
        )
    }

    fn table(exports: &[Self]) -> String {
        if exports.is_empty() {
            return "No NFS exports\n".into();
        }
        let rows: Vec<Vec<String>> = exports
            .iter()
            .map(|e| {
                vec![
                    e.export_id.to_string(),
                    e.pseudo.clone(),
                    volume_path(e),
                    e.clients.join(","),
                    access_str(e.access).into(),
                    e.squash.as_str().into(),
                ]
            })
            .collect();
        table(&["Id", "Pseudo", "Volume", "Clients", "Access", "Squash"], &rows)
    }

    fn render(&self, servers: &[String]) -> String {
        NfsExport::render(self, servers)
    }

    fn show_text(&self, block: &str) -> String {
        format!(
            "Export Id: {}\nPseudo path: {}\nVolume: {}\nDirectory: {}\nClients: {}\n\
             Access: {}\nSquash: {} (anonymous uid {}, gid {})\nProtocols: {}\n\
             Delegations: {}\npNFS: {}\n\n\
             Ganesha configuration:\n{block}",
            self.export_id,
            self.pseudo,
            self.volume,
            self.subdir,
            self.clients.join(", "),
            access_str(self.access),
            self.squash.as_str(),
            self.anon_uid,
            self.anon_gid,
            self.protocols.iter().map(|p| format!("NFSv{p}")).collect::<Vec<_>>().join(", "),
            self.delegations.as_str(),
            if self.pnfs {
                if self.ds_addrs.is_empty() {
                    format!(
                        "{} (DSs at each node's cairnd host, port {})",
                        self.pnfs_layout.describe(),
                        cairn_gateway::nfs_ds::DS_PORT
                    )
                } else {
                    format!("{} (DSs {})", self.pnfs_layout.describe(), self.ds_addrs.join(", "))
                }
            } else {
                "off".to_string()
            }
        )
    }
}

impl LocalServer for Ganesha {
    type Object = NfsExport;
    type Report = ApplyReport;

    /// Apply the store's exports to this gateway's Ganesha, if this machine is a gateway.
    async fn apply_here(&self, s: &Settings) -> Result<Option<ApplyReport>, Failure> {
        if !nfs::is_gateway_dir(&self.conf_dir) {
            return Ok(None);
        }
        let (exports, _) = load_all::<NfsExport>(s).await?;
        let servers = servers(s).await?;
        let g = Ganesha { conf_dir: self.conf_dir.clone(), bus: self.bus.clone() };
        tokio::task::spawn_blocking(move || g.apply(&exports, &servers))
            .await
            .map_err(|e| Failure::failed(format!("apply task failed: {e}")))?
            .map(Some)
            .map_err(|e| Failure::failed(format!("cannot write the Ganesha config: {e}")))
    }

    fn refused(&self, r: &ApplyReport, e: &NfsExport) -> Option<String> {
        r.failed
            .iter()
            .find(|(id, _)| *id == e.export_id)
            .map(|(_, why)| format!("Ganesha refused the export: {why}"))
    }

    fn applied_text(&self, r: &Option<ApplyReport>) -> String {
        match r {
            None => format!(
                "stored; {} is not a Ganesha config directory here, so gateways apply it with \
                 `cairn nfs sync`\n",
                self.conf_dir.display()
            ),
            Some(r) if !r.live => format!(
                "stored and written to {}; the local Ganesha is not reachable over DBus ({}), \
                 it serves the exports when it starts\n",
                self.conf_dir.display(),
                r.offline_reason.as_deref().unwrap_or("unknown reason")
            ),
            Some(r) => {
                let ids = |v: &[u16]| v.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
                let mut parts = vec![];
                if !r.added.is_empty() {
                    parts.push(format!("added {}", ids(&r.added)));
                }
                if !r.updated.is_empty() {
                    parts.push(format!("updated {}", ids(&r.updated)));
                }
                if !r.removed.is_empty() {
                    parts.push(format!("removed {}", ids(&r.removed)));
                }
                for (id, why) in &r.failed {
                    parts.push(format!("export {id} refused: {why}"));
                }
                if parts.is_empty() {
                    parts.push("nothing to change".into());
                }
                format!("applied to the local Ganesha: {}\n", parts.join("; "))
            }
        }
    }
}

async fn sync(
    s: &Settings,
    g: &Ganesha,
    watch: bool,
    interval: u64,
    ds: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    if !g.conf_dir.is_dir() {
        std::fs::create_dir_all(&g.conf_dir)
            .map_err(|e| Failure::failed(format!("cannot create {}: {e}", g.conf_dir.display())))?;
    }
    sync_loop("nfs", watch, interval, out, || async move {
        let (_, revision) = load_all::<NfsExport>(s).await?;
        let report = if ds {
            apply_ds(s, g).await?
        } else {
            g.apply_here(s).await?.expect("the config directory exists")
        };
        let changed = !(report.added.is_empty()
            && report.updated.is_empty()
            && report.removed.is_empty()
            && report.failed.is_empty());
        let err = (!report.failed.is_empty())
            .then(|| Failure::failed(format!("Ganesha refused {} export(s)", report.failed.len())));
        let text =
            if s.json { json::render(&report) } else { g.applied_text(&Some(report.clone())) };
        Ok((text, changed, revision * 2 + report.live as u64, err))
    })
    .await
}

/// Apply the store's pNFS exports to this brick node's DS Ganesha (`sync --ds`).
async fn apply_ds(s: &Settings, g: &Ganesha) -> Result<ApplyReport, Failure> {
    let (exports, _) = load_all::<NfsExport>(s).await?;
    let servers = servers(s).await?;
    let g = Ganesha { conf_dir: g.conf_dir.clone(), bus: g.bus.clone() };
    tokio::task::spawn_blocking(move || g.apply_ds(&exports, &servers))
        .await
        .map_err(|e| Failure::failed(format!("apply task failed: {e}")))?
        .map_err(|e| Failure::failed(format!("cannot write the DS Ganesha config: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols() {
        assert_eq!(parse_protocols("3,4").unwrap(), [3, 4]);
        assert_eq!(parse_protocols("4.1, 3, 4").unwrap(), [3, 4]);
        assert!(parse_protocols("2").is_err());
    }
}
