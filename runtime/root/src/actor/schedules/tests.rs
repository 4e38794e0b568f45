//! `Schedules` on its own: a periodic job's next occurrence is submitted for its time
//! (which the core then wakes for) once the pending one has started, missed ones are
//! skipped, and `count`, `until` and a cancel end the schedule.

use super::Schedules;
use crate::actor::items::ItemTable;
use crate::actor::submissions::Submissions;
use crate::actor::testing::*;
use saker_client::results::Timestamp;

const PERIOD: Duration = Duration::from_secs(10);

/// A pilot of one one-core node with a periodic job (every ten seconds) submitted and
/// its schedule started, as the router does.
struct Periodic {
    owned: Owned,
    submissions: Submissions,
    items: ItemTable,
    schedules: Schedules,
}

fn periodic(edit: impl FnOnce(&mut TaskSpec)) -> Periodic {
    let mut owned = Owned::new();
    owned.add_node(1, 1);
    let mut submissions = Submissions::new(None, false);
    let mut request = single(&["tick"]);
    request.spec.every = Some(PERIOD);
    edit(&mut request.spec);
    let accepted = submissions
        .submit(&mut owned.ctx, owned.nodes.offered(), vec![request], None)
        .expect("accepted");
    let mut schedules = Schedules::default();
    let Record::Submit {
        job,
        request,
        submitted_unix_us,
        ..
    } = &accepted.records[0]
    else {
        panic!("a submission");
    };
    schedules.start_schedule(*job, request, *submitted_unix_us);
    Periodic {
        owned,
        submissions,
        items: ItemTable::default(),
        schedules,
    }
}

impl Periodic {
    /// Submits what the schedules say is due, as the router does.
    fn poll(&mut self) {
        let ctx = &mut self.owned.ctx;
        for due in self.schedules.poll(ctx) {
            let offered = self.owned.nodes.offered();
            let spec = match self.submissions.core_spec(ctx, offered, &due.request) {
                Ok(spec) => spec,
                Err(problem) => {
                    self.schedules.end(due.schedule, &problem);
                    continue;
                }
            };
            let at = ctx.timestamp().unix_micros();
            let job = self
                .submissions
                .register(ctx, &due.request, spec, &[], at, None)
                .expect("the core queues an occurrence");
            self.items.note_reads(ctx, job.job, &due.request.spec.reads);
            let records = self.schedules.occurred(due, job, at);
            ctx.append(records, AfterJournal::Nothing);
        }
    }

    /// Lets the core dispatch what is due (with a free slot) and the node start it.
    fn start_due(&mut self) {
        let now = self.owned.ctx.now();
        self.owned.ctx.core.handle_timeout(now);
        let credit = self.owned.ctx.core.node_credit(NodeId(1));
        if credit.is_some_and(|(_, credit)| credit.is_zero()) {
            self.owned.credit(1, 1);
        }
        for (_, attempt) in self.owned.dispatched() {
            self.owned.ctx.core.handle_started(attempt, now).unwrap();
        }
    }

    /// The occurrences journaled since the last look: (number, job, its time).
    fn occurrences(&mut self) -> Vec<(u32, JobId, Option<u64>)> {
        let appends = self.owned.appends();
        let mut found = Vec::new();
        for (records, after) in appends {
            assert!(
                matches!(after, AfterJournal::Nothing),
                "nothing waits on them"
            );
            let time = records.iter().find_map(|record| match record {
                Record::Submit { request, .. } => {
                    assert_eq!(request.spec.every, None, "an occurrence is not periodic");
                    request.spec.not_before.map(Timestamp::unix_micros)
                }
                _ => None,
            });
            for record in &records {
                if let Record::Occurrence {
                    schedule,
                    job,
                    occurrence,
                } = record
                {
                    assert_eq!(*schedule, JobId(1));
                    found.push((*occurrence, *job, time));
                }
            }
        }
        found
    }
}

fn at(seconds: u64) -> Option<u64> {
    Some(UNIX_ORIGIN_US + seconds * 1_000_000)
}

#[test]
fn the_next_occurrence_is_submitted_for_its_time_once_the_pending_one_started() {
    let mut p = periodic(|_| {});
    p.poll();
    let [(_, first)] = p.owned.dispatched()[..] else {
        panic!("the first occurrence is dispatched at once");
    };
    p.poll();
    assert!(p.occurrences().is_empty(), "not before the first starts");
    let now = p.owned.ctx.now();
    p.owned.ctx.core.handle_started(first, now).unwrap();
    p.poll();
    assert_eq!(p.occurrences(), [(1, JobId(2), at(10))]);
    assert_eq!(p.submissions.job_count(), 2, "kept as a job of its own");
    assert!(p.submissions.contains(JobId(2)));
    assert_eq!(
        p.owned.ctx.core.not_before(JobId(2)),
        Some(Time::from_secs(10))
    );
    assert_eq!(
        p.owned.ctx.core.poll_timeout(),
        Some(Time::from_secs(10)),
        "the core wakes for it"
    );
    p.poll();
    assert!(
        p.occurrences().is_empty(),
        "one pending occurrence at a time"
    );
    assert_eq!(p.schedules.len(), 1);
    // Its time comes: it starts, and brings the one after.
    p.owned.clock.advance(PERIOD);
    p.start_due();
    p.poll();
    assert_eq!(p.occurrences(), [(2, JobId(3), at(20))]);
}

#[test]
fn occurrences_missed_while_the_pending_one_waited_are_skipped() {
    let mut p = periodic(|spec| spec.count = Some(6));
    // The first occurrence starts 35 s late: 1 to 3 are skipped, 4 is at 40 s.
    p.owned.clock.advance(Duration::from_secs(35));
    p.start_due();
    p.poll();
    assert_eq!(p.occurrences(), [(4, JobId(2), at(40))]);
    assert_eq!(
        p.owned.ctx.core.not_before(JobId(2)),
        Some(Time::from_secs(40))
    );
}

#[test]
fn the_count_ends_a_schedule() {
    let mut p = periodic(|spec| spec.count = Some(2));
    p.start_due();
    p.poll();
    assert_eq!(p.occurrences(), [(1, JobId(2), at(10))]);
    p.owned.clock.advance(PERIOD);
    p.start_due();
    p.poll();
    assert!(p.occurrences().is_empty(), "two in all");
    assert_eq!(p.schedules.len(), 0);
    assert_eq!(p.owned.ctx.core.next_job(), JobId(3));
}

#[test]
fn until_ends_a_schedule_at_its_last_time() {
    let until = Timestamp::from_unix_micros(UNIX_ORIGIN_US + 15_000_000);
    let mut p = periodic(|spec| spec.until = Some(until));
    p.start_due();
    p.poll();
    assert_eq!(p.occurrences(), [(1, JobId(2), at(10))]);
    p.owned.clock.advance(PERIOD);
    p.start_due();
    p.poll();
    assert!(p.occurrences().is_empty(), "20 s is past until");
    assert_eq!(p.schedules.len(), 0);
}

#[test]
fn cancelling_the_pending_occurrence_ends_the_schedule_before_its_time_and_skips_it_after() {
    let mut p = periodic(|_| {});
    p.start_due();
    p.poll();
    assert_eq!(p.occurrences(), [(1, JobId(2), at(10))]);
    // Occurrence 1 (at 10 s) is cancelled once its time has passed: skipped.
    p.owned.clock.advance(Duration::from_secs(12));
    let now = p.owned.ctx.now();
    p.owned.ctx.core.handle_cancel_job(JobId(2), now).unwrap();
    p.poll();
    assert_eq!(p.occurrences(), [(2, JobId(3), at(20))]);
    // Occurrence 2 (at 20 s) is cancelled before its time: the schedule ends.
    p.owned.ctx.core.handle_cancel_job(JobId(3), now).unwrap();
    p.poll();
    assert!(p.occurrences().is_empty());
    assert_eq!(p.schedules.len(), 0);
}

#[test]
fn a_resumed_schedule_goes_on_from_its_last_journaled_occurrence() {
    // A journal: the schedule's first occurrence (job 1), its third pending (job 2).
    let mut first = single(&["tick"]);
    first.spec.every = Some(PERIOD);
    first.spec.count = Some(5);
    let mut journaled = super::Journaled::default();
    journaled.look(&Record::Submit {
        job: JobId(1),
        first_task: TaskId(1),
        count: 1,
        submitted_unix_us: UNIX_ORIGIN_US,
        request: Box::new(first.clone()),
    });
    journaled.look(&Record::Submit {
        job: JobId(2),
        first_task: TaskId(2),
        count: 1,
        submitted_unix_us: UNIX_ORIGIN_US,
        request: Box::new(single(&["an ordinary job"])),
    });
    journaled.gather(Record::Occurrence {
        schedule: JobId(1),
        job: JobId(2),
        occurrence: 3,
    });
    let mut owned = Owned::new();
    owned.add_node(1, 2);
    let mut submissions = Submissions::new(None, false);
    // The journal's jobs, queued again as the submissions' resume does.
    accept(&mut owned, &mut submissions, vec![first, single(&["tick"])]);
    let mut schedules = Schedules::default();
    schedules.resume(journaled);
    assert_eq!(schedules.len(), 1, "the ordinary job is no schedule");
    let mut p = Periodic {
        owned,
        submissions,
        items: ItemTable::default(),
        schedules,
    };
    // Occurrence 3 (job 2) starts: the next is the fourth, at 40 s.
    p.owned.clock.advance(Duration::from_secs(30));
    p.start_due();
    p.poll();
    let [(4, job, time)] = p.occurrences()[..] else {
        panic!("the fourth occurrence");
    };
    assert_eq!((job, time), (JobId(3), at(40)));
}
