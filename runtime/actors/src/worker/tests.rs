//! Calls on real worker processes: a small Python worker that does what each payload
//! says (return, raise, crash, hang, send garbage, answer for another attempt), so
//! every way a call can end is met on a real pipe.

use std::sync::Arc;

use crate::resources::Binding;
use crate::resources::limits::SlotLimits;
use std::time::{Duration, Instant};

use saker_wire::messages::{Function, JobId, Placement, Resources};

use super::*;
use crate::process::StopHandle;

/// Speaks the worker protocol; the payload (text) says what to do with the call.
const TEST_WORKER: &str = r#"
import os, struct, sys, time
out = os.fdopen(os.dup(1), "wb", buffering=0)
os.dup2(2, 1)
inp = sys.stdin.buffer
def send(kind, body):
    out.write(struct.pack("<IB", len(body) + 1, kind) + body)
mode = os.environ.get("TEST_WORKER_MODE", "")
if mode == "die-before-ready":
    print("ImportError: no module named numpy", file=sys.stderr)
    sys.exit(3)
send(1, struct.pack("<I", 1) + b"test worker pid %d" % os.getpid())
while True:
    head = inp.read(4)
    if len(head) < 4:
        sys.exit(0)
    (n,) = struct.unpack("<I", head)
    frame = inp.read(n)
    kind, task, attempt, payload = frame[0], frame[1:9], frame[9:17], frame[17:]
    word, _, arg = payload.partition(b" ")
    if word == b"return":
        send(3, task + attempt + arg + b" from %d" % os.getpid())
    elif word == b"raise":
        send(4, task + attempt + struct.pack("<I", len(arg)) + arg + b"pickled-exception")
    elif word == b"exit":
        print("worker crashing on purpose", file=sys.stderr)
        sys.exit(int(arg))
    elif word == b"hang":
        print("hanging", file=sys.stderr, flush=True)
        time.sleep(600)
    elif word == b"garbage":
        out.write(b"\x05\x00\x00\x00\x09xxxx")
    elif word == b"other":
        send(3, struct.pack("<Q", 999) + attempt + b"not yours")
    elif word == b"size":
        send(3, task + attempt + b"x" * int(arg))
"#;

struct Fixture {
    dir: tempfile::TempDir,
    workers: Workers,
    next_task: u64,
}

impl Fixture {
    /// Slot 0 with workers of kind `test` (and any other `kinds`, by command line)
    /// running the test worker in `mode`.
    fn new(mode: &str, kinds: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("worker.py");
        std::fs::write(&script, TEST_WORKER).unwrap();
        let mut command = format!("python3 {}", script.display());
        if !mode.is_empty() {
            command = format!("env TEST_WORKER_MODE={mode} {command}");
        }
        let mut commands = WorkerCommands::default().with("test", &command);
        for (kind, line) in kinds {
            commands = commands.with(kind, line);
        }
        Fixture {
            dir,
            workers: Workers::new(0, commands),
            next_task: 1,
        }
    }

    fn call(&mut self, payload: &str, limit: Option<Duration>) -> Finished {
        self.call_kind("test", payload, limit)
    }

    fn call_kind(&mut self, kind: &str, payload: &str, limit: Option<Duration>) -> Finished {
        let (_stop, control) = StopHandle::new();
        self.call_with(kind, payload, limit, &control)
    }

    fn call_with(
        &mut self,
        kind: &str,
        payload: &str,
        limit: Option<Duration>,
        control: &Control,
    ) -> Finished {
        let task = self.next_task;
        self.next_task += 1;
        let call = Call {
            job: Arc::new(JobDef {
                job: JobId(1),
                payload: Payload::Function(Function {
                    kind: kind.into(),
                    data: payload.as_bytes().to_vec(),
                }),
                resources: Resources::cores(1),
                placement: Placement::Single,
                hpc: None,
                time_limit_ms: 0,
                inline_output_bytes: 0,
                is_array: false,
                reads: Vec::new(),
                writes: Vec::new(),
            }),
            task: TaskId(task),
            attempt: AttemptId(task * 10),
            node: 4,
            cores: 1,
            time_limit: limit,
            log_dir: self.dir.path().join("workers"),
            scratch: self.dir.path().join("scratch"),
            objects: None,
        };
        let mut report_at = None;
        self.workers.run(
            &call,
            control,
            &Binding::default(),
            &SlotLimits::new(None),
            &mut report_at,
            &mut || None,
        )
    }
}

fn output(finished: &Finished) -> Option<String> {
    match &finished.body {
        Some(ResultBody::Function { output }) => output
            .as_ref()
            .map(|o| String::from_utf8_lossy(o).into_owned()),
        other => panic!("not a function body: {other:?}"),
    }
}

fn alive(pid: u32) -> bool {
    crate::test_support::alive(pid)
}

fn pid_in(text: &str) -> u32 {
    text.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_worker_is_started_once_and_reused_and_its_answers_come_back() {
    let mut f = Fixture::new("", &[]);
    let first = f.call("return 42", None);
    assert_eq!(first.outcome, Outcome::Exited { code: 0 });
    let first = output(&first).unwrap();
    assert!(first.starts_with("42 from "), "{first}");
    let second = output(&f.call("return 43", None)).unwrap();
    assert_eq!(pid_in(&first), pid_in(&second), "the same worker answered");
    let raised = f.call("raise ValueError: bad input", None);
    assert_eq!(
        raised.outcome,
        Outcome::Raised {
            message: "ValueError: bad input".into()
        }
    );
    assert_eq!(output(&raised).as_deref(), Some("pickled-exception"));
    // A raise is the task's failure, not the worker's: it stays.
    let third = output(&f.call("return 44", None)).unwrap();
    assert_eq!(pid_in(&first), pid_in(&third));
    let worker = pid_in(&third);
    drop(f.workers);
    assert!(!alive(worker), "a slot's workers end with it");
}

#[test]
fn a_crashed_or_garbled_worker_loses_the_attempt_and_is_replaced() {
    let mut f = Fixture::new("", &[]);
    let before = pid_in(&output(&f.call("return 1", None)).unwrap());
    let crashed = f.call("exit 7", None);
    let Outcome::Lost { reason } = &crashed.outcome else {
        panic!("{:?}", crashed.outcome);
    };
    assert!(reason.contains("exit status 7"), "{reason}");
    assert!(reason.contains("worker crashing on purpose"), "{reason}");
    assert_eq!(output(&crashed), None);
    for misbehaviour in ["garbage", "other"] {
        let finished = f.call(misbehaviour, None);
        assert!(
            matches!(finished.outcome, Outcome::Lost { .. }),
            "{misbehaviour}: {:?}",
            finished.outcome
        );
    }
    let after = pid_in(&output(&f.call("return 2", None)).unwrap());
    assert_ne!(before, after, "a fresh worker answered");
    assert!(!alive(before));
}

#[test]
fn a_call_past_its_time_limit_fails_and_its_worker_is_killed() {
    let mut f = Fixture::new("", &[]);
    let worker = pid_in(&output(&f.call("return 1", None)).unwrap());
    let started = Instant::now();
    let hung = f.call("hang", Some(Duration::from_millis(300)));
    assert_eq!(hung.outcome, Outcome::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!alive(worker), "the hung worker was killed");
    let again = f.call("return 2", None);
    assert_eq!(again.outcome, Outcome::Exited { code: 0 });
}

#[test]
fn a_cancel_kills_the_call_and_its_worker() {
    let mut f = Fixture::new("", &[]);
    let worker = pid_in(&output(&f.call("return 1", None)).unwrap());
    let (stop, control) = StopHandle::new();
    // Cancelled once the call runs: the worker says so in its log.
    let log = f.dir.path().join("workers/node4-slot0-test.log");
    let canceller = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains("hanging")) {
            assert!(Instant::now() < deadline, "the call never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.cancel();
    });
    let finished = f.call_with("test", "hang", None, &control);
    canceller.join().unwrap();
    assert_eq!(finished.outcome, Outcome::Cancelled);
    assert!(!alive(worker));
}

#[test]
fn a_worker_that_cannot_start_fails_the_attempt_with_its_last_words() {
    let mut f = Fixture::new(
        "die-before-ready",
        &[("missing", "/nonexistent/worker --flag")],
    );
    let finished = f.call("return 1", None);
    let Outcome::WorkerFailed { reason } = &finished.outcome else {
        panic!("{:?}", finished.outcome);
    };
    assert!(reason.contains("no module named numpy"), "{reason}");
    let missing = f.call_kind("missing", "return 1", None);
    let Outcome::WorkerFailed { reason } = &missing.outcome else {
        panic!("{:?}", missing.outcome);
    };
    assert!(
        reason.contains("not found: /nonexistent/worker"),
        "{reason}"
    );
    let unknown = f.call_kind("unset-kind", "return 1", None);
    let Outcome::WorkerFailed { reason } = &unknown.outcome else {
        panic!("{:?}", unknown.outcome);
    };
    assert!(reason.contains("SAKER_WORKER_UNSET_KIND"), "{reason}");
}

#[test]
fn an_answer_over_the_limit_fails_the_task_and_a_large_one_comes_whole() {
    let mut f = Fixture::new("", &[]);
    let big = f.call("size 3000000", None);
    assert_eq!(big.outcome, Outcome::Exited { code: 0 });
    assert_eq!(output(&big).unwrap().len(), 3_000_000);
    let over = f.call(&format!("size {}", MAX_FUNCTION_BYTES + (1 << 20)), None);
    let Outcome::Raised { message } = &over.outcome else {
        panic!("{:?}", over.outcome);
    };
    assert!(message.contains("exceeds the limit"), "{message}");
}
