//! `saker report` on real runs: its numbers match `saker results` exactly, and the page
//! renders in a real headless browser (Debian's chromium) without console messages,
//! every plot with data. The screenshot is kept under `SAKER_ARTIFACTS` (CI's output).

mod common;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use common::browser;
use common::{Service, run, saker};
use saker_client::results::Timestamp;
use serde_json::Value;

/// The JSON block of figures in a report page.
fn summary(html: &str) -> Value {
    let start = html
        .find(r#"<script type="application/json" id="saker-summary">"#)
        .expect("a summary block");
    let body = &html[start..];
    let body = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
    serde_json::from_str(body).expect("the summary is JSON")
}

fn report(dir: &Path, page: &Path) -> Value {
    let output = run(saker()
        .args(["report", "--dir"])
        .arg(dir)
        .arg("-o")
        .arg(page));
    assert!(output.status.success(), "saker report failed");
    summary(&std::fs::read_to_string(page).unwrap())
}

fn micros(text: &Value) -> u64 {
    Timestamp::from_str(text.as_str().unwrap())
        .unwrap()
        .unix_micros()
}

/// Where screenshots go: `SAKER_ARTIFACTS` (the test command sets it), else beside
/// the page.
fn artifacts(fallback: &Path) -> PathBuf {
    let dir =
        std::env::var_os("SAKER_ARTIFACTS").map_or_else(|| fallback.to_owned(), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three agents, 60 tasks: six fail for good (exit 3, after one retry each), eight
/// fail once and pass on their retry.
#[test]
fn report_numbers_match_results_and_the_page_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let script = format!(
        "sleep 0.05; i={{index}}; [ $((i % 10)) = 0 ] && exit 3; \
         if [ $((i % 7)) = 0 ] && [ ! -e {marks}/$i ]; then touch {marks}/$i; exit 5; fi; exit 0",
        marks = marks.display()
    );
    let output = run(saker()
        .args(["run", "--dir"])
        .arg(&pilot)
        .args([
            "--agents",
            "3",
            "--slots",
            "6",
            "--retries",
            "1",
            "--array",
            "1-60",
        ])
        .args(["--", "sh", "-c", &script]));
    assert!(!output.status.success(), "six tasks fail");

    let page = dir.path().join("report.html");
    let figures = report(&pilot, &page);
    let results = common::results(&pilot);
    assert_eq!(results.len(), 60);
    let count = |state: &str| results.iter().filter(|r| r["state"] == state).count() as u64;
    assert_eq!((count("succeeded"), count("failed")), (54, 6));
    assert_eq!(figures["results"], 60);
    assert_eq!(figures["submitted"], 60);
    assert_eq!(figures["succeeded"], count("succeeded"));
    assert_eq!(figures["failed"], count("failed"));
    assert_eq!(figures["cancelled"], count("cancelled"));
    assert_eq!(figures["live"], false);
    // The makespan, to the microsecond: first submit to last end among the results.
    let first = results
        .iter()
        .map(|r| micros(&r["submit_time"]))
        .min()
        .unwrap();
    let last = results
        .iter()
        .map(|r| micros(&r["end_time"]))
        .max()
        .unwrap();
    assert_eq!(micros(&figures["first_submit"]), first);
    assert_eq!(micros(&figures["last_end"]), last);
    assert_eq!(figures["makespan_us"], last - first);
    let earlier = |end: &str| -> u64 {
        results
            .iter()
            .flat_map(|r| r["history"].as_array().unwrap())
            .filter(|note| note["end"] == end)
            .count() as u64
    };
    assert_eq!(earlier("failed"), 6 + 8);
    assert_eq!(figures["retried_attempts"], earlier("failed"));
    assert_eq!(figures["replayed_attempts"], earlier("lost"));
    assert_eq!(
        figures["nodes"], 3,
        "three agents on one host are three nodes"
    );
    let efficiency = figures["efficiency"].as_f64().unwrap();
    assert!(efficiency > 0.0 && efficiency <= 1.0, "{efficiency}");
    let total = &figures["stages"]["total"];
    assert_eq!(total["count"], 60);
    assert!(
        total["p50_us"].as_u64().unwrap() >= 50_000,
        "each task sleeps 50 ms: {total}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<td class=\"l\">exit 3</td><td>6</td>"),
        "failures by reason"
    );
    // Nothing to fetch: no addresses but SVG's namespace name, no src or href.
    let addresses = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for fetch in ["http://", "https://", " src=", " href="] {
        assert!(!addresses.contains(fetch), "the page has {fetch}");
    }

    let Some(chromium) = browser::chromium() else {
        return;
    };
    let rendered = browser::render(&chromium, &page, &dir.path().join("profile"));
    assert!(
        rendered.console.is_empty(),
        "console: {:#?}",
        rendered.console
    );
    for plot in [
        "utilization",
        "nodes",
        "throughput",
        "gantt",
        "wait",
        "queue",
        "launch",
        "run",
        "deliver",
        "total",
    ] {
        let id = format!("<figure id=\"plot-{plot}\" data-points=\"");
        let at = rendered
            .dom
            .find(&id)
            .unwrap_or_else(|| panic!("plot {plot} missing"));
        let rest = &rendered.dom[at + id.len()..];
        let points: u64 = rest[..rest.find('"').unwrap()].parse().unwrap();
        assert!(points > 0, "plot {plot} has no data");
        assert_eq!(figures["plots"][plot], points);
        let figure = &rest[..rest.find("</figure>").unwrap()];
        assert!(
            figure.contains("<svg") && figure.contains("<rect"),
            "plot {plot} drew nothing"
        );
    }
    let png = artifacts(dir.path()).join("report.png");
    browser::screenshot(
        &chromium,
        &page,
        &dir.path().join("profile"),
        &png,
        (1100, 3400),
    );
    eprintln!("screenshot: {}", png.display());
}

/// A running pilot's report covers the results so far and says it is running.
#[test]
fn a_live_pilots_report_says_so_and_counts_what_ended() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let output = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&service.pilot)
        .args(["--array", "1-10", "--", "true"]));
    assert!(output.status.success());
    let page = dir.path().join("live.html");
    let figures = report(&service.pilot, &page);
    assert_eq!(figures["live"], true);
    assert_eq!(figures["succeeded"], 10);
    assert_eq!(figures["nodes"], 1);
    assert_eq!(figures["speculated"], 0);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("pilot running"),
        "the page says the pilot runs"
    );
}
