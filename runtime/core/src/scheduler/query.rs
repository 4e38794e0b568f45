//! Read-only questions about live work, for drivers that keep per-attempt history.

use super::Core;
use crate::config::Placement;
use crate::ids::{AttemptId, JobId, NodeId, TaskId};
use crate::provision::Backlog;

impl Core {
    /// The queue as an elastic pilot's provisioner sees it: the queued tasks (those
    /// waiting for dependencies or a retry's backoff included), their work in
    /// core-seconds, and the widest queued HPC job.
    ///
    /// A task's run time is its estimate class's mean so far (tags name the class),
    /// else its time limit, else the mean over all classes, else `default_micros`.
    /// It needs the cores of its shape, on each node for an HPC job. Costs the number
    /// of (class, shape) kinds queued, not the number of tasks.
    pub fn backlog(&self, default_micros: u64) -> Backlog {
        let fallback = self
            .stragglers
            .overall_mean()
            .unwrap_or(default_micros as f64);
        let mut core_micros = 0.0;
        for ((class, shape), kind) in self.work.kinds() {
            let per_node = self.shapes.resources(shape).core_count().max(1);
            let cores = match self.shapes.placement(shape) {
                Placement::Gang { nodes } => per_node.saturating_mul(nodes.max(1)),
                Placement::Single | Placement::Node { .. } => per_node,
            };
            let task_micros = match self.stragglers.mean(class) {
                Some(mean) => mean * kind.tasks as f64,
                None => kind.limit_micros as f64 + (kind.tasks - kind.limited) as f64 * fallback,
            };
            core_micros += task_micros * f64::from(cores);
        }
        Backlog {
            queued: self.counts.queued,
            core_seconds: core_micros / 1e6,
            widest_gang: self.widest_queued_gang(),
        }
    }

    /// The id the next submitted job gets.
    pub fn next_job(&self) -> JobId {
        JobId(u32::try_from(self.jobs.len() + 1).unwrap_or(u32::MAX))
    }

    /// Whether `job` waits for other jobs to end (it was submitted with dependencies).
    pub fn is_waiting(&self, job: JobId) -> bool {
        self.deps.is_waiting(job)
    }

    /// The job of `task` and its index there, if the task was submitted and is not
    /// terminal.
    pub fn live_task(&self, task: TaskId) -> Option<(JobId, u32)> {
        match self.jobs.locate(task)? {
            crate::jobs::Located::Live(job, record, index) if !record.is_finished_index(index) => {
                Some((job, index))
            }
            _ => None,
        }
    }

    /// The task of live attempt `attempt` and the node it runs on (an HPC job's: its
    /// leader's), or `None` if it is not live. A driver whose attempt numbers may
    /// meet another's (a new root not given a term past the previous root's, see
    /// [`CoreConfig::term`](crate::CoreConfig::term), adopting agents that still hold
    /// results of its attempts) checks a result's task and node against it before
    /// [`Core::handle_result`].
    pub fn live_attempt(&self, attempt: AttemptId) -> Option<(TaskId, NodeId)> {
        self.attempts
            .get(&attempt)
            .map(|record| (record.task, record.node))
    }

    /// The live attempts on `node` and their tasks, in issue order; empty if the node
    /// is not live. Ask before [`Core::handle_node_lost`] to know which attempts the
    /// loss ends (e.g. to record why each ended); their tasks are replayed, or carry
    /// on with a speculative copy elsewhere.
    pub fn node_attempts(&self, node: NodeId) -> Vec<(TaskId, AttemptId)> {
        let Some(record) = self.nodes.get(node) else {
            return Vec::new();
        };
        record
            .attempts
            .iter()
            .filter_map(|attempt| Some((self.attempts.get(attempt)?.task, *attempt)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::{AttemptOutcome, Core, CoreConfig, JobSpec, NodeId, Placement, Resources, Time};

    const SECOND: u64 = 1_000_000;

    #[test]
    fn backlog_weighs_tasks_by_class_mean_then_time_limit_then_default() {
        let mut core = Core::new(CoreConfig::default());
        // 10 one-core tasks of class 1, no limit: the default, 60 s each.
        let plain = core
            .handle_submit(JobSpec::array(10).with_class(1), Time::ZERO)
            .unwrap()
            .job;
        // 5 two-core tasks of class 2 limited to 30 s.
        core.handle_submit(
            JobSpec::array(5)
                .with_cores(2)
                .with_class(2)
                .with_time_limit_micros(30 * SECOND),
            Time::ZERO,
        )
        .unwrap();
        // One HPC job on 2 nodes of 4 cores, limited to 100 s.
        core.handle_submit(
            JobSpec::single()
                .with_cores(4)
                .with_placement(Placement::Gang { nodes: 2 })
                .with_time_limit_micros(100 * SECOND),
            Time::ZERO,
        )
        .unwrap();
        let backlog = core.backlog(60 * SECOND);
        assert_eq!(backlog.queued, 16);
        assert_eq!(backlog.widest_gang, 2);
        assert_eq!(backlog.core_seconds, 600.0 + 300.0 + 800.0);

        // A class-1 task runs for 10 s: class 1 is now 10 s a task, and a task of a
        // class with no mean and no limit takes the mean over all (10 s).
        let one = Resources::cores(1);
        core.handle_node_joined(NodeId(1), one, Time::ZERO).unwrap();
        core.handle_credit(NodeId(1), one, Time::ZERO).unwrap();
        let dispatch = core.poll_dispatch().unwrap();
        let attempt = dispatch.assignments[0].attempt;
        assert_eq!(dispatch.assignments[0].job, plain);
        core.handle_started(attempt, Time::ZERO).unwrap();
        core.handle_result(attempt, AttemptOutcome::Succeeded, Time::from_secs(10));
        core.handle_submit(JobSpec::single().with_class(3), Time::from_secs(10))
            .unwrap();
        let backlog = core.backlog(60 * SECOND);
        assert_eq!(backlog.queued, 16);
        assert_eq!(backlog.core_seconds, 90.0 + 300.0 + 800.0 + 10.0);
        core.check_consistency().unwrap();

        // Cancelled work leaves the backlog.
        core.handle_cancel_job(plain, Time::from_secs(10)).unwrap();
        let backlog = core.backlog(60 * SECOND);
        assert_eq!(backlog.queued, 7);
        assert_eq!(backlog.core_seconds, 300.0 + 800.0 + 10.0);
        core.check_consistency().unwrap();
    }

    #[test]
    fn node_attempts_lists_live_work_of_one_node() {
        let mut core = Core::new(CoreConfig::default());
        core.handle_submit(JobSpec::array(3), Time::ZERO).unwrap();
        let two = Resources::cores(2);
        core.handle_node_joined(NodeId(1), two, Time::ZERO).unwrap();
        core.handle_credit(NodeId(1), two, Time::ZERO).unwrap();
        let dispatch = core.poll_dispatch().unwrap();
        let expected: Vec<_> = dispatch
            .assignments
            .iter()
            .map(|a| (a.task, a.attempt))
            .collect();
        assert_eq!(core.node_attempts(NodeId(1)), expected);
        assert!(core.node_attempts(NodeId(9)).is_empty());
        core.handle_node_lost(NodeId(1), Time::ZERO).unwrap();
        assert!(core.node_attempts(NodeId(1)).is_empty());
    }
}
