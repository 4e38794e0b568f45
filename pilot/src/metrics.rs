//! `saker pilot --metrics ADDR`: the pilot's figures for site monitoring, in the
//! OpenMetrics text format at `http://ADDR/metrics`, for Prometheus or anything that
//! reads it.
//!
//! Each scrape asks the root for its `status` through an ordinary client session
//! (the same figures `saker status` and `saker top` show), so nothing is kept or
//! computed between scrapes, and a scrape never touches the root's state directly.
//! The address actually bound (`:0` picks a free port) is written to
//! `metrics.addr` in the pilot directory.
//!
//! The encoding is prometheus-client's (the Prometheus project's own crate), the HTTP
//! server hyper's: neither the format's escaping rules nor HTTP are ours to write.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use saker_client::{Client, NodeLoad, StatusReport};
use tokio::net::TcpListener;

/// The file in the pilot directory naming the address the metrics are served on.
pub const METRICS_ADDR_FILE: &str = "metrics.addr";

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` (before the pilot starts: a bad address costs nothing to refuse).
pub async fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics {addr}: cannot listen there"))
}

/// Writes the address `listener` is bound to into the pilot directory.
pub fn publish(listener: &TcpListener, pilot_dir: &Path) -> Result<()> {
    let bound = listener
        .local_addr()
        .context("the metrics listener's address")?;
    let file = pilot_dir.join(METRICS_ADDR_FILE);
    std::fs::write(&file, format!("{bound}\n"))
        .with_context(|| format!("writing {}", file.display()))?;
    eprintln!("saker: metrics on http://{bound}/metrics");
    Ok(())
}

/// Serves scrapes until the task is dropped, answering each from a fresh `status`.
pub async fn serve(listener: TcpListener, client: Client) {
    let client = Arc::new(client);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: the next accept may work.
                tracing::warn!(%error, "metrics: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let client = Arc::clone(&client);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let client = Arc::clone(&client);
                async move { Ok::<_, Infallible>(answer(&client, request).await) }
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, %peer, "metrics: connection ended");
            }
        });
    }
}

async fn answer(client: &Client, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
    };
    let text = "text/plain; charset=utf-8";
    if request.method() != Method::GET {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            text,
            "GET /metrics\n".into(),
        );
    }
    if request.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            text,
            "metrics are at /metrics\n".into(),
        );
    }
    match client.status().await {
        Ok(status) => match encode(status) {
            Ok(body) => reply(StatusCode::OK, CONTENT_TYPE, body),
            Err(error) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                text,
                format!("encoding failed: {error}\n"),
            ),
        },
        Err(error) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            text,
            format!("the pilot did not answer: {error}\n"),
        ),
    }
}

/// `status` in the OpenMetrics text format.
pub fn encode(status: StatusReport) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("saker");
    registry.register_collector(Box::new(Snapshot(status)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// One `status`, as metric families.
#[derive(Debug)]
struct Snapshot(StatusReport);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = &self.0;
        let labels = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(key, value)| ((*key).to_owned(), label_value(value)))
                .collect()
        };

        let tasks = [
            ("queued", status.queued),
            ("running", status.running),
            ("succeeded", status.succeeded),
            ("failed", status.failed),
            ("cancelled", status.cancelled),
        ];
        let mut family =
            encoder.encode_descriptor("tasks", "Tasks by state", None, gauge_type())?;
        for (state, count) in tasks {
            let metric = ConstGauge::new(count as i64);
            metric.encode(family.encode_family(&labels(&[("state", state)]))?)?;
        }

        let counters = [
            ("retries", "Failed attempts run again", status.retries),
            ("replays", "Lost attempts run again", status.replays),
            (
                "speculative_copies",
                "Speculative copies started for stragglers",
                status.speculated,
            ),
            (
                "duplicates",
                "Results dropped for tasks that already had one",
                status.duplicates,
            ),
            (
                "data_relayed_bytes",
                "Bytes of data items moved node to node from nodes fetching them too (pipelined)",
                status.data_relayed_bytes,
            ),
            (
                "data_recomputes",
                "Jobs submitted to make lost data items again",
                status.data_recomputes,
            ),
            (
                "data_spills",
                "Objects the live nodes moved from memory to their scratch",
                status.data_spills,
            ),
            (
                "data_spilled_bytes",
                "Bytes of objects the live nodes moved from memory to their scratch",
                status.data_spilled_bytes,
            ),
            (
                "data_dropped_copies",
                "Fetched copies the live nodes dropped from memory (other nodes hold them)",
                status.data_drops,
            ),
            (
                "data_dropped_bytes",
                "Bytes of fetched copies the live nodes dropped from memory",
                status.data_dropped_bytes,
            ),
        ];
        let mut family = encoder.encode_descriptor(
            "data_moved_bytes",
            "Bytes of data items copied between nodes: node to node, or through the root",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        let direct = status
            .data_moved_bytes
            .saturating_sub(status.data_root_bytes);
        for (path, bytes) in [("direct", direct), ("root", status.data_root_bytes)] {
            let metric = ConstCounter::new(bytes);
            metric.encode(family.encode_family(&labels(&[("path", path)]))?)?;
        }

        for (name, help, value) in counters {
            let metric = ConstCounter::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }

        let gauges = [
            (
                "agents",
                "Connected agents (nodes)",
                f64::from(status.agents),
            ),
            (
                "slots",
                "Cores offered by all agents",
                f64::from(status.slots),
            ),
            (
                "busy_slots",
                "Cores running tasks",
                f64::from(status.busy_slots),
            ),
            ("jobs", "Jobs submitted", status.jobs as f64),
            (
                "data_items",
                "Data items (and objects) the pilot knows a holder of",
                status.items as f64,
            ),
            (
                "data_held_bytes",
                "Bytes of data items the live nodes hold, each copy counted",
                status.data_held_bytes as f64,
            ),
            (
                "data_memory_bytes",
                "Bytes of objects the live nodes keep in memory",
                status.data_memory_bytes as f64,
            ),
            (
                "data_memory_bound_bytes",
                "The most bytes of objects the live nodes keep in memory (--object-memory)",
                status.data_memory_bound as f64,
            ),
            (
                "rate_per_second",
                "Tasks finished per second over the last few seconds",
                status.rate,
            ),
            (
                "rate_minute_per_second",
                "Tasks finished per second over the last minute",
                status.rate_minute,
            ),
        ];
        for (name, help, value) in gauges {
            let metric = ConstGauge::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }

        let mut family = encoder.encode_descriptor(
            "node_fetched_bytes",
            "Bytes of data items fetched whole from other nodes, per node",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for node in &status.nodes {
            let id = node.node.to_string();
            let metric = ConstCounter::new(node.fetched_bytes);
            metric.encode(
                family.encode_family(&labels(&[("node", &id), ("host", &node.hostname)]))?,
            )?;
        }

        let held: [(&str, &str, BytesOfNode); 2] = [
            (
                "node_held_bytes",
                "Bytes of data items each node holds",
                |node| node.held_bytes,
            ),
            (
                "node_memory_bytes",
                "Bytes of objects each node keeps in memory",
                |node| node.memory_bytes,
            ),
        ];
        for (name, help, value) in held {
            let mut family = encoder.encode_descriptor(name, help, None, gauge_type())?;
            for node in &status.nodes {
                let id = node.node.to_string();
                let metric = ConstGauge::new(value(node) as i64);
                metric.encode(
                    family.encode_family(&labels(&[("node", &id), ("host", &node.hostname)]))?,
                )?;
            }
        }

        let per_node: [(&str, &str, PerNode); 2] = [
            ("node_busy_slots", "Cores running tasks, per node", |node| {
                node.busy
            }),
            ("node_slots", "Cores offered, per node", |node| node.cores),
        ];
        for (name, help, value) in per_node {
            let mut family = encoder.encode_descriptor(name, help, None, gauge_type())?;
            for node in &status.nodes {
                let id = node.node.to_string();
                let metric = ConstGauge::new(i64::from(value(node)));
                metric.encode(
                    family.encode_family(&labels(&[("node", &id), ("host", &node.hostname)]))?,
                )?;
            }
        }

        let mut family = encoder.encode_descriptor(
            "stage_seconds",
            "Percentiles of where accepted results' time went (wait, run, deliver, total)",
            None,
            gauge_type(),
        )?;
        for stage in &status.stages {
            let quantiles = [
                ("0.5", stage.p50_us),
                ("0.9", stage.p90_us),
                ("0.99", stage.p99_us),
                ("1", stage.max_us),
            ];
            for (quantile, micros) in quantiles {
                let metric = ConstGauge::new(micros as f64 / 1e6);
                metric.encode(family.encode_family(&labels(&[
                    ("stage", &stage.stage),
                    ("quantile", quantile),
                ]))?)?;
            }
        }
        Ok(())
    }
}

/// A label value escaped as the text format wants (`\\`, `\"`, `\n`): the crate
/// writes values as given (0.24; the unit test below notices if that changes).
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One figure of a node.
type PerNode = fn(&NodeLoad) -> u32;

/// Bytes of something a node holds.
type BytesOfNode = fn(&NodeLoad) -> u64;

fn gauge_type() -> prometheus_client::metrics::MetricType {
    prometheus_client::metrics::MetricType::Gauge
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_client::StageSummary;

    #[test]
    fn status_becomes_openmetrics_text_with_labels_and_an_end() {
        let status = StatusReport {
            queued: 3,
            running: 2,
            succeeded: 40,
            failed: 1,
            retries: 4,
            agents: 1,
            slots: 4,
            busy_slots: 2,
            rate: 12.5,
            nodes: vec![NodeLoad {
                node: saker_core::NodeId(0),
                hostname: "node\"1".into(),
                cores: 4,
                busy: 2,
                fetched_bytes: 3 << 20,
                held_bytes: 7 << 20,
                memory_bytes: 6 << 20,
                memory_bound: 8 << 20,
                spilled_bytes: 2 << 20,
                ..NodeLoad::default()
            }],
            items: 2,
            data_moved_bytes: 5 << 20,
            data_root_bytes: 1 << 20,
            data_relayed_bytes: 3 << 20,
            data_held_bytes: 9 << 20,
            data_recomputes: 1,
            data_memory_bytes: 6 << 20,
            data_memory_bound: 8 << 20,
            data_spills: 3,
            data_spilled_bytes: 2 << 20,
            data_drops: 2,
            data_dropped_bytes: 5 << 20,
            stages: vec![StageSummary {
                stage: "run".into(),
                count: 41,
                p50_us: 250_000,
                p90_us: 900_000,
                p99_us: 1_000_000,
                max_us: 2_000_000,
            }],
            ..StatusReport::default()
        };
        let text = encode(status).unwrap();
        for line in [
            "# TYPE saker_tasks gauge",
            "saker_tasks{state=\"queued\"} 3",
            "saker_tasks{state=\"succeeded\"} 40",
            "# TYPE saker_retries counter",
            "saker_retries_total 4",
            "saker_busy_slots 2.0",
            "saker_rate_per_second 12.5",
            "saker_node_busy_slots{node=\"0\",host=\"node\\\"1\"} 2",
            "saker_data_moved_bytes_total{path=\"direct\"} 4194304",
            "saker_data_moved_bytes_total{path=\"root\"} 1048576",
            "saker_data_items 2.0",
            "saker_node_fetched_bytes_total{node=\"0\",host=\"node\\\"1\"} 3145728",
            "saker_node_held_bytes{node=\"0\",host=\"node\\\"1\"} 7340032",
            "saker_data_held_bytes 9437184.0",
            "saker_data_relayed_bytes_total 3145728",
            "saker_data_recomputes_total 1",
            "saker_data_spills_total 3",
            "saker_data_spilled_bytes_total 2097152",
            "saker_data_dropped_copies_total 2",
            "saker_data_dropped_bytes_total 5242880",
            "saker_data_memory_bytes 6291456.0",
            "saker_data_memory_bound_bytes 8388608.0",
            "saker_node_memory_bytes{node=\"0\",host=\"node\\\"1\"} 6291456",
            "saker_stage_seconds{stage=\"run\",quantile=\"0.5\"} 0.25",
            "saker_stage_seconds{stage=\"run\",quantile=\"1\"} 2.0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
