//! The client against a scripted peer (the real server's side is tested in
//! saker-actors, `pmi::server`, with this client).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use super::{Client, Error};
use crate::code;

/// A peer that answers each request line it reads with the next of `replies` (and
/// returns the requests it read); it closes after the last.
fn peer(replies: &[&str]) -> (UnixStream, JoinHandle<Vec<String>>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let replies: Vec<String> = replies.iter().map(|r| format!("{r}\n")).collect();
    let handle = std::thread::spawn(move || {
        let mut reader = BufReader::new(theirs.try_clone().unwrap());
        let mut writer = theirs;
        let mut asked = Vec::new();
        for reply in replies {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            asked.push(line.trim_end().to_owned());
            writer.write_all(reply.as_bytes()).unwrap();
        }
        asked
    });
    (ours, handle)
}

const INIT: [&str; 5] = [
    "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
    "cmd=maxes rc=0 kvsname_max=64 keylen_max=64 vallen_max=16",
    "cmd=my_kvsname rc=0 kvsname=saker-7",
    "cmd=universe_size rc=0 size=6",
    "cmd=appnum rc=0 appnum=0",
];

/// The replies to `init`'s questions, then `more`.
fn with_init<'a>(more: &[&'a str]) -> Vec<&'a str> {
    INIT.iter().chain(more).copied().collect()
}

#[test]
fn init_learns_the_limits_and_names_and_a_session_round_trips() {
    let replies = with_init(&[
        "cmd=put_result rc=0",
        "cmd=barrier_out rc=0",
        "cmd=get_result rc=0 value=a=b=c",
        "cmd=get_result rc=-1 msg=key_not_found",
        "cmd=get_result rc=0 value=(vector,(0,3,2))",
        "cmd=finalize_ack rc=0",
    ]);
    let (stream, peer) = peer(&replies);
    let mut client = Client::init(stream, 3, 6).unwrap();
    assert_eq!((client.rank, client.size, client.universe), (3, 6, 6));
    assert_eq!(client.kvsname, "saker-7");
    assert_eq!(client.maxes.value, 16);
    client.put("k0", "v0").unwrap();
    client.barrier().unwrap();
    assert_eq!(client.get("k1").unwrap().as_deref(), Some("a=b=c"));
    assert_eq!(client.get("k2").unwrap(), None);
    assert_eq!(client.clique().unwrap(), [2, 3]);
    assert_eq!(client.clique().unwrap(), [2, 3], "asked once, kept");
    client.finalize().unwrap();
    let asked = peer.join().unwrap();
    assert_eq!(
        asked[..5],
        [
            "cmd=init pmi_version=1 pmi_subversion=1",
            "cmd=get_maxes",
            "cmd=get_my_kvsname",
            "cmd=get_universe_size",
            "cmd=get_appnum",
        ]
    );
    assert_eq!(asked[5], "cmd=put kvsname=saker-7 key=k0 value=v0");
    assert_eq!(asked[6], "cmd=barrier_in");
    assert_eq!(asked[9], "cmd=get kvsname=saker-7 key=PMI_process_mapping");
    assert_eq!(asked.len(), 11);
}

#[test]
fn what_the_wire_cannot_carry_is_refused_before_it_is_sent() {
    let (stream, peer) = peer(&INIT);
    let mut client = Client::init(stream, 0, 2).unwrap();
    let refused = |result: Result<(), Error>| result.unwrap_err().code();
    assert_eq!(
        refused(client.put("k", "two\nlines")),
        code::ERR_INVALID_VAL
    );
    let long = "v".repeat(17);
    assert_eq!(
        refused(client.put("k", &long)),
        code::ERR_INVALID_VAL_LENGTH
    );
    assert_eq!(refused(client.put("a=b", "v")), code::ERR_INVALID_KEY);
    assert_eq!(refused(client.put("", "v")), code::ERR_INVALID_KEY);
    let long = "k".repeat(65);
    assert_eq!(
        refused(client.put(&long, "v")),
        code::ERR_INVALID_KEY_LENGTH
    );
    drop(client);
    assert_eq!(peer.join().unwrap().len(), 5, "nothing sent after init");
}

#[test]
fn a_refusal_a_wrong_answer_and_a_closed_socket_are_errors() {
    let (stream, _peer) = peer(&["cmd=response_to_init rc=-1 msg=bad_version"]);
    assert!(matches!(
        Client::init(stream, 0, 1),
        Err(Error::Refused { .. })
    ));

    let (stream, _peer) = peer(&with_init(&["cmd=barrier_out rc=0"]));
    let mut client = Client::init(stream, 0, 1).unwrap();
    let wrong = client.put("k", "v").unwrap_err();
    assert!(matches!(wrong, Error::Unexpected { .. }), "{wrong}");
    assert_eq!(wrong.code(), code::FAIL);
    // The peer has closed: no answer at all.
    assert!(matches!(client.barrier(), Err(Error::Io(_))));
}

#[test]
fn an_abort_says_why_and_waits_for_the_end() {
    let (stream, peer) = peer(&with_init(&["(no reply: the agent ends the group)"]));
    let mut client = Client::init(stream, 0, 2).unwrap();
    // Returns only once the peer closes, after its last line.
    client.abort(7, "bad\ninput here");
    let asked = peer.join().unwrap();
    assert_eq!(asked[5], "cmd=abort exitcode=7 message=badinput here");
}
