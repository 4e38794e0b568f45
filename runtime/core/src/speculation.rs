//! Stragglers: a runtime estimate per estimate class, and the started attempts of
//! speculative jobs, kept so that finding stragglers costs nothing while there are none.
//!
//! Within a class every attempt has the same threshold, so the attempt that started
//! first is the first to become a straggler. Each class keeps its *waiting* attempts
//! (started, not stragglers yet) ordered by start, and `due` holds, per class, the
//! instant its oldest waiting attempt becomes a straggler. [`Stragglers::advance`] (on
//! every input) moves the attempts whose instant has come into `ripe`: the stragglers
//! of all classes, oldest first, where dispatch looks for them. An attempt moves once,
//! so this is O(log n) per attempt, and with no straggler a dispatch looks at one
//! empty set. A straggler stays one if its class's estimate grows later: it was judged
//! by what was known when its time came.
//!
//! The estimate is Welford's running mean and variance in `f64`: the same inputs in the
//! same order give the same bits, so it is as deterministic as integers.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::Speculation;
use crate::ids::{AttemptId, Time};

/// Running mean and variance of the run times of one class's successful attempts.
#[derive(Clone, Copy, Debug, Default)]
struct Estimate {
    samples: u64,
    mean: f64,
    /// Sum of squared deviations from the mean (Welford).
    m2: f64,
}

impl Estimate {
    fn add(&mut self, micros: u64) {
        let value = micros as f64;
        self.samples += 1;
        let delta = value - self.mean;
        self.mean += delta / self.samples as f64;
        self.m2 += delta * (value - self.mean);
    }

    /// Longest run time that is not a straggler's: `P * (mean + 2 sigma)`, rounded up;
    /// `None` before `min_samples` samples.
    fn threshold(&self, policy: Speculation) -> Option<u64> {
        if self.samples < u64::from(policy.min_samples.max(1)) {
            return None;
        }
        let deviation = (self.m2.max(0.0) / self.samples as f64).sqrt();
        let limit = (self.mean + 2.0 * deviation) * f64::from(policy.factor_percent) / 100.0;
        // `as` saturates (and maps NaN to 0): no overflow on absurd inputs.
        Some(limit.ceil() as u64)
    }
}

/// The instant an attempt started at `started` becomes a straggler: when its run time
/// first exceeds `threshold`.
fn straggler_at(started: Time, threshold: u64) -> Time {
    started
        .saturating_add_micros(threshold)
        .saturating_add_micros(1)
}

#[derive(Debug, Default)]
struct Class {
    estimate: Estimate,
    /// (started, attempt) of started attempts that are not stragglers yet.
    waiting: BTreeSet<(Time, AttemptId)>,
    /// Its key in `Stragglers::due`, if it has one.
    due: Option<Time>,
}

/// Estimates and straggler index. See the module doc.
#[derive(Debug)]
pub(crate) struct Stragglers {
    /// `None`: speculation is off; estimates are kept, nothing is indexed.
    policy: Option<Speculation>,
    /// A B-tree: few classes, and the audit iterates it.
    classes: BTreeMap<u32, Class>,
    /// (instant the class's oldest waiting attempt becomes a straggler, class).
    due: BTreeSet<(Time, u32)>,
    /// (started, attempt) of stragglers without a copy, oldest first.
    ripe: BTreeSet<(Time, AttemptId)>,
}

impl Stragglers {
    pub(crate) fn new(policy: Option<Speculation>) -> Stragglers {
        Stragglers {
            policy,
            classes: BTreeMap::new(),
            due: BTreeSet::new(),
            ripe: BTreeSet::new(),
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.policy.is_some()
    }

    /// A successful attempt of `class` ran for `micros`. Recorded with speculation off
    /// too: the estimates also size an elastic pilot's backlog.
    pub(crate) fn record(&mut self, class: u32, micros: u64, now: Time) {
        let enabled = self.is_enabled();
        let entry = self.classes.entry(class).or_default();
        entry.estimate.add(micros);
        if enabled && !entry.waiting.is_empty() {
            self.refresh(class, now);
        }
    }

    /// The mean run time of `class`'s successful attempts, in microseconds, once it
    /// has one.
    pub(crate) fn mean(&self, class: u32) -> Option<f64> {
        self.classes
            .get(&class)
            .map(|entry| entry.estimate)
            .filter(|estimate| estimate.samples > 0)
            .map(|estimate| estimate.mean)
    }

    /// The mean run time over every class's successful attempts, once there is one.
    pub(crate) fn overall_mean(&self) -> Option<f64> {
        let (samples, total) = self.classes.values().fold((0u64, 0.0), |(n, sum), entry| {
            let estimate = entry.estimate;
            (
                n + estimate.samples,
                sum + estimate.mean * estimate.samples as f64,
            )
        });
        (samples > 0).then(|| total / samples as f64)
    }

    /// `attempt` of a speculative job of `class` started at `started` (not after `now`).
    pub(crate) fn insert(&mut self, class: u32, started: Time, attempt: AttemptId, now: Time) {
        if !self.is_enabled() {
            return;
        }
        let entry = self.classes.entry(class).or_default();
        entry.waiting.insert((started, attempt));
        if entry.waiting.first() == Some(&(started, attempt)) {
            self.refresh(class, now);
        }
    }

    /// Forgets `attempt` (started at `started`), straggler or not; nothing if unknown.
    pub(crate) fn remove(&mut self, class: u32, started: Time, attempt: AttemptId, now: Time) {
        if self.ripe.remove(&(started, attempt)) {
            return;
        }
        let Some(entry) = self.classes.get_mut(&class) else {
            return;
        };
        let head = entry.waiting.first() == Some(&(started, attempt));
        if entry.waiting.remove(&(started, attempt)) && head {
            self.refresh(class, now);
        }
    }

    /// Moves the attempts that are stragglers at `now` into the ripe set.
    pub(crate) fn advance(&mut self, now: Time) {
        while let Some(&(due, class)) = self.due.first() {
            if due > now {
                break;
            }
            self.refresh(class, now);
        }
    }

    /// The next instant an attempt becomes a straggler (always after the `now` of the
    /// last call that changed anything).
    pub(crate) fn next_due(&self) -> Option<Time> {
        self.due.first().map(|&(due, _)| due)
    }

    pub(crate) fn has_ripe(&self) -> bool {
        !self.ripe.is_empty()
    }

    /// The oldest straggler after `after` (from the oldest of all with `None`).
    pub(crate) fn ripe_after(&self, after: Option<(Time, AttemptId)>) -> Option<(Time, AttemptId)> {
        match after {
            None => self.ripe.first().copied(),
            Some(key) => self
                .ripe
                .range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    /// Takes a straggler out (it got its copy, or can never get one).
    pub(crate) fn take_ripe(&mut self, key: (Time, AttemptId)) {
        self.ripe.remove(&key);
    }

    /// Re-derives the class's place in `due` after its estimate or its oldest waiting
    /// attempt changed, first moving its attempts that are stragglers at `now`.
    fn refresh(&mut self, class: u32, now: Time) {
        let Some(policy) = self.policy else {
            return;
        };
        let Some(entry) = self.classes.get_mut(&class) else {
            return;
        };
        if let Some(due) = entry.due.take() {
            self.due.remove(&(due, class));
        }
        let Some(threshold) = entry.estimate.threshold(policy) else {
            return;
        };
        while let Some(&(started, attempt)) = entry.waiting.first() {
            let due = straggler_at(started, threshold);
            if due > now {
                // Time::MAX is never reached: no key, no timer for it.
                if due < Time::MAX {
                    entry.due = Some(due);
                    self.due.insert((due, class));
                }
                return;
            }
            entry.waiting.pop_first();
            self.ripe.insert((started, attempt));
        }
    }

    /// Indexed attempts (waiting or ripe).
    pub(crate) fn len(&self) -> usize {
        self.ripe.len()
            + self
                .classes
                .values()
                .map(|entry| entry.waiting.len())
                .sum::<usize>()
    }

    /// Whether `attempt` of `class`, started at `started`, is indexed.
    pub(crate) fn contains(&self, class: u32, started: Time, attempt: AttemptId) -> bool {
        self.ripe.contains(&(started, attempt))
            || self
                .classes
                .get(&class)
                .is_some_and(|entry| entry.waiting.contains(&(started, attempt)))
    }

    /// The index's own invariants at `now` (for the audit): every class's `due` key is
    /// the instant its oldest waiting attempt becomes a straggler, after `now`.
    pub(crate) fn check(&self, now: Time) -> Result<(), &'static str> {
        let mut keys = 0;
        for (class, entry) in &self.classes {
            let expected = self.policy.and_then(|policy| {
                let threshold = entry.estimate.threshold(policy)?;
                let &(started, _) = entry.waiting.first()?;
                Some(straggler_at(started, threshold)).filter(|due| *due < Time::MAX)
            });
            if entry.due != expected {
                return Err("a class's due instant is not its oldest attempt's");
            }
            if let Some(due) = entry.due {
                if due <= now {
                    return Err("a waiting attempt is overdue");
                }
                if !self.due.contains(&(due, *class)) {
                    return Err("a class's due instant is not indexed");
                }
                keys += 1;
            }
        }
        if keys != self.due.len() {
            return Err("due instants of no class");
        }
        if self.policy.is_none() && self.len() > 0 {
            return Err("attempts indexed with speculation off");
        }
        Ok(())
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let entry = size_of::<(Time, AttemptId)>() * 3 / 2 + 8;
        let classes = self.classes.len() * ((size_of::<u32>() + size_of::<Class>()) * 3 / 2 + 8);
        classes + self.due.len() * entry + self.len() * entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Speculation = Speculation {
        factor_percent: 150,
        min_samples: 2,
    };

    #[test]
    fn threshold_is_factor_times_mean_plus_two_sigma_after_min_samples() {
        let mut estimate = Estimate::default();
        estimate.add(1_000);
        assert_eq!(estimate.threshold(POLICY), None);
        estimate.add(3_000);
        // mean 2000, sigma 1000: 1.5 * 4000.
        assert_eq!(estimate.threshold(POLICY), Some(6_000));
        let zero = Speculation {
            min_samples: 0,
            ..POLICY
        };
        let mut single = Estimate::default();
        assert_eq!(single.threshold(zero), None, "no sample, no estimate");
        single.add(10);
        assert_eq!(single.threshold(zero), Some(15));
    }

    #[test]
    fn attempts_ripen_oldest_first_when_their_class_is_due() {
        let mut index = Stragglers::new(Some(POLICY));
        index.insert(1, Time(0), AttemptId(7), Time(0));
        index.insert(1, Time(50), AttemptId(3), Time(50));
        index.insert(2, Time(10), AttemptId(9), Time(60));
        assert_eq!(index.next_due(), None, "no estimate yet");
        for _ in 0..2 {
            index.record(1, 100, Time(60));
        }
        // Threshold 150: attempt 7 is a straggler from 151 on.
        assert_eq!(index.next_due(), Some(Time(151)));
        index.advance(Time(150));
        assert!(!index.has_ripe());
        index.advance(Time(201));
        assert_eq!(index.ripe_after(None), Some((Time(0), AttemptId(7))));
        assert_eq!(
            index.ripe_after(Some((Time(0), AttemptId(7)))),
            Some((Time(50), AttemptId(3)))
        );
        assert_eq!(index.next_due(), None);
        assert_eq!(index.check(Time(201)), Ok(()));
        index.remove(1, Time(0), AttemptId(7), Time(201));
        index.remove(2, Time(10), AttemptId(9), Time(201));
        assert_eq!(index.len(), 1);
        assert_eq!(index.check(Time(201)), Ok(()));
    }

    #[test]
    fn off_records_nothing() {
        let mut index = Stragglers::new(None);
        index.insert(0, Time(0), AttemptId(1), Time(0));
        index.record(0, 5, Time(0));
        assert_eq!((index.len(), index.next_due()), (0, None));
    }
}
