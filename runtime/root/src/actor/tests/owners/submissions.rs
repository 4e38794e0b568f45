//! `Submissions` on its own: what it refuses (whole), how it numbers and keeps what it
//! accepts, estimate classes, task-file lines and updates.

use super::*;
use crate::client::{ErrorKind, JobUpdate, SubmitWait, UpdateReport};
use crate::spec::{Commands, JobLines};

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
    let mut submissions = new_submissions();
    let mut wide = single(&["solve"]);
    wide.spec.cores = 5;
    let refused = submissions
        .submit(&mut owned.ctx, vec![single(&["true"]), wide], None)
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
    let mut submissions = new_submissions();
    let mut licensed = single(&["solve"]);
    licensed.spec.resources = [("licence".to_owned(), 1)].into();
    let refused = submissions
        .submit(&mut owned.ctx, vec![licensed.clone()], None)
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
    owned.ctx.pilot.expected_node = Some(saker_actors::resources::NodeResources {
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
    let mut submissions = new_submissions();
    owned.clock.advance(Duration::from_secs(3));
    let accepted = submissions
        .submit(
            &mut owned.ctx,
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
    let mut submissions = new_submissions();
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
    let mut submissions = new_submissions();
    let big = array(&["true"], "1-1001");
    let refused = submissions
        .submit(&mut owned.ctx, vec![big.clone()], Some(SubmitWait::Results))
        .expect_err("too many results to wait for");
    assert!(
        refused.message.contains("at most 1000 tasks"),
        "{refused:?}"
    );
    assert_nothing_kept(&owned, &submissions);
    // Counts need no results kept: the same submission is fine.
    let accepted = submissions
        .submit(&mut owned.ctx, vec![big], Some(SubmitWait::Counts))
        .expect("accepted");
    assert_eq!(accepted.jobs[0].count, 1001);
}

#[test]
fn task_file_lines_become_one_job_each_under_one_record() {
    let mut owned = two_nodes();
    let mut submissions = new_submissions();
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
        .submit_lines(&mut owned.ctx, Box::new(lines))
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
    let mut submissions = new_submissions();
    let jobs = accept(&mut owned, &mut submissions, vec![array(&["sleep"], "1-4")]);
    // Node 1 holds the job's definition (it was sent work of it); node 2 does not.
    owned
        .ctx
        .nodes
        .get_mut(&NodeId(1))
        .unwrap()
        .known_jobs
        .insert(jobs[0]);
    submissions
        .jobs
        .get_mut(&jobs[0])
        .unwrap()
        .known_by
        .push(NodeId(1));
    let update = JobUpdate {
        time_limit: Some(Some(Duration::from_secs(90))),
        ..Default::default()
    };
    let (reply, mut answer) = oneshot::channel::<Result<UpdateReport, _>>();
    submissions.on_update(&mut owned.ctx, jobs.clone(), update, reply);
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
    let mut submissions = new_submissions();
    let jobs = accept(&mut owned, &mut submissions, vec![single(&["true"])]);
    let update = JobUpdate {
        priority: Some(9),
        ..Default::default()
    };
    let (reply, mut answer) = oneshot::channel::<Result<UpdateReport, _>>();
    submissions.on_update(&mut owned.ctx, vec![jobs[0], JobId(7)], update, reply);
    let refused = answer.try_recv().unwrap().expect_err("job 7 is unknown");
    assert_eq!(refused.kind, ErrorKind::UnknownJob);
    assert!(owned.appended().is_empty(), "nothing journaled");
    assert_eq!(owned.ctx.core.job_spec(jobs[0]).unwrap().priority, 0);
}
