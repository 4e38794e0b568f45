//! Flags for what each node offers beyond its cores (`saker run`, `saker pilot`, and
//! the agents they start), and for what each task asks of them.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use clap::Args;
use saker_actors::resources::{Declared, PinCpus};
use saker_root::offer::NodeOptions;
use saker_root::spec::parse_memory_mib;

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
}

impl NodeArgs {
    /// What these flags declare, for the pilot to pass on to its agents.
    pub fn options(&self) -> Result<NodeOptions> {
        Ok(NodeOptions {
            declared: self.declared(None)?,
            no_memory_limits: self.no_memory_limits,
            scratch: self.scratch.clone(),
            shared_scratch: self.shared_scratch,
        })
    }

    /// What these flags declare, with an agent's exact GPU ids (`--gpu-ids`).
    pub fn declared(&self, gpu_ids: Option<&str>) -> Result<Declared> {
        let memory_mib = match &self.mem_per_node {
            Some(text) => {
                Some(parse_memory_mib(text).with_context(|| format!("--mem-per-node {text:?}"))?)
            }
            None => None,
        };
        let custom = named_amounts(&self.node_resources, "--node-resource")?
            .into_iter()
            .collect();
        let gpu_ids = gpu_ids.map(|list| match list.trim() {
            "none" | "" => Vec::new(),
            list => list.split(',').map(|id| id.trim().to_owned()).collect(),
        });
        Ok(Declared {
            gpu_ids,
            gpus: self.gpus_per_node,
            memory_mib,
            custom,
            pin: pin_cpus(&self.pin_cpus)?,
        })
    }
}

/// `--pin-cpus`: `auto`, `off`, or a CPU list such as `0-3,8,10-11`.
fn pin_cpus(text: &str) -> Result<PinCpus> {
    match text.trim() {
        "auto" => Ok(PinCpus::Auto),
        "off" | "none" => Ok(PinCpus::Off),
        list => cpu_list(list)
            .map(PinCpus::List)
            .with_context(|| format!("--pin-cpus {text:?}: expected auto, off or CPUs like 0-3,8")),
    }
}

fn cpu_list(list: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last): (u32, u32) = (first.trim().parse()?, last.trim().parse()?);
                if last < first || last - first > 65_535 {
                    bail!("{part:?} is no range of CPUs");
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse()?),
        }
    }
    Ok(cpus)
}

/// `NAME=N` flags as a map, each name once.
pub fn named_amounts(flags: &[String], flag: &str) -> Result<BTreeMap<String, u32>> {
    let mut amounts = BTreeMap::new();
    for given in flags {
        let Some((name, amount)) = given.split_once('=') else {
            bail!("{flag} {given:?}: expected NAME=N");
        };
        if !saker_root::spec::valid_resource_name(name) {
            bail!("{flag} {given:?}: a name is letters, digits, '_', '-' and '.' (at most 64)");
        }
        let amount: u32 = amount
            .trim()
            .parse()
            .with_context(|| format!("{flag} {given:?}: N is a whole number"))?;
        if amounts.insert(name.to_owned(), amount).is_some() {
            bail!("{flag}: {name:?} is given twice");
        }
    }
    Ok(amounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_flags_become_what_agents_are_told() {
        let args = NodeArgs {
            gpus_per_node: Some(4),
            mem_per_node: Some("2G".into()),
            node_resources: vec!["licence=4".into(), "disk=1".into()],
            pin_cpus: "0-2,7".into(),
            no_memory_limits: false,
            scratch: None,
            shared_scratch: false,
        };
        let declared = args.declared(Some("1,3")).unwrap();
        assert_eq!(declared.gpus, Some(4));
        assert_eq!(declared.gpu_ids, Some(vec!["1".into(), "3".into()]));
        assert_eq!(declared.memory_mib, Some(2048));
        assert_eq!(
            declared.custom,
            [("disk".to_string(), 1), ("licence".to_string(), 4)]
        );
        assert_eq!(declared.pin, PinCpus::List(vec![0, 1, 2, 7]));
        assert_eq!(
            args.declared(Some("none")).unwrap().gpu_ids,
            Some(Vec::new())
        );
        for bad in ["3-1", "x", "1,,2"] {
            assert!(pin_cpus(bad).is_err(), "{bad}");
        }
        assert!(named_amounts(&["a=1".into(), "a=2".into()], "--resource").is_err());
        assert!(named_amounts(&["a b=1".into()], "--resource").is_err());
        assert!(named_amounts(&["a=-1".into()], "--resource").is_err());
    }
}
