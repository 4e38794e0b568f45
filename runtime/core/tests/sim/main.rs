//! Deterministic simulation of a pilot: one core, thousands of agents, latency,
//! failures, node crashes and cancellations on a virtual clock, checked after every
//! step against an independent ledger (`ledger.rs`).
//!
//! Per-step checks are O(1) (counters, the credit of the node just served, the work an
//! agent holds); a full O(tasks) sweep of every task against the core, plus the core's
//! own consistency check, runs every `sweep_every` steps and at the end. That keeps the
//! 10,000-node, 1,000,000-task run within seconds while still catching a lost or
//! doubly accepted task within a few thousand steps of the fault.
//!
//! The soak test runs many seeds of a world with every fault at once (crashes,
//! partitions, rejoins, cancellations, deadlines, drains, speculative copies, mixed
//! resources). A seed that ever fails, there or anywhere else, goes into
//! [`REGRESSION_SEEDS`] once fixed, so it runs on every test run from then on;
//! `search_for_failing_seeds` looks for such seeds on demand.

mod config;
mod gangs;
mod ledger;
mod restart;
mod world;

use saker_core::{ResourceKind, Resources, Speculation};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use config::{DeadlinePlan, ResourceMix, SimConfig, Summary};
use world::World;

/// Soak seeds ([`soak`]) that run on every test run, each with a line on why. A seed
/// that fails goes in once fixed, with a line on the bug it found.
///
/// None has failed yet: history records no failing seed, and when resources became
/// vectors a search found none over soak seeds 10,000..14,000 (one in three with
/// mixed resources) nor over seeds 20,000..23,000 with mixed resources in every
/// world. The seeds below are kept instead because, among those searched, they drive
/// the multi-resource paths hardest (copies of tasks that need GPUs, memory or a
/// licence; dispatches bounded by a kind other than cores), one per deadline plan;
/// the test checks they still do. Their figures are from when they were chosen.
const REGRESSION_SEEDS: &[u64] = &[
    12_780, // deadline mid-run: 23 copies of tasks needing more than cores
    10_977, // deadline lifted later: 37 copies of GPU, memory or licence tasks
    11_466, // drain mid-run: 26 such copies before the drain
    12_843, // no deadline: the most such copies, 39
    13_821, // deadline lifted: the most dispatches bounded by another kind, 1,749
];

/// Seeds the soak test runs (from 1,000 on).
const SOAK_SEEDS: u64 = 480;

fn small(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        nodes: 24,
        cores_per_node: 8,
        prefetch: 4,
        tasks: 3_000,
        max_array: 200,
        single_fraction: 0.3,
        core_choices: vec![1, 1, 1, 2, 3, 8],
        duration_micros: (200, 5_000),
        latency_micros: (10, 400),
        submit_window_micros: 20_000,
        fail_probability: 0.05,
        lost_probability: 0.02,
        max_retries: 2,
        crashes: 12,
        partitions: 6,
        detect_delay_micros: 1_000,
        rejoin_delay_micros: 3_000,
        cancels: 4,
        max_bundle: 16,
        sweep_every: 97,
        time_limits: Vec::new(),
        deadline: None,
        speculation: Some(Speculation::default()),
        speculative_fraction: 0.0,
        pinned_fraction: 0.0,
        preferring_fraction: 0.0,
        dependency_fraction: 0.0,
        classes: 1,
        slow_fraction: 0.0,
        slow_factor: 1,
        mix: None,
        updates: 0,
    }
}

/// Four node shapes, one with wider cores, and tasks that ask for GPUs, memory and a
/// licence (custom kind 0) besides their cores. Every task fits the first shape (node
/// 0 has it); the others each lack something some tasks need.
fn resource_mix() -> ResourceMix {
    let licence = ResourceKind::custom(0).expect("custom kind 0 exists");
    let (gpus, memory) = (ResourceKind::GPUS, ResourceKind::MEMORY_MIB);
    let none = Resources::ZERO;
    ResourceMix {
        node_shapes: vec![
            Resources::cores(8)
                .with(gpus, 4)
                .with(memory, 65_536)
                .with(licence, 2),
            Resources::cores(8).with(memory, 32_768),
            Resources::cores(16).with(gpus, 2).with(memory, 16_384),
            Resources::cores(4).with(memory, 8_192),
        ],
        task_extras: vec![
            none,
            none,
            none,
            none.with(gpus, 1),
            none.with(gpus, 2),
            none.with(gpus, 4),
            none.with(memory, 4_096),
            none.with(memory, 20_000),
            none.with(gpus, 1).with(memory, 8_192),
            none.with(licence, 1),
            none.with(memory, 40_000),
        ],
    }
}

/// `small`, on nodes of four shapes with tasks that need more than cores.
fn mixed(seed: u64) -> SimConfig {
    SimConfig {
        mix: Some(resource_mix()),
        ..small(seed)
    }
}

/// `small`, with time limits per job (some longer than what is left of the
/// allocation when its end becomes known) and a deadline learned mid-run.
fn with_deadline(seed: u64, plan: DeadlinePlan) -> SimConfig {
    limited_by(small(seed), plan)
}

/// `config` with time limits per job and the deadline `plan`.
fn limited_by(config: SimConfig, plan: DeadlinePlan) -> SimConfig {
    SimConfig {
        time_limits: vec![None, Some(5_000), Some(2_000), Some(20_000), Some(50_000)],
        deadline: Some(plan),
        ..config
    }
}

const MID_RUN: DeadlinePlan = DeadlinePlan {
    set_at: Some(25_000),
    deadline: 70_000,
    cleared_at: None,
    drain_at: None,
};

/// `small`, with speculation: most jobs speculative, over three estimate classes of
/// different durations, and a heavy tail (3 % of attempts run 20 times longer).
fn speculative(seed: u64) -> SimConfig {
    SimConfig {
        speculative_fraction: 0.7,
        classes: 3,
        slow_fraction: 0.03,
        slow_factor: 20,
        ..small(seed)
    }
}

/// Everything at once, varied by seed: speculation (its policy too) and its heavy
/// tail, more crashes, partitions (with rejoins) and cancellations, cluster size,
/// prefetch and bundle size, one seed in three with mixed resources
/// ([`resource_mix`]), and one seed in four each with a deadline mid-run, a deadline
/// lifted later, or a drain.
fn soak(seed: u64) -> SimConfig {
    let vary = |modulus: u64| (seed / 4 % modulus) as u32;
    let base = SimConfig {
        nodes: 8 + vary(25),
        prefetch: vary(5),
        max_bundle: [1, 4, 16][vary(3) as usize],
        tasks: 2_000,
        crashes: 24,
        partitions: 16,
        cancels: 6,
        speculation: Some(Speculation {
            factor_percent: 100 + 25 * vary(5),
            min_samples: 1 + vary(7),
        }),
        mix: seed.is_multiple_of(3).then(resource_mix),
        updates: 12,
        ..speculative(seed)
    };
    let plan = match seed % 4 {
        0 => MID_RUN,
        1 => DeadlinePlan {
            cleared_at: Some(90_000),
            ..MID_RUN
        },
        2 => DeadlinePlan {
            drain_at: Some(40_000),
            ..MID_RUN
        },
        _ => return base,
    };
    limited_by(base, plan)
}

/// Runs one world; on failure names the seed to keep in [`REGRESSION_SEEDS`].
fn run_seed(config: SimConfig) -> Summary {
    let seed = config.seed;
    match catch_unwind(AssertUnwindSafe(|| World::new(config).run())) {
        Ok(summary) => summary,
        Err(panic) => {
            eprintln!("seed {seed} failed: fix it, then add it to REGRESSION_SEEDS");
            resume_unwind(panic)
        }
    }
}

#[test]
fn small_runs_with_node_losses_keep_every_invariant() {
    for seed in 1..=12 {
        let summary = World::new(small(seed)).run();
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
        assert!(summary.sweeps > 10, "sweeps ran: {summary:?}");
    }
}

/// Jobs pinned to one node among free ones, with crashes, partitions and rejoins: the
/// ledger checks that every dispatch of pinned work goes to its node, and every task
/// still ends once (a pinned task waits out its node's absence).
#[test]
fn pinned_work_among_node_losses_keeps_every_invariant() {
    for seed in 1..=12 {
        let config = SimConfig {
            pinned_fraction: 0.3,
            ..small(seed)
        };
        let summary = World::new(config).run();
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
    }
}

/// Jobs preferring nodes (data-aware placement with a 2 ms wait) among free ones,
/// with crashes, partitions, rejoins, cancels and dependencies: every task still ends
/// once, no node is sent more than its credit, and the core's audit (which checks the
/// preferences' books) holds after every step.
#[test]
fn preferring_work_among_node_losses_keeps_every_invariant() {
    let mut preferring = 0;
    for seed in 1..=12 {
        let config = SimConfig {
            preferring_fraction: 0.5,
            dependency_fraction: 0.3,
            ..small(seed)
        };
        let summary = World::new(config).run();
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
        preferring += summary.preferring_jobs;
    }
    assert!(preferring > 100, "{preferring} jobs preferred nodes");
}

/// Random DAGs among crashes, partitions, cancels and failures: the ledger checks at
/// every dispatch that every job the task's job waits for has ended (with every task
/// succeeded, for an after-success dependency), that a job cancelled for a failed
/// dependency names one that did fail, and that every task still ends once.
#[test]
fn dependency_dags_among_node_losses_keep_every_invariant() {
    let mut waited = 0;
    for seed in 1..=12 {
        let config = SimConfig {
            dependency_fraction: 0.5,
            ..small(seed)
        };
        let summary = World::new(config).run();
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
        waited += summary.dependent_jobs;
    }
    assert!(waited > 100, "{waited} jobs had dependencies");
}

/// Clients update jobs at random times (a new not-before time ahead, past or none; a
/// new time limit) among dependencies, failures, node losses and a deadline learned
/// mid-run: the ledger checks at every dispatch that no job starts before its new time
/// nor past the deadline by its new limit, that only unstarted attempts are asked back
/// and that every task still ends once.
#[test]
fn updates_among_node_losses_keep_every_invariant() {
    let (mut updates, mut asked_back) = (0, 0);
    for seed in 1..=12 {
        let config = SimConfig {
            dependency_fraction: 0.3,
            updates: 150,
            ..with_deadline(seed, MID_RUN)
        };
        let summary = run_seed(config);
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled + summary.unstarted,
            summary.tasks
        );
        updates += summary.updates;
        asked_back += summary.asked_back;
    }
    assert!(
        updates > 500 && asked_back > 20,
        "{updates} updates, {asked_back} asked back"
    );
}

/// Tasks that need GPUs, memory or a licence run only where they fit; the ledger
/// checks at every dispatch that no node is sent more than its credit in any kind nor
/// a task its capacity does not fit, and the agents that they never hold more than
/// they asked for nor run more than their capacity, in any kind.
#[test]
fn mixed_resources_keep_every_invariant() {
    let mut non_core = 0;
    for seed in 50..=57 {
        let summary = run_seed(SimConfig {
            crashes: 20,
            partitions: 10,
            ..mixed(seed)
        });
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
        non_core += summary.non_core_attempts;
    }
    assert!(
        non_core > 1_000,
        "{non_core} attempts needed more than cores"
    );
}

#[test]
fn crashes_and_failures_exercise_every_path() {
    let mut totals = (0, 0, 0, 0, 0);
    for seed in 100..108 {
        let summary = World::new(SimConfig {
            crashes: 30,
            partitions: 20,
            cancels: 8,
            ..small(seed)
        })
        .run();
        totals.0 += summary.retries;
        totals.1 += summary.replays;
        totals.2 += summary.duplicates;
        totals.3 += summary.cancelled;
        totals.4 += summary.failed;
    }
    let (retries, replays, duplicates, cancelled, failed) = totals;
    assert!(
        retries > 0 && replays > 0 && duplicates > 0 && cancelled > 0 && failed > 0,
        "retries={retries} replays={replays} duplicates={duplicates} cancelled={cancelled} failed={failed}"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let first: Summary = World::new(small(7)).run();
    let second = World::new(small(7)).run();
    assert_eq!(first, second);
    let other = World::new(small(8)).run();
    assert_ne!(first.trace, other.trace, "different seeds, different runs");
}

/// The ledger checks at every dispatch that the attempt can finish by the deadline,
/// and at the end that unstarted + terminal + in flight = all tasks, with everything
/// unstarted held by the deadline.
#[test]
fn a_deadline_mid_run_starts_only_attempts_that_finish_by_it() {
    for seed in 1..=8 {
        let summary = World::new(with_deadline(seed, MID_RUN)).run();
        assert!(
            summary.succeeded > 0 && summary.unstarted > 0,
            "{summary:?}"
        );
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled + summary.unstarted,
            summary.tasks
        );
    }
}

#[test]
fn lifting_the_deadline_lets_every_task_finish() {
    for seed in 20..=23 {
        let summary = World::new(with_deadline(
            seed,
            DeadlinePlan {
                cleared_at: Some(90_000),
                ..MID_RUN
            },
        ))
        .run();
        assert_eq!(summary.unstarted, 0, "{summary:?}");
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
    }
}

#[test]
fn draining_mid_run_dispatches_nothing_more() {
    for seed in 30..=33 {
        let summary = World::new(with_deadline(
            seed,
            DeadlinePlan {
                drain_at: Some(40_000),
                ..MID_RUN
            },
        ))
        .run();
        assert!(summary.unstarted > 0, "{summary:?}");
    }
}

/// 10,000 agents x 64 cores, 1,000,000 tasks (arrays and singles, failures, a few
/// crashes and cancellations).
#[test]
fn ten_thousand_nodes_one_million_tasks() {
    let summary = World::new(SimConfig {
        seed: 2024,
        nodes: 10_000,
        cores_per_node: 64,
        prefetch: 16,
        tasks: 1_000_000,
        max_array: 20_000,
        single_fraction: 0.2,
        core_choices: vec![1, 1, 1, 1, 2, 4],
        duration_micros: (5_000, 100_000),
        latency_micros: (20, 500),
        submit_window_micros: 50_000,
        fail_probability: 0.01,
        lost_probability: 0.002,
        max_retries: 2,
        crashes: 20,
        partitions: 20,
        detect_delay_micros: 5_000,
        rejoin_delay_micros: 20_000,
        cancels: 3,
        max_bundle: 1024,
        sweep_every: 1_500_000,
        time_limits: Vec::new(),
        deadline: None,
        speculation: Some(Speculation::default()),
        speculative_fraction: 0.0,
        pinned_fraction: 0.0,
        preferring_fraction: 0.0,
        dependency_fraction: 0.0,
        classes: 1,
        slow_fraction: 0.0,
        slow_factor: 1,
        mix: None,
        updates: 0,
    })
    .run();
    assert_eq!(summary.tasks, 1_000_000);
    assert!(summary.succeeded > 900_000, "{summary:?}");
}

/// Random DAGs (chains, fan-ins, fan-outs) over 10,000 nodes of mixed shapes (GPUs,
/// memory, a licence), with crashes, partitions, failures and cancels: the ledger
/// checks every dispatch against every job its job waits for, and every node's
/// credit in every kind.
#[test]
fn ten_thousand_nodes_with_dags_and_resources() {
    let summary = World::new(SimConfig {
        nodes: 10_000,
        tasks: 200_000,
        max_array: 50,
        single_fraction: 0.6,
        dependency_fraction: 0.4,
        crashes: 40,
        partitions: 20,
        sweep_every: 200_000,
        ..mixed(77)
    })
    .run();
    assert_eq!(
        summary.succeeded + summary.failed + summary.cancelled,
        summary.tasks
    );
    assert!(summary.dependent_jobs > 1_000, "{summary:?}");
}

/// Gangs among small tasks at 10,000 nodes, with node losses: see `gangs.rs` for
/// what is checked at every step.
#[test]
fn ten_thousand_nodes_with_gangs_among_small_tasks() {
    let summary = gangs::run(gangs::GangWorld {
        seed: 7,
        nodes: 10_000,
        cores: 8,
        prefetch: 4,
        tasks: 200_000,
        max_array: 500,
        gangs: 200,
        max_gang: 64,
        losses: 20,
        audit_every: 100_000,
    });
    assert!(summary.gangs_started >= 200, "{summary:?}");
    assert!(summary.reservations > 0, "some gang waited: {summary:?}");
}

/// The same on 64 nodes, many seeds, every step audited by the core too.
#[test]
fn gangs_among_small_tasks_on_small_clusters() {
    for seed in 1..=30 {
        let summary = gangs::run(gangs::GangWorld {
            seed,
            nodes: 64,
            cores: 4,
            prefetch: 4,
            tasks: 3_000,
            max_array: 40,
            gangs: 30,
            max_gang: 16,
            losses: 3,
            audit_every: 1,
        });
        assert!(summary.gangs_started >= 30, "seed {seed}: {summary:?}");
    }
}

/// Roots replaced mid-run, three times a run (see `restart.rs`): each new term adopts
/// what the agents hold, no task runs twice and every task ends once, with crashes
/// and retries around the restarts.
#[test]
fn restarted_roots_adopt_what_agents_hold() {
    let (mut adopted, mut steps) = (0, 0);
    for seed in 1..=24 {
        let summary = restart::run(restart::RestartWorld {
            seed,
            nodes: 12,
            cores: 4,
            prefetch: 2,
            tasks: 1_500,
            max_array: 60,
            fail_percent: 5,
            restarts: 3,
            crashes: 4,
            audit_every: 50,
        });
        assert_eq!(summary.restarts, 3);
        assert!(summary.succeeded > 1_300, "seed {seed}: {summary:?}");
        adopted += summary.adopted;
        steps += summary.steps;
    }
    println!("restarts: {adopted} attempts adopted in {steps} steps");
    assert!(adopted > 500, "{adopted} attempts adopted");
}

/// Copies start for stragglers (the heavy tail) and some finish first; the ledger
/// checks every step that no task has more than two live attempts, that copies run on
/// distinct nodes, and that only one result per task is ever accepted.
#[test]
fn stragglers_get_copies_and_some_copies_win() {
    let (mut speculated, mut won) = (0, 0);
    for seed in 40..=47 {
        let summary = run_seed(speculative(seed));
        assert_eq!(
            summary.succeeded + summary.failed + summary.cancelled,
            summary.tasks
        );
        speculated += summary.speculated;
        won += summary.copies_won;
    }
    assert!(
        speculated > 0 && won > 0,
        "speculated={speculated} won={won}"
    );
}

/// Many seeds with every fault at once, a few million steps in all.
#[test]
fn soak_many_seeds_with_crashes_partitions_and_rejoins() {
    let (mut steps, mut speculated, mut won, mut continued) = (0, 0, 0, 0);
    for seed in 1_000..1_000 + SOAK_SEEDS {
        let summary = run_seed(soak(seed));
        steps += summary.steps;
        speculated += summary.speculated;
        won += summary.copies_won;
        continued += summary.continued;
    }
    println!(
        "soak: {SOAK_SEEDS} seeds, {steps} steps, {speculated} copies, {won} won, \
         {continued} attempts ended while their copy went on"
    );
    assert!(steps > 2_500_000, "{steps} steps");
    assert!(speculated > 0 && won > 0 && continued > 0);
}

/// A search for failing seeds, not run by default: runs the soak world over the seeds
/// `SAKER_SIM_SEARCH=first..end` names (say `10000..13000`), goes on past failures and
/// fails at the end naming every failing seed. Fix each, then keep it in
/// [`REGRESSION_SEEDS`].
#[test]
#[ignore = "minutes long; run on demand with SAKER_SIM_SEARCH=first..end"]
fn search_for_failing_seeds() {
    let range = std::env::var("SAKER_SIM_SEARCH").unwrap_or_else(|_| "10000..10100".into());
    let (first, end) = range
        .split_once("..")
        .and_then(|(first, end)| Some((first.parse::<u64>().ok()?, end.parse::<u64>().ok()?)))
        .expect("SAKER_SIM_SEARCH is first..end");
    let failing: Vec<u64> = (first..end)
        .filter(|&seed| catch_unwind(|| World::new(soak(seed)).run()).is_err())
        .collect();
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

#[test]
fn regression_seeds_still_pass() {
    assert!(!REGRESSION_SEEDS.is_empty(), "nothing to check");
    let mut non_core_copies = 0;
    for &seed in REGRESSION_SEEDS {
        let summary = run_seed(soak(seed));
        non_core_copies += summary.non_core_copies;
        if soak(seed).mix.is_some() {
            assert!(
                summary.non_core_attempts > 0 && summary.bound_by_other_kinds > 0,
                "seed {seed} no longer drives the multi-resource paths: {summary:?}"
            );
        }
    }
    assert!(
        non_core_copies > 0,
        "no copy of a task needing more than cores"
    );
}
