//! Earlier attempts of a task: why each one did not count. Kept by the root while the
//! task is in motion, journaled as they happen (so a resume keeps them), and carried
//! in the task's [`ResultRecord`](crate::results::ResultRecord) as `history`.

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// How an earlier attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    /// The task's own failure (non-zero exit, signal, time limit, spawn failure):
    /// retried after backoff while `max_retries` allows.
    Failed,
    /// The infrastructure failed it (executor crash, agent or node lost): replayed.
    Lost,
}

/// One attempt that was not the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptNote {
    /// The attempt's id (unique in the pilot; also `SAKER_ATTEMPT_ID` in the task).
    pub attempt: u64,
    pub end: AttemptEnd,
    /// Human text: `"exit 1"`, `"killed by signal 9"`, `"agent 3 lost: ..."`.
    pub reason: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Hostname of the node it ran on, when known.
    pub node: Option<String>,
    pub start_time: Option<Timestamp>,
    pub end_time: Timestamp,
}

impl AttemptNote {
    /// A short cell for the results table: `"exit 1"`, `"lost"`.
    pub fn short(&self) -> String {
        match (self.end, self.exit_code, self.signal) {
            (AttemptEnd::Failed, Some(code), _) => format!("exit {code}"),
            (AttemptEnd::Failed, None, Some(signal)) => format!("signal {signal}"),
            (AttemptEnd::Failed, None, None) => self.reason.clone(),
            (AttemptEnd::Lost, _, _) => "lost".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_round_trip_and_summarise() {
        let note = AttemptNote {
            attempt: 7,
            end: AttemptEnd::Failed,
            reason: "exit 3".into(),
            exit_code: Some(3),
            signal: None,
            node: Some("n1".into()),
            start_time: None,
            end_time: Timestamp::from_unix_micros(5),
        };
        let json = serde_json::to_string(&note).unwrap();
        assert!(json.contains(r#""end":"failed""#), "{json}");
        assert_eq!(serde_json::from_str::<AttemptNote>(&json).unwrap(), note);
        assert_eq!(note.short(), "exit 3");
        let lost = AttemptNote {
            end: AttemptEnd::Lost,
            exit_code: None,
            ..note
        };
        assert_eq!(lost.short(), "lost");
    }
}
