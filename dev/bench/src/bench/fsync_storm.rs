//! `cargo xtask bench fsync-storm`: what an fsync storm feels while
//! wbscope traces it. N writer threads each create a file, write 4 KiB
//! to it and `fdatasync` it, over and over (a package manager's per-file
//! fsync, a mail queue, a build cache): every file is one writepages
//! call, so the default trace pays per call, not per page.
//!
//! - The writers' files synced in a fixed time, untraced against traced
//!   (`wbscope trace --json --events`, its lines to a file as a user
//!   redirects them), in alternating pairs (the order swapped every
//!   pair), beside untraced against an empty program on each of the
//!   default hooks' events (`wbscope probes --cost --on-hooks`: what any
//!   program there costs the writers) and an A/A control (untraced
//!   against untraced: how far the measure moves by itself); medians of
//!   the per-pair ratios.
//! - Per writepages call, from the traced runs: each program's runs and
//!   BPF time (kernel BPF statistics), against the empty program on its
//!   event under the same storm (the empty-program runs of the pairs):
//!   the goal is each program within 2× of its event's empty program.
//! - Per call, the wbscope process's own CPU (`/proc/PID/schedstat`)
//!   over the storm, and the records it lost; beside it, the same less
//!   its idle CPU (its readings each interval and drain, measured over a
//!   quiet second before each storm) over the storm's time: on a device
//!   that syncs 500 files a second (btrfs here) the idle CPU alone is
//!   several µs per call.
//! - With `WBSCOPE_BENCH_BASELINE=PATH` (another build of wbscope), a
//!   fourth side traces the same storms with that build: each program's
//!   time against the baseline's in the same run, which tells a change
//!   of a few tens of ns apart from the hour's drift (the floor itself
//!   moved by a fifth between two runs an hour apart here).
//! - Per-folio events are in the table too: where no function hook on
//!   `do_writepages()` loads, xfs' and btrfs' calls are put together
//!   from them (writeback-ebpf generic.rs).
//!
//! On a journaled ext4 (or `--fs xfs`, `--fs btrfs`) on a loop device
//! made for the run (O_DIRECT to its image in /var/tmp), mounted without
//! cache flushes (`barrier=0`, btrfs `nobarrier`; xfs has no such option)
//! unless `--barrier`: without a cache flush per fsync the storm is bound
//! by CPU, so what the tracer takes shows in full (with flushes, the host
//! disk's flush time varied threefold from one 5 s run to the next here,
//! and hid it).
use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use scratchfs::{FsType, ScratchFs};
use writeback_common::DEFAULT_HOOKS;

use super::{Tracer, jit_profile, median, spread};

pub(crate) struct FsyncStormOptions {
    /// Writer threads.
    pub(crate) writers: usize,
    /// Seconds of storm per run.
    pub(crate) secs: f64,
    /// Traced/untraced pairs, and as many untraced/untraced ones.
    pub(crate) pairs: usize,
    /// KiB written to each file before its fdatasync.
    pub(crate) file_kib: usize,
    /// Mount with the cache flushes on (every filesystem's default).
    pub(crate) barrier: bool,
    /// The filesystem the storm writes on.
    pub(crate) fs: FsType,
    /// Instead of the pairs: one traced storm under `perf record -a`, and
    /// where each call program's samples fall, by source line.
    pub(crate) profile: bool,
}

/// The mount option that turns a filesystem's cache flushes off, if it
/// has one: xfs dropped `nobarrier` in Linux 4.19 (fs/xfs/xfs_super.c).
fn no_flush_option(fs: FsType) -> Option<&'static str> {
    match fs {
        FsType::Ext4 => Some("barrier=0"),
        FsType::Btrfs => Some("nobarrier"),
        FsType::Xfs => None,
    }
}

/// The storm: `writers` threads for `secs`, each creating files in a
/// directory of its own under `dir`, writing `bytes` and `fdatasync`ing
/// each. Returns the files synced.
fn storm(dir: &Path, writers: usize, secs: f64, bytes: usize) -> anyhow::Result<u64> {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let dir = dir.join(format!("w{w}"));
            std::thread::spawn(move || -> anyhow::Result<u64> {
                fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                let data = vec![0x5a_u8; bytes];
                let mut n = 0u64;
                while Instant::now() < until {
                    let path = dir.join(n.to_string());
                    let mut f = fs::File::create(&path)
                        .with_context(|| format!("creating {}", path.display()))?;
                    f.write_all(&data)?;
                    f.sync_data()?;
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    let mut files = 0;
    for t in threads {
        files += t
            .join()
            .map_err(|_| anyhow::anyhow!("a writer thread panicked"))??;
    }
    Ok(files)
}

/// Removes the storm's files and writes back what their removal dirtied,
/// so that the next run starts from the same state.
fn clear(dir: &Path, writers: usize) -> anyhow::Result<()> {
    for w in 0..writers {
        let d = dir.join(format!("w{w}"));
        if d.exists() {
            fs::remove_dir_all(&d).with_context(|| format!("removing {}", d.display()))?;
        }
    }
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    Ok(())
}

/// Adds run-time entries (`program`, `run_count`, `run_time_ns`: a
/// summary's `run_time`, or the floor's per event) to `into`.
fn add_runs(into: &mut BTreeMap<String, (u64, u64)>, runs: &serde_json::Value) {
    for r in runs.as_array().into_iter().flatten() {
        let (Some(name), Some(n), Some(ns)) = (
            r["program"].as_str(),
            r["run_count"].as_u64(),
            r["run_time_ns"].as_u64(),
        ) else {
            continue;
        };
        let e = into.entry(name.to_string()).or_default();
        e.0 += n;
        e.1 += ns;
    }
}

/// What the traced runs added up.
#[derive(Default)]
struct Traced {
    /// Writepages calls the traces counted, over whole traces.
    calls: u64,
    /// Per program: (runs, run time ns), over whole traces.
    programs: BTreeMap<String, (u64, u64)>,
    lost: u64,
    /// The wbscope process's CPU over the storms, ns, and the calls of
    /// those storms (the files synced: one call each).
    process_ns: u64,
    storm_files: u64,
    /// Seconds the storms took, and the process's CPU (ns) over the
    /// quiet [`IDLE_WINDOW`] before each, with its length: what it spends
    /// whatever the calls, taken out of the per-call figure beside.
    storm_secs: f64,
    idle_ns: u64,
    idle_secs: f64,
}

/// The quiet window before each traced storm whose CPU is the process's
/// idle cost, after [`SETTLE`] for its first readings.
const IDLE_WINDOW: Duration = Duration::from_secs(1);
const SETTLE: Duration = Duration::from_millis(500);

impl Traced {
    /// The process's CPU per call, µs: all of it, and beyond its idle
    /// CPU over the storms' time (its readings each interval and drain,
    /// which a slow device's few calls a second would otherwise carry).
    fn process_us_per_call(&self) -> (f64, f64) {
        let files = self.storm_files.max(1) as f64;
        let all = self.process_ns as f64 / files / 1e3;
        let beyond = (self.process_ns as f64 - self.idle_ns_per_s() * self.storm_secs).max(0.0);
        (all, beyond / files / 1e3)
    }

    /// The process's idle CPU, ns a second.
    fn idle_ns_per_s(&self) -> f64 {
        self.idle_ns as f64 / self.idle_secs.max(f64::MIN_POSITIVE)
    }
}

/// `wbscope trace --json --events`, its lines to `out`, attached and
/// [`SETTLE`]d.
fn trace_to(binary: &Path, out: &Path) -> anyhow::Result<Tracer> {
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let tracer = Tracer::spawn_to(
        binary,
        &["trace", "--json", "--events"],
        file.into(),
        None,
        "tracing;",
    )?;
    std::thread::sleep(SETTLE);
    Ok(tracer)
}

/// One traced run: the storm under `wbscope trace --json --events`.
fn traced_run(
    binary: &Path,
    dir: &Path,
    out: &Path,
    opts: &FsyncStormOptions,
    into: &mut Traced,
) -> anyhow::Result<u64> {
    let tracer = trace_to(binary, out)?;
    let quiet = tracer.cpu_ns()?;
    let idle_from = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let before = tracer.cpu_ns()?;
    into.idle_secs += idle_from.elapsed().as_secs_f64();
    into.idle_ns += before.saturating_sub(quiet);
    let storm_from = Instant::now();
    let files = storm(dir, opts.writers, opts.secs, opts.file_kib << 10)?;
    let after = tracer.cpu_ns()?;
    into.storm_secs += storm_from.elapsed().as_secs_f64();
    let summary = tracer.stop_to_summary(out)?;
    into.calls += summary["calls"].as_u64().unwrap_or(0);
    into.lost += summary["lost_records"].as_u64().unwrap_or(0);
    add_runs(&mut into.programs, &summary["run_time"]);
    into.process_ns += after.saturating_sub(before);
    into.storm_files += files;
    Ok(files)
}

/// One run under the empty programs on the default hooks' events
/// (`wbscope probes --cost --on-hooks`), adding their runs and run time
/// per event to `into`.
fn floor_run(
    binary: &Path,
    dir: &Path,
    opts: &FsyncStormOptions,
    into: &mut BTreeMap<String, (u64, u64)>,
) -> anyhow::Result<u64> {
    let floor = Tracer::floor(binary, false)?;
    let files = storm(dir, opts.writers, opts.secs, opts.file_kib << 10)?;
    let runs = floor.stop_floor()?;
    add_runs(into, &runs);
    Ok(files)
}

/// What observes a run paired with an untraced one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `wbscope trace --json --events`.
    Trace,
    /// Empty programs on the default hooks' events: what any program
    /// there costs the writers.
    Floor,
    /// Nothing: the A/A control.
    Nothing,
    /// `wbscope trace --json --events` of the baseline build.
    Baseline,
}

pub(crate) fn bench(binary: &Path, opts: &FsyncStormOptions) -> anyhow::Result<String> {
    let mut builder = ScratchFs::builder(opts.fs, 4096).direct_io(true);
    if let Some(option) = no_flush_option(opts.fs).filter(|_| !opts.barrier) {
        builder = builder.mount_args(&["-o", option]);
    }
    let fs = builder
        .create()
        .context("making the benchmark's loop filesystem")?;
    let out_dir = tempfile::Builder::new()
        .prefix("wbscope-fsync-storm.")
        .tempdir_in("/var/tmp")
        .context("making the run's directory")?;
    let baseline = std::env::var_os("WBSCOPE_BENCH_BASELINE").map(std::path::PathBuf::from);
    if let Some(path) = &baseline {
        anyhow::ensure!(
            path.is_file(),
            "WBSCOPE_BENCH_BASELINE={}: no such file (a wbscope binary is wanted)",
            path.display()
        );
    }
    if opts.profile {
        return profile(binary, opts, fs.mountpoint(), out_dir.path());
    }
    measure(
        binary,
        baseline.as_deref(),
        opts,
        fs.mountpoint(),
        &out_dir.path().join("trace.json"),
    )
}

/// Samples a second at each CPU while profiling: often enough for a few
/// hundred in each call program over a 10 s storm, rarely enough that
/// the sampling's own interrupts stay a small part of the programs' time.
const PROFILE_HZ: u32 = 9_999;

/// One storm under `wbscope trace --json --events` and `perf record -a`:
/// where the samples in each program that ran at least once per two
/// calls fall, by source line (jit_profile.rs).
fn profile(
    binary: &Path,
    opts: &FsyncStormOptions,
    dir: &Path,
    out_dir: &Path,
) -> anyhow::Result<String> {
    storm(dir, opts.writers, opts.secs, opts.file_kib << 10)?;
    clear(dir, opts.writers)?;
    let before: std::collections::HashSet<u32> =
        jit_profile::loaded()?.into_iter().map(|p| p.id).collect();
    let out = out_dir.join("trace.json");
    let tracer = trace_to(binary, &out)?;
    let ours: Vec<_> = jit_profile::loaded()?
        .into_iter()
        .filter(|p| !before.contains(&p.id))
        .collect();
    let sampling =
        jit_profile::Sampling::start(&out_dir.join("perf.data"), PROFILE_HZ, opts.secs + 0.5)?;
    let files = storm(dir, opts.writers, opts.secs, opts.file_kib << 10)?;
    // A Ctrl-C during the storm stops here: the tracer and perf are
    // stopped as they are dropped.
    scratchfs::signal::check_interrupted()?;
    let ips = sampling.ips()?;
    let after = jit_profile::loaded()?;
    let mut images = Vec::new();
    for p in &ours {
        let runs = after
            .iter()
            .find(|a| a.id == p.id)
            .map_or(0, |a| a.runs - p.runs.min(a.runs));
        if runs * 2 >= files {
            images.push(jit_profile::Image::of(p)?);
        }
    }
    let summary = tracer.stop_to_summary(&out)?;
    clear(dir, opts.writers)?;
    anyhow::ensure!(
        !images.is_empty(),
        "no program of the trace ran once per two of the storm's {files} calls"
    );
    let profiles = jit_profile::attribute(&images, &ips);
    Ok(format!(
        "fsync storm profile: {} writer threads, {} KiB files, {} s on {}; `wbscope trace \
         --json --events` ({} calls, {} records lost) under `perf record -a -F {PROFILE_HZ}` \
         ({} samples on all CPUs). Each program that ran at least once per two calls, the \
         source lines its samples fell on (the kernel's JIT line info), most first. A \
         timer's sample lands just after the instruction the CPU waited on: a load that \
         missed the cache shows on the line after it; a program's first line has the \
         samples taken at its entry.\n\n{}",
        opts.writers,
        opts.file_kib,
        opts.secs,
        opts.fs.name(),
        summary["calls"].as_u64().unwrap_or(0),
        summary["lost_records"].as_u64().unwrap_or(0),
        ips.len(),
        jit_profile::table(&profiles, 8)
    ))
}

fn measure(
    binary: &Path,
    baseline: Option<&Path>,
    opts: &FsyncStormOptions,
    dir: &Path,
    out: &Path,
) -> anyhow::Result<String> {
    let run_plain = || storm(dir, opts.writers, opts.secs, opts.file_kib << 10);
    // One storm first, not counted: the first run after mkfs made the
    // journal's and the directories' blocks for the rest.
    run_plain()?;
    clear(dir, opts.writers)?;
    let mut traced = Traced::default();
    let mut base = Traced::default();
    let mut floor = BTreeMap::new();
    let mut ratios: [Vec<f64>; 4] = Default::default();
    let (mut plain_files, mut traced_files) = (Vec::new(), Vec::new());
    let mut sides = vec![Side::Trace, Side::Floor, Side::Nothing];
    if baseline.is_some() {
        sides.push(Side::Baseline);
    }
    for pair in 0..opts.pairs {
        for (s, &side) in sides.iter().enumerate() {
            scratchfs::signal::check_interrupted()?;
            // Swapped every pair, so that drift favours neither.
            let observed_first = pair % 2 == 1;
            let mut files = [0u64; 2];
            for observed in [observed_first, !observed_first] {
                files[usize::from(observed)] = match (observed, side) {
                    (false, _) | (true, Side::Nothing) => run_plain()?,
                    (true, Side::Trace) => traced_run(binary, dir, out, opts, &mut traced)?,
                    (true, Side::Floor) => floor_run(binary, dir, opts, &mut floor)?,
                    (true, Side::Baseline) => match baseline {
                        Some(b) => traced_run(b, dir, out, opts, &mut base)?,
                        None => anyhow::bail!("a baseline side without a baseline build"),
                    },
                };
                clear(dir, opts.writers)?;
            }
            let [plain, with] = files;
            ratios[s].push(with as f64 / plain.max(1) as f64);
            if side == Side::Trace {
                plain_files.push(plain as f64);
                traced_files.push(with as f64);
            }
            eprintln!(
                "xtask: fsync storm pair {pair}: {}: files synced untraced {plain}, observed \
                 {with} ({:.3})",
                side.label(),
                with as f64 / plain.max(1) as f64
            );
        }
    }
    let [ratios, floor_ratios, aa, base_ratios] = ratios;
    Ok(report(
        opts,
        &Figures {
            ratios,
            floor_ratios,
            aa,
            plain_files,
            traced_files,
            traced,
            floor,
            baseline: baseline.map(|path| (path.display().to_string(), base, base_ratios)),
        },
    ))
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Trace => "wbscope trace --json --events",
            Side::Floor => "empty programs",
            Side::Nothing => "nothing (A/A)",
            Side::Baseline => "the baseline build's trace",
        }
    }
}

struct Figures {
    ratios: Vec<f64>,
    floor_ratios: Vec<f64>,
    aa: Vec<f64>,
    plain_files: Vec<f64>,
    traced_files: Vec<f64>,
    traced: Traced,
    floor: BTreeMap<String, (u64, u64)>,
    /// The baseline build's path, traced runs and pair ratios.
    baseline: Option<(String, Traced, Vec<f64>)>,
}

fn report(opts: &FsyncStormOptions, f: &Figures) -> String {
    let t = &f.traced;
    let per_s = |v: &[f64]| median(&mut v.to_vec()) / opts.secs;
    let mut out = format!(
        "fsync storm: {} writer threads, each creating a file, writing {} KiB and \
         fdatasync'ing it, for {} s a run, on {} (loop device, O_DIRECT to its image, {}); \
         {} pairs each of untraced / `wbscope trace --json --events`, untraced / \
         empty programs on the default hooks' events (`wbscope probes --cost --on-hooks`) \
         and untraced / untraced (the A/A control), the order swapped every pair.\n\n\
         | figure | goal | value |\n|---|---|---|\n\
         | files synced, traced / untraced: median of pair ratios [95% interval] (min–max) \
         | ≥ 0.97 | {} |\n\
         | the same, empty programs on the default hooks' events / untraced | | {} |\n\
         | the same, untraced / untraced (A/A control) | | {} |\n\
         | files synced per second, medians: untraced, traced | | {:.0}, {:.0} |\n",
        opts.writers,
        opts.file_kib,
        opts.secs,
        opts.fs.name(),
        match no_flush_option(opts.fs) {
            Some(option) if !opts.barrier => format!("mounted {option}"),
            _ => "cache flushes on".to_string(),
        },
        opts.pairs,
        spread(&f.ratios),
        spread(&f.floor_ratios),
        spread(&f.aa),
        per_s(&f.plain_files),
        per_s(&f.traced_files),
    );
    let calls = t.calls.max(1) as f64;
    let (all, beyond) = t.process_us_per_call();
    out.push_str(&format!(
        "| wbscope process CPU per call (schedstat over the storms / files synced) | ≤ 1 µs \
         | {all:.2} µs |\n\
         | the same beyond its idle CPU ({:.2} ms a second, over {} s before the storms) \
         | | {beyond:.2} µs |\n\
         | records lost | 0 | {} |\n\n",
        t.idle_ns_per_s() / 1e6,
        IDLE_WINDOW.as_secs_f64(),
        t.lost,
    ));
    out.push_str(
        "Per writepages call, each default program against an empty program on its event \
         under the same storm (the empty-program runs of the pairs), kernel BPF \
         statistics:\n\n\
         | event | program | runs per call | avg ns | empty program avg ns | program / empty \
         (goal ≤ 2) |\n|---|---|---|---|---|---|\n",
    );
    let (mut ns_per_call, mut floor_per_call) = (0.0, 0.0);
    for &(event, program) in DEFAULT_HOOKS {
        let Some(&(runs, ns)) = t.programs.get(program) else {
            continue;
        };
        if runs == 0 {
            continue;
        }
        let avg = ns as f64 / runs as f64;
        let empty = f
            .floor
            .get(event)
            .filter(|(n, _)| *n > 0)
            .map(|&(n, ns)| ns as f64 / n as f64);
        ns_per_call += ns as f64 / calls;
        if let Some(e) = empty {
            floor_per_call += e * runs as f64 / calls;
        }
        out.push_str(&format!(
            "| {event} | {program} | {:.2} | {avg:.0} | {} | {} |\n",
            runs as f64 / calls,
            empty.map_or("-".into(), |e| format!("{e:.0}")),
            empty.map_or("-".into(), |e| format!("{:.2}", avg / e)),
        ));
    }
    out.push_str(&format!(
        "| **a call's events together** | | | **{ns_per_call:.0} ns per call** | \
         **{floor_per_call:.0} ns per call** | **{:.2}** |\n\n",
        ns_per_call / floor_per_call
    ));
    let others: Vec<String> = t
        .programs
        .iter()
        .filter(|(p, (n, _))| *n > 0 && !DEFAULT_HOOKS.iter().any(|(_, d)| d == p))
        .map(|(p, (n, ns))| {
            format!(
                "{p} {:.2} runs, {:.0} ns per call",
                *n as f64 / calls,
                *ns as f64 / calls
            )
        })
        .collect();
    if !others.is_empty() {
        out.push_str(&format!(
            "Other programs that ran: {}.\n\n",
            others.join("; ")
        ));
    }
    if let Some((path, base, base_ratios)) = &f.baseline {
        out.push_str(&baseline_table(t, path, base, base_ratios));
    }
    out
}

/// Each default program of this build against the same program of the
/// baseline build, traced under the same storms.
fn baseline_table(t: &Traced, path: &str, base: &Traced, base_ratios: &[f64]) -> String {
    let avg = |p: &Traced, program: &str| {
        p.programs
            .get(program)
            .filter(|(n, _)| *n > 0)
            .map(|&(n, ns)| ns as f64 / n as f64)
    };
    let (base_all, base_beyond) = base.process_us_per_call();
    let mut out = format!(
        "Against the baseline build ({path}), traced in the same rotation: files synced, \
         baseline traced / untraced {}; its process {base_all:.2} µs per call ({base_beyond:.2} \
         beyond idle); records lost {}.\n\n\
         | program | avg ns, this build | avg ns, baseline | this / baseline |\n|---|---|---|---|\n",
        spread(base_ratios),
        base.lost,
    );
    for &(_, program) in DEFAULT_HOOKS {
        let (Some(now), Some(then)) = (avg(t, program), avg(base, program)) else {
            continue;
        };
        out.push_str(&format!(
            "| {program} | {now:.0} | {then:.0} | {:.3} |\n",
            now / then
        ));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_holds_each_program_against_its_event_s_empty_program() {
        let opts = FsyncStormOptions {
            writers: 8,
            secs: 5.0,
            pairs: 6,
            file_kib: 4,
            barrier: false,
            fs: FsType::Ext4,
            profile: false,
        };
        let traced = Traced {
            calls: 1000,
            programs: [
                ("tp_btf_writepages_start".to_string(), (1000, 800_000)),
                ("tp_btf_writepages_end".to_string(), (1000, 1_000_000)),
                ("tp_btf_dirty_inode".to_string(), (500, 500_000)),
                ("generic_pass_end".to_string(), (10, 2_000)),
                ("task_io_iter".to_string(), (10, 3_000)),
                ("wb_written".to_string(), (0, 0)),
            ]
            .into(),
            lost: 0,
            process_ns: 3_000_000,
            storm_files: 1000,
            // 0.2 ms a second idle over 5 s of storms: 1 ms of the 3.
            storm_secs: 5.0,
            idle_ns: 400_000,
            idle_secs: 2.0,
        };
        let floor = [
            ("ext4_writepages".to_string(), (2000, 320_000)),
            ("ext4_writepages_result".to_string(), (2000, 250_000)),
            ("writeback_dirty_inode_enqueue".to_string(), (1000, 200_000)),
            ("writeback_single_inode".to_string(), (100, 10_000)),
        ]
        .into();
        let ratios = vec![0.95, 0.97, 0.99, 1.0, 0.98, 0.96];
        // The baseline: the start program at 1,000 ns a run, no end
        // program (a program only one build has gets no row).
        let base = Traced {
            calls: 1000,
            programs: [("tp_btf_writepages_start".to_string(), (2000, 2_000_000))].into(),
            lost: 3,
            process_ns: 2_000_000,
            storm_files: 1000,
            storm_secs: 5.0,
            idle_ns: 0,
            idle_secs: 1.0,
        };
        let text = report(
            &opts,
            &Figures {
                floor_ratios: ratios.clone(),
                aa: ratios.clone(),
                plain_files: vec![5000.0; 6],
                traced_files: vec![4900.0; 6],
                baseline: Some(("/old/wbscope".to_string(), base, ratios.clone())),
                ratios,
                traced,
                floor,
            },
        );
        for row in [
            "| ext4_writepages | tp_btf_writepages_start | 1.00 | 800 | 160 | 5.00 |",
            "| ext4_writepages_result | tp_btf_writepages_end | 1.00 | 1000 | 125 | 8.00 |",
            "| writeback_dirty_inode_enqueue | tp_btf_dirty_inode | 0.50 | 1000 | 200 | 5.00 |",
            // A per-folio path's program, on an event of two programs.
            "| writeback_single_inode | generic_pass_end | 0.01 | 200 | 100 | 2.00 |",
            // 800 + 1000 + 500 + 2 ns per call against 160 + 125 + 0.5 ×
            // 200 + 0.01 × 100.
            "**2302 ns per call** | **386 ns per call** | **5.96** |",
            "| wbscope process CPU per call (schedstat over the storms / files synced) | ≤ 1 µs \
             | 3.00 µs |",
            "| the same beyond its idle CPU (0.20 ms a second, over 1 s before the storms) | \
             | 2.00 µs |",
            "mounted barrier=0",
            "Other programs that ran: task_io_iter 0.01 runs, 3 ns per call.",
            "Against the baseline build (/old/wbscope)",
            "its process 2.00 µs per call (2.00 beyond idle); records lost 3.",
            "| tp_btf_writepages_start | 800 | 1000 | 0.800 |",
        ] {
            assert!(text.contains(row), "{row:?} not in:\n{text}");
        }
        assert!(
            !text.contains("| tp_btf_writepages_end | 1000 |"),
            "a program of one build only has no baseline row:\n{text}"
        );
    }
}
