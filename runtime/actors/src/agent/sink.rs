//! What the slots' threads report to: the agent's desk, under its lock. A slot whose
//! attempt ends books it, takes its next attempt and sends a report that is due
//! without waking the agent; only when other idle slots could start work now does it
//! send the agent a message.

use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;

use super::AgentMsg;
use super::desk::{SharedDesk, lock};
use crate::executor::{AfterAttempt, AttemptDone, SlotFault, SlotSink};
use crate::resources::SystemProbe;
use crate::resources::cgroup::{MemoryCgroups, SlotCgroup};

#[derive(Debug, Clone)]
pub(super) struct AgentSink {
    pub(super) agent: ActorRef<AgentMsg>,
    pub(super) desk: SharedDesk,
    /// The slots' memory cgroups, when this agent limits memory.
    pub(super) memory: Option<Arc<MemoryCgroups>>,
}

/// The agent's memory cgroups, if it is to limit memory and may.
pub(super) fn memory_cgroups(config: &super::AgentConfig) -> Option<MemoryCgroups> {
    if !config.limit_memory {
        return None;
    }
    let name = format!("saker-{}-{}", config.node, std::process::id());
    match MemoryCgroups::create(&name, &SystemProbe) {
        Ok(groups) => {
            tracing::info!("memory limits: a cgroup per slot");
            Some(groups)
        }
        Err(error) => {
            tracing::warn!(
                error = %crate::error_chain(&error),
                "memory is accounted but not limited on this node"
            );
            None
        }
    }
}

impl SlotSink for AgentSink {
    fn attempt_done(&self, done: AttemptDone, generation: u64) -> AfterAttempt {
        let (after, wake) = {
            let mut desk = lock(&self.desk);
            let now = desk.now();
            let executor = done.executor;
            let next = desk.attempt_done(generation, done, now);
            let report_at = desk.report_clock(executor, generation, now);
            (AfterAttempt { next, report_at }, desk.board.wants_agent())
        };
        if wake {
            // If the agent is gone the process is exiting; nothing is left to report to.
            let _ = self.agent.send_message(AgentMsg::SlotChanged);
        }
        after
    }

    fn report_clock(&self, executor: u32, generation: u64) -> Option<Instant> {
        let mut desk = lock(&self.desk);
        let now = desk.now();
        desk.report_clock(executor, generation, now)
    }

    fn slot_failed(&self, executor: u32, generation: u64, fault: SlotFault) {
        let failed = AgentMsg::SlotFailed {
            slot: executor,
            generation,
            fault,
        };
        // An agent that is gone has no slot to restart.
        let _ = self.agent.send_message(failed);
    }

    fn memory_cgroup(&self, executor: u32) -> Option<SlotCgroup> {
        let groups = self.memory.as_ref()?;
        groups
            .slot(executor)
            .inspect_err(|error| {
                tracing::warn!(
                    error = %crate::error_chain(error),
                    executor,
                    "memory of this slot's tasks is not limited"
                );
            })
            .ok()
    }
}
