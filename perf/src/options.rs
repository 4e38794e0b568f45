//! Command-line options (clap) and the names of the rows.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "saker-perf",
    about = "Benchmarks of saker, each beside a baseline measured in the same run",
    long_about = None,
)]
pub struct Options {
    /// The saker binary to measure (default: `saker` next to this binary, i.e.
    /// target/release/saker).
    #[arg(long, env = "SAKER_BIN")]
    pub saker: Option<PathBuf>,
    /// Smaller counts for a fast smoke run (CI).
    #[arg(long)]
    pub quick: bool,
    /// Run only this benchmark (repeatable).
    #[arg(long, value_enum)]
    pub only: Vec<Benchmark>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One benchmark; each adds one or more lines to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum Benchmark {
    /// `/bin/true` tasks per second through `saker run --no-sync`.
    Throughput,
    /// As `throughput`, with the journal fsynced.
    ThroughputSync,
    /// Throughput with the journal fsynced against without, runs alternated.
    Durability,
    /// Submit→result latency of single tasks, journal not synced.
    Latency,
    /// As `latency`, with the journal fsynced.
    LatencySync,
    /// Makespan efficiency of 10 ms sleep tasks on 16 slots.
    #[value(name = "efficiency-10ms")]
    Efficiency10ms,
    /// Makespan efficiency of 100 ms sleep tasks on 16 slots.
    #[value(name = "efficiency-100ms")]
    Efficiency100ms,
    /// Root memory per queued task of one million-task array.
    MemoryArray,
    /// Root memory per queued task of a million single-task jobs.
    MemorySingles,
    /// Root memory per finished task, and result lookups by task at 10,000/s.
    History,
    /// `saker report` of a finished pilot: written in, page size, chromium load.
    Report,
    /// From killing an agent to its task running on the other agent.
    Failover,
    /// From starting `saker pilot --resume` on a journal of a million queued tasks
    /// to its client socket answering.
    Resume,
    /// From SIGKILL of the root of a `--standby 1` pilot running 20,000 short tasks on
    /// 8 agents to the standby accepting results: the widest gap between results.
    Takeover,
    /// 64 `sleep` tasks running on 8 agents × 8 slots and 20,000 short ones queued;
    /// the root SIGKILLed halfway and a standby taking over: the makespan beside the
    /// same run without a kill (no task may start twice).
    TakeoverRunning,
    /// The same with no standby and `saker pilot --resume` 5 s after the kill.
    ResumeRunning,
    /// From `sbatch` to all agents connected and to the first task running, on 3
    /// nodes of a Slurm cluster, beside the time Slurm takes to start the allocation.
    SlurmStartup,
    /// `/bin/true` tasks per second on 3 Slurm nodes × 4 slots, beside one node.
    SlurmThroughput,
    /// An elastic pilot with no node: a burst of work to its first task on the
    /// allocation it asks for, beside Slurm's sbatch → RUNNING.
    SlurmElastic,
    /// Node-seconds a bursty workload costs under each elastic policy, beside the
    /// ideal (Falkon's comparison).
    SlurmPolicies,
    /// The Python client: no-op calls per second, round trips, commands, idle worker
    /// memory and a cold pilot's first result, beside ProcessPoolExecutor.
    Python,
    /// Python objects by reference: put/get beside `numpy.copy`, large arguments and
    /// results beside ProcessPoolExecutor, a worker's memory reading a ref.
    Objects,
    /// joblib on the `saker` backend: 10,000 short calls, and a scikit-learn grid
    /// search, beside joblib's own (loky) backend with as many workers.
    Joblib,
    /// No-op `python_app`s through Parsl with SakerExecutor, beside
    /// HighThroughputExecutor and ThreadPoolExecutor.
    Parsl,
    /// Short rule instances through Snakemake's Saker executor plugin on an embedded
    /// pilot, beside Snakemake's local executor on the same cores.
    Snakemake,
    /// A Snakemake workflow as one Slurm job (a pilot across the nodes), beside
    /// snakemake-executor-plugin-slurm submitting one Slurm job per rule instance.
    SnakemakeSlurm,
    /// A map-reduce whose intermediates go by reference (Python, `ref=True`) on a
    /// pilot across three Slurm nodes, beside the same workflow through files in one
    /// shared directory; and the bytes the root passed on meanwhile.
    MapreduceSlurm,
    /// HPC jobs: an MPI job's launch through the agents beside the launcher's own,
    /// and the start delay of a job behind a full load of small tasks.
    Hpc,
    /// MPI ranks started by their agents (`--mpi pmi`) on 3 Slurm nodes: launch
    /// beside an srun step and the relay, and 2-rank jobs per second.
    Mpi,
    /// The Rust API: no-op typed tasks per second (map and submit) and a call's round
    /// trip, beside the same batches over one raw QUIC stream.
    Rust,
    /// DAG shapes (fan-out, fan-in, pipeline) of 10 ms tasks on 16 slots: makespan
    /// efficiency beside the same count of independent tasks.
    Dags,
    /// Scheduled starts: lateness of 1,000 tasks due in the same second, beside 16
    /// threads spawning at the due time.
    Lateness,
    /// The scheduling core alone (no I/O): time and heap per dependency edge of a
    /// fan-in and a random DAG, beside the same jobs without edges.
    DagEdges,
    /// Data-aware placement: writer/reader pairs of data items on 4 agents, makespan
    /// and bytes moved between nodes with locality on, beside locality off.
    Data,
    /// A data item fetched from one agent by another, directly, beside the same bytes
    /// over one raw QUIC stream with the same TLS.
    Fetch,
    /// One item to eight nodes at once over links of their own (each agent's sends
    /// shaped on the loopback; needs root), beside one reader's fetch over the same.
    FetchLinks,
    /// 1-second tasks on 512 one-slot agents in three levels: makespan efficiency,
    /// beside as many threads running them; and memory per agent.
    #[value(name = "agents-512")]
    AgentsTree,
    /// 1,000 agents: start until all registered, and shutdown until all exited.
    #[value(name = "agents-1000")]
    AgentsMany,
    /// Per-task cost of the same agents in trees of one, two and three levels.
    AgentsDepth,
}

impl Benchmark {
    pub const ALL: [Benchmark; 39] = [
        Benchmark::Throughput,
        Benchmark::ThroughputSync,
        Benchmark::Durability,
        Benchmark::Latency,
        Benchmark::LatencySync,
        Benchmark::Efficiency10ms,
        Benchmark::Efficiency100ms,
        Benchmark::MemoryArray,
        Benchmark::MemorySingles,
        Benchmark::History,
        Benchmark::Report,
        Benchmark::Failover,
        Benchmark::Resume,
        Benchmark::Takeover,
        Benchmark::TakeoverRunning,
        Benchmark::ResumeRunning,
        Benchmark::SlurmStartup,
        Benchmark::SlurmThroughput,
        Benchmark::SlurmElastic,
        Benchmark::SlurmPolicies,
        Benchmark::Python,
        Benchmark::Objects,
        Benchmark::Joblib,
        Benchmark::Parsl,
        Benchmark::Snakemake,
        Benchmark::SnakemakeSlurm,
        Benchmark::MapreduceSlurm,
        Benchmark::Hpc,
        Benchmark::Mpi,
        Benchmark::Rust,
        Benchmark::Dags,
        Benchmark::Lateness,
        Benchmark::DagEdges,
        Benchmark::Data,
        Benchmark::Fetch,
        Benchmark::FetchLinks,
        Benchmark::AgentsTree,
        Benchmark::AgentsMany,
        Benchmark::AgentsDepth,
    ];

    /// The name used on the command line and in the JSON output.
    pub fn id(self) -> &'static str {
        match self {
            Benchmark::Throughput => "throughput",
            Benchmark::ThroughputSync => "throughput-sync",
            Benchmark::Durability => "durability",
            Benchmark::Latency => "latency",
            Benchmark::LatencySync => "latency-sync",
            Benchmark::Efficiency10ms => "efficiency-10ms",
            Benchmark::Efficiency100ms => "efficiency-100ms",
            Benchmark::MemoryArray => "memory-array",
            Benchmark::MemorySingles => "memory-singles",
            Benchmark::History => "history",
            Benchmark::Report => "report",
            Benchmark::Failover => "failover",
            Benchmark::Resume => "resume",
            Benchmark::Takeover => "takeover",
            Benchmark::TakeoverRunning => "takeover-running",
            Benchmark::ResumeRunning => "resume-running",
            Benchmark::SlurmStartup => "slurm-startup",
            Benchmark::SlurmThroughput => "slurm-throughput",
            Benchmark::SlurmElastic => "slurm-elastic",
            Benchmark::SlurmPolicies => "slurm-policies",
            Benchmark::Python => "python",
            Benchmark::Objects => "objects",
            Benchmark::Joblib => "joblib",
            Benchmark::Parsl => "parsl",
            Benchmark::Snakemake => "snakemake",
            Benchmark::SnakemakeSlurm => "snakemake-slurm",
            Benchmark::MapreduceSlurm => "mapreduce-slurm",
            Benchmark::Hpc => "hpc",
            Benchmark::Mpi => "mpi",
            Benchmark::Rust => "rust",
            Benchmark::Dags => "dags",
            Benchmark::Lateness => "lateness",
            Benchmark::DagEdges => "dag-edges",
            Benchmark::Data => "data",
            Benchmark::Fetch => "fetch",
            Benchmark::FetchLinks => "fetch-links",
            Benchmark::AgentsTree => "agents-512",
            Benchmark::AgentsMany => "agents-1000",
            Benchmark::AgentsDepth => "agents-depth",
        }
    }

    /// The benchmarks to run for `--only` values (all when none was given), in table
    /// order and without repeats.
    pub fn selection(only: &[Benchmark]) -> Vec<Benchmark> {
        Benchmark::ALL
            .into_iter()
            .filter(|benchmark| only.is_empty() || only.contains(benchmark))
            .collect()
    }
}

/// Sizes of one run: full, or `--quick`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// `/bin/true` tasks in the throughput rows.
    pub throughput_tasks: u64,
    /// Runs of saker and of the raw loop in a throughput row, alternated.
    pub throughput_rounds: u32,
    /// Sequential single tasks in the latency rows.
    pub latency_samples: u64,
    /// Ideal makespan of the efficiency rows, in milliseconds.
    pub efficiency_makespan_ms: u64,
    /// Tasks of the array in the memory row.
    pub memory_array_tasks: u64,
    /// Single-task jobs in the second memory row.
    pub memory_single_tasks: u64,
    /// `saker run`s of each journal mode in the durability row, alternated.
    pub durability_rounds: u32,
    /// Agents killed in the failover row (the median and the worst are reported).
    pub failover_repeats: u32,
    /// Tasks in each journal of the resume row (one array; as many single jobs).
    pub resume_tasks: u64,
    /// `/bin/true` tasks of the takeover row's array (the root is killed once a
    /// quarter of them have results).
    pub takeover_tasks: u64,
    /// Seconds each of the 64 long tasks of the `*-running` rows sleeps.
    pub running_sleep_seconds: u64,
    /// `/bin/true` tasks queued behind them.
    pub running_short_tasks: u64,
    /// Alternated pairs (killed, not killed) of each `*-running` row.
    pub running_rounds: u32,
    /// Allocations started in the Slurm start-up row (the median is reported).
    pub slurm_startup_repeats: u32,
    /// `/bin/true` tasks in the Slurm throughput row.
    pub slurm_throughput_tasks: u64,
    /// Tasks of each DAG shape in the dags rows.
    pub dag_tasks: u64,
    /// Dependency edges of each shape in the dag-edges rows.
    pub dag_edges: u64,
    /// Writer/reader pairs in the data rows.
    pub data_pairs: u64,
    /// MiB of the item in the fetch row.
    pub fetch_mib: u64,
    /// Tasks of each round of the history rows (4 rounds run).
    pub history_tasks: u64,
    /// `/bin/true` tasks of the pilot whose report the report rows write.
    pub report_tasks: u64,
    /// One-slot agents of the `agents-512` tree (fan-out 8).
    pub agents_tree: u32,
    /// Waves of 1-second tasks on that tree: its ideal makespan in seconds.
    pub agents_waves: u64,
    /// Agents of the `agents-1000` start/shutdown row.
    pub agents_many: u32,
    /// Alternated runs of each agent-scale row (medians).
    pub agents_rounds: u32,
    /// Short tasks per tree in the `agents-depth` row.
    pub agents_depth_tasks: u64,
}

impl Sizes {
    pub fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                throughput_tasks: 2_000,
                throughput_rounds: 1,
                latency_samples: 200,
                efficiency_makespan_ms: 500,
                memory_array_tasks: 1_000_000,
                memory_single_tasks: 1_000_000,
                durability_rounds: 2,
                failover_repeats: 1,
                resume_tasks: 100_000,
                takeover_tasks: 4_000,
                running_sleep_seconds: 8,
                running_short_tasks: 2_000,
                running_rounds: 1,
                slurm_startup_repeats: 1,
                slurm_throughput_tasks: 3_000,
                dag_tasks: 1_600,
                dag_edges: 20_000,
                data_pairs: 64,
                fetch_mib: 64,
                history_tasks: 20_000,
                report_tasks: 20_000,
                agents_tree: 128,
                agents_waves: 3,
                agents_many: 128,
                agents_rounds: 1,
                agents_depth_tasks: 1_000,
            }
        } else {
            Sizes {
                throughput_tasks: 10_000,
                throughput_rounds: 5,
                latency_samples: 2_000,
                efficiency_makespan_ms: 2_000,
                memory_array_tasks: 1_000_000,
                memory_single_tasks: 1_000_000,
                durability_rounds: 2,
                failover_repeats: 3,
                resume_tasks: 1_000_000,
                takeover_tasks: 20_000,
                running_sleep_seconds: 60,
                running_short_tasks: 20_000,
                running_rounds: 3,
                slurm_startup_repeats: 3,
                slurm_throughput_tasks: 20_000,
                dag_tasks: 100_000,
                dag_edges: 1_000_000,
                data_pairs: 400,
                fetch_mib: 256,
                history_tasks: 250_000,
                report_tasks: 1_000_000,
                agents_tree: 512,
                agents_waves: 15,
                agents_many: 1_000,
                agents_rounds: 3,
                agents_depth_tasks: 4_000,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_keeps_table_order_and_drops_repeats() {
        assert_eq!(Benchmark::selection(&[]), Benchmark::ALL.to_vec());
        assert_eq!(
            Benchmark::selection(&[
                Benchmark::MemoryArray,
                Benchmark::Latency,
                Benchmark::MemoryArray
            ]),
            vec![Benchmark::Latency, Benchmark::MemoryArray]
        );
    }

    #[test]
    fn ids_are_the_command_line_names() {
        for benchmark in Benchmark::ALL {
            let parsed = Benchmark::from_str(benchmark.id(), false).expect("a listed id parses");
            assert_eq!(parsed, benchmark);
        }
    }

    #[test]
    fn quick_run_is_smaller() {
        let (quick, full) = (Sizes::new(true), Sizes::new(false));
        assert!(quick.throughput_tasks < full.throughput_tasks);
        assert!(quick.latency_samples < full.latency_samples);
        assert!(quick.efficiency_makespan_ms < full.efficiency_makespan_ms);
        assert!(quick.failover_repeats < full.failover_repeats);
        assert!(quick.resume_tasks < full.resume_tasks);
        assert!(quick.takeover_tasks < full.takeover_tasks);
        assert!(quick.slurm_startup_repeats < full.slurm_startup_repeats);
        assert!(quick.slurm_throughput_tasks < full.slurm_throughput_tasks);
    }
}
