//! The Rust API's perf rows, printed as JSON lines for `saker-perf --only rust`
//! (the format of `perf/src/bench/python.rs`). Each saker figure comes with its
//! same-run baseline: the same batches moved over one raw QUIC stream between two
//! endpoints of this process (TLS 1.3, the pilot's own certificates), which is the
//! ceiling for anything that sends them through the tree.
//!
//! `saker-perf-rust rows [--quick]`; the binary is also the pilot's agents and
//! workers (an embedded pilot: one agent, a slot per core).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Instant;

use saker::{App, Task, TaskOptions};
use serde_json::json;

struct Noop;
impl Task for Noop {
    const NAME: &'static str = "noop";
    type Input = u64;
    type Output = u64;
    async fn run(x: u64) -> u64 {
        x
    }
}

fn main() -> ExitCode {
    let app = App::new().agents(1).task::<Noop>();
    let quick = app.args().iter().any(|a| a == "--quick");
    app.run(move |pilot| async move { rows(pilot, quick).await })
}

async fn rows(pilot: saker::Pilot, quick: bool) -> Result<(), String> {
    let (mapped, submitted, sequential) = if quick {
        (200_000u64, 20_000u64, 300usize)
    } else {
        (1_000_000, 100_000, 2_000)
    };
    let mut raw = RawQuic::start().await?;

    // Map: inputs in chunks, as `map` sends them.
    let chunk = 1024usize;
    let raw_map = raw
        .throughput(mapped as usize, chunk, 8 * chunk + 40, 16 * chunk + 16)
        .await?;
    let started = Instant::now();
    let mut outputs = pilot.map_unordered::<Noop, _>(0..mapped);
    let mut count = 0u64;
    while let Some((_, output)) = outputs.next().await {
        output.map_err(|e| e.to_string())?;
        count += 1;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"row": format!("rust: no-op typed tasks, map of {mapped} (chunks of {chunk})"),
               "unit": "per_second", "saker": rate, "baseline": raw_map,
               "baseline_name": "the same chunks over one raw QUIC stream",
               "target": {"at_least": 300000.0}})
    );

    // Submit: one pilot task per call, batched into few requests.
    let raw_submit = raw.throughput(submitted as usize, 1, 48, 32).await?;
    let started = Instant::now();
    let handles: Vec<_> = (0..submitted).map(|x| pilot.submit::<Noop>(x)).collect();
    for handle in handles {
        handle.await.map_err(|e| e.to_string())?;
    }
    let rate = submitted as f64 / started.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"row": format!("rust: no-op typed tasks, submit of {submitted} (a task each)"),
               "unit": "per_second", "saker": rate, "baseline": raw_submit,
               "baseline_name": "the same calls over one raw QUIC stream", "target": null})
    );

    // One call at a time: the round trip through root, agent and worker.
    let raw_trips = raw.round_trips(sequential, 48, 32).await?;
    let mut trips = Vec::with_capacity(sequential);
    for x in 0..sequential as u64 {
        let started = Instant::now();
        pilot
            .with(TaskOptions::new())
            .submit::<Noop>(x)
            .await
            .map_err(|e| e.to_string())?;
        trips.push(started.elapsed().as_micros() as u64);
    }
    for percentile in [50, 99] {
        println!(
            "{}",
            json!({"row": format!("rust: typed call round trip p{percentile}"),
                   "unit": "microseconds",
                   "saker": {"samples_us": trips, "percentile": percentile},
                   "baseline": {"samples_us": raw_trips, "percentile": percentile},
                   "baseline_name": "raw QUIC round trip", "target": null})
        );
    }
    Ok(())
}

/// Two QUIC endpoints in this process, one bi-directional stream between them; the
/// far end answers each message with one of a given size.
struct RawQuic {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    _dir: tempfile::TempDir,
    _endpoints: (quinn::Endpoint, quinn::Endpoint),
}

impl RawQuic {
    async fn start() -> Result<RawQuic, String> {
        use saker_transport::credentials::{Credentials, Role};
        let error = |e: &dyn std::fmt::Display| e.to_string();
        saker_transport::crypto::install_crypto_provider().map_err(|e| error(&e))?;
        let dir = tempfile::tempdir().map_err(|e| error(&e))?;
        let pilot = saker_transport::pilot_dir::PilotDir::create(dir.path().join("p"))
            .map_err(|e| error(&e))?;
        Credentials::generate_into(&pilot).map_err(|e| error(&e))?;
        let root = Credentials::load(&pilot, Role::Root).map_err(|e| error(&e))?;
        let agent = Credentials::load(&pilot, Role::Agent).map_err(|e| error(&e))?;
        let timeouts = saker_actors::liveness::Liveness::default().quic_timeouts();
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let quic = saker_transport::quic::server_config(&root, &timeouts).map_err(|e| error(&e))?;
        let client =
            saker_transport::quic::client_config(&agent, &timeouts).map_err(|e| error(&e))?;
        let server = saker_transport::quic::bind_endpoint(any, Some(quic), client.clone())
            .map_err(|e| error(&e))?;
        let dialer =
            saker_transport::quic::bind_endpoint(any, None, client).map_err(|e| error(&e))?;
        let address = server.local_addr().map_err(|e| error(&e))?;
        let accepting = server.clone();
        tokio::spawn(async move {
            let Some(incoming) = accepting.accept().await else {
                return;
            };
            let Ok(connection) = incoming.await else {
                return;
            };
            let Ok((mut send, mut recv)) = connection.accept_bi().await else {
                return;
            };
            // Each message: u32 length, u32 answer length, body; answered in kind.
            let mut header = [0u8; 8];
            let mut body = Vec::new();
            while recv.read_exact(&mut header).await.is_ok() {
                let length = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
                let answer = u32::from_le_bytes(header[4..].try_into().unwrap()) as usize;
                body.resize(length, 0);
                if recv.read_exact(&mut body).await.is_err() {
                    return;
                }
                body.resize(answer.max(4), 0);
                body[..4].copy_from_slice(&(answer as u32).to_le_bytes());
                if send.write_all(&body[..answer.max(4)]).await.is_err() {
                    return;
                }
            }
        });
        let connection = saker_transport::quic::connect(&dialer, address)
            .await
            .map_err(|e| error(&e))?;
        let (send, recv) = connection.open_bi().await.map_err(|e| error(&e))?;
        Ok(RawQuic {
            send,
            recv,
            _dir: dir,
            _endpoints: (server, dialer),
        })
    }

    /// Items per second when `items` go in messages of `per_message`, each `bytes`
    /// long and answered with `answer` bytes; the writer runs ahead of the answers
    /// as far as QUIC's flow control lets it.
    async fn throughput(
        &mut self,
        items: usize,
        per_message: usize,
        bytes: usize,
        answer: usize,
    ) -> Result<f64, String> {
        let messages = items.div_ceil(per_message);
        let started = Instant::now();
        self.exchange(messages, bytes, answer).await?;
        Ok(items as f64 / started.elapsed().as_secs_f64())
    }

    /// Microseconds of each of `count` sequential exchanges.
    async fn round_trips(
        &mut self,
        count: usize,
        bytes: usize,
        answer: usize,
    ) -> Result<Vec<u64>, String> {
        let mut samples = Vec::with_capacity(count);
        for _ in 0..count {
            let started = Instant::now();
            self.exchange(1, bytes, answer).await?;
            samples.push(started.elapsed().as_micros() as u64);
        }
        Ok(samples)
    }

    async fn exchange(
        &mut self,
        messages: usize,
        bytes: usize,
        answer: usize,
    ) -> Result<(), String> {
        let answer = answer.max(4);
        let mut message = vec![0u8; 8 + bytes];
        message[..4].copy_from_slice(&(bytes as u32).to_le_bytes());
        message[4..8].copy_from_slice(&(answer as u32).to_le_bytes());
        let RawQuic { send, recv, .. } = self;
        let writing = async {
            for _ in 0..messages {
                send.write_all(&message).await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        let reading = async {
            let mut buffer = vec![0u8; answer];
            for _ in 0..messages {
                recv.read_exact(&mut buffer)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        let (written, read) = tokio::join!(writing, reading);
        written.and(read)
    }
}
