//! Memory limits: one cgroup per slot, under the agent's own, whose limit is set to
//! the memory the slot's attempt asked for before it starts.
//!
//! Both hierarchies are handled, because both are in use on HPC systems:
//! - **cgroup v2** (`0::/path` in `/proc/self/cgroup`): a process may only be in a
//!   leaf, and a cgroup that holds processes cannot hand the memory controller to
//!   children. So the agent makes `agent/` under its own cgroup, moves itself there,
//!   enables `+memory` for the children and makes `slot-N/` beside it. This needs its
//!   own cgroup to be delegated to it (writable, `memory` in `cgroup.controllers`) and
//!   to hold no other process (a Slurm step with delegation, a systemd scope with
//!   `Delegate=yes`, root on a plain machine).
//! - **cgroup v1** (a `memory` hierarchy): `saker-NODE-PID/slot-N/` under the agent's
//!   memory cgroup; no process needs to move.
//!
//! Where neither can be made the agent still *accounts* memory (the root places no
//! more than a node offers) but does not enforce it; it logs why once at start.
//!
//! A task must be in its cgroup before it runs a single instruction of its own (a
//! shell script forks at once, and a child forked before a move stays outside). No
//! code may run between fork and exec here (unsafe code is denied), so a limited task
//! starts through this binary: `saker cgroup-exec PROCS PROGRAM ARGV0 ARGS…` joins the
//! cgroup, then execs the program ([`exec_main`]). That costs one more exec, paid only
//! by tasks that ask for memory where it is limited.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::Probe;

/// Why an agent cannot limit memory here.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("this process is in no memory cgroup that it can find")]
    NotFound,
    #[error("the memory controller is not available to {dir} (not delegated)")]
    NoController { dir: PathBuf },
    #[error("could not {what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The agent's cgroup for slots. Its directories are removed when it is dropped.
#[derive(Debug)]
pub struct MemoryCgroups {
    version: Version,
    /// Where `slot-N` directories go.
    base: PathBuf,
    /// Directories made, removed on drop (deepest last in the list).
    made: std::sync::Mutex<Vec<PathBuf>>,
}

/// One slot's cgroup, owned by its thread.
#[derive(Debug, Clone)]
pub struct SlotCgroup {
    version: Version,
    dir: PathBuf,
    /// The limit written last, in MiB (0: none).
    limit_mib: u32,
}

/// Where this process's memory cgroup is, and which hierarchy it belongs to.
fn own_cgroup(probe: &dyn Probe) -> Option<(Version, PathBuf)> {
    let table = probe.read(Path::new("/proc/self/cgroup"))?;
    // A v1 memory hierarchy takes precedence: where both exist (hybrid), memory is
    // controlled there.
    for line in table.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            let mount = v1_memory_mount(probe)?;
            return Some((Version::V1, mount.join(path.trim_start_matches('/'))));
        }
    }
    let path = table.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some((
        Version::V2,
        Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')),
    ))
}

/// The mount point of the v1 memory hierarchy, from `/proc/self/mountinfo`.
fn v1_memory_mount(probe: &dyn Probe) -> Option<PathBuf> {
    let info = probe.read(Path::new("/proc/self/mountinfo"))?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let (kind, _source, options) = (right.next()?, right.next()?, right.next()?);
        let memory = kind == "cgroup" && options.split(',').any(|o| o == "memory");
        if !memory {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// This process's memory limit in bytes, if its cgroup has one.
pub fn own_memory_limit(probe: &dyn Probe) -> Option<u64> {
    let (version, dir) = own_cgroup(probe)?;
    let file = match version {
        Version::V1 => "memory.limit_in_bytes",
        Version::V2 => "memory.max",
    };
    let text = probe.read(&dir.join(file))?;
    let bytes: u64 = text.trim().parse().ok()?;
    // v1 says "no limit" with a number near 2^63.
    (bytes < 1 << 62).then_some(bytes)
}

impl MemoryCgroups {
    /// Makes the agent's cgroups for its slots, named after `name` (unique per agent
    /// process), or says why it cannot.
    pub fn create(name: &str, probe: &dyn Probe) -> Result<MemoryCgroups, CgroupError> {
        let (version, own) = own_cgroup(probe).ok_or(CgroupError::NotFound)?;
        let groups = match version {
            Version::V1 => {
                let base = own.join(name);
                mkdir(&base)?;
                MemoryCgroups {
                    version,
                    made: std::sync::Mutex::new(vec![base.clone()]),
                    base,
                }
            }
            Version::V2 => v2_delegate(&own)?,
        };
        Ok(groups)
    }

    /// The cgroup of slot `index`, made if it does not exist yet.
    pub fn slot(&self, index: u32) -> Result<SlotCgroup, CgroupError> {
        let dir = self.base.join(format!("slot-{index}"));
        if !dir.exists() {
            mkdir(&dir)?;
            self.made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(dir.clone());
        }
        Ok(SlotCgroup {
            version: self.version,
            dir,
            limit_mib: u32::MAX,
        })
    }
}

impl Drop for MemoryCgroups {
    fn drop(&mut self) {
        let made = self
            .made
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only empty cgroups can go; one still holding a process stays, harmlessly.
        while let Some(dir) = made.pop() {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// v2: moves this process into `own/agent`, hands the memory controller to `own`'s
/// children, and returns `own` as the base for slots.
fn v2_delegate(own: &Path) -> Result<MemoryCgroups, CgroupError> {
    let controllers = own.join("cgroup.controllers");
    let available =
        std::fs::read_to_string(&controllers).map_err(io_error("read", &controllers))?;
    if !available.split_whitespace().any(|c| c == "memory") {
        return Err(CgroupError::NoController {
            dir: own.to_path_buf(),
        });
    }
    let agent = own.join("agent");
    mkdir(&agent)?;
    let procs = agent.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string()).map_err(io_error("join", &procs))?;
    let control = own.join("cgroup.subtree_control");
    if let Err(source) = std::fs::write(&control, "+memory") {
        // Another process shares our cgroup (it cannot be delegated to us): go back.
        let back = own.join("cgroup.procs");
        let _ = std::fs::write(&back, std::process::id().to_string());
        let _ = std::fs::remove_dir(&agent);
        return Err(CgroupError::Io {
            what: "enable the memory controller in",
            path: control,
            source,
        });
    }
    Ok(MemoryCgroups {
        version: Version::V2,
        base: own.to_path_buf(),
        made: std::sync::Mutex::new(Vec::new()),
    })
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Io {
            what: "create",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

impl SlotCgroup {
    /// Sets the slot's limit to `mib` (0: none), writing only when it changes.
    pub fn set_limit(&mut self, mib: u32) -> io::Result<()> {
        if mib == self.limit_mib {
            return Ok(());
        }
        let (file, value) = match (self.version, mib) {
            (Version::V1, 0) => ("memory.limit_in_bytes", "-1".to_string()),
            (Version::V1, _) => ("memory.limit_in_bytes", (u64::from(mib) << 20).to_string()),
            (Version::V2, 0) => ("memory.max", "max".to_string()),
            (Version::V2, _) => ("memory.max", (u64::from(mib) << 20).to_string()),
        };
        std::fs::write(self.dir.join(file), value)?;
        if self.version == Version::V2 {
            // No swap beyond the limit either: a task over its memory ends, it does
            // not slow the node down. (v1 needs swap accounting for this; skipped.)
            let swap = if mib == 0 { "max" } else { "0" };
            let _ = std::fs::write(self.dir.join("memory.swap.max"), swap);
        }
        self.limit_mib = mib;
        Ok(())
    }

    /// How many processes the kernel has killed in this cgroup for want of memory.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|line| line.strip_prefix("oom_kill "))
                    .and_then(|count| count.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// The limit in force, in MiB (0: none).
    pub fn limit_mib(&self) -> u32 {
        if self.limit_mib == u32::MAX {
            0
        } else {
            self.limit_mib
        }
    }
}

/// The subcommand a memory-limited task starts through.
pub const EXEC_SUBCOMMAND: &str = "cgroup-exec";

/// `cgroup-exec PROCS PROGRAM ARGV0 ARGS…` (the arguments after the subcommand): joins
/// the cgroup whose `cgroup.procs` file is PROCS, then becomes PROGRAM (with ARGV0 as
/// its name). Returns only if it cannot, with the exit code a shell would give.
pub fn exec_main(args: &[OsString]) -> i32 {
    let [procs, program, argv0, rest @ ..] = args else {
        eprintln!("saker {EXEC_SUBCOMMAND}: expected PROCS PROGRAM ARGV0 ARGS…");
        return 2;
    };
    if let Err(error) = std::fs::write(procs, std::process::id().to_string()) {
        // The slot's books still hold the memory; only the limit is lost.
        eprintln!(
            "saker: could not join the memory cgroup {}: {error}; running without a limit",
            Path::new(procs).display()
        );
    }
    let error = std::process::Command::new(program)
        .arg0(argv0)
        .args(rest)
        .exec();
    eprintln!("saker: cannot run {}: {error}", program.to_string_lossy());
    if error.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Where `program` is, as `execvp` would look it up in `path` (a `PATH` value): itself
/// when it names a path, else the first executable file of that name in `path`.
pub fn resolve(program: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            nix::unistd::access(candidate, nix::unistd::AccessFlags::X_OK).is_ok()
                && candidate.is_file()
        })
}

impl SlotCgroup {
    /// The file a process writes its pid to, to join this cgroup.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::resources::discover::SystemProbe;

    struct Files(HashMap<&'static str, &'static str>);

    impl Probe for Files {
        fn env(&self, _: &str) -> Option<String> {
            None
        }
        fn read(&self, path: &Path) -> Option<String> {
            self.0.get(path.to_str()?).map(|s| s.to_string())
        }
        fn nvidia_smi(&self) -> Option<String> {
            None
        }
        fn allowed_cpus(&self) -> Option<Vec<u32>> {
            None
        }
    }

    #[test]
    fn the_own_cgroup_is_found_in_either_hierarchy() {
        let v2 = Files([("/proc/self/cgroup", "0::/user.slice/job\n")].into());
        assert_eq!(
            own_cgroup(&v2),
            Some((Version::V2, "/sys/fs/cgroup/user.slice/job".into()))
        );
        let v1 = Files(
            [
                (
                    "/proc/self/cgroup",
                    "5:cpu,cpuacct:/\n4:memory:/slurm/uid_0/job_7\n0::/\n",
                ),
                (
                    "/proc/self/mountinfo",
                    "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                     31 25 0:27 / /mnt/cg/memory rw,relatime - cgroup cgroup rw,memory\n",
                ),
                (
                    "/mnt/cg/memory/slurm/uid_0/job_7/memory.limit_in_bytes",
                    "1073741824\n",
                ),
            ]
            .into(),
        );
        assert_eq!(
            own_cgroup(&v1),
            Some((Version::V1, "/mnt/cg/memory/slurm/uid_0/job_7".into()))
        );
        assert_eq!(own_memory_limit(&v1), Some(1 << 30));
    }

    /// On a machine where this process may make memory cgroups (root, v1 or a
    /// delegated v2), a slot's limit is written and read back. Elsewhere the test
    /// checks the refusal is a typed error, which is what an agent logs.
    #[test]
    fn a_slot_limit_is_written_where_the_agent_may() {
        let name = format!("saker-test-{}", std::process::id());
        let groups = match MemoryCgroups::create(&name, &SystemProbe) {
            Ok(groups) => groups,
            Err(error) => {
                assert!(!error.to_string().is_empty());
                return;
            }
        };
        let mut slot = groups.slot(0).unwrap();
        slot.set_limit(64).unwrap();
        assert_eq!(slot.limit_mib(), 64);
        let file = match slot.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        let written = std::fs::read_to_string(slot.dir.join(file)).unwrap();
        assert_eq!(written.trim(), (64u64 << 20).to_string());
        slot.set_limit(0).unwrap();
        assert_eq!(slot.oom_kills(), 0);
        let dir = slot.dir.clone();
        drop(groups);
        assert!(
            !dir.exists(),
            "an empty slot cgroup is removed with the agent's"
        );
    }
}
