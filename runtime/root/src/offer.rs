//! What a pilot's nodes offer beyond cores: each local agent's share of this machine,
//! and the node the root expects before any has joined (to refuse at submission what
//! no node could ever run). The flags that tell each agent are `saker-node`'s
//! ([`NodeOptions`], [`agent_arguments`]), re-exported here.
//!
//! Every agent finds its own node's GPUs, memory and CPUs ([`discover()`]). Local
//! agents share one machine, so the pilot finds them once and hands each agent its
//! share: its own CPUs to pin to (when the machine has one per slot), its own GPUs,
//! its part of the memory. Declared amounts (`--gpus-per-node`, `--mem-per-node`,
//! `--node-resource`) are per node, which for local agents means per agent.

use saker_actors::resources::{Declared, NodeResources, PinCpus, Probe, discover};
/// The agents' flags are `saker-node`'s, beside the parser that reads them.
pub use saker_node::offer::{NodeOptions, agent_arguments};

/// Each local agent's share of this machine, for agents of `slots_per_agent` slots.
pub fn local_shares(
    slots_per_agent: &[u32],
    declared: &Declared,
    probe: &dyn Probe,
) -> Vec<Declared> {
    let agents = slots_per_agent.len().max(1);
    let slots: u32 = slots_per_agent.iter().sum();
    let machine = discover(slots, declared, probe);
    // One CPU per slot, or no pinning at all: agents never share a CPU.
    let mut cpus = machine.cpus.into_iter();
    let gpu_count = machine.gpus.len();
    let mut gpus = machine.gpus.into_iter();
    let memory_each = machine.memory_mib / agents as u32;
    slots_per_agent
        .iter()
        .enumerate()
        .map(|(index, &slots)| {
            let pin = match &declared.pin {
                PinCpus::Off => PinCpus::Off,
                _ if cpus.len() == 0 => PinCpus::Off,
                _ => PinCpus::List(cpus.by_ref().take(slots as usize).collect()),
            };
            let gpu_ids = match declared.gpus {
                // Declared GPUs are per node: each agent offers as many.
                Some(_) => None,
                // The first agents take one more of what does not divide evenly.
                None => {
                    let count = gpu_count / agents + usize::from(index < gpu_count % agents);
                    Some(gpus.by_ref().take(count).collect())
                }
            };
            Declared {
                gpu_ids,
                gpus: declared.gpus,
                memory_mib: Some(declared.memory_mib.unwrap_or(memory_each)),
                custom: declared.custom.clone(),
                pin,
            }
        })
        .collect()
}

/// The widest node among `nodes`, kind by kind (named resources by name).
pub fn widest(nodes: impl IntoIterator<Item = NodeResources>) -> Option<NodeResources> {
    nodes.into_iter().reduce(|mut wide, node| {
        wide.cores = wide.cores.max(node.cores);
        if node.gpus.len() > wide.gpus.len() {
            wide.gpus = node.gpus;
        }
        wide.memory_mib = wide.memory_mib.max(node.memory_mib);
        for (name, amount) in node.custom {
            match wide.custom.iter_mut().find(|(known, _)| *known == name) {
                Some((_, most)) => *most = (*most).max(amount),
                None => wide.custom.push((name, amount)),
            }
        }
        wide
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    struct Machine {
        cpus: Vec<u32>,
        gpus: &'static str,
    }

    impl Probe for Machine {
        fn env(&self, name: &str) -> Option<String> {
            (name == "CUDA_VISIBLE_DEVICES").then(|| self.gpus.to_string())
        }
        fn read(&self, path: &Path) -> Option<String> {
            (path == Path::new("/proc/meminfo")).then(|| "MemTotal: 8388608 kB\n".into())
        }
        fn nvidia_smi(&self) -> Option<String> {
            None
        }
        fn allowed_cpus(&self) -> Option<Vec<u32>> {
            Some(self.cpus.clone())
        }
    }

    #[test]
    fn local_agents_share_the_machine_without_sharing_a_cpu_or_gpu() {
        let machine = Machine {
            cpus: (0..8).collect(),
            gpus: "0,1,2,3",
        };
        let shares = local_shares(&[3, 3, 2], &Declared::default(), &machine);
        let pins: Vec<_> = shares.iter().map(|s| s.pin.clone()).collect();
        assert_eq!(
            pins,
            [
                PinCpus::List(vec![0, 1, 2]),
                PinCpus::List(vec![3, 4, 5]),
                PinCpus::List(vec![6, 7])
            ]
        );
        let gpus: Vec<_> = shares.iter().map(|s| s.gpu_ids.clone().unwrap()).collect();
        assert_eq!(
            gpus,
            [
                vec!["0".to_string(), "1".into()],
                vec!["2".into()],
                vec!["3".into()]
            ]
        );
        assert!(shares.iter().all(|s| s.memory_mib == Some(8192 / 3)));

        let crowded = local_shares(&[8, 8], &Declared::default(), &machine);
        assert!(
            crowded.iter().all(|s| s.pin == PinCpus::Off),
            "16 slots, 8 CPUs"
        );

        let declared = Declared {
            gpus: Some(4),
            memory_mib: Some(1000),
            custom: vec![("licence".into(), 2)],
            ..Declared::default()
        };
        let shares = local_shares(&[1, 1], &declared, &machine);
        for share in &shares {
            assert_eq!(share.gpus, Some(4), "declared per node: each agent");
            assert_eq!(share.gpu_ids, None);
            assert_eq!(share.memory_mib, Some(1000));
            assert_eq!(share.custom, [("licence".to_string(), 2)]);
        }
        let options = NodeOptions {
            no_memory_limits: true,
            ..NodeOptions::default()
        };
        let args = agent_arguments(&shares[1], &options);
        assert_eq!(
            args,
            [
                "--pin-cpus",
                "1",
                "--gpus-per-node",
                "4",
                "--mem-per-node",
                "1000M",
                "--node-resource",
                "licence=2",
                "--no-memory-limits"
            ]
        );
    }
}
