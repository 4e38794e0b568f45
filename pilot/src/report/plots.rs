//! The report's plots, drawn by plotters into SVG strings that the page inlines.
//!
//! plotters (a maintained Rust plotting crate) is used with its SVG backend only:
//! no fonts are read (the browser lays text out), nothing is fetched, and the
//! report binary needs no JavaScript library or licence of another project. Every
//! plot carries `data-points`, the number of data items it drew, which the browser
//! test checks.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::digest::{Digest, STAGES, SpanKind};
use super::timeline::{BINS, Bar, GANTT_PIXELS, Gantt, Timeline};

const WIDTH: u32 = 1000;
const BUSY: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const CAPACITY: RGBColor = RGBColor(0xc0, 0x39, 0x2b);
/// Node rows in the heatmap; more nodes are averaged into as many rows.
const HEAT_ROWS: usize = 48;
/// Heatmap columns (pairs of timeline bins).
const HEAT_COLUMNS: usize = BINS / 2;
/// Shades of the heatmap: cells of one shade side by side are one rectangle.
const HEAT_SHADES: f64 = 12.0;
/// Bars of each stage histogram.
const HISTOGRAM_BARS: usize = 40;

/// One drawn plot.
#[derive(Debug, Clone)]
pub struct Plot {
    pub id: &'static str,
    pub title: String,
    pub svg: String,
    /// Data items drawn (points, bars, cells).
    pub points: usize,
    /// Colour keys shown with the caption (`#rrggbb`, label), for plots whose data
    /// would hide a key drawn inside them.
    pub legend: Vec<(String, &'static str)>,
}

fn draw_error<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow!("drawing a plot: {error:?}")
}

fn kind_colour(kind: SpanKind) -> RGBColor {
    match kind {
        SpanKind::Succeeded => RGBColor(0x2e, 0x8b, 0x57),
        SpanKind::Failed => RGBColor(0xd6, 0x27, 0x28),
        SpanKind::Retried => RGBColor(0xff, 0x8c, 0x00),
        SpanKind::Lost => RGBColor(0x7f, 0x7f, 0x7f),
    }
}

/// Busy cores beside the cores the nodes offered, over the makespan.
pub fn utilization(timeline: &Timeline) -> Result<Plot> {
    let peak = timeline
        .capacity
        .iter()
        .chain(&timeline.busy)
        .fold(1.0f64, |a, &b| a.max(b));
    let x = |bin: usize| timeline.bin_start_seconds(bin);
    let span = timeline.makespan_seconds();
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (WIDTH, 300)).into_drawing_area();
        area.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..span, 0.0..peak * 1.1)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first submit")
            .y_desc("cores")
            .draw()
            .map_err(draw_error)?;
        let steps = |values: &[f64]| -> Vec<(f64, f64)> {
            values
                .iter()
                .enumerate()
                .flat_map(|(bin, &v)| [(x(bin), v), (x(bin + 1), v)])
                .collect()
        };
        chart
            .draw_series(
                AreaSeries::new(steps(&timeline.busy), 0.0, BUSY.mix(0.35)).border_style(BUSY),
            )
            .map_err(draw_error)?
            .label("busy cores")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], BUSY.filled()));
        chart
            .draw_series(LineSeries::new(
                steps(&timeline.capacity),
                CAPACITY.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label("cores available")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], CAPACITY.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(draw_error)?;
        area.present().map_err(draw_error)?;
    }
    Ok(Plot {
        id: "utilization",
        title: "Utilization: busy cores and cores available".into(),
        svg,
        points: BINS * 2,
        legend: Vec::new(),
    })
}

/// Each node's busy share over time, one row a node (or a group of nodes).
pub fn node_heatmap(digest: &Digest, timeline: &Timeline) -> Result<Plot> {
    let nodes = digest.nodes.len().max(1);
    let per_row = nodes.div_ceil(HEAT_ROWS);
    let rows = nodes.div_ceil(per_row);
    let row_label = |row: usize| -> String {
        let first = row * per_row;
        let last = ((row + 1) * per_row).min(nodes) - 1;
        let name = |k: usize| {
            digest
                .nodes
                .get(k)
                .map_or_else(String::new, |n| match n.id {
                    Some(id) => format!("{} #{id}", n.host),
                    None => n.host.clone(),
                })
        };
        if first == last {
            name(first)
        } else {
            format!("{} … {}", name(first), name(last))
        }
    };
    // Busy share per (row, column), shaded; runs of one shade become one cell.
    let mut cells = Vec::new();
    for row in 0..rows {
        let members = row * per_row..((row + 1) * per_row).min(digest.nodes.len());
        let mut run: Option<(usize, usize, f64)> = None;
        for column in 0..HEAT_COLUMNS {
            let bins = column * 2..column * 2 + 2;
            let mut busy = 0.0;
            let mut offered = 0.0;
            for node in members.clone() {
                for bin in bins.clone() {
                    busy += timeline.node_busy[node][bin];
                    offered += timeline.node_capacity[node][bin];
                }
            }
            let share = if offered > 0.0 {
                (busy / offered).min(1.0)
            } else {
                -1.0 // not there
            };
            let shade = if share < 0.0 {
                -1.0
            } else {
                (share * HEAT_SHADES).round() / HEAT_SHADES
            };
            match &mut run {
                Some((_, end, s)) if *s == shade => *end = column + 1,
                _ => {
                    cells.extend(run.take().map(|(a, b, s)| (row, a, b, s)));
                    run = Some((column, column + 1, shade));
                }
            }
        }
        cells.extend(run.map(|(a, b, s)| (row, a, b, s)));
    }
    let column_seconds = timeline.makespan_seconds() / HEAT_COLUMNS as f64;
    let height = (rows as u32 * 18 + 80).max(160);
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        area.fill(&WHITE).map_err(draw_error)?;
        let label = |row: &f64| -> String {
            let row = *row as usize;
            if row < rows {
                row_label(row)
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(170)
            .build_cartesian_2d(0.0..timeline.makespan_seconds(), -0.5..rows as f64 - 0.5)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds since the first submit")
            .y_labels(rows.min(24))
            .y_label_formatter(&label)
            .draw()
            .map_err(draw_error)?;
        chart
            .draw_series(
                cells
                    .iter()
                    .filter(|c| c.3 != 0.0)
                    .map(|&(row, a, b, shade)| {
                        let colour = if shade < 0.0 {
                            RGBColor(0xee, 0xee, 0xee)
                        } else {
                            let fade = |c: u8| (255.0 - (255.0 - f64::from(c)) * shade) as u8;
                            RGBColor(fade(BUSY.0), fade(BUSY.1), fade(BUSY.2))
                        };
                        Rectangle::new(
                            [
                                (a as f64 * column_seconds, row as f64 + 0.08),
                                (b as f64 * column_seconds, row as f64 + 0.92),
                            ],
                            colour.filled(),
                        )
                    }),
            )
            .map_err(draw_error)?;
        area.present().map_err(draw_error)?;
    }
    Ok(Plot {
        id: "nodes",
        title: format!(
            "Busy share per node ({} node{}{}; darker is busier, grey: not there)",
            digest.nodes.len(),
            if digest.nodes.len() == 1 { "" } else { "s" },
            if per_row > 1 {
                format!(", {per_row} to a row")
            } else {
                String::new()
            }
        ),
        svg,
        points: cells.len(),
        legend: Vec::new(),
    })
}

/// Attempts ended per second over the makespan.
pub fn throughput(timeline: &Timeline) -> Result<Plot> {
    // Wide enough bins that a short run's rate is not all spikes: about 5 attempts a
    // bin on average, at most 20 timeline bins to one.
    let ended: u64 = timeline.ended.iter().sum();
    let group = ((5 * BINS as u64).div_ceil(ended.max(1)) as usize).clamp(1, 20);
    let seconds_per_bin = timeline.bin_us * group as f64 / 1e6;
    let rates: Vec<(f64, f64)> = timeline
        .ended
        .chunks(group)
        .enumerate()
        .map(|(k, chunk)| {
            let middle = timeline.bin_start_seconds(k * group) + seconds_per_bin / 2.0;
            (middle, chunk.iter().sum::<u64>() as f64 / seconds_per_bin)
        })
        .collect();
    let peak = rates.iter().fold(1.0f64, |a, &(_, r)| a.max(r));
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (WIDTH, 260)).into_drawing_area();
        area.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..timeline.makespan_seconds(), 0.0..peak * 1.1)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first submit")
            .y_desc("attempts ended / s")
            .draw()
            .map_err(draw_error)?;
        chart
            .draw_series(
                AreaSeries::new(rates.iter().copied(), 0.0, BUSY.mix(0.25)).border_style(BUSY),
            )
            .map_err(draw_error)?;
        area.present().map_err(draw_error)?;
    }
    Ok(Plot {
        id: "throughput",
        title: format!("Throughput (bins of {:.3} s)", seconds_per_bin),
        svg,
        points: rates.len(),
        legend: Vec::new(),
    })
}

/// Attempts per lane over time, coloured by how they ended.
pub fn gantt(digest: &Digest, timeline: &Timeline, gantt: &Gantt) -> Result<Plot> {
    let lanes = gantt.lanes.len().max(1);
    let height = (lanes as u32 * 10 + 90).clamp(160, 1400);
    let span = timeline.makespan_seconds();
    let min_width = span / GANTT_PIXELS;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        area.fill(&WHITE).map_err(draw_error)?;
        let label = |lane: &f64| -> String {
            let at = lane.round();
            match gantt.lanes.get(at as usize) {
                Some(&node) if (lane - at).abs() < 1e-6 && at >= 0.0 => {
                    let node = &digest.nodes[node as usize];
                    match node.id {
                        Some(id) => format!("{} #{id}", node.host),
                        None => node.host.clone(),
                    }
                }
                _ => String::new(),
            }
        };
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(120)
            .build_cartesian_2d(0.0..span, -0.5..lanes as f64 - 0.5)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds since the first submit")
            .y_labels(lanes.min(20))
            .y_label_formatter(&label)
            .draw()
            .map_err(draw_error)?;
        let bar = |b: &Bar| {
            let lane = f64::from(b.lane);
            Rectangle::new(
                [
                    (b.start, lane - 0.4),
                    (b.end.max(b.start + min_width), lane + 0.4),
                ],
                kind_colour(b.kind).filled(),
            )
        };
        // The colour key is in the caption: drawn inside, it would hide bars.
        chart
            .draw_series(gantt.bars.iter().map(bar))
            .map_err(draw_error)?;
        area.present().map_err(draw_error)?;
    }
    let shown = if gantt.total_lanes > gantt.lanes.len() {
        format!(
            ", the first {} of {} lanes",
            gantt.lanes.len(),
            gantt.total_lanes
        )
    } else {
        String::new()
    };
    Ok(Plot {
        id: "gantt",
        title: format!(
            "Attempts per executor lane ({} attempts as {} bars{shown})",
            gantt.attempts,
            gantt.bars.len()
        ),
        svg,
        points: gantt.bars.len(),
        legend: SpanKind::ALL
            .iter()
            .map(|&kind| {
                let RGBColor(r, g, b) = kind_colour(kind);
                (format!("#{r:02x}{g:02x}{b:02x}"), kind.label())
            })
            .collect(),
    })
}

/// One histogram per stage, durations on a log axis.
pub fn stage_histograms(digest: &Digest) -> Result<Vec<Plot>> {
    let mut plots = Vec::new();
    for ((name, meaning), histogram) in STAGES.iter().zip(&digest.stages) {
        if histogram.is_empty() {
            continue;
        }
        // Log-spaced bars from the smallest to the largest value (seconds).
        let low = (histogram.min().max(1) as f64 / 1e6).max(1e-6);
        let high = (histogram.max() as f64 / 1e6).max(low * 10.0);
        let ratio = (high / low).powf(1.0 / HISTOGRAM_BARS as f64);
        let mut bars = Vec::with_capacity(HISTOGRAM_BARS);
        let mut from = low;
        for _ in 0..HISTOGRAM_BARS {
            let to = from * ratio;
            let count = histogram.count_between((from * 1e6) as u64, (to * 1e6) as u64);
            bars.push((from, to, count));
            from = to;
        }
        // count_between is inclusive at both ends; neighbouring bars share an edge,
        // so the shape, not each bar's exact count, is what this shows.
        let peak = bars.iter().map(|b| b.2).max().unwrap_or(1).max(1);
        let mut svg = String::new();
        {
            let area = SVGBackend::with_string(&mut svg, (WIDTH / 2 - 10, 240)).into_drawing_area();
            area.fill(&WHITE).map_err(draw_error)?;
            let mut chart = ChartBuilder::on(&area)
                .margin(10)
                .x_label_area_size(34)
                .y_label_area_size(56)
                .build_cartesian_2d((low..high * 1.0001).log_scale(), 0u64..peak + peak / 10 + 1)
                .map_err(draw_error)?;
            chart
                .configure_mesh()
                .x_desc("seconds (log)")
                .y_desc("tasks")
                .x_labels(6)
                .x_label_formatter(&|v| seconds_label(*v))
                .draw()
                .map_err(draw_error)?;
            chart
                .draw_series(bars.iter().filter(|b| b.2 > 0).map(|&(a, b, count)| {
                    Rectangle::new([(a, 0), (b, count)], BUSY.mix(0.8).filled())
                }))
                .map_err(draw_error)?;
            area.present().map_err(draw_error)?;
        }
        plots.push(Plot {
            id: name,
            title: format!("{name}: {meaning}"),
            svg,
            points: bars.iter().filter(|b| b.2 > 0).count(),
            legend: Vec::new(),
        });
    }
    Ok(plots)
}

/// A duration in seconds as a short axis label.
fn seconds_label(seconds: f64) -> String {
    saker_client::spec::format_micros((seconds * 1e6).round().max(0.0) as u64)
}
