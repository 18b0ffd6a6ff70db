//! SMB shares: the document kept in the config store, its checks, the smb.conf section it
//! renders to, and applying a set of shares to a running smbd.
//!
//! On a gateway, `CONF_DIR` (default `/etc/samba/cairn`) holds `shares.conf`, every share's
//! section, which the main smb.conf includes (`include = CONF_DIR/shares.conf` in
//! `[global]`). Applying writes the new file, checks the whole configuration with
//! `testparm` (and puts the old file back if it fails), then asks smbd to reload
//! (`smbcontrol smbd reload-config`): no restart, sessions on other shares are untouched.

use crate::error::{invalid, Error};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One share, as stored (kind [`crate::SMB_SHARE`], named by its share name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmbShare {
    pub name: String,
    pub volume: String,
    /// Directory inside the volume, absolute (`/` = the volume's root).
    pub subdir: String,
    pub read_only: bool,
    /// `valid users`: user names and `@group`s; empty = every authenticated user.
    pub users: Vec<String>,
    pub comment: String,
    pub browseable: bool,
}

/// Share names smb.conf reserves.
const RESERVED: &[&str] = &["global", "homes", "printers", "print$", "ipc$"];

/// A share name: 1 to 80 characters, none of smb.conf's or Windows' special ones.
pub fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.chars().count() > 80 {
        return Err(invalid(format!("invalid share name '{name}': must be 1 to 80 characters")));
    }
    if let Some(c) = name.chars().find(|c| "[]/\\:;|=,+*?<>\"%".contains(*c) || c.is_control()) {
        return Err(invalid(format!("invalid share name '{name}': '{c}' is not allowed")));
    }
    if name.starts_with(' ') || name.ends_with(' ') {
        return Err(invalid(format!("invalid share name '{name}': leading or trailing space")));
    }
    // smb.conf's reader makes a run of spaces one: "a  b" would be share "a b"
    if name.contains("  ") {
        return Err(invalid(format!("invalid share name '{name}': two spaces in a row")));
    }
    if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) {
        return Err(invalid(format!("invalid share name '{name}': reserved by Samba")));
    }
    Ok(())
}

/// Whether two share names name the same share to Samba, which compares them ignoring
/// case one character at a time (`strequal`, Unicode's simple case mapping: `Ü` is `ü`,
/// but `ß` is not `SS`).
pub fn same_name(a: &str, b: &str) -> bool {
    fn fold(c: char) -> char {
        let mut up = c.to_uppercase();
        match (up.next(), up.next()) {
            (Some(u), None) => u,
            _ => c,
        }
    }
    a.chars().map(fold).eq(b.chars().map(fold))
}

/// One `--users` entry: a user name (`DOMAIN\\user` allowed) or `@group` / `+group`.
pub fn check_user(u: &str) -> Result<(), Error> {
    let bare = u.trim_start_matches(['@', '+', '&']);
    // '\' only between a domain and a user: at the end it would continue the smb.conf line
    if bare.is_empty()
        || bare.starts_with('\\')
        || bare.ends_with('\\')
        || bare.len() > 256
        || bare.chars().any(|c| c.is_control() || c.is_whitespace() || ",;\"=[]".contains(c))
    {
        return Err(invalid(format!("invalid user or group '{u}'")));
    }
    Ok(())
}

/// Split a `--users` list (commas and/or spaces) and check each entry.
pub fn parse_users(spec: &str) -> Result<Vec<String>, Error> {
    let out: Vec<String> =
        spec.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    for u in &out {
        check_user(u)?;
    }
    Ok(out)
}

impl SmbShare {
    pub fn validate(&self) -> Result<(), Error> {
        check_name(&self.name)?;
        crate::check_volume_subdir(&self.volume, &self.subdir)?;
        // smb.conf's reader makes a run of spaces one and trims the value's end, and smbd
        // expands %U, %m, ... in a share's path: any of these would serve another directory
        if self.subdir.contains("  ") || self.subdir.ends_with(' ') || self.subdir.contains('%') {
            return Err(invalid(format!(
                "invalid subdirectory '{}' for an SMB share: no '%', no two spaces in a row, \
                 no space at the end",
                self.subdir
            )));
        }
        for u in &self.users {
            check_user(u)?;
        }
        if self.comment.chars().any(|c| c.is_control()) || self.comment.len() > 256 {
            return Err(invalid("the comment must be one line of at most 256 characters".into()));
        }
        // smb.conf continues a line that ends with '\' (or '\ ') onto the next one
        if self.comment.trim_end().ends_with('\\') {
            return Err(invalid(format!(
                "invalid comment '{}': it must not end with '\\'",
                self.comment
            )));
        }
        Ok(())
    }

    /// The smb.conf section (`vfs objects` ends with [`vfs_name`]). `servers`: `host:port` of the cairnds libcairn fetches the
    /// volume map from.
    pub fn render(&self, servers: &[String]) -> String {
        let yn = |b: bool| if b { "yes" } else { "no" };
        let mut s = format!("[{}]\n", self.name);
        if !self.comment.is_empty() {
            s.push_str(&format!("    comment = {}\n", self.comment));
        }
        s.push_str(&format!("    path = {}\n", self.subdir));
        s.push_str(&format!("    read only = {}\n", yn(self.read_only)));
        s.push_str(&format!("    browseable = {}\n", yn(self.browseable)));
        if !self.users.is_empty() {
            s.push_str(&format!("    valid users = {}\n", self.users.join(", ")));
        }
        // Windows ACLs and DOS attributes live in xattrs on the volume (acl_xattr; Cairn has
        // no POSIX ACLs), streams in xattrs; vfs_cairn is the last module (it does the I/O)
        // and refuses kernel oplocks, which Cairn cannot honour. Kernel share modes (share
        // modes seen by NFS, through the backend) would turn durable handles off: opt-in.
        s.push_str(&format!(
            "    vfs objects = acl_xattr streams_xattr {}\n\
             \x20   acl_xattr:ignore system acls = yes\n\
             \x20   kernel share modes = no\n\
             \x20   kernel oplocks = no\n",
            vfs_name()
        ));
        s.push_str(&format!("    cairn:volume = {}\n", self.volume));
        s.push_str(&format!("    cairn:servers = {}\n", servers.join(",")));
        s
    }
}

/// The whole `shares.conf` for a set of shares.
pub fn render_all(shares: &[SmbShare], servers: &[String]) -> String {
    let mut out = String::from("# Managed by `cairn smb share`; edits are overwritten.\n");
    for sh in shares {
        out.push('\n');
        out.push_str(&sh.render(servers));
    }
    out
}

/// A gateway's smbd: its config directory and main smb.conf.
pub struct Smbd {
    pub conf_dir: PathBuf,
    pub smb_conf: PathBuf,
}

/// What [`Smbd::apply`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// The shares file changed.
    pub changed: bool,
    /// smbd was told to reload; false if it is not running (it reads the file at start).
    pub reloaded: bool,
    /// Why smbd could not be told, when `reloaded` is false and something changed.
    pub offline_reason: Option<String>,
}

impl Smbd {
    pub fn shares_file(&self) -> PathBuf {
        self.conf_dir.join("shares.conf")
    }

    /// Write `shares` to the shares file, check the configuration with testparm (the old
    /// file is put back if it fails: a bad share never reaches smbd), then make the running
    /// smbd reload (when the file changed, or always with `reload_unchanged`).
    pub fn apply(
        &self,
        shares: &[SmbShare],
        servers: &[String],
        reload_unchanged: bool,
    ) -> Result<ApplyReport, Error> {
        let path = self.shares_file();
        std::fs::create_dir_all(&self.conf_dir).map_err(Error::file("create", &self.conf_dir))?;
        let text = render_all(shares, servers);
        let old = std::fs::read_to_string(&path).ok();
        let mut report =
            ApplyReport { changed: old.as_deref() != Some(text.as_str()), ..Default::default() };
        if report.changed {
            crate::write_atomic(&path, &text).map_err(Error::file("write", &path))?;
            if let Err(why) = self.testparm() {
                let _ = match &old {
                    Some(o) => crate::write_atomic(&path, o),
                    None => std::fs::remove_file(&path),
                };
                return Err(Error::Program {
                    program: "testparm",
                    message: format!("testparm refused the configuration (not applied): {why}"),
                });
            }
        }
        if !report.changed && !reload_unchanged {
            return Ok(report);
        }
        match self.reload() {
            Ok(()) => report.reloaded = true,
            Err(why) => report.offline_reason = Some(why.to_string()),
        }
        Ok(report)
    }

    fn testparm(&self) -> Result<(), Error> {
        if !self.smb_conf.exists() {
            return Ok(());
        }
        let out = Command::new("testparm")
            .args(["-s", "--suppress-prompt"])
            .arg(&self.smb_conf)
            .output()
            .map_err(|source| Error::Spawn { program: "testparm".into(), hint: "", source })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        // testparm exits 0 on warnings; it reports unknown parameters and bad values on
        // stderr with these words.
        let bad: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                l.contains("Unknown parameter") || l.contains("Invalid") || l.contains("Error")
            })
            .collect();
        if !out.status.success() || !bad.is_empty() {
            let message = if bad.is_empty() { stderr.trim().to_string() } else { bad.join("; ") };
            return Err(Error::Program { program: "testparm", message });
        }
        Ok(())
    }

    fn reload(&self) -> Result<(), Error> {
        let out = Command::new("smbcontrol")
            .arg(format!("--configfile={}", self.smb_conf.display()))
            .args(["smbd", "reload-config"])
            .output()
            .map_err(|source| Error::Spawn { program: "smbcontrol".into(), hint: "", source })?;
        if out.status.success() {
            Ok(())
        } else {
            let msg = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            let message = if msg.is_empty() { "smbd is not running".into() } else { msg };
            Err(Error::Program { program: "smbcontrol", message })
        }
    }
}

/// Whether this machine looks like an SMB gateway (the CLI applies locally only there).
pub fn is_gateway(conf_dir: &Path) -> bool {
    conf_dir.is_dir()
}

/// The name smbd loads vfs_cairn as: `CAIRN_SMB_VFS_NAME` if set to a module name
/// (letters, digits, `_`), else `cairn` (the installed `vfs/cairn.so`). The test suites
/// load their own tree's build under a name of their own (`tests/smb/lib.sh`), so the
/// shares `cairn smb share add` writes there must name that module, not the installed one.
pub fn vfs_name() -> String {
    std::env::var("CAIRN_SMB_VFS_NAME")
        .ok()
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .unwrap_or_else(|| "cairn".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share() -> SmbShare {
        SmbShare {
            name: "projects".into(),
            volume: "vol0".into(),
            subdir: "/projects".into(),
            read_only: true,
            users: vec!["alice".into(), "@staff".into()],
            comment: "Project files".into(),
            browseable: true,
        }
    }

    #[test]
    fn share_names_compare_as_samba_does() {
        for (a, b) in [("proj", "PROJ"), ("Bücher", "BÜCHER"), ("Σχέδια", "ΣΧΈΔΙΑ"), ("a b", "A B")]
        {
            assert!(same_name(a, b), "{a} and {b} are one share to Samba");
        }
        // Samba maps one character to one: ß has no one-character upper case.
        for (a, b) in [("straße", "STRASSE"), ("proj", "proj2"), ("proj", "pröj"), ("", "a")] {
            assert!(!same_name(a, b), "{a} and {b} are two shares");
        }
    }

    #[test]
    fn renders_a_section() {
        let s = share().render(&["10.0.0.1:7420".into()]);
        for want in [
            "[projects]\n",
            "comment = Project files",
            "path = /projects",
            "read only = yes",
            "valid users = alice, @staff",
            "vfs objects = acl_xattr streams_xattr cairn",
            "kernel share modes = no",
            "cairn:volume = vol0",
            "cairn:servers = 10.0.0.1:7420",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        let mut open = share();
        open.users.clear();
        assert!(!open.render(&[]).contains("valid users"));
    }

    #[test]
    fn names_and_users() {
        for ok in ["vol0", "Team Share", "a.b-c_d$"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "a]b", "global", "IPC$", " lead", "x=y", &"n".repeat(81)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_users("alice, @staff bob").unwrap(), ["alice", "@staff", "bob"]);
        assert!(parse_users("a;b").is_err());
        assert!(parse_users("@").is_err());
        // a trailing '\' continued the `valid users` line onto `vfs objects`
        assert!(parse_users("DOM\\bob").is_ok());
        assert!(parse_users("bob\\").is_err());
        assert!(check_name("a  b").is_err());
        for (comment, subdir) in
            [("", "/a "), ("", "/a  b"), ("", "/%U"), ("x\\", "/"), ("x\\ ", "/"), ("", "/a\\")]
        {
            let mut s = share();
            s.comment = comment.into();
            s.subdir = subdir.into();
            assert!(s.validate().is_err(), "{comment:?} {subdir:?}");
        }
        for (vol, sub) in [("vol0/x\n[other]", "/"), ("", "vol0"), ("vol0", "rel")] {
            let mut s = share();
            s.volume = vol.into();
            s.subdir = sub.into();
            assert!(s.validate().is_err(), "{vol:?} {sub:?}");
        }
        let mut s = share();
        s.comment = "two\nlines".into();
        assert!(s.validate().is_err());
        assert!(share().validate().is_ok());
    }

    #[test]
    fn apply_without_smbd_writes_the_file() {
        let d = tempfile::tempdir().unwrap();
        let smbd = Smbd { conf_dir: d.path().join("cairn"), smb_conf: d.path().join("none.conf") };
        let r = smbd.apply(&[share()], &["127.0.0.1:7420".into()], true).unwrap();
        assert!(r.changed && !r.reloaded && r.offline_reason.is_some(), "{r:?}");
        assert!(std::fs::read_to_string(smbd.shares_file()).unwrap().contains("[projects]"));
        let r = smbd.apply(&[share()], &["127.0.0.1:7420".into()], false).unwrap();
        assert!(!r.changed && r.offline_reason.is_none());
        smbd.apply(&[], &[], false).unwrap();
        assert!(!std::fs::read_to_string(smbd.shares_file()).unwrap().contains("[projects]"));
    }
}
