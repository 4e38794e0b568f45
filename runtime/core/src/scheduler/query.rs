//! Read-only questions about live work, for drivers that keep per-attempt history.

use super::Core;
use crate::ids::{AttemptId, JobId, NodeId, TaskId};

impl Core {
    /// The id the next submitted job gets.
    pub fn next_job(&self) -> JobId {
        JobId(u32::try_from(self.jobs.len() + 1).unwrap_or(u32::MAX))
    }

    /// Whether `job` waits for other jobs to end (it was submitted with dependencies).
    pub fn is_waiting(&self, job: JobId) -> bool {
        self.deps.is_waiting(job)
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
    use crate::{Core, CoreConfig, JobSpec, NodeId, Resources, Time};

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
