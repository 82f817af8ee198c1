//! `wbscope compare`: the same workload written by several writer-core
//! strategies, one after the other, while the kernel side is traced; a
//! side-by-side table of the writer's figures and the kernel figures that
//! explain them.
//!
//! Attribution: one tracer is attached for the whole command (attaching
//! costs about a second; doing it once keeps the runs comparable). Before a
//! run the ring buffer is drained and thrown away (after the sync and cache
//! drop, so the previous run's writeback is not counted); during the run
//! every record is read; after it, only records of the target
//! filesystem's device are kept. The runs are sequential, so a record
//! belongs to the run whose time window it was read in. System-wide
//! figures (throttling, /proc/vmstat) are differenced over the same
//! window and say so.
use std::{
    collections::BTreeMap,
    io::Write as _,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Instant,
};

use anyhow::Context as _;
use clap::Args;
use serde::Serialize;
use writer_core::{Report, RunFailure, Strategy, Writer, WriterConfig, WriterSpec, parse_size};

use crate::model::kernel::KernelSnapshot;
use crate::{
    UsageError,
    model::interval::{Bucket, CallAggregate, InodePassCounts, IntervalLine},
    model::plan::{Concept, HookKind},
    model::{CallRecord, DevId},
    sys::page_size,
    tracer::ring::{RingCollector, RingRecord},
    tracer::{Tracer, TracerOptions},
};

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

Before every run: sync, then drop the page cache (echo 3 > /proc/sys/vm/drop_caches).
After every run the run's files are synced (syncfs), so buffered data is
written back inside the run's window, then removed. Kernel figures are
the writepages calls on the filesystem of --dir; throttling and vmstat
figures are system-wide over the same window. Needs root.
Strategies: buffered, fsync-end, fdatasync-chunk, srf-pipelined, direct, uring.";

/// Arguments of `wbscope compare`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub struct CompareArgs {
    /// Directory to write in (on the filesystem to study). Existing files
    /// are never touched.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Bytes per run (one file).
    #[arg(long, value_name = "SIZE")]
    pub size: String,
    /// Bytes per write call.
    #[arg(long, value_name = "SIZE", default_value = "8M")]
    pub chunk: String,
    /// Comma-separated strategies, one column each.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "buffered,fsync-end,srf-pipelined,direct"
    )]
    pub strategies: String,
    /// Runs per strategy (interleaved); the table shows medians and spread.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// srf-pipelined: chunks between sync_file_range(WRITE) and WAIT_BEFORE.
    #[arg(long, value_name = "CHUNKS", default_value_t = 4)]
    pub window: u32,
    /// One JSON document: {"runs": [{"strategy", "writer", "kernel"}, ...]}.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// The table as Markdown.
    #[arg(long)]
    pub markdown: bool,
    /// Also draw throughput over time and the chunk-size histograms to an
    /// SVG file (never overwritten).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// p50/p99/max of pages per writepages call (exact, from the records).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    pub fn of(values: &mut [u64]) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Some(Percentiles {
            p50: at(0.5),
            p99: at(0.99),
            max: values[values.len() - 1],
        })
    }
}

/// Kernel figures of one traced window, for the devices it was about.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelFigures {
    /// The filesystems' devices (`major:minor`).
    pub devices: Vec<DevId>,
    pub window_s: f64,
    /// writepages calls on those devices, and the pages they wrote.
    pub calls: u64,
    pub pages_written: u64,
    pub calls_by_cause: BTreeMap<String, u64>,
    pub pages_per_call: Option<Percentiles>,
    pub pages_per_call_hist: Vec<Bucket>,
    /// Pages written / pages asked over calls with a finite budget.
    pub written_per_asked: Option<f64>,
    pub calls_asking_everything: u64,
    /// Pages examined per page written (ext4's folio scan).
    pub pages_scanned_per_page_written: Option<f64>,
    pub ns_per_written_page: Option<f64>,
    pub on_cpu_ns_per_written_page: Option<f64>,
    /// Sum of the calls' wall time and on-CPU time (seconds).
    pub calls_wall_s: f64,
    pub calls_on_cpu_s: Option<f64>,
    pub extents: u64,
    /// `writeback_single_inode` passes and pages they wrote (any
    /// filesystem, system-wide).
    pub inode_passes: u64,
    pub inode_pages_wrote: u64,
    /// The same passes on these devices, with their chunk sizes; null
    /// when the hook that sees the device (tp_btf) is not attached.
    pub inode_pass: Option<InodePassFigures>,
    /// /proc/vmstat sampled every 100 ms (system-wide, KiB).
    pub peak_dirty_kib: u64,
    pub peak_writeback_kib: u64,
    /// `balance_dirty_pages` throttling over the window (system-wide).
    pub throttle_events: u64,
    pub throttle_pause_ms_total: u64,
    /// Block requests issued to the devices, and the log2 bucket holding
    /// the median request size (bytes).
    pub device_requests: u64,
    pub device_request_bytes_p50: Option<[u64; 2]>,
    pub device_request_bytes: Vec<Bucket>,
    /// /proc/vmstat `nr_written` delta (pages, system-wide).
    pub vmstat_written_pages: u64,
    pub lost_records: u64,
}

/// Inode passes on a run's devices: the counts, and the log2 buckets
/// holding the median and 99th percentile of the chunk per pass.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InodePassFigures {
    #[serde(flatten)]
    pub counts: InodePassCounts,
    /// Pages written per budget pass that wrote any, p50/p99 (bucket
    /// `[lo, hi]`) and mean.
    pub pages_per_pass_p50: Option<[u64; 2]>,
    pub pages_per_pass_p99: Option<[u64; 2]>,
    pub pages_per_pass_mean: Option<f64>,
    /// Budget per budget pass, p50 (bucket `[lo, hi]`).
    pub pages_asked_per_pass_p50: Option<[u64; 2]>,
}

impl InodePassFigures {
    /// The passes of `devs` among an interval line's devices.
    pub fn of(line: &IntervalLine, devs: &[DevId]) -> InodePassFigures {
        let mut counts = InodePassCounts::default();
        for l in line
            .inode_passes_by_device
            .iter()
            .filter(|l| devs.contains(&l.dev))
        {
            counts.merge(&l.counts);
        }
        let writing: u64 = counts
            .pages_per_pass
            .iter()
            .filter(|b| b.hi > 0)
            .map(|b| b.count)
            .sum();
        InodePassFigures {
            pages_per_pass_p50: counts.pages_per_pass_quantile(0.5),
            pages_per_pass_p99: counts.pages_per_pass_quantile(0.99),
            pages_per_pass_mean: (writing > 0)
                .then(|| counts.budget_pages_written as f64 / writing as f64),
            pages_asked_per_pass_p50: crate::model::interval::quantile_bucket(
                &counts.pages_asked_per_pass,
                0.5,
            ),
            counts,
        }
    }
}

fn median_bucket(buckets: &[Bucket]) -> Option<[u64; 2]> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    let mut seen = 0;
    for b in buckets {
        seen += b.count;
        if total > 0 && seen * 2 >= total {
            return Some([b.lo, b.hi]);
        }
    }
    None
}

impl KernelFigures {
    fn build(
        devs: &[DevId],
        window_s: f64,
        calls: &[CallRecord],
        prev: &KernelSnapshot,
        cur: &KernelSnapshot,
        peaks: (u64, u64),
        per_device_passes: bool,
    ) -> KernelFigures {
        let mut agg = CallAggregate::default();
        let mut pages = Vec::with_capacity(calls.len());
        for c in calls {
            agg.add(c);
            pages.push(c.pages_written.max(0) as u64);
        }
        let line = IntervalLine::new(window_s, window_s, &agg, prev, cur);
        let mut request_bytes: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut device_requests = 0;
        for d in line.devices.iter().filter(|d| devs.contains(&d.dev)) {
            device_requests += d.requests;
            for b in &d.request_bytes {
                *request_bytes.entry((b.lo, b.hi)).or_default() += b.count;
            }
        }
        let request_bytes: Vec<Bucket> = request_bytes
            .into_iter()
            .map(|((lo, hi), count)| Bucket { lo, hi, count })
            .collect();
        let kib = page_size() / 1024;
        let inode_pass = per_device_passes.then(|| InodePassFigures::of(&line, devs));
        KernelFigures {
            devices: devs.to_vec(),
            window_s,
            calls: agg.calls,
            pages_written: agg.pages_written,
            calls_by_cause: agg
                .by_cause
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            pages_per_call: Percentiles::of(&mut pages),
            pages_per_call_hist: line.pages_per_call,
            written_per_asked: line.written_per_asked,
            calls_asking_everything: line.calls_asking_everything,
            pages_scanned_per_page_written: line.scan.pages_scanned_per_page_written,
            ns_per_written_page: line.ns_per_written_page,
            on_cpu_ns_per_written_page: line.on_cpu_ns_per_written_page,
            calls_wall_s: agg.duration_ns as f64 / 1e9,
            calls_on_cpu_s: (agg.on_cpu_pages > 0 || agg.on_cpu_ns > 0)
                .then(|| agg.on_cpu_ns as f64 / 1e9),
            extents: agg.extents,
            inode_passes: line.inode_passes,
            inode_pages_wrote: line.inode_pages_wrote,
            inode_pass,
            peak_dirty_kib: peaks.0 * kib,
            peak_writeback_kib: peaks.1 * kib,
            throttle_events: line.throttle.events,
            throttle_pause_ms_total: line.throttle.pause_ms_total,
            device_requests,
            device_request_bytes_p50: median_bucket(&request_bytes),
            device_request_bytes: request_bytes,
            vmstat_written_pages: line.dirty.vmstat_written_delta,
            lost_records: line.lost_records,
        }
    }
}

/// One tracer for a whole command; [`Traced::window`] attributes records
/// to one piece of work.
pub struct Traced {
    tracer: Tracer,
    collector: RingCollector,
}

impl Traced {
    pub fn attach(disabled: &[HookKind]) -> anyhow::Result<Traced> {
        let mut tracer = Tracer::attach(&TracerOptions {
            filter: Default::default(),
            disabled: disabled.to_vec(),
        })?;
        crate::tracer::spawn_ebpf_log_pump(&mut tracer);
        let collector = RingCollector::new(tracer.take_events()?)?;
        eprintln!("wbscope: probes: {}", tracer.plan.summary());
        if !tracer
            .plan
            .attached(crate::model::plan::Concept::WritepagesCall)
        {
            eprintln!("wbscope: warning: no writepages hook attached; no calls will be seen");
        }
        Ok(Traced { tracer, collector })
    }

    /// Runs `work` on a blocking thread while reading the ring buffer;
    /// returns its result and, per group of devices, the kernel figures of
    /// the calls on those devices that ended while it ran. On a signal,
    /// `on_signal` is called once (e.g. to ask a writer to stop).
    pub async fn window<R: Send + 'static>(
        &mut self,
        groups: &[Vec<DevId>],
        work: impl FnOnce() -> R + Send + 'static,
        on_signal: impl Fn(),
    ) -> anyhow::Result<(R, Vec<KernelFigures>)> {
        // What ended before the window belongs to nobody.
        self.collector.drain(|_| {});
        let prev = self.tracer.snapshot()?;
        let started = Instant::now();
        let handle = tokio::task::spawn_blocking(work);
        let mut calls: Vec<CallRecord> = Vec::new();
        let mut peaks = (0u64, 0u64);
        let mut signalled = false;
        let keep = |c: &CallRecord| groups.iter().any(|g| g.contains(&c.dev));
        loop {
            self.collector
                .wait_and_drain(|RingRecord::Call(c)| {
                    if keep(&c) {
                        calls.push(c)
                    }
                })
                .await?;
            if let Ok(v) = crate::tracer::read_vmstat() {
                peaks.0 = peaks.0.max(v.nr_dirty);
                peaks.1 = peaks.1.max(v.nr_writeback);
            }
            if crate::sys::interrupted() && !signalled {
                signalled = true;
                on_signal();
            }
            if handle.is_finished() {
                break;
            }
        }
        let result = handle.await.context("the traced work panicked")?;
        self.collector.drain(|RingRecord::Call(c)| {
            if keep(&c) {
                calls.push(c)
            }
        });
        let cur = self.tracer.snapshot()?;
        let window_s = started.elapsed().as_secs_f64();
        let per_device_passes = self
            .tracer
            .plan
            .concept(Concept::InodeWriteback)
            .is_some_and(|c| c.kind == Some(HookKind::TpBtf));
        let figures = groups
            .iter()
            .map(|g| {
                let mine: Vec<CallRecord> = calls
                    .iter()
                    .filter(|c| g.contains(&c.dev))
                    .cloned()
                    .collect();
                KernelFigures::build(g, window_s, &mine, &prev, &cur, peaks, per_device_passes)
            })
            .collect();
        Ok((result, figures))
    }
}

/// Device of the filesystem holding `path`.
pub fn dev_of(path: &Path) -> anyhow::Result<DevId> {
    Ok(DevId::from_user(
        std::fs::metadata(path)
            .with_context(|| format!("stat {}", path.display()))?
            .dev(),
    ))
}

/// One strategy's run: the writer's report and the kernel's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Scenarios: which filesystem (e.g. `ext4`, `fs2 xfs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<String>,
    pub strategy: String,
    pub repeat: u32,
    pub writer: Report,
    pub kernel: KernelFigures,
}

impl Run {
    /// The table column this run belongs to.
    pub fn column(&self) -> String {
        match &self.fs {
            Some(fs) => format!("{fs} {}", self.strategy),
            None => self.strategy.clone(),
        }
    }
}

/// syncfs(2) on the filesystem holding `dir`.
pub fn syncfs(dir: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: a valid open fd.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
        return Err(std::io::Error::last_os_error()).context("syncfs");
    }
    Ok(())
}

/// Writes with `cfg` (files kept), syncs the filesystem so buffered data
/// is written back inside the window, removes the files; all traced.
pub async fn traced_write(
    traced: &mut Traced,
    devs: &[DevId],
    cfg: WriterConfig,
    sync_after: bool,
) -> anyhow::Result<(Report, KernelFigures)> {
    let dirs = cfg.spec().dirs.clone();
    let writer = Writer::new(cfg);
    let live = writer.tunables();
    let (result, mut kernel) = traced
        .window(
            &[devs.to_vec()],
            move || -> Result<Report, RunFailure> {
                let r = writer.run();
                if sync_after {
                    for d in &dirs {
                        let _ = syncfs(d);
                    }
                }
                r
            },
            move || live.request_stop(),
        )
        .await?;
    let report = match result {
        Ok(r) => r,
        Err(failure) => {
            if let Some(p) = &failure.partial {
                remove_files(p);
            }
            if failure.error.is_usage() {
                return Err(UsageError(failure.error.to_string()).into());
            }
            return Err(anyhow::anyhow!("{}", failure.error));
        }
    };
    remove_files(&report);
    Ok((report, kernel.remove(0)))
}

fn remove_files(r: &Report) {
    for f in &r.kept_files {
        if let Err(e) = std::fs::remove_file(f) {
            eprintln!("wbscope: warning: removing {}: {e}", f.display());
        }
    }
}

/// Validated settings of a compare.
pub struct ComparePlan {
    pub strategies: Vec<Strategy>,
    pub configs: Vec<WriterConfig>,
}

pub fn plan(args: &CompareArgs) -> Result<ComparePlan, UsageError> {
    let size = parse_size(&args.size).map_err(|e| UsageError(format!("--size: {e}")))?;
    let chunk = parse_size(&args.chunk).map_err(|e| UsageError(format!("--chunk: {e}")))?;
    let meta = std::fs::metadata(&args.dir)
        .map_err(|e| UsageError(format!("--dir {}: {e}", args.dir.display())))?;
    if !meta.is_dir() {
        return Err(UsageError(format!(
            "--dir {}: not a directory",
            args.dir.display()
        )));
    }
    let mut strategies = Vec::new();
    for name in args
        .strategies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let s: Strategy = name
            .parse()
            .map_err(|e: writer_core::ConfigError| UsageError(format!("--strategies: {e}")))?;
        if strategies.contains(&s) {
            return Err(UsageError(format!("--strategies: {name} given twice")));
        }
        strategies.push(s);
    }
    if strategies.is_empty() {
        return Err(UsageError("--strategies: empty list".into()));
    }
    let configs = strategies
        .iter()
        .map(|&strategy| {
            WriterConfig::new(WriterSpec {
                dirs: vec![args.dir.clone()],
                size,
                chunk,
                strategy,
                window: args.window,
                keep: true,
                ..WriterSpec::default()
            })
            .map_err(|e| UsageError(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ComparePlan {
        strategies,
        configs,
    })
}

/// Refuses a directory no run can write to — read-only, not on a block
/// device (/proc, a tmpfs), without room for one run's file — before the
/// first sync and page-cache drop, which hit the whole machine.
fn check_dir(dir: &Path, size: u64) -> Result<(), UsageError> {
    let refuse = |why: String| UsageError(format!("--dir {}: {why}", dir.display()));
    let m = scratchfs::mount_of(dir).map_err(|e| refuse(format!("{e:#}")))?;
    if !m.on_block_device() {
        return Err(refuse(format!(
            "is on {} ({}), not on a block device; compare measures writeback to a disk",
            m.source, m.fstype
        )));
    }
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
        .map_err(|_| refuse("has a NUL byte".into()))?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(refuse(format!(
            "statvfs: {}",
            std::io::Error::last_os_error()
        )));
    }
    if st.f_flag & libc::ST_RDONLY != 0 {
        return Err(refuse("is on a read-only filesystem".into()));
    }
    // SAFETY: c is a valid C string.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refuse(format!(
            "not writable: {}",
            std::io::Error::last_os_error()
        )));
    }
    // The runs are one at a time and each removes its file.
    let avail = st.f_bavail.saturating_mul(st.f_frsize);
    if size > avail {
        return Err(refuse(format!(
            "a run needs {} but only {} is free",
            writer_core::ByteSize(size),
            writer_core::ByteSize(avail)
        )));
    }
    Ok(())
}

pub async fn run(args: &CompareArgs, disabled: &[HookKind]) -> anyhow::Result<ExitCode> {
    let plan = plan(args)?;
    check_dir(&args.dir, plan.configs.first().map_or(0, |c| c.spec().size))?;
    if let Some(p) = &args.plot {
        if p.exists() {
            return Err(
                UsageError(format!("--plot {}: exists; not overwritten", p.display())).into(),
            );
        }
        // Checked before any run rather than after minutes of writing.
        if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty())
            && !parent.is_dir()
        {
            return Err(UsageError(format!("--plot {}: no such directory", p.display())).into());
        }
    }
    let dev = dev_of(&args.dir)?;
    let _signals = crate::sys::SignalGuard::install();
    super::scenario::remove_stale_scratch();
    let mut traced = Traced::attach(disabled)?;
    let mut runs = Vec::new();
    let total = plan.configs.len() as u32 * args.repeat;
    let mut n = 0;
    for rep in 0..args.repeat {
        for (strategy, cfg) in plan.strategies.iter().zip(&plan.configs) {
            n += 1;
            crate::sys::check_interrupted()?;
            eprintln!(
                "wbscope: run {n}/{total}: {strategy}: sync + drop caches, then {} in {} chunks to {}",
                args.size,
                args.chunk,
                args.dir.display()
            );
            crate::sys::sync_and_drop_caches()?;
            let (writer, kernel) = traced_write(&mut traced, &[dev], cfg.clone(), true).await?;
            crate::sys::check_interrupted()?;
            eprintln!(
                "wbscope: run {n}/{total}: {strategy}: {:.1} MB/s durable, {} writepages calls",
                writer.durable_mb_s.unwrap_or(0.0),
                kernel.calls
            );
            runs.push(Run {
                fs: None,
                strategy: strategy.name().to_string(),
                repeat: rep,
                writer,
                kernel,
            });
        }
    }
    let names: Vec<String> = plan.strategies.iter().map(|s| s.name().into()).collect();
    print_runs(&runs, &names, args.json, args.markdown)?;
    if let Some(p) = &args.plot {
        crate::export::plot::write_svg(p, &runs)?;
        eprintln!("wbscope: plot written to {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the runs as JSON (`{"runs": [...]}`) or as the side-by-side
/// table.
pub fn print_runs(
    runs: &[Run],
    columns: &[String],
    json: bool,
    markdown: bool,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        #[derive(Serialize)]
        struct Doc<'a> {
            runs: &'a [Run],
        }
        // Serialised whole before the first byte goes out (json! panicked
        // on a non-UTF-8 path; to_writer would cut the object on an error).
        let text = serde_json::to_string(&Doc { runs }).context("serialising the runs")?;
        writeln!(out, "{text}")?;
    } else {
        out.write_all(table(runs, columns, markdown).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn fmt_bytes(b: u64) -> String {
    match b {
        0..1024 => format!("{b}B"),
        1024..1_048_576 => format!("{}K", b / 1024),
        _ => format!("{}M", b / 1_048_576),
    }
}

type Metric<T> = (&'static str, fn(&T) -> Option<f64>, u8);

/// Writer rows of the table: label, figure, decimals.
pub const WRITER_METRICS: &[Metric<Report>] = &[
    ("durable MB/s", |r| r.durable_mb_s, 1),
    ("write MB/s", |r| Some(r.write_mb_s), 1),
    (
        "per-second MB/s mean",
        |r| r.per_second.as_ref().map(|p| p.mean),
        1,
    ),
    (
        "per-second MB/s min",
        |r| r.per_second.as_ref().map(|p| p.min),
        1,
    ),
    (
        "per-second CV",
        |r| r.per_second.as_ref().and_then(|p| p.cv),
        3,
    ),
    ("elapsed s", |r| Some(r.elapsed_s), 2),
    ("user CPU s", |r| Some(r.user_cpu_s), 2),
    ("sys CPU s", |r| Some(r.sys_cpu_s), 2),
];

/// Kernel rows of the table.
pub const KERNEL_METRICS: &[Metric<KernelFigures>] = &[
    ("writepages calls", |k| Some(k.calls as f64), 0),
    ("pages written (calls)", |k| Some(k.pages_written as f64), 0),
    (
        "pages/call p50",
        |k| k.pages_per_call.as_ref().map(|p| p.p50 as f64),
        0,
    ),
    (
        "pages/call p99",
        |k| k.pages_per_call.as_ref().map(|p| p.p99 as f64),
        0,
    ),
    (
        "pages/call max",
        |k| k.pages_per_call.as_ref().map(|p| p.max as f64),
        0,
    ),
    (
        "scanned/written page",
        |k| k.pages_scanned_per_page_written,
        2,
    ),
    ("ns per written page", |k| k.ns_per_written_page, 0),
    ("on-CPU ns per page", |k| k.on_cpu_ns_per_written_page, 0),
    (
        "peak Dirty MiB*",
        |k| Some(k.peak_dirty_kib as f64 / 1024.0),
        1,
    ),
    (
        "peak Writeback MiB*",
        |k| Some(k.peak_writeback_kib as f64 / 1024.0),
        1,
    ),
    (
        "throttle pause ms*",
        |k| Some(k.throttle_pause_ms_total as f64),
        0,
    ),
    ("inode passes*", |k| Some(k.inode_passes as f64), 0),
    ("device requests", |k| Some(k.device_requests as f64), 0),
];

/// Rows of the inode passes on the run's devices ("-" without the
/// per-device hook); the chunk-size rows follow in [`kernel_rows`].
pub const PASS_METRICS: &[Metric<KernelFigures>] = &[
    (
        "inode passes",
        |k| k.inode_pass.as_ref().map(|p| p.counts.passes as f64),
        0,
    ),
    (
        "pages written (passes)",
        |k| k.inode_pass.as_ref().map(|p| p.counts.pages_written as f64),
        0,
    ),
    (
        "pages/pass mean",
        |k| k.inode_pass.as_ref().and_then(|p| p.pages_per_pass_mean),
        0,
    ),
];

/// Bucket-valued rows: label and the `[lo, hi]` of the first run.
type RangeRow = (&'static str, fn(&KernelFigures) -> Option<[u64; 2]>);

const RANGE_ROWS: &[RangeRow] = &[
    ("pages/pass p50", |k| {
        k.inode_pass.as_ref().and_then(|p| p.pages_per_pass_p50)
    }),
    ("pages/pass p99", |k| {
        k.inode_pass.as_ref().and_then(|p| p.pages_per_pass_p99)
    }),
    ("pages asked/pass p50", |k| {
        k.inode_pass
            .as_ref()
            .and_then(|p| p.pages_asked_per_pass_p50)
    }),
];

/// A log2 bucket of pages, `lo-hi` (both included).
fn fmt_range([lo, hi]: [u64; 2]) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    }
}

/// A cell: the value, or `median ±half-range` over repetitions.
pub fn cell(mut vals: Vec<f64>, decimals: u8) -> String {
    let d = decimals as usize;
    match vals.len() {
        0 => "-".to_string(),
        1 => format!("{:.d$}", vals[0]),
        _ => {
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let m = median(&mut vals);
            format!("{m:.d$} ±{:.d$}", (hi - lo) / 2.0)
        }
    }
}

/// Rows of kernel figures, one column per group of figures.
pub fn kernel_rows(columns: &[Vec<&KernelFigures>]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for (label, f, decimals) in KERNEL_METRICS {
        let mut row = vec![label.to_string()];
        for col in columns {
            row.push(cell(col.iter().filter_map(|k| f(k)).collect(), *decimals));
        }
        rows.push(row);
    }
    for (label, f, decimals) in PASS_METRICS {
        let mut row = vec![label.to_string()];
        for col in columns {
            row.push(cell(col.iter().filter_map(|k| f(k)).collect(), *decimals));
        }
        rows.push(row);
    }
    // Buckets do not take a median over repetitions: the first run's.
    for (label, f) in RANGE_ROWS {
        let mut row = vec![label.to_string()];
        for col in columns {
            row.push(col.first().and_then(|k| f(k)).map_or("-".into(), fmt_range));
        }
        rows.push(row);
    }
    let mut row = vec!["device request p50".to_string()];
    for col in columns {
        row.push(
            col.first()
                .and_then(|k| k.device_request_bytes_p50)
                .map_or("-".into(), |[lo, hi]| {
                    format!("{}-{}", fmt_bytes(lo), fmt_bytes(hi + 1))
                }),
        );
    }
    rows.push(row);
    rows
}

/// Footnote for the rows marked `*`.
pub const SYSTEM_WIDE: &str = "* system-wide over the run's window (all devices)";

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The side-by-side table: one column per run label; with repetitions,
/// `median ±half-range`.
pub fn table(runs: &[Run], columns: &[String], markdown: bool) -> String {
    let mut header = vec!["".to_string()];
    header.extend(columns.iter().cloned());
    let mut rows = vec![header];
    let of = |c: &String| runs.iter().filter(|r| &r.column() == c).collect::<Vec<_>>();
    for (label, f, decimals) in WRITER_METRICS {
        let mut row = vec![label.to_string()];
        for c in columns {
            row.push(cell(
                of(c).iter().filter_map(|r| f(&r.writer)).collect(),
                *decimals,
            ));
        }
        rows.push(row);
    }
    let kernel: Vec<Vec<&KernelFigures>> = columns
        .iter()
        .map(|c| of(c).into_iter().map(|r| &r.kernel).collect())
        .collect();
    rows.extend(kernel_rows(&kernel));
    let n = columns.first().map_or(0, |c| of(c).len());
    let mut s = render(&rows, markdown);
    if n > 1 {
        s.push_str(&format!("{n} runs per column: median ±half the range\n"));
    }
    s.push_str(SYSTEM_WIDE);
    s.push('\n');
    s
}

/// Aligns `rows` (the first is the header) as text or Markdown.
pub fn render(rows: &[Vec<String>], markdown: bool) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for (ri, r) in rows.iter().enumerate() {
        let cells: Vec<String> = (0..cols)
            .map(|i| {
                let c = r.get(i).map_or("", String::as_str);
                if i == 0 {
                    format!("{c:<w$}", w = width[i])
                } else {
                    format!("{c:>w$}", w = width[i])
                }
            })
            .collect();
        if markdown {
            s.push_str(&format!("| {} |\n", cells.join(" | ")));
            if ri == 0 {
                let seps: Vec<String> = (0..cols)
                    .map(|i| {
                        if i == 0 {
                            "-".repeat(width[i].max(3))
                        } else {
                            format!("{}:", "-".repeat(width[i].max(3) - 1))
                        }
                    })
                    .collect();
                s.push_str(&format!("| {} |\n", seps.join(" | ")));
            }
        } else {
            s.push_str(cells.join("  ").trim_end());
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::interval::InodePassLine;

    fn b(lo: u64, hi: u64, count: u64) -> Bucket {
        Bucket { lo, hi, count }
    }

    fn line_with(passes: Vec<InodePassLine>) -> IntervalLine {
        let snap = KernelSnapshot::default();
        let mut line = IntervalLine::new(1.0, 1.0, &CallAggregate::default(), &snap, &snap);
        line.inode_passes_by_device = passes;
        line
    }

    fn dev(minor: u32) -> DevId {
        DevId { major: 7, minor }
    }

    #[test]
    fn inode_pass_figures_take_the_runs_devices_only() {
        let counts = |written: Vec<Bucket>, asked: Vec<Bucket>, pages: u64| {
            let budget_passes = written.iter().map(|b| b.count).sum();
            InodePassCounts {
                passes: budget_passes + 1,
                pages_written: pages + 10,
                budget_passes,
                budget_pages_asked: 0,
                budget_pages_written: pages,
                pages_per_pass: written,
                pages_per_unbounded_pass: vec![b(8, 15, 1)],
                pages_asked_per_pass: asked,
            }
        };
        let line = line_with(vec![
            InodePassLine {
                dev: dev(1),
                // One pass that wrote nothing, three of 1024..2047 pages.
                counts: counts(
                    vec![b(0, 0, 1), b(1024, 2047, 3)],
                    vec![b(2048, 4095, 4)],
                    4000,
                ),
            },
            InodePassLine {
                dev: dev(2),
                counts: counts(vec![b(8192, 16383, 1)], vec![b(8192, 16383, 1)], 9000),
            },
            InodePassLine {
                dev: dev(3),
                counts: counts(vec![b(1, 1, 50)], vec![b(1, 1, 50)], 50),
            },
        ]);
        let f = InodePassFigures::of(&line, &[dev(1), dev(2)]);
        assert_eq!(f.counts.passes, 4 + 1 + 1 + 1);
        assert_eq!(f.counts.pages_written, 4010 + 9010);
        assert_eq!(f.counts.budget_passes, 5);
        // Four passes wrote pages: rank 2 and 4 of them.
        assert_eq!(f.pages_per_pass_p50, Some([1024, 2047]));
        assert_eq!(f.pages_per_pass_p99, Some([8192, 16383]));
        assert_eq!(f.pages_per_pass_mean, Some(13000.0 / 4.0));
        assert_eq!(f.pages_asked_per_pass_p50, Some([2048, 4095]));
        // A device without passes: zeros and no percentiles.
        let none = InodePassFigures::of(&line, &[dev(9)]);
        assert_eq!(none.counts.passes, 0);
        assert_eq!(none.pages_per_pass_p50, None);
        assert_eq!(none.pages_per_pass_mean, None);
    }

    #[test]
    fn pass_rows_show_buckets_or_a_dash() {
        let with = KernelFigures {
            inode_pass: Some(InodePassFigures {
                counts: InodePassCounts {
                    passes: 12,
                    pages_written: 24576,
                    ..Default::default()
                },
                pages_per_pass_p50: Some([2048, 4095]),
                pages_per_pass_p99: Some([1, 1]),
                pages_per_pass_mean: Some(2048.0),
                pages_asked_per_pass_p50: None,
            }),
            ..Default::default()
        };
        // Without the per-device hook (classic tracepoint fallback).
        let without = KernelFigures::default();
        let rows = kernel_rows(&[vec![&with], vec![&without]]);
        let row = |label: &str| -> Vec<String> {
            rows.iter()
                .find(|r| r[0] == label)
                .unwrap_or_else(|| panic!("no row {label}: {rows:?}"))[1..]
                .to_vec()
        };
        assert_eq!(row("inode passes"), ["12", "-"]);
        assert_eq!(row("pages written (passes)"), ["24576", "-"]);
        assert_eq!(row("pages/pass mean"), ["2048", "-"]);
        assert_eq!(row("pages/pass p50"), ["2048-4095", "-"]);
        assert_eq!(row("pages/pass p99"), ["1", "-"]);
        assert_eq!(row("pages asked/pass p50"), ["-", "-"]);
        // The existing rows stay.
        assert_eq!(row("inode passes*"), ["0", "0"]);
        assert_eq!(row("device request p50"), ["-", "-"]);
    }
}
