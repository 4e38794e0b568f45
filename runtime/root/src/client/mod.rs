//! The client protocol's server: it accepts connections and turns requests into
//! [`ClientRequest`]s in the root's mailbox. The protocol itself (messages, codec, the
//! Rust `Client`, the `client.json` endpoint) is `saker-client`'s.
//!
//! `docs/protocol.md` is the specification a client in another language follows.
//!
//! Design: the server never calls into the root. It parses and validates a request,
//! sends it with a oneshot reply (or a bounded sink for result streams) into the
//! root's mailbox, and writes the answer when it comes. The root actor therefore consumes
//! client requests like any other message in its loop, and a slow or malicious client
//! can cost the root nothing but a channel send.

pub mod server;

#[cfg(test)]
mod tests;

pub use server::{
    ClientRequest, ConnectionError, Listeners, Reply, ResultSink, ResultsItem, ServerConfig,
    ToRoot, serve, serve_connection,
};
