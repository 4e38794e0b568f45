//! Protocol round trips: a server on one end of an in-memory duplex stream, the test
//! playing the root on the request channel, and on the other end either raw JSON lines
//! (as a Python client would write them) or the Rust [`Client`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::*;
use saker_client::results::{JobId, TaskId, sample_record};
use saker_client::spec::{JobRequest, TaskSpec};
use saker_client::*;

const PILOT: &str = "test-pilot";

fn test_config() -> ServerConfig {
    ServerConfig {
        max_line_bytes: 4096,
        handshake_timeout: Duration::from_millis(200),
        ..ServerConfig::new(PILOT)
    }
}

type ServerTask = JoinHandle<Result<(), ConnectionError>>;

/// Starts a server connection; returns the client's end and the root's receiver.
fn start(
    config: ServerConfig,
) -> (
    DuplexStream,
    mpsc::UnboundedReceiver<ClientRequest>,
    ServerTask,
) {
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let (requests, root) = mpsc::unbounded_channel();
    let server = tokio::spawn(serve_connection(server_end, Arc::new(config), requests));
    (client_end, root, server)
}

/// A client that speaks raw lines.
struct Raw {
    reader: BufReader<ReadHalf<DuplexStream>>,
    writer: WriteHalf<DuplexStream>,
}

impl Raw {
    fn new(stream: DuplexStream) -> Self {
        let (read_half, writer) = tokio::io::split(stream);
        Raw {
            reader: BufReader::new(read_half),
            writer,
        }
    }

    async fn send(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.write_all(b"\n").await.unwrap();
    }

    async fn receive(&mut self) -> Value {
        let mut line = String::new();
        let read = self.reader.read_line(&mut line).await.unwrap();
        assert!(read > 0, "connection closed while a message was expected");
        assert!(line.ends_with('\n'));
        serde_json::from_str(&line).unwrap_or_else(|error| panic!("{line:?}: {error}"))
    }

    async fn expect_closed(&mut self) {
        let mut line = String::new();
        assert_eq!(self.reader.read_line(&mut line).await.unwrap(), 0, "{line}");
    }

    async fn hello(&mut self) {
        self.send(r#"{"hello": {"protocol": 1, "client": "raw-test"}}"#)
            .await;
        let answer = self.receive().await;
        assert_eq!(answer["ok"]["protocol"], 1);
        assert_eq!(answer["ok"]["pilot_id"], PILOT);
    }
}

async fn answer_status(root: &mut mpsc::UnboundedReceiver<ClientRequest>, queued: u64) {
    match root.recv().await {
        Some(ClientRequest::Status { jobs: None, reply }) => {
            let report = StatusReport {
                queued,
                ..StatusReport::default()
            };
            reply.send(Ok(report)).unwrap();
        }
        other => panic!("expected status, got {other:?}"),
    }
}

fn job(argv: &[&str]) -> JobRequest {
    JobRequest::single(TaskSpec::new(
        argv.iter().map(|arg| arg.to_string()).collect(),
    ))
}

#[tokio::test]
async fn hello_then_requests_echo_their_ids() {
    let (stream, mut root, server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    raw.send(r#"{"id": 41, "status": {}}"#).await;
    answer_status(&mut root, 7).await;
    let answer = raw.receive().await;
    assert_eq!(answer["id"], 41);
    assert_eq!(answer["ok"]["queued"], 7);
    drop(raw);
    assert!(server.await.unwrap().is_ok());
}

#[tokio::test]
async fn protocol_mismatch_is_an_error_and_closes() {
    let (stream, _root, server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.send(r#"{"hello": {"protocol": 4, "client": "future"}}"#)
        .await;
    let answer = raw.receive().await;
    assert_eq!(answer["error"]["kind"], "protocol_mismatch");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("protocols [1, 2, 3]")
    );
    raw.expect_closed().await;
    assert!(matches!(
        server.await.unwrap(),
        Err(ConnectionError::Refused(RequestError {
            kind: ErrorKind::ProtocolMismatch,
            ..
        }))
    ));
}

#[tokio::test]
async fn a_request_before_hello_is_refused() {
    let (stream, _root, server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.send(r#"{"id": 1, "status": {}}"#).await;
    assert_eq!(raw.receive().await["error"]["kind"], "expected_hello");
    raw.expect_closed().await;
    assert!(server.await.unwrap().is_err());
}

#[tokio::test]
async fn a_silent_client_times_out() {
    let (stream, _root, server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.expect_closed().await;
    assert!(matches!(
        server.await.unwrap(),
        Err(ConnectionError::HandshakeTimeout { .. })
    ));
}

#[tokio::test]
async fn bad_lines_get_errors_and_the_connection_goes_on() {
    let (stream, mut root, _server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    let cases = [
        ("this is not json", Value::Null, "malformed"),
        (r#"[1, 2, 3]"#, Value::Null, "malformed"),
        (r#"{"status": {}}"#, Value::Null, "malformed"),
        (
            r#"{"id": 5, "frobnicate": {}}"#,
            json!(5),
            "unknown_request",
        ),
        (r#"{"id": 6, "submit": {"jobs": 3}}"#, json!(6), "malformed"),
        (
            r#"{"id": 7, "status": {}, "wait": {}}"#,
            json!(7),
            "malformed",
        ),
        (
            r#"{"id": 8, "submit": {"jobs": [{"spec": {"argv": ["a"], "core": 2}}]}}"#,
            json!(8),
            "malformed",
        ),
        (
            r#"{"id": 9, "hello": {"protocol": 1}}"#,
            json!(9),
            "malformed",
        ),
    ];
    for (line, id, kind) in cases {
        raw.send(line).await;
        let answer = raw.receive().await;
        assert_eq!(answer["id"], id, "{line}");
        assert_eq!(answer["error"]["kind"], kind, "{line}");
    }
    raw.send(
        r#"{"id": 10, "submit": {"jobs": [{"spec": {"argv": ["ok"]}}, {"spec": {"argv": []}}]}}"#,
    )
    .await;
    let answer = raw.receive().await;
    assert_eq!(answer["error"]["kind"], "invalid_spec");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("jobs[1]: argv is empty")
    );
    // None of the bad lines reached the root; the connection still works.
    raw.send(r#"{"id": 11, "status": {}}"#).await;
    answer_status(&mut root, 1).await;
    assert_eq!(raw.receive().await["id"], 11);
}

#[tokio::test]
async fn an_oversize_line_is_an_error_and_closes() {
    let (stream, _root, server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    let long = format!(
        r#"{{"id": 1, "submit": {{"jobs": [{{"spec": {{"argv": ["{}"]}}}}]}}}}"#,
        "x".repeat(5000)
    );
    raw.send(&long).await;
    let answer = raw.receive().await;
    assert_eq!(answer["id"], Value::Null);
    assert_eq!(answer["error"]["kind"], "line_too_long");
    raw.expect_closed().await;
    assert!(matches!(
        server.await.unwrap(),
        Err(ConnectionError::Read(ReadLineError::TooLong {
            max_line_bytes: 4096
        }))
    ));
}

#[tokio::test]
async fn submit_round_trip_through_the_client() {
    let (stream, mut root, _server) = start(test_config());
    let root_task = tokio::spawn(async move {
        match root.recv().await {
            Some(ClientRequest::Submit { jobs, reply, .. }) => {
                assert_eq!(jobs.len(), 2);
                assert_eq!(jobs[1].task_count(), 100);
                let reply_jobs = vec![
                    SubmittedJob {
                        job: JobId(1),
                        first_task: TaskId(1),
                        count: 1,
                    },
                    SubmittedJob {
                        job: JobId(2),
                        first_task: TaskId(2),
                        count: 100,
                    },
                ];
                reply
                    .send(Ok(SubmitReply::acknowledged(reply_jobs)))
                    .unwrap();
            }
            other => panic!("expected submit, got {other:?}"),
        }
    });
    let client = Client::handshake(stream, "test").await.unwrap();
    assert_eq!(client.pilot_id(), PILOT);
    let mut array = job(&["run", "{index}"]);
    array.array = Some("0-99".parse().unwrap());
    let submitted = client.submit(vec![job(&["true"]), array]).await.unwrap();
    assert_eq!(
        submitted[1],
        SubmittedJob {
            job: JobId(2),
            first_task: TaskId(2),
            count: 100
        }
    );
    root_task.await.unwrap();
}

#[tokio::test]
async fn a_pending_wait_does_not_block_other_requests() {
    let (stream, mut root, _server) = start(test_config());
    let client = Arc::new(Client::handshake(stream, "test").await.unwrap());
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.wait(Some(vec![JobId(3)])).await })
    };
    let wait_reply = match root.recv().await {
        Some(ClientRequest::Wait { jobs, reply }) => {
            assert_eq!(jobs, Some(vec![JobId(3)]));
            reply
        }
        other => panic!("expected wait, got {other:?}"),
    };
    let status = tokio::join!(client.status(), answer_status(&mut root, 5)).0;
    assert_eq!(status.unwrap().queued, 5);
    assert!(!waiter.is_finished());
    let report = WaitReport {
        succeeded: 4,
        failed: 1,
        cancelled: 0,
    };
    wait_reply.send(Ok(report)).unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), report);
}

#[tokio::test]
async fn root_errors_and_dropped_replies_reach_the_client() {
    let (stream, mut root, _server) = start(test_config());
    let client = Client::handshake(stream, "test").await.unwrap();
    let root_task = tokio::spawn(async move {
        while let Some(request) = root.recv().await {
            match request {
                ClientRequest::Cancel { reply, .. } => {
                    let error = RequestError::new(ErrorKind::UnknownJob, "unknown job 9");
                    reply.send(Err(error)).unwrap();
                }
                ClientRequest::Shutdown { reply, .. } => drop(reply),
                other => panic!("unexpected {other:?}"),
            }
        }
    });
    let error = client.cancel(vec![JobId(9)]).await.unwrap_err();
    assert_eq!(error.server_error().unwrap().kind, ErrorKind::UnknownJob);
    let error = client.shutdown(false).await.unwrap_err();
    assert_eq!(error.server_error().unwrap().kind, ErrorKind::Unavailable);
    drop(client);
    root_task.await.unwrap();
}

#[tokio::test]
async fn shutdown_is_acknowledged_with_an_empty_object() {
    let (stream, mut root, _server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    raw.send(r#"{"id": 2, "shutdown": {"kill_running": true}}"#)
        .await;
    match root.recv().await {
        Some(ClientRequest::Shutdown {
            kill_running: true,
            reply,
        }) => reply.send(Ok(())).unwrap(),
        other => panic!("expected shutdown, got {other:?}"),
    }
    assert_eq!(raw.receive().await, json!({"id": 2, "ok": {}}));
}

#[tokio::test]
async fn results_stream_ends_with_end_when_not_following() {
    let (stream, mut root, _server) = start(test_config());
    let root_task = tokio::spawn(async move {
        match root.recv().await {
            Some(ClientRequest::Results {
                from,
                follow: false,
                sink,
            }) => {
                assert_eq!(from, 101);
                for task in 1..=3 {
                    sink.send(ResultsItem::Record(Arc::new(sample_record(task))))
                        .await
                        .unwrap();
                }
                sink.send(ResultsItem::End(StreamEnd {
                    next: 104,
                    compacted: 0,
                }))
                .await
                .unwrap();
            }
            other => panic!("expected results, got {other:?}"),
        }
    });
    let client = Client::handshake(stream, "test").await.unwrap();
    let mut stream = client.results(101, false).await.unwrap();
    let mut seen = Vec::new();
    while let Some(record) = stream.next().await.unwrap() {
        seen.push(record.seq);
    }
    assert_eq!(seen, [101, 102, 103]);
    assert_eq!(
        stream.end(),
        Some(StreamEnd {
            next: 104,
            compacted: 0
        })
    );
    assert!(stream.next().await.unwrap().is_none());
    root_task.await.unwrap();
}

#[tokio::test]
async fn raw_results_lines_carry_records_and_a_dropped_sink_is_an_error() {
    let (stream, mut root, _server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    raw.send(r#"{"id": 3, "results": {"from": 0, "follow": true}}"#)
        .await;
    let Some(ClientRequest::Results {
        sink, follow: true, ..
    }) = root.recv().await
    else {
        panic!("expected a following results request");
    };
    sink.send(ResultsItem::Record(Arc::new(sample_record(1))))
        .await
        .unwrap();
    let line = raw.receive().await;
    assert_eq!(line["id"], 3);
    assert_eq!(line["result"]["seq"], 101);
    assert_eq!(line["result"]["state"], "succeeded");
    drop(sink);
    let line = raw.receive().await;
    assert_eq!(
        (line["id"].clone(), line["error"]["kind"].clone()),
        (json!(3), json!("unavailable"))
    );
}

#[tokio::test]
async fn a_connection_error_reaches_the_waiting_call() {
    let (stream, _root, _server) = start(test_config());
    let client = Client::handshake(stream, "test").await.unwrap();
    let huge = job(&["echo", &"y".repeat(8000)]);
    let error = client.submit(vec![huge]).await.unwrap_err();
    assert_eq!(
        error.server_error().map(|error| error.kind),
        Some(ErrorKind::LineTooLong)
    );
    assert!(matches!(client.status().await, Err(ClientError::Server(_))));
}

#[tokio::test]
async fn a_gone_root_closes_the_connection() {
    let (stream, root, server) = start(test_config());
    drop(root);
    let client = Client::handshake(stream, "test").await.unwrap();
    assert!(server.await.unwrap().is_ok());
    assert!(matches!(
        client.status().await,
        Err(ClientError::ConnectionClosed)
    ));
}

/// A pilot directory and `serve` on 127.0.0.1 with the root's TLS config, its
/// address in `client.json`: the client socket as a pilot runs it.
struct TlsSocket {
    _temporary: tempfile::TempDir,
    pilot_dir: saker_transport::PilotDir,
    address: std::net::SocketAddr,
    root: mpsc::UnboundedReceiver<ClientRequest>,
    server: JoinHandle<()>,
}

async fn tls_socket() -> TlsSocket {
    tls_socket_with(None).await
}

/// [`tls_socket`], with `local` written as the endpoint's local socket, served when
/// `local` says so (`(name, served)`).
async fn tls_socket_with(local: Option<(&str, bool)>) -> TlsSocket {
    use saker_transport::{Credentials, PilotDir, Role};

    let temporary = tempfile::tempdir().unwrap();
    let pilot_dir = PilotDir::create(temporary.path().join("pilot")).unwrap();
    Credentials::generate_into(&pilot_dir).unwrap();
    let root_credentials = Credentials::load(&pilot_dir, Role::Root).unwrap();
    let tls = saker_transport::tls::tls_server_config(&root_credentials).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let host = nix::unistd::gethostname().unwrap();
    let endpoint = ClientEndpoint {
        addr: address.to_string(),
        protocol: PROTOCOL_VERSION,
        protocols: vec![1, 2, 3],
        pid: std::process::id(),
        pilot_id: pilot_dir.pilot_id().to_string(),
        socket: local.map(|(name, _)| name.to_owned()),
        host: Some(host.to_string_lossy().into_owned()),
    };
    endpoint.write(&pilot_dir).unwrap();
    let local = local
        .filter(|(_, served)| *served)
        .map(|(name, _)| tokio::net::UnixListener::bind(pilot_dir.file_path(name)).unwrap());
    let (requests, root) = mpsc::unbounded_channel();
    let config = Arc::new(ServerConfig::new(pilot_dir.pilot_id().to_string()));
    let listeners = Listeners {
        tcp: listener,
        tls: tls.into(),
        local,
    };
    let server = tokio::spawn(serve(listeners, config, requests));
    TlsSocket {
        _temporary: temporary,
        pilot_dir,
        address,
        root,
        server,
    }
}

/// On the root's host a client takes the local socket, without TLS; a local socket
/// that is gone (a stale endpoint) leaves it TLS over TCP.
#[tokio::test]
async fn a_client_on_the_roots_host_uses_the_local_socket_else_tls() {
    let TlsSocket {
        _temporary,
        pilot_dir,
        mut root,
        ..
    } = tls_socket_with(Some(("client.sock", true))).await;
    // Nothing listens at this address: only the local socket can answer.
    let mut endpoint = ClientEndpoint::read(&pilot_dir).unwrap();
    endpoint.addr = "127.0.0.1:1".into();
    endpoint.write(&pilot_dir).unwrap();
    let client = Client::connect(pilot_dir.path(), "local-test")
        .await
        .unwrap();
    let (status, ()) = tokio::join!(client.status(), answer_status(&mut root, 5));
    assert_eq!(status.unwrap().queued, 5);

    let TlsSocket {
        _temporary,
        pilot_dir,
        mut root,
        ..
    } = tls_socket_with(Some(("client.sock", false))).await;
    let client = Client::connect(pilot_dir.path(), "stale-test")
        .await
        .unwrap();
    let (status, ()) = tokio::join!(client.status(), answer_status(&mut root, 2));
    assert_eq!(status.unwrap().queued, 2);
}

/// The production path: `serve` with the pilot CA's TLS config, `Client::connect` from
/// the pilot directory.
#[tokio::test]
async fn tls_end_to_end_through_the_pilot_directory() {
    let TlsSocket {
        _temporary,
        pilot_dir,
        mut root,
        server,
        ..
    } = tls_socket().await;

    let client = Client::connect(pilot_dir.path(), "tls-test").await.unwrap();
    let (status, ()) = tokio::join!(client.status(), answer_status(&mut root, 3));
    assert_eq!(status.unwrap().queued, 3);
    // A root that acknowledges a shutdown and exits at once: the acknowledgement must
    // still reach the client, then `serve` returns and the connection closes.
    let root_task = tokio::spawn(async move {
        match root.recv().await {
            Some(ClientRequest::Shutdown { reply, .. }) => reply.send(Ok(())).unwrap(),
            other => panic!("expected shutdown, got {other:?}"),
        }
    });
    client.shutdown(false).await.unwrap();
    root_task.await.unwrap();
    server.await.unwrap();
    assert!(matches!(
        client.status().await,
        Err(ClientError::ConnectionClosed)
    ));
}

/// Clients of every older version keep working beside the newest: each is answered
/// with the version it asked for.
#[tokio::test]
async fn every_protocol_version_is_spoken() {
    for version in [1, 2, 3] {
        let (stream, _root, _server) = start(test_config());
        let mut raw = Raw::new(stream);
        raw.send(&format!(
            r#"{{"hello": {{"protocol": {version}, "client": "v{version}"}}}}"#
        ))
        .await;
        let answer = raw.receive().await;
        assert_eq!(answer["ok"]["protocol"], version, "{answer}");
    }
}

/// `status` takes the jobs whose counts it should add (`job_counts`, in that order);
/// without them (`{}`, as every older client sends) the answer has none. An unknown
/// field is still refused: what an older pilot answers a `jobs` it cannot honour.
#[tokio::test]
async fn status_with_jobs_reaches_the_root_and_answers_their_counts() {
    let (stream, mut root, _server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    raw.send(r#"{"id": 1, "status": {"jobs": [3, 1]}}"#).await;
    let Some(ClientRequest::Status { jobs, reply }) = root.recv().await else {
        panic!("expected status");
    };
    assert_eq!(jobs, Some(vec![JobId(3), JobId(1)]));
    let running = JobTaskCounts {
        job: JobId(3),
        count: 1,
        running: 1,
        ..JobTaskCounts::default()
    };
    let queued = JobTaskCounts {
        job: JobId(1),
        count: 2,
        queued: 1,
        assigned: 1,
        ..JobTaskCounts::default()
    };
    let report = StatusReport {
        jobs: 3,
        job_counts: Some(vec![running, queued]),
        ..StatusReport::default()
    };
    reply.send(Ok(report)).unwrap();
    let answer = raw.receive().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["ok"]["jobs"], 3, "the number of jobs stays");
    assert_eq!(
        answer["ok"]["job_counts"],
        json!([
            {"job": 3, "count": 1, "queued": 0, "delayed": 0, "assigned": 0, "running": 1,
             "succeeded": 0, "failed": 0, "cancelled": 0},
            {"job": 1, "count": 2, "queued": 1, "delayed": 0, "assigned": 1, "running": 0,
             "succeeded": 0, "failed": 0, "cancelled": 0},
        ])
    );

    raw.send(r#"{"id": 2, "status": {}}"#).await;
    answer_status(&mut root, 4).await;
    let answer = raw.receive().await;
    assert_eq!(answer["ok"]["queued"], 4);
    assert!(answer["ok"].get("job_counts").is_none(), "{answer}");

    for line in [
        r#"{"id": 3, "status": {"jobs": 3}}"#,
        r#"{"id": 3, "status": {"jobs": [3], "tasks": [4]}}"#,
    ] {
        raw.send(line).await;
        let answer = raw.receive().await;
        assert_eq!(answer["error"]["kind"], "malformed", "{line}: {answer}");
    }
    assert!(root.try_recv().is_err(), "refused before the root");

    let (request_id, request) = server::parse_request(br#"{"id": 9, "status": {"jobs": [3]}}"#)
        .unwrap_or_else(|failure| panic!("{:?}", failure.error));
    assert_eq!(request_id, RequestId(9));
    assert_eq!(
        request,
        protocol::Request::Status(protocol::StatusRequest {
            jobs: Some(vec![JobId(3)])
        })
    );
    let Ok((_, request)) = server::parse_request(br#"{"id": 10, "status": {}}"#) else {
        panic!("an empty status is a request");
    };
    assert_eq!(
        request,
        protocol::Request::Status(protocol::StatusRequest::default())
    );
}

/// The Rust client asks for jobs' counts with `status_of_jobs`, and sends `{}` from
/// `status` (which every pilot understands).
#[tokio::test]
async fn the_client_asks_for_jobs_counts_and_plain_status_sends_no_jobs() {
    let (stream, mut root, _server) = start(test_config());
    let client = Client::handshake(stream, "test").await.unwrap();
    let root_task = tokio::spawn(async move {
        let Some(ClientRequest::Status { jobs, reply }) = root.recv().await else {
            panic!("expected status");
        };
        assert_eq!(jobs, Some(vec![JobId(2)]));
        let counts = JobTaskCounts {
            job: JobId(2),
            count: 1,
            assigned: 1,
            ..JobTaskCounts::default()
        };
        let report = StatusReport {
            job_counts: Some(vec![counts]),
            ..StatusReport::default()
        };
        reply.send(Ok(report)).unwrap();
        let Some(ClientRequest::Status { jobs: None, reply }) = root.recv().await else {
            panic!("expected a plain status");
        };
        reply.send(Ok(StatusReport::default())).unwrap();
        let Some(ClientRequest::Status { reply, .. }) = root.recv().await else {
            panic!("expected status");
        };
        let unknown = RequestError::new(ErrorKind::UnknownJob, "unknown job 9");
        reply.send(Err(unknown)).unwrap();
    });
    let report = client.status_of_jobs(vec![JobId(2)]).await.unwrap();
    let counts = report.job_counts.expect("the counts asked for");
    assert_eq!((counts[0].job, counts[0].assigned), (JobId(2), 1));
    assert_eq!(client.status().await.unwrap().job_counts, None);
    let error = client.status_of_jobs(vec![JobId(9)]).await.unwrap_err();
    assert_eq!(error.server_error().unwrap().kind, ErrorKind::UnknownJob);
    root_task.await.unwrap();
}

/// `new_only` asks for no history: the root gets a `from` past every sequence number.
#[tokio::test]
async fn a_new_only_stream_starts_past_the_history() {
    let (stream, mut root, _server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    raw.send(r#"{"id": 5, "results": {"from": 3, "follow": true, "new_only": true}}"#)
        .await;
    let Some(ClientRequest::Results {
        from, follow: true, ..
    }) = root.recv().await
    else {
        panic!("expected a following results request");
    };
    assert_eq!(from, u64::MAX);
}

/// A function job's payload arrives as the bytes its base64 spelled; a bad one is
/// refused with the job's position, and nothing reaches the root.
#[tokio::test]
async fn function_specs_are_decoded_or_refused_before_the_root() {
    let (stream, mut root, _server) = start(test_config());
    let mut raw = Raw::new(stream);
    raw.hello().await;
    raw.send(
        r#"{"id": 6, "submit": {"jobs": [{"spec": {"function": {"kind": "python", "payload": "AP8K"}}}]}}"#,
    )
    .await;
    // Unanswered (kept) until the end: the next answer on the line is the refusal.
    let Some(ClientRequest::Submit {
        jobs, reply: _kept, ..
    }) = root.recv().await
    else {
        panic!("expected a submission");
    };
    let function = jobs[0].spec.function.as_ref().unwrap();
    assert_eq!(function.payload, [0x00, 0xff, b'\n']);
    raw.send(
        r#"{"id": 7, "submit": {"jobs": [{"spec": {"argv": ["true"]}}, {"spec": {"function": {"kind": "python", "payload": "AP8K"}, "cwd": "/tmp"}}]}}"#,
    )
    .await;
    let answer = raw.receive().await;
    assert_eq!(answer["error"]["kind"], "invalid_spec", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("jobs[1]") && message.contains("cwd"),
        "{message}"
    );
    assert!(root.try_recv().is_err(), "nothing of it was submitted");
}

/// A session opened with an agent's (or the root's) certificate is refused during the
/// TLS handshake: the hello and the submit it sent at once never reach the root, and
/// the connection is closed without a line. A client's session beside it is served.
#[tokio::test]
async fn only_a_client_certificate_opens_a_session() {
    use saker_transport::{Credentials, Role};

    let mut socket = tls_socket().await;
    for presented in [Role::Agent, Role::Root] {
        let credentials = Credentials::load(&socket.pilot_dir, presented).unwrap();
        let config = saker_transport::tls::tls_client_config(&credentials).unwrap();
        let tcp = tokio::net::TcpStream::connect(socket.address)
            .await
            .unwrap();
        // TLS 1.3: the client is through its side of the handshake before the server
        // has looked at its certificate, so it can send its requests.
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(saker_transport::tls::server_name(), tcp)
            .await
            .unwrap();
        let (read_half, mut write_half) = tokio::io::split(stream);
        write_half
            .write_all(
                concat!(
                    r#"{"hello": {"protocol": 2, "client": "rogue"}}"#,
                    "\n",
                    r#"{"id": 1, "submit": {"jobs": [{"spec": {"argv": ["true"]}}]}}"#,
                    "\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let _ = write_half.flush().await;
        let mut line = String::new();
        let read = tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(read_half).read_line(&mut line),
        )
        .await
        .expect("the server closed the connection in time");
        assert!(
            read.is_err() || line.is_empty(),
            "{presented}: no line may come back, got {line:?}"
        );
    }
    let client = Client::connect(socket.pilot_dir.path(), "after")
        .await
        .unwrap();
    let (status, ()) = tokio::join!(client.status(), answer_status(&mut socket.root, 7));
    assert_eq!(status.unwrap().queued, 7);
    assert!(
        socket.root.try_recv().is_err(),
        "nothing of the refused sessions reached the root"
    );
    socket.server.abort();
}
