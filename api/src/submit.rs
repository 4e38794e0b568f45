//! Submitting typed calls: [`Submitter`] (a pilot with task options),
//! [`TaskHandle`] (a future of one output) and [`MapStream`] (outputs of many).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use saker_client::spec::MAX_FUNCTION_BYTES;
use tokio::sync::{mpsc, oneshot};

use crate::error::TaskError;
use crate::objects::{self, Owner, Ref};
use crate::options::TaskOptions;
use crate::pilot::{JobCell, Pilot, Waiter, answers};
use crate::task::{Answer, Data, Task, encode_call};
use saker_client::results::JobId;
use std::sync::Arc;

/// Most inputs `map` puts in one pilot task unless told otherwise.
const MAX_CHUNK: usize = 1024;
/// Chunks per core `map` aims for, so that every core stays busy while the last
/// chunks finish.
const CHUNKS_PER_SLOT: usize = 4;
/// What `map` assumes of an iterator that does not say how long it is.
const UNKNOWN_COUNT: usize = 65_536;

/// Inputs per chunk for `count` inputs on `slots` slots, unless told:
/// [`CHUNKS_PER_SLOT`] chunks per slot, at least 1 input, at most [`MAX_CHUNK`].
fn default_chunk(count: usize, slots: u32) -> usize {
    let slots = (slots as usize).max(1);
    (count / (slots * CHUNKS_PER_SLOT)).clamp(1, MAX_CHUNK)
}

/// A pilot with options for the tasks submitted through it.
#[derive(Debug, Clone)]
pub struct Submitter {
    pub(crate) pilot: Pilot,
    pub(crate) options: TaskOptions,
}

impl Submitter {
    /// Submits one call of `T` on `input`. The returned handle is a future of its
    /// output; dropping it does not cancel the task. Calls made in a loop leave in
    /// few requests (batched submission).
    pub fn submit<T: Task>(&self, input: T::Input) -> TaskHandle<T::Output> {
        self.submit_one::<T, T::Output>(input, None, |output| output)
    }

    /// Like [`Self::submit`], but the output stays on the node that made it, as an
    /// object: the handle gives its [`Ref`], which later tasks take as input (they run
    /// there, or get it fetched node to node) and the driver reads with
    /// [`Ref::get`]. Nothing of the output passes through the pilot's root, and it
    /// may be as large as the node's store holds. The object is freed when the
    /// driver's last clone of the ref is dropped.
    pub fn submit_ref<T: Task>(&self, input: T::Input) -> TaskHandle<Ref<T::Output>> {
        let id = objects::new_id();
        let owner = Owner::new(id, self.pilot.shared.queue.clone());
        self.submit_one::<T, Ref<T::Output>>(input, Some(id), move |mut object| {
            object.set_owner(owner);
            object
        })
    }

    fn submit_one<T: Task, O: Data>(
        &self,
        input: T::Input,
        store: Option<u128>,
        finish: impl FnOnce(O) -> O + Send + 'static,
    ) -> TaskHandle<O> {
        let (sender, receiver) = oneshot::channel();
        // The objects the input refers to are what the task reads. The input lives
        // until the job is queued: a ref in it dropped then frees its object after
        // the job (the submitter keeps that order), never before.
        let inputs = vec![input];
        let (encoded, reads) = objects::recording(|| encode_call::<T>(&inputs, store));
        let payload = match encoded {
            Ok(payload) if payload.len() <= MAX_FUNCTION_BYTES => payload,
            Ok(payload) => {
                let _ = sender.send(Err(too_large(payload.len())));
                return TaskHandle {
                    receiver,
                    job: None,
                };
            }
            Err(error) => {
                let _ = sender.send(Err(TaskError::InvalidData {
                    message: error.to_string(),
                }));
                return TaskHandle {
                    receiver,
                    job: None,
                };
            }
        };
        let waiter: Waiter = Box::new(move |record| {
            let output = record.and_then(|record| {
                let mut answers = answers::<O>(&record)?;
                match answers.pop() {
                    Some(Answer::Returned(output)) if answers.is_empty() => Ok(finish(output)),
                    Some(Answer::Panicked(message)) => Err(TaskError::Panicked { message }),
                    _ => Err(TaskError::InvalidData {
                        message: "a call of one input answered with another count".to_owned(),
                    }),
                }
            });
            let _ = sender.send(output);
        });
        let job = Arc::new(JobCell::default());
        self.pilot.send(
            self.pilot.job(payload, &self.options, &reads, store),
            waiter,
            Some(job.clone()),
        );
        drop(inputs);
        TaskHandle {
            receiver,
            job: Some(job),
        }
    }

    /// Runs `T` on every input and yields the outputs in the inputs' order (an output
    /// waits for those before it). Inputs go to the pilot in chunks (see
    /// [`TaskOptions::chunk`]); a chunk is one task of the pilot, and an input whose
    /// run panics is retried alone while the options allow retries.
    pub fn map<T, I>(&self, inputs: I) -> MapStream<T::Output>
    where
        T: Task,
        I: IntoIterator<Item = T::Input>,
        I::IntoIter: Send + 'static,
    {
        self.start_map::<T, _>(inputs.into_iter(), true)
    }

    /// Like [`Self::map`], but each output comes as soon as it is ready, with the
    /// index of its input.
    pub fn map_unordered<T, I>(&self, inputs: I) -> MapStream<T::Output>
    where
        T: Task,
        I: IntoIterator<Item = T::Input>,
        I::IntoIter: Send + 'static,
    {
        self.start_map::<T, _>(inputs.into_iter(), false)
    }

    fn start_map<T, I>(&self, inputs: I, ordered: bool) -> MapStream<T::Output>
    where
        T: Task,
        I: Iterator<Item = T::Input> + Send + 'static,
    {
        let (sender, receiver) = mpsc::unbounded_channel();
        let (total_tx, total) = oneshot::channel();
        // A filtered iterator knows only its upper bound; an unbounded one neither.
        let count = match inputs.size_hint() {
            (low, Some(high)) => low.max(high),
            (0, None) => UNKNOWN_COUNT,
            (low, None) => low,
        };
        let submitter = self.clone();
        // Encoding a million inputs takes a while: the stream yields meanwhile.
        tokio::spawn(async move {
            let chunk = match submitter.options.chunk {
                Some(chunk) => chunk,
                // Sized for every node the pilot expects, not only those joined yet.
                None => default_chunk(count, submitter.pilot.planning_slots().await),
            };
            let mut inputs = inputs;
            let mut first = 0usize;
            loop {
                let batch: Vec<T::Input> = inputs.by_ref().take(chunk).collect();
                if batch.is_empty() {
                    break;
                }
                let count = batch.len();
                submitter.submit_chunk::<T>(first, batch, &sender);
                first += count;
                tokio::task::yield_now().await;
            }
            let _ = total_tx.send(first);
        });
        MapStream {
            receiver,
            total,
            expected: None,
            yielded: 0,
            ordered,
            next: 0,
            waiting: BTreeMap::new(),
            seen: Vec::new(),
        }
    }

    /// Submits inputs `first..` as one task; their outputs go to `sink`.
    fn submit_chunk<T: Task>(
        &self,
        first: usize,
        inputs: Vec<T::Input>,
        sink: &mpsc::UnboundedSender<Item<T::Output>>,
    ) {
        let count = inputs.len();
        let (encoded, reads) = objects::recording(|| encode_call::<T>(&inputs, None));
        let payload = match encoded {
            Ok(payload) if payload.len() <= MAX_FUNCTION_BYTES => payload,
            Ok(payload) if count > 1 => {
                // Too big together: halves, until each fits or is one input.
                let mut inputs = inputs;
                let rest = inputs.split_off(count / 2);
                self.submit_chunk::<T>(first, inputs, sink);
                self.submit_chunk::<T>(first + count / 2, rest, sink);
                let _ = payload;
                return;
            }
            Ok(payload) => {
                let _ = sink.send((first, Err(too_large(payload.len()))));
                return;
            }
            Err(error) => {
                for index in first..first + count {
                    let _ = sink.send((
                        index,
                        Err(TaskError::InvalidData {
                            message: error.to_string(),
                        }),
                    ));
                }
                return;
            }
        };
        // Kept to retry an input that panicked, alone, while retries are left; else
        // until the job is queued (below): a ref among them frees its object after
        // the job, never before.
        let (retry, inputs) = if self.options.spec.max_retries > 0 && count > 1 {
            let kept = inputs.into_iter().map(Some).collect::<Vec<_>>();
            (Some((self.clone(), kept)), None)
        } else {
            (None, Some(inputs))
        };
        let sink = sink.clone();
        let waiter: Waiter = Box::new(move |record| {
            let answers = record.and_then(|record| answers::<T::Output>(&record));
            let answers = match answers {
                Ok(answers) if answers.len() == count => answers,
                Ok(answers) => {
                    let message = format!("{count} inputs answered with {}", answers.len());
                    for index in first..first + count {
                        let error = TaskError::InvalidData {
                            message: message.clone(),
                        };
                        let _ = sink.send((index, Err(error)));
                    }
                    drop(answers);
                    return;
                }
                Err(error) => {
                    for index in first..first + count {
                        let _ = sink.send((index, Err(error.clone())));
                    }
                    return;
                }
            };
            let mut retry = retry;
            for (offset, answer) in answers.into_iter().enumerate() {
                let index = first + offset;
                match answer {
                    Answer::Returned(output) => {
                        let _ = sink.send((index, Ok(output)));
                    }
                    Answer::Panicked(message) => {
                        match retry
                            .as_mut()
                            .and_then(|(s, inputs)| Some((s, inputs[offset].take()?)))
                        {
                            Some((submitter, input)) => {
                                submitter.retry_alone::<T>(index, input, &sink)
                            }
                            None => {
                                let _ = sink.send((index, Err(TaskError::Panicked { message })));
                            }
                        }
                    }
                }
            }
        });
        self.pilot.send(
            self.pilot.job(payload, &self.options, &reads, None),
            waiter,
            None,
        );
        drop(inputs);
    }

    /// One input of a chunk again, as a task of its own with one retry fewer.
    fn retry_alone<T: Task>(
        &self,
        index: usize,
        input: T::Input,
        sink: &mpsc::UnboundedSender<Item<T::Output>>,
    ) {
        let mut options = self.options.clone();
        options.spec.max_retries -= 1;
        let handle = Submitter {
            pilot: self.pilot.clone(),
            options,
        }
        .submit::<T>(input);
        let sink = sink.clone();
        tokio::spawn(async move {
            let _ = sink.send((index, handle.await));
        });
    }
}

fn too_large(bytes: usize) -> TaskError {
    TaskError::InvalidData {
        message: format!(
            "a call of {bytes} bytes is larger than a task's payload may be ({MAX_FUNCTION_BYTES})"
        ),
    }
}

/// One input's outcome, by index.
type Item<O> = (usize, Result<O, TaskError>);

/// A future of one task's output.
#[derive(Debug)]
pub struct TaskHandle<O> {
    receiver: oneshot::Receiver<Result<O, TaskError>>,
    /// Its job's id, once the pilot accepted it; `None` if it was never sent.
    job: Option<Arc<JobCell>>,
}

impl<O> TaskHandle<O> {
    pub(crate) fn new(
        receiver: oneshot::Receiver<Result<O, TaskError>>,
        job: Option<Arc<JobCell>>,
    ) -> TaskHandle<O> {
        TaskHandle { receiver, job }
    }

    /// The pilot's id of this task's job, once its submission is answered: for
    /// [`TaskOptions::after`] and [`TaskOptions::after_any`]. Fails if the pilot
    /// refused the submission (the handle's output then says why too).
    pub async fn job(&self) -> Result<JobId, TaskError> {
        let Some(cell) = &self.job else {
            return Err(TaskError::Failed {
                reason: "the task was never submitted".to_owned(),
            });
        };
        cell.get().await.map_err(|error| TaskError::Failed {
            reason: error.to_string(),
        })
    }
}

impl<O> Future for TaskHandle<O> {
    type Output = Result<O, TaskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.receiver).poll(cx).map(|received| {
            received.unwrap_or_else(|_| {
                Err(TaskError::PilotGone {
                    reason: "the driver stopped waiting for results".to_owned(),
                })
            })
        })
    }
}

/// The outputs of a `map`: `(index, output)` pairs, in input order for
/// [`Submitter::map`], as they come for [`Submitter::map_unordered`]. A `Stream`;
/// [`MapStream::next`] needs no extra crate.
#[derive(Debug)]
pub struct MapStream<O> {
    receiver: mpsc::UnboundedReceiver<Item<O>>,
    total: oneshot::Receiver<usize>,
    expected: Option<usize>,
    yielded: usize,
    ordered: bool,
    next: usize,
    waiting: BTreeMap<usize, Result<O, TaskError>>,
    /// Unordered: which indices were yielded (to name the missing ones if the pilot
    /// goes away).
    seen: Vec<bool>,
}

impl<O> MapStream<O> {
    /// The next output, or `None` after the last.
    pub async fn next(&mut self) -> Option<(usize, Result<O, TaskError>)> {
        std::future::poll_fn(|cx| self.poll_item(cx)).await
    }

    /// Every output, in the stream's order.
    pub async fn collect(mut self) -> Vec<(usize, Result<O, TaskError>)> {
        let mut all = Vec::new();
        while let Some(item) = self.next().await {
            all.push(item);
        }
        all
    }

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Item<O>>> {
        loop {
            if self.expected.is_none()
                && let Poll::Ready(total) = Pin::new(&mut self.total).poll(cx)
            {
                self.expected = Some(total.unwrap_or(self.yielded));
            }
            if self.expected.is_some_and(|total| self.yielded >= total) {
                return Poll::Ready(None);
            }
            if self.ordered
                && let Some(result) = self.waiting.remove(&self.next)
            {
                let item = (self.next, result);
                self.next += 1;
                self.yielded += 1;
                return Poll::Ready(Some(item));
            }
            match self.receiver.poll_recv(cx) {
                Poll::Ready(Some((index, result))) => {
                    if self.ordered {
                        self.waiting.insert(index, result);
                        continue;
                    }
                    if self.seen.len() <= index {
                        self.seen.resize(index + 1, false);
                    }
                    self.seen[index] = true;
                    self.yielded += 1;
                    return Poll::Ready(Some((index, result)));
                }
                // Every sender gone before every output came: the pilot went away.
                // Each missing input gets an error, once.
                Poll::Ready(None) => {
                    if self.expected.is_some_and(|total| self.yielded < total) {
                        let index = if self.ordered {
                            self.next
                        } else {
                            while self.seen.get(self.next).copied().unwrap_or(false) {
                                self.next += 1;
                            }
                            self.next
                        };
                        self.yielded += 1;
                        self.next += 1;
                        return Poll::Ready(Some((
                            index,
                            Err(TaskError::PilotGone {
                                reason: "results stopped coming".to_owned(),
                            }),
                        )));
                    }
                    if self.expected.is_none() {
                        return Poll::Pending;
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<O> futures_core::Stream for MapStream<O>
where
    O: Unpin,
{
    type Item = (usize, Result<O, TaskError>);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_item(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_chunks_keep_every_slot_busy_four_times_over() {
        // The figures of docs/rust-api.md, "Chunks".
        assert_eq!(default_chunk(1_000_000, 64), 1024);
        assert_eq!(default_chunk(10_000, 64), 39);
        assert_eq!(default_chunk(100, 64), 1);
        // The pilot: 6 slots, of which 1 had joined. Sized for the 6, 1,000
        // inputs make 25 chunks (about 4 per slot), not the 4 chunks sized for 1
        // slot, which leave 2 of the 6 idle.
        assert_eq!(default_chunk(1_000, 6), 41);
        assert_eq!(1_000usize.div_ceil(default_chunk(1_000, 6)), 25);
        assert_eq!(default_chunk(1_000, 1), 250);
        assert_eq!(default_chunk(5, 0), 1, "no slots known: one input each");
    }
}
