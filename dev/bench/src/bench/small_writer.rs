//! `cargo xtask bench small-writer`: what a program that writes
//! 4 KiB at a time feels while wbscope traces it, as a user measures it —
//! its own wall time and system time, with and without, in alternating
//! pairs with the order swapped every pair, and the median of the
//! per-pair ratios. The BPF statistics' run time does not show this cost:
//! a program run per dirtied folio, in the writer's own context with the
//! mapping's `i_pages` lock held (`__folio_mark_dirty()`,
//! mm/page-writeback.c), slowed 4 KiB writes by about 15% while the
//! statistics said 0.9% of a core.
//!
//! Writers: `dd bs=4k conv=fsync` (the 4 KiB writer the slowdown was
//! first measured with) and fio `randwrite` 4k with an fsync every 64
//! writes, in a directory of the run's own on the root filesystem (where
//! it was measured), removed at the end; and `dd bs=1M conv=fsync`
//! against the default trace alone, the control: 1 MiB writes must stay
//! unchanged.
//! Sides, each paired with an untraced run:
//! - `trace`: `wbscope trace --json --events`, the default hooks;
//! - `trace --enable dirty_folio`: with the per-folio attribution;
//! - `trace --enable device_io`: with the block programs (per request and
//!   per bio: the device lines' histograms and the ledger's classes);
//! - `bpftrace`: a one-liner counting `writeback_dirty_folio` (the peer);
//! - `floor`: `wbscope probes --cost --on-hooks`, an empty program on each
//!   of the tracer's busiest events (those of the per-folio set).
//!
//! With each traced side, how often each program ran per page dirtied
//! (`nr_dirtied` of /proc/vmstat over the run): what runs per write.
use std::{
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

use super::{Tracer, drop_caches, spread};

pub(crate) struct SmallWriterOptions {
    /// MiB each writer writes.
    pub(crate) size_mib: u64,
    /// Pairs per side and writer.
    pub(crate) pairs: usize,
    /// Seconds between attaching (and dropping the caches) and writing.
    pub(crate) settle_secs: u64,
    /// The writers to run, in this order.
    pub(crate) writers: Vec<Writer>,
    /// The observers to pair with an untraced run, in this order.
    pub(crate) sides: Vec<Side>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Writer {
    /// dd bs=4k conv=fsync
    Dd,
    /// fio randwrite 4k, an fsync every 64 writes
    #[value(name = "fio")]
    FioRandwrite,
    /// `dd bs=1M`: the control (1 MiB writes must stay unchanged), whose
    /// large folios already made the per-folio program cheap; paired with
    /// the default trace and nothing only.
    #[value(name = "dd-1m")]
    DdLarge,
    /// One process per 4 KiB page: `dd count=1` at a new offset each,
    /// one after another, 8 per MiB of `--size-mib`: the cost of
    /// following processes that dirty pages and exit (a task iterator
    /// read per interval, a program run per exit: tracer/taskio.rs).
    /// Paired with the default trace and nothing only.
    Spawn,
}

impl Writer {
    fn label(self, size_mib: u64) -> String {
        match self {
            Writer::Dd => format!("dd bs=4k count={} conv=fsync", size_mib * 256),
            Writer::FioRandwrite => {
                format!("fio randwrite bs=4k size={size_mib}M fsync=64 (psync)")
            }
            Writer::DdLarge => format!("dd bs=1M count={size_mib} conv=fsync"),
            Writer::Spawn => format!(
                "{} processes: dd bs=4k count=1 seek=i, one after another",
                spawn_count(size_mib)
            ),
        }
    }

    fn command(self, file: &Path, size_mib: u64) -> Command {
        match self {
            Writer::Dd | Writer::DdLarge => {
                let (bs, count) = match self {
                    Writer::Dd => ("bs=4k", size_mib * 256),
                    _ => ("bs=1M", size_mib),
                };
                let mut c = programs::DD.command();
                c.arg("if=/dev/zero")
                    .arg(format!("of={}", file.display()))
                    .args([bs, &format!("count={count}")])
                    .args(["conv=fsync", "status=none"]);
                c
            }
            Writer::Spawn => {
                // dash, not bash: the loop's own cost is the smallest.
                let mut c = programs::DASH.command();
                c.arg("-c")
                    .arg(
                        "i=0; while [ $i -lt \"$1\" ]; do \
                         dd if=/dev/zero of=\"$2\" bs=4k count=1 seek=$i conv=notrunc \
                         status=none || exit 1; i=$((i + 1)); done",
                    )
                    .arg("spawn")
                    .arg(spawn_count(size_mib).to_string())
                    .arg(file);
                c
            }
            Writer::FioRandwrite => {
                let mut c = programs::FIO.command();
                c.arg("--name=small")
                    .arg(format!("--filename={}", file.display()))
                    .args(["--rw=randwrite", "--bs=4k", "--ioengine=psync"])
                    .arg(format!("--size={size_mib}M"))
                    .args(["--fsync=64", "--end_fsync=1", "--output-format=terse"]);
                c
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Side {
    /// wbscope trace --json --events (the default hooks)
    Trace,
    /// the same with --enable dirty_folio
    PerFolio,
    /// the same with --enable device_io (the block programs per request
    /// and per bio, the ledger's device classes among them)
    DeviceIo,
    /// the same with --enable writes (each write system call spanned:
    /// programs on every write of the host)
    Writes,
    /// bpftrace counting writeback_dirty_folio (the peer)
    Bpftrace,
    /// empty programs on the tracer's busiest events
    Floor,
    /// no observer on either run of the pair: how far the measure moves
    /// by itself (an A/A comparison)
    Nothing,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Trace => "wbscope trace (default)",
            Side::PerFolio => "wbscope trace --enable dirty_folio",
            Side::DeviceIo => "wbscope trace --enable device_io",
            Side::Writes => "wbscope trace --enable writes",
            Side::Bpftrace => "bpftrace counting writeback_dirty_folio",
            Side::Floor => "empty programs (probes --cost --on-hooks)",
            Side::Nothing => "nothing (untraced against untraced)",
        }
    }
}

/// What observes a run: `wbscope trace` writing its lines to a file (as a
/// user would redirect them: a pipe nobody reads would stall it), the
/// floor's programs, or bpftrace.
enum Observer {
    Trace(Tracer, PathBuf),
    Floor(Tracer),
    Bpftrace(Child),
    Nothing,
}

impl Observer {
    fn start(binary: &Path, side: Side, out: &Path) -> anyhow::Result<Observer> {
        Ok(match side {
            Side::Trace | Side::PerFolio | Side::DeviceIo | Side::Writes => {
                let mut args = vec!["trace", "--json", "--events"];
                match side {
                    Side::PerFolio => args.extend(["--enable", "dirty_folio"]),
                    Side::DeviceIo => args.extend(["--enable", "device_io"]),
                    Side::Writes => args.extend(["--enable", "writes"]),
                    _ => {}
                }
                let file =
                    fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
                let tracer = Tracer::spawn_to(binary, &args, file.into(), None, "tracing;")?;
                Observer::Trace(tracer, out.to_path_buf())
            }
            Side::Floor => Observer::Floor(Tracer::floor(binary, false)?),
            Side::Nothing => Observer::Nothing,
            Side::Bpftrace => {
                let mut child = programs::BPFTRACE
                    .command()
                    .args([
                        "-e",
                        "tracepoint:writeback:writeback_dirty_folio { @folios = count(); }",
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting bpftrace")?;
                let stdout = child.stdout.take().context("bpftrace's stdout")?;
                let attached = BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .any(|l| l.starts_with("Attaching"));
                if !attached {
                    let _ = child.kill();
                    bail!("bpftrace did not attach");
                }
                Observer::Bpftrace(child)
            }
        })
    }

    /// Stops it; for our tracer, its programs' run counts (program, runs).
    fn stop(self) -> anyhow::Result<Vec<(String, u64)>> {
        match self {
            Observer::Nothing => Ok(Vec::new()),
            Observer::Bpftrace(child) => {
                super::interrupt(child)?;
                Ok(Vec::new())
            }
            Observer::Floor(t) => {
                t.stop_floor()?;
                Ok(Vec::new())
            }
            Observer::Trace(tracer, out) => {
                let summary = tracer.stop_to_summary(&out)?;
                Ok(summary["run_time"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| {
                        Some((r["program"].as_str()?.to_string(), r["run_count"].as_u64()?))
                    })
                    .collect())
            }
        }
    }
}

/// One writer's run: wall seconds and its own system seconds (its waited
/// children's included: fio's job process).
/// Processes `Writer::Spawn` starts for `size_mib`.
fn spawn_count(size_mib: u64) -> u64 {
    size_mib * 8
}

fn run_writer(writer: Writer, file: &Path, size_mib: u64) -> anyhow::Result<(f64, f64)> {
    let started = Instant::now();
    let child = writer
        .command(file, size_mib)
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {writer:?}"))?;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: our own child; valid pointers.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = started.elapsed().as_secs_f64();
    if r < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{writer:?} failed (status {status})");
    }
    let sys = usage.ru_stime.tv_sec as f64 + usage.ru_stime.tv_usec as f64 / 1e6;
    Ok((wall, sys))
}

fn nr_dirtied() -> anyhow::Result<u64> {
    let vmstat = fs::read_to_string("/proc/vmstat").context("reading /proc/vmstat")?;
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("nr_dirtied "))
        .and_then(|v| v.trim().parse().ok())
        .context("no nr_dirtied in /proc/vmstat")
}

/// Per writer and side: the per-pair ratios (wall, sys) and the runs per
/// dirtied page of each program.
#[derive(Default)]
struct Cell {
    wall: Vec<f64>,
    sys: Vec<f64>,
    runs: Vec<(String, u64)>,
    dirtied: u64,
}

pub(crate) fn bench(binary: &Path, opts: &SmallWriterOptions) -> anyhow::Result<String> {
    // A directory of the run's own on the root filesystem, removed at
    // the end.
    let dir = tempfile::Builder::new()
        .prefix("wbscope-small-writer.")
        .tempdir_in("/var/tmp")
        .context("making the run's directory")?;
    measure(binary, opts, dir.path())
}

fn measure(binary: &Path, opts: &SmallWriterOptions, dir: &Path) -> anyhow::Result<String> {
    let file = dir.join("small.dat");
    let trace_out = dir.join("trace.json");
    let writers = &opts.writers;
    let mut cells: Vec<Vec<Cell>> = writers
        .iter()
        .map(|_| opts.sides.iter().map(|_| Cell::default()).collect())
        .collect();
    for pair in 0..opts.pairs {
        for (w, &writer) in writers.iter().enumerate() {
            for (s, &side) in opts.sides.iter().enumerate() {
                scratchfs::signal::check_interrupted()?;
                if matches!(writer, Writer::DdLarge | Writer::Spawn)
                    && !matches!(side, Side::Trace | Side::Nothing)
                {
                    continue;
                }
                // Swapped every pair, so that drift favours neither.
                let observed_first = pair % 2 == 1;
                let mut times = [(0.0, 0.0); 2];
                for observed in [observed_first, !observed_first] {
                    let _ = fs::remove_file(&file);
                    // Attached before the caches are dropped and the pause,
                    // so that both runs write the same time after both.
                    let observer = observed
                        .then(|| Observer::start(binary, side, &trace_out))
                        .transpose()?;
                    drop_caches()?;
                    std::thread::sleep(Duration::from_secs(opts.settle_secs));
                    let dirtied0 = nr_dirtied()?;
                    let t = run_writer(writer, &file, opts.size_mib)?;
                    let dirtied = nr_dirtied()? - dirtied0;
                    times[usize::from(observed)] = t;
                    if let Some(o) = observer {
                        let runs = o.stop()?;
                        let cell = &mut cells[w][s];
                        cell.dirtied += dirtied;
                        for (program, n) in runs {
                            match cell.runs.iter_mut().find(|r| r.0 == program) {
                                Some(r) => r.1 += n,
                                None => cell.runs.push((program, n)),
                            }
                        }
                    }
                }
                let (plain, observed) = (times[0], times[1]);
                let cell = &mut cells[w][s];
                cell.wall.push(observed.0 / plain.0);
                cell.sys.push(observed.1 / plain.1.max(1e-6));
                eprintln!(
                    "xtask: small writer pair {pair}: {writer:?} {}: wall {:.3} s / {:.3} s, \
                     sys {:.3} s / {:.3} s",
                    side.label(),
                    observed.0,
                    plain.0,
                    observed.1,
                    plain.1
                );
            }
        }
    }
    let _ = fs::remove_file(&file);
    Ok(report(opts, writers, &cells))
}

fn report(opts: &SmallWriterOptions, writers: &[Writer], cells: &[Vec<Cell>]) -> String {
    let mut out = format!(
        "Small writer: {} pairs per side and writer (untraced and observed, the order \
         swapped every pair), caches dropped and {} s of pause before each run with the \
         observer already attached; median of the per-pair ratios observed / untraced, \
         [its distribution-free 95% interval, from 6 pairs], (min–max)\n\n",
        opts.pairs, opts.settle_secs
    );
    for (w, writer) in writers.iter().enumerate() {
        out.push_str(&format!(
            "### {}\n\n| observer | wall ratio | writer's sys ratio |\n|---|---|---|\n",
            writer.label(opts.size_mib)
        ));
        for (s, side) in opts.sides.iter().enumerate() {
            let c = &cells[w][s];
            if c.wall.is_empty() {
                continue;
            }
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                side.label(),
                spread(&c.wall),
                spread(&c.sys)
            ));
        }
        out.push('\n');
        for (s, side) in opts.sides.iter().enumerate() {
            let c = &cells[w][s];
            if c.runs.is_empty() || c.dirtied == 0 {
                continue;
            }
            out.push_str(&format!(
                "Runs per dirtied page, {} ({} pages dirtied over its runs): ",
                side.label(),
                c.dirtied
            ));
            let mut runs = c.runs.clone();
            runs.sort_by_key(|r| std::cmp::Reverse(r.1));
            let list: Vec<String> = runs
                .iter()
                .filter(|r| r.1 > 0)
                .map(|(p, n)| format!("{p} {:.4}", *n as f64 / c.dirtied as f64))
                .collect();
            out.push_str(&list.join(", "));
            out.push_str("\n\n");
        }
    }
    out
}
