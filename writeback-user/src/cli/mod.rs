//! Command-line interface. Raw arguments are validated here (clap value
//! parsers) before any command runs.
use std::{
    net::{Ipv4Addr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use clap::{Args, Parser, Subcommand};

mod compare;
mod diff;
mod named;
mod privileges;
mod push;
mod report;
mod scenario;
mod when;
mod write;

pub(crate) use compare::CompareArgs;
pub(crate) use diff::DiffArgs;
pub(crate) use privileges::DropArgs;
pub(crate) use push::PushArgs;
pub(crate) use report::ReportArgs;
pub(crate) use scenario::{FsChoice, Scale, ScenarioArgs, ScenarioName};
pub(crate) use when::WindowArgs;
pub(crate) use write::WriteArgs;

const EXAMPLES: &str = "\
Examples:
  wbscope                                  live dashboard (root or CAP_BPF+CAP_PERFMON)
  wbscope probes                           which kernel hook measures what, and why
  wbscope trace --json --events --duration 10
                                           one JSON line per writepages call, plus
                                           interval and summary lines
  wbscope trace --device /mnt/data         per-second figures for one filesystem
  wbscope --enable global_dirty_state trace --json
                                           also dirty_limit, from a hook off by default
  wbscope --log /tmp/wbscope.log           dashboard, diagnostics to a file
  wbscope --dir /mnt/data                  dashboard; its writer (key w) writes there";

#[derive(Debug, Parser)]
#[command(
    name = "wbscope",
    disable_version_flag = true,
    about = "eBPF writeback tracer: chunk size and scan cost of every writeback call",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// Print the version, the git revision and a hash of the embedded eBPF
    /// object.
    #[arg(short = 'V', long)]
    pub(crate) version: bool,

    /// Write diagnostics to FILE (never to the terminal while the dashboard
    /// is open). Level from RUST_LOG, default `info`.
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) log: Option<PathBuf>,

    /// Never use these hook kinds (comma-separated: fentry, kprobe, tp_btf,
    /// raw_tp, tracepoint), e.g. to compare the figures of two paths.
    #[arg(long, value_name = "KINDS", value_delimiter = ',', global = true, value_parser = named::parser::<wbscope_model::plan::HookKind>())]
    pub(crate) disable: Vec<wbscope_model::plan::HookKind>,

    /// Also attach these hooks, which wbscope leaves off by default
    /// (comma-separated): global_dirty_state (the `tracepoint` dirty levels
    /// of interval lines, with `dirty_limit`; 0.1-0.4 ms of BPF time per
    /// GiB written); dirty_folio (who dirtied each folio, exact with
    /// several writers per file; runs once per dirtied folio); device_io
    /// (request size and latency histograms and each call's bios, instead
    /// of /proc/diskstats means, and the ledger's device bytes by class:
    /// data, journal, metadata; runs per request and per bio); extents
    /// (each call's extents; runs per extent); durability (each ext4 fsync
    /// split into writeback, wait, journal commit and flush, with who was
    /// in the commit: `sync` lines with --events; runs per fsync, commit
    /// phase and journal handle); writes (each buffered write system call
    /// to a file split into throttle, stable-page wait, reclaim, blocked
    /// and other: interval lines' `writes` per process, a `write` line per
    /// call of --slow-write or more; runs per write system call of the
    /// host, filtered in the kernel). `compare` and `scenario` turn
    /// device_io, extents and durability on themselves, `doctor`
    /// device_io, durability and writes.
    #[arg(long, value_name = "HOOKS", value_delimiter = ',', global = true, value_parser = named::parser::<wbscope_model::plan::OptIn>())]
    pub(crate) enable: Vec<wbscope_model::plan::OptIn>,

    /// Dashboard: directory the writer (key `w`) creates its files in;
    /// default a new temporary directory in the current directory, removed
    /// on quit. Existing files are never touched.
    #[arg(long = "dir", value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Interval figures (and with --events every writepages call) until
    /// stopped.
    #[command(after_help = "\
Examples:
  wbscope trace --json --events --duration 5 > calls.jsonl
  wbscope trace --interval 5 --device 8:16
  wbscope trace --events --pid 4242
  wbscope trace --prometheus 0.0.0.0:9464 --listen-any --web-config /etc/wbscope/web.yml
  wbscope trace --remote-write http://prom:9090/api/v1/write --label instance=$(hostname)
                                  TLS and basic auth (exporter-toolkit format)
  wbscope trace --user wbscope    after attaching, run as user wbscope (default nobody)
  wbscope trace --no-drop         keep root for the whole run (debugging)

Schema of --json lines: docs/trace-json.md. The last line is always a
summary (calls, pages written, lost records), whether the trace ends by
--duration, Ctrl-C or SIGTERM.")]
    Trace(TraceArgs),
    /// Show the probe plan: the hook chosen for each concept, the fields it
    /// provides, and why every better candidate was refused; and the kernel
    /// memory of the tracer's maps.
    #[command(after_help = "\
Examples:
  wbscope probes
  wbscope probes --json | jq '.concepts[] | {concept, kind}'
  wbscope probes --json | jq '.memory.total_bytes'
  wbscope probes --cpus 128      # the maps' kernel memory on a 128-CPU host
  wbscope probes --cost 5        # this machine's floor per BPF program
  wbscope probes --cost 600 --on-hooks  # start your workload; Ctrl-C ends it
  wbscope probes --cost 600 --on-hooks --counting  # ... each adding to one counter

--cost measures until SECONDS pass or Ctrl-C/SIGTERM, and prints what it
measured either way.")]
    Probes(ProbesArgs),
    /// Write files with the writer-core engine.
    Write(WriteArgs),
    /// Record a trace to a file (calls, intervals, summary) for replay
    /// anywhere, or for ever to a store of bounded size.
    #[command(after_help = "\
Examples:
  wbscope record -o /var/tmp/wb.rec --duration 600
  wbscope record -o wb.rec --device /mnt/data --max-records 1000000
  wbscope record --store /var/lib/wbscope      always on, within the defaults
  wbscope record --store /var/lib/wbscope --keep 14d --max-size 4GiB --min-free 5
  ssh HOST sudo wbscope record -o - | wbscope replay -    watch a host live
  wbscope record -o /var/tmp/wb.rec --user wbscope   drop to user wbscope after attach
  wbscope record --store /var/lib/wbscope --remote-write https://prom/api/v1/write \\
      --remote-write-config /etc/wbscope/push.yml --label instance=db1   also push (docs/prometheus.md)

The file is never overwritten. A recording cut short (crash, full disk,
kill -9) stays readable up to its last whole frame. A store is a directory
of zstd-compressed segments: it never exceeds --max-size, never leaves its
filesystem less than --min-free free (it deletes its oldest segments, and
pauses when that is not enough), and loses at most the last interval on a
crash. The systemd unit and the store's layout: docs/recordings.md.")]
    Record(RecordArgs),
    /// Print a recording or a store the way `trace` printed it live.
    #[command(after_help = "\
Examples:
  wbscope replay wb.rec                 in the dashboard, as it was recorded
  wbscope replay wb.rec --speed 10      ten times faster
  wbscope replay wb.rec --json | jq 'select(.type == \"call\")'
  wbscope replay wb.rec --summary
  wbscope replay /var/lib/wbscope --since 03:10 --until 03:20 --text
  wbscope replay /var/lib/wbscope --since '2h ago' --json
  wbscope replay /var/lib/wbscope --since '1 day ago' --openmetrics --label instance=db1:9400 \\
      --label job=wbscope > day.om && promtool tsdb create-blocks-from openmetrics day.om data/
  wbscope replay /var/lib/wbscope       the dashboard over a store: \u{2190}/\u{2192} a minute
                                        back/on, n/N to the next/previous finding
  ssh HOST sudo wbscope record -o - | wbscope replay -    follows it live")]
    Replay(ReplayArgs),
    /// What a store (`record --store`) holds: span, size, compression,
    /// gaps, and where each segment starts.
    #[command(after_help = "\
Examples:
  wbscope store /var/lib/wbscope
  wbscope store /var/lib/wbscope --json | jq .gaps")]
    Store(StoreArgs),
    /// The same workload written by several strategies while the kernel
    /// side is traced: a side-by-side table (root).
    Compare(CompareArgs),
    /// A classic writeback experiment on its own loop-mounted filesystems,
    /// removed afterwards whatever happens (root).
    Scenario(ScenarioArgs),
    /// Watch writeback (or read a recording) and name the problem, with
    /// its evidence and what to try. Exit 3 when a warning or critical
    /// finding was seen.
    #[command(after_help = "\
Examples:
  wbscope doctor                          watch 30 s, then the report
  wbscope doctor --duration 120 --json    one JSON object, for scripts and CI
  wbscope doctor --from /var/tmp/wb.rec   the findings of a recording

The findings, their thresholds and the advice: docs/findings.md.
Exit status: 0, or 3 when any warning or critical finding was seen.")]
    Doctor(DoctorArgs),
    /// One self-contained HTML page of a recording or of a compare/
    /// scenario JSON document: the writer and the kernel on one time axis.
    Report(ReportArgs),
    /// Did it get worse: two sets of compare/scenario runs or recordings,
    /// figure by figure, with LKP's and mmtests' significance rules; a
    /// regression gate for CI (--fail-if, exit 3).
    Diff(DiffArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// Watch for SECONDS (default 30).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true, conflicts_with = "from")]
    pub(crate) duration: Option<Duration>,

    /// One JSON object: {"duration_s", "intervals", "findings": [...]}.
    #[arg(long)]
    pub(crate) json: bool,

    /// Read a recording or a store (`wbscope record`) instead of
    /// watching (with --since/--until, a window of it).
    #[arg(long, value_name = "RECORDING|STORE")]
    pub(crate) from: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) window: WindowArgs,

    /// Also write what was watched to a recording (as `wbscope record`;
    /// never overwritten), to read again with --from.
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    pub(crate) record: Option<PathBuf>,

    /// Seconds per judged interval when watching (default 1, at least 0.1).
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval, allow_negative_numbers = true, conflicts_with = "from")]
    pub(crate) interval: Option<Duration>,

    /// When watching, only these calls (system-wide levels, throttling and
    /// device figures stay system-wide).
    #[command(flatten)]
    pub(crate) filter: FilterArgs,

    #[command(flatten)]
    pub(crate) spans: SpanArgs,
}

/// What the write spans (`--enable writes`) write one by one.
#[derive(Debug, Args)]
pub(crate) struct SpanArgs {
    /// With --enable writes: a write system call this long or longer
    /// (milliseconds, fractions allowed; default 10) is a slow write: a
    /// `write` line of its own with what it waited for.
    #[arg(long, value_name = "MS", value_parser = parse_millis)]
    pub(crate) slow_write: Option<Duration>,
}

/// The default `--slow-write`: bcc's fileslower and ext4slower default
/// to 10 ms too.
pub(crate) const DEFAULT_SLOW_WRITE: Duration = Duration::from_millis(10);

impl SpanArgs {
    pub(crate) fn slow_write(&self) -> Duration {
        self.slow_write.unwrap_or(DEFAULT_SLOW_WRITE)
    }
}

/// Milliseconds, 0 or more (0: every write is written).
pub(crate) fn parse_millis(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of milliseconds"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}` is not a number of milliseconds, 0 or more"));
    }
    Duration::try_from_secs_f64(v / 1e3).map_err(|e| format!("`{s}`: {e}"))
}

#[derive(Debug, Args)]
pub(crate) struct ProbesArgs {
    /// One JSON document instead of a table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Instead of the plan, measure for SECONDS what any BPF program costs
    /// on this machine (an empty one, a hash lookup, a clock read), to read
    /// the tracer's per-program run times against.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub(crate) cost: Option<Duration>,

    /// With --cost: attach an empty program to each event the default
    /// trace's programs run on (ext4's scan passes and writepages calls,
    /// inodes made dirty and written, flusher work) instead of to
    /// sched_switch. Run a workload meanwhile: the figures are what any
    /// program costs on those events under it, caches as cold as the
    /// tracer finds them.
    #[arg(long, requires = "cost")]
    pub(crate) on_hooks: bool,

    /// With --on-hooks: the program on each event adds 1 to a counter of
    /// its CPU instead of doing nothing, the least a program that counts
    /// something does there (one line of map memory written).
    #[arg(long, requires = "on_hooks")]
    pub(crate) counting: bool,

    /// State the kernel memory of the tracer's maps for N possible CPUs
    /// instead of this host's, without loading anything (to plan for
    /// bigger hosts). The plan always states it for this host.
    #[arg(long, value_name = "N", conflicts_with = "cost", value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub(crate) cpus: Option<u32>,
}

/// Filters applied in the kernel.
#[derive(Debug, Default, Args)]
pub(crate) struct FilterArgs {
    /// Only this device: MAJ:MIN, a block device path, or any path on the
    /// filesystem to watch.
    #[arg(long, value_name = "MAJ:MIN|PATH")]
    pub(crate) device: Option<String>,
    /// Only calls made by this process, and calls on files it dirtied
    /// whoever makes them (the flusher, another's sync).
    #[arg(long, value_name = "PID")]
    pub(crate) pid: Option<u32>,
    /// Only calls made from this cgroup (v2 path, e.g.
    /// /sys/fs/cgroup/system.slice/foo.service), and calls on files
    /// processes of it dirtied, whoever makes them.
    #[arg(long, value_name = "PATH")]
    pub(crate) cgroup: Option<PathBuf>,
    /// Only this inode number.
    #[arg(long, value_name = "INO")]
    pub(crate) inode: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The recording to create (never overwritten); `-` writes it to
    /// standard output, flushed at every drain (`record -o - | replay -`).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        required_unless_present = "store",
        conflicts_with = "store"
    )]
    pub(crate) output: Option<PathBuf>,

    /// Record into this store directory (created if need be), for ever
    /// within --keep, --max-size and --min-free.
    #[arg(long, value_name = "DIR")]
    pub(crate) store: Option<PathBuf>,

    /// With --store: delete what is older than AGE (e.g. 7d, 12h, 30m;
    /// default 7d).
    #[arg(long, value_name = "AGE", value_parser = parse_age, requires = "store")]
    pub(crate) keep: Option<Duration>,

    /// With --store: the store never takes more than SIZE (e.g. 1GiB,
    /// 512MiB; default 1GiB), the segment being written included.
    #[arg(long, value_name = "SIZE", value_parser = parse_store_size, requires = "store")]
    pub(crate) max_size: Option<u64>,

    /// With --store: leave at least PERCENT of the store's filesystem free
    /// (deleting the oldest segments, then pausing; default 10).
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent, requires = "store")]
    pub(crate) min_free: Option<f64>,

    /// Stop after SECONDS (a positive number).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub(crate) duration: Option<Duration>,

    /// Stop after N writepages calls.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_records: Option<u64>,

    /// Above this many calls per second, stop recording calls one by one
    /// (interval figures go on) until the rate falls below half of it.
    #[arg(long, value_name = "CALLS", default_value_t = DEFAULT_MAX_EVENT_RATE, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_event_rate: u64,

    /// Seconds per interval frame (default 1, at least 0.1).
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval, allow_negative_numbers = true)]
    pub(crate) interval: Option<Duration>,

    /// Keep the BPF programs' run time plus the recorder's CPU under
    /// PERCENT of one core (none unless given; the systemd unit gives
    /// 2): past it, sample the per-folio dirtier counts (--enable
    /// dirty_folio), then the call records written; each interval line
    /// says what was sampled and at what rate.
    #[arg(long, value_name = "PERCENT", value_parser = parse_budget)]
    pub(crate) cpu_budget: Option<f64>,

    #[command(flatten)]
    pub(crate) filter: FilterArgs,

    #[command(flatten)]
    pub(crate) spans: SpanArgs,

    #[command(flatten)]
    pub(crate) push: PushArgs,

    #[command(flatten)]
    pub(crate) privileges: DropArgs,
}

/// A CPU budget: a share of one core above 0 and at most 100.
pub(crate) fn parse_budget(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a share of one core above 0 and at most 100 (e.g. 2 or 0.5)"
        )),
    }
}

#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// A store directory (`wbscope record --store`).
    pub(crate) store: PathBuf,

    /// One JSON document instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A store's defaults: a week back, within 1 GiB and 10 % of the disk
/// free (docs/recordings.md gives the bytes per day they were chosen on).
pub(crate) const DEFAULT_KEEP: Duration = Duration::from_secs(7 * 86_400);
pub(crate) const DEFAULT_MAX_SIZE: u64 = 1 << 30;
pub(crate) const DEFAULT_MIN_FREE: f64 = 10.0;

/// An age: a number and a unit (7d, 12h, 30m, 90s).
pub(crate) fn parse_age(s: &str) -> Result<Duration, String> {
    let bad = || format!("`{s}` is not an age (e.g. 7d, 12h, 30m)");
    let span: jiff::Span = s.trim().parse().map_err(|_| bad())?;
    let secs = span
        .total((
            jiff::Unit::Second,
            jiff::SpanRelativeTo::days_are_24_hours(),
        ))
        .map_err(|_| bad())?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(bad());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// A store's size: at least 256 KiB (a segment is at least 64 KiB, and a
/// store of fewer than four is all rotation).
pub(crate) fn parse_store_size(s: &str) -> Result<u64, String> {
    let v = writer_core::size::parse_size(s).map_err(|e| format!("`{s}`: {e}"))?;
    if v < 256 << 10 {
        return Err(format!("`{s}` is under the smallest store, 256KiB"));
    }
    Ok(v)
}

/// `--remote-write-queue`: at least 64 KiB (a few snapshots).
pub(crate) fn parse_queue_size(s: &str) -> Result<u64, String> {
    let v = writer_core::size::parse_size(s).map_err(|e| format!("`{s}`: {e}"))?;
    if v < 64 << 10 {
        return Err(format!("`{s}` is under the smallest queue, 64KiB"));
    }
    Ok(v)
}

/// A percentage of a filesystem, 0 to 90.
pub(crate) fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=90.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a percentage from 0 to 90")),
    }
}

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// A file written by `wbscope record`, a store directory
    /// (`record --store`), or `-` for standard input, followed as it
    /// arrives.
    pub(crate) file: PathBuf,

    #[command(flatten)]
    pub(crate) window: WindowArgs,

    /// JSON lines, as `trace --json --events` prints them.
    #[arg(long, conflicts_with_all = ["summary", "text"])]
    pub(crate) json: bool,

    /// Only the summary line.
    #[arg(long, conflicts_with = "text")]
    pub(crate) summary: bool,

    /// A table, as `trace --events` prints it (without any of these three
    /// flags the recording opens in the dashboard).
    #[arg(long)]
    pub(crate) text: bool,

    /// OpenMetrics text for `promtool tsdb create-blocks-from
    /// openmetrics`: the exporter's metric families as a scrape at each
    /// interval's close would have had them, each sample stamped
    /// (docs/prometheus.md, "Backfill").
    #[arg(long, conflicts_with_all = ["json", "summary", "text"])]
    pub(crate) openmetrics: bool,

    /// With --openmetrics: a label on every sample (repeat for more);
    /// `instance` and `job` stand in for what a scrape adds.
    #[arg(long = "label", value_name = "NAME=VALUE", requires = "openmetrics", value_parser = parse_label)]
    pub(crate) labels: Vec<(String, String)>,

    /// With --openmetrics: at most one snapshot per this long (15s, 1m),
    /// and the last; the counters stay exact at each, the levels are
    /// sampled. Without it, one per recorded interval.
    #[arg(long, value_name = "AGE", requires = "openmetrics", value_parser = parse_age)]
    pub(crate) step: Option<Duration>,

    /// Dashboard replay speed: 2 plays twice as fast as recorded.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub(crate) speed: f64,
}

/// A label `NAME=VALUE` for every exported sample; the name as
/// Prometheus allows it, the value anything.
pub(crate) fn parse_label(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    wbscope_export::prometheus::check_label_name(name)?;
    Ok((name.to_string(), value.to_string()))
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Also print every writepages call (without it: interval and summary
    /// lines only).
    #[arg(long)]
    pub(crate) events: bool,

    /// With --events: above this many calls per second, stop printing
    /// calls one by one (interval figures go on) until the rate falls
    /// below half of it.
    #[arg(long, value_name = "CALLS", default_value_t = DEFAULT_MAX_EVENT_RATE, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_event_rate: u64,

    /// Seconds per interval line (default 1, at least 0.1).
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval, allow_negative_numbers = true)]
    pub(crate) interval: Option<Duration>,

    #[command(flatten)]
    pub(crate) filter: FilterArgs,

    #[command(flatten)]
    pub(crate) spans: SpanArgs,

    /// Stop after SECONDS (a positive number, fractions allowed); without it,
    /// trace until Ctrl-C or SIGTERM.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub(crate) duration: Option<Duration>,

    /// Also serve Prometheus/OpenMetrics metrics on
    /// http://ADDR:PORT/metrics (a bare PORT means 127.0.0.1:PORT). Only
    /// loopback addresses unless --listen-any. Output on stdout goes on.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen_addr)]
    pub(crate) prometheus: Option<SocketAddr>,

    /// Allow --prometheus on an address other than loopback (the metrics
    /// then reach anyone who can connect to it, unless --web-config).
    #[arg(long)]
    pub(crate) listen_any: bool,

    /// The exporter's TLS and basic auth, in the Prometheus
    /// exporter-toolkit format (tls_server_config, basic_auth_users with
    /// bcrypt hashes; docs/production.md), read before privileges drop.
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub(crate) web_config: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) push: PushArgs,

    #[command(flatten)]
    pub(crate) privileges: DropArgs,
}

impl TraceArgs {
    /// The `--prometheus` address, refused when it is not loopback and
    /// `--listen-any` was not given.
    pub(crate) fn prometheus_listen(&self) -> Result<Option<SocketAddr>, wbscope_sys::UsageError> {
        match self.prometheus {
            None if self.listen_any => Err(wbscope_sys::UsageError(
                "--listen-any: only with --prometheus ADDR:PORT".into(),
            )),
            Some(addr) if !addr.ip().is_loopback() && !self.listen_any => {
                Err(wbscope_sys::UsageError(format!(
                    "--prometheus {addr}: not a loopback address; add --listen-any to serve metrics on it"
                )))
            }
            other => Ok(other),
        }
    }
}

/// Parses `ADDR:PORT` (`[v6]:PORT` for IPv6), `localhost:PORT`, or a bare
/// `PORT` (loopback).
pub(crate) fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Some(port) = s.strip_prefix("localhost:")
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    s.parse()
        .map_err(|_| format!("`{s}` is not ADDR:PORT (e.g. 127.0.0.1:9464)"))
}

/// Default `--max-event-rate`: far above what writepages calls reach on a
/// busy host (one call writes up to a whole chunk), low enough that a
/// pathological storm of tiny calls cannot flood a terminal or a disk.
pub(crate) const DEFAULT_MAX_EVENT_RATE: u64 = 20_000;

/// Parses a strictly positive, finite number of seconds.
pub(crate) fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a positive number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("`{s}` is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("`{s}`: {e}"))
}

/// The shortest `--interval`: the collector drains the ring buffer every
/// 100 ms (`tracer::ring::DRAIN_EVERY`), so a shorter interval only adds
/// empty lines or frames (`--interval 1e-9` spun a core and wrote 6.4 MB/s
/// of empty frames).
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// [`parse_seconds`], at least [`MIN_INTERVAL`].
pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_seconds(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "`{s}`: the interval is at least {} s",
            MIN_INTERVAL.as_secs_f64()
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn intervals_below_the_drain_period_are_refused() {
        assert!(parse_interval("1e-9").is_err());
        assert!(parse_interval("0.05").is_err());
        assert_eq!(parse_interval("0.1").unwrap(), MIN_INTERVAL);
        assert_eq!(parse_interval("0.25").unwrap(), Duration::from_millis(250));
        let e = Cli::try_parse_from(["wbscope", "trace", "--interval", "1e-9"]).unwrap_err();
        assert!(e.to_string().contains("at least 0.1 s"), "{e}");
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
        for bad in ["0", "-1", "abc", "", "inf", "NaN", "1e400"] {
            assert!(parse_seconds(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn store_bounds() {
        assert_eq!(parse_age("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_age("12h").unwrap(), Duration::from_secs(12 * 3600));
        assert_eq!(parse_age("90s").unwrap(), Duration::from_secs(90));
        for bad in ["0s", "-1h", "7", "week", ""] {
            assert!(parse_age(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(parse_store_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_store_size("256KiB").unwrap(), 256 << 10);
        assert!(parse_store_size("100KiB").is_err());
        assert!(parse_store_size("lots").is_err());
        assert_eq!(parse_percent("10").unwrap(), 10.0);
        assert_eq!(parse_percent("5%").unwrap(), 5.0);
        for bad in ["-1", "91", "x", "NaN"] {
            assert!(parse_percent(bad).is_err(), "{bad} accepted");
        }
        // The defaults parse, and a store's bounds need --store.
        let c = Cli::try_parse_from(["wbscope", "record", "--store", "/s"]).unwrap();
        let Some(Command::Record(r)) = c.command else {
            panic!()
        };
        assert_eq!((r.keep, r.max_size, r.min_free), (None, None, None));
        assert_eq!(DEFAULT_KEEP, parse_age("7d").unwrap());
        assert!(Cli::try_parse_from(["wbscope", "record", "-o", "x", "--store", "s"]).is_err());
        assert!(Cli::try_parse_from(["wbscope", "record"]).is_err());
    }

    #[test]
    fn prometheus_listen_address() {
        let args = |argv: &[&str]| match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Some(Command::Trace(t))) => t.prometheus_listen().map_err(|e| e.to_string()),
            other => Err(format!("{other:?}")),
        };
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 9464));
        assert_eq!(
            args(&["wbscope", "trace", "--prometheus", "9464"]),
            Ok(Some(local))
        );
        assert_eq!(
            args(&["wbscope", "trace", "--prometheus", "localhost:9464"]),
            Ok(Some(local))
        );
        assert_eq!(
            args(&["wbscope", "trace", "--prometheus", "[::1]:9464"]),
            Ok(Some("[::1]:9464".parse().unwrap()))
        );
        assert_eq!(args(&["wbscope", "trace"]), Ok(None));
        let refused = args(&["wbscope", "trace", "--prometheus", "0.0.0.0:9000"]).unwrap_err();
        assert!(refused.contains("--listen-any"), "{refused}");
        assert!(args(&["wbscope", "trace", "--prometheus", "10.1.2.3:9000"]).is_err());
        assert_eq!(
            args(&[
                "wbscope",
                "trace",
                "--prometheus",
                "0.0.0.0:9000",
                "--listen-any"
            ]),
            Ok(Some("0.0.0.0:9000".parse().unwrap()))
        );
        let alone = args(&["wbscope", "trace", "--listen-any"]).unwrap_err();
        assert!(alone.contains("only with --prometheus"), "{alone}");
        assert!(Cli::try_parse_from(["wbscope", "trace", "--prometheus", "host"]).is_err());
    }
}
