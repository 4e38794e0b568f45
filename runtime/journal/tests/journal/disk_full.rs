//! A full disk on a real, size-limited tmpfs: the writer holds what does not fit and
//! writes it, in order and whole, once space returns.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use saker_journal::{JournalWriter, WriterOptions, read_all};

use crate::{TestRecord, options};

/// Records of about a kilobyte: a few fill a page of the tmpfs.
fn large(range: std::ops::Range<u64>) -> Vec<TestRecord> {
    range
        .map(|task| TestRecord::Submitted {
            task,
            command: format!("/bin/echo {}", "x".repeat(1000)),
        })
        .collect()
}

/// A tmpfs of `size` mounted for the test (root only: CI runs as root), unmounted on drop.
pub struct Tmpfs {
    path: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Tmpfs {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("tmpfs");
        std::fs::create_dir(&path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "mounting a tmpfs needs root (the test runs a real full disk)"
        );
        Tmpfs {
            path,
            _parent: parent,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the file system up with one file: writes until the disk says it is full.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0x5a; 4096];
        loop {
            if let Err(error) = file.write_all(&block) {
                assert_eq!(error.kind(), std::io::ErrorKind::StorageFull, "{error}");
                break filler;
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

#[test]
fn appends_held_on_a_full_disk_are_written_in_order_once_space_returns() {
    let tmpfs = Tmpfs::mount("256k");
    let directory = tmpfs.path().join("journal");
    let writer = JournalWriter::open(
        &directory,
        WriterOptions {
            // Small segments: rotations happen while the disk is full, too.
            max_segment_bytes: 16 * 1024,
            space_retry: Duration::from_millis(10),
            ..options()
        },
    )
    .unwrap();
    for append in large(0..10).chunks(2) {
        writer.append_blocking(append.to_vec()).unwrap();
    }
    let filler = tmpfs.fill();

    let (sender, done) = mpsc::channel();
    for index in 10..60u64 {
        let sender = sender.clone();
        writer.append(large(index..index + 1), move |outcome| {
            sender.send((index, outcome.map(drop))).unwrap();
        });
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !writer.is_waiting_for_space() {
        assert!(Instant::now() < deadline, "the writer finds the disk full");
        std::thread::yield_now();
    }
    // What still fitted the segment's last page was acknowledged; nothing after it is
    // while the disk stays full.
    let mut acknowledged = Vec::new();
    while let Ok((index, outcome)) = done.try_recv() {
        outcome.unwrap();
        acknowledged.push(index);
    }
    let refusals = writer.stats().space_refusals;
    while writer.stats().space_refusals < refusals + 3 {
        assert!(Instant::now() < deadline, "the writer keeps trying");
        std::thread::yield_now();
    }
    assert!(
        done.try_recv().is_err(),
        "nothing is acknowledged without space"
    );
    assert!(
        acknowledged.len() < 50,
        "the disk filled before the last append"
    );

    std::fs::remove_file(filler).unwrap();
    while acknowledged.len() < 50 {
        let (index, outcome) = done.recv_timeout(Duration::from_secs(20)).unwrap();
        outcome.unwrap();
        acknowledged.push(index);
    }
    assert_eq!(acknowledged, (10..60).collect::<Vec<_>>(), "in queue order");
    assert!(!writer.is_waiting_for_space());
    writer.close().unwrap();

    let read = read_all::<TestRecord>(&directory).unwrap();
    assert!(read.torn_tail.is_none(), "{:?}", read.torn_tail);
    assert_eq!(read.records, large(0..60), "every record once, in order");
}
