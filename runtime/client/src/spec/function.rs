//! Function tasks in a spec: a payload for a persistent worker of a named kind, and
//! the base64 form bytes take in JSON (specs, results, the journal).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::SpecError;
pub use saker_wire::messages::MAX_FUNCTION_BYTES;

/// Longest worker kind name: it names an environment variable and a log file.
pub const MAX_KIND_LEN: usize = 32;

/// A call for a persistent worker of `kind` (see `docs/workers.md`).
///
/// JSON form: `{"kind": "python", "payload": "<standard base64>"}`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub kind: String,
    #[serde(with = "base64_bytes")]
    pub payload: Vec<u8>,
}

impl std::fmt::Debug for FunctionSpec {
    // A payload may be megabytes: show its size, not its bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionSpec")
            .field("kind", &self.kind)
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
}

impl FunctionSpec {
    pub fn validate(&self) -> Result<(), SpecError> {
        if !valid_kind(&self.kind) {
            return Err(SpecError::InvalidWorkerKind {
                kind: self.kind.clone(),
            });
        }
        if self.payload.len() > MAX_FUNCTION_BYTES {
            return Err(SpecError::PayloadTooLarge {
                bytes: self.payload.len(),
            });
        }
        Ok(())
    }
}

/// A worker kind: letters, digits, `_` and `-`, as an environment variable's name
/// can take it (upper-cased, `-` as `_`).
pub fn valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= MAX_KIND_LEN
        && kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

/// Bytes as standard base64 (with padding) in JSON.
pub mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(|error| serde::de::Error::custom(format!("invalid base64: {error}")))
    }
}

/// Optional bytes as standard base64 or `null` in JSON.
pub mod base64_option {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    pub fn serialize<S: Serializer>(
        bytes: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => serializer.serialize_str(&STANDARD.encode(bytes)),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(text) = <Option<std::borrow::Cow<'de, str>>>::deserialize(deserializer)? else {
            return Ok(None);
        };
        STANDARD
            .decode(text.as_bytes())
            .map(Some)
            .map_err(|error| serde::de::Error::custom(format!("invalid base64: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{JobRequest, TaskSpec};

    fn function_spec(json: &str) -> Result<TaskSpec, String> {
        let spec: TaskSpec = serde_json::from_str(json).map_err(|e| e.to_string())?;
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }

    #[test]
    fn a_function_spec_round_trips_its_bytes_as_base64() {
        let spec = function_spec(
            r#"{"function": {"kind": "python", "payload": "AP8K"}, "cores": 2, "time_limit": "5m"}"#,
        )
        .unwrap();
        let function = spec.function.as_ref().unwrap();
        assert_eq!(function.payload, [0x00, 0xff, b'\n']);
        assert!(spec.argv.is_empty());
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains(r#""payload":"AP8K""#), "{json}");
        let again: TaskSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn a_function_spec_refuses_what_only_commands_take() {
        let cases = [
            (r#""argv": ["echo"]"#, "argv"),
            (r#""env": {"A": "1"}"#, "env"),
            (r#""cwd": "/tmp""#, "cwd"),
            (r#""shell": true, "argv": ["x"]"#, "argv"),
        ];
        for (extra, word) in cases {
            let json = format!(r#"{{"function": {{"kind": "python", "payload": ""}}, {extra}}}"#);
            let error = function_spec(&json).unwrap_err();
            assert!(error.contains(word), "{json}: {error}");
        }
        let array: JobRequest = serde_json::from_str(
            r#"{"spec": {"function": {"kind": "python", "payload": ""}}, "array": "1-3"}"#,
        )
        .unwrap();
        let error = array.validate().unwrap_err().to_string();
        assert!(error.contains("array"), "{error}");
    }

    #[test]
    fn bad_kinds_bad_base64_and_oversize_payloads_are_refused() {
        for kind in ["", "py thon", "a/b", &"k".repeat(MAX_KIND_LEN + 1)] {
            let json = format!(r#"{{"function": {{"kind": {kind:?}, "payload": ""}}}}"#);
            let error = function_spec(&json).unwrap_err();
            assert!(error.contains("worker kind"), "{kind:?}: {error}");
        }
        let error =
            function_spec(r#"{"function": {"kind": "python", "payload": "@@"}}"#).unwrap_err();
        assert!(error.contains("invalid base64"), "{error}");
        let error = function_spec(r#"{"function": {"kind": "python"}}"#).unwrap_err();
        assert!(error.contains("payload"), "{error}");
        let big = FunctionSpec {
            kind: "python".into(),
            payload: vec![0; MAX_FUNCTION_BYTES + 1],
        };
        let error = big.validate().unwrap_err().to_string();
        assert!(error.contains("16777217 bytes"), "{error}");
        let most = FunctionSpec {
            payload: vec![0; MAX_FUNCTION_BYTES],
            ..big
        };
        assert!(most.validate().is_ok());
    }

    #[test]
    fn a_spec_needs_argv_or_a_function() {
        let error = function_spec(r#"{"cores": 1}"#).unwrap_err();
        assert!(error.contains("argv is empty"), "{error}");
    }
}
