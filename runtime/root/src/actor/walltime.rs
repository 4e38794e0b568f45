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

use super::ctx::Ctx;
use super::port::Wake;
use super::state::RootState;
use super::upkeep::Walltime;

impl Walltime {
    /// Sets the deadline (unix µs) and arms the timer that enforces it.
    pub(super) fn set(&mut self, ctx: &mut Ctx, deadline_unix_us: u64) {
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
    pub(super) fn reach(&mut self, ctx: &mut Ctx) -> bool {
        if self.reached {
            return false;
        }
        tracing::info!("walltime deadline reached; stopping running tasks and the pilot");
        ctx.core.handle_drain(ctx.now());
        true
    }

    /// With a deadline set: whether every unfinished task is held back by it and
    /// nothing runs, so that waiting longer achieves nothing.
    pub(super) fn exhausted(&self, ctx: &Ctx) -> bool {
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

impl RootState {
    pub(super) fn set_deadline(&mut self, deadline_unix_us: u64) {
        self.upkeep.walltime.set(&mut self.ctx, deadline_unix_us);
    }

    /// The deadline has come: stop starting, kill what runs, stop the pilot.
    pub(super) fn on_walltime(&mut self) {
        if self.upkeep.walltime.reach(&mut self.ctx) {
            self.stop_for_walltime();
        }
    }

    /// Called after every turn (see [`Walltime::exhausted`]).
    pub(super) fn check_exhausted(&mut self) {
        if self.upkeep.walltime.exhausted(&self.ctx) {
            self.stop_for_walltime();
        }
    }

    fn stop_for_walltime(&mut self) {
        self.upkeep.walltime.reached = true;
        // The agents' goodbyes that follow put their stopped attempts back in the
        // queue, where they would read as never started; the picture at the deadline
        // is what the run reports.
        self.upkeep.walltime.status = Some(self.status());
        self.on_shutdown();
    }
}
