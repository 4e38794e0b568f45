//! Flags for what each node offers beyond its cores (`saker run`, `saker pilot`); the
//! agents they start take the same flags from saker-node, which checks them for both.

use clap::Args;
use saker_node::FlagError;
use saker_node::offer::NodeOffer;
use saker_node::offer::NodeOptions;

/// What each node offers beyond its cores. Whatever is not given is found on each
/// node (docs/resources.md).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "What each node offers")]
pub struct NodeArgs {
    /// GPUs each node offers: ids 0..N, or the first N its environment lists
    /// [default: those in CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or Slurm's GPU
    /// list, else one per GPU nvidia-smi lists]
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// Memory each node offers (`64G`, `512M`; a bare number is MiB) [default:
    /// Slurm's memory per node or per CPU, else the machine's, or its cgroup's limit]
    #[arg(long, value_name = "SIZE")]
    pub mem_per_node: Option<String>,
    /// A named resource each node offers, `NAME=N` (licences, local disks, …);
    /// repeatable
    #[arg(long = "node-resource", value_name = "NAME=N")]
    pub node_resources: Vec<String>,
    /// Pin each task to its cores: `auto` (when every slot has a CPU of its own),
    /// `off`, or the CPUs to use, one per slot (`0-3,8-11`)
    #[arg(long, default_value = "auto", value_name = "auto|off|CPUS")]
    pub pin_cpus: String,
    /// Account each task's memory but never limit it (no cgroups)
    #[arg(long)]
    pub no_memory_limits: bool,
    /// Where each node keeps its data items: a node-local directory (each node uses
    /// `DIR/saker-PILOT/node-N`) [default: $TMPDIR, else /tmp]
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<std::path::PathBuf>,
    /// `--scratch` is on a filesystem every node sees: a reader links an item from
    /// its writer's directory instead of copying it through the tree
    #[arg(long, requires = "scratch")]
    pub shared_scratch: bool,
    /// Keep up to SIZE of objects in shared memory on each node (`4G`, `512M`; a bare
    /// number is MiB), in /dev/shm/saker-PILOT/node-N; the least recently used move
    /// to the scratch directory past it [default: none: objects are files in the
    /// scratch directory]
    #[arg(long, value_name = "SIZE")]
    pub object_memory: Option<String>,
    /// The shared-memory filesystem for --object-memory (each node uses
    /// DIR/saker-PILOT/node-N): a tmpfs mounted with huge pages maps objects faster
    /// [default: /dev/shm]
    #[arg(long, value_name = "DIR", requires = "object_memory")]
    pub object_memory_dir: Option<std::path::PathBuf>,
}

impl NodeArgs {
    /// These flags as the agents take them (saker-node checks them, for both).
    pub fn offer(&self) -> NodeOffer {
        NodeOffer {
            gpus_per_node: self.gpus_per_node,
            mem_per_node: self.mem_per_node.clone(),
            node_resources: self.node_resources.clone(),
            pin_cpus: self.pin_cpus.clone(),
            no_memory_limits: self.no_memory_limits,
            scratch: self.scratch.clone(),
            shared_scratch: self.shared_scratch,
            object_memory: self.object_memory.clone(),
            object_memory_dir: self.object_memory_dir.clone(),
        }
    }

    /// What these flags declare, for the pilot to pass on to its agents.
    pub fn options(&self) -> Result<NodeOptions, FlagError> {
        self.offer().options()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        nodes: NodeArgs,
    }

    /// `saker run`'s defaults are the agent's: the pilot passes on only what differs.
    #[test]
    fn unset_node_flags_are_the_agents_defaults() {
        let flags = Flags::parse_from(["saker"]);
        assert_eq!(flags.nodes.offer(), NodeOffer::default());
        let flags = Flags::parse_from(["saker", "--pin-cpus", "0-3", "--no-memory-limits"]);
        let options = flags.nodes.options().unwrap();
        assert!(options.no_memory_limits);
        assert_eq!(
            options.declared.pin,
            saker_actors::resources::PinCpus::List(vec![0, 1, 2, 3])
        );
    }
}
