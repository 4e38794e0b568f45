//! A long-lived `saker pilot` for tests that submit to it as users do.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{run, saker};

/// A `saker pilot` of one agent with `slots` slots, shut down when dropped (also when
/// a test fails, which would otherwise leave it running).
pub struct Service {
    pub pilot: PathBuf,
    pub child: Child,
}

impl Service {
    pub fn start(dir: &Path, slots: u32) -> Service {
        Service::start_with(dir, slots, false)
    }

    /// With `resume`, from the journal a killed root left (`saker pilot --resume`).
    pub fn start_with(dir: &Path, slots: u32, resume: bool) -> Service {
        let slots = slots.to_string();
        let mut args = vec!["--agents", "1", "--slots", &slots];
        if resume {
            args.push("--resume");
        }
        Service::start_args(dir, &args)
    }

    /// `saker pilot` with `args` (its shape and options) in `dir/pilot`.
    pub fn start_args(dir: &Path, args: &[&str]) -> Service {
        Service::spawn(dir, args, Stdio::inherit())
    }

    /// [`Self::start_args`], the root's log (stderr) going to `log`.
    pub fn start_logged(dir: &Path, args: &[&str], log: &Path) -> Service {
        let file = std::fs::File::create(log).unwrap();
        Service::spawn(dir, args, Stdio::from(file))
    }

    fn spawn(dir: &Path, args: &[&str], stderr: Stdio) -> Service {
        let pilot = dir.join("pilot");
        let mut command = saker();
        command.arg("pilot").args(args).arg("--dir").arg(&pilot);
        let child = command.stdin(Stdio::null()).stderr(stderr).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !pilot.join("client.json").exists() {
            assert!(Instant::now() < deadline, "the pilot did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Service { pilot, child }
    }

    /// SIGKILLs the root, then its agent (by pid: it would otherwise wait to reattach),
    /// and removes the endpoint file a resumed root writes anew.
    pub fn kill_root(mut self) {
        let agent = super::agent_pid(&self.pilot, 1);
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
        if let Some(agent) = agent {
            super::sigkill(agent);
        }
        let _ = std::fs::remove_file(self.pilot.join("client.json"));
        // Its shutdown in drop finds nobody to ask.
    }
}

impl Service {
    /// SIGKILLs the root (no goodbye, tasks mid-flight) and waits for a standby to
    /// answer in its place; returns when the root was killed.
    pub fn kill_for_standby(&mut self) -> Instant {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let killed = Instant::now();
        super::wait_for("the standby to answer", Duration::from_secs(30), || {
            run(saker().args(["status", "--dir"]).arg(&self.pilot))
                .status
                .success()
        });
        killed
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = run(saker().args(["shutdown", "--dir"]).arg(&self.pilot));
        let _ = self.child.wait();
    }
}
