//! `saker-perf`: end-to-end benchmarks of the `saker` binary, each printed beside a
//! baseline measured in the same run on the same machine.
//!
//! What it owns: starting `saker run` and `saker pilot` processes, driving them
//! through the Rust client, the raw process-spawning baselines, and the one table
//! (or JSON document) that reports both. What it must never do: leave a process or a
//! directory behind (every child runs in its own process group, owned by a guard that
//! kills the group on drop; every pilot directory is a temporary one), or report a
//! figure without the baseline it is to be judged against. A Slurm batch job is not a
//! child of this process: its guard cancels it instead, and it is submitted with a
//! short time limit.
//!
//! Where to start reading: [`bench::run_selected`] runs the rows; each module under
//! [`bench`] is one row of the table; [`raw`] holds the baselines, [`process`] the
//! child-process guards and [`pilot`] a long-lived pilot with a connected client;
//! [`slurm`] drives a real Slurm cluster for the Slurm rows (skipped without one) and
//! [`span`] reads a pilot's results back to measure rates from the tasks' own times.
//!
//! Design choice: every figure is paired with a baseline taken in the same run,
//! immediately before it, rather than with a constant written in a file. The
//! machine this runs on (a two-core CI runner, a laptop, a compute node) changes the
//! absolute numbers by factors; what Saker promises is a ratio to the floor set by
//! the operating system — one `fork`/`exec`/`wait` per command task — and only a
//! baseline measured under the same load and the same kernel makes that ratio
//! meaningful. The raw baselines use `std::process::Command`, which on Linux/glibc
//! spawns through `posix_spawn` (clone with `CLONE_VFORK`), the cheapest way a
//! runtime can start a process.

pub mod bench;
pub mod heap;
pub mod links;
pub mod options;
pub mod pilot;
pub mod process;
pub mod raw;
pub mod relay;
pub mod report;
pub mod slurm;
pub mod span;
