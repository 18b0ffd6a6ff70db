//! Gateway configuration: what the NFS, SMB and iSCSI gateways serve.
//!
//! Exports and shares are kept in the cluster's config store (etcd, through `cairnd`'s
//! management API) as JSON documents of the types defined here, one object per export or
//! share, so every gateway serves the same ones. The `cairn` CLI validates a document
//! before storing it; each gateway renders the documents into its server's configuration
//! and applies the difference to the running server without a restart:
//!
//! - [`nfs`]: Ganesha EXPORT blocks (one file per export) applied over Ganesha's DBus export
//!   manager (`AddExport` / `UpdateExport` / `RemoveExport`);
//! - [`smb`]: smb.conf share sections (one include file) applied with
//!   `smbcontrol smbd reload-config`;
//! - [`iscsi`]: LIO storage objects and targets, applied as the difference between the
//!   running and the wanted configuration with targetcli-fb commands.
//!
//! Nothing here talks to the config store: callers pass documents in and out.

mod error;
pub mod iscsi;
pub mod nfs;
pub mod nfs_ds;
pub mod pnfs;
pub mod smb;

use error::invalid;
pub use error::Error;

/// Config-store kind of NFS exports (key `/cairn/gateway/nfs-export/<export id>`).
pub const NFS_EXPORT: &str = "nfs-export";
/// Config-store kind of SMB shares (key `/cairn/gateway/smb-share/<share name>`).
pub const SMB_SHARE: &str = "smb-share";
/// Config-store kind of iSCSI LUNs (key `/cairn/gateway/iscsi-lun/<name>`).
pub const ISCSI_LUN: &str = "iscsi-lun";
/// Config-store kind of iSCSI targets (key `/cairn/gateway/iscsi-target/<iqn>`).
pub const ISCSI_TARGET: &str = "iscsi-target";
/// Config-store kind of iSCSI gateway records: what each gateway's LIO holds (key
/// `/cairn/gateway/iscsi-gateway/<gateway name>`).
pub const ISCSI_GATEWAY: &str = "iscsi-gateway";

/// Split `VOLUME[/SUBDIR]` into the volume name and an absolute, normalised directory
/// inside it (`/` for the root). `..` is refused; `.` and repeated slashes are dropped.
pub fn split_volume_path(spec: &str) -> Result<(String, String), Error> {
    let (vol, rest) = match spec.split_once('/') {
        Some((v, r)) => (v, r),
        None => (spec, ""),
    };
    if vol.is_empty()
        || vol.len() > 64
        || !vol.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(invalid(format!(
            "invalid volume name '{vol}' in '{spec}': expected VOLUME[/SUBDIR], volume names \
             are 1 to 64 characters of A-Z a-z 0-9 _ -"
        )));
    }
    let mut parts = vec![];
    for p in rest.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                return Err(invalid(format!("'{spec}': '..' is not allowed in a subdirectory")))
            }
            // '\' escapes the next character in Ganesha's quoted strings and continues
            // the line in smb.conf
            p if p.chars().any(|c| c.is_control() || c == '"' || c == '\\') => {
                return Err(invalid(format!(
                    "'{spec}': subdirectory names may not contain quotes, backslashes or \
                     control characters"
                )))
            }
            p => parts.push(p),
        }
    }
    Ok((vol.to_string(), format!("/{}", parts.join("/"))))
}

/// A stored `volume` and `subdir` pair (as [`split_volume_path`] makes them): the volume a
/// name alone, the subdirectory absolute and in normal form. Both go into rendered configs,
/// so a document edited by hand must not smuggle text through either.
pub fn check_volume_subdir(volume: &str, subdir: &str) -> Result<(), Error> {
    if volume.contains('/') {
        return Err(invalid(format!("invalid volume name '{volume}': a volume name has no '/'")));
    }
    split_volume_path(volume)?;
    let (_, normal) = split_volume_path(&format!("{volume}{subdir}"))?;
    if !subdir.starts_with('/') || normal != subdir {
        return Err(invalid(format!(
            "invalid subdirectory '{subdir}' of volume {volume}: it must be absolute, without \
             empty or '.' components or a trailing '/' (e.g. {normal})"
        )));
    }
    Ok(())
}

/// Write `content` to `path` atomically (temp file in the same directory, then rename).
/// The temp name is unique to this process and call: a gateway's `cairn ... sync --watch`
/// and a `cairn nfs export add` on the same machine apply the same files at the same
/// time, and with one shared temp name one's rename took the other's file away (ENOENT).
pub(crate) fn write_atomic(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{seq}", std::process::id()));
    let tmp = path.with_file_name(name);
    std::fs::write(&tmp, content)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_concurrent_writers() {
        // two appliers (sync --watch and the CLI) writing the same file at once
        let dir = std::env::temp_dir().join(format!("cairn-write-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("export.1.conf");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        write_atomic(&path, &format!("writer {t} round {i}\n")).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("writer "));
        let left: Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("export.1.conf")], "temp files left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn volume_paths() {
        assert_eq!(split_volume_path("vol0").unwrap(), ("vol0".into(), "/".into()));
        assert_eq!(split_volume_path("vol0/").unwrap(), ("vol0".into(), "/".into()));
        assert_eq!(split_volume_path("vol0//a/./b/").unwrap(), ("vol0".into(), "/a/b".into()));
        assert!(split_volume_path("vol0/a/../b").unwrap_err().to_string().contains(".."));
        assert!(split_volume_path("/a").unwrap_err().to_string().contains("invalid volume name"));
        assert!(split_volume_path("v ol").is_err());
        assert!(split_volume_path("vol0/a\"b").is_err());
        assert!(split_volume_path("vol0/a\\").is_err());
    }

    #[test]
    fn stored_volume_and_subdir() {
        assert!(check_volume_subdir("vol0", "/").is_ok());
        assert!(check_volume_subdir("vol0", "/a/b").is_ok());
        // what the render fuzz tests found: the pair was checked as one string, so text
        // after a '/' in the volume, or a relative subdir, got through
        for (v, d) in
            [("vol0/a; }", "/"), ("", "vol0"), ("vol", "0"), ("vol0", "/a/"), ("vol0", "//a")]
        {
            assert!(check_volume_subdir(v, d).is_err(), "{v:?} {d:?}");
        }
    }
}
