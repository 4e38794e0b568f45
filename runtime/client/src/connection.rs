//! The Rust client of the client protocol, used by the `saker` CLI.
//!
//! A [`Client`] owns one connection. Requests may be issued concurrently from several
//! tasks (`&self` methods): each gets a fresh id, a background reader task routes
//! every response line to the request with that id, and one writer task sends lines.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use saker_transport::{ConfigError, CredentialError, Credentials, DirError, PilotDir, Role};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::actors::{
    ActorCallReply, ActorCallRequest, ActorSpawnReply, ActorSpawnRequest, ActorStopReply,
    ActorStopRequest,
};
use super::codec::{self, DEFAULT_MAX_LINE_BYTES, LineReader, ReadLineError, encode};
use super::endpoint::{ClientEndpoint, EndpointError};
use super::protocol::{
    CancelReport, CancelRequest, ErrorKind, Hello, PROTOCOL_VERSION, RequestError, RequestId,
    ResultRequest, ResultsRequest, ShutdownRequest, StatusReport, StatusRequest, StreamEnd,
    SubmitReply, SubmitRequest, SubmitWait, SubmittedJob, SubmittedLines, UpdateReport,
    UpdateRequest, WaitReport, WaitRequest, Welcome,
};
use crate::results::{JobId, ResultRecord};
use crate::spec::{JobLines, JobRequest};

/// Items buffered per result stream before the connection's reader waits for the
/// consumer (which then also delays other responses on this connection).
const STREAM_BUFFER: usize = 1024;

/// A connection to a pilot's client socket.
#[derive(Debug)]
pub struct Client {
    welcome: Welcome,
    outgoing: mpsc::Sender<Vec<u8>>,
    shared: Arc<Mutex<Shared>>,
    next_id: AtomicU64,
    reader: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Shared {
    pending: HashMap<RequestId, Pending>,
    /// Set when the reader stopped; no request can be answered after that.
    closed: bool,
    /// An error the server sent with a `null` id (about the connection itself).
    connection_error: Option<RequestError>,
}

#[derive(Debug)]
enum Pending {
    Reply(oneshot::Sender<Answer>),
    Stream(mpsc::Sender<Result<StreamEvent, ClientError>>),
}

#[derive(Debug)]
enum Answer {
    Ok(Box<RawValue>),
    Error(RequestError),
}

#[derive(Debug)]
enum StreamEvent {
    Record(Box<ResultRecord>),
    End(StreamEnd),
}

impl Client {
    /// Connects to the pilot whose directory is `pilot_dir`: reads `client.json`, and
    /// on the root's host connects to its local socket (no TLS: the directory admits
    /// only its owner); elsewhere, or if that fails, loads the client certificate and
    /// connects over TCP with mutual TLS.
    pub async fn connect(pilot_dir: &Path, client_name: &str) -> Result<Client, ClientError> {
        let pilot_dir = PilotDir::open(pilot_dir).map_err(ClientError::PilotDir)?;
        let endpoint = ClientEndpoint::read(&pilot_dir).map_err(ClientError::Endpoint)?;
        if endpoint.protocol != PROTOCOL_VERSION {
            return Err(ClientError::Refused(RequestError::new(
                ErrorKind::ProtocolMismatch,
                format!(
                    "the pilot speaks client protocol {}, this client {PROTOCOL_VERSION}",
                    endpoint.protocol
                ),
            )));
        }
        let client = match endpoint.local_socket(&pilot_dir) {
            Some(path) => match UnixStream::connect(&path).await {
                Ok(stream) => Some(Client::handshake(stream, client_name).await?),
                Err(error) => {
                    tracing::debug!(path = %path.display(), %error, "local socket unreachable; using TCP");
                    None
                }
            },
            None => None,
        };
        let client = match client {
            Some(client) => client,
            None => Client::connect_tls(&pilot_dir, &endpoint, client_name).await?,
        };
        let expected = pilot_dir.pilot_id().to_string();
        if client.pilot_id() != expected {
            return Err(ClientError::WrongPilot {
                expected,
                found: client.pilot_id().to_owned(),
            });
        }
        Ok(client)
    }

    /// Connects to `endpoint`'s TCP address with mutual TLS.
    async fn connect_tls(
        pilot_dir: &PilotDir,
        endpoint: &ClientEndpoint,
        client_name: &str,
    ) -> Result<Client, ClientError> {
        let credentials =
            Credentials::load(pilot_dir, Role::Client).map_err(ClientError::Credentials)?;
        let tls_config = saker_transport::tls::tls_client_config(&credentials)
            .map_err(ClientError::TlsConfig)?;
        let tcp =
            TcpStream::connect(&endpoint.addr)
                .await
                .map_err(|source| ClientError::Connect {
                    addr: endpoint.addr.clone(),
                    source,
                })?;
        let _ = tcp.set_nodelay(true);
        let stream = TlsConnector::from(tls_config)
            .connect(saker_transport::tls::server_name(), tcp)
            .await
            .map_err(ClientError::TlsHandshake)?;
        Client::handshake(stream, client_name).await
    }

    /// Says hello over an established byte stream (TLS in production, anything in
    /// tests) and starts the connection's reader and writer tasks.
    pub async fn handshake<S>(stream: S, client_name: &str) -> Result<Client, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (read_half, mut write_half) = tokio::io::split(stream);
        let hello = Hello {
            protocol: PROTOCOL_VERSION,
            client: client_name.to_owned(),
        };
        let line = encode(None, "hello", &hello).map_err(ClientError::Encode)?;
        write_half.write_all(&line).await.map_err(ClientError::Io)?;
        write_half.flush().await.map_err(ClientError::Io)?;
        let mut reader = LineReader::new(read_half, DEFAULT_MAX_LINE_BYTES);
        let line = match reader.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return Err(ClientError::ConnectionClosed),
            Err(error) => return Err(ClientError::Read(error)),
        };
        let envelope = codec::parse_envelope(line).map_err(ClientError::Decode)?;
        let body = envelope.body.map_or("null", RawValue::get);
        let welcome = match envelope.name.as_deref() {
            Some("ok") => serde_json::from_str::<Welcome>(body).map_err(ClientError::Decode)?,
            Some("error") => {
                let error = serde_json::from_str(body).map_err(ClientError::Decode)?;
                return Err(ClientError::Refused(error));
            }
            _ => return Err(ClientError::UnexpectedMessage),
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (outgoing, lines) = mpsc::channel(256);
        tokio::spawn(write_lines(write_half, lines));
        let reader = tokio::spawn(read_responses(reader, shared.clone()));
        Ok(Client {
            welcome,
            outgoing,
            shared,
            next_id: AtomicU64::new(1),
            reader,
        })
    }

    /// Identity of the pilot this client talks to.
    pub fn pilot_id(&self) -> &str {
        &self.welcome.pilot_id
    }

    /// The server's hello answer.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Submits a batch of jobs, all or none.
    pub async fn submit(&self, jobs: Vec<JobRequest>) -> Result<Vec<SubmittedJob>, ClientError> {
        let request = SubmitRequest { jobs, wait: None };
        let reply: SubmitReply = self.call("submit", &request).await?;
        Ok(reply.jobs)
    }

    /// Submits `jobs` and is answered once every task of them has ended: how many
    /// succeeded, failed and were cancelled, and with [`SubmitWait::Results`] every
    /// task's result. One request and one answer, where [`Client::submit`] and
    /// [`Client::wait`] take two of each.
    pub async fn submit_and_wait(
        &self,
        jobs: Vec<JobRequest>,
        wait: SubmitWait,
    ) -> Result<SubmitReply, ClientError> {
        let request = SubmitRequest {
            jobs,
            wait: Some(wait),
        };
        self.call("submit", &request).await
    }

    /// Submits one single-task job per command of `lines` (a task file's lines), with
    /// consecutive ids; acknowledged once durable, like [`Client::submit`]. A pilot
    /// older than this request answers `unknown_request`.
    pub async fn submit_lines(&self, lines: &JobLines) -> Result<SubmittedLines, ClientError> {
        self.call("submit_lines", lines).await
    }

    /// Starts an actor; answered once its `on_start` returned.
    pub async fn actor_spawn(
        &self,
        spawn: &ActorSpawnRequest,
    ) -> Result<ActorSpawnReply, ClientError> {
        self.call("actor_spawn", spawn).await
    }

    /// Sends `data` to `actor` and waits for its reply (or, with `cast`, only until
    /// the pilot routed it).
    pub async fn actor_call(
        &self,
        actor: u64,
        data: Vec<u8>,
        cast: bool,
    ) -> Result<Vec<u8>, ClientError> {
        let request = ActorCallRequest { actor, data, cast };
        let reply: ActorCallReply = self.call("actor_call", &request).await?;
        Ok(reply.reply)
    }

    /// Stops `actor`; answered once it has stopped.
    pub async fn actor_stop(&self, actor: u64) -> Result<(), ClientError> {
        let _: ActorStopReply = self.call("actor_stop", &ActorStopRequest { actor }).await?;
        Ok(())
    }

    pub async fn status(&self) -> Result<StatusReport, ClientError> {
        self.call("status", &StatusRequest { jobs: None }).await
    }

    /// The status, with `jobs`' tasks by state in `job_counts` (in this order). A
    /// pilot older than this request answers `malformed`; an unknown job is
    /// `unknown_job`.
    pub async fn status_of_jobs(&self, jobs: Vec<JobId>) -> Result<StatusReport, ClientError> {
        self.call("status", &StatusRequest { jobs: Some(jobs) })
            .await
    }

    /// Where each live node keeps its data items and objects (`stores`).
    pub async fn stores(&self) -> Result<super::protocol::StoresReport, ClientError> {
        self.call("stores", &super::protocol::StoresRequest {})
            .await
    }

    /// Records an object this client wrote in a node's store (`put_object`).
    pub async fn put_object(
        &self,
        put: super::protocol::PutObjectRequest,
    ) -> Result<(), ClientError> {
        let _: serde_json::Value = self.call("put_object", &put).await?;
        Ok(())
    }

    /// The live nodes holding `object`, best first (`object_holders`).
    pub async fn object_holders(
        &self,
        object: saker_core::ObjectId,
    ) -> Result<super::protocol::ObjectHoldersReport, ClientError> {
        let request = super::protocol::ObjectHoldersRequest { object };
        self.call("object_holders", &request).await
    }

    /// Frees these objects once no unfinished job reads them (`free_objects`).
    pub async fn free_objects(
        &self,
        objects: Vec<saker_core::ObjectId>,
    ) -> Result<(), ClientError> {
        let request = super::protocol::FreeObjectsRequest { objects };
        let _: serde_json::Value = self.call("free_objects", &request).await?;
        Ok(())
    }

    /// The result of task `task`; an error of kind `no_result` if it has none (yet).
    pub async fn result(&self, task: u64) -> Result<ResultRecord, ClientError> {
        self.call("result", &ResultRequest { task }).await
    }

    /// Waits until every task of `jobs` (of all jobs when `None`) is terminal.
    pub async fn wait(&self, jobs: Option<Vec<JobId>>) -> Result<WaitReport, ClientError> {
        self.call("wait", &WaitRequest { jobs }).await
    }

    pub async fn cancel(&self, jobs: Vec<JobId>) -> Result<CancelReport, ClientError> {
        self.call("cancel", &CancelRequest { jobs }).await
    }

    /// Changes these jobs' tasks that have not started (all jobs, or none).
    pub async fn update(
        &self,
        jobs: Vec<JobId>,
        update: super::JobUpdate,
    ) -> Result<UpdateReport, ClientError> {
        self.call("update", &UpdateRequest::new(jobs, update)).await
    }

    /// Asks an elastic pilot to stop (`pause`) or resume asking for allocations;
    /// whether it is paused now.
    pub async fn provisioning(&self, pause: bool) -> Result<bool, ClientError> {
        let body: serde_json::Value = self
            .call(
                "provisioning",
                &super::protocol::ProvisioningRequest { pause },
            )
            .await?;
        Ok(body["paused"].as_bool().unwrap_or(pause))
    }

    /// Asks the pilot to stop.
    pub async fn shutdown(&self, kill_running: bool) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .call("shutdown", &ShutdownRequest { kill_running })
            .await?;
        Ok(())
    }

    /// Streams accepted results from journal sequence number `from` on; with `follow`
    /// the stream continues with new results until dropped.
    pub async fn results(&self, from: u64, follow: bool) -> Result<ResultStream, ClientError> {
        self.open_results(from, follow, false).await
    }

    /// Streams the results accepted from now on (none of the history) until dropped:
    /// what a driver follows for the tasks it is about to submit.
    pub async fn follow_new(&self) -> Result<ResultStream, ClientError> {
        self.open_results(0, true, true).await
    }

    async fn open_results(
        &self,
        from: u64,
        follow: bool,
        new_only: bool,
    ) -> Result<ResultStream, ClientError> {
        let (events, receiver) = mpsc::channel(STREAM_BUFFER);
        let id = self.register(Pending::Stream(events))?;
        self.send(
            id,
            "results",
            &ResultsRequest {
                from,
                follow,
                new_only,
            },
        )
        .await?;
        Ok(ResultStream {
            events: receiver,
            end: None,
        })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        name: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let (sender, receiver) = oneshot::channel();
        let id = self.register(Pending::Reply(sender))?;
        self.send(id, name, body).await?;
        match receiver.await {
            Ok(Answer::Ok(body)) => serde_json::from_str(body.get()).map_err(ClientError::Decode),
            Ok(Answer::Error(error)) => Err(ClientError::Server(error)),
            Err(_) => Err(ClientError::ConnectionClosed),
        }
    }

    fn register(&self, pending: Pending) -> Result<RequestId, ClientError> {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut shared = lock(&self.shared);
        if shared.closed {
            return Err(closed_error(&shared));
        }
        shared.pending.insert(id, pending);
        Ok(id)
    }

    async fn send<B: Serialize>(
        &self,
        id: RequestId,
        name: &str,
        body: &B,
    ) -> Result<(), ClientError> {
        let sent = match encode(Some(id), name, body) {
            Ok(line) => self
                .outgoing
                .send(line)
                .await
                .map_err(|_| ClientError::ConnectionClosed),
            Err(error) => Err(ClientError::Encode(error)),
        };
        if sent.is_err() {
            lock(&self.shared).pending.remove(&id);
        }
        sent
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // The writer ends by itself once `outgoing` is dropped.
        self.reader.abort();
    }
}

/// Results of one `results` request, in journal order.
#[derive(Debug)]
pub struct ResultStream {
    events: mpsc::Receiver<Result<StreamEvent, ClientError>>,
    end: Option<StreamEnd>,
}

impl ResultStream {
    /// The next result, or `None` once the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<ResultRecord>, ClientError> {
        if self.end.is_some() {
            return Ok(None);
        }
        match self.events.recv().await {
            Some(Ok(StreamEvent::Record(record))) => Ok(Some(*record)),
            Some(Ok(StreamEvent::End(end))) => {
                self.end = Some(end);
                Ok(None)
            }
            Some(Err(error)) => Err(error),
            None => Err(ClientError::ConnectionClosed),
        }
    }

    /// How the server ended the stream (`next` is where to resume), once it has.
    pub fn end(&self) -> Option<StreamEnd> {
        self.end
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // The state stays consistent even if a holder panicked: every update is one
    // map operation or flag store.
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn closed_error(shared: &Shared) -> ClientError {
    match &shared.connection_error {
        Some(error) => ClientError::Server(error.clone()),
        None => ClientError::ConnectionClosed,
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(writer: W, mut lines: mpsc::Receiver<Vec<u8>>) {
    let mut writer = BufWriter::new(writer);
    while let Some(line) = lines.recv().await {
        if writer.write_all(&line).await.is_err() {
            return;
        }
        while let Ok(line) = lines.try_recv() {
            if writer.write_all(&line).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.shutdown().await;
}

async fn read_responses<R: AsyncRead + Unpin>(
    mut reader: LineReader<R>,
    shared: Arc<Mutex<Shared>>,
) {
    loop {
        match reader.next_line().await {
            Ok(Some(line)) => route(line, &shared).await,
            Ok(None) => break,
            Err(error) => {
                // A pilot that stops may drop the connection without a TLS goodbye;
                // that only matters to requests still waiting for an answer.
                if lock(&shared).pending.is_empty() {
                    tracing::debug!(%error, "client connection read failed");
                } else {
                    tracing::warn!(%error, "client connection read failed");
                }
                break;
            }
        }
    }
    let pending = {
        let mut state = lock(&shared);
        state.closed = true;
        std::mem::take(&mut state.pending)
    };
    let connection_error = lock(&shared).connection_error.clone();
    // Tell every waiter why; dropping the senders alone would only say "closed".
    for (_, pending) in pending {
        match (pending, &connection_error) {
            (Pending::Reply(reply), Some(error)) => {
                let _ = reply.send(Answer::Error(error.clone()));
            }
            (Pending::Stream(events), Some(error)) => {
                let _ = events.send(Err(ClientError::Server(error.clone()))).await;
            }
            _ => {}
        }
    }
}

/// Delivers one response line to the request it answers.
async fn route(line: &[u8], shared: &Mutex<Shared>) {
    let envelope = match codec::parse_envelope(line) {
        Ok(envelope) => envelope,
        Err(error) => {
            tracing::warn!(%error, "ignoring an unreadable line from the pilot");
            return;
        }
    };
    let (Some(name), Some(body)) = (envelope.name.as_deref(), envelope.body) else {
        return;
    };
    let Some(id) = envelope.id else {
        if name == "error"
            && let Ok(error) = serde_json::from_str::<RequestError>(body.get())
        {
            tracing::warn!(%error, "the pilot reported a connection error");
            lock(shared).connection_error = Some(error);
        }
        return;
    };
    let error = || {
        serde_json::from_str::<RequestError>(body.get()).unwrap_or_else(|decode| {
            RequestError::new(ErrorKind::Unknown, format!("unreadable error: {decode}"))
        })
    };
    let events = {
        let mut state = lock(shared);
        match state.pending.get(&id) {
            None => return,
            Some(Pending::Reply(_)) => {
                let Some(Pending::Reply(reply)) = state.pending.remove(&id) else {
                    return;
                };
                let answer = match name {
                    "ok" => Answer::Ok(body.to_owned()),
                    "error" => Answer::Error(error()),
                    _ => Answer::Error(RequestError::new(
                        ErrorKind::Unknown,
                        format!("unexpected `{name}` message for a request"),
                    )),
                };
                let _ = reply.send(answer);
                return;
            }
            Some(Pending::Stream(events)) => {
                let events = events.clone();
                if name != "result" {
                    state.pending.remove(&id);
                }
                events
            }
        }
    };
    let event = match name {
        "result" => serde_json::from_str::<ResultRecord>(body.get())
            .map(|record| StreamEvent::Record(Box::new(record)))
            .map_err(ClientError::Decode),
        "end" => serde_json::from_str::<StreamEnd>(body.get())
            .map(StreamEvent::End)
            .map_err(ClientError::Decode),
        "error" => Err(ClientError::Server(error())),
        _ => Err(ClientError::UnexpectedMessage),
    };
    if events.send(event).await.is_err() {
        // The consumer dropped its stream; later lines for it are discarded.
        lock(shared).pending.remove(&id);
    }
}

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot open the pilot directory")]
    PilotDir(#[source] DirError),
    #[error("cannot find the pilot's client socket")]
    Endpoint(#[source] EndpointError),
    #[error("cannot load the client certificate")]
    Credentials(#[source] CredentialError),
    #[error("cannot build the tls configuration")]
    TlsConfig(#[source] ConfigError),
    #[error("cannot connect to the pilot at {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tls handshake with the pilot failed")]
    TlsHandshake(#[source] std::io::Error),
    #[error("reached pilot {found}, but the directory belongs to pilot {expected}")]
    WrongPilot { expected: String, found: String },
    #[error("the pilot refused the connection")]
    Refused(#[source] RequestError),
    #[error("the pilot answered with an error")]
    Server(#[source] RequestError),
    #[error("the connection to the pilot closed")]
    ConnectionClosed,
    #[error("connection i/o failed")]
    Io(#[source] std::io::Error),
    #[error("cannot read from the pilot")]
    Read(#[source] ReadLineError),
    #[error("cannot encode the request")]
    Encode(#[source] serde_json::Error),
    #[error("cannot decode the pilot's answer")]
    Decode(#[source] serde_json::Error),
    #[error("the pilot sent a message this client does not understand")]
    UnexpectedMessage,
}

impl ClientError {
    /// The server's error, when the pilot refused the request or connection.
    pub fn server_error(&self) -> Option<&RequestError> {
        match self {
            ClientError::Server(error) | ClientError::Refused(error) => Some(error),
            _ => None,
        }
    }

    /// Whether the pilot could not be reached or the connection broke, as when its
    /// root died and a standby is taking over: what a client may retry once the
    /// pilot directory names a root again. An answer of the pilot's is not.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            ClientError::Endpoint(_)
                | ClientError::Connect { .. }
                | ClientError::TlsHandshake(_)
                | ClientError::ConnectionClosed
                | ClientError::Io(_)
                | ClientError::Read(_)
        )
    }
}
