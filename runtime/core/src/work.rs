//! The queued work, summed by kind for an elastic pilot's backlog.
//!
//! A *kind* is an (estimate class, shape) pair: its tasks share a runtime estimate and
//! the cores each needs. Every move of tasks into or out of the `queued` counters
//! (see `JobRecord::shift`) moves them here too, so reading the backlog costs the
//! number of kinds (a handful), not the number of queued tasks or jobs.

use std::collections::BTreeMap;

use crate::stored::StoredSpec;

/// Queued tasks of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kind {
    /// Queued tasks.
    pub(crate) tasks: u64,
    /// Those of them with a time limit.
    pub(crate) limited: u64,
    /// The sum of those time limits, in microseconds.
    pub(crate) limit_micros: u128,
}

/// Queued tasks by (class, shape). See the module doc.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct QueuedWork {
    kinds: BTreeMap<(u32, u32), Kind>,
}

impl QueuedWork {
    /// `amount` tasks of a job with `spec` entered the queue.
    pub(crate) fn add(&mut self, spec: &StoredSpec, amount: u32) {
        if amount == 0 {
            return;
        }
        let kind = self.kinds.entry((spec.class, spec.shape)).or_default();
        kind.tasks += u64::from(amount);
        if let Some(limit) = spec.time_limit {
            kind.limited += u64::from(amount);
            kind.limit_micros += u128::from(limit) * u128::from(amount);
        }
    }

    /// `amount` tasks of a job with `spec` left the queue (they were counted in).
    pub(crate) fn remove(&mut self, spec: &StoredSpec, amount: u32) {
        if amount == 0 {
            return;
        }
        let key = (spec.class, spec.shape);
        let Some(kind) = self.kinds.get_mut(&key) else {
            debug_assert!(false, "queued work of kind {key:?} was never added");
            return;
        };
        kind.tasks = kind.tasks.saturating_sub(u64::from(amount));
        if let Some(limit) = spec.time_limit {
            kind.limited = kind.limited.saturating_sub(u64::from(amount));
            kind.limit_micros = kind
                .limit_micros
                .saturating_sub(u128::from(limit) * u128::from(amount));
        }
        if kind.tasks == 0 {
            self.kinds.remove(&key);
        }
    }

    /// ((class, shape), kind) for each kind with queued tasks, in key order.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = ((u32, u32), Kind)> + '_ {
        self.kinds.iter().map(|(&key, &kind)| (key, kind))
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.kinds.len() * ((size_of::<(u32, u32)>() + size_of::<Kind>()) * 3 / 2 + 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::JobSpec;

    fn spec(class: u32, shape: u32, limit: Option<u64>) -> StoredSpec {
        let mut job = JobSpec::single();
        job.class = class;
        job.time_limit = limit;
        StoredSpec::new(&job, shape)
    }

    #[test]
    fn kinds_add_up_and_vanish_when_empty() {
        let mut work = QueuedWork::default();
        work.add(&spec(1, 0, None), 10);
        work.add(&spec(1, 0, Some(5)), 4);
        work.add(&spec(2, 3, None), 1);
        let kinds: Vec<_> = work.kinds().collect();
        assert_eq!(
            kinds,
            vec![
                (
                    (1, 0),
                    Kind {
                        tasks: 14,
                        limited: 4,
                        limit_micros: 20
                    }
                ),
                ((2, 3), Kind::default().with_tasks(1)),
            ]
        );
        work.remove(&spec(1, 0, Some(5)), 3);
        work.remove(&spec(2, 3, None), 1);
        let kinds: Vec<_> = work.kinds().collect();
        assert_eq!(
            kinds,
            vec![(
                (1, 0),
                Kind {
                    tasks: 11,
                    limited: 1,
                    limit_micros: 5
                }
            )]
        );
        work.remove(&spec(1, 0, None), 10);
        work.remove(&spec(1, 0, Some(5)), 1);
        assert_eq!(work, QueuedWork::default());
    }

    impl Kind {
        fn with_tasks(mut self, tasks: u64) -> Kind {
            self.tasks = tasks;
            self
        }
    }
}
