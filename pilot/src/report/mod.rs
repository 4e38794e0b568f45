//! `saker report`: one self-contained HTML page of what a pilot did, read from its
//! journal (so it works for a finished pilot as for a running one). The journal is
//! read as a stream into a [`digest::Digest`]; [`timeline`] lays it on a time axis;
//! [`plots`] draws the SVG; [`page`] writes the HTML.

pub mod digest;
pub mod page;
pub mod plots;
pub mod timeline;

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result};
use saker_client::Client;
use saker_client::results::Timestamp;
use saker_root::pilot::JOURNAL_DIR;
use saker_root::records::Record;

use self::digest::Digest;
use self::page::{Context, LiveFigures};
use self::plots::Plot;
use self::timeline::{Gantt, Timeline};
use crate::cli::ReportArgs;

/// Reads a pilot directory's journal into a digest.
pub fn read_journal(dir: &Path) -> Result<Digest> {
    let journal = dir.join(JOURNAL_DIR);
    if !journal.is_dir() {
        anyhow::bail!(
            "{} has no journal (is it a pilot directory?)",
            dir.display()
        );
    }
    let reading = || format!("reading the journal in {}", journal.display());
    let mut digest = Digest::default();
    for record in saker_journal::JournalReader::<Record>::open(&journal).with_context(reading)? {
        digest.add(&record.with_context(reading)?);
    }
    Ok(digest)
}

/// Draws every plot the digest has data for.
pub fn draw(digest: &Digest, timeline: Option<&Timeline>) -> Result<Vec<Plot>> {
    let mut plots = Vec::new();
    if let Some(timeline) = timeline {
        plots.push(plots::utilization(timeline)?);
        plots.push(plots::node_heatmap(digest, timeline)?);
        plots.push(plots::throughput(timeline)?);
        let gantt = Gantt::new(digest, timeline);
        plots.push(plots::gantt(digest, timeline, &gantt)?);
    }
    plots.extend(plots::stage_histograms(digest)?);
    Ok(plots)
}

/// The page for a digest.
pub fn render(digest: &Digest, context: &Context) -> Result<String> {
    let timeline = Timeline::new(digest);
    let plots = draw(digest, timeline.as_ref())?;
    Ok(page::render(digest, timeline.as_ref(), &plots, context))
}

pub(crate) async fn report(args: ReportArgs) -> Result<ExitCode> {
    let began = Instant::now();
    let dir = &args.dir.dir;
    // A live pilot adds what only it knows; its journal is read all the same.
    let live = match Client::connect(dir, crate::commands::CLIENT_NAME).await {
        Ok(client) => client.status().await.ok().map(|status| LiveFigures {
            queued: status.queued + status.waiting,
            running: status.running,
            speculated: status.speculated,
        }),
        Err(_) => None,
    };
    let dir_owned = dir.clone();
    let digest = tokio::task::spawn_blocking(move || read_journal(&dir_owned))
        .await
        .context("reading the journal")??;
    let context = Context {
        dir: dir.display().to_string(),
        generated: Timestamp::now(),
        live,
    };
    let html = render(&digest, &context)?;
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| dir.join("report.html"));
    std::fs::write(&output, &html).with_context(|| format!("writing {}", output.display()))?;
    eprintln!(
        "saker: wrote {} ({} results, {:.0} KiB, {:.2} s)",
        output.display(),
        digest.results(),
        html.len() as f64 / 1024.0,
        began.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
