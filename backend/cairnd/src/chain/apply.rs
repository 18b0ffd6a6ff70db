//! The apply of a mutation at its head: on the head's brick and forwarded to the replicas,
//! along one of three paths (a retry the head applied before, a data write sent to the
//! replicas while the head writes, anything else applied at the head first).

use crate::exec::{blocking, exec_local, is_storage_error, result_attr};
use crate::node::{BrickSlot, Node};
use crate::peers::forward;
use bytes::Bytes;
use cairn_brick::Exec;
use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::msg::{BrickRequest, Op, ReplicateRequest, Reply};
use cairn_proto::{Attr, Creds, Errno, Id, RemoteError};
use cairn_replication::ack::Local;
use cairn_replication::ChainPlan;
use std::sync::Arc;

/// One mutation at its head, checked and locked: what the apply and the settling share.
pub(super) struct Write<'a> {
    pub node: &'a Arc<Node>,
    pub slot: &'a Arc<BrickSlot>,
    pub map: &'a VolumeMap,
    pub req: &'a BrickRequest,
    pub data: Bytes,
    /// The forward (its `brick` set per replica).
    pub rreq: ReplicateRequest,
    pub plan: ChainPlan,
    /// The inodes it changes (`mutate::changed_inodes`).
    pub changed: Vec<Id>,
}

/// Each forward's result, by replica.
pub(super) type Results = Vec<(u32, Result<(), RemoteError>)>;

/// What the apply did.
pub(super) struct Applied {
    /// The head's result, or its error and how it counts (`Local::StorageFailed` or
    /// `Local::Failed`).
    pub head: Result<(Reply, Bytes), (Local, RemoteError)>,
    /// Attributes of this brick's copies of the parent directories right after the op,
    /// for a client that asked (it updates its cached directory attributes from them).
    pub parents: Vec<Attr>,
    pub results: Results,
    /// The replicas that are up, which could take over as head.
    pub takers: Vec<u32>,
}

fn head_error(e: RemoteError) -> (Local, RemoteError) {
    (if is_storage_error(&e) { Local::StorageFailed } else { Local::Failed }, e)
}

impl Write<'_> {
    /// Forward the mutation to `to`, all at once.
    pub async fn send(&self, to: &[u32], map: &VolumeMap) -> Results {
        let sends = to.iter().map(|&t| {
            let r = ReplicateRequest { brick: t, ..self.rreq.clone() };
            let data = self.data.clone();
            async move { (t, forward(self.node, map, t, r, data).await) }
        });
        futures::future::join_all(sends).await
    }

    /// Send the forward again to `to` on new connections, at once: the old ones dropped
    /// before the replicas answered, so each may or may not have applied it. A forward
    /// with a request id asks the replica first whether it applied it (`confirm`), and is
    /// sent only if not, so it is applied once. (A forward the replica is still applying
    /// when the question arrives is applied twice: a write or a setattr lands the same
    /// again; a create, link, unlink or rename fails there, and the replica flags itself
    /// for heal, as for any forward it cannot apply.)
    pub async fn redial(&self, to: &[u32]) -> Results {
        let sends = to.iter().map(|&t| async move {
            let r = ReplicateRequest { brick: t, confirm: false, ..self.rreq.clone() };
            if r.req.is_some() {
                let ask = ReplicateRequest { confirm: true, ..r.clone() };
                match forward(self.node, self.map, t, ask, Bytes::new()).await {
                    Err(e) if e.errno == Errno::ENOENT => {}
                    answered => return (t, answered),
                }
            }
            (t, forward(self.node, self.map, t, r, self.data.clone()).await)
        });
        futures::future::join_all(sends).await
    }

    async fn send_all(&self) -> Results {
        self.send(&self.plan.forward, self.map).await
    }

    /// Apply on the head and forward. `done`: the head's result of an earlier apply of the
    /// same request (as a replica: its head did not answer the client).
    pub async fn apply(&mut self, done: Option<(Reply, Bytes)>) -> Applied {
        if let Some((reply, out)) = done {
            return self.answer_retry(reply, out).await;
        }
        if matches!(self.req.op, Op::Write { .. }) {
            // Data writes go to the replicas while the head writes its own copy, so a
            // replicated write costs one disk write of latency, not two. If the head's copy
            // fails, the replicas that took it hold bytes nobody acknowledged (settled by
            // `cairn_replication::ack`: demoted, or the head steps aside for them).
            let local = exec_local(
                self.slot,
                self.req.creds.clone(),
                self.req.op.clone(),
                self.data.clone(),
                None,
                false,
            );
            let (local, results) = tokio::join!(local, self.send_all());
            return Applied {
                head: local.map_err(head_error),
                parents: vec![],
                results,
                takers: self.up_replicas(),
            };
        }
        self.head_first().await
    }

    /// A client's retry of a request this brick holds applied but never answered, with
    /// `reply`, the result remembered for it: answered from here only if every replica
    /// applied it too; otherwise forwarded again as a new request (the replicas that had
    /// it find it applied), so every copy ends the same.
    async fn answer_retry(&mut self, reply: Reply, out: Bytes) -> Applied {
        self.rreq.confirm = true;
        let results = self.send_all().await;
        if results.iter().all(|(_, r)| r.is_ok()) {
            tracing::debug!(volume = %self.req.volume, brick = self.req.brick, op = self.req.op.name(), req = ?self.req.req, "retried request applied here and on every replica before; answered");
            return Applied { head: Ok((reply, out)), parents: vec![], results, takers: vec![] };
        }
        tracing::debug!(volume = %self.req.volume, brick = self.req.brick, op = self.req.op.name(), req = ?self.req.req, "retried request applied here, not on every replica; forwarded again");
        self.rreq.confirm = false;
        self.forward_again(reply, out).await
    }

    /// Applied here (as a replica) but not on every replica: not applied here again (a
    /// rename's source is gone now, an exclusive create's name taken), but forwarded again,
    /// as a replica applies it: the replicas that missed it apply it, those that have it
    /// find it applied. A rename's moved inode is at its destination by now.
    async fn forward_again(&mut self, reply: Reply, out: Bytes) -> Applied {
        if let Op::Rename { dst_dir, dst_name, .. } = &self.req.op {
            let look = Op::Lookup { dir: *dst_dir, name: dst_name.clone() };
            if let Ok((Reply::Entry { attr, .. }, _)) =
                exec_local(self.slot, Creds::root(), look, Bytes::new(), None, false).await
            {
                self.rreq.result = Some(attr);
            }
        } else {
            self.rreq.result = result_attr(&reply);
        }
        let results = self.send_all().await;
        Applied { head: Ok((reply, out)), parents: vec![], results, takers: vec![] }
    }

    /// The replicas that are `Up` in the map: those that could head the set instead.
    fn up_replicas(&self) -> Vec<u32> {
        let map = self.map;
        let up = |t: &u32| map.brick(*t).is_some_and(|(_, b)| b.state == BrickState::Up);
        self.plan.forward.iter().copied().filter(up).collect()
    }

    /// Anything but a data write: applied at the head, then forwarded with its result.
    async fn head_first(&mut self) -> Applied {
        // A rename's replicas are told which inode the head moved (looked up under the
        // locks, just before it moves), so that one lacking it reports the miss instead of
        // skipping the rename (see the brick store's `replica_rename_done`).
        let moved = match &self.req.op {
            Op::Rename { src_dir, src_name, .. } => {
                let look = Op::Lookup { dir: *src_dir, name: src_name.clone() };
                match exec_local(self.slot, Creds::root(), look, Bytes::new(), None, false).await {
                    Ok((Reply::Entry { attr, .. }, _)) => Some(attr),
                    _ => None,
                }
            }
            _ => None,
        };
        let req = self.req;
        let dirs = if req.parents { req.op.parent_dirs() } else { vec![] };
        let local =
            exec_head(self.slot, req.creds.clone(), req.op.clone(), self.data.clone(), dirs).await;
        match local {
            Ok((reply, out, parents)) => {
                self.rreq.result = moved.or_else(|| result_attr(&reply));
                let results = self.send_all().await;
                Applied { head: Ok((reply, out)), parents, results, takers: vec![] }
            }
            Err(e) => {
                // Nothing was forwarded: any replica that is up can take the op instead.
                let takers = self.up_replicas();
                Applied { head: Err(head_error(e)), parents: vec![], results: vec![], takers }
            }
        }
    }
}

/// Run a client's op on the local brick as chain head, then (in the same blocking task,
/// under the caller's inode locks) read this brick's attributes of directories `dirs`.
/// The attributes are all or nothing: empty if any could not be read.
async fn exec_head(
    slot: &Arc<BrickSlot>,
    creds: Creds,
    op: Op,
    data: Bytes,
    dirs: Vec<Id>,
) -> Result<(Reply, Bytes, Vec<Attr>), RemoteError> {
    if dirs.is_empty() {
        return exec_local(slot, creds, op, data, None, false).await.map(|(r, o)| (r, o, vec![]));
    }
    let brick = slot.brick.clone();
    blocking(slot, op.name(), move || {
        let (reply, out) = brick.execute(&creds, &op, &data, Exec::Primary)?;
        let attrs: Vec<Attr> = dirs
            .iter()
            .map_while(|&id| {
                match brick.execute(&Creds::root(), &Op::GetAttr { id }, &[], Exec::Primary) {
                    Ok((Reply::Attr(a), _)) => Some(a),
                    _ => None,
                }
            })
            .collect();
        let attrs = if attrs.len() == dirs.len() { attrs } else { vec![] };
        Ok((reply, out, attrs))
    })
    .await
}
