//! The pNFS data server side of NFS exports: what a brick node's DS Ganesha serves
//! (`cairn nfs sync --ds`, docs/nfs.md "pNFS"). The MDS puts its export id in the DS file
//! handles of its layouts, and Ganesha finds the DS (and the export its DS I/O path needs)
//! by that id, so a DS serves every pNFS export under the MDS's export id.

use crate::error::Error;
use crate::nfs::{Access, ApplyReport, Ganesha, NfsExport};

/// The port a brick node's DS listens on when the export's `DS_Addrs` does not name the
/// node (FSAL_CAIRN's default; the appliance's and `make up`'s DS port).
pub const DS_PORT: u16 = 20490;

impl NfsExport {
    /// The EXPORT block of this pNFS export on a DS Ganesha: same id, volume and clients,
    /// FSAL_CAIRN in DS mode (`DS = true`), NFSv4 only. `Path` is the volume's root: a DS
    /// handle names its file by id, whatever the MDS export's directory. Delegations are
    /// the MDS's business; squashing too (the DS runs I/O as root and checks no stateid,
    /// docs/nfs.md "The DS").
    pub fn render_ds(&self, servers: &[String]) -> String {
        format!(
            "# Managed by `cairn nfs sync --ds`; edits are overwritten.\n\
             EXPORT {{\n\
             \x20   Export_Id = {id};\n\
             \x20   Path = \"/\";\n\
             \x20   Pseudo = \"{pseudo}\";\n\
             \x20   Protocols = 4;\n\
             \x20   Transports = TCP;\n\
             \x20   SecType = sys;\n\
             \x20   Access_Type = None;\n\
             \x20   Squash = No_Root_Squash;\n\
             \x20   Delegations = none;\n\
             \x20   CLIENT {{\n\
             \x20       Clients = {clients};\n\
             \x20       Access_Type = {access};\n\
             \x20   }}\n\
             \x20   FSAL {{\n\
             \x20       Name = CAIRN;\n\
             \x20       Volume = \"{volume}\";\n\
             \x20       Servers = \"{servers}\";\n\
             \x20       DS = true;\n\
             \x20   }}\n\
             }}\n",
            id = self.export_id,
            pseudo = self.pseudo,
            clients = self.clients.join(", "),
            access = match self.access {
                Access::Rw => "RW",
                Access::Ro => "RO",
            },
            volume = self.volume,
            servers = servers.join(","),
        )
    }
}

impl Ganesha {
    /// Bring a DS Ganesha to the DS blocks of the pNFS exports among `exports` (the others
    /// are not served there), as [`Ganesha::apply`] does for a gateway.
    pub fn apply_ds(
        &self,
        exports: &[NfsExport],
        servers: &[String],
    ) -> Result<ApplyReport, Error> {
        self.apply_blocks(
            exports.iter().filter(|e| e.pnfs).map(|e| (e.export_id, e.render_ds(servers))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::{Delegations, PnfsLayout, Squash};

    fn export(id: u16, pnfs: bool) -> NfsExport {
        NfsExport {
            export_id: id,
            volume: "vol0".into(),
            subdir: "/projects".into(),
            pseudo: format!("/p{id}"),
            clients: vec!["10.0.0.0/24".into(), "*.lab".into()],
            access: Access::Ro,
            squash: Squash::parse("root_squash").unwrap(),
            anon_uid: 65534,
            anon_gid: 65534,
            protocols: vec![3, 4],
            delegations: Delegations::default(),
            pnfs,
            pnfs_layout: PnfsLayout::Flexfiles,
            ds_addrs: vec![],
        }
    }

    /// A DS block: the MDS's id, DS mode, the volume's root, NFSv4 only, the clients.
    #[test]
    fn renders_a_ds_block() {
        let b = export(7, true).render_ds(&["10.0.0.11:7420".into(), "10.0.0.12:7420".into()]);
        for want in [
            "Export_Id = 7;",
            "Path = \"/\";",
            "Pseudo = \"/p7\";",
            "Protocols = 4;",
            "Clients = 10.0.0.0/24, *.lab;",
            "Access_Type = RO;",
            "Volume = \"vol0\";",
            "Servers = \"10.0.0.11:7420,10.0.0.12:7420\";",
            "DS = true;",
        ] {
            assert!(b.contains(want), "{want} not in {b}");
        }
        assert!(!b.contains("PNFS") && !b.contains("Layout") && !b.contains("projects"), "{b}");
    }

    /// Only pNFS exports reach a DS; one that stops being pNFS is removed from it.
    #[test]
    fn apply_ds_writes_the_pnfs_exports_only() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("cairn-ds");
        let bus = format!("unix:path={}/nobus", d.path().display());
        let g = Ganesha { conf_dir: dir.clone(), bus: Some(bus) };
        let r = g.apply_ds(&[export(1, false), export(2, true)], &["n1:7420".into()]).unwrap();
        assert!(!r.live);
        assert!(!dir.join("exports/export.1.conf").exists());
        let two = std::fs::read_to_string(dir.join("exports/export.2.conf")).unwrap();
        assert!(two.contains("DS = true;"), "{two}");
        let include = std::fs::read_to_string(g.include_file()).unwrap();
        assert!(include.contains("export.2.conf") && !include.contains("export.1.conf"));
        g.apply_ds(&[export(2, false)], &[]).unwrap();
        assert!(!dir.join("exports/export.2.conf").exists());
    }
}
