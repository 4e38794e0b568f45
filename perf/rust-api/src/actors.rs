//! The actor rows, on an embedded pilot of [`AGENTS`] agents: call round trips (from
//! the driver, and from an actor on one agent to an actor on another) beside a raw
//! QUIC round trip; spawning many actors beside as many raw QUIC exchanges; and
//! memory per actor beside a bare tokio task with a mailbox in one process.

use std::future::IntoFuture;
use std::time::Instant;

use saker::{Actor, Placement, RemoteRef};
use serde_json::json;
use tokio::task::JoinSet;

use crate::raw::RawQuic;

/// Agents of the actor rows' pilot.
pub const AGENTS: u32 = 16;

/// A number: the smallest actor.
pub struct Cell(u64);

impl Actor for Cell {
    const NAME: &'static str = "cell";
    type Args = u64;
    type Msg = u64;
    type Reply = u64;

    async fn on_start(value: u64) -> Cell {
        Cell(value)
    }

    async fn handle(&mut self, add: u64) -> u64 {
        self.0 += add;
        self.0
    }
}

/// Calls a cell `count` times in a row and answers each round trip in µs.
pub struct Pinger;

impl Actor for Pinger {
    const NAME: &'static str = "pinger";
    type Args = ();
    type Msg = (RemoteRef<Cell>, u32);
    type Reply = Vec<u64>;

    async fn on_start((): ()) -> Pinger {
        Pinger
    }

    async fn handle(&mut self, (cell, count): (RemoteRef<Cell>, u32)) -> Vec<u64> {
        // The first call opens this node's connection to the pilot: not a sample.
        let _ = cell.call(0).await;
        let mut samples = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let started = Instant::now();
            if cell.call(1).await.is_err() {
                break;
            }
            samples.push(started.elapsed().as_micros() as u64);
        }
        samples
    }
}

fn failed(error: impl std::fmt::Display) -> String {
    error.to_string()
}

pub async fn rows(pilot: saker::Pilot, quick: bool) -> Result<(), String> {
    let (actors, calls) = if quick {
        (2_000u32, 300u32)
    } else {
        (10_000, 2_000)
    };
    let nodes = pilot.nodes().await.map_err(failed)?;
    if nodes != AGENTS {
        return Err(format!("{nodes} of {AGENTS} agents joined"));
    }
    let mut raw = RawQuic::start().await?;

    // Round trips from the driver (in process with the root) to an actor on node 1.
    let cell = pilot
        .spawn::<Cell>(0)
        .on(Placement::Node(1))
        .await
        .map_err(failed)?;
    let raw_trips = raw.round_trips(calls as usize, 24, 16).await?;
    let mut trips = Vec::with_capacity(calls as usize);
    for _ in 0..calls {
        let started = Instant::now();
        cell.call(1).await.map_err(failed)?;
        trips.push(started.elapsed().as_micros() as u64);
    }
    latency_rows("driver to an actor on an agent", &trips, &raw_trips);

    // From an actor on node 0 to one on node 1: through node 0's connection to the
    // root, then down the tree.
    let pinger = pilot
        .spawn::<Pinger>(())
        .on(Placement::Node(0))
        .await
        .map_err(failed)?;
    let trips = pinger.call((cell, calls)).await.map_err(failed)?;
    if trips.len() != calls as usize {
        return Err(format!("{} of {calls} pings answered", trips.len()));
    }
    latency_rows(
        "actor on one agent to an actor on another",
        &trips,
        &raw_trips,
    );

    // Spawning many, all in flight at once, spread over the agents.
    let before = pilot_rss()?;
    let raw_rate = raw.throughput(actors as usize, 1, 40, 16).await?;
    let started = Instant::now();
    let mut spawns = JoinSet::new();
    for value in 0..actors {
        spawns.spawn(saker::spawn::<Cell>(u64::from(value)).into_future());
    }
    let mut refs = Vec::with_capacity(actors as usize);
    while let Some(spawned) = spawns.join_next().await {
        refs.push(spawned.map_err(failed)?.map_err(failed)?);
    }
    let rate = f64::from(actors) / started.elapsed().as_secs_f64();
    // Every actor's mailbox and task exist once its spawn answered.
    let after = pilot_rss()?;
    let status = pilot.status().await.map_err(failed)?;
    if status.actors < u64::from(actors) {
        return Err(format!("{} actors placed of {actors}", status.actors));
    }
    println!(
        "{}",
        json!({"row": format!("rust: {actors} actors spawned across {AGENTS} agents"),
               "unit": "per_second", "saker": rate, "baseline": raw_rate,
               "baseline_name": "as many exchanges over one raw QUIC stream", "target": null})
    );
    let per_actor = after.saturating_sub(before) as f64 / f64::from(actors);
    println!(
        "{}",
        json!({"row": format!("rust: memory per actor, {actors} on {AGENTS} agents (root and agents' RSS)"),
               "unit": "bytes_per_task", "saker": per_actor, "baseline": bare_actor_bytes(actors)?,
               "baseline_name": "a tokio task with a mailbox, in one process", "target": null})
    );
    drop(refs);
    Ok(())
}

/// p50 at most 1.2 × the raw QUIC round trip measured beside it (the floor an actor
/// call sits on, which moves with the machine); p99 at most 500 µs.
fn latency_rows(what: &str, trips: &[u64], raw: &[u64]) {
    let targets = [
        (50, json!({"ratio_at_most": 1.2})),
        (99, json!({"at_most": 500.0})),
    ];
    for (percentile, target) in targets {
        println!(
            "{}",
            json!({"row": format!("rust: actor call round trip p{percentile}, {what}"),
                   "unit": "microseconds",
                   "saker": {"samples_us": trips, "percentile": percentile},
                   "baseline": {"samples_us": raw, "percentile": percentile},
                   "baseline_name": "raw QUIC round trip", "target": target})
        );
    }
}

/// Resident bytes of this process (the driver and its embedded root) and of its
/// agents (children started as `… __saker agent …`).
fn pilot_rss() -> Result<u64, String> {
    let own = std::process::id();
    let mut total = rss(own).ok_or("cannot read this process's RSS")?;
    for entry in std::fs::read_dir("/proc").map_err(failed)?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(" __saker agent ") && parent(pid) == Some(own) {
            total += rss(pid).unwrap_or(0);
        }
    }
    Ok(total)
}

fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Bytes per bare in-process actor: a task awaiting an unbounded mailbox, holding a
/// number, measured in a fresh process of this binary (`bare N`), whose small heap
/// grows by what the actors take.
fn bare_actor_bytes(count: u32) -> Result<f64, String> {
    let program = std::env::current_exe().map_err(failed)?;
    let output = std::process::Command::new(program)
        .args(["bare", &count.to_string()])
        .output()
        .map_err(failed)?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|_| {
            format!(
                "`bare {count}` printed {:?}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
}

/// `bare N`: prints the bytes of RSS per bare actor, for N of them.
pub fn bare(count: u32) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let per_actor = runtime.block_on(async move {
        let before = rss(std::process::id()).unwrap_or(0);
        let mut mailboxes = Vec::with_capacity(count as usize);
        let mut tasks = JoinSet::new();
        for value in 0..count {
            let (sender, mut inbox) = tokio::sync::mpsc::unbounded_channel::<u64>();
            mailboxes.push(sender);
            tasks.spawn(async move {
                let mut state = u64::from(value);
                while let Some(add) = inbox.recv().await {
                    state += add;
                }
                state
            });
        }
        // Every task has run to its first wait, as a started actor has.
        for mailbox in &mailboxes {
            let _ = mailbox.send(1);
        }
        tokio::task::yield_now().await;
        let after = rss(std::process::id()).unwrap_or(0);
        drop(mailboxes);
        while tasks.join_next().await.is_some() {}
        after.saturating_sub(before) as f64 / f64::from(count)
    });
    println!("{per_actor}");
}
