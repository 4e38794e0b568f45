use std::net::SocketAddr;
use std::time::Duration;

use saker_client::data::DataError;
use saker_transport::credentials::{Credentials, Role};
use saker_transport::pilot_dir::PilotDir;
use saker_transport::quic::{self, LinkTimeouts};
use saker_wire::messages::{FromAgent, NodeId};
use saker_wire::{ItemHolder, ItemHolders, ItemRead, ItemWhere};

use super::*;

fn read(item: &str, offset: u64, len: u32) -> ItemRead {
    ItemRead {
        item: item.into(),
        reader: NodeId(7),
        request: offset,
        offset,
        len,
    }
}

fn holder(node: u32, port: u16) -> ItemHolder {
    ItemHolder {
        node: NodeId(node),
        addr: format!("10.0.0.{node}:{port}"),
    }
}

fn fetches(out: &[Send]) -> Vec<(u32, u64)> {
    out.iter()
        .filter_map(|send| match send {
            Send::Fetch(fetch) => Some((fetch.holder.node.0, fetch.read.offset)),
            Send::Up(_) => None,
        })
        .collect()
}

/// The first read of an item asks the root where it is and waits with the reads after
/// it; the answer sends them to the holders in turn, and later reads follow.
#[test]
fn reads_wait_for_the_holders_then_go_to_each_in_turn() {
    let mut routes = Routes::default();
    let mut out = Vec::new();
    routes.read(read("a", 0, 10), &mut out);
    routes.read(read("a", 10, 10), &mut out);
    assert_eq!(
        out,
        vec![Send::Up(FromAgent::ItemWhere(ItemWhere {
            item: "a".into(),
            reader: NodeId(7)
        }))],
        "asked once, nothing sent yet"
    );
    out.clear();
    let answer = ItemHolders {
        item: "a".into(),
        holders: vec![holder(1, 5000), holder(2, 5000)],
        upstream: None,
    };
    routes.holders(answer.clone(), &mut out);
    routes.read(read("a", 20, 10), &mut out);
    assert_eq!(fetches(&out), vec![(1, 0), (2, 10), (1, 20)]);
    out.clear();
    routes.holders(answer, &mut out);
    assert!(out.is_empty(), "a second answer changes nothing");
}

/// With no holder that serves directly (or none whose address parses), every read
/// goes up to the root.
#[test]
fn with_no_direct_holder_reads_go_through_the_root() {
    let mut routes = Routes::default();
    let mut out = Vec::new();
    routes.read(read("a", 0, 10), &mut out);
    out.clear();
    let bad = ItemHolder {
        node: NodeId(1),
        addr: "not an address".into(),
    };
    routes.holders(
        ItemHolders {
            item: "a".into(),
            holders: vec![bad],
            upstream: None,
        },
        &mut out,
    );
    routes.read(read("a", 10, 10), &mut out);
    assert_eq!(
        out,
        vec![
            Send::Up(FromAgent::ItemRead(read("a", 0, 10))),
            Send::Up(FromAgent::ItemRead(read("a", 10, 10))),
        ]
    );
}

/// A read that failed at a holder goes to the next one, and that holder is not asked
/// again; with none left, reads go through the root.
#[test]
fn a_failed_holder_is_skipped_then_the_root_is_asked() {
    let mut routes = Routes::default();
    let mut out = Vec::new();
    routes.read(read("a", 0, 10), &mut out);
    out.clear();
    routes.holders(
        ItemHolders {
            item: "a".into(),
            holders: vec![holder(1, 5000), holder(2, 5000)],
            upstream: None,
        },
        &mut out,
    );
    let Some(Send::Fetch(first)) = out.pop() else {
        panic!("{out:?}");
    };
    assert_eq!(first.holder.node, NodeId(1));
    routes.failed(first, &mut out);
    routes.read(read("a", 10, 10), &mut out);
    assert_eq!(fetches(&out), vec![(2, 0), (2, 10)]);
    let Some(Send::Fetch(second)) = out.pop() else {
        panic!("{out:?}");
    };
    out.clear();
    routes.failed(second, &mut out);
    assert_eq!(out, vec![Send::Up(FromAgent::ItemRead(read("a", 10, 10)))]);
}

/// With an upstream (a node fetching the item too), every read goes to it while it
/// serves; once it fails, to the holders in turn; with none, through the root.
#[test]
fn reads_follow_the_upstream_then_the_holders() {
    let mut routes = Routes::default();
    let mut out = Vec::new();
    routes.read(read("a", 0, 10), &mut out);
    routes.read(read("a", 10, 10), &mut out);
    out.clear();
    routes.holders(
        ItemHolders {
            item: "a".into(),
            holders: vec![holder(1, 5000), holder(2, 5000)],
            upstream: Some(holder(3, 5000)),
        },
        &mut out,
    );
    routes.read(read("a", 20, 10), &mut out);
    assert_eq!(fetches(&out), vec![(3, 0), (3, 10), (3, 20)]);
    let Some(Send::Fetch(relayed)) = out.pop() else {
        panic!("{out:?}");
    };
    // Bytes from the upstream are counted apart.
    let Some(Send::Fetch(earlier)) = out.first().cloned() else {
        panic!("{out:?}");
    };
    out.clear();
    assert!(routes.fetched(&earlier, 10));
    routes.failed(relayed, &mut out);
    routes.read(read("a", 30, 10), &mut out);
    assert_eq!(fetches(&out), vec![(1, 20), (2, 30)]);
    let Some(Send::Fetch(later)) = out.last().cloned() else {
        panic!("{out:?}");
    };
    assert!(routes.fetched(&later, 10));
    assert_eq!(routes.finish("a"), (20, 10));

    // Only an upstream: once it fails, the root.
    let mut routes = Routes::default();
    routes.read(read("b", 0, 10), &mut out);
    out.clear();
    routes.holders(
        ItemHolders {
            item: "b".into(),
            holders: Vec::new(),
            upstream: Some(holder(3, 5000)),
        },
        &mut out,
    );
    let Some(Send::Fetch(relayed)) = out.pop() else {
        panic!("{out:?}");
    };
    routes.failed(relayed, &mut out);
    assert_eq!(out, vec![Send::Up(FromAgent::ItemRead(read("b", 0, 10)))]);
}

/// Answers and failures of a fetch that has ended are not counted on a later fetch
/// of the same item; the bytes fetched directly are told at its end.
#[test]
fn a_late_answer_is_not_counted_on_the_next_fetch() {
    let mut routes = Routes::default();
    let mut out = Vec::new();
    let answer = ItemHolders {
        item: "a".into(),
        holders: vec![holder(1, 5000)],
        upstream: None,
    };
    routes.read(read("a", 0, 10), &mut out);
    routes.holders(answer.clone(), &mut out);
    let Some(Send::Fetch(old)) = out.pop() else {
        panic!("{out:?}");
    };
    assert!(routes.fetched(&old, 10));
    assert_eq!(routes.finish("a"), (10, 0));

    out.clear();
    routes.read(read("a", 0, 10), &mut out);
    routes.holders(answer, &mut out);
    assert!(
        !routes.fetched(&old, 10),
        "the old fetch's answer is dropped"
    );
    out.clear();
    routes.failed(old, &mut out);
    assert!(out.is_empty(), "nor is its failure sent anywhere");
    routes.clear();
    assert_eq!(routes.finish("a"), (0, 0));
}

/// Two agents' endpoints with the pilot's agent credentials: one serves `scratch`,
/// the other fetches from it.
struct Pair {
    pool: Pool,
    holder: SocketAddr,
    _dir: tempfile::TempDir,
    scratch: std::path::PathBuf,
    /// What the holder relays of the items it fetches itself.
    relays: Relays,
}

fn credentials(dir: &std::path::Path, role: Role) -> Credentials {
    saker_transport::crypto::install_crypto_provider().unwrap();
    let pilot = dir.join("pilot");
    if !pilot.exists() {
        let created = PilotDir::create(&pilot).unwrap();
        Credentials::generate_into(&created).unwrap();
    }
    Credentials::load(&PilotDir::open(&pilot).unwrap(), role).unwrap()
}

fn pair(dialer: Role) -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let timeouts = LinkTimeouts {
        keep_alive_interval: Duration::from_millis(500),
        max_idle_timeout: Duration::from_secs(2),
    };
    let agent = credentials(dir.path(), Role::Agent);
    let server = quic::bind_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        Some(quic::agent_server_config(&agent, &timeouts).unwrap()),
        quic::client_config(&agent, &timeouts).unwrap(),
    )
    .unwrap();
    let holder = server.local_addr().unwrap();
    let served = scratch.clone();
    let relays = Relays::default();
    let relayed = relays.clone();
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            let served = served.clone();
            let relayed = relayed.clone();
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else {
                    return;
                };
                assert!(quic::is_data_connection(&connection));
                let dirs = crate::items::ItemDirs {
                    scratch: served,
                    memory: None,
                };
                serve(
                    connection,
                    Served {
                        dirs,
                        relays: relayed,
                        agent: None,
                    },
                )
                .await;
            });
        }
    });
    let mine = credentials(dir.path(), dialer);
    let client = quic::client_config(&mine, &timeouts).unwrap();
    let endpoint = quic::bind_endpoint("127.0.0.1:0".parse().unwrap(), None, client).unwrap();
    let config = quic::data_client_config(&mine, &timeouts).unwrap();
    let addr = endpoint.local_addr().unwrap();
    Pair {
        pool: Pool {
            direct: Direct {
                endpoint,
                config,
                addr,
                relays: Relays::default(),
            },
            holders: Mutex::new(HashMap::new()),
        },
        holder,
        _dir: dir,
        scratch,
        relays,
    }
}

/// Another reader with the pair's endpoint, its connections its own.
fn another_pool(pair: &Pair) -> Pool {
    Pool {
        direct: pair.pool.direct.clone(),
        holders: Mutex::new(HashMap::new()),
    }
}

fn fetch_of(read: ItemRead, addr: SocketAddr) -> Fetch {
    Fetch {
        read,
        holder: Holder {
            node: NodeId(1),
            addr,
        },
        route: 1,
    }
}

/// A holder answers reads of its items over one data connection, several at once,
/// each with exactly the bytes asked for (the last one short, at the item's end).
#[tokio::test]
async fn a_holder_serves_the_bytes_of_its_items_directly() {
    let pair = pair(Role::Agent);
    let item: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(pair.scratch.join("part-1"), &item).unwrap();
    let reads = [(0, 1 << 20), (1 << 20, 1 << 20), (2_500_000, 1 << 20)];
    let answers = futures_join(&pair, &reads).await;
    for ((offset, len), answer) in reads.iter().zip(answers) {
        let answer = answer.unwrap();
        let end = (*offset as usize + *len as usize).min(item.len());
        assert_eq!(answer.total, item.len() as u64);
        assert_eq!(answer.offset, *offset);
        assert!(
            answer.data == item[*offset as usize..end],
            "bytes at {offset}"
        );
    }
    assert_eq!(pair.pool.holders.lock().unwrap().len(), 1, "one connection");
}

async fn futures_join(
    pair: &Pair,
    reads: &[(u64, u32); 3],
) -> [Result<ItemData, TransferError>; 3] {
    let fetches = reads.map(|(offset, len)| fetch_of(read("part-1", offset, len), pair.holder));
    let (a, b, c) = tokio::join!(
        pair.pool.fetch(&fetches[0]),
        pair.pool.fetch(&fetches[1]),
        pair.pool.fetch(&fetches[2])
    );
    [a, b, c]
}

/// A holder still fetching an item relays it: a read waits until its bytes have
/// landed there and gets exactly them; once the fetch is whole, reads are served from
/// the kept file; a read still waiting when the holder's fetch fails is told so.
#[tokio::test]
async fn a_holder_relays_what_it_is_fetching_as_it_lands() {
    let pair = pair(Role::Agent);
    let item: Vec<u8> = (0..2_500_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let total = item.len() as u64;
    let mut files = crate::items::ItemFiles::new(1, pair.scratch.clone(), false)
        .with_relays(pair.relays.clone());
    files.begin("part-2");
    let first = fetch_of(read("part-2", 1 << 20, 1 << 20), pair.holder);
    let pool = another_pool(&pair);
    let waiting = tokio::spawn(async move { pool.fetch(&first).await });
    let chunk = |offset: usize, len: usize| ItemData {
        item: "part-2".into(),
        reader: NodeId(1),
        request: 1,
        offset: offset as u64,
        total,
        data: item[offset..offset + len].to_vec(),
        error: None,
    };
    files.write(&chunk(0, 1 << 20)).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "its bytes have not landed");
    files.write(&chunk(1 << 20, 1 << 20)).unwrap();
    let answer = waiting.await.unwrap().unwrap();
    assert_eq!(
        (answer.total, &answer.data[..]),
        (total, &item[1 << 20..2 << 20])
    );

    let tail = fetch_of(read("part-2", 2 << 20, 1 << 20), pair.holder);
    let pool = another_pool(&pair);
    let waiting = tokio::spawn(async move { pool.fetch(&tail).await });
    files
        .write(&chunk(2 << 20, item.len() - (2 << 20)))
        .unwrap();
    files.keep("part-2").unwrap();
    let answer = waiting.await.unwrap().unwrap();
    assert_eq!(&answer.data[..], &item[2 << 20..]);
    let whole = fetch_of(read("part-2", 0, 1 << 20), pair.holder);
    assert_eq!(
        &pair.pool.fetch(&whole).await.unwrap().data[..],
        &item[..1 << 20]
    );

    files.begin("part-3");
    let never = fetch_of(read("part-3", 0, 1 << 20), pair.holder);
    let pool = another_pool(&pair);
    let waiting = tokio::spawn(async move { pool.fetch(&never).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    files.discard("part-3");
    let failed = waiting.await.unwrap();
    assert!(
        matches!(failed, Err(TransferError::Data(DataError::Holder(ref reason))) if reason.contains("cannot read")),
        "{failed:?}"
    );
}

/// A holder says why it cannot answer: an item it does not have, a name that is no
/// item's (it never reads outside its scratch directory).
#[tokio::test]
async fn a_holder_refuses_what_it_does_not_hold() {
    let pair = pair(Role::Agent);
    std::fs::write(pair.scratch.parent().unwrap().join("secret"), b"x").unwrap();
    for (item, said) in [
        ("missing", "cannot read it on its holder"),
        ("../secret", "no such item name"),
    ] {
        let fetch = fetch_of(read(item, 0, 10), pair.holder);
        match pair.pool.fetch(&fetch).await {
            Err(TransferError::Data(DataError::Holder(reason))) => {
                assert!(reason.contains(said), "{reason}")
            }
            other => panic!("{item}: {other:?}"),
        }
    }
}

/// A client (the pilot's client certificate: a driver on no node) reads items and
/// puts objects on a data connection; a put makes the object's file whole in the
/// scratch, and one that cannot be taken says why and leaves no file.
#[tokio::test]
async fn a_client_reads_items_and_puts_objects() {
    let pair = pair(Role::Client);
    std::fs::write(pair.scratch.join("part-1"), b"data").unwrap();
    let fetch = fetch_of(read("part-1", 0, 10), pair.holder);
    assert_eq!(pair.pool.fetch(&fetch).await.unwrap().data, b"data");

    let connection = pair.pool.connection(pair.holder).await.unwrap();
    let object = vec![7u8; 9 << 20];
    let item = "obj-000000000000000000000000000000ab";
    let stored = saker_client::data::put_object(&connection, item, &object[..]).await;
    assert_eq!(stored.unwrap(), object.len() as u64);
    assert_eq!(std::fs::read(pair.scratch.join(item)).unwrap(), object);
    for (name, said) in [
        (item, "holds obj-000000000000000000000000000000ab already"),
        ("part-9", "names no object"),
        ("obj-../x", "names no object"),
    ] {
        let refused = saker_client::data::put_object(&connection, name, &b"x"[..]).await;
        match refused {
            Err(DataError::Holder(reason)) => assert!(reason.contains(said), "{reason}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    let mut left: Vec<String> = std::fs::read_dir(&pair.scratch)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["obj-000000000000000000000000000000ab", "part-1"]);
}

/// Only agents and clients may open a data connection: the root's certificate is
/// refused in the handshake.
#[tokio::test]
async fn a_root_certificate_cannot_fetch() {
    let pair = pair(Role::Root);
    std::fs::write(pair.scratch.join("part-1"), b"data").unwrap();
    let fetch = fetch_of(read("part-1", 0, 10), pair.holder);
    let answer = pair.pool.fetch(&fetch).await;
    assert!(
        matches!(
            answer,
            Err(TransferError::Connect(_)
                | TransferError::Data(DataError::Connection(_) | DataError::Read(_)))
        ),
        "{answer:?}"
    );
}

/// A holder that does not answer (a dead one) fails its read once the dial's bound
/// passes, well before QUIC's idle timeout (10 s), and the reads after it fail at once
/// for a while rather than each waiting as long.
#[tokio::test]
async fn an_unreachable_holder_is_not_dialed_again_at_once() {
    let pair = pair(Role::Agent);
    // A UDP socket that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let fetch = fetch_of(read("part-1", 0, 10), silent.local_addr().unwrap());
    let dialed = Instant::now();
    let answer = pair.pool.fetch(&fetch).await;
    assert!(
        matches!(answer, Err(TransferError::DialTimeout)),
        "{answer:?}"
    );
    assert!(
        dialed.elapsed() < Duration::from_secs(9),
        "{:?}",
        dialed.elapsed()
    );
    let started = Instant::now();
    let again = pair.pool.fetch(&fetch).await;
    assert!(
        matches!(again, Err(TransferError::Unreachable)),
        "{again:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Bytes that are no request (garbage, a header announcing a huge frame) end their
/// stream unanswered; the holder goes on serving the same connection.
#[tokio::test]
async fn a_holder_drops_a_malformed_request_and_serves_the_next() {
    let pair = pair(Role::Agent);
    std::fs::write(pair.scratch.join("part-1"), b"intact").unwrap();
    let connection = pair.pool.connection(pair.holder).await.unwrap();
    let mut huge = [0u8; 8];
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    for request in [&b"not a frame at all, just bytes"[..], &huge[..]] {
        let (mut send, mut recv) = connection.open_bi().await.unwrap();
        send.write_all(request).await.unwrap();
        send.finish().unwrap();
        let answer = recv.read_to_end(1 << 20).await.unwrap_or_default();
        assert!(answer.is_empty(), "no answer to {request:?}");
    }
    let fetch = fetch_of(read("part-1", 0, 10), pair.holder);
    let answer = pair.pool.fetch(&fetch).await.unwrap();
    assert_eq!(answer.data, b"intact");
}
