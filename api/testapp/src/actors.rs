//! The test application's actors and the scenarios that use them.

use std::time::{Duration, Instant};

use saker::{Actor, ActorError, Placement, RemoteRef, Restart, Task};

use crate::check;

/// What a [`Counter`] is asked.
#[derive(Debug, saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize)]
#[rkyv(crate = saker::rkyv)]
pub enum Op {
    Add(u64),
    Get,
    /// The node it runs on.
    Node,
    Panic,
    /// Answers the value after this many milliseconds.
    Sleep(u64),
    /// Answers the length.
    Blob(Vec<u8>),
}

/// A number on a node. Starting from `u64::MAX` panics in `on_start`.
pub struct Counter(u64);

impl Actor for Counter {
    const NAME: &'static str = "counter";
    type Args = u64;
    type Msg = Op;
    type Reply = u64;

    async fn on_start(start: u64) -> Counter {
        assert!(start != u64::MAX, "asked to fail at start");
        Counter(start)
    }

    async fn handle(&mut self, op: Op) -> u64 {
        match op {
            Op::Add(n) => self.0 += n,
            Op::Get => {}
            Op::Node => return u64::from(saker::node().expect("an actor runs on a node")),
            Op::Panic => panic!("asked to panic at {}", self.0),
            Op::Sleep(millis) => tokio::time::sleep(Duration::from_millis(millis)).await,
            Op::Blob(bytes) => return bytes.len() as u64,
        }
        self.0
    }
}

/// `counter` as another build of the program has it (another message type).
pub struct CounterV2;

impl Actor for CounterV2 {
    const NAME: &'static str = "counter";
    type Args = u64;
    type Msg = String;
    type Reply = u64;

    async fn on_start(_: u64) -> CounterV2 {
        CounterV2
    }

    async fn handle(&mut self, text: String) -> u64 {
        text.len() as u64
    }
}

/// Adds to the counter it was given (a ref in its spawn arguments); answers the
/// counter's value and the node the relay itself runs on.
pub struct Relay(RemoteRef<Counter>);

impl Actor for Relay {
    const NAME: &'static str = "relay";
    type Args = RemoteRef<Counter>;
    type Msg = u64;
    type Reply = (u64, u32);

    async fn on_start(counter: RemoteRef<Counter>) -> Relay {
        Relay(counter)
    }

    async fn handle(&mut self, add: u64) -> (u64, u32) {
        let value = self
            .0
            .call(Op::Add(add))
            .await
            .expect("the counter answers");
        (value, saker::node().expect("a relay runs on a node"))
    }
}

/// A task that adds to a counter named in its input.
pub struct AddVia;

impl Task for AddVia {
    const NAME: &'static str = "add-via";
    type Input = (RemoteRef<Counter>, u64);
    type Output = u64;

    async fn run((counter, add): (RemoteRef<Counter>, u64)) -> u64 {
        counter
            .call(Op::Add(add))
            .await
            .expect("the counter answers")
    }
}

fn show<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T, String> {
    result.map_err(|error| error.to_string())
}

/// Calls, casts, placement, refs in messages and task inputs, panics, restarts,
/// stops and refused spawns, on an embedded pilot of two nodes.
pub async fn actors(pilot: &saker::Pilot) -> Result<(), String> {
    let counter = show(pilot.spawn::<Counter>(10).on(Placement::Node(1)).await)?;
    check(show(counter.call(Op::Node).await)? == 1, "placed on node 1")?;
    check(show(counter.call(Op::Add(5)).await)? == 15, "10 + 5")?;
    // Casts from one sender arrive in order, before the call behind them.
    for _ in 0..100 {
        show(counter.cast(Op::Add(1)).await)?;
    }
    check(show(counter.call(Op::Get).await)? == 115, "casts in order")?;

    // A ref in spawn arguments, placed beside its counter; actor to actor.
    let relay = show(pilot.spawn::<Relay>(counter).on(&counter).await)?;
    check(
        show(relay.call(2).await)? == (117, 1),
        "the relay adds, on node 1",
    )?;
    // A ref in a task's input: the task calls the actor.
    check(
        show(pilot.submit::<AddVia>((counter, 3)).await)? == 120,
        "a task adds",
    )?;

    // A message over the 16 MiB limit is refused before it leaves; the actor is fine.
    let big = counter.call(Op::Blob(vec![7; 17 << 20])).await;
    check(
        matches!(big, Err(ActorError::InvalidData { .. })),
        format!("17 MiB: {big:?}"),
    )?;
    check(
        show(counter.call(Op::Blob(vec![7; 1 << 20])).await)? == 1 << 20,
        "1 MiB",
    )?;

    // Any placement spreads actors over the nodes.
    let mut nodes = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let spread = show(pilot.spawn::<Counter>(0).await)?;
        nodes.insert(show(spread.call(Op::Node).await)?);
    }
    check(nodes.len() == 2, format!("spread over {nodes:?}"))?;

    // A panic ends a life; without a restart policy the actor stays ended: later
    // calls answer `Unknown`, saying how it ended (not `Panicked`: they did not).
    let fragile = show(pilot.spawn::<Counter>(0).await)?;
    match fragile.call(Op::Panic).await {
        Err(ActorError::Panicked { message }) => {
            check(message.contains("asked to panic"), &message)?
        }
        other => return Err(format!("expected a panic, got {other:?}")),
    }
    let after = fragile.call(Op::Get).await;
    check(
        matches!(&after, Err(ActorError::Unknown { message }) if message.contains("after a panic")),
        format!("an ended actor answers {after:?}"),
    )?;

    // With `Always`, it starts again from its arguments, on its own node: a panic
    // leaves the node healthy (the least loaded node, where it went before, is 0).
    let sturdy = show(
        pilot
            .spawn::<Counter>(7)
            .on(Placement::Node(1))
            .restart(Restart::Always { max_restarts: 1 })
            .await,
    )?;
    check(show(sturdy.call(Op::Add(1)).await)? == 8, "7 + 1")?;
    check(
        matches!(
            sturdy.call(Op::Panic).await,
            Err(ActorError::Panicked { .. })
        ),
        "a panic",
    )?;
    let again = call_until_ok(&sturdy, || Op::Get).await?;
    check(again == 7, format!("restarted from its arguments: {again}"))?;
    let home = show(sturdy.call(Op::Node).await)?;
    check(
        home == 1,
        format!("restarted on node {home}, not its node 1"),
    )?;

    // A stop runs on_stop; later calls are refused as stopped.
    show(sturdy.stop().await)?;
    let stopped = sturdy.call(Op::Get).await;
    check(
        matches!(stopped, Err(ActorError::Stopped { .. })),
        format!("after a stop: {stopped:?}"),
    )?;

    // Spawns that cannot start fail typed.
    let nowhere = pilot.spawn::<Counter>(0).on(Placement::Node(7)).await;
    check(
        matches!(nowhere, Err(ActorError::Refused { .. })),
        format!("node 7: {nowhere:?}"),
    )?;
    let failing = pilot.spawn::<Counter>(u64::MAX).await;
    check(
        matches!(&failing, Err(ActorError::Panicked { message }) if message.contains("fail at start")),
        format!("on_start panics: {failing:?}"),
    )?;
    println!("ok actors");
    Ok(())
}

/// Calls until the actor answers (it is between lives meanwhile), for 20 s at most.
async fn call_until_ok(actor: &RemoteRef<Counter>, op: impl Fn() -> Op) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match actor.call(op()).await {
            Ok(value) => return Ok(value),
            Err(error @ (ActorError::Lost { .. } | ActorError::Unknown { .. })) => {
                if Instant::now() > deadline {
                    return Err(format!("still no answer: {error}"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => return Err(other.to_string()),
        }
    }
}

/// Node 1 is killed (by the test, once this prints `ready`) while a call to its
/// actor is in flight: the call fails as lost, and the actor answers again from
/// another node, started afresh from its arguments.
pub async fn loss(pilot: &saker::Pilot) -> Result<(), String> {
    let counter = show(
        pilot
            .spawn::<Counter>(100)
            .on(Placement::Node(1))
            .restart(Restart::OnNodeLoss { max_restarts: 2 })
            .await,
    )?;
    check(show(counter.call(Op::Node).await)? == 1, "placed on node 1")?;
    check(show(counter.call(Op::Add(5)).await)? == 105, "100 + 5")?;
    let slow = tokio::spawn(async move { counter.call(Op::Sleep(120_000)).await });
    println!("ready");
    match slow.await {
        Ok(Err(ActorError::Lost { message })) => println!("in flight: lost ({message})"),
        other => return Err(format!("the in-flight call: {other:?}")),
    }
    let node = call_until_ok(&counter, || Op::Node).await?;
    check(node != 1, format!("restarted on node {node}"))?;
    check(show(counter.call(Op::Get).await)? == 100, "a fresh start")?;
    println!("ok actor loss: restarted on node {node}");
    Ok(())
}

/// The pilot's root is killed (by the test, once this prints `ready`, which then
/// writes a line here) and a standby takes over: the actor runs on where it was, its
/// state kept, and the driver's next calls reach it.
pub async fn takeover(pilot: &saker::Pilot) -> Result<(), String> {
    let counter = show(
        pilot
            .spawn::<Counter>(100)
            .on(Placement::Node(1))
            .restart(Restart::OnNodeLoss { max_restarts: 2 })
            .await,
    )?;
    check(show(counter.call(Op::Add(5)).await)? == 105, "100 + 5")?;
    println!("ready");
    let killed = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()));
    check(killed.await.is_ok(), "the test says the root was killed")?;
    // Calls fail while no root answers: asked again (it is a read) until one does.
    let deadline = Instant::now() + Duration::from_secs(30);
    let value = loop {
        match counter.call(Op::Get).await {
            Ok(value) => break value,
            Err(error) if Instant::now() < deadline => {
                println!("while taking over: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(format!("still no answer: {error}")),
        }
    };
    check(
        value == 105,
        format!("the state it had, not a fresh start: {value}"),
    )?;
    check(show(counter.call(Op::Node).await)? == 1, "still on node 1")?;
    check(show(counter.call(Op::Add(1)).await)? == 106, "105 + 1")?;
    println!("ok actor takeover");
    Ok(())
}

/// A driver built with another `counter` than the nodes': refused at the spawn.
pub async fn mismatch(pilot: &saker::Pilot) -> Result<(), String> {
    let spawned = pilot.spawn::<CounterV2>(1).await;
    println!("{spawned:?}");
    check(
        matches!(&spawned, Err(ActorError::TypeMismatch { message }) if message.contains("different versions")),
        "a type mismatch",
    )?;
    println!("ok actor type mismatch");
    Ok(())
}

/// A pilot whose agents are not this program: no node can host actors, and the
/// error says how to start one that can.
pub async fn no_host(pilot: &saker::Pilot) -> Result<(), String> {
    for placement in [Placement::Any, Placement::Node(0)] {
        let spawned = pilot.spawn::<Counter>(1).on(placement).await;
        println!("{spawned:?}");
        check(
            matches!(&spawned, Err(ActorError::NoHost { message })
                if message.contains("start the pilot with `--app <your binary>`")),
            format!("no host, with the --app hint ({placement:?})"),
        )?;
    }
    println!("ok no actor host");
    Ok(())
}
