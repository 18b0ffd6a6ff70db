//! The gateways' timeout budget (docs/ha.md, "Timeout budget"), checked by
//! `cairn gateway ha setup` before it changes anything: backend failure detection < the
//! gateway health check's backend timeout, and the worst gateway failover < the clients'
//! I/O timeout. Pure: [`check`].

use serde::Serialize;

/// What the VIP group's start (portblock, the NFSv4 takeover, IPaddr2) may take, in
/// milliseconds: measured 3–6 s together with fencing in namespaces, budgeted alone.
pub const VIP_START_MS: u64 = 5000;

/// The values the budget is made of (milliseconds).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub backend_detection_ms: u64,
    pub backend_timeout_ms: u64,
    pub token_ms: u64,
    pub consensus_ms: u64,
    pub fence_ms: u64,
    pub vip_start_ms: u64,
    pub lease_ms: u64,
    pub grace_ms: u64,
    pub client_timeout_ms: u64,
    /// token + consensus + fence + VIP start + grace + lease/2 (Ganesha's grace check).
    pub failover_ms: u64,
    /// What breaks the budget (empty when it holds).
    pub violations: Vec<String>,
}

fn s(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else if ms.is_multiple_of(100) {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{:.2} s", ms as f64 / 1000.0)
    }
}

/// Check the budget. `consensus_ms` None: corosync's default, 1.2 x token.
#[allow(clippy::too_many_arguments)]
pub fn check(
    backend_detection_s: u64,
    backend_timeout_s: u64,
    token_ms: u64,
    consensus_ms: Option<u64>,
    fence_s: u64,
    lease_s: u64,
    grace_s: u64,
    client_timeout_s: u64,
) -> Budget {
    let consensus_ms = consensus_ms.unwrap_or(token_ms * 12 / 10);
    let mut b = Budget {
        backend_detection_ms: backend_detection_s * 1000,
        backend_timeout_ms: backend_timeout_s * 1000,
        token_ms,
        consensus_ms,
        fence_ms: fence_s * 1000,
        vip_start_ms: VIP_START_MS,
        lease_ms: lease_s * 1000,
        grace_ms: grace_s * 1000,
        client_timeout_ms: client_timeout_s * 1000,
        failover_ms: 0,
        violations: Vec::new(),
    };
    b.failover_ms =
        b.token_ms + b.consensus_ms + b.fence_ms + b.vip_start_ms + b.grace_ms + b.lease_ms / 2;
    if b.backend_timeout_ms <= b.backend_detection_ms {
        b.violations.push(format!(
            "backend failure detection ({}, --backend-detection) must be shorter than the gateway \
             health check's backend timeout ({}, --backend-timeout): a brick node's failover \
             would look like a dead gateway and move its VIPs",
            s(b.backend_detection_ms),
            s(b.backend_timeout_ms)
        ));
    }
    if b.lease_ms < 10_000 {
        b.violations.push(format!(
            "the NFSv4 lease ({}, --lease) is under 10 s: a client cut off for longer loses its \
             opens and locks",
            s(b.lease_ms)
        ));
    }
    if b.grace_ms < b.lease_ms {
        b.violations.push(format!(
            "the NFSv4 grace period ({}, --grace) is shorter than the lease ({}): a client that \
             learns of the move at its next renewal finds grace over and loses its locks",
            s(b.grace_ms),
            s(b.lease_ms)
        ));
    }
    if b.failover_ms >= b.client_timeout_ms {
        b.violations.push(format!(
            "the worst gateway failover (corosync token {} + consensus {} + fencing {} \
             (--fence-timeout) + VIP start {} + NFSv4 grace {} + grace check {} = {}) must be \
             shorter than the clients' I/O timeout ({}, --client-timeout): clients would fail \
             before the VIP is back",
            s(b.token_ms),
            s(b.consensus_ms),
            s(b.fence_ms),
            s(b.vip_start_ms),
            s(b.grace_ms),
            s(b.lease_ms / 2),
            s(b.failover_ms),
            s(b.client_timeout_ms)
        ));
    }
    b
}

/// One line per rule, for the text output.
pub fn render(b: &Budget) -> String {
    format!(
        "timeout budget: backend detection {} < health check backend timeout {}; failover \
         {} (token {} + consensus {} + fencing {} + VIP start {} + grace {} + check {}) < \
         client timeout {}{}\n",
        s(b.backend_detection_ms),
        s(b.backend_timeout_ms),
        s(b.failover_ms),
        s(b.token_ms),
        s(b.consensus_ms),
        s(b.fence_ms),
        s(b.vip_start_ms),
        s(b.grace_ms),
        s(b.lease_ms / 2),
        s(b.client_timeout_ms),
        if b.violations.is_empty() { ": holds" } else { ": BROKEN" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_defaults_hold() {
        let b = check(10, 15, 3000, None, 15, 10, 10, 60);
        assert!(b.violations.is_empty(), "{:?}", b.violations);
        assert_eq!(b.consensus_ms, 3600);
        // 3 + 3.6 + 15 + 5 + 10 + 5
        assert_eq!(b.failover_ms, 41_600);
        assert!(render(&b).contains("failover 41.6 s"), "{}", render(&b));
    }

    #[test]
    fn backend_timeout_must_exceed_detection() {
        let b = check(10, 10, 3000, None, 15, 10, 10, 60);
        assert_eq!(b.violations.len(), 1);
        assert!(b.violations[0].contains("backend failure detection (10 s, --backend-detection)"));
        assert!(b.violations[0].contains("backend timeout (10 s, --backend-timeout)"));
    }

    #[test]
    fn failover_must_stay_under_client_timeout() {
        let b = check(10, 15, 3000, Some(4000), 15, 10, 10, 40);
        assert_eq!(b.failover_ms, 42_000);
        assert_eq!(b.violations.len(), 1, "{:?}", b.violations);
        let v = &b.violations[0];
        assert!(v.contains("consensus 4 s"), "{v}");
        assert!(v.contains("= 42 s"), "{v}");
        assert!(
            v.contains("client's I/O timeout") || v.contains("clients' I/O timeout (40 s"),
            "{v}"
        );
        // exactly equal is not shorter
        let b = check(10, 15, 3000, Some(4000), 15, 10, 10, 42);
        assert_eq!(b.violations.len(), 1);
        let b = check(10, 15, 3000, Some(4000), 15, 10, 10, 43);
        assert!(b.violations.is_empty());
    }

    #[test]
    fn corosync_adds_its_token_coefficient_per_node_over_two() {
        // 3 nodes: token 3000 + 650 = 3650 ms, consensus 1.2 x 3650 = 4380 ms (runtime values)
        let b = check(10, 15, 3650, Some(4380), 15, 10, 10, 60);
        assert_eq!(b.failover_ms, 43_030);
        assert!(
            render(&b).contains("failover 43.03 s (token 3.65 s + consensus 4.38 s"),
            "{}",
            render(&b)
        );
    }

    #[test]
    fn lease_and_grace_rules() {
        let b = check(10, 15, 3000, None, 15, 5, 5, 60);
        assert!(b.violations.iter().any(|v| v.contains("lease (5 s, --lease) is under 10 s")));
        let b = check(10, 15, 3000, None, 15, 20, 10, 60);
        assert!(b.violations.iter().any(|v| v.contains("grace period (10 s, --grace)")));
        assert!(render(&b).ends_with(": BROKEN\n"));
    }
}
