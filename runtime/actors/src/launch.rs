//! Turning a job definition plus one assignment into a concrete [`Launch`], and a
//! start the agent's core decided into the [`Work`] a slot's thread runs: the shell's
//! side of a start (see [`crate::board`] for where the line is drawn).

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use saker_wire::messages::{Assignment, INDEX_PLACEHOLDER, JobDef, Payload};

use crate::executor::Work;
use crate::process::{Launch, decimal};
use crate::resources::Binding;
use crate::worker::Call;

/// Where this node's attempts run and write: what a start needs beyond the decision.
#[derive(Debug, Clone)]
pub struct Places {
    pub node: u32,
    /// Where output past the inline limit is spilled (and gangs' files go).
    pub spill_dir: PathBuf,
    /// Where workers' logs go: `workers/` beside the spilled output.
    pub log_dir: PathBuf,
    /// The node's scratch directory for data items (`SAKER_SCRATCH`).
    pub scratch: PathBuf,
    /// The node's object memory, where objects are looked for first
    /// (`SAKER_OBJECTS`), if it has one.
    pub objects: Option<PathBuf>,
}

impl Places {
    pub fn new(node: u32, spill_dir: PathBuf, scratch: PathBuf) -> Places {
        let log_dir = spill_dir.parent().unwrap_or(&spill_dir).join("workers");
        Places {
            node,
            spill_dir,
            log_dir,
            scratch,
            objects: None,
        }
    }
}

/// What task `assignment` of `job` runs, bound by `binding` and holding `cores`: a
/// command of its own, or a call on the slot's worker.
pub fn task_work(
    places: &Places,
    assignment: &Assignment,
    job: Arc<JobDef>,
    binding: &Binding,
    cores: u32,
) -> Work {
    match &job.payload {
        Payload::Command(_) => {
            let mut launch = build_launch(&job, assignment, &places.spill_dir);
            // Which agent ran it: for the task's own logs, and for tests of where work
            // went.
            launch.set_var_number(b"SAKER_NODE", places.node.into());
            bind_launch(&mut launch, binding, cores);
            if !job.reads.is_empty() || !job.writes.is_empty() {
                let scratch = places.scratch.as_os_str().as_encoded_bytes();
                launch.set_var(b"SAKER_SCRATCH", scratch);
            }
            Work::Command(Box::new(launch))
        }
        Payload::Function(_) => Work::Call(Box::new(Call {
            cores,
            time_limit: (job.time_limit_ms > 0).then(|| Duration::from_millis(job.time_limit_ms)),
            task: assignment.task,
            attempt: assignment.attempt,
            node: places.node,
            log_dir: places.log_dir.clone(),
            scratch: places.scratch.clone(),
            objects: places.objects.clone(),
            job,
        })),
    }
}

/// Binds a command's launch to what its attempt holds: its GPUs and CPUs by
/// variables (the slot's thread pins it), and `OMP_NUM_THREADS` to its cores unless
/// the job or the agent's environment sets it (a 1-core task should not start a
/// thread per CPU of the node).
pub(crate) fn bind_launch(launch: &mut Launch, binding: &Binding, cores: u32) {
    for (name, value) in binding.variables() {
        launch.set_var(name.as_bytes(), value.as_bytes());
    }
    static INHERITED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let inherited = *INHERITED.get_or_init(|| crate::spawn::inherits(b"OMP_NUM_THREADS"));
    if !inherited && !launch.sets_var(b"OMP_NUM_THREADS") {
        launch.set_var_number(b"OMP_NUM_THREADS", cores.into());
    }
}

/// `arg` with every `{index}` replaced by `index`, as
/// [`saker_wire::messages::expand_index`] has it, as bytes
/// with room for exactly one more: a C string's NUL, added in place.
fn expand_index_bytes(arg: &str, index: u32) -> Vec<u8> {
    let mut digits = [0u8; 20];
    let digits = decimal(index.into(), &mut digits);
    let count = arg.matches(INDEX_PLACEHOLDER).count();
    let len = arg.len() - count * INDEX_PLACEHOLDER.len() + count * digits.len();
    let mut bytes = Vec::with_capacity(len + 1);
    let mut pieces = arg.split(INDEX_PLACEHOLDER);
    bytes.extend_from_slice(pieces.next().unwrap_or_default().as_bytes());
    for piece in pieces {
        bytes.extend_from_slice(digits);
        bytes.extend_from_slice(piece.as_bytes());
    }
    bytes
}

/// Builds the launch for `assignment` of `job`. Array tasks get `{index}` replaced and
/// `SAKER_ARRAY_INDEX` set; every task gets `SAKER_TASK_ID` and `SAKER_ATTEMPT_ID`,
/// over any value of the job's own.
///
/// Each argument and variable is copied once, straight into the C string the spawn
/// passes on. One holding a NUL byte does not stop the launch being built: it fails to
/// start (see [`Launch::has_nul`]), as the attempt's own failure.
pub fn build_launch(job: &JobDef, assignment: &Assignment, spill_dir: &Path) -> Launch {
    let Payload::Command(command) = &job.payload else {
        // Calls go to workers (see `crate::worker`): as a command, nothing to run.
        return Launch::new(0, 0, spill_dir.to_path_buf(), String::new());
    };
    // The job's variables, three `SAKER_*` ones, and the board's `SAKER_NODE` and
    // `OMP_NUM_THREADS` (GPU and CPU lists, on nodes that bind them, grow it).
    let vars = command.env.len() + 5;
    // `t<task>.a<attempt>`, in one allocation.
    let mut spill_stem = String::with_capacity(2 * 20 + 3);
    _ = write!(spill_stem, "t{}.a{}", assignment.task, assignment.attempt);
    let mut launch = Launch::new(
        command.argv.len(),
        vars,
        spill_dir.to_path_buf(),
        spill_stem,
    );
    for arg in &command.argv {
        if job.is_array && arg.contains("{index}") {
            launch.arg_bytes(expand_index_bytes(arg, assignment.index));
        } else {
            launch.arg(arg.as_bytes());
        }
    }
    for var in &command.env {
        launch.set_var(var.key.as_bytes(), var.value.as_bytes());
    }
    launch.set_var_number(b"SAKER_TASK_ID", assignment.task.0);
    launch.set_var_number(b"SAKER_ATTEMPT_ID", assignment.attempt.0);
    if job.is_array {
        launch.set_var_number(b"SAKER_ARRAY_INDEX", assignment.index.into());
    }
    launch.cwd = command.cwd.as_ref().map(PathBuf::from);
    launch.time_limit = (job.time_limit_ms > 0).then(|| Duration::from_millis(job.time_limit_ms));
    launch.inline_limit = job.inline_output_bytes as usize;
    launch
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_wire::messages::{AttemptId, Command, EnvVar, JobId, Placement, Resources, TaskId};

    fn job(is_array: bool) -> JobDef {
        JobDef {
            job: JobId(1),
            payload: Payload::Command(Command {
                argv: vec![
                    "echo".into(),
                    "in-{index}.dat".into(),
                    "{index}{index}".into(),
                ],
                env: vec![EnvVar {
                    key: "A".into(),
                    value: "b".into(),
                }],
                cwd: None,
            }),
            resources: Resources::cores(1),
            placement: Placement::Single,
            hpc: None,
            time_limit_ms: 0,
            inline_output_bytes: 10,
            is_array,
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    #[test]
    fn array_tasks_get_their_index_substituted_and_exported() {
        let a = Assignment {
            task: TaskId(9),
            attempt: AttemptId(3),
            job: JobId(1),
            index: 42,
        };
        let launch = build_launch(&job(true), &a, Path::new("/tmp/out"));
        assert_eq!(launch.argv_strs(), ["echo", "in-42.dat", "4242"]);
        assert!(launch.env_strs().contains(&"SAKER_ARRAY_INDEX=42"));
        assert!(launch.env_strs().contains(&"SAKER_TASK_ID=9"));
        assert!(launch.env_strs().contains(&"A=b"));
        assert_eq!(launch.spill_stem, "t9.a3");
        assert_eq!(launch.time_limit, None);
    }

    #[test]
    fn single_tasks_keep_their_arguments_verbatim() {
        let a = Assignment {
            task: TaskId(9),
            attempt: AttemptId(3),
            job: JobId(1),
            index: 0,
        };
        let launch = build_launch(&job(false), &a, Path::new("/tmp/out"));
        assert_eq!(
            launch.argv_strs(),
            ["echo", "in-{index}.dat", "{index}{index}"]
        );
        assert!(
            !launch
                .env_strs()
                .iter()
                .any(|e| e.starts_with("SAKER_ARRAY_INDEX="))
        );
    }

    #[test]
    fn indices_are_substituted_as_expand_index_does() {
        for arg in [
            "",
            "{index}",
            "a{index}b{index}",
            "{index}}",
            "{{index}",
            "{ind{index}ex}",
        ] {
            for index in [0, 7, 42, u32::MAX] {
                let bytes = expand_index_bytes(arg, index);
                assert_eq!(
                    bytes,
                    saker_wire::messages::expand_index(arg, index).as_bytes(),
                    "{arg} {index}"
                );
                assert_eq!(bytes.capacity(), bytes.len() + 1, "room for the NUL only");
            }
        }
    }

    /// The variables as the spawn takes them: one `KEY=value` per key, the last value
    /// given winning, and Saker's own over the job's.
    #[test]
    fn a_variable_set_twice_keeps_its_last_value_only() {
        let mut job = job(true);
        let Payload::Command(command) = &mut job.payload else {
            unreachable!()
        };
        for (key, value) in [("A", "c"), ("SAKER_TASK_ID", "mine"), ("B", "d")] {
            command.env.push(EnvVar {
                key: key.into(),
                value: value.into(),
            });
        }
        let a = Assignment {
            task: TaskId(9),
            attempt: AttemptId(3),
            job: JobId(1),
            index: 42,
        };
        let mut launch = build_launch(&job, &a, Path::new("/tmp/out"));
        launch.set_var_number(b"SAKER_NODE", 5);
        launch.set_var_number(b"SAKER_NODE", 7); // as the board does, once
        assert_eq!(
            launch.env_strs(),
            [
                "A=c",
                "B=d",
                "SAKER_TASK_ID=9",
                "SAKER_ATTEMPT_ID=3",
                "SAKER_ARRAY_INDEX=42",
                "SAKER_NODE=7"
            ]
        );
    }

    /// A NUL byte (which a validated spec has not, but the agent does not trust that)
    /// makes the attempt fail to start, as its own failure; nothing panics.
    #[test]
    fn a_nul_byte_fails_the_attempt_without_a_panic() {
        use crate::process::{Control, Scratch, run};
        use saker_wire::messages::Outcome;
        let a = Assignment {
            task: TaskId(9),
            attempt: AttemptId(3),
            job: JobId(1),
            index: 42,
        };
        for (arg, value) in [("in-\0-{index}", "b"), ("x", "b\0"), ("{index}\0", "\0")] {
            let mut job = job(true);
            let Payload::Command(command) = &mut job.payload else {
                unreachable!()
            };
            command.argv[1] = arg.into();
            command.env[0].value = value.into();
            let launch = build_launch(&job, &a, Path::new("/tmp/out"));
            assert!(launch.has_nul(), "{arg:?} {value:?}");
            let finished = run(&launch, &Control::default(), &mut Scratch::default()).unwrap();
            let Outcome::SpawnFailed { reason } = finished.outcome else {
                panic!("{arg:?} {value:?}: {:?}", finished.outcome);
            };
            assert_eq!(
                reason,
                "could not start echo: a NUL byte in the command line or environment"
            );
        }
        let launch = build_launch(&job(true), &a, Path::new("/tmp/out"));
        assert!(!launch.has_nul());
    }
}
