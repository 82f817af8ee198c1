//! The tracer's data model: decoded per-call records and the aggregates the
//! front ends show. Fed by [`crate::collector::Event`]s, whatever produced
//! them (live ring buffer today, a recording later).
use std::fmt;

use serde::Serialize;
use writeback_common::{WritepagesCall, call_flags, cause};

use crate::{
    interval::IntervalLine,
    loader::KernelStats,
    plan::{ProbePlan, ProbeStatus},
};

/// A block device number as userspace writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevId {
    pub major: u32,
    pub minor: u32,
}

impl DevId {
    /// Decodes the kernel-internal `dev_t` the tracepoints record
    /// (`MAJOR(dev) = dev >> 20`, `MINOR(dev) = dev & ((1 << 20) - 1)`,
    /// include/linux/kdev_t.h), which differs from the userspace encoding
    /// that `stat(2)` returns.
    pub const fn from_kernel(dev: u32) -> DevId {
        DevId {
            major: dev >> 20,
            minor: dev & ((1 << 20) - 1),
        }
    }

    /// From `st_dev` as `stat(2)` returns it (glibc encoding).
    pub fn from_user(dev: u64) -> DevId {
        DevId {
            major: libc::major(dev),
            minor: libc::minor(dev),
        }
    }
}

impl fmt::Display for DevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl Serialize for DevId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for DevId {
    type Err = String;

    /// `major:minor`.
    fn from_str(s: &str) -> Result<DevId, String> {
        let (major, minor) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}` is not major:minor"))?;
        let parse = |v: &str| v.parse::<u32>().map_err(|e| format!("`{s}`: {e}"));
        Ok(DevId {
            major: parse(major)?,
            minor: parse(minor)?,
        })
    }
}

impl<'de> serde::Deserialize<'de> for DevId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DevId, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `enum writeback_sync_modes` (include/linux/writeback.h).
pub fn sync_mode_name(mode: u32) -> &'static str {
    match mode {
        0 => "none",
        1 => "all",
        _ => "unknown",
    }
}

/// `writeback_common::cause` in words.
pub fn cause_name(c: u32) -> &'static str {
    match c {
        cause::SYNC => "sync",
        cause::PERIODIC => "periodic",
        cause::BACKGROUND => "background",
        cause::FLUSHER_OTHER => "flusher_other",
        cause::DIRECT => "direct",
        _ => "unknown",
    }
}

/// `enum wb_reason` (include/linux/backing-dev-defs.h, 6.18 order) in
/// words; records carry it plus one, 0 meaning "no flusher work".
pub fn wb_reason_name(reason_plus_one: u32) -> Option<&'static str> {
    const NAMES: [&str; 8] = [
        "background",
        "vmscan",
        "sync",
        "periodic",
        "laptop_timer",
        "fs_free_space",
        "forker_thread",
        "foreign_flush",
    ];
    let r = reason_plus_one.checked_sub(1)? as usize;
    Some(NAMES.get(r).copied().unwrap_or("other"))
}

/// One writepages call, decoded. Serialised as is into recordings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CallRecord {
    pub dev: DevId,
    pub ino: u64,
    pub tgid: u32,
    pub tid: u32,
    pub comm: String,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub nr_to_write: i64,
    pub pages_written: i64,
    /// Pages skipped during this call (end minus start of the counter).
    pub pages_skipped: i64,
    pub sync_mode: u32,
    pub ret: i32,
    pub range_start: i64,
    pub range_end: i64,
    pub writeback_index_before: u64,
    pub writeback_index_after: u64,
    pub for_kupdate: bool,
    pub range_cyclic: bool,
    /// False when the start tracepoint was not seen: start-side fields and
    /// the duration are then unknown (zero).
    pub start_seen: bool,
    pub for_background: bool,
    pub cgroup_id: u64,
    /// [`cause_name`] code.
    pub cause: u32,
    /// `enum wb_reason` + 1, 0 when not under flusher work.
    pub work_reason: u32,
    /// On-CPU time inside the call, when sched_switch accounting ran.
    pub on_cpu_ns: Option<u64>,
    /// Scan figures, when the scan hooks fired during the call.
    pub scan: Option<ScanFigures>,
    pub extents: u32,
    pub extent_blocks: u64,
    pub folios_written: u32,
    pub bios: u32,
    pub bio_bytes: u64,
}

/// What the map-and-submit loop of `ext4_do_writepages()` looked at
/// (ext4_da_write_folios_start/end; see docs/probes.md for what the
/// positions mean).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanFigures {
    pub iterations: u32,
    /// Sum over iterations of `next_pos` at the end minus `start_pos` at
    /// the start: the file range from the writeback cursor to the end of
    /// the last folio locked.
    pub bytes: u64,
    pub first_pos: i64,
    pub last_pos: i64,
}

impl From<&WritepagesCall> for CallRecord {
    fn from(c: &WritepagesCall) -> Self {
        let comm_len = c.comm.iter().position(|&b| b == 0).unwrap_or(c.comm.len());
        let start_seen = c.flags & call_flags::START_SEEN != 0;
        CallRecord {
            dev: DevId::from_kernel(c.dev),
            ino: c.ino,
            tgid: c.tgid,
            tid: c.tid,
            comm: String::from_utf8_lossy(&c.comm[..comm_len]).into_owned(),
            start_ns: c.start_ns,
            duration_ns: c.duration_ns,
            nr_to_write: c.nr_to_write,
            pages_written: c.pages_written,
            pages_skipped: if start_seen {
                c.pages_skipped_end - c.pages_skipped_start
            } else {
                c.pages_skipped_end
            },
            sync_mode: c.sync_mode,
            ret: c.ret,
            range_start: c.range_start,
            range_end: c.range_end,
            writeback_index_before: c.writeback_index_before,
            writeback_index_after: c.writeback_index_after,
            for_kupdate: c.flags & call_flags::FOR_KUPDATE != 0,
            range_cyclic: c.flags & call_flags::RANGE_CYCLIC != 0,
            start_seen,
            for_background: c.flags & call_flags::FOR_BACKGROUND != 0,
            cgroup_id: c.cgroup_id,
            cause: c.cause,
            work_reason: c.work_reason,
            on_cpu_ns: (start_seen && c.flags & call_flags::CPU_TRACKED != 0)
                .then(|| c.duration_ns.saturating_sub(c.offcpu_ns)),
            scan: (c.flags & call_flags::SCAN_SEEN != 0).then_some(ScanFigures {
                iterations: c.scan_iterations,
                bytes: c.scan_bytes,
                first_pos: c.scan_first_pos,
                last_pos: c.scan_last_pos,
            }),
            extents: c.extents,
            extent_blocks: c.extent_blocks,
            folios_written: c.folios_written,
            bios: c.bios,
            bio_bytes: c.bio_bytes,
        }
    }
}

/// Histogram with power-of-two buckets: bucket 0 holds 0, bucket k (k >= 1)
/// holds values in [2^(k-1), 2^k).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log2Histogram {
    buckets: [u64; 65],
}

impl Default for Log2Histogram {
    fn default() -> Self {
        Log2Histogram { buckets: [0; 65] }
    }
}

impl Log2Histogram {
    pub fn bucket_of(value: u64) -> usize {
        (u64::BITS - value.leading_zeros()) as usize
    }

    /// The label of bucket `k`: `0`, `1`, `2-3`, `4-7`, ... with K/M
    /// suffixes past 1024.
    pub fn bucket_label(k: usize) -> String {
        match k {
            0 => "0".into(),
            1 => "1".into(),
            // Exact bounds while they are short; from 1K on, `1K-2K` reads
            // as [1024, 2048).
            _ if k <= 10 => {
                let lo = 1u64 << (k - 1);
                format!("{lo}-{}", (lo << 1) - 1)
            }
            // The top bucket's upper bound, 2^64, does not fit a u64.
            64.. => format!("{}+", short(1 << 63)),
            _ => {
                let lo = 1u64 << (k - 1);
                format!("{}-{}", short(lo), short(lo << 1))
            }
        }
    }

    pub fn record(&mut self, value: u64) {
        self.buckets[Self::bucket_of(value)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// Index range of the non-empty buckets, if any.
    pub fn span(&self) -> Option<(usize, usize)> {
        let first = self.buckets.iter().position(|&c| c != 0)?;
        let last = self.buckets.iter().rposition(|&c| c != 0)?;
        Some((first, last))
    }
}

/// Powers of two with binary suffixes: 1024 -> "1K", 262144 -> "256K",
/// 1048576 -> "1M", 2^30 -> "1G".
fn short(v: u64) -> String {
    match v {
        _ if v >= 1 << 60 => format!("{}E", v >> 60),
        _ if v >= 1 << 50 => format!("{}P", v >> 50),
        _ if v >= 1 << 40 => format!("{}T", v >> 40),
        _ if v >= 1 << 30 => format!("{}G", v >> 30),
        _ if v >= 1 << 20 => format!("{}M", v >> 20),
        _ if v >= 1 << 10 => format!("{}K", v >> 10),
        _ => v.to_string(),
    }
}

/// Running totals of the writepages calls seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub calls: u64,
    pub pages_written: u64,
    pub nr_to_write: u64,
}

impl Totals {
    pub fn add(&mut self, call: &CallRecord) {
        self.calls += 1;
        self.pages_written += call.pages_written.max(0) as u64;
        self.nr_to_write = self
            .nr_to_write
            .saturating_add(call.nr_to_write.max(0) as u64);
    }
}

/// Seconds of history the time chart keeps.
pub const HISTORY_SECS: usize = 300;

/// One second (one interval) of the shared time axis.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HistoryPoint {
    /// Seconds since the dashboard started, at the end of the interval.
    pub time_s: f64,
    /// Pages the traced writepages calls wrote, per second.
    pub kernel_pages_per_s: f64,
    /// Bytes the writer wrote, per second (0 when no run is going).
    pub writer_bytes_per_s: f64,
    /// `nr_dirty` (pages) at the end of the interval.
    pub dirty_pages: u64,
}

/// At most this many per-inode rows are kept (~100 bytes each, so well
/// under 1 MiB); see [`Model::on_call`].
pub const MAX_INODE_ROWS: usize = 4096;

/// Per-device or per-inode sums for the top table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopRow {
    pub calls: u64,
    pub pages_written: u64,
    /// Scan figures of the calls whose scan was measured.
    pub scan_bytes: u64,
    pub scan_pages_written: u64,
    /// The command of the latest call (for inodes: who wrote it back).
    pub comm: String,
}

impl TopRow {
    fn add(&mut self, call: &CallRecord) {
        let pages = call.pages_written.max(0) as u64;
        self.calls += 1;
        self.pages_written += pages;
        if let Some(scan) = &call.scan {
            self.scan_bytes += scan.bytes;
            self.scan_pages_written += pages;
        }
        if self.comm != call.comm {
            self.comm.clone_from(&call.comm);
        }
    }

    /// Mean pages per call; `None` before the first call.
    pub fn mean_chunk_pages(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.pages_written as f64 / self.calls as f64)
    }

    /// Pages examined per page written (`page` = page size in bytes);
    /// `None` when no measured call wrote anything.
    pub fn scan_ratio(&self, page: u64) -> Option<f64> {
        (self.scan_pages_written > 0)
            .then(|| self.scan_bytes as f64 / page.max(1) as f64 / self.scan_pages_written as f64)
    }
}

/// Where a writer run is, as its events tell it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum WriterPhase {
    /// No run yet.
    #[default]
    Idle,
    Running,
    /// The run ended; the text says how ("completed, 1.00 GB at 512 MB/s",
    /// "interrupted", or the error).
    Ended(String),
}

/// What the writer reported over one second of a run: sent once per
/// writer-core `Tick`, so the model task gets one message a second however
/// small the chunks are.
#[derive(Clone, Debug, Default)]
pub struct WriterSecond {
    pub run: u64,
    pub elapsed_s: f64,
    /// Bytes written since the run started, and in the last second.
    pub bytes: u64,
    pub bytes_last_second: u64,
    /// Chunks completed in the second, in pages per chunk, in the kernel
    /// histogram's log2 buckets.
    pub chunk_pages: Log2Histogram,
    /// Sync calls that ended in the second, per kind.
    pub sync: Vec<(writer_core::SyncKind, writer_core::stats::LatencyHist)>,
}

/// Typed messages from the writer side (run id, so a late message of a
/// stopped run cannot be taken for the current one).
#[derive(Clone, Debug)]
pub enum WriterUpdate {
    Started {
        run: u64,
        dir: String,
        file_size: u64,
    },
    /// Boxed: a histogram of 65 buckets would make every message large.
    Second(Box<WriterSecond>),
    Ended {
        run: u64,
        outcome: writer_core::RunOutcome,
    },
}

/// The writer as the dashboard shows it.
#[derive(Clone, Debug, Default)]
pub struct WriterModel {
    pub run: u64,
    pub phase: WriterPhase,
    pub dir: String,
    pub file_size: u64,
    pub elapsed_s: f64,
    pub bytes: u64,
    /// Bytes written by every run since start (runs loop until stopped).
    pub total_bytes: u64,
    /// Runs started.
    pub runs: u64,
    /// Bytes per second, newest last, at most [`HISTORY_SECS`].
    pub throughput: std::collections::VecDeque<u64>,
    /// Pages per chunk since start (or the last reset), and in the last
    /// second of writing.
    pub chunk_pages: Log2Histogram,
    pub chunk_pages_last: Log2Histogram,
    /// Sync latencies of the current run, per kind.
    pub sync: std::collections::BTreeMap<writer_core::SyncKind, writer_core::stats::LatencyHist>,
}

impl WriterModel {
    /// Bytes/s of the last second, while a run is going.
    pub fn current_rate(&self) -> u64 {
        match self.phase {
            WriterPhase::Running => self.throughput.back().copied().unwrap_or(0),
            _ => 0,
        }
    }
}

/// What the dashboard shows; one task owns it and feeds it events
/// ([`Model::on_call`], [`Model::on_interval`], [`Model::on_writer`]),
/// whatever produced them, so a recording can replay into it.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// The probe plan as the loader carried it out (or the reason nothing
    /// could be attached).
    pub plan: ProbePlan,
    pub probes: Vec<ProbeStatus>,
    pub host: String,
    /// Pages written per call since start (or the last reset).
    pub hist_total: Log2Histogram,
    /// Pages written per call in the interval being collected.
    pub hist_interval: Log2Histogram,
    /// The last completed interval's histogram (what the screen shows: a
    /// stable picture rather than one that fills up and empties each
    /// second).
    pub hist_last: Log2Histogram,
    pub totals: Totals,
    /// Cumulative kernel-side counters (lost records, ...).
    pub kernel: KernelStats,
    /// Lost records since start or the last reset.
    pub lost_records: u64,
    /// Rates over the last completed interval.
    pub calls_per_sec: f64,
    pub pages_per_sec: f64,
    /// The last completed interval, with every kernel-pane figure.
    pub last: Option<IntervalLine>,
    /// The dashboard's own CPU use (fraction of one core), the writer's
    /// threads excluded.
    pub tracer_cpu: Option<f64>,
    pub history: std::collections::VecDeque<HistoryPoint>,
    pub devices: std::collections::BTreeMap<DevId, TopRow>,
    pub inodes: std::collections::HashMap<(DevId, u64), TopRow>,
    /// Per-inode rows dropped to stay within [`MAX_INODE_ROWS`].
    pub inodes_evicted: u64,
    pub writer: WriterModel,
    interval_calls: u64,
    interval_pages: u64,
}

impl Model {
    pub fn new(probes: Vec<ProbeStatus>) -> Model {
        Model {
            probes,
            ..Model::default()
        }
    }

    /// A model for the plan the loader produced.
    pub fn with_plan(plan: ProbePlan, host: String) -> Model {
        Model {
            probes: plan.statuses(),
            plan,
            host,
            ..Model::default()
        }
    }

    pub fn on_call(&mut self, call: &CallRecord) {
        let pages = call.pages_written.max(0) as u64;
        self.hist_total.record(pages);
        self.hist_interval.record(pages);
        self.totals.add(call);
        self.interval_calls += 1;
        self.interval_pages += pages;
        self.devices.entry(call.dev).or_default().add(call);
        let key = (call.dev, call.ino);
        if !self.inodes.contains_key(&key) && self.inodes.len() >= MAX_INODE_ROWS {
            self.evict_smallest_inode();
        }
        self.inodes.entry(key).or_default().add(call);
    }

    /// Keeps the per-inode table bounded on hosts that write back many
    /// files: the row with the fewest pages written goes (the top table
    /// shows the largest ones anyway), and the eviction is counted.
    fn evict_smallest_inode(&mut self) {
        let smallest = self
            .inodes
            .iter()
            .min_by_key(|(_, row)| (row.pages_written, row.calls))
            .map(|(k, _)| *k);
        if let Some(k) = smallest {
            self.inodes.remove(&k);
            self.inodes_evicted += 1;
        }
    }

    /// Closes a display interval of `secs` seconds: rates are computed and
    /// the interval histogram starts again.
    pub fn end_interval(&mut self, secs: f64, kernel: KernelStats) {
        if secs > 0.0 {
            self.calls_per_sec = self.interval_calls as f64 / secs;
            self.pages_per_sec = self.interval_pages as f64 / secs;
        }
        self.interval_calls = 0;
        self.interval_pages = 0;
        self.hist_last = std::mem::take(&mut self.hist_interval);
        self.kernel = kernel;
    }

    /// A completed interval: rates, the kernel pane's figures and one
    /// point of the time chart.
    pub fn on_interval(
        &mut self,
        line: IntervalLine,
        kernel: KernelStats,
        tracer_cpu: Option<f64>,
    ) {
        self.end_interval(line.interval_s, kernel);
        self.lost_records += line.lost_records;
        self.tracer_cpu = tracer_cpu;
        self.history.push_back(HistoryPoint {
            time_s: line.time_s,
            kernel_pages_per_s: self.pages_per_sec,
            writer_bytes_per_s: self.writer.current_rate() as f64,
            dirty_pages: line.dirty.vmstat.nr_dirty,
        });
        while self.history.len() > HISTORY_SECS {
            self.history.pop_front();
        }
        self.last = Some(line);
    }

    pub fn on_writer(&mut self, update: WriterUpdate) {
        let w = &mut self.writer;
        match update {
            WriterUpdate::Started {
                run,
                dir,
                file_size,
            } => {
                w.run = run;
                w.runs += 1;
                w.phase = WriterPhase::Running;
                w.dir = dir;
                w.file_size = file_size;
                w.elapsed_s = 0.0;
                w.bytes = 0;
                w.sync.clear();
            }
            WriterUpdate::Second(s) if s.run == w.run => {
                let s = *s;
                w.elapsed_s = s.elapsed_s;
                w.bytes = s.bytes;
                w.total_bytes += s.bytes_last_second;
                w.throughput.push_back(s.bytes_last_second);
                while w.throughput.len() > HISTORY_SECS {
                    w.throughput.pop_front();
                }
                for (k, &c) in s.chunk_pages.buckets().iter().enumerate() {
                    // Log2Histogram has no merge; adding bucket by bucket
                    // records representative values of the same bucket.
                    for _ in 0..c {
                        w.chunk_pages.record(bucket_floor(k));
                    }
                }
                for (kind, h) in &s.sync {
                    w.sync.entry(*kind).or_default().merge(h);
                }
                w.chunk_pages_last = s.chunk_pages;
            }
            WriterUpdate::Second(_) => {}
            WriterUpdate::Ended { run, outcome } if run == w.run => {
                w.phase = WriterPhase::Ended(outcome.summary);
                w.chunk_pages_last = Log2Histogram::default();
            }
            WriterUpdate::Ended { .. } => {}
        }
    }

    /// `r`: counters, histograms and the top table start again; the probe
    /// plan, the time chart and the writer's run state stay.
    pub fn reset(&mut self) {
        self.hist_total = Log2Histogram::default();
        self.hist_interval = Log2Histogram::default();
        self.hist_last = Log2Histogram::default();
        self.totals = Totals::default();
        self.lost_records = 0;
        self.devices.clear();
        self.inodes.clear();
        self.inodes_evicted = 0;
        self.interval_calls = 0;
        self.interval_pages = 0;
        self.writer.chunk_pages = Log2Histogram::default();
        self.writer.sync.clear();
    }
}

/// The smallest value of log2 bucket `k`.
fn bucket_floor(k: usize) -> u64 {
    match k {
        0 => 0,
        _ => 1u64 << (k - 1).min(63),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_inode_rows_are_bounded_and_evict_the_smallest() {
        let mut m = Model::default();
        let call = |ino: u64, pages: i64| {
            CallRecord::from(&WritepagesCall {
                ino,
                pages_written: pages,
                flags: call_flags::START_SEEN,
                ..Default::default()
            })
        };
        m.on_call(&call(1, 1_000_000));
        for ino in 2..(MAX_INODE_ROWS as u64 + 500) {
            m.on_call(&call(ino, 1));
        }
        assert_eq!(m.inodes.len(), MAX_INODE_ROWS);
        assert_eq!(m.inodes_evicted, 499);
        // The big one survives; totals still count every call.
        assert!(m.inodes.keys().any(|(_, ino)| *ino == 1));
        assert_eq!(m.totals.calls, MAX_INODE_ROWS as u64 + 499);
    }

    #[test]
    fn kernel_dev_t_decoding() {
        // 7:3 (loop3) as the kernel stores it: (7 << 20) | 3.
        assert_eq!(DevId::from_kernel((7 << 20) | 3).to_string(), "7:3");
        assert_eq!(DevId::from_kernel((253 << 20) | 0xfffff).minor, 0xfffff);
        assert_eq!(DevId::from_user(libc::makedev(259, 1)).to_string(), "259:1");
    }

    #[test]
    fn log2_buckets() {
        assert_eq!(Log2Histogram::bucket_of(0), 0);
        assert_eq!(Log2Histogram::bucket_of(1), 1);
        assert_eq!(Log2Histogram::bucket_of(2), 2);
        assert_eq!(Log2Histogram::bucket_of(3), 2);
        assert_eq!(Log2Histogram::bucket_of(4), 3);
        assert_eq!(Log2Histogram::bucket_of(16384), 15);
        assert_eq!(Log2Histogram::bucket_of(u64::MAX), 64);
        assert_eq!(Log2Histogram::bucket_label(2), "2-3");
        assert_eq!(Log2Histogram::bucket_label(11), "1K-2K");
        assert_eq!(Log2Histogram::bucket_label(15), "16K-32K");
        assert_eq!(Log2Histogram::bucket_label(10), "512-1023");
        assert_eq!(Log2Histogram::bucket_label(20), "512K-1M");
        assert_eq!(Log2Histogram::bucket_label(64), "8E+");
        let mut h = Log2Histogram::default();
        assert_eq!(h.span(), None);
        for v in [0, 5, 6, 7, 300] {
            h.record(v);
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.span(), Some((0, 9)));
        assert_eq!(h.buckets()[3], 3);
    }

    fn raw_call(pages: i64) -> WritepagesCall {
        let mut comm = [0u8; 16];
        comm[..2].copy_from_slice(b"dd");
        WritepagesCall {
            dev: (8 << 20) | 1,
            ino: 12,
            nr_to_write: 1024,
            pages_written: pages,
            pages_skipped_start: 3,
            pages_skipped_end: 5,
            flags: call_flags::START_SEEN | call_flags::FOR_KUPDATE,
            comm,
            ..WritepagesCall::default()
        }
    }

    #[test]
    fn decode_and_aggregate() {
        let rec = CallRecord::from(&raw_call(100));
        assert_eq!(rec.comm, "dd");
        assert_eq!(rec.dev.to_string(), "8:1");
        assert_eq!(rec.pages_skipped, 2);
        assert!(rec.for_kupdate && !rec.range_cyclic && rec.start_seen);

        let mut m = Model::default();
        m.on_call(&rec);
        m.on_call(&CallRecord::from(&raw_call(1)));
        assert_eq!(m.totals.calls, 2);
        assert_eq!(m.totals.pages_written, 101);
        assert_eq!(m.hist_interval.count(), 2);
        m.end_interval(2.0, KernelStats::default());
        assert_eq!(m.calls_per_sec, 1.0);
        assert_eq!(m.pages_per_sec, 50.5);
        assert_eq!(m.hist_interval.count(), 0);
        assert_eq!(m.hist_total.count(), 2);
    }
}
