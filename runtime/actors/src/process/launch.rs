//! What one attempt is started with: its command line and variables as
//! `posix_spawn` takes them, its working directory and captured output.

use std::ffi::{CStr, CString, NulError};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything needed to start one attempt.
///
/// The command line and the task's variables are held as `posix_spawn` takes them, C
/// strings built once, when the launch is (see [`crate::launch`]): that is the one copy
/// of a task's arguments and variables on their way from the job to the process.
#[derive(Debug, Clone)]
pub struct Launch {
    argv: Vec<CString>,
    /// Overrides applied on top of the agent's own environment, as `KEY=value`, one per
    /// key.
    env: Vec<CString>,
    /// An argument or variable held a NUL byte, which no C string can: the launch is
    /// kept, cut short at the NUL, but fails to start.
    nul: bool,
    pub cwd: Option<PathBuf>,
    pub time_limit: Option<Duration>,
    /// Bytes of each stream kept in memory and returned inline.
    pub inline_limit: usize,
    /// Where a stream longer than `inline_limit` is written in full.
    pub spill_dir: PathBuf,
    /// File stem for spill files, unique per attempt (e.g. `t42.a7`).
    pub spill_stem: String,
    /// A socket the process gets as its descriptor 3 (an MPI rank's `PMI_FD`), or
    /// why none could be made: then the launch fails to start, with that reason.
    pub pmi_socket: Option<Result<Arc<OwnedFd>, String>>,
}

impl Launch {
    /// A launch with an empty command line and no variables of its own yet, with room
    /// for `args` arguments and `vars` variables; output spills to `spill_dir` under
    /// `spill_stem`.
    pub fn new(args: usize, vars: usize, spill_dir: PathBuf, spill_stem: String) -> Launch {
        Launch {
            argv: Vec::with_capacity(args),
            env: Vec::with_capacity(vars),
            nul: false,
            cwd: None,
            time_limit: None,
            inline_limit: 0,
            spill_dir,
            spill_stem,
            pmi_socket: None,
        }
    }

    /// The command line, program first.
    pub fn argv(&self) -> &[CString] {
        &self.argv
    }

    /// The task's own variables as `KEY=value`, one per key, in the order their last
    /// values were set.
    pub fn env(&self) -> &[CString] {
        &self.env
    }

    /// The program, as given (not looked up), if the command line is not empty.
    pub fn program(&self) -> Option<&CStr> {
        self.argv.first().map(CString::as_c_str)
    }

    /// Whether an argument or variable held a NUL byte: such a launch cannot start.
    pub fn has_nul(&self) -> bool {
        self.nul
    }

    /// Appends `arg` to the command line (copying it).
    pub fn arg(&mut self, arg: &[u8]) {
        let arg = self.c_string(CString::new(arg));
        self.argv.push(arg);
    }

    /// Appends an argument already built, without its terminating NUL. Allocated with
    /// room for exactly one byte more, it becomes a C string in place.
    pub fn arg_bytes(&mut self, arg: Vec<u8>) {
        let arg = self.c_string(CString::new(arg));
        self.argv.push(arg);
    }

    /// Sets the task's variable `key` to `value` (copying them): a key set again keeps
    /// only its last value.
    pub fn set_var(&mut self, key: &[u8], value: &[u8]) {
        let mut entry = Vec::with_capacity(key.len() + value.len() + 2);
        entry.extend_from_slice(key);
        entry.push(b'=');
        entry.extend_from_slice(value);
        // What the task will read as the key: up to the first `=` (a valid key has none).
        let key = entry.split(|&b| b == b'=').next().unwrap_or_default();
        if let Some(earlier) = self.env.iter().position(|e| sets(e, key)) {
            self.env.remove(earlier);
        }
        let entry = self.c_string(CString::new(entry));
        self.env.push(entry);
    }

    /// The value the task's own variables give `key`, if they set it.
    pub fn var(&self, key: &[u8]) -> Option<&[u8]> {
        let entry = self.env.iter().find(|entry| sets(entry, key))?;
        Some(&entry.to_bytes()[key.len() + 1..])
    }

    /// This launch run through another program: `front` before its command line.
    pub fn wrapped(&self, front: impl IntoIterator<Item = Vec<u8>>) -> Launch {
        let mut wrapped = self.clone();
        let mut argv: Vec<CString> = Vec::with_capacity(self.argv.len() + 8);
        for arg in front {
            argv.push(wrapped.c_string(CString::new(arg)));
        }
        argv.append(&mut wrapped.argv);
        wrapped.argv = argv;
        wrapped
    }

    /// Whether the task's own variables set `key`.
    pub fn sets_var(&self, key: &[u8]) -> bool {
        self.env.iter().any(|entry| sets(entry, key))
    }

    /// Sets the task's variable `key` to the number `value`.
    pub fn set_var_number(&mut self, key: &[u8], value: u64) {
        let mut digits = [0u8; 20];
        self.set_var(key, decimal(value, &mut digits));
    }

    /// A C string, or on a NUL byte, the bytes before it and the launch marked.
    fn c_string(&mut self, made: Result<CString, NulError>) -> CString {
        made.unwrap_or_else(|error| {
            self.nul = true;
            let at = error.nul_position();
            let mut bytes = error.into_vec();
            bytes.truncate(at);
            CString::new(bytes).unwrap_or_default()
        })
    }
}

#[cfg(test)]
impl Launch {
    /// A launch of `argv` with the variables `env` (set in order), spilling to `dir`.
    pub(crate) fn of(argv: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> Launch {
        let mut launch = Launch::new(argv.len(), env.len(), dir.to_path_buf(), "t".into());
        for arg in argv {
            launch.arg(arg.as_bytes());
        }
        for (key, value) in env {
            launch.set_var(key.as_bytes(), value.as_bytes());
        }
        launch
    }

    /// The command line as strings (cut short at a NUL).
    pub(crate) fn argv_strs(&self) -> Vec<&str> {
        self.argv.iter().map(|s| s.to_str().unwrap()).collect()
    }

    /// The task's own variables as `KEY=value` strings (cut short at a NUL).
    pub(crate) fn env_strs(&self) -> Vec<&str> {
        self.env.iter().map(|s| s.to_str().unwrap()).collect()
    }
}

/// Whether the environment entry `entry` (`KEY=value`) sets `key`.
pub(crate) fn sets(entry: &CStr, key: &[u8]) -> bool {
    let entry = entry.to_bytes();
    entry.len() > key.len() && entry.starts_with(key) && entry[key.len()] == b'='
}

/// `value` in decimal, written into the end of `buf`.
pub(crate) fn decimal(mut value: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buf[start..];
        }
    }
}
