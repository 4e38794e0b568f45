//! Objects of a client that sees no node's store (a login node, a laptop): put in a
//! node's store and read from their holders over data connections, with the pilot's
//! client certificate. The root hears only what is where (`stores`,
//! `object_holders`, `put_object`); no byte passes through it.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use saker_core::{NodeId, ObjectId};
use saker_transport::quic::{self, LinkTimeouts};
use saker_transport::{ConfigError, CredentialError, Credentials, DirError, PilotDir, Role};
use saker_wire::ItemRead;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use super::{DataError, read_item};
use crate::protocol::{NodeStore, PutObjectRequest};
use crate::{Client, ClientError};

/// Bytes per read of a remote get, and reads in flight.
const READ_BYTES: u32 = 4 << 20;
const READS_IN_FLIGHT: usize = 8;

/// Why a remote put or get failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot open the pilot directory")]
    PilotDir(#[source] DirError),
    #[error("cannot load the pilot's client certificate")]
    Credentials(#[source] CredentialError),
    #[error("cannot make a data connection's config")]
    Config(#[source] ConfigError),
    #[error("cannot open a quic endpoint")]
    Endpoint(#[source] quic::EndpointError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("no live node of the pilot serves data connections")]
    NoNode,
    #[error("node {0} is not live, or serves no data connections")]
    NotServing(NodeId),
    #[error("no live node holds object {0} (freed, or lost with its node)")]
    NoHolder(ObjectId),
    #[error("the node's address {0:?} is not an address")]
    Address(String),
    #[error("cannot reach node {node}")]
    Connect {
        node: NodeId,
        #[source]
        source: quic::ConnectError,
    },
    #[error("node {node} could not take or give the object")]
    Data {
        node: NodeId,
        #[source]
        source: DataError,
    },
    #[error("cannot write the object out")]
    Sink(#[source] std::io::Error),
}

/// A client's data connections to the pilot's nodes, one per node, made on first use.
#[derive(Debug)]
pub struct Remote {
    /// The data connections' config: the pilot's client certificate, ALPN
    /// `saker-data/1` (each endpoint's default, so every dial uses it).
    config: quinn::ClientConfig,
    endpoints: Mutex<HashMap<bool, quinn::Endpoint>>,
    connections: Mutex<HashMap<SocketAddr, quinn::Connection>>,
    next: AtomicUsize,
}

/// Where a put went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Put {
    pub object: ObjectId,
    pub node: NodeId,
    pub bytes: u64,
}

impl Remote {
    /// Loads the client certificate of the pilot in `pilot_dir`.
    pub fn open(pilot_dir: &Path) -> Result<Remote, RemoteError> {
        let pilot_dir = PilotDir::open(pilot_dir).map_err(RemoteError::PilotDir)?;
        let credentials =
            Credentials::load(&pilot_dir, Role::Client).map_err(RemoteError::Credentials)?;
        let config = quic::data_client_config(&credentials, &LinkTimeouts::default())
            .map_err(RemoteError::Config)?;
        Ok(Remote {
            config,
            endpoints: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        })
    }

    /// Puts every byte of `source` as a new object in the store of `node` (by
    /// default the live nodes in turn), then records it with the pilot: tasks that
    /// read it run there or fetch it, as for any object. The bytes go to the node
    /// directly.
    pub async fn put(
        &self,
        client: &Client,
        source: impl AsyncRead + Unpin,
        node: Option<NodeId>,
    ) -> Result<Put, RemoteError> {
        let stores = serving(client).await?;
        let store = match node {
            Some(node) => find(stores, node)?,
            None if stores.is_empty() => return Err(RemoteError::NoNode),
            None => {
                let at = self.next.fetch_add(1, Ordering::Relaxed) % stores.len();
                stores.into_iter().nth(at).ok_or(RemoteError::NoNode)?
            }
        };
        let object = ObjectId(rand::random());
        let item = crate::spec::object_item(object);
        let connection = self.connection(&store).await?;
        let bytes = super::put_object(&connection, &item, source)
            .await
            .map_err(|source| RemoteError::Data {
                node: store.node,
                source,
            })?;
        let put = PutObjectRequest {
            object,
            node: store.node,
            bytes,
        };
        client.put_object(put).await?;
        Ok(Put {
            object,
            node: store.node,
            bytes,
        })
    }

    /// Writes object `object` to `sink`, read from its holders: the next one takes
    /// over where one fails. Returns its size.
    pub async fn get(
        &self,
        client: &Client,
        object: ObjectId,
        mut sink: impl AsyncWrite + Unpin,
    ) -> Result<u64, RemoteError> {
        let holders = client.object_holders(object).await?.holders;
        let item = crate::spec::object_item(object);
        let mut offset = 0;
        let mut failed = None;
        for holder in &holders {
            match self.read_from(holder, &item, &mut offset, &mut sink).await {
                Ok(total) => {
                    sink.flush().await.map_err(RemoteError::Sink)?;
                    return Ok(total);
                }
                Err(error @ RemoteError::Sink(_)) => return Err(error),
                Err(error) => {
                    tracing::debug!(node = %holder.node, error = %error, "a holder could not give an object");
                    failed = Some(error);
                }
            }
        }
        Err(failed.unwrap_or(RemoteError::NoHolder(object)))
    }

    /// Writes object `object` to `sink`, read from `node`'s store directly, whether or
    /// not the pilot knows the node holds it (a call's value a worker left there for a
    /// client on no node). Returns its size.
    pub async fn get_from(
        &self,
        client: &Client,
        object: ObjectId,
        node: NodeId,
        mut sink: impl AsyncWrite + Unpin,
    ) -> Result<u64, RemoteError> {
        let store = find(serving(client).await?, node)?;
        let item = crate::spec::object_item(object);
        let total = self.read_from(&store, &item, &mut 0, &mut sink).await?;
        sink.flush().await.map_err(RemoteError::Sink)?;
        Ok(total)
    }

    /// Reads `item` from `holder` from `offset` on, [`READS_IN_FLIGHT`] reads at a
    /// time, written to `sink` in order; `offset` is how far it came.
    async fn read_from(
        &self,
        holder: &NodeStore,
        item: &str,
        offset: &mut u64,
        sink: &mut (impl AsyncWrite + Unpin),
    ) -> Result<u64, RemoteError> {
        let node = holder.node;
        let connection = self.connection(holder).await?;
        let read = |at: u64| {
            let connection = connection.clone();
            let read = ItemRead {
                item: item.to_owned(),
                reader: NodeId(u32::MAX),
                request: at,
                offset: at,
                len: READ_BYTES,
            };
            tokio::spawn(async move { read_item(&connection, &read).await })
        };
        let failed = |source| RemoteError::Data { node, source };
        let joined = |_| failed(DataError::Protocol("a read's task failed"));
        let first = read(*offset).await.map_err(joined)?.map_err(failed)?;
        let total = first.total;
        let mut next = *offset + first.data.len() as u64;
        sink.write_all(&first.data)
            .await
            .map_err(RemoteError::Sink)?;
        *offset = next;
        let mut reads = VecDeque::new();
        while *offset < total {
            while next < total && reads.len() < READS_IN_FLIGHT {
                reads.push_back(read(next));
                next += u64::from(READ_BYTES).min(total - next);
            }
            let Some(reading) = reads.pop_front() else {
                break;
            };
            let data = reading.await.map_err(joined)?.map_err(failed)?;
            if data.total != total || data.offset != *offset || data.data.is_empty() {
                return Err(failed(DataError::Protocol("the object changed while read")));
            }
            sink.write_all(&data.data)
                .await
                .map_err(RemoteError::Sink)?;
            *offset += data.data.len() as u64;
        }
        Ok(total)
    }

    /// The connection to `store`'s node: the live one, or a new one.
    async fn connection(&self, store: &NodeStore) -> Result<quinn::Connection, RemoteError> {
        let addr: SocketAddr = store
            .data
            .parse()
            .map_err(|_| RemoteError::Address(store.data.clone()))?;
        let mut connections = self.connections.lock().await;
        if let Some(connection) = connections.get(&addr)
            && connection.close_reason().is_none()
        {
            return Ok(connection.clone());
        }
        let endpoint = self.endpoint(addr.is_ipv6()).await?;
        let connection = quic::connect(&endpoint, addr, Role::Agent)
            .await
            .map_err(|source| RemoteError::Connect {
                node: store.node,
                source,
            })?;
        connections.insert(addr, connection.clone());
        Ok(connection)
    }

    async fn endpoint(&self, ipv6: bool) -> Result<quinn::Endpoint, RemoteError> {
        let mut endpoints = self.endpoints.lock().await;
        if let Some(endpoint) = endpoints.get(&ipv6) {
            return Ok(endpoint.clone());
        }
        let any: SocketAddr = if ipv6 { "[::]:0" } else { "0.0.0.0:0" }
            .parse()
            .expect("invariant: a literal address");
        let endpoint =
            quic::bind_endpoint(any, None, self.config.clone()).map_err(RemoteError::Endpoint)?;
        endpoints.insert(ipv6, endpoint.clone());
        Ok(endpoint)
    }
}

/// The live nodes' stores that serve data connections.
async fn serving(client: &Client) -> Result<Vec<NodeStore>, RemoteError> {
    let mut stores = client.stores().await?.stores;
    stores.retain(|store| !store.data.is_empty());
    Ok(stores)
}

/// `node`'s store among `stores`.
fn find(stores: Vec<NodeStore>, node: NodeId) -> Result<NodeStore, RemoteError> {
    stores
        .into_iter()
        .find(|store| store.node == node)
        .ok_or(RemoteError::NotServing(node))
}
