//! `cairn smb share add|remove|list|show` and `cairn smb sync`: SMB shares, rendered into
//! the gateway's `shares.conf` (included by smb.conf), checked by testparm and applied with
//! `smbcontrol smbd reload-config`.

use super::{
    add, block_on, list, load_all, remove, report, servers, show, sync_loop, table, Failure,
    LocalServer, Managed,
};
use crate::args::{SmbArgs, SmbCmd, SmbShareCmd};
use crate::json;
use crate::plan::Settings;
use cairn_gateway::smb::{self, ApplyReport, SmbShare, Smbd};
use cairn_gateway::SMB_SHARE;
use std::io::Write;

/// Run `cairn smb ...`; returns the exit code.
pub fn smb(s: &Settings, a: &SmbArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (command, name) = match &a.command {
        SmbCmd::Share(SmbShareCmd::Add { name, .. }) => ("smb share add", Some(name.clone())),
        SmbCmd::Share(SmbShareCmd::Remove { name }) => ("smb share remove", Some(name.clone())),
        SmbCmd::Share(SmbShareCmd::List) => ("smb share list", None),
        SmbCmd::Share(SmbShareCmd::Show { name }) => ("smb share show", Some(name.clone())),
        SmbCmd::Sync { .. } => ("smb sync", None),
    };
    // A one-shot command reloads smbd even when shares.conf is unchanged (it may have been
    // started since); `sync --watch` only when something changed.
    let watching = matches!(a.command, SmbCmd::Sync { watch: true, .. });
    let smbd = Gateway {
        smbd: Smbd { conf_dir: a.conf_dir.clone(), smb_conf: a.smb_conf.clone() },
        reload_unchanged: !watching,
    };
    let out2: &mut dyn Write = &mut *out;
    let r = block_on(async {
        let out = out2;
        match &a.command {
            SmbCmd::Share(SmbShareCmd::Add { name, volume, read_only, users, comment, hidden }) => {
                let (volume, subdir) =
                    cairn_gateway::split_volume_path(volume).map_err(Failure::usage)?;
                let users = match users {
                    Some(u) => smb::parse_users(u).map_err(Failure::usage)?,
                    None => vec![],
                };
                let new = SmbShare {
                    name: name.clone(),
                    volume,
                    subdir,
                    read_only: *read_only,
                    users,
                    comment: comment.clone(),
                    browseable: !hidden,
                };
                new.validate().map_err(Failure::usage)?;
                add(s, &smbd, new, out).await
            }
            SmbCmd::Share(SmbShareCmd::Remove { name }) => remove(s, &smbd, name, out).await,
            SmbCmd::Share(SmbShareCmd::List) => list::<SmbShare>(s, out).await,
            SmbCmd::Share(SmbShareCmd::Show { name }) => show::<SmbShare>(s, name, out).await,
            SmbCmd::Sync { watch, interval } => sync(s, &smbd, *watch, *interval, out).await,
        }
    });
    report(s, command, name, r, out, err)
}

/// This machine's smbd, and whether applying reloads it when shares.conf is unchanged.
struct Gateway {
    smbd: Smbd,
    reload_unchanged: bool,
}

fn volume_path(sh: &SmbShare) -> String {
    format!("{}{}", sh.volume, if sh.subdir == "/" { "" } else { &sh.subdir })
}

/// Share names are case-insensitive, as for Samba and SMB clients ([`smb::same_name`]);
/// stored under the lower-case name.
impl Managed for SmbShare {
    const KIND: &'static str = SMB_SHARE;
    const COMMAND: &'static str = "smb share";
    const PLURAL: &'static str = "shares";
    const SINGULAR: &'static str = "share";
    const RENDERED: &'static str = "smb_conf_section";

    fn order(items: &mut [Self]) {
        items.sort_by_key(|a| a.name.to_lowercase());
    }

    fn store_name(&self) -> String {
        self.name.to_lowercase()
    }

    fn target(&self) -> (&str, &str) {
        (&self.volume, &self.subdir)
    }

    fn matches(&self, key: &str) -> bool {
        smb::same_name(&self.name, key)
    }

    fn not_found(key: &str) -> String {
        format!("no share named {key}")
    }

    fn label(&self) -> String {
        self.name.clone()
    }

    fn admit(&self, existing: &[Self]) -> Result<Self, Failure> {
        // Samba's match, or the same store key (names Samba tells apart whose lower-case
        // forms are equal): either way adding it would replace or shadow the other share.
        let key = self.store_name();
        if let Some(other) =
            existing.iter().find(|sh| sh.matches(&self.name) || sh.store_name() == key)
        {
            return Err(Failure::failed(if other.name == self.name {
                format!("share {} already exists", self.name)
            } else {
                format!(
                    "share {} already exists as {} (share names are case-insensitive)",
                    self.name, other.name
                )
            }));
        }
        Ok(self.clone())
    }

    fn describe(&self) -> String {
        format!(
            "share {} of {} ({}{})",
            self.name,
            volume_path(self),
            if self.read_only { "read-only" } else { "read-write" },
            if self.users.is_empty() {
                String::new()
            } else {
                format!(", users {}", self.users.join(","))
            }
        )
    }

    fn table(shares: &[Self]) -> String {
        if shares.is_empty() {
            return "No SMB shares\n".into();
        }
        let rows: Vec<Vec<String>> = shares
            .iter()
            .map(|sh| {
                vec![
                    sh.name.clone(),
                    volume_path(sh),
                    if sh.read_only { "ro".into() } else { "rw".into() },
                    if sh.users.is_empty() { "*".into() } else { sh.users.join(",") },
                ]
            })
            .collect();
        table(&["Share", "Volume", "Access", "Users"], &rows)
    }

    fn render(&self, servers: &[String]) -> String {
        SmbShare::render(self, servers)
    }

    fn show_text(&self, section: &str) -> String {
        format!(
            "Share: {}\nVolume: {}\nDirectory: {}\nRead only: {}\nUsers: {}\n\
             Comment: {}\nBrowseable: {}\n\nsmb.conf section:\n{section}",
            self.name,
            self.volume,
            self.subdir,
            if self.read_only { "yes" } else { "no" },
            if self.users.is_empty() {
                "(any authenticated user)".into()
            } else {
                self.users.join(", ")
            },
            self.comment,
            if self.browseable { "yes" } else { "no" },
        )
    }
}

impl LocalServer for Gateway {
    type Object = SmbShare;
    type Report = ApplyReport;

    /// Write the store's shares to this gateway's shares.conf and reload smbd, if this
    /// machine is a gateway. testparm refusing the result is an error (nothing written).
    async fn apply_here(&self, s: &Settings) -> Result<Option<ApplyReport>, Failure> {
        if !smb::is_gateway(&self.smbd.conf_dir) {
            return Ok(None);
        }
        let (shares, _) = load_all::<SmbShare>(s).await?;
        let servers = servers(s).await?;
        let smbd =
            Smbd { conf_dir: self.smbd.conf_dir.clone(), smb_conf: self.smbd.smb_conf.clone() };
        let reload = self.reload_unchanged;
        tokio::task::spawn_blocking(move || smbd.apply(&shares, &servers, reload))
            .await
            .map_err(|e| Failure::failed(format!("apply task failed: {e}")))?
            .map(Some)
            .map_err(Failure::failed)
    }

    /// smbd takes every share testparm accepts; a refusal is `apply_here`'s error.
    fn refused(&self, _: &ApplyReport, _: &SmbShare) -> Option<String> {
        None
    }

    fn applied_text(&self, r: &Option<ApplyReport>) -> String {
        match r {
            None => format!(
                "stored; {} does not exist here, so gateways apply it with `cairn smb sync`\n",
                self.smbd.conf_dir.display()
            ),
            Some(r) if r.reloaded => format!(
                "{} and the local smbd reloaded its configuration\n",
                if r.changed { "shares.conf updated" } else { "shares.conf unchanged" }
            ),
            Some(r) => format!(
                "written to {}; the local smbd was not told ({}), it reads the file when it \
                 starts\n",
                self.smbd.shares_file().display(),
                r.offline_reason.as_deref().unwrap_or("unknown reason")
            ),
        }
    }
}

async fn sync(
    s: &Settings,
    g: &Gateway,
    watch: bool,
    interval: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    std::fs::create_dir_all(&g.smbd.conf_dir).map_err(|e| {
        Failure::failed(format!("cannot create {}: {e}", g.smbd.conf_dir.display()))
    })?;
    sync_loop("smb", watch, interval, out, || async move {
        let r = g.apply_here(s).await?.expect("the config directory exists");
        let text = if s.json { json::render(&r) } else { g.applied_text(&Some(r.clone())) };
        Ok((text, r.changed, 0, None))
    })
    .await
}
