//! The brick's identity on disk: the marker `.cairn/brick.json` (which volume, which
//! brick), the making of a new brick (`prepare`) and of a replaced one (`reset`), and the
//! full-heal request a reset leaves (`.cairn/full-heal`).

use crate::error::io_err;
use crate::ids;
use crate::sys::{self, XTarget};
use cairn_proto::{Errno, Id, RemoteError};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Contents of `.cairn/brick.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickMarker {
    pub format: u32,
    pub volume: String,
    /// 32 hex digits.
    pub volume_id: String,
    pub index: u32,
}

pub(crate) fn read_marker(path: &Path) -> Result<Option<BrickMarker>, RemoteError> {
    let p = path.join(".cairn/brick.json");
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            RemoteError::new(Errno::EIO, format!("brick marker {}: {e}", p.display()))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RemoteError::new(
            Errno::from_io(&e),
            format!("reading brick marker {}: {e}", p.display()),
        )),
    }
}

/// Make `path` a brick of a volume: create it if missing, refuse it if it is not a
/// directory, if it already is a brick (of any volume), or if it is not empty (unless
/// `force`). Writes the marker, `.cairn/` and `data/` (mode 0755, root-owned).
pub(crate) fn prepare(path: &Path, marker: &BrickMarker, force: bool) -> Result<(), RemoteError> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.is_dir() => {
            return Err(RemoteError::new(
                Errno::ENOTDIR,
                format!("brick path {shown} exists and is not a directory"),
            ))
        }
        Ok(_) => {
            if let Some(m) = read_marker(path)? {
                return Err(RemoteError::new(
                    Errno::EEXIST,
                    format!(
                        "{shown} is already brick {} of volume {} ({})",
                        m.index, m.volume, m.volume_id
                    ),
                ));
            }
            let non_empty = std::fs::read_dir(path)
                .map_err(|e| io_err(e, format!("listing brick path {shown}")))?
                .next()
                .is_some();
            if non_empty && !force {
                return Err(RemoteError::new(
                    Errno::ENOTEMPTY,
                    format!("brick path {shown} is not empty (use force to reuse it)"),
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path)
                .map_err(|e| io_err(e, format!("creating brick path {shown}")))?;
        }
        Err(e) => return Err(io_err(e, format!("brick path {shown}"))),
    }
    if marker.volume_id.len() != 32 || Id::from_hex(&marker.volume_id).is_none() {
        return Err(RemoteError::new(
            Errno::EINVAL,
            format!("volume id {:?} is not 32 hex digits", marker.volume_id),
        ));
    }
    let step = |what: &str, r: io::Result<()>| -> Result<(), RemoteError> {
        match r {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                Err(io_err(e, format!("preparing brick {shown}: {what}")))
            }
            _ => Ok(()),
        }
    };
    use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
    let mk = |p: PathBuf, mode: u32| -> io::Result<()> {
        std::fs::DirBuilder::new().mode(mode).create(&p)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
    };
    step("chmod 0711", std::fs::set_permissions(path, PermissionsExt::from_mode(0o711)))?;
    step("chown root", std::os::unix::fs::chown(path, Some(0), Some(0)))?;
    step("mkdir .cairn", mk(path.join(".cairn"), 0o711))?;
    step("mkdir .cairn/ids", mk(path.join(".cairn/ids"), 0o711))?;
    step("mkdir .cairn/pending", mk(path.join(".cairn/pending"), 0o700))?;
    step("mkdir .cairn/csum", mk(path.join(".cairn/csum"), 0o700))?;
    step("mkdir .cairn/csum/dirty", mk(path.join(".cairn/csum/dirty"), 0o700))?;
    step("mkdir data", mk(path.join("data"), 0o755))?;
    step("chown data", std::os::unix::fs::chown(path.join("data"), Some(0), Some(0)))?;
    let data = sys::cstr(path.join("data").as_os_str().as_encoded_bytes())
        .map_err(|e| io_err(e, "brick path"))?;
    step("set root id on data/", XTarget::Path(data).set(ids::XATTR_ID, &Id::ROOT.to_bytes(), 0))?;
    step("mkdir .cairn/ids/00", mk(path.join(".cairn/ids/00"), 0o711))?;
    step("mkdir .cairn/ids/00/00", mk(path.join(".cairn/ids/00/00"), 0o711))?;
    step(
        "root index link",
        symlink("../../../../data", path.join(".cairn/ids/00/00").join(Id::ROOT.to_hex())),
    )?;
    let json = serde_json::to_vec_pretty(marker).expect("marker serializes");
    let tmp = path.join(".cairn/brick.json.tmp");
    step("write marker", std::fs::write(&tmp, json))?;
    step("sync marker", std::fs::File::open(&tmp).and_then(|f| f.sync_all()))?;
    step("rename marker", std::fs::rename(&tmp, path.join(".cairn/brick.json")))?;
    step("sync .cairn", std::fs::File::open(path.join(".cairn")).and_then(|f| f.sync_all()))?;
    Ok(())
}

// ----- full heal -----

/// `.cairn/full-heal`: present while a full crawl of the brick is owed (after a reset, or
/// asked for by `cairn volume heal VOL full`). It survives restarts; only a crawl that
/// finished removes it.
const FULL_HEAL: &str = ".cairn/full-heal";

fn write_durably(path: &std::path::Path, body: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(path.parent().unwrap_or(std::path::Path::new("/")))?.sync_all()
}

/// `.cairn/full-heal-position.json`: where a running full crawl is (saved by `cairnd`
/// about once a second), so a crawl cut by a restart continues from there. Removed with
/// the request, and by a new request (which starts from the root).
const FULL_HEAL_POS: &str = ".cairn/full-heal-position.json";

/// Request a full crawl of the brick at `root` (durably).
pub(crate) fn request_full_heal_at(root: &std::path::Path, why: &str) -> Result<(), RemoteError> {
    let _ = std::fs::remove_file(root.join(FULL_HEAL_POS));
    let p = root.join(FULL_HEAL);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let body = serde_json::json!({ "requested": now, "why": why }).to_string();
    write_durably(&p, body.as_bytes())
        .map_err(|e| io_err(e, format!("requesting a full heal ({})", p.display())))
}

/// True while a full crawl is owed to this brick.
pub(crate) fn full_heal_requested(root: &Path) -> bool {
    root.join(FULL_HEAL).exists()
}

/// The position the running (or a cut) full crawl saved, if any.
pub(crate) fn full_heal_position(root: &Path) -> Option<Vec<u8>> {
    std::fs::read(root.join(FULL_HEAL_POS)).ok()
}

/// Save the position of the running full crawl (durably; only while one is owed).
pub(crate) fn save_full_heal_position(root: &Path, body: &[u8]) -> Result<(), RemoteError> {
    let p = root.join(FULL_HEAL_POS);
    if !full_heal_requested(root) {
        return Ok(());
    }
    write_durably(&p, body)
        .map_err(|e| io_err(e, format!("saving the full heal position ({})", p.display())))
}

/// A full crawl finished: forget the request (and its position).
pub(crate) fn clear_full_heal(root: &Path) -> Result<(), RemoteError> {
    let _ = std::fs::remove_file(root.join(FULL_HEAL_POS));
    let p = root.join(FULL_HEAL);
    match std::fs::remove_file(&p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err(e, format!("clearing {}", p.display())))
        }
        _ => std::fs::File::open(root.join(".cairn"))
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err(e, format!("syncing {}/.cairn", root.display()))),
    }
}

/// Make `path` brick `marker.index` of its volume again after its disk was replaced
/// (`reset-brick ... commit`): an empty or missing directory is prepared as a new
/// brick; with `force`, a directory that still holds this very brick (same volume id
/// and index) is kept as it is, and any other non-empty directory is reused. Either
/// way the brick is flagged for a full heal, so it serves nothing until a crawl copied
/// every inode of its replica set onto it.
pub(crate) fn reset(
    path: &std::path::Path,
    marker: &BrickMarker,
    force: bool,
) -> Result<(), RemoteError> {
    let shown = path.display();
    let mpath = path.join(".cairn/brick.json");
    let existing: Option<BrickMarker> = match std::fs::read(&mpath) {
        Ok(b) => Some(serde_json::from_slice(&b).map_err(|e| {
            RemoteError::new(Errno::EINVAL, format!("{}: bad brick marker: {e}", mpath.display()))
        })?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(e, format!("reading {}", mpath.display()))),
    };
    match existing {
        Some(m) if m.volume_id == marker.volume_id && m.index == marker.index => {
            if !force {
                return Err(RemoteError::new(
                    Errno::EEXIST,
                    format!(
                        "{shown} still holds brick {} of volume {}; use 'commit force' to \
                         rebuild it in place",
                        m.index, m.volume
                    ),
                ));
            }
        }
        Some(m) => {
            return Err(RemoteError::new(
                Errno::EEXIST,
                format!(
                    "{shown} is brick {} of volume {} ({}), not of this volume",
                    m.index, m.volume, m.volume_id
                ),
            ))
        }
        None => prepare(path, marker, force)?,
    }
    request_full_heal_at(path, "reset-brick")
}
