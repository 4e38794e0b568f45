//! Turning a job definition plus one assignment into a concrete [`Launch`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use saker_wire::messages::{Assignment, JobDef, Payload};

use crate::process::Launch;

/// Replaces every `{index}` in `arg` with the array index; borrows when there is
/// nothing to replace (all but one or two arguments, typically).
pub fn expand_index(arg: &str, index: u32) -> std::borrow::Cow<'_, str> {
    if arg.contains("{index}") {
        std::borrow::Cow::Owned(arg.replace("{index}", &index.to_string()))
    } else {
        std::borrow::Cow::Borrowed(arg)
    }
}

/// Builds the launch for `assignment` of `job`. Array tasks get `{index}` replaced and
/// `SAKER_ARRAY_INDEX` set; every task gets `SAKER_TASK_ID` and `SAKER_ATTEMPT_ID`.
pub fn build_launch(job: &JobDef, assignment: &Assignment, spill_dir: &Path) -> Launch {
    let Payload::Command(command) = &job.payload;
    let argv = if job.is_array {
        command
            .argv
            .iter()
            .map(|a| expand_index(a, assignment.index).into_owned())
            .collect()
    } else {
        command.argv.clone()
    };
    let mut env: Vec<(String, String)> = command
        .env
        .iter()
        .map(|v| (v.key.clone(), v.value.clone()))
        .collect();
    env.push(("SAKER_TASK_ID".into(), assignment.task.to_string()));
    env.push(("SAKER_ATTEMPT_ID".into(), assignment.attempt.to_string()));
    if job.is_array {
        env.push(("SAKER_ARRAY_INDEX".into(), assignment.index.to_string()));
    }
    Launch {
        argv,
        env,
        cwd: command.cwd.as_ref().map(PathBuf::from),
        time_limit: (job.time_limit_ms > 0).then(|| Duration::from_millis(job.time_limit_ms)),
        inline_limit: job.inline_output_bytes as usize,
        spill_dir: spill_dir.to_path_buf(),
        spill_stem: format!("t{}.a{}", assignment.task, assignment.attempt),
    }
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
            time_limit_ms: 0,
            inline_output_bytes: 10,
            is_array,
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
        assert_eq!(launch.argv, ["echo", "in-42.dat", "4242"]);
        assert!(
            launch
                .env
                .contains(&("SAKER_ARRAY_INDEX".into(), "42".into()))
        );
        assert!(launch.env.contains(&("SAKER_TASK_ID".into(), "9".into())));
        assert!(launch.env.contains(&("A".into(), "b".into())));
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
        assert_eq!(launch.argv, ["echo", "in-{index}.dat", "{index}{index}"]);
        assert!(!launch.env.iter().any(|(k, _)| k == "SAKER_ARRAY_INDEX"));
    }
}
