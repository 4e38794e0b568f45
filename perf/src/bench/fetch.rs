//! A data item fetched node to node: on a local pilot of 2 agents, a writer on node 0
//! leaves an item of `fetch_mib` MiB in its scratch, and a reader placed on node 1
//! fetches it from node 0's agent directly (QUIC, the pilot's TLS). Its fetch time is
//! the reader's attempt from its agent receiving it to its start (it waits staged
//! while the bytes come). Beside it, in the same run: the same bytes sent once over
//! one raw QUIC stream between two endpoints of this process, with the pilot's own
//! TLS configs (quinn, ring), the floor a transfer between agents sits on. Runs
//! alternate saker, raw, saker, raw; medians are reported, in MiB/s.
//!
//! A second row sends the item to [`BROADCAST_READERS`] readers at once (one agent
//! each, nodes 1 to 8): the time from the first reader's receipt to the last one's
//! start, beside one reader's fetch in the same run (target: at most twice as long).
//! The readers form a pipeline (each relays what it has to the next), so no link
//! carries the item twice; but on one machine the eight transfers still share its
//! two cores, which bounds this row at about eight times one fetch.
//!
//! `fetch-links` measures the same over links of their own: each agent's sends
//! shaped to [`LINK_MBIT`] (`crate::links`), slow enough that the cores are not what
//! limits. There the pipeline's worth shows: the holder alone sending eight copies
//! would take eight times one fetch.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::results::ResultRecord;
use saker_client::spec::{JobRef, JobRequest, TaskSpec};

use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::report::{Measure, Row, Target, Unit};

const ROUNDS: usize = 5;
/// Readers of the broadcast row, and its rounds.
const BROADCAST_READERS: u32 = 8;
const BROADCAST_ROUNDS: usize = 3;
/// Each node's uplink in the `fetch-links` row, and the item's size there.
const LINK_MBIT: u32 = 160;
const LINK_ITEM_MIB: u64 = 32;

fn shape(readers: u32) -> PilotShape {
    PilotShape {
        agents: readers + 1,
        slots: Some(2 * (readers + 1)),
        sync: true,
        heartbeat: None,
        extra: &["--locality-wait", "0"],
    }
}

/// The writer of `bytes` on node 0 and a reader on each of nodes 1 to `readers`.
fn jobs(bytes: u64, readers: u32) -> Vec<JobRequest> {
    let write = format!("head -c {bytes} /dev/urandom > \"$SAKER_SCRATCH/blob\"");
    let mut writer = TaskSpec::new(vec!["sh".into(), "-c".into(), write]);
    writer.name = Some("blob".into());
    writer.writes = vec!["blob".into()];
    writer.node = Some(0);
    let read = "test -s \"$SAKER_SCRATCH/blob\"".to_owned();
    let mut all = vec![JobRequest::single(writer)];
    for node in 1..=readers {
        let mut reader = TaskSpec::new(vec!["sh".into(), "-c".into(), read.clone()]);
        reader.after = vec![JobRef::Name("blob".into())];
        reader.reads = vec!["blob".into()];
        reader.node = Some(node);
        all.push(JobRequest::single(reader));
    }
    all
}

/// One item to `readers` nodes on a fresh pilot: from the first reader's receipt
/// of its attempt to the last reader's start (one reader: its wait for the item).
async fn saker_fetch(
    setup: &Setup,
    bytes: u64,
    readers: u32,
    links: Option<u32>,
) -> Result<Duration> {
    let pilot = RunningPilot::start(&setup.saker, "fetch", shape(readers)).await?;
    let outcome = async {
        pilot.warm_up().await?;
        let _shaped = links
            .map(|mbit| crate::links::Shaped::pilot(pilot.process_group(), mbit))
            .transpose()?;
        let submitted = pilot
            .client
            .submit(jobs(bytes, readers))
            .await
            .context("submitting")?;
        let ids: Vec<_> = submitted.iter().map(|job| job.job).collect();
        let report = pilot.client.wait(Some(ids.clone())).await?;
        if report.succeeded != u64::from(readers) + 1 {
            bail!("{} of {} tasks succeeded", report.succeeded, readers + 1);
        }
        let status = pilot.client.status().await?;
        let moved = bytes * u64::from(readers);
        if status.data_moved_bytes != moved || status.data_root_bytes != 0 {
            bail!(
                "{} bytes moved, {} through the root: not {readers} direct fetches",
                status.data_moved_bytes,
                status.data_root_bytes
            );
        }
        let (mut first, mut last) = (u64::MAX, 0);
        for id in &ids[1..] {
            let reader = reader_record(&pilot, *id).await?;
            let received = reader.received_time.context("no received time")?;
            let start = reader.start_time.context("no start time")?;
            first = first.min(received.unix_micros());
            last = last.max(start.unix_micros());
        }
        anyhow::Ok(Duration::from_micros(last.saturating_sub(first)))
    }
    .await;
    let stopped = pilot.shutdown().await;
    let measured = outcome?;
    stopped?;
    Ok(measured)
}

async fn reader_record(pilot: &RunningPilot, job: saker_core::JobId) -> Result<ResultRecord> {
    let mut stream = pilot.client.results(0, false).await?;
    while let Some(record) = stream.next().await? {
        if record.job == job {
            return Ok(record);
        }
    }
    bail!("no result of the reader")
}

/// The same bytes over one raw QUIC stream, 1 MiB writes, with the pilot's TLS.
async fn raw_quic(bytes: u64) -> Result<Duration> {
    use saker_transport::credentials::{Credentials, Role};
    use saker_transport::quic;
    saker_transport::crypto::install_crypto_provider()?;
    let dir = crate::process::TempDir::new("raw-quic")?;
    let pilot = saker_transport::pilot_dir::PilotDir::create(dir.path().join("pilot"))?;
    Credentials::generate_into(&pilot)?;
    let agent = Credentials::load(&pilot, Role::Agent)?;
    let timeouts = quic::LinkTimeouts::default();
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let server = quic::bind_endpoint(
        any,
        Some(quic::agent_server_config(&agent, &timeouts)?),
        quic::client_config(&agent, &timeouts)?,
    )?;
    let address = server.local_addr()?;
    let receiver = tokio::spawn(async move {
        let connection = server.accept().await.context("no connection")?.await?;
        let mut stream = connection.accept_uni().await?;
        let mut received = 0u64;
        let mut buffer = vec![0u8; 1 << 20];
        while let Some(n) = stream.read(&mut buffer).await? {
            received += n as u64;
        }
        anyhow::Ok(received)
    });
    let dialer = quic::bind_endpoint(any, None, quic::data_client_config(&agent, &timeouts)?)?;
    let started = Instant::now();
    let connection = quic::connect(&dialer, address, Role::Agent).await?;
    let mut stream = connection.open_uni().await?;
    let chunk = vec![7u8; 1 << 20];
    let mut sent = 0;
    while sent < bytes {
        let len = (bytes - sent).min(chunk.len() as u64) as usize;
        stream.write_all(&chunk[..len]).await?;
        sent += len as u64;
    }
    stream.finish()?;
    let received = receiver.await??;
    let elapsed = started.elapsed();
    if received != bytes {
        bail!("{received} of {bytes} bytes arrived");
    }
    Ok(elapsed)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let bytes = setup.sizes.fetch_mib << 20;
    let mib = setup.sizes.fetch_mib as f64;
    client_runtime()?.block_on(async {
        let (mut saker, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            saker.push(mib / saker_fetch(setup, bytes, 1, None).await?.as_secs_f64());
            raw.push(mib / raw_quic(bytes).await?.as_secs_f64());
        }
        let (mut many, mut one) = (Vec::new(), Vec::new());
        for _ in 0..BROADCAST_ROUNDS {
            many.push(
                saker_fetch(setup, bytes, BROADCAST_READERS, None)
                    .await?
                    .as_secs_f64(),
            );
            one.push(saker_fetch(setup, bytes, 1, None).await?.as_secs_f64());
        }
        let all = |rates: &[f64]| {
            let rates: Vec<String> = rates.iter().map(|rate| format!("{rate:.0}")).collect();
            rates.join(", ")
        };
        Ok(vec![
            Row {
                benchmark: Benchmark::Fetch,
                name: format!("a {mib} MiB item fetched node to node"),
                saker: Measure::new(median(saker.clone()), Unit::MebibytesPerSecond)
                    .with_detail(format!("2 agents, direct: {} MiB/s", all(&saker))),
                baseline: Some(
                    Measure::new(median(raw.clone()), Unit::MebibytesPerSecond)
                        .with_detail(format!("raw quic, same tls: {} MiB/s", all(&raw))),
                ),
                target: Target::RatioAtLeast(0.8),
            },
            Row {
                benchmark: Benchmark::Fetch,
                name: format!("a {mib} MiB item to {BROADCAST_READERS} nodes at once"),
                saker: Measure::new(median(many), Unit::Seconds).with_detail(format!(
                    "{} agents, first receipt to last start",
                    BROADCAST_READERS + 1
                )),
                baseline: Some(
                    Measure::new(median(one), Unit::Seconds)
                        .with_detail("one reader's fetch, same run"),
                ),
                target: Target::RatioAtMost(2.0),
            },
        ])
    })
}

/// The `fetch-links` row: see the module doc.
pub fn run_links(setup: &Setup) -> Result<Vec<Row>> {
    let bytes = LINK_ITEM_MIB << 20;
    let links = Some(LINK_MBIT);
    client_runtime()?.block_on(async {
        let (mut many, mut one) = (Vec::new(), Vec::new());
        for _ in 0..BROADCAST_ROUNDS {
            let time = saker_fetch(setup, bytes, BROADCAST_READERS, links).await?;
            many.push(time.as_secs_f64());
            one.push(saker_fetch(setup, bytes, 1, links).await?.as_secs_f64());
        }
        let all = |times: &[f64]| {
            let times: Vec<String> = times.iter().map(|time| format!("{time:.2}")).collect();
            times.join(", ")
        };
        Ok(vec![Row {
            benchmark: Benchmark::FetchLinks,
            name: format!(
                "a {LINK_ITEM_MIB} MiB item to {BROADCAST_READERS} nodes, {LINK_MBIT} Mbit/s links"
            ),
            saker: Measure::new(median(many.clone()), Unit::Seconds).with_detail(format!(
                "{} agents, first receipt to last start: {} s",
                BROADCAST_READERS + 1,
                all(&many)
            )),
            baseline: Some(
                Measure::new(median(one.clone()), Unit::Seconds)
                    .with_detail(format!("one reader's fetch, same links: {} s", all(&one))),
            ),
            target: Target::RatioAtMost(2.0),
        }])
    })
}
