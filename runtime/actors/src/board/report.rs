//! What goes up, and when: reports are coalesced and paced, at most one per
//! [`REPORT_GAP`] unless one is urgent, so that under load many results share a frame.
//! The slots' threads send their own news when it is due; one slot at a time keeps the
//! clock for the end of the gap; the agent schedules a flush for what it adds itself.

use std::time::Duration;

use saker_wire::messages::{FRAME_DATA_BUDGET, FromAgent, NodeId, Report};

use super::{Board, FlushPlan, REPORT_GAP, Slot};

/// When the agent is to send a report of its own ([`Board::poll_flush`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// At once.
    Now,
    /// At this time since the shell's origin (the end of the report gap).
    At(Duration),
}

impl Board {
    /// Whether the report should go now rather than wait out the gap: the local queue
    /// is empty, so free slots wait for the work this credit would bring, or whoever
    /// waits for these results may have nothing else coming. (Starts alone can wait.)
    pub fn is_urgent(&self) -> bool {
        !self.fetches.outbox.is_empty()
            || (self.queue.is_empty()
                && (!self.credit.is_zero() || !self.pending.results.is_empty()))
    }

    /// Whether a report should go at `now`: the gap since the last one has passed, or
    /// it is urgent.
    pub fn report_due(&self, now: super::Moment) -> bool {
        self.last_report + REPORT_GAP <= now.since_start || self.is_urgent()
    }

    /// After a slot's attempt ended, or its report clock rang: whether its thread
    /// sends the report now. Slots report by themselves, so a busy node's reports
    /// never wake the agent.
    pub fn report_from_slot(&self, now: super::Moment) -> bool {
        !self.closed && !self.away && self.has_news() && self.report_due(now)
    }

    /// After slot `index` (of executor `generation`) reported what was due: when its
    /// thread should look again (since the shell's origin), if news from the slots
    /// still waits out the gap. One slot at a time keeps this clock, so a paced report
    /// costs at most one wake-up, however many slots the node has; the clock passes on
    /// when its keeper finds nothing left to send.
    pub fn keep_report_clock(&mut self, index: usize, generation: u64) -> Option<Duration> {
        if self
            .slots
            .get(index)
            .is_none_or(|slot| slot.generation != generation)
        {
            return None;
        }
        if self.closed || self.away || !self.has_news() {
            if self.report_clock == Some(index) {
                self.report_clock = None;
            }
            return None;
        }
        match self.report_clock {
            Some(keeper) if keeper != index => None,
            _ => {
                self.report_clock = Some(index);
                Some(self.last_report + REPORT_GAP)
            }
        }
    }

    /// After a slot's attempt ended: whether the agent has to start work on other idle
    /// slots. Otherwise a slot thread leaves it asleep: a busy node's slots run, report
    /// and pace themselves without it.
    pub fn wants_agent(&self) -> bool {
        self.accepting
            && ((self.free.core_count() > 0 && !self.queue.is_empty())
                || !self.parts.queue.is_empty())
            && self.slots.iter().any(Slot::is_idle)
    }

    pub fn has_news(&self) -> bool {
        self.fetches.has_news()
            || !self.credit.is_zero()
            || !self.pending.started.is_empty()
            || !self.pending.results.is_empty()
            || !self.parts.launch_ends.is_empty()
            || !self.parts.held_launches.is_empty()
    }

    /// After an input of the agent's own: whether it schedules a report, now or at
    /// the end of the gap. A flush already scheduled is not scheduled again, and a
    /// later one is brought forward when the news turned urgent.
    pub fn poll_flush(&mut self, now: super::Moment) -> Option<Flush> {
        if self.away || !self.has_news() {
            return None;
        }
        let plan = if self.report_due(now) {
            FlushPlan::Now
        } else {
            FlushPlan::Later
        };
        match (self.flush, plan) {
            (FlushPlan::Idle | FlushPlan::Later, FlushPlan::Now) => {
                self.flush = plan;
                Some(Flush::Now)
            }
            (FlushPlan::Idle, FlushPlan::Later) => {
                self.flush = plan;
                // A timer outliving a sooner flush finds nothing to send, or sends a
                // little early: harmless either way.
                Some(Flush::At(self.last_report + REPORT_GAP))
            }
            _ => None,
        }
    }

    /// The agent's scheduled flush came: the next news schedules another.
    pub fn handle_flush(&mut self) {
        self.flush = FlushPlan::Idle;
    }

    /// Begins a report at `now` (due, flushed, or before a hello or goodbye): sizes the
    /// credit window to the recent pace first. Returns whether there is anything to
    /// send; then send every [`Board::poll_up`] in order.
    pub fn start_report(&mut self, now: super::Moment) -> bool {
        self.pace();
        if self.closed || self.away || !self.has_news() {
            return false;
        }
        self.last_report = now.since_start;
        // Launch requests held while away, then ends of gang daemons: a leader's
        // launcher waits on them.
        let launches = self.parts.held_launches.drain(..);
        self.outgoing.extend(launches.map(FromAgent::GangLaunch));
        let ends = self.parts.launch_ends.drain(..);
        self.outgoing.extend(ends.map(FromAgent::GangLaunchEnded));
        // Items written before the results that wrote them; then requests for items.
        let written = self.fetches.written.drain(..);
        self.outgoing.extend(written.map(FromAgent::ItemsWritten));
        let reads = self.fetches.outbox.drain(..);
        self.outgoing.extend(reads.map(FromAgent::ItemRead));
        self.reporting = true;
        true
    }

    /// The next message of the report being sent: the messages that go before it,
    /// then the report, in several when large function outputs do not fit one frame
    /// (see [`Board::take_report`]).
    pub fn poll_up(&mut self) -> Option<FromAgent> {
        if let Some(message) = self.outgoing.pop_front() {
            return Some(message);
        }
        if !self.reporting {
            return None;
        }
        let report = self.take_report();
        self.reporting = !self.pending.results.is_empty();
        Some(FromAgent::Report(report))
    }

    /// Takes what is to be reported upward: everything, or, when results carry more
    /// than [`FRAME_DATA_BUDGET`] bytes of output, the results up to it (at least one);
    /// the rest stays pending for the next report ([`Board::has_news`]).
    pub fn take_report(&mut self) -> Report {
        let mut data = 0;
        let fits = self
            .pending
            .results
            .iter()
            .position(|result| {
                data += result.body.data_len();
                data > FRAME_DATA_BUDGET
            })
            .map_or(self.pending.results.len(), |over| over.max(1));
        let results = if fits == self.pending.results.len() {
            std::mem::take(&mut self.pending.results)
        } else {
            let rest = self.pending.results.split_off(fits);
            std::mem::replace(&mut self.pending.results, rest)
        };
        self.reports += 1;
        Report {
            node: NodeId(self.node),
            seq: self.reports,
            credit: std::mem::take(&mut self.credit),
            started: std::mem::take(&mut self.pending.started),
            results,
        }
    }
}
