//! What a chain head does once a mutation was applied — or not — on its own brick and
//! forwarded to the other bricks of the set: acknowledge it, demote the bricks that missed
//! it, record them as pending, step aside, re-send refused forwards, or fail it.
//!
//! Decided here without I/O (as openraft's engine emits commands a runtime executes):
//! [`AfterWrite::next_action`] returns the next [`Action`]; the runtime (`cairnd`'s
//! `chain/mutate.rs`) executes it and reports whether it succeeded with
//! [`AfterWrite::done`], until the action is [`Action::Acknowledge`] or [`Action::Fail`].
//! The simulation (`tests/simulation.rs`) executes the same actions on its model of the
//! bricks and the config store, with faults injected into each, so the rules simulated
//! are the ones that run.
//!
//! The rules (docs/failure-model.md, "Writes"):
//! - A brick that missed the write (down, or its forward failed) is recorded as pending by
//!   the head, **durably, before the client is answered**: a write whose record could not
//!   be written is not acknowledged (`EIO`) — the heal of that brick would not know to
//!   re-copy the inode. The record is also copied to the replicas that applied the write
//!   (best effort: it survives the head).
//! - Each brick that missed it is marked stale in the config store before the answer;
//!   if that fails the write fails with `EIO`, and the head flags the inode for itself.
//! - A forward whose connection dropped before the replica answered (a TCP reset, a peer
//!   session closed by a certificate reload or revocation) is not a missed write: both
//!   nodes may be alive. It is sent again on a new connection, a few times, asking first
//!   whether the replica applied it (so it applies once); only if that fails too does it
//!   count as missed. Demoting a live replica for it made the two bricks of a replica-2
//!   set, each heading some inodes, race to demote each other.
//! - A replica refusing the forward because this head is not up in its map is asked
//!   again a few times (maps converge); still refused, the write is not acknowledged and
//!   nobody is demoted for it (the head flags the inode for itself).
//! - A head that lost its lease or its serving state during the write does not
//!   acknowledge it, and flags the inode for itself.
//! - A replica refusing this head's own certificate (revoked: docs/security.md,
//!   "Revocation") did not miss a write: this head's node is the one leaving the cluster.
//!   Nobody is demoted for it; the head flags the inode for itself and fails the write
//!   (`ESTALEMAP`), and its node takes its own bricks out of service (the runtime's part),
//!   so the client retries at the new head. Demoting the replica instead took the
//!   trusted node's bricks out and left the revoked node serving.
//! - A head whose own storage failed (full, read-only, failing disk) steps aside if a
//!   replica can take over: it has itself marked stale (vouched for by the first replica
//!   that accepts), records itself as pending on itself and on the candidates, and the
//!   client retries at the new head. Otherwise the write fails with the head's error, and
//!   replicas that applied it anyway (a data write goes to them in parallel) are demoted.

use std::collections::{BTreeMap, VecDeque};

/// The head's own apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    Applied,
    /// Its storage failed (ENOSPC, EDQUOT, EROFS, EIO): a replica may well succeed.
    StorageFailed,
    /// An error of the op itself (EEXIST, EACCES, ...): every replica would give it.
    Failed,
}

/// One forward's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    Applied,
    /// Refused because this head is not up in the replica's map (`ESTALEMAP`).
    Refused,
    /// The connection dropped before the replica answered: it may or may not have
    /// applied it, and may well be alive.
    Dropped,
    /// Any other failure: the replica missed the write.
    Missed,
    /// The replica refused this head's certificate (revoked): this head may not write to
    /// the set any more. Not a write the replica missed.
    Distrusted,
}

/// What the head knows once its own apply and the forwards are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub head: u32,
    pub local: Local,
    /// The forwards sent and their results (none when the head failed before sending).
    pub forwards: Vec<(u32, Forward)>,
    /// Bricks of the set that are down (the plan's `pending`): never sent the write.
    pub down: Vec<u32>,
    /// The replicas that are `Up` in the head's map: those that could take over as head
    /// if the head's storage fails. When forwards went out (a data write goes to the
    /// replicas alongside the head's own write), only those of them that applied it may.
    /// (A `Healing` brick takes forwards but cannot head: stepping aside for it would
    /// leave the set without a source.)
    pub takers: Vec<u32>,
    /// How many times refused forwards may be sent again.
    pub resends: u32,
    /// How many times dropped forwards may be sent again on a new connection.
    pub redials: u32,
}

/// A command for the runtime. Every one but the two terminal ones is reported back with
/// [`AfterWrite::done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Pause, then send the forward again to these replicas, if this head is still up in
    /// its current map with its lease held (else report failure: nothing was sent); the
    /// new results are reported with [`AfterWrite::resent`] before `done`.
    Resend(Vec<u32>),
    /// Send the forward again to these replicas on a new connection, at once, asking each
    /// first whether it applied the request (its request id) and sending it only if not;
    /// the results are reported with [`AfterWrite::resent`] before `done`.
    Redial(Vec<u32>),
    /// Record durably on the head's brick that `peer` must re-copy the changed inodes.
    MarkPending { peer: u32 },
    /// Record the same on each brick of `to` (best effort, per brick).
    CopyPending { peer: u32, to: Vec<u32> },
    /// Mark `brick` stale in the config store, vouched for by brick `by`.
    MarkStale { brick: u32, by: u32 },
    /// Check that the head's node still holds its lease and the brick still serves.
    CheckServing,
    /// Answer the client with the result (terminal).
    Acknowledge,
    /// Answer the client with this failure (terminal).
    Fail(Failure),
}

/// Why a write is not acknowledged; the runtime maps each to an errno and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The head's own error, as it came.
    Head,
    /// The head's storage failed and it stepped aside for brick `by` (`ESTALEMAP`: the
    /// client refreshes its map and retries at the new head).
    SteppedAside { by: u32 },
    /// Brick `brick` refused the forward: this head is not up in its map (`ESTALEMAP`).
    Refused { brick: u32 },
    /// That `brick` missed the write could not be recorded durably on the head (`EIO`).
    NotRecorded { brick: u32 },
    /// Brick `brick` missed the write and could not be marked stale (`EIO`).
    NotDemoted { brick: u32 },
    /// The head's node lost its lease (or the brick left service) meanwhile (`EHOSTDOWN`).
    Fenced,
    /// Brick `brick` refused this head's certificate (revoked): the head's node leaves
    /// service, nobody is demoted (`ESTALEMAP`: the client retries at the new head).
    Distrusted { brick: u32 },
}

/// What happens when an action fails.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OnFail {
    /// Logged by the runtime; nothing changes.
    Ignore,
    /// The write will fail with this, after the rest of the queue (best-effort cleanup and
    /// demotions) ran; the first such failure wins.
    Defer(Failure),
    /// Stop here: flag the inode for the head itself (best effort), then fail.
    Abort(Failure),
    /// Step-aside candidate refused: try the next.
    NextCandidate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    action: Action,
    on_fail: OnFail,
    /// Set on a step-aside attempt: on success, the candidates to copy the record to.
    aside: Option<Vec<u32>>,
}

impl Step {
    fn new(action: Action, on_fail: OnFail) -> Step {
        Step { action, on_fail, aside: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing decided yet.
    Start,
    /// Re-sending dropped or refused forwards.
    Resending,
    /// The queue holds the rest; once it is empty, the write is acknowledged (or fails
    /// with the deferred failure).
    Settling,
}

/// The decisions taken after a replicated write, as a state machine (see the module doc).
#[derive(Debug, Clone)]
pub struct AfterWrite {
    head: u32,
    local: Local,
    forwards: BTreeMap<u32, Forward>,
    down: Vec<u32>,
    takers: Vec<u32>,
    resends: u32,
    redials: u32,
    phase: Phase,
    queue: VecDeque<Step>,
    current: Option<Step>,
    deferred: Option<Failure>,
}

impl AfterWrite {
    pub fn new(i: Input) -> AfterWrite {
        AfterWrite {
            head: i.head,
            local: i.local,
            forwards: i.forwards.into_iter().collect(),
            down: i.down,
            takers: i.takers,
            resends: i.resends,
            redials: i.redials,
            phase: Phase::Start,
            queue: VecDeque::new(),
            current: None,
            deferred: None,
        }
    }

    /// The next action. After a terminal one ([`Action::Acknowledge`], [`Action::Fail`])
    /// it returns that one again.
    pub fn next_action(&mut self) -> Action {
        assert!(self.current.is_none(), "next_action() before done() of {:?}", self.current);
        loop {
            if let Some(step) = self.queue.pop_front() {
                let a = step.action.clone();
                match &a {
                    Action::Acknowledge => {
                        let a = match &self.deferred {
                            Some(f) => Action::Fail(f.clone()),
                            None => Action::Acknowledge,
                        };
                        self.queue.push_front(Step::new(a.clone(), OnFail::Ignore));
                        return a;
                    }
                    Action::Fail(_) => {
                        self.queue.push_front(step);
                        return a;
                    }
                    _ => {
                        self.current = Some(step);
                        return a;
                    }
                }
            }
            match self.phase {
                Phase::Start if self.local != Local::Applied => {
                    self.head_failed();
                    self.phase = Phase::Settling;
                }
                Phase::Start | Phase::Resending => {
                    let dropped = self.with(Forward::Dropped);
                    if !dropped.is_empty() && self.redials > 0 {
                        self.redials -= 1;
                        self.phase = Phase::Resending;
                        self.current =
                            Some(Step::new(Action::Redial(dropped.clone()), OnFail::Ignore));
                        return Action::Redial(dropped);
                    }
                    let refused = self.with(Forward::Refused);
                    if !refused.is_empty() && self.resends > 0 {
                        self.resends -= 1;
                        self.phase = Phase::Resending;
                        self.current =
                            Some(Step::new(Action::Resend(refused.clone()), OnFail::Ignore));
                        return Action::Resend(refused);
                    }
                    self.settle();
                    self.phase = Phase::Settling;
                }
                Phase::Settling => unreachable!("the queue ends with a terminal action"),
            }
        }
    }

    /// The result of re-sending to `brick` (during an [`Action::Resend`] or
    /// [`Action::Redial`]).
    pub fn resent(&mut self, brick: u32, f: Forward) {
        if let Some(r) = self.forwards.get_mut(&brick) {
            *r = f;
        }
    }

    /// Whether the last action succeeded.
    pub fn done(&mut self, ok: bool) {
        let step = self.current.take().expect("done() without an action");
        if ok {
            if let (Some(candidates), Action::MarkStale { by, .. }) = (&step.aside, &step.action) {
                // Stepped aside: the head re-copies the inodes once it can.
                let me = self.head;
                self.queue.clear();
                self.queue.push_back(Step::new(Action::MarkPending { peer: me }, OnFail::Ignore));
                self.queue.push_back(Step::new(
                    Action::CopyPending { peer: me, to: candidates.clone() },
                    OnFail::Ignore,
                ));
                self.queue.push_back(Step::new(
                    Action::Fail(Failure::SteppedAside { by: *by }),
                    OnFail::Ignore,
                ));
            }
            return;
        }
        match step.on_fail {
            OnFail::Ignore | OnFail::NextCandidate => {
                if let Action::Resend(_) = step.action {
                    // Not up any more: no more re-sends.
                    self.resends = 0;
                }
            }
            OnFail::Defer(f) => {
                self.deferred.get_or_insert(f);
            }
            OnFail::Abort(f) => {
                self.queue.clear();
                self.flag_self_then_fail(f);
            }
        }
    }

    fn with(&self, f: Forward) -> Vec<u32> {
        self.forwards.iter().filter(|(_, r)| **r == f).map(|(t, _)| *t).collect()
    }

    fn flag_self_then_fail(&mut self, f: Failure) {
        let me = self.head;
        self.queue.push_back(Step::new(Action::MarkPending { peer: me }, OnFail::Ignore));
        self.queue.push_back(Step::new(Action::Fail(f), OnFail::Ignore));
    }

    /// The head's own apply failed.
    fn head_failed(&mut self) {
        let me = self.head;
        let took = self.with(Forward::Applied);
        // A replica whose connection dropped may hold the bytes too: never a taker, but
        // demoted with those that took it.
        let maybe: Vec<u32> = took.iter().copied().chain(self.with(Forward::Dropped)).collect();
        if self.local == Local::StorageFailed {
            let candidates: Vec<u32> = if self.forwards.is_empty() {
                self.takers.clone()
            } else {
                took.iter().copied().filter(|t| self.takers.contains(t)).collect()
            };
            for &by in &candidates {
                self.queue.push_back(Step {
                    action: Action::MarkStale { brick: me, by },
                    on_fail: OnFail::NextCandidate,
                    aside: Some(candidates.clone()),
                });
            }
        }
        // No step aside: the replicas that took the write hold bytes nobody acknowledged.
        for t in maybe {
            self.queue.push_back(Step::new(Action::MarkPending { peer: t }, OnFail::Ignore));
            self.queue.push_back(Step::new(Action::MarkStale { brick: t, by: me }, OnFail::Ignore));
        }
        self.queue.push_back(Step::new(Action::Fail(Failure::Head), OnFail::Ignore));
    }

    /// The head applied it; the refused forwards were sent again as often as allowed.
    fn settle(&mut self) {
        let me = self.head;
        if let Some(&brick) = self.with(Forward::Distrusted).first() {
            self.flag_self_then_fail(Failure::Distrusted { brick });
            return;
        }
        if let Some(&brick) = self.with(Forward::Refused).first() {
            self.flag_self_then_fail(Failure::Refused { brick });
            return;
        }
        // Still dropped after the new connections: missed, as far as anyone can tell.
        let failed: Vec<u32> =
            self.with(Forward::Missed).into_iter().chain(self.with(Forward::Dropped)).collect();
        let applied = self.with(Forward::Applied);
        let missed: Vec<u32> = self.down.iter().chain(failed.iter()).copied().collect();
        for &peer in &missed {
            self.queue.push_back(Step::new(
                Action::MarkPending { peer },
                OnFail::Defer(Failure::NotRecorded { brick: peer }),
            ));
        }
        for &peer in &failed {
            if !applied.is_empty() {
                self.queue.push_back(Step::new(
                    Action::CopyPending { peer, to: applied.clone() },
                    OnFail::Ignore,
                ));
            }
        }
        for &brick in &missed {
            self.queue.push_back(Step::new(
                Action::MarkStale { brick, by: me },
                OnFail::Abort(Failure::NotDemoted { brick }),
            ));
        }
        self.queue.push_back(Step::new(Action::CheckServing, OnFail::Abort(Failure::Fenced)));
        self.queue.push_back(Step::new(Action::Acknowledge, OnFail::Ignore));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run to the end, every action succeeding except those `fails` says.
    fn run(i: Input, fails: impl Fn(&Action) -> bool) -> (Vec<Action>, Action) {
        let mut w = AfterWrite::new(i);
        let mut done = vec![];
        loop {
            let a = w.next_action();
            if matches!(a, Action::Acknowledge | Action::Fail(_)) {
                return (done, a);
            }
            let ok = !fails(&a);
            done.push(a);
            w.done(ok);
        }
    }

    fn input(local: Local, forwards: &[(u32, Forward)], down: &[u32]) -> Input {
        Input {
            head: 0,
            local,
            forwards: forwards.to_vec(),
            down: down.to_vec(),
            takers: vec![],
            resends: 3,
            redials: 2,
        }
    }

    #[test]
    fn all_applied_is_acknowledged() {
        let (done, end) = run(input(Local::Applied, &[(1, Forward::Applied)], &[]), |_| false);
        assert_eq!(done, vec![Action::CheckServing]);
        assert_eq!(end, Action::Acknowledge);
    }

    #[test]
    fn a_missed_brick_is_recorded_and_demoted_before_the_ack() {
        let i = input(Local::Applied, &[(1, Forward::Missed), (2, Forward::Applied)], &[3]);
        let (done, end) = run(i, |_| false);
        assert_eq!(
            done,
            vec![
                Action::MarkPending { peer: 3 },
                Action::MarkPending { peer: 1 },
                Action::CopyPending { peer: 1, to: vec![2] },
                Action::MarkStale { brick: 3, by: 0 },
                Action::MarkStale { brick: 1, by: 0 },
                Action::CheckServing,
            ]
        );
        assert_eq!(end, Action::Acknowledge);
    }

    #[test]
    fn a_pending_record_that_failed_fails_the_write_after_the_demotion() {
        let i = input(Local::Applied, &[(1, Forward::Missed)], &[]);
        let (done, end) = run(i, |a| matches!(a, Action::MarkPending { peer: 1 }));
        assert!(done.contains(&Action::MarkStale { brick: 1, by: 0 }), "{done:?}");
        assert_eq!(end, Action::Fail(Failure::NotRecorded { brick: 1 }));
    }

    #[test]
    fn a_failed_demotion_fails_with_the_head_flagged() {
        let i = input(Local::Applied, &[(1, Forward::Missed)], &[]);
        let (done, end) = run(i, |a| matches!(a, Action::MarkStale { .. }));
        assert_eq!(done.last(), Some(&Action::MarkPending { peer: 0 }));
        assert_eq!(end, Action::Fail(Failure::NotDemoted { brick: 1 }));
    }

    #[test]
    fn refused_forwards_are_resent_then_fail_without_demotion() {
        let i = input(Local::Applied, &[(1, Forward::Refused)], &[]);
        let mut w = AfterWrite::new(i.clone());
        assert_eq!(w.next_action(), Action::Resend(vec![1]));
        w.resent(1, Forward::Applied);
        w.done(true);
        assert_eq!(w.next_action(), Action::CheckServing);
        w.done(true);
        assert_eq!(w.next_action(), Action::Acknowledge);
        // Never accepted: three re-sends, then the head flags itself and fails.
        let (done, end) = run(i.clone(), |_| false);
        assert_eq!(done.iter().filter(|a| matches!(a, Action::Resend(_))).count(), 3);
        assert_eq!(done.last(), Some(&Action::MarkPending { peer: 0 }));
        assert!(!done.iter().any(|a| matches!(a, Action::MarkStale { .. })), "{done:?}");
        assert_eq!(end, Action::Fail(Failure::Refused { brick: 1 }));
        // The head is no longer up: no more re-sends.
        let (done, _) = run(i, |a| matches!(a, Action::Resend(_)));
        assert_eq!(done.iter().filter(|a| matches!(a, Action::Resend(_))).count(), 1);
    }

    #[test]
    fn a_dropped_forward_is_sent_again_on_a_new_connection_before_anyone_is_demoted() {
        let i = input(Local::Applied, &[(1, Forward::Dropped), (2, Forward::Applied)], &[]);
        let mut w = AfterWrite::new(i.clone());
        assert_eq!(w.next_action(), Action::Redial(vec![1]));
        w.resent(1, Forward::Applied);
        w.done(true);
        assert_eq!(w.next_action(), Action::CheckServing);
        w.done(true);
        assert_eq!(w.next_action(), Action::Acknowledge);
        // Dropped on every new connection too: missed, recorded and demoted by the head.
        let (done, end) = run(i, |_| false);
        assert_eq!(
            done,
            vec![
                Action::Redial(vec![1]),
                Action::Redial(vec![1]),
                Action::MarkPending { peer: 1 },
                Action::CopyPending { peer: 1, to: vec![2] },
                Action::MarkStale { brick: 1, by: 0 },
                Action::CheckServing,
            ]
        );
        assert_eq!(end, Action::Acknowledge);
        // A head whose own write failed does not re-send; the dropped replica may hold
        // the bytes, so it is demoted like one that took them.
        let i = input(Local::Failed, &[(1, Forward::Dropped)], &[]);
        let (done, end) = run(i, |_| false);
        assert_eq!(
            done,
            vec![Action::MarkPending { peer: 1 }, Action::MarkStale { brick: 1, by: 0 }]
        );
        assert_eq!(end, Action::Fail(Failure::Head));
    }

    #[test]
    fn a_replica_distrusting_the_head_is_not_demoted() {
        // Replica 1 refused the head's revoked certificate (on a redial after its session
        // was closed, or at once); replica 2 applied it. Nobody is demoted or recorded as
        // missing it: the head flags itself and fails, and the client retries elsewhere.
        let i = input(Local::Applied, &[(1, Forward::Distrusted), (2, Forward::Applied)], &[]);
        let (done, end) = run(i, |_| false);
        assert_eq!(done, vec![Action::MarkPending { peer: 0 }]);
        assert_eq!(end, Action::Fail(Failure::Distrusted { brick: 1 }));
        let mut w = AfterWrite::new(input(Local::Applied, &[(1, Forward::Dropped)], &[]));
        assert_eq!(w.next_action(), Action::Redial(vec![1]));
        w.resent(1, Forward::Distrusted);
        w.done(true);
        assert_eq!(w.next_action(), Action::MarkPending { peer: 0 });
        w.done(true);
        assert_eq!(w.next_action(), Action::Fail(Failure::Distrusted { brick: 1 }));
    }

    #[test]
    fn fenced_during_the_write_is_not_acknowledged() {
        let i = input(Local::Applied, &[(1, Forward::Applied)], &[]);
        let (done, end) = run(i, |a| *a == Action::CheckServing);
        assert_eq!(done.last(), Some(&Action::MarkPending { peer: 0 }));
        assert_eq!(end, Action::Fail(Failure::Fenced));
    }

    #[test]
    fn a_head_whose_storage_failed_steps_aside_for_the_first_replica_that_accepts() {
        let mut i = input(Local::StorageFailed, &[], &[]);
        i.takers = vec![1, 2];
        let (done, end) = run(i, |a| *a == Action::MarkStale { brick: 0, by: 1 });
        assert_eq!(
            done,
            vec![
                Action::MarkStale { brick: 0, by: 1 },
                Action::MarkStale { brick: 0, by: 2 },
                Action::MarkPending { peer: 0 },
                Action::CopyPending { peer: 0, to: vec![1, 2] },
            ]
        );
        assert_eq!(end, Action::Fail(Failure::SteppedAside { by: 2 }));
    }

    #[test]
    fn a_failed_data_write_demotes_the_replicas_that_took_it() {
        // Storage failure, and the config store refuses the step aside.
        let mut i =
            input(Local::StorageFailed, &[(1, Forward::Applied), (2, Forward::Missed)], &[]);
        i.takers = vec![1, 2];
        let (done, end) = run(i, |a| matches!(a, Action::MarkStale { brick: 0, .. }));
        assert_eq!(
            done,
            vec![
                Action::MarkStale { brick: 0, by: 1 },
                Action::MarkPending { peer: 1 },
                Action::MarkStale { brick: 1, by: 0 },
            ]
        );
        assert_eq!(end, Action::Fail(Failure::Head));
        // A replica that took it but is not up (healing) cannot take over.
        let mut i = input(Local::StorageFailed, &[(1, Forward::Applied)], &[]);
        i.takers = vec![];
        let (done, _) = run(i, |_| false);
        assert!(!done.contains(&Action::MarkStale { brick: 0, by: 1 }), "{done:?}");
        // An error of the op itself: no step aside.
        let i = input(Local::Failed, &[(1, Forward::Applied)], &[]);
        let (done, end) = run(i, |_| false);
        assert_eq!(
            done,
            vec![Action::MarkPending { peer: 1 }, Action::MarkStale { brick: 1, by: 0 }]
        );
        assert_eq!(end, Action::Fail(Failure::Head));
    }
}
