//! While no root hears this node: what runs keeps running, what ends waits, and the
//! next root is told what this node still holds, so that it adopts the work instead
//! of running it again (docs/runtime-semantics.md, "Adoption"). What was sent up but
//! not yet written to the root's journal is kept until the root says it is
//! ([`Board::handle_durable`]): a root that dies first never had it.

use saker_wire::messages::{Held, Report};

use super::{Board, Effect, Moment};

/// The most results kept for want of the root's word that they are durable; past it
/// the oldest go (a tuning bound: the root's word comes within a journal sync).
pub const MAX_UNACKED: usize = 65_536;

impl Board {
    /// The link to the parent is gone and the agent looks for another: attempts that
    /// run keep running and their results wait for the next root; queued attempts
    /// are dropped (the next root queues them again: it never heard they were sent
    /// here), and so are fetches and gang parts (a gang ends whole).
    pub fn handle_parent_lost(&mut self, now: Moment) {
        self.away = true;
        // Sent, but perhaps never written: they go to the next root again, first.
        let mut kept: Vec<_> = self.unacked.drain(..).flat_map(|(_, sent)| sent).collect();
        self.unacked_results = 0;
        kept.append(&mut self.pending.results);
        self.pending.results = kept;
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

    /// `report` went up: its results are kept until the root says they are durable.
    pub fn handle_sent(&mut self, report: Report) {
        if report.results.is_empty() {
            return;
        }
        self.unacked_results += report.results.len();
        self.unacked.push_back((report.seq, report.results));
        while self.unacked_results > MAX_UNACKED {
            let Some((_, oldest)) = self.unacked.pop_front() else {
                break;
            };
            self.unacked_results -= oldest.len();
        }
    }

    /// The root wrote the results of every report up to `through`: forgotten here.
    pub fn handle_durable(&mut self, through: u64) {
        while let Some((seq, _)) = self.unacked.front()
            && *seq <= through
        {
            if let Some((_, written)) = self.unacked.pop_front() {
                self.unacked_results -= written.len();
            }
        }
    }

    /// Results sent up and not yet said durable by the root.
    pub fn unacked(&self) -> usize {
        self.unacked_results
    }
}
