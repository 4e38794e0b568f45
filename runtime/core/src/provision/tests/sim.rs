//! A batch system and a pilot simulated second by second around the provisioner:
//! allocations pend for a while (some for long), run until their time limit, and
//! may fail; tasks run one per core. Every step checks the limits; each run checks
//! that every task ran and that the pilot shrank to nothing once idle.

use super::*;

/// xorshift64: the same run every time.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Allocation {
    id: u64,
    nodes: u32,
    submitted: u64,
    /// When the batch system starts it (seconds).
    starts: u64,
    started: Option<u64>,
    /// It fails (the batch system kills it) at this second after its start.
    fails_after: Option<u64>,
    /// End time of the task on each core, while one runs there.
    cores: Vec<Option<u64>>,
    idle_since: Option<u64>,
}

struct Workload {
    /// (second, tasks, seconds each).
    bursts: Vec<(u64, u64, u64)>,
}

#[derive(Debug, Default)]
struct Outcome {
    completed: u64,
    node_seconds: u64,
    ideal_node_seconds: u64,
    submitted: u64,
    peak_nodes: u32,
    end_second: u64,
}

const CORES: u32 = 4;
const TIME_LIMIT: u64 = 900;
const ROUND: u64 = 5;

fn simulate(policy: Policy, workload: &Workload, seed: u64, failures: bool) -> Outcome {
    let config = ProvisionConfig {
        policy,
        nodes_per_allocation: 1,
        cores_per_node: CORES,
        max_nodes: 3,
        max_pending: 2,
        grow_after_us: 30 * SECOND,
        idle_release_us: 60 * SECOND,
        replace_ahead_us: 120 * SECOND,
    };
    let mut provisioner = Provisioner::new(config);
    let mut random = Random(seed);
    let mut allocations: Vec<Allocation> = Vec::new();
    let mut queue: VecDeque<u64> = VecDeque::new();
    let mut outcome = Outcome::default();
    let total: u64 = workload.bursts.iter().map(|b| b.1).sum();
    let work: u64 = workload.bursts.iter().map(|b| b.1 * b.2).sum();
    outcome.ideal_node_seconds = work.div_ceil(u64::from(CORES));
    let mut next_id = 0;
    let last_burst = workload.bursts.iter().map(|b| b.0).max().unwrap_or(0);
    for second in 0..20_000u64 {
        for &(when, tasks, length) in &workload.bursts {
            if when == second {
                queue.extend(std::iter::repeat_n(length, tasks as usize));
            }
        }
        // The batch system: starts, time limits, failures. A lost allocation's
        // running tasks go back to the queue (replayed).
        allocations.retain_mut(|a| {
            if a.started.is_none() && a.starts <= second {
                a.started = Some(second);
                a.cores = vec![None; (a.nodes * CORES) as usize];
                a.idle_since = Some(second);
            }
            let Some(started) = a.started else {
                return true;
            };
            let ends = second >= started + TIME_LIMIT
                || a.fails_after.is_some_and(|after| second >= started + after);
            if ends {
                for end in a.cores.iter().flatten() {
                    // The part not done runs again elsewhere, whole.
                    queue.push_back(end.saturating_sub(second).max(1));
                }
                return false;
            }
            true
        });
        // Tasks: ends, then starts on free cores.
        for a in allocations.iter_mut().filter(|a| a.started.is_some()) {
            for core in a.cores.iter_mut() {
                if core.is_some_and(|end| end <= second) {
                    *core = None;
                    outcome.completed += 1;
                }
                if core.is_none()
                    && let Some(length) = queue.pop_front()
                {
                    *core = Some(second + length);
                }
            }
            let busy = a.cores.iter().any(Option::is_some);
            a.idle_since = match (busy, a.idle_since) {
                (true, _) => None,
                (false, None) => Some(second),
                (false, since) => since,
            };
        }
        let running_nodes: u32 = allocations
            .iter()
            .filter(|a| a.started.is_some())
            .map(|a| a.nodes)
            .sum();
        outcome.node_seconds += u64::from(running_nodes);
        let held: u32 = allocations.iter().map(|a| a.nodes).sum();
        let pending = allocations.iter().filter(|a| a.started.is_none()).count() as u32;
        assert!(
            held <= config.max_nodes,
            "{policy:?} at {second}: {held} nodes"
        );
        assert!(
            pending <= config.max_pending,
            "{policy:?} at {second}: {pending} pending"
        );
        outcome.peak_nodes = outcome.peak_nodes.max(held);
        if second % ROUND == 0 {
            let backlog = Backlog {
                queued: queue.len() as u64,
                core_seconds: queue.iter().sum::<u64>() as f64,
                widest_gang: 0,
            };
            let views: Vec<AllocationView> = allocations
                .iter()
                .map(|a| AllocationView {
                    id: a.id,
                    nodes: a.nodes,
                    cores_per_node: a.started.map(|_| CORES),
                    submitted: at(a.submitted),
                    state: match a.started {
                        None => AllocationState::Pending,
                        Some(started) => AllocationState::Running {
                            end: Some(at(started + TIME_LIMIT)),
                            idle_since: a.idle_since.map(at),
                        },
                    },
                })
                .collect();
            for decision in provisioner.decide(at(second), &backlog, &views) {
                match decision {
                    Decision::Submit { nodes, .. } => {
                        // Most allocations start within 20 s; one in five pends
                        // for five minutes.
                        let pend = if random.below(5) == 0 {
                            300
                        } else {
                            5 + random.below(15)
                        };
                        let fails_after =
                            (failures && random.below(4) == 0).then(|| 30 + random.below(200));
                        allocations.push(Allocation {
                            id: next_id,
                            nodes,
                            submitted: second,
                            starts: second + pend,
                            started: None,
                            fails_after,
                            cores: Vec::new(),
                            idle_since: None,
                        });
                        next_id += 1;
                        outcome.submitted += 1;
                    }
                    Decision::Cancel { allocation, .. } => {
                        allocations.retain(|a| a.id != allocation || a.started.is_some());
                    }
                    Decision::Release { allocation, .. } => {
                        // Released only when idle: no task is lost.
                        let a = allocations.iter().find(|a| a.id == allocation).unwrap();
                        assert!(a.cores.iter().all(Option::is_none), "released while busy");
                        allocations.retain(|a| a.id != allocation);
                    }
                }
            }
        }
        if second > last_burst && queue.is_empty() && allocations.is_empty() {
            outcome.end_second = second;
            break;
        }
    }
    assert_eq!(outcome.completed, total, "{policy:?}: every task ran");
    assert!(allocations.is_empty(), "{policy:?}: shrank to nothing");
    outcome
}

const POLICIES: [Policy; 4] = [
    Policy::One,
    Policy::Additive,
    Policy::Exponential,
    Policy::All,
];

/// Bursts with quiet gaps longer than the idle time: the pilot grows to the limit for
/// each burst and shrinks to nothing after it, under every policy.
#[test]
fn bursty_work_grows_to_the_limit_and_shrinks_to_nothing() {
    let workload = Workload {
        bursts: vec![(0, 2_000, 1), (600, 600, 3), (1_500, 40, 20)],
    };
    for policy in POLICIES {
        for seed in 1..=5 {
            let outcome = simulate(policy, &workload, seed * 7919, false);
            eprintln!("{policy:?} seed {seed}: {outcome:?}");
            assert_eq!(outcome.peak_nodes, 3, "{policy:?}: {outcome:?}");
            // Idle nodes are released within the idle time plus a round: what they
            // hold beyond the work is bounded.
            assert!(
                outcome.node_seconds < outcome.ideal_node_seconds * 3 + 3 * 3 * 65,
                "{policy:?}: {outcome:?}"
            );
        }
    }
}

/// Allocations that fail mid-run: their tasks are replayed on the others, and the
/// pilot asks for replacements while work remains.
#[test]
fn failed_allocations_are_replaced_and_their_work_done() {
    let workload = Workload {
        bursts: vec![(0, 6_000, 2)],
    };
    for policy in POLICIES {
        for seed in 1..=5 {
            let outcome = simulate(policy, &workload, seed * 104_729, true);
            assert!(outcome.submitted > 3, "{policy:?}: {outcome:?}");
        }
    }
}

/// One long campaign outlives an allocation's time limit: replacements are asked
/// for ahead of the end, so the work does not stop.
#[test]
fn a_campaign_longer_than_an_allocation_goes_on() {
    // 3 nodes × 4 cores need ≈ 2,000 s for this: more than two time limits.
    let workload = Workload {
        bursts: vec![(0, 24_000, 1)],
    };
    for policy in POLICIES {
        let outcome = simulate(policy, &workload, 42, false);
        eprintln!("{policy:?}: {outcome:?}");
        assert!(outcome.submitted >= 4, "{policy:?}: {outcome:?}");
        // Gaps with no node running would show as a makespan far beyond the work's.
        assert!(
            outcome.end_second < 24_000 / 12 + 1_500,
            "{policy:?}: {outcome:?}"
        );
    }
}
