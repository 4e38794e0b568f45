//! Capturing one output stream of an attempt: inline up to a limit, spilled whole to
//! a file beyond it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use saker_wire::messages::Output;

use super::Launch;

/// One output stream being read: the first `inline_limit` bytes are kept; if the
/// stream is longer, all of it goes to a spill file and the path is reported.
#[derive(Debug)]
pub(super) struct Capture<'a> {
    /// Until its end (or a read error).
    pub(super) stream: Option<File>,
    launch: &'a Launch,
    name: &'static str,
    inline: Vec<u8>,
    total: u64,
    spill: Option<(File, PathBuf)>,
    spill_failed: Option<String>,
}

impl<'a> Capture<'a> {
    pub(super) fn new(stream: File, launch: &'a Launch, name: &'static str) -> Self {
        Capture {
            stream: Some(stream),
            launch,
            name,
            inline: Vec::new(),
            total: 0,
            spill: None,
            spill_failed: None,
        }
    }

    /// One read (the stream was reported ready, so it does not block).
    pub(super) fn read_some(&mut self, buf: &mut [u8]) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        match stream.read(buf) {
            Ok(0) => self.stream = None,
            Ok(n) => self.push(&buf[..n]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::warn!(%error, stream = self.name, "reading task output failed");
                self.stream = None;
            }
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let n = chunk.len();
        self.total += n as u64;
        if self.spill.is_none()
            && self.spill_failed.is_none()
            && self.inline.len() + n <= self.launch.inline_limit
        {
            self.inline.extend_from_slice(chunk);
            return;
        }
        if self.spill.is_none() && self.spill_failed.is_none() {
            let path = self
                .launch
                .spill_dir
                .join(format!("{}.{}", self.launch.spill_stem, self.name));
            match open_spill(&path, &self.inline) {
                Ok(file) => self.spill = Some((file, path)),
                Err(error) => self.spill_failed = Some(format!("{}: {error}", path.display())),
            }
            let room = self.launch.inline_limit.saturating_sub(self.inline.len());
            self.inline.extend_from_slice(&chunk[..room.min(n)]);
        }
        if let Some((file, path)) = &mut self.spill
            && let Err(error) = file.write_all(chunk)
        {
            self.spill_failed = Some(format!("{}: {error}", path.display()));
            self.spill = None;
        }
    }

    pub(super) fn finish(self) -> Output {
        let spill_path = match (self.spill, self.spill_failed) {
            (Some((mut file, path)), None) => {
                let _ = file.flush();
                Some(path.display().to_string())
            }
            (_, Some(reason)) => {
                tracing::warn!(%reason, "could not spill task output; only the inline part is kept");
                None
            }
            (None, None) => None,
        };
        Output {
            inline: self.inline,
            total_bytes: self.total,
            spill_path,
        }
    }
}

fn open_spill(path: &Path, already: &[u8]) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = File::create(path)?;
    file.write_all(already)?;
    Ok(file)
}
