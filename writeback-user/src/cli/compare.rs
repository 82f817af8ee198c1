//! `wbscope compare`'s arguments.
use std::path::PathBuf;

use clap::Args;

const EXAMPLES: &str = "\
Examples:
  # the ext4 2.6.32 dd case: four strategies, 1 GiB each, 8 MiB chunks
  wbscope compare --dir /mnt/data --size 1G --chunk 8M \\
      --strategies buffered,fsync-end,srf-pipelined,direct

  # three repetitions each: medians and spread
  wbscope compare --dir /var/tmp --size 256M --strategies fsync-end,srf-pipelined --repeat 3

  # JSON for scripts, Markdown for a report, an SVG for the eyes
  wbscope compare --dir /mnt/data --size 512M --strategies buffered,direct --json > cmp.json
  wbscope compare --dir /mnt/data --size 512M --strategies buffered,direct --markdown --plot cmp.svg
  wbscope compare --dir /mnt/data --size 512M --report cmp.html

Before every run: sync, then drop the page cache (echo 3 > /proc/sys/vm/drop_caches).
After every run the run's files are synced (syncfs), so buffered data is
written back inside the run's window, then removed. Kernel figures are
the writepages calls on the filesystem of --dir; throttling and vmstat
figures are system-wide over the same window. Needs root.
Strategies: buffered, fsync-end, fdatasync-chunk, srf-pipelined, direct, uring.";

/// Arguments of `wbscope compare`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct CompareArgs {
    /// Directory to write in (on the filesystem to study). Existing files
    /// are never touched.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// Bytes per run (one file).
    #[arg(long, value_name = "SIZE")]
    pub(crate) size: String,
    /// Bytes per write call.
    #[arg(long, value_name = "SIZE", default_value = "8M")]
    pub(crate) chunk: String,
    /// Comma-separated strategies, one column each.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "buffered,fsync-end,srf-pipelined,direct"
    )]
    pub(crate) strategies: String,
    /// Runs per strategy (interleaved); the table shows medians and spread.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) repeat: u32,
    /// srf-pipelined: chunks between sync_file_range(WRITE) and WAIT_BEFORE.
    #[arg(long, value_name = "CHUNKS", default_value_t = 4)]
    pub(crate) window: u32,
    /// One JSON document: {"runs": [{"strategy", "writer", "kernel"}, ...]}.
    #[arg(long, conflicts_with = "markdown")]
    pub(crate) json: bool,
    /// The table as Markdown.
    #[arg(long)]
    pub(crate) markdown: bool,
    /// Also draw throughput over time and the chunk-size histograms to an
    /// SVG file (never overwritten).
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// Also write the report: one HTML page with the writer and the kernel
    /// of every run on one time axis (never overwritten; see `wbscope
    /// report`).
    #[arg(long, value_name = "FILE.html")]
    pub(crate) report: Option<PathBuf>,
}
