//! Which of a node's CPUs and GPUs are free, and what each attempt holds.
//!
//! The board's resource vector already says *how many* are free (the root sends no
//! more than that); this says *which*, so that no two attempts share a pinned CPU or a
//! GPU. An attempt takes the CPU of its own slot first (a 1-core task on a slot then
//! never changes the slot thread's affinity), and a slot takes the GPUs it held last
//! first (its persistent worker was started seeing them and need not be restarted).

use super::NodeResources;

/// What one attempt holds on its node beyond amounts: see the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    /// CPUs it is pinned to; empty when the node does not pin.
    pub cpus: Vec<u32>,
    /// GPU ids it sees (`CUDA_VISIBLE_DEVICES`); `None` on a node without GPUs, where
    /// there is nothing to hide from a task that asked for none.
    pub gpus: Option<Vec<String>>,
    /// Its memory limit in MiB; 0 for none.
    pub memory_mib: u32,
    /// Indices into the node's CPUs and GPUs, to give them back.
    cores: Vec<u16>,
    devices: Vec<u16>,
}

impl Binding {
    /// The variables that bind a task to its GPUs and CPUs, as (name, value).
    pub fn variables(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        let gpus = self.gpus.as_ref().map(|ids| ids.join(","));
        let gpu_vars = gpus.into_iter().flat_map(|list| {
            ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "SAKER_GPUS"]
                .into_iter()
                .map(move |name| (name, list.clone()))
        });
        let cpus = (!self.cpus.is_empty()).then(|| {
            let list: Vec<String> = self.cpus.iter().map(u32::to_string).collect();
            ("SAKER_CPUS", list.join(","))
        });
        gpu_vars.chain(cpus)
    }
}

/// A node's CPUs and GPUs and which are free. See the module doc.
#[derive(Debug, Clone, Default)]
pub struct Devices {
    /// The CPU each core is pinned to; empty: no pinning.
    cpus: Vec<u32>,
    cpu_free: Vec<bool>,
    gpus: Vec<String>,
    gpu_free: Vec<bool>,
    /// The GPUs each slot held last.
    last_gpus: Vec<Vec<u16>>,
}

impl Devices {
    pub fn new(node: &NodeResources, slots: usize) -> Devices {
        Devices {
            cpus: node.cpus.clone(),
            cpu_free: vec![true; node.cpus.len()],
            gpus: node.gpus.clone(),
            gpu_free: vec![true; node.gpus.len()],
            last_gpus: vec![Vec::new(); slots],
        }
    }

    pub fn pins(&self) -> bool {
        !self.cpus.is_empty()
    }

    pub fn gpu_ids(&self) -> &[String] {
        &self.gpus
    }

    /// Takes `cores` CPUs and `gpus` GPUs for an attempt on `slot` with a memory limit
    /// of `memory_mib`. The caller has checked the amounts are free; should the books
    /// disagree, the binding holds what was free (never a device held by another).
    pub fn take(&mut self, slot: usize, cores: u32, gpus: u32, memory_mib: u32) -> Binding {
        let mut binding = Binding {
            memory_mib,
            ..Binding::default()
        };
        if self.pins() {
            let own = (slot < self.cpu_free.len()).then_some(slot);
            binding.cores = pick(&mut self.cpu_free, cores as usize, own.into_iter());
            binding.cpus = binding
                .cores
                .iter()
                .map(|&i| self.cpus[i as usize])
                .collect();
        }
        if !self.gpus.is_empty() {
            let last = self.last_gpus.get(slot).cloned().unwrap_or_default();
            binding.devices = pick(
                &mut self.gpu_free,
                gpus as usize,
                last.into_iter().map(usize::from),
            );
            binding.gpus = Some(
                binding
                    .devices
                    .iter()
                    .map(|&i| self.gpus[i as usize].clone())
                    .collect(),
            );
            if gpus > 0
                && let Some(last) = self.last_gpus.get_mut(slot)
            {
                last.clone_from(&binding.devices);
            }
        }
        binding
    }

    /// Gives back what `binding` held.
    pub fn release(&mut self, binding: &Binding) {
        for &core in &binding.cores {
            if let Some(free) = self.cpu_free.get_mut(core as usize) {
                *free = true;
            }
        }
        for &device in &binding.devices {
            if let Some(free) = self.gpu_free.get_mut(device as usize) {
                *free = true;
            }
        }
    }

    /// How many CPUs and GPUs are free (for the books' self-check in tests).
    #[cfg(test)]
    pub fn free_counts(&self) -> (usize, usize) {
        let count = |free: &[bool]| free.iter().filter(|f| **f).count();
        (count(&self.cpu_free), count(&self.gpu_free))
    }
}

/// Takes `count` free entries of `free`, those in `preferred` first, then the lowest.
fn pick(free: &mut [bool], count: usize, preferred: impl Iterator<Item = usize>) -> Vec<u16> {
    let mut taken = Vec::with_capacity(count);
    for index in preferred.chain(0..free.len()) {
        if taken.len() == count {
            break;
        }
        if free.get(index).copied().unwrap_or(false) {
            free[index] = false;
            taken.push(index as u16);
        }
    }
    taken.sort_unstable();
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cpus: &[u32], gpus: usize) -> NodeResources {
        NodeResources {
            cores: cpus.len().max(1) as u32,
            cpus: cpus.to_vec(),
            gpus: (0..gpus).map(|g| format!("GPU-{g}")).collect(),
            memory_mib: 1024,
            custom: Vec::new(),
        }
    }

    #[test]
    fn an_attempt_takes_its_slots_cpu_first_and_never_a_held_one() {
        let mut devices = Devices::new(&node(&[10, 11, 12, 13], 0), 4);
        let a = devices.take(2, 1, 0, 0);
        assert_eq!(a.cpus, vec![12]);
        assert_eq!(a.gpus, None, "no GPUs on the node: nothing to hide");
        let b = devices.take(2, 2, 0, 0);
        assert_eq!(b.cpus, vec![10, 11], "its own CPU is held: the lowest free");
        let c = devices.take(0, 1, 0, 0);
        assert_eq!(c.cpus, vec![13]);
        assert_eq!(devices.free_counts(), (0, 0));
        devices.release(&b);
        assert_eq!(devices.take(1, 1, 0, 0).cpus, vec![11]);
    }

    #[test]
    fn a_slot_takes_the_gpus_it_held_last_when_they_are_free() {
        let mut devices = Devices::new(&node(&[], 4), 2);
        let first = devices.take(1, 1, 2, 0);
        assert_eq!(first.gpus, Some(vec!["GPU-0".into(), "GPU-1".into()]));
        assert!(first.cpus.is_empty(), "no pinning");
        let other = devices.take(0, 1, 1, 0);
        assert_eq!(other.gpus, Some(vec!["GPU-2".into()]));
        devices.release(&first);
        devices.release(&other);
        let none = devices.take(1, 1, 0, 0);
        assert_eq!(
            none.gpus,
            Some(Vec::new()),
            "hidden from a task that asked none"
        );
        let again = devices.take(1, 1, 2, 0);
        assert_eq!(again.gpus, Some(vec!["GPU-0".into(), "GPU-1".into()]));
        let vars: Vec<_> = again.variables().collect();
        assert!(vars.contains(&("CUDA_VISIBLE_DEVICES", "GPU-0,GPU-1".to_string())));
        assert!(vars.contains(&("SAKER_GPUS", "GPU-0,GPU-1".to_string())));
    }
}
