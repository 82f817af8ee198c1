//! The figures of one traced window of work (a `compare` or `scenario`
//! run): what the writer reported beside what the kernel did on the
//! run's devices, differenced over the window. Plain data and arithmetic;
//! `capture::window` fills it.
use std::collections::BTreeMap;

use serde::Serialize;
use writer_core::Report;

use crate::interval::{Bucket, CallAggregate, InodePassCounts, IntervalLine};
use crate::kernel::KernelSnapshot;
use crate::timeline::{Timeline, WriterChunks};
use crate::units::page_size;
use crate::{CallRecord, DevId};

/// p50/p99/max of pages per writepages call (exact, from the records).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    pub(crate) fn of(values: &mut [u64]) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Some(Percentiles {
            p50: at(0.5),
            p99: at(0.99),
            max: values[values.len() - 1],
        })
    }
}

/// Kernel figures of one traced window, for the devices it was about.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelFigures {
    /// The filesystems' devices (`major:minor`).
    pub devices: Vec<DevId>,
    pub window_s: f64,
    /// writepages calls on those devices, and the pages they wrote.
    pub calls: u64,
    pub pages_written: u64,
    pub calls_by_cause: BTreeMap<String, u64>,
    pub pages_per_call: Option<Percentiles>,
    pub pages_per_call_hist: Vec<Bucket>,
    /// Pages written / pages asked over calls with a finite budget.
    pub written_per_asked: Option<f64>,
    pub calls_asking_everything: u64,
    /// Pages examined per page written (ext4's folio scan).
    pub pages_scanned_per_page_written: Option<f64>,
    pub ns_per_written_page: Option<f64>,
    pub on_cpu_ns_per_written_page: Option<f64>,
    /// Sum of the calls' wall time and on-CPU time (seconds).
    pub calls_wall_s: f64,
    pub calls_on_cpu_s: Option<f64>,
    pub extents: u64,
    /// `writeback_single_inode` passes and pages they wrote (any
    /// filesystem, system-wide).
    pub inode_passes: u64,
    pub inode_pages_wrote: u64,
    /// The same passes on these devices, with their chunk sizes; null
    /// when the hook that sees the device (tp_btf) is not attached.
    pub inode_pass: Option<InodePassFigures>,
    /// /proc/vmstat sampled every 100 ms (system-wide, KiB).
    pub peak_dirty_kib: u64,
    pub peak_writeback_kib: u64,
    /// `balance_dirty_pages` throttling over the window (system-wide).
    pub throttle_events: u64,
    pub throttle_pause_ms_total: u64,
    /// Block requests issued to the devices, and the log2 bucket holding
    /// the median request size (bytes).
    pub device_requests: u64,
    pub device_request_bytes_p50: Option<[u64; 2]>,
    pub device_request_bytes: Vec<Bucket>,
    /// /proc/vmstat `nr_written` delta (pages, system-wide).
    pub vmstat_written_pages: u64,
    /// io_uring requests handed to io-wq worker threads
    /// (`io_uring:io_uring_queue_async_work`, system-wide); null when the
    /// counter could not be opened.
    pub io_uring_punts: Option<u64>,
    pub lost_records: u64,
    /// Findings (docs/findings.md) of the window's one-second interval
    /// lines: system-wide figures and all the window's devices.
    pub findings: Vec<crate::findings::Finding>,
    /// The window over time, in bins of 100 ms or more (the report's
    /// time axis).
    pub timeline: Timeline,
    /// The writer's write and sync call sizes; null for windows without
    /// a metered writer.
    pub writer_chunks: Option<WriterChunks>,
    /// The fsyncs on these devices, split (`--enable durability`, which
    /// compare and scenario turn on); absent without any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsyncs: Option<crate::durability::FsyncFigures>,
}

/// Inode passes on a run's devices: the counts, and the log2 buckets
/// holding the median and 99th percentile of the chunk per pass.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InodePassFigures {
    #[serde(flatten)]
    pub counts: InodePassCounts,
    /// Pages written per budget pass that wrote any, p50/p99 (bucket
    /// `[lo, hi]`) and mean.
    pub pages_per_pass_p50: Option<[u64; 2]>,
    pub pages_per_pass_p99: Option<[u64; 2]>,
    pub pages_per_pass_mean: Option<f64>,
    /// Budget per budget pass, p50 (bucket `[lo, hi]`).
    pub pages_asked_per_pass_p50: Option<[u64; 2]>,
}

impl InodePassFigures {
    /// The passes of `devs` among an interval line's devices.
    pub(crate) fn of(line: &IntervalLine, devs: &[DevId]) -> InodePassFigures {
        let mut counts = InodePassCounts::default();
        for l in line
            .inode_passes_by_device
            .iter()
            .filter(|l| devs.contains(&l.dev))
        {
            counts.merge(&l.counts);
        }
        let writing: u64 = counts
            .pages_per_pass
            .iter()
            .filter(|b| b.hi > 0)
            .map(|b| b.count)
            .sum();
        InodePassFigures {
            pages_per_pass_p50: counts.pages_per_pass_quantile(0.5),
            pages_per_pass_p99: counts.pages_per_pass_quantile(0.99),
            pages_per_pass_mean: (writing > 0)
                .then(|| counts.budget_pages_written as f64 / writing as f64),
            pages_asked_per_pass_p50: crate::interval::quantile_bucket(
                &counts.pages_asked_per_pass,
                0.5,
            ),
            counts,
        }
    }
}

fn median_bucket(buckets: &[Bucket]) -> Option<[u64; 2]> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    let mut seen = 0;
    for b in buckets {
        seen += b.count;
        if total > 0 && seen * 2 >= total {
            return Some([b.lo, b.hi]);
        }
    }
    None
}

impl KernelFigures {
    pub fn build(
        devs: &[DevId],
        window_s: f64,
        calls: &[CallRecord],
        prev: &KernelSnapshot,
        cur: &KernelSnapshot,
        peaks: (u64, u64),
        per_device_passes: bool,
    ) -> KernelFigures {
        let mut agg = CallAggregate::default();
        let mut pages = Vec::with_capacity(calls.len());
        for c in calls {
            agg.add(c);
            pages.push(c.pages_written.max(0) as u64);
        }
        let line = IntervalLine::new(window_s, window_s, &agg, prev, cur);
        let mut request_bytes: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut device_requests = 0;
        for d in line.devices.iter().filter(|d| devs.contains(&d.dev)) {
            device_requests += d.requests;
            for b in &d.request_bytes {
                *request_bytes.entry((b.lo, b.hi)).or_default() += b.count;
            }
        }
        let request_bytes: Vec<Bucket> = request_bytes
            .into_iter()
            .map(|((lo, hi), count)| Bucket { lo, hi, count })
            .collect();
        let kib = page_size() / 1024;
        let inode_pass = per_device_passes.then(|| InodePassFigures::of(&line, devs));
        KernelFigures {
            devices: devs.to_vec(),
            window_s,
            calls: agg.calls,
            pages_written: agg.pages_written,
            calls_by_cause: agg
                .by_cause
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            pages_per_call: Percentiles::of(&mut pages),
            pages_per_call_hist: line.pages_per_call,
            written_per_asked: line.written_per_asked,
            calls_asking_everything: line.calls_asking_everything,
            pages_scanned_per_page_written: line.scan.pages_scanned_per_page_written,
            ns_per_written_page: line.ns_per_written_page,
            on_cpu_ns_per_written_page: line.on_cpu_ns_per_written_page,
            calls_wall_s: agg.duration_ns as f64 / 1e9,
            calls_on_cpu_s: (agg.on_cpu_pages > 0 || agg.on_cpu_ns > 0)
                .then(|| agg.on_cpu_ns as f64 / 1e9),
            extents: agg.extents,
            inode_passes: line.inode_passes,
            inode_pages_wrote: line.inode_pages_wrote,
            inode_pass,
            peak_dirty_kib: peaks.0 * kib,
            peak_writeback_kib: peaks.1 * kib,
            throttle_events: line.throttle.events,
            throttle_pause_ms_total: line.throttle.pause_ms_total,
            device_requests,
            device_request_bytes_p50: median_bucket(&request_bytes),
            device_request_bytes: request_bytes,
            vmstat_written_pages: line.dirty.vmstat_written_delta,
            io_uring_punts: None,
            lost_records: line.lost_records,
            findings: Vec::new(),
            timeline: Timeline::default(),
            writer_chunks: None,
            fsyncs: None,
        }
    }
}

/// Where and how a compare/scenario document was made: its `context`,
/// which a report shows in its header.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RunContext {
    pub host: String,
    pub kernel: String,
    /// The command line, arguments joined by spaces.
    pub command: String,
    pub wbscope_version: String,
    pub started_unix_s: u64,
    /// The probe plan in force (`wbscope probes --json`).
    pub probes: Option<crate::plan::ProbePlan>,
}

/// One strategy's run: the writer's report and the kernel's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Scenarios: which filesystem (e.g. `ext4`, `fs2 xfs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<String>,
    pub strategy: String,
    pub repeat: u32,
    pub writer: Report,
    pub kernel: KernelFigures,
}

impl Run {
    /// The table column this run belongs to.
    pub fn column(&self) -> String {
        match &self.fs {
            Some(fs) => format!("{fs} {}", self.strategy),
            None => self.strategy.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interval::InodePassLine;

    fn b(lo: u64, hi: u64, count: u64) -> Bucket {
        Bucket { lo, hi, count }
    }

    fn line_with(passes: Vec<InodePassLine>) -> IntervalLine {
        let snap = KernelSnapshot::default();
        let mut line = IntervalLine::new(1.0, 1.0, &CallAggregate::default(), &snap, &snap);
        line.inode_passes_by_device = passes;
        line
    }

    fn dev(minor: u32) -> DevId {
        DevId { major: 7, minor }
    }

    #[test]
    fn inode_pass_figures_take_the_runs_devices_only() {
        let counts = |written: Vec<Bucket>, asked: Vec<Bucket>, pages: u64| {
            let budget_passes = written.iter().map(|b| b.count).sum();
            InodePassCounts {
                passes: budget_passes + 1,
                pages_written: pages + 10,
                budget_passes,
                budget_pages_asked: 0,
                budget_pages_written: pages,
                pages_per_pass: written,
                pages_per_unbounded_pass: vec![b(8, 15, 1)],
                pages_asked_per_pass: asked,
            }
        };
        let line = line_with(vec![
            InodePassLine {
                dev: dev(1),
                // One pass that wrote nothing, three of 1024..2047 pages.
                counts: counts(
                    vec![b(0, 0, 1), b(1024, 2047, 3)],
                    vec![b(2048, 4095, 4)],
                    4000,
                ),
            },
            InodePassLine {
                dev: dev(2),
                counts: counts(vec![b(8192, 16383, 1)], vec![b(8192, 16383, 1)], 9000),
            },
            InodePassLine {
                dev: dev(3),
                counts: counts(vec![b(1, 1, 50)], vec![b(1, 1, 50)], 50),
            },
        ]);
        let f = InodePassFigures::of(&line, &[dev(1), dev(2)]);
        assert_eq!(f.counts.passes, 4 + 1 + 1 + 1);
        assert_eq!(f.counts.pages_written, 4010 + 9010);
        assert_eq!(f.counts.budget_passes, 5);
        // Four passes wrote pages: rank 2 and 4 of them.
        assert_eq!(f.pages_per_pass_p50, Some([1024, 2047]));
        assert_eq!(f.pages_per_pass_p99, Some([8192, 16383]));
        assert_eq!(f.pages_per_pass_mean, Some(13000.0 / 4.0));
        assert_eq!(f.pages_asked_per_pass_p50, Some([2048, 4095]));
        // A device without passes: zeros and no percentiles.
        let none = InodePassFigures::of(&line, &[dev(9)]);
        assert_eq!(none.counts.passes, 0);
        assert_eq!(none.pages_per_pass_p50, None);
        assert_eq!(none.pages_per_pass_mean, None);
    }
}
