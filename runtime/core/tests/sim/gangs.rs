//! Gangs at scale: thousands of nodes whose agents prefetch, run small tasks in
//! arrival order and start gang parts at once, with node losses; checked at every
//! step (each check O(what the step touched)), with the core's own audit every
//! `audit_every` steps and at the end:
//!
//! * no node's cores are ever over-used: a task starts only on free cores, and a
//!   gang part finds its cores free on every member the moment it arrives;
//! * a gang's members are distinct live nodes, and it starts whole (every part at the
//!   same instant) and ends whole (one result, after every part ended or a member
//!   was lost);
//! * a gang at the head with an expected start is dispatched by that start plus one
//!   small task's time limit (the race in `docs/hpc-jobs.md`);
//! * every task ends exactly once.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use saker_core::{
    AttemptId, AttemptOutcome, Core, CoreConfig, Dispatch, Event, JobId, JobSpec, NodeId,
    Placement, Resources, Time,
};

/// The shape of one gang simulation.
#[derive(Debug, Clone, Copy)]
pub struct GangWorld {
    pub seed: u64,
    pub nodes: u32,
    pub cores: u32,
    pub prefetch: u32,
    /// Small tasks in all (arrays of up to `max_array`).
    pub tasks: u32,
    pub max_array: u32,
    /// Gangs of 2 to `max_gang` nodes.
    pub gangs: u32,
    pub max_gang: u32,
    /// Nodes lost (and joined again later) during the run.
    pub losses: u32,
    pub audit_every: u64,
}

/// The small tasks' time limit; they run 1..=LIMIT µs.
const LIMIT: u64 = 1_000;
const GANG_LIMIT: u64 = 5_000;

struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }
}

#[derive(Default)]
struct Agent {
    used: u32,
    /// Queued small tasks: (attempt, cores, duration).
    queue: VecDeque<(AttemptId, u32, u64)>,
    running: BTreeSet<AttemptId>,
}

/// What the world ends with.
#[derive(Debug, Default)]
pub struct GangSummary {
    pub finished: u64,
    pub gangs_started: u64,
    pub returned: u64,
    pub reservations: u64,
}

pub fn run(world: GangWorld) -> GangSummary {
    let mut rng = Rng(world.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut core = Core::new(CoreConfig {
        max_bundle: 256,
        ..CoreConfig::default()
    });
    let mut agents: HashMap<u32, Agent> = HashMap::new();
    let mut live: BTreeSet<u32> = BTreeSet::new();
    for node in 0..world.nodes {
        core.handle_node_joined(NodeId(node), Resources::cores(world.cores), Time::ZERO)
            .unwrap();
        core.handle_credit(
            NodeId(node),
            Resources::cores(world.cores + world.prefetch),
            Time::ZERO,
        )
        .unwrap();
        agents.insert(node, Agent::default());
        live.insert(node);
    }
    let mut cores_of: HashMap<JobId, u32> = HashMap::new();
    let mut total = 0u64;
    let mut left = world.tasks;
    let mut gangs_left = world.gangs;
    let per_gang = (world.tasks / world.gangs.max(1)).max(1);
    let mut since_gang = 0;
    while left > 0 || gangs_left > 0 {
        if left > 0 {
            let count = (1 + rng.below(u64::from(world.max_array)) as u32).min(left);
            let cores = 1 + rng.below(2) as u32;
            let spec = JobSpec::array(count)
                .with_cores(cores)
                .with_time_limit_micros(LIMIT);
            let job = core.handle_submit(spec, Time::ZERO).unwrap();
            cores_of.insert(job.job, cores);
            total += u64::from(count);
            left -= count;
            since_gang += count;
        }
        if gangs_left > 0 && (since_gang >= per_gang || left == 0) {
            since_gang = 0;
            let nodes = 2 + rng.below(u64::from(world.max_gang - 1)) as u32;
            let cores = 1 + rng.below(u64::from(world.cores)) as u32;
            let spec = JobSpec::single()
                .with_cores(cores)
                .with_time_limit_micros(GANG_LIMIT)
                .with_max_replays(100)
                .with_placement(Placement::Gang { nodes });
            let job = core.handle_submit(spec, Time::ZERO).unwrap();
            cores_of.insert(job.job, cores);
            total += 1;
            gangs_left -= 1;
        }
    }

    // (end time, what ends): a small task on a node, or a gang part.
    let mut ends: BinaryHeap<Reverse<(u64, u64, AttemptId, u32)>> = BinaryHeap::new();
    let mut sequence = 0u64;
    // Gang attempt -> (members, parts still running).
    let mut gangs: HashMap<AttemptId, (Vec<u32>, u32)> = HashMap::new();
    // Gang job -> the expected start its reservation first named.
    let mut promised: BTreeMap<JobId, Time> = BTreeMap::new();
    let mut summary = GangSummary::default();
    let mut steps = 0u64;
    let loss_every = (total / u64::from(world.losses.max(1)).max(1)).max(1);
    let mut now = 0u64;
    let mut lost_nodes: Vec<u32> = Vec::new();
    // Cores each live attempt (or gang part) holds on its node.
    let mut attempt_cores: HashMap<AttemptId, u32> = HashMap::new();
    // Nodes whose cores a stopped gang part freed, to start their queues.
    let mut freed: Vec<u32> = Vec::new();

    // Applies the core's outputs: events, then dispatches, then events again.
    macro_rules! drain {
        () => {{
            loop {
                let mut progressed = false;
                while let Some(event) = core.poll_event() {
                    progressed = true;
                    match event {
                        Event::TaskFinished { .. } => summary.finished += 1,
                        Event::ReturnUnstarted { node, attempt } => {
                            let agent = agents.get_mut(&node.0).unwrap();
                            if let Some(at) = agent.queue.iter().position(|q| q.0 == attempt) {
                                let (_, cores, _) = agent.queue.remove(at).unwrap();
                                core.handle_result(attempt, AttemptOutcome::Cancelled, Time(now));
                                core.handle_credit(node, Resources::cores(cores), Time(now))
                                    .unwrap();
                                summary.returned += 1;
                            }
                        }
                        Event::CancelAttempt { node, attempt } => {
                            // A surviving member of a gang whose member was lost: its
                            // part stops, and its queue may start on the freed cores.
                            let agent = agents.get_mut(&node.0).unwrap();
                            if agent.running.remove(&attempt) {
                                let cores = attempt_cores[&attempt];
                                agent.used -= cores;
                                if let Some((_, parts)) = gangs.get_mut(&attempt) {
                                    *parts -= 1;
                                }
                                core.handle_credit(node, Resources::cores(cores), Time(now))
                                    .unwrap();
                                freed.push(node.0);
                            }
                        }
                        Event::JobFinished { .. } => {}
                        Event::DependencyFailed { .. } => {
                            panic!("gang worlds have no dependencies")
                        }
                    }
                }
                if let Some(held) = core.reservation()
                    && let Some(start) = held.start
                {
                    // The latest: a lost node makes the reservation again.
                    if promised.insert(held.job, start) != Some(start) {
                        summary.reservations += 1;
                    }
                }
                while let Some(dispatch) = core.poll_dispatch() {
                    progressed = true;
                    deliver(
                        &mut core,
                        &mut agents,
                        &mut ends,
                        &mut sequence,
                        &mut gangs,
                        &mut promised,
                        &cores_of,
                        &mut attempt_cores,
                        &live,
                        &mut rng,
                        &mut summary,
                        dispatch,
                        now,
                    );
                }
                for node in std::mem::take(&mut freed) {
                    progressed = true;
                    start_local(&mut core, &mut agents, &mut ends, &mut sequence, node, now);
                }
                if !progressed {
                    break;
                }
            }
        }};
    }

    drain!();
    while let Some(Reverse((end, _, attempt, node))) = ends.pop() {
        now = end;
        steps += 1;
        if !live.contains(&node) {
            continue; // ended with its lost node
        }
        let agent = agents.get_mut(&node).unwrap();
        if !agent.running.remove(&attempt) {
            continue; // stopped earlier (its gang lost a member)
        }
        let cores = attempt_cores[&attempt];
        agent.used -= cores;
        let done = match gangs.get_mut(&attempt) {
            Some((_, parts)) => {
                *parts -= 1;
                *parts == 0
            }
            None => true,
        };
        if done {
            gangs.remove(&attempt);
            attempt_cores.remove(&attempt);
            core.handle_result(attempt, AttemptOutcome::Succeeded, Time(now));
        }
        core.handle_credit(NodeId(node), Resources::cores(cores), Time(now))
            .unwrap();
        start_local(&mut core, &mut agents, &mut ends, &mut sequence, node, now);
        drain!();
        // Now and then a node is lost, and another comes back.
        if steps.is_multiple_of(loss_every) && lost_nodes.len() < world.losses as usize {
            let victim = *live
                .iter()
                .nth(rng.below(live.len() as u64) as usize)
                .unwrap();
            live.remove(&victim);
            lost_nodes.push(victim);
            let agent = agents.insert(victim, Agent::default()).unwrap();
            for attempt in agent.running {
                if let Some((members, parts)) = gangs.get_mut(&attempt) {
                    assert!(members.contains(&victim));
                    *parts = parts.saturating_sub(1);
                }
            }
            core.handle_node_lost(NodeId(victim), Time(now)).unwrap();
            drain!();
            gangs.retain(|attempt, _| core.gang_members(*attempt).is_some());
            if let Some(back) = lost_nodes.first().copied().filter(|_| lost_nodes.len() > 1) {
                lost_nodes.remove(0);
                live.insert(back);
                core.handle_node_joined(NodeId(back), Resources::cores(world.cores), Time(now))
                    .unwrap();
                core.handle_credit(
                    NodeId(back),
                    Resources::cores(world.cores + world.prefetch),
                    Time(now),
                )
                .unwrap();
                drain!();
            }
        }
        if steps.is_multiple_of(world.audit_every) {
            core.check_consistency().expect("the core's books agree");
        }
    }
    core.check_consistency().expect("the core's books agree");
    assert!(core.is_quiescent(), "every task ended: {:?}", core.counts());
    assert_eq!(summary.finished, total, "every task ended exactly once");
    summary
}

#[allow(clippy::too_many_arguments)]
fn deliver(
    core: &mut Core,
    agents: &mut HashMap<u32, Agent>,
    ends: &mut BinaryHeap<Reverse<(u64, u64, AttemptId, u32)>>,
    sequence: &mut u64,
    gangs: &mut HashMap<AttemptId, (Vec<u32>, u32)>,
    promised: &mut BTreeMap<JobId, Time>,
    cores_of: &HashMap<JobId, u32>,
    attempt_cores: &mut HashMap<AttemptId, u32>,
    live: &BTreeSet<u32>,
    rng: &mut Rng,
    summary: &mut GangSummary,
    dispatch: Dispatch,
    now: u64,
) {
    if dispatch.members.is_empty() {
        for assignment in &dispatch.assignments {
            let cores = cores_of[&assignment.job];
            let duration = 1 + rng.below(LIMIT);
            let agent = agents.get_mut(&dispatch.node.0).unwrap();
            agent.queue.push_back((assignment.attempt, cores, duration));
            attempt_cores.insert(assignment.attempt, cores);
        }
        start_local(core, agents, ends, sequence, dispatch.node.0, now);
        return;
    }
    let assignment = dispatch.assignments[0];
    let cores = cores_of[&assignment.job];
    // A promise holds for this start; a replay (a member lost later) needs a new one.
    if let Some(start) = promised.remove(&assignment.job) {
        assert!(
            now <= start.as_micros() + LIMIT,
            "gang {} started at {now}, promised by {start}",
            assignment.job
        );
    }
    let distinct: BTreeSet<NodeId> = dispatch.members.iter().copied().collect();
    assert_eq!(distinct.len(), dispatch.members.len(), "distinct members");
    let duration = 1 + rng.below(GANG_LIMIT);
    for member in &dispatch.members {
        assert!(live.contains(&member.0), "member {member} is live");
        let agent = agents.get_mut(&member.0).unwrap();
        assert!(
            agent.used + cores <= core_capacity(core, *member),
            "gang part on node {member} finds its cores busy"
        );
        agent.used += cores;
        agent.running.insert(assignment.attempt);
        *sequence += 1;
        ends.push(Reverse((
            now + duration,
            *sequence,
            assignment.attempt,
            member.0,
        )));
    }
    attempt_cores.insert(assignment.attempt, cores);
    let members: Vec<u32> = dispatch.members.iter().map(|n| n.0).collect();
    gangs.insert(assignment.attempt, (members.clone(), members.len() as u32));
    summary.gangs_started += 1;
    core.handle_started(assignment.attempt, Time(now)).unwrap();
}

fn core_capacity(core: &Core, node: NodeId) -> u32 {
    core.node_credit(node)
        .map_or(0, |(capacity, _)| capacity.core_count())
}

fn start_local(
    core: &mut Core,
    agents: &mut HashMap<u32, Agent>,
    ends: &mut BinaryHeap<Reverse<(u64, u64, AttemptId, u32)>>,
    sequence: &mut u64,
    node: u32,
    now: u64,
) {
    let capacity = core_capacity(core, NodeId(node));
    let agent = agents.get_mut(&node).unwrap();
    while let Some(&(attempt, cores, duration)) = agent.queue.front() {
        if agent.used + cores > capacity {
            break;
        }
        agent.queue.pop_front();
        agent.used += cores;
        agent.running.insert(attempt);
        *sequence += 1;
        ends.push(Reverse((now + duration, *sequence, attempt, node)));
        core.handle_started(attempt, Time(now)).unwrap();
    }
}
