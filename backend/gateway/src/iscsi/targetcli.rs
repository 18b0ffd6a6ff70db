//! Running targetcli-fb: its preferences, its conf dir, reading LIO back, and what a
//! gateway applied before.

use super::lio::{parse_saveconfig, Lio};
use crate::error::Error;
use std::collections::BTreeSet;

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
    pub fn read(&self) -> Result<Lio, Error> {
        let _ = std::fs::remove_file(self.running_file());
        let out = self
            .command()
            .arg(format!("saveconfig savefile={}", self.running_file().display()))
            .output()
            .map_err(|source| Error::Spawn { program: self.program.clone(), hint: "", source })?;
        self.read_saved(&format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// The configuration the last [`Targetcli::run`] saved when it finished (what it left
    /// LIO with: no second targetcli start, which takes seconds). `said`: targetcli's
    /// output, for the error.
    pub fn read_saved(&self, said: &str) -> Result<Lio, Error> {
        let text = std::fs::read_to_string(self.running_file()).map_err(|_| Error::Program {
            program: "targetcli",
            message: format!("targetcli could not read LIO's configuration: {said}"),
        })?;
        parse_saveconfig(&text)
    }

    /// Run `cmds` in one targetcli process (commands on stdin: one start-up, which takes
    /// seconds), after [`TARGETCLI_PREFS`] and followed by `saveconfig` (LIO's own
    /// configuration survives a reboot) and by a `saveconfig` into our `running.json`.
    /// targetcli goes on after a failed command, so the caller checks the outcome by
    /// reading that state ([`Targetcli::read_saved`]). Returns targetcli's output.
    pub fn run(&self, cmds: &[String]) -> Result<String, Error> {
        use std::io::Write;
        std::fs::create_dir_all(self.conf_dir.join("targetcli"))
            .map_err(Error::file("create", &self.conf_dir))?;
        let _ = std::fs::remove_file(self.running_file());
        let mut child = self
            .command()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|source| Error::Spawn { program: self.program.clone(), hint: "", source })?;
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
            .map_err(|source| Error::Pipe { what: "cannot talk to targetcli".into(), source })?;
        let out = child
            .wait_with_output()
            .map_err(|source| Error::Pipe { what: "targetcli".into(), source })?;
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

    pub fn set_applied(&self, iqns: &BTreeSet<String>) -> Result<(), Error> {
        let text = serde_json::to_string(iqns).expect("strings serialize");
        crate::write_atomic(&self.applied_file(), &text)
            .map_err(Error::file("write", self.applied_file()))
    }
}
