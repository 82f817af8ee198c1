//! `compare --plot FILE.svg`: the report's panels (`export::report`)
//! stacked in one SVG: throughput and the kernel on one time axis in bins
//! that fit the runs (100 ms for short ones), then the per-call
//! histograms with labels that never overlap, and a word in every empty
//! panel on why it is empty.
//!
//! (The first version drew with plotters: one-second bins, so runs under
//! a second drew nothing, and bucket labels ran into each other.)
use std::path::Path;

use crate::report;
use wbscope_model::window::{Run, RunContext};

/// Writes the figure of `runs` to a new file at `path`.
pub fn write_svg(path: &Path, runs: &[Run], context: &RunContext) -> anyhow::Result<()> {
    let data = report::of_runs(runs, context, None)?;
    report::write_new(path, &report::figure_svg(&data))
}
