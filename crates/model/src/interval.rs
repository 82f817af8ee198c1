//! Interval aggregates: what `trace --interval` prints once per interval
//! and the dashboard shows. Per-call figures come from the records of the
//! interval; high-rate figures from the kernel's per-CPU maps, differenced
//! between two snapshots; levels from the latest values.
use std::{borrow::Cow, collections::BTreeMap};

use serde::{Deserialize, Serialize};
use writeback_common::{DevCounterKey, agg, dirty, inode_pass as ip};

use crate::units::page_size;
use crate::{
    CallRecord, DevId, Log2Histogram, cause_name,
    device::device_lines,
    histogram::buckets_of,
    kernel::{KernelSnapshot, VmStat},
    wb_reason_name,
};
pub use crate::{
    device::{DeviceLine, DiskMeans},
    histogram::{Bucket, histogram_buckets, merge_buckets, quantile_bucket},
};

/// A name that is usually a static string (a cause, a reason, a line
/// type) but is owned when read back from a recording.
pub(crate) type Name = Cow<'static, str>;

/// Per-call figures of one interval, added up from the records.
#[derive(Clone, Debug, Default)]
pub struct CallAggregate {
    pub calls: u64,
    pub(crate) pages_written: u64,
    /// Sum of `nr_to_write` over calls with a finite budget, and how many
    /// calls asked for everything (`LONG_MAX`, e.g. fsync).
    pub(crate) pages_asked_finite: u64,
    pub(crate) calls_asked_finite: u64,
    pub(crate) pages_written_finite: u64,
    pub(crate) calls_unbounded: u64,
    pub(crate) pages_per_call: Log2Histogram,
    pub(crate) by_cause: BTreeMap<&'static str, u64>,
    pub(crate) scan_bytes: u64,
    /// Pages written by the calls whose scan was measured.
    pub(crate) scan_pages_written: u64,
    pub(crate) duration_ns: u64,
    pub(crate) duration_pages: u64,
    pub(crate) on_cpu_ns: u64,
    pub(crate) on_cpu_pages: u64,
    pub(crate) extents: u64,
    pub(crate) extent_blocks: u64,
    pub(crate) bios: u64,
    pub(crate) bio_bytes: u64,
    pub(crate) folios_written: u64,
    /// WB_SYNC_ALL calls that wrote at least one page, and their pages
    /// (the fsync-storm finding, model/findings).
    pub(crate) sync_calls_writing: u64,
    pub(crate) sync_pages_written: u64,
    pub(crate) sync_pages_per_call: Log2Histogram,
    /// Cyclic calls continued by the next call on the same inode
    /// ([`Continued`]).
    pub(crate) continued: Continued,
}

/// Cyclic writepages calls that stopped short and were continued at once:
/// the next call on the same inode started at the `writeback_index` the
/// call left, within [`Continued::GAP_NS`] of its end. That is the
/// flusher requeueing an inode that still had dirty pages
/// (`requeue_io()` in fs/fs-writeback.c) — a call capped below the data
/// there was, the 2.6.32 ext4 chunk case (the chunk-capped finding).
#[derive(Clone, Debug, Default)]
pub(crate) struct Continued {
    /// (dev, ino) -> (writeback_index after, pages written, asked, end ns)
    /// of the last cyclic call on the inode in this interval.
    last: std::collections::HashMap<(DevId, u64), (u64, i64, i64, u64)>,
    /// Pages written by each continued call -> how many calls.
    pub(crate) pages: BTreeMap<u64, u64>,
    pub(crate) calls_finite: u64,
    pub(crate) pages_asked_finite: u64,
    pub(crate) calls_unbounded: u64,
}

impl Continued {
    /// A flusher requeue is immediate; new dirty data arriving later comes
    /// with the next wakeup (`dirty_writeback_centisecs`, 5 s by default).
    pub(crate) const GAP_NS: u64 = 10_000_000;

    fn add(&mut self, c: &CallRecord) {
        if !(c.range_cyclic && c.start_seen) {
            return;
        }
        let key = (c.dev, c.ino);
        if let Some(&(after, pages, asked, end)) = self.last.get(&key)
            && pages > 0
            && c.writeback_index_before == after
            && c.start_ns >= end
            && c.start_ns - end <= Self::GAP_NS
        {
            *self.pages.entry(pages as u64).or_default() += 1;
            if asked == i64::MAX {
                self.calls_unbounded += 1;
            } else {
                self.calls_finite += 1;
                self.pages_asked_finite += asked.max(0) as u64;
            }
        }
        self.last.insert(
            key,
            (
                c.writeback_index_after,
                c.pages_written,
                c.nr_to_write,
                c.start_ns + c.duration_ns,
            ),
        );
    }
}

impl CallAggregate {
    pub fn add(&mut self, c: &CallRecord) {
        let pages = c.pages_written.max(0) as u64;
        self.calls += 1;
        self.pages_written += pages;
        if c.start_seen && c.nr_to_write != i64::MAX {
            self.calls_asked_finite += 1;
            self.pages_asked_finite += c.nr_to_write.max(0) as u64;
            self.pages_written_finite += pages;
        } else if c.nr_to_write == i64::MAX {
            self.calls_unbounded += 1;
        }
        self.pages_per_call.record(pages);
        *self.by_cause.entry(cause_name(c.cause)).or_default() += 1;
        if let Some(scan) = &c.scan {
            self.scan_bytes += scan.bytes;
            self.scan_pages_written += pages;
        }
        if c.start_seen {
            self.duration_ns += c.duration_ns;
            self.duration_pages += pages;
        }
        if let Some(on_cpu) = c.on_cpu_ns {
            self.on_cpu_ns += on_cpu;
            self.on_cpu_pages += pages;
        }
        self.extents += u64::from(c.extents);
        self.extent_blocks += c.extent_blocks;
        self.bios += u64::from(c.bios);
        self.bio_bytes += c.bio_bytes;
        self.folios_written += u64::from(c.folios_written);
        if c.sync_mode == 1 && pages > 0 {
            self.sync_calls_writing += 1;
            self.sync_pages_written += pages;
            self.sync_pages_per_call.record(pages);
        }
        self.continued.add(c);
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScanLine {
    pub(crate) bytes_scanned: u64,
    pub(crate) pages_written: u64,
    /// Pages examined per page written (`bytes_scanned / page size /
    /// pages_written`); null when nothing was written.
    pub pages_scanned_per_page_written: Option<f64>,
}

/// Inode passes (`writeback_single_inode`, `__writeback_single_inode()`
/// in fs/fs-writeback.c) on one device or a group of devices. A pass's
/// budget is `nr_to_write` at its start; pages written is the budget
/// consumed. "Budget" passes are those with a finite one, 0 <
/// `nr_to_write` < LONG_MAX: the flusher's WB_SYNC_NONE chunks
/// (`writeback_chunk_size()`), the chunk of the Linux 3.2 discussion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InodePassCounts {
    pub passes: u64,
    pub pages_written: u64,
    pub budget_passes: u64,
    pub budget_pages_asked: u64,
    pub budget_pages_written: u64,
    /// log2 histogram of pages written per budget pass.
    pub pages_per_pass: Vec<Bucket>,
    /// The same for the other passes (budget LONG_MAX: WB_SYNC_ALL,
    /// tagged sync writeback, write_inode_now; budget 0:
    /// sync_inode_metadata).
    pub pages_per_unbounded_pass: Vec<Bucket>,
    /// log2 histogram of the budget of each budget pass.
    pub pages_asked_per_pass: Vec<Bucket>,
}

impl InodePassCounts {
    /// From one device's `INODE_PASS` deltas, by `inode_pass` index.
    fn from_deltas(d: impl Fn(u32) -> u64) -> InodePassCounts {
        let hist = |base: u32| buckets_of((0..ip::HIST_BUCKETS).map(|b| (b as usize, d(base + b))));
        let pages_per_pass = hist(ip::WROTE_HIST);
        let pages_per_unbounded_pass = hist(ip::UNBOUNDED_WROTE_HIST);
        let count = |h: &[Bucket]| h.iter().map(|b| b.count).sum::<u64>();
        let budget_passes = count(&pages_per_pass);
        InodePassCounts {
            passes: budget_passes + count(&pages_per_unbounded_pass),
            pages_written: d(ip::WROTE),
            budget_passes,
            budget_pages_asked: d(ip::BUDGET_ASKED),
            budget_pages_written: d(ip::BUDGET_WROTE),
            pages_per_pass,
            pages_per_unbounded_pass,
            pages_asked_per_pass: hist(ip::ASKED_HIST),
        }
    }

    /// Adds another device's counts.
    pub fn merge(&mut self, o: &InodePassCounts) {
        self.passes += o.passes;
        self.pages_written += o.pages_written;
        self.budget_passes += o.budget_passes;
        self.budget_pages_asked += o.budget_pages_asked;
        self.budget_pages_written += o.budget_pages_written;
        self.pages_per_pass = merge_buckets(&self.pages_per_pass, &o.pages_per_pass);
        self.pages_per_unbounded_pass =
            merge_buckets(&self.pages_per_unbounded_pass, &o.pages_per_unbounded_pass);
        self.pages_asked_per_pass =
            merge_buckets(&self.pages_asked_per_pass, &o.pages_asked_per_pass);
    }

    /// Quantile `q` of pages written per budget pass, over the passes that
    /// wrote at least one page (a pass finding only pages already under
    /// writeback, or only a dirty inode, writes none: it is no chunk).
    pub(crate) fn pages_per_pass_quantile(&self, q: f64) -> Option<[u64; 2]> {
        let writing: Vec<Bucket> = self
            .pages_per_pass
            .iter()
            .filter(|b| b.hi > 0)
            .cloned()
            .collect();
        quantile_bucket(&writing, q)
    }
}

/// [`InodePassCounts`] of one device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InodePassLine {
    pub(crate) dev: DevId,
    #[serde(flatten)]
    pub counts: InodePassCounts,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlusherLine {
    pub reason: Name,
    pub chunks: u64,
    pub pages: u64,
}

/// WB_SYNC_ALL calls of the interval that wrote pages (fsync, fdatasync,
/// sync, O_SYNC): the fsync-storm finding's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SyncCallsLine {
    pub(crate) calls_writing: u64,
    pub(crate) pages_written: u64,
    /// log2 histogram of pages written per such call.
    pub(crate) pages_per_call: Vec<Bucket>,
}

/// [`Continued`] of the interval: how many calls were continued at once
/// and the commonest size they stopped at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ContinuedLine {
    pub(crate) calls: u64,
    /// The most frequent pages-written figure among them, and its count.
    pub(crate) mode_pages: u64,
    pub(crate) mode_calls: u64,
    pub(crate) calls_finite: u64,
    pub(crate) pages_asked_finite: u64,
    pub(crate) calls_unbounded: u64,
}

impl ContinuedLine {
    fn of(c: &Continued) -> ContinuedLine {
        // Ties go to the smaller size (BTreeMap order, strict >).
        let (mode_pages, mode_calls) =
            c.pages.iter().fold(
                (0, 0),
                |best, (&p, &n)| {
                    if n > best.1 { (p, n) } else { best }
                },
            );
        ContinuedLine {
            calls: c.pages.values().sum(),
            mode_pages,
            mode_calls,
            calls_finite: c.calls_finite,
            pages_asked_finite: c.pages_asked_finite,
            calls_unbounded: c.calls_unbounded,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThrottleLine {
    pub events: u64,
    pub pauses: u64,
    pub pause_ms_total: u64,
    pub pause_ms: Vec<Bucket>,
    /// Which limit the pauses came from, when the programs could tell
    /// (absent in older recordings): [`ThrottleLimits`].
    #[serde(default)]
    pub(crate) limits: Option<ThrottleLimits>,
    /// The tasks paused most in the interval, most first.
    #[serde(default)]
    pub(crate) paused: Vec<PausedTask>,
}

/// Pause ms of the interval by the limit that paused the task, from the
/// `balance_dirty_pages` tracepoint's `limit`, `setpoint` and `dirty`
/// (mm/page-writeback.c; include/trace/events/writeback.h): a pause with
/// the domain's dirty at or under its free-run ceiling (`2 * setpoint -
/// limit`) can only come from the device's own limit (`strict_limit`,
/// `domain_dirty_freerun()`); over it, a domain `limit` below the global
/// `dirty_limit`, or a free-run ceiling under the global domain's (6.1
/// and 6.12 report the global `limit` for every domain), is a memcg's.
/// The rest is the global limit (docs/findings.md, "Which limit").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ThrottleLimits {
    pub(crate) global_ms: u64,
    pub(crate) bdi_ms: u64,
    pub(crate) memcg_ms: u64,
}

/// A task paused by `balance_dirty_pages` in the interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PausedTask {
    pub(crate) tgid: u32,
    pub(crate) comm: String,
    pub(crate) pause_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DirtyLine {
    /// From `writeback:global_dirty_state` (null until it fires).
    pub(crate) tracepoint: Option<BTreeMap<Name, u64>>,
    pub vmstat: VmStat,
    /// `nr_written` and `nr_dirtied` deltas over the interval.
    pub vmstat_written_delta: u64,
    pub vmstat_dirtied_delta: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunTimeLine {
    pub program: String,
    pub run_count: u64,
    pub run_time_ns: u64,
    pub(crate) avg_ns: Option<f64>,
    /// Runs the kernel skipped because the program was already running
    /// on that CPU (`recursion_misses`, Linux 5.12+), and for a kretprobe
    /// the returns its event missed for want of an instance: events it
    /// never saw. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recursion_misses: u64,
}

/// `{"type":"interval", ...}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntervalLine {
    pub(crate) r#type: Name,
    /// Seconds since the trace started, at the end of the interval.
    pub time_s: f64,
    pub interval_s: f64,
    /// Every call, those the kernel's call sample left out included.
    pub calls: u64,
    pub pages_written: u64,
    /// Of `calls` and `pages_written`: the ext4 calls the CPU budget's call
    /// sample left out (counted in the kernel, no record; `budget.
    /// calls_1_in` says the rate), and their pages. The figures below that
    /// come from records (causes, distributions, scan, owners' pages
    /// written) are then those of the sample. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_sampled_out: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pages_sampled_out: u64,
    pub calls_by_cause: BTreeMap<Name, u64>,
    pub(crate) pages_per_call: Vec<Bucket>,
    /// Pages written / pages asked over calls with a finite budget.
    pub written_per_asked: Option<f64>,
    pub(crate) calls_asking_everything: u64,
    pub scan: ScanLine,
    pub ns_per_written_page: Option<f64>,
    pub(crate) on_cpu_ns_per_written_page: Option<f64>,
    pub extents: u64,
    pub(crate) extent_blocks: u64,
    pub bios: u64,
    pub(crate) bio_bytes: u64,
    pub(crate) folios_written: u64,
    /// wbc_writepage events anywhere (not only inside traced calls).
    pub(crate) wbc_writepage_events: u64,
    pub inode_passes: u64,
    pub inode_pages_asked: u64,
    pub inode_pages_wrote: u64,
    /// Inode passes per device (tp_btf hook only; empty otherwise, and in
    /// recordings made before it existed).
    #[serde(default)]
    pub inode_passes_by_device: Vec<InodePassLine>,
    pub flusher: Vec<FlusherLine>,
    pub dirty: DirtyLine,
    pub throttle: ThrottleLine,
    pub devices: Vec<DeviceLine>,
    pub lost_records: u64,
    /// Counts the programs could not keep, a hash map being full
    /// (`KernelStats::map_full`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub map_full: u64,
    /// Calls whose start found the in-flight map full
    /// (`KernelStats::inflight_full`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inflight_full: u64,
    /// Entries the LRU maps evicted in the interval
    /// (`KernelStats::lru_evicted`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lru_evicted: u64,
    pub run_time: Vec<RunTimeLine>,
    /// Per process: pages dirtied, written back (by itself or others),
    /// throttled (model/dirtier.rs); empty without the dirtier hook and
    /// in recordings made before it existed.
    #[serde(default)]
    pub owners: Vec<crate::dirtier::OwnerLine>,
    /// WB_SYNC_ALL calls that wrote pages (absent in older recordings).
    #[serde(default)]
    pub(crate) sync_calls: SyncCallsLine,
    /// Cyclic calls continued at once on the same inode (absent in older
    /// recordings).
    #[serde(default)]
    pub(crate) continued_calls: ContinuedLine,
    /// The recorder's CPU budget and what it sampled in the interval
    /// (`record --cpu-budget`); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::BudgetLine>,
    /// Each process's fsyncs, split (`--enable durability`; model/
    /// durability/line.rs); absent without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fsyncs: Vec<crate::durability::FsyncLine>,
    /// Each process's write system calls, split (`--enable writes`;
    /// model/writes.rs); absent without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<crate::writes::WriteLine>,
    /// Where the interval's bytes went (model/ledger.rs); absent in
    /// recordings made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<crate::ledger::LedgerLine>,
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Tasks paused in the interval, most first, at most [`PAUSED_KEPT`].
pub(crate) const PAUSED_KEPT: usize = 5;

fn paused_tasks(prev: &KernelSnapshot, cur: &KernelSnapshot) -> Vec<PausedTask> {
    let mut v: Vec<PausedTask> = cur
        .throttled
        .iter()
        .filter_map(|(&tgid, (ms, comm))| {
            // An entry the LRU evicted and a new one made since: all new.
            let before = prev.throttled.get(&tgid).map_or(0, |p| p.0);
            let delta = if *ms >= before { ms - before } else { *ms };
            (delta > 0).then(|| PausedTask {
                tgid,
                comm: comm.clone(),
                pause_ms: delta,
            })
        })
        .collect();
    v.sort_by(|a, b| b.pause_ms.cmp(&a.pause_ms).then(a.tgid.cmp(&b.tgid)));
    v.truncate(PAUSED_KEPT);
    v
}

pub(crate) fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

impl IntervalLine {
    pub fn new(
        time_s: f64,
        interval_s: f64,
        calls: &CallAggregate,
        prev: &KernelSnapshot,
        cur: &KernelSnapshot,
    ) -> IntervalLine {
        // Counters wrap modulo 2^64 like the kernel's adds.
        let d = |i: u32| cur.agg(i).wrapping_sub(prev.agg(i));
        let (calls_sampled_out, pages_sampled_out) =
            (d(agg::CALLS_SAMPLED_OUT), d(agg::PAGES_SAMPLED_OUT));
        let page = page_size();

        let flusher = (0..agg::WB_REASONS)
            .filter(|&r| d(agg::WORK_CHUNKS + r) > 0)
            .map(|r| FlusherLine {
                reason: Cow::Borrowed(wb_reason_name(r + 1).unwrap_or("other")),
                chunks: d(agg::WORK_CHUNKS + r),
                pages: d(agg::WORK_PAGES + r),
            })
            .collect();

        let devices = device_lines(prev, cur, interval_s);

        let pass_devs: std::collections::BTreeSet<u32> =
            cur.inode_pass.keys().map(|k| k.dev).collect();
        let inode_passes_by_device = pass_devs
            .into_iter()
            .map(|dev| {
                let get = |snap: &KernelSnapshot, index| {
                    snap.inode_pass
                        .get(&DevCounterKey { dev, index })
                        .copied()
                        .unwrap_or(0)
                };
                InodePassLine {
                    dev: DevId::from_kernel(dev),
                    counts: InodePassCounts::from_deltas(|i| {
                        get(cur, i).wrapping_sub(get(prev, i))
                    }),
                }
            })
            .filter(|l| l.counts.passes > 0)
            .collect();

        let tracepoint_dirty = (cur
            .dirty
            .get(dirty::UPDATED_NS as usize)
            .copied()
            .unwrap_or(0)
            != 0)
            .then(|| {
                writeback_common::fields::global_dirty::NAMES
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (Cow::Borrowed(*name), cur.dirty.get(i).copied().unwrap_or(0)))
                    .collect()
            });

        let run_time = cur
            .run_times
            .iter()
            .map(|r| {
                let before = prev.run_times.iter().find(|p| p.program == r.program);
                let count = r.run_count - before.map_or(0, |b| b.run_count.min(r.run_count));
                let time = r.run_time_ns - before.map_or(0, |b| b.run_time_ns.min(r.run_time_ns));
                let misses = r.recursion_misses
                    - before.map_or(0, |b| b.recursion_misses.min(r.recursion_misses));
                RunTimeLine {
                    program: r.program.clone(),
                    run_count: count,
                    run_time_ns: time,
                    avg_ns: ratio(time, count),
                    recursion_misses: misses,
                }
            })
            .collect();

        IntervalLine {
            r#type: Cow::Borrowed("interval"),
            time_s,
            interval_s,
            calls: calls.calls + calls_sampled_out,
            pages_written: calls.pages_written + pages_sampled_out,
            calls_sampled_out,
            pages_sampled_out,
            calls_by_cause: calls
                .by_cause
                .iter()
                .map(|(k, v)| (Cow::Borrowed(*k), *v))
                .collect(),
            pages_per_call: histogram_buckets(&calls.pages_per_call),
            written_per_asked: ratio(calls.pages_written_finite, calls.pages_asked_finite),
            calls_asking_everything: calls.calls_unbounded,
            scan: ScanLine {
                bytes_scanned: calls.scan_bytes,
                pages_written: calls.scan_pages_written,
                pages_scanned_per_page_written: ratio(
                    calls.scan_bytes / page,
                    calls.scan_pages_written,
                ),
            },
            ns_per_written_page: ratio(calls.duration_ns, calls.duration_pages),
            on_cpu_ns_per_written_page: ratio(calls.on_cpu_ns, calls.on_cpu_pages),
            extents: calls.extents,
            extent_blocks: calls.extent_blocks,
            bios: calls.bios,
            bio_bytes: calls.bio_bytes,
            folios_written: calls.folios_written,
            wbc_writepage_events: d(agg::WBC_WRITEPAGE),
            inode_passes: d(agg::INODE_PASSES),
            inode_pages_asked: d(agg::INODE_ASKED),
            inode_pages_wrote: d(agg::INODE_WROTE),
            inode_passes_by_device,
            flusher,
            dirty: DirtyLine {
                tracepoint: tracepoint_dirty,
                vmstat: cur.vmstat,
                vmstat_written_delta: cur.vmstat.nr_written.saturating_sub(prev.vmstat.nr_written),
                vmstat_dirtied_delta: cur.vmstat.nr_dirtied.saturating_sub(prev.vmstat.nr_dirtied),
            },
            throttle: ThrottleLine {
                events: d(agg::THROTTLE_EVENTS),
                pauses: d(agg::THROTTLE_PAUSES),
                pause_ms_total: d(agg::THROTTLE_PAUSE_MS),
                pause_ms: buckets_of(
                    (0..agg::HIST_BUCKETS).map(|b| (b as usize, d(agg::THROTTLE_HIST + b))),
                ),
                limits: {
                    let l = ThrottleLimits {
                        global_ms: d(agg::THROTTLE_GLOBAL_MS),
                        bdi_ms: d(agg::THROTTLE_BDI_MS),
                        memcg_ms: d(agg::THROTTLE_MEMCG_MS),
                    };
                    (l.global_ms + l.bdi_ms + l.memcg_ms > 0).then_some(l)
                },
                paused: paused_tasks(prev, cur),
            },
            devices,
            lost_records: cur
                .stats
                .lost_records
                .saturating_sub(prev.stats.lost_records),
            map_full: cur.stats.map_full.saturating_sub(prev.stats.map_full),
            inflight_full: cur
                .stats
                .inflight_full
                .saturating_sub(prev.stats.inflight_full),
            lru_evicted: cur.stats.lru_evicted.saturating_sub(prev.stats.lru_evicted),
            run_time,
            sync_calls: SyncCallsLine {
                calls_writing: calls.sync_calls_writing,
                pages_written: calls.sync_pages_written,
                pages_per_call: histogram_buckets(&calls.sync_pages_per_call),
            },
            continued_calls: ContinuedLine::of(&calls.continued),
            owners: Vec::new(),
            budget: None,
            fsyncs: Vec::new(),
            writes: Vec::new(),
            ledger: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use writeback_common::{BlockHistKey, block_hist, flush_class};

    use super::*;
    use crate::{
        ScanFigures, Totals, device::FlushLine, kernel::KernelStats, summary::SummaryLine,
    };

    fn call(pages: i64, asked: i64) -> CallRecord {
        CallRecord {
            dev: DevId::from_kernel(1),
            ino: 1,
            tgid: 1,
            tid: 1,
            comm: "t".into(),
            start_ns: 1,
            duration_ns: 1000,
            nr_to_write: asked,
            pages_written: pages,
            start_seen: true,
            cause: writeback_common::cause::BACKGROUND,
            work_reason: 1,
            on_cpu_ns: Some(400),
            scan: Some(ScanFigures {
                iterations: 1,
                bytes: pages as u64 * 4096 * 2,
                first_pos: 0,
                last_pos: 0,
            }),
            extents: 1,
            extent_blocks: 8,
            bios: 2,
            bio_bytes: 8192,
            ..CallRecord::default()
        }
    }

    #[test]
    fn interval_figures_from_calls_and_snapshots() {
        let mut calls = CallAggregate::default();
        calls.add(&call(10, 20));
        calls.add(&call(30, 40));
        let mut unbounded = call(100, i64::MAX);
        unbounded.cause = writeback_common::cause::SYNC;
        unbounded.scan = None;
        calls.add(&unbounded);

        let mut prev = KernelSnapshot {
            agg: vec![0; agg::COUNT as usize],
            ..Default::default()
        };
        prev.vmstat.nr_written = 1000;
        let mut cur = prev.clone();
        cur.agg[agg::WORK_CHUNKS as usize] = 3;
        cur.agg[agg::WORK_PAGES as usize] = 40;
        cur.agg[agg::THROTTLE_EVENTS as usize] = 5;
        cur.agg[agg::THROTTLE_PAUSES as usize] = 2;
        cur.agg[agg::THROTTLE_PAUSE_MS as usize] = 30;
        cur.agg[(agg::THROTTLE_HIST + 4) as usize] = 2;
        cur.vmstat.nr_written = 1140;
        cur.block.insert(
            BlockHistKey {
                dev: (254 << 20),
                kind: block_hist::ISSUE_BYTES,
                bucket: 21,
            },
            7,
        );
        // Three of them flushes: two empty ones at 64-127 µs, one FUA write.
        let flush_key = |class, bucket| BlockHistKey {
            dev: (254 << 20),
            kind: block_hist::FLUSH_LATENCY_NS + class,
            bucket,
        };
        cur.block.insert(flush_key(flush_class::FLUSH, 17), 2);
        cur.block.insert(flush_key(flush_class::FUA, 12), 1);
        prev.block.insert(flush_key(flush_class::FUA, 12), 1);
        cur.block
            .insert(flush_key(flush_class::PREFLUSH_FUA, 12), 1);
        cur.stats.lost_records = 0;

        let line = IntervalLine::new(2.0, 1.0, &calls, &prev, &cur);
        assert_eq!(line.calls, 3);
        assert_eq!(line.pages_written, 140);
        assert_eq!(line.calls_by_cause["background"], 2);
        assert_eq!(line.calls_by_cause["sync"], 1);
        assert_eq!(line.written_per_asked, Some(40.0 / 60.0));
        assert_eq!(line.calls_asking_everything, 1);
        // 80 pages scanned (2 per page written) for 40 pages written.
        assert_eq!(line.scan.pages_scanned_per_page_written, Some(2.0));
        assert_eq!(line.ns_per_written_page, Some(3000.0 / 140.0));
        assert_eq!(line.on_cpu_ns_per_written_page, Some(1200.0 / 140.0));
        assert_eq!(line.flusher.len(), 1);
        assert_eq!(
            (line.flusher[0].reason.as_ref(), line.flusher[0].pages),
            ("background", 40)
        );
        // Interval lines read back from a recording are the same lines.
        let json = serde_json::to_string(&line).unwrap();
        let back: IntervalLine = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert_eq!(line.throttle.pause_ms_total, 30);
        assert_eq!(
            line.throttle.pause_ms,
            vec![Bucket {
                lo: 8,
                hi: 15,
                count: 2
            }]
        );
        assert_eq!(line.dirty.vmstat_written_delta, 140);
        assert_eq!(line.devices.len(), 1);
        assert_eq!(line.devices[0].dev.to_string(), "254:0");
        assert_eq!(line.devices[0].requests, 7);
        assert_eq!(
            line.devices[0].request_bytes,
            vec![Bucket {
                lo: 1 << 20,
                hi: (1 << 21) - 1,
                count: 7
            }]
        );
        // Only the classes that grew, each with its percentiles' buckets.
        let flush = |kind, lo: u64, count| FlushLine {
            kind: Cow::Borrowed(kind),
            requests: count,
            latency_ns: vec![Bucket {
                lo,
                hi: 2 * lo - 1,
                count,
            }],
            p50_ns: Some([lo, 2 * lo - 1]),
            p99_ns: Some([lo, 2 * lo - 1]),
        };
        assert_eq!(
            line.devices[0].flushes,
            vec![flush("flush", 65536, 2), flush("preflush_fua", 2048, 1)]
        );
        let pages: Vec<_> = line
            .pages_per_call
            .iter()
            .map(|b| (b.lo, b.count))
            .collect();
        assert_eq!(pages, vec![(8, 1), (16, 1), (64, 1)]);
        let json = serde_json::to_value(&line).unwrap();
        assert_eq!(json["type"], "interval");
        assert_eq!(json["inode_passes_by_device"], serde_json::json!([]));
        // No call sample: no sampled-out fields in the line.
        assert!(json.get("calls_sampled_out").is_none(), "{json}");

        // The calls the kernel's sample left out count in the totals, and
        // say so; what comes from records stays the sample's.
        let mut sampled = cur.clone();
        sampled.agg[agg::CALLS_SAMPLED_OUT as usize] = 21;
        sampled.agg[agg::PAGES_SAMPLED_OUT as usize] = 980;
        let line = IntervalLine::new(2.0, 1.0, &calls, &prev, &sampled);
        assert_eq!((line.calls, line.pages_written), (3 + 21, 140 + 980));
        assert_eq!((line.calls_sampled_out, line.pages_sampled_out), (21, 980));
        assert_eq!(line.calls_by_cause.values().sum::<u64>(), 3);
        let json = serde_json::to_string(&line).unwrap();
        let back: IntervalLine = serde_json::from_str(&json).unwrap();
        assert_eq!((back.calls_sampled_out, back.pages_sampled_out), (21, 980));
        let mut summary = SummaryLine::new(
            9.0,
            &Totals {
                calls: 3,
                pages_written: 140,
                nr_to_write: 0,
            },
            &KernelStats::default(),
            0,
            &[],
            &[],
        );
        summary.add_sampled_out(&sampled.agg);
        assert_eq!((summary.calls, summary.pages_written), (24, 1120));
        assert_eq!(summary.calls_sampled_out, 21);
    }

    fn b(lo: u64, hi: u64, count: u64) -> Bucket {
        Bucket { lo, hi, count }
    }

    #[test]
    fn quantile_bucket_is_the_bucket_reaching_the_rank() {
        assert_eq!(quantile_bucket(&[], 0.5), None);
        assert_eq!(quantile_bucket(&[b(0, 0, 0)], 0.5), None);
        let h = [b(1, 1, 2), b(8, 15, 1), b(1024, 2047, 7)];
        // 10 values: rank 5 (p50) and 10 (p99) are in the last bucket,
        // rank 2 (p20) in the first, rank 3 (p30) in the second.
        assert_eq!(quantile_bucket(&h, 0.5), Some([1024, 2047]));
        assert_eq!(quantile_bucket(&h, 0.99), Some([1024, 2047]));
        assert_eq!(quantile_bucket(&h, 0.2), Some([1, 1]));
        assert_eq!(quantile_bucket(&h, 0.3), Some([8, 15]));
        // q = 0 still names the smallest value's bucket.
        assert_eq!(quantile_bucket(&h, 0.0), Some([1, 1]));
        // Same answer as the device-request median of compare for even
        // totals: the bucket where half the count is reached.
        assert_eq!(
            quantile_bucket(&[b(1, 1, 1), b(2, 3, 1)], 0.5),
            Some([1, 1])
        );
    }

    #[test]
    fn merge_buckets_adds_counts_per_bucket_in_order() {
        let m = merge_buckets(&[b(4, 7, 1), b(16, 31, 2)], &[b(1, 1, 5), b(16, 31, 3)]);
        assert_eq!(m, vec![b(1, 1, 5), b(4, 7, 1), b(16, 31, 5)]);
    }

    #[test]
    fn inode_passes_per_device_from_snapshots() {
        let key = |dev, index| DevCounterKey { dev, index };
        let (xfs, ext4) = ((7 << 20) | 3, (7 << 20) | 4);
        let mut prev = KernelSnapshot {
            agg: vec![0; agg::COUNT as usize],
            ..Default::default()
        };
        // Counts from before the interval are differenced away.
        prev.inode_pass.insert(key(xfs, ip::WROTE_HIST + 14), 5);
        prev.inode_pass.insert(key(xfs, ip::WROTE), 5 * 8192);
        let mut cur = prev.clone();
        // xfs: three budget passes of 8192 asked (bucket 14), two of which
        // wrote 8192 pages (bucket 14) and one none (bucket 0); one
        // WB_SYNC_ALL pass wrote 100 (bucket 7).
        cur.inode_pass.insert(key(xfs, ip::WROTE_HIST + 14), 5 + 2);
        cur.inode_pass.insert(key(xfs, ip::WROTE_HIST), 1);
        cur.inode_pass.insert(key(xfs, ip::ASKED_HIST + 14), 3);
        cur.inode_pass
            .insert(key(xfs, ip::UNBOUNDED_WROTE_HIST + 7), 1);
        cur.inode_pass
            .insert(key(xfs, ip::WROTE), 5 * 8192 + 2 * 8192 + 100);
        cur.inode_pass.insert(key(xfs, ip::BUDGET_ASKED), 3 * 8192);
        cur.inode_pass.insert(key(xfs, ip::BUDGET_WROTE), 2 * 8192);
        // ext4: nothing new in this interval.
        cur.inode_pass.insert(key(ext4, ip::WROTE), 0);
        prev.inode_pass.insert(key(ext4, ip::WROTE), 0);

        let line = IntervalLine::new(1.0, 1.0, &CallAggregate::default(), &prev, &cur);
        assert_eq!(
            line.inode_passes_by_device.len(),
            1,
            "idle devices left out"
        );
        let l = &line.inode_passes_by_device[0];
        assert_eq!(l.dev.to_string(), "7:3");
        let c = &l.counts;
        assert_eq!(c.passes, 4);
        assert_eq!(c.pages_written, 2 * 8192 + 100);
        assert_eq!(c.budget_passes, 3);
        assert_eq!(c.budget_pages_asked, 3 * 8192);
        assert_eq!(c.budget_pages_written, 2 * 8192);
        assert_eq!(c.pages_per_pass, vec![b(0, 0, 1), b(8192, 16383, 2)]);
        assert_eq!(c.pages_per_unbounded_pass, vec![b(64, 127, 1)]);
        assert_eq!(c.pages_asked_per_pass, vec![b(8192, 16383, 3)]);
        // The pass that wrote nothing is no chunk.
        assert_eq!(c.pages_per_pass_quantile(0.5), Some([8192, 16383]));
        assert_eq!(quantile_bucket(&c.pages_per_pass, 0.3), Some([0, 0]));

        let mut both = c.clone();
        both.merge(c);
        assert_eq!(both.passes, 8);
        assert_eq!(both.pages_per_pass, vec![b(0, 0, 2), b(8192, 16383, 4)]);

        // The JSON shape: the device and the counts side by side; a line
        // from a recording without the field reads back as empty.
        let json = serde_json::to_value(&line).unwrap();
        let d = &json["inode_passes_by_device"][0];
        assert_eq!(d["dev"], "7:3");
        assert_eq!(d["budget_pages_written"], 16384);
        assert_eq!(d["pages_per_pass"][1]["lo"], 8192);
        let back: IntervalLine = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.inode_passes_by_device[0].counts, *c);
        let mut old = json;
        old.as_object_mut()
            .unwrap()
            .remove("inode_passes_by_device");
        let back: IntervalLine = serde_json::from_value(old).unwrap();
        assert!(back.inode_passes_by_device.is_empty());
    }
}
