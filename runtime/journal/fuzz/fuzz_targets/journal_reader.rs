//! Arbitrary bytes as journal segments: reading them must give records or an error,
//! never a panic, and a valid prefix must never be lost to a torn tail.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;

static RUN: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input into two segments (a torn tail is only
    // forgiven in the last one).
    let (split, rest) = match data.split_first() {
        Some((split, rest)) => (*split as usize * rest.len() / 256, rest),
        None => (0, data),
    };
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let dir = std::path::PathBuf::from(base).join(format!(
        "saker-journal-fuzz-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("journal-000001.log"), &rest[..split]).unwrap();
    std::fs::write(dir.join("journal-000002.log"), &rest[split..]).unwrap();
    let _ = saker_journal::read_all::<serde_json::Value>(&dir);
    let _ = std::fs::remove_dir_all(&dir);
});
