use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saker_journal::{JournalWriter, SyncMode, WriterOptions, read_all};

use crate::{TestRecord, options, record, records};

/// Safety net so a broken writer fails the test instead of hanging it; never reached
/// when the writer works.
const HANG_GUARD: Duration = Duration::from_secs(60);

#[test]
fn appends_queued_from_many_threads_commit_as_one_group() {
    let directory = tempfile::tempdir().unwrap();
    let writer = Arc::new(JournalWriter::open(directory.path(), options()).unwrap());

    // Hold the writer thread inside the first callback until every other append is queued.
    let (entered_sender, entered) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    writer.append(vec![record(0)], move |result| {
        result.unwrap();
        entered_sender.send(()).unwrap();
        released.recv_timeout(HANG_GUARD).unwrap();
    });
    entered.recv_timeout(HANG_GUARD).unwrap();

    let log = Arc::new(Mutex::new(Vec::new()));
    let producers: Vec<_> = (0..4u64)
        .map(|thread| {
            let writer = Arc::clone(&writer);
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for sequence in 0..50u64 {
                    let log = Arc::clone(&log);
                    let task = 1 + thread * 50 + sequence;
                    writer.append(vec![record(task)], move |result| {
                        result.unwrap();
                        log.lock().unwrap().push((thread, sequence));
                    });
                }
            })
        })
        .collect();
    for producer in producers {
        producer.join().unwrap();
    }
    release.send(()).unwrap();

    let writer = Arc::into_inner(writer).expect("producers are joined");
    let stats = writer.close().unwrap();
    assert_eq!(stats.appends_submitted, 201);
    assert_eq!(stats.groups_committed, 2, "{stats:?}");
    assert_eq!(stats.largest_group_records, 200);
    assert_eq!(stats.data_syncs, 1 + 2, "segment header + one per group");

    let log = log.lock().unwrap();
    assert_eq!(log.len(), 200);
    for thread in 0..4 {
        let sequences: Vec<u64> = log
            .iter()
            .filter(|(t, _)| *t == thread)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            sequences,
            (0..50).collect::<Vec<_>>(),
            "thread {thread} callbacks in order"
        );
    }
    let mut read = read_all::<TestRecord>(directory.path()).unwrap().records;
    read.sort_by_key(|record| match record {
        TestRecord::Submitted { task, .. } | TestRecord::Accepted { task, .. } => *task,
    });
    assert_eq!(read, records(0..201));
}

#[test]
fn callbacks_run_in_order_once_the_records_are_on_disk() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for index in 0..100u64 {
        let log = Arc::clone(&log);
        let path = directory.path().to_path_buf();
        writer.append(vec![record(index)], move |result| {
            result.unwrap();
            // Runs on the writer thread: the group holding `index` has been written and
            // synced, and nothing later has been written yet.
            let outcome = read_all::<TestRecord>(&path).unwrap();
            assert_eq!(outcome.torn_tail, None);
            assert!(outcome.records.len() > index as usize);
            assert_eq!(outcome.records[index as usize], record(index));
            log.lock().unwrap().push(index);
        });
    }
    let stats = writer.close().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
    assert!(
        stats.data_syncs > stats.groups_committed,
        "one sync per group plus the header"
    );
}

#[test]
fn sync_mode_none_skips_group_syncs_but_syncs_at_close() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(
        directory.path(),
        WriterOptions {
            sync: SyncMode::None,
            ..options()
        },
    )
    .unwrap();
    for index in 0..10 {
        writer.append_blocking(vec![record(index)]).unwrap();
    }
    let stats = writer.close().unwrap();
    assert_eq!(stats.groups_committed, 10);
    assert_eq!(stats.data_syncs, 1);
    assert_eq!(stats.directory_syncs, 0);
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        records(0..10)
    );
}

#[test]
fn dropping_the_writer_commits_and_acknowledges_everything_queued() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    for index in 0..50 {
        let acknowledged = Arc::clone(&acknowledged);
        writer.append(vec![record(index)], move |result| {
            acknowledged.lock().unwrap().push(result.is_ok());
        });
    }
    drop(writer);
    assert_eq!(*acknowledged.lock().unwrap(), vec![true; 50]);
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        records(0..50)
    );
}

#[test]
fn a_panicking_callback_does_not_stop_the_writer() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    writer.append(vec![record(0)], |_| panic!("callback panics on purpose"));
    writer.append_blocking(vec![record(1)]).unwrap();
    writer.close().unwrap();
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        records(0..2)
    );
}
