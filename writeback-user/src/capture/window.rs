//! One tracer for a whole command, and the windows it attributes records
//! to: before a run the ring buffer is drained and thrown away (after the
//! sync and cache drop, so the previous run's writeback is not counted);
//! during the run every record is read; after it, only records of the
//! run's devices are kept. Runs are sequential, so a record belongs to the
//! run whose window it was read in. System-wide figures (throttling,
//! /proc/vmstat) are differenced over the same window and say so.
use std::{os::unix::fs::MetadataExt as _, path::Path, time::Instant};

use anyhow::Context as _;
use writer_core::{Report, RunFailure, Writer, WriterConfig};

use crate::{
    UsageError,
    model::interval::{CallAggregate, IntervalLine},
    model::plan::{Concept, HookKind},
    model::window::KernelFigures,
    model::{CallRecord, DevId},
    tracer::ring::{RingCollector, RingRecord},
    tracer::{Tracer, TracerOptions},
};

/// Length of the window's interval lines (the findings' intervals), as
/// `trace`'s default.
const LINE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// One tracer for a whole command; [`Traced::window`] attributes records
/// to one piece of work.
pub(crate) struct Traced {
    tracer: Tracer,
    collector: RingCollector,
}

impl Traced {
    pub(crate) fn attach(disabled: &[HookKind]) -> anyhow::Result<Traced> {
        let mut tracer = Tracer::attach(&TracerOptions {
            filter: Default::default(),
            disabled: disabled.to_vec(),
        })?;
        crate::tracer::spawn_ebpf_log_pump(&mut tracer);
        let collector = RingCollector::new(&mut tracer)?;
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
    pub(crate) async fn window<R: Send + 'static>(
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
        // Interval lines of the window, a second each, for the findings
        // (model/findings): the same rules as live tracing.
        let mut lines: Vec<IntervalLine> = Vec::new();
        let mut line_calls = CallAggregate::default();
        let (mut line_prev, mut line_start) = (prev.clone(), started);
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + LINE_INTERVAL, LINE_INTERVAL);
        loop {
            let mut batch: Vec<CallRecord> = Vec::new();
            tokio::select! {
                drained = self.collector.wait_and_drain(|RingRecord::Call(c)| {
                    if keep(&c) {
                        batch.push(c)
                    }
                }) => { drained?; }
                _ = ticks.tick() => {
                    let cur = self.tracer.snapshot()?;
                    let now = Instant::now();
                    lines.push(IntervalLine::new(
                        now.duration_since(started).as_secs_f64(),
                        now.duration_since(line_start).as_secs_f64(),
                        &line_calls,
                        &line_prev,
                        &cur,
                    ));
                    (line_calls, line_prev, line_start) = (CallAggregate::default(), cur, now);
                }
            }
            for c in batch {
                line_calls.add(&c);
                calls.push(c);
            }
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
        let mut take = |RingRecord::Call(c)| {
            if keep(&c) {
                line_calls.add(&c);
                calls.push(c)
            }
        };
        self.collector.drain(&mut take);
        // The work is over: so are its generic calls, whether or not an
        // event marked their end.
        self.collector.close_open_calls(&mut take);
        let cur = self.tracer.snapshot()?;
        let window_s = started.elapsed().as_secs_f64();
        lines.push(IntervalLine::new(
            window_s,
            line_start.elapsed().as_secs_f64(),
            &line_calls,
            &line_prev,
            &cur,
        ));
        let findings = crate::model::findings::judge(&lines).findings;
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
                let mut k =
                    KernelFigures::build(g, window_s, &mine, &prev, &cur, peaks, per_device_passes);
                k.findings = findings.clone();
                k
            })
            .collect();
        Ok((result, figures))
    }
}

/// Device of the filesystem holding `path`.
pub(crate) fn dev_of(path: &Path) -> anyhow::Result<DevId> {
    Ok(DevId::from_user(
        std::fs::metadata(path)
            .with_context(|| format!("stat {}", path.display()))?
            .dev(),
    ))
}

/// syncfs(2) on the filesystem holding `dir`.
pub(crate) fn syncfs(dir: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: a valid open fd.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
        return Err(std::io::Error::last_os_error()).context("syncfs");
    }
    Ok(())
}

/// Writes with `cfg` (files kept), syncs the filesystem so buffered data
/// is written back inside the window, removes the files; all traced.
pub(crate) async fn traced_write(
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
