//! What a node offers beyond cores, and how an agent holds it to each task: the CPUs
//! a task is pinned to, the GPUs it sees, the memory it may use.
//!
//! - [`discover`](mod@discover): the node's cores' CPUs, GPUs, memory and named resources, from what
//!   the agent was told (flags) and what the machine and Slurm say.
//! - [`devices`]: which CPUs and GPUs are free, and the [`Binding`] each attempt holds.
//! - [`cgroup`]: memory limits in a cgroup per slot, where the agent may make them.
//! - [`limits`]: what a slot's thread holds its attempts to (pinned CPUs, memory).
//!
//! Design choice: the root's core accounts every kind as an amount (a resource vector),
//! and only the agent knows *which* CPU or GPU is free. Identities never travel: a
//! task's binding is chosen on its node when it starts, so the root's books stay
//! O(kinds) per node however many devices a node has.

pub mod cgroup;
pub mod devices;
pub mod discover;
pub mod limits;

pub use devices::{Binding, Devices};
pub use discover::{Declared, NodeResources, PinCpus, Probe, SystemProbe, discover};
