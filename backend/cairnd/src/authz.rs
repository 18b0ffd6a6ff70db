//! Who may do what: every request of a TLS session is checked against the principal its
//! certificate states, before anything runs (docs/security.md, "Roles").
//!
//! - Management that changes the cluster (peers, volumes, options, bricks, gateway
//!   documents, heal runs): `admin`.
//! - Management reads (peer/volume status and info, heal info): `admin`, `node`,
//!   `gateway`. Gateway documents, which carry secrets (CHAP): `admin`, `gateway`, and
//!   `node` (nodes answer for one another).
//! - Node-to-node work (chain forwards, heal ops, brick prepare/reset, local heal): `node`.
//! - Data (brick ops, the volume map and its pushes): every role, a `client` only on the
//!   volumes its certificate lists (EACCES) and, when read-only, without changing anything
//!   (EROFS).
//!
//! A pure function of the principal and the request, so the tests below cover every
//! request kind. `auth.allow` / `auth.reject` (by address) still apply on top.

use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::msg::{Op, Request};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::{Errno, RemoteError};

/// Whether `p` may have `req` served; the error names the principal, and the volume when
/// there is one.
pub fn authorize(p: &Principal, req: &Request) -> Result<(), RemoteError> {
    use Role::*;
    match req {
        Request::Hello(_) | Request::Ping | Request::InvalidateAck { .. } => Ok(()),
        Request::Replicate(r) => need(p, &[Node], || {
            format!("volume {}: only cluster nodes forward replicated changes", r.volume)
        }),
        Request::Brick(r) if is_heal(&r.op) => need(p, &[Node], || {
            format!(
                "volume {}: {} is a heal operation between cluster nodes",
                r.volume,
                r.op.name()
            )
        }),
        Request::Brick(r) => {
            data(p, &r.volume)?;
            if p.read_only && changes_data(&r.op) {
                return Err(RemoteError::new(
                    Errno::EROFS,
                    format!(
                        "volume {}: {p} has a read-only certificate; {} changes the volume",
                        r.volume,
                        r.op.name()
                    ),
                ));
            }
            Ok(())
        }
        Request::GetMap { volume } | Request::Subscribe { volume } => data(p, volume),
        Request::Mgmt(m) => mgmt(p, m),
    }
}

fn mgmt(p: &Principal, m: &MgmtRequest) -> Result<(), RemoteError> {
    use MgmtRequest as M;
    use Role::*;
    let what = || format!("{m:?}").split([' ', '(', '{']).next().unwrap_or_default().to_string();
    match m {
        M::PeerStatus
        | M::VolumeInfo { .. }
        | M::VolumeStatus { .. }
        | M::VolumeList
        | M::HealInfo { .. }
        | M::HealStatistics { .. } => {
            need(p, &[Admin, Node, Gateway], || format!("{} reads cluster state", what()))
        }
        M::GatewayList { kind } => {
            need(p, &[Admin, Node, Gateway], || format!("{kind} gateway documents hold secrets"))
        }
        M::BrickPrepare { .. }
        | M::BrickReset { .. }
        | M::BrickAdd { .. }
        | M::RebalanceLocal { .. }
        | M::HealLocal { .. } => {
            need(p, &[Node], || format!("{} is sent between cluster nodes", what()))
        }
        M::PeerProbe { .. }
        | M::PeerDetach { .. }
        | M::VolumeCreate(_)
        | M::VolumeStart { .. }
        | M::VolumeStop { .. }
        | M::VolumeDelete { .. }
        | M::VolumeSet { .. }
        | M::VolumeReset { .. }
        | M::GatewayPut { .. }
        | M::GatewayDelete { .. }
        | M::HealFull { .. }
        | M::ResetBrick { .. }
        | M::ReplaceBrick { .. }
        | M::VolumeAddBrick { .. }
        | M::VolumeRebalance { .. }
        | M::VolumeRemoveBrick { .. }
        | M::PeerTokenCreate { .. }
        | M::PeerTokenRevoke { .. }
        | M::CertRecord(_)
        | M::CertRevoke { .. } => need(p, &[Admin], || format!("{} changes the cluster", what())),
        M::PeerTokenList | M::AuditLog { .. } | M::CertList => {
            need(p, &[Admin], || format!("{} is for admins", what()))
        }
        // The join token is the authorization (checked by `enroll::handle`); it is also
        // the one request of a connection without a certificate (`rpc::Session`).
        M::Enroll(_) => Ok(()),
        // The holder's own certificate (or one a node passes on: `renew::handle`).
        M::CertRenew(_) => need(p, &[Node, Gateway], || {
            "CertRenew renews a node's or a gateway's own certificate".into()
        }),
    }
}

/// EACCES unless `p` has one of `roles`.
fn need(p: &Principal, roles: &[Role], why: impl FnOnce() -> String) -> Result<(), RemoteError> {
    if roles.contains(&p.role) {
        return Ok(());
    }
    let roles: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    Err(RemoteError::new(
        Errno::EACCES,
        format!("permission denied for {p}: {}; needs role {}", why(), roles.join(" or ")),
    ))
}

/// Data of `volume`: any role; a client only on the volumes its certificate lists.
fn data(p: &Principal, volume: &str) -> Result<(), RemoteError> {
    if p.may_use(volume) {
        return Ok(());
    }
    Err(RemoteError::new(
        Errno::EACCES,
        format!(
            "volume {volume}: permission denied for {p}: its certificate allows only volume(s) {}",
            p.volumes.as_deref().unwrap_or_default().join(",")
        ),
    ))
}

/// Brick ops used only between nodes by heal and the rebalance.
fn is_heal(op: &Op) -> bool {
    matches!(
        op,
        Op::PendingList { .. }
            | Op::HealFetch { .. }
            | Op::PendingClear { .. }
            | Op::PendingAdd { .. }
            | Op::HealApply { .. }
            | Op::HealSync { .. }
            | Op::HealSums { .. }
            | Op::HealWrite { .. }
            | Op::MigrateMark { .. }
            | Op::MigrateIn { .. }
            | Op::MigrateOut { .. }
            | Op::MigrateDrop { .. }
            | Op::MigrateStub { .. }
    )
}

/// Ops a read-only certificate may not send: those that change files or directories.
/// Opening, closing, syncing, locks and share reservations change no data.
fn changes_data(op: &Op) -> bool {
    match op {
        Op::Open { .. } | Op::Release { .. } | Op::Fsync { .. } => false,
        Op::Delegate { write, .. } => *write,
        op => op.is_mutation(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::testing;

    fn p(role: Role) -> Principal {
        Principal::new("x", role)
    }

    fn client(volumes: Option<&[&str]>, read_only: bool) -> Principal {
        Principal {
            name: "c".into(),
            role: Role::Client,
            volumes: volumes.map(|v| v.iter().map(|s| s.to_string()).collect()),
            read_only,
        }
    }

    /// Every request kind the fuzz samples cover, with every role: nothing panics, and
    /// the admin may do everything but node-to-node work.
    #[test]
    fn every_request_kind_has_a_rule() {
        for req in testing::sample_requests() {
            for role in [Role::Admin, Role::Node, Role::Gateway, Role::Client] {
                let r = authorize(&p(role), &req);
                if let Err(e) = &r {
                    assert!(matches!(e.errno, Errno::EACCES | Errno::EROFS), "{req:?}: {e}");
                    assert!(e.message.contains(&format!("{role} x")), "{e}");
                }
            }
        }
    }

    #[test]
    fn management_changes_need_admin() {
        let stop = Request::Mgmt(MgmtRequest::VolumeStop { name: "v".into(), force: false });
        assert!(authorize(&p(Role::Admin), &stop).is_ok());
        for role in [Role::Node, Role::Gateway, Role::Client] {
            let e = authorize(&p(role), &stop).unwrap_err();
            assert_eq!(e.errno, Errno::EACCES);
            assert!(e.message.contains("VolumeStop"), "{e}");
        }
        let list = Request::Mgmt(MgmtRequest::GatewayList { kind: "iscsi-target".into() });
        assert!(authorize(&p(Role::Gateway), &list).is_ok());
        assert!(authorize(&p(Role::Client), &list).is_err());
        let prep = Request::Mgmt(MgmtRequest::HealLocal { name: "v".into(), full: false });
        assert!(authorize(&p(Role::Node), &prep).is_ok());
        assert!(authorize(&p(Role::Admin), &prep).is_err());
        // Certificates: listed, recorded and revoked by admins only.
        for m in [MgmtRequest::CertList, MgmtRequest::CertRevoke { what: "web1".into() }] {
            let r = Request::Mgmt(m);
            assert!(authorize(&p(Role::Admin), &r).is_ok());
            for role in [Role::Node, Role::Gateway, Role::Client] {
                assert_eq!(authorize(&p(role), &r).unwrap_err().errno, Errno::EACCES);
            }
        }
    }

    #[test]
    fn forwards_and_heal_need_a_node() {
        for req in testing::sample_requests() {
            let heal = matches!(&req, Request::Brick(b) if is_heal(&b.op));
            if matches!(req, Request::Replicate(_)) || heal {
                assert!(authorize(&p(Role::Node), &req).is_ok(), "{req:?}");
                for role in [Role::Admin, Role::Gateway, Role::Client] {
                    assert!(authorize(&p(role), &req).is_err(), "{role}: {req:?}");
                }
            }
        }
    }

    #[test]
    fn clients_are_held_to_their_volumes_and_read_only() {
        let limited = client(Some(&["a"]), false);
        let ro = client(None, true);
        for req in testing::sample_requests() {
            let Request::Brick(b) = &req else { continue };
            if is_heal(&b.op) {
                continue;
            }
            let mut other = b.clone();
            other.volume = "b".into();
            let mut mine = b.clone();
            mine.volume = "a".into();
            assert!(authorize(&limited, &Request::Brick(mine)).is_ok());
            let e = authorize(&limited, &Request::Brick(other)).unwrap_err();
            assert_eq!(e.errno, Errno::EACCES);
            assert!(e.message.contains("volume b"), "{e}");
            match authorize(&ro, &req) {
                Ok(()) => assert!(!changes_data(&b.op), "{:?}", b.op),
                Err(e) => {
                    assert!(changes_data(&b.op));
                    assert_eq!(e.errno, Errno::EROFS);
                    assert!(e.message.contains("read-only"), "{e}");
                }
            }
        }
        let map = |v: &str| Request::GetMap { volume: v.into() };
        assert!(authorize(&limited, &map("a")).is_ok());
        assert_eq!(authorize(&limited, &map("b")).unwrap_err().errno, Errno::EACCES);
        let sub = Request::Subscribe { volume: "b".into() };
        assert!(authorize(&limited, &sub).is_err());
    }
}
