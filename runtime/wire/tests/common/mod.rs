//! Sample messages and helpers shared by the integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use saker_core::ResourceKind;
use saker_wire::{
    ActorAnswer, ActorCall, ActorEvent, ActorFault, ActorReply, ActorSpawn, ActorStatus,
    Assignment, AttemptId, Command, Dispatch, EnvVar, Frame, FrameDecoder, FromAgent, Function,
    GangLaunch, GangLaunchEnded, GangPart, Held, HeldActor, Hello, Hpc, ItemData, ItemRead,
    ItemWritten, ItemsWritten, JobDef, JobId, LaunchRanks, LauncherKind, MpiKind, NamedAmount,
    NodeId, Outcome, Output, Payload, Placement, PmiFence, PmiTimes, ProcessEnd, Report, Resources,
    ResultBody, Started, TaskId, TaskResult, ToAgent, Welcome, WireError,
};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn command(job: &mut JobDef) -> &mut Command {
    let Payload::Command(command) = &mut job.payload else {
        panic!("a command job");
    };
    command
}

/// A function job: a payload for a persistent worker, with bytes no text would hold.
pub fn function_job(job: u32) -> JobDef {
    JobDef {
        payload: Payload::Function(Function {
            kind: "python".to_owned(),
            data: (0..=255u8).chain([0, 0xff, b'\n']).collect(),
        }),
        ..job_def(job)
    }
}

pub fn job_def(job: u32) -> JobDef {
    JobDef {
        job: JobId(job),
        payload: Payload::Command(Command {
            argv: vec![
                "/usr/bin/simulate".to_owned(),
                "--input=data/{index}.h5".to_owned(),
                "ünïcode-arg".to_owned(),
            ],
            env: vec![
                EnvVar {
                    key: "OMP_NUM_THREADS".to_owned(),
                    value: "4".to_owned(),
                },
                EnvVar {
                    key: "EMPTY".to_owned(),
                    value: String::new(),
                },
            ],
            cwd: Some("/scratch/user/run-42".to_owned()),
        }),
        resources: Resources::cores(4)
            .with(ResourceKind::GPUS, 1)
            .with(ResourceKind::MEMORY_MIB, 8192)
            .with(ResourceKind::custom(2).expect("a custom kind"), 3),
        placement: if job.is_multiple_of(2) {
            Placement::Single
        } else {
            Placement::Gang { nodes: job + 2 }
        },
        hpc: (!job.is_multiple_of(2)).then_some(Hpc {
            ranks: 2 * (job + 2) - 1,
            ranks_per_node: 2,
            cores_per_rank: 2,
            mpi: [
                MpiKind::None,
                MpiKind::Openmpi,
                MpiKind::Mpich,
                MpiKind::Pmi,
            ][job as usize % 4],
            launcher: LauncherKind::Agents,
        }),
        time_limit_ms: 3_600_000,
        inline_output_bytes: 4096,
        is_array: true,
        reads: vec!["part-1".to_owned(), "big.h5".to_owned()],
        writes: vec!["out".to_owned()],
    }
}

fn item_read() -> ItemRead {
    ItemRead {
        item: "part-1".to_owned(),
        reader: NodeId(5),
        request: 77,
        offset: 3 << 20,
        len: 1 << 20,
    }
}

fn item_data(error: bool) -> ItemData {
    ItemData {
        item: "part-1".to_owned(),
        reader: NodeId(5),
        request: 77,
        offset: 3 << 20,
        total: 5 << 30,
        data: if error {
            Vec::new()
        } else {
            (0..4096).map(|b| b as u8).collect()
        },
        error: error.then(|| "cannot read it on its holder: gone".to_owned()),
    }
}

pub fn dispatch(jobs: u32, tasks: u32) -> Dispatch {
    Dispatch {
        jobs: (0..jobs).map(job_def).map(Arc::new).collect(),
        tasks: (0..tasks)
            .map(|index| Assignment {
                task: TaskId(1_000_000 + u64::from(index)),
                attempt: AttemptId(u64::from(index % 3)),
                job: JobId(index % jobs.max(1)),
                index,
            })
            .collect(),
        forget: (0..jobs).map(|job| JobId(1000 + job)).collect(),
        gang: None,
        durable: 42,
    }
}

/// One of every `ToAgent` variant, with optional and empty fields exercised.
pub fn to_agent_samples() -> Vec<ToAgent> {
    let mut minimal_job = job_def(9);
    command(&mut minimal_job).cwd = None;
    command(&mut minimal_job).env.clear();
    minimal_job.is_array = false;
    minimal_job.resources = Resources::cores(1);
    vec![
        ToAgent::Welcome(Welcome {
            node: NodeId(17),
            pilot_id: "pilot-7f3a9c".to_owned(),
            capacity: Resources::cores(128)
                .with(ResourceKind::GPUS, 4)
                .with(ResourceKind::custom(0).unwrap(), 4),
        }),
        ToAgent::Refused {
            reason: "duplicate node id 17".to_owned(),
        },
        ToAgent::Refused {
            reason: String::new(),
        },
        ToAgent::ItemRead(item_read()),
        ToAgent::ItemData(item_data(false)),
        ToAgent::ItemData(item_data(true)),
        ToAgent::ItemHolders(saker_wire::ItemHolders {
            item: "part-1".to_owned(),
            holders: vec![saker_wire::ItemHolder {
                node: NodeId(2),
                addr: "10.1.2.3:41000".to_owned(),
            }],
            upstream: Some(saker_wire::ItemHolder {
                node: NodeId(5),
                addr: "10.1.2.6:41000".to_owned(),
            }),
        }),
        ToAgent::ItemsFreed {
            items: vec!["obj-0a".to_owned(), "part-2".to_owned()],
        },
        ToAgent::CopyDrop(saker_wire::CopyDrop {
            item: "obj-0b".to_owned(),
            allowed: true,
        }),
        ToAgent::ObjectStored(saker_wire::ObjectStored {
            item: "obj-0d".to_owned(),
            bytes: 5 << 30,
            error: None,
        }),
        ToAgent::ObjectStored(saker_wire::ObjectStored {
            item: "obj-0d".to_owned(),
            bytes: 0,
            error: Some("this node holds obj-0d already".to_owned()),
        }),
        ToAgent::Dispatch(dispatch(2, 64)),
        ToAgent::Dispatch(Dispatch {
            jobs: vec![Arc::new(function_job(8)), Arc::new(minimal_job)],
            tasks: Vec::new(),
            forget: Vec::new(),
            gang: None,
            durable: 0,
        }),
        ToAgent::Dispatch(Dispatch {
            jobs: Vec::new(),
            tasks: Vec::new(),
            forget: vec![JobId(3), JobId(4)],
            gang: None,
            durable: 0,
        }),
        ToAgent::Cancel {
            attempts: vec![
                AttemptId(1),
                AttemptId(u64::MAX),
                AttemptId(0),
                AttemptId(42),
            ],
        },
        ToAgent::Cancel {
            attempts: Vec::new(),
        },
        ToAgent::Dispatch(Dispatch {
            gang: Some(GangPart {
                member: 2,
                nodes: vec![NodeId(4), NodeId(9), NodeId(1)],
                hosts: vec!["n4".into(), "n9".into(), "nid001".into()],
                port: 29_500,
                hub: String::new(),
            }),
            ..dispatch(1, 1)
        }),
        ToAgent::GangLaunch(GangLaunch {
            attempt: AttemptId(7),
            member: 1,
            launch: 3,
            command: " orted -mca ess \"env\" -mca orte_hnp_uri \"1.0;tcp://10.0.0.1:4\"".into(),
            ranks: None,
        }),
        ToAgent::GangLaunch(GangLaunch {
            attempt: AttemptId(7),
            member: 1,
            launch: 5,
            command: "./ring 'a b'".into(),
            ranks: Some(LaunchRanks {
                world: 2,
                ranks: 4,
                ranks_per_node: 2,
                cwd: "/work".into(),
                env: vec![EnvVar {
                    key: "OMP_PLACES".into(),
                    value: "cores".into(),
                }],
            }),
        }),
        ToAgent::GangLaunchEnded(GangLaunchEnded {
            attempt: AttemptId(7),
            launch: 3,
            code: 255,
            stdout: b"rank 0\nrank 1\n".to_vec(),
            stderr: Vec::new(),
        }),
        ToAgent::PmiFenced(PmiFence {
            attempt: AttemptId(7),
            member: 0,
            epoch: 2,
            puts: vec![
                (
                    "P0-businesscard".into(),
                    "description#vm$port#40123$ifname#127.0.0.1$".into(),
                ),
                ("bc-1".into(), String::new()),
            ],
        }),
        ToAgent::Return {
            attempts: vec![AttemptId(11), AttemptId(12)],
        },
        ToAgent::ActorSpawn(ActorSpawn {
            actor: 12,
            life: 2,
            name: "param-server".into(),
            fingerprint: u64::MAX,
            args: vec![0, 1, 2, 255],
        }),
        ToAgent::ActorCall(ActorCall {
            actor: 12,
            life: 2,
            call: 0,
            data: Vec::new(),
        }),
        ToAgent::ActorCall(ActorCall {
            actor: u64::MAX,
            life: u32::MAX,
            call: u64::MAX,
            data: vec![7; 100],
        }),
        ToAgent::ActorStop { actor: 12, life: 2 },
        ToAgent::ActorAnswer(ActorReply {
            call: 3,
            answer: ActorAnswer::Failed {
                fault: ActorFault::Lost,
                message: "node 4 lost".into(),
            },
        }),
        ToAgent::Shutdown {
            reason: "allocation ends in 60 s".to_owned(),
            kill_running: true,
        },
        ToAgent::Shutdown {
            reason: "done".to_owned(),
            kill_running: false,
        },
        ToAgent::Rejoin,
        ToAgent::Durable { through: u64::MAX },
    ]
}

fn task_result(task: u64, outcome: Outcome) -> TaskResult {
    TaskResult {
        task: TaskId(task),
        attempt: AttemptId(2),
        executor: 3,
        outcome,
        received_unix_us: 1_699_999_999_999_000,
        start_unix_us: 1_700_000_000_000_000,
        end_unix_us: 1_700_000_000_500_000,
        fetch_us: 12_345,
        body: ResultBody::Command {
            stdout: Output {
                inline: b"hello\n\xff\x00binary ok".to_vec(),
                total_bytes: 1 << 33,
                spill_path: Some("/scratch/pilot/out/task-1.stdout".to_owned()),
            },
            stderr: Output::default(),
        },
    }
}

/// One of every `FromAgent` variant, and a report with every `Outcome` variant.
pub fn from_agent_samples() -> Vec<FromAgent> {
    vec![
        FromAgent::Hello(Hello {
            node: NodeId(3),
            hostname: "nid001234".to_owned(),
            capacity: Resources::cores(128).with(ResourceKind::GPUS, 4),
            custom: vec![
                NamedAmount {
                    name: "licence".to_owned(),
                    amount: 4,
                },
                NamedAmount {
                    name: String::new(),
                    amount: 0,
                },
            ],
            executors: 32,
            pid: 4242,
            pilot_id: "pilot-7f3a9c".to_owned(),
            hosts_actors: true,
            held: vec![Held {
                attempt: AttemptId((1 << 40) + 7),
                task: TaskId(99),
                started_unix_us: 1_700_000_000_000_000,
                ended: true,
                gang: Some(GangPart {
                    member: 1,
                    nodes: vec![NodeId(2), NodeId(3)],
                    hosts: vec!["n2".to_owned(), "n3".to_owned()],
                    port: 20_007,
                    hub: "10.0.0.1:4001".into(),
                }),
            }],
            actors: vec![HeldActor { actor: 5, life: 2 }],
            scratch: "/tmp/saker-pilot-7f3a9c/node-3".to_owned(),
            data_addr: "10.1.2.3:41000".to_owned(),
        }),
        FromAgent::ItemsWritten(ItemsWritten {
            node: NodeId(3),
            attempt: AttemptId(12),
            items: vec![ItemWritten {
                name: "out".to_owned(),
                bytes: 1 << 33,
            }],
        }),
        FromAgent::ItemRead(item_read()),
        FromAgent::ItemData(item_data(false)),
        FromAgent::ItemWhere(saker_wire::ItemWhere {
            item: "part-1".to_owned(),
            reader: NodeId(5),
        }),
        FromAgent::ItemCopied(saker_wire::ItemCopied {
            node: NodeId(5),
            item: "part-1".to_owned(),
            bytes: 5 << 30,
            direct: 4 << 30,
            relayed: 3 << 30,
        }),
        FromAgent::DropCopy(saker_wire::DropCopy {
            node: NodeId(5),
            item: "obj-0c".to_owned(),
        }),
        FromAgent::ObjectPut(saker_wire::ObjectPut {
            item: "obj-0d".to_owned(),
        }),
        FromAgent::StoreUsage(saker_wire::StoreUsage {
            node: NodeId(5),
            objects: 3,
            memory_bytes: 3 << 30,
            memory_bound: 4 << 30,
            disk_bytes: 1 << 34,
            spills: 9,
            spilled_bytes: 1 << 34,
            spill_failures: 1,
            drops: 4,
            dropped_bytes: 1 << 33,
        }),
        FromAgent::Report(Report {
            node: NodeId(3),
            seq: 1,
            credit: Resources::cores(16),
            started: vec![
                Started {
                    task: TaskId(1),
                    attempt: AttemptId(0),
                    executor: 0,
                    at_unix_us: 5,
                },
                Started {
                    task: TaskId(u64::MAX),
                    attempt: AttemptId(u64::MAX),
                    executor: u32::MAX,
                    at_unix_us: u64::MAX,
                },
            ],
            results: vec![
                task_result(1, Outcome::Exited { code: 0 }),
                task_result(2, Outcome::Exited { code: -1 }),
                task_result(3, Outcome::Signaled { signal: 9 }),
                task_result(4, Outcome::TimedOut),
                task_result(
                    5,
                    Outcome::SpawnFailed {
                        reason: "no such file: /usr/bin/simulate".to_owned(),
                    },
                ),
                task_result(
                    6,
                    Outcome::Lost {
                        reason: "executor 3 panicked".to_owned(),
                    },
                ),
                task_result(7, Outcome::Cancelled),
                task_result(
                    8,
                    Outcome::Raised {
                        message: "ValueError: bad input".to_owned(),
                    },
                ),
                TaskResult {
                    body: ResultBody::Function {
                        output: Some(b"\x80\x04returned\x00".to_vec()),
                    },
                    ..task_result(9, Outcome::Exited { code: 0 })
                },
                TaskResult {
                    body: ResultBody::Function { output: None },
                    ..task_result(10, Outcome::TimedOut)
                },
                TaskResult {
                    body: ResultBody::Function { output: None },
                    ..task_result(
                        11,
                        Outcome::WorkerFailed {
                            reason: "worker ended: No module named 'saker'".to_owned(),
                        },
                    )
                },
            ],
        }),
        FromAgent::Report(Report {
            node: NodeId(0),
            seq: 1,
            credit: Resources::ZERO,
            started: Vec::new(),
            results: Vec::new(),
        }),
        FromAgent::Goodbye {
            node: NodeId(3),
            reason: "shutdown requested".to_owned(),
        },
        FromAgent::Report(Report {
            node: NodeId(4),
            seq: 1,
            credit: Resources::cores(4),
            started: Vec::new(),
            results: vec![TaskResult {
                body: ResultBody::Part {
                    stdout: Output {
                        inline: b"probe rank=0 size=6\n".to_vec(),
                        total_bytes: 20,
                        spill_path: None,
                    },
                    stderr: Output::default(),
                    ends: vec![
                        ProcessEnd {
                            rank: 0,
                            outcome: Outcome::Exited { code: 0 },
                            ended_unix_us: 1_700_000_000_400_000,
                            aborted: false,
                        },
                        ProcessEnd {
                            rank: 1,
                            outcome: Outcome::Signaled { signal: 15 },
                            ended_unix_us: 1_700_000_000_500_000,
                            aborted: true,
                        },
                    ],
                    pmi: Some(PmiTimes {
                        inited_unix_us: 1_700_000_000_010_000,
                        fenced_unix_us: 1_700_000_000_020_000,
                    }),
                },
                ..task_result(11, Outcome::Exited { code: 0 })
            }],
        }),
        FromAgent::GangLaunch(GangLaunch {
            attempt: AttemptId(7),
            member: 2,
            launch: 4,
            command: "/usr/bin/hydra_pmi_proxy --control-port vm:39937 --proxy-id 2".into(),
            ranks: None,
        }),
        FromAgent::GangLaunchEnded(GangLaunchEnded {
            attempt: AttemptId(7),
            launch: 4,
            code: 0,
            stdout: Vec::new(),
            stderr: b"saker: another\n".to_vec(),
        }),
        FromAgent::PmiFence(PmiFence {
            attempt: AttemptId(7),
            member: 1,
            epoch: 0,
            puts: vec![("bc-2".into(), "tcp://10.0.0.2:5".into())],
        }),
        FromAgent::ActorReply(ActorReply {
            call: 9,
            answer: ActorAnswer::Reply(vec![1, 2, 3]),
        }),
        FromAgent::ActorReply(ActorReply {
            call: u64::MAX,
            answer: ActorAnswer::Failed {
                fault: ActorFault::TypeMismatch,
                message: "another build".into(),
            },
        }),
        FromAgent::ActorEvent(ActorEvent {
            actor: 3,
            life: 0,
            status: ActorStatus::Started,
        }),
        FromAgent::ActorCall(ActorCall {
            actor: 3,
            life: 0,
            call: 17,
            data: vec![1; 9],
        }),
        FromAgent::ActorEvent(ActorEvent {
            actor: 3,
            life: 1,
            status: ActorStatus::Failed {
                fault: ActorFault::Panicked,
                message: "index out of bounds".into(),
            },
        }),
        FromAgent::ActorEvent(ActorEvent {
            actor: 3,
            life: 1,
            status: ActorStatus::Stopped,
        }),
    ]
}

/// Feeds `bytes` to `decoder` in random chunks (including empty ones) and collects
/// every frame, stopping at the first error.
pub fn feed_in_chunks(
    decoder: &mut FrameDecoder,
    bytes: &[u8],
    rng: &mut StdRng,
    max_chunk: usize,
) -> Result<Vec<Frame>, WireError> {
    let mut frames = Vec::new();
    let mut rest = bytes;
    loop {
        let take = rng.random_range(0..=max_chunk).min(rest.len());
        let (chunk, tail) = rest.split_at(take);
        decoder.push(chunk);
        rest = tail;
        while let Some(frame) = decoder.next_frame()? {
            frames.push(frame);
        }
        if rest.is_empty() {
            return Ok(frames);
        }
    }
}
