//! Data-aware placement: jobs that would rather run on some nodes (where the data they
//! read is), with delay scheduling.
//!
//! The driver says which nodes a job prefers ([`Core::handle_prefer`]): the core knows
//! nothing of data, only of nodes. Once the job's work is queued it waits up to
//! [`CoreConfig::locality_wait_micros`] for one of them: other nodes pass over it,
//! taking the work behind it, and a preferred node takes it before anything else (as
//! it does work pinned to it). When the wait is over the preference is dropped and
//! any node may take the work. So a reader runs where its input is whenever that node
//! frees a slot within the wait, and never waits longer than that for it: the delay
//! scheduling of Zaharia et al., with the wait bounded per job rather than counted in
//! skipped offers, because the core knows time.
//!
//! [`CoreConfig::locality_wait_micros`]: crate::CoreConfig::locality_wait_micros

use std::collections::{BTreeSet, HashMap};

use super::{Core, slot};
use crate::config::Placement;
use crate::error::UpdateError;
use crate::ids::{JobId, NodeId, Time};

/// Most nodes one job may prefer; more are cut (the driver lists the best first).
pub const MAX_PREFERRED_NODES: usize = 8;

/// The preferences in force. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Locality {
    prefs: HashMap<JobId, Preference>,
    /// (until, job) of preferences whose wait has started.
    timers: BTreeSet<(Time, JobId)>,
}

#[derive(Debug)]
struct Preference {
    nodes: Vec<NodeId>,
    /// When the wait ends: set when the job's work is first queued with it.
    until: Option<Time>,
}

impl Locality {
    pub(crate) fn is_empty(&self) -> bool {
        self.prefs.is_empty()
    }

    /// Whether `job`'s queued work is kept from node `serving` (`None`: a search by
    /// capacity, which stands for any node): it prefers others and still waits.
    pub(crate) fn holds_back(&self, job: JobId, serving: Option<NodeId>) -> bool {
        match self.prefs.get(&job) {
            None => false,
            Some(pref) => serving.is_none_or(|node| !pref.nodes.contains(&node)),
        }
    }

    /// Whether `job` prefers `node`.
    pub(crate) fn prefers(&self, job: JobId, node: NodeId) -> bool {
        self.prefs
            .get(&job)
            .is_some_and(|pref| pref.nodes.contains(&node))
    }

    /// The earliest end of a wait.
    pub(crate) fn next_timer(&self) -> Option<Time> {
        self.timers.first().map(|&(until, _)| until)
    }

    /// Checks that only unfinished jobs (`live`) prefer nodes, that each prefers
    /// some (at most [`MAX_PREFERRED_NODES`], no node twice), and that the timers are
    /// exactly the waits started.
    pub(crate) fn audit(&self, live: impl Fn(JobId) -> bool) -> Result<(), String> {
        let mut started = 0;
        for (&job, pref) in &self.prefs {
            if !live(job) {
                return Err(format!(
                    "job {job} prefers nodes but is finished or unknown"
                ));
            }
            let mut nodes = pref.nodes.clone();
            nodes.sort_unstable();
            nodes.dedup();
            if nodes.is_empty()
                || nodes.len() != pref.nodes.len()
                || nodes.len() > MAX_PREFERRED_NODES
            {
                return Err(format!("job {job} prefers {:?}", pref.nodes));
            }
            if let Some(until) = pref.until {
                started += 1;
                if !self.timers.contains(&(until, job)) {
                    return Err(format!("job {job} waits until {until:?} with no timer"));
                }
            }
        }
        if started != self.timers.len() {
            return Err(format!(
                "{} timers for {started} waits started",
                self.timers.len()
            ));
        }
        Ok(())
    }

    /// Drops `job`'s preference, if it has one.
    pub(crate) fn forget(&mut self, job: JobId) {
        if let Some(pref) = self.prefs.remove(&job)
            && let Some(until) = pref.until
        {
            self.timers.remove(&(until, job));
        }
    }
}

impl Core {
    /// `job` would rather run on `nodes` (best first; at most
    /// [`MAX_PREFERRED_NODES`] are kept): its queued work waits up to
    /// [`CoreConfig::locality_wait_micros`](crate::CoreConfig::locality_wait_micros)
    /// from when it is queued for one of them (see the module doc). Empty `nodes`, a
    /// wait of 0, or a job spanning nodes or pinned to one: no preference. A job
    /// already preferring nodes keeps its wait's end. Work already dispatched is not
    /// moved. Errors: an unknown job; one that has ended.
    pub fn handle_prefer(
        &mut self,
        job: JobId,
        nodes: &[NodeId],
        now: Time,
    ) -> Result<(), UpdateError> {
        self.observe(now);
        let counts = self
            .job_counts(job)
            .ok_or(UpdateError::UnknownJob { job })?;
        let Some(record) = self.job(job).filter(|_| !counts.is_finished()) else {
            return Err(UpdateError::Ended { job });
        };
        let placement = self.shapes.placement(record.spec.shape);
        let until = self.locality.prefs.get(&job).and_then(|pref| pref.until);
        self.locality.forget(job);
        if nodes.is_empty()
            || self.config.locality_wait_micros == 0
            || placement != Placement::Single
        {
            return Ok(());
        }
        let mut preferred: Vec<NodeId> = Vec::with_capacity(nodes.len());
        for &node in nodes {
            if !preferred.contains(&node) && preferred.len() < MAX_PREFERRED_NODES {
                preferred.push(node);
            }
        }
        self.locality.prefs.insert(
            job,
            Preference {
                nodes: preferred,
                until: None,
            },
        );
        match until {
            Some(until) => self.start_wait(job, until),
            None if self.has_queued_work(job) => self.note_queued_preference(job),
            None => {}
        }
        Ok(())
    }

    /// `job`'s work was queued: its wait starts now if it has not, and its nodes are
    /// woken to look for it first.
    pub(super) fn note_queued_preference(&mut self, job: JobId) {
        let Some(pref) = self.locality.prefs.get(&job) else {
            return;
        };
        let nodes = pref.nodes.clone();
        if pref.until.is_none() {
            let until = self
                .now
                .saturating_add_micros(self.config.locality_wait_micros);
            self.start_wait(job, until);
        }
        for node in nodes {
            self.pinned_waiting.insert(node);
            self.nodes.wake(node);
        }
    }

    fn start_wait(&mut self, job: JobId, until: Time) {
        if let Some(pref) = self.locality.prefs.get_mut(&job) {
            pref.until = Some(until);
            self.locality.timers.insert((until, job));
        }
    }

    /// Drops the preferences whose wait is over: their work is anyone's now.
    pub(super) fn end_due_waits(&mut self) {
        while let Some(&(until, job)) = self.locality.timers.first() {
            if until > self.now {
                break;
            }
            self.locality.timers.pop_first();
            self.locality.prefs.remove(&job);
        }
    }

    /// Whether `job` may have work in the ready queue now: queued tasks and no wait
    /// for dependencies or a time. (Work held past the deadline counts: its wait
    /// running out changes nothing there.)
    fn has_queued_work(&self, job: JobId) -> bool {
        self.jobs[slot(job)].counts.queued > 0 && !self.deps.is_waiting(job)
    }
}
