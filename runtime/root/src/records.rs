//! What the root writes to its journal. The format of the journal file itself is
//! `saker-journal`'s (docs/journal.md); these are the JSON documents inside it.
//!
//! Designed for resume: a `Submit` holds the whole request and the task ids it was
//! given, so replaying `Submit`s rebuilds the queue exactly; `Result`s say which tasks
//! are already terminal and must not run again.

use std::sync::Arc;

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use saker_client::JobUpdate;
use saker_client::actors::ActorSpawnRequest;
use saker_client::attempts::AttemptNote;
use saker_client::results::{JobId, ResultRecord, TaskId};
use saker_client::spec::{JobLines, JobRequest};

/// Serialized with its kind in a leading `record` field. Deserialization is by hand
/// (below): serde's derived internally tagged form buffers every record into a
/// generic tree before parsing it again, which was most of the time of a resume.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// First record of every pilot start.
    PilotStarted {
        pilot_id: String,
        saker_version: String,
        started_unix_us: u64,
    },
    /// A job accepted from a client: acknowledged to the client only once durable.
    Submit {
        job: JobId,
        first_task: TaskId,
        count: u32,
        submitted_unix_us: u64,
        /// Boxed: a spec is many times the size of every other record.
        request: Box<JobRequest>,
    },
    /// Single-task jobs `first_job ..` from one `submit_lines` (a task file's lines),
    /// one per command, tasks `first_task ..`: one record for all of them. Shared with
    /// the root, which builds each job's definition from it when a node needs it.
    SubmitLines {
        first_job: JobId,
        first_task: TaskId,
        submitted_unix_us: u64,
        lines: Arc<JobLines>,
    },
    /// A task reached its terminal state (exactly once per task). Shared with the
    /// clients' view of the same result, so journaling it copies nothing.
    Result(Arc<ResultRecord>),
    /// A client cancelled a job.
    Cancel { job: JobId, unix_us: u64 },
    /// An attempt of a task ended without counting (retried or replayed). Only such
    /// attempts are journaled one by one; the accepted one is in the task's `Result`,
    /// which carries these again as its history.
    Attempt { task: TaskId, note: AttemptNote },
    /// An actor was spawned: a resumed root starts it again from this request.
    ActorSpawned {
        actor: u64,
        spawn: Box<ActorSpawnRequest>,
        unix_us: u64,
    },
    /// An actor ended for good (stopped, failed to start, out of restarts).
    ActorEnded { actor: u64, unix_us: u64 },
    /// A periodic job's later occurrence: `job`, occurrence number `occurrence` (from
    /// 0) of the schedule whose first occurrence was job `schedule`.
    Occurrence {
        schedule: JobId,
        job: JobId,
        occurrence: u32,
    },
    /// Node `node` holds data item `item` of `bytes` bytes (a task wrote it there).
    Item {
        item: String,
        node: saker_core::NodeId,
        bytes: u64,
    },
    /// Job `job` was submitted to make `items` again: no live node held them any more,
    /// and job `of`, which wrote them, may run twice (see `actor/items/recompute.rs`).
    Recompute {
        job: JobId,
        of: JobId,
        items: Vec<String>,
        unix_us: u64,
    },
    /// Data items freed by their owner (a client done with its objects): removed from
    /// their holders once no unfinished job reads them; a resume forgets them then.
    ItemsFreed { items: Vec<String>, unix_us: u64 },
    /// A client updated a job. Its fields are the update's, absent when unchanged
    /// (journals from before not-before and limit updates always have `priority`).
    Update {
        job: JobId,
        #[serde(flatten)]
        update: JobUpdate,
        unix_us: u64,
    },
    /// First record of a compaction's base segment (docs/journal.md, "Compaction"):
    /// the next result number, and how many results (up to which number) this and
    /// earlier compactions dropped under the retention `keep`.
    Compaction {
        next_seq: u64,
        compacted: u64,
        compacted_through: u64,
        keep: String,
        unix_us: u64,
    },
    /// Every task of `job` is terminal, one letter a task in order (`s` succeeded,
    /// `f` failed, `c` cancelled). Written by compaction, which may drop the results.
    Finished { job: JobId, states: String },
    /// An agent registered as `node` on `host` with these cores and GPUs: with
    /// `NodeLeft`, the pilot's capacity over time, which `saker report` plots.
    NodeJoined {
        node: saker_core::NodeId,
        host: String,
        cores: u32,
        gpus: u32,
        unix_us: u64,
    },
    /// The agent of `node` left or was lost (a node without one was there until the
    /// pilot ended).
    NodeLeft {
        node: saker_core::NodeId,
        reason: String,
        unix_us: u64,
    },
    /// A root of a later term (a standby that took over, a resumed root) stopped
    /// waiting for the previous root's nodes: what it adopted, stopped and waited,
    /// for `saker report`.
    Reconciled {
        term: u32,
        adoption: saker_client::AdoptionStatus,
        unix_us: u64,
    },
    /// An elastic pilot's batch allocation `allocation` was submitted as Slurm job
    /// `job_id` (its agents are nodes `first_node ..` + `nodes`), or ended (`ended`),
    /// and why. A resumed root adopts the allocations submitted and not ended.
    Allocation {
        allocation: u64,
        job_id: u32,
        nodes: u32,
        first_node: u32,
        ended: bool,
        reason: String,
        unix_us: u64,
    },
}

impl Record {
    /// The jobs a submission record numbered: (job, first task, task count) of a
    /// `submit`'s job, or of each job of a `submit_lines` batch; none for other records.
    pub fn submitted_jobs(&self) -> impl Iterator<Item = (JobId, TaskId, u32)> + '_ {
        let (first_job, first_task, count, jobs) = match self {
            Record::Submit {
                job,
                first_task,
                count,
                ..
            } => (*job, *first_task, *count, 1),
            Record::SubmitLines {
                first_job,
                first_task,
                lines,
                ..
            } => (*first_job, *first_task, 1, lines.len() as u32),
            _ => (JobId(0), TaskId(0), 0, 0),
        };
        (0..jobs).map(move |k| {
            let task = TaskId(first_task.0 + u64::from(k) * u64::from(count));
            (JobId(first_job.0 + k), task, count)
        })
    }
}

/// Identifiers, so that reading a key or a kind allocates nothing.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum FirstKey {
    Record,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    PilotStarted,
    Submit,
    SubmitLines,
    Result,
    Cancel,
    Attempt,
    ActorSpawned,
    ActorEnded,
    Update,
    Occurrence,
    Item,
    Recompute,
    ItemsFreed,
    Compaction,
    Finished,
    NodeJoined,
    NodeLeft,
    Allocation,
    Reconciled,
}

#[derive(Deserialize)]
struct ReconciledFields {
    term: u32,
    adoption: saker_client::AdoptionStatus,
    unix_us: u64,
}

#[derive(Deserialize)]
struct AllocationFields {
    allocation: u64,
    job_id: u32,
    nodes: u32,
    first_node: u32,
    ended: bool,
    reason: String,
    unix_us: u64,
}

#[derive(Deserialize)]
struct NodeJoinedFields {
    node: saker_core::NodeId,
    host: String,
    cores: u32,
    gpus: u32,
    unix_us: u64,
}

#[derive(Deserialize)]
struct NodeLeftFields {
    node: saker_core::NodeId,
    reason: String,
    unix_us: u64,
}

#[derive(Deserialize)]
struct CompactionFields {
    next_seq: u64,
    compacted: u64,
    compacted_through: u64,
    keep: String,
    unix_us: u64,
}

#[derive(Deserialize)]
struct FinishedFields {
    job: JobId,
    states: String,
}

#[derive(Deserialize)]
struct ItemFields {
    item: String,
    node: saker_core::NodeId,
    bytes: u64,
}

#[derive(Deserialize)]
struct ItemsFreedFields {
    items: Vec<String>,
    unix_us: u64,
}

#[derive(Deserialize)]
struct RecomputeFields {
    job: JobId,
    of: JobId,
    items: Vec<String>,
    unix_us: u64,
}

#[derive(Deserialize)]
struct OccurrenceFields {
    schedule: JobId,
    job: JobId,
    occurrence: u32,
}

#[derive(Deserialize)]
struct UpdateFields {
    job: JobId,
    #[serde(flatten)]
    update: JobUpdate,
    unix_us: u64,
}

#[derive(Deserialize)]
struct ActorSpawnedFields {
    actor: u64,
    spawn: ActorSpawnRequest,
    unix_us: u64,
}

#[derive(Deserialize)]
struct ActorEndedFields {
    actor: u64,
    unix_us: u64,
}

#[derive(Deserialize)]
struct PilotStartedFields {
    pilot_id: String,
    saker_version: String,
    started_unix_us: u64,
}

#[derive(Deserialize)]
struct SubmitFields {
    job: JobId,
    first_task: TaskId,
    count: u32,
    submitted_unix_us: u64,
    request: JobRequest,
}

#[derive(Deserialize)]
struct SubmitLinesFields {
    first_job: JobId,
    first_task: TaskId,
    submitted_unix_us: u64,
    lines: JobLines,
}

#[derive(Deserialize)]
struct CancelFields {
    job: JobId,
    unix_us: u64,
}

#[derive(Deserialize)]
struct AttemptFields {
    task: TaskId,
    note: AttemptNote,
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Record, D::Error> {
        deserializer.deserialize_map(RecordVisitor)
    }
}

struct RecordVisitor;

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = Record;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a journal record object whose first field is `record`")
    }

    /// Reads the kind from the leading `record` field, then parses the rest of the
    /// same map straight into that kind's fields: one pass, no buffering.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
        match map.next_key::<FirstKey>()? {
            Some(FirstKey::Record) => {}
            Some(FirstKey::Other) => {
                return Err(de::Error::custom(
                    "the first field of a record must be `record`",
                ));
            }
            None => return Err(de::Error::missing_field("record")),
        }
        let kind = map.next_value::<Kind>()?;
        let rest = MapAccessDeserializer::new(map);
        Ok(match kind {
            Kind::PilotStarted => {
                let fields = PilotStartedFields::deserialize(rest)?;
                Record::PilotStarted {
                    pilot_id: fields.pilot_id,
                    saker_version: fields.saker_version,
                    started_unix_us: fields.started_unix_us,
                }
            }
            Kind::Submit => {
                let fields = SubmitFields::deserialize(rest)?;
                Record::Submit {
                    job: fields.job,
                    first_task: fields.first_task,
                    count: fields.count,
                    submitted_unix_us: fields.submitted_unix_us,
                    request: Box::new(fields.request),
                }
            }
            Kind::SubmitLines => {
                let fields = SubmitLinesFields::deserialize(rest)?;
                Record::SubmitLines {
                    first_job: fields.first_job,
                    first_task: fields.first_task,
                    submitted_unix_us: fields.submitted_unix_us,
                    lines: Arc::new(fields.lines),
                }
            }
            Kind::Result => Record::Result(Arc::new(ResultRecord::deserialize(rest)?)),
            Kind::Cancel => {
                let fields = CancelFields::deserialize(rest)?;
                Record::Cancel {
                    job: fields.job,
                    unix_us: fields.unix_us,
                }
            }
            Kind::Attempt => {
                let fields = AttemptFields::deserialize(rest)?;
                Record::Attempt {
                    task: fields.task,
                    note: fields.note,
                }
            }
            Kind::ActorSpawned => {
                let fields = ActorSpawnedFields::deserialize(rest)?;
                Record::ActorSpawned {
                    actor: fields.actor,
                    spawn: Box::new(fields.spawn),
                    unix_us: fields.unix_us,
                }
            }
            Kind::Occurrence => {
                let fields = OccurrenceFields::deserialize(rest)?;
                Record::Occurrence {
                    schedule: fields.schedule,
                    job: fields.job,
                    occurrence: fields.occurrence,
                }
            }
            Kind::Update => {
                let fields = UpdateFields::deserialize(rest)?;
                Record::Update {
                    job: fields.job,
                    update: fields.update,
                    unix_us: fields.unix_us,
                }
            }
            Kind::Item => {
                let fields = ItemFields::deserialize(rest)?;
                Record::Item {
                    item: fields.item,
                    node: fields.node,
                    bytes: fields.bytes,
                }
            }
            Kind::Recompute => {
                let fields = RecomputeFields::deserialize(rest)?;
                Record::Recompute {
                    job: fields.job,
                    of: fields.of,
                    items: fields.items,
                    unix_us: fields.unix_us,
                }
            }
            Kind::ItemsFreed => {
                let fields = ItemsFreedFields::deserialize(rest)?;
                Record::ItemsFreed {
                    items: fields.items,
                    unix_us: fields.unix_us,
                }
            }
            Kind::Compaction => {
                let fields = CompactionFields::deserialize(rest)?;
                Record::Compaction {
                    next_seq: fields.next_seq,
                    compacted: fields.compacted,
                    compacted_through: fields.compacted_through,
                    keep: fields.keep,
                    unix_us: fields.unix_us,
                }
            }
            Kind::Finished => {
                let fields = FinishedFields::deserialize(rest)?;
                Record::Finished {
                    job: fields.job,
                    states: fields.states,
                }
            }
            Kind::NodeJoined => {
                let fields = NodeJoinedFields::deserialize(rest)?;
                Record::NodeJoined {
                    node: fields.node,
                    host: fields.host,
                    cores: fields.cores,
                    gpus: fields.gpus,
                    unix_us: fields.unix_us,
                }
            }
            Kind::Allocation => {
                let fields = AllocationFields::deserialize(rest)?;
                Record::Allocation {
                    allocation: fields.allocation,
                    job_id: fields.job_id,
                    nodes: fields.nodes,
                    first_node: fields.first_node,
                    ended: fields.ended,
                    reason: fields.reason,
                    unix_us: fields.unix_us,
                }
            }
            Kind::Reconciled => {
                let fields = ReconciledFields::deserialize(rest)?;
                Record::Reconciled {
                    term: fields.term,
                    adoption: fields.adoption,
                    unix_us: fields.unix_us,
                }
            }
            Kind::NodeLeft => {
                let fields = NodeLeftFields::deserialize(rest)?;
                Record::NodeLeft {
                    node: fields.node,
                    reason: fields.reason,
                    unix_us: fields.unix_us,
                }
            }
            Kind::ActorEnded => {
                let fields = ActorEndedFields::deserialize(rest)?;
                Record::ActorEnded {
                    actor: fields.actor,
                    unix_us: fields.unix_us,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_client::attempts::AttemptEnd;
    use saker_client::results::{Timestamp, sample_record};
    use saker_client::spec::TaskSpec;

    fn every_kind() -> Vec<Record> {
        let mut spec = TaskSpec::new(vec!["/bin/echo".to_owned(), "{index}".to_owned()]);
        spec.tags = vec!["a".to_owned()];
        vec![
            Record::PilotStarted {
                pilot_id: "p".to_owned(),
                saker_version: "0.1.0".to_owned(),
                started_unix_us: 1,
            },
            Record::Submit {
                job: JobId(3),
                first_task: TaskId(40),
                count: 1,
                submitted_unix_us: 2,
                request: Box::new(JobRequest::single(spec)),
            },
            Record::Result(Arc::new(sample_record(40))),
            Record::Cancel {
                job: JobId(3),
                unix_us: 4,
            },
            Record::Attempt {
                task: TaskId(40),
                note: AttemptNote {
                    attempt: 9,
                    end: AttemptEnd::Lost,
                    reason: "agent 1 lost".to_owned(),
                    exit_code: None,
                    signal: None,
                    node: Some("n1".to_owned()),
                    start_time: None,
                    end_time: Timestamp::from_unix_micros(5),
                },
            },
            Record::ActorSpawned {
                actor: 7,
                spawn: Box::new(ActorSpawnRequest {
                    name: "model".to_owned(),
                    fingerprint: u64::MAX,
                    args: vec![0, 1, 255],
                    placement: saker_client::actors::ActorPlacement::With(
                        saker_client::actors::ActorId(3),
                    ),
                    restart: saker_client::actors::ActorRestart::OnNodeLoss { max_restarts: 2 },
                }),
                unix_us: 6,
            },
            Record::ActorEnded {
                actor: 7,
                unix_us: 8,
            },
            Record::Update {
                job: JobId(3),
                update: JobUpdate {
                    priority: Some(-4),
                    ..JobUpdate::default()
                },
                unix_us: 9,
            },
            Record::Update {
                job: JobId(4),
                update: JobUpdate {
                    priority: None,
                    not_before: Some(Some(Timestamp::from_unix_micros(10))),
                    time_limit: Some(None),
                },
                unix_us: 11,
            },
            Record::Occurrence {
                schedule: JobId(3),
                job: JobId(8),
                occurrence: 2,
            },
            Record::Item {
                item: "part-7".to_owned(),
                node: saker_core::NodeId(4),
                bytes: 1 << 40,
            },
            Record::Recompute {
                job: JobId(9),
                of: JobId(3),
                items: vec!["part-7".to_owned()],
                unix_us: 17,
            },
            Record::ItemsFreed {
                items: vec!["obj-ab".to_owned()],
                unix_us: 18,
            },
            Record::Compaction {
                next_seq: 41,
                compacted: 12,
                compacted_through: 30,
                keep: "7d".to_owned(),
                unix_us: 12,
            },
            Record::Finished {
                job: JobId(3),
                states: "sfc".to_owned(),
            },
            Record::NodeJoined {
                node: saker_core::NodeId(2),
                host: "n2".to_owned(),
                cores: 8,
                gpus: 1,
                unix_us: 13,
            },
            Record::NodeLeft {
                node: saker_core::NodeId(2),
                reason: "link closed".to_owned(),
                unix_us: 14,
            },
            Record::Allocation {
                allocation: 3,
                job_id: 1234,
                nodes: 2,
                first_node: 4,
                ended: false,
                reason: "400 queued tasks and no node".to_owned(),
                unix_us: 15,
            },
            Record::Reconciled {
                term: 2,
                adoption: saker_client::AdoptionStatus {
                    adopted: 4,
                    ended_away: 1,
                    refused: 1,
                    missing_nodes: 0,
                    waited_ms: 12,
                    delivered: 2,
                },
                unix_us: 16,
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_with_its_kind_first() {
        for record in every_kind() {
            let text = serde_json::to_string(&record).unwrap();
            assert!(text.starts_with(r#"{"record":""#), "{text}");
            assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), record);
        }
    }

    /// A priority update as journals before not-before and limit updates wrote it
    /// reads the same, and a priority-only update is still written that way.
    #[test]
    fn a_priority_update_of_an_older_journal_still_reads() {
        let old = r#"{"record":"update","job":3,"priority":-4,"unix_us":9}"#;
        let record = serde_json::from_str::<Record>(old).unwrap();
        assert_eq!(record, every_kind()[7]);
        assert_eq!(serde_json::to_string(&record).unwrap(), old);
    }

    #[test]
    fn a_record_without_a_leading_known_kind_is_an_error_that_says_so() {
        let cases = [
            (r#"{"job":3,"record":"cancel","unix_us":4}"#, "first field"),
            (r#"{"record":"vanish","job":3}"#, "unknown variant `vanish`"),
            (r#"{}"#, "missing field `record`"),
            (r#"{"record":"cancel","job":3}"#, "missing field `unix_us`"),
            (
                r#"{"record":"cancel","job":"x","unix_us":4}"#,
                "invalid type",
            ),
            (r#"[1,2]"#, "first field is `record`"),
        ];
        for (text, expected) in cases {
            let error = serde_json::from_str::<Record>(text)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
