//! `cargo xtask bench`: what the tracer costs, measured side by side in
//! one run (never against a figure from another run or machine).
//!
//! - Throughput of a buffered write + fsync with the tracer attached vs
//!   not, in alternating pairs (A/B then B/A) on a journaled ext4 made for
//!   the run; the ratio of the medians is the figure.
//! - BPF run time per program invocation (kernel BPF statistics), lost
//!   records, and the tracer's own CPU, idle and under that writeback;
//!   BPF time per GiB written.
//! - The floor those programs stand on: the same writes in the rotation
//!   with only an empty program on each of the tracer's busiest events
//!   (`wbscope probes --cost --on-hooks`), and again with a program that
//!   adds to one counter there (`--counting`), each tracer program's run
//!   time against both on its event. An event that fires once per
//!   large folio finds any program cold; the warm floor of `probes
//!   --cost` (printed last) says little about it.
//! - BPF invocations per second during a context-switch storm that
//!   writes nothing (a pipe ping-pong between two threads): the cost the
//!   tracer puts on work that has nothing to do with writeback.
//! - With `WBSCOPE_BENCH_BASELINE=PATH` (another build of wbscope, e.g.
//!   main's), the same BPF figures for that binary in the same run, traced
//!   runs of both in the rotation, and their ratios.
use std::{
    fs::{self, File},
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use scratchfs::{FsType, ScratchFs};

pub(crate) mod big_host;
mod figures;
pub(crate) mod fsync_storm;
mod jit_profile;
mod map_reading;
pub(crate) mod recorder;
pub(crate) mod small_writer;
mod store;
use figures::{
    all_programs, budget_figures, floor_comparison, ms_per_gib, per_program, per_write_means,
    run_time_table, split_by_budget,
};

pub(crate) struct BenchOptions {
    pub(crate) size_mib: u64,
    pub(crate) pairs: usize,
    pub(crate) idle_secs: u64,
    /// Pause after dropping the caches before each run (see the writer
    /// bench's --settle-secs).
    pub(crate) settle_secs: u64,
    /// Seconds of `wbscope probes --cost` for the per-program floor.
    pub(crate) floor_secs: u64,
}

/// A journaled ext4 (mkfs.ext4's defaults) on a loop device over a sparse
/// image in /var/tmp; with `direct_io`, the loop device reads and writes
/// its image with O_DIRECT (`losetup --direct-io=on`): a write completes
/// when the disk under /var/tmp took it, not when it was copied into
/// /var/tmp's page cache (where it would be dirty again, and throttled
/// again). [`ScratchFs::direct_io`] says whether the kernel took it.
/// Removed on drop.
pub(crate) fn bench_fs(size_mib: u64, direct_io: bool) -> anyhow::Result<ScratchFs> {
    ScratchFs::builder(FsType::Ext4, size_mib)
        .direct_io(direct_io)
        .create()
        .context("making the benchmark's loop filesystem")
}

pub(crate) fn drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").context("dropping caches")
}

/// Buffered write of `size_mib` MiB in 1 MiB chunks, then fsync; returns
/// the wall time including the fsync.
fn write_and_fsync(path: &Path, size_mib: u64) -> anyhow::Result<Duration> {
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 + 1).collect();
    let started = Instant::now();
    let mut f = File::create_new(path)?;
    for _ in 0..size_mib {
        f.write_all(&chunk)?;
    }
    f.sync_all()?;
    Ok(started.elapsed())
}

/// A running `wbscope trace` or `wbscope record`, stopped as Ctrl-C
/// would stop it when dropped: a bench that fails half-way leaves no
/// tracer, and no program, behind.
struct Tracer {
    /// `None` once stopped.
    child: Option<Child>,
    /// What it says on stderr after the ready line, drained to its end by
    /// a thread so that nothing it says later blocks or breaks on a closed
    /// pipe (a recorder's last line once failed it that way).
    said: Option<std::thread::JoinHandle<String>>,
    /// The recording, for `record`.
    recording: Option<PathBuf>,
    /// When it said it was tracing: the zero of its interval lines'
    /// `time_s`, give or take the time to read that line.
    attached: Instant,
}

/// Interval length of the traced runs: short, so that the run-time
/// statistics of the intervals a write spans are mostly the write's.
const TRACE_INTERVAL_S: f64 = 0.25;

impl Tracer {
    fn start(binary: &Path) -> anyhow::Result<Tracer> {
        let interval = TRACE_INTERVAL_S.to_string();
        Self::spawn(
            binary,
            &["trace", "--json", "--interval", &interval],
            None,
            "tracing;",
        )
    }

    fn record(binary: &Path, to: &Path) -> anyhow::Result<Tracer> {
        let out = to.to_string_lossy().into_owned();
        Self::spawn(
            binary,
            &["record", "-o", &out],
            Some(to.to_path_buf()),
            "tracing;",
        )
    }

    /// Empty programs (with `counting`, programs that add to one counter)
    /// on the tracer's busiest events until stopped
    /// ([`Tracer::stop_floor`]).
    fn floor(binary: &Path, counting: bool) -> anyhow::Result<Tracer> {
        let mut args = vec!["probes", "--cost", "86400", "--on-hooks", "--json"];
        if counting {
            args.push("--counting");
        }
        Self::spawn(binary, &args, None, "measuring;")
    }

    fn spawn(
        binary: &Path,
        args: &[&str],
        recording: Option<PathBuf>,
        ready: &str,
    ) -> anyhow::Result<Tracer> {
        Self::spawn_to(binary, args, Stdio::piped(), recording, ready)
    }

    /// [`Tracer::spawn`] with its stdout going to `stdout` (a file, for a
    /// trace whose lines nobody reads while it runs: a full pipe would
    /// stall it).
    fn spawn_to(
        binary: &Path,
        args: &[&str],
        stdout: Stdio,
        recording: Option<PathBuf>,
        ready: &str,
    ) -> anyhow::Result<Tracer> {
        let mut child = Command::new(binary)
            .args(args)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting wbscope {}", args[0]))?;
        let stderr = child.stderr.take().context("no stderr")?;
        let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
        if !lines.any(|l| l.contains(ready)) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("wbscope {} exited before attaching", args[0]);
        }
        let said = std::thread::spawn(move || lines.collect::<Vec<_>>().join("\n"));
        Ok(Tracer {
            child: Some(child),
            said: Some(said),
            recording,
            attached: Instant::now(),
        })
    }

    /// Sends SIGINT, as Ctrl-C would, and returns the output once it
    /// ended, with all it said on stderr after attaching.
    fn interrupt(mut self) -> anyhow::Result<std::process::Output> {
        let child = self.child.take().context("wbscope already stopped")?;
        let mut out = interrupt(child).context("waiting for wbscope")?;
        if let Some(said) = self.said.take() {
            out.stderr = said.join().unwrap_or_default().into_bytes();
        }
        Ok(out)
    }

    /// The running tracer's process id.
    fn pid(&self) -> std::io::Result<u32> {
        self.child
            .as_ref()
            .map(Child::id)
            .ok_or_else(|| std::io::Error::other("wbscope already stopped"))
    }

    /// Peak resident memory so far (VmHWM, kB), from /proc/PID/status.
    fn peak_rss_kb(&self) -> Option<u64> {
        self.status_kb("VmHWM:")
    }

    /// A kB figure of /proc/PID/status (`VmRSS:`, `VmHWM:`).
    fn status_kb(&self, field: &str) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid().ok()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// utime + stime of the tracer so far, in seconds.
    fn cpu_secs(&self) -> anyhow::Result<f64> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid()?))?;
        // Fields after the `(comm)`: state is field 3; utime 14, stime 15.
        let rest = stat.rsplit_once(')').context("bad /proc/PID/stat")?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Ok(ticks / hz)
    }

    /// Time on CPU of the tracer so far, ns, every thread's
    /// (`/proc/PID/schedstat`'s first field): for figures per call, where
    /// [`Tracer::cpu_secs`]'s 10 ms ticks are too coarse.
    fn cpu_ns(&self) -> anyhow::Result<u64> {
        let text = fs::read_to_string(format!("/proc/{}/schedstat", self.pid()?))?;
        text.split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .context("bad /proc/PID/schedstat")
    }

    /// Stops with SIGINT and returns its JSON lines, the summary last (for
    /// a recording, `replay --summary` of it alone).
    fn stop(self, binary: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
        let recording = self.recording.clone();
        let out = self.interrupt()?;
        let stdout = match &recording {
            Some(path) => {
                let replay = Command::new(binary)
                    .arg("replay")
                    .arg(path)
                    .arg("--summary")
                    .output()?;
                String::from_utf8_lossy(&replay.stdout).into_owned()
            }
            None => String::from_utf8_lossy(&out.stdout).into_owned(),
        };
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .context("wbscope's JSON lines")?;
        if lines.last().is_none_or(|l| l["type"] != "summary") {
            bail!("no summary line from wbscope");
        }
        Ok(lines)
    }

    /// Stops a trace whose stdout went to a file with SIGINT; an error
    /// with what it said unless it ended well.
    fn stop_trace(self) -> anyhow::Result<()> {
        let ended = self.interrupt()?;
        if !ended.status.success() {
            bail!(
                "wbscope trace ended with {}: {}",
                ended.status,
                String::from_utf8_lossy(&ended.stderr).trim()
            );
        }
        Ok(())
    }

    /// Stops a trace whose stdout went to the file `out` with SIGINT, and
    /// returns its summary line; `out` is removed.
    fn stop_to_summary(self, out: &Path) -> anyhow::Result<serde_json::Value> {
        self.stop_trace()?;
        let text = fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
        let _ = fs::remove_file(out);
        text.lines()
            .last()
            .map(serde_json::from_str)
            .transpose()
            .context("wbscope's last line")?
            .filter(|l: &serde_json::Value| l["type"] == "summary")
            .context("no summary line from wbscope trace")
    }

    /// Stops a [`Tracer::floor`] with SIGINT and returns its figures as
    /// run-time entries (`program` is the event).
    fn stop_floor(self) -> anyhow::Result<serde_json::Value> {
        let out = self.interrupt()?;
        if !out.status.success() {
            bail!(
                "wbscope probes --cost --on-hooks failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let costs: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("wbscope probes' JSON")?;
        Ok(costs
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                serde_json::json!({
                    "program": c["program"],
                    "run_count": c["invocations"],
                    "run_time_ns": c["run_time_ns"],
                })
            })
            .collect())
    }
}

/// Sends SIGINT, as Ctrl-C would, and returns the output once it ended.
impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = interrupt(child);
        }
    }
}

fn interrupt(child: Child) -> std::io::Result<std::process::Output> {
    // SAFETY: plain syscall on our child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    child.wait_with_output()
}

/// The run-time entries of the interval lines that overlap `window`
/// (seconds since the tracer attached), one array ([`run_time_table`]
/// adds them up per program).
fn run_time_within(lines: &[serde_json::Value], window: (f64, f64)) -> serde_json::Value {
    lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .filter(|l| {
            let end = l["time_s"].as_f64().unwrap_or(0.0);
            let start = end - l["interval_s"].as_f64().unwrap_or(0.0);
            end > window.0 && start < window.1
        })
        .flat_map(|l| l["run_time"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Plain,
    Traced,
    Recorded,
    /// Traced by the baseline binary.
    Baseline,
    /// Empty programs on the tracer's busiest events
    /// (`probes --cost --on-hooks`).
    Floor,
    /// Programs that add to one counter on the same events (`probes
    /// --cost --on-hooks --counting`).
    Counting,
}

/// Seconds of each context-switch storm.
const STORM_SECS: u64 = 5;

/// A pipe ping-pong between two threads for `secs`: each round trip
/// blocks each thread once on its read, two context switches at least,
/// and nothing is written to any file. Returns the round trips.
fn ping_pong(secs: u64) -> anyhow::Result<u64> {
    use std::io::Read as _;
    // (reader, writer): this thread pings the echo thread through the
    // first pipe, which answers through the second.
    let (mut echo_read, mut ping) = std::io::pipe()?;
    let (mut pong, mut echo_write) = std::io::pipe()?;
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8];
        while echo_read.read_exact(&mut byte).is_ok() {
            if echo_write.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut byte = [1u8];
    let mut trips = 0u64;
    while started.elapsed() < Duration::from_secs(secs) {
        ping.write_all(&byte)?;
        pong.read_exact(&mut byte)?;
        trips += 1;
    }
    drop(ping);
    let _ = echo.join();
    Ok(trips)
}

/// What the tracer's programs did during a storm.
struct Storm {
    round_trips_per_s: f64,
    runs_per_s: f64,
    table: String,
}

/// `binary trace` attached, a ping-pong of [`STORM_SECS`], and the BPF
/// invocations of the 1 s interval lines spanning it.
fn storm(binary: &Path) -> anyhow::Result<Storm> {
    // What the writes before left dirty is written now, not during the
    // storm (the first storm after them counted a writeback of the
    // host's: 16 runs a second against the second storm's 1).
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let tracer = Tracer::spawn(
        binary,
        &["trace", "--json", "--interval", "1"],
        None,
        "tracing;",
    )?;
    std::thread::sleep(Duration::from_secs(1));
    let from = tracer.attached.elapsed().as_secs_f64();
    let trips = ping_pong(STORM_SECS)?;
    let to = tracer.attached.elapsed().as_secs_f64();
    let lines = tracer.stop(binary)?;
    let within = run_time_within(&lines, (from, to));
    // The intervals spanning the storm: whole seconds, up to one more
    // than the storm itself.
    let spanned = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .filter(|l| {
            let end = l["time_s"].as_f64().unwrap_or(0.0);
            let start = end - l["interval_s"].as_f64().unwrap_or(0.0);
            end > from && start < to
        })
        .map(|l| l["interval_s"].as_f64().unwrap_or(0.0))
        .sum::<f64>()
        .max(to - from);
    let runs: u64 = within
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["run_count"].as_u64().unwrap_or(0))
        .sum();
    let (table, _) = run_time_table(&[within]);
    Ok(Storm {
        round_trips_per_s: trips as f64 / (to - from),
        runs_per_s: runs as f64 / spanned,
        table,
    })
}

/// The distribution-free 95% interval of the median of `sorted` (sorted
/// ascending): the order statistics x(j) and x(n+1−j), j the largest rank
/// with P(Bin(n, ½) ≤ j−1) ≤ 0.025, so that the interval holds the true
/// median with at least 95% confidence whatever the distribution (Conover,
/// Practical Nonparametric Statistics, 3rd ed., §3.2, the sign-test
/// interval). `None` under 6 values, where even (x(1), x(n)) holds less.
pub(crate) fn median_interval(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    // P(X ≤ i) summed in log space: ½ⁿ underflows past n = 1074.
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_pmf = ln_half_n;
    let mut cdf = 0.0;
    let mut j = 0;
    for i in 0..n / 2 {
        cdf += ln_pmf.exp();
        if cdf > 0.025 {
            break;
        }
        j = i + 1;
        ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    (j >= 1).then(|| (sorted[j - 1], sorted[n - j]))
}

/// `median [95% interval] (min–max)` of ratios.
pub(crate) fn spread(v: &[f64]) -> String {
    let mut s = v.to_vec();
    let m = median(&mut s);
    let interval =
        median_interval(&s).map_or(String::new(), |(lo, hi)| format!(" [{lo:.3}, {hi:.3}]"));
    format!(
        "**{m:.3}**{interval} ({:.3}–{:.3})",
        s.first().copied().unwrap_or(f64::NAN),
        s.last().copied().unwrap_or(f64::NAN)
    )
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn bench(binary: &Path, opts: &BenchOptions) -> anyhow::Result<String> {
    // O_DIRECT on the image, as the writer bench: with the image in
    // /var/tmp's page cache a run ends before its data left the VM, and the
    // next run starts with that cache to write back.
    let fs = bench_fs(opts.size_mib * 2 + 512, true)?;
    let file = fs.path("bench.dat");
    let mut plain = Vec::new();
    let mut traced = Vec::new();
    let mut traced_cpu = Vec::new();
    // Whole traced runs (the pause before the write included), and the
    // intervals spanning each write.
    let mut run_times: Vec<serde_json::Value> = Vec::new();
    let mut write_run_times: Vec<serde_json::Value> = Vec::new();
    let mut lost = 0u64;
    let mb = opts.size_mib as f64 * 1048576.0 / 1e6;
    let mut recorded = Vec::new();
    let mut peak_rss_kb = 0u64;
    let mut record_bytes = 0u64;
    let mut record_calls = 0u64;
    let rec_path = fs.dir().join("bench.rec");
    let baseline = std::env::var_os("WBSCOPE_BENCH_BASELINE").map(PathBuf::from);
    let mut baseline_run_times: Vec<serde_json::Value> = Vec::new();
    let mut baseline_rates = Vec::new();
    // Empty programs on the busiest events, a side of the rotation.
    let mut floor_runs: Vec<serde_json::Value> = Vec::new();
    let mut floor_rates = Vec::new();
    // Counting programs on the same events, another side.
    let mut counting_runs: Vec<serde_json::Value> = Vec::new();
    for pair in 0..opts.pairs {
        scratchfs::signal::check_interrupted()?;
        // Rotate which side goes first, so drift favours none.
        let mut order = vec![
            Side::Plain,
            Side::Traced,
            Side::Recorded,
            Side::Floor,
            Side::Counting,
        ];
        if baseline.is_some() {
            order.push(Side::Baseline);
        }
        let n = order.len();
        order.rotate_left(pair % n);
        for side in order {
            let _ = fs::remove_file(&file);
            let _ = fs::remove_file(&rec_path);
            // Attached before the pause, so that every side writes the same
            // time after dropping the caches: the pause length changes the
            // speed on this VM (below), and starting the tracer after it
            // (0.6 s of BTF and verifier work) made the traced and recorded
            // runs start later and slower by that alone (a `sleep`
            // started the same way cost as much as the tracer).
            let tracer = match side {
                Side::Plain => None,
                Side::Traced => Some(Tracer::start(binary)?),
                Side::Recorded => Some(Tracer::record(binary, &rec_path)?),
                Side::Floor => Some(Tracer::floor(binary, false)?),
                Side::Counting => Some(Tracer::floor(binary, true)?),
                Side::Baseline => match &baseline {
                    Some(b) => Some(Tracer::start(b)?),
                    None => None,
                },
            };
            drop_caches()?;
            // Memory just freed goes back to the hypervisor (free page
            // reporting on this VM); without a pause a run after a long
            // one starts on memory that must be faulted back first.
            std::thread::sleep(Duration::from_secs(opts.settle_secs));
            let cpu0 = tracer.as_ref().map(Tracer::cpu_secs).transpose()?;
            let write_from = tracer.as_ref().map(|t| t.attached.elapsed().as_secs_f64());
            let t = write_and_fsync(&file, opts.size_mib)?;
            let rate = mb / t.as_secs_f64();
            eprintln!("xtask: bench pair {pair}: {side:?} {rate:7.1} MB/s");
            let Some(tracer) = tracer else {
                plain.push(rate);
                continue;
            };
            if side == Side::Floor {
                floor_runs.push(tracer.stop_floor()?);
                floor_rates.push(rate);
                continue;
            }
            if side == Side::Counting {
                counting_runs.push(tracer.stop_floor()?);
                continue;
            }
            let cpu = tracer.cpu_secs()? - cpu0.unwrap_or(0.0);
            peak_rss_kb = peak_rss_kb.max(tracer.peak_rss_kb().unwrap_or(0));
            let lines = tracer.stop(binary)?;
            let summary = lines.last().context("no summary")?;
            lost += summary["lost_records"].as_u64().unwrap_or(0);
            if side == Side::Baseline {
                let from = write_from.unwrap_or(0.0);
                baseline_run_times.push(run_time_within(&lines, (from, from + t.as_secs_f64())));
                baseline_rates.push(rate);
            } else if side == Side::Recorded {
                recorded.push(rate);
                record_bytes += fs::metadata(&rec_path).map(|m| m.len()).unwrap_or(0);
                record_calls += summary["calls"].as_u64().unwrap_or(0);
            } else {
                run_times.push(summary["run_time"].clone());
                let from = write_from.unwrap_or(0.0);
                write_run_times.push(run_time_within(&lines, (from, from + t.as_secs_f64())));
                traced.push(rate);
                traced_cpu.push(100.0 * cpu / t.as_secs_f64());
            }
        }
    }
    let _ = fs::remove_file(&file);

    // Idle: attached, nothing written on purpose.
    let tracer = Tracer::start(binary)?;
    let cpu0 = tracer.cpu_secs()?;
    std::thread::sleep(Duration::from_secs(opts.idle_secs));
    let idle_cpu = 100.0 * (tracer.cpu_secs()? - cpu0) / opts.idle_secs as f64;
    tracer.stop(binary)?;

    let storm_new = storm(binary)?;
    let storm_base = baseline.as_deref().map(storm).transpose()?;

    let floor = floor_costs(binary, opts.floor_secs)?;

    let (mp, mt) = (median(&mut plain.clone()), median(&mut traced.clone()));
    let mut pair_ratios: Vec<f64> = traced.iter().zip(&plain).map(|(t, p)| t / p).collect();
    // Sorts them too: min and max are the ends.
    let ratio_median = median(&mut pair_ratios);
    let mr = median(&mut recorded.clone());
    let mut out = String::new();
    out.push_str(&format!(
        "{} MiB buffered write + fsync on a journaled ext4 loop filesystem (image with \
         O_DIRECT: {}), {} rounds of untraced / traced / recorded in rotating order, {} s \
         pause after dropping the caches before each run (tracers attached before the pause)\n\n",
        opts.size_mib,
        if fs.direct_io() {
            "yes"
        } else {
            "no, the kernel fell back"
        },
        opts.pairs,
        opts.settle_secs
    ));
    out.push_str("| | untraced MB/s | traced MB/s | recorded MB/s |\n|---|---|---|---|\n");
    for (i, ((p, t), r)) in plain.iter().zip(&traced).zip(&recorded).enumerate() {
        out.push_str(&format!("| round {i} | {p:.1} | {t:.1} | {r:.1} |\n"));
    }
    out.push_str(&format!(
        "| **median** | **{mp:.1}** | **{mt:.1}** | **{mr:.1}** |\n\n"
    ));
    out.push_str(&format!(
        "ratio of medians: traced / untraced **{:.3}**, recorded / untraced **{:.3}**; \
         median of the per-round traced / untraced ratios {:.3} (min {:.3}, max {:.3})\n\n",
        mt / mp,
        mr / mp,
        ratio_median,
        pair_ratios.first().copied().unwrap_or(f64::NAN),
        pair_ratios.last().copied().unwrap_or(f64::NAN),
    ));
    if record_calls > 0 {
        out.push_str(&format!(
            "recording size: {record_bytes} bytes for {record_calls} calls (header and \
             interval frames included): {:.0} MB per million calls\n\n",
            record_bytes as f64 / record_calls as f64
        ));
    }
    out.push_str(&format!(
        "tracer peak RSS (VmHWM) over the runs: {peak_rss_kb} kB\n\n"
    ));
    out.push_str(&format!("lost records over all traced runs: {lost}\n\n"));
    out.push_str(&format!(
        "tracer CPU: idle {idle_cpu:.2}% of one core ({}s); under writeback median {:.2}%\n\n",
        opts.idle_secs,
        median(&mut traced_cpu)
    ));
    let (writes_table, writes_avg) = run_time_table(&write_run_times);
    let (_, whole_avg) = run_time_table(&run_times);
    out.push_str(&format!(
        "BPF run time per invocation during the writes (kernel BPF statistics, from the \
         {TRACE_INTERVAL_S} s interval lines spanning each write): **{writes_avg} ns** over all \
         programs (per write: {}); over the whole traced runs, the {} s pauses before the \
         writes included: {whole_avg} ns\n\n{writes_table}\n",
        per_write_means(&write_run_times),
        opts.settle_secs
    ));
    let gib_written = opts.size_mib as f64 / 1024.0;
    let per_gib = |runs: &[serde_json::Value]| {
        ms_per_gib(all_programs(&per_program(runs)).1, runs, gib_written)
    };
    let old_per_gib =
        |runs: &[serde_json::Value]| ms_per_gib(split_by_budget(runs).0.1, runs, gib_written);
    out.push_str(&format!(
        "BPF time per GiB written (all programs, the same intervals): **{:.2} ms**\n\n",
        per_gib(&write_run_times)
    ));
    out.push_str(&budget_figures(
        &write_run_times,
        &floor_runs,
        &counting_runs,
        gib_written,
    ));
    out.push_str(&floor_comparison(
        &write_run_times,
        &floor_runs,
        &counting_runs,
        median(&mut floor_rates),
    ));
    out.push_str(&format!(
        "Context-switch storm, nothing written ({STORM_SECS} s pipe ping-pong between two \
         threads under `wbscope trace --interval 1`): {:.0} round trips/s, **{:.0} BPF \
         invocations/s** (all programs, the 1 s intervals spanning the storm)\n\n{}\n",
        storm_new.round_trips_per_s, storm_new.runs_per_s, storm_new.table
    ));
    if let (Some(path), Some(base)) = (&baseline, &storm_base) {
        let (base_table, base_avg) = run_time_table(&baseline_run_times);
        let ratio = |new: f64, old: f64| {
            if old > 0.0 {
                format!("{:.3}", new / old)
            } else {
                "-".into()
            }
        };
        let avg = |s: &str| s.parse::<f64>().unwrap_or(f64::NAN);
        out.push_str(&format!(
            "Baseline `{}` in the same run (its traced writes in the rotation above: median \
             {:.1} MB/s):\n\n| figure | this build | baseline | ratio |\n|---|---|---|---|\n\
             | BPF ns per invocation during the writes | {writes_avg} | {base_avg} | {} |\n\
             | BPF ms per GiB written | {:.2} | {:.2} | {} |\n\
             | the same, the budget's programs (before the dirtier's and generic calls') | {:.2} | {:.2} | {} |\n\
             | BPF invocations/s, context-switch storm | {:.0} | {:.0} | {} |\n\
             | storm round trips/s | {:.0} | {:.0} | {} |\n\n\
             Baseline per program during the writes:\n\n{base_table}\n\
             Baseline during the storm:\n\n{}\n",
            path.display(),
            median(&mut baseline_rates.clone()),
            ratio(avg(&writes_avg), avg(&base_avg)),
            per_gib(&write_run_times),
            per_gib(&baseline_run_times),
            ratio(per_gib(&write_run_times), per_gib(&baseline_run_times)),
            old_per_gib(&write_run_times),
            old_per_gib(&baseline_run_times),
            ratio(
                old_per_gib(&write_run_times),
                old_per_gib(&baseline_run_times)
            ),
            storm_new.runs_per_s,
            base.runs_per_s,
            ratio(storm_new.runs_per_s, base.runs_per_s),
            storm_new.round_trips_per_s,
            base.round_trips_per_s,
            ratio(storm_new.round_trips_per_s, base.round_trips_per_s),
            base.table,
        ));
    }
    out.push_str(&format!(
        "The floor of this machine, measured right after (`wbscope probes --cost {}`, \
         idle):\n\n| calibration program | invocations | avg ns |\n|---|---|---|\n",
        opts.floor_secs
    ));
    for f in floor.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "| {} ({}) | {} | {:.0} |\n",
            f["program"].as_str().unwrap_or("?"),
            f["does"].as_str().unwrap_or("?"),
            f["invocations"].as_u64().unwrap_or(0),
            f["avg_ns"].as_f64().unwrap_or(f64::NAN)
        ));
    }
    Ok(out)
}

/// `wbscope probes --cost SECS --json`: the per-program floor.
fn floor_costs(binary: &Path, secs: u64) -> anyhow::Result<serde_json::Value> {
    let out = Command::new(binary)
        .args(["probes", "--cost", &secs.to_string(), "--json"])
        .output()
        .context("running wbscope probes --cost")?;
    if !out.status.success() {
        bail!(
            "wbscope probes --cost failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("probes --cost output")
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_interval_takes_the_sign_test_ranks() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        // n = 10: P(X ≤ 1) = 11/1024 ≤ 0.025 < P(X ≤ 2) = 56/1024.
        assert_eq!(super::median_interval(&v), Some((2.0, 9.0)));
        let six: Vec<f64> = (1..=6).map(f64::from).collect();
        assert_eq!(super::median_interval(&six), Some((1.0, 6.0)));
        assert_eq!(super::median_interval(&six[..5]), None);
        // n = 40: P(X ≤ 13) = 0.0192 ≤ 0.025 < P(X ≤ 14) = 0.0403.
        let forty: Vec<f64> = (1..=40).map(f64::from).collect();
        assert_eq!(super::median_interval(&forty), Some((14.0, 27.0)));
        // Past where ½ⁿ underflows, still the ranks about n/2 ∓ 1.96·√n/2.
        let big: Vec<f64> = (1..=2000).map(f64::from).collect();
        let (lo, hi) = super::median_interval(&big).unwrap();
        assert!(
            (955.0..=960.0).contains(&lo) && hi == 2001.0 - lo,
            "{lo} {hi}"
        );
    }

    use super::*;

    fn interval(time_s: f64, count: u64, ns: u64) -> serde_json::Value {
        serde_json::json!({
            "type": "interval", "time_s": time_s, "interval_s": 0.25,
            "run_time": [{"program": "p", "run_count": count, "run_time_ns": ns}],
        })
    }

    /// Only the intervals overlapping the write count; the summary line and
    /// the idle intervals around the write do not.
    #[test]
    fn run_time_of_the_intervals_spanning_a_write() {
        let lines = vec![
            interval(0.25, 1000, 1_000_000),
            interval(0.5, 10, 1000),
            interval(0.75, 20, 3000),
            interval(1.0, 1000, 1_000_000),
            serde_json::json!({"type": "summary", "run_time": [
                {"program": "p", "run_count": 2030, "run_time_ns": 2_004_000}]}),
        ];
        let within = run_time_within(&lines, (0.3, 0.7));
        let (table, avg) = run_time_table(&[within]);
        assert_eq!(avg, "133");
        assert!(table.contains("| p | 30 | 133 |"), "{table}");
    }
}
