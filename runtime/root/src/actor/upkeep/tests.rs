//! `Upkeep` on its own: the walltime deadline (armed, reached, exhausted) and when
//! the journal is compacted (by its segment count, one at a time, its superseded
//! segments retired once no read holds them).

use saker_journal::{Position, SegmentNumber};

use super::Walltime;
use super::compaction::{Compaction, CompactionPolicy};
use crate::actor::submissions::Submissions;
use crate::actor::testing::*;
use crate::compact::{CompactionDone, CompactionError, KeepResults};

/// A journal whose writer's segment count a test sets, recording compactions asked
/// for and retirements.
#[derive(Debug, Clone, Default)]
struct SegmentJournal(Arc<Mutex<Segments>>);

#[derive(Debug, Default)]
struct Segments {
    count: u64,
    /// (keep, now) of each compaction asked for.
    compactions: Vec<(KeepResults, u64)>,
    retirements: u32,
}

impl SegmentJournal {
    fn with<T>(&self, f: impl FnOnce(&mut Segments) -> T) -> T {
        f(&mut self.0.lock().expect("a test thread panicked"))
    }

    fn set_segments(&self, count: u64) {
        self.with(|s| s.count = count);
    }

    fn compactions(&self) -> Vec<(KeepResults, u64)> {
        self.with(|s| s.compactions.clone())
    }
}

impl Journal for SegmentJournal {
    fn append(&mut self, _records: Vec<Record>, _after: AfterJournal) -> Option<RootMsg> {
        panic!("compaction appends nothing");
    }

    fn close(&mut self) {}

    fn results(&self) -> Arc<dyn ResultSource> {
        Arc::new(MemoryJournal::default())
    }

    fn segments(&self) -> u64 {
        self.with(|s| s.count)
    }

    fn compact(&mut self, keep: KeepResults, now_unix_us: u64) {
        self.with(|s| s.compactions.push((keep, now_unix_us)));
    }

    fn retire_superseded(&mut self) {
        self.with(|s| s.retirements += 1);
    }
}

fn compacting(segments: u64, every_segments: u64) -> (Owned, SegmentJournal, Compaction) {
    let journal = SegmentJournal::default();
    journal.set_segments(segments);
    let owned = Owned::with_journal(TestPort::default(), Box::new(journal.clone()));
    let mut compaction = Compaction::default();
    let policy = CompactionPolicy {
        keep: KeepResults::Last(2),
        every_segments,
    };
    compaction.set(&owned.ctx, policy);
    (owned, journal, compaction)
}

fn position(segment: u64, offset: u64) -> Position {
    Position {
        segment: SegmentNumber(segment),
        offset,
    }
}

#[test]
fn compaction_is_due_by_the_journals_segment_count_and_runs_one_at_a_time() {
    let (mut owned, journal, mut compaction) = compacting(3, 2);
    for segments in [3, 4] {
        journal.set_segments(segments);
        compaction.maybe_compact(&mut owned.ctx);
    }
    assert!(journal.compactions().is_empty(), "due at 5 segments");
    owned.clock.advance(Duration::from_secs(7));
    journal.set_segments(5);
    compaction.maybe_compact(&mut owned.ctx);
    let first = (KeepResults::Last(2), UNIX_ORIGIN_US + 7_000_000);
    assert_eq!(journal.compactions(), [first]);
    journal.set_segments(9);
    compaction.maybe_compact(&mut owned.ctx);
    assert_eq!(journal.compactions().len(), 1, "one at a time");
    // A failed one is tried again two segments on.
    let failed = Err(CompactionError::Closed);
    assert!(compaction.ended(&mut owned.ctx, failed).is_none());
    assert_eq!(compaction.finished(), 0);
    compaction.maybe_compact(&mut owned.ctx);
    journal.set_segments(10);
    compaction.maybe_compact(&mut owned.ctx);
    assert_eq!(journal.compactions().len(), 1, "due at 11 segments");
    journal.set_segments(11);
    compaction.maybe_compact(&mut owned.ctx);
    assert_eq!(journal.compactions().len(), 2);
}

#[test]
fn a_pilot_that_compacts_every_zero_segments_never_does() {
    let (mut owned, journal, mut compaction) = compacting(0, 0);
    journal.set_segments(1_000);
    compaction.maybe_compact(&mut owned.ctx);
    assert!(journal.compactions().is_empty());
}

#[test]
fn a_compaction_retires_the_segments_it_superseded_once_no_read_holds_them() {
    let (mut owned, journal, mut compaction) = compacting(2, 1);
    let reading = Arc::new(());
    let superseded = Arc::clone(&reading);
    journal.set_segments(3);
    compaction.maybe_compact(&mut owned.ctx);
    assert_eq!(journal.compactions().len(), 1);
    let done = CompactionDone {
        base: SegmentNumber(3),
        kept: vec![(TaskId(3), 3, position(3, 16))],
        dropped: vec![(TaskId(1), 1), (TaskId(2), 2)],
        compacted_total: 2,
        compacted_through: 2,
        records_before: 9,
        records_after: 4,
    };
    let done = compaction
        .ended(&mut owned.ctx, Ok(done))
        .expect("it compacted");
    compaction.applied(&mut owned.ctx, &done, superseded);
    assert_eq!(compaction.finished(), 1);
    assert_eq!(journal.with(|s| s.retirements), 0, "a read holds them");
    compaction.poll_retirement(&mut owned.ctx);
    assert_eq!(journal.with(|s| s.retirements), 0);
    drop(reading);
    compaction.poll_retirement(&mut owned.ctx);
    compaction.poll_retirement(&mut owned.ctx);
    assert_eq!(journal.with(|s| s.retirements), 1, "once");
    // The next is due a period after the segments the compaction left.
    compaction.maybe_compact(&mut owned.ctx);
    assert_eq!(journal.compactions().len(), 1);
    journal.set_segments(4);
    compaction.maybe_compact(&mut owned.ctx);
    assert_eq!(journal.compactions().len(), 2);
}

#[test]
fn a_deadline_bounds_the_core_and_arms_its_wake() {
    let mut owned = Owned::new();
    let mut walltime = Walltime::default();
    owned.clock.advance(Duration::from_secs(5));
    walltime.set(&mut owned.ctx, UNIX_ORIGIN_US + 15_000_000);
    assert_eq!(
        owned.wakes(),
        [(Duration::from_secs(10), Wake::Walltime)],
        "ten seconds from now"
    );
    assert_eq!(walltime.deadline, Some(Time::from_secs(15)));
    assert_eq!(owned.ctx.core.deadline(), Some(Time::from_secs(15)));
    // A deadline already past is due at once.
    walltime.set(&mut owned.ctx, UNIX_ORIGIN_US);
    assert_eq!(owned.wakes(), [(Duration::ZERO, Wake::Walltime)]);
    assert_eq!(owned.ctx.core.deadline(), Some(Time::from_secs(5)));
}

#[test]
fn reaching_the_deadline_stops_all_dispatch_once() {
    let mut owned = Owned::new();
    owned.add_node(1, 1);
    let mut submissions = Submissions::new(None, false);
    accept(&mut owned, &mut submissions, vec![array(&["sleep"], "1-3")]);
    assert_eq!(owned.dispatched().len(), 1, "before the deadline");
    let mut walltime = Walltime::default();
    walltime.set(&mut owned.ctx, UNIX_ORIGIN_US + 10_000_000);
    owned.clock.advance(Duration::from_secs(10));
    assert!(walltime.reach(&mut owned.ctx), "the pilot is to stop");
    assert!(owned.ctx.core.is_draining());
    owned.credit(1, 1);
    assert!(owned.dispatched().is_empty(), "nothing starts after it");
    walltime.reached = true;
    assert!(!walltime.reach(&mut owned.ctx), "stopped for it already");
}

#[test]
fn the_pilot_is_exhausted_once_nothing_left_can_finish_by_the_deadline() {
    let mut owned = Owned::new();
    owned.add_node(1, 1);
    let mut submissions = Submissions::new(None, false);
    let mut long = single(&["simulate"]);
    long.spec.time_limit = Some(Duration::from_secs(60));
    accept(&mut owned, &mut submissions, vec![long]);
    let mut walltime = Walltime::default();
    assert!(
        !walltime.exhausted(&owned.ctx),
        "no deadline, no exhaustion"
    );
    walltime.set(&mut owned.ctx, UNIX_ORIGIN_US + 10_000_000);
    assert!(owned.dispatched().is_empty(), "60 s do not fit in 10");
    assert!(walltime.exhausted(&owned.ctx));
    owned.ctx.pilot.shutting_down = true;
    assert!(!walltime.exhausted(&owned.ctx), "stopping already");
    owned.ctx.pilot.shutting_down = false;
    walltime.reached = true;
    assert!(!walltime.exhausted(&owned.ctx), "reached already");
    walltime.reached = false;
    // A task without a time limit may still start (the deadline kills it).
    accept(&mut owned, &mut submissions, vec![single(&["true"])]);
    assert!(!walltime.exhausted(&owned.ctx));
}

#[test]
fn a_resumed_elastic_pilot_adopts_the_allocations_its_journal_left_running() {
    let owned = Owned::new();
    let mut upkeep = super::Upkeep {
        elastic: Some(super::elastic::Elastic::new(elastic_config())),
        ..Default::default()
    };
    let allocation = |allocation, ended| Record::Allocation {
        allocation,
        job_id: 40 + allocation as u32,
        nodes: 1,
        first_node: allocation as u32,
        ended,
        reason: "submitted".into(),
        unix_us: UNIX_ORIGIN_US,
    };
    let now = owned.ctx.now();
    for record in [
        allocation(0, false),
        allocation(1, false),
        allocation(1, true),
    ] {
        upkeep.gather(&record, now);
    }
    upkeep.resumed();
    let elastic = upkeep.elastic.as_ref().expect("elastic");
    let adopted: Vec<(u64, Option<u32>)> = elastic
        .statuses(UNIX_ORIGIN_US)
        .iter()
        .map(|a| (a.allocation, a.job_id))
        .collect();
    assert_eq!(adopted, [(0, Some(40))], "allocation 1 had ended");
    // A pilot that is not elastic has nothing to adopt.
    let mut plain = super::Upkeep::default();
    plain.gather(&allocation(2, false), now);
    plain.resumed();
    assert!(plain.elastic.is_none());
}
