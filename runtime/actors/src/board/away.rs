//! While no root hears this node: what runs keeps running, what ends waits, and the
//! next root is told what this node still holds, so that it adopts the work instead
//! of running it again (docs/runtime-semantics.md, "Adoption"). What was sent up but
//! not yet written to the root's journal is kept until the root says it is
//! ([`Board::handle_durable`]): a root that dies first never had it.

use saker_wire::messages::{Held, Outcome, Report, ResultBody, TaskResult};

use super::{Board, Effect};

/// The most results kept for want of the root's word that they are durable; past it
/// the oldest go (a tuning bound: the root's word comes within a journal sync).
pub const MAX_UNACKED: usize = 65_536;

/// The most bytes of results (roughly, of their output) an agent keeps in memory while
/// no root hears it; past it they go to the node's disk until a root is back (a
/// tuning bound).
pub const AWAY_MEMORY_BYTES: usize = 64 << 20;

/// Roughly what `result` takes in memory: its output, and a fixed part.
fn result_bytes(result: &TaskResult) -> usize {
    const FIXED: usize = 256;
    FIXED
        + match &result.body {
            ResultBody::Command { stdout, stderr } | ResultBody::Part { stdout, stderr, .. } => {
                stdout.inline.len() + stderr.inline.len()
            }
            ResultBody::Function { output } => output.as_ref().map_or(0, Vec::len),
        }
}

impl Board {
    /// The link to the parent is gone and the agent looks for another: attempts that
    /// run keep running and their results wait for the next root, and so do gang
    /// parts (the next root adopts a gang once every member listed its part, and
    /// stops the parts otherwise); queued attempts are dropped (the next root queues
    /// them again: it never heard they were sent here), and so are fetches.
    pub fn handle_parent_lost(&mut self) {
        self.away = true;
        // Sent, but perhaps never written: they go to the next root again, first.
        let mut kept: Vec<_> = self.unacked.drain(..).flat_map(|(_, sent)| sent).collect();
        self.unacked_results = 0;
        kept.append(&mut self.pending.results);
        self.away_bytes = kept.iter().map(result_bytes).sum();
        self.pending.results = kept;
        self.spill_if_heavy();
        self.queue.clear();
        self.checked = None;
        for item in self.fetches.stop_all() {
            self.effects.push_back(Effect::DiscardItem { item });
        }
    }

    /// A result was held while away: past [`AWAY_MEMORY_BYTES`], every result held
    /// in memory goes to the node's disk.
    pub(super) fn held_while_away(&mut self) {
        if let Some(result) = self.pending.results.last() {
            self.away_bytes += result_bytes(result);
        }
        self.spill_if_heavy();
    }

    fn spill_if_heavy(&mut self) {
        if self.away_bytes <= AWAY_MEMORY_BYTES || self.spill_failed {
            return;
        }
        let results = std::mem::take(&mut self.pending.results);
        let held: Vec<Held> = results.iter().map(|r| self.held_ended(r)).collect();
        self.spilled.extend(held);
        self.away_bytes = 0;
        self.effects.push_back(Effect::SpillResults { results });
    }

    /// Writing held results to disk failed: they stay in memory (before those held
    /// since), and no more are written until the next life.
    pub fn handle_spill_failed(&mut self, mut results: Vec<TaskResult>) {
        self.spill_failed = true;
        self.spilled
            .retain(|held| !results.iter().any(|result| result.attempt == held.attempt));
        self.away_bytes += results.iter().map(result_bytes).sum::<usize>();
        results.append(&mut self.pending.results);
        self.pending.results = results;
    }

    /// The results written to disk while away, read back at the next life (`read`), or
    /// `None` if they could not be read: each of `held` then ends as lost, for the
    /// root to run again. They go before the results held in memory (they are older).
    pub fn handle_spilled_read(&mut self, held: &[Held], read: Option<Vec<TaskResult>>) {
        let mut results = read.unwrap_or_else(|| held.iter().map(lost_on_disk).collect());
        results.append(&mut self.pending.results);
        self.pending.results = results;
    }

    /// Results of this node on its disk, not read back yet.
    pub fn spilled(&self) -> usize {
        self.spilled.len()
    }

    /// Whether this node is between roots ([`Board::handle_parent_lost`] until the next
    /// [`Board::handle_new_life`]): nothing is reported.
    pub fn is_away(&self) -> bool {
        self.away
    }

    /// What this node holds for the root it says hello to: every attempt running here
    /// (in slot order), every gang part (each once, with its gang), then every result
    /// not reported yet (in result order; a part's with its gang).
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
                gang: None,
            });
        let parts = self
            .parts
            .running()
            .map(|(assignment, started_us, gang)| Held {
                attempt: assignment.attempt,
                task: assignment.task,
                started_unix_us: started_us,
                ended: false,
                gang: Some(gang.clone()),
            });
        let ended = self.spilled.iter().cloned().chain(
            self.pending
                .results
                .iter()
                .map(|result| self.held_ended(result)),
        );
        running.chain(parts).chain(ended).collect()
    }

    /// How a held result is listed in a hello.
    fn held_ended(&self, result: &TaskResult) -> Held {
        Held {
            attempt: result.attempt,
            task: result.task,
            started_unix_us: result.start_unix_us,
            ended: true,
            gang: self.parts.ended_gang(result.attempt).cloned(),
        }
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
            self.parts
                .forget_ended(oldest.iter().map(|result| result.attempt));
        }
    }

    /// The root wrote the results of every report up to `through`: forgotten here.
    pub fn handle_durable(&mut self, through: u64) {
        while let Some((seq, _)) = self.unacked.front()
            && *seq <= through
        {
            if let Some((_, written)) = self.unacked.pop_front() {
                self.unacked_results -= written.len();
                self.parts
                    .forget_ended(written.iter().map(|result| result.attempt));
            }
        }
    }

    /// Results sent up and not yet said durable by the root.
    pub fn unacked(&self) -> usize {
        self.unacked_results
    }
}

/// The result of an attempt whose result was written to disk and could not be read
/// back: lost, so that the root runs it again rather than wait for it forever.
fn lost_on_disk(held: &Held) -> TaskResult {
    TaskResult {
        task: held.task,
        attempt: held.attempt,
        executor: 0,
        outcome: Outcome::Lost {
            reason: "its result was kept on the node's disk while no root was reachable, \
                     and could not be read back"
                .to_owned(),
        },
        received_unix_us: 0,
        start_unix_us: held.started_unix_us,
        end_unix_us: held.started_unix_us,
        fetch_us: 0,
        body: ResultBody::Function { output: None },
    }
}
