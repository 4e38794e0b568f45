//! What `saker report` keeps of a journal, folded one record at a time: counters,
//! per-stage histograms (fixed memory), failures by reason, nodes with their capacity
//! over time, and one 32-byte [`Span`] per attempt that ran, which the timeline needs
//! (32 MB for a million tasks; results themselves are dropped as they are read).

use std::collections::{BTreeMap, HashMap};

use hdrhistogram::Histogram;
use saker_client::attempts::{AttemptEnd, AttemptNote};
use saker_client::results::{ResultRecord, TerminalState};
use saker_root::records::Record;

/// Groups of failures shown; the rest are summed in one row.
const FAILURE_GROUPS: usize = 40;
/// Task ids kept as examples of each failure group.
const FAILURE_EXAMPLES: usize = 5;
/// HPC jobs listed one by one; all of them are counted.
const GANG_ROWS: usize = 200;

/// How an attempt ended, as the Gantt view colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpanKind {
    Succeeded,
    Failed,
    /// Failed, then retried.
    Retried,
    /// Lost with its node, then replayed.
    Lost,
}

impl SpanKind {
    pub const ALL: [SpanKind; 4] = [
        SpanKind::Succeeded,
        SpanKind::Failed,
        SpanKind::Retried,
        SpanKind::Lost,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SpanKind::Succeeded => "succeeded",
            SpanKind::Failed => "failed",
            SpanKind::Retried => "failed, retried",
            SpanKind::Lost => "lost, replayed",
        }
    }
}

/// One attempt that ran: when, where (an index into [`Digest::nodes`], and the
/// executor slot when the result names it) and on how many cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start_us: u64,
    pub end_us: u64,
    pub node: u32,
    pub cores: u16,
    /// [`NO_EXECUTOR`] for attempts whose slot is not recorded.
    pub executor: u16,
    pub kind: SpanKind,
}

/// [`Span::executor`] when no slot is known (earlier attempts, HPC jobs).
pub const NO_EXECUTOR: u16 = u16::MAX;

/// Highest time a stage histogram tracks exactly (30 days); longer saturates.
const STAGE_MAX_US: u64 = 30 * 86_400 * 1_000_000;

/// An agent of the pilot as the journal saw it.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub id: Option<u32>,
    pub host: String,
    pub cores: u32,
    pub gpus: u32,
    /// Whether a `node_joined` record gave its cores (else they are inferred from
    /// the executors its results name).
    pub known: bool,
    /// When it was there: joined, and left (`None`: until the end).
    pub present: Vec<(u64, Option<u64>)>,
    /// Results it ran (accepted attempts).
    pub tasks: u64,
}

/// Failures (or cancellations) that share a reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailureGroup {
    pub count: u64,
    pub examples: Vec<u64>,
}

/// One HPC job's accepted run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangRow {
    pub task: u64,
    pub state: TerminalState,
    pub nodes: Vec<String>,
    pub ranks: u32,
    pub start_us: Option<u64>,
    pub end_us: u64,
}

/// One batch allocation of an elastic pilot, from its journal records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationRow {
    pub allocation: u64,
    pub job_id: u32,
    pub nodes: u32,
    pub first_node: u32,
    pub submitted_us: u64,
    pub ended_us: Option<u64>,
    /// Why it was asked for, and why it ended.
    pub asked: String,
    pub ended: Option<String>,
}

/// A takeover or resume: what the new root found once it stopped waiting for the
/// previous root's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeoverRow {
    pub term: u32,
    pub unix_us: u64,
    pub adoption: saker_client::AdoptionStatus,
}

/// The stages of a task's life the root's timestamps tell apart.
pub const STAGES: [(&str, &str); 8] = [
    ("wait", "submitted → started (queue, dispatch, spawn)"),
    ("queue", "submitted → dispatched by the root"),
    ("launch", "dispatched → started (way down, slot, spawn)"),
    (
        "fetch",
        "of launch, waiting on the node for data items (tasks that read some)",
    ),
    ("run", "started → ended"),
    (
        "wireup",
        "of run, started → every rank's first PMI fence (MPI jobs through PMI)",
    ),
    ("deliver", "ended → result accepted by the root"),
    ("total", "submitted → result accepted"),
];

/// A journal folded into what the report shows.
#[derive(Debug)]
pub struct Digest {
    pub pilot_id: Option<String>,
    /// Pilot starts: 1, plus one per resume.
    pub starts: u32,
    /// Tasks submitted (all jobs, all array indices).
    pub submitted: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Results a compaction dropped (`--keep-results`): not in any figure.
    pub compacted: u64,
    /// Earliest submit and latest end among the results: the makespan.
    pub first_submit_us: Option<u64>,
    pub last_end_us: Option<u64>,
    /// Attempts that failed and were retried, or were lost and replayed.
    pub retried: u64,
    pub replayed: u64,
    /// Tasks whose result needed more than one attempt.
    pub tasks_with_earlier_attempts: u64,
    pub failures: BTreeMap<String, FailureGroup>,
    pub cancellations: BTreeMap<String, FailureGroup>,
    /// Failure groups not kept once there were [`FAILURE_GROUPS`], and their count.
    pub other_failures: u64,
    pub stages: Vec<Histogram<u64>>,
    pub nodes: Vec<NodeInfo>,
    pub spans: Vec<Span>,
    pub gangs: Vec<GangRow>,
    pub gang_count: u64,
    /// An elastic pilot's allocations, in the order asked for.
    pub allocations: Vec<AllocationRow>,
    /// Takeovers and resumes, in order.
    pub takeovers: Vec<TakeoverRow>,
    node_by_id: HashMap<u32, u32>,
    node_by_host: HashMap<String, u32>,
    /// Cores each task of a job reserves, on each of its nodes: (first job, jobs,
    /// cores), sorted by first job (a `submit_lines` batch is one entry).
    jobs: Vec<(u32, u32, u32)>,
}

impl Default for Digest {
    fn default() -> Self {
        Digest {
            pilot_id: None,
            starts: 0,
            submitted: 0,
            succeeded: 0,
            failed: 0,
            cancelled: 0,
            compacted: 0,
            first_submit_us: None,
            last_end_us: None,
            retried: 0,
            replayed: 0,
            tasks_with_earlier_attempts: 0,
            failures: BTreeMap::new(),
            cancellations: BTreeMap::new(),
            other_failures: 0,
            stages: STAGES
                .iter()
                .map(|_| {
                    Histogram::new_with_bounds(1, STAGE_MAX_US, 3).expect("valid histogram bounds")
                })
                .collect(),
            nodes: Vec::new(),
            spans: Vec::new(),
            gangs: Vec::new(),
            gang_count: 0,
            allocations: Vec::new(),
            takeovers: Vec::new(),
            node_by_id: HashMap::new(),
            node_by_host: HashMap::new(),
            jobs: Vec::new(),
        }
    }
}

impl Digest {
    pub fn results(&self) -> u64 {
        self.succeeded + self.failed + self.cancelled
    }

    /// Folds one journal record in.
    pub fn add(&mut self, record: &Record) {
        match record {
            Record::PilotStarted { pilot_id, .. } => {
                self.starts += 1;
                self.pilot_id.get_or_insert_with(|| pilot_id.clone());
            }
            Record::Submit {
                job,
                count,
                request,
                ..
            } => {
                self.submitted += u64::from(*count);
                self.note_job(job.0, 1, request.spec.cores.max(1));
            }
            Record::SubmitLines {
                first_job, lines, ..
            } => {
                let jobs = lines.len() as u32;
                self.submitted += u64::from(jobs);
                self.note_job(first_job.0, jobs, lines.template.cores.max(1));
            }
            Record::Result(result) => self.add_result(result),
            Record::Compaction { compacted, .. } => self.compacted = *compacted,
            Record::NodeJoined {
                node,
                host,
                cores,
                gpus,
                unix_us,
            } => {
                let index = self.node_index(Some(node.0), host);
                let info = &mut self.nodes[index as usize];
                info.cores = *cores;
                info.gpus = *gpus;
                info.known = true;
                info.present.push((*unix_us, None));
            }
            Record::Allocation {
                allocation,
                job_id,
                nodes,
                first_node,
                ended,
                reason,
                unix_us,
            } => match self
                .allocations
                .iter_mut()
                .find(|a| a.allocation == *allocation)
            {
                Some(row) if *ended => {
                    row.ended_us = Some(*unix_us);
                    row.ended = Some(reason.clone());
                }
                Some(_) => {}
                None => self.allocations.push(AllocationRow {
                    allocation: *allocation,
                    job_id: *job_id,
                    nodes: *nodes,
                    first_node: *first_node,
                    submitted_us: *unix_us,
                    ended_us: ended.then_some(*unix_us),
                    asked: if *ended {
                        String::new()
                    } else {
                        reason.clone()
                    },
                    ended: ended.then(|| reason.clone()),
                }),
            },
            Record::Reconciled {
                term,
                adoption,
                unix_us,
            } => self.takeovers.push(TakeoverRow {
                term: *term,
                unix_us: *unix_us,
                adoption: *adoption,
            }),
            Record::NodeLeft { node, unix_us, .. } => {
                if let Some(&index) = self.node_by_id.get(&node.0)
                    && let Some(last) = self.nodes[index as usize].present.last_mut()
                    && last.1.is_none()
                {
                    last.1 = Some(*unix_us);
                }
            }
            _ => {}
        }
    }

    fn note_job(&mut self, first_job: u32, jobs: u32, cores: u32) {
        let at = self
            .jobs
            .partition_point(|&(first, _, _)| first < first_job);
        self.jobs.insert(at, (first_job, jobs, cores));
    }

    /// Cores a task of `job` reserves on each of its nodes (1 when unknown).
    fn cores_of(&self, job: u32) -> u32 {
        let at = self.jobs.partition_point(|&(first, _, _)| first <= job);
        match at.checked_sub(1).map(|k| self.jobs[k]) {
            Some((first, jobs, cores)) if job - first < jobs => cores,
            _ => 1,
        }
    }

    /// The node a result names: by number when it has one, else by host name.
    fn node_index(&mut self, id: Option<u32>, host: &str) -> u32 {
        if let Some(id) = id
            && let Some(&index) = self.node_by_id.get(&id)
        {
            return index;
        }
        if id.is_none()
            && let Some(&index) = self.node_by_host.get(host)
        {
            return index;
        }
        let index = self.nodes.len() as u32;
        self.nodes.push(NodeInfo {
            id,
            host: host.to_owned(),
            ..NodeInfo::default()
        });
        if let Some(id) = id {
            self.node_by_id.insert(id, index);
        }
        self.node_by_host.entry(host.to_owned()).or_insert(index);
        index
    }

    fn add_result(&mut self, result: &ResultRecord) {
        match result.state {
            TerminalState::Succeeded => self.succeeded += 1,
            TerminalState::Failed => self.failed += 1,
            TerminalState::Cancelled => self.cancelled += 1,
        }
        let submit = result.submit_time.unix_micros();
        let end = result.end_time.unix_micros();
        self.first_submit_us = Some(self.first_submit_us.map_or(submit, |t| t.min(submit)));
        self.last_end_us = Some(self.last_end_us.map_or(end, |t| t.max(end)));
        self.record_stages(result);
        if !result.history.is_empty() {
            self.tasks_with_earlier_attempts += 1;
        }
        let cores = self.cores_of(result.job.0);
        for note in &result.history {
            self.add_earlier(note, cores);
        }
        match result.state {
            TerminalState::Succeeded => {}
            TerminalState::Failed => {
                let key = failure_key(result);
                self.group(key, result.task.0, false);
            }
            TerminalState::Cancelled => {
                let key = result.reason.as_deref().unwrap_or("cancelled");
                self.group(normalise(key), result.task.0, true);
            }
        }
        if let Some(gang) = &result.gang {
            self.gang_count += 1;
            if self.gangs.len() < GANG_ROWS {
                self.gangs.push(GangRow {
                    task: result.task.0,
                    state: result.state,
                    nodes: gang.nodes.clone(),
                    ranks: gang.ranks,
                    start_us: result.start_time.map(|t| t.unix_micros()),
                    end_us: end,
                });
            }
        }
        let (Some(start), Some(host)) = (result.start_time, result.node.as_deref()) else {
            return;
        };
        let kind = match result.state {
            TerminalState::Succeeded => SpanKind::Succeeded,
            _ => SpanKind::Failed,
        };
        let leader = self.node_index(result.node_id, host);
        self.nodes[leader as usize].tasks += 1;
        match &result.gang {
            // An HPC job holds its cores on every node of its group.
            Some(gang) if gang.nodes.len() > 1 => {
                for (member, host) in gang.nodes.iter().enumerate() {
                    let node = if member == 0 {
                        leader
                    } else {
                        self.node_index(None, host)
                    };
                    self.push_span(start.unix_micros(), end, node, cores, NO_EXECUTOR, kind);
                }
            }
            _ => {
                let executor = result
                    .executor
                    .and_then(|e| u16::try_from(e).ok())
                    .unwrap_or(NO_EXECUTOR);
                self.push_span(start.unix_micros(), end, leader, cores, executor, kind)
            }
        }
        if let Some(executor) = result.executor {
            let info = &mut self.nodes[leader as usize];
            if !info.known {
                info.cores = info.cores.max(executor + 1);
            }
        }
    }

    fn add_earlier(&mut self, note: &AttemptNote, cores: u32) {
        let kind = match note.end {
            AttemptEnd::Failed => {
                self.retried += 1;
                SpanKind::Retried
            }
            AttemptEnd::Lost => {
                self.replayed += 1;
                SpanKind::Lost
            }
        };
        if let (Some(start), Some(host)) = (note.start_time, note.node.as_deref()) {
            let node = self.node_index(None, host);
            self.push_span(
                start.unix_micros(),
                note.end_time.unix_micros(),
                node,
                cores,
                NO_EXECUTOR,
                kind,
            );
        }
    }

    fn push_span(
        &mut self,
        start_us: u64,
        end_us: u64,
        node: u32,
        cores: u32,
        executor: u16,
        kind: SpanKind,
    ) {
        self.spans.push(Span {
            start_us,
            end_us: end_us.max(start_us),
            node,
            cores: u16::try_from(cores).unwrap_or(u16::MAX),
            executor,
            kind,
        });
    }

    fn record_stages(&mut self, result: &ResultRecord) {
        let submit = result.submit_time.unix_micros();
        let end = result.end_time.unix_micros();
        let accept = result.accept_time.map(|t| t.unix_micros());
        let start = result.start_time.map(|t| t.unix_micros());
        let dispatch = result
            .dispatch_time
            .map(|t| t.unix_micros())
            .filter(|_| start.is_some());
        let durations = [
            start.map(|s| s.saturating_sub(submit)),
            dispatch.map(|d| d.saturating_sub(submit)),
            start.zip(dispatch).map(|(s, d)| s.saturating_sub(d)),
            result.fetch_us,
            start.map(|s| end.saturating_sub(s)),
            result
                .gang
                .as_ref()
                .and_then(|gang| gang.wireup)
                .and_then(|wireup| wireup.fence_us),
            accept
                .filter(|_| start.is_some())
                .map(|a| a.saturating_sub(end)),
            accept
                .filter(|_| start.is_some())
                .map(|a| a.saturating_sub(submit)),
        ];
        for (histogram, micros) in self.stages.iter_mut().zip(durations) {
            if let Some(micros) = micros {
                histogram.saturating_record(micros);
            }
        }
    }

    fn group(&mut self, key: String, task: u64, cancelled: bool) {
        let groups = if cancelled {
            &mut self.cancellations
        } else {
            &mut self.failures
        };
        let full = groups.len() >= FAILURE_GROUPS;
        match groups.get_mut(&key) {
            Some(group) => {
                group.count += 1;
                if group.examples.len() < FAILURE_EXAMPLES {
                    group.examples.push(task);
                }
            }
            None if full => self.other_failures += 1,
            None => {
                groups.insert(
                    key,
                    FailureGroup {
                        count: 1,
                        examples: vec![task],
                    },
                );
            }
        }
    }
}

/// What a failure is grouped by: the exit status or signal, else the root's reason
/// with its numbers taken out (`agent N on n1 lost: …`).
fn failure_key(result: &ResultRecord) -> String {
    match (result.exit_code, result.signal, result.reason.as_deref()) {
        (Some(code), _, _) => format!("exit {code}"),
        (None, _, Some(reason)) => normalise(reason),
        (None, Some(signal), _) => format!("killed by signal {signal}"),
        (None, None, None) => "no reason given".to_owned(),
    }
}

/// Replaces each stand-alone number in `text` by `N`, so that reasons naming an
/// attempt, node or byte count group together; host names such as `node001` stay.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()) {
            out.push('N');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for character in text.chars() {
        if character.is_alphanumeric() || character == '_' || character == '-' {
            word.push(character);
        } else {
            flush(&mut word, &mut out);
            out.push(character);
        }
    }
    flush(&mut word, &mut out);
    out.chars().take(160).collect()
}

#[cfg(test)]
mod tests;
