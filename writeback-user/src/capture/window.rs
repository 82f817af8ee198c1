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
    model::plan::{Concept, HookKind},
    model::record::mark_uncached,
    model::window::KernelFigures,
    model::{CallRecord, DevId},
    tracer::counter::TracepointCounter,
    tracer::ring::{RingCollector, RingRecord},
    tracer::{Tracer, TracerOptions},
};

/// One tracer for a whole command; [`Traced::window`] attributes records
/// to one piece of work.
pub(crate) struct Traced {
    tracer: Tracer,
    collector: RingCollector,
    /// This process while it writes with RWF_DONTCACHE only: its `direct`
    /// calls are `uncached` ([`crate::model::record::mark_uncached`]).
    uncached_tgid: Option<u32>,
}

impl Traced {
    pub(crate) fn attach(disabled: &[HookKind]) -> anyhow::Result<Traced> {
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
        Ok(Traced {
            tracer,
            collector,
            uncached_tgid: None,
        })
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
        // Counted without a BPF program, only while the window is open.
        let mut punts = TracepointCounter::open("io_uring", "io_uring_queue_async_work").ok();
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
        let punts = punts.as_mut().and_then(|p| p.read().ok());
        if let Some(tgid) = self.uncached_tgid {
            mark_uncached(&mut calls, tgid);
        }
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
                KernelFigures {
                    io_uring_punts: punts,
                    ..KernelFigures::build(
                        g,
                        window_s,
                        &mine,
                        &prev,
                        &cur,
                        peaks,
                        per_device_passes,
                    )
                }
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
    // The writer is the only thing this process runs in the window, and an
    // uncached run makes no sync_file_range or fadvise calls.
    traced.uncached_tgid = cfg.uses_dontcache().then(std::process::id);
    let writer = Writer::new(cfg);
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
