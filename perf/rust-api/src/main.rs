//! The Rust API's perf rows, printed as JSON lines for `saker-perf --only rust`
//! (the format of `perf/src/bench/python.rs`). Each saker figure comes with its
//! same-run baseline: the same batches moved over one raw QUIC stream between two
//! endpoints of this process (TLS 1.3, the pilot's own certificates), which is the
//! ceiling for anything that sends them through the tree.
//!
//! `saker-perf-rust rows|actors|objects [--quick]`; the binary is also the pilot's
//! agents and workers (an embedded pilot: one agent, a slot per core, for the task
//! and object rows; sixteen agents for the actor rows).

use std::process::ExitCode;
use std::time::Instant;

use saker::{App, Task, TaskOptions};

mod actors;
mod objects;
mod raw;

use raw::RawQuic;
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
    if std::env::args().nth(1).as_deref() == Some("bare") {
        let count = std::env::args()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(10_000);
        actors::bare(count);
        return ExitCode::SUCCESS;
    }
    // `actors`: the actor rows, on 16 agents; otherwise the task rows, on one.
    let actors = std::env::args().nth(1).as_deref() == Some("actors");
    let by_ref = std::env::args().nth(1).as_deref() == Some("objects");
    let app = App::new()
        .agents(if actors { actors::AGENTS } else { 1 })
        .task::<Noop>()
        .task::<objects::SumRef>()
        .task::<objects::SumValue>()
        .task::<objects::Ramp>()
        .actor::<actors::Cell>()
        .actor::<actors::Pinger>();
    let quick = app.args().iter().any(|a| a == "--quick");
    app.run(move |pilot| async move {
        if actors {
            actors::rows(pilot, quick).await
        } else if by_ref {
            objects::rows(pilot, quick).await
        } else {
            rows(pilot, quick).await
        }
    })
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
