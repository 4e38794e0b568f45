//! How a driver speaks to its pilot: in process (an embedded pilot's root actor, no
//! encoding at all) or over the client protocol (a pilot started by `saker run --app`
//! or `saker pilot`). Both take the same requests; only the transport differs.

use std::path::Path;
use std::sync::Arc;

use ractor::ActorRef;
use saker_client::protocol::{PutObjectRequest, StoresReport};
use saker_client::results::ResultRecord;
use saker_client::spec::JobRequest;
use saker_client::{RequestError, StatusReport, SubmittedJob};
use saker_core::ObjectId;
use saker_root::actor::RootMsg;
use saker_root::client::{ClientRequest, ResultsItem};
use tokio::sync::{mpsc, oneshot};

use crate::error::{ActorError, Error};
use crate::remote::{FeedEnded, Lost, Remote, RemoteFeed};
use saker_client::actors::ActorSpawnRequest;

#[derive(Debug, Clone)]
pub(crate) enum Link {
    Embedded(ActorRef<RootMsg>),
    Client(Arc<Remote>),
}

/// Results as they are accepted, from the moment the feed was opened.
#[derive(Debug)]
pub(crate) enum Feed {
    Embedded(mpsc::Receiver<ResultsItem>),
    Client(RemoteFeed),
}

impl Feed {
    /// The next result; `Err` when the pilot went away.
    pub(crate) async fn next(&mut self) -> Result<Arc<ResultRecord>, FeedEnded> {
        match self {
            Feed::Embedded(items) => match items.recv().await {
                Some(ResultsItem::Record(record)) => Ok(record),
                Some(ResultsItem::End(end)) => Err(FeedEnded::Ended(end)),
                Some(ResultsItem::Error(error)) => Err(FeedEnded::Refused(error)),
                None => Err(FeedEnded::Stopped),
            },
            Feed::Client(feed) => feed.next().await.map(Arc::new),
        }
    }
}

fn refused(error: RequestError) -> Error {
    Error::Refused {
        message: error.message,
    }
}

fn gone() -> Error {
    Error::PilotGone {
        reason: "the root stopped".to_owned(),
    }
}

fn client_error(lost: Lost) -> Error {
    match lost {
        Lost::Client(error) => match error.server_error() {
            Some(server) => Error::Refused {
                message: server.message.clone(),
            },
            None => Error::PilotGone {
                reason: error.to_string(),
            },
        },
        Lost::Unanswered(error) => Error::Unanswered {
            reason: error.to_string(),
        },
    }
}

impl Link {
    pub(crate) async fn connect(dir: &Path) -> Result<Link, Error> {
        let remote = Remote::connect(dir)
            .await
            .map_err(|source| Error::Connect {
                dir: dir.to_owned(),
                source: Box::new(source),
            })?;
        Ok(Link::Client(Arc::new(remote)))
    }

    async fn ask<T>(
        root: &ActorRef<RootMsg>,
        request: impl FnOnce(oneshot::Sender<Result<T, RequestError>>) -> ClientRequest,
    ) -> Result<T, Error> {
        ask_root(root, request)
            .await
            .ok_or_else(gone)?
            .map_err(refused)
    }

    pub(crate) async fn submit(&self, jobs: Vec<JobRequest>) -> Result<Vec<SubmittedJob>, Error> {
        match self {
            Link::Embedded(root) => {
                // The client server validates what it forwards; in process, so do we.
                for job in &jobs {
                    job.validate().map_err(|error| Error::Refused {
                        message: error.to_string(),
                    })?;
                }
                let reply = Self::ask(root, |reply| ClientRequest::Submit {
                    jobs,
                    wait: None,
                    reply,
                })
                .await?;
                Ok(reply.jobs)
            }
            Link::Client(remote) => remote
                .ask_once(|client| async move { client.submit(jobs).await })
                .await
                .map_err(client_error),
        }
    }

    pub(crate) async fn status(&self) -> Result<StatusReport, Error> {
        match self {
            Link::Embedded(root) => {
                Self::ask(root, |reply| ClientRequest::Status { jobs: None, reply }).await
            }
            Link::Client(remote) => remote
                .ask_again(|client| async move { client.status().await })
                .await
                .map_err(client_error),
        }
    }

    /// Where each live node keeps its items and objects.
    pub(crate) async fn stores(&self) -> Result<StoresReport, Error> {
        match self {
            Link::Embedded(root) => Self::ask(root, |reply| ClientRequest::Stores { reply }).await,
            Link::Client(remote) => remote
                .ask_again(|client| async move { client.stores().await })
                .await
                .map_err(client_error),
        }
    }

    /// Records an object written in a node's store (asked again after a takeover:
    /// recording the same object twice is recording it once).
    pub(crate) async fn put_object(&self, put: PutObjectRequest) -> Result<(), Error> {
        match self {
            Link::Embedded(root) => {
                Self::ask(root, |reply| ClientRequest::PutObject { put, reply }).await
            }
            Link::Client(remote) => remote
                .ask_again(|client| async move { client.put_object(put).await })
                .await
                .map_err(client_error),
        }
    }

    /// Puts the file at `path` as a new object on a node, sent to its agent directly
    /// (a driver that sees no node's store). `None` for an embedded pilot, whose
    /// driver has no client certificate of its own to dial with.
    pub(crate) async fn put_remote(
        &self,
        path: &Path,
    ) -> Result<Option<saker_client::data::Put>, crate::objects::ObjectError> {
        let Link::Client(remote) = self else {
            return Ok(None);
        };
        let (data, client) = remote.data()?;
        let file = tokio::fs::File::open(path).await.map_err(|source| {
            crate::objects::ObjectError::Io {
                what: "open",
                path: path.to_owned(),
                source,
            }
        })?;
        Ok(Some(data.put(&client, file, None).await?))
    }

    /// Writes object `object` to the file at `path`, read from its holders directly;
    /// `false` for an embedded pilot (as [`Self::put_remote`]).
    pub(crate) async fn get_remote(
        &self,
        object: ObjectId,
        path: &Path,
    ) -> Result<bool, crate::objects::ObjectError> {
        let Link::Client(remote) = self else {
            return Ok(false);
        };
        let (data, client) = remote.data()?;
        let file = tokio::fs::File::create(path).await.map_err(|source| {
            crate::objects::ObjectError::Io {
                what: "create",
                path: path.to_owned(),
                source,
            }
        })?;
        data.get(&client, object, file).await?;
        Ok(true)
    }

    /// Frees objects once no unfinished job reads them.
    pub(crate) async fn free_objects(&self, objects: Vec<ObjectId>) -> Result<(), Error> {
        match self {
            Link::Embedded(root) => {
                Self::ask(root, |reply| ClientRequest::FreeObjects { objects, reply }).await
            }
            Link::Client(remote) => remote
                .ask_again(|client| {
                    let objects = objects.clone();
                    async move { client.free_objects(objects).await }
                })
                .await
                .map_err(client_error),
        }
    }

    /// Opens a feed of the results accepted from now on (none of the history).
    pub(crate) async fn follow(&self) -> Result<Feed, Error> {
        match self {
            Link::Embedded(root) => {
                let (sink, items) = mpsc::channel(4096);
                root.send_message(RootMsg::Client(ClientRequest::Results {
                    // Past every sequence number: only results accepted from now on.
                    from: u64::MAX,
                    follow: true,
                    sink,
                }))
                .map_err(|_| gone())?;
                Ok(Feed::Embedded(items))
            }
            Link::Client(remote) => Ok(Feed::Client(remote.follow().await.map_err(client_error)?)),
        }
    }

    pub(crate) async fn actor_spawn(&self, spawn: ActorSpawnRequest) -> Result<u64, ActorError> {
        match self {
            Link::Embedded(root) => {
                let reply =
                    ask_actor(root, |reply| ClientRequest::ActorSpawn { spawn, reply }).await?;
                Ok(reply.actor)
            }
            Link::Client(remote) => remote
                .ask_once(|client| async move { client.actor_spawn(&spawn).await })
                .await
                .map(|reply| reply.actor)
                .map_err(actor_client_error),
        }
    }

    pub(crate) async fn actor_call(
        &self,
        actor: u64,
        data: Vec<u8>,
        cast: bool,
    ) -> Result<Vec<u8>, ActorError> {
        match self {
            Link::Embedded(root) => {
                let request = |reply| ClientRequest::ActorCall {
                    actor,
                    data,
                    cast,
                    reply,
                };
                Ok(ask_actor(root, request).await?.reply)
            }
            Link::Client(remote) => remote
                .ask_once(|client| async move { client.actor_call(actor, data, cast).await })
                .await
                .map_err(actor_client_error),
        }
    }

    pub(crate) async fn actor_stop(&self, actor: u64) -> Result<(), ActorError> {
        match self {
            Link::Embedded(root) => {
                ask_actor(root, |reply| ClientRequest::ActorStop { actor, reply }).await?;
                Ok(())
            }
            Link::Client(remote) => remote
                .ask_again(|client| async move { client.actor_stop(actor).await })
                .await
                .map_err(actor_client_error),
        }
    }
}

fn actor_gone() -> ActorError {
    ActorError::PilotGone {
        reason: "the root stopped".to_owned(),
    }
}

async fn ask_actor<T>(
    root: &ActorRef<RootMsg>,
    request: impl FnOnce(oneshot::Sender<Result<T, RequestError>>) -> ClientRequest,
) -> Result<T, ActorError> {
    ask_root(root, request)
        .await
        .ok_or_else(actor_gone)?
        .map_err(ActorError::from_request)
}

/// Sends a request to the in-process root: its answer, or `None` if the root stopped.
async fn ask_root<T>(
    root: &ActorRef<RootMsg>,
    request: impl FnOnce(oneshot::Sender<Result<T, RequestError>>) -> ClientRequest,
) -> Option<Result<T, RequestError>> {
    let (reply, answer) = oneshot::channel();
    root.send_message(RootMsg::Client(request(reply))).ok()?;
    answer.await.ok()
}

fn actor_client_error(lost: Lost) -> ActorError {
    match lost {
        Lost::Client(error) => match error.server_error() {
            Some(server) => ActorError::from_request(server.clone()),
            None => ActorError::PilotGone {
                reason: error.to_string(),
            },
        },
        // Sent, and the connection broke before the answer: handled at most once.
        Lost::Unanswered(error) => ActorError::Lost {
            message: format!("the pilot's root changed before it answered ({error})"),
        },
    }
}
