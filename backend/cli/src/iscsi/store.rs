//! The iSCSI records in the config store: LUNs, targets, and what each gateway's LIO holds.

use super::Gw;
use crate::gateway::{call, load_kind, store_if_unchanged, Failure, STORE_RETRIES};
use crate::plan::Settings;
use cairn_gateway::iscsi::{GatewayRecord, IscsiLun, IscsiTarget};
use cairn_gateway::{ISCSI_GATEWAY, ISCSI_LUN, ISCSI_TARGET};
use cairn_proto::mgmt::MgmtRequest;
use std::collections::BTreeSet;

pub(super) async fn load_gateways(s: &Settings) -> Result<(Vec<GatewayRecord>, u64), Failure> {
    let (mut v, rev) = load_kind::<GatewayRecord>(s, ISCSI_GATEWAY).await?;
    v.sort_by(|a, b| a.gateway.cmp(&b.gateway));
    Ok((v, rev))
}

/// Store what this gateway's LIO holds (the `user:cairn` objects read back).
pub(super) async fn record_gateway(g: &Gw<'_>, held: BTreeSet<String>) -> Result<(), Failure> {
    let rec = GatewayRecord { gateway: g.gateway.clone(), luns: held };
    let doc = serde_json::to_string(&rec).expect("plain data always serializes");
    call(
        g.s,
        MgmtRequest::GatewayPut {
            kind: ISCSI_GATEWAY.into(),
            name: g.gateway.clone(),
            doc,
            if_unchanged_since: None,
        },
    )
    .await
    .map_err(|f| {
        Failure::failed(format!("cannot store gateway record {}: {}", g.gateway, f.message))
    })?;
    Ok(())
}
pub(super) async fn load_luns(s: &Settings) -> Result<Vec<IscsiLun>, Failure> {
    let (mut v, _) = load_kind::<IscsiLun>(s, ISCSI_LUN).await?;
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

pub(super) async fn load_targets_rev(s: &Settings) -> Result<(Vec<IscsiTarget>, u64), Failure> {
    let (mut v, rev) = load_kind::<IscsiTarget>(s, ISCSI_TARGET).await?;
    v.sort_by(|a, b| a.iqn.cmp(&b.iqn));
    Ok((v, rev))
}

pub(super) async fn load_targets(s: &Settings) -> Result<Vec<IscsiTarget>, Failure> {
    Ok(load_targets_rev(s).await?.0)
}

pub(super) fn find_lun<'a>(luns: &'a [IscsiLun], name: &str) -> Result<&'a IscsiLun, Failure> {
    luns.iter()
        .find(|l| l.name == name)
        .ok_or_else(|| Failure::failed(format!("no LUN named {name}")))
}

pub(super) fn mapped_by<'a>(targets: &'a [IscsiTarget], name: &str) -> Vec<&'a str> {
    targets
        .iter()
        .filter(|t| t.luns.iter().any(|m| m.name == name))
        .map(|t| t.iqn.as_str())
        .collect()
}
/// Take LUN `name` out of every gateway record (after `--force`): a gateway still running
/// puts it back in its next sync only if its LIO still has it.
pub(super) async fn forget_holders(s: &Settings, name: &str) -> Result<(), Failure> {
    // one record per round; a lost race costs a round
    for _ in 0..STORE_RETRIES * 20 {
        let (gws, rev) = load_gateways(s).await?;
        let Some(mut r) = gws.into_iter().find(|r| r.luns.contains(name)) else {
            return Ok(());
        };
        r.luns.remove(name);
        let doc = serde_json::to_string(&r).expect("plain data always serializes");
        store_if_unchanged(s, ISCSI_GATEWAY, &r.gateway, doc, rev).await?;
    }
    Err(Failure::failed("the gateway records kept changing concurrently; try again"))
}
