//! Rows measured by a Python script beside their Python baselines (`perf/python/`):
//! the `saker` client against `concurrent.futures.ProcessPoolExecutor`, Parsl with
//! `SakerExecutor` against HighThroughputExecutor and ThreadPoolExecutor, and
//! Snakemake with the Saker executor plugin against its local executor and, on a Slurm
//! cluster, against snakemake-executor-plugin-slurm.
//!
//! A script prints one JSON object per row on stdout:
//! `{"row": NAME, "unit": "per_second" | "microseconds" | "mebibytes" | "seconds" |
//!   "mebibytes_per_second",
//!   "saker": VALUE, "baseline": VALUE | null, "baseline_name": TEXT,
//!   "target": {"ratio_at_least": R} | {"ratio_at_most": R} | {"at_least": V} |
//!   {"at_most": V} | null}` (units also `"bytes_per_task"`),
//! where a VALUE is a number, or `{"samples_us": [..], "percentile": P}`: raw latency
//! samples, whose percentile is taken here with hdrhistogram like every latency row.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use serde_json::Value;

use super::Setup;
use crate::options::Benchmark;
use crate::report::{Measure, Row, Target, Unit};

/// The Python that has the package's test requirements (Parsl, Snakemake): the
/// repository's venv unless `SAKER_PYTHON` names another.
fn python() -> PathBuf {
    std::env::var_os("SAKER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn run(setup: &Setup, benchmark: Benchmark, script: &str, args: &[&str]) -> Result<Vec<Row>> {
    let python = python();
    if !python.exists() {
        bail!(
            "{} is missing: make the venv (python3 -m venv .venv && .venv/bin/pip install -r python/requirements-test.txt) or set SAKER_PYTHON",
            python.display()
        );
    }
    let script = repo().join("perf/python").join(script);
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .args(args)
        .env("SAKER_BIN", &setup.saker)
        .env("PYTHONPATH", repo().join("python"))
        // HighThroughputExecutor starts its interchange from the venv's bin/.
        .env("PATH", path_with(python.parent().unwrap_or(Path::new("."))));
    if setup.quick {
        command.arg("--quick");
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    rows(benchmark, &String::from_utf8_lossy(&output.stdout))
}

/// The rows a program printed, one JSON object per line (other lines are ignored).
pub(super) fn rows(benchmark: Benchmark, printed: &str) -> Result<Vec<Row>> {
    printed
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| row(benchmark, line))
        .collect()
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).unwrap_or_default()
}

/// One printed row as a table row.
fn row(benchmark: Benchmark, line: &str) -> Result<Row> {
    let object: Value = serde_json::from_str(line).with_context(|| format!("row {line:?}"))?;
    let unit = match object["unit"].as_str() {
        Some("per_second") => Unit::PerSecond,
        Some("microseconds") => Unit::Microseconds,
        Some("mebibytes") => Unit::Mebibytes,
        Some("mebibytes_per_second") => Unit::MebibytesPerSecond,
        Some("seconds") => Unit::Seconds,
        Some("bytes_per_task") => Unit::BytesPerTask,
        other => bail!("row {line:?}: unknown unit {other:?}"),
    };
    let saker = measure(&object["saker"], unit)?.context("a row needs a saker value")?;
    let baseline =
        measure(&object["baseline"], unit)?.map(|baseline| {
            match object["baseline_name"].as_str() {
                Some(name) => baseline.with_detail(name),
                None => baseline,
            }
        });
    let target = if let Some(ratio) = object["target"]["ratio_at_least"].as_f64() {
        Target::RatioAtLeast(ratio)
    } else if let Some(ratio) = object["target"]["ratio_at_most"].as_f64() {
        Target::RatioAtMost(ratio)
    } else if let Some(value) = object["target"]["at_least"].as_f64() {
        Target::AtLeast(value)
    } else if let Some(value) = object["target"]["at_most"].as_f64() {
        Target::AtMost(value)
    } else {
        Target::None
    };
    Ok(Row {
        benchmark,
        name: object["row"].as_str().unwrap_or("?").to_owned(),
        saker,
        baseline,
        target,
    })
}

fn measure(value: &Value, unit: Unit) -> Result<Option<Measure>> {
    if value.is_null() {
        return Ok(None);
    }
    if let Some(number) = value.as_f64() {
        return Ok(Some(Measure::new(number, unit)));
    }
    let samples = value["samples_us"]
        .as_array()
        .context("a value is a number or {samples_us, percentile}")?;
    let percentile = value["percentile"].as_f64().unwrap_or(50.0);
    let mut histogram = Histogram::<u64>::new(3)?;
    for sample in samples {
        histogram.record(sample.as_f64().unwrap_or(0.0).round().max(1.0) as u64)?;
    }
    let detail = format!("p{percentile:.0} of {}", histogram.len());
    Ok(Some(
        Measure::new(histogram.value_at_quantile(percentile / 100.0) as f64, unit)
            .with_detail(detail),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_take_numbers_and_samples_and_both_kinds_of_target() {
        let rate = row(
            Benchmark::Parsl,
            r#"{"row": "r", "unit": "per_second", "saker": 900, "baseline": 600, "baseline_name": "HTEX", "target": {"ratio_at_least": 1.5}}"#,
        )
        .unwrap();
        assert_eq!(rate.ratio(), Some(1.5));
        assert_eq!(rate.met(), Some(true));
        let latency = row(
            Benchmark::Parsl,
            r#"{"row": "l", "unit": "microseconds", "saker": {"samples_us": [100, 200, 300], "percentile": 50}, "baseline": {"samples_us": [500, 500, 500]}, "target": {"ratio_at_most": 0.5}}"#,
        )
        .unwrap();
        assert_eq!(latency.saker.value, 200.0);
        assert_eq!(latency.met(), Some(true));
        assert!(
            row(
                Benchmark::Parsl,
                r#"{"row": "x", "unit": "parsecs", "saker": 1}"#
            )
            .is_err()
        );
    }
}
