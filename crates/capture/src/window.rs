//! One tracer for a whole command, and the windows it attributes records
//! to: before a run the ring buffer is drained and thrown away (after the
//! sync and cache drop, so the previous run's writeback is not counted);
//! during the run every record is read; after it, only records of the
//! run's devices are kept. Runs are sequential, so a record belongs to the
//! run whose window it was read in. System-wide figures (throttling,
//! /proc/vmstat) are differenced over the same window and say so.
//!
//! Each window also keeps a timeline (`model::timeline`): every
//! [`TICK_S`] the kernel's counters are snapshotted and differenced, the
//! writers' byte counts sampled, and each call placed where it ended, so
//! a report can draw a run of a fraction of a second.
use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use writer_core::{Report, RunFailure, Writer, WriterConfig};

use crate::interval::{Decoration, OpenInterval};
use crate::meter::WriterMeter;
use wbscope_model::durability::{DurabilityJoin, FsyncFigures, FsyncLine, SyncRecord};
use wbscope_model::interval::IntervalLine;
use wbscope_model::plan::{Concept, HookChoice, HookKind};
use wbscope_model::record::mark_uncached;
use wbscope_model::timeline::{TICK_S, Timeline};
use wbscope_model::window::{KernelFigures, RunContext};
use wbscope_model::{CallRecord, DevId};
use wbscope_sys::UsageError;
use wbscope_tracer::counter::TracepointCounter;
use wbscope_tracer::ring::{RingCollector, RingRecord};
use wbscope_tracer::{Tracer, TracerOptions};

/// Length of the window's interval lines (the findings' intervals), as
/// `trace`'s default.
const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// One tracer for a whole command; [`Traced::window`] attributes records
/// to one piece of work.
pub struct Traced {
    tracer: Tracer,
    collector: RingCollector,
    /// Writers of the next window, by device group ([`Traced::meter`]).
    meters: Vec<(usize, Arc<WriterMeter>)>,
    /// This process while it writes with RWF_DONTCACHE only: its `direct`
    /// calls are `uncached` ([`wbscope_model::record::mark_uncached`]).
    uncached_tgid: Option<u32>,
}

/// Where a call goes on a window's time axis: where it ended, from its
/// kernel timestamps; a call whose start was not seen (no timestamp), when
/// it was read.
fn call_time_s(c: &CallRecord, window_mono_ns: u64, read_s: f64) -> f64 {
    if c.start_ns == 0 {
        return read_s;
    }
    (c.start_ns + c.duration_ns) as f64 / 1e9 - window_mono_ns as f64 / 1e9
}

impl Traced {
    pub fn attach(hooks: &HookChoice) -> anyhow::Result<Traced> {
        let mut tracer = Tracer::attach(&TracerOptions {
            filter: Default::default(),
            hooks: hooks.clone(),
        })?;
        wbscope_tracer::spawn_ebpf_log_pump(&mut tracer);
        let collector = RingCollector::new(&mut tracer)?;
        eprintln!("wbscope: probes: {}", tracer.plan.summary());
        if !tracer
            .plan
            .attached(wbscope_model::plan::Concept::WritepagesCall)
        {
            eprintln!("wbscope: warning: no writepages hook attached; no calls will be seen");
        }
        Ok(Traced {
            tracer,
            collector,
            meters: Vec::new(),
            uncached_tgid: None,
        })
    }

    /// Where and how this command runs, with the probe plan in force:
    /// the `context` of its JSON document and report.
    pub fn context(&self) -> RunContext {
        RunContext {
            host: wbscope_sys::hostname(),
            kernel: wbscope_sys::kernel_release(),
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            wbscope_version: env!("CARGO_PKG_VERSION").to_string(),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            probes: Some(self.tracer.plan.clone()),
        }
    }

    /// A meter for a writer of `jobs` jobs whose work the next window
    /// attributes to device group `group`: pass it to
    /// `Writer::with_observer`; the window samples it.
    pub fn meter(&mut self, group: usize, jobs: u32) -> Arc<WriterMeter> {
        let m = Arc::new(WriterMeter::new(jobs));
        self.meters.push((group, m.clone()));
        m
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
        let meters = std::mem::take(&mut self.meters);
        let prev = self.tracer.snapshot()?;
        // Counted without a BPF program, only while the window is open.
        let mut punts = TracepointCounter::open("io_uring", "io_uring_queue_async_work").ok();
        let started = Instant::now();
        let mono0 = wbscope_sys::monotonic_ns();
        let handle = tokio::task::spawn_blocking(work);
        let mut calls: Vec<CallRecord> = Vec::new();
        // The window's fsyncs, split (`--enable durability`).
        let mut durable = self
            .tracer
            .plan
            .attached(Concept::Durability)
            .then(DurabilityJoin::default);
        let mut syncs: Vec<SyncRecord> = Vec::new();
        let mut peaks = (0u64, 0u64);
        let mut signalled = false;
        let mut timelines: Vec<Timeline> = groups.iter().map(|_| Timeline::default()).collect();
        let mut tick = Tick::start(prev.clone(), started, &meters);
        let tick_every = Duration::from_secs_f64(TICK_S);
        // Interval lines of the window, a second each, for the findings
        // (model/findings): the same rules as live tracing.
        let mut lines: Vec<IntervalLine> = Vec::new();
        let mut open = OpenInterval::new(prev.clone(), started);
        loop {
            let read_s = started.elapsed().as_secs_f64();
            self.collector
                .wait_and_drain(|r| {
                    let Some(c) = durable_take(&mut durable, r) else {
                        return;
                    };
                    place(&mut timelines, groups, &c, mono0, read_s);
                    if groups.iter().any(|g| g.contains(&c.dev)) {
                        open.add(&c);
                        calls.push(c)
                    }
                })
                .await?;
            journal_handles(&self.tracer, &mut durable);
            if let Ok(v) = wbscope_tracer::read_vmstat() {
                peaks.0 = peaks.0.max(v.nr_dirty);
                peaks.1 = peaks.1.max(v.nr_writeback);
                let now_s = started.elapsed().as_secs_f64();
                for t in &mut timelines {
                    t.at(now_s).sample_levels(&v);
                }
            }
            if tick.counters.from().elapsed() >= tick_every {
                let snap = self.tracer.snapshot()?;
                tick.close(snap, started, groups, &meters, &mut timelines);
            }
            if open.from().elapsed() >= LINE_INTERVAL {
                let cur = self.tracer.snapshot()?;
                let now = Instant::now();
                let fsyncs = fsync_line(&mut durable, &mut syncs, wbscope_sys::monotonic_ns());
                lines.push(open.close(
                    started,
                    now,
                    cur,
                    Decoration {
                        fsyncs,
                        ..Decoration::default()
                    },
                ));
            }
            if wbscope_sys::interrupted() && !signalled {
                signalled = true;
                on_signal();
            }
            if handle.is_finished() {
                break;
            }
        }
        let result = handle.await.context("the traced work panicked")?;
        let read_s = started.elapsed().as_secs_f64();
        let mut take = |r: RingRecord| {
            let Some(c) = durable_take(&mut durable, r) else {
                return;
            };
            place(&mut timelines, groups, &c, mono0, read_s);
            if groups.iter().any(|g| g.contains(&c.dev)) {
                open.add(&c);
                calls.push(c)
            }
        };
        self.collector.drain(&mut take);
        // The work is over: so are its generic calls, whether or not an
        // event marked their end.
        self.collector.close_open_calls(&mut take);
        journal_handles(&self.tracer, &mut durable);
        let cur = self.tracer.snapshot()?;
        let end = Instant::now();
        let window_s = end.duration_since(started).as_secs_f64();
        let punts = punts.as_mut().and_then(|p| p.read().ok());
        if let Some(tgid) = self.uncached_tgid {
            mark_uncached(&mut calls, tgid);
        }
        // The work is over: every fsync of it is joined now.
        let fsyncs = fsync_line(&mut durable, &mut syncs, u64::MAX);
        lines.push(open.line(
            started,
            end,
            &cur,
            Decoration {
                fsyncs,
                ..Decoration::default()
            },
        ));
        let findings = wbscope_model::findings::judge(&lines).findings;
        tick.close(cur.clone(), started, groups, &meters, &mut timelines);
        // Each fsync where it returned, in the groups holding its device.
        for s in &syncs {
            let t = (s.start_ns + s.total_ns) as f64 / 1e9 - mono0 as f64 / 1e9;
            for (timeline, g) in timelines.iter_mut().zip(groups) {
                if g.contains(&s.dev) {
                    timeline.at(t).add_fsync(s.total_ns, s.journal_ns);
                }
            }
        }
        for t in &mut timelines {
            t.extend_to(window_s);
            t.span_s = window_s;
        }
        let per_device_passes = self
            .tracer
            .plan
            .concept(Concept::InodeWriteback)
            .is_some_and(|c| c.kind == Some(HookKind::TpBtf));
        let figures = groups
            .iter()
            .zip(timelines)
            .enumerate()
            .map(|(i, (g, timeline))| {
                let mine: Vec<CallRecord> = calls
                    .iter()
                    .filter(|c| g.contains(&c.dev))
                    .cloned()
                    .collect();
                let mut k =
                    KernelFigures::build(g, window_s, &mine, &prev, &cur, peaks, per_device_passes);
                k.io_uring_punts = punts;
                k.findings = findings.clone();
                k.timeline = timeline;
                k.writer_chunks = meters
                    .iter()
                    .find(|(group, _)| *group == i)
                    .map(|(_, m)| m.chunks());
                k.fsyncs = FsyncFigures::of(syncs.iter().filter(|s| g.contains(&s.dev)));
                k
            })
            .collect();
        Ok((result, figures))
    }
}

/// A record into the window's fsync join (with `--enable durability`);
/// the call, if it is one, for the window's own figures.
fn durable_take(join: &mut Option<DurabilityJoin>, r: RingRecord) -> Option<CallRecord> {
    match (r, join.as_mut()) {
        (RingRecord::Call(c), j) => {
            if let Some(j) = j {
                j.call(&c);
            }
            Some(c)
        }
        (RingRecord::Sync(s), Some(j)) => {
            j.span(s);
            None
        }
        (RingRecord::Commit(p), Some(j)) => {
            j.phase(&p);
            None
        }
        (RingRecord::Flush(f), Some(j)) => {
            j.flush(f);
            None
        }
        (RingRecord::Sync(_) | RingRecord::Commit(_) | RingRecord::Flush(_), None) => None,
        // compare and scenario attach no write spans.
        (RingRecord::Write(_), _) => None,
    }
}

/// The fsyncs joined by `now_ns` (all of them with `u64::MAX`), kept in
/// `all`, as a line's `fsyncs`.
fn fsync_line(
    join: &mut Option<DurabilityJoin>,
    all: &mut Vec<SyncRecord>,
    now_ns: u64,
) -> Vec<FsyncLine> {
    let Some(j) = join.as_mut() else {
        return Vec::new();
    };
    all.extend(j.take(now_ns));
    j.take_line()
}

/// The journal handles of the commits that ended, into the join.
fn journal_handles(tracer: &Tracer, join: &mut Option<DurabilityJoin>) {
    if let Some(j) = join.as_mut()
        && let Err(e) = tracer.journal_into(j)
    {
        log::warn!("reading the journal handles: {e:#}");
    }
}

/// A call, in the timelines of the groups holding its device.
fn place(
    timelines: &mut [Timeline],
    groups: &[Vec<DevId>],
    c: &CallRecord,
    mono0: u64,
    read_s: f64,
) {
    let t = call_time_s(c, mono0, read_s);
    for (timeline, g) in timelines.iter_mut().zip(groups) {
        if g.contains(&c.dev) {
            timeline.at(t).add_call(
                wbscope_model::cause_name(c.cause),
                c.pages_written.max(0) as u64,
            );
        }
    }
}

/// The last tick of a window: the kernel snapshot and writer byte counts
/// the next one is differenced against.
struct Tick {
    /// Since the last tick; no calls are added to it (the timeline places
    /// each call where it ended, `place`).
    counters: OpenInterval,
    writer_bytes: Vec<Vec<u64>>,
}

impl Tick {
    /// The first tick of a window. Its writer counts are zero, not the
    /// meters' counts now: a meter is made for its window, so every byte it
    /// ever counts belongs to the window's bins. (Reading the counts here
    /// lost a chunk whenever the writer, already running on its thread,
    /// wrote one before this line ran; CI saw 44 of 48 MiB.)
    fn start(
        snap: wbscope_model::kernel::KernelSnapshot,
        at: Instant,
        meters: &[(usize, Arc<WriterMeter>)],
    ) -> Tick {
        Tick {
            counters: OpenInterval::new(snap, at),
            writer_bytes: meters
                .iter()
                .map(|(_, m)| vec![0; m.bytes().len()])
                .collect(),
        }
    }

    /// Adds what changed since the last tick to the bin of its midpoint.
    fn close(
        &mut self,
        snap: wbscope_model::kernel::KernelSnapshot,
        started: Instant,
        groups: &[Vec<DevId>],
        meters: &[(usize, Arc<WriterMeter>)],
        timelines: &mut [Timeline],
    ) {
        let now = Instant::now();
        let from_s = self.counters.from().duration_since(started).as_secs_f64();
        let to_s = now.duration_since(started).as_secs_f64();
        let mid = (from_s + to_s) / 2.0;
        let line = self
            .counters
            .close(started, now, snap, Decoration::default());
        for (t, g) in timelines.iter_mut().zip(groups) {
            t.at(mid).add_interval(&line, |d| g.contains(&d));
        }
        for ((group, meter), last) in meters.iter().zip(&mut self.writer_bytes) {
            let Some(t) = timelines.get_mut(*group) else {
                continue;
            };
            let bytes = meter.bytes();
            let bin = t.at(mid);
            if bin.writer_bytes.len() < bytes.len() {
                bin.writer_bytes.resize(bytes.len(), 0);
            }
            for ((b, now), before) in bin.writer_bytes.iter_mut().zip(&bytes).zip(last.iter()) {
                *b += now.saturating_sub(*before);
            }
            *last = bytes;
        }
    }
}

/// Devices of the filesystem holding `path` (`tracer::mounts::devices_of`).
pub fn devs_of(path: &Path) -> anyhow::Result<Vec<DevId>> {
    wbscope_tracer::mounts::devices_of(path)
        .with_context(|| format!("the filesystem of {}", path.display()))
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
    let meter = traced.meter(0, cfg.spec().jobs);
    // The writer is the only thing this process runs in the window, and an
    // uncached run makes no sync_file_range or fadvise calls.
    traced.uncached_tgid = cfg.uses_dontcache().then(std::process::id);
    let writer = Writer::new(cfg).with_observer(meter);
    let live = writer.tunables();
    let windowed = traced
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
        .await;
    traced.uncached_tgid = None;
    let (result, mut kernel) = windowed?;
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

#[cfg(test)]
mod tests {
    use writer_core::{Event, FileRef, Observer};

    use super::*;

    fn written(m: &WriterMeter, len: u64) {
        m.on_event(&Event::ChunkWritten {
            at: FileRef { job: 0, file: 0 },
            offset: 0,
            len,
            latency: Duration::ZERO,
        });
    }

    #[test]
    fn a_chunk_written_before_the_first_tick_is_in_the_bins() {
        let meter = Arc::new(WriterMeter::new(1));
        let meters = vec![(0, meter.clone())];
        let started = Instant::now();
        // The writer's thread got there first.
        written(&meter, 4 << 20);
        let snap = wbscope_model::kernel::KernelSnapshot::default();
        let mut tick = Tick::start(snap.clone(), started, &meters);
        written(&meter, 4 << 20);
        let mut timelines = vec![Timeline::default()];
        tick.close(snap.clone(), started, &[vec![]], &meters, &mut timelines);
        written(&meter, 4 << 20);
        tick.close(snap, started, &[vec![]], &meters, &mut timelines);
        let binned: u64 = timelines[0].bins.iter().flat_map(|b| &b.writer_bytes).sum();
        assert_eq!(binned, 12 << 20);
    }
}
