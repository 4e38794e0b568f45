//! Retries, statistically: tasks that fail at random half the time, retried up to K
//! times, succeed with probability 1 − 0.5^(K+1).

mod common;

use common::{results, run, saker};

#[test]
fn success_rate_with_k_retries_matches_one_minus_half_to_the_k_plus_one() {
    const TASKS: u64 = 2000;
    const RETRIES: u32 = 2;
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    // Each attempt is its own bash process, so $RANDOM draws afresh every time.
    let output = run(saker()
        .args([
            "run",
            "--progress",
            "none",
            "--no-sync",
            "--retries",
            &RETRIES.to_string(),
        ])
        .args(["--array", &format!("1-{TASKS}"), "--dir"])
        .arg(&pilot)
        .args(["--", "bash", "-c", "exit $((RANDOM % 2))"]));
    assert_eq!(
        output.status.code(),
        Some(1),
        "some tasks fail every attempt"
    );

    let records = results(&pilot);
    assert_eq!(records.len() as u64, TASKS);
    let succeeded = records.iter().filter(|r| r["state"] == "succeeded").count() as f64;
    let rate = succeeded / TASKS as f64;
    let expected = 1.0 - 0.5f64.powi(RETRIES as i32 + 1);
    let sigma = (expected * (1.0 - expected) / TASKS as f64).sqrt();
    assert!(
        (rate - expected).abs() < 4.0 * sigma,
        "success rate {rate:.4}, expected {expected:.4} ± {:.4}",
        4.0 * sigma
    );
    for record in &records {
        let attempts = record["attempts"].as_u64().unwrap();
        if record["state"] == "failed" {
            assert_eq!(
                attempts,
                u64::from(RETRIES) + 1,
                "a failed task used every retry"
            );
            assert_eq!(record["exit_code"], 1);
        } else {
            assert!((1..=u64::from(RETRIES) + 1).contains(&attempts));
        }
    }
}
