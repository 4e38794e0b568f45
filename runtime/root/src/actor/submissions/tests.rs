//! `Submissions` on its own: what it refuses (whole), how it numbers and keeps what it
//! accepts, estimate classes, task-file lines, updates, and how far its jobs have come
//! (their counts, the waits on them, memory given back).

use std::sync::Arc;

use saker_wire::messages::{Assignment, Payload};

use super::Submissions;
use crate::actor::testing::*;
use saker_client::results::{ResultRecord, TerminalState};
use saker_client::spec::{Commands, JobLines};
use saker_client::{ErrorKind, JobUpdate, SubmitWait, UpdateReport, WaitReport};

/// Two nodes of four cores, both joined: the pilot knows its widest node.
fn two_nodes() -> Owned {
    let mut owned = Owned::new();
    owned.add_node(1, 4);
    owned.add_node(2, 4);
    owned
}

/// Nothing of a refused submission is left anywhere.
fn assert_nothing_kept(owned: &Owned, submissions: &Submissions) {
    let counts = owned.ctx.core.counts();
    assert_eq!((counts.submitted, counts.queued), (0, 0), "nothing queued");
    assert_eq!(owned.ctx.core.next_job(), JobId(1), "no job id used up");
    assert_eq!(submissions.jobs.len(), 0, "nothing in the job table");
    assert_eq!(submissions.tasks, 0, "no task counted");
    assert!(
        owned.port.with(|r| r.appends.is_empty()),
        "nothing journaled"
    );
}

#[test]
fn a_job_wider_than_the_widest_node_is_refused_with_the_rest_of_its_submission() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let mut wide = single(&["solve"]);
    wide.spec.cores = 5;
    let refused = submissions
        .submit(
            &mut owned.ctx,
            owned.nodes.offered(),
            vec![single(&["true"]), wide],
            None,
        )
        .expect_err("no node has 5 cores");
    assert_eq!(refused.kind, ErrorKind::InvalidSpec);
    assert!(
        refused.message.contains("job 1 of the submission")
            && refused.message.contains("the widest node has 4"),
        "{refused:?}"
    );
    assert_nothing_kept(&owned, &submissions);
    // As wide as the widest node is fine.
    let mut widest = single(&["solve"]);
    widest.spec.cores = 4;
    assert_eq!(
        accept(&mut owned, &mut submissions, vec![widest]),
        [JobId(1)]
    );
}

#[test]
fn a_resource_no_node_offers_is_refused_and_its_name_is_not_numbered() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let mut licensed = single(&["solve"]);
    licensed.spec.resources = [("licence".to_owned(), 1)].into();
    let refused = submissions
        .submit(
            &mut owned.ctx,
            owned.nodes.offered(),
            vec![licensed.clone()],
            None,
        )
        .expect_err("no node offers a licence");
    assert!(
        refused
            .message
            .contains("\"licence\", which no node offers"),
        "{refused:?}"
    );
    assert_eq!(submissions.resource_names.known("licence"), None);
    assert_nothing_kept(&owned, &submissions);
    // A pilot that expects nodes with licences numbers the name when it accepts.
    submissions.expected_node = Some(saker_actors::resources::NodeResources {
        cores: 4,
        custom: vec![("licence".to_owned(), 2)],
        ..Default::default()
    });
    accept(&mut owned, &mut submissions, vec![licensed]);
    let licence = submissions.resource_names.known("licence");
    assert_eq!(licence, saker_core::ResourceKind::custom(0));
    let needs = owned.ctx.core.job_spec(JobId(1)).expect("queued").resources;
    assert_eq!(needs.get(licence.expect("numbered")), 1);
}

#[test]
fn an_accepted_submission_is_numbered_in_order_counted_and_kept_for_the_agents() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    owned.clock.advance(Duration::from_secs(3));
    let accepted = submissions
        .submit(
            &mut owned.ctx,
            owned.nodes.offered(),
            vec![array(&["echo", "{index}"], "10-12"), single(&["true"])],
            None,
        )
        .expect("accepted");
    let jobs: Vec<(u32, u64, u64)> = accepted
        .jobs
        .iter()
        .map(|job| (job.job.0, job.first_task.0, job.count))
        .collect();
    assert_eq!(jobs, [(1, 1, 3), (2, 4, 1)]);
    // One record a job, for the caller to journal: the owner appends nothing itself.
    let submitted_at = UNIX_ORIGIN_US + 3_000_000;
    let records: Vec<(u32, u64, u32, u64)> = accepted
        .records
        .iter()
        .map(|record| match record {
            Record::Submit {
                job,
                first_task,
                count,
                submitted_unix_us,
                ..
            } => (job.0, first_task.0, *count, *submitted_unix_us),
            other => panic!("not a submission: {other:?}"),
        })
        .collect();
    assert_eq!(records, [(1, 1, 3, submitted_at), (2, 4, 1, submitted_at)]);
    assert!(owned.port.with(|r| r.appends.is_empty()));
    assert_eq!(submissions.tasks, 4);
    assert_eq!(owned.ctx.core.counts().queued, 4);
    let entry = submissions.jobs.get(&JobId(1)).expect("kept");
    assert_eq!((entry.count, entry.submitted_us), (3, submitted_at));
    assert_eq!(entry.array_index(2), Some(12), "offsets map to indices");
    let Payload::Command(command) = &entry.def.payload else {
        panic!("a command job");
    };
    assert_eq!(command.argv, ["echo", "{index}"]);
    assert!(entry.def.is_array);
    // A later submission goes on from there.
    assert_eq!(
        accept(&mut owned, &mut submissions, vec![single(&["true"])]),
        [JobId(3)]
    );
    assert_eq!(submissions.tasks, 5);
}

#[test]
fn jobs_with_the_same_tags_in_any_order_share_one_estimate_class() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let tagged = |tags: &[&str]| {
        let mut request = single(&["true"]);
        request.spec.tags = tags.iter().map(|t| (*t).to_owned()).collect();
        request
    };
    let jobs = accept(
        &mut owned,
        &mut submissions,
        vec![
            tagged(&["b", "a"]),
            tagged(&[]),
            tagged(&["a", "b", "a"]),
            tagged(&["c"]),
        ],
    );
    let classes: Vec<u32> = jobs
        .iter()
        .map(|job| owned.ctx.core.job_spec(*job).expect("queued").class)
        .collect();
    assert_eq!(classes, [1, 0, 1, 2]);
}

#[test]
fn waiting_for_results_takes_only_small_submissions() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let big = array(&["true"], "1-1001");
    let refused = submissions
        .submit(
            &mut owned.ctx,
            owned.nodes.offered(),
            vec![big.clone()],
            Some(SubmitWait::Results),
        )
        .expect_err("too many results to wait for");
    assert!(
        refused.message.contains("at most 1000 tasks"),
        "{refused:?}"
    );
    assert_nothing_kept(&owned, &submissions);
    // Counts need no results kept: the same submission is fine.
    let accepted = submissions
        .submit(
            &mut owned.ctx,
            owned.nodes.offered(),
            vec![big],
            Some(SubmitWait::Counts),
        )
        .expect("accepted");
    assert_eq!(accepted.jobs[0].count, 1001);
}

#[test]
fn task_file_lines_become_one_job_each_under_one_record() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    accept(&mut owned, &mut submissions, vec![single(&["first"])]);
    let mut commands = Commands::new();
    for word in ["a", "b", "c"] {
        commands.push(["echo", word], Default::default()).unwrap();
    }
    let lines = JobLines {
        template: TaskSpec::new(Vec::new()),
        inline_output: None,
        commands,
    };
    let (submitted, record) = submissions
        .submit_lines(&mut owned.ctx, owned.nodes.offered(), Box::new(lines))
        .expect("accepted");
    assert_eq!(
        (submitted.first_job, submitted.first_task.0, submitted.count),
        (JobId(2), 2, 3)
    );
    let Record::SubmitLines {
        first_job, lines, ..
    } = record
    else {
        panic!("one record for the batch: {record:?}");
    };
    assert_eq!((first_job, lines.len()), (JobId(2), 3));
    assert_eq!(submissions.tasks, 4);
    assert_eq!(owned.ctx.core.counts().queued, 4);
    let def = submissions.jobs.def(JobId(4)).expect("the last line's job");
    let Payload::Command(command) = &def.payload else {
        panic!("a command job");
    };
    assert_eq!(command.argv, ["echo", "c"]);
}

#[test]
fn a_new_time_limit_reaches_the_nodes_holding_the_job_and_is_answered_once_durable() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let jobs = accept(&mut owned, &mut submissions, vec![array(&["sleep"], "1-4")]);
    // Node 1 holds the job's definition (it was sent work of it); node 2 does not.
    let task = Assignment {
        task: TaskId(1),
        attempt: AttemptId(1),
        job: jobs[0],
        index: 1,
    };
    owned
        .nodes
        .dispatch(&mut owned.ctx, NodeId(1), vec![task], None, |job| {
            submissions.definition(job)
        });
    owned.sent();
    let update = JobUpdate {
        time_limit: Some(Some(Duration::from_secs(90))),
        ..Default::default()
    };
    let (reply, mut answer) = oneshot::channel::<Result<UpdateReport, _>>();
    // The router sends the new definitions to the nodes holding the old.
    for def in submissions.on_update(&mut owned.ctx, jobs.clone(), update, reply) {
        owned.nodes.redefine(&mut owned.ctx, &def);
    }
    let sent = owned.sent();
    let [(1, ToAgent::Dispatch(redefined))] = sent.as_slice() else {
        panic!("the new definition to node 1 only: {sent:?}");
    };
    assert!(redefined.tasks.is_empty());
    assert_eq!(redefined.jobs[0].time_limit_ms, 90_000);
    assert_eq!(
        submissions.jobs.def(jobs[0]).unwrap().time_limit_ms,
        90_000,
        "the table keeps the new definition"
    );
    let spec = owned.ctx.core.job_spec(jobs[0]).unwrap();
    assert_eq!(spec.time_limit, Some(90_000_000), "the core plans with it");
    let mut appends = owned.appends();
    assert_eq!(appends.len(), 1, "one append");
    let (records, after) = appends.remove(0);
    assert!(
        matches!(&records[..], [Record::Update { job, .. }] if *job == jobs[0]),
        "{records:?}"
    );
    assert!(answer.try_recv().is_err(), "answered before durable");
    assert!(after.finish(Ok(Vec::new())).is_none());
    assert_eq!(
        answer.try_recv().unwrap().unwrap(),
        UpdateReport { updated: 1 }
    );
}

#[test]
fn an_update_naming_an_unknown_job_changes_nothing() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let jobs = accept(&mut owned, &mut submissions, vec![single(&["true"])]);
    let update = JobUpdate {
        priority: Some(9),
        ..Default::default()
    };
    let (reply, mut answer) = oneshot::channel::<Result<UpdateReport, _>>();
    let redefined = submissions.on_update(&mut owned.ctx, vec![jobs[0], JobId(7)], update, reply);
    assert!(redefined.is_empty());
    let refused = answer.try_recv().unwrap().expect_err("job 7 is unknown");
    assert_eq!(refused.kind, ErrorKind::UnknownJob);
    assert!(owned.appended().is_empty(), "nothing journaled");
    assert_eq!(owned.ctx.core.job_spec(jobs[0]).unwrap().priority, 0);
}

/// A durable result of task `task` of job `job`, as the router hands it on.
fn durable(job: JobId, task: u64, state: TerminalState) -> Arc<ResultRecord> {
    let mut record = saker_client::results::sample_record(task);
    record.job = job;
    record.state = state;
    Arc::new(record)
}

#[test]
fn a_wait_is_answered_once_its_jobs_results_are_durable_not_before() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let jobs = accept(
        &mut owned,
        &mut submissions,
        vec![array(&["true"], "1-2"), single(&["true"])],
    );
    let (reply, mut everything) = oneshot::channel();
    submissions.wait(None, reply);
    let (reply, mut first) = oneshot::channel();
    submissions.wait(Some(vec![jobs[0]]), reply);
    let (reply, mut unknown) = oneshot::channel();
    submissions.wait(Some(vec![JobId(9)]), reply);
    let refused = unknown.try_recv().unwrap().expect_err("job 9 is unknown");
    assert_eq!(refused.kind, ErrorKind::UnknownJob);
    assert_eq!(submissions.progress.waiting(), 2);
    submissions.on_durable(&[durable(jobs[0], 1, TerminalState::Succeeded)]);
    assert!(first.try_recv().is_err(), "one task of job 1 is left");
    submissions.on_durable(&[durable(jobs[0], 2, TerminalState::Failed)]);
    assert_eq!(
        first.try_recv().unwrap().unwrap(),
        WaitReport {
            succeeded: 1,
            failed: 1,
            cancelled: 0
        }
    );
    assert!(everything.try_recv().is_err(), "job 2 is left");
    assert_eq!(
        submissions.jobs.final_counts(&jobs[0]),
        Some((2, 1, 0)),
        "job 1 is done: its entry went, its counts stay"
    );
    submissions.on_durable(&[durable(jobs[1], 3, TerminalState::Cancelled)]);
    assert_eq!(
        everything.try_recv().unwrap().unwrap(),
        WaitReport {
            succeeded: 1,
            failed: 1,
            cancelled: 1
        }
    );
    assert_eq!(submissions.progress.waiting(), 0);
    let totals = submissions.totals();
    assert_eq!((totals.durable, totals.failed, totals.cancelled), (3, 1, 1));
}

#[test]
fn memory_goes_back_once_an_idle_pilot_has_ended_enough_results() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    submissions.progress.release_after(1);
    let jobs = accept(
        &mut owned,
        &mut submissions,
        vec![single(&["true"]), single(&["more"])],
    );
    // Work left: however many results ended, nothing is given back.
    let release = submissions.on_durable(&[durable(jobs[0], 1, TerminalState::Succeeded)]);
    assert!(!release, "work is left");
    let release = submissions.on_durable(&[durable(jobs[1], 2, TerminalState::Succeeded)]);
    assert!(release, "idle now");
    assert!(
        !submissions.on_durable(&[]),
        "not again without more results"
    );
}

/// A journal's submissions: job 1 (an array of three), jobs 2 and 3 (two lines of a
/// task file), job 4 (one task); job 1 updated, job 4 cancelled.
fn journal() -> Vec<Record> {
    let mut commands = Commands::new();
    for word in ["a", "b"] {
        commands.push(["echo", word], Default::default()).unwrap();
    }
    let lines = JobLines {
        template: TaskSpec::new(Vec::new()),
        inline_output: None,
        commands,
    };
    vec![
        Record::Submit {
            job: JobId(1),
            first_task: TaskId(1),
            count: 3,
            submitted_unix_us: UNIX_ORIGIN_US,
            request: Box::new(array(&["run", "{index}"], "1-3")),
        },
        Record::SubmitLines {
            first_job: JobId(2),
            first_task: TaskId(4),
            submitted_unix_us: UNIX_ORIGIN_US,
            lines: Arc::new(lines),
        },
        Record::Submit {
            job: JobId(4),
            first_task: TaskId(6),
            count: 1,
            submitted_unix_us: UNIX_ORIGIN_US,
            request: Box::new(single(&["sleep", "60"])),
        },
        Record::Update {
            job: JobId(1),
            update: JobUpdate {
                priority: Some(5),
                ..Default::default()
            },
            unix_us: UNIX_ORIGIN_US,
        },
        Record::Cancel {
            job: JobId(4),
            unix_us: UNIX_ORIGIN_US,
        },
    ]
}

#[test]
fn resumed_jobs_get_their_ids_again_with_their_ended_tasks_and_updates() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let mut journaled = super::Journaled::default();
    for (position, record) in journal().into_iter().enumerate() {
        journaled.gather(position, record);
    }
    // Task 1 of job 1 and job 2's one task ended; task 2 failed once before.
    let ended = [
        (9, JobId(1), TaskId(1), TerminalState::Succeeded),
        (10, JobId(2), TaskId(4), TerminalState::Failed),
    ];
    let earlier = [(
        TaskId(2),
        saker_core::EarlierAttempts {
            failures: 1,
            replays: 0,
        },
    )]
    .into();
    let resumed = submissions
        .resume(&mut owned.ctx, journaled, ended.into_iter(), &earlier)
        .expect("one pilot's journal");
    assert_eq!((resumed.jobs, resumed.tasks, resumed.finished), (4, 6, 2));
    let core = &owned.ctx.core;
    let first = core.job_counts(JobId(1)).expect("job 1");
    assert_eq!((first.succeeded, first.queued), (1, 2));
    assert_eq!(core.job_spec(JobId(1)).unwrap().priority, 5, "updated");
    assert_eq!(core.counts().retries, 1, "what task 2 used up");
    assert!(core.job_counts(JobId(2)).unwrap().is_finished());
    assert_eq!(core.job_counts(JobId(3)).unwrap().queued, 1);
    let cancelled = core.job_counts(JobId(4)).unwrap();
    assert!(cancelled.cancel_requested && cancelled.is_finished());
    // Their durable results are counted: job 2 is done, the rest are not.
    let totals = submissions.totals();
    assert_eq!((totals.durable, totals.failed), (2, 1));
    assert_eq!(submissions.jobs.final_counts(&JobId(2)), Some((1, 1, 0)));
    assert_eq!(submissions.tasks, 6);
    let Payload::Command(line) = &submissions.definition(JobId(3)).unwrap().payload else {
        panic!("a command");
    };
    assert_eq!(line.argv, ["echo", "b"], "a line's job is its command");
    // New jobs go on from there.
    assert_eq!(
        accept(&mut owned, &mut submissions, vec![single(&["more"])]),
        [JobId(5)]
    );
}

#[test]
fn a_journal_that_is_not_one_pilots_history_is_refused() {
    let journaled = || {
        let mut journaled = super::Journaled::default();
        for (position, record) in journal().into_iter().enumerate() {
            journaled.gather(position, record);
        }
        journaled
    };
    let resume = |journaled, ended: &[(usize, JobId, TaskId, TerminalState)]| {
        let mut owned = Owned::new();
        let mut submissions = Submissions::new(None, false);
        let no_earlier = Default::default();
        submissions
            .resume(
                &mut owned.ctx,
                journaled,
                ended.iter().copied(),
                &no_earlier,
            )
            .map(|_| ())
    };
    let unknown = [(7, JobId(9), TaskId(30), TerminalState::Succeeded)];
    assert!(matches!(
        resume(journaled(), &unknown),
        Err(crate::actor::restore::RestoreError::UnknownJob { position: 7, .. })
    ));
    let mut bad_letters = journaled();
    bad_letters.gather(
        5,
        Record::Finished {
            job: JobId(1),
            states: "s?s".into(),
        },
    );
    assert!(matches!(
        resume(bad_letters, &[]),
        Err(crate::actor::restore::RestoreError::FinishedState { position: 5, .. })
    ));
    // A job journaled with ids the core would not give it.
    let mut gap = super::Journaled::default();
    gap.gather(
        0,
        Record::Submit {
            job: JobId(2),
            first_task: TaskId(1),
            count: 1,
            submitted_unix_us: UNIX_ORIGIN_US,
            request: Box::new(single(&["true"])),
        },
    );
    assert!(matches!(
        resume(gap, &[]),
        Err(crate::actor::restore::RestoreError::IdMismatch { position: 0, .. })
    ));
}

#[test]
fn a_job_a_compaction_finished_is_terminal_whatever_its_results_say() {
    let mut owned = two_nodes();
    let mut submissions = Submissions::new(None, false);
    let mut journaled = super::Journaled::default();
    for (position, record) in journal().into_iter().enumerate() {
        journaled.gather(position, record);
    }
    journaled.gather(
        5,
        Record::Finished {
            job: JobId(1),
            states: "sfc".into(),
        },
    );
    // A kept result of the finished job is not counted twice.
    let ended = [(6, JobId(1), TaskId(1), TerminalState::Succeeded)];
    let resumed = submissions
        .resume(
            &mut owned.ctx,
            journaled,
            ended.into_iter(),
            &Default::default(),
        )
        .expect("one pilot's journal");
    assert_eq!(resumed.finished, 3);
    assert_eq!(resumed.compacted, [(JobId(1), TaskId(1), 3)]);
    assert_eq!(submissions.jobs.final_counts(&JobId(1)), Some((3, 1, 1)));
    assert!(owned.ctx.core.job_counts(JobId(1)).unwrap().is_finished());
}
