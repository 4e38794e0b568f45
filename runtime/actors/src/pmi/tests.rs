use super::*;

/// The lines an MPICH rank sends through `MPI_Init` and `MPI_Finalize` (its simple
/// PMI client, PMI-1 wire), as a launcher's socket hands them over.
const RANK: &str = "cmd=init pmi_version=1 pmi_subversion=1\n\
cmd=get_maxes\n\
cmd=get_appnum\n\
cmd=get_my_kvsname\n\
cmd=get_universe_size\n\
cmd=put kvsname=saker-7 key=P0-businesscard value=description#vm$port#41234$ifname#10.0.0.5$\n\
cmd=barrier_in\n\
cmd=get kvsname=saker-7 key=PMI_process_mapping\n\
cmd=finalize\n";

fn expected() -> Vec<Request> {
    vec![
        Request::Init {
            version: 1,
            subversion: 1,
        },
        Request::GetMaxes,
        Request::GetAppnum,
        Request::GetMyKvsname,
        Request::GetUniverseSize,
        Request::Put {
            key: "P0-businesscard".into(),
            value: "description#vm$port#41234$ifname#10.0.0.5$".into(),
        },
        Request::BarrierIn,
        Request::Get {
            key: "PMI_process_mapping".into(),
        },
        Request::Finalize,
    ]
}

#[test]
fn a_ranks_requests_are_read_whatever_the_reads_boundaries() {
    let mut whole = Requests::default();
    assert_eq!(whole.push(RANK.as_bytes()).unwrap(), expected());
    // One byte at a time: nothing before a newline, each request once.
    let mut bytewise = Requests::default();
    let mut got = Vec::new();
    for byte in RANK.as_bytes() {
        got.extend(bytewise.push(std::slice::from_ref(byte)).unwrap());
    }
    assert_eq!(got, expected());
    // A line cut in two, then the rest with a carriage return and a blank line.
    let mut cut = Requests::default();
    assert!(cut.push(b"cmd=barr").unwrap().is_empty());
    assert_eq!(
        cut.push(b"ier_in\r\n\ncmd=finalize\n").unwrap(),
        [Request::BarrierIn, Request::Finalize]
    );
}

#[test]
fn replies_are_the_lines_mpich_reads() {
    let lines: Vec<String> = [
        Reply::Init {
            version: 1,
            subversion: 1,
        },
        Reply::Maxes(MAXES),
        Reply::UniverseSize(6),
        Reply::Appnum(0),
        Reply::MyKvsname("saker-7".into()),
        Reply::PutResult,
        Reply::GetResult(Some("(vector,(0,3,2))".into())),
        Reply::GetResult(None),
        Reply::BarrierOut,
        Reply::FinalizeAck,
        Reply::Refused {
            reply: "publish_result",
            msg: "name services are not served".into(),
        },
    ]
    .iter()
    .map(Reply::to_line)
    .collect();
    assert_eq!(
        lines,
        [
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
            "cmd=maxes rc=0 kvsname_max=64 keylen_max=64 vallen_max=1024\n",
            "cmd=universe_size rc=0 size=6\n",
            "cmd=appnum rc=0 appnum=0\n",
            "cmd=my_kvsname rc=0 kvsname=saker-7\n",
            "cmd=put_result rc=0\n",
            "cmd=get_result rc=0 value=(vector,(0,3,2))\n",
            "cmd=get_result rc=-1 msg=key_not_found\n",
            "cmd=barrier_out rc=0\n",
            "cmd=finalize_ack rc=0\n",
            "cmd=publish_result rc=-1 msg=name_services_are_not_served\n",
        ]
    );
}

#[test]
fn abort_takes_its_code_and_the_rest_of_the_line_as_its_message() {
    assert_eq!(
        parse("cmd=abort exitcode=3 message=rank 2 lost its input file").unwrap(),
        Request::Abort {
            exitcode: 3,
            message: Some("rank 2 lost its input file".into()),
        }
    );
    assert_eq!(
        parse("cmd=abort").unwrap(),
        Request::Abort {
            exitcode: 1,
            message: None,
        }
    );
}

#[test]
fn name_services_and_spawn_are_refused_and_the_rank_goes_on() {
    let mut requests = Requests::default();
    let got = requests
        .push(
            b"cmd=publish_name service=s port=p\n\
mcmd=spawn\nnprocs=2\nexecname=./worker\nendcmd\n\
cmd=lookup_name service=s\ncmd=barrier_in\n",
        )
        .unwrap();
    let replies: Vec<&str> = got
        .iter()
        .map(|request| match request {
            Request::Unsupported { reply, .. } => *reply,
            Request::BarrierIn => "barrier_in",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        replies,
        [
            "publish_result",
            "spawn_result",
            "lookup_result",
            "barrier_in"
        ]
    );
}

#[test]
fn a_value_runs_to_the_end_of_its_line_blanks_and_all() {
    // Open MPI's values through Saker's PMI library: base64 padded with blanks.
    assert_eq!(
        parse("cmd=put kvsname=saker-7 key=1-0 value=AAEC k=v  ").unwrap(),
        Request::Put {
            key: "1-0".into(),
            value: "AAEC k=v  ".into(),
        }
    );
    let line = Reply::GetResult(Some("AAEC k=v  ".into())).to_line();
    assert_eq!(line, "cmd=get_result rc=0 value=AAEC k=v  \n");
}

#[test]
fn bad_lines_are_refused_by_what_is_wrong() {
    let long_value = format!("cmd=put kvsname=k key=a value={}", "v".repeat(1025));
    for (line, error) in [
        (
            "init pmi_version=1",
            PmiError::NoCommand("init pmi_version=1".into()),
        ),
        ("cmd=frobnicate", PmiError::Unknown("frobnicate".into())),
        (
            "cmd=init pmi_version=1",
            PmiError::Missing {
                cmd: "init",
                attribute: "pmi_subversion",
            },
        ),
        (
            "cmd=init pmi_version=one pmi_subversion=1",
            PmiError::NotANumber {
                cmd: "init",
                attribute: "pmi_version",
            },
        ),
        (
            "cmd=get kvsname=k",
            PmiError::Missing {
                cmd: "get",
                attribute: "key",
            },
        ),
        (
            long_value.as_str(),
            PmiError::Oversized {
                cmd: "put",
                attribute: "value",
                most: 1024,
            },
        ),
    ] {
        assert_eq!(parse(line), Err(error), "{line}");
    }
    // Bytes that never end a line, and bytes that are not text.
    let mut endless = Requests::default();
    assert_eq!(endless.push(&[b'x'; MOST_LINE + 1]), Err(PmiError::TooLong));
    let mut binary = Requests::default();
    assert_eq!(binary.push(b"cmd=\xff\n"), Err(PmiError::NotText));
}
