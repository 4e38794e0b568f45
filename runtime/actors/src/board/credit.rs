//! The credit this node grants the root: each attempt that ends hands its resources
//! back, and a window of cores (the node's cores plus a prefetch sized to the recent
//! pace) is kept granted, so that slots never wait a round trip for work.

use std::time::Duration;

use saker_wire::messages::{Outcome, ResourceKind, Resources};

use super::{Board, Effect, PREFETCH_COVER, PREFETCH_ROUNDS};
use crate::attempt::Finished;

impl Board {
    /// Cores of queued work to hold so that slots never wait for the root: enough to
    /// cover `cover` (a report gap plus a round trip) at the recent attempts' pace,
    /// never less than `floor` and never more than [`PREFETCH_ROUNDS`] rounds of the
    /// node's cores (a bound on what a wrong estimate strands here while others run dry).
    pub fn prefetch(&self, cores: u32, floor: u32, cover: Duration) -> u32 {
        let ceiling = cores.saturating_mul(PREFETCH_ROUNDS).max(floor);
        let Some(mean) = self.mean_run_us else {
            return floor;
        };
        let wanted = (f64::from(cores) * cover.as_micros() as f64 / mean.max(1.0)).ceil();
        (wanted.min(f64::from(ceiling)) as u32).max(floor)
    }

    /// Forgets the pace of past attempts: the prefetch is the floor until one of the
    /// next ends.
    pub fn forget_pace(&mut self) {
        self.mean_run_us = None;
    }

    /// Sizes the window to the recent pace, before a report: an idle node forgets the
    /// pace, because the next work may be another job's, far longer, and the pace of
    /// what ran before would size the window for the wrong work. (A 4 ms task once had
    /// a one-core agent then take 10 one-second tasks while other agents idled.)
    pub(super) fn pace(&mut self) {
        if self.is_idle() {
            self.forget_pace();
        }
        let prefetch = self.prefetch(self.cores, self.prefetch_floor, PREFETCH_COVER);
        self.resize_window(self.cores + prefetch);
    }

    /// Grows or shrinks the credit this node keeps granted. Growth is granted with the
    /// next report; a shrink is taken out of the next credit returns.
    pub fn resize_window(&mut self, window: u32) {
        if window > self.window {
            let grow = window - self.window;
            let forgiven = grow.min(self.owed);
            self.owed -= forgiven;
            self.add_credit_cores(grow - forgiven);
        } else {
            self.owed += self.window - window;
        }
        self.window = window;
    }

    /// A new life at the root (this node registered again): it holds no credit of ours
    /// any more. What is free now is granted, plus the prefetch at the recent pace.
    /// A node that was away reports again.
    pub fn handle_new_life(&mut self) {
        self.away = false;
        self.away_bytes = 0;
        self.spill_failed = false;
        if !self.spilled.is_empty() {
            let held = std::mem::take(&mut self.spilled);
            self.effects.push_back(Effect::ReadSpilled { held });
        }
        let prefetch = self.prefetch(self.cores, self.prefetch_floor, PREFETCH_COVER);
        self.reset_credit(self.cores, prefetch);
    }

    /// A new life at the root: it holds no credit of ours any more. What is free now is
    /// granted, plus `prefetch` cores; running attempts give theirs back as they end.
    ///
    /// Only cores are prefetched: in every other kind the credit granted plus what
    /// queued and running attempts hold never exceeds the node's capacity, so whatever
    /// heads the local queue always has its GPUs, memory and named resources free, and
    /// waits for cores alone, as it would on a cores-only node.
    pub fn reset_credit(&mut self, cores: u32, prefetch: u32) {
        self.credit = self
            .free
            .with(ResourceKind::CORES, self.free.core_count() + prefetch);
        self.window = cores + prefetch;
        self.owed = 0;
    }

    fn add_credit_cores(&mut self, cores: u32) {
        let total = self.credit.core_count().saturating_add(cores);
        self.credit = self.credit.with(ResourceKind::CORES, total);
    }

    /// Credit for `needs` that came back (an attempt ended or a queued one was
    /// answered), less the cores owed after a shrink.
    pub(super) fn give_back(&mut self, needs: Resources) {
        let kept = needs.core_count().min(self.owed);
        self.owed -= kept;
        let back = needs.with(ResourceKind::CORES, needs.core_count() - kept);
        self.credit = self.credit.saturating_add(back);
    }

    /// Only attempts that ended by themselves say how long this work takes.
    pub(super) fn note_run_time(&mut self, finished: &Finished) {
        if !matches!(finished.outcome, Outcome::Exited { .. }) {
            return;
        }
        let run = finished.end_unix_us.saturating_sub(finished.start_unix_us) as f64;
        self.mean_run_us = Some(match self.mean_run_us {
            None => run,
            Some(mean) => mean + (run - mean) / 8.0,
        });
    }
}
