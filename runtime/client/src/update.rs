//! What an `update` changes of a job: its priority, its not-before time, its time
//! limit. One type for the request, the root and the journal's `update` record.
//!
//! In JSON each field is optional: absent leaves it as it is; for `not_before` and
//! `time_limit`, `null` clears it (no time, no limit). `Option<Option<_>>` keeps the
//! three cases apart in Rust.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::results::Timestamp;

/// A change to a job that has not ended; applies to its tasks that have not started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUpdate {
    /// The new priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The new not-before time (`Some(None)`: none).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "present")]
    pub not_before: Option<Option<Timestamp>>,
    /// The new time limit per attempt (`Some(None)`: none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "present_limit"
    )]
    pub time_limit: Option<Option<Duration>>,
}

/// An update that cannot be applied to any job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUpdate {
    #[error("an update changes priority, not_before or time_limit; this one changes nothing")]
    Empty,
    #[error("time limit must be positive")]
    ZeroTimeLimit,
}

impl JobUpdate {
    /// Whether it changes something and every value is one a job may have.
    pub fn validate(&self) -> Result<(), InvalidUpdate> {
        if self.priority.is_none() && self.not_before.is_none() && self.time_limit.is_none() {
            return Err(InvalidUpdate::Empty);
        }
        if self.time_limit == Some(Some(Duration::ZERO)) {
            return Err(InvalidUpdate::ZeroTimeLimit);
        }
        Ok(())
    }

    /// This update, then `later` (what `later` sets wins).
    pub fn then(self, later: JobUpdate) -> JobUpdate {
        JobUpdate {
            priority: later.priority.or(self.priority),
            not_before: later.not_before.or(self.not_before),
            time_limit: later.time_limit.or(self.time_limit),
        }
    }
}

/// A field that is absent (`None`), `null` (`Some(None)`) or set.
pub(crate) mod present {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<Option<T>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(inner) => inner.serialize(serializer),
            None => serializer.serialize_none(),
        }
    }

    /// Only called for a field that is there: absent ones take the default.
    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(deserializer).map(Some)
    }
}

/// [`present`] for a time limit, written as `time_limit` is in specs.
pub(crate) mod present_limit {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    use crate::spec::time_limit_serde;

    pub fn serialize<S: Serializer>(
        value: &Option<Option<Duration>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(inner) => time_limit_serde::serialize(inner, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Option<Duration>>, D::Error> {
        time_limit_serde::deserialize(deserializer).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_null_and_set_fields_stay_apart() {
        let parse = |json: &str| serde_json::from_str::<JobUpdate>(json).expect(json);
        assert_eq!(
            parse(r#"{"priority": 3}"#),
            JobUpdate {
                priority: Some(3),
                ..JobUpdate::default()
            }
        );
        let cleared = parse(r#"{"not_before": null, "time_limit": null}"#);
        assert_eq!(cleared.not_before, Some(None));
        assert_eq!(cleared.time_limit, Some(None));
        let set = parse(r#"{"not_before": "2026-12-01T03:00Z", "time_limit": "90s"}"#);
        assert_eq!(set.time_limit, Some(Some(Duration::from_secs(90))));
        assert_eq!(
            set.not_before,
            Some(Some("2026-12-01T03:00:00Z".parse().expect("a time")))
        );
        for update in [cleared, set, parse("{}")] {
            let json = serde_json::to_string(&update).expect("serializes");
            assert_eq!(parse(&json), update, "{json}");
        }
        assert_eq!(parse("{}").validate(), Err(InvalidUpdate::Empty));
        assert_eq!(
            parse(r#"{"time_limit": 0}"#).validate(),
            Err(InvalidUpdate::ZeroTimeLimit)
        );
        assert!(serde_json::from_str::<JobUpdate>(r#"{"not_before": "tomorrow"}"#).is_err());
    }
}
