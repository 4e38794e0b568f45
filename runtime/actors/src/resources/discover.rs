//! What a node offers: its cores' CPUs, GPUs, memory and named resources.
//!
//! Flags come first (the user knows best), then what Slurm says of the allocation,
//! then what the machine says. Everything the machine is asked goes through a
//! [`Probe`], so every rule below is tested without a GPU or a Slurm step.
//!
//! - **GPUs**: `--gpu-ids` exactly; `--gpus-per-node N` takes the first N ids the
//!   environment lists, else `0..N`. Otherwise the ids in `CUDA_VISIBLE_DEVICES`,
//!   `ROCR_VISIBLE_DEVICES`, Slurm's `SLURM_STEP_GPUS` or `SLURM_JOB_GPUS` (the first
//!   set wins; set and empty means none), else one per line of `nvidia-smi -L`.
//! - **Memory**: `--mem-per-node`; else Slurm's `SLURM_MEM_PER_NODE`, or
//!   `SLURM_MEM_PER_CPU` × cores; else the machine's `MemTotal`, or its cgroup's limit
//!   when lower.
//! - **CPUs to pin to**: one per core, from `--cpus` or the CPUs this process may run
//!   on (its affinity: a Slurm step's cpuset). No pinning when there are fewer CPUs
//!   than cores (slots oversubscribe the machine) or with `--pin-cpus off`.

use std::path::Path;

use super::cgroup;

/// How an agent pins tasks to CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PinCpus {
    /// To the CPUs this process may run on, one per core, when there are enough.
    #[default]
    Auto,
    /// Never.
    Off,
    /// To these CPUs, one per core (a local pilot gives each agent its share).
    List(Vec<u32>),
}

/// What an agent is told about its node before it looks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    /// Exactly these GPU ids (a local pilot gives each agent its share).
    pub gpu_ids: Option<Vec<String>>,
    /// This many GPUs (`--gpus-per-node`).
    pub gpus: Option<u32>,
    /// This much memory, in MiB (`--mem-per-node`).
    pub memory_mib: Option<u32>,
    /// Named resources (`--node-resource NAME=N`), in the order given.
    pub custom: Vec<(String, u32)>,
    pub pin: PinCpus,
}

/// What a node offers, as its agent found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeResources {
    pub cores: u32,
    /// The CPU each core is pinned to, in core order; empty: tasks are not pinned.
    pub cpus: Vec<u32>,
    /// GPU ids as tasks see them in `CUDA_VISIBLE_DEVICES`.
    pub gpus: Vec<String>,
    pub memory_mib: u32,
    pub custom: Vec<(String, u32)>,
}

impl NodeResources {
    /// `cores` cores and nothing else: no pinning, GPUs, memory or named resources.
    pub fn of_cores(cores: u32) -> NodeResources {
        NodeResources {
            cores,
            ..NodeResources::default()
        }
    }
}

/// Where discovery looks: the real machine ([`SystemProbe`]) or a test's.
pub trait Probe {
    fn env(&self, name: &str) -> Option<String>;
    fn read(&self, path: &Path) -> Option<String>;
    /// What `nvidia-smi -L` prints, if it runs and succeeds.
    fn nvidia_smi(&self) -> Option<String>;
    /// The CPUs this process may run on, in order.
    fn allowed_cpus(&self) -> Option<Vec<u32>>;
}

/// The machine this process runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemProbe;

impl Probe for SystemProbe {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn nvidia_smi(&self) -> Option<String> {
        let output = std::process::Command::new("nvidia-smi")
            .arg("-L")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn allowed_cpus(&self) -> Option<Vec<u32>> {
        let set = rustix::thread::sched_getaffinity(None).ok()?;
        Some(
            (0..rustix::thread::CpuSet::MAX_CPU)
                .filter(|&cpu| set.is_set(cpu))
                .map(|cpu| cpu as u32)
                .collect(),
        )
    }
}

/// What a node of `cores` cores offers, from `declared` and `probe`.
pub fn discover(cores: u32, declared: &Declared, probe: &dyn Probe) -> NodeResources {
    NodeResources {
        cores,
        cpus: pinned_cpus(cores, &declared.pin, probe),
        gpus: gpus(declared, probe),
        memory_mib: declared
            .memory_mib
            .unwrap_or_else(|| memory_mib(cores, probe)),
        custom: declared.custom.clone(),
    }
}

fn pinned_cpus(cores: u32, pin: &PinCpus, probe: &dyn Probe) -> Vec<u32> {
    let cores = cores as usize;
    let cpus = match pin {
        PinCpus::Off => return Vec::new(),
        PinCpus::List(cpus) => cpus.clone(),
        PinCpus::Auto => probe.allowed_cpus().unwrap_or_default(),
    };
    if cpus.len() < cores {
        return Vec::new();
    }
    cpus[..cores].to_vec()
}

fn gpus(declared: &Declared, probe: &dyn Probe) -> Vec<String> {
    if let Some(ids) = &declared.gpu_ids {
        return ids.clone();
    }
    let listed = listed_gpus(probe);
    match (declared.gpus, listed) {
        (Some(count), Some(ids)) if ids.len() >= count as usize => ids[..count as usize].to_vec(),
        (Some(count), _) => (0..count).map(|id| id.to_string()).collect(),
        (None, Some(ids)) => ids,
        (None, None) => probe
            .nvidia_smi()
            .map(|out| out.lines().filter(|l| l.starts_with("GPU ")).count())
            .map(|count| (0..count).map(|id| id.to_string()).collect())
            .unwrap_or_default(),
    }
}

/// The GPU ids the first variable that lists them gives; `Some(empty)` when it is set
/// to none.
fn listed_gpus(probe: &dyn Probe) -> Option<Vec<String>> {
    const LISTS: [&str; 4] = [
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
    ];
    let value = LISTS.iter().find_map(|name| probe.env(name))?;
    let value = value.trim();
    if value == "NoDevFiles" {
        return Some(Vec::new());
    }
    Some(
        value
            .split(',')
            .map(str::trim)
            .filter(|id| !id.is_empty())
            // CUDA stops at the first invalid index, conventionally -1.
            .take_while(|id| !id.starts_with('-'))
            .map(str::to_owned)
            .collect(),
    )
}

fn memory_mib(cores: u32, probe: &dyn Probe) -> u32 {
    let number = |name: &str| -> Option<u64> { probe.env(name)?.trim().parse().ok() };
    if let Some(mib) = number("SLURM_MEM_PER_NODE").filter(|&mib| mib > 0) {
        return clamp(mib);
    }
    if let Some(mib) = number("SLURM_MEM_PER_CPU").filter(|&mib| mib > 0) {
        return clamp(mib.saturating_mul(u64::from(cores)));
    }
    let total = probe
        .read(Path::new("/proc/meminfo"))
        .and_then(|text| mem_total_kib(&text))
        .map(|kib| kib / 1024);
    let limit = cgroup::own_memory_limit(probe).map(|bytes| bytes >> 20);
    clamp(match (total, limit) {
        (Some(total), Some(limit)) => total.min(limit),
        (total, limit) => total.or(limit).unwrap_or(0),
    })
}

fn mem_total_kib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn clamp(mib: u64) -> u32 {
    mib.min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use super::*;

    #[derive(Default)]
    struct FakeProbe {
        env: HashMap<&'static str, &'static str>,
        files: HashMap<PathBuf, String>,
        smi: Option<&'static str>,
        cpus: Option<Vec<u32>>,
    }

    impl Probe for FakeProbe {
        fn env(&self, name: &str) -> Option<String> {
            self.env.get(name).map(|v| v.to_string())
        }
        fn read(&self, path: &Path) -> Option<String> {
            self.files.get(path).cloned()
        }
        fn nvidia_smi(&self) -> Option<String> {
            self.smi.map(str::to_owned)
        }
        fn allowed_cpus(&self) -> Option<Vec<u32>> {
            self.cpus.clone()
        }
    }

    fn probe(env: &[(&'static str, &'static str)]) -> FakeProbe {
        FakeProbe {
            env: env.iter().copied().collect(),
            ..FakeProbe::default()
        }
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn gpus_come_from_flags_then_the_environment_then_nvidia_smi() {
        let none = Declared::default();
        assert!(discover(4, &none, &probe(&[])).gpus.is_empty());
        let cuda = probe(&[("CUDA_VISIBLE_DEVICES", "2,3"), ("SLURM_JOB_GPUS", "0")]);
        assert_eq!(discover(4, &none, &cuda).gpus, ids(&["2", "3"]));
        let rocr = probe(&[("ROCR_VISIBLE_DEVICES", "GPU-a, GPU-b,")]);
        assert_eq!(discover(4, &none, &rocr).gpus, ids(&["GPU-a", "GPU-b"]));
        let slurm = probe(&[("SLURM_JOB_GPUS", "1,5")]);
        assert_eq!(discover(4, &none, &slurm).gpus, ids(&["1", "5"]));
        let hidden = probe(&[("CUDA_VISIBLE_DEVICES", ""), ("SLURM_JOB_GPUS", "0")]);
        assert!(discover(4, &none, &hidden).gpus.is_empty());
        let cut = probe(&[("CUDA_VISIBLE_DEVICES", "0,-1,2")]);
        assert_eq!(discover(4, &none, &cut).gpus, ids(&["0"]));
        let smi = FakeProbe {
            smi: Some("GPU 0: A100 (UUID: GPU-x)\nGPU 1: A100 (UUID: GPU-y)\n"),
            ..FakeProbe::default()
        };
        assert_eq!(discover(4, &none, &smi).gpus, ids(&["0", "1"]));

        let four = Declared {
            gpus: Some(4),
            ..Declared::default()
        };
        assert_eq!(
            discover(4, &four, &probe(&[])).gpus,
            ids(&["0", "1", "2", "3"])
        );
        let listed = probe(&[("CUDA_VISIBLE_DEVICES", "4,5,6,7,8")]);
        assert_eq!(discover(4, &four, &listed).gpus, ids(&["4", "5", "6", "7"]));
        assert_eq!(
            discover(4, &four, &cuda).gpus,
            ids(&["0", "1", "2", "3"]),
            "fewer listed than declared: the declared count, numbered from 0"
        );
        let exact = Declared {
            gpu_ids: Some(ids(&["1"])),
            gpus: Some(4),
            ..Declared::default()
        };
        assert_eq!(discover(4, &exact, &listed).gpus, ids(&["1"]));
    }

    #[test]
    fn memory_comes_from_flags_then_slurm_then_the_machine_and_its_cgroup() {
        let mut machine = probe(&[]);
        machine.files.insert(
            PathBuf::from("/proc/meminfo"),
            "MemTotal:       16384000 kB\nMemFree: 1 kB\n".into(),
        );
        let none = Declared::default();
        assert_eq!(discover(4, &none, &machine).memory_mib, 16000);
        machine
            .files
            .insert(PathBuf::from("/proc/self/cgroup"), "0::/job/step\n".into());
        machine.files.insert(
            PathBuf::from("/sys/fs/cgroup/job/step/memory.max"),
            format!("{}\n", 2048u64 << 20),
        );
        assert_eq!(discover(4, &none, &machine).memory_mib, 2048);
        machine.env.insert("SLURM_MEM_PER_CPU", "1000");
        assert_eq!(discover(4, &none, &machine).memory_mib, 4000);
        machine.env.insert("SLURM_MEM_PER_NODE", "64000");
        assert_eq!(discover(4, &none, &machine).memory_mib, 64000);
        let declared = Declared {
            memory_mib: Some(512),
            ..Declared::default()
        };
        assert_eq!(discover(4, &declared, &machine).memory_mib, 512);
    }

    #[test]
    fn cores_are_pinned_only_when_each_has_a_cpu_of_its_own() {
        let machine = FakeProbe {
            cpus: Some(vec![4, 5, 6, 7]),
            ..FakeProbe::default()
        };
        let auto = Declared::default();
        assert_eq!(discover(2, &auto, &machine).cpus, vec![4, 5]);
        assert_eq!(discover(4, &auto, &machine).cpus, vec![4, 5, 6, 7]);
        assert!(
            discover(16, &auto, &machine).cpus.is_empty(),
            "oversubscribed"
        );
        let off = Declared {
            pin: PinCpus::Off,
            ..Declared::default()
        };
        assert!(discover(2, &off, &machine).cpus.is_empty());
        let list = Declared {
            pin: PinCpus::List(vec![1, 3]),
            ..Declared::default()
        };
        assert_eq!(discover(2, &list, &machine).cpus, vec![1, 3]);
        assert!(discover(3, &list, &machine).cpus.is_empty());
    }
}
