//! The report as one HTML file: inline CSS and SVG, no script, nothing fetched. Its
//! figures are also in a JSON block (`<script type="application/json"
//! id="saker-summary">`) for programs and for the tests that compare it with
//! `saker results`.

use std::fmt::Write as _;

use serde_json::json;

use super::digest::{Digest, FailureGroup, STAGES};
use super::plots::Plot;
use super::timeline::Timeline;
use saker_client::results::Timestamp;

/// What the page says besides the digest.
#[derive(Debug, Clone)]
pub struct Context {
    pub dir: String,
    pub generated: Timestamp,
    /// The live pilot's status, when one answered: it is still running.
    pub live: Option<LiveFigures>,
}

/// Figures only a live pilot knows (the journal does not keep them).
#[derive(Debug, Clone, Copy)]
pub struct LiveFigures {
    pub queued: u64,
    pub running: u64,
    pub speculated: u64,
}

const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 100.0];

/// The numbers of the page, as JSON.
pub fn summary(
    digest: &Digest,
    timeline: Option<&Timeline>,
    plots: &[Plot],
    context: &Context,
) -> serde_json::Value {
    let stages: serde_json::Map<String, serde_json::Value> = STAGES
        .iter()
        .zip(&digest.stages)
        .map(|((name, _), h)| {
            let mut stage = json!({ "count": h.len() });
            if !h.is_empty() {
                for q in PERCENTILES {
                    stage[percentile_key(q)] = json!(h.value_at_percentile(q));
                }
            }
            ((*name).to_owned(), stage)
        })
        .collect();
    let plots: serde_json::Map<String, serde_json::Value> = plots
        .iter()
        .map(|p| (p.id.to_owned(), json!(p.points)))
        .collect();
    json!({
        "pilot_id": digest.pilot_id,
        "generated": context.generated.to_string(),
        "live": context.live.is_some(),
        "submitted": digest.submitted,
        "results": digest.results(),
        "succeeded": digest.succeeded,
        "failed": digest.failed,
        "cancelled": digest.cancelled,
        "compacted": digest.compacted,
        "first_submit": digest.first_submit_us.map(|t| Timestamp::from_unix_micros(t).to_string()),
        "last_end": digest.last_end_us.map(|t| Timestamp::from_unix_micros(t).to_string()),
        "makespan_us": digest.first_submit_us.zip(digest.last_end_us).map(|(a, b)| b.saturating_sub(a)),
        "busy_core_seconds": timeline.map(|t| t.busy_core_seconds),
        "capacity_core_seconds": timeline.map(|t| t.capacity_core_seconds),
        "efficiency": timeline.and_then(Timeline::efficiency),
        "retried_attempts": digest.retried,
        "replayed_attempts": digest.replayed,
        "tasks_with_earlier_attempts": digest.tasks_with_earlier_attempts,
        "speculated": context.live.map(|l| l.speculated),
        "nodes": digest.nodes.len(),
        "hpc_jobs": digest.gang_count,
        "stages": stages,
        "plots": plots,
    })
}

fn percentile_key(q: f64) -> String {
    if q >= 100.0 {
        "max_us".to_owned()
    } else {
        format!("p{}_us", q.to_string().replace('.', "_"))
    }
}

/// Text for HTML, escaped.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration in microseconds, short (the one human format: `format_micros`).
pub use saker_client::spec::format_micros as duration;

const STYLE: &str = "body{font-family:sans-serif;margin:24px auto;max-width:1040px;color:#222}\
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}\
.meta{color:#666;font-size:13px}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}\
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:120px}\
.card b{display:block;font-size:20px}.card span{color:#666;font-size:12px}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border-bottom:1px solid #eee;padding:3px 10px;text-align:right}\
th{background:#f6f6f6}td.l,th.l{text-align:left}figure{margin:10px 0}figcaption{font-size:13px;color:#444;margin-bottom:2px}\
.pair{display:flex;flex-wrap:wrap;gap:10px}\
.key{display:inline-block;width:11px;height:11px;margin:0 4px 0 12px;vertical-align:-1px}.note{font-size:13px;color:#666}";

/// The whole page.
pub fn render(
    digest: &Digest,
    timeline: Option<&Timeline>,
    plots: &[Plot],
    context: &Context,
) -> String {
    let summary = summary(digest, timeline, plots, context);
    let mut page = String::with_capacity(plots.iter().map(|p| p.svg.len()).sum::<usize>() + 32_768);
    let title = format!(
        "Saker report: {}",
        digest.pilot_id.as_deref().unwrap_or("pilot")
    );
    let _ = write!(
        page,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>",
        esc(&title)
    );
    let _ = write!(
        page,
        "<h1>{}</h1><div class=\"meta\">{} · generated {} · {}</div>",
        esc(&title),
        esc(&context.dir),
        context.generated,
        match context.live {
            Some(l) => format!(
                "pilot running: {} queued, {} running (figures cover results so far)",
                l.queued, l.running
            ),
            None => "pilot not running: read from its journal".to_owned(),
        }
    );
    headline(&mut page, digest, timeline, context);
    if digest.compacted > 0 {
        let _ = write!(
            page,
            "<p class=\"note\">{} earlier results were compacted away (the pilot's --keep-results); no figure includes them.</p>",
            digest.compacted
        );
    }
    for plot in plots.iter().filter(|p| !is_stage(p)) {
        figure(&mut page, plot);
    }
    page.push_str("<h2>Stages</h2>");
    stage_table(&mut page, digest);
    page.push_str("<div class=\"pair\">");
    for plot in plots.iter().filter(|p| is_stage(p)) {
        figure(&mut page, plot);
    }
    page.push_str("</div>");
    node_table(&mut page, digest, timeline);
    page.push_str("<h2>Retries, replays and failures</h2>");
    let _ = write!(
        page,
        "<p>{} attempts failed and were retried; {} were lost with their node and replayed; {} tasks needed more than one attempt.{}</p>",
        digest.retried,
        digest.replayed,
        digest.tasks_with_earlier_attempts,
        match context.live {
            Some(l) => format!(" {} speculative copies were started.", l.speculated),
            None =>
                " Speculative copies are counted by a live pilot only (`saker status`).".to_owned(),
        }
    );
    groups(&mut page, "Failures by reason", &digest.failures);
    groups(&mut page, "Cancellations by reason", &digest.cancellations);
    if digest.other_failures > 0 {
        let _ = write!(
            page,
            "<p class=\"note\">{} more, with other reasons, are not listed.</p>",
            digest.other_failures
        );
    }
    takeover_table(&mut page, digest);
    gang_table(&mut page, digest);
    allocation_table(&mut page, digest);
    let json = summary.to_string().replace("</", "<\\/");
    let _ = writeln!(
        page,
        "<script type=\"application/json\" id=\"saker-summary\">{json}</script></body></html>"
    );
    page
}

fn is_stage(plot: &Plot) -> bool {
    STAGES.iter().any(|(name, _)| *name == plot.id)
}

fn headline(page: &mut String, digest: &Digest, timeline: Option<&Timeline>, context: &Context) {
    let mut cards: Vec<(String, &str)> = vec![
        (digest.submitted.to_string(), "tasks submitted"),
        (digest.succeeded.to_string(), "succeeded"),
        (digest.failed.to_string(), "failed"),
        (digest.cancelled.to_string(), "cancelled"),
    ];
    if let Some(live) = context.live {
        cards.push(((live.queued + live.running).to_string(), "not yet done"));
    }
    if let Some(t) = timeline {
        cards.push((duration(t.t1_us - t.t0_us), "makespan"));
        cards.push((
            t.efficiency()
                .map_or_else(|| "–".to_owned(), |e| format!("{:.1} %", e * 100.0)),
            "efficiency (busy / available core-s)",
        ));
        cards.push(if t.busy_core_seconds < 3600.0 {
            (format!("{:.1}", t.busy_core_seconds), "busy core-seconds")
        } else {
            (
                format!("{:.1}", t.busy_core_seconds / 3600.0),
                "busy core-hours",
            )
        });
        let peak = t.capacity.iter().fold(0.0f64, |a, &b| a.max(b));
        cards.push((format!("{peak:.0}"), "cores at most"));
    }
    cards.push((digest.nodes.len().to_string(), "nodes"));
    page.push_str("<div class=\"cards\">");
    for (value, label) in cards {
        let _ = write!(
            page,
            "<div class=\"card\"><b>{}</b><span>{}</span></div>",
            esc(&value),
            esc(label)
        );
    }
    page.push_str("</div>");
}

fn figure(page: &mut String, plot: &Plot) {
    let legend: String = plot
        .legend
        .iter()
        .map(|(colour, label)| {
            format!(
                " <span class=\"key\" style=\"background:{colour}\"></span>{}",
                esc(label)
            )
        })
        .collect();
    let _ = write!(
        page,
        "<figure id=\"plot-{}\" data-points=\"{}\"><figcaption>{}{legend}</figcaption>{}</figure>",
        plot.id,
        plot.points,
        esc(&plot.title),
        plot.svg
    );
}

fn stage_table(page: &mut String, digest: &Digest) {
    page.push_str(
        "<table><tr><th class=\"l\">stage</th><th class=\"l\">from → to</th><th>tasks</th>",
    );
    for q in PERCENTILES {
        let _ = write!(
            page,
            "<th>{}</th>",
            if q >= 100.0 {
                "max".to_owned()
            } else {
                format!("p{q}")
            }
        );
    }
    page.push_str("</tr>");
    for ((name, meaning), h) in STAGES.iter().zip(&digest.stages) {
        let _ = write!(
            page,
            "<tr><td class=\"l\">{name}</td><td class=\"l\">{}</td><td>{}</td>",
            esc(meaning),
            h.len()
        );
        for q in PERCENTILES {
            let cell = if h.is_empty() {
                "–".to_owned()
            } else {
                duration(h.value_at_percentile(q))
            };
            let _ = write!(page, "<td>{cell}</td>");
        }
        page.push_str("</tr>");
    }
    page.push_str("</table><p class=\"note\">Times from the root's clock (submit, accept) and the agents' (start, end). The wait includes queueing, dispatch and spawning. Histograms: 3 significant digits.</p>");
}

fn node_table(page: &mut String, digest: &Digest, timeline: Option<&Timeline>) {
    if digest.nodes.is_empty() {
        return;
    }
    page.push_str("<h2>Nodes</h2><table><tr><th class=\"l\">node</th><th>id</th><th>cores</th><th>GPUs</th><th>tasks</th><th>busy core-s</th><th>busy share</th></tr>");
    for (index, node) in digest.nodes.iter().enumerate().take(500) {
        let (busy, share) = match timeline {
            Some(t) => {
                let seconds = t.bin_us / 1e6;
                let busy: f64 = t.node_busy[index].iter().sum::<f64>() * seconds;
                let offered: f64 = t.node_capacity[index].iter().sum::<f64>() * seconds;
                (
                    format!("{busy:.1}"),
                    if offered > 0.0 {
                        format!("{:.1} %", busy / offered * 100.0)
                    } else {
                        "–".to_owned()
                    },
                )
            }
            None => ("–".to_owned(), "–".to_owned()),
        };
        let _ = write!(
            page,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{busy}</td><td>{share}</td></tr>",
            esc(&node.host),
            node.id.map_or_else(|| "–".to_owned(), |id| id.to_string()),
            node.cores,
            if node.known { "" } else { " (inferred)" },
            node.gpus,
            node.tasks,
        );
    }
    page.push_str("</table>");
    if digest.nodes.len() > 500 {
        let _ = write!(
            page,
            "<p class=\"note\">The first 500 of {} nodes.</p>",
            digest.nodes.len()
        );
    }
}

fn groups(
    page: &mut String,
    heading: &str,
    groups: &std::collections::BTreeMap<String, FailureGroup>,
) {
    if groups.is_empty() {
        return;
    }
    let mut sorted: Vec<(&String, &FailureGroup)> = groups.iter().collect();
    sorted.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
    let _ = write!(
        page,
        "<h3>{}</h3><table id=\"{}\"><tr><th class=\"l\">reason</th><th>tasks</th><th class=\"l\">for example</th></tr>",
        esc(heading),
        if heading.starts_with("Failures") {
            "failures"
        } else {
            "cancellations"
        }
    );
    for (reason, group) in sorted {
        let examples: Vec<String> = group.examples.iter().map(u64::to_string).collect();
        let _ = write!(
            page,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">tasks {}</td></tr>",
            esc(reason),
            group.count,
            examples.join(", ")
        );
    }
    page.push_str("</table>");
}

fn allocation_table(page: &mut String, digest: &Digest) {
    if digest.allocations.is_empty() {
        return;
    }
    let _ = write!(
        page,
        "<h2>Allocations</h2><p>{} batch allocations asked for (an elastic pilot).</p>",
        digest.allocations.len()
    );
    page.push_str("<table id=\"allocations\"><tr><th>allocation</th><th>job</th><th>nodes</th><th>first node</th><th class=\"l\">asked for</th><th>held</th><th class=\"l\">why</th><th class=\"l\">ended</th></tr>");
    for a in &digest.allocations {
        let asked = Timestamp::from_unix_micros(a.submitted_us).to_string();
        let held = a.ended_us.map_or_else(
            || "–".to_owned(),
            |end| duration(end.saturating_sub(a.submitted_us)),
        );
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{held}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            a.allocation,
            a.job_id,
            a.nodes,
            a.first_node,
            &asked[..19],
            esc(&a.asked),
            esc(a.ended.as_deref().unwrap_or("not yet"))
        );
    }
    page.push_str("</table>");
}

fn takeover_table(page: &mut String, digest: &Digest) {
    if digest.takeovers.is_empty() {
        return;
    }
    let _ = write!(
        page,
        "<h2>Takeovers and resumes</h2><p>{} times a new root (a standby that took over, or a resumed root) took over the work its agents still held.</p>",
        digest.takeovers.len()
    );
    page.push_str("<table id=\"takeovers\"><tr><th class=\"l\">when</th><th>term</th><th>adopted running</th><th>ended while away</th><th>results sent again</th><th>stopped, run again</th><th>nodes missing</th><th>dispatch waited</th></tr>");
    for t in &digest.takeovers {
        let when = Timestamp::from_unix_micros(t.unix_us).to_string();
        let a = &t.adoption;
        let _ = write!(
            page,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td></tr>",
            &when[..19],
            t.term,
            a.adopted,
            a.ended_away,
            a.delivered,
            a.refused,
            a.missing_nodes,
            a.waited_ms
        );
    }
    page.push_str("</table><p class=\"note\">Stopped: attempts a node held that could not be adopted (their task had ended, was unknown to the journal, or ran elsewhere). Nodes missing did not come back before dispatch resumed: their work ran again elsewhere.</p>");
}

fn gang_table(page: &mut String, digest: &Digest) {
    if digest.gang_count == 0 {
        return;
    }
    let _ = write!(
        page,
        "<h2>HPC jobs</h2><p>{} HPC jobs ran on groups of nodes.</p>",
        digest.gang_count
    );
    page.push_str("<table><tr><th>task</th><th class=\"l\">state</th><th class=\"l\">nodes</th><th>ranks</th><th>run</th></tr>");
    for gang in &digest.gangs {
        let run = gang.start_us.map_or_else(
            || "–".to_owned(),
            |s| duration(gang.end_us.saturating_sub(s)),
        );
        let _ = write!(
            page,
            "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{run}</td></tr>",
            gang.task,
            gang.state.as_str(),
            esc(&gang.nodes.join(", ")),
            gang.ranks
        );
    }
    page.push_str("</table>");
}
