//! A Saker application for the API's tests: one binary that is driver, agent and
//! worker, with a scenario per first argument. Each scenario checks what it can see
//! as a driver and prints `ok …` on success; the tests in `tests/` check the rest
//! (exit codes, what they did to the pilot meanwhile).
//!
//! `SAKER_TESTAPP_V2=1` registers a different `square` (another input type), as a
//! newer build of the program would; `SAKER_TESTAPP_EXTRA=1` registers a task the
//! pilot's workers (started without it) do not have.

use std::process::ExitCode;
use std::time::Duration;

use saker::{App, Task, TaskError, TaskOptions};

mod actors;
mod commands;
mod objects;

struct Square;
impl Task for Square {
    const NAME: &'static str = "square";
    type Input = u64;
    type Output = u64;
    async fn run(x: u64) -> u64 {
        x * x
    }
}

/// `square` as a later version of the program has it.
struct SquareV2;
impl Task for SquareV2 {
    const NAME: &'static str = "square";
    type Input = String;
    type Output = u64;
    async fn run(x: String) -> u64 {
        x.len() as u64
    }
}

/// Panics on odd inputs.
struct Boom;
impl Task for Boom {
    const NAME: &'static str = "boom";
    type Input = u64;
    type Output = u64;
    async fn run(x: u64) -> u64 {
        assert!(x.is_multiple_of(2), "odd input {x}");
        x
    }
}

/// Panics unless its marker file exists, which it creates: fails once per path.
struct FailsOnce;
impl Task for FailsOnce {
    const NAME: &'static str = "fails-once";
    type Input = String;
    type Output = String;
    async fn run(path: String) -> String {
        if std::fs::metadata(&path).is_err() {
            std::fs::write(&path, b"tried").expect("the marker is written");
            panic!("first try of {path}");
        }
        path
    }
}

/// Sleeps the given milliseconds (async), then tells where it ran.
struct Nap;
impl Task for Nap {
    const NAME: &'static str = "nap";
    type Input = u64;
    type Output = (String, u64);
    async fn run(millis: u64) -> (String, u64) {
        tokio::time::sleep(Duration::from_millis(millis)).await;
        (std::env::var("SAKER_NODE").unwrap_or_default(), millis)
    }
}

/// Where it ran, as `saker::node()` says.
struct WhereAmI;
impl Task for WhereAmI {
    const NAME: &'static str = "where-am-i";
    type Input = ();
    type Output = Option<u32>;
    async fn run((): ()) -> Option<u32> {
        saker::node()
    }
}

/// Sleeps `millis`; says when it started and ended (µs since the epoch).
struct Clock;
impl Task for Clock {
    const NAME: &'static str = "clock";
    type Input = u64;
    type Output = (u64, u64);
    async fn run(millis: u64) -> (u64, u64) {
        let start = unix_micros();
        tokio::time::sleep(Duration::from_millis(millis)).await;
        (start, unix_micros())
    }
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// A record with strings and vectors, to round-trip a derived type.
#[derive(
    Debug, Clone, PartialEq, saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize,
)]
#[rkyv(crate = saker::rkyv)]
struct Sample {
    name: String,
    values: Vec<f64>,
    weight: Option<u32>,
}

struct Stats;
impl Task for Stats {
    const NAME: &'static str = "stats";
    type Input = Sample;
    type Output = (String, f64, usize);
    async fn run(sample: Sample) -> (String, f64, usize) {
        let sum: f64 = sample.values.iter().sum();
        let weight = f64::from(sample.weight.unwrap_or(1));
        (
            sample.name.to_uppercase(),
            sum * weight,
            sample.values.len(),
        )
    }
}

/// Answers its input reversed (large inputs and outputs).
struct Reverse;
impl Task for Reverse {
    const NAME: &'static str = "reverse";
    type Input = Vec<u8>;
    type Output = Vec<u8>;
    async fn run(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.reverse();
        bytes
    }
}

/// Registered only with `SAKER_TESTAPP_EXTRA`.
struct Extra;
impl Task for Extra {
    const NAME: &'static str = "extra";
    type Input = u64;
    type Output = u64;
    async fn run(x: u64) -> u64 {
        x
    }
}

fn main() -> ExitCode {
    let mut app = App::new().agents(2).slots(2);
    app = if std::env::var_os("SAKER_TESTAPP_V2").is_some() {
        app.task::<SquareV2>()
    } else {
        app.task::<Square>()
    };
    if std::env::var_os("SAKER_TESTAPP_EXTRA").is_some() {
        app = app.task::<Extra>();
    }
    app = if std::env::var_os("SAKER_TESTAPP_V2").is_some() {
        app.actor::<actors::CounterV2>()
    } else {
        app.actor::<actors::Counter>()
    };
    let app = app
        .actor::<actors::Relay>()
        .task::<actors::AddVia>()
        .task::<Reverse>()
        .task::<Boom>()
        .task::<FailsOnce>()
        .task::<Nap>()
        .task::<Clock>()
        .task::<WhereAmI>()
        .task::<Stats>()
        .task::<objects::Sum>()
        .task::<objects::Fill>()
        .task::<objects::Total>();
    let args: Vec<String> = app
        .args()
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    app.run(move |pilot| async move { scenario(pilot, &args).await })
}

pub(crate) fn check(condition: bool, what: impl std::fmt::Display) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(format!("check failed: {what}"))
    }
}

async fn scenario(pilot: saker::Pilot, args: &[String]) -> Result<(), String> {
    let name = args.first().map(String::as_str).unwrap_or("");
    match name {
        "round-trip" => round_trip(&pilot).await,
        "failures" => failures(&pilot, args.get(1).map(String::as_str).unwrap_or("/tmp")).await,
        "v2" => {
            let error = pilot.submit::<SquareV2>("abc".into()).await;
            println!("{error:?}");
            check(
                matches!(error, Err(TaskError::TypeMismatch { .. })),
                "a type mismatch",
            )
            .map(|()| println!("ok type mismatch"))
        }
        "extra" => {
            let error = pilot.submit::<Extra>(1).await;
            println!("{error:?}");
            check(
                matches!(error, Err(TaskError::UnknownTask { .. })),
                "an unknown task",
            )
            .map(|()| println!("ok unknown task"))
        }
        "naps" => {
            // Slow enough that an agent killed meanwhile holds some of them.
            let count: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(40);
            let millis: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(300);
            let options = TaskOptions::new().chunk(1);
            let mut naps = pilot
                .with(options)
                .map::<Nap, _>(vec![millis; count as usize]);
            let mut nodes = std::collections::BTreeSet::new();
            let mut next = 0;
            while let Some((index, result)) = naps.next().await {
                check(index == next, format!("index {index} in order"))?;
                let (node, slept) = result.map_err(|e| e.to_string())?;
                check(slept == millis, "the input came back")?;
                nodes.insert(node);
                next += 1;
                println!("done {index}");
            }
            check(next == count as usize, "every nap")?;
            println!("ok {count} naps on nodes {nodes:?}");
            Ok(())
        }
        "pinned" => pinned(&pilot).await,
        "when" => when(&pilot).await,
        "big" => big(&pilot).await,
        "objects" => objects::objects(&pilot).await,
        "commands" => commands::commands(&pilot, args.get(1).map(String::as_str)).await,
        "put-and-go" => objects::put_and_go(&pilot).await,
        "actors" => actors::actors(&pilot).await,
        "actor-loss" => actors::loss(&pilot).await,
        "actor-takeover" => actors::takeover(&pilot).await,
        "actor-v2" => actors::mismatch(&pilot).await,
        "actor-nohost" => actors::no_host(&pilot).await,
        // Drives nothing: keeps a `saker pilot --app` up for other drivers.
        "serve" => std::future::pending().await,
        other => Err(format!("unknown scenario {other:?}")),
    }
}

/// An input and an output just under the 16 MiB limit: journaled (as base64, a third
/// larger) and answered, and the pilot goes on.
async fn big(pilot: &saker::Pilot) -> Result<(), String> {
    let input: Vec<u8> = (0..(16 << 20) - 4096).map(|i| (i % 251) as u8).collect();
    let output = pilot
        .submit::<Reverse>(input.clone())
        .await
        .map_err(|e| e.to_string())?;
    check(output.len() == input.len(), "as long")?;
    check(output.iter().eq(input.iter().rev()), "reversed")?;
    let nine = pilot.submit::<Square>(3).await.map_err(|e| e.to_string())?;
    check(nine == 9, "the pilot goes on")?;
    println!("ok big");
    Ok(())
}

/// Typed tasks wait for others (`after`, `after_any`) and for a time (`not_before`),
/// and a dependency that failed cancels its dependent.
async fn when(pilot: &saker::Pilot) -> Result<(), String> {
    let first = pilot.submit::<Clock>(300);
    let job = first.job().await.map_err(|e| e.to_string())?;
    let second = pilot.with(TaskOptions::new().after(job)).submit::<Clock>(0);
    let (_, first_end) = first.await.map_err(|e| e.to_string())?;
    let (second_start, _) = second.await.map_err(|e| e.to_string())?;
    check(
        second_start >= first_end,
        "after: started once the first ended",
    )?;

    let failing = pilot.submit::<Boom>(3);
    let failed = failing.job().await.map_err(|e| e.to_string())?;
    let doomed = pilot
        .with(TaskOptions::new().after(failed))
        .submit::<Clock>(0);
    let cleanup = pilot
        .with(TaskOptions::new().after_any(failed))
        .submit::<Clock>(0);
    check(failing.await.is_err(), "the odd input fails")?;
    match doomed.await {
        Err(TaskError::Cancelled) => {}
        other => return Err(format!("expected a cancelled dependent, got {other:?}")),
    }
    cleanup.await.map_err(|e| e.to_string())?;

    let submitted = unix_micros();
    let at = std::time::SystemTime::now() + Duration::from_millis(600);
    let (start, _) = pilot
        .with(TaskOptions::new().not_before(at))
        .submit::<Clock>(0)
        .await
        .map_err(|e| e.to_string())?;
    check(start >= submitted + 600_000, "not before its time")?;
    println!("ok when");
    Ok(())
}

/// Tasks placed on a given node run there, whatever the other node has free; a node
/// the pilot cannot have is refused at submission. Nodes are numbered from 0, and
/// `saker::node()` says which one code runs on (none in the driver). The driver of
/// an embedded pilot starts once its agents joined: `slots()` counts them all.
async fn pinned(pilot: &saker::Pilot) -> Result<(), String> {
    check(
        pilot.slots() == 2,
        format!("slots() counts both agents' slots: {}", pilot.slots()),
    )?;
    check(saker::node().is_none(), "the driver runs on no node")?;
    for node in [1u32, 0] {
        let told = pilot
            .with(TaskOptions::new().node(node))
            .submit::<WhereAmI>(())
            .await
            .map_err(|e| e.to_string())?;
        check(
            told == Some(node),
            format!("saker::node() in a task on node {node}: {told:?}"),
        )?;
    }
    for node in [1u32, 0] {
        let outputs = pilot
            .with(TaskOptions::new().node(node).chunk(1))
            .map_unordered::<Nap, _>(vec![20u64; 8])
            .collect()
            .await;
        check(outputs.len() == 8, "eight naps")?;
        for (_, output) in outputs {
            let (ran_on, _) = output.map_err(|e| e.to_string())?;
            check(
                ran_on == node.to_string(),
                format!("ran on {ran_on}, not {node}"),
            )?;
        }
    }
    match pilot
        .with(TaskOptions::new().node(7))
        .submit::<Nap>(1)
        .await
    {
        Err(TaskError::Failed { reason }) => check(reason.contains("node 7"), &reason)?,
        other => return Err(format!("node 7 accepted: {other:?}")),
    }
    println!("ok pinned");
    Ok(())
}

async fn round_trip(pilot: &saker::Pilot) -> Result<(), String> {
    let nine = pilot.submit::<Square>(3).await.map_err(|e| e.to_string())?;
    check(nine == 9, "3² = 9")?;
    // Many single calls, batched into few requests.
    let handles: Vec<_> = (0..500u64).map(|x| pilot.submit::<Square>(x)).collect();
    for (x, handle) in handles.into_iter().enumerate() {
        let square = handle.await.map_err(|e| e.to_string())?;
        check(square == (x as u64) * (x as u64), format!("{x}²"))?;
    }
    // Ordered map over chunks of varying fill.
    let outputs = pilot
        .with(TaskOptions::new().chunk(7))
        .map::<Square, _>(0..1000u64)
        .collect()
        .await;
    check(outputs.len() == 1000, "1000 outputs")?;
    for (position, (index, square)) in outputs.into_iter().enumerate() {
        check(index == position, "in input order")?;
        let square = square.map_err(|e| e.to_string())?;
        check(square == (index as u64).pow(2), format!("{index}²"))?;
    }
    // Unordered: every index once.
    let mut seen = vec![false; 3000];
    let mut unordered = pilot.map_unordered::<Square, _>(0..3000u64);
    while let Some((index, square)) = unordered.next().await {
        check(!seen[index], format!("{index} once"))?;
        seen[index] = true;
        check(
            square.map_err(|e| e.to_string())? == (index as u64).pow(2),
            "square",
        )?;
    }
    check(seen.iter().all(|s| *s), "every index")?;
    // A derived record type.
    let sample = Sample {
        name: "mixed".into(),
        values: vec![1.5, 2.5, 4.0],
        weight: Some(2),
    };
    let (name, total, len) = pilot
        .submit::<Stats>(sample)
        .await
        .map_err(|e| e.to_string())?;
    check(name == "MIXED" && total == 16.0 && len == 3, "stats")?;
    // An empty map ends at once.
    check(
        pilot
            .map::<Square, _>(Vec::new())
            .collect()
            .await
            .is_empty(),
        "empty map",
    )?;
    println!("ok round trip");
    Ok(())
}

async fn failures(pilot: &saker::Pilot, scratch: &str) -> Result<(), String> {
    // A panic is a failed task with its message.
    match pilot.submit::<Boom>(3).await {
        Err(TaskError::Panicked { message }) => check(message.contains("odd input 3"), &message)?,
        other => return Err(format!("expected a panic, got {other:?}")),
    }
    // In a map, one panicking input costs only itself.
    let outputs = pilot
        .with(TaskOptions::new().chunk(10))
        .map::<Boom, _>(0..10u64)
        .collect()
        .await;
    for (index, output) in outputs {
        match (index % 2, output) {
            (0, Ok(x)) => check(x == index as u64, "even returns")?,
            (1, Err(TaskError::Panicked { message })) => {
                check(message.contains(&format!("odd input {index}")), &message)?
            }
            (_, other) => return Err(format!("input {index}: {other:?}")),
        }
    }
    // With retries, a panic is tried again: alone, and inside a chunk.
    let once = format!("{scratch}/single");
    let retried = pilot
        .with(TaskOptions::new().retries(1))
        .submit::<FailsOnce>(once.clone())
        .await;
    check(
        retried.as_ref() == Ok(&once),
        format!("retried alone: {retried:?}"),
    )?;
    let paths: Vec<String> = (0..4).map(|i| format!("{scratch}/chunk-{i}")).collect();
    let outputs = pilot
        .with(TaskOptions::new().retries(1).chunk(4))
        .map::<FailsOnce, _>(paths.clone())
        .collect()
        .await;
    for ((index, output), path) in outputs.into_iter().zip(&paths) {
        check(
            output.as_ref() == Ok(path),
            format!("chunk input {index}: {output:?}"),
        )?;
    }
    // Without retries a panic stays a failure.
    let never = pilot.submit::<FailsOnce>(format!("{scratch}/never")).await;
    check(
        matches!(never, Err(TaskError::Panicked { .. })),
        format!("{never:?}"),
    )?;
    // A time limit fails the task with the pilot's reason.
    let limited = pilot
        .with(TaskOptions::new().time_limit(Duration::from_millis(300)))
        .submit::<Nap>(30_000)
        .await;
    match limited {
        Err(TaskError::Failed { reason }) => check(reason.contains("time limit"), &reason)?,
        other => return Err(format!("expected a time limit, got {other:?}")),
    }
    println!("ok failures");
    Ok(())
}
