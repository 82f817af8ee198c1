//! `compare --plot FILE.svg`: each run's throughput over time, and the
//! kernel's pages-per-call histograms of the runs side by side, in one SVG
//! (plotters, SVG backend: no fonts needed, text stays text).
use std::path::Path;

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;

use crate::model::{Log2Histogram, window::Run};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 800;

/// Distinct colours readable on white (plotters' palette order).
fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// log2 bucket index of a histogram bucket's lower bound.
fn bucket_index(lo: u64) -> usize {
    Log2Histogram::bucket_of(lo)
}

pub(crate) fn write_svg(path: &Path, runs: &[Run]) -> anyhow::Result<()> {
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(HEIGHT / 2);

    // Throughput over time, one line per run.
    let secs = runs
        .iter()
        .map(|r| r.writer.per_second_mb_s.len())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let peak = runs
        .iter()
        .flat_map(|r| r.writer.per_second_mb_s.iter().copied())
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&top)
        .caption("writer throughput per second", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..secs, 0f64..peak * 1.1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MB/s")
        .draw()
        .map_err(e)?;
    for (i, run) in runs.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(
                run.writer
                    .per_second_mb_s
                    .iter()
                    .enumerate()
                    .map(|(s, v)| (s as f64 + 0.5, *v)),
                c.stroke_width(2),
            ))
            .map_err(e)?
            .label(run.column())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;

    // Kernel pages per writepages call, one panel per run, same buckets.
    let first = runs
        .iter()
        .flat_map(|r| {
            r.kernel
                .pages_per_call_hist
                .iter()
                .map(|b| bucket_index(b.lo))
        })
        .min()
        .unwrap_or(0);
    let last = runs
        .iter()
        .flat_map(|r| {
            r.kernel
                .pages_per_call_hist
                .iter()
                .map(|b| bucket_index(b.lo))
        })
        .max()
        .unwrap_or(0)
        .max(first);
    let panels = bottom.split_evenly((1, runs.len().max(1)));
    for (i, (run, panel)) in runs.iter().zip(&panels).enumerate() {
        let counts: Vec<(usize, u64)> = run
            .kernel
            .pages_per_call_hist
            .iter()
            .map(|b| (bucket_index(b.lo), b.count))
            .collect();
        let top_count = counts.iter().map(|c| c.1).max().unwrap_or(1).max(1);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{}: pages per writepages call", run.column()),
                ("sans-serif", 14),
            )
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(40)
            .build_cartesian_2d((first..last + 1).into_segmented(), 0u64..top_count + 1)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(k) | SegmentValue::Exact(k) => {
                    Log2Histogram::bucket_label(*k)
                }
                SegmentValue::Last => String::new(),
            })
            .x_desc("pages (log2 buckets)")
            .y_desc("calls")
            .draw()
            .map_err(e)?;
        chart
            .draw_series(
                Histogram::vertical(&chart)
                    .style(colour(i).filled())
                    .margin(2)
                    .data(counts.iter().copied()),
            )
            .map_err(e)?;
    }
    root.present()
        .map_err(e)
        .with_context(|| format!("writing {}", path.display()))
}
