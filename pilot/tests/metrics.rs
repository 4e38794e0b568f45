//! `saker pilot --metrics ADDR`: the figures a site's Prometheus scrapes, over real
//! HTTP from a real pilot, agree with what ran.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Service, run, saker, wait_for};

/// `GET path` over HTTP/1.1: the status line, the headers and the body.
fn get(addr: &str, path: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_lowercase(), body.to_owned())
}

/// The value of the sample line that starts with `series ` (name and labels).
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{body}"))
        .parse()
        .unwrap()
}

#[test]
fn a_scrape_reports_what_ran_in_openmetrics_text() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(
        dir.path(),
        &["--agents", "1", "--slots", "2", "--metrics", "127.0.0.1:0"],
    );
    let addr_file = service.pilot.join("metrics.addr");
    wait_for("metrics.addr", Duration::from_secs(20), || {
        std::fs::read_to_string(&addr_file).is_ok_and(|text| text.ends_with('\n'))
    });
    let addr = std::fs::read_to_string(&addr_file)
        .unwrap()
        .trim()
        .to_owned();

    // Five tasks, the third fails.
    let output = run(saker()
        .args(["submit", "--wait", "--array", "1-5", "--dir"])
        .arg(&service.pilot)
        .args(["--", "sh", "-c", "test {index} -ne 3"]));
    assert_eq!(output.status.code(), Some(1), "{output:?}");

    let (status, headers, body) = get(&addr, "/metrics");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text"),
        "{headers}"
    );
    assert_eq!(sample(&body, "saker_tasks{state=\"succeeded\"}"), 4.0);
    assert_eq!(sample(&body, "saker_tasks{state=\"failed\"}"), 1.0);
    assert_eq!(sample(&body, "saker_tasks{state=\"queued\"}"), 0.0);
    assert_eq!(sample(&body, "saker_slots"), 2.0);
    assert_eq!(sample(&body, "saker_agents"), 1.0);
    let run_p50 = sample(&body, "saker_stage_seconds{stage=\"run\",quantile=\"0.5\"}");
    assert!((0.0..5.0).contains(&run_p50), "{run_p50}");
    let node = body
        .lines()
        .find(|line| line.starts_with("saker_node_slots{node=\"0\""))
        .unwrap_or_else(|| panic!("no node 0 in:\n{body}"));
    assert!(node.ends_with(" 2"), "{node}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    let (status, _, _) = get(&addr, "/elsewhere");
    assert!(status.contains(" 404 "), "{status}");
    drop(service);
}

#[test]
fn a_metrics_address_that_cannot_be_bound_is_refused_before_the_pilot_runs() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = run(saker()
        .args([
            "pilot",
            "--agents",
            "1",
            "--slots",
            "1",
            "--metrics",
            &addr,
            "--dir",
        ])
        .arg(dir.path().join("pilot")));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--metrics") && stderr.contains(&addr),
        "{stderr}"
    );
}
