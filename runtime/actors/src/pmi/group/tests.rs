use super::*;

fn layout(ranks: u32, per: u32, members: u32, member: u32) -> Layout {
    Layout {
        kvsname: "saker-7".into(),
        ranks,
        ranks_per_node: per,
        members,
        member,
        hwloc_xml: None,
    }
}

fn put(key: &str, value: &str) -> Request {
    Request::Put {
        key: key.into(),
        value: value.into(),
    }
}

fn get(key: &str) -> Request {
    Request::Get { key: key.into() }
}

fn reply(rank: u32, reply: Reply) -> Vec<Action> {
    vec![Action::Reply { rank, reply }]
}

#[test]
fn the_process_mapping_and_local_ranks_follow_the_layout() {
    assert_eq!(layout(6, 2, 3, 0).process_mapping(), "(vector,(0,3,2))");
    assert_eq!(
        layout(5, 2, 3, 0).process_mapping(),
        "(vector,(0,2,2),(2,1,1))"
    );
    assert_eq!(layout(1, 4, 1, 0).process_mapping(), "(vector,(0,1,1))");
    assert_eq!(layout(5, 2, 3, 1).local_ranks(), 2..4);
    assert_eq!(layout(5, 2, 3, 2).local_ranks(), 4..5);
    assert_eq!(
        layout(4, 2, 3, 2).local_ranks(),
        4..4,
        "a member with no rank"
    );
}

#[test]
fn one_members_barrier_lets_its_ranks_out_once_all_are_in() {
    let mut group = Group::new(layout(2, 2, 1, 0));
    let init = Request::Init {
        version: 1,
        subversion: 1,
    };
    assert_eq!(
        group.request(0, init.clone()),
        reply(
            0,
            Reply::Init {
                version: 1,
                subversion: 1
            }
        )
    );
    assert!(!group.all_initialized());
    group.request(1, init);
    assert!(group.all_initialized());
    assert_eq!(
        group.request(0, Request::GetUniverseSize),
        reply(0, Reply::UniverseSize(2))
    );
    assert_eq!(
        group.request(1, Request::GetMyKvsname),
        reply(1, Reply::MyKvsname("saker-7".into()))
    );
    assert_eq!(
        group.request(0, get("PMI_process_mapping")),
        reply(0, Reply::GetResult(Some("(vector,(0,1,2))".into())))
    );
    assert_eq!(
        group.request(0, put("card-0", "tcp:1")),
        reply(0, Reply::PutResult)
    );
    assert_eq!(
        group.request(0, Request::BarrierIn),
        [],
        "rank 1 is not in yet"
    );
    assert_eq!(
        group.request(1, Request::BarrierIn),
        [
            Action::Reply {
                rank: 0,
                reply: Reply::BarrierOut
            },
            Action::Reply {
                rank: 1,
                reply: Reply::BarrierOut
            }
        ],
        "no other member: no fence goes up"
    );
    assert_eq!(group.epoch(), 1);
    assert_eq!(
        group.request(1, get("card-0")),
        reply(1, Reply::GetResult(Some("tcp:1".into())))
    );
    assert_eq!(
        group.request(1, get("card-9")),
        reply(1, Reply::GetResult(None))
    );
    let abort = Request::Abort {
        exitcode: 7,
        message: Some("no input".into()),
    };
    assert_eq!(
        group.request(1, abort),
        [Action::Abort {
            rank: 1,
            exitcode: 7,
            message: Some("no input".into())
        }]
    );
}

#[test]
fn with_other_members_a_barrier_waits_for_every_members_keys() {
    let mut group = Group::new(layout(4, 2, 2, 1));
    group.request(2, put("card-2", "a"));
    group.request(3, put("card-3", "b"));
    assert_eq!(group.request(3, Request::BarrierIn), []);
    let fence = group.request(2, Request::BarrierIn);
    assert_eq!(
        fence,
        [Action::Fence {
            epoch: 0,
            puts: vec![("card-2".into(), "a".into()), ("card-3".into(), "b".into())]
        }]
    );
    // Until the answer: the other member's keys are not seen, its ranks wait.
    assert_eq!(
        group.request(2, get("card-0")),
        reply(2, Reply::GetResult(None))
    );
    let wrong = group.fenced(1, Vec::new()).unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "a fence answer for epoch 1 while fence 0 is in flight"
    );
    let every = vec![
        ("card-0".into(), "x".into()),
        ("card-1".into(), "y".into()),
        ("card-2".into(), "a".into()),
        ("card-3".into(), "b".into()),
    ];
    let out = group.fenced(0, every).unwrap();
    assert_eq!(out.len(), 2, "both local ranks go: {out:?}");
    assert!(out.iter().all(|action| matches!(
        action,
        Action::Reply {
            reply: Reply::BarrierOut,
            ..
        }
    )));
    assert_eq!(
        group.request(3, get("card-0")),
        reply(3, Reply::GetResult(Some("x".into())))
    );
    // A second answer to the same fence is the gang's state gone wrong.
    assert!(group.fenced(0, Vec::new()).is_err());
    // The next fence carries only what was put since.
    group.request(2, Request::BarrierIn);
    assert_eq!(
        group.request(3, Request::BarrierIn),
        [Action::Fence {
            epoch: 1,
            puts: Vec::new()
        }]
    );
}

#[test]
fn pmi2_clients_get_their_rank_job_attributes_and_node_attributes() {
    let mut group = Group::new(Layout {
        hwloc_xml: Some("/scratch/hwloc.xml".into()),
        ..layout(4, 2, 2, 1)
    });
    assert_eq!(
        group.request(3, Request::FullInit),
        reply(
            3,
            Reply::FullInit {
                rank: 3,
                size: 4,
                appnum: 0
            }
        )
    );
    let attr = |key: &str| Request::GetJobAttr { key: key.into() };
    for (key, value) in [
        ("PMI_process_mapping", Some("(vector,(0,2,2))")),
        ("universeSize", Some("4")),
        ("PMI_hwloc_xmlfile", Some("/scratch/hwloc.xml")),
        ("mpi_reserved_ports", None),
    ] {
        assert_eq!(
            group.request(2, attr(key)),
            reply(2, Reply::JobAttr(value.map(str::to_owned))),
            "{key}"
        );
    }
    // A node attribute: absent without waiting; waited for, answered by the put.
    let get = |wait| Request::GetNodeAttr {
        key: "shm".into(),
        wait,
    };
    assert_eq!(
        group.request(2, get(false)),
        reply(2, Reply::NodeAttr(None))
    );
    assert_eq!(group.request(2, get(true)), [], "rank 2 waits");
    let put = Request::PutNodeAttr {
        key: "shm".into(),
        value: "seg-9".into(),
    };
    assert_eq!(
        group.request(3, put),
        [
            Action::Reply {
                rank: 3,
                reply: Reply::NodeAttrPut
            },
            Action::Reply {
                rank: 2,
                reply: Reply::NodeAttr(Some("seg-9".into()))
            }
        ]
    );
    assert_eq!(
        group.request(2, get(false)),
        reply(2, Reply::NodeAttr(Some("seg-9".into())))
    );
}
