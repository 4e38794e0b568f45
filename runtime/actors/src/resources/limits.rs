//! What a slot's thread holds its attempts to: the CPUs it is pinned to and the memory
//! its slot's cgroup allows. Used by the slot's runner for commands and for calls on
//! its persistent workers alike.

use std::io;

use saker_wire::messages::Outcome;

use crate::process::{self, Finished};
use crate::resources::Binding;
use crate::resources::cgroup::{self, SlotCgroup};

/// What a slot's thread holds its attempts to: the CPUs it is pinned to (its own
/// affinity, which the processes it starts inherit) and its cgroup's memory limit.
#[derive(Debug)]
pub struct SlotLimits {
    /// The CPUs this thread was last pinned to; empty: never pinned.
    cpus: Vec<u32>,
    memory: Option<SlotCgroup>,
}

impl SlotLimits {
    pub(crate) fn new(memory: Option<SlotCgroup>) -> SlotLimits {
        SlotLimits {
            cpus: Vec::new(),
            memory,
        }
    }

    /// Pins this thread and sets the memory limit for an attempt bound by `binding`.
    /// Returns the cgroup's count of out-of-memory kills before it, for [`judge`].
    /// A limit the kernel refuses leaves the attempt unlimited, logged: the node's
    /// books still hold its memory for it.
    ///
    /// [`judge`]: SlotLimits::judge
    pub(crate) fn apply(&mut self, binding: &Binding) -> u64 {
        if !binding.cpus.is_empty() && binding.cpus != self.cpus {
            match pin_thread(&binding.cpus) {
                Ok(()) => self.cpus.clone_from(&binding.cpus),
                Err(error) => tracing::warn!(%error, cpus = ?binding.cpus, "could not pin"),
            }
        }
        let Some(cgroup) = &mut self.memory else {
            return 0;
        };
        if let Err(error) = cgroup.set_limit(binding.memory_mib) {
            tracing::warn!(%error, mib = binding.memory_mib, "could not set a memory limit");
        }
        // Only a limited attempt is judged; reading the count costs a file open and
        // read per task, on the way from dispatch to spawn.
        if cgroup.limit_mib() > 0 {
            cgroup.oom_kills()
        } else {
            0
        }
    }

    /// `launch` started through `cgroup-exec` into the slot's cgroup, when the attempt
    /// has a memory limit to keep (see [`crate::resources::cgroup`]). `None`: start it
    /// as it is (no limit, or a program not found, which then fails to start as
    /// usual).
    pub(crate) fn wrap(
        &self,
        launch: &process::Launch,
        binding: &Binding,
    ) -> Option<process::Launch> {
        use std::os::unix::ffi::OsStrExt;
        let cgroup = self.memory.as_ref().filter(|_| binding.memory_mib > 0)?;
        let program = std::ffi::OsStr::from_bytes(launch.program()?.to_bytes());
        let path = launch
            .var(b"PATH")
            .map(|path| std::ffi::OsStr::from_bytes(path).to_owned())
            .or_else(|| std::env::var_os("PATH"));
        let resolved = cgroup::resolve(program, path.as_deref())?;
        Some(launch.wrapped(cgroup_exec(cgroup, &resolved)))
    }

    /// The slot's cgroup, if its attempts' memory is limited.
    pub(crate) fn memory(&self) -> Option<&SlotCgroup> {
        self.memory.as_ref()
    }

    /// An attempt that failed while its cgroup counted a kill for want of memory ran
    /// out of its memory: killed itself, or a process of it was (a shell whose
    /// pipeline lost a member exits 137).
    pub(crate) fn judge(&self, finished: &mut Finished, oom_kills_before: u64) {
        let Some(cgroup) = &self.memory else {
            return;
        };
        // A worker killed in a call reads as lost (its pipe broke), one killed while
        // it started as failed: here it is the call's own doing, not the node's.
        let failed = matches!(
            finished.outcome,
            Outcome::Signaled { .. }
                | Outcome::Lost { .. }
                | Outcome::WorkerFailed { .. }
                | Outcome::Exited { code: 1.. }
        );
        if failed && cgroup.limit_mib() > 0 && cgroup.oom_kills() > oom_kills_before {
            finished.outcome = Outcome::OutOfMemory {
                limit_mib: cgroup.limit_mib(),
            };
        }
    }
}

/// The command line before a program's own that starts it in `cgroup`'s slot:
/// this very binary's `cgroup-exec PROCS PROGRAM` (the program's `argv[0]` follows).
pub(crate) fn cgroup_exec(cgroup: &SlotCgroup, program: &std::path::Path) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    // This very binary, even if its file was replaced since the agent started.
    let mut front = vec![b"/proc/self/exe".to_vec()];
    front.extend(
        crate::self_exe::prefix()
            .iter()
            .map(|p| p.as_bytes().to_vec()),
    );
    front.push(cgroup::EXEC_SUBCOMMAND.as_bytes().to_vec());
    front.push(cgroup.procs().as_os_str().as_bytes().to_vec());
    front.push(program.as_os_str().as_bytes().to_vec());
    front
}

/// Pins the calling thread to `cpus`.
fn pin_thread(cpus: &[u32]) -> io::Result<()> {
    rustix::thread::sched_setaffinity(None, &cpu_set(cpus)).map_err(io::Error::from)
}

/// `cpus` as the kernel's CPU set.
pub(crate) fn cpu_set(cpus: &[u32]) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        if (cpu as usize) < rustix::thread::CpuSet::MAX_CPU {
            set.set(cpu as usize);
        }
    }
    set
}
