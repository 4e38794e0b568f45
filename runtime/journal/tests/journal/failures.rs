use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use saker_journal::{JournalError, JournalWriter, WriterOptions, read_all};
use serde::{Deserialize, Serialize};

use crate::{TestRecord, options, record};

#[test]
fn open_fails_when_the_directory_would_be_under_a_file() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("not-a-directory");
    std::fs::write(&file, b"").unwrap();
    let error = JournalWriter::<TestRecord>::open(&file.join("journal"), options()).unwrap_err();
    assert!(
        matches!(error, JournalError::CreateDirectory { .. }),
        "{error:?}"
    );
    assert!(error.io_error().is_some());
}

#[test]
fn failure_to_start_a_segment_reaches_every_pending_and_later_callback() {
    let root = tempfile::tempdir().unwrap();
    let directory = root.path().join("journal");
    let writer = JournalWriter::open(
        &directory,
        WriterOptions {
            max_segment_bytes: 200,
            ..options()
        },
    )
    .unwrap();
    // The open segment stays writable; creating the next one cannot succeed.
    std::fs::remove_dir_all(&directory).unwrap();

    let mut index = 0;
    let first_error = loop {
        assert!(index < 100, "rotation never happened");
        match writer.append_blocking(vec![record(index)]) {
            Ok(()) => index += 1,
            Err(error) => break error,
        }
    };
    assert!(index > 0, "records before the rotation were durable");
    assert!(
        matches!(first_error, JournalError::CreateSegment { .. }),
        "{first_error:?}"
    );
    assert_eq!(
        first_error.io_error().unwrap().kind(),
        std::io::ErrorKind::NotFound
    );

    let later = Arc::new(Mutex::new(Vec::new()));
    for index in 0..3 {
        let later = Arc::clone(&later);
        writer.append(vec![record(index)], move |result| {
            later.lock().unwrap().push(result)
        });
    }
    let closed = writer.close().unwrap_err();
    assert!(
        matches!(closed, JournalError::CreateSegment { .. }),
        "{closed:?}"
    );
    let later = later.lock().unwrap();
    assert_eq!(later.len(), 3, "every callback ran");
    for result in later.iter() {
        let error = result.as_ref().unwrap_err();
        assert!(
            matches!(error, JournalError::WriterFailed { cause } if matches!(**cause, JournalError::CreateSegment { .. })),
            "{error:?}"
        );
        assert_eq!(
            error.io_error().unwrap().kind(),
            std::io::ErrorKind::NotFound
        );
    }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Flaky {
    Fine(u32),
    /// JSON object keys must be strings: this never encodes.
    Unencodable(BTreeMap<(u8, u8), u8>),
}

#[test]
fn an_unencodable_append_is_refused_whole_and_the_writer_carries_on() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    let appends = vec![
        vec![Flaky::Fine(1)],
        vec![Flaky::Fine(2), Flaky::Unencodable([((1, 2), 3)].into())],
        vec![Flaky::Fine(3)],
    ];
    for (index, append) in appends.into_iter().enumerate() {
        let results = Arc::clone(&results);
        writer.append(append, move |result| {
            results.lock().unwrap().push((index, result))
        });
    }
    writer.close().unwrap();
    let results = results.lock().unwrap();
    assert_eq!(
        results.iter().map(|(index, _)| *index).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(results[0].1.is_ok() && results[2].1.is_ok());
    assert!(
        matches!(results[1].1, Err(JournalError::EncodeRecord { .. })),
        "{results:?}"
    );
    let read = read_all::<Flaky>(directory.path()).unwrap().records;
    assert_eq!(read, [Flaky::Fine(1), Flaky::Fine(3)]);
}
