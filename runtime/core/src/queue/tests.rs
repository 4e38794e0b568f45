//! Unit tests of the ready queue.

use super::*;
use crate::resources::ResourceKind;

fn fresh(job: u32, count: u32) -> FreshRange {
    FreshRange {
        job: JobId(job),
        next: 0,
        end: count,
    }
}

fn one_core(_: JobId) -> Option<Resources> {
    Some(Resources::cores(1))
}

fn cores(n: u32) -> Resources {
    Resources::cores(n)
}

#[test]
fn take_orders_by_priority_then_lane_then_fifo() {
    let mut queue = ReadyQueue::default();
    queue.push_fresh(0, fresh(1, 2));
    queue.push_fresh(5, fresh(2, 1));
    queue.push_fresh(0, fresh(3, 1));
    queue.push_returned(
        0,
        ReturnedTask {
            task: TaskId(99),
            job: JobId(4),
        },
    );
    let mut out = Vec::new();
    let used = queue.take(&cores(8), cores(100), 100, one_core, &mut out);
    assert_eq!(used, cores(5));
    assert_eq!(
        out,
        vec![
            Taken::Fresh {
                job: JobId(2),
                start: 0,
                end: 1
            },
            Taken::Returned(ReturnedTask {
                task: TaskId(99),
                job: JobId(4),
            }),
            Taken::Fresh {
                job: JobId(1),
                start: 0,
                end: 2
            },
            Taken::Fresh {
                job: JobId(3),
                start: 0,
                end: 1
            },
        ]
    );
    assert!(queue.is_empty());
    assert_eq!(queue.tasks(), 0);
}

#[test]
fn take_skips_too_wide_entries_but_blocks_on_credit() {
    let mut queue = ReadyQueue::default();
    queue.push_fresh(0, fresh(1, 1));
    queue.push_fresh(0, fresh(2, 3));
    queue.push_fresh(0, fresh(3, 5));
    let needs = |job: JobId| Some(cores([16, 4, 1][job.0 as usize - 1]));
    let mut out = Vec::new();
    // Capacity 8: job 1 never fits and is skipped; job 2 needs 4 per task.
    assert_eq!(
        queue.take(&cores(8), cores(6), 100, needs, &mut out),
        cores(4)
    );
    assert_eq!(
        out,
        vec![Taken::Fresh {
            job: JobId(2),
            start: 0,
            end: 1
        }]
    );
    // Remaining credit 2 < 4: no backfill from job 3.
    assert_eq!(queue.need(&cores(8), needs), Some(cores(4)));
    assert_eq!(queue.need(&cores(64), needs), Some(cores(16)));
    assert_eq!(queue.need(&cores(2), needs), Some(cores(1)));
    assert_eq!(queue.entries(), 3);
    assert_eq!(queue.tasks(), 8);
}

#[test]
fn take_needs_every_kind_to_fit_capacity_and_credit() {
    let gpu = |n: u32| Resources::cores(1).with(ResourceKind::GPUS, n);
    let needs = |job: JobId| {
        Some(match job.0 {
            1 => gpu(4),
            2 => gpu(1),
            _ => cores(1),
        })
    };
    let mut queue = ReadyQueue::default();
    queue.push_fresh(0, fresh(1, 1));
    queue.push_fresh(0, fresh(2, 5));
    queue.push_fresh(0, fresh(3, 5));
    let node = cores(8).with(ResourceKind::GPUS, 2);
    // Job 1 needs more GPUs than the node has: skipped. Job 2 is bounded by the
    // node's 2 GPUs of credit, not its 8 cores, and then blocks job 3.
    let mut out = Vec::new();
    let used = queue.take(&node, node, 100, needs, &mut out);
    assert_eq!(used, gpu(2).with(ResourceKind::CORES, 2));
    assert_eq!(
        out,
        vec![Taken::Fresh {
            job: JobId(2),
            start: 0,
            end: 2
        }]
    );
    assert_eq!(queue.need(&node, needs), Some(gpu(1)));
    // A node without GPUs only sees job 3.
    assert_eq!(queue.need(&cores(8), needs), Some(cores(1)));
    out.clear();
    assert_eq!(
        queue.take(&cores(8), cores(3), 100, needs, &mut out),
        cores(3)
    );
    assert_eq!(
        out,
        vec![Taken::Fresh {
            job: JobId(3),
            start: 0,
            end: 3
        }]
    );
}

#[test]
fn entries_without_a_need_are_skipped() {
    let mut queue = ReadyQueue::default();
    queue.push_fresh(0, fresh(1, 1));
    queue.push_fresh(0, fresh(2, 2));
    let needs = |job: JobId| (job.0 != 1).then_some(cores(1));
    let mut out = Vec::new();
    assert_eq!(
        queue.take(&cores(8), cores(8), 100, needs, &mut out),
        cores(2)
    );
    assert_eq!(
        out,
        vec![Taken::Fresh {
            job: JobId(2),
            start: 0,
            end: 2
        }]
    );
    assert_eq!(queue.need(&cores(8), needs), None);
    assert_eq!(queue.tasks(), 1);
}

#[test]
fn remove_job_takes_range_and_returned_tasks() {
    let mut queue = ReadyQueue::default();
    queue.push_fresh(1, fresh(1, 10));
    queue.push_fresh(1, fresh(2, 10));
    for task in [7, 8] {
        queue.push_returned(
            1,
            ReturnedTask {
                task: TaskId(task),
                job: JobId(1),
            },
        );
    }
    let (ranges, returned) = queue.remove_job(JobId(1), 1);
    assert_eq!(ranges.into_iter().collect::<Vec<_>>(), vec![fresh(1, 10)]);
    assert_eq!(returned.len(), 2);
    assert_eq!(queue.tasks(), 10);
    assert_eq!(queue.entries(), 1);
    assert_eq!(
        queue.remove_job(JobId(1), 1),
        (Ranges::default(), Vec::new())
    );
}

#[test]
fn removed_jobs_are_restored_in_submission_order() {
    let mut queue = ReadyQueue::default();
    for job in 1..=5 {
        queue.push_fresh(0, fresh(job, 2));
    }
    let returned = ReturnedTask {
        task: TaskId(50),
        job: JobId(2),
    };
    queue.push_returned(0, returned);
    let (ranges, tasks) = queue.remove_jobs(0, |job| job.0 % 2 == 0);
    assert_eq!(ranges, vec![fresh(2, 2), fresh(4, 2)]);
    assert_eq!(tasks, vec![returned]);
    assert_eq!((queue.entries(), queue.tasks()), (3, 6));
    queue.restore(0, ranges, tasks);
    assert_eq!((queue.entries(), queue.tasks()), (6, 11));
    let mut order = Vec::new();
    queue.for_each_entry(|_, job, fresh| order.push((job.0, fresh.is_some())));
    assert_eq!(
        order,
        vec![
            (2, false),
            (1, true),
            (2, true),
            (3, true),
            (4, true),
            (5, true)
        ]
    );
    let (ranges, tasks) = queue.remove_jobs(0, |_| true);
    assert_eq!((ranges.len(), tasks.len()), (5, 1));
    assert!(queue.is_empty() && queue.levels.is_empty());
}

#[test]
fn taking_a_task_splits_its_range_in_place() {
    let mut queue = ReadyQueue::default();
    for job in 1..=3 {
        queue.push_fresh(0, fresh(job, 10));
    }
    let range = |next, end| FreshRange {
        job: JobId(2),
        next,
        end,
    };
    assert!(queue.take_task(0, JobId(2), QueuedTask::Fresh(4)));
    assert!(queue.take_task(0, JobId(2), QueuedTask::Fresh(0)));
    assert!(queue.take_task(0, JobId(2), QueuedTask::Fresh(9)));
    assert!(!queue.take_task(0, JobId(2), QueuedTask::Fresh(4)), "taken");
    assert!(
        !queue.take_task(0, JobId(2), QueuedTask::Fresh(10)),
        "outside"
    );
    assert!(
        !queue.take_task(1, JobId(2), QueuedTask::Fresh(5)),
        "other level"
    );
    assert_eq!((queue.entries(), queue.tasks()), (4, 27));
    let mut order = Vec::new();
    queue.for_each_entry(|_, job, range| order.push((job.0, range.copied())));
    assert_eq!(
        order,
        vec![
            (1, Some(fresh(1, 10))),
            (2, Some(range(1, 4))),
            (2, Some(range(5, 9))),
            (3, Some(fresh(3, 10))),
        ]
    );
    // Taken out and put back (a hold, a new priority), the parts keep their order.
    let (ranges, returned) = queue.remove_job(JobId(2), 0);
    assert!(returned.is_empty());
    queue.restore(0, ranges.into_iter().collect(), Vec::new());
    // A node takes the parts in index order, then the next job.
    let mut out = Vec::new();
    queue.take(&cores(1), cores(20), 20, one_core, &mut out);
    let taken: Vec<(u32, u32, u32)> = out
        .iter()
        .map(|taken| match *taken {
            Taken::Fresh { job, start, end } => (job.0, start, end),
            Taken::Returned(_) => unreachable!("no returned task"),
        })
        .collect();
    assert_eq!(taken, vec![(1, 0, 10), (2, 1, 4), (2, 5, 9), (3, 0, 3)]);
    queue.push_returned(
        0,
        ReturnedTask {
            task: TaskId(40),
            job: JobId(3),
        },
    );
    assert!(queue.take_task(0, JobId(3), QueuedTask::Returned(TaskId(40))));
    assert!(!queue.take_task(0, JobId(3), QueuedTask::Returned(TaskId(40))));
    assert_eq!((queue.entries(), queue.tasks()), (1, 7));
}

#[test]
fn a_taken_returned_task_is_skipped_then_dropped() {
    let mut queue = ReadyQueue::default();
    let returned = |task| ReturnedTask {
        task: TaskId(task),
        job: JobId(1),
    };
    for task in 1..=4 {
        queue.push_returned(0, returned(task));
    }
    queue.push_fresh(0, fresh(2, 1));
    let take = |queue: &mut ReadyQueue, task| {
        queue.take_task(0, JobId(1), QueuedTask::Returned(TaskId(task)))
    };
    assert!(take(&mut queue, 2));
    assert!(!take(&mut queue, 2), "taken already");
    assert_eq!((queue.entries(), queue.tasks()), (4, 4));
    assert_eq!(queue.check_dead(), Ok(()));
    let mut seen = 0;
    queue.for_each_entry(|_, _, _| seen += 1);
    assert_eq!(seen, 4, "readers skip the dead entry");
    // Back after its attempt: its dead entry goes first, it queues at the back.
    queue.push_returned(0, returned(2));
    assert!(queue.taken.is_empty());
    let mut out = Vec::new();
    queue.take(&cores(1), cores(10), 10, one_core, &mut out);
    let order: Vec<u64> = out
        .iter()
        .map(|taken| match *taken {
            Taken::Returned(task) => task.task.0,
            Taken::Fresh { job, .. } => 100 + u64::from(job.0),
        })
        .collect();
    assert_eq!(order, vec![1, 3, 4, 2, 102]);
    assert!(queue.is_empty() && queue.levels.is_empty());

    // Half the lane dead: dropped at once.
    for task in 1..=4 {
        queue.push_returned(0, returned(task));
    }
    assert!(take(&mut queue, 1) && take(&mut queue, 3));
    assert_eq!(queue.levels[&Reverse(0)].returned.len(), 4, "half: kept");
    assert!(take(&mut queue, 4));
    assert_eq!(queue.levels[&Reverse(0)].returned.len(), 1, "dropped");
    assert!(queue.taken.is_empty() && queue.check_dead().is_ok());
    // Removing the job drops its level's dead entries with it.
    queue.push_returned(0, returned(5));
    assert!(take(&mut queue, 5));
    let (_, left) = queue.remove_job(JobId(1), 0);
    assert_eq!(left, vec![returned(2)]);
    assert!(queue.taken.is_empty() && queue.levels.is_empty());
    // The last live entry taken: the level goes, dead entries and all.
    queue.push_returned(0, returned(6));
    queue.push_returned(0, returned(7));
    assert!(take(&mut queue, 6) && take(&mut queue, 7));
    assert!(queue.is_empty() && queue.levels.is_empty() && queue.taken.is_empty());
}
