//! What every side of a Saker pilot speaks, and nothing more: the client protocol
//! ([`protocol`], its line [`codec`]), the Rust [`Client`] and the `client.json`
//! [`endpoint`] it connects through, job specs ([`spec`]) and task files
//! ([`taskfile`]), result records and their formats for people ([`results`],
//! [`attempts`]), [`Timestamp`], and the pilot directory's listing of waiting
//! [`standbys`]. The root serves it, agents parse durations and memory amounts with
//! it, and `saker submit`, `saker-perf` and the Rust API speak it without linking the
//! root.
//!
//! **Owns:** the messages and their JSON (request bodies strict, answers lenient), the
//! limits a request is checked against ([`spec::TaskSpec::validate`]), one way to
//! read and one way to write a duration ([`spec::parse_duration`],
//! [`spec::format_duration`]), and the table, JSON-lines and CSV forms of a result.
//!
//! **Must never:** depend on the root, the actors, the journal, libslurm or ractor;
//! hold state of a running pilot (the server, which hands requests to the root
//! actor, and the in-process `ClientRequest` are `saker_root::client`'s); print for
//! people (it formats; its callers print).
//!
//! **Start reading** at [`protocol`] for the messages, then [`Client`] for how a Rust
//! program sends them, and [`spec::TaskSpec`] for what a task is.
//!
//! **Key decision: the vocabulary is a crate of its own, below the root.** A client
//! command, an agent that parses `--mem-per-node 4G`, or a benchmark that submits an
//! array, needs the words of the protocol, not the state machine that answers them.
//! Before this crate they linked the whole root (the journal, libslurm, ractor) to
//! parse a duration; now the crate boundary forbids the import, as quinn keeps its
//! `StreamId` and tako its ids below everything that uses them. What moved here was
//! chosen file by file: a file goes down when a side other than the root reads or
//! writes its types (the protocol, specs, task files, results, attempts' notes,
//! `client.json`, the standby listing); what only the root acts on (its server,
//! journal records, compaction, the lock it holds) stays up. The agents' own flags
//! (`NodeOptions`, `agent_arguments`) are `saker-node`'s, beside the parser that
//! reads them: their `Declared` resources are the agents' type (`saker-actors`), which
//! this crate must not link, and a writer of flags kept beside their reader is tested
//! round trip in one place.

pub mod actors;
pub mod attempts;
pub mod codec;
pub mod connection;
pub mod data;
pub mod endpoint;
pub mod host;
pub mod protocol;
pub mod results;
pub mod spec;
pub mod standbys;
pub mod taskfile;
pub mod time;
pub mod update;

pub use codec::{DEFAULT_MAX_LINE_BYTES, ReadLineError};
pub use connection::{Client, ClientError, ResultStream};
pub use endpoint::{
    CLIENT_ENDPOINT_FILE_NAME, CLIENT_SOCKET_FILE_NAME, ClientEndpoint, EndpointError,
    PILOT_DIR_VAR,
};
pub use protocol::{
    AdoptionStatus, AllocationStatus, CancelReport, ElasticAllocation, ErrorKind, HpcStatus,
    JobTaskCounts, MAX_WAITED_RESULTS, NodeLoad, PROTOCOL_VERSION, PROTOCOLS, RequestError,
    RequestId, ResultRequest, RootStatus, StageSummary, StatusReport, StreamEnd, SubmitReply,
    SubmitWait, SubmittedJob, SubmittedLines, UnstartedJob, UpdateReport, UpdateRequest,
    WaitReport, Welcome,
};
pub use results::Timestamp;
pub use update::{InvalidUpdate, JobUpdate};
