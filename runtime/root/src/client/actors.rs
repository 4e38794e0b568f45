//! The client protocol's actor requests: `actor_spawn`, `actor_call` and
//! `actor_stop` (see `docs/protocol.md`). Arguments, messages and replies are opaque
//! bytes (base64 in JSON) that the application archives; the pilot routes them to the
//! actor's node and never reads them.

use serde::{Deserialize, Serialize};

use crate::spec::{MAX_FUNCTION_BYTES, base64_bytes, valid_kind};

/// The pilot-wide id of an actor. Transparent in JSON (a bare number, as clients
/// send it); rkyv so applications' typed handles can carry it inside their data.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(transparent)]
#[rkyv(derive(Debug))]
pub struct ActorId(pub u64);

impl std::fmt::Display for ActorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "actor {}", self.0)
    }
}

/// Where an actor's first life runs. A restart runs wherever a node can take it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorPlacement {
    /// The hosting node with the fewest actors.
    #[default]
    Any,
    /// This node (0-based, as `--node` and a task's `node`).
    Node(u32),
    /// Beside this other actor, on its node.
    With(ActorId),
}

/// What happens when an actor's life ends other than by a stop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorRestart {
    /// It stays ended; calls fail.
    #[default]
    Never,
    /// When its node is lost, it starts again on another node from its spawn
    /// arguments, at most `max_restarts` times.
    OnNodeLoss { max_restarts: u32 },
    /// When its node is lost or a handler panics, likewise.
    Always { max_restarts: u32 },
}

impl ActorRestart {
    /// The restarts allowed after an end of this kind.
    pub fn allows(self, panicked: bool) -> u32 {
        match self {
            ActorRestart::Never => 0,
            ActorRestart::OnNodeLoss { max_restarts } if !panicked => max_restarts,
            ActorRestart::OnNodeLoss { .. } => 0,
            ActorRestart::Always { max_restarts } => max_restarts,
        }
    }
}

/// `actor_spawn`: start an actor; answered once its `on_start` returned.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorSpawnRequest {
    /// The actor type's name in the application.
    pub name: String,
    /// The application's fingerprint of the type (checked on the node).
    pub fingerprint: u64,
    #[serde(with = "base64_bytes")]
    pub args: Vec<u8>,
    pub placement: ActorPlacement,
    #[serde(default)]
    pub restart: ActorRestart,
}

impl std::fmt::Debug for ActorSpawnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorSpawnRequest")
            .field("name", &self.name)
            .field("args_bytes", &self.args.len())
            .field("placement", &self.placement)
            .field("restart", &self.restart)
            .finish()
    }
}

impl ActorSpawnRequest {
    /// Checks what the pilot can check without the node: a plain name, bounded bytes.
    pub fn validate(&self) -> Result<(), String> {
        if !valid_kind(&self.name) {
            return Err(format!(
                "actor type name {:?} must be letters, digits, '_' and '-' (at most 64)",
                self.name
            ));
        }
        if self.args.len() > MAX_FUNCTION_BYTES {
            return Err(format!(
                "spawn arguments of {} bytes exceed the limit of {MAX_FUNCTION_BYTES}",
                self.args.len()
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorSpawnReply {
    pub actor: u64,
    /// The node its first life runs on.
    pub node: u32,
}

/// `actor_call`: a message for an actor; with `cast`, answered as soon as it is on
/// its way (no reply is waited for).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorCallRequest {
    pub actor: u64,
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
    #[serde(default)]
    pub cast: bool,
}

impl std::fmt::Debug for ActorCallRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorCallRequest")
            .field("actor", &self.actor)
            .field("data_bytes", &self.data.len())
            .field("cast", &self.cast)
            .finish()
    }
}

#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorCallReply {
    /// The actor's reply (empty for a cast).
    #[serde(with = "base64_bytes")]
    pub reply: Vec<u8>,
}

impl std::fmt::Debug for ActorCallReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorCallReply")
            .field("reply_bytes", &self.reply.len())
            .finish()
    }
}

/// `actor_stop`: stop an actor (its `on_stop` runs); answered once it has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorStopRequest {
    pub actor: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorStopReply {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_json_is_what_clients_send() {
        for (placement, json) in [
            (ActorPlacement::Any, r#""any""#),
            (ActorPlacement::Node(3), r#"{"node":3}"#),
            (ActorPlacement::With(ActorId(7)), r#"{"with":7}"#),
        ] {
            assert_eq!(serde_json::to_string(&placement).unwrap(), json);
            assert_eq!(
                serde_json::from_str::<ActorPlacement>(json).unwrap(),
                placement
            );
        }
        let spaced: ActorPlacement = serde_json::from_str(r#"{"with": 7}"#).unwrap();
        assert_eq!(spaced, ActorPlacement::With(ActorId(7)));
        assert_eq!(ActorPlacement::default(), ActorPlacement::Any);
    }

    #[test]
    fn an_actor_id_is_a_bare_number() {
        assert_eq!(serde_json::to_string(&ActorId(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<ActorId>("7").unwrap(), ActorId(7));
        assert_eq!(ActorId(7).to_string(), "actor 7");
    }
}
