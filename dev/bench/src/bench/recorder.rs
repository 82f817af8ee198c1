//! `cargo xtask bench recorder`: the flight recorder as a
//! service runs it — `wbscope record --store` with a `--max-size` and a
//! `--cpu-budget` — under a small-files writeback load for minutes, its
//! resident memory, its CPU and the store's size sampled every few
//! seconds: does memory stay flat, does the store stay in its bound, and
//! what share of a core do the programs and the recorder take, as the
//! recorder's own `budget` lines say and as /proc says.
//!
//! The load: two threads, each writing 4 KiB at a time over a 1 MiB file
//! of its own on a journaled ext4 of the run's own, each write pushed to
//! writeback at once with `sync_file_range(SYNC_FILE_RANGE_WRITE)` (one
//! ext4 writepages call per write: `filemap_fdatawrite_range()`), and an
//! `fdatasync` every 64 writes (a journal commit). A small-files fsync
//! load gives about 200 calls a second on this loop device; this one
//! thousands, so that ten minutes make millions of calls. The count of
//! writes is a floor on the calls the recorder saw. The store lives in a
//! directory of the run's own under /var/tmp; both are removed at the
//! end.
//!
//! Then the budget against a 4 KiB writer: `dd bs=4k` of
//! `--dd-mib` at full speed with the per-folio attribution on (the
//! program that runs once per write), recorded twice into stores of
//! their own — unshed, and with `--cpu-budget` — and for each the
//! intervals' BPF and CPU share while dd ran, the sampling the budget
//! chose, and dd's dirtied pages as each run counted them against what dd
//! wrote (with the 95% error the budgeted run states).
use std::{
    fs::{self, File},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

use super::{Tracer, bench_fs, median, store::store_dir};

pub(crate) struct RecorderOptions {
    /// Minutes of load.
    pub(crate) minutes: u64,
    /// The store's `--max-size`, MiB.
    pub(crate) max_size_mib: u64,
    /// The recorder's `--cpu-budget`, % of one core.
    pub(crate) cpu_budget: f64,
    /// Seconds between samples.
    pub(crate) every_secs: u64,
    /// MiB the 4 KiB writer writes in the budget phase (0: no phase).
    pub(crate) dd_mib: u64,
    /// (inode, process) pairs of the map-reading phase (0: no phase;
    /// map_reading.rs).
    pub(crate) pairs: u64,
}

/// One sample of the recorder.
struct Sample {
    at_s: f64,
    rss_kb: u64,
    cpu_s: f64,
    store_bytes: u64,
    writes: u64,
}

pub(crate) fn bench(binary: &Path, opts: &RecorderOptions) -> anyhow::Result<String> {
    let fs = bench_fs(1024, false)?;
    let (_store_dir, store) = store_dir()?;
    let store_arg = store.to_string_lossy().into_owned();
    let mount = fs.mountpoint().to_string_lossy().into_owned();
    let max_size = format!("{}MiB", opts.max_size_mib);
    let budget = opts.cpu_budget.to_string();
    let recorder = Tracer::spawn(
        binary,
        &[
            "record",
            "--store",
            &store_arg,
            "--max-size",
            &max_size,
            "--cpu-budget",
            &budget,
            "--device",
            &mount,
        ],
        None,
        "tracing;",
    )?;
    let load = Load::start(fs.mountpoint());
    let started = Instant::now();
    let end = Duration::from_secs(opts.minutes * 60);
    let mut samples = Vec::new();
    while started.elapsed() < end {
        for _ in 0..opts.every_secs {
            scratchfs::signal::check_interrupted()?;
            thread::sleep(Duration::from_secs(1));
        }
        let s = Sample {
            at_s: started.elapsed().as_secs_f64(),
            rss_kb: recorder
                .status_kb("VmRSS:")
                .context("the recorder's VmRSS")?,
            cpu_s: recorder.cpu_secs()?,
            store_bytes: dir_bytes(&store)?,
            writes: load.writes.load(Ordering::Relaxed),
        };
        eprintln!(
            "xtask: recorder at {:.0} s: RSS {:.1} MiB, CPU {:.1} s, store {:.2} MiB, {} writes",
            s.at_s,
            s.rss_kb as f64 / 1024.0,
            s.cpu_s,
            s.store_bytes as f64 / (1 << 20) as f64,
            s.writes
        );
        if s.store_bytes > opts.max_size_mib << 20 {
            bail!(
                "the store holds {} bytes, over its --max-size {max_size}",
                s.store_bytes
            );
        }
        samples.push(s);
    }
    drop(load);
    let kept = Kept::of(&stop_and_replay(binary, recorder, &store_arg)?);
    drop(fs);
    let mut out = report(opts, &samples, &kept);
    if opts.dd_mib > 0 {
        scratchfs::signal::check_interrupted()?;
        let unshed = small_writer(binary, opts, None)?;
        let budgeted = small_writer(binary, opts, Some(opts.cpu_budget))?;
        out.push_str(&small_writer_report(opts, &[unshed, budgeted]));
    }
    if opts.pairs > 0 {
        scratchfs::signal::check_interrupted()?;
        out.push_str(&super::map_reading::bench(binary, opts.pairs)?);
    }
    Ok(out)
}

/// Stops the recorder as Ctrl-C would and returns the JSON lines of its
/// store's replay.
fn stop_and_replay(binary: &Path, recorder: Tracer, store: &str) -> anyhow::Result<String> {
    let out = recorder.interrupt()?;
    if !out.status.success() {
        bail!(
            "wbscope record failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let replay = std::process::Command::new(binary)
        .args(["replay", store, "--json"])
        .output()
        .context("replaying the store")?;
    if !replay.status.success() {
        bail!(
            "wbscope replay failed: {}",
            String::from_utf8_lossy(&replay.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&replay.stdout).into_owned())
}

/// One recorded run of the 4 KiB writer (module docs).
struct WriterRun {
    budget: Option<f64>,
    /// Intervals while dd ran: (BPF %, BPF + recorder %, one folio in).
    intervals: Vec<(f64, Option<f64>, u32)>,
    /// dd's pages_dirtied over the run, and the 95% error stated.
    dirtied: u64,
    error: f64,
    /// Pages dd wrote.
    pages: u64,
    /// The recorder's CPU seconds over the run (/proc).
    cpu_s: f64,
    wall_s: f64,
}

fn small_writer(
    binary: &Path,
    opts: &RecorderOptions,
    budget: Option<f64>,
) -> anyhow::Result<WriterRun> {
    let fs = bench_fs(opts.dd_mib + 1024, false)?;
    let (_dir, store) = store_dir()?;
    let store = store.to_string_lossy().into_owned();
    let mount = fs.mountpoint().to_string_lossy().into_owned();
    let budget_arg = budget.map(|b| b.to_string());
    let mut args = vec![
        "record",
        "--store",
        &store,
        "--enable",
        "dirty_folio",
        "--interval",
        "0.5",
        "--device",
        &mount,
    ];
    if let Some(b) = &budget_arg {
        args.extend(["--cpu-budget", b]);
    }
    let recorder = Tracer::spawn(binary, &args, None, "tracing;")?;
    // Two intervals before the write, as a service would have been
    // running; the ladder starts from no sampling.
    thread::sleep(Duration::from_secs(1));
    let cpu0 = recorder.cpu_secs()?;
    let started = Instant::now();
    let dd = programs::DD
        .command()
        .arg("if=/dev/zero")
        .arg(format!("of={}", fs.path("data").display()))
        .args([
            "bs=4k",
            &format!("count={}", opts.dd_mib * 256),
            "status=none",
        ])
        .spawn()
        .context("starting dd")?;
    let dd_pid = u64::from(dd.id());
    let done = dd.wait_with_output().context("waiting for dd")?;
    if !done.status.success() {
        bail!(
            "dd failed: {}",
            String::from_utf8_lossy(&done.stderr).trim()
        );
    }
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = recorder.cpu_secs()? - cpu0;
    thread::sleep(Duration::from_secs(1));
    let replay = stop_and_replay(binary, recorder, &store)?;
    let mut run = WriterRun {
        budget,
        intervals: Vec::new(),
        dirtied: 0,
        error: 0.0,
        pages: opts.dd_mib * 256,
        cpu_s,
        wall_s,
    };
    let mut variance = 0.0;
    for line in replay.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["type"] != "interval" {
            continue;
        }
        let mut dd_pages = 0;
        for o in v["owners"].as_array().into_iter().flatten() {
            if o["pid"] == dd_pid {
                dd_pages += o["pages_dirtied"].as_u64().unwrap_or(0);
                let e = o["pages_dirtied_error"].as_f64().unwrap_or(0.0);
                variance += (e / 1.96).powi(2);
            }
        }
        run.dirtied += dd_pages;
        if dd_pages == 0 {
            continue;
        }
        let secs = v["interval_s"].as_f64().unwrap_or(0.5).max(1e-3);
        let bpf_ns: u64 = v["run_time"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["run_time_ns"].as_u64().unwrap_or(0))
            .sum();
        let b = &v["budget"];
        run.intervals.push((
            bpf_ns as f64 / secs / 1e7,
            b["cpu_pct"].as_f64(),
            b["dirty_folio_1_in"].as_u64().unwrap_or(1) as u32,
        ));
    }
    run.error = 1.96 * variance.sqrt();
    Ok(run)
}

fn small_writer_report(opts: &RecorderOptions, runs: &[WriterRun]) -> String {
    let mut out = format!(
        "\n4 KiB writer at full speed: `dd bs=4k` of {} MiB, `record --store --enable \
         dirty_folio --interval 0.5`, unshed and with `--cpu-budget {}`; intervals in \
         which dd dirtied pages\n\n\
         | run | intervals | BPF % median / max | BPF + recorder % median / max | \
         first 4 intervals and the worst: BPF + recorder (BPF) % | one folio in | \
         recorder CPU over dd (/proc) | dd's pages_dirtied (dd wrote {}) |\n\
         |---|---|---|---|---|---|---|---|\n",
        opts.dd_mib,
        opts.cpu_budget,
        opts.dd_mib * 256
    );
    for r in runs {
        let mut bpf: Vec<f64> = r.intervals.iter().map(|i| i.0).collect();
        let mut cpu: Vec<f64> = r.intervals.iter().filter_map(|i| i.1).collect();
        let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
        let (bpf_max, cpu_max) = (max(&bpf), max(&cpu));
        let cpu_text = if cpu.is_empty() {
            "— (no budget line)".to_string()
        } else {
            format!("{:.2} / {:.2}", median(&mut cpu), cpu_max)
        };
        let rates: Vec<String> = r.intervals.iter().map(|i| i.2.to_string()).collect();
        // Where an excursion over the budget comes from: the programs or
        // the recorder's own work.
        let first: Vec<String> = r
            .intervals
            .iter()
            .take(4)
            .map(|i| match i.1 {
                Some(c) => format!("{c:.2} ({:.2})", i.0),
                None => format!("— ({:.2})", i.0),
            })
            .collect();
        let mut first = first;
        // And the worst interval, which need not be among them.
        if let Some((k, w)) = r
            .intervals
            .iter()
            .enumerate()
            .filter(|(_, i)| i.1.is_some())
            .max_by(|a, b| {
                a.1.1
                    .partial_cmp(&b.1.1)
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
        {
            first.push(format!(
                "worst: #{} of {}, {:.2} ({:.2})",
                k + 1,
                r.intervals.len(),
                w.1.unwrap_or(f64::NAN),
                w.0
            ));
        }
        out.push_str(&format!(
            "| {} | {} | {:.2} / {:.2} | {} | {} | {} | {:.1}% of a core ({:.2} s over {:.1} s) | {} ± {:.0} ({:+.2}%) |\n",
            r.budget
                .map_or_else(|| "unshed".to_string(), |b| format!("--cpu-budget {b}")),
            r.intervals.len(),
            if bpf.is_empty() { f64::NAN } else { median(&mut bpf) },
            bpf_max,
            cpu_text,
            first.join(", "),
            rates.join(" "),
            100.0 * r.cpu_s / r.wall_s.max(1e-3),
            r.cpu_s,
            r.wall_s,
            r.dirtied,
            r.error,
            100.0 * (r.dirtied as f64 - r.pages as f64) / r.pages as f64,
        ));
    }
    out
}

/// What the store still held at the end: its interval lines' budget
/// figures and calls.
#[derive(Default)]
struct Kept {
    intervals: usize,
    span_s: f64,
    calls: u64,
    cpu_pct: Vec<f64>,
    bpf_pct: Vec<f64>,
    shed: usize,
}

impl Kept {
    fn of(replay: &str) -> Kept {
        let mut k = Kept::default();
        let (mut first, mut last) = (f64::NAN, f64::NAN);
        for line in replay.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match v["type"].as_str() {
                Some("call") => k.calls += 1,
                Some("interval") => {
                    k.intervals += 1;
                    let t = v["time_s"].as_f64().unwrap_or(f64::NAN);
                    if first.is_nan() {
                        first = t;
                    }
                    last = t;
                    let b = &v["budget"];
                    if let (Some(cpu), Some(bpf)) = (b["cpu_pct"].as_f64(), b["bpf_pct"].as_f64()) {
                        k.cpu_pct.push(cpu);
                        k.bpf_pct.push(bpf);
                    }
                    if b["dirty_folio_1_in"].as_u64() > Some(1)
                        || b["calls_1_in"].as_u64() > Some(1)
                    {
                        k.shed += 1;
                    }
                }
                _ => {}
            }
        }
        k.span_s = last - first;
        k
    }
}

/// Bytes of the files under `dir` (the store: segments, index, lock).
fn dir_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let m = e?.metadata()?;
        if m.is_file() {
            total += m.len();
        }
    }
    Ok(total)
}

/// The small-files writeback load (module docs).
struct Load {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(dir: &Path) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let threads = (0..2)
            .map(|t| {
                let (stop, writes, dir) = (stop.clone(), writes.clone(), dir.to_path_buf());
                thread::spawn(move || {
                    if let Err(e) = write_and_push(&dir.join(format!("f{t}")), &stop, &writes) {
                        eprintln!("xtask: the load stopped: {e:#}");
                    }
                })
            })
            .collect();
        Load {
            stop,
            writes,
            threads,
        }
    }
}

/// One thread of the load (module docs); counts its writes in `writes`.
fn write_and_push(path: &Path, stop: &AtomicBool, writes: &AtomicU64) -> anyhow::Result<()> {
    use std::os::{fd::AsRawFd as _, unix::fs::FileExt as _};
    const PAGES: u64 = 256;
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let block = [7u8; 4096];
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let offset = (i % PAGES) * 4096;
        file.write_all_at(&block, offset)?;
        // SAFETY: a valid descriptor of our own file; plain syscall.
        let pushed = unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as i64,
                4096,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if pushed != 0 {
            return Err(std::io::Error::last_os_error()).context("sync_file_range");
        }
        if i % 64 == 63 {
            file.sync_data()?;
        }
        writes.fetch_add(1, Ordering::Relaxed);
        i += 1;
    }
    Ok(())
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn report(opts: &RecorderOptions, samples: &[Sample], kept: &Kept) -> String {
    let mut out = format!(
        "Recorder: `wbscope record --store --max-size {}MiB --cpu-budget {}` for {} min \
         under two threads writing 4 KiB at a time, each write pushed to writeback \
         (`sync_file_range`) and an fdatasync every 64, on a journaled ext4; sampled \
         every {} s\n\n",
        opts.max_size_mib, opts.cpu_budget, opts.minutes, opts.every_secs
    );
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        out.push_str("no samples\n");
        return out;
    };
    // Memory after the first minute (the allocator and the model's tables
    // warm up), against the end: the slope is what hours would add.
    let warm: Vec<&Sample> = samples.iter().filter(|s| s.at_s >= 60.0).collect();
    let (w0, w1) = (
        warm.first().copied().unwrap_or(first),
        warm.last().copied().unwrap_or(last),
    );
    let max_rss = samples.iter().map(|s| s.rss_kb).max().unwrap_or(0);
    let slope_mib_h =
        (w1.rss_kb as f64 - w0.rss_kb as f64) / 1024.0 / ((w1.at_s - w0.at_s).max(1.0) / 3600.0);
    let max_store = samples.iter().map(|s| s.store_bytes).max().unwrap_or(0);
    let cpu_pct = 100.0 * (last.cpu_s - first.cpu_s) / (last.at_s - first.at_s).max(1.0);
    out.push_str(&format!(
        "| figure | value |\n|---|---|\n\
         | writes pushed (a floor on the calls seen) | {} ({:.0}/s) |\n\
         | RSS at {:.0} s / at {:.0} s / at most | {:.1} / {:.1} / {:.1} MiB |\n\
         | RSS slope after the first minute | {:+.2} MiB per hour |\n\
         | store at most (bound {} MiB) | {:.2} MiB |\n\
         | recorder's own CPU (/proc) | {:.2}% of a core |\n",
        last.writes,
        last.writes as f64 / last.at_s.max(1.0),
        w0.at_s,
        w1.at_s,
        w0.rss_kb as f64 / 1024.0,
        w1.rss_kb as f64 / 1024.0,
        max_rss as f64 / 1024.0,
        slope_mib_h,
        opts.max_size_mib,
        max_store as f64 / (1 << 20) as f64,
        cpu_pct,
    ));
    if !kept.cpu_pct.is_empty() {
        let (mut cpu, mut bpf) = (kept.cpu_pct.clone(), kept.bpf_pct.clone());
        let worst = cpu.iter().copied().fold(0.0, f64::max);
        let over = cpu.iter().filter(|&&c| c > opts.cpu_budget).count();
        out.push_str(&format!(
            "| budget lines kept: median cpu / bpf, worst cpu | {:.2}% / {:.2}%, {:.2}% |\n\
             | intervals over the budget / shedding | {over} / {} of {} |\n",
            median(&mut cpu),
            median(&mut bpf),
            worst,
            kept.shed,
            kept.intervals
        ));
    }
    out.push_str(&format!(
        "| calls kept in the store | {} over its last {:.0} s ({:.0}/s) |\n\n",
        kept.calls,
        kept.span_s,
        kept.calls as f64 / kept.span_s.max(1.0)
    ));
    out.push_str("| s | RSS MiB | CPU s | store MiB | writes |\n|---|---|---|---|---|\n");
    let step = (samples.len() / 20).max(1);
    for s in samples.iter().step_by(step).chain(std::iter::once(last)) {
        out.push_str(&format!(
            "| {:.0} | {:.1} | {:.1} | {:.2} | {} |\n",
            s.at_s,
            s.rss_kb as f64 / 1024.0,
            s.cpu_s,
            s.store_bytes as f64 / (1 << 20) as f64,
            s.writes
        ));
    }
    out
}
