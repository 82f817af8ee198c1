//! `device-saturated`: request latency far above the device's own
//! baseline while requests are always in flight. The baseline is learnt
//! over the run: the lowest median latency bucket the device showed in an
//! interval with enough requests to have a median. `flush-bound`: the
//! device spends a large share of its time on cache flushes.
use std::collections::BTreeMap;

use serde_json::json;

use super::{Ctx, Evidence, Verdict, band, round3};
use crate::{
    DevId, Log2Histogram,
    interval::{DeviceLine, IntervalLine, quantile_bucket},
};

pub(crate) const SATURATED: &str = "device-saturated";
pub(crate) const FLUSH_BOUND: &str = "flush-bound";

/// Evidence `latency_from` for figures from /proc/diskstats' means.
const DISKSTATS_MEAN: &str = "/proc/diskstats mean";

/// flush-bound: intervals added up, flushes needed in them, and the share
/// of the time a flush was outstanding (the flushes' summed time per
/// second; the block layer keeps one flush in flight per queue and
/// merges those that wait, block/blk-flush.c, so their times do not
/// overlap much). From a tenth (`info`) the syncs that asked for them
/// wait on the cache noticeably; from half (`warning`) a sync more often
/// than not finds a flush in progress and queues behind it.
pub(crate) const FLUSH_WINDOW: usize = 3;
pub(crate) const FLUSH_MIN: u64 = 3;
pub(crate) const FLUSH_INFO: f64 = 0.1;
pub(crate) const FLUSH_WARNING: f64 = 0.5;

/// Requests an interval needs for its median to count (baseline or
/// judgement).
pub(crate) const MIN_REQUESTS: u64 = 32;
/// log2 buckets over the baseline: 3 = at least 8x, 6 = at least 64x.
pub(crate) const WARNING_STEPS: u32 = 3;
pub(crate) const CRITICAL_STEPS: u32 = 6;
/// `info` from 2 steps, at least 4x: queueing has set in and the latency
/// the device's users feel has grown, short of the 8x at which the device
/// is the bottleneck.
pub(crate) const INFO_STEPS: u32 = 2;
/// Requests in flight on average (Little's law: completed requests x mean
/// latency / interval) from which the device counts as always busy.
pub(crate) const MIN_IN_FLIGHT: f64 = 1.0;
/// Consecutive intervals it must hold in: a burst that fills the queue
/// for a second (sync_file_range of a whole batch, a journal commit) is
/// the device doing its job, not saturation.
pub(crate) const HOLD: usize = 3;

/// Per device, the log2 bucket of the lowest median latency seen.
#[derive(Clone, Debug, Default)]
pub(crate) struct Baselines {
    p50_bucket: BTreeMap<DevId, u32>,
}

/// The log2 bucket index of a bucket's lower bound (0 for 0, k for
/// `[2^(k-1), 2^k)`).
fn bucket_index(lo: u64) -> u32 {
    if lo == 0 { 0 } else { lo.trailing_zeros() + 1 }
}

/// The median latency's bucket; by default, with /proc/diskstats and
/// no histogram, the mean's bucket stands for it (a mean over a median
/// moves with the slow tail, which saturation lengthens too).
fn p50(d: &DeviceLine) -> Option<[u64; 2]> {
    if d.requests < MIN_REQUESTS {
        return None;
    }
    match d.diskstats_alone() {
        Some(m) => Some(
            Log2Histogram::bucket_bounds(Log2Histogram::bucket_of(m.latency_ns_mean as u64)).into(),
        ),
        None => quantile_bucket(&d.latency_ns, 0.5),
    }
}

impl Baselines {
    pub(crate) fn learn(&mut self, line: &IntervalLine) {
        for d in &line.devices {
            if let Some([lo, _]) = p50(d) {
                let k = bucket_index(lo);
                let b = self.p50_bucket.entry(d.dev).or_insert(k);
                *b = (*b).min(k);
            }
        }
    }

    fn get(&self, dev: DevId) -> Option<u32> {
        self.p50_bucket.get(&dev).copied()
    }
}

/// Mean requests in flight over the interval, from the latency buckets'
/// midpoints (or /proc/diskstats' weighted time).
fn in_flight(d: &DeviceLine, interval_s: f64) -> f64 {
    if let Some(m) = d.diskstats_alone() {
        return m.in_flight_mean;
    }
    let busy_ns: f64 = d
        .latency_ns
        .iter()
        .map(|b| b.count as f64 * (b.lo as f64 + b.hi as f64) / 2.0)
        .sum();
    busy_ns / (interval_s.max(f64::MIN_POSITIVE) * 1e9)
}

fn bounds_us(k: u32) -> serde_json::Value {
    let (lo, hi) = writeback_common::log2_bucket_bounds(k);
    json!([lo as f64 / 1000.0, hi as f64 / 1000.0])
}

/// (p50 bucket, in flight, requests) of `dev` in `line` when it is over
/// its baseline there by at least [`INFO_STEPS`] at full queue.
fn over(line: &IntervalLine, dev: DevId, base: u32) -> Option<(u32, f64, u64)> {
    let d = line.devices.iter().find(|d| d.dev == dev)?;
    let k = bucket_index(p50(d)?[0]);
    let f = in_flight(d, line.interval_s);
    (k >= base + INFO_STEPS && f >= MIN_IN_FLIGHT).then_some((k, f, d.requests))
}

pub(crate) fn device_saturated(ctx: &Ctx<'_>) -> Option<Verdict> {
    let line = ctx.line();
    if ctx.history.len() < HOLD {
        return None;
    }
    // Per device: over its baseline in each of the last HOLD intervals,
    // and the least of those steps (a warning holds 8x throughout; the
    // latest interval alone makes it critical).
    let (dev, k, base, inflight, requests, held) = line
        .devices
        .iter()
        .filter_map(|d| {
            let base = ctx.baselines.get(d.dev)?;
            let (k, f, n) = over(line, d.dev, base)?;
            let held = ctx
                .last(HOLD)
                .map(|l| over(l, d.dev, base).map(|(k, _, _)| k - base))
                .min()??;
            Some((d.dev, k, base, f, n, held))
        })
        .max_by_key(|&(_, k, base, _, _, _)| k - base)?;
    let steps = if held >= WARNING_STEPS {
        k - base
    } else {
        held
    };
    let severity = band(
        steps as f64,
        INFO_STEPS as f64,
        WARNING_STEPS as f64,
        CRITICAL_STEPS as f64,
    )?;
    let mut evidence = Evidence::new();
    evidence.insert("device", json!(dev.to_string()));
    let from_diskstats = line
        .devices
        .iter()
        .any(|d| d.dev == dev && d.diskstats_alone().is_some());
    evidence.insert(
        "latency_from",
        json!(if from_diskstats {
            DISKSTATS_MEAN
        } else {
            "block tracepoints median"
        }),
    );
    evidence.insert("latency_p50_us", bounds_us(k));
    evidence.insert("baseline_p50_us", bounds_us(base));
    evidence.insert("times_baseline_at_least", json!(1u64 << (k - base - 1)));
    evidence.insert("in_flight_mean", round3(inflight));
    evidence.insert(
        "requests_per_s",
        round3(requests as f64 / line.interval_s.max(f64::MIN_POSITIVE)),
    );
    Some(Verdict {
        severity,
        evidence,
        advice: "the device is the bottleneck: its requests wait in the queue, their median \
            latency far above what the same device shows when it is not busy, while it always \
            has work. Writeback cannot go faster than the device: spread the writes in time \
            (a lower vm.dirty_background_bytes starts writeback before bursts pile up), take \
            competing I/O elsewhere, or protect latency-sensitive work with cgroup v2 io.latency \
            / io.max; `iostat -x` shows the same queue from the block layer"
            .into(),
    })
}

/// `flush-bound`: over the last [`FLUSH_WINDOW`] intervals, the device
/// with the largest share of time spent on cache flushes (from
/// /proc/diskstats, the default source), when it passes [`FLUSH_INFO`].
pub(crate) fn flush_bound(ctx: &Ctx<'_>) -> Option<Verdict> {
    let mut by_dev: BTreeMap<DevId, (u64, f64)> = BTreeMap::new();
    let lines = ctx.last(FLUSH_WINDOW);
    let secs: f64 = lines.clone().map(|l| l.interval_s).sum();
    for l in lines {
        for d in &l.devices {
            let Some(m) = d.diskstats.as_ref() else {
                continue;
            };
            let e = by_dev.entry(d.dev).or_default();
            e.0 += m.flushes;
            e.1 += m.flushes as f64 * m.flush_latency_ns_mean.unwrap_or(0.0);
        }
    }
    // Only devices flushing in the interval that just ended.
    let now: Vec<DevId> = ctx
        .line()
        .devices
        .iter()
        .filter(|d| d.diskstats.is_some_and(|m| m.flushes > 0))
        .map(|d| d.dev)
        .collect();
    let (dev, (flushes, ns)) = by_dev
        .into_iter()
        .filter(|(dev, (n, _))| now.contains(dev) && *n >= FLUSH_MIN)
        .max_by(|a, b| a.1.1.total_cmp(&b.1.1))?;
    let share = ns / (secs.max(f64::MIN_POSITIVE) * 1e9);
    let severity = band(share, FLUSH_INFO, FLUSH_WARNING, f64::INFINITY)?;
    let mut evidence = Evidence::new();
    evidence.insert("device", json!(dev.to_string()));
    evidence.insert("flush_s_per_s", round3(share));
    evidence.insert("flushes_per_s", round3(flushes as f64 / secs));
    evidence.insert("flush_latency_ms_mean", round3(ns / flushes as f64 / 1e6));
    evidence.insert("window_s", round3(secs));
    evidence.insert("latency_from", json!(DISKSTATS_MEAN));
    Some(Verdict {
        severity,
        evidence,
        advice: "the device's volatile write cache is flushed so often that waiting for the \
            flushes takes much of its time: each fsync/fdatasync (and each journal commit) \
            asks for one, and the sync waits for it. Ask less often: group commits (one sync \
            for a batch, syncfs(2), sync_file_range then one fsync), fdatasync where the \
            inode's times need not be durable. A device with power-loss protection reports \
            its cache write-through (/sys/block/DEV/queue/write_cache, \
            Documentation/ABI/stable/sysfs-block) and is sent no flush; never turn flushes \
            off on a device whose cache loses data on power failure"
            .into(),
    })
}
