//! While no root hears this node: what runs keeps running, what ends waits, and the
//! next root is told what this node still holds, so that it adopts the work instead
//! of running it again (docs/runtime-semantics.md, "Adoption").

use saker_wire::messages::Held;

use super::{Board, Effect, Moment};

impl Board {
    /// The link to the parent is gone and the agent looks for another: attempts that
    /// run keep running and their results wait for the next root; queued attempts
    /// are dropped (the next root queues them again: it never heard they were sent
    /// here), and so are fetches and gang parts (a gang ends whole).
    pub fn handle_parent_lost(&mut self, now: Moment) {
        self.away = true;
        self.queue.clear();
        self.checked = None;
        for item in self.fetches.stop_all() {
            self.effects.push_back(Effect::DiscardItem { item });
        }
        self.cancel_all_parts(now);
    }

    /// Whether this node is between roots ([`Board::handle_parent_lost`] until the next
    /// [`Board::handle_new_life`]): nothing is reported.
    pub fn is_away(&self) -> bool {
        self.away
    }

    /// What this node holds for the root it says hello to: every attempt running here
    /// (but gang parts' processes), then every result not reported yet, in slot and
    /// then result order.
    pub fn held(&self) -> Vec<Held> {
        let running = self
            .slots
            .iter()
            .filter_map(|slot| slot.running)
            .filter(|running| running.part.is_none())
            .map(|running| Held {
                attempt: running.assignment.attempt,
                task: running.assignment.task,
                started_unix_us: running.started_us,
                ended: false,
            });
        let ended = self.pending.results.iter().map(|result| Held {
            attempt: result.attempt,
            task: result.task,
            started_unix_us: result.start_unix_us,
            ended: true,
        });
        running.chain(ended).collect()
    }
}
