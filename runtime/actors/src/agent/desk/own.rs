//! The desk's side of the part processes that wait on others (an MPI launcher,
//! `srun`, a script): each runs on a thread of its own rather than on a slot, so
//! the daemons and ranks it waits for always find the slots of the cores their part
//! holds (a launcher on a slot could take the last one its own daemon needed).

use saker_wire::messages::{AttemptId, Outcome, Output};

use super::{Desk, lock};
use crate::attempt::Finished;
use crate::board::{PartPlan, PartProcess};
use crate::process::{Scratch, StopHandle, unix_micros};
use crate::resources::Binding;

impl Desk {
    /// Starts `process` of `plan`'s part on a thread of its own; its end goes to the
    /// board. Dropping its stop handle (the part stopped) kills it.
    pub(super) fn run_own(&mut self, plan: &PartPlan, process: PartProcess, binding: &Binding) {
        let (attempt, number) = (process.attempt, process.number);
        let launch = crate::gang::process_launch(plan, &process, binding, &self.places);
        let (stop, control) = StopHandle::new();
        self.own.insert(attempt, stop);
        let desk = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("part-{attempt}"))
            .spawn(move || {
                let finished = crate::process::run(&launch, &control, &mut Scratch::default())
                    .unwrap_or_else(|error| {
                        not_started(format!("this node could not start it: {error}"))
                    });
                tracing::debug!(%attempt, number, outcome = ?finished.outcome, "a part's own process ended");
                if let Some(desk) = desk.upgrade() {
                    lock(&desk).own_ended(attempt, number, finished);
                }
            });
        if let Err(error) = spawned {
            self.own.remove(&attempt);
            let finished = not_started(format!("no thread to run it: {error}"));
            let now = self.now();
            // Within the board's effects: its next ones carry this out.
            self.board.handle_own_ended(attempt, number, finished, now);
        }
    }

    /// No slot thread rings the report clock for it: its part's news (its result,
    /// what it stopped) goes up at once.
    fn own_ended(&mut self, attempt: AttemptId, number: u32, finished: Finished) {
        self.own.remove(&attempt);
        let now = self.now();
        self.apply(now, |board| {
            board.handle_own_ended(attempt, number, finished, now);
        });
        if let Err(error) = self.send_report(now) {
            // The link is gone: the agent hears of that on its own.
            tracing::debug!(%attempt, error = %crate::error_chain(&error), "could not report a part's end");
        }
    }

    /// Stops `attempt`'s process that runs on a thread of its own (its thread still
    /// reports its end).
    pub(super) fn stop_own(&mut self, attempt: AttemptId) {
        if let Some(stop) = self.own.remove(&attempt) {
            stop.cancel();
        }
    }
}

fn not_started(reason: String) -> Finished {
    let now = unix_micros();
    Finished {
        outcome: Outcome::SpawnFailed { reason },
        start_unix_us: now,
        end_unix_us: now,
        stdout: Output::default(),
        stderr: Output::default(),
        body: None,
    }
}
