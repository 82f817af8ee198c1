//! The dashboard's state: what the panes read. The dashboard's task owns
//! one [`Model`] and is its only writer (through `App::handle`); the panes
//! only read it.
use crate::who::WhoModel;
use wbscope_model::findings::{Engine, Finding};
use wbscope_model::kernel::KernelStats;
use wbscope_model::{
    histogram::Log2Histogram,
    interval::IntervalLine,
    plan::{ProbePlan, ProbeStatus},
    record::{CallRecord, DevId, Totals},
};

/// Seconds of history the time chart keeps.
pub(crate) const HISTORY_SECS: usize = 300;

/// One second (one interval) of the shared time axis.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct HistoryPoint {
    /// Seconds since the dashboard started, at the end of the interval.
    pub(crate) time_s: f64,
    /// Pages the traced writepages calls wrote, per second.
    pub(crate) kernel_pages_per_s: f64,
    /// Bytes the writer wrote, per second (0 when no run is going).
    pub(crate) writer_bytes_per_s: f64,
    /// `nr_dirty` (pages) at the end of the interval.
    pub(crate) dirty_pages: u64,
}

/// At most this many per-inode rows are kept (~100 bytes each, so well
/// under 1 MiB); see [`Model::on_call`].
pub(crate) const MAX_INODE_ROWS: usize = 4096;

/// Per-device or per-inode sums for the top table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TopRow {
    pub(crate) calls: u64,
    pub(crate) pages_written: u64,
    /// Scan figures of the calls whose scan was measured.
    pub(crate) scan_bytes: u64,
    pub(crate) scan_pages_written: u64,
    /// The command of the latest call (for inodes: who wrote it back).
    pub(crate) comm: String,
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
            self.comm.clear();
            self.comm.push_str(&call.comm);
        }
    }

    /// Mean pages per call; `None` before the first call.
    pub(crate) fn mean_chunk_pages(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.pages_written as f64 / self.calls as f64)
    }

    /// Pages examined per page written (`page` = page size in bytes);
    /// `None` when no measured call wrote anything.
    pub(crate) fn scan_ratio(&self, page: u64) -> Option<f64> {
        (self.scan_pages_written > 0)
            .then(|| self.scan_bytes as f64 / page.max(1) as f64 / self.scan_pages_written as f64)
    }
}

/// Where a writer run is, as its events tell it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum WriterPhase {
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
    pub(crate) run: u64,
    pub(crate) elapsed_s: f64,
    /// Bytes written since the run started, and in the last second.
    pub(crate) bytes: u64,
    pub(crate) bytes_last_second: u64,
    /// Chunks completed in the second, in pages per chunk, in the kernel
    /// histogram's log2 buckets.
    pub(crate) chunk_pages: Log2Histogram,
    /// Sync calls that ended in the second, per kind.
    pub(crate) sync: Vec<(writer_core::SyncKind, writer_core::stats::LatencyHist)>,
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
pub(crate) struct WriterModel {
    pub(crate) run: u64,
    pub(crate) phase: WriterPhase,
    pub(crate) dir: String,
    pub(crate) file_size: u64,
    pub(crate) elapsed_s: f64,
    pub(crate) bytes: u64,
    /// Bytes written by every run since start (runs loop until stopped).
    pub(crate) total_bytes: u64,
    /// Runs started.
    pub(crate) runs: u64,
    /// Bytes per second, newest last, at most [`HISTORY_SECS`].
    pub(crate) throughput: std::collections::VecDeque<u64>,
    /// Pages per chunk since start (or the last reset), and in the last
    /// second of writing.
    pub(crate) chunk_pages: Log2Histogram,
    pub(crate) chunk_pages_last: Log2Histogram,
    /// Sync latencies of the current run, per kind.
    pub(crate) sync:
        std::collections::BTreeMap<writer_core::SyncKind, writer_core::stats::LatencyHist>,
}

impl WriterModel {
    /// Bytes/s of the last second, while a run is going.
    pub(crate) fn current_rate(&self) -> u64 {
        match self.phase {
            WriterPhase::Running => self.throughput.back().copied().unwrap_or(0),
            _ => 0,
        }
    }
}

/// The dashboard process's CPU time over a second, in fractions of one
/// core: everything but the writer's threads (the tracer, its readers,
/// the screen), and the writer's threads (writer-core's jobs and monitor,
/// their io_uring workers and the thread that runs them), so that each
/// side of the comparison carries its own cost. `None`: not measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OwnCpu {
    pub tracer: Option<f64>,
    pub writer: Option<f64>,
}

impl OwnCpu {
    /// The two sides over `secs` seconds, from the whole process's CPU
    /// time and the writer's (ns): the tracer's is the process's less the
    /// writer's. The two are read a moment apart, so the writer's can come
    /// out a little above the process's: it is capped there, so the
    /// tracer's is never negative and the two always add up to the
    /// process's. Nothing over no time.
    pub fn split(secs: f64, process_ns: u64, writer_ns: u64) -> OwnCpu {
        if secs.is_nan() || secs <= 0.0 {
            return OwnCpu::default();
        }
        let writer = writer_ns.min(process_ns);
        let share = |ns: u64| Some(ns as f64 / 1e9 / secs);
        OwnCpu {
            tracer: share(process_ns - writer),
            writer: share(writer),
        }
    }
}

/// What the dashboard shows; one task owns it and feeds it events
/// ([`Model::on_call`], [`Model::on_interval`], [`Model::on_writer`]),
/// whatever produced them, so a recording can replay into it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    /// The probe plan as the loader carried it out (or the reason nothing
    /// could be attached).
    pub(crate) plan: ProbePlan,
    pub(crate) probes: Vec<ProbeStatus>,
    pub(crate) host: String,
    /// Pages written per call since start (or the last reset).
    pub(crate) hist_total: Log2Histogram,
    /// Pages written per call in the interval being collected.
    pub(crate) hist_interval: Log2Histogram,
    /// The last completed interval's histogram (what the screen shows: a
    /// stable picture rather than one that fills up and empties each
    /// second).
    pub(crate) hist_last: Log2Histogram,
    pub(crate) totals: Totals,
    /// Cumulative kernel-side counters (lost records, ...).
    pub(crate) kernel: KernelStats,
    /// Lost records since start or the last reset.
    pub(crate) lost_records: u64,
    /// Rates over the last completed interval.
    pub(crate) calls_per_sec: f64,
    pub(crate) pages_per_sec: f64,
    /// The last completed interval, with every kernel-pane figure.
    pub(crate) last: Option<IntervalLine>,
    /// The dashboard's own CPU use over the last second, tracer side and
    /// writer apart.
    pub(crate) cpu: OwnCpu,
    pub(crate) history: std::collections::VecDeque<HistoryPoint>,
    pub(crate) devices: std::collections::BTreeMap<DevId, TopRow>,
    pub(crate) inodes: std::collections::HashMap<(DevId, u64), TopRow>,
    /// Per-inode rows dropped to stay within [`MAX_INODE_ROWS`].
    pub(crate) inodes_evicted: u64,
    pub(crate) writer: WriterModel,
    /// The findings engine, fed every completed interval (live or
    /// replayed); the strip and the `f` overlay show what it holds now.
    /// `r` leaves it: a finding is about the machine, not the counters.
    pub(crate) findings: Engine,
    /// Who dirtied what, per process, from each interval's `owners`.
    pub(crate) who: WhoModel,
    /// Each process's fsyncs, from each interval's `fsyncs`.
    pub(crate) fsyncs: crate::fsync::FsyncModel,
    /// Each process's write system calls, from each interval's `writes`.
    pub(crate) writes: crate::writes::WritesModel,
    /// The intervals' ledgers added up since the start (model/ledger.rs);
    /// `None` before the first line that has one.
    pub(crate) ledger: Option<wbscope_model::ledger::LedgerLine>,
    interval_calls: u64,
    interval_pages: u64,
}

impl Model {
    /// A model for the plan the loader produced.
    pub(crate) fn with_plan(plan: ProbePlan, host: String) -> Model {
        Model {
            probes: plan.statuses(),
            plan,
            host,
            ..Model::default()
        }
    }

    pub(crate) fn on_call(&mut self, call: &CallRecord) {
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
    pub(crate) fn end_interval(&mut self, secs: f64, kernel: KernelStats) {
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
    pub(crate) fn on_interval(&mut self, line: IntervalLine, kernel: KernelStats, cpu: OwnCpu) {
        // Calls a recorder's call sample left out (a store recorded under
        // `--cpu-budget`): in the totals and rates, in no per-call table.
        self.interval_calls += line.calls_sampled_out;
        self.interval_pages += line.pages_sampled_out;
        self.totals.calls += line.calls_sampled_out;
        self.totals.pages_written += line.pages_sampled_out;
        self.end_interval(line.interval_s, kernel);
        self.lost_records += line.lost_records;
        self.cpu = cpu;
        self.history.push_back(HistoryPoint {
            time_s: line.time_s,
            kernel_pages_per_s: self.pages_per_sec,
            writer_bytes_per_s: self.writer.current_rate() as f64,
            dirty_pages: line.dirty.vmstat.nr_dirty,
        });
        while self.history.len() > HISTORY_SECS {
            self.history.pop_front();
        }
        self.findings.interval(&line);
        self.who.on_owners(&line.owners);
        self.fsyncs.on_lines(&line.fsyncs, line.time_s);
        self.writes
            .on_lines(&line.writes, line.time_s, line.interval_s);
        if let Some(l) = &line.ledger {
            self.ledger.get_or_insert_with(Default::default).add(l);
        }
        self.last = Some(line);
    }

    /// The findings holding now, the most severe first (then catalogue
    /// name order, so the strip does not flicker between equals).
    pub(crate) fn active_findings(&self) -> Vec<&Finding> {
        let mut active: Vec<&Finding> = self.findings.active().collect();
        active.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.name.cmp(b.name)));
        active
    }

    pub(crate) fn on_writer(&mut self, update: WriterUpdate) {
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
                w.chunk_pages.merge(&s.chunk_pages);
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
    pub(crate) fn reset(&mut self) {
        self.hist_total = Log2Histogram::default();
        self.hist_interval = Log2Histogram::default();
        self.hist_last = Log2Histogram::default();
        self.totals = Totals::default();
        self.lost_records = 0;
        self.devices.clear();
        self.inodes.clear();
        self.inodes_evicted = 0;
        self.who.reset();
        self.interval_calls = 0;
        self.interval_pages = 0;
        self.writer.chunk_pages = Log2Histogram::default();
        self.writer.sync.clear();
    }
}

#[cfg(test)]
mod tests {
    use writeback_common::{WritepagesCall, call_flags};

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

        // A recorder's interval with calls its sample left out: they
        // count in the totals and the rates, in no per-call table.
        let rec = CallRecord {
            sampled: true,
            ..CallRecord::from(&raw_call(4))
        };
        m.on_call(&rec);
        let mut calls = wbscope_model::interval::CallAggregate::default();
        calls.add(&rec);
        let prev = wbscope_model::kernel::KernelSnapshot {
            agg: vec![0; writeback_common::agg::COUNT as usize],
            ..Default::default()
        };
        let mut cur = prev.clone();
        cur.agg[writeback_common::agg::CALLS_SAMPLED_OUT as usize] = 63;
        cur.agg[writeback_common::agg::PAGES_SAMPLED_OUT as usize] = 252;
        let line = IntervalLine::new(3.0, 1.0, &calls, &prev, &cur);
        assert_eq!((line.calls, line.pages_written), (64, 256));
        m.on_interval(line, KernelStats::default(), OwnCpu::default());
        assert_eq!(
            (m.totals.calls, m.totals.pages_written),
            (2 + 64, 101 + 256)
        );
        assert_eq!((m.calls_per_sec, m.pages_per_sec), (64.0, 256.0));
        assert_eq!(m.hist_total.count(), 3);
    }

    #[test]
    fn the_tracer_is_the_process_less_the_writer_and_never_negative() {
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-12);
        // The header's case: the process used 77.7 % of a core, 74.6 of
        // them the writer's copies.
        let cpu = OwnCpu::split(1.0, 777_000_000, 746_000_000);
        assert!(
            close(cpu.tracer, 0.031) && close(cpu.writer, 0.746),
            "{cpu:?}"
        );
        // Over two seconds, with the writer on two cores.
        let cpu = OwnCpu::split(2.0, 3_100_000_000, 3_000_000_000);
        assert!(close(cpu.tracer, 0.05) && close(cpu.writer, 1.5), "{cpu:?}");
        // No writer: all of it is the tracer's.
        let cpu = OwnCpu::split(1.0, 4_000_000, 0);
        assert!(
            close(cpu.tracer, 0.004) && close(cpu.writer, 0.0),
            "{cpu:?}"
        );
        // The writer read above the process: the tracer is 0, not below,
        // and the writer no more than the process.
        let cpu = OwnCpu::split(1.0, 500_000_000, 500_000_001);
        assert!(close(cpu.tracer, 0.0) && close(cpu.writer, 0.5), "{cpu:?}");
        let cpu = OwnCpu::split(1.0, 0, 7);
        assert!(close(cpu.tracer, 0.0) && close(cpu.writer, 0.0), "{cpu:?}");
        // No time between the readings: nothing measured.
        assert_eq!(OwnCpu::split(0.0, 1, 0), OwnCpu::default());
        assert_eq!(OwnCpu::split(f64::NAN, 1, 0), OwnCpu::default());
    }
}
