//! The client protocol: newline-delimited JSON over TLS, for the CLI, Python and Parsl.
//!
//! `docs/protocol.md` is the specification a client in another language follows.
//! Here: [`protocol`] defines the messages, [`server`] accepts connections and turns
//! requests into [`ClientRequest`]s in the root's mailbox, [`Client`] is the Rust
//! client, [`ClientEndpoint`] is the `client.json` file that says where the socket is.
//!
//! Design: the server never calls into the root. It parses and validates a request,
//! sends it with a oneshot reply (or a bounded sink for result streams) into the
//! root's mailbox, and writes the answer when it comes. The root actor therefore consumes
//! client requests like any other message in its loop, and a slow or malicious client
//! can cost the root nothing but a channel send.

pub mod actors;
mod codec;
/// Task files' JSON lines are described the same way as request bodies.
pub(crate) use codec::describe_body_error;
pub mod connection;
pub mod endpoint;
pub mod protocol;
pub mod server;
pub mod update;

#[cfg(test)]
mod tests;

pub use codec::{DEFAULT_MAX_LINE_BYTES, ReadLineError};
pub use connection::{Client, ClientError, ResultStream};
pub use endpoint::{
    CLIENT_ENDPOINT_FILE_NAME, CLIENT_SOCKET_FILE_NAME, ClientEndpoint, EndpointError,
    PILOT_DIR_VAR,
};
pub use protocol::{
    AllocationStatus, CancelReport, ElasticAllocation, ErrorKind, HpcStatus, JobTaskCounts,
    MAX_WAITED_RESULTS, NodeLoad, PROTOCOL_VERSION, PROTOCOLS, RequestError, RequestId,
    ResultRequest, RootStatus, StageSummary, StatusReport, StreamEnd, SubmitReply, SubmitWait,
    SubmittedJob, SubmittedLines, UnstartedJob, UpdateReport, UpdateRequest, WaitReport, Welcome,
};
pub use server::{
    ClientRequest, ConnectionError, Listeners, Reply, ResultSink, ResultsItem, ServerConfig,
    ToRoot, serve, serve_connection,
};
pub use update::{InvalidUpdate, JobUpdate};
