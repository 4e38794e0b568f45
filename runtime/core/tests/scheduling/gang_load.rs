//! A mixed load of small tasks and gangs on a few nodes with prefetching agents,
//! driven through the harness (which audits the core after every input): every task
//! ends once, every gang part finds its slots free on every member the moment it
//! arrives, slots are never over-used, and a gang at the head with a known expected
//! start is dispatched within a bound of it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use saker_core::{AttemptId, AttemptOutcome, Dispatch, Event, JobId, JobSpec, Placement, Time};

use crate::harness::Harness;

const NODES: u32 = 6;
const CORES: u32 = 4;
const PREFETCH: u32 = 2;
const SMALL_LIMIT: u64 = 50;

/// A tiny deterministic generator (xorshift), so the test needs no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// One agent: runs what fits its cores, queues the rest in arrival order; gang parts
/// must start at once.
#[derive(Default)]
struct Agent {
    used: u32,
    queue: VecDeque<(AttemptId, u32, u64)>,
}

struct World {
    harness: Harness,
    rng: Rng,
    agents: BTreeMap<u32, Agent>,
    /// (end time, attempt, node, cores) of running work, earliest first.
    ends: BinaryHeap<Reverse<(u64, AttemptId, u32, u32)>>,
    /// Gang attempts: parts still running.
    gang_parts: BTreeMap<AttemptId, u32>,
    cores_of: BTreeMap<JobId, u32>,
    gangs: Vec<JobId>,
    /// Gang job -> (made head at, expected start) when a reservation first named it.
    reserved: BTreeMap<JobId, (u64, Time)>,
    finished: u64,
    /// Queued attempts reserved nodes gave back.
    returned: u64,
}

impl World {
    fn on_dispatch(&mut self, dispatch: Dispatch, now: u64) {
        let assignment = dispatch.assignments[0];
        let cores = self.cores_of[&assignment.job];
        if dispatch.members.is_empty() {
            for assignment in &dispatch.assignments {
                let cores = self.cores_of[&assignment.job];
                let duration = 1 + self.rng.below(SMALL_LIMIT);
                let agent = self.agents.get_mut(&dispatch.node.0).unwrap();
                agent.queue.push_back((assignment.attempt, cores, duration));
            }
            self.start_local(dispatch.node.0, now);
            return;
        }
        if let Some((_, start)) = self.reserved.get(&assignment.job) {
            // The estimate holds but for one race: a queued attempt that starts while
            // the request to give it back is on its way (a slot freed meanwhile) may
            // hold its node up to its time limit.
            assert!(
                now <= start.as_micros() + SMALL_LIMIT,
                "gang {} started at {now}, expected by {start} (reserved at {})",
                assignment.job,
                self.reserved[&assignment.job].0
            );
        }
        let duration = 20 + self.rng.below(60);
        for member in &dispatch.members {
            let agent = self.agents.get_mut(&member.0).unwrap();
            assert!(
                agent.used + cores <= CORES,
                "gang part on node {member} finds {} of {CORES} cores used",
                agent.used
            );
            agent.used += cores;
            self.ends.push(Reverse((
                now + duration,
                assignment.attempt,
                member.0,
                cores,
            )));
        }
        self.gang_parts
            .insert(assignment.attempt, dispatch.members.len() as u32);
        self.harness.started(assignment.attempt);
    }

    fn start_local(&mut self, node: u32, now: u64) {
        let mut started = Vec::new();
        let agent = self.agents.get_mut(&node).unwrap();
        while let Some(&(attempt, cores, duration)) = agent.queue.front() {
            if agent.used + cores > CORES {
                break;
            }
            agent.queue.pop_front();
            agent.used += cores;
            self.ends
                .push(Reverse((now + duration, attempt, node, cores)));
            started.push(attempt);
        }
        for attempt in started {
            self.harness.started(attempt);
        }
    }

    fn note_reservation(&mut self, now: u64) {
        if let Some(held) = self.harness.core.reservation()
            && let Some(start) = held.start
        {
            self.reserved.entry(held.job).or_insert((now, start));
        }
    }

    fn drain(&mut self, now: u64) {
        for event in self.harness.take_events() {
            match event {
                Event::TaskFinished { .. } => self.finished += 1,
                Event::ReturnUnstarted { node, attempt } => {
                    // Given back only if still in the agent's queue, as agents do.
                    let agent = self.agents.get_mut(&node.0).unwrap();
                    if let Some(at) = agent.queue.iter().position(|(a, ..)| *a == attempt) {
                        let (_, cores, _) = agent.queue.remove(at).unwrap();
                        self.harness.result(attempt, AttemptOutcome::Cancelled);
                        self.harness.credit(node.0, cores);
                        self.returned += 1;
                    }
                }
                _ => {}
            }
        }
        for dispatch in self.harness.take_dispatches() {
            self.on_dispatch(dispatch, now);
        }
        self.note_reservation(now);
    }
}

#[test]
fn mixed_small_tasks_and_gangs_all_end_once_with_every_gang_started_whole() {
    for seed in 1..=20u64 {
        run(seed);
    }
}

fn run(seed: u64) {
    let mut world = World {
        harness: Harness::new(),
        rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        agents: BTreeMap::new(),
        ends: BinaryHeap::new(),
        gang_parts: BTreeMap::new(),
        cores_of: BTreeMap::new(),
        gangs: Vec::new(),
        reserved: BTreeMap::new(),
        finished: 0,
        returned: 0,
    };
    for node in 1..=NODES {
        world.agents.insert(node, Agent::default());
        world.harness.join(node, CORES);
        world.harness.credit(node, CORES + PREFETCH);
    }
    let mut total = 0u64;
    for round in 0..40u32 {
        let cores = 1 + world.rng.below(2) as u32;
        let count = 5 + world.rng.below(20) as u32;
        let job = world.harness.submit(
            JobSpec::array(count)
                .with_cores(cores)
                .with_time_limit_micros(SMALL_LIMIT),
        );
        world.cores_of.insert(job.job, cores);
        total += u64::from(count);
        if round % 4 == 1 {
            let nodes = 2 + world.rng.below(2) as u32;
            let cores = 2 + world.rng.below(3) as u32;
            let spec = JobSpec::single()
                .with_cores(cores)
                .with_time_limit_micros(100)
                .with_placement(Placement::Gang { nodes });
            let job = world.harness.submit(spec);
            world.cores_of.insert(job.job, cores);
            world.gangs.push(job.job);
            total += 1;
        }
        world.drain(0);
    }
    while let Some(Reverse((end, attempt, node, cores))) = world.ends.pop() {
        let now = end;
        world.harness.advance_to(Time(now));
        world.agents.get_mut(&node).unwrap().used -= cores;
        world.harness.credit(node, cores);
        let done = match world.gang_parts.get_mut(&attempt) {
            Some(parts) => {
                *parts -= 1;
                *parts == 0
            }
            None => true,
        };
        if done {
            world.gang_parts.remove(&attempt);
            world.harness.result(attempt, AttemptOutcome::Succeeded);
        }
        world.drain(now);
        world.start_local(node, now);
        world.drain(now);
    }
    assert_eq!(world.finished, total, "seed {seed}: every task ends once");
    assert!(world.harness.core.is_quiescent(), "seed {seed}");
    assert_eq!(world.harness.core.counts().succeeded, total);
    assert!(
        !world.reserved.is_empty(),
        "seed {seed}: some gang had to wait"
    );
}
