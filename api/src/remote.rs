//! A driver's connection to a pilot over the client protocol that outlives the
//! pilot's root: when a standby takes over (`saker pilot --standby`), the
//! connection breaks, and the next request reconnects through the pilot directory,
//! as the CLI and the Python client do. What is safe to ask again is asked again
//! (status, a results feed from the last sequence number seen); a submission or an
//! actor request the old root had not answered fails, saying it may or may not have
//! been taken: sending it again could run it twice.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saker_client::results::ResultRecord;
use saker_client::{Client, ClientError, RequestError, ResultStream, StreamEnd};

/// How long a driver looks for a root of its pilot after losing it.
pub(crate) const RECONNECT_FOR: Duration = Duration::from_secs(60);
/// Attempts this far apart at first, doubling up to the most.
const FIRST_TRY: Duration = Duration::from_millis(50);
const MOST_BETWEEN: Duration = Duration::from_secs(1);
/// A `from` past every result's sequence number (JSON keeps it exact).
const PAST_EVERY_SEQ: u64 = (1 << 63) - 1;
const CLIENT_NAME: &str = "saker-rust";

/// Why a remote request failed.
#[derive(Debug)]
pub(crate) enum Lost {
    /// The pilot answered, or the connection cannot be had again: as the client said.
    Client(ClientError),
    /// The connection broke before an answer to a request that must not be sent twice.
    Unanswered(ClientError),
}

#[derive(Debug)]
pub(crate) struct Remote {
    dir: PathBuf,
    pilot_id: String,
    client: Mutex<Arc<Client>>,
    /// One reconnection at a time; the others then use its client.
    reconnecting: tokio::sync::Mutex<()>,
    patience: Duration,
    /// Data connections to the nodes, for a driver that sees no node's store.
    data: std::sync::OnceLock<saker_client::data::Remote>,
}

impl Remote {
    pub(crate) async fn connect(dir: &Path) -> Result<Remote, ClientError> {
        let client = Client::connect(dir, CLIENT_NAME).await?;
        Ok(Remote {
            dir: dir.to_owned(),
            pilot_id: client.pilot_id().to_owned(),
            client: Mutex::new(Arc::new(client)),
            reconnecting: tokio::sync::Mutex::new(()),
            patience: RECONNECT_FOR,
            data: std::sync::OnceLock::new(),
        })
    }

    /// This driver's data connections to the nodes, opened on first use.
    pub(crate) fn data(
        &self,
    ) -> Result<(&saker_client::data::Remote, Arc<Client>), crate::objects::ObjectError> {
        if self.data.get().is_none() {
            let _ = self.data.set(saker_client::data::Remote::open(&self.dir)?);
        }
        let data = self.data.get().expect("invariant: set just above");
        Ok((data, self.current()))
    }

    fn current(&self) -> Arc<Client> {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A client of the root serving the directory now, once `broken` lost its
    /// connection (the same one if another request reconnected already).
    async fn reconnect(&self, broken: &Arc<Client>) -> Result<Arc<Client>, ClientError> {
        let _one = self.reconnecting.lock().await;
        let now = self.current();
        if !Arc::ptr_eq(&now, broken) {
            return Ok(now);
        }
        let deadline = tokio::time::Instant::now() + self.patience;
        let mut pause = FIRST_TRY;
        loop {
            // A pilot stopped on purpose has no root to come back.
            if saker_root::lock::stopped(&self.dir) {
                return Err(ClientError::ConnectionClosed);
            }
            match Client::connect(&self.dir, CLIENT_NAME).await {
                Ok(client) if client.pilot_id() == self.pilot_id => {
                    tracing::info!(dir = %self.dir.display(), "reconnected to the pilot's new root");
                    let client = Arc::new(client);
                    *self.client.lock().unwrap_or_else(|e| e.into_inner()) = client.clone();
                    return Ok(client);
                }
                Ok(other) => {
                    tracing::error!(pilot = other.pilot_id(), expected = %self.pilot_id,
                        "the pilot directory now holds another pilot");
                    return Err(ClientError::ConnectionClosed);
                }
                Err(error) if error.is_connection_lost() => {
                    if tokio::time::Instant::now() + pause > deadline {
                        return Err(error);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MOST_BETWEEN);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Asks `request` of the root, again of a new root if the connection breaks:
    /// for requests that are the same asked twice.
    pub(crate) async fn ask_again<T, F, Fut>(&self, request: F) -> Result<T, Lost>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut client = self.current();
        loop {
            match request(client.clone()).await {
                Err(error) if error.is_connection_lost() => {
                    client = self.reconnect(&client).await.map_err(Lost::Client)?;
                }
                other => return other.map_err(Lost::Client),
            }
        }
    }

    /// Asks `request` once; if the connection breaks first, reconnects for the
    /// requests after it and fails this one as unanswered.
    pub(crate) async fn ask_once<T, F, Fut>(&self, request: F) -> Result<T, Lost>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let client = self.current();
        match request(client.clone()).await {
            Err(error) if error.is_connection_lost() => {
                // Whether it reconnects or not, this request's fate is unknown.
                let _ = self.reconnect(&client).await;
                Err(Lost::Unanswered(error))
            }
            other => other.map_err(Lost::Client),
        }
    }

    /// The results accepted from now on, followed across takeovers.
    pub(crate) async fn follow(self: &Arc<Self>) -> Result<RemoteFeed, Lost> {
        // Where the journal stands: a new root's stream resumes from there if no
        // result came before the connection broke.
        let next = self
            .ask_again(|client| async move {
                let mut probe = client.results(PAST_EVERY_SEQ, false).await?;
                while probe.next().await?.is_some() {}
                Ok(probe.end().map_or(0, |end| end.next))
            })
            .await?;
        let stream = self
            .ask_again(|client| async move { client.follow_new().await })
            .await?;
        Ok(RemoteFeed {
            remote: self.clone(),
            stream,
            next,
        })
    }
}

/// A results feed of a [`Remote`].
#[derive(Debug)]
pub(crate) struct RemoteFeed {
    remote: Arc<Remote>,
    stream: ResultStream,
    /// One past the highest sequence number seen.
    next: u64,
}

impl RemoteFeed {
    /// The next result; `Err` when the pilot ended the stream or is gone for good.
    pub(crate) async fn next(&mut self) -> Result<ResultRecord, FeedEnded> {
        loop {
            match self.stream.next().await {
                Ok(Some(record)) => {
                    self.next = self.next.max(record.seq + 1);
                    return Ok(record);
                }
                Ok(None) => return Err(FeedEnded::StreamEnded),
                Err(error) if error.is_connection_lost() => {
                    let from = self.next;
                    let reopened = self
                        .remote
                        .ask_again(|client| async move { client.results(from, true).await })
                        .await;
                    match reopened {
                        Ok(stream) => self.stream = stream,
                        Err(Lost::Client(error) | Lost::Unanswered(error)) => {
                            return Err(FeedEnded::NoRoot(Arc::new(error)));
                        }
                    }
                }
                Err(error) => return Err(FeedEnded::Client(Arc::new(error))),
            }
        }
    }
}

/// Why a results feed ended: the pilot went away, or cannot go on serving it.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum FeedEnded {
    #[error("the pilot stopped ({0:?})")]
    Ended(StreamEnd),
    #[error("{}", .0.message)]
    Refused(RequestError),
    #[error("the pilot stopped")]
    Stopped,
    #[error("the pilot ended the result stream")]
    StreamEnded,
    #[error("{0} (and no root of the pilot came back)")]
    NoRoot(#[source] Arc<ClientError>),
    #[error(transparent)]
    Client(Arc<ClientError>),
}
