//! The restart strategy an agent applies to its slots: one for one, with backoff and
//! a bounded intensity. Pure: time is passed in, so it is tested exactly, and the
//! agent's paused-time tests drive it through the agent itself.
//!
//! A slot that fails is restarted after `backoff`, doubled for each earlier failure
//! still inside `window` (up to `max_backoff`), so a fault that clears in a moment
//! costs a moment, and one that does not is not retried in a tight loop. More than
//! `max_restarts` failures inside `window` mean the fault is not passing: the slot is
//! given up. Choose `window` longer than the backoffs add up to, or a persistent
//! fault could pace itself out of the window and never be given up on.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How an agent restarts a slot that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed within `window`; the failure after them gives the slot up.
    pub max_restarts: u32,
    pub window: Duration,
    /// The wait before the first restart within `window`; doubled for each further one.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    /// Five restarts a minute, after 0.1, 0.2, 0.4, 0.8 and 1.6 s: a fault that lasts
    /// about three seconds gives the slot up.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What to do with a slot that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Start it again after this wait.
    RestartAfter(Duration),
    /// Past the restart intensity: `failures` within the window. Leave it down.
    GiveUp { failures: u32 },
}

/// One slot's recent failures.
#[derive(Debug, Default)]
pub struct Restarts {
    /// When it failed, oldest first; only those within the policy's window.
    failures: VecDeque<Instant>,
}

impl Restarts {
    /// The slot failed at `now` (times must not go backwards): restart it, or not.
    pub fn on_failure(&mut self, policy: &RestartPolicy, now: Instant) -> Verdict {
        while self
            .failures
            .front()
            .is_some_and(|at| now.duration_since(*at) > policy.window)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
        let failures = self.failures.len() as u32;
        if failures > policy.max_restarts {
            return Verdict::GiveUp { failures };
        }
        let doublings = (failures - 1).min(31);
        let backoff = policy
            .backoff
            .saturating_mul(1 << doublings)
            .min(policy.max_backoff);
        Verdict::RestartAfter(backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy {
            max_restarts: 3,
            window: Duration::from_secs(10),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
        }
    }

    #[test]
    fn restarts_back_off_doubling_up_to_the_most_then_give_up() {
        let (policy, mut restarts, t0) = (policy(), Restarts::default(), Instant::now());
        let ms = Duration::from_millis;
        let verdicts: Vec<Verdict> = [0, 100, 300, 600]
            .map(|at| restarts.on_failure(&policy, t0 + ms(at)))
            .into();
        assert_eq!(
            verdicts,
            [
                Verdict::RestartAfter(ms(100)),
                Verdict::RestartAfter(ms(200)),
                Verdict::RestartAfter(ms(300)),
                Verdict::GiveUp { failures: 4 },
            ]
        );
    }

    #[test]
    fn failures_older_than_the_window_are_forgotten() {
        let (policy, mut restarts, t0) = (policy(), Restarts::default(), Instant::now());
        for i in 0..3 {
            restarts.on_failure(&policy, t0 + Duration::from_millis(i));
        }
        // Just inside the window of the first: the fourth failure gives up.
        let mut inside = Restarts {
            failures: restarts.failures.clone(),
        };
        assert_eq!(
            inside.on_failure(&policy, t0 + policy.window),
            Verdict::GiveUp { failures: 4 }
        );
        // Past it (and past the second's), the slot has failed twice lately: the
        // backoff starts over from the second step.
        let later = t0 + policy.window + Duration::from_millis(2);
        assert_eq!(
            restarts.on_failure(&policy, later),
            Verdict::RestartAfter(Duration::from_millis(200))
        );
    }

    #[test]
    fn no_restarts_allowed_gives_up_at_the_first_failure() {
        let policy = RestartPolicy {
            max_restarts: 0,
            ..policy()
        };
        assert_eq!(
            Restarts::default().on_failure(&policy, Instant::now()),
            Verdict::GiveUp { failures: 1 }
        );
    }
}
