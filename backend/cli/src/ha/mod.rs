//! `cairn gateway ha status`: the state of the gateways' Pacemaker cluster (docs/ha.md);
//! `cairn gateway ha drain|undrain NODE`: planned moves (`pcs node standby|unstandby`, then
//! a wait on `crm_mon` until the VIPs have moved: [`drain_done`], [`undrain_done`]).
//!
//! Runs `crm_mon --one-shot --output-as=xml` on this gateway and summarises it: quorum,
//! fencing, the gateways (online, standby, unclean), where each virtual IP (IPaddr2
//! resource) runs, which gateways pass the `cairn-gateway` health check, and the failed
//! actions with their exit reasons, and Pacemaker's fence history (who was fenced, when, by
//! which gateway, with what result: `crm_mon --fence-history=3`, the fencer's history that
//! `stonith_admin --history '*'` shows). Where CTDB (clustered Samba) runs on the gateway, it
//! adds CTDB's view from `ctdb -X status` and `ctdb leader`: each node's state and which
//! node is the leader (the holder of the cluster lock). CTDB owns no address here: the
//! VIPs above serve SMB too. The summaries are pure ([`summarize`], [`parse_ctdb_status`])
//! and unit-tested; only [`status`] runs programs.
//!
//! Exit code: 0 when the cluster has quorum and every VIP runs on exactly one gateway,
//! 1 otherwise (also when crm_mon cannot be run or its output cannot be read), or when a
//! connected CTDB node is banned or unhealthy.
//!
//! `cairn gateway ha setup`: the cluster formed or taken, the HA config and resources loaded
//! (`setup`), after the timeout budget is checked (`budget`).
//!
//! The module by idea: `status` (crm_mon summarised and printed), `xml` (the reader it
//! needs), `ctdb` (CTDB's view), `drain` (planned moves), `fence` (backend fencing records).

mod budget;
mod ctdb;
mod drain;
mod fence;
mod setup;
#[cfg(test)]
mod setup_tests;
mod status;
#[cfg(test)]
mod tests;
mod xml;

pub use budget::{check as check_budget, Budget};
pub use ctdb::{parse_ctdb_status, HaCtdb, HaCtdbNode};
pub use drain::{check_node, drain, drain_done, undrain_done, vips_on, HaDrain, HaMove};
pub use fence::{fence, fence_next, pending_nodes, AppliedReport, FenceRecord, FENCE_KIND};
pub use setup::{check_args, check_cluster_nodes, same_xml, setup, HaSetup};
pub use status::{status, summarize, HaFailure, HaFence, HaNode, HaStatus, HaVip};
