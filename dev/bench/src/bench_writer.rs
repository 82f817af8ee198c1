//! `cargo xtask bench writer`: `wbscope write` against `dd` and `fio` on
//! the same filesystem in one run.
//!
//! Every run is one child process on a fresh journaled ext4 on a loop
//! device (O_DIRECT on its image unless `--buffered-loop`), after `sync` and
//! dropping the caches; its file is removed after it, outside the timing,
//! for every tool (the writer runs with `--keep`). The figures are the same
//! for every tool:
//!
//! - durable throughput: bytes / wall time of the whole command (process
//!   start to exit, final flush included), MB = 10^6 bytes;
//! - system CPU: the child's `ru_stime` (getrusage(RUSAGE_CHILDREN) delta
//!   around the wait), per GiB written;
//! - per-second CV: fio's `--write_bw_log` averaged over 1000 ms, dd's
//!   pages dirtied per second from /proc/vmstat, the writer's own report.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use scratchfs::ScratchFs;
use wbscope_programs as programs;

mod cases;
mod measure;
mod uncached;
use cases::{CASES, CEILING, Case, DROP_BEHIND, NEAREST, PAIRS, STARTUP_CASES};
use measure::{children_rusage, dirtied_per_second, fio_bw_log, population_cv};

use crate::bench::{bench_fs, drop_caches, median};

pub(crate) struct WriterBenchOptions {
    pub(crate) size_mib: u64,
    pub(crate) rounds: usize,
    /// The loop device writes its image through /var/tmp's page cache
    /// (losetup's default) rather than with O_DIRECT.
    pub(crate) buffered_loop: bool,
    /// Pause after dropping the caches, before each run.
    pub(crate) settle_secs: u64,
    /// Only the cases whose label contains one of these (all when empty).
    pub(crate) only: Vec<String>,
}

impl WriterBenchOptions {
    fn selects(&self, label: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| label.contains(o.as_str()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Dd,
    Fio,
    Writer,
    /// The in-process pwritev2(RWF_DONTCACHE) loop (bench_writer/uncached.rs).
    Loop,
}

fn tool_slot(tool: Tool) -> usize {
    match tool {
        Tool::Dd => 0,
        Tool::Fio => 1,
        Tool::Writer => 2,
        Tool::Loop => 3,
    }
}

/// One run's figures.
#[derive(Clone, Debug)]
struct Sample {
    wall_s: f64,
    mb_s: f64,
    cv: Option<f64>,
    sys_s: f64,
    /// The writer's self-reported durable (or write) MB/s.
    own_mb_s: Option<f64>,
    /// The per-second series the CV comes from (MB/s).
    series: Vec<f64>,
}

fn clear_dir(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name() != "lost+found" {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

fn command_line(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

struct Runner<'a> {
    binary: &'a Path,
    fs: &'a ScratchFs,
    size_mib: u64,
    settle: Duration,
    /// Example command line per case, for the report.
    commands: Vec<String>,
}

impl Runner<'_> {
    fn command(&self, case: &Case, tag: &str, size: u64) -> (Command, Option<PathBuf>) {
        let file = self.fs.path("bench.dat");
        match case.tool {
            Tool::Dd => {
                let mut c = programs::DD.command();
                c.arg("if=/dev/zero")
                    .arg(format!("of={}", file.display()))
                    .args(["bs=1M", &format!("count={size}"), "conv=fsync"]);
                (c, None)
            }
            Tool::Fio => {
                let prefix = self.fs.dir().join(format!("fio-{tag}"));
                let mut c = programs::FIO.command();
                c.args(["--name=bench", "--rw=write", "--bs=1M"])
                    .arg(format!("--filename={}", file.display()))
                    .arg(format!("--size={size}M"))
                    .args(case.args)
                    .arg(format!("--write_bw_log={}", prefix.display()))
                    .args(["--log_avg_msec=1000", "--output-format=terse"]);
                let log = PathBuf::from(format!("{}_bw.1.log", prefix.display()));
                (c, Some(log))
            }
            // `run` times the loop in-process and never asks for its
            // command.
            Tool::Writer | Tool::Loop => {
                let mut c = Command::new(self.binary);
                c.arg("write")
                    .arg("--dir")
                    .arg(self.fs.mountpoint())
                    .arg("--size")
                    .arg(format!("{size}M"))
                    .args(["--chunk", "1M"])
                    .args(case.args)
                    // Removed by the bench after the timing, as dd's and
                    // fio's files are: unlinking a file with gigabytes in
                    // the page cache is not part of writing it.
                    .arg("--keep")
                    .arg("--json");
                (c, None)
            }
        }
    }

    fn run(&mut self, idx: usize, case: &Case, tag: &str, size: u64) -> anyhow::Result<Sample> {
        clear_dir(self.fs.mountpoint());
        drop_caches()?;
        // The pages just freed are reported to the hypervisor (virtio
        // balloon free page reporting) a little later; until then a write
        // into the page cache reuses them at memory speed, after it each
        // new page costs a fault on the host (measured here: 4 GiB buffered
        // in 0.8-1.0 s right after drop_caches, 5.3 s after 10 s). Waiting
        // lets every run start from the same state, instead of as fast as
        // the previous run was large.
        std::thread::sleep(self.settle);
        if case.tool == Tool::Loop {
            let file = self.fs.path("bench.dat");
            self.commands[idx] = "in-process: pwritev2(fd, 1 MiB, off, RWF_DONTCACHE) per MiB, \
                                  then fsync (dev/bench/src/bench_writer/uncached.rs)"
                .into();
            let r = uncached::dontcache_loop(&file, size);
            clear_dir(self.fs.mountpoint());
            let (wall_s, sys_s) = r.context("the pwritev2(RWF_DONTCACHE) loop")?;
            return Ok(Sample {
                wall_s,
                mb_s: size as f64 * 1048576.0 / 1e6 / wall_s,
                cv: None,
                sys_s,
                own_mb_s: None,
                series: Vec::new(),
            });
        }
        let (mut cmd, bw_log) = self.command(case, tag, size);
        if self.commands[idx].is_empty() && size == self.size_mib {
            self.commands[idx] = command_line(&cmd);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = (case.tool == Tool::Dd).then(|| {
            let stop = stop.clone();
            std::thread::spawn(move || dirtied_per_second(stop))
        });
        let (_, sys0) = children_rusage();
        let started = Instant::now();
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", command_line(&cmd)));
        let wall = started.elapsed().as_secs_f64();
        let (_, sys1) = children_rusage();
        stop.store(true, Ordering::Relaxed);
        let dd_series = sampler.map(|h| h.join().unwrap_or_default());
        clear_dir(self.fs.mountpoint());
        let out = out?;
        if !out.status.success() {
            bail!(
                "{} failed ({}): {}",
                case.label,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let mb = size as f64 * 1048576.0 / 1e6;
        let mut sample = Sample {
            wall_s: wall,
            mb_s: mb / wall,
            cv: None,
            sys_s: sys1 - sys0,
            own_mb_s: None,
            series: Vec::new(),
        };
        match case.tool {
            Tool::Loop => {}
            Tool::Dd => sample.cv = dd_series.as_deref().and_then(population_cv),
            Tool::Fio => {
                let log = bw_log.context("no fio log path")?;
                sample.cv = population_cv(&fio_bw_log(&log)?);
                let _ = fs::remove_file(&log);
            }
            Tool::Writer => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let last = stdout
                    .lines()
                    .last()
                    .context("no JSON from wbscope write")?;
                let report: serde_json::Value =
                    serde_json::from_str(last).context("wbscope write --json report")?;
                if report["status"] != "completed" {
                    bail!("{}: status {}", case.label, report["status"]);
                }
                sample.cv = report["cv"].as_f64();
                sample.series = report["per_second_mb_s"]
                    .as_array()
                    .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                    .unwrap_or_default();
                let own = if case.durable {
                    "durable_mb_s"
                } else {
                    "write_mb_s"
                };
                sample.own_mb_s = report[own].as_f64();
            }
        }
        Ok(sample)
    }
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{x:.digits$}"))
}

fn median_of(v: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = v.collect();
    (!v.is_empty()).then(|| median(&mut v))
}

pub(crate) fn bench(binary: &Path, opts: &WriterBenchOptions) -> anyhow::Result<String> {
    if opts.size_mib == 0 || opts.rounds == 0 {
        bail!("--size-mib and --rounds must be at least 1");
    }
    let chosen: Vec<usize> = (0..CASES.len())
        .filter(|&i| opts.selects(CASES[i].label))
        .collect();
    if chosen.is_empty() {
        bail!(
            "--only {}: no case's label contains that",
            opts.only.join(",")
        );
    }
    let load_before = loadavg();
    let fs = bench_fs(opts.size_mib * 2 + 512, !opts.buffered_loop)?;
    let loop_dio = fs.direct_io();
    if !opts.buffered_loop && !loop_dio {
        eprintln!(
            "xtask: bench writer: the loop device fell back to buffered I/O on its image \
             (the report says so)"
        );
    }
    let mut runner = Runner {
        binary,
        fs: &fs,
        size_mib: opts.size_mib,
        settle: Duration::from_secs(opts.settle_secs),
        commands: vec![String::new(); CASES.len()],
    };
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); CASES.len()];
    let started = Instant::now();
    // Fixed cost of each tool (exec, set-up, exit): a 1 MiB run, median
    // of three, after the same sync + drop caches.
    // The loop has none (it runs in this process).
    let mut startup = [f64::NAN, f64::NAN, f64::NAN, 0.0];
    for (slot, label) in STARTUP_CASES.iter().enumerate() {
        let idx = CASES
            .iter()
            .position(|c| c.label == *label)
            .context("case")?;
        let mut walls = Vec::new();
        for i in 0..3 {
            walls.push(
                runner
                    .run(idx, &CASES[idx], &format!("startup-{i}"), 1)?
                    .wall_s,
            );
        }
        startup[slot] = median(&mut walls);
        eprintln!(
            "xtask: bench writer: {label} with 1 MiB: {:.3} s",
            startup[slot]
        );
    }
    for round in 0..opts.rounds {
        scratchfs::signal::check_interrupted()?;
        // Rotate the start, and reverse every other round (A/B then B/A),
        // so drift favours no case.
        let mut order = chosen.clone();
        let n = order.len();
        order.rotate_left(round * n / opts.rounds.max(1) % n);
        if round % 2 == 1 {
            order.reverse();
        }
        for idx in order {
            let case = &CASES[idx];
            let s = runner.run(idx, case, &format!("{round}-{idx}"), opts.size_mib)?;
            eprintln!(
                "xtask: bench writer round {round}: {:<38} {:8.1} MB/s  cv {}  sys {:.2}s",
                case.label,
                s.mb_s,
                fmt_opt(s.cv, 3),
                s.sys_s
            );
            samples[idx].push(s);
        }
    }
    let took = started.elapsed().as_secs_f64();
    let load_after = loadavg();
    let commands = std::mem::take(&mut runner.commands);
    drop(runner);
    drop(fs);

    let gib = opts.size_mib as f64 / 1024.0;
    let med = |idx: usize| Summary {
        mb_s: median_of(samples[idx].iter().map(|s| s.mb_s)).unwrap_or(f64::NAN),
        cv: median_of(samples[idx].iter().filter_map(|s| s.cv)),
        sys_per_gib: median_of(samples[idx].iter().map(|s| s.sys_s / gib)).unwrap_or(f64::NAN),
        own: median_of(samples[idx].iter().filter_map(|s| s.own_mb_s)),
        corrected: median_of(samples[idx].iter().map(|s| {
            let fixed = startup[tool_slot(CASES[idx].tool)];
            s.mb_s * s.wall_s / (s.wall_s - fixed)
        })),
    };
    // A case left out by --only has no samples: as if it did not exist.
    let by_label = |label: &str| {
        CASES
            .iter()
            .position(|c| c.label == label)
            .filter(|&i| !samples[i].is_empty())
    };
    let summaries: Vec<Summary> = (0..CASES.len()).map(med).collect();

    let mut out = String::new();
    out.push_str(&format!(
        "# `cargo xtask bench writer`\n\n\
         {} MiB per run, 1 MiB writes, one file, on a journaled ext4 (mkfs.ext4 defaults) on a \
         loop device over a sparse image in /var/tmp ({}); {} rounds of the {} cases below in \
         rotating order (every other round reversed), `sync` + drop caches and a {} s pause \
         before each run, the file removed after it. {:.0} s in all. Load average (1, 5, 15 min): {} before, {} \
         after; {} CPUs.\n\n",
        opts.size_mib,
        if loop_dio {
            "the loop device does O_DIRECT on its image"
        } else {
            "the loop device writes its image through /var/tmp's page cache"
        },
        opts.rounds,
        chosen.len(),
        opts.settle_secs,
        took,
        load_before,
        load_after,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    ));
    out.push_str(
        "| case | durable MB/s (median) | per round | per-second CV (median) | sys CPU s/GiB \
         (median) | writer's own MB/s (its report) |\n|---|---|---|---|---|---|\n",
    );
    for (idx, case) in CASES.iter().enumerate() {
        if samples[idx].is_empty() {
            continue;
        }
        let s = &summaries[idx];
        let rounds: Vec<String> = samples[idx]
            .iter()
            .map(|x| format!("{:.0}", x.mb_s))
            .collect();
        let rate = if case.durable {
            format!("**{:.1}**", s.mb_s)
        } else {
            format!("{:.1} (not durable)", s.mb_s)
        };
        let with_cv = samples[idx].iter().filter(|x| x.cv.is_some()).count();
        let cv = match s.cv {
            Some(cv) if with_cv < samples[idx].len() => {
                format!("{cv:.3} ({with_cv} of {} rounds)", samples[idx].len())
            }
            cv => fmt_opt(cv, 3),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} | {} |\n",
            case.label,
            rate,
            rounds.join(" / "),
            cv,
            s.sys_per_gib,
            fmt_opt(s.own, 1),
        ));
    }

    out.push_str(
        "\n## Writer / fio per matching strategy (goal: >= 0.95)\n\n\
         | writer | fio equivalent | writer MB/s | fio MB/s | ratio | goal | ratio, start-up \
         cost subtracted |\n|---|---|---|---|---|---|---|\n",
    );
    let mut missed = Vec::new();
    for (w, f) in PAIRS {
        let (Some(wi), Some(fi)) = (by_label(w), by_label(f)) else {
            continue;
        };
        let ratio = summaries[wi].mb_s / summaries[fi].mb_s;
        let ok = ratio >= 0.95;
        if !ok {
            missed.push(format!("{w} / {f} = {ratio:.3}"));
        }
        out.push_str(&format!(
            "| {w} | {f} | {:.1} | {:.1} | {ratio:.3} | {} | {} |\n",
            summaries[wi].mb_s,
            summaries[fi].mb_s,
            if ok { "met" } else { "**missed**" },
            fmt_opt(
                summaries[wi]
                    .corrected
                    .zip(summaries[fi].corrected)
                    .map(|(a, b)| a / b),
                3
            ),
        ));
    }
    for (w, f) in NEAREST {
        let (Some(wi), Some(fi)) = (by_label(w), by_label(f)) else {
            continue;
        };
        out.push_str(&format!(
            "| {w} | {f} (nearest; fio has no drop-behind) | {:.1} | {:.1} | {:.3} | no goal | {} |\n",
            summaries[wi].mb_s,
            summaries[fi].mb_s,
            summaries[wi].mb_s / summaries[fi].mb_s,
            fmt_opt(
                summaries[wi]
                    .corrected
                    .zip(summaries[fi].corrected)
                    .map(|(a, b)| a / b),
                3
            ),
        ));
    }

    let best = CASES
        .iter()
        .enumerate()
        .filter(|(i, c)| c.tool == Tool::Writer && c.durable && !samples[*i].is_empty())
        .max_by(|a, b| summaries[a.0].mb_s.total_cmp(&summaries[b.0].mb_s));
    let ceiling = by_label(CEILING).map(|i| summaries[i].mb_s);
    out.push('\n');
    if let (Some((bi, bc)), Some(ceil)) = (best, ceiling) {
        let ratio = summaries[bi].mb_s / ceil;
        let ok = ratio >= 0.9;
        if !ok {
            missed.push(format!("best writer / ceiling = {ratio:.3}"));
        }
        let corrected = by_label(CEILING)
            .and_then(|ci| summaries[bi].corrected.zip(summaries[ci].corrected))
            .map(|(a, b)| a / b);
        out.push_str(&format!(
            "Best writer / fio's O_DIRECT ceiling (goal: >= 0.9): {} {:.1} MB/s / {CEILING} \
             {ceil:.1} MB/s = **{ratio:.3}** ({}; {} with each tool's start-up cost \
             subtracted).\n\n",
            bc.label,
            summaries[bi].mb_s,
            if ok { "met" } else { "missed" },
            fmt_opt(corrected, 3),
        ));
    }
    let cv_of = |label: &str| by_label(label).and_then(|i| summaries[i].cv);
    if let (Some(srf), Some(buf)) = (cv_of("writer srf-pipelined"), cv_of("writer buffered")) {
        let ok = srf < buf;
        if !ok {
            missed.push(format!("srf-pipelined CV {srf:.3} >= buffered CV {buf:.3}"));
        }
        out.push_str(&format!(
            "Per-second CV, srf-pipelined below buffered (writer's own series): {srf:.3} vs \
             {buf:.3} ({}).\n\n",
            if ok { "met" } else { "missed" }
        ));
    }
    if let (Some(db), Some(buf)) = (cv_of(DROP_BEHIND), cv_of("writer buffered")) {
        out.push_str(&format!(
            "Per-second CV, srf-pipelined --drop-behind beside buffered (writer's own series; \
             not the goal's configuration, shown for comparison): {db:.3} vs {buf:.3} ({}).\n\n",
            if db < buf { "below" } else { "not below" }
        ));
    }
    let cv_judged = cv_of("writer srf-pipelined").is_some() && cv_of("writer buffered").is_some();
    if !cv_judged {
        out.push_str(
            "Per-second CV, srf-pipelined below buffered: **not judged**: a CV needs a run of at \
             least two full seconds, and one side has none (raise `--size-mib`; buffered must \
             outgrow the dirty limits to be throttled at all).\n\n",
        );
    }
    // The series behind the CV goal, round by round, so a verdict can be
    // checked against what the seconds looked like.
    out.push_str(
        "Per-second series behind the CV goal (writer's own, MB/s, one line per round):\n\n",
    );
    for label in ["writer buffered", "writer srf-pipelined", DROP_BEHIND] {
        if let Some(i) = by_label(label) {
            for (round, x) in samples[i].iter().enumerate() {
                let series: Vec<String> = x.series.iter().map(|v| format!("{v:.0}")).collect();
                out.push_str(&format!(
                    "- {label}, round {round}: [{}] CV {}\n",
                    series.join(", "),
                    fmt_opt(x.cv, 3)
                ));
            }
        }
    }
    out.push('\n');
    if missed.is_empty() {
        out.push_str(if cv_judged {
            "All goals met.\n\n"
        } else {
            "The throughput goals are met; the CV goal is not judged in this run.\n\n"
        });
    } else {
        out.push_str(&format!("Goals missed: {}.\n\n", missed.join("; ")));
    }

    out.push_str(&format!(
        "Fixed cost per command (exec, set-up, exit; a 1 MiB run after sync + drop caches, \
         median of 3): dd {:.3} s, fio {:.3} s, wbscope write {:.3} s. It is part of every \
         wall time above, as the durable definition wants; the last column of the ratio table \
         subtracts it from each run's wall time, to show how much of a ratio it makes.\n\n",
        startup[0], startup[1], startup[2]
    ));
    let device = if loop_dio {
        "- **The device**: the loop device does O_DIRECT on its image (`losetup \
         --direct-io=on`): a write to it completes when the disk under /var/tmp (a virtio \
         disk, cached by the hypervisor) took it, and a flush of the loop device flushes that \
         disk. Without it (`--buffered-loop`, losetup's default) the loop device completes a \
         write once it is copied into /var/tmp's page cache, where it is dirty again: \
         srf-pipelined's window then bounds nothing (the image's dirty pages grow to the \
         dirty limits and the loop worker is throttled like a buffered writer), and its CV is \
         buffered's.\n"
    } else {
        "- **The device**: the loop device writes its image through /var/tmp's page cache \
         (`--buffered-loop`): a write to it completes once copied there, dirty again, so \
         srf-pipelined's window bounds only the upper file's pages and its per-second series \
         is throttled like buffered's; a flush of the loop device fsyncs the image, so \
         \"durable\" still ends on /var/tmp's disk.\n"
    };
    out.push_str(
        "## How it is measured\n\n\
         - **Durable MB/s** (10^6 bytes): bytes / wall time of the whole command, measured \
         around the child process (start to exit, final flush included), the same for every \
         tool. `buffered` runs (writer and fio) end without a flush: their figure is write \
         throughput, not durability, and they are kept out of the best-writer figure. Every \
         tool's file is removed by the bench after the timing (the writer runs with `--keep`).\n\
         - **Sys CPU**: the child's system time (getrusage(RUSAGE_CHILDREN) delta around \
         each run; io_uring's io-wq workers belong to the process and are included; the \
         kernel's flusher threads, which do buffered writeback, belong to nobody and are not).\n\
         - **Writer's own MB/s**: the median of its report's `durable_mb_s` (`write_mb_s` \
         for buffered), timed from its first write to the end of its last sync, so without \
         process start-up and exit.\n\
         - **Per-second CV** (population stddev / mean; n/a for a run shorter than two full \
         seconds, the median over the rounds that have one): writer: its JSON report's `cv`, \
         over bytes handed to the kernel (write(2) returned) per whole second from its start \
         to the end of its last sync, the partial last second left out, seconds spent in \
         syncs counted (docs/writer.md, \"Per-second series\"); the goal compares two writer \
         strategies, so one definition on both sides. fio: its `--write_bw_log` with \
         `--log_avg_msec=1000` (completed writes per whole second, partial last second \
         dropped, nothing logged while in `end_fsync`, so fio's CV leaves the flush out); \
         dd: pages dirtied per full second from /proc/vmstat `nr_dirtied` (system-wide, so \
         other jobs' writes count too; the fsync seconds count as slow seconds).\n",
    );
    out.push_str(device);
    out.push_str(
        "\
         - **Allocation**: fio lays out (fallocates) its file by default. The buffered fio \
         jobs run with `--fallocate=none`, like the writer's buffered strategies (delayed \
         allocation on both sides); the O_DIRECT fio jobs keep preallocation \
         (`--fallocate=native`) and the writer's `direct` and `uring` run with `--fallocate` \
         to match (an extending O_DIRECT write on ext4 takes the inode lock exclusively; see \
         docs/writer.md).\n\
         - fio's `sync_file_range=write:1` issues SYNC_FILE_RANGE_WRITE after every 1 MiB \
         write, then `end_fsync`; it has no WAIT_BEFORE pass (the writer's srf-pipelined \
         waits on chunk i-4 and ends with fdatasync). fio's `end_fsync` is fsync(2); the \
         writer's fsync-end uses fsync(2) too.\n\
         - `writer srf-pipelined --drop-behind` adds posix_fadvise(POSIX_FADV_DONTNEED) on \
         chunk i-4 right after its WAIT_BEFORE, and on the last 4 chunks after the final \
         fdatasync, so the file does not stay in the page cache. fio has no equivalent (no \
         option drops written pages behind a sequential write); it is shown beside fio's \
         sync_file_range job, the nearest, with no goal on the ratio.\n\n\
         ## Commands (first round; file and log names vary per run)\n\n",
    );
    for (case, cmd) in CASES.iter().zip(&commands).filter(|(_, c)| !c.is_empty()) {
        out.push_str(&format!("- {}: `{cmd}`\n", case.label));
    }
    Ok(out)
}

struct Summary {
    mb_s: f64,
    cv: Option<f64>,
    sys_per_gib: f64,
    own: Option<f64>,
    /// MB/s with the tool's fixed start-up cost subtracted from the wall.
    corrected: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cv_is_population_stddev_over_mean() {
        assert_eq!(population_cv(&[5.0]), None);
        let cv = population_cv(&[1.0, 3.0]).unwrap();
        assert!((cv - 0.5).abs() < 1e-12);
    }

    #[test]
    fn every_pair_names_existing_cases() {
        for (w, f) in PAIRS.iter().chain(NEAREST) {
            assert!(
                CASES
                    .iter()
                    .any(|c| c.label == *w && c.tool == Tool::Writer)
            );
            // The reference is fio's job, or the bare RWF_DONTCACHE loop.
            assert!(
                CASES
                    .iter()
                    .any(|c| c.label == *f && matches!(c.tool, Tool::Fio | Tool::Loop))
            );
        }
        assert!(CASES.iter().any(|c| c.label == CEILING));
    }
}
