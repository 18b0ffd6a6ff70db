//! Per-operation counters and latency histograms, served in the Prometheus text format
//! on `--metrics-listen` (`GET /metrics`).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

#[derive(Default, Clone)]
struct Hist {
    counts: [u64; BUCKETS.len()],
    total: u64,
    errors: u64,
    sum: f64,
}

#[derive(Default)]
struct Registry {
    ops: BTreeMap<(&'static str, &'static str), Hist>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

fn record(role: &'static str, op: &'static str, d: Duration, ok: bool) {
    let s = d.as_secs_f64();
    let mut r = registry().lock();
    let h = r.ops.entry((role, op)).or_default();
    for (i, b) in BUCKETS.iter().enumerate() {
        if s <= *b {
            h.counts[i] += 1;
        }
    }
    h.total += 1;
    h.sum += s;
    if !ok {
        h.errors += 1;
    }
}

/// A client operation served by a brick (head).
pub fn observe(op: &'static str, d: Duration, ok: bool) {
    record("client", op, d, ok);
}

/// A mutation applied as a replica.
pub fn observe_replica(op: &'static str, d: Duration, ok: bool) {
    record("replica", op, d, ok);
}

pub fn render() -> String {
    let r = registry().lock();
    let mut out = String::new();
    out.push_str("# HELP cairn_brick_ops_total Brick operations served.\n# TYPE cairn_brick_ops_total counter\n");
    for ((role, op), h) in &r.ops {
        out.push_str(&format!(
            "cairn_brick_ops_total{{role=\"{role}\",op=\"{op}\"}} {}\n",
            h.total
        ));
    }
    out.push_str("# HELP cairn_brick_op_errors_total Brick operations that failed.\n# TYPE cairn_brick_op_errors_total counter\n");
    for ((role, op), h) in &r.ops {
        out.push_str(&format!(
            "cairn_brick_op_errors_total{{role=\"{role}\",op=\"{op}\"}} {}\n",
            h.errors
        ));
    }
    out.push_str("# HELP cairn_brick_op_seconds Brick operation latency.\n# TYPE cairn_brick_op_seconds histogram\n");
    for ((role, op), h) in &r.ops {
        for (i, b) in BUCKETS.iter().enumerate() {
            out.push_str(&format!(
                "cairn_brick_op_seconds_bucket{{role=\"{role}\",op=\"{op}\",le=\"{b}\"}} {}\n",
                h.counts[i]
            ));
        }
        out.push_str(&format!(
            "cairn_brick_op_seconds_bucket{{role=\"{role}\",op=\"{op}\",le=\"+Inf\"}} {}\n",
            h.total
        ));
        out.push_str(&format!(
            "cairn_brick_op_seconds_sum{{role=\"{role}\",op=\"{op}\"}} {}\n",
            h.sum
        ));
        out.push_str(&format!(
            "cairn_brick_op_seconds_count{{role=\"{role}\",op=\"{op}\"}} {}\n",
            h.total
        ));
    }
    out
}

/// Serve `/metrics` over plain HTTP/1.0 until the process ends.
pub async fn serve(listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let n = match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                Ok(Ok(n)) => n,
                _ => return,
            };
            let req = String::from_utf8_lossy(&buf[..n]);
            let (status, body) = if req.starts_with("GET /metrics") {
                ("200 OK", render())
            } else {
                ("404 Not Found", "try /metrics\n".to_string())
            };
            let resp = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        });
    }
}
