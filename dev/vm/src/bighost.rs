//! `cargo xtask vm-test --big-host`: wbscope on a host of many possible
//! CPUs under a load of many cgroups and files, in guests of one online
//! vCPU of 64 and of 128 possible by default (2 and 16 on request, to
//! read them against; TCG: two vCPUs once livelocked a
//! guest, qemu.rs) and 2 GiB. The guest side is checks.sh's `bighost`
//! group, which these guests run alone; here its files are judged:
//!
//! - `bighost-map-memory`: the maps' memory `wbscope probes` stated
//!   before loading equals, map by map, what the kernel reports of them
//!   loaded (checks.rs `map_memory`), at the guest's possible CPUs, and
//!   within the plan's bound;
//! - `bighost-pages`: every page of the load's files is in wbscope's
//!   call records exactly once;
//! - `bighost-throttle`: wbscope's balance_dirty_pages events and pauses
//!   are those a tracefs histogram (or, without histograms, a trace
//!   buffer) counted;
//! - `bighost-overflow`: the summary's overflow counters, and whether
//!   they explain a wrong figure;
//! - `bighost-cost`: wbscope's RSS and CPU time per interval, idle and
//!   busy (a report, not a limit).
use std::{
    collections::{BTreeSet, HashMap},
    io::BufReader,
    path::Path,
    process::Stdio,
    time::Duration,
};

use anyhow::Context as _;
use serde_json::Value;
use wbscope_programs as programs;

use crate::{
    checks::{self, Check, exit_reason},
    kernel_counts::{EXT4_CALL_PROGRAMS, skipped_runs},
    qemu::GuestPlan,
};

/// `--kernel`'s default with `--big-host`.
pub(crate) const DEFAULT_KERNEL: &str = "6.12";

/// The load checks.sh's `bighost` group makes, passed in /vm.env.
pub(crate) struct Load {
    /// Memory cgroups, one writer process each.
    pub(crate) writers: u32,
    /// Files of one page each writer writes.
    pub(crate) files: u32,
    /// Cgroups whose writer balance_dirty_pages() is to pause.
    pub(crate) throttled: u32,
    /// What each throttled writer writes, MiB.
    pub(crate) throttled_mib: u32,
    /// The throttled cgroups' memory.high, MiB: their dirty domain
    /// (mem_cgroup_wb_stats(), mm/memcontrol.c, takes the lower of
    /// memory.high and memory.max as the room the memcg has).
    pub(crate) high_mib: u32,
    /// The throttled cgroups' io.max `wbps` on the test disk, bytes/s:
    /// without it a memcg's own writeback can keep its dirty pages under
    /// the free-run ceiling (cg-doctor's step in checks.sh says why).
    pub(crate) wbps: u64,
    /// Seconds of the idle reading.
    pub(crate) idle_secs: u32,
    /// The guest's limit on the sync, seconds: past it the trace is
    /// stopped and saved with the sync still running
    /// (bighost-sync-unfinished), so that a slow kernel still leaves its
    /// figures.
    pub(crate) sync_secs: u32,
}

impl Load {
    /// Its lines of /vm.env.
    pub(crate) fn env(&self) -> String {
        format!(
            "BH_WRITERS={}\nBH_FILES={}\nBH_THROTTLED={}\nBH_THROTTLED_MIB={}\n\
             BH_HIGH_MIB={}\nBH_WBPS={}\nBH_IDLE={}\nBH_SYNC_SECS={}\n\
             export BH_WRITERS BH_FILES BH_THROTTLED BH_THROTTLED_MIB BH_HIGH_MIB BH_WBPS \
             BH_IDLE BH_SYNC_SECS\n",
            self.writers,
            self.files,
            self.throttled,
            self.throttled_mib,
            self.high_mib,
            self.wbps,
            self.idle_secs,
            self.sync_secs
        )
    }

    /// The one-page files: `writers * files`.
    fn small_files(&self) -> u64 {
        u64::from(self.writers) * u64::from(self.files)
    }

    /// Pages of each throttled writer's file.
    fn throttled_pages(&self) -> i64 {
        i64::from(self.throttled_mib) * ((1 << 20) / PAGE_BYTES)
    }
}

/// 10 cgroups of 8 MiB memory.high and 4 MiB/s of writeback writing
/// 32 MiB each, which their memcg's dirty limit throttles; then 1,000
/// memory cgroups x 100 one-page files: 100,000 inodes dirty at once
/// (400 MiB, under the guest's dirty limits, checks.sh) until the sync.
pub(crate) const LOAD: Load = Load {
    writers: 1000,
    files: 100,
    throttled: 10,
    throttled_mib: 32,
    high_mib: 8,
    wbps: 4 << 20,
    // A minute: wbscope drains at most every half second while quiet and
    // reads once a second, and under TCG one such wake-up is a large
    // share of a few seconds' CPU.
    idle_secs: 60,
    // 6.12's and 5.10's syncs of the 100,000 files took 500-540 s under
    // TCG here.
    sync_secs: 1800,
};

/// The guest's limit on its one `wbscope trace` (TRACE_TIMEOUT), which
/// runs from the idle reading to the end of the load.
pub(crate) const GUEST_TRACE_SECS: u64 = 7200;

/// The host's limit on one guest step (checks.sh's `step` lines: the
/// probes, the setup, each wave of 100 writers, the throttled writers,
/// the sync, stopping wbscope, compressing its output).
const HOST_STEP_SECS: u64 = 1800;

/// The guests: 2 GiB of memory (the dirty pages, 100,000 inodes in
/// cache and 1,000 memory cgroups, whose per-CPU statistics grow with
/// the possible CPUs); a 2 GiB sparse disk, whose ext4 has 131,072
/// inodes (mke2fs.conf's inode_ratio 16384) for the 101,000 files and
/// directories and room for the 720 MiB written.
///
/// 2 and 16 possible CPUs are there to read the larger ones against: under
/// TCG every instruction is emulated, so the growth from 2 to 128 possible
/// CPUs in one run, on one kernel, is what says how the reading scales,
/// not a guest's figure beside the host's.
pub(crate) const PLANS: [GuestPlan; 4] = [
    plan("bighost2", 2),
    plan("bighost16", 16),
    plan("bighost64", 64),
    plan("bighost128", 128),
];

/// `--cpus`' default: the sizes of the issue's fleet (64 and 128).
pub(crate) const DEFAULT_CPUS: [u32; 2] = [64, 128];

/// The plans for `--cpus`, in the order given; an error names the counts
/// there are plans for.
pub(crate) fn plans(cpus: &[u32]) -> anyhow::Result<Vec<&'static GuestPlan>> {
    let mut chosen: Vec<&'static GuestPlan> = Vec::new();
    for &n in cpus {
        let Some(plan) = PLANS.iter().find(|p| p.max_cpus == n) else {
            let known: Vec<String> = PLANS.iter().map(|p| p.max_cpus.to_string()).collect();
            anyhow::bail!(
                "--cpus {n}: no big-host guest of {n} possible CPUs (there are: {})",
                known.join(", ")
            );
        };
        if !chosen.iter().any(|p| p.max_cpus == n) {
            chosen.push(plan);
        }
    }
    Ok(chosen)
}

const fn plan(kind: &'static str, max_cpus: u32) -> GuestPlan {
    GuestPlan {
        kind,
        disk_bytes: 2 << 30,
        step_limit: Duration::from_secs(HOST_STEP_SECS),
        max_cpus,
        memory_mib: 2048,
    }
}

/// Page size of the guests (x86_64).
const PAGE_BYTES: i64 = 4096;

/// Clock ticks per second of /proc/PID/stat's utime and stime: USER_HZ,
/// 100 on x86 (arch/x86/include/asm/param.h via
/// include/asm-generic/param.h); the guest has no getconf to ask.
const USER_HZ: f64 = 100.0;

/// The program that counts balance_dirty_pages events (writeback-ebpf
/// flusher.rs, the plan's only throttling program).
const THROTTLE_PROGRAM: &str = "balance_dirty";

/// The call causes of trace-json.md, for the pages' breakdown.
const CAUSES: &[&str] = &[
    "sync",
    "periodic",
    "background",
    "flusher_other",
    "direct",
    "uncached",
    "unknown",
];

/// All checks, from the files in `out`; `max_cpus` is the guest's.
pub(crate) fn judge(out: &Path, max_cpus: u32) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let probes = parse_probes(
        &read("bighost-probes.json"),
        &read("bighost-probes.rc"),
        &read("bighost-probes.err"),
    );
    let mut out_checks = vec![map_memory(&probes, max_cpus, &read("bighost-possible"))];
    let trace = Trace::read(
        &out.join("bighost-trace.jsonl.gz"),
        &read("bighost-trace.rc"),
        &read("bighost-trace.err"),
    );
    let files = TestFiles::parse(&read("bighost-files"), &read("bighost-dev"));
    let bdp_trace = out.join("bighost-bdp.trace.gz");
    let hist = if read("bighost-hist").contains("Totals:") || !bdp_trace.exists() {
        Hist::parse(&read("bighost-hist"))
    } else {
        match gunzip(&bdp_trace) {
            Ok(text) => Hist::from_trace(&text, &read("bighost-bdp.stats")),
            Err(e) => Hist {
                missing: true,
                source: "trace buffer",
                error: Some(format!("{e:#}")),
                ..Hist::default()
            },
        }
    };
    let version = read("bighost-kernel-version");
    let mut pages = pages(&trace, &files, &LOAD, version.trim());
    if let Some(dirty) = dirty_before_sync(&read("bighost-meminfo")) {
        pages
            .detail
            .push_str(&format!("; Dirty before the sync {dirty} kB"));
    }
    let unfinished = read("bighost-sync-unfinished");
    if !unfinished.trim().is_empty() {
        pages.pass = false;
        pages.detail.push_str(&format!("; {}", unfinished.trim()));
    }
    let throttle = throttle(&trace, &hist, version.trim());
    let overflow = overflow(&trace, pages.pass && throttle.pass);
    out_checks.extend([pages, throttle, overflow]);
    out_checks.push(cost(
        &Samples::parse(&read("bighost-samples")),
        &read("bighost-times"),
    ));
    out_checks
}

/// `wbscope probes --json`, or why there is none.
fn parse_probes(json: &str, rc: &str, stderr: &str) -> Result<Value, String> {
    if rc.trim() != "0" {
        return Err(exit_reason("wbscope probes", rc, stderr));
    }
    serde_json::from_str(json).map_err(|e| format!("wbscope probes --json: {e}"))
}

/// checks.rs's `map_memory` under this check's name, and the memory
/// statement's CPUs (the guest's possible ones, `possible` as the guest
/// read it) and bound.
fn map_memory(probes: &Result<Value, String>, max_cpus: u32, possible: &str) -> Check {
    const NAME: &str = "bighost-map-memory";
    let maps = checks::map_memory(probes);
    let Ok(probes) = probes else {
        return Check::new(NAME, false, maps.detail);
    };
    let memory = &probes["memory"];
    let cpus = memory["possible_cpus"].as_u64();
    let total = memory["total_bytes"].as_u64();
    let bound = memory["bound_bytes"].as_u64();
    let cpus_ok = cpus == Some(u64::from(max_cpus));
    let bound_ok = matches!((total, bound), (Some(t), Some(b)) if t <= b);
    let show = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    Check::new(
        NAME,
        maps.pass && cpus_ok && bound_ok,
        format!(
            "{}; possible_cpus {} (guest maxcpus {max_cpus}, /sys/devices/system/cpu/possible \
             {}); total {} of bound {} bytes",
            maps.detail,
            show(cpus),
            possible.trim(),
            show(total),
            show(bound)
        ),
    )
}

/// What one file's calls wrote.
#[derive(Debug, Default, Clone)]
struct Written {
    pages: i64,
    calls: u32,
    /// Pages by the call's cause, in [`CAUSES`]' order, the last slot
    /// for any other.
    by_cause: [i64; 8],
}

/// The trace's figures, read line by line (with `--events` it is a line
/// per writepages call, 100,000 and more).
#[derive(Debug, Default)]
struct Trace {
    /// By `(major:minor, ino)`.
    files: HashMap<(String, u64), Written>,
    call_lines: u64,
    intervals: u64,
    /// Sums over the interval lines' `throttle`.
    throttle_events: u64,
    throttle_pauses: u64,
    summary: Value,
}

impl Trace {
    /// The gzipped JSON lines at `gz`, or why the run is unusable.
    fn read(gz: &Path, rc: &str, stderr: &str) -> Result<Trace, String> {
        if rc.trim() != "0" {
            return Err(exit_reason("wbscope trace", rc, stderr));
        }
        Self::read_gz(gz).map_err(|e| format!("{e:#}"))
    }

    fn read_gz(gz: &Path) -> anyhow::Result<Trace> {
        let mut child = gunzip_command(gz)
            .spawn()
            .with_context(|| format!("running {} gzip -dc", programs::BUSYBOX.name))?;
        let stdout = child.stdout.take().context("gzip's stdout")?;
        let parsed = Self::parse(BufReader::new(stdout));
        let output = child.wait_with_output().context("waiting for gzip")?;
        if !output.status.success() {
            anyhow::bail!(
                "gzip -dc {}: {}: {}",
                gz.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        parsed
    }

    fn parse(reader: impl std::io::BufRead) -> anyhow::Result<Trace> {
        let mut trace = Trace::default();
        let mut last_type = String::new();
        for line in reader.lines() {
            let line = line.context("reading the trace")?;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value =
                serde_json::from_str(&line).with_context(|| format!("unparsable line: {line}"))?;
            last_type = v["type"].as_str().unwrap_or("").to_string();
            match last_type.as_str() {
                "call" => {
                    trace.call_lines += 1;
                    let key = (
                        v["dev"].as_str().unwrap_or("").to_string(),
                        v["ino"].as_u64().unwrap_or(0),
                    );
                    let pages = v["pages_written"].as_i64().unwrap_or(0);
                    let w = trace.files.entry(key).or_default();
                    w.pages += pages;
                    w.calls += 1;
                    let cause = v["cause"].as_str().unwrap_or("");
                    let slot = CAUSES
                        .iter()
                        .position(|c| *c == cause)
                        .unwrap_or(CAUSES.len());
                    w.by_cause[slot] += pages;
                }
                "interval" => {
                    trace.intervals += 1;
                    trace.throttle_events += v["throttle"]["events"].as_u64().unwrap_or(0);
                    trace.throttle_pauses += v["throttle"]["pauses"].as_u64().unwrap_or(0);
                }
                "summary" => trace.summary = v,
                _ => {}
            }
        }
        if last_type != "summary" {
            anyhow::bail!("no summary line at the end of the trace");
        }
        Ok(trace)
    }

    fn summary_u64(&self, key: &str) -> u64 {
        self.summary[key].as_u64().unwrap_or(0)
    }

    /// Runs of the programs `of` names that the kernel skipped
    /// (`recursion_misses`, kernel_counts.rs).
    fn skipped(&self, of: &dyn Fn(&str) -> bool) -> u64 {
        skipped_runs(Some(&self.summary), of)
    }
}

/// What the detail says of runs the kernel skipped: a run of a program
/// that finds a run of its own (or, for kprobes, of any, with the bpf()
/// syscall's map reads) under way on its CPU is skipped and counted, and
/// with one CPU that takes a run preempted halfway (docs/toolchain.md,
/// "PREEMPT_RT"); `version` is the guest's `uname -v`, which names the
/// preemption model.
fn skipped_note(what: &str, skipped: u64, version: &str) -> String {
    format!(
        "the kernel skipped {skipped} runs of {what} (recursion_misses: a run already under way \
         on the CPU, preempted; kernel {version:?})"
    )
}

/// `busybox gzip -dc FILE`, its output piped: busybox gzip (the guest's
/// own) reads what it wrote; the host's gzip is not among the harness'
/// programs.
fn gunzip_command(gz: &Path) -> std::process::Command {
    let mut cmd = programs::BUSYBOX.command();
    cmd.args(["gzip", "-dc"])
        .arg(gz)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The text of a small gzipped file.
fn gunzip(gz: &Path) -> anyhow::Result<String> {
    let output = gunzip_command(gz)
        .output()
        .with_context(|| format!("running {} gzip -dc", programs::BUSYBOX.name))?;
    if !output.status.success() {
        anyhow::bail!(
            "gzip -dc {}: {}: {}",
            gz.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The load's files as `ls -iR` listed them: inode by path under the
/// test filesystem, and its device.
#[derive(Debug, Default)]
struct TestFiles {
    dev: String,
    /// `w3/f17` or `t2/big` → inode.
    inodes: HashMap<String, u64>,
}

impl TestFiles {
    /// busybox `ls -iR DIR`: a `DIR/sub:` line before each directory's
    /// entries, each `INODE NAME`.
    fn parse(listing: &str, dev: &str) -> TestFiles {
        let mut files = TestFiles {
            dev: dev.trim().to_string(),
            ..TestFiles::default()
        };
        let mut dir = String::new();
        for line in listing.lines() {
            let line = line.trim();
            if let Some(d) = line.strip_suffix(':') {
                dir = d.rsplit('/').next().unwrap_or("").to_string();
                continue;
            }
            let mut it = line.split_whitespace();
            if let (Some(ino), Some(name), None) = (it.next(), it.next(), it.next())
                && let Ok(ino) = ino.parse::<u64>()
            {
                files.inodes.insert(format!("{dir}/{name}"), ino);
            }
        }
        files
    }

    fn written<'a>(&self, trace: &'a Trace, path: &str) -> Option<Option<&'a Written>> {
        let ino = *self.inodes.get(path)?;
        Some(trace.files.get(&(self.dev.clone(), ino)))
    }
}

/// Every one-page file's page counted once, and every throttled file's
/// pages, in the call records.
fn pages(trace: &Result<Trace, String>, files: &TestFiles, load: &Load, version: &str) -> Check {
    const NAME: &str = "bighost-pages";
    let trace = match trace {
        Ok(t) => t,
        Err(why) => return Check::new(NAME, false, why.clone()),
    };
    let mut unlisted = 0u64;
    let mut once = 0u64;
    let mut never = 0u64;
    let mut wrong: Vec<String> = Vec::new();
    let mut small_pages = 0i64;
    let mut by_cause = [0i64; 8];
    for w in 1..=load.writers {
        for f in 0..load.files {
            let path = format!("w{w}/f{f}");
            match files.written(trace, &path) {
                None => unlisted += 1,
                Some(None) => never += 1,
                Some(Some(written)) => {
                    small_pages += written.pages;
                    for (sum, p) in by_cause.iter_mut().zip(written.by_cause) {
                        *sum += p;
                    }
                    if written.pages == 1 {
                        once += 1;
                    } else {
                        wrong.push(format!(
                            "{path} {} pages in {} calls",
                            written.pages, written.calls
                        ));
                    }
                }
            }
        }
    }
    let small_wrong = wrong.len();
    let mut throttled_ok = 0u32;
    for t in 1..=load.throttled {
        let path = format!("t{t}/big");
        match files.written(trace, &path) {
            None => unlisted += 1,
            Some(None) => wrong.push(format!("{path} never written")),
            Some(Some(w)) if w.pages == load.throttled_pages() => throttled_ok += 1,
            Some(Some(w)) => wrong.push(format!(
                "{path} {} pages in {} calls (want {})",
                w.pages,
                w.calls,
                load.throttled_pages()
            )),
        }
    }
    // Every call counted was printed: the pages above are all there are
    // (printed = calls - calls_not_written - calls_sampled_out,
    // trace-json.md).
    let printed = trace.summary_u64("calls").saturating_sub(
        trace.summary_u64("calls_not_written") + trace.summary_u64("calls_sampled_out"),
    );
    let expected = load.small_files();
    let pass = unlisted == 0
        && once == expected
        && never == 0
        && wrong.is_empty()
        && small_pages == expected as i64
        && throttled_ok == load.throttled
        && printed == trace.call_lines;
    let causes: Vec<String> = by_cause
        .iter()
        .enumerate()
        .filter(|(_, p)| **p != 0)
        .map(|(i, p)| format!("{} {p}", CAUSES.get(i).unwrap_or(&"other")))
        .collect();
    let mut detail = format!(
        "{once} of {expected} one-page files written once ({small_pages} pages; {never} never, \
         {} otherwise, {unlisted} of the load's files not listed); {throttled_ok} of {} \
         throttled files all {} pages; the one-page files' pages by cause: {}; {} call lines \
         of {} counted calls on {}",
        small_wrong,
        load.throttled,
        load.throttled_pages(),
        if causes.is_empty() {
            "none".to_string()
        } else {
            causes.join(", ")
        },
        trace.call_lines,
        trace.summary_u64("calls"),
        if files.dev.is_empty() {
            "no device"
        } else {
            &files.dev
        }
    );
    if !wrong.is_empty() {
        detail.push_str(&format!(
            "; first wrong: {}",
            wrong.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    // Not allowed for: the check is that every page is in the records.
    let skipped = trace.skipped(&|p| EXT4_CALL_PROGRAMS.contains(&p));
    if skipped > 0 {
        detail.push_str(&format!(
            "; {}; {} calls ended with no start seen",
            skipped_note("the ext4 call programs", skipped, version),
            trace.summary_u64("unmatched_results")
        ));
    }
    Check::new(NAME, pass, detail)
}

/// /proc/meminfo's Dirty after the writers (checks.sh
/// `bighost_meminfo writers`): the load's pages still dirty for the sync.
fn dirty_before_sync(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("writers Dirty:")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The independent count of `writeback:balance_dirty_pages` (checks.sh):
/// events, and pauses (`pause` > 0), from a tracefs histogram keyed by
/// `common_pid,pause`, or from a trace instance's buffer where the kernel
/// has no histograms.
#[derive(Debug, Default, PartialEq, Eq)]
struct Hist {
    /// Nothing was read.
    missing: bool,
    /// `histogram` or `trace buffer`.
    source: &'static str,
    /// Why the count is missing, when known.
    error: Option<String>,
    events: u64,
    pauses: u64,
    /// Processes with a pause.
    paused_pids: usize,
    /// The histogram's own totals: `Hits` (every event) and `Dropped`
    /// (events its map had no room for).
    hits: Option<u64>,
    dropped: Option<u64>,
}

impl Hist {
    /// Lines like `{ common_pid:        312, pause:         40 } hitcount:
    /// 5` and the `Totals:` block. Keys print unsigned
    /// (hist_trigger_print_key(), kernel/trace/trace_events_hist.c): a
    /// negative `pause` reads as its two's complement.
    fn parse(text: &str) -> Hist {
        let number_after = |line: &str, key: &str| -> Option<u64> {
            let at = line.find(key)? + key.len();
            line[at..]
                .trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        };
        let mut hist = Hist {
            missing: !text.contains("Totals:"),
            source: "histogram",
            ..Hist::default()
        };
        let mut paused = BTreeSet::new();
        for line in text.lines() {
            if line.trim_start().starts_with('{') {
                let count = number_after(line, "hitcount:").unwrap_or(0);
                // `pause` is a long: the key's u64 reinterpreted.
                let pause = number_after(line, "pause:").map_or(0, |p| p as i64);
                hist.events += count;
                if pause > 0 {
                    hist.pauses += count;
                    if let Some(pid) = number_after(line, "common_pid:") {
                        paused.insert(pid);
                    }
                }
            } else if let Some(n) = number_after(line, "Hits:") {
                hist.hits = Some(n);
            } else if let Some(n) = number_after(line, "Dropped:") {
                hist.dropped = Some(n);
            }
        }
        hist.paused_pids = paused.len();
        hist
    }

    /// The events of a trace buffer, lines like `  dd-312  [000] .....
    /// 12.5: balance_dirty_pages: bdi 254:0: limit=… pause=40 period=…`,
    /// and its per-CPU `stats`, whose `overrun`, `commit overrun` and
    /// `dropped events` are the events it lost.
    fn from_trace(text: &str, stats: &str) -> Hist {
        let mut hist = Hist {
            source: "trace buffer",
            ..Hist::default()
        };
        let mut paused = BTreeSet::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some(at) = line.find(" balance_dirty_pages: ") else {
                continue;
            };
            hist.events += 1;
            let pause = line[at..]
                .split_whitespace()
                .find_map(|w| w.strip_prefix("pause="))
                .and_then(|p| p.parse::<i64>().ok())
                .unwrap_or(0);
            if pause > 0 {
                hist.pauses += 1;
                let task = line[..at].split('[').next().unwrap_or("").trim();
                if let Some((_, pid)) = task.rsplit_once('-') {
                    paused.insert(pid.to_string());
                }
            }
        }
        hist.paused_pids = paused.len();
        hist.hits = Some(hist.events);
        hist.dropped = Some(
            stats
                .lines()
                .filter_map(|l| {
                    let (key, value) = l.split_once(':')?;
                    let key = key.trim();
                    (key.ends_with("overrun") || key == "dropped events")
                        .then(|| value.trim().parse::<u64>().ok())?
                })
                .sum(),
        );
        hist
    }
}

/// wbscope's balance_dirty_pages events and pauses over the run are the
/// histogram's; or fewer by exactly the runs of its program the kernel
/// skipped and counted (the events; a skipped run's pause is unknown, so
/// the pauses are short by at most as many), which the detail says.
fn throttle(trace: &Result<Trace, String>, hist: &Hist, version: &str) -> Check {
    const NAME: &str = "bighost-throttle";
    let trace = match trace {
        Ok(t) => t,
        Err(why) => return Check::new(NAME, false, why.clone()),
    };
    if hist.missing {
        return Check::new(
            NAME,
            false,
            format!(
                "no tracefs count was read: {}",
                hist.error.as_deref().unwrap_or("bighost-hist.err says why")
            ),
        );
    }
    let detail = format!(
        "wbscope {} events, {} pauses over {} intervals; tracefs {} {} events \
         (Hits {}), {} pauses by {} processes, {} dropped",
        trace.throttle_events,
        trace.throttle_pauses,
        trace.intervals,
        hist.source,
        hist.events,
        hist.hits.map_or("?".into(), |h| h.to_string()),
        hist.pauses,
        hist.paused_pids,
        hist.dropped.map_or("?".into(), |d| d.to_string()),
    );
    if hist.pauses == 0 {
        return Check::new(
            NAME,
            false,
            format!("{detail}: nothing was paused, so nothing was compared"),
        );
    }
    let skipped = trace.skipped(&|p| p == THROTTLE_PROGRAM);
    let exact = trace.throttle_events == hist.events && trace.throttle_pauses == hist.pauses;
    let accounted = trace.throttle_events + skipped == hist.events
        && trace.throttle_pauses <= hist.pauses
        && hist.pauses - trace.throttle_pauses <= skipped;
    let pass = hist.dropped == Some(0) && hist.hits == Some(hist.events) && (exact || accounted);
    let detail = if exact {
        format!("{detail}: exact")
    } else if accounted {
        format!(
            "{detail}: not exact, short by {} events and {} pauses; {}, which is the events' \
             difference exactly",
            hist.events - trace.throttle_events,
            hist.pauses - trace.throttle_pauses,
            skipped_note(THROTTLE_PROGRAM, skipped, version)
        )
    } else {
        format!(
            "{detail}: different; {}",
            skipped_note(THROTTLE_PROGRAM, skipped, version)
        )
    };
    Check::new(NAME, pass, detail)
}

/// The summary's overflow counters; a failure when one is not zero and
/// the pages or pauses came out wrong (it would explain them: the
/// capacity was short), a pass with their values otherwise.
fn overflow(trace: &Result<Trace, String>, figures_ok: bool) -> Check {
    const NAME: &str = "bighost-overflow";
    let trace = match trace {
        Ok(t) => t,
        Err(why) => return Check::new(NAME, false, why.clone()),
    };
    let counters = [
        "map_full",
        "inflight_full",
        "lost_records",
        "lost_dirtyings",
    ];
    let values: Vec<(&str, u64)> = counters
        .iter()
        .map(|c| (*c, trace.summary_u64(c)))
        .collect();
    let any = values.iter().any(|(_, v)| *v != 0);
    let shown: Vec<String> = values.iter().map(|(c, v)| format!("{c} {v}")).collect();
    let others = format!(
        "unmatched_results {}, bad_records {}, calls_not_written {}",
        trace.summary_u64("unmatched_results"),
        trace.summary_u64("bad_records"),
        trace.summary_u64("calls_not_written")
    );
    let verdict = match (any, figures_ok) {
        (false, _) => "none overflowed",
        (true, true) => "an overflow the pages and pauses above did not feel",
        (true, false) => "an overflow beside wrong figures",
    };
    Check::new(
        NAME,
        !any || figures_ok,
        format!("{}; {others}: {verdict}", shown.join(", ")),
    )
}

/// One line of bighost-samples: `PHASE UPTIME UTIME STIME RSS_KB HWM_KB
/// DIRTY_KB WRITEBACK_KB [RUN_NS]` (dirty and writeback the guest's, not
/// wbscope's; RUN_NS /proc/PID/schedstat's, `-` or absent without it).
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    phase: String,
    uptime_s: f64,
    ticks: u64,
    /// Time on a CPU, ns: exact where the ticks are a sample of which
    /// task ran at each tick (about 9 counts over 9 s of an idle trace
    /// under TCG, so ±3 by chance alone).
    run_ns: Option<u64>,
    rss_kib: Option<u64>,
    hwm_kib: Option<u64>,
}

impl Sample {
    /// CPU seconds since `earlier`: the scheduler's run time where both
    /// have it, else the ticks.
    fn cpu_since(&self, earlier: &Sample) -> f64 {
        match (earlier.run_ns, self.run_ns) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e9,
            _ => self.ticks.saturating_sub(earlier.ticks) as f64 / USER_HZ,
        }
    }
}

#[derive(Debug, Default)]
struct Samples(Vec<Sample>);

/// The phases of the busy load (checks.sh `bighost_phase`).
const BUSY: &[&str] = &["writers", "throttled", "sync", "drain"];

impl Samples {
    fn parse(text: &str) -> Samples {
        Samples(
            text.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let ([phase, up, utime, stime, rss, hwm, _dirty, _writeback]
                    | [phase, up, utime, stime, rss, hwm, _dirty, _writeback, _]) = f.as_slice()
                    else {
                        return None;
                    };
                    Some(Sample {
                        phase: (*phase).to_string(),
                        uptime_s: up.parse().ok()?,
                        ticks: utime.parse::<u64>().ok()? + stime.parse::<u64>().ok()?,
                        run_ns: f.get(8).and_then(|r| r.parse().ok()),
                        rss_kib: rss.parse().ok(),
                        hwm_kib: hwm.parse().ok(),
                    })
                })
                .collect(),
        )
    }

    /// Over the samples of `phases`: CPU seconds per second (per 1-s
    /// interval: the scheduler's run time where both ends have it, else
    /// the ticks), the span in seconds, and the largest RSS in KiB; None
    /// with fewer than two samples.
    fn over(&self, phases: &[&str]) -> Option<(f64, f64, u64)> {
        let of: Vec<&Sample> = self
            .0
            .iter()
            .filter(|s| phases.contains(&s.phase.as_str()))
            .collect();
        let (first, last) = (of.first()?, of.last()?);
        let span = last.uptime_s - first.uptime_s;
        if of.len() < 2 || span <= 0.0 {
            return None;
        }
        let cpu = last.cpu_since(first);
        let rss = of.iter().filter_map(|s| s.rss_kib).max()?;
        Some((cpu / span, span, rss))
    }
}

/// wbscope's cost, as the detail: CPU per interval and RSS, idle and
/// busy, and its peak RSS; passes when both phases were sampled.
fn cost(samples: &Samples, times: &str) -> Check {
    const NAME: &str = "bighost-cost";
    let mib = |kib: u64| kib as f64 / 1024.0;
    let phase = |name: &str, phases: &[&str]| match samples.over(phases) {
        Some((cpu, span, rss)) => format!(
            "{name}: {cpu:.4} CPU s per 1-s interval over {span:.0} s, RSS max {:.1} MiB",
            mib(rss)
        ),
        None => format!("{name}: not sampled"),
    };
    let hwm = samples.0.iter().filter_map(|s| s.hwm_kib).max();
    let total_cpu = match (samples.0.first(), samples.0.last()) {
        (Some(a), Some(b)) => b.cpu_since(a),
        _ => 0.0,
    };
    let times: Vec<String> = times
        .lines()
        .filter_map(|l| {
            let (what, ms) = l.split_once(' ')?;
            let ms: f64 = ms.trim().parse().ok()?;
            Some(format!("{what} {:.0} s", ms / 1000.0))
        })
        .collect();
    Check::new(
        NAME,
        samples.over(&["idle"]).is_some() && samples.over(BUSY).is_some(),
        format!(
            "{}; {}; VmHWM {}; {total_cpu:.1} CPU s sampled in all ({} samples; {}); guest \
             times: {}",
            phase("idle", &["idle"]),
            phase("busy", BUSY),
            hwm.map_or("?".to_string(), |h| format!("{:.1} MiB", mib(h))),
            samples.0.len(),
            if samples.0.iter().all(|s| s.run_ns.is_some()) {
                "run time from /proc/PID/schedstat"
            } else {
                "utime+stime at USER_HZ 100"
            },
            if times.is_empty() {
                "none".to_string()
            } else {
                times.join(", ")
            }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ino: u64, pages: i64, cause: &str) -> String {
        format!(
            r#"{{"type":"call","dev":"254:0","ino":{ino},"pages_written":{pages},"cause":"{cause}"}}"#
        )
    }

    fn interval(events: u64, pauses: u64) -> String {
        format!(
            r#"{{"type":"interval","throttle":{{"events":{events},"pauses":{pauses},"paused":[]}}}}"#
        )
    }

    const SUMMARY: &str = r#"{"type":"summary","calls":5,"calls_not_written":0,"lost_records":0,"map_full":0,"inflight_full":0,"lost_dirtyings":0}"#;

    const SMALL: Load = Load {
        writers: 2,
        files: 2,
        throttled: 1,
        throttled_mib: 1,
        high_mib: 8,
        wbps: 1,
        idle_secs: 1,
        sync_secs: 1,
    };

    fn listing() -> String {
        "/tmp/mnt:\n   11 lost+found\n  12 w1\n  13 w2\n  14 t1\n\n/tmp/mnt/w1:\n  21 f0\n  22 f1\n\n\
         /tmp/mnt/w2:\n  23 f0\n  24 f1\n\n/tmp/mnt/t1:\n  25 big\n"
            .to_string()
    }

    fn trace(lines: &[String]) -> Result<Trace, String> {
        Trace::parse(lines.join("\n").as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn every_page_once_passes_and_twice_or_never_fails() {
        let files = TestFiles::parse(&listing(), "254:0\n");
        assert_eq!(files.inodes.get("w2/f1"), Some(&24));
        assert_eq!(files.inodes.get("t1/big"), Some(&25));
        let good = vec![
            call(21, 1, "sync"),
            call(22, 1, "sync"),
            call(23, 1, "background"),
            call(24, 1, "sync"),
            call(25, 200, "background"),
            call(25, 56, "sync"),
            interval(3, 2),
            SUMMARY.replace(r#""calls":5"#, r#""calls":6"#),
        ];
        let c = pages(&trace(&good), &files, &SMALL, "v");
        assert!(c.pass, "{c}");
        assert!(c.detail.contains("sync 3, background 1"), "{c}");
        let mut twice = good.clone();
        twice.insert(0, call(22, 1, "sync"));
        twice[8] = SUMMARY.replace(r#""calls":5"#, r#""calls":7"#);
        let c = pages(&trace(&twice), &files, &SMALL, "v");
        assert!(
            !c.pass && c.detail.contains("w1/f1 2 pages in 2 calls"),
            "{c}"
        );
        let mut never = good.clone();
        never.remove(0);
        let c = pages(&trace(&never), &files, &SMALL, "v");
        assert!(!c.pass && c.detail.contains("1 never"), "{c}");
        // A call lost to a skipped run fails still, and says so.
        never[6] = never[6].replace(
            r#""lost_records":0"#,
            r#""lost_records":0,"run_time":[{"program":"kprobe_writepages","recursion_misses":1}]"#,
        );
        let c = pages(&trace(&never), &files, &SMALL, "v");
        assert!(
            !c.pass
                && c.detail
                    .contains("the kernel skipped 1 runs of the ext4 call programs"),
            "{c}"
        );
        // Calls counted but not printed: the pages cannot be judged.
        let mut unprinted = good.clone();
        unprinted[7] = SUMMARY.replace(r#""calls":5"#, r#""calls":9"#);
        assert!(!pages(&trace(&unprinted), &files, &SMALL, "v").pass);
        let no_summary = trace(&good[..6]);
        assert!(no_summary.is_err());
        assert!(!pages(&no_summary, &files, &SMALL, "v").pass);
    }

    #[test]
    fn pauses_match_the_histogram() {
        let hist_text = "# event histogram\n#\n# trigger info: hist:keys=common_pid,pause:vals=hitcount:sort=hitcount:size=8192 [active]\n#\n\n\
            { common_pid:        301, pause: 18446744073709551611 } hitcount:          4\n\
            { common_pid:        301, pause:         40 } hitcount:          2\n\
            { common_pid:        302, pause:        200 } hitcount:          1\n\
            \nTotals:\n    Hits: 7\n    Entries: 3\n    Dropped: 0\n";
        let hist = Hist::parse(hist_text);
        assert_eq!(
            hist,
            Hist {
                missing: false,
                source: "histogram",
                error: None,
                events: 7,
                pauses: 3,
                paused_pids: 2,
                hits: Some(7),
                dropped: Some(0),
            }
        );
        let lines = |events: u64, pauses: u64| {
            trace(&[
                interval(events - 1, pauses - 1),
                interval(1, 1),
                SUMMARY.to_string(),
            ])
        };
        let c = throttle(&lines(7, 3), &hist, "v");
        assert!(c.pass && c.detail.ends_with(": exact"), "{c}");
        assert!(!throttle(&lines(8, 3), &hist, "v").pass);
        assert!(!throttle(&lines(7, 2), &hist, "v").pass);
        // Events short by exactly the program's skipped runs, pauses by
        // at most as many: said, and a pass; short by more: a failure.
        let skipped = |events: u64, pauses: u64, misses: u64| {
            trace(&[
                interval(events, pauses),
                SUMMARY.replace(
                    r#""lost_records":0"#,
                    &format!(
                        r#""lost_records":0,"run_time":[{{"program":"balance_dirty","recursion_misses":{misses}}}]"#
                    ),
                ),
            ])
        };
        let c = throttle(&skipped(5, 2, 2), &hist, "#1 SMP PREEMPT_LAZY");
        assert!(
            c.pass
                && c.detail
                    .contains("short by 2 events and 1 pauses; the kernel skipped 2 runs"),
            "{c}"
        );
        assert!(c.detail.contains("PREEMPT_LAZY"), "{c}");
        assert!(!throttle(&skipped(4, 2, 2), &hist, "v").pass);
        assert!(!throttle(&skipped(5, 0, 2), &hist, "v").pass);
        let dropped = Hist::parse(&hist_text.replace("Dropped: 0", "Dropped: 2"));
        assert!(!throttle(&lines(7, 3), &dropped, "v").pass);
        let c = throttle(&lines(7, 3), &Hist::parse(""), "v");
        assert!(!c.pass && c.detail.contains("no tracefs count"), "{c}");
        // Without histograms (5.10): the events of a trace buffer.
        let buffer = "# tracer: nop\n#\n\
            \x20             dd-301     [000] .... 12.5: balance_dirty_pages: bdi 254:0: limit=5 setpoint=4 dirty=6 bdi_setpoint=1 bdi_dirty=2 dirty_ratelimit=8 task_ratelimit=0 dirtied=32 dirtied_pause=32 paused=0 pause=-5 period=0 think=0 cgroup_ino=30\n\
            \x20             dd-301     [000] .... 12.6: balance_dirty_pages: bdi 254:0: limit=5 setpoint=4 dirty=6 bdi_setpoint=1 bdi_dirty=2 dirty_ratelimit=8 task_ratelimit=0 dirtied=32 dirtied_pause=32 paused=0 pause=40 period=40 think=0 cgroup_ino=30\n\
            \x20             dd-302     [000] .... 12.7: balance_dirty_pages: bdi 254:0: limit=5 setpoint=4 dirty=6 bdi_setpoint=1 bdi_dirty=2 dirty_ratelimit=8 task_ratelimit=0 dirtied=32 dirtied_pause=32 paused=0 pause=200 period=200 think=0 cgroup_ino=31\n";
        let stats = "entries: 3\noverrun: 0\ncommit overrun: 0\nbytes: 600\ndropped events: 0\n";
        let from_buffer = Hist::from_trace(buffer, stats);
        assert_eq!(
            (
                from_buffer.events,
                from_buffer.pauses,
                from_buffer.paused_pids,
                from_buffer.dropped
            ),
            (3, 2, 2, Some(0))
        );
        let c = throttle(&lines(3, 2), &from_buffer, "v");
        assert!(
            c.pass && c.detail.contains("tracefs trace buffer 3 events"),
            "{c}"
        );
        let lost = Hist::from_trace(buffer, &stats.replace("overrun: 0\nc", "overrun: 4\nc"));
        assert_eq!(lost.dropped, Some(4));
        assert!(!throttle(&lines(3, 2), &lost, "v").pass);
        let idle = Hist::parse("\nTotals:\n    Hits: 0\n    Entries: 0\n    Dropped: 0\n");
        let c = throttle(&trace(&[SUMMARY.to_string()]), &idle, "v");
        assert!(!c.pass && c.detail.contains("nothing was paused"), "{c}");
    }

    #[test]
    fn overflow_fails_only_beside_wrong_figures() {
        let clean = trace(&[SUMMARY.to_string()]);
        let c = overflow(&clean, false);
        assert!(
            c.pass && c.detail.starts_with("map_full 0, inflight_full 0"),
            "{c}"
        );
        let full = trace(&[SUMMARY.replace(r#""map_full":0"#, r#""map_full":3"#)]);
        assert!(overflow(&full, true).pass);
        let c = overflow(&full, false);
        assert!(!c.pass && c.detail.contains("map_full 3"), "{c}");
    }

    #[test]
    fn cost_per_interval_idle_and_busy() {
        let text = "idle 100.00 500 100 40000 41000 4 0\n\
                    idle 110.00 502 101 40100 41000 4 0\n\
                    writers 111.00 510 110 60000 61000 8 0\n\
                    sync 121.00 910 210 90000 95000 400000 20\n\
                    drain 123.00 930 215 80000 95000 0 0\n";
        let samples = Samples::parse(text);
        assert_eq!(samples.0.iter().filter(|s| s.phase == "idle").count(), 2);
        let (cpu, span, rss) = samples.over(&["idle"]).unwrap();
        assert!((cpu - 0.003).abs() < 1e-9 && (span - 10.0).abs() < 1e-9 && rss == 40100);
        let (cpu, _, rss) = samples.over(BUSY).unwrap();
        assert!((cpu - 5.25 / 12.0).abs() < 1e-9 && rss == 90000, "{cpu}");
        let c = cost(&samples, "writers 512000\nsync 90000\n");
        assert!(c.pass, "{c}");
        assert!(
            c.detail
                .contains("idle: 0.0030 CPU s per 1-s interval over 10 s, RSS max 39.2 MiB"),
            "{c}"
        );
        assert!(c.detail.contains("writers 512 s, sync 90 s"), "{c}");
        assert!(c.detail.contains("utime+stime at USER_HZ 100"), "{c}");
        assert!(!cost(&Samples::parse("idle 1 1 1 1 1 1 1\n"), "").pass);
    }

    /// With the scheduler's run time at both ends, it is what is read, not
    /// the ticks; a sample without it (`-`) falls back to the ticks.
    #[test]
    fn cost_reads_the_run_time_where_the_samples_have_it() {
        let text = "idle 100.00 500 100 40000 41000 4 0 7000000000\n\
                    idle 110.00 502 101 40100 41000 4 0 7012345678\n\
                    sync 121.00 910 210 90000 95000 400000 20 9000000000\n\
                    drain 123.00 930 215 80000 95000 0 0 9500000000\n";
        let samples = Samples::parse(text);
        let (cpu, span, _) = samples.over(&["idle"]).unwrap();
        assert!(
            (cpu - 0.0012345678).abs() < 1e-12 && (span - 10.0).abs() < 1e-9,
            "{cpu}"
        );
        let c = cost(&samples, "");
        assert!(
            c.detail
                .contains("idle: 0.0012 CPU s per 1-s interval over 10 s"),
            "{c}"
        );
        assert!(c.detail.contains("2.5 CPU s sampled in all"), "{c}");
        assert!(
            c.detail.contains("run time from /proc/PID/schedstat"),
            "{c}"
        );
        let ticks = Samples::parse(
            "idle 100.00 500 100 1 1 4 0 -\n\
             idle 110.00 502 101 1 1 4 0 7012345678\n",
        );
        let (cpu, _, _) = ticks.over(&["idle"]).unwrap();
        assert!((cpu - 0.003).abs() < 1e-9, "{cpu}");
    }

    #[test]
    fn memory_names_the_cpus_and_the_bound() {
        let probes: Result<Value, String> = Ok(serde_json::json!({"memory": {
            "possible_cpus": 64, "report": "map_mem_usage", "total_bytes": 100, "bound_bytes": 200,
            "maps": [{"name": "A", "bytes": 100, "measured": 100}]}}));
        let c = map_memory(&probes, 64, "0-63\n");
        assert!(c.pass, "{c}");
        assert!(
            c.detail.contains("possible_cpus 64 (guest maxcpus 64"),
            "{c}"
        );
        assert!(!map_memory(&probes, 128, "0-63").pass);
        let over: Result<Value, String> = Ok(serde_json::json!({"memory": {
            "possible_cpus": 64, "total_bytes": 300, "bound_bytes": 200,
            "maps": [{"name": "A", "bytes": 300, "measured": 300}]}}));
        assert!(!map_memory(&over, 64, "0-63").pass);
        let failed = parse_probes("", "1", "wbscope: no BTF\n");
        let c = map_memory(&failed, 64, "");
        assert!(!c.pass && c.detail.contains("no BTF"), "{c}");
    }

    #[test]
    fn dirty_pages_before_the_sync() {
        let text = "before Dirty: 236\nwriters Dirty: 8720\nwriters Writeback: 0\n";
        assert_eq!(dirty_before_sync(text), Some(8720));
        assert_eq!(dirty_before_sync("before Dirty: 1\n"), None);
    }

    #[test]
    fn the_load_reaches_the_guest() {
        let env = LOAD.env();
        assert!(env.contains("BH_WRITERS=1000\n") && env.contains("BH_WBPS=4194304\n"));
        assert!(env.ends_with("BH_IDLE BH_SYNC_SECS\n"));
        assert_eq!(LOAD.small_files(), 100_000);
        assert_eq!(LOAD.throttled_pages(), 8192);
    }

    #[test]
    fn cpus_choose_plans_in_order_once_and_name_the_choices() {
        let counts = |cpus: &[u32]| -> Vec<u32> {
            plans(cpus).unwrap().iter().map(|p| p.max_cpus).collect()
        };
        assert_eq!(counts(&DEFAULT_CPUS), [64, 128]);
        assert_eq!(counts(&[128, 2, 128, 16]), [128, 2, 16]);
        let Err(err) = plans(&[64, 32]) else {
            panic!("32 possible CPUs has no plan")
        };
        let err = err.to_string();
        assert_eq!(
            err,
            "--cpus 32: no big-host guest of 32 possible CPUs (there are: 2, 16, 64, 128)"
        );
        // Each plan's name says its CPUs, so that its work dir and log
        // are told apart.
        for p in PLANS {
            assert_eq!(p.kind, format!("bighost{}", p.max_cpus));
        }
    }
}
