//! Figures over time, in bins of equal length from the start of a window
//! (a `compare`/`scenario` run) or of a recording: what the report draws
//! on its time axis. Plain data, no I/O; `capture::window` fills it
//! while a run goes on, `export::report` from a recording's frames.
//!
//! Bounded: a timeline holds at most [`MAX_BINS`] bins. When a time past
//! the last one arrives, neighbouring bins are merged in pairs and the bin
//! length doubles, as often as needed, so a run of any length costs the
//! same memory and the bins stay as short as the run allows (100 ms for
//! runs up to a minute, [`TICK_S`]).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    DevId,
    interval::{Bucket, IntervalLine, merge_buckets},
};

/// The shortest bin: the tracer's ring buffer is drained every 100 ms
/// (`tracer::ring::DRAIN_EVERY`), so finer bins would only be empty.
pub const TICK_S: f64 = 0.1;
/// Most bins a timeline holds (one minute at [`TICK_S`]; a 600-pixel
/// panel shows each as a pixel column or more).
pub(crate) const MAX_BINS: usize = 600;

/// What happened in one bin. Counts are over the bin; levels are the
/// highest sample in it (a peak survives merging); thresholds the last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimeBin {
    /// Bytes the writer's jobs handed to the kernel (write(2) returned),
    /// one entry per job; empty without a writer (recordings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writer_bytes: Vec<u64>,
    /// /proc/vmstat `nr_dirtied` delta: pages dirtied by anyone.
    pub pages_dirtied: u64,
    /// Pages written by writepages calls that ended in the bin, by cause
    /// (`model::cause_name`).
    pub pages_written_by_cause: BTreeMap<String, u64>,
    pub calls: u64,
    /// /proc/vmstat `nr_dirty`, `nr_writeback` (peak in the bin) and the
    /// two thresholds (`nr_dirty_background_threshold`,
    /// `nr_dirty_threshold`), pages; `None` before the first sample.
    pub dirty_pages: Option<u64>,
    pub writeback_pages: Option<u64>,
    pub background_threshold_pages: Option<u64>,
    pub dirty_threshold_pages: Option<u64>,
    /// `balance_dirty_pages` pauses and their total length.
    pub throttle_pauses: u64,
    pub throttle_pause_ms: u64,
    /// Block requests of the window's devices (all devices in a
    /// recording): issue-to-completion latency and size histograms.
    pub request_latency_ns: Vec<Bucket>,
    pub request_bytes: Vec<Bucket>,
    /// The same requests from /proc/diskstats, the default source (no
    /// histograms): how many completed, their bytes and their latency
    /// summed (ns), for the means.
    #[serde(skip_serializing_if = "DiskSums::is_empty")]
    pub disk: DiskSums,
    /// fsyncs joined in the bin (`--enable durability`): how many, their
    /// summed time and journal part, and the longest (ns).
    #[serde(skip_serializing_if = "FsyncSums::is_empty")]
    pub fsync: FsyncSums,
}

/// fsyncs of a bin (interval lines' `fsyncs`, added up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FsyncSums {
    pub count: u64,
    pub total_ns: u64,
    pub journal_ns: u64,
    pub max_ns: u64,
}

impl FsyncSums {
    fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn add(&mut self, o: &FsyncSums) {
        self.count += o.count;
        self.total_ns += o.total_ns;
        self.journal_ns += o.journal_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
    }
}

/// Requests counted by /proc/diskstats in a bin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskSums {
    pub(crate) requests: u64,
    pub(crate) bytes: u64,
    pub(crate) latency_ns: f64,
}

impl DiskSums {
    fn is_empty(&self) -> bool {
        self.requests == 0
    }

    fn add(&mut self, o: &DiskSums) {
        self.requests += o.requests;
        self.bytes += o.bytes;
        self.latency_ns += o.latency_ns;
    }

    /// Mean latency (ns) and size (bytes) of the requests; `None` without
    /// any.
    pub fn means(&self) -> Option<(f64, f64)> {
        (self.requests > 0).then(|| {
            let n = self.requests as f64;
            (self.latency_ns / n, self.bytes as f64 / n)
        })
    }
}

fn add_level(mine: &mut Option<u64>, theirs: Option<u64>, keep: fn(u64, u64) -> u64) {
    *mine = match (*mine, theirs) {
        (Some(a), Some(b)) => Some(keep(a, b)),
        (a, b) => a.or(b),
    };
}

impl TimeBin {
    /// Adds a later bin's figures to this one.
    pub(crate) fn merge(&mut self, o: &TimeBin) {
        if self.writer_bytes.len() < o.writer_bytes.len() {
            self.writer_bytes.resize(o.writer_bytes.len(), 0);
        }
        for (m, t) in self.writer_bytes.iter_mut().zip(&o.writer_bytes) {
            *m += t;
        }
        self.pages_dirtied += o.pages_dirtied;
        for (cause, pages) in &o.pages_written_by_cause {
            *self
                .pages_written_by_cause
                .entry(cause.clone())
                .or_default() += pages;
        }
        self.calls += o.calls;
        add_level(&mut self.dirty_pages, o.dirty_pages, u64::max);
        add_level(&mut self.writeback_pages, o.writeback_pages, u64::max);
        // Thresholds: the later value.
        add_level(
            &mut self.background_threshold_pages,
            o.background_threshold_pages,
            |_, b| b,
        );
        add_level(
            &mut self.dirty_threshold_pages,
            o.dirty_threshold_pages,
            |_, b| b,
        );
        self.throttle_pauses += o.throttle_pauses;
        self.throttle_pause_ms += o.throttle_pause_ms;
        self.request_latency_ns = merge_buckets(&self.request_latency_ns, &o.request_latency_ns);
        self.request_bytes = merge_buckets(&self.request_bytes, &o.request_bytes);
        self.disk.add(&o.disk);
        self.fsync.add(&o.fsync);
    }

    /// Records a level sample (pages) from /proc/vmstat.
    pub fn sample_levels(&mut self, v: &crate::kernel::VmStat) {
        add_level(&mut self.dirty_pages, Some(v.nr_dirty), u64::max);
        add_level(&mut self.writeback_pages, Some(v.nr_writeback), u64::max);
        self.background_threshold_pages = Some(v.nr_dirty_background_threshold);
        self.dirty_threshold_pages = Some(v.nr_dirty_threshold);
    }

    /// Adds the snapshot-differenced figures of an interval line: pages
    /// dirtied, throttling, levels, and the requests of the devices `keep`
    /// accepts. (Calls are added one by one, where they ended.)
    pub fn add_interval(&mut self, line: &IntervalLine, keep: impl Fn(DevId) -> bool) {
        self.pages_dirtied += line.dirty.vmstat_dirtied_delta;
        self.throttle_pauses += line.throttle.pauses;
        self.throttle_pause_ms += line.throttle.pause_ms_total;
        self.sample_levels(&line.dirty.vmstat);
        for f in &line.fsyncs {
            self.fsync.add(&FsyncSums {
                count: f.fsyncs,
                total_ns: f.total_ns,
                journal_ns: f.journal_ns,
                max_ns: f.max_ns,
            });
        }
        for d in line.devices.iter().filter(|d| keep(d.dev)) {
            self.request_latency_ns = merge_buckets(&self.request_latency_ns, &d.latency_ns);
            self.request_bytes = merge_buckets(&self.request_bytes, &d.request_bytes);
            // The means of a line with histograms beside them are left
            // out: its `requests` are the tracepoints' (issued), not the
            // means' (completed).
            if let Some(m) = d.diskstats_alone() {
                self.disk.add(&DiskSums {
                    requests: d.requests,
                    bytes: m.bytes,
                    latency_ns: m.latency_ns_mean * d.requests as f64,
                });
            }
        }
    }

    /// One fsync that returned in the bin.
    pub fn add_fsync(&mut self, total_ns: u64, journal_ns: u64) {
        self.fsync.add(&FsyncSums {
            count: 1,
            total_ns,
            journal_ns,
            max_ns: total_ns,
        });
    }

    pub fn add_call(&mut self, cause: &str, pages: u64) {
        self.calls += 1;
        *self
            .pages_written_by_cause
            .entry(cause.to_string())
            .or_default() += pages;
    }

    #[cfg(test)]
    pub(crate) fn pages_written(&self) -> u64 {
        self.pages_written_by_cause.values().sum()
    }
}

/// Bins of `bin_s` seconds from the start of a window or recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub bin_s: f64,
    /// Seconds covered (the window's length; the last bin may be partial).
    pub span_s: f64,
    pub bins: Vec<TimeBin>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new(TICK_S)
    }
}

impl Timeline {
    pub fn new(bin_s: f64) -> Timeline {
        Timeline {
            bin_s: bin_s.max(TICK_S),
            span_s: 0.0,
            bins: Vec::new(),
        }
    }

    /// The bin holding time `t_s` (seconds from the start; earlier times
    /// go to the first bin), made if needed, merging bins to stay within
    /// [`MAX_BINS`].
    pub fn at(&mut self, t_s: f64) -> &mut TimeBin {
        let t = if t_s.is_finite() { t_s.max(0.0) } else { 0.0 };
        self.span_s = self.span_s.max(t);
        while t / self.bin_s >= MAX_BINS as f64 {
            self.halve();
        }
        let i = ((t / self.bin_s) as usize).min(MAX_BINS - 1);
        if self.bins.len() <= i {
            self.bins.resize(i + 1, TimeBin::default());
        }
        &mut self.bins[i]
    }

    /// Notes that the timeline covers `t_s` seconds (its bins reach it).
    pub fn extend_to(&mut self, t_s: f64) {
        // A bin starting exactly at the end would cover nothing.
        self.at(t_s - 1e-9);
        self.span_s = self.span_s.max(t_s);
    }

    /// Merges neighbouring bins in pairs; the bin length doubles.
    fn halve(&mut self) {
        let bins = std::mem::take(&mut self.bins);
        for pair in bins.chunks(2) {
            let mut b = pair[0].clone();
            if let Some(next) = pair.get(1) {
                b.merge(next);
            }
            self.bins.push(b);
        }
        self.bin_s *= 2.0;
    }

    /// Merges bins until the bin length is at least `bin_s`.
    pub fn coarsen_to(&mut self, bin_s: f64) {
        while self.bin_s * 1.5 < bin_s {
            self.halve();
        }
    }

    /// Writer jobs seen (entries of `writer_bytes`).
    pub fn jobs(&self) -> usize {
        self.bins
            .iter()
            .map(|b| b.writer_bytes.len())
            .max()
            .unwrap_or(0)
    }
}

/// The writer's calls over a window, as log2 histograms of bytes: each
/// write(2) (io_uring: each write completed), and each ranged sync
/// (`sync_file_range`, `fdatasync` of a range); whole-file syncs counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WriterChunks {
    pub write_bytes: Vec<Bucket>,
    pub sync_bytes: Vec<Bucket>,
    pub whole_file_syncs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::VmStat;

    #[test]
    fn bins_merge_in_pairs_and_stay_bounded() {
        let mut t = Timeline::new(TICK_S);
        // 10 minutes of one call per tick, each writing one page.
        let ticks = 6000;
        for i in 0..ticks {
            t.at(i as f64 * TICK_S + 0.05).add_call("periodic", 1);
        }
        assert!(t.bins.len() <= MAX_BINS, "{} bins", t.bins.len());
        assert_eq!(t.bin_s, TICK_S * 16.0);
        let total: u64 = t.bins.iter().map(TimeBin::pages_written).sum();
        assert_eq!(total, ticks, "merging loses nothing");
        assert_eq!(t.bins[0].calls, 16);
    }

    fn empty_line() -> IntervalLine {
        let none = crate::kernel::KernelSnapshot::default();
        IntervalLine::new(1.0, 1.0, &Default::default(), &none, &none)
    }

    /// A line with one disk's /proc/diskstats figures.
    fn disk_line(requests: u64, latency_ns_mean: f64, bytes: u64) -> IntervalLine {
        let mut line = empty_line();
        line.devices = vec![crate::interval::DeviceLine {
            dev: DevId { major: 8, minor: 0 },
            requests,
            request_bytes: Vec::new(),
            latency_ns: Vec::new(),
            flushes: Vec::new(),
            diskstats: Some(crate::interval::DiskMeans {
                bytes,
                request_bytes_mean: bytes as f64 / requests as f64,
                latency_ns_mean,
                in_flight_mean: 0.1,
                ..Default::default()
            }),
        }];
        line
    }

    #[test]
    fn diskstats_requests_merge_into_means() {
        let mut a = TimeBin::default();
        assert_eq!(a.disk.means(), None);
        // Two intervals of one disk: 10 requests at 2 ms, 30 at 1 ms.
        for (requests, latency_ns_mean, bytes) in [(10, 2e6, 40_960), (30, 1e6, 1 << 20)] {
            let mut b = TimeBin::default();
            b.add_interval(&disk_line(requests, latency_ns_mean, bytes), |_| true);
            a.merge(&b);
        }
        let (ns, bytes) = a.disk.means().expect("means");
        assert_eq!(ns, (10.0 * 2e6 + 30.0 * 1e6) / 40.0);
        assert_eq!(bytes, (40_960 + (1 << 20)) as f64 / 40.0);
        // A device `keep` refuses is left out.
        let mut c = TimeBin::default();
        c.add_interval(&disk_line(10, 2e6, 40_960), |_| false);
        assert_eq!(c.disk, DiskSums::default());
    }

    #[test]
    fn merging_adds_counts_keeps_peaks_and_last_thresholds() {
        let mut a = TimeBin {
            writer_bytes: vec![10],
            ..TimeBin::default()
        };
        a.sample_levels(&VmStat {
            nr_dirty: 50,
            nr_writeback: 1,
            nr_dirty_threshold: 100,
            nr_dirty_background_threshold: 40,
            ..VmStat::default()
        });
        a.add_call("sync", 3);
        let mut b = TimeBin {
            writer_bytes: vec![1, 2],
            request_bytes: vec![Bucket {
                lo: 4096,
                hi: 8191,
                count: 2,
            }],
            ..TimeBin::default()
        };
        b.sample_levels(&VmStat {
            nr_dirty: 20,
            nr_writeback: 9,
            nr_dirty_threshold: 90,
            nr_dirty_background_threshold: 30,
            ..VmStat::default()
        });
        b.add_call("sync", 4);
        a.merge(&b);
        assert_eq!(a.writer_bytes, vec![11, 2]);
        assert_eq!(a.pages_written_by_cause["sync"], 7);
        assert_eq!((a.dirty_pages, a.writeback_pages), (Some(50), Some(9)));
        assert_eq!(a.dirty_threshold_pages, Some(90));
        assert_eq!(a.background_threshold_pages, Some(30));
        assert_eq!(a.request_bytes.len(), 1);
        // A timeline survives JSON (the report reads compare documents).
        let mut t = Timeline::default();
        *t.at(0.25) = a;
        let back: Timeline = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.bins.len(), 3);
        assert_eq!(back.jobs(), 2);
    }

    #[test]
    fn times_before_the_start_go_to_the_first_bin() {
        let mut t = Timeline::default();
        t.at(-3.0).add_call("periodic", 1);
        t.at(f64::NAN).add_call("periodic", 1);
        assert_eq!(t.bins.len(), 1);
        assert_eq!(t.bins[0].calls, 2);
        t.coarsen_to(0.4);
        assert!((t.bin_s - 0.4).abs() < 1e-9);
    }
}
