//! A results stream, fed off the root: the history read back from the journal on a
//! blocking thread, then live results from an unbounded channel the root pushes to, so
//! a slow reader slows only itself; then `end`.

use std::sync::Arc;

use saker_journal::Position;
use tokio::sync::mpsc;

use crate::actor::journal::ResultSource;
use crate::client::{ResultSink, ResultsItem};
use saker_client::results::ResultRecord;
use saker_client::{ErrorKind, RequestError, StreamEnd};

/// What a stream reads from the journal: results `from..=last`, starting the read at
/// `start`.
pub(super) struct History {
    pub source: Arc<dyn ResultSource>,
    pub start: Position,
    pub from: u64,
    pub last: u64,
    /// Keeps the segments `start` may be in (see `ResultLog::readers`).
    pub reading: Arc<()>,
}

/// Feeds one results stream: the history, then live results until the client or the
/// pilot goes away, then `end`.
pub(super) async fn feed_results(
    history: Option<History>,
    live: Option<mpsc::UnboundedReceiver<Arc<ResultRecord>>>,
    mut next: u64,
    compacted: u64,
    sink: ResultSink,
) {
    if let Some(history) = history {
        let history_sink = sink.clone();
        let read = tokio::task::spawn_blocking(move || {
            let _reading = &history.reading;
            let mut gone = false;
            // A compaction renaming its base into place while this reads can show
            // results again; each is sent once, in order.
            let mut sent = history.from - 1;
            let outcome = history.source.read_from(history.start, &mut |record| {
                if record.seq <= sent {
                    return true;
                }
                sent = record.seq;
                if record.seq > history.last {
                    return false;
                }
                let last = record.seq == history.last;
                gone = history_sink
                    .blocking_send(ResultsItem::Record(record))
                    .is_err();
                !gone && !last
            });
            (outcome, gone)
        })
        .await;
        match read {
            Ok((_, true)) => return,
            Ok((Ok(()), false)) => {}
            Ok((Err(error), false)) => {
                let error = saker_actors::error_chain(&error);
                let error =
                    RequestError::new(ErrorKind::Internal, format!("reading results: {error}"));
                let _ = sink.send(ResultsItem::Error(error)).await;
                return;
            }
            Err(error) => {
                let error =
                    RequestError::new(ErrorKind::Internal, format!("reading results: {error}"));
                let _ = sink.send(ResultsItem::Error(error)).await;
                return;
            }
        }
    }
    if let Some(mut live) = live {
        while let Some(record) = live.recv().await {
            next = record.seq + 1;
            if sink.send(ResultsItem::Record(record)).await.is_err() {
                return;
            }
        }
    }
    let _ = sink
        .send(ResultsItem::End(StreamEnd { next, compacted }))
        .await;
}
