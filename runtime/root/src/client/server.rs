//! The server side of the client socket: accepts TLS connections, parses requests and
//! hands each to the root as a [`ClientRequest`], straight into its mailbox
//! ([`ToRoot`]).
//!
//! Per connection, one reader loop parses lines in order and sends the requests to the
//! root in that order (so a `submit` followed by a `wait` reaches the root in that
//! order); a spawned task per request awaits the root's reply and queues the response
//! line for the single writer, so a long `wait` or a `results` stream never blocks
//! other requests on the same connection. At most `max_in_flight` requests per
//! connection are outstanding; beyond that the server stops reading, which pushes back
//! on the client through TCP.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use saker_transport::RoleRefused;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use saker_client::actors::{
    ActorCallReply, ActorCallRequest, ActorSpawnReply, ActorSpawnRequest, ActorStopReply,
    ActorStopRequest,
};
use saker_client::codec::{
    self, DEFAULT_MAX_LINE_BYTES, LineReader, ReadLineError, encode, encode_with_null_id,
};
use saker_client::protocol::{
    CancelReport, CancelRequest, ErrorKind, Hello, PROTOCOL_VERSION, PROTOCOLS, Request,
    RequestError, RequestId, ResultsRequest, ShutdownRequest, StatusReport, StatusRequest,
    StreamEnd, SubmitReply, SubmitRequest, UpdateReport, WaitReport, WaitRequest, Welcome,
};
use saker_client::results::{JobId, ResultRecord};
use saker_client::spec::JobRequest;

/// Where the root sends the answer to one request. Dropping it unanswered makes the
/// client see an `unavailable` error.
pub type Reply<T> = oneshot::Sender<Result<T, RequestError>>;

/// Where the root sends the items of one `results` stream, in sequence order. The
/// channel is bounded ([`ServerConfig::stream_capacity`]): the root must not await a
/// full sink inside its own loop (use `try_send`, or feed the sink from a spawned
/// task). `is_closed()` / `closed()` tell that the client went away.
pub type ResultSink = mpsc::Sender<ResultsItem>;

/// One request from a client, for the root to act on. Validated: every spec in a
/// `Submit` has passed [`JobRequest::validate`].
#[derive(Debug)]
pub enum ClientRequest {
    /// Answered once durable, or with `wait` once every task has ended.
    Submit {
        jobs: Vec<JobRequest>,
        wait: Option<saker_client::protocol::SubmitWait>,
        reply: Reply<SubmitReply>,
    },
    /// Validated by [`JobLines::validate`](saker_client::spec::JobLines::validate).
    SubmitLines {
        lines: Box<saker_client::spec::JobLines>,
        reply: Reply<saker_client::protocol::SubmittedLines>,
    },
    /// With `jobs`, the report carries their counts (`job_counts`), or the answer is
    /// `unknown_job` when one is not known.
    Status {
        jobs: Option<Vec<JobId>>,
        reply: Reply<StatusReport>,
    },
    /// Answer once every task of `jobs` (of all jobs when `None`) is terminal.
    /// `reply.is_closed()` tells that the client stopped waiting.
    Wait {
        jobs: Option<Vec<JobId>>,
        reply: Reply<WaitReport>,
    },
    Cancel {
        jobs: Vec<JobId>,
        reply: Reply<CancelReport>,
    },
    /// Send every accepted result with `seq >= from` in order, then, unless `follow`,
    /// [`ResultsItem::End`]. With `follow`, keep sending new results until the sink
    /// closes; end with `End` if the pilot stops first.
    Results {
        from: u64,
        follow: bool,
        sink: ResultSink,
    },
    /// One task's result.
    Result {
        task: saker_client::results::TaskId,
        reply: Reply<Arc<saker_client::results::ResultRecord>>,
    },
    /// Stop or resume asking for allocations; answers whether now paused.
    Provisioning { pause: bool, reply: Reply<bool> },
    /// Where each live node keeps its items and objects.
    Stores {
        reply: Reply<saker_client::protocol::StoresReport>,
    },
    /// A client put an object in a node's scratch: record it; answer once durable.
    PutObject {
        put: saker_client::protocol::PutObjectRequest,
        reply: Reply<()>,
    },
    /// The live nodes holding an object, for a client that reads it from them.
    ObjectHolders {
        object: saker_core::ObjectId,
        reply: Reply<saker_client::protocol::ObjectHoldersReport>,
    },
    /// A client is done with these objects: free them once no job reads them.
    FreeObjects {
        objects: Vec<saker_core::ObjectId>,
        reply: Reply<()>,
    },
    /// Acknowledge, then stop the pilot.
    Shutdown {
        kill_running: bool,
        reply: Reply<()>,
    },
    /// Change these jobs' tasks that have not started. Not validated.
    Update {
        jobs: Vec<JobId>,
        update: saker_client::JobUpdate,
        reply: Reply<UpdateReport>,
    },
    /// Start an actor; answer once it has started. Validated.
    ActorSpawn {
        spawn: ActorSpawnRequest,
        reply: Reply<ActorSpawnReply>,
    },
    /// Route a message to an actor; answer with its reply (a cast: once sent).
    ActorCall {
        actor: u64,
        data: Vec<u8>,
        cast: bool,
        reply: Reply<ActorCallReply>,
    },
    /// Stop an actor; answer once it has stopped.
    ActorStop {
        actor: u64,
        reply: Reply<ActorStopReply>,
    },
}

/// Where the server hands requests: the root's mailbox. Handing one over never waits
/// (each connection bounds its requests in flight), so a connection's reader passes
/// a request on without another task in between.
pub trait ToRoot: Clone + Send + Sync + 'static {
    /// Hands `request` to the root; false once the root is gone.
    fn send(&self, request: ClientRequest) -> bool;
    /// Resolves once the root is gone.
    fn closed(&self) -> impl Future<Output = ()> + Send;
}

impl ToRoot for mpsc::UnboundedSender<ClientRequest> {
    fn send(&self, request: ClientRequest) -> bool {
        mpsc::UnboundedSender::send(self, request).is_ok()
    }

    async fn closed(&self) {
        mpsc::UnboundedSender::closed(self).await
    }
}

/// An item of a `results` stream.
#[derive(Debug, Clone)]
pub enum ResultsItem {
    /// Shared so one accepted result can be fanned out to many followers cheaply.
    Record(Arc<ResultRecord>),
    /// The stream is complete; nothing is sent after this.
    End(StreamEnd),
    /// The stream failed (e.g. the journal could not be read); nothing follows.
    Error(RequestError),
}

/// Limits and identity of the client socket.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Sent in the hello answer so a client can tell which pilot it reached.
    pub pilot_id: String,
    /// Longest accepted line; a longer one is answered with `line_too_long` and the
    /// connection is closed (the stream cannot be resynchronised cheaply).
    pub max_line_bytes: usize,
    /// Time allowed for the TLS handshake and the hello, each.
    pub handshake_timeout: Duration,
    /// Outstanding requests per connection before the server stops reading.
    pub max_in_flight: usize,
    /// Capacity of each `results` sink.
    pub stream_capacity: usize,
    /// Time a closing connection gets to flush its last responses.
    pub linger: Duration,
}

impl ServerConfig {
    pub fn new(pilot_id: impl Into<String>) -> Self {
        ServerConfig {
            pilot_id: pilot_id.into(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            handshake_timeout: Duration::from_secs(10),
            max_in_flight: 1024,
            stream_capacity: 4096,
            linger: Duration::from_secs(5),
        }
    }
}

/// Why a client connection ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("tls handshake failed")]
    Tls(#[source] io::Error),
    /// The client's certificate is of this pilot but not a client's (an agent's,
    /// say): refused during the TLS handshake, before anything is read.
    #[error("refused during the tls handshake")]
    WrongRole(#[source] RoleRefused),
    #[error("cannot read the credentials of a local connection's peer")]
    PeerCredentials(#[source] io::Error),
    /// A local connection from another user (the pilot directory's mode should have
    /// kept it out).
    #[error("refused a local connection of user {uid}: the pilot runs as user {own}")]
    OtherUser { uid: u32, own: u32 },
    #[error("no tls handshake or hello within {timeout:?}")]
    HandshakeTimeout { timeout: Duration },
    #[error("client refused during the hello")]
    Refused(#[source] RequestError),
    #[error("reading from the client failed")]
    Read(#[source] ReadLineError),
    #[error("writing to the client failed")]
    Write(#[source] io::Error),
}

/// Where clients connect: TLS over TCP from any host, and plain lines over a Unix
/// socket in the pilot directory from this one (see [`serve`]).
pub struct Listeners {
    pub tcp: TcpListener,
    pub tls: TlsAcceptor,
    /// The pilot directory's `client.sock`, when it could be bound.
    pub local: Option<UnixListener>,
}

/// Accepts connections and serves each until it closes. Returns when the root is
/// gone (`requests` closed), after the connections have flushed the answers already
/// given (at most `2 × linger`); dropping (aborting) the returned future closes every
/// connection at once.
///
/// A local connection skips TLS: the pilot directory (mode 0700) already admits only
/// its owner, and the server checks the peer's user id as well. It saves the
/// encryption on both sides of every line, which a client on the root's host (the
/// Python client of a local pilot, `saker run`'s tools, a driver in the batch job)
/// pays for nothing.
pub async fn serve<R: ToRoot>(listeners: Listeners, config: Arc<ServerConfig>, requests: R) {
    let Listeners { tcp, tls, local } = listeners;
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = tcp.accept() => accepted.map(|(tcp, peer)| Accepted::Tcp(tcp, peer)),
            accepted = accept_local(local.as_ref()) => accepted.map(Accepted::Local),
            () = requests.closed() => break,
        };
        while connections.try_join_next().is_some() {}
        let accepted = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "client socket accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (tls, config, requests) = (tls.clone(), config.clone(), requests.clone());
        match accepted {
            Accepted::Tcp(tcp, peer) => {
                let _ = tcp.set_nodelay(true);
                connections.spawn(async move {
                    let timeout = config.handshake_timeout;
                    let outcome = match tokio::time::timeout(timeout, tls.accept(tcp)).await {
                        Err(_) => Err(ConnectionError::HandshakeTimeout { timeout }),
                        Ok(Err(error)) => Err(match RoleRefused::find(&error) {
                            Some(refused) => ConnectionError::WrongRole(refused.clone()),
                            None => ConnectionError::Tls(error),
                        }),
                        Ok(Ok(stream)) => serve_connection(stream, config, requests).await,
                    };
                    log_end(&peer.to_string(), outcome);
                });
            }
            Accepted::Local(stream) => {
                connections.spawn(async move {
                    let outcome = match own_user(&stream) {
                        Ok(()) => serve_connection(stream, config, requests).await,
                        Err(refused) => Err(refused),
                    };
                    log_end("the local socket", outcome);
                });
            }
        }
    }
    // The root is gone. Each connection notices, delivers the answers the root gave
    // before it went (the acknowledgement of a `shutdown`, typically) and closes;
    // give them that long, then drop (abort) the rest.
    let drain = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(config.linger * 2, drain).await;
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Listeners")
            .field("tcp", &self.tcp)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

enum Accepted {
    Tcp(TcpStream, std::net::SocketAddr),
    Local(UnixStream),
}

async fn accept_local(local: Option<&UnixListener>) -> io::Result<UnixStream> {
    match local {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// Admits a local connection only from the user the pilot runs as.
fn own_user(stream: &UnixStream) -> Result<(), ConnectionError> {
    let peer = stream
        .peer_cred()
        .map_err(ConnectionError::PeerCredentials)?;
    let own = nix::unistd::geteuid().as_raw();
    if peer.uid() == own {
        return Ok(());
    }
    Err(ConnectionError::OtherUser {
        uid: peer.uid(),
        own,
    })
}

fn log_end(peer: &str, outcome: Result<(), ConnectionError>) {
    match outcome {
        Ok(()) => tracing::debug!(%peer, "client disconnected"),
        Err(ConnectionError::WrongRole(refused)) => {
            tracing::warn!(%peer, error = %refused, "refused a client connection")
        }
        Err(error @ ConnectionError::OtherUser { .. }) => {
            tracing::warn!(%peer, %error, "refused a client connection")
        }
        Err(error) => {
            tracing::info!(%peer, error = %error_chain(&error), "client connection ended")
        }
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// Serves one connection (already through TLS, or any other byte stream in tests):
/// the hello, then requests until the client closes. Outstanding requests are
/// abandoned when the client closes; what they did in the pilot stands.
pub async fn serve_connection<S, R>(
    stream: S,
    config: Arc<ServerConfig>,
    requests: R,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    R: ToRoot,
{
    let (read_half, write_half) = tokio::io::split(stream);
    let mut reader = LineReader::new(read_half, config.max_line_bytes);
    let (outgoing, outgoing_lines) = mpsc::channel(256);
    let linger = config.linger;
    let session = Session {
        in_flight: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
        config,
        requests,
        outgoing,
        tasks: JoinSet::new(),
    };
    let writer = write_lines(write_half, outgoing_lines);
    tokio::pin!(writer);
    let outcome = tokio::select! {
        outcome = session.run(&mut reader) => outcome,
        written = &mut writer => return written.map_err(ConnectionError::Write),
    };
    // The session is over and its senders are gone: let the writer flush what is
    // queued (the last error, typically), but not wait forever on a stalled client.
    match tokio::time::timeout(linger, writer).await {
        Ok(Err(error)) if outcome.is_ok() => Err(ConnectionError::Write(error)),
        _ => outcome,
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    writer: W,
    mut lines: mpsc::Receiver<Vec<u8>>,
) -> io::Result<()> {
    let mut writer = BufWriter::with_capacity(64 << 10, writer);
    while let Some(line) = lines.recv().await {
        writer.write_all(&line).await?;
        // Batch whatever else is ready into the same flush.
        while let Ok(line) = lines.try_recv() {
            writer.write_all(&line).await?;
        }
        writer.flush().await?;
    }
    writer.shutdown().await
}

struct Session<Q> {
    config: Arc<ServerConfig>,
    requests: Q,
    /// Encoded response lines for the writer.
    outgoing: mpsc::Sender<Vec<u8>>,
    in_flight: Arc<Semaphore>,
    /// Tasks awaiting replies; dropped (aborted) with the session.
    tasks: JoinSet<()>,
}

impl<Q: ToRoot> Session<Q> {
    async fn run<R: AsyncRead + Unpin>(
        mut self,
        reader: &mut LineReader<R>,
    ) -> Result<(), ConnectionError> {
        if !self.handshake(reader).await? {
            return Ok(());
        }
        loop {
            let line = tokio::select! {
                line = reader.next_line() => line,
                // The writer failed: nobody would read our answers.
                () = self.outgoing.closed() => return Ok(()),
                // The root is gone: deliver what it already answered, then close.
                () = self.requests.closed() => {
                    let linger = self.config.linger;
                    let answered = async { while self.tasks.join_next().await.is_some() {} };
                    let _ = tokio::time::timeout(linger, answered).await;
                    return Ok(());
                }
            };
            match line {
                Ok(None) => return Ok(()),
                Ok(Some(line)) => match parse_request(line) {
                    Ok((id, request)) => self.dispatch(id, request).await,
                    Err(failure) => self.send_error(failure.id, failure.error).await,
                },
                Err(error) => {
                    if let ReadLineError::TooLong { max_line_bytes } = error {
                        let message = format!("a line exceeded {max_line_bytes} bytes");
                        let error = RequestError::new(ErrorKind::LineTooLong, message);
                        self.send_error(None, error).await;
                    }
                    return Err(ConnectionError::Read(error));
                }
            }
            while self.tasks.try_join_next().is_some() {}
        }
    }

    /// Reads and answers the hello; `false` when the client closed without one.
    async fn handshake<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut LineReader<R>,
    ) -> Result<bool, ConnectionError> {
        let timeout = self.config.handshake_timeout;
        let line = match tokio::time::timeout(timeout, reader.next_line()).await {
            Err(_) => return Err(ConnectionError::HandshakeTimeout { timeout }),
            Ok(Err(error)) => return Err(ConnectionError::Read(error)),
            // Closed before saying anything: a port probe, not an error.
            Ok(Ok(None)) => return Ok(false),
            Ok(Ok(Some(line))) => line,
        };
        let (id, hello) = match parse_hello(line) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.send(encode(None, "error", &error)).await;
                return Err(ConnectionError::Refused(error));
            }
        };
        if !PROTOCOLS.contains(&hello.protocol) {
            let error = RequestError::new(
                ErrorKind::ProtocolMismatch,
                format!(
                    "this pilot speaks client protocols {PROTOCOLS:?}, the client asked for {}",
                    hello.protocol
                ),
            );
            self.send(encode(id, "error", &error)).await;
            return Err(ConnectionError::Refused(error));
        }
        tracing::debug!(client = %hello.client, "client hello");
        let welcome = Welcome {
            protocol: hello.protocol,
            pilot_id: self.config.pilot_id.clone(),
            server: concat!("saker ", env!("CARGO_PKG_VERSION")).to_owned(),
        };
        self.send(encode(id, "ok", &welcome)).await;
        Ok(true)
    }

    async fn dispatch(&mut self, id: RequestId, request: Request) {
        // The semaphore is never closed, so acquiring only waits.
        let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
            return;
        };
        match request {
            Request::Submit(SubmitRequest { jobs, wait }) => {
                let (reply, answer) = oneshot::channel();
                self.forward(
                    id,
                    ClientRequest::Submit { jobs, wait, reply },
                    answer,
                    permit,
                    |r| r,
                )
                .await;
            }
            Request::SubmitLines(lines) => {
                let (reply, answer) = oneshot::channel();
                self.forward(
                    id,
                    ClientRequest::SubmitLines { lines, reply },
                    answer,
                    permit,
                    |r| r,
                )
                .await;
            }
            Request::Status(StatusRequest { jobs }) => {
                let (reply, answer) = oneshot::channel();
                self.forward(
                    id,
                    ClientRequest::Status { jobs, reply },
                    answer,
                    permit,
                    |r| r,
                )
                .await;
            }
            Request::Wait(WaitRequest { jobs }) => {
                let (reply, answer) = oneshot::channel();
                self.forward(
                    id,
                    ClientRequest::Wait { jobs, reply },
                    answer,
                    permit,
                    |r| r,
                )
                .await;
            }
            Request::Cancel(CancelRequest { jobs }) => {
                let (reply, answer) = oneshot::channel();
                self.forward(
                    id,
                    ClientRequest::Cancel { jobs, reply },
                    answer,
                    permit,
                    |r| r,
                )
                .await;
            }
            Request::Shutdown(ShutdownRequest { kill_running }) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::Shutdown {
                    kill_running,
                    reply,
                };
                self.forward(id, request, answer, permit, |()| serde_json::json!({}))
                    .await;
            }
            Request::Provisioning(request) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::Provisioning {
                    pause: request.pause,
                    reply,
                };
                self.forward(
                    id,
                    request,
                    answer,
                    permit,
                    |paused| serde_json::json!({ "paused": paused }),
                )
                .await;
            }
            Request::Stores(_) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::Stores { reply };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::PutObject(put) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::PutObject { put, reply };
                self.forward(id, request, answer, permit, |()| serde_json::json!({}))
                    .await;
            }
            Request::ObjectHolders(asked) => {
                let (reply, answer) = oneshot::channel();
                let object = asked.object;
                let request = ClientRequest::ObjectHolders { object, reply };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::FreeObjects(free) => {
                let (reply, answer) = oneshot::channel();
                let objects = free.objects;
                let request = ClientRequest::FreeObjects { objects, reply };
                self.forward(id, request, answer, permit, |()| serde_json::json!({}))
                    .await;
            }
            Request::Result(request) => {
                let (reply, answer) = oneshot::channel();
                let task = saker_client::results::TaskId(request.task);
                let request = ClientRequest::Result { task, reply };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::Update(request) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::Update {
                    update: request.update(),
                    jobs: request.jobs,
                    reply,
                };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::ActorSpawn(spawn) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::ActorSpawn { spawn, reply };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::ActorCall(ActorCallRequest { actor, data, cast }) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::ActorCall {
                    actor,
                    data,
                    cast,
                    reply,
                };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::ActorStop(ActorStopRequest { actor }) => {
                let (reply, answer) = oneshot::channel();
                let request = ClientRequest::ActorStop { actor, reply };
                self.forward(id, request, answer, permit, |r| r).await;
            }
            Request::Results(ResultsRequest {
                from,
                follow,
                new_only,
            }) => {
                // Past every sequence number: the history is empty, new results follow.
                let from = if new_only { u64::MAX } else { from };
                let (sink, items) = mpsc::channel(self.config.stream_capacity.max(1));
                let request = ClientRequest::Results { from, follow, sink };
                if !self.requests.send(request) {
                    self.send_error(Some(id), pilot_gone()).await;
                    return;
                }
                let outgoing = self.outgoing.clone();
                self.tasks
                    .spawn(forward_stream(id, items, outgoing, permit));
            }
        }
    }

    /// Sends `request` to the root and spawns the wait for its answer.
    async fn forward<T, B>(
        &mut self,
        id: RequestId,
        request: ClientRequest,
        answer: oneshot::Receiver<Result<T, RequestError>>,
        permit: OwnedSemaphorePermit,
        into_body: fn(T) -> B,
    ) where
        T: Send + 'static,
        B: Serialize + 'static,
    {
        if !self.requests.send(request) {
            self.send_error(Some(id), pilot_gone()).await;
            return;
        }
        let outgoing = self.outgoing.clone();
        self.tasks.spawn(async move {
            let line = match answer.await {
                Ok(Ok(value)) => encode(Some(id), "ok", &into_body(value)),
                Ok(Err(error)) => encode(Some(id), "error", &error),
                Err(_) => encode(Some(id), "error", &pilot_gone()),
            };
            let _ = outgoing.send(line_or_internal(id, line)).await;
            drop(permit);
        });
    }

    async fn send(&self, line: Result<Vec<u8>, serde_json::Error>) {
        let line = line.unwrap_or_else(|error| internal_error_line(None, &error));
        let _ = self.outgoing.send(line).await;
    }

    async fn send_error(&self, id: Option<RequestId>, error: RequestError) {
        let line = match id {
            Some(id) => encode(Some(id), "error", &error),
            None => encode_with_null_id("error", &error),
        };
        self.send(line).await;
    }
}

async fn forward_stream(
    id: RequestId,
    mut items: mpsc::Receiver<ResultsItem>,
    outgoing: mpsc::Sender<Vec<u8>>,
    permit: OwnedSemaphorePermit,
) {
    loop {
        let (line, last) = match items.recv().await {
            Some(ResultsItem::Record(record)) => (encode(Some(id), "result", &*record), false),
            Some(ResultsItem::End(end)) => (encode(Some(id), "end", &end), true),
            Some(ResultsItem::Error(error)) => (encode(Some(id), "error", &error), true),
            None => {
                let error = RequestError::new(
                    ErrorKind::Unavailable,
                    "the pilot closed the result stream without ending it",
                );
                (encode(Some(id), "error", &error), true)
            }
        };
        if outgoing.send(line_or_internal(id, line)).await.is_err() || last {
            break;
        }
    }
    drop(permit);
}

fn pilot_gone() -> RequestError {
    RequestError::new(
        ErrorKind::Unavailable,
        "the pilot dropped the request (it is stopping)",
    )
}

fn line_or_internal(id: RequestId, line: Result<Vec<u8>, serde_json::Error>) -> Vec<u8> {
    line.unwrap_or_else(|error| internal_error_line(Some(id), &error))
}

/// An `internal` error line built without serde, for when encoding itself failed.
fn internal_error_line(id: Option<RequestId>, error: &serde_json::Error) -> Vec<u8> {
    tracing::error!(%error, "cannot encode a client protocol message");
    let id = id.map_or_else(|| "null".to_owned(), |id| id.to_string());
    format!(
        "{{\"id\":{id},\"error\":{{\"kind\":\"internal\",\"message\":\"cannot encode the response\"}}}}\n"
    )
    .into_bytes()
}

/// A line that could not be turned into a request, and the id to answer it with.
#[derive(Debug)]
pub(crate) struct ParseFailure {
    pub id: Option<RequestId>,
    pub error: RequestError,
}

/// Parses a hello line, which must be the connection's first message.
fn parse_hello(line: &[u8]) -> Result<(Option<RequestId>, Hello), RequestError> {
    let expected = |detail: String| {
        RequestError::new(
            ErrorKind::ExpectedHello,
            format!(
                "the first message must be {{\"hello\": {{\"protocol\": {PROTOCOL_VERSION}, \"client\": \"…\"}}}}: {detail}"
            ),
        )
    };
    let envelope = codec::parse_envelope(line).map_err(|error| expected(error.to_string()))?;
    match (envelope.name.as_deref(), envelope.body) {
        (Some("hello"), Some(body)) if envelope.extra_name.is_none() => {
            serde_json::from_str::<Hello>(body.get())
                .map(|hello| (envelope.id, hello))
                .map_err(|error| {
                    expected(format!(
                        "invalid hello: {}",
                        codec::describe_body_error(body.get(), &error)
                    ))
                })
        }
        (name, _) => Err(expected(format!(
            "got {}",
            name.map_or("no message".to_owned(), |name| format!("`{name}`"))
        ))),
    }
}

/// Parses and validates one request line.
pub(crate) fn parse_request(line: &[u8]) -> Result<(RequestId, Request), ParseFailure> {
    let envelope = codec::parse_envelope(line).map_err(|error| ParseFailure {
        id: None,
        error: RequestError::new(ErrorKind::Malformed, format!("not a message: {error}")),
    })?;
    let id = envelope.id;
    let fail = |kind, message: String| ParseFailure {
        id,
        error: RequestError::new(kind, message),
    };
    let (Some(name), Some(body)) = (envelope.name, envelope.body) else {
        return Err(fail(
            ErrorKind::Malformed,
            "the message has no request".into(),
        ));
    };
    if let Some(extra) = envelope.extra_name {
        return Err(fail(
            ErrorKind::Malformed,
            format!("a message carries one request, found `{name}` and `{extra}`"),
        ));
    }
    let Some(id) = id else {
        return Err(fail(
            ErrorKind::Malformed,
            format!("the `{name}` request has no integer \"id\""),
        ));
    };
    fn body_of<T: serde::de::DeserializeOwned>(
        name: &str,
        body: &serde_json::value::RawValue,
    ) -> Result<T, (ErrorKind, String)> {
        serde_json::from_str(body.get()).map_err(|error| {
            (
                ErrorKind::Malformed,
                format!(
                    "invalid `{name}` request: {}",
                    codec::describe_body_error(body.get(), &error)
                ),
            )
        })
    }
    let request = match name.as_str() {
        "submit" => body_of(&name, body).map(Request::Submit),
        "submit_lines" => body_of(&name, body).map(Request::SubmitLines),
        "status" => body_of(&name, body).map(Request::Status),
        "wait" => body_of(&name, body).map(Request::Wait),
        "cancel" => body_of(&name, body).map(Request::Cancel),
        "results" => body_of(&name, body).map(Request::Results),
        "shutdown" => body_of(&name, body).map(Request::Shutdown),
        "provisioning" => body_of(&name, body).map(Request::Provisioning),
        "stores" => body_of(&name, body).map(Request::Stores),
        "put_object" => body_of(&name, body).map(Request::PutObject),
        "free_objects" => body_of(&name, body).map(Request::FreeObjects),
        "object_holders" => body_of(&name, body).map(Request::ObjectHolders),
        "update" => body_of(&name, body).map(Request::Update),
        "result" => body_of(&name, body).map(Request::Result),
        "actor_spawn" => body_of(&name, body).map(Request::ActorSpawn),
        "actor_call" => body_of(&name, body).map(Request::ActorCall),
        "actor_stop" => body_of(&name, body).map(Request::ActorStop),
        "hello" => Err((
            ErrorKind::Malformed,
            "hello is only valid as the first message".to_owned(),
        )),
        _ => Err((
            ErrorKind::UnknownRequest,
            format!("unknown request `{name}`"),
        )),
    }
    .map_err(|(kind, message)| fail(kind, message))?;
    if let Request::ActorSpawn(spawn) = &request {
        spawn
            .validate()
            .map_err(|message| fail(ErrorKind::InvalidSpec, format!("actor_spawn: {message}")))?;
    }
    if let Request::SubmitLines(lines) = &request {
        lines
            .validate()
            .map_err(|error| fail(ErrorKind::InvalidSpec, format!("submit_lines: {error}")))?;
    }
    if let Request::Submit(submit) = &request {
        for (position, job) in submit.jobs.iter().enumerate() {
            job.validate().map_err(|error| {
                fail(ErrorKind::InvalidSpec, format!("jobs[{position}]: {error}"))
            })?;
        }
    }
    Ok((id, request))
}
