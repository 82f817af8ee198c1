//! `wbscope scenario NAME`: the classic writeback experiments of docs/classic-cases.md
//! §1, each on its own loop-mounted filesystems (made here, removed
//! whatever happens: `scratchfs::ScratchFs` in `Drop`, SIGINT/SIGTERM/SIGHUP
//! turned into a flag that stops the writers and unwinds; what a SIGKILL
//! leaves, the next run or `--cleanup` removes), traced with one tracer
//! and split per run and per filesystem as `compare` does. What each one
//! reproduces is in docs/scenarios.md.
use std::{process::ExitCode, sync::Arc, time::Instant};

use anyhow::{Context as _, bail};
use clap::ValueEnum;
use serde::Serialize;
use writer_core::{
    FileSync, LiveTunables, Report, RunFailure, SmallFiles, Strategy, Writer, WriterConfig,
    WriterSpec,
};

use scratchfs::ScratchFs;

use crate::cli::{FsChoice, Scale, ScenarioArgs, ScenarioName};
use wbscope_capture::window::{Traced, syncfs, traced_write};
use wbscope_export::table::{
    CACHE_METRICS, SYSTEM_WIDE, cell, kernel_rows, render, table, table_with,
};
use wbscope_model::DevId;
use wbscope_model::plan::HookChoice;
use wbscope_model::window::{KernelFigures, Run, RunContext};
use wbscope_sys::UsageError;

/// Sizes of one scale.
struct Sizes {
    image_mib: u64,
    /// Per-filesystem dirty cap (None: the system's own thresholds).
    dirty_cap: Option<u64>,
    file: u64,
    chunk: u64,
    small_files: u64,
    small_max: u64,
    writers: u32,
    writer_file: u64,
}

const MIB: u64 = 1 << 20;

fn sizes(scale: Scale) -> Sizes {
    match scale {
        Scale::Tiny => Sizes {
            image_mib: 1024,
            dirty_cap: Some(64 * MIB),
            file: 256 * MIB,
            chunk: 8 * MIB,
            small_files: 300,
            small_max: 512 << 10,
            writers: 4,
            writer_file: 96 * MIB,
        },
        Scale::Small => Sizes {
            image_mib: 4096,
            dirty_cap: Some(256 * MIB),
            file: 1024 * MIB,
            chunk: 8 * MIB,
            small_files: 2000,
            small_max: SmallFiles::DEFAULT_MAX,
            writers: 8,
            writer_file: 256 * MIB,
        },
        Scale::Full => Sizes {
            image_mib: 20 * 1024,
            dirty_cap: None,
            file: 8192 * MIB,
            chunk: 8 * MIB,
            small_files: 10000,
            small_max: SmallFiles::DEFAULT_MAX,
            writers: 16,
            writer_file: 1024 * MIB,
        },
    }
}

#[derive(Serialize)]
struct ScenarioJson<'a> {
    scenario: &'a str,
    scale: &'a str,
    runs: &'a [Run],
    #[serde(skip_serializing_if = "Option::is_none")]
    sync: Option<&'a SyncFigures>,
    context: &'a RunContext,
}

/// sync-after-write: the sync call itself.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SyncFigures {
    pub(crate) fs: String,
    pub(crate) sync_wall_s: f64,
    /// CPU of the thread that called syncfs(2) (the flusher's work is in
    /// the kernel figures' on-CPU time, not here).
    pub(crate) sync_thread_sys_s: f64,
    pub(crate) sync_thread_user_s: f64,
    pub(crate) kernel: KernelFigures,
}

fn name_of<T: ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

fn filesystems(args: &ScenarioArgs, name: ScenarioName) -> Vec<&'static str> {
    let default = if name == ScenarioName::ManyWriters {
        FsChoice::Both
    } else {
        FsChoice::Ext4
    };
    match args.fs.unwrap_or(default) {
        FsChoice::Ext4 => vec!["ext4"],
        FsChoice::Xfs => vec!["xfs"],
        FsChoice::Both => vec!["ext4", "xfs"],
    }
}

/// The tracer's name for the filesystem's device.
fn dev_id(fs: &ScratchFs) -> DevId {
    let (major, minor) = fs.dev();
    DevId { major, minor }
}

fn mount(fstype: &str, sz: &Sizes) -> anyhow::Result<ScratchFs> {
    wbscope_sys::check_interrupted()?;
    // O_DIRECT on the image: the loop device does not cache its data a
    // second time in the host's page cache.
    let mut fs = ScratchFs::builder(fstype.parse()?, sz.image_mib)
        .direct_io(true)
        .create()?;
    if let Some(cap) = sz.dirty_cap {
        fs.limit_dirty(cap)?;
    }
    eprintln!(
        "wbscope: {} on {} ({}) mounted at {}{}",
        fstype,
        fs.device().display(),
        dev_id(&fs),
        fs.mountpoint().display(),
        sz.dirty_cap
            .map_or(String::new(), |c| format!(", dirty cap {} MiB", c / MIB))
    );
    Ok(fs)
}

/// Mounts one filesystem per type, then applies the injected failure
/// (tests: whatever fails after mounting must leave nothing mounted).
fn mount_all(args: &ScenarioArgs, types: &[&str], sz: &Sizes) -> anyhow::Result<Vec<ScratchFs>> {
    let mounted = types
        .iter()
        .map(|f| mount(f, sz))
        .collect::<anyhow::Result<Vec<_>>>()?;
    injected(args)?;
    Ok(mounted)
}

fn injected(args: &ScenarioArgs) -> anyhow::Result<()> {
    if args.fail_after_mount || std::env::var_os("WBSCOPE_SCENARIO_FAIL_AFTER_MOUNT").is_some() {
        bail!("injected failure after mount (--fail-after-mount)");
    }
    Ok(())
}

fn config(spec: WriterSpec) -> anyhow::Result<WriterConfig> {
    WriterConfig::new(WriterSpec { keep: true, ..spec }).map_err(|e| anyhow::anyhow!("{e}"))
}

fn before_run(what: &str) -> anyhow::Result<()> {
    wbscope_sys::check_interrupted()?;
    eprintln!("wbscope: {what}: sync + drop caches");
    wbscope_sys::sync_and_drop_caches()
}

fn after_run(what: &str, r: &Report, k: &KernelFigures) {
    eprintln!(
        "wbscope: {what}: {:.2} s, {:.1} MB/s written, {} writepages calls",
        r.elapsed_s, r.write_mb_s, k.calls
    );
}

/// `--cleanup`: what killed runs left, removed; one line each.
fn cleanup() -> anyhow::Result<ExitCode> {
    let done = scratchfs::cleanup_stale().context("removing what killed runs left")?;
    for line in &done {
        println!("{line}");
    }
    if done.is_empty() {
        eprintln!("wbscope: nothing left by killed runs");
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes what killed scenario runs left (SIGKILL runs no `Drop`), with
/// a warning per thing removed; live runs' filesystems are left alone.
pub(crate) fn remove_stale_scratch() {
    match scratchfs::cleanup_stale() {
        Ok(done) => {
            for line in done {
                eprintln!("wbscope: warning: left by a killed run: {line}");
            }
        }
        Err(e) => eprintln!("wbscope: warning: looking for what killed runs left: {e:#}"),
    }
}

pub(crate) async fn run(args: &ScenarioArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    if args.cleanup {
        return cleanup();
    }
    let Some(scenario) = args.name else {
        return Err(UsageError("a scenario name or --cleanup is required".into()).into());
    };
    if scenario == ScenarioName::SyncAfterWrite && args.repeat > 1 {
        return Err(UsageError(
            "sync-after-write: --repeat is not supported (its sync figures are one object per document); run it several times instead".into(),
        )
        .into());
    }
    if let Some(p) = &args.report {
        wbscope_export::report::check_output("--report", p)?;
    }
    let _signals = wbscope_sys::SignalGuard::install();
    remove_stale_scratch();
    let started = Instant::now();
    let sz = sizes(args.scale);
    let fss = filesystems(args, scenario);
    let mut traced = Traced::attach(&hooks.with_anatomy())?;
    let name = name_of(scenario);
    let mut sync = None;
    let (runs, columns) = match scenario {
        ScenarioName::SingleStream => single_stream(args, &sz, &fss, &mut traced).await?,
        ScenarioName::ThreeFilesystems => three_filesystems(args, &sz, &fss, &mut traced).await?,
        ScenarioName::SyncAfterWrite => {
            let (runs, cols, s) = sync_after_write(args, &sz, &fss, &mut traced).await?;
            sync = Some(s);
            (runs, cols)
        }
        ScenarioName::PackageUnpack => package_unpack(args, &sz, &fss, &mut traced).await?,
        ScenarioName::ManyWriters => many_writers(args, &sz, &fss, &mut traced).await?,
        ScenarioName::PageCacheCliff => page_cache_cliff(args, &sz, &fss, &mut traced).await?,
    };
    // A signal during the last (or only) traced window stops the writers,
    // which then return short reports, not errors: without this check the
    // partial figures were printed as a result and the exit code was 0.
    // The filesystems are gone by now (dropped with the scenario's call).
    wbscope_sys::check_interrupted()?;
    eprintln!(
        "wbscope: scenario {name} done in {:.1} s; filesystems removed",
        started.elapsed().as_secs_f64()
    );
    let context = traced.context();
    if let Some(p) = &args.report {
        use wbscope_export::report;
        let data = report::of_runs(&runs, &context, Some((&name, &name_of(args.scale))))?;
        report::write_new(p, &report::html(&data))?;
        eprintln!("wbscope: report written to {}", p.display());
    }
    if args.json {
        let doc = ScenarioJson {
            scenario: &name,
            scale: &name_of(args.scale),
            runs: &runs,
            sync: sync.as_ref(),
            context: &context,
        };
        println!("{}", serde_json::to_string(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("scenario {name}, scale {}", name_of(args.scale));
    match &sync {
        Some(s) => print!("{}", sync_table(&runs, s, args.markdown)),
        None if scenario == ScenarioName::PageCacheCliff => print!(
            "{}",
            table_with(&runs, &columns, args.markdown, CACHE_METRICS)
        ),
        None => print!("{}", table(&runs, &columns, args.markdown)),
    }
    Ok(ExitCode::SUCCESS)
}

type Outcome = (Vec<Run>, Vec<String>);

/// Round `rep`'s order of `items`: rotated by `rep`, so that over the
/// rounds each variant runs first once (right after the mount, or after
/// a different variant each time) rather than always in the same place.
fn rotated<T: Copy>(items: &[T], rep: u32) -> Vec<T> {
    let k = rep as usize % items.len().max(1);
    items[k..].iter().chain(&items[..k]).copied().collect()
}

/// The table's columns of `runs` in the order of the first round.
fn columns_of(runs: &[Run]) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    for r in runs.iter().filter(|r| r.repeat == 0) {
        let c = r.column();
        if !cols.contains(&c) {
            cols.push(c);
        }
    }
    cols
}

async fn single_stream(
    args: &ScenarioArgs,
    sz: &Sizes,
    fss: &[&str],
    traced: &mut Traced,
) -> anyhow::Result<Outcome> {
    let mounted = mount_all(args, fss, sz)?;
    let strategies = [
        Strategy::Buffered,
        Strategy::FsyncEnd,
        Strategy::SrfPipelined,
        Strategy::Direct,
    ];
    let mut runs = Vec::new();
    for rep in 0..args.repeat {
        for fs in &mounted {
            for strategy in rotated(&strategies, rep) {
                let what = format!("{} {strategy}{}", fs.fstype(), round(args, rep));
                before_run(&what)?;
                let cfg = config(WriterSpec {
                    dirs: vec![fs.mountpoint().to_path_buf()],
                    size: sz.file,
                    chunk: sz.chunk,
                    strategy,
                    ..WriterSpec::default()
                })?;
                let (writer, kernel) = traced_write(traced, &[dev_id(fs)], cfg, true).await?;
                after_run(&what, &writer, &kernel);
                runs.push(Run {
                    fs: (mounted.len() > 1).then(|| fs.fstype().to_string()),
                    strategy: strategy.name().into(),
                    repeat: rep,
                    writer,
                    kernel,
                });
            }
        }
    }
    let columns = columns_of(&runs);
    Ok((runs, columns))
}

/// ` (round 2/3)` with --repeat, nothing without.
fn round(args: &ScenarioArgs, rep: u32) -> String {
    if args.repeat > 1 {
        format!(" (round {}/{})", rep + 1, args.repeat)
    } else {
        String::new()
    }
}

/// Runs several writers at once, one per config, traced; one figure set
/// per writer (its filesystem's device).
async fn concurrent(
    traced: &mut Traced,
    fss: &[&ScratchFs],
    cfgs: Vec<WriterConfig>,
) -> anyhow::Result<Vec<(Report, KernelFigures)>> {
    let writers: Vec<Writer> = cfgs
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let meter = traced.meter(i, c.spec().jobs);
            Writer::new(c).with_observer(meter)
        })
        .collect();
    let lives: Vec<Arc<LiveTunables>> = writers.iter().map(Writer::tunables).collect();
    let dirs: Vec<_> = fss.iter().map(|f| f.mountpoint().to_path_buf()).collect();
    let groups: Vec<_> = fss.iter().map(|f| vec![dev_id(f)]).collect();
    let (results, figures) = traced
        .window(
            &groups,
            move || -> Vec<Result<Report, RunFailure>> {
                let results = std::thread::scope(|s| {
                    let handles: Vec<_> = writers.iter().map(|w| s.spawn(|| w.run())).collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| {
                                Err(writer_core::WriterError::Panicked(0).into())
                            })
                        })
                        .collect()
                });
                for d in &dirs {
                    let _ = syncfs(d);
                }
                results
            },
            move || lives.iter().for_each(|l| l.request_stop()),
        )
        .await?;
    let mut out = Vec::new();
    let mut first_error = None;
    for (r, k) in results.into_iter().zip(figures) {
        match r {
            Ok(rep) => {
                remove_kept(&rep);
                out.push((rep, k));
            }
            Err(f) => {
                if let Some(p) = &f.partial {
                    remove_kept(p);
                }
                first_error.get_or_insert(f.error.to_string());
            }
        }
    }
    if let Some(e) = first_error {
        bail!("{e}");
    }
    Ok(out)
}

fn remove_kept(r: &Report) {
    for f in &r.kept_files {
        let _ = std::fs::remove_file(f);
    }
}

async fn three_filesystems(
    args: &ScenarioArgs,
    sz: &Sizes,
    fss: &[&str],
    traced: &mut Traced,
) -> anyhow::Result<Outcome> {
    // Three filesystems: all of one type, or ext4, xfs, ext4 for both.
    let types: Vec<&str> = (0..3).map(|i| fss[i % fss.len()]).collect();
    let mounted = mount_all(args, &types, sz)?;
    before_run("three buffered writers")?;
    // Three times the single-stream size each: long enough for several
    // per-second samples (the case is about the minimum, not the mean).
    let cfgs = mounted
        .iter()
        .map(|fs| {
            config(WriterSpec {
                dirs: vec![fs.mountpoint().to_path_buf()],
                size: (sz.file * 3).min((sz.image_mib << 20) * 3 / 4),
                chunk: sz.chunk,
                strategy: Strategy::Buffered,
                ..WriterSpec::default()
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let refs: Vec<&ScratchFs> = mounted.iter().collect();
    let mut runs = Vec::new();
    // The three write at once: a round is all three; later rounds after
    // the same sync and drop as the first.
    for rep in 0..args.repeat {
        if rep > 0 {
            before_run(&format!("three buffered writers{}", round(args, rep)))?;
        }
        let results = concurrent(traced, &refs, cfgs.clone()).await?;
        for (i, ((writer, kernel), fs)) in results.into_iter().zip(&mounted).enumerate() {
            after_run(&format!("fs{} {}", i + 1, fs.fstype()), &writer, &kernel);
            runs.push(Run {
                fs: Some(format!("fs{} {}", i + 1, fs.fstype())),
                strategy: "buffered".into(),
                repeat: rep,
                writer,
                kernel,
            });
        }
    }
    let columns = columns_of(&runs);
    Ok((runs, columns))
}

/// getrusage(RUSAGE_THREAD): (user, sys) seconds.
fn thread_cpu() -> (f64, f64) {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

async fn sync_after_write(
    args: &ScenarioArgs,
    sz: &Sizes,
    fss: &[&str],
    traced: &mut Traced,
) -> anyhow::Result<(Vec<Run>, Vec<String>, SyncFigures)> {
    // No dirty cap here: the point is a large amount of dirty data for the
    // sync to write (the RHEL5 10 GB dd + sync).
    let nocap = Sizes {
        dirty_cap: None,
        ..sizes(args.scale)
    };
    let fs = mount(fss[0], &nocap)?;
    injected(args)?;
    before_run("buffered write")?;
    let cfg = config(WriterSpec {
        dirs: vec![fs.mountpoint().to_path_buf()],
        size: sz.file * 2,
        chunk: sz.chunk,
        strategy: Strategy::Buffered,
        ..WriterSpec::default()
    })?;
    let meter = traced.meter(0, cfg.spec().jobs);
    let writer = Writer::new(cfg).with_observer(meter);
    let live = writer.tunables();
    let (result, mut kernel) = traced
        .window(
            &[vec![dev_id(&fs)]],
            move || writer.run(),
            move || live.request_stop(),
        )
        .await?;
    let report = result.map_err(|f| {
        if let Some(p) = &f.partial {
            remove_kept(p);
        }
        anyhow::anyhow!("{}", f.error)
    })?;
    let write_kernel = kernel.remove(0);
    after_run("buffered write", &report, &write_kernel);
    wbscope_sys::check_interrupted().inspect_err(|_| remove_kept(&report))?;
    eprintln!("wbscope: syncfs on {}", fs.mountpoint().display());
    let dir = fs.mountpoint().to_path_buf();
    let (timed, mut sync_kernel) = traced
        .window(
            &[vec![dev_id(&fs)]],
            move || -> anyhow::Result<(f64, f64, f64)> {
                let (u0, s0) = thread_cpu();
                let t = Instant::now();
                syncfs(&dir)?;
                let wall = t.elapsed().as_secs_f64();
                let (u1, s1) = thread_cpu();
                Ok((wall, u1 - u0, s1 - s0))
            },
            || {},
        )
        .await?;
    remove_kept(&report);
    let (wall, user, sys) = timed.context("syncfs")?;
    let sync_kernel = sync_kernel.remove(0);
    eprintln!(
        "wbscope: sync: {wall:.2} s, {} writepages calls",
        sync_kernel.calls
    );
    let runs = vec![Run {
        fs: Some(fs.fstype().to_string()),
        strategy: "buffered".into(),
        repeat: 0,
        writer: report,
        kernel: write_kernel,
    }];
    let cols = runs.iter().map(Run::column).collect();
    Ok((
        runs,
        cols,
        SyncFigures {
            fs: fs.fstype().to_string(),
            sync_wall_s: wall,
            sync_thread_sys_s: sys,
            sync_thread_user_s: user,
            kernel: sync_kernel,
        },
    ))
}

fn sync_table(runs: &[Run], s: &SyncFigures, markdown: bool) -> String {
    let w = &runs[0];
    let mut rows = vec![vec![
        String::new(),
        format!("{} write", s.fs),
        format!("{} sync", s.fs),
    ]];
    rows.push(vec![
        "wall s".into(),
        format!("{:.2}", w.writer.elapsed_s),
        format!("{:.2}", s.sync_wall_s),
    ]);
    rows.push(vec![
        "MB/s (write; bytes/(write+sync))".into(),
        format!("{:.1}", w.writer.write_mb_s),
        format!(
            "{:.1}",
            w.writer.bytes as f64 / 1e6 / (w.writer.elapsed_s + s.sync_wall_s)
        ),
    ]);
    rows.push(vec![
        "sys CPU s (caller)".into(),
        format!("{:.2}", w.writer.sys_cpu_s),
        format!("{:.2}", s.sync_thread_sys_s),
    ]);
    rows.push(vec![
        "writepages on-CPU s".into(),
        cell(w.kernel.calls_on_cpu_s.into_iter().collect(), 3),
        cell(s.kernel.calls_on_cpu_s.into_iter().collect(), 3),
    ]);
    rows.extend(kernel_rows(&[vec![&w.kernel], vec![&s.kernel]]));
    let mut out = render(&rows, markdown);
    out.push_str(SYSTEM_WIDE);
    out.push('\n');
    out
}

async fn package_unpack(
    args: &ScenarioArgs,
    sz: &Sizes,
    fss: &[&str],
    traced: &mut Traced,
) -> anyhow::Result<Outcome> {
    let mounted = mount_all(args, fss, sz)?;
    let variants: [(FileSync, bool, &str); 5] = [
        (FileSync::FsyncEach, false, "fsync-each"),
        (FileSync::SrfThenFsync, false, "srf-then-fsync"),
        (FileSync::TwoPass, false, "two-pass"),
        (FileSync::FsyncEach, true, "fsync-each+na+fd"),
        (FileSync::TwoPass, true, "two-pass+na+fd"),
    ];
    let mut runs = Vec::new();
    for rep in 0..args.repeat {
        for fs in &mounted {
            for (policy, tuned, label) in rotated(&variants, rep) {
                let what = format!("{} {label}{}", fs.fstype(), round(args, rep));
                before_run(&what)?;
                let mut small = SmallFiles::new(sz.small_files, policy);
                small.max_size = sz.small_max;
                let cfg = config(WriterSpec {
                    dirs: vec![fs.mountpoint().to_path_buf()],
                    chunk: 1 << 20,
                    small_files: Some(small),
                    noatime: tuned,
                    datasync: tuned,
                    ..WriterSpec::default()
                })?;
                let (writer, kernel) = traced_write(traced, &[dev_id(fs)], cfg, false).await?;
                eprintln!(
                    "wbscope: {what}: {} files in {:.2} s ({:.0} files/s), {} writepages calls",
                    writer.files_written,
                    writer.elapsed_s,
                    writer.files_per_s.unwrap_or(0.0),
                    kernel.calls
                );
                runs.push(Run {
                    fs: (mounted.len() > 1).then(|| fs.fstype().to_string()),
                    strategy: label.into(),
                    repeat: rep,
                    writer,
                    kernel,
                });
            }
        }
    }
    let columns = columns_of(&runs);
    Ok((runs, columns))
}

async fn many_writers(
    args: &ScenarioArgs,
    sz: &Sizes,
    fss: &[&str],
    traced: &mut Traced,
) -> anyhow::Result<Outcome> {
    let mounted = mount_all(args, fss, sz)?;
    let mut runs = Vec::new();
    let order: Vec<usize> = (0..mounted.len()).collect();
    for rep in 0..args.repeat {
        for i in rotated(&order, rep) {
            let fs = &mounted[i];
            let what = format!("{} {} writers{}", fs.fstype(), sz.writers, round(args, rep));
            before_run(&what)?;
            let cfg = config(WriterSpec {
                dirs: vec![fs.mountpoint().to_path_buf()],
                size: sz.writer_file,
                chunk: sz.chunk,
                jobs: sz.writers,
                strategy: Strategy::Buffered,
                ..WriterSpec::default()
            })?;
            let (writer, kernel) = traced_write(traced, &[dev_id(fs)], cfg, true).await?;
            after_run(&what, &writer, &kernel);
            runs.push(Run {
                fs: Some(fs.fstype().to_string()),
                strategy: format!("{}x buffered", sz.writers),
                repeat: rep,
                writer,
                kernel,
            });
        }
    }
    let columns = columns_of(&runs);
    Ok((runs, columns))
}

/// page-cache-cliff: one file larger than the dirty page cache may hold
/// (three times single-stream's, at most 3/4 of the image: 12 times the
/// per-filesystem dirty cap at tiny and small scale; at full scale 15 GiB,
/// past the system's own dirty limit, about 4.6 GB on 24 GiB), written by each of the strategies that keep the page cache
/// out of the way, beside plain buffered and O_DIRECT.
async fn page_cache_cliff(
    args: &ScenarioArgs,
    sz: &Sizes,
    fss: &[&str],
    traced: &mut Traced,
) -> anyhow::Result<Outcome> {
    let mounted = mount_all(args, fss, sz)?;
    let variants: [(Strategy, bool, bool, &str); 5] = [
        (Strategy::Buffered, false, false, "buffered"),
        (
            Strategy::SrfPipelined,
            true,
            false,
            "srf-pipelined --drop-behind",
        ),
        (Strategy::Uncached, false, false, "uncached"),
        (
            Strategy::UringBuffered,
            false,
            true,
            "uring-buffered --uncached",
        ),
        (Strategy::Direct, false, false, "direct"),
    ];
    let mut runs = Vec::new();
    for rep in 0..args.repeat {
        for fs in &mounted {
            for (strategy, drop_behind, uncached, label) in rotated(&variants, rep) {
                let what = format!("{} {label}{}", fs.fstype(), round(args, rep));
                before_run(&what)?;
                let cfg = config(WriterSpec {
                    dirs: vec![fs.mountpoint().to_path_buf()],
                    size: (sz.file * 3).min((sz.image_mib << 20) * 3 / 4),
                    chunk: sz.chunk,
                    strategy,
                    drop_behind,
                    uncached,
                    ..WriterSpec::default()
                })?;
                // buffered: its write-out inside the window too (syncfs).
                let (writer, kernel) = traced_write(traced, &[dev_id(fs)], cfg, true).await?;
                after_run(&what, &writer, &kernel);
                runs.push(Run {
                    fs: (mounted.len() > 1).then(|| fs.fstype().to_string()),
                    strategy: label.into(),
                    repeat: rep,
                    writer,
                    kernel,
                });
            }
        }
    }
    let columns = columns_of(&runs);
    Ok((runs, columns))
}

#[cfg(test)]
mod tests {
    use super::rotated;

    #[test]
    fn each_round_starts_with_another_variant() {
        let v = ["a", "b", "c"];
        assert_eq!(rotated(&v, 0), ["a", "b", "c"]);
        assert_eq!(rotated(&v, 1), ["b", "c", "a"]);
        assert_eq!(rotated(&v, 2), ["c", "a", "b"]);
        assert_eq!(rotated(&v, 3), ["a", "b", "c"]);
        assert!(rotated::<u8>(&[], 2).is_empty());
    }
}
