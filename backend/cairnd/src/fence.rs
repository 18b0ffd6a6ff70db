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
//! One call in the request path ([`Fences::check`], from `service.rs`) and one background
//! task ([`run`]).

use cairn_config::Store;
use cairn_proto::msg::Request;
use cairn_proto::principal::Role;
use cairn_proto::rpc::Session;
use cairn_proto::{Errno, RemoteError};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

/// The fenced gateways and the live gateway sessions, by gateway name.
#[derive(Default)]
pub struct Fences {
    fenced: RwLock<HashMap<String, FenceDoc>>,
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
        for (name, doc) in records {
            match serde_json::from_str::<FenceDoc>(doc) {
                Ok(d) if d.fenced => {
                    now.insert(name.clone(), d);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(gateway = %name, error = %e, "fence record unreadable; treating the gateway as fenced");
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
        for d in newly {
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
        closed
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
/// every 2 s (a watch that broke is re-established by the store).
pub async fn run(fences: Arc<Fences>, store: Arc<Store>) {
    let mut watch = None;
    loop {
        if watch.is_none() {
            watch = store.watch().await.ok();
        }
        match store.gateway_objects(KIND).await {
            Ok((objs, _)) => {
                let records: Vec<(String, String)> =
                    objs.into_iter().map(|(name, doc, _)| (name, doc)).collect();
                fences.apply(&records);
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
