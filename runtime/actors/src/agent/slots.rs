//! The agent as supervisor of its slots' threads: one for one, with backoff and a
//! bounded intensity (see [`crate::supervision`]).
//!
//! A slot whose thread failed is down: the attempt it ran is reported lost (its
//! process group killed), so the root replays it without counting it against the
//! task's retries, and the slot takes no work until a fresh thread runs it, after the
//! policy's backoff. Past the restart intensity the slot is given up for the rest of
//! the agent's life. The node keeps offering its cores: the remaining slots run the
//! work, a little more of it waits queued here. With no slot left the agent fails
//! ([`AgentFailure::NoSlotLeft`]) and says goodbye, so the root replays what it held.

use ractor::ActorRef;
use tokio::time::Instant;

use super::desk::lock;
use super::{AgentFailure, AgentMsg, AgentState};
use crate::board::SlotState;
use crate::executor::SlotFault;
use crate::supervision::Verdict;

/// The thread of `slot` (as its `generation`) failed with `fault`.
pub(super) fn on_slot_failed(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    slot: u32,
    generation: u64,
    fault: SlotFault,
) -> Result<(), AgentFailure> {
    let index = slot as usize;
    {
        let mut desk = lock(&state.desk);
        if desk
            .board
            .slot(index)
            .is_none_or(|(current, _)| current != generation)
        {
            return Ok(()); // Not the slot's current thread: handled already.
        }
        let reason = format!("slot {slot} failed: {}", crate::error_chain(&fault));
        let now = desk.now();
        desk.apply(now, |board| board.handle_slot_lost(index, reason, now));
    }
    let Some(restarts) = state.restarts.get_mut(index) else {
        return Ok(());
    };
    match restarts.on_failure(&state.config.restarts, Instant::now()) {
        Verdict::RestartAfter(wait) => {
            tracing::warn!(
                slot,
                ?wait,
                error = &fault as &dyn std::error::Error,
                "a slot failed; restarting it"
            );
            myself.send_after(wait, move || AgentMsg::RestartSlot { slot });
        }
        Verdict::GiveUp { failures } => {
            tracing::error!(
                slot,
                failures,
                window = ?state.config.restarts.window,
                error = &fault as &dyn std::error::Error,
                "a slot keeps failing; giving it up"
            );
            if lock(&state.desk).board.handle_slot_given_up(index) == 0 {
                return Err(AgentFailure::NoSlotLeft {
                    slots: state.slot_runs.len() as u32,
                    last: fault,
                });
            }
        }
    }
    Ok(())
}

/// The backoff of `slot` is over: a fresh thread takes it (failing to start one is
/// the slot's next failure).
pub(super) fn on_restart_slot(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    slot: u32,
) -> Result<(), AgentFailure> {
    let index = slot as usize;
    let generation = match lock(&state.desk).board.slot(index) {
        Some((generation, SlotState::Down)) => generation,
        _ => return Ok(()),
    };
    match crate::executor::start(slot, generation, state.sink.clone()) {
        Ok(runs) => {
            state.slot_runs[index] = runs;
            lock(&state.desk).board.handle_slot_up(index);
            tracing::info!(slot, "restarted a failed slot");
            Ok(())
        }
        Err(fault) => on_slot_failed(myself, state, slot, generation, fault),
    }
}
