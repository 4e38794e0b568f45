//! Data items: attempts staged while what they read is fetched, the fetch's
//! bookkeeping, and what attempts wrote.

use saker_wire::messages::NodeId;
use saker_wire::{ITEM_CHUNK, ItemData, ItemWritten};

use super::*;
use crate::board::items::{Fetches, Received};
use crate::items::ItemFiles;

/// Job `job` reading and writing these items.
fn item_job(job: u32, reads: &[&str], writes: &[&str]) -> Arc<JobDef> {
    let mut def = job_def(job, 1);
    def.reads = reads.iter().map(|s| s.to_string()).collect();
    def.writes = writes.iter().map(|s| s.to_string()).collect();
    Arc::new(def)
}

fn assignment(attempt: u64) -> Queued {
    let assignment = Assignment {
        task: TaskId(attempt),
        attempt: AttemptId(attempt),
        job: JobId(1),
        index: 0,
    };
    Queued::new(assignment, 0)
}

/// The shell's steps for one answer, as the agent's desk takes them: the core judges
/// it, the files take its bytes, and a whole item is kept in place.
fn receive(fetches: &mut Fetches, files: &mut ItemFiles, data: ItemData) -> Received {
    match fetches.receive(&data) {
        Received::Write => {}
        other => return other,
    }
    let written = files.write(&data);
    match fetches.written(&data.item, data.data.len() as u64, written) {
        Received::Keep => fetches.kept(&data.item, files.keep(&data.item)),
        other => other,
    }
}

/// A writer's item, pulled by another node in chunks through answers as a holder
/// gives them, arrives whole; an item nobody has fails what waits for it.
#[test]
fn an_item_is_pulled_in_chunks_from_its_holder_and_kept_whole() {
    let dir = tempfile::tempdir().unwrap();
    let holder = ItemFiles::new(1, dir.path().join("node-1"), false);
    let mut holder_books = Fetches::new(1);
    let mut files = ItemFiles::new(2, dir.path().join("node-2"), false);
    let mut reader = Fetches::new(2);
    let content: Vec<u8> = (0..(ITEM_CHUNK as usize * 5 / 2))
        .map(|i| i as u8)
        .collect();
    std::fs::create_dir_all(holder.scratch()).unwrap();
    std::fs::write(holder.scratch().join("w1"), &content).unwrap();
    let written = holder.written(&item_job(1, &[], &["w1"]));
    holder_books.note_written(AttemptId(7), written).unwrap();
    assert_eq!(holder_books.written[0].items[0].bytes, content.len() as u64);
    let missing = holder.written(&item_job(1, &[], &["nope"]));
    assert!(holder_books.note_written(AttemptId(8), missing).is_err());

    let reading = item_job(1, &["w1"], &[]);
    assert_eq!(files.missing(&reading), Some("w1"));
    reader.stage("w1", assignment(1), 0);
    reader.stage("w1", assignment(2), 0);
    assert_eq!(reader.unstage(AttemptId(2)), Some(assignment(2)));
    let mut answers = 0;
    let done = loop {
        let requests = std::mem::take(&mut reader.outbox);
        assert!(
            !requests.is_empty(),
            "a fetch in progress always asks for more"
        );
        let mut outcome = Received::Pending;
        for request in requests {
            answers += 1;
            outcome = receive(&mut reader, &mut files, holder.serve(&request));
        }
        if outcome != Received::Pending {
            break outcome;
        }
    };
    assert_eq!(done, Received::Done(vec![assignment(1)]));
    assert_eq!(answers, 3, "2.5 chunks");
    assert_eq!(std::fs::read(files.scratch().join("w1")).unwrap(), content);
    assert_eq!(files.missing(&reading), None);

    reader.stage("gone", assignment(3), 0);
    let request = reader.outbox.pop().unwrap();
    let answer = holder.serve(&request);
    assert!(answer.error.is_some());
    match receive(&mut reader, &mut files, answer) {
        Received::Failed(waiting, reason) => {
            assert_eq!(waiting, vec![assignment(3)]);
            assert!(reason.contains("data item \"gone\""), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// `len` bytes of `item`, all of it, as its holder answers.
fn whole(item: &str, len: usize) -> ItemData {
    ItemData {
        item: item.into(),
        reader: NodeId(7),
        request: 1,
        offset: 0,
        total: len as u64,
        data: vec![1; len],
        error: None,
    }
}

/// The queue's head reads an item this node must fetch: it is staged (keeping its
/// credit, not a slot) and the next task starts; once the item is whole and kept, it
/// is back at the head and starts.
#[test]
fn an_attempt_reading_a_missing_item_waits_for_its_fetch_and_starts_when_it_is_whole() {
    let mut board = board(1);
    board.jobs.insert(JobId(3), item_job(3, &["in"], &[]));
    board.queue.extend([queued(1, 3), queued(2, 1)]);
    let Some(Next::CheckItems { attempt, job }) = board.poll_start(0, at(0)) else {
        panic!("which item first?");
    };
    assert_eq!((attempt, job.job), (AttemptId(10), JobId(3)));
    board.handle_items_checked(attempt, Some("in".into()));
    let next = start(&mut board, 0, at(0)).unwrap();
    assert_eq!(
        next.attempt,
        AttemptId(20),
        "the next task starts meanwhile"
    );
    assert_eq!(
        board.fetches.outbox.len(),
        1,
        "one chunk first: it tells the size"
    );
    // The answer: written by the shell, whole, kept.
    let data = whole("in", 5);
    assert!(board.handle_item_data(&data, at(1)));
    board.handle_item_written("in", 5, Ok(()), at(1));
    assert_eq!(
        effects(&mut board),
        [Effect::KeepItem { item: "in".into() }]
    );
    board.handle_item_kept("in", Ok(()), at(1));
    assert_eq!(board.queue.front().map(|q| q.attempt), Some(AttemptId(10)));
    // When the slot frees, the reader asks again (it is here now) and starts.
    assert!(board.handle_attempt_done(0, 0, AttemptId(20), exited(), None, at(2)));
    let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(2)) else {
        panic!("asked again");
    };
    board.handle_items_checked(attempt, None);
    let Some(Next::Start(reader)) = board.poll_start(0, at(2)) else {
        panic!("it starts");
    };
    assert_eq!(reader.attempt, AttemptId(10));
    assert!(board.handle_attempt_done(0, 0, AttemptId(10), exited(), None, at(3)));
    let results = board.take_report().results;
    assert!(
        results
            .iter()
            .all(|r| r.outcome == Outcome::Exited { code: 0 })
    );
    // The reader waited 1 ms for its item (staged at 0, whole at 1); the other none.
    let fetch_us: Vec<(u64, u64)> = results.iter().map(|r| (r.attempt.0, r.fetch_us)).collect();
    assert_eq!(fetch_us, [(20, 0), (10, 1_000)]);
}

/// An answer for a stale question (the head changed since) is not used: the board
/// asks again.
#[test]
fn an_answer_about_another_attempt_is_not_taken_for_the_queues_head() {
    let mut board = board(1);
    board.jobs.insert(JobId(3), item_job(3, &["in"], &[]));
    board.queue.extend([queued(1, 3)]);
    board.handle_items_checked(AttemptId(99), Some("in".into()));
    assert!(matches!(
        board.poll_start(0, at(0)),
        Some(Next::CheckItems {
            attempt: AttemptId(10),
            ..
        })
    ));
    assert!(board.fetches.outbox.is_empty(), "nothing staged");
}

/// An item no node can give fails every attempt waiting for it, as their own failure
/// (a reader cannot run without it anywhere), and what was written of it goes.
#[test]
fn an_item_nobody_can_give_fails_its_readers() {
    let mut board = board(1);
    board.jobs.insert(JobId(3), item_job(3, &["in"], &[]));
    board.queue.extend([queued(1, 3), queued(2, 3)]);
    for _ in 0..2 {
        let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(0)) else {
            panic!("a question");
        };
        board.handle_items_checked(attempt, Some("in".into()));
    }
    assert!(board.poll_start(0, at(0)).is_none(), "both staged");
    assert_eq!(board.fetches.outbox.len(), 1, "one fetch for both");
    let mut answer = whole("in", 0);
    answer.error = Some("no holder".into());
    assert!(!board.handle_item_data(&answer, at(1)));
    assert_eq!(
        effects(&mut board),
        [Effect::DiscardItem { item: "in".into() }]
    );
    let report = board.take_report();
    let failed: Vec<(AttemptId, &Outcome)> = report
        .results
        .iter()
        .map(|r| (r.attempt, &r.outcome))
        .collect();
    let outcome = Outcome::SpawnFailed {
        reason: "data item \"in\": no holder".into(),
    };
    assert_eq!(
        failed,
        [(AttemptId(10), &outcome), (AttemptId(20), &outcome)]
    );
    assert_eq!(report.credit.core_count(), 2, "their credit comes back");
}

/// Answers that disagree with what the holder said before fail the fetch; a chunk the
/// shell could not write does too.
#[test]
fn a_bad_answer_or_a_failed_write_fails_the_fetch() {
    let mut board = board(1);
    board
        .jobs
        .insert(JobId(3), item_job(3, &["in", "other"], &[]));
    board.queue.extend([queued(1, 3)]);
    let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(0)) else {
        panic!("a question");
    };
    board.handle_items_checked(attempt, Some("in".into()));
    board.poll_start(0, at(0));
    let mut beyond = whole("in", 5);
    beyond.offset = 3;
    assert!(!board.handle_item_data(&beyond, at(1)));
    assert_eq!(
        effects(&mut board),
        [Effect::DiscardItem { item: "in".into() }]
    );
    let result = &board.take_report().results[0];
    assert_eq!(
        result.outcome,
        Outcome::SpawnFailed {
            reason: "data item \"in\": its holder's answers disagree".into()
        }
    );
    // Again, and this time the write fails.
    board.queue.extend([queued(2, 3)]);
    let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(2)) else {
        panic!("a question");
    };
    board.handle_items_checked(attempt, Some("other".into()));
    board.poll_start(0, at(2));
    assert!(board.handle_item_data(&whole("other", 5), at(3)));
    let failed = ItemError::Write {
        item: "other".into(),
        source: std::io::Error::other("disk full"),
    };
    board.handle_item_written("other", 5, Err(failed), at(3));
    assert_eq!(
        effects(&mut board),
        [Effect::DiscardItem {
            item: "other".into()
        }]
    );
    assert!(matches!(
        &board.take_report().results[0].outcome,
        Outcome::SpawnFailed { reason } if reason == "data item \"other\": cannot write it here: disk full"
    ));
}

/// A cancelled staged attempt is answered at once; the fetch goes on for the others.
#[test]
fn a_cancelled_staged_attempt_is_answered_and_the_fetch_goes_on() {
    let mut board = board(1);
    board.jobs.insert(JobId(3), item_job(3, &["in"], &[]));
    board.queue.extend([queued(1, 3), queued(2, 3)]);
    for _ in 0..2 {
        let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(0)) else {
            panic!("a question");
        };
        board.handle_items_checked(attempt, Some("in".into()));
    }
    board.poll_start(0, at(0));
    board.handle_cancel(AttemptId(10), at(1));
    let report = board.take_report();
    assert_eq!(report.results[0].attempt, AttemptId(10));
    assert_eq!(report.results[0].outcome, Outcome::Cancelled);
    assert!(board.handle_item_data(&whole("in", 4), at(2)));
    board.handle_item_written("in", 4, Ok(()), at(2));
    board.handle_item_kept("in", Ok(()), at(2));
    let waiting: Vec<AttemptId> = board.queue.iter().map(|q| q.attempt).collect();
    assert_eq!(waiting, [AttemptId(20)]);
}

/// An attempt that exited 0 reports the items it wrote, ahead of its result; one that
/// did not write an item it was to write fails, as its own failure.
#[test]
fn written_items_are_reported_and_a_missing_one_fails_its_writer() {
    let mut board = board(2);
    board.jobs.insert(JobId(3), item_job(3, &[], &["out"]));
    board
        .queue
        .extend([queued(1, 3), queued(2, 3), queued(3, 1)]);
    for slot in 0..2 {
        start(&mut board, slot, at(0)).unwrap();
    }
    assert!(board.job_writing(0, 0, AttemptId(10)).is_some());
    assert!(
        board.job_writing(0, 1, AttemptId(10)).is_none(),
        "a stale thread"
    );
    assert!(
        board.job_writing(0, 0, AttemptId(20)).is_none(),
        "not its attempt"
    );
    let wrote = vec![ItemWritten {
        name: "out".into(),
        bytes: 9,
    }];
    assert!(board.handle_attempt_done(0, 0, AttemptId(10), exited(), Some(Ok(wrote)), at(1)));
    let missed = ItemError::NotWritten { item: "out".into() };
    assert!(board.handle_attempt_done(1, 0, AttemptId(20), exited(), Some(Err(missed)), at(1)));
    assert_eq!(board.fetches.written.len(), 1);
    assert_eq!(board.fetches.written[0].attempt, AttemptId(10));
    let outcomes: Vec<Outcome> = board
        .take_report()
        .results
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Exited { code: 0 },
            Outcome::SpawnFailed {
                reason: "it exited 0 without writing data item \"out\" (a file in $SAKER_SCRATCH)"
                    .into()
            }
        ]
    );
}

/// Stopping everything drops the fetches and their requests (the root replays the
/// waiting attempts, unanswered) and their partial files.
#[test]
fn stopping_everything_drops_fetches_and_their_partial_files() {
    let mut board = board(1);
    board.jobs.insert(JobId(3), item_job(3, &["in"], &[]));
    board.queue.extend([queued(1, 3)]);
    let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(0)) else {
        panic!("a question");
    };
    board.handle_items_checked(attempt, Some("in".into()));
    board.poll_start(0, at(0));
    board.handle_stop_all(at(1));
    assert_eq!(
        effects(&mut board),
        [Effect::DiscardItem { item: "in".into() }]
    );
    assert!(!board.fetches.has_news());
    assert!(board.take_report().results.is_empty());
    // A late answer finds no fetch.
    assert!(!board.handle_item_data(&whole("in", 3), at(2)));
}
