//! Chaining allocations: when the walltime stops a run with tasks left, submit the
//! same batch script again, to start once this job ends, and resume the pilot there.

use std::path::Path;

use anyhow::{Context, Result};
use saker_slurm::{BatchRequest, SlurmJobId};

use crate::cli::RunArgs;

/// Position of this job in a chain of continuations (0 for the first).
pub const CHAIN_INDEX_VARIABLE: &str = "SAKER_CHAIN_INDEX";

/// Submits `script` as the continuation of the current Slurm job. Returns the new
/// job id, or `None` when the chain is already `--max-chain` long.
pub fn submit_continuation(script: &Path, args: &RunArgs) -> Result<Option<SlurmJobId>> {
    let index: u32 = std::env::var(CHAIN_INDEX_VARIABLE)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if index >= args.max_chain {
        eprintln!(
            "saker: not submitting a continuation: this is continuation {index} of at most {}",
            args.max_chain
        );
        return Ok(None);
    }
    let job =
        saker_slurm::current_job().context("reading this job's settings for its continuation")?;
    let text = std::fs::read_to_string(script)
        .with_context(|| format!("reading the batch script {}", script.display()))?;
    let time_limit_minutes = match &args.chain_time {
        Some(text) => {
            let limit = saker_client::spec::parse_duration(text)
                .with_context(|| format!("--chain-time {text:?}"))?;
            Some(limit.as_secs().div_ceil(60) as u32)
        }
        None => job
            .time_limit
            .map(|limit| limit.as_secs().div_ceil(60) as u32),
    };
    let mut environment: Vec<String> = std::env::vars()
        .filter(|(name, _)| {
            name == "SLURM_CONF" || !(name.starts_with("SLURM_") || name.starts_with("SLURMD_"))
        })
        .filter(|(name, _)| name != CHAIN_INDEX_VARIABLE)
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    environment.push(format!("{CHAIN_INDEX_VARIABLE}={}", index + 1));
    let output = args
        .dir
        .as_ref()
        .map(|dir| dir.join("logs").join("continuation-%j.out"));
    let request = BatchRequest {
        name: Some(job.name.clone()),
        time_limit_minutes,
        partition: (!job.partition.is_empty()).then(|| job.partition.clone()),
        working_directory: std::env::current_dir().ok(),
        stdout: output.clone(),
        stderr: output,
        environment: Some(environment),
        dependency: Some(format!("afterany:{}", job.job_id)),
        ..BatchRequest::new(text, job.nodes.len().max(1) as u32)
    };
    let next = saker_slurm::submit_batch(&request).context("submitting the continuation job")?;
    eprintln!(
        "saker: submitted continuation job {next} (after job {}, chain position {})",
        job.job_id,
        index + 1
    );
    Ok(Some(next))
}
