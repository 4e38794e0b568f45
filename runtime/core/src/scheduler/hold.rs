//! Jobs held by their driver: a held job runs nothing new until it is released. The
//! root holds the jobs that read a data item while the item is recomputed (their
//! attempts would only wait for it, each keeping a node's credit, and the attempt that
//! recomputes it could find no credit left anywhere).
//!
//! A hold is one more thing the job waits for, beside its dependencies and its time
//! (`deps.rs`): its queued tasks wait aside, so do those that come back from its
//! attempts, and its attempts not started yet are asked back
//! ([`Event::ReturnUnstarted`](crate::Event::ReturnUnstarted)); started ones run on.

use crate::error::UpdateError;
use crate::ids::{JobId, Time};

use super::Core;

impl Core {
    /// Holds `job` (not ended) until [`Core::handle_release`] (see the module doc).
    /// Holding a held job changes nothing.
    ///
    /// Errors: no such job, or it has ended or was cancelled; nothing changes then.
    pub fn handle_hold(&mut self, job: JobId, now: Time) -> Result<(), UpdateError> {
        self.observe(now);
        self.check_update(job)?;
        if self.deps.hold(job) && self.wait_for_one_more(job) {
            self.ask_back_job(job);
        }
        Ok(())
    }

    /// Releases a held job: it runs once nothing else holds it back (its dependencies,
    /// its time). A job not held (never, released already, or ended) is left as it is.
    pub fn handle_release(&mut self, job: JobId, now: Time) {
        self.observe(now);
        if self.deps.unhold(job) {
            self.wait_for_one_less(job);
        }
    }

    /// Whether `job` is held.
    pub fn is_held(&self, job: JobId) -> bool {
        self.deps.is_held(job)
    }
}
