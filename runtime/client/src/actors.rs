//! The client protocol's actor requests: `actor_spawn`, `actor_call` and
//! `actor_stop` (see `docs/protocol.md`). Arguments, messages and replies are opaque
//! bytes (base64 in JSON) that the application archives; the pilot routes them to the
//! actor's node and never reads them.

use serde::{Deserialize, Serialize};

use crate::spec::{MAX_FUNCTION_BYTES, base64_bytes};

/// The longest actor type name, in bytes.
pub const MAX_ACTOR_NAME_LEN: usize = 64;

/// Whether `name` can name an actor type: 1 to [`MAX_ACTOR_NAME_LEN`] ASCII letters,
/// digits, `_` and `-`. A `const fn`, so that an application's build can check its
/// actor types' names (the Rust API does, where a type is registered).
pub const fn valid_actor_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_ACTOR_NAME_LEN {
        return false;
    }
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if !(byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-') {
            return false;
        }
        at += 1;
    }
    true
}

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

/// Where an actor runs. The first life runs where this says. A restart after a panic
/// (its node is healthy) stays on the node the actor ran on; a restart after its node
/// was lost goes to the hosting node with the fewest actors.
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

/// What happens when an actor's life ends other than by a stop (the Rust API's
/// `Restart`, the same type). Once no restart is left, the actor has ended for good:
/// every later call fails with `unknown_actor` (`ActorError::Unknown`), whose message
/// says how it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorRestart {
    /// It stays ended: calls fail.
    #[default]
    Never,
    /// When its node is lost, it starts again on another node from its spawn
    /// arguments (its state is not kept), at most `max_restarts` times.
    OnNodeLoss { max_restarts: u32 },
    /// When its node is lost or a handler panics, likewise; after a panic it starts
    /// again on the same node.
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
    pub fn validate(&self) -> Result<(), InvalidSpawn> {
        if !valid_actor_name(&self.name) {
            return Err(InvalidSpawn::Name {
                name: self.name.clone(),
            });
        }
        if self.args.len() > MAX_FUNCTION_BYTES {
            return Err(InvalidSpawn::TooLarge {
                bytes: self.args.len(),
            });
        }
        Ok(())
    }
}

/// A spawn request the pilot refuses before any node sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSpawn {
    #[error(
        "actor type name {name:?} must be ASCII letters, digits, '_' and '-' (1 to {MAX_ACTOR_NAME_LEN} bytes)"
    )]
    Name { name: String },
    #[error("spawn arguments of {bytes} bytes exceed the limit of {MAX_FUNCTION_BYTES}")]
    TooLarge { bytes: usize },
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
    fn restart_json_is_what_clients_send_and_never_is_the_default() {
        for (restart, json) in [
            (ActorRestart::Never, r#""never""#),
            (
                ActorRestart::OnNodeLoss { max_restarts: 3 },
                r#"{"on_node_loss":{"max_restarts":3}}"#,
            ),
            (
                ActorRestart::Always { max_restarts: 1 },
                r#"{"always":{"max_restarts":1}}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(&restart).unwrap(), json);
            assert_eq!(serde_json::from_str::<ActorRestart>(json).unwrap(), restart);
        }
        let spawn: ActorSpawnRequest = serde_json::from_str(
            r#"{"name":"counter","fingerprint":1,"args":"","placement":"any"}"#,
        )
        .unwrap();
        assert_eq!(spawn.restart, ActorRestart::Never);
        assert_eq!(ActorRestart::OnNodeLoss { max_restarts: 3 }.allows(true), 0);
        assert_eq!(
            ActorRestart::OnNodeLoss { max_restarts: 3 }.allows(false),
            3
        );
        assert_eq!(ActorRestart::Always { max_restarts: 2 }.allows(true), 2);
    }

    #[test]
    fn actor_names_are_letters_digits_underscores_and_dashes_up_to_64_bytes() {
        let longest = "a".repeat(MAX_ACTOR_NAME_LEN);
        for good in ["counter", "param_server-2", "A", longest.as_str()] {
            assert!(valid_actor_name(good), "{good:?}");
        }
        let too_long = "a".repeat(MAX_ACTOR_NAME_LEN + 1);
        for bad in ["", "no spaces", "a/b", "a.b", "modèle", too_long.as_str()] {
            assert!(!valid_actor_name(bad), "{bad:?}");
            let spawn = ActorSpawnRequest {
                name: bad.to_owned(),
                fingerprint: 1,
                args: Vec::new(),
                placement: ActorPlacement::Any,
                restart: ActorRestart::Never,
            };
            let refused = spawn.validate().unwrap_err().to_string();
            assert!(refused.contains("1 to 64 bytes"), "{refused}");
        }
        // Checked while the program is built.
        const { assert!(valid_actor_name("model")) };
    }

    #[test]
    fn an_actor_id_is_a_bare_number() {
        assert_eq!(serde_json::to_string(&ActorId(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<ActorId>("7").unwrap(), ActorId(7));
        assert_eq!(ActorId(7).to_string(), "actor 7");
    }
}
