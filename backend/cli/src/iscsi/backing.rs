//! A LUN's backing file on its volume: made at create, removed once no gateway holds it.

use super::store::{load_gateways, load_luns};
use crate::gateway::{call, servers, Failure};
use crate::plan::Settings;
use cairn_gateway::iscsi::{self, format_size, IscsiLun};
use cairn_gateway::ISCSI_LUN;
use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::types::{Creds, FileType, Id, SetAttr};
use cairn_proto::Errno;
use std::sync::Arc;
use std::time::Duration;

/// Remove the backing file and the record of LUN `lun` (being deleted, held by no gateway,
/// or `--force`).
pub(super) async fn finish_delete(s: &Settings, lun: &IscsiLun) -> Result<(), Failure> {
    let vol = mount(s, &lun.volume).await?;
    let r = remove_backing_file(&vol, lun).await;
    let _ = vol.unmount().await;
    r?;
    call(s, MgmtRequest::GatewayDelete { kind: ISCSI_LUN.into(), name: lun.name.clone() }).await?;
    Ok(())
}

/// After a sync: remove the files (and records) of the LUNs being deleted that no gateway
/// holds any more. Returns what was removed, for the report.
pub(super) async fn finish_deletes(s: &Settings) -> Result<Vec<String>, Failure> {
    let luns = load_luns(s).await?;
    if !luns.iter().any(|l| l.deleting) {
        return Ok(vec![]);
    }
    let (gws, _) = load_gateways(s).await?;
    let mut done = vec![];
    for l in iscsi::deletable(&luns, &gws) {
        finish_delete(s, l).await?;
        done.push(format!(
            "LUN {}: no gateway holds it any more; removed {}/{}",
            l.name, l.volume, l.path
        ));
    }
    Ok(done)
}
pub(super) async fn mount(
    s: &Settings,
    volume: &str,
) -> Result<Arc<cairn_client::Volume>, Failure> {
    let opts = cairn_client::MountOptions {
        servers: servers(s).await?,
        volume: volume.to_string(),
        client_name: "cairn-cli".into(),
        connect_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    cairn_client::Volume::mount(opts)
        .await
        .map_err(|x| Failure::failed(format!("cannot mount volume {volume}: {}", x.message)))
}

/// Make the LUN's backing file: parent directories as needed, the file exclusively (an
/// existing one is refused), then its size (fallocated unless thin).
pub(super) async fn make_backing_file(
    vol: &cairn_client::Volume,
    lun: &IscsiLun,
) -> Result<(), Failure> {
    let c = Creds::root();
    let where_ = |m: String| Failure::failed(format!("{}/{}: {m}", lun.volume, lun.path));
    let comps: Vec<&str> = lun.path.split('/').collect();
    let (file, dirs) = comps.split_last().expect("checked: non-empty path");
    let mut dir = Id::ROOT;
    for d in dirs {
        let a = match vol.lookup(&c, dir, d.as_bytes()).await {
            Ok(a) => a,
            Err(e) if e.errno == Errno::ENOENT => {
                match vol.mkdir(&c, dir, d.as_bytes(), 0o755).await {
                    Ok(a) => a,
                    Err(e) if e.errno == Errno::EEXIST => {
                        vol.lookup(&c, dir, d.as_bytes()).await.map_err(|e| where_(e.message))?
                    }
                    Err(e) => {
                        return Err(where_(format!("cannot create directory {d}: {}", e.message)))
                    }
                }
            }
            Err(e) => return Err(where_(e.message)),
        };
        if a.kind != FileType::Directory {
            return Err(where_(format!("{d} is not a directory")));
        }
        dir = a.id;
    }
    let a = match vol.create(&c, dir, file.as_bytes(), 0o600, true).await {
        Ok(a) => a,
        Err(e) if e.errno == Errno::EEXIST => {
            return Err(Failure::failed(format!(
                "backing file {}/{} already exists (give another --file, or delete it)",
                lun.volume, lun.path
            )))
        }
        Err(e) => return Err(where_(format!("cannot create: {}", e.message))),
    };
    let sized = if lun.thin {
        vol.setattr(&c, a.id, &SetAttr { size: Some(lun.size), ..Default::default() })
            .await
            .map(|_| ())
    } else {
        vol.fallocate(&c, a.id, 0, 0, lun.size).await
    };
    if let Err(e) = sized {
        let _ = vol.unlink(&c, dir, file.as_bytes()).await;
        return Err(where_(format!(
            "cannot {} {}: {}",
            if lun.thin { "size it to" } else { "allocate" },
            format_size(lun.size),
            e.message
        )));
    }
    Ok(())
}

pub(super) async fn remove_backing_file(
    vol: &cairn_client::Volume,
    lun: &IscsiLun,
) -> Result<(), Failure> {
    let c = Creds::root();
    let (dir, file) = match lun.path.rsplit_once('/') {
        Some((d, f)) => {
            let a = vol.resolve(&c, format!("/{d}").as_bytes()).await;
            (a.map(|a| a.id), f)
        }
        None => (Ok(Id::ROOT), lun.path.as_str()),
    };
    let r = match dir {
        Ok(d) => vol.unlink(&c, d, file.as_bytes()).await,
        Err(e) => Err(e),
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.errno == Errno::ENOENT => Ok(()),
        Err(e) => Err(Failure::failed(format!(
            "record deleted, but {}/{} could not be removed: {}",
            lun.volume, lun.path, e.message
        ))),
    }
}
