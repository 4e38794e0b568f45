//! `saker alloc list|pause|resume`: an elastic pilot's batch allocations, and whether
//! it asks for more.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{AllocAction, AllocArgs};

pub async fn alloc(args: AllocArgs) -> Result<ExitCode> {
    let dir = match &args.action {
        AllocAction::List(dir) | AllocAction::Pause(dir) | AllocAction::Resume(dir) => dir,
    };
    let client = crate::commands::connect(dir).await?;
    match args.action {
        AllocAction::List(_) => {
            let status = client.status().await?;
            let text = crate::commands::allocation_table(&status);
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
