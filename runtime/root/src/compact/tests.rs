use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use saker_client::results::sample_record;
use saker_client::spec::{JobRequest, TaskSpec};

#[test]
fn retention_is_written_as_users_write_it() {
    for (text, keep) in [
        ("all", KeepResults::All),
        ("none", KeepResults::Last(0)),
        ("0", KeepResults::Last(0)),
        ("1000000", KeepResults::Last(1_000_000)),
        ("90s", KeepResults::Within(Duration::from_secs(90))),
        ("30m", KeepResults::Within(Duration::from_secs(1800))),
        ("12h", KeepResults::Within(Duration::from_secs(12 * 3600))),
        ("7d", KeepResults::Within(Duration::from_secs(7 * 86_400))),
    ] {
        assert_eq!(text.parse::<KeepResults>().unwrap(), keep, "{text}");
        let again = keep.to_string().parse::<KeepResults>().unwrap();
        assert_eq!(again, keep, "{text}");
    }
    for bad in ["", "some", "7w", "-1", "d", "1.5d", "99999999999999999999d"] {
        let error = bad.parse::<KeepResults>().unwrap_err().to_string();
        assert!(error.contains("not a retention"), "{bad}: {error}");
    }
}

fn submit(job: u32, first_task: u64, count: u32) -> Record {
    Record::Submit {
        job: JobId(job),
        first_task: TaskId(first_task),
        count,
        submitted_unix_us: 1,
        request: Box::new(JobRequest::single(TaskSpec::new(vec!["true".into()]))),
    }
}

fn result(job: u32, task: u64, seq: u64, end_unix_us: u64) -> Record {
    let mut record = sample_record(task);
    record.job = JobId(job);
    record.seq = seq;
    record.end_time = saker_client::results::Timestamp::from_unix_micros(end_unix_us);
    if task == 2 {
        record.state = TerminalState::Failed;
    }
    Record::Result(Arc::new(record))
}

/// Job 1 (tasks 1, 2) done; job 2 (task 3) done; job 3 (tasks 4, 5) half done.
fn history() -> Vec<Record> {
    vec![
        Record::PilotStarted {
            pilot_id: "p".into(),
            saker_version: "0".into(),
            started_unix_us: 0,
        },
        submit(1, 1, 2),
        submit(2, 3, 1),
        submit(3, 4, 2),
        Record::Attempt {
            task: TaskId(2),
            note: saker_client::attempts::AttemptNote {
                attempt: 1,
                end: saker_client::attempts::AttemptEnd::Lost,
                reason: "lost".into(),
                exit_code: None,
                signal: None,
                node: None,
                start_time: None,
                end_time: saker_client::results::Timestamp::from_unix_micros(5),
            },
        },
        result(1, 1, 1, 100),
        result(1, 2, 2, 200),
        Record::Cancel {
            job: JobId(2),
            unix_us: 250,
        },
        result(2, 3, 3, 300),
        result(3, 4, 4, 400),
    ]
}

fn tasks(records: &[Record]) -> Vec<u64> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::Result(result) => Some(result.task.0),
            _ => None,
        })
        .collect()
}

#[test]
fn done_jobs_keep_their_states_and_results_follow_the_retention() {
    let all = compact(history(), &KeepResults::All, 1000);
    assert_eq!(tasks(&all.records), [1, 2, 3, 4]);
    assert!(all.dropped.is_empty());
    // The attempt note and the cancellation of done jobs are gone.
    assert!(
        !all.records
            .iter()
            .any(|r| matches!(r, Record::Attempt { .. }))
    );
    assert!(
        !all.records
            .iter()
            .any(|r| matches!(r, Record::Cancel { .. }))
    );
    let finished: Vec<_> = all
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Finished { job, states } => Some((job.0, states.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [(1, "sf"), (2, "s")]);
    assert!(matches!(
        all.records[0],
        Record::Compaction {
            next_seq: 5,
            compacted: 0,
            ..
        }
    ));

    let last = compact(history(), &KeepResults::Last(2), 1000);
    // Seqs 3 and 4 are the last two; task 4's job is not done and keeps it anyway.
    assert_eq!(tasks(&last.records), [3, 4]);
    assert_eq!(last.dropped, [(TaskId(1), 1), (TaskId(2), 2)]);
    assert_eq!((last.compacted_total, last.compacted_through), (2, 2));

    let recent = compact(
        history(),
        &KeepResults::Within(Duration::from_micros(750)),
        1000,
    );
    // Ended at 250 or later: task 3 (300) and task 4 (not done).
    assert_eq!(tasks(&recent.records), [3, 4]);

    let none = compact(history(), &KeepResults::Last(0), 1000);
    assert_eq!(tasks(&none.records), [4]);
    // Compacting again adds to the count, never forgets it.
    let mut more = none.records.clone();
    more.push(result(3, 5, 5, 500));
    let again = compact(more, &KeepResults::Last(0), 2000);
    assert_eq!(tasks(&again.records), Vec::<u64>::new());
    assert_eq!(again.compacted_total, 5);
    assert_eq!(again.compacted_through, 5);
    assert!(matches!(
        again.records[0],
        Record::Compaction { next_seq: 6, .. }
    ));
}

#[test]
fn a_done_jobs_submission_is_stripped_of_what_only_running_it_needs() {
    let mut spec = TaskSpec::new(vec!["python".into(), "-c".into(), "x".repeat(4096)]);
    spec.env.insert("TOKEN".into(), "y".repeat(1024));
    let mut history = history();
    history[1] = Record::Submit {
        job: JobId(1),
        first_task: TaskId(1),
        count: 2,
        submitted_unix_us: 1,
        request: Box::new(JobRequest {
            spec: spec.clone(),
            array: Some("5,7".parse().unwrap()),
            inline_output: None,
        }),
    };
    // Job 3 is not done: its request stays whole.
    history[3] = Record::Submit {
        job: JobId(3),
        first_task: TaskId(4),
        count: 2,
        submitted_unix_us: 1,
        request: Box::new(JobRequest {
            spec: spec.clone(),
            array: Some("1-2".parse().unwrap()),
            inline_output: None,
        }),
    };
    let compacted = compact(history, &KeepResults::All, 1000);
    let requests: BTreeMap<u32, &JobRequest> = compacted
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Submit { job, request, .. } => Some((job.0, &**request)),
            _ => None,
        })
        .collect();
    let done = requests[&1];
    assert_eq!(done.spec.argv, [COMPACTED_COMMAND]);
    assert!(done.spec.env.is_empty());
    assert_eq!(done.task_count(), 2);
    assert_eq!(requests[&3].spec, spec);
}

/// A freed item that only done jobs read goes with its records; one a job not yet done
/// reads stays, freed. A done job that may make its items again keeps its request.
#[test]
fn freed_items_go_once_no_job_reads_them_and_writers_that_remake_stay_whole() {
    let mut history = history();
    let item = |name: &str| Record::Item {
        item: name.into(),
        node: saker_core::NodeId(1),
        bytes: 10,
    };
    // Job 1 (done) writes "made" and may run twice; job 3 (not done) reads "kept".
    let mut writer = TaskSpec::new(vec!["make".into()]);
    writer.writes = vec!["made".into()];
    writer.idempotent = true;
    history[1] = Record::Submit {
        job: JobId(1),
        first_task: TaskId(1),
        count: 2,
        submitted_unix_us: 1,
        request: Box::new(JobRequest::single(writer.clone())),
    };
    let mut reader = TaskSpec::new(vec!["use".into()]);
    reader.reads = vec!["kept".into()];
    history[3] = Record::Submit {
        job: JobId(3),
        first_task: TaskId(4),
        count: 2,
        submitted_unix_us: 1,
        request: Box::new(JobRequest::single(reader)),
    };
    history.extend([
        item("made"),
        item("gone"),
        item("kept"),
        Record::ItemsFreed {
            items: vec!["gone".into(), "kept".into()],
            unix_us: 5,
        },
    ]);
    let compacted = compact(history, &KeepResults::All, 1000).records;
    let items: Vec<&str> = compacted
        .iter()
        .filter_map(|r| match r {
            Record::Item { item, .. } => Some(item.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(items, ["made", "kept"]);
    let freed = compacted.iter().find_map(|r| match r {
        Record::ItemsFreed { items, .. } => Some(items.clone()),
        _ => None,
    });
    assert_eq!(freed, Some(vec!["kept".to_owned()]));
    let kept_whole = compacted.iter().any(|r| {
        matches!(r, Record::Submit { job, request, .. } if job.0 == 1 && request.spec == writer)
    });
    assert!(kept_whole, "job 1 may make its item again");
}
