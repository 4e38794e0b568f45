//! Finding and dialing the agent's ancestors through the addresses they publish in
//! the pilot directory, and noticing a standby root that took over.

use super::*;

/// How often an agent under the root looks at the root's address file (`--any-root`).
const ROOT_POLL: Duration = Duration::from_millis(250);

/// Finds and dials ancestors through their published addresses.
pub(super) struct Dialer {
    pub(super) endpoint: quinn::Endpoint,
    pub(super) pilot_dir: PathBuf,
    pub(super) node: u32,
    pub(super) fanout: u32,
    pub(super) base: Option<u32>,
    pub(super) any_root: bool,
    pub(super) liveness: Liveness,
}

impl Dialer {
    /// Resolves once a root other than the one of `session` has published its address
    /// (a standby took over), for an agent that links to the root and may join another
    /// (`--any-root`); never otherwise. A dead root's link would take the heartbeat
    /// timeout to notice; the file tells within a poll.
    pub(super) async fn root_replaced(&self, parent: Position, session: u64) {
        if !self.any_root || parent != Position::Root {
            return std::future::pending().await;
        }
        let file = address_file(&self.pilot_dir, Position::Root);
        let first = tokio::fs::read_to_string(&file).await.ok();
        loop {
            tokio::time::sleep(ROOT_POLL).await;
            let now = tokio::fs::read_to_string(&file).await.ok();
            // Removed (a standby taking over starts so) or another address.
            if now.is_none() || now != first {
                tracing::info!(
                    session,
                    "the root's address changed: another root took over"
                );
                return;
            }
        }
    }

    /// At start-up: the parent, waiting for it to publish its address (every agent
    /// starts at once); if it never answers, the nearest live ancestor.
    pub(super) async fn attach_first(&self, wait: Duration) -> Result<ParentLink, NodeError> {
        let deadline = tokio::time::Instant::now() + wait;
        let parent = parent_in(self.node, self.fanout, self.base);
        let file = address_file(&self.pilot_dir, parent);
        // Patience for the parent itself; the rest of the wait goes to any ancestor.
        let patience = wait.min(Duration::from_secs(15));
        let parent_deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = parent_deadline.saturating_duration_since(tokio::time::Instant::now());
            if wait_for_address(&file, left).await.is_err() {
                break;
            }
            match self.dial(parent, None).await {
                Ok(link) => return Ok(link),
                // No wait mends it: say so now.
                Err(error) if matches!(error.kind, DialErrorKind::LoopbackOnly { .. }) => {
                    return Err(NodeError::Unreachable(error));
                }
                Err(error) if tokio::time::Instant::now() < parent_deadline => {
                    tracing::debug!(%error, "parent not reachable yet; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(_) => break,
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.attach_nearest(None, left).await
    }

    /// Rounds over the ancestors, nearest first, until one answers as a member of
    /// `session`'s tree (any tree when `None`), or `wait` has passed.
    pub(super) async fn attach_nearest(
        &self,
        session: Option<u64>,
        wait: Duration,
    ) -> Result<ParentLink, NodeError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(50);
        loop {
            let mut last = None;
            let mut moved = false;
            for position in ancestors(self.node, self.fanout, self.base) {
                match self.dial(position, session).await {
                    Ok(link) => return Ok(link),
                    Err(error) => {
                        moved |= matches!(error.kind, DialErrorKind::AddressChanged { .. });
                        tracing::debug!(
                            error = &error as &dyn std::error::Error,
                            "ancestor not reachable"
                        );
                        last = Some(error);
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                // Invariant: `ancestors` always ends with the root, so one was dialed.
                let last = last.expect("an ancestor was dialed");
                return Err(NodeError::NoAncestor { waited: wait, last });
            }
            if moved {
                // A new address: dial it now.
                pause = Duration::from_millis(50);
                continue;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Dials `position` at its published address and checks that the peer is that
    /// position (the file may be stale and its port reused) of the expected tree.
    pub(super) async fn dial(
        &self,
        position: Position,
        session: Option<u64>,
    ) -> Result<ParentLink, DialError> {
        self.try_dial(position, session)
            .await
            .map_err(|kind| DialError { position, kind })
    }

    async fn try_dial(
        &self,
        position: Position,
        session: Option<u64>,
    ) -> Result<ParentLink, DialErrorKind> {
        let path = address_file(&self.pilot_dir, position);
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => text,
            Err(source) => return Err(DialErrorKind::ReadAddress { path, source }),
        };
        let address: SocketAddr = match text.trim().parse() {
            Ok(address) => address,
            Err(source) => return Err(DialErrorKind::BadAddress { path, source }),
        };
        // The kernel would refuse every packet (EINVAL), which quinn only logs.
        if let Ok(local) = self.endpoint.local_addr()
            && local.ip().is_loopback()
            && !address.ip().is_loopback()
        {
            return Err(DialErrorKind::LoopbackOnly { local, address });
        }
        let timeout = self.liveness.timeout;
        let handshake = async {
            // The certificate must carry the role of the position dialed.
            let connection =
                saker_transport::quic::connect(&self.endpoint, address, position.role())
                    .await
                    .map_err(DialErrorKind::Connect)?;
            let (send, recv) = connection
                .open_bi()
                .await
                .map_err(DialErrorKind::OpenStream)?;
            let mut writer = FrameWriter::new(send);
            writer
                .write_preamble()
                .await
                .map_err(DialErrorKind::Preamble)?;
            // Which node this link leads to, for the parent's routes.
            writer
                .write_frames(&link_frame(&Link::Child { node: self.node }))
                .await
                .map_err(DialErrorKind::Preamble)?;
            let mut reader = FrameReader::new(recv);
            reader
                .read_preamble()
                .await
                .map_err(DialErrorKind::Preamble)?;
            let hello = match next_incoming(&mut reader, timeout).await {
                Ok(Some(Incoming::Link(Link::Hello { position, session }))) => (position, session),
                Ok(_) => return Err(DialErrorKind::NoHello),
                Err(error) => return Err(DialErrorKind::Read(error)),
            };
            Ok((connection, reader, writer, hello))
        };
        // A dead peer answers nothing until the timeout; a new one publishing its
        // address (a resumed root) should not wait that out.
        let changed = async {
            loop {
                tokio::time::sleep(ROOT_POLL).await;
                let now = tokio::fs::read_to_string(&path).await.ok();
                if now.as_deref() != Some(text.as_str()) {
                    return;
                }
            }
        };
        let answered = tokio::select! {
            answered = tokio::time::timeout(timeout, handshake) => answered,
            () = changed => return Err(DialErrorKind::AddressChanged { path }),
        };
        let (connection, reader, writer, (their_position, their_session)) =
            answered.map_err(|_| DialErrorKind::NoAnswer {
                address,
                waited: timeout,
            })??;
        let refuse = |why: DialErrorKind| {
            connection.close(0u32.into(), b"wrong peer");
            Err(why)
        };
        if their_position != position_code(position) {
            return refuse(DialErrorKind::WrongPosition {
                address,
                theirs: their_position,
            });
        }
        if let Some(expected) = session
            && expected != their_session
        {
            return refuse(DialErrorKind::WrongSession {
                address,
                theirs: their_session,
                expected,
            });
        }
        Ok(ParentLink {
            connection,
            reader,
            writer,
            position,
            session: their_session,
        })
    }
}
