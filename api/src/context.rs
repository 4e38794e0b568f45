//! How actor handles reach the pilot from wherever they are used: the driver's own
//! link; in an actor (the agent's process), the agent's own link up the tree for
//! calls and casts; otherwise (a task's worker, and spawns and stops from an actor)
//! a client connection to the pilot opened on first use (the agent tells both where
//! the pilot directory is).

use std::path::PathBuf;
use std::sync::OnceLock;

use saker_wire::messages::ActorAnswer;

use crate::error::ActorError;
use crate::link::Link;

/// The driver's link, set when its [`crate::Pilot`] starts.
static DRIVER: OnceLock<Link> = OnceLock::new();
/// A node's connection, opened on first use.
static NODE: tokio::sync::OnceCell<Link> = tokio::sync::OnceCell::const_new();

pub(crate) fn set_driver(link: &Link) {
    let _ = DRIVER.set(link.clone());
}

/// The driver's link, in the driver's process.
pub(crate) fn driver() -> Option<&'static Link> {
    DRIVER.get()
}

/// Sends a message to `actor` and waits for its reply (a cast: until it is on its
/// way): up the tree from an agent's process, else over [`link`].
pub(crate) async fn call(actor: u64, data: Vec<u8>, cast: bool) -> Result<Vec<u8>, ActorError> {
    if DRIVER.get().is_none()
        && let Some(uplink) = saker_actors::actor_host::uplink()
    {
        return match uplink.call(actor, data, cast).await {
            ActorAnswer::Reply(reply) => Ok(reply),
            ActorAnswer::Failed { fault, message } => Err(ActorError::from_fault(fault, message)),
        };
    }
    link().await?.actor_call(actor, data, cast).await
}

/// The link this process uses for actor requests.
pub(crate) async fn link() -> Result<&'static Link, ActorError> {
    if let Some(link) = DRIVER.get() {
        return Ok(link);
    }
    NODE.get_or_try_init(|| async {
        let dir = saker_actors::actor_host::pilot_dir()
            .map(PathBuf::from)
            .or_else(|| std::env::var_os(crate::PILOT_DIR_VAR).map(PathBuf::from))
            .ok_or_else(|| ActorError::PilotGone {
                reason: format!(
                    "this process is neither the driver nor on a pilot's node ({} is unset)",
                    crate::PILOT_DIR_VAR
                ),
            })?;
        Link::connect(&dir)
            .await
            .map_err(|error| ActorError::PilotGone {
                reason: saker_actors::error_chain(&error),
            })
    })
    .await
}
