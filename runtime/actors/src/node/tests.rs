use super::*;

/// One tree: agent n's parent is position n / k. A subtree from `base`: its first
/// agent under the root, the rest a k-ary heap among themselves, never reaching
/// below `base` (another allocation's nodes).
#[test]
fn parents_in_the_tree_and_in_a_subtree_of_the_root() {
    assert_eq!(parent_in(0, 2, None), Position::Root);
    assert_eq!(parent_in(1, 2, None), Position::Root);
    assert_eq!(parent_in(2, 2, None), Position::Agent(0));
    assert_eq!(parent_in(100, 2, Some(100)), Position::Root);
    assert_eq!(parent_in(101, 2, Some(100)), Position::Agent(100));
    assert_eq!(parent_in(102, 2, Some(100)), Position::Agent(100));
    assert_eq!(parent_in(103, 2, Some(100)), Position::Agent(101));
    assert_eq!(parent_in(106, 2, Some(100)), Position::Agent(102));
    assert_eq!(
        ancestors(106, 2, Some(100)),
        [Position::Agent(102), Position::Agent(100), Position::Root]
    );
    for node in 100..400 {
        for position in ancestors(node, 3, Some(100)) {
            if let Position::Agent(n) = position {
                assert!((100..node).contains(&n), "{node} -> {n}");
            }
        }
    }
}

/// An agent that finds no ancestor gives up with the last one's answer, typed,
/// and its text says which ancestor and why.
#[tokio::test]
async fn an_agent_with_no_live_ancestor_gives_up_with_the_last_answer() {
    let dir = tempfile::tempdir().unwrap();
    let dialer = Dialer {
        endpoint: quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap(),
        pilot_dir: dir.path().to_path_buf(),
        node: 5,
        fanout: 2,
        base: None,
        any_root: false,
        liveness: Liveness::default(),
    };
    let Err(error) = dialer.attach_nearest(None, Duration::ZERO).await else {
        panic!("attached to nobody");
    };
    let NodeError::NoAncestor { last, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(last.position, Position::Root, "the root is dialed last");
    assert!(
        matches!(&last.kind, DialErrorKind::ReadAddress { path, .. } if path.ends_with("addr/root"))
    );
    let text = crate::error_chain(&error);
    assert!(
        text.starts_with(
            "no live ancestor answered within 0ns: dialing the root failed: cannot read its address file"
        ),
        "{text}"
    );
}

/// An agent bound to loopback whose parent is on another address says so at once
/// instead of retrying for its whole start-up wait.
#[tokio::test]
async fn an_agent_on_loopback_refuses_a_parent_elsewhere_at_once() {
    let dir = tempfile::tempdir().unwrap();
    publish_address(
        &address_file(dir.path(), Position::Root),
        "10.1.2.3:4567".parse().unwrap(),
    )
    .unwrap();
    let dialer = Dialer {
        endpoint: quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap(),
        pilot_dir: dir.path().to_path_buf(),
        node: 0,
        fanout: 2,
        base: None,
        any_root: false,
        liveness: Liveness::default(),
    };
    let started = std::time::Instant::now();
    let Err(error) = dialer.attach_first(Duration::from_secs(60)).await else {
        panic!("attached to an unreachable root");
    };
    assert!(started.elapsed() < Duration::from_secs(10), "at once");
    let text = crate::error_chain(&error);
    assert!(text.contains("--bind 0.0.0.0"), "{text}");
    assert!(text.contains("10.1.2.3:4567"), "{text}");
}
