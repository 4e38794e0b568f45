//! Where tasks' time went: a histogram per stage of every accepted result, for
//! `status` (and the report). Memory is fixed however many tasks end — a few
//! kilobytes a stage at two significant digits, 1 % precision, which is what a
//! percentile shown to a person needs.
//!
//! Stages come from the result record's own times, so a resumed root rebuilds them
//! from its journal: `wait` (submitted → started: queue, dispatch and spawn), split
//! into `queue` (submitted → dispatched by the root, both on the root's clock) and
//! `launch` (dispatched → started: the way down, the slot's turn, the spawn), `run`
//! (started → ended, as the agent timed it), `fetch` (of `launch`, the time a task
//! that reads data items waited on its node for them to be fetched; only such
//! tasks), `wireup` (of `run`, started → every rank's first PMI fence, for MPI jobs
//! whose ranks their agents served PMI), `deliver` (ended → accepted by the root:
//! the report's way up and its turn in the root), `total` (submitted → accepted).
//! A task that never started counts in `total` only. Times come from different
//! clocks (the root's, an agent's) and are clamped at zero.

use hdrhistogram::Histogram;

use saker_client::StageSummary;
use saker_client::results::ResultRecord;

/// The longest time recorded exactly, in microseconds (a week); longer ones count as
/// this.
const HIGHEST_US: u64 = 7 * 24 * 3600 * 1_000_000;

#[derive(Debug)]
pub(crate) struct Stages {
    wait: Histogram<u64>,
    queue: Histogram<u64>,
    launch: Histogram<u64>,
    fetch: Histogram<u64>,
    run: Histogram<u64>,
    wireup: Histogram<u64>,
    deliver: Histogram<u64>,
    total: Histogram<u64>,
}

impl Default for Stages {
    fn default() -> Self {
        let histogram = || {
            // Constant bounds that satisfy the crate's rules (low ≥ 1, high ≥ 2·low,
            // sigfig ≤ 5).
            Histogram::new_with_bounds(1, HIGHEST_US, 2).expect("valid histogram bounds")
        };
        Stages {
            wait: histogram(),
            queue: histogram(),
            launch: histogram(),
            fetch: histogram(),
            run: histogram(),
            wireup: histogram(),
            deliver: histogram(),
            total: histogram(),
        }
    }
}

impl Stages {
    pub fn record(&mut self, record: &ResultRecord) {
        let submit = record.submit_time.unix_micros();
        let end = record.end_time.unix_micros();
        if let Some(start) = record.start_time.map(|start| start.unix_micros()) {
            add(&mut self.wait, start.saturating_sub(submit));
            if let Some(dispatch) = record.dispatch_time.map(|at| at.unix_micros()) {
                add(&mut self.queue, dispatch.saturating_sub(submit));
                add(&mut self.launch, start.saturating_sub(dispatch));
            }
            add(&mut self.run, end.saturating_sub(start));
        }
        if let Some(fetch) = record.fetch_us {
            add(&mut self.fetch, fetch);
        }
        if let Some(fence) = record
            .gang
            .as_ref()
            .and_then(|gang| gang.wireup)
            .and_then(|wireup| wireup.fence_us)
        {
            add(&mut self.wireup, fence);
        }
        if let Some(accept) = record.accept_time.map(|accept| accept.unix_micros()) {
            if record.start_time.is_some() {
                add(&mut self.deliver, accept.saturating_sub(end));
            }
            add(&mut self.total, accept.saturating_sub(submit));
        }
    }

    /// The longest run (started → ended) of an accepted result so far, in µs.
    pub fn longest_run_micros(&self) -> Option<u64> {
        (!self.run.is_empty()).then(|| self.run.max())
    }

    /// Each stage that has samples, in the order a task goes through them.
    pub fn summaries(&self) -> Vec<StageSummary> {
        [
            ("wait", &self.wait),
            ("queue", &self.queue),
            ("launch", &self.launch),
            ("fetch", &self.fetch),
            ("run", &self.run),
            ("wireup", &self.wireup),
            ("deliver", &self.deliver),
            ("total", &self.total),
        ]
        .into_iter()
        .filter(|(_, histogram)| !histogram.is_empty())
        .map(|(stage, histogram)| StageSummary {
            stage: stage.to_owned(),
            count: histogram.len(),
            p50_us: histogram.value_at_quantile(0.50),
            p90_us: histogram.value_at_quantile(0.90),
            p99_us: histogram.value_at_quantile(0.99),
            max_us: histogram.max(),
        })
        .collect()
    }
}

fn add(histogram: &mut Histogram<u64>, micros: u64) {
    histogram.saturating_record(micros.clamp(1, HIGHEST_US));
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_client::results::{Timestamp, sample_record};

    #[test]
    fn each_stage_is_the_span_between_the_records_times() {
        let mut stages = Stages::default();
        for task in 0..100u64 {
            let mut record = sample_record(task);
            let base = 1_700_000_000_000_000;
            record.submit_time = Timestamp::from_unix_micros(base);
            // Waits of 1..=100 ms, runs of 2 s, 300 µs to be accepted.
            let start = base + (task + 1) * 1_000;
            record.start_time = Some(Timestamp::from_unix_micros(start));
            // Dispatched 200 µs before it started.
            record.dispatch_time = Some(Timestamp::from_unix_micros(start - 200));
            record.end_time = Timestamp::from_unix_micros(start + 2_000_000);
            record.accept_time = Some(Timestamp::from_unix_micros(start + 2_000_300));
            // Every tenth waited 150 µs for its data.
            record.fetch_us = (task % 10 == 0).then_some(150);
            stages.record(&record);
        }
        let summaries = stages.summaries();
        let stage = |name: &str| summaries.iter().find(|s| s.stage == name).unwrap();
        assert_eq!(
            summaries
                .iter()
                .map(|s| s.stage.as_str())
                .collect::<Vec<_>>(),
            [
                "wait", "queue", "launch", "fetch", "run", "deliver", "total"
            ]
        );
        let near = |value: u64, expected: u64| value.abs_diff(expected) * 100 <= expected;
        assert_eq!(stage("fetch").count, 10, "only tasks that fetched");
        assert!(near(stage("fetch").p50_us, 150), "{:?}", stage("fetch"));
        assert!(near(stage("queue").p50_us, 49_800), "{:?}", stage("queue"));
        assert!(near(stage("launch").max_us, 200), "{:?}", stage("launch"));
        assert_eq!(stage("wait").count, 100);
        assert!(near(stage("wait").p50_us, 50_000), "{:?}", stage("wait"));
        assert!(near(stage("wait").p99_us, 99_000), "{:?}", stage("wait"));
        assert!(near(stage("wait").max_us, 100_000), "{:?}", stage("wait"));
        assert!(near(stage("run").p50_us, 2_000_000), "{:?}", stage("run"));
        assert!(near(stage("deliver").p90_us, 300), "{:?}", stage("deliver"));
        assert!(
            near(stage("total").max_us, 2_100_300),
            "{:?}",
            stage("total")
        );
    }

    #[test]
    fn a_task_that_never_started_counts_in_total_only_and_old_records_in_none() {
        let mut stages = Stages::default();
        let mut cancelled = sample_record(1);
        cancelled.start_time = None;
        cancelled.dispatch_time = None;
        cancelled.accept_time = Some(cancelled.end_time);
        stages.record(&cancelled);
        // A record journaled before accept times were kept.
        let mut old = sample_record(2);
        old.start_time = None;
        old.dispatch_time = None;
        old.accept_time = None;
        stages.record(&old);
        let summaries = stages.summaries();
        assert_eq!(summaries.len(), 1);
        assert_eq!(
            (summaries[0].stage.as_str(), summaries[0].count),
            ("total", 1)
        );
    }
}
