//! What a pilot tells the people who run it, handed to its caller to show: the root
//! prints nothing itself. The `saker` binary prints each [`Notice`] on stderr as
//! `saker: {notice}`; an application may show them its own way, or not at all (they
//! are logged as tracing events either way).
//!
//! Notices are not errors: the pilot goes on. They say what a person watching would
//! want to know at once (a standby takes over, a silent root is fenced, a journal was
//! resumed) and would otherwise find only in a log file.

use std::fmt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

/// One thing worth telling a person, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A standby got the lock of a root that is gone and takes the pilot over.
    TakingOver,
    /// A waiting standby kills a root that has answered nothing for `silent_for`:
    /// `pid` on this host, or on `node` of the allocation.
    Fencing {
        pid: u32,
        node: Option<String>,
        silent_for: Duration,
    },
    /// A pilot resumed from its journal in `journal`.
    Resumed {
        jobs: u64,
        tasks: u64,
        finished: u64,
        journal: PathBuf,
    },
    /// The credentials of a pilot directory to resume were replaced, for `why`.
    RenewedCredentials { dir: PathBuf, why: &'static str },
    /// The root this process keeps in an allocation ([`crate::standbys::keep`]) ended
    /// without stopping the pilot: a standby takes over, and this process holds the
    /// allocation meanwhile.
    RootEnded { pid: u32, status: ExitStatus },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::TakingOver => write!(f, "the root is gone; this standby takes over"),
            Notice::Fencing {
                pid,
                node: None,
                silent_for,
            } => write!(
                f,
                "the root (pid {pid}) answered nothing for {silent_for:?}; fencing it"
            ),
            Notice::Fencing {
                pid,
                node: Some(node),
                silent_for,
            } => write!(
                f,
                "the root (pid {pid} on {node}) answered nothing for {silent_for:?}; fencing it"
            ),
            Notice::Resumed {
                jobs,
                tasks,
                finished,
                journal,
            } => write!(
                f,
                "resumed {jobs} jobs ({tasks} tasks, {finished} already finished) from {}",
                journal.display()
            ),
            Notice::RenewedCredentials { dir, why } => write!(
                f,
                "renewed the credentials of {} ({why}); clients load the new ones when they \
                 connect",
                dir.display()
            ),
            Notice::RootEnded { pid, status } => write!(
                f,
                "the root (pid {pid}) ended ({status}); a standby takes over, and this process \
                 holds the allocation until the pilot stops"
            ),
        }
    }
}

/// Where a pilot's notices go: a function its caller gives, called on the thread
/// where the notice arises, in order. Without one they are only logged.
#[derive(Clone, Default)]
pub struct Notices(Option<Arc<dyn Fn(Notice) + Send + Sync>>);

impl Notices {
    /// Notices handed to `show`, as they happen.
    pub fn to(show: impl Fn(Notice) + Send + Sync + 'static) -> Notices {
        Notices(Some(Arc::new(show)))
    }

    /// Logs `notice` and hands it to the caller's function, if any.
    pub fn tell(&self, notice: Notice) {
        tracing::debug!(%notice, "notice");
        if let Some(show) = &self.0 {
            show(notice);
        }
    }
}

impl fmt::Debug for Notices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = if self.0.is_some() {
            "a function"
        } else {
            "the log"
        };
        f.debug_tuple("Notices").field(&to).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// The `saker` binary prints these lines, and tests and people look for them.
    #[test]
    fn notices_read_as_the_lines_people_know() {
        let fenced = Notice::Fencing {
            pid: 7,
            node: Some("n2".into()),
            silent_for: Duration::from_secs(3),
        };
        assert_eq!(
            fenced.to_string(),
            "the root (pid 7 on n2) answered nothing for 3s; fencing it"
        );
        let resumed = Notice::Resumed {
            jobs: 1,
            tasks: 400,
            finished: 12,
            journal: "/p/journal".into(),
        };
        assert_eq!(
            resumed.to_string(),
            "resumed 1 jobs (400 tasks, 12 already finished) from /p/journal"
        );
        let renewed = Notice::RenewedCredentials {
            dir: "/p".into(),
            why: "its certificates predate certificate roles",
        };
        assert!(renewed.to_string().contains("predate certificate roles"));
    }

    #[test]
    fn notices_reach_the_callers_function_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let notices = Notices::to({
            let seen = seen.clone();
            move |notice| seen.lock().unwrap().push(notice)
        });
        notices.tell(Notice::TakingOver);
        notices.clone().tell(Notice::RenewedCredentials {
            dir: "/p".into(),
            why: "test",
        });
        Notices::default().tell(Notice::TakingOver);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], Notice::TakingOver);
    }
}
