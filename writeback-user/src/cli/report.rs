//! `wbscope report`'s arguments.
use std::path::PathBuf;

use clap::Args;

pub(crate) const EXAMPLES: &str = "\
Examples:
  wbscope record -o wb.rec --duration 60 && wbscope report wb.rec -o wb.html
  wbscope report /var/lib/wbscope --since 03:00 --until 04:00 -o night.html
  wbscope compare --dir /mnt/data --size 512M --json > cmp.json
  wbscope report cmp.json -o cmp.html
  wbscope compare --dir /mnt/data --size 512M --report cmp.html    # directly

One HTML file, self-contained (inline SVG and CSS, nothing fetched): it
opens from a mail attachment. The writer and the kernel on one time axis
(writer throughput, pages written by cause, dirty and writeback levels
against their thresholds, throttling, device latency and request sizes),
then per-call distributions. Reading a recording streams it (bounded
memory, damage reported in the header). Needs no privileges.";

/// Arguments of `wbscope report`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ReportArgs {
    /// A recording or a store (`wbscope record`), or a `compare --json` /
    /// `scenario --json` document.
    #[arg(value_name = "INPUT")]
    pub(crate) input: PathBuf,
    /// The HTML file to write (never overwritten).
    #[arg(short = 'o', long = "output", value_name = "FILE.html")]
    pub(crate) output: PathBuf,

    /// Of a recording or a store, only this window.
    #[command(flatten)]
    pub(crate) window: super::WindowArgs,
}
