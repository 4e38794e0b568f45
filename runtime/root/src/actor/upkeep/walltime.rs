//! Walltime: the pilot stops before its allocation does.
//!
//! The root is given a deadline (the allocation's end minus a safety margin, or a
//! `--time-budget`). The core then starts only attempts that can finish by it. The
//! pilot stops early once nothing left can start and nothing runs; at the deadline
//! itself it kills what still runs (tasks without a time limit) so their tasks stay
//! unfinished in the journal for a continuation, and shuts down. Either way the
//! journal holds everything needed to resume.

use std::time::Duration;

use saker_core::Time;

use crate::actor::ctx::Ctx;
use crate::actor::port::Wake;
use saker_client::StatusReport;

/// The walltime deadline and what reaching it left.
#[derive(Debug, Default)]
pub(crate) struct Walltime {
    /// The deadline on the core's clock, if any.
    pub(super) deadline: Option<Time>,
    pub(super) reached: bool,
    /// `status` as the deadline left the pilot, reported from then on.
    status: Option<StatusReport>,
}

impl Walltime {
    /// Sets the deadline (unix µs) and arms the timer that enforces it.
    pub(crate) fn set(&mut self, ctx: &mut Ctx, deadline_unix_us: u64) {
        let now_unix = ctx.timestamp().unix_micros();
        let left = deadline_unix_us.saturating_sub(now_unix);
        let now = ctx.now();
        let deadline = Time::from_micros(now.as_micros() + left);
        ctx.core.handle_deadline(Some(deadline), now);
        self.deadline = Some(deadline);
        ctx.port
            .wake_after(Duration::from_micros(left), Wake::Walltime);
    }

    /// The deadline has come: the core starts nothing more. True when the pilot is to
    /// stop now (it was not stopped for it already).
    pub(crate) fn reach(&mut self, ctx: &mut Ctx) -> bool {
        if self.reached {
            return false;
        }
        tracing::info!("walltime deadline reached; stopping running tasks and the pilot");
        ctx.core.handle_drain(ctx.now());
        true
    }

    /// With a deadline set: whether every unfinished task is held back by it and
    /// nothing runs, so that waiting longer achieves nothing.
    pub(crate) fn exhausted(&self, ctx: &Ctx) -> bool {
        if self.deadline.is_none() || self.reached || ctx.pilot.shutting_down {
            return false;
        }
        let counts = ctx.core.counts();
        let unfinished = counts.queued + counts.delayed + counts.assigned + counts.running;
        let exhausted = unfinished > 0 && counts.beyond_deadline == unfinished;
        if exhausted {
            tracing::info!(
                tasks = unfinished,
                "no remaining task can finish before the deadline; stopping the pilot"
            );
        }
        exhausted
    }
}

impl Walltime {
    /// The pilot stops for its walltime.
    pub(crate) fn stop(&mut self) {
        self.reached = true;
    }

    /// `status` is the pilot's picture at the deadline (the agents' goodbyes that
    /// follow put their stopped attempts back in the queue, where they would read as
    /// never started), reported from then on.
    pub(crate) fn keep_status(&mut self, status: StatusReport) {
        self.status = Some(status);
    }

    /// Whether the deadline was reached.
    pub(crate) fn reached(&self) -> bool {
        self.reached
    }

    /// `status` as the deadline left the pilot, once reached.
    pub(crate) fn status_at_deadline(&self) -> Option<&StatusReport> {
        self.status.as_ref()
    }
}
