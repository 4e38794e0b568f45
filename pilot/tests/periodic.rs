//! The skip policy of periodic jobs with real processes and a deterministic gap: the
//! only slot is held by a higher-priority blocker for 3.5 periods, so occurrences are
//! missed on purpose; the journal then says exactly what ran when.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Service, run, saker, wait_for};
use saker_client::results::Timestamp;
use saker_root::records::Record;

const SECOND: u64 = 1_000_000;

/// What the journal of a stopped pilot says of one periodic job: by occurrence number,
/// its scheduled time and the start times of its results.
struct Occurrences {
    first: u64,
    by_number: BTreeMap<u32, (u64, Vec<u64>)>,
}

fn occurrences(pilot: &std::path::Path, first_job: u64) -> Occurrences {
    let journal = pilot.join(saker_root::pilot::JOURNAL_DIR);
    let records = saker_journal::read_all::<Record>(&journal)
        .expect("the journal reads")
        .records;
    let mut scheduled: BTreeMap<u64, u64> = BTreeMap::new();
    let mut number: BTreeMap<u64, u32> = BTreeMap::from([(first_job, 0)]);
    let mut starts: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for record in &records {
        match record {
            Record::Submit {
                job,
                submitted_unix_us,
                request,
                ..
            } => {
                let at = request
                    .spec
                    .not_before
                    .map_or(*submitted_unix_us, Timestamp::unix_micros);
                scheduled.insert(u64::from(job.0), at);
            }
            Record::Occurrence {
                schedule,
                job,
                occurrence,
            } => {
                assert_eq!(u64::from(schedule.0), first_job);
                number.insert(u64::from(job.0), *occurrence);
            }
            Record::Result(result) => {
                assert_eq!(
                    result.state,
                    saker_client::results::TerminalState::Succeeded,
                    "{result:?}"
                );
                let start = result.start_time.expect("it ran").unix_micros();
                starts
                    .entry(u64::from(result.job.0))
                    .or_default()
                    .push(start);
            }
            _ => {}
        }
    }
    let by_number = number
        .iter()
        .map(|(job, n)| {
            let ran = starts.remove(job).unwrap_or_default();
            (*n, (scheduled[job], ran))
        })
        .collect();
    Occurrences {
        first: scheduled[&first_job],
        by_number,
    }
}

/// `--every 1s --count 6` on one slot that a priority-10 blocker holds until 3.5 s
/// after the first occurrence's time: the first occurrence runs once, late, when the
/// slot frees; the occurrences whose times passed before it started never run (none
/// is even submitted while it waits); the later ones run at their times on the
/// schedule's grid, each once; the count ends the schedule.
#[test]
fn a_periodic_job_skips_occurrences_missed_while_its_slot_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 1);
    let pilot = service.pilot.clone();
    let marker = dir.path().join("go");
    let submit = |args: &[&str]| {
        let output = run(saker().arg("submit").arg("--dir").arg(&pilot).args(args));
        assert!(output.status.success(), "submit {args:?}");
    };
    let blocker = format!("while [ ! -e {} ]; do sleep 0.02; done", marker.display());
    submit(&["--priority", "10", "--", "sh", "-c", &blocker]);
    let submitted = Timestamp::now().unix_micros();
    submit(&["--every", "1s", "--count", "6", "--", "echo", "tick"]);
    // The gap: hold the slot until 3.5 periods after the first occurrence's time.
    let release = submitted + 3 * SECOND + SECOND / 2;
    let status = || {
        let output = run(saker().args(["status", "--dir"]).arg(&pilot));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    while Timestamp::now().unix_micros() < release {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = status();
    assert!(
        held.contains("jobs      2\n"),
        "nothing stacked up behind the pending occurrence:\n{held}"
    );
    std::fs::write(&marker, b"").unwrap();
    wait_for("the schedule to end", Duration::from_secs(30), || {
        let now = status();
        !now.contains("periodic") && now.contains("queued 0  running 0")
    });
    drop(service);

    let seen = occurrences(&pilot, 2);
    let first = seen.first;
    assert!(first >= submitted && first < submitted + 2 * SECOND);
    let (_, ran) = &seen.by_number[&0];
    assert_eq!(ran.len(), 1, "the first occurrence ran once");
    let late = ran[0];
    assert!(late >= release, "it waited for the slot");
    // The next is the first time on the grid still ahead when the root saw the start
    // (within a second of it on a loaded machine); those before it were skipped.
    let numbers: Vec<u32> = seen.by_number.keys().copied().collect();
    let next = numbers[1];
    assert!(
        first + u64::from(next) * SECOND > late
            && first + u64::from(next - 1) * SECOND <= late + SECOND,
        "occurrence {next} after a start {} ms late",
        (late - first) / 1_000
    );
    assert_eq!(
        numbers,
        [0].into_iter().chain(next..6).collect::<Vec<u32>>(),
        "occurrences 1 to {} skipped, then each to the count",
        next - 1
    );
    for (&number, (at, ran)) in seen.by_number.iter().skip(1) {
        let due = first + u64::from(number) * SECOND;
        assert_eq!(*at, due, "occurrence {number} keeps the schedule's grid");
        assert_eq!(ran.len(), 1, "occurrence {number} ran once");
        assert!(
            ran[0] + 5_000 >= due && ran[0] < due + 900_000,
            "occurrence {number} started {} ms from its time",
            (ran[0] as i64 - due as i64) / 1_000
        );
    }
}
