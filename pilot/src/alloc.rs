//! `saker alloc list|pause|resume`: an elastic pilot's batch allocations, and whether
//! it asks for more.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use saker_client::StatusReport;

use crate::cli::{AllocAction, AllocArgs};

pub async fn alloc(args: AllocArgs) -> Result<ExitCode> {
    let dir = match &args.action {
        AllocAction::List(dir) | AllocAction::Pause(dir) | AllocAction::Resume(dir) => dir,
    };
    let client = crate::commands::connect(dir).await?;
    match args.action {
        AllocAction::List(_) => {
            let status = client.status().await?;
            let text = table(&status);
            if text.is_empty() {
                println!("no allocations");
            } else {
                print!("{text}");
            }
        }
        AllocAction::Pause(_) => {
            client.provisioning(true).await?;
            println!(
                "paused: the pilot asks for no more allocations (it still releases idle ones)"
            );
        }
        AllocAction::Resume(_) => {
            client.provisioning(false).await?;
            println!("resumed: the pilot asks for allocations as its queue needs them");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The allocations as `status` and `alloc list` print them; empty without any.
pub fn table(status: &StatusReport) -> String {
    let mut out = String::new();
    if status.allocations.is_empty() && !status.provisioning_paused {
        return out;
    }
    if status.provisioning_paused {
        out.push_str("provisioning paused (saker alloc resume)\n");
    }
    if status.allocations.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{:<6} {:>9} {:<10} {:<11} {:>5} {:>7} {:>9}  WHY",
        "ALLOC", "JOB", "STATE", "SLURM", "NODES", "FIRST", "LEFT"
    );
    for a in &status.allocations {
        let left = a
            .seconds_left
            .map_or_else(|| "-".to_owned(), crate::commands::clock);
        let _ = writeln!(
            out,
            "{:<6} {:>9} {:<10} {:<11} {:>5} {:>7} {:>9}  {}",
            a.allocation,
            a.job_id.map_or_else(|| "-".to_owned(), |j| j.to_string()),
            a.state,
            if a.slurm_state.is_empty() {
                "-"
            } else {
                &a.slurm_state
            },
            a.nodes,
            a.first_node,
            left,
            a.reason
        );
    }
    out
}
