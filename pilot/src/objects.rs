//! `saker object`: objects by reference for a client that sees no node's store (a
//! login node). Puts and gets go over data connections to the nodes' agents with the
//! pilot's client certificate (`saker_client::data::Remote`); the root only records
//! where each object is.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use saker_client::data::Remote;
use saker_core::{NodeId, ObjectId};

use crate::cli::{ObjectAction, ObjectArgs};
use crate::commands::connect;

pub async fn object(args: ObjectArgs) -> Result<ExitCode> {
    let client = connect(&args.dir).await?;
    match args.action {
        ObjectAction::Put { file, node } => {
            let remote = Remote::open(&args.dir.dir)?;
            let node = node.map(NodeId);
            let put = if file.as_os_str() == "-" {
                remote.put(&client, tokio::io::stdin(), node).await
            } else {
                let source = tokio::fs::File::open(&file)
                    .await
                    .with_context(|| format!("opening {}", file.display()))?;
                remote.put(&client, source, node).await
            }
            .context("putting the object")?;
            println!("{}", put.object);
        }
        ObjectAction::Get { id, output, node } => {
            let object = parse_id(&id)?;
            let remote = Remote::open(&args.dir.dir)?;
            let sink: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match output {
                Some(path) => Box::new(
                    tokio::fs::File::create(&path)
                        .await
                        .with_context(|| format!("creating {}", path.display()))?,
                ),
                None => Box::new(tokio::io::stdout()),
            };
            match node {
                Some(node) => remote.get_from(&client, object, NodeId(node), sink).await,
                None => remote.get(&client, object, sink).await,
            }
            .with_context(|| format!("getting object {object}"))?;
        }
        ObjectAction::Free { ids } => {
            let objects = ids.iter().map(|id| parse_id(id)).collect::<Result<_>>()?;
            client.free_objects(objects).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_id(text: &str) -> Result<ObjectId> {
    match ObjectId::parse(text) {
        Some(id) => Ok(id),
        None => bail!("{text:?} is no object id (1 to 32 hexadecimal digits)"),
    }
}
