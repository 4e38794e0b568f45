//! Who may stop a running attempt, and its process group's registration with the
//! reaper.

use std::sync::{Arc, Mutex, PoisonError};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Why an attempt was stopped before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Cancelled,
    TimedOut,
    /// Its owner went away (the slot failed, or the agent is exiting).
    Detached,
}

/// What a running attempt and whoever may stop it share: its process group while it
/// is safe to signal, and the first reason to stop it.
#[derive(Debug, Default)]
pub struct Control {
    state: Mutex<ControlState>,
}

#[derive(Debug, Default)]
struct ControlState {
    /// Set from the spawn until just before the leader is reaped: after that the id
    /// may belong to somebody else.
    pgid: Option<u32>,
    stop: Option<Stop>,
    over: bool,
}

impl Control {
    pub fn new() -> Arc<Control> {
        Arc::default()
    }

    /// Stops the attempt (now, or as soon as it has started). The first reason given
    /// is the one reported; a stop after the attempt ended does nothing.
    pub fn stop(&self, why: Stop) {
        let mut state = self.lock();
        if state.over {
            return;
        }
        state.stop.get_or_insert(why);
        kill_group(state.pgid);
    }

    /// Why the attempt was stopped, if it was.
    pub fn stopped(&self) -> Option<Stop> {
        self.lock().stop
    }

    pub(crate) fn started(&self, pgid: u32) {
        let mut state = self.lock();
        state.pgid = Some(pgid);
        if state.stop.is_some() {
            kill_group(state.pgid);
        }
    }

    /// The attempt is about to be reaped (or never started): no more signals; returns
    /// why it was stopped.
    pub(crate) fn end(&self) -> Option<Stop> {
        let mut state = self.lock();
        state.over = true;
        state.pgid = None;
        state.stop
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The owner's hold on a running attempt: stops it on request, and when dropped.
#[derive(Debug)]
pub struct StopHandle(Arc<Control>);

impl StopHandle {
    /// A handle for `control`, and the attempt's side of it.
    pub fn new() -> (StopHandle, Arc<Control>) {
        let control = Control::new();
        (StopHandle(control.clone()), control)
    }

    pub fn cancel(self) {
        self.0.stop(Stop::Cancelled);
    }
}

impl Drop for StopHandle {
    fn drop(&mut self) {
        self.0.stop(Stop::Detached);
    }
}

/// An attempt's process group while it is registered with the reaper. Dropped before
/// [`Group::finished`] (a panic unwound past the attempt) it kills the group first.
#[derive(Debug)]
pub(crate) struct Group {
    pgid: u32,
    done: bool,
}

impl Group {
    pub(crate) fn register(pgid: u32) -> Group {
        // A kill of the agent between spawn and this write leaves the group unprotected;
        // the window is a few microseconds.
        if let Some(reaper) = crate::reaper::installed() {
            reaper.register(pgid);
        }
        Group { pgid, done: false }
    }

    /// The leader is reaped and the output pipes are closed (the group was killed, or
    /// every process of it ended or let go of its output), so the group is over.
    /// Remaining window: a member that closed its output and lives on is no longer
    /// covered; and once the group is empty its id could be reused before the reaper
    /// reads the release, which needs the pid space to wrap meanwhile.
    pub(super) fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.done {
            kill_group(Some(self.pgid));
        }
        if let Some(reaper) = crate::reaper::installed() {
            reaper.release(self.pgid);
        }
    }
}

fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    // ESRCH (already gone) is expected and harmless.
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
}
