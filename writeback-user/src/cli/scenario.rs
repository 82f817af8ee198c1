//! `wbscope scenario`'s arguments.
use clap::{Args, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  wbscope scenario single-stream --scale tiny
  wbscope scenario three-filesystems --scale small --fs xfs
  wbscope scenario sync-after-write --json > sync.json
  wbscope scenario single-stream --report single.html
  wbscope scenario package-unpack --scale tiny
  wbscope scenario many-writers --fs both
  wbscope scenario page-cache-cliff --scale small
  wbscope scenario single-stream --repeat 3 --json > base.json   # samples for wbscope diff
  wbscope scenario --cleanup

Each scenario makes its filesystems on loop devices over sparse images in
/var/tmp (ext4 with its journal, or xfs), and removes mounts, devices and
images at the end, on error and on Ctrl-C. A run killed with SIGKILL
leaves them (and the dirty caps): the next scenario or compare removes
them with a warning, or `--cleanup` does now. At tiny and small scale each
filesystem's dirty page cache is capped (per-device strict limit,
/sys/class/bdi/MAJ:MIN/max_bytes) so that writeback starts as it would on a
small machine. Before every run: sync and drop caches. Needs root.
What each scenario reproduces: docs/scenarios.md.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ScenarioName {
    /// One large file: buffered vs fsync-end vs srf-pipelined vs direct.
    SingleStream,
    /// Three buffered writers at once, one per filesystem: mean and
    /// minimum per-second throughput.
    ThreeFilesystems,
    /// A large buffered write, then sync: time and CPU of the sync.
    SyncAfterWrite,
    /// Many small files with per-file sync policies (dpkg).
    PackageUnpack,
    /// N threads each writing a large file, ext4 vs xfs.
    ManyWriters,
    /// A write larger than the dirty page cache may hold: buffered,
    /// srf-pipelined --drop-behind, uncached (RWF_DONTCACHE),
    /// uring-buffered --uncached and direct, with the page cache each
    /// leaves, reclaim and sys CPU.
    PageCacheCliff,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scale {
    /// Under a minute on a 2-core machine.
    Tiny,
    /// A few minutes.
    Small,
    /// The original reports' proportions where the disk allows.
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum FsChoice {
    Ext4,
    Xfs,
    Both,
}

/// Arguments of `wbscope scenario`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ScenarioArgs {
    /// Which experiment.
    #[arg(value_enum, required_unless_present = "cleanup")]
    pub(crate) name: Option<ScenarioName>,
    /// Remove what killed runs left (mounts, loop devices, images, dirty
    /// caps) and exit; a line per thing removed. Live runs are left alone.
    #[arg(long, conflicts_with_all = ["name", "scale", "fs", "json", "markdown", "report", "repeat"])]
    pub(crate) cleanup: bool,
    /// How big.
    #[arg(long, value_enum, default_value = "tiny")]
    pub(crate) scale: Scale,
    /// Filesystem(s) to run on (default: ext4; both for many-writers).
    #[arg(long, value_enum)]
    pub(crate) fs: Option<FsChoice>,
    /// Runs per variant, the order rotated each round (the first variant
    /// of one round runs later in the next), each after the same sync and
    /// page-cache drop; the table shows medians and spread, and `wbscope
    /// diff` takes the runs as samples (3 or more a side).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) repeat: u32,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// The table as Markdown.
    #[arg(long, conflicts_with = "json")]
    pub(crate) markdown: bool,
    /// Also write the report: one HTML page with the writer and the kernel
    /// of every run on one time axis (never overwritten).
    #[arg(long, value_name = "FILE.html")]
    pub(crate) report: Option<std::path::PathBuf>,
    /// Testing: fail on purpose once the filesystems are mounted (the
    /// cleanup must still remove them).
    #[arg(long, hide = true)]
    pub(crate) fail_after_mount: bool,
}
