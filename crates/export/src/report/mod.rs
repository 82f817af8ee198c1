//! `wbscope report`: one self-contained HTML page (inline SVG and CSS,
//! nothing fetched, no script) showing a run — a recording, or the runs
//! of a `compare`/`scenario` document — with the writer and the kernel on
//! one time axis, and the per-call distributions below it. `--plot
//! FILE.svg` is the same panels stacked in one SVG.
//!
//! The drawing is hand-written SVG ([`svg`]), not plotters: the report
//! needs to know where every label goes (so that none overlaps another,
//! which the tests check from the label boxes the canvas keeps), dash
//! patterns and markers on every series (greyscale printing), per-run
//! segments on a shared axis, messages in empty panels and byte-stable
//! output for golden tests. plotters 0.3's SVG backend gives none of the
//! label geometry and would need all of this around it; what remains is
//! lines, rectangles and text, a few hundred lines.
//!
//! Layout of the page: header (input, host, kernel, command, probe plan),
//! findings of `wbscope doctor` ([`findings`]: the list, and a strip on
//! the time axis), the time panels ([`panels`]), the distributions
//! ([`dists`]), who dirtied it ([`who`]). The time panels and the strip
//! share one x axis and the page's margins ([`layout`]).
pub(crate) mod data;
mod dists;
mod findings;
mod html;
mod layout;
mod panels;
pub(crate) mod svg;
/// Test fixtures (the synthetic recording the golden page is made
/// from), also for the tests of crates above (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
// Built without cfg(test) for the tests of the crates above, which use
// only some of these fixtures.
#[cfg_attr(not(test), allow(dead_code, unused_imports))]
pub mod tests;
mod who;
mod writes;

use std::{io::Write as _, path::Path};

use anyhow::Context as _;

pub use data::{RecordingFacts, RecordingFeed, ReportData, read_json};
pub(crate) use html::CSS;

use wbscope_model::window::{Run, RunContext};
use wbscope_sys::UsageError;

/// The report page of `d`.
pub fn html(d: &ReportData) -> String {
    html::page(d)
}

/// Every panel of `d` stacked in one SVG (`--plot`).
pub(crate) fn figure_svg(d: &ReportData) -> String {
    let panels: Vec<String> = panels::time_panels(d)
        .into_iter()
        .chain(dists::dist_panels(d))
        .collect();
    let mut y = 0.0;
    let mut body = String::new();
    for p in &panels {
        let h = svg_height(p);
        // A nested <svg> is placed by x/y; its own width/height stay.
        body.push_str(&p.replacen("<svg ", &format!("<svg x=\"0\" y=\"{}\" ", svg::n(y)), 1));
        y += h + 8.0;
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}</svg>\n",
        w = svg::n(layout::WIDTH),
        h = svg::n(y),
    )
}

/// The `height` attribute of a panel's `<svg>`.
fn svg_height(svg: &str) -> f64 {
    svg.split_once("height=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .and_then(|(h, _)| h.parse().ok())
        .unwrap_or(0.0)
}

/// The report data of runs just made (`compare`/`scenario --report`):
/// the same path as a saved document.
pub fn of_runs(
    runs: &[Run],
    context: &RunContext,
    scenario: Option<(&str, &str)>,
) -> anyhow::Result<ReportData> {
    let mut doc = serde_json::json!({ "runs": runs, "context": context });
    if let Some((name, scale)) = scenario {
        doc["scenario"] = name.into();
        doc["scale"] = scale.into();
    }
    data::from_json(&doc.to_string(), "this command")
}

/// Refuses an output path that exists or whose directory does not, before
/// any work (the file is written only at the end).
pub fn check_output(flag: &str, path: &Path) -> Result<(), UsageError> {
    if path.exists() {
        return Err(UsageError(format!(
            "{flag} {}: exists; not overwritten",
            path.display()
        )));
    }
    if let Some(parent) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(UsageError(format!(
            "{flag} {}: no such directory",
            path.display()
        )));
    }
    Ok(())
}

/// Writes `contents` to a new file (never replacing one).
pub fn write_new(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                UsageError(format!("{}: exists; not overwritten", path.display())).into()
            }
            _ => anyhow::Error::new(e).context(format!("creating {}", path.display())),
        })?;
    f.write_all(contents.as_bytes())
        .and_then(|()| f.flush())
        .with_context(|| format!("writing {}", path.display()))
}
