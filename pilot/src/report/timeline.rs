//! The digest's spans and node records laid on a time axis: busy cores and capacity
//! per time bin (total and per node), results per bin, and Gantt lanes whose
//! neighbouring attempts closer than a pixel are drawn as one bar, so the page stays
//! the same size for a thousand tasks or a million.

use super::digest::{Digest, NO_EXECUTOR, SpanKind};

/// Time bins of the utilization and throughput plots.
pub const BINS: usize = 400;
/// Gantt lanes drawn; more are counted and said to be left out.
pub const MAX_LANES: usize = 120;
/// Width of the Gantt view's plotting area, in pixels: bars closer than one merge.
pub const GANTT_PIXELS: f64 = 900.0;

/// The pilot's time axis from the first submit to the last end.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub t0_us: u64,
    pub t1_us: u64,
    pub bin_us: f64,
    /// Available cores per bin (time-averaged), all nodes.
    pub capacity: Vec<f64>,
    /// Busy cores per bin (time-averaged), all nodes.
    pub busy: Vec<f64>,
    /// Busy cores per bin, by node (the digest's node order).
    pub node_busy: Vec<Vec<f64>>,
    /// Available cores per bin, by node.
    pub node_capacity: Vec<Vec<f64>>,
    /// Attempts ended per bin.
    pub ended: Vec<u64>,
    /// Core-seconds the attempts used, and the nodes offered, within the window.
    pub busy_core_seconds: f64,
    pub capacity_core_seconds: f64,
}

impl Timeline {
    /// `None` when no result has both a submit and an end time (nothing ran).
    pub fn new(digest: &Digest) -> Option<Timeline> {
        let t0 = digest.first_submit_us?;
        let t1 = digest.last_end_us?.max(t0 + 1);
        let bin_us = (t1 - t0) as f64 / BINS as f64;
        let nodes = digest.nodes.len();
        let mut timeline = Timeline {
            t0_us: t0,
            t1_us: t1,
            bin_us,
            capacity: vec![0.0; BINS],
            busy: vec![0.0; BINS],
            node_busy: vec![vec![0.0; BINS]; nodes],
            node_capacity: vec![vec![0.0; BINS]; nodes],
            ended: vec![0; BINS],
            busy_core_seconds: 0.0,
            capacity_core_seconds: 0.0,
        };
        for span in &digest.spans {
            let cores = f64::from(span.cores);
            let row = &mut timeline.node_busy[span.node as usize];
            let used = spread(t0, bin_us, span.start_us, span.end_us, t1, cores, row);
            timeline.busy_core_seconds += used;
            let bin = timeline.bin_of(span.end_us);
            timeline.ended[bin] += 1;
        }
        for (index, node) in digest.nodes.iter().enumerate() {
            let cores = f64::from(node.cores);
            let row = &mut timeline.node_capacity[index];
            // Inferred nodes (journals from before node records) count as there
            // throughout.
            let present: Vec<(u64, Option<u64>)> = if node.known {
                node.present.clone()
            } else {
                vec![(t0, None)]
            };
            for (joined, left) in present {
                let offered = spread(t0, bin_us, joined, left.unwrap_or(t1), t1, cores, row);
                timeline.capacity_core_seconds += offered;
            }
        }
        for bin in 0..BINS {
            timeline.busy[bin] = timeline.node_busy.iter().map(|row| row[bin]).sum();
            timeline.capacity[bin] = timeline.node_capacity.iter().map(|row| row[bin]).sum();
        }
        Some(timeline)
    }

    pub fn makespan_seconds(&self) -> f64 {
        (self.t1_us - self.t0_us) as f64 / 1e6
    }

    /// Busy core-seconds over available core-seconds within the makespan.
    pub fn efficiency(&self) -> Option<f64> {
        (self.capacity_core_seconds > 0.0)
            .then(|| self.busy_core_seconds / self.capacity_core_seconds)
    }

    /// Seconds since the first submit at the start of `bin`.
    pub fn bin_start_seconds(&self, bin: usize) -> f64 {
        bin as f64 * self.bin_us / 1e6
    }

    fn bin_of(&self, at_us: u64) -> usize {
        let offset = at_us.saturating_sub(self.t0_us) as f64;
        ((offset / self.bin_us) as usize).min(BINS - 1)
    }
}

/// Adds `cores` × the overlap of `[start, end)` with each bin to `row`, as average
/// cores over the bin; returns the core-seconds inside `[t0, t1)`.
fn spread(t0: u64, bin_us: f64, start: u64, end: u64, t1: u64, cores: f64, row: &mut [f64]) -> f64 {
    let start = start.clamp(t0, t1);
    let end = end.clamp(t0, t1);
    if end <= start {
        return 0.0;
    }
    let from = (start - t0) as f64;
    let to = (end - t0) as f64;
    let first = ((from / bin_us) as usize).min(row.len() - 1);
    let last = ((to / bin_us) as usize).min(row.len() - 1);
    for (bin, slot) in row.iter_mut().enumerate().take(last + 1).skip(first) {
        let bin_from = bin as f64 * bin_us;
        let overlap = to.min(bin_from + bin_us) - from.max(bin_from);
        if overlap > 0.0 {
            *slot += cores * overlap / bin_us;
        }
    }
    cores * (to - from) / 1e6
}

/// One bar of the Gantt view: seconds since the first submit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub lane: u32,
    pub start: f64,
    pub end: f64,
    pub kind: SpanKind,
}

/// Attempts packed into lanes, one lane per attempt running at a time on a node.
#[derive(Debug, Clone, Default)]
pub struct Gantt {
    /// Each lane shown: its node's index in the digest.
    pub lanes: Vec<u32>,
    pub bars: Vec<Bar>,
    /// Lanes in all, shown or not.
    pub total_lanes: usize,
    /// Attempts drawn (many to a bar where they are closer than a pixel).
    pub attempts: usize,
}

impl Gantt {
    /// One lane per executor slot a node's results name; attempts without one (earlier
    /// attempts, HPC jobs) go to the first lane of such attempts free at their start,
    /// or a new one.
    pub fn new(digest: &Digest, timeline: &Timeline) -> Gantt {
        let mut order: Vec<u32> = (0..digest.spans.len() as u32).collect();
        order.sort_unstable_by_key(|&k| {
            let span = &digest.spans[k as usize];
            (span.node, span.start_us, span.end_us)
        });
        let pixel_us = (timeline.t1_us - timeline.t0_us) as f64 / GANTT_PIXELS;
        let seconds = |at: u64| at.saturating_sub(timeline.t0_us) as f64 / 1e6;
        let mut gantt = Gantt::default();
        // The current node's lanes: (executor, end of its last attempt, lane number).
        let mut node_lanes: Vec<(u16, u64, u32)> = Vec::new();
        // Each lane's open bar, by lane number, to extend or close.
        let mut open: Vec<Option<Bar>> = Vec::new();
        let spans = &digest.spans;
        for group in order.chunk_by(|&a, &b| spans[a as usize].node == spans[b as usize].node) {
            let node = spans[group[0] as usize].node;
            // Executor lanes first, in slot order, so lanes read 0, 1, 2 …
            let mut executors: Vec<u16> = group
                .iter()
                .map(|&k| spans[k as usize].executor)
                .filter(|&e| e != NO_EXECUTOR)
                .collect();
            executors.sort_unstable();
            executors.dedup();
            node_lanes.clear();
            for executor in executors {
                let lane = gantt.new_lane(node, &mut open);
                node_lanes.push((executor, 0, lane));
            }
            for &k in group {
                let span = spans[k as usize];
                let found = if span.executor == NO_EXECUTOR {
                    node_lanes
                        .iter()
                        .position(|l| l.0 == NO_EXECUTOR && l.1 <= span.start_us)
                } else {
                    node_lanes.iter().position(|l| l.0 == span.executor)
                };
                let at = match found {
                    Some(at) => at,
                    None => {
                        let lane = gantt.new_lane(span.node, &mut open);
                        node_lanes.push((NO_EXECUTOR, 0, lane));
                        node_lanes.len() - 1
                    }
                };
                node_lanes[at].1 = node_lanes[at].1.max(span.end_us);
                let lane = node_lanes[at].2;
                if lane as usize >= MAX_LANES {
                    continue;
                }
                gantt.attempts += 1;
                let (start, end) = (seconds(span.start_us), seconds(span.end_us));
                let slot = &mut open[lane as usize];
                match slot {
                    Some(bar) if bar.kind == span.kind && (start - bar.end) * 1e6 < pixel_us => {
                        bar.end = bar.end.max(end);
                    }
                    _ => {
                        if let Some(done) = slot.take() {
                            gantt.bars.push(done);
                        }
                        *slot = Some(Bar {
                            lane,
                            start,
                            end,
                            kind: span.kind,
                        });
                    }
                }
            }
        }
        gantt.bars.extend(open.into_iter().flatten());
        gantt
    }

    fn new_lane(&mut self, node: u32, open: &mut Vec<Option<Bar>>) -> u32 {
        let lane = self.total_lanes as u32;
        self.total_lanes += 1;
        if self.lanes.len() < MAX_LANES {
            self.lanes.push(node);
        }
        open.push(None);
        lane
    }
}
