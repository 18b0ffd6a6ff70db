//! Per-operation counters and latency histograms (`prometheus-client`), served in the
//! OpenMetrics text format on `--metrics-listen` (`GET /metrics`, by axum).
//!
//! Series (labels `role` = `client`, a request served at its chain head, or `replica`, a
//! change forwarded to this brick; and `op`, the brick operation):
//! `cairn_brick_ops_total`, `cairn_brick_op_errors_total` (present, at 0, from an op's
//! first observation) and the histogram `cairn_brick_op_seconds`. An observation takes no
//! process-wide lock: the families look their series up under a shared read lock, and the
//! counters are atomics.

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    role: &'static str,
    op: &'static str,
}

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS.into_iter())
}

struct Metrics {
    registry: Registry,
    ops: Family<OpLabels, Counter>,
    errors: Family<OpLabels, Counter>,
    seconds: Family<OpLabels, Histogram, fn() -> Histogram>,
}

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let ops = Family::<OpLabels, Counter>::default();
        let errors = Family::<OpLabels, Counter>::default();
        let seconds = Family::<OpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            new_histogram as fn() -> Histogram,
        );
        let mut registry = Registry::default();
        registry.register("cairn_brick_ops", "Brick operations served", ops.clone());
        registry.register("cairn_brick_op_errors", "Brick operations that failed", errors.clone());
        registry.register("cairn_brick_op_seconds", "Brick operation latency", seconds.clone());
        Metrics { registry, ops, errors, seconds }
    })
}

fn record(role: &'static str, op: &'static str, d: Duration, ok: bool) {
    let m = metrics();
    let labels = OpLabels { role, op };
    m.ops.get_or_create(&labels).inc();
    let errors = m.errors.get_or_create(&labels);
    if !ok {
        errors.inc();
    }
    m.seconds.get_or_create(&labels).observe(d.as_secs_f64());
}

/// A client operation served by a brick (head).
pub fn observe(op: &'static str, d: Duration, ok: bool) {
    record("client", op, d, ok);
}

/// A mutation applied as a replica.
pub fn observe_replica(op: &'static str, d: Duration, ok: bool) {
    record("replica", op, d, ok);
}

/// Every series, in the OpenMetrics text format.
pub fn render() -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &metrics().registry);
    out
}

async fn get_metrics() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], render())
}

async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, "try /metrics\n")
}

/// Serve `/metrics` over HTTP until the process ends.
pub async fn serve(listener: tokio::net::TcpListener) {
    let addr = listener.local_addr().ok();
    let app =
        axum::Router::new().route("/metrics", axum::routing::get(get_metrics)).fallback(not_found);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(?addr, error = %e, "metrics endpoint stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn served_with_the_series_names_the_tests_read() {
        observe("metrics_test_op", Duration::from_micros(300), true);
        observe("metrics_test_op", Duration::from_millis(3), false);
        observe_replica("metrics_test_op", Duration::from_millis(1), true);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve(l));
        let resp = get(addr, "/metrics").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.contains("application/openmetrics-text"), "{resp}");
        // `cl_metric` in tests/integration/lib.sh reads `NAME{role="R",op="O"} VALUE`.
        for line in [
            "cairn_brick_ops_total{role=\"client\",op=\"metrics_test_op\"} 2",
            "cairn_brick_ops_total{role=\"replica\",op=\"metrics_test_op\"} 1",
            "cairn_brick_op_errors_total{role=\"client\",op=\"metrics_test_op\"} 1",
            "cairn_brick_op_errors_total{role=\"replica\",op=\"metrics_test_op\"} 0",
            "cairn_brick_op_seconds_count{role=\"client\",op=\"metrics_test_op\"} 2",
        ] {
            assert!(resp.lines().any(|l| l == line), "no line {line:?} in:\n{resp}");
        }
        let bucket = resp
            .lines()
            .find(|l| {
                l.starts_with("cairn_brick_op_seconds_bucket")
                    && l.contains("op=\"metrics_test_op\"")
                    && l.contains("role=\"client\"")
                    && l.contains("le=\"0.0005\"")
            })
            .unwrap_or_else(|| panic!("no 0.5 ms bucket in:\n{resp}"));
        assert!(bucket.ends_with(" 1"), "{bucket}");
        let resp = get(addr, "/").await;
        assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    }
}
