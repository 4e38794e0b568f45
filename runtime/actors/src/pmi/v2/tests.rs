//! Against the bytes Slurm's libpmi2 (22.05.8, Debian) writes and reads, taken from a
//! run of the real library against a scripted server.

use super::super::{Reply, Request, Requests};
use super::render;

/// One rank's session as libpmi2 sends it (Slurm pads lengths on the right).
const CLIENT: &[&str] = &[
    "cmd=init pmi_version=2 pmi_subversion=0\n",
    "54    cmd=fullinit;pmijobid=1234.0;pmirank=0;threaded=FALSE;",
    "14    cmd=job-getid;",
    "44    cmd=info-getjobattr;key=PMI_process_mapping;",
    "32    cmd=kvs-put;key=k0;value=v;;a=l;",
    "14    cmd=kvs-fence;",
    "41    cmd=kvs-get;jobid=1234.0;srcid=-1;key=k0;",
    "38    cmd=info-getnodeattr;key=na;wait=TRUE;",
    "36    cmd=abort;isworld=TRUE;msg=bye;;now;",
    "13    cmd=finalize;",
];

#[test]
fn libpmi2s_requests_are_read_after_its_pmi1_init_whatever_the_reads() {
    let expected = vec![
        Request::Init {
            version: 2,
            subversion: 0,
        },
        Request::FullInit,
        Request::GetMyKvsname,
        Request::GetJobAttr {
            key: "PMI_process_mapping".into(),
        },
        Request::Put {
            key: "k0".into(),
            value: "v;a=l".into(),
        },
        Request::BarrierIn,
        Request::Get { key: "k0".into() },
        Request::GetNodeAttr {
            key: "na".into(),
            wait: true,
        },
        Request::Abort {
            exitcode: 1,
            message: Some("bye;now".into()),
        },
        Request::Finalize,
    ];
    let all = CLIENT.concat();
    let mut whole = Requests::default();
    assert_eq!(whole.push(all.as_bytes()).unwrap(), expected);
    assert!(whole.is_v2());
    // A byte at a time: frames split anywhere, even inside the length.
    let mut bytewise = Requests::default();
    let mut got = Vec::new();
    for byte in all.as_bytes() {
        got.extend(bytewise.push(std::slice::from_ref(byte)).unwrap());
    }
    assert_eq!(got, expected);
    // Hydra pads on the left: the same request.
    let mut left = Requests::default();
    left.push(CLIENT[0].as_bytes()).unwrap();
    assert_eq!(
        left.push(b"    14cmd=kvs-fence;").unwrap(),
        [Request::BarrierIn]
    );
}

#[test]
fn replies_are_the_frames_libpmi2_reads() {
    let cases = [
        (
            Reply::Init {
                version: 2,
                subversion: 0,
            },
            "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n",
        ),
        (
            Reply::FullInit {
                rank: 0,
                size: 2,
                appnum: 0,
            },
            "113   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=2;\
             appnum=0;debugged=FALSE;pmiverbose=FALSE;",
        ),
        (
            Reply::MyKvsname("1234.0".into()),
            "41    cmd=job-getid-response;rc=0;jobid=1234.0;",
        ),
        (
            Reply::JobAttr(Some("(vector,(0,1,2))".into())),
            "68    cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,2));",
        ),
        (Reply::PutResult, "26    cmd=kvs-put-response;rc=0;"),
        (Reply::BarrierOut, "28    cmd=kvs-fence-response;rc=0;"),
        (
            Reply::GetResult(Some("v;a=l".into())),
            "50    cmd=kvs-get-response;rc=0;found=TRUE;value=v;;a=l;",
        ),
        (
            Reply::NodeAttr(None),
            "47    cmd=info-getnodeattr-response;rc=0;found=FALSE;",
        ),
        (Reply::FinalizeAck, "27    cmd=finalize-response;rc=0;"),
        (
            Reply::Refused {
                reply: "name-publish-response",
                msg: "not served".into(),
            },
            "50    cmd=name-publish-response;rc=-1;errmsg=not served;",
        ),
    ];
    for (reply, bytes) in cases {
        assert_eq!(render(&reply, None), bytes, "{reply:?}");
    }
    // A threaded client's `thrid` comes back with its answer, and only then.
    assert_eq!(
        render(&Reply::BarrierOut, Some("0x7f01")),
        "41    cmd=kvs-fence-response;rc=0;thrid=0x7f01;"
    );
}

#[test]
fn a_threaded_clients_thrid_is_kept_per_request() {
    let mut requests = Requests::default();
    requests.push(CLIENT[0].as_bytes()).unwrap();
    let got = requests
        .push(b"25    cmd=kvs-fence;thrid=0xa1;14    cmd=kvs-fence;")
        .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(requests.thrids(), [Some("0xa1".to_owned()), None]);
}

#[test]
fn bad_frames_are_refused_by_what_is_wrong() {
    let cases: [(&[u8], &str); 5] = [
        (
            b"abcdefcmd=x;",
            "a PMI-2 frame that cannot be read: \"abcdef\"",
        ),
        (
            b"9     cmd=x;y=1",
            "a PMI-2 frame that cannot be read: \"cmd=x;y=1\"",
        ),
        (b"12    cmd=explode;", "an unknown request \"explode\""),
        (b"12    cmd=kvs-put;", "request kvs-put lacks key"),
        (
            b"99999 cmd=kvs-fence;",
            "a PMI-2 frame longer than 65536 bytes",
        ),
    ];
    for (frame, error) in cases {
        let mut requests = Requests::default();
        requests.push(CLIENT[0].as_bytes()).unwrap();
        let got = requests.push(frame).unwrap_err();
        assert_eq!(got.to_string(), error, "{}", String::from_utf8_lossy(frame));
    }
}
