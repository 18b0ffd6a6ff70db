//! Backend-enforced fencing of gateways (docs/ha.md, "Fencing").
//!
//! When Pacemaker fences a gateway, its fence agent (`appliance/ha/fence_cairn`) runs
//! `cairn gateway fence NODE`, which stores a fence record in the config store: gateway
//! object `fence/NODE`, JSON [`FenceDoc`] (`fenced: true` and a generation one higher than
//! the last). Every `cairnd` watches those records and, for a fenced gateway:
//!
//! - closes every session whose TLS certificate names it (principal role `gateway`, name
//!   NODE): the connection ends, so the locks, share reservations, leases and delegations
//!   it held are released at once for the gateway that takes over;
//! - refuses every later request of a session of NODE — reads too: a gateway that froze
//!   and resumes must neither write stale data nor serve what it cached — with `EACCES`
//!   and a message naming the gateway, its fence generation and how to lift it. Only
//!   `Ping` and `InvalidateAck` are answered (they change nothing and help others).
//!
//! `cairn gateway unfence NODE` (the OCF agent's start, when the gateway rejoins its
//! cluster) stores `fenced: false`; new sessions of NODE are served again. A plain
//! (`transport = plain`) session carries no identity and cannot be fenced.
//!
//! **What each cairnd applied.** After applying the records, each cairnd publishes the
//! generation of every record it applied: gateway object `fence-applied/<node>`, JSON
//! [`AppliedDoc`], stored under its node lease (it vanishes with the node's `/live` key when
//! the node dies or is cut off from etcd). `cairn gateway fence NODE --wait-applied SECS`
//! (the fence agent's call) succeeds only once every live node reports the new generation,
//! i.e. once no cairnd can still serve the fenced gateway's sessions.
//!
//! One call in the request path ([`Fences::check`], from `service.rs`) and one background
//! task ([`run`]).

use cairn_config::{NodeLease, Store};
use cairn_proto::msg::Request;
use cairn_proto::principal::Role;
use cairn_proto::rpc::Session;
use cairn_proto::{Errno, RemoteError};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The gateway-object kind of fence records: `/cairn/gateway/fence/<gateway>`.
pub const KIND: &str = "fence";

/// A fence record (the document of gateway object `fence/<gateway>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceDoc {
    /// The gateway's name: its certificate's common name.
    pub gateway: String,
    pub fenced: bool,
    /// Raised by every fence; an unfence keeps it.
    pub generation: u64,
    /// Unix time of the last change.
    #[serde(default)]
    pub at: u64,
    /// Who or what fenced it (e.g. "pacemaker: fence_cairn on gw2").
    #[serde(default)]
    pub reason: String,
}

/// The gateway-object kind of the nodes' reports of what they applied:
/// `/cairn/gateway/fence-applied/<node>`, under the node's lease.
pub const APPLIED_KIND: &str = "fence-applied";

/// What one cairnd enforces (the document of gateway object `fence-applied/<node>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedDoc {
    pub node: String,
    /// Every fence record this node applied, fenced or not: gateway -> generation. A
    /// generation here means that fence (or a later unfence) is in force on this node:
    /// the sessions it closed are gone and the gateway's requests are refused.
    pub generations: BTreeMap<String, u64>,
    /// Unix time of the apply that changed this report.
    #[serde(default)]
    pub at: u64,
}

/// The fenced gateways and the live gateway sessions, by gateway name.
#[derive(Default)]
pub struct Fences {
    fenced: RwLock<HashMap<String, FenceDoc>>,
    /// The generation of every record applied (fenced or not), for the node's report.
    applied: RwLock<BTreeMap<String, u64>>,
    sessions: RwLock<HashMap<String, HashMap<u64, Weak<Session>>>>,
}

impl Fences {
    /// In the request path: refuses requests of a fenced gateway's sessions, and
    /// remembers the sessions of the others so that a later fence can close them.
    pub fn check(&self, s: &Arc<Session>, req: &Request) -> Result<(), RemoteError> {
        let Some(p) = s.principal.as_ref().filter(|p| p.role == Role::Gateway) else {
            return Ok(());
        };
        if matches!(req, Request::Ping | Request::InvalidateAck { .. }) {
            return Ok(());
        }
        // Remember first, then look: a fence applied between the two either sees this
        // session (and closes it) or is seen here. A session is written once (its first
        // request); later requests only read.
        let known = self.sessions.read().get(&p.name).is_some_and(|m| m.contains_key(&s.id));
        if !known {
            self.sessions
                .write()
                .entry(p.name.clone())
                .or_default()
                .entry(s.id)
                .or_insert_with(|| Arc::downgrade(s));
        }
        match self.fenced.read().get(&p.name) {
            None => Ok(()),
            Some(f) => Err(refusal(f, req)),
        }
    }

    /// A session ended.
    pub fn forget(&self, s: &Session) {
        let Some(p) = s.principal.as_ref().filter(|p| p.role == Role::Gateway) else {
            return;
        };
        let mut sessions = self.sessions.write();
        if let Some(m) = sessions.get_mut(&p.name) {
            m.remove(&s.id);
            if m.is_empty() {
                sessions.remove(&p.name);
            }
        }
    }

    /// Whether `gateway` is fenced now.
    #[cfg(test)]
    pub fn is_fenced(&self, gateway: &str) -> bool {
        self.fenced.read().contains_key(gateway)
    }

    /// Apply the stored records (every `fence/*` object, as `(name, doc)`): the fenced
    /// set becomes exactly theirs, and the sessions of newly fenced gateways are closed.
    /// A record that cannot be read fences its gateway (the safe side). Returns the
    /// number of sessions closed.
    pub fn apply(&self, records: &[(String, String)]) -> usize {
        let mut now = HashMap::new();
        let mut generations = BTreeMap::new();
        for (name, doc) in records {
            match serde_json::from_str::<FenceDoc>(doc) {
                Ok(d) if d.fenced => {
                    generations.insert(name.clone(), d.generation);
                    now.insert(name.clone(), d);
                }
                Ok(d) => {
                    generations.insert(name.clone(), d.generation);
                }
                Err(e) => {
                    tracing::error!(gateway = %name, error = %e, "fence record unreadable; treating the gateway as fenced");
                    generations.insert(name.clone(), 0);
                    now.insert(
                        name.clone(),
                        FenceDoc {
                            gateway: name.clone(),
                            fenced: true,
                            generation: 0,
                            at: 0,
                            reason: format!("unreadable fence record: {e}"),
                        },
                    );
                }
            }
        }
        let newly: Vec<FenceDoc> = {
            let mut fenced = self.fenced.write();
            for (name, d) in fenced.iter() {
                if !now.contains_key(name) {
                    tracing::warn!(gateway = %name, generation = d.generation, "gateway unfenced: its new sessions are served");
                }
            }
            let newly = now
                .iter()
                .filter(|(n, d)| fenced.get(*n).map(|o| o.generation) != Some(d.generation))
                .map(|(_, d)| d.clone())
                .collect();
            *fenced = now;
            newly
        };
        let mut closed = 0;
        for d in &newly {
            let sessions: Vec<Arc<Session>> = self
                .sessions
                .write()
                .remove(&d.gateway)
                .unwrap_or_default()
                .into_values()
                .filter_map(|w| w.upgrade())
                .collect();
            for s in &sessions {
                s.close();
            }
            closed += sessions.len();
            tracing::warn!(
                gateway = %d.gateway,
                generation = d.generation,
                reason = %d.reason,
                sessions_closed = sessions.len(),
                "gateway fenced: its sessions are closed and its requests refused (EACCES)"
            );
        }
        // Reported only now: every session of a newly fenced gateway is closed.
        *self.applied.write() = generations;
        closed
    }

    /// The generation of every record applied so far (gateway -> generation): what this
    /// node reports in `fence-applied/<node>`.
    pub fn applied(&self) -> BTreeMap<String, u64> {
        self.applied.read().clone()
    }
}

fn refusal(f: &FenceDoc, req: &Request) -> RemoteError {
    let what = match req {
        Request::Brick(r) => format!("volume {}: {}: ", r.volume, r.op.name()),
        Request::GetMap { volume } | Request::Subscribe { volume } => format!("volume {volume}: "),
        _ => String::new(),
    };
    RemoteError::new(
        Errno::EACCES,
        format!(
            "{what}gateway {} is fenced (generation {}{}): cairnd refuses its sessions until \
             it rejoins its cluster and is unfenced (cairn gateway unfence {})",
            f.gateway,
            f.generation,
            if f.reason.is_empty() { String::new() } else { format!(", {}", f.reason) },
            f.gateway
        ),
    )
}

/// Keep `fences` equal to the stored records: on every change of the config store and
/// every 2 s (a watch that broke is re-established by the store). After each apply that
/// changed what this node enforces (or under a new lease), publish it as
/// `fence-applied/<node>` under the node's lease (`lease`: None at shutdown).
pub async fn run(
    fences: Arc<Fences>,
    store: Arc<Store>,
    node: String,
    lease: impl Fn() -> Option<Arc<NodeLease>>,
) {
    let mut watch = None;
    // What was last published, and under which lease.
    let mut published: Option<(i64, BTreeMap<String, u64>)> = None;
    loop {
        if watch.is_none() {
            watch = store.watch().await.ok();
        }
        match store.gateway_objects(KIND).await {
            Ok((objs, _)) => {
                let records: Vec<(String, String)> =
                    objs.into_iter().map(|(name, doc, _)| (name, doc)).collect();
                fences.apply(&records);
                if let Some(l) = lease().filter(|l| l.is_alive()) {
                    let now = (l.lease_id(), fences.applied());
                    if published.as_ref() != Some(&now) {
                        match publish(&l, &node, &now.1).await {
                            Ok(()) => published = Some(now),
                            Err(e) => tracing::warn!(
                                node = %node, error = %e,
                                "cannot publish the fence generations this node applied (fence-applied/{node}); retrying"
                            ),
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the gateways' fence records"),
        }
        match watch.as_mut() {
            Some(w) => {
                tokio::select! {
                    r = w.recv() => if r.is_none() { watch = None },
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
            None => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

async fn publish(
    lease: &NodeLease,
    node: &str,
    generations: &BTreeMap<String, u64>,
) -> Result<(), cairn_config::ConfigError> {
    let doc = AppliedDoc {
        node: node.to_string(),
        generations: generations.clone(),
        at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let json = serde_json::to_string(&doc).expect("plain data always serializes");
    let rev = lease.publish_gateway_object(APPLIED_KIND, node, &json).await?;
    tracing::info!(node, revision = rev, generations = ?generations, "published the fence generations applied");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(gw: &str, fenced: bool, generation: u64) -> (String, String) {
        let d = FenceDoc { gateway: gw.into(), fenced, generation, at: 1, reason: "test".into() };
        (gw.into(), serde_json::to_string(&d).unwrap())
    }

    #[test]
    fn records_set_the_fenced_gateways() {
        let f = Fences::default();
        f.apply(&[doc("gw1", true, 1), doc("gw2", false, 3)]);
        assert!(f.is_fenced("gw1") && !f.is_fenced("gw2"));
        f.apply(&[doc("gw1", false, 1)]);
        assert!(!f.is_fenced("gw1"));
        // A record that cannot be read fences (the safe side).
        f.apply(&[("gw3".into(), "{not json".into())]);
        assert!(f.is_fenced("gw3"));
        f.apply(&[]);
        assert!(!f.is_fenced("gw3"));
    }

    #[test]
    fn the_report_names_the_generation_of_every_record_applied() {
        let f = Fences::default();
        assert!(f.applied().is_empty());
        f.apply(&[doc("gw1", true, 2), doc("gw2", false, 5)]);
        assert!(f.is_fenced("gw1"));
        let want: BTreeMap<String, u64> = [("gw1".into(), 2), ("gw2".into(), 5)].into();
        assert_eq!(f.applied(), want);
        // an unfence keeps the generation: still applied
        f.apply(&[doc("gw1", false, 2), doc("gw2", false, 5)]);
        assert_eq!(f.applied(), want);
        // an unreadable record fences with generation 0 (never counts as a new fence applied)
        f.apply(&[("gw1".into(), "{".into())]);
        assert_eq!(f.applied(), [("gw1".to_string(), 0)].into());
        let d = AppliedDoc { node: "n1".into(), generations: want, at: 9 };
        let back: AppliedDoc = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn the_refusal_names_the_gateway_the_generation_and_the_way_back() {
        let d = FenceDoc {
            gateway: "gw1".into(),
            fenced: true,
            generation: 4,
            at: 0,
            reason: "pacemaker".into(),
        };
        let e = refusal(&d, &Request::GetMap { volume: "vol0".into() });
        assert_eq!(e.errno, Errno::EACCES);
        assert!(
            e.message.starts_with("volume vol0: gateway gw1 is fenced (generation 4, pacemaker)"),
            "{e}"
        );
        assert!(e.message.contains("cairn gateway unfence gw1"), "{e}");
    }
}
