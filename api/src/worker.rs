//! The worker side: the application's binary, started by an agent as a persistent
//! worker of kind `rust`, answers calls over its stdin and stdout with the frames of
//! `docs/workers.md` (READY, then one RETURNED or RAISED per CALL).
//!
//! Each registered task type is a function from payload bytes to answer bytes. A
//! call of one input that panics is RAISED (the task failed, and the pilot retries
//! it under `max_retries`); in a call of many inputs (a chunk of `map`) each input
//! gets its own answer, so one panic costs only its input.

use std::collections::HashMap;
use std::future::Future;
use std::io::{self, Read, Write};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use crate::task::{Answer, CallHeader, Task, decode_vec, encode_answers, fingerprint, read_header};

const READY: u8 = 1;
const CALL: u8 = 2;
const RETURNED: u8 = 3;
const RAISED: u8 = 4;
const PROTOCOL: u32 = 1;
/// The largest frame the agent sends (a call's payload is at most 16 MiB).
const MAX_FRAME: usize = 1 << 30;

/// Why a call raised, as the first byte of a RAISED frame's output: the driver turns
/// it back into a typed error without parsing the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RaisedKind {
    Panicked = 1,
    UnknownTask = 2,
    TypeMismatch = 3,
    InvalidInput = 4,
    /// The output could not be kept on the node (`submit_ref`).
    NotStored = 5,
}

impl RaisedKind {
    pub(crate) fn from_byte(byte: u8) -> Option<RaisedKind> {
        [
            RaisedKind::Panicked,
            RaisedKind::UnknownTask,
            RaisedKind::TypeMismatch,
            RaisedKind::InvalidInput,
            RaisedKind::NotStored,
        ]
        .into_iter()
        .find(|kind| *kind as u8 == byte)
    }
}

/// What a call came to: the answers' archive, or a raise with its kind and message.
pub(crate) type CallOutcome = Result<Vec<u8>, (RaisedKind, String)>;

type Runner = Box<dyn Fn(&CallHeader<'_>, &Runtime) -> CallOutcome + Send + Sync>;

/// The tokio runtime calls run on (current-thread: one call at a time).
pub(crate) type Runtime = tokio::runtime::Runtime;

/// The task types an application registered, by name.
#[derive(Default)]
pub(crate) struct Registry {
    runners: HashMap<&'static str, (u64, Runner)>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.runners.keys()).finish()
    }
}

impl Registry {
    /// Adds `T`; a second type of the same name is a programming error.
    pub(crate) fn add<T: Task>(&mut self) {
        let runner: Runner = Box::new(|header, runtime| run_call::<T>(header, runtime));
        let previous = self.runners.insert(T::NAME, (fingerprint::<T>(), runner));
        assert!(
            previous.is_none(),
            "two task types are named {:?}: each needs a NAME of its own",
            T::NAME
        );
    }

    pub(crate) fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.runners.keys().copied().collect();
        names.sort_unstable();
        names
    }

    /// Runs one call's payload.
    pub(crate) fn call(&self, payload: &[u8], runtime: &Runtime) -> CallOutcome {
        let header =
            read_header(payload).map_err(|error| (RaisedKind::InvalidInput, error.to_string()))?;
        let Some((fingerprint, runner)) = self.runners.get(header.name) else {
            return Err((
                RaisedKind::UnknownTask,
                format!(
                    "this worker has no task named {:?} (it registers {:?}): is the pilot's worker \
                     another program than the driver?",
                    header.name,
                    self.names()
                ),
            ));
        };
        if *fingerprint != header.fingerprint {
            return Err((
                RaisedKind::TypeMismatch,
                format!(
                    "task {:?}: the driver and this worker disagree on its input or output type \
                     (fingerprint {:016x} sent, {:016x} here): they were built from different \
                     versions of the program",
                    header.name, header.fingerprint, fingerprint
                ),
            ));
        }
        runner(&header, runtime)
    }
}

fn run_call<T: Task>(header: &CallHeader<'_>, runtime: &Runtime) -> CallOutcome {
    let inputs: Vec<T::Input> = decode_vec(header.archive, "the task's inputs")
        .map_err(|error| (RaisedKind::InvalidInput, error.to_string()))?;
    if inputs.len() != header.inputs as usize {
        return Err((
            RaisedKind::InvalidInput,
            format!("{} inputs announced, {} sent", header.inputs, inputs.len()),
        ));
    }
    let single = inputs.len() == 1;
    let mut answers = Vec::with_capacity(inputs.len());
    for input in inputs {
        let future: Pin<Box<dyn Future<Output = T::Output> + Send>> = Box::pin(T::run(input));
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(future)));
        match ran {
            Ok(output) => answers.push(Answer::Returned(output)),
            Err(panic) => {
                let message = panic_message(&*panic);
                if single {
                    return Err((RaisedKind::Panicked, message));
                }
                answers.push(Answer::Panicked(message));
            }
        }
    }
    let encoded = match header.store {
        None => encode_answers(&answers),
        // The output stays on this node as the object, and its ref is the answer.
        Some(object) => {
            let stored = answers
                .into_iter()
                .map(|answer| match answer {
                    Answer::Returned(output) => {
                        crate::objects::store_output(&output, object).map(Answer::Returned)
                    }
                    Answer::Panicked(message) => Ok(Answer::Panicked(message)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| (RaisedKind::NotStored, saker_actors::error_chain(&error)))?;
            encode_answers(&stored)
        }
    };
    encoded
        .map(|bytes| bytes.to_vec())
        .map_err(|error| (RaisedKind::InvalidInput, error.to_string()))
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a payload that is not text".to_owned()
    }
}

/// Serves calls until the agent closes stdin. The frames keep the process's real
/// stdout; fd 1 is pointed at stderr (the worker's log) first, so a task's prints
/// never corrupt them.
pub(crate) fn serve(registry: &Registry) -> io::Result<()> {
    let frames = nix::unistd::dup(io::stdout()).map_err(io::Error::from)?;
    nix::unistd::dup2_stdout(io::stderr()).map_err(io::Error::from)?;
    let mut output = io::BufWriter::new(std::fs::File::from(frames));
    let mut input = io::BufReader::new(io::stdin().lock());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    let mut ready = Vec::new();
    ready.extend_from_slice(&PROTOCOL.to_le_bytes());
    ready.extend_from_slice(
        format!(
            "saker rust worker pid {} tasks {:?}",
            std::process::id(),
            registry.names()
        )
        .as_bytes(),
    );
    write_frame(&mut output, READY, &[&ready])?;

    let mut frame = Vec::new();
    loop {
        let mut length = [0u8; 4];
        match input.read_exact(&mut length) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
        let length = u32::from_le_bytes(length) as usize;
        if length == 0 || length > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame of {length} bytes"),
            ));
        }
        frame.resize(length, 0);
        input.read_exact(&mut frame)?;
        if frame[0] != CALL || frame.len() < 17 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected frame type {}", frame[0]),
            ));
        }
        let ids = &frame[1..17];
        match registry.call(&frame[17..], &runtime) {
            Ok(answers) => write_frame(&mut output, RETURNED, &[ids, &answers])?,
            Err((kind, message)) => {
                let line = message.replace('\n', " ");
                let length = (line.len() as u32).to_le_bytes();
                write_frame(
                    &mut output,
                    RAISED,
                    &[
                        ids,
                        &length,
                        line.as_bytes(),
                        &[kind as u8],
                        message.as_bytes(),
                    ],
                )?;
            }
        }
    }
}

fn write_frame(out: &mut impl Write, kind: u8, parts: &[&[u8]]) -> io::Result<()> {
    let length = 1 + parts.iter().map(|p| p.len()).sum::<usize>();
    out.write_all(&(length as u32).to_le_bytes())?;
    out.write_all(&[kind])?;
    for part in parts {
        out.write_all(part)?;
    }
    out.flush()
}
