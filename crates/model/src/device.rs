//! Each device's requests in an interval: from the block programs'
//! histograms (`--enable device_io`) with /proc/diskstats means beside
//! them, or from /proc/diskstats alone.
use std::{borrow::Cow, collections::BTreeMap};

use serde::{Deserialize, Serialize};
use writeback_common::{block_hist, flush_class};

use crate::{
    DevId,
    histogram::{Bucket, buckets_of, quantile_bucket},
    kernel::{DiskCounters, KernelSnapshot},
};

/// One device's requests in an interval: histograms from the block
/// tracepoints (`--enable device_io`, their requests those issued), and
/// counts and means from /proc/diskstats (alone by default, their
/// requests those completed).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceLine {
    pub dev: DevId,
    pub requests: u64,
    /// Empty when the device's figures come from /proc/diskstats alone.
    pub request_bytes: Vec<Bucket>,
    /// Empty when the device's figures come from /proc/diskstats alone.
    pub latency_ns: Vec<Bucket>,
    /// The /proc/diskstats means; absent for a device the block
    /// tracepoints saw that /proc/diskstats does not list, and in
    /// recordings made before them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diskstats: Option<DiskMeans>,
    /// With the block tracepoints: the completed requests that carried a
    /// cache flush, by class (`biolatency -F`'s split); absent when none
    /// did and from /proc/diskstats.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flushes: Vec<FlushLine>,
}

/// One device's cache-flush requests of one class in an interval
/// (writeback_common `flush_class`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlushLine {
    /// `flush` (an empty flush request), `fua`, `preflush`,
    /// `preflush_fua` (data requests carrying those flags).
    pub kind: Cow<'static, str>,
    pub(crate) requests: u64,
    /// Issue to completion.
    pub latency_ns: Vec<Bucket>,
    /// The buckets holding the median and the 99th percentile.
    pub(crate) p50_ns: Option<[u64; 2]>,
    pub(crate) p99_ns: Option<[u64; 2]>,
}

impl FlushLine {
    pub(crate) fn new(kind: &'static str, latency_ns: Vec<Bucket>) -> FlushLine {
        FlushLine {
            kind: Cow::Borrowed(kind),
            requests: latency_ns.iter().map(|b| b.count).sum(),
            p50_ns: quantile_bucket(&latency_ns, 0.5),
            p99_ns: quantile_bucket(&latency_ns, 0.99),
            latency_ns,
        }
    }
}

/// A device's interval from the growth of its /proc/diskstats counters
/// (Documentation/admin-guide/iostats.rst).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskMeans {
    pub bytes: u64,
    pub(crate) request_bytes_mean: f64,
    /// Issue to completion, from the counters' ms: 1 ms granularity
    /// summed over the interval's requests.
    pub(crate) latency_ns_mean: f64,
    /// Requests in flight on average: the weighted in-flight time's
    /// growth over the interval (Little's law).
    pub(crate) in_flight_mean: f64,
    /// Cache flushes completed (part of `requests`): what fsync and
    /// journal commits ask of a device with a volatile write cache, each
    /// a round trip the sync waits for. 0 before Linux 5.5,
    /// whose diskstats have no flush fields, and in older recordings.
    #[serde(default)]
    pub flushes: u64,
    /// Their mean time, issue to completion (1 ms granularity summed, as
    /// `latency_ns_mean`); absent with no flush.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) flush_latency_ns_mean: Option<f64>,
}

impl DeviceLine {
    /// The /proc/diskstats means, when they are the line's only figures
    /// (the default source); with the block tracepoints' histograms beside
    /// them the histograms speak for the requests.
    pub(crate) fn diskstats_alone(&self) -> Option<&DiskMeans> {
        self.diskstats
            .as_ref()
            .filter(|_| self.latency_ns.is_empty())
    }

    /// From a whole disk's counters at the interval's start and end;
    /// `None` when it completed nothing or was not there at the start.
    pub(crate) fn from_diskstats(
        prev: Option<&DiskCounters>,
        cur: &DiskCounters,
        interval_s: f64,
    ) -> Option<DeviceLine> {
        // A disk first seen now (hot-plugged, or the first snapshot):
        // its counters since boot are no interval's.
        let before = prev?;
        let requests = cur.requests.wrapping_sub(before.requests);
        // A counter that went back: the device was removed and another
        // took its number; nothing to say for this interval.
        if requests == 0 || requests > cur.requests {
            return None;
        }
        let bytes = cur.sectors.wrapping_sub(before.sectors).saturating_mul(512);
        let ticks_ms = cur.ticks_ms.wrapping_sub(before.ticks_ms);
        let weighted_ms = cur.weighted_ms.wrapping_sub(before.weighted_ms);
        // Part of `requests`, so no more than it.
        let flushes = cur.flushes.wrapping_sub(before.flushes).min(requests);
        let flush_ms = cur.flush_ms.wrapping_sub(before.flush_ms);
        Some(DeviceLine {
            dev: cur.dev,
            requests,
            request_bytes: Vec::new(),
            latency_ns: Vec::new(),
            flushes: Vec::new(),
            diskstats: Some(DiskMeans {
                bytes,
                request_bytes_mean: bytes as f64 / requests as f64,
                latency_ns_mean: ticks_ms as f64 * 1e6 / requests as f64,
                in_flight_mean: weighted_ms as f64 / 1e3 / interval_s.max(f64::MIN_POSITIVE),
                flushes,
                flush_latency_ns_mean: (flushes > 0)
                    .then(|| flush_ms as f64 * 1e6 / flushes as f64),
            }),
        })
    }
}

/// The interval's device lines: one per device the block programs counted
/// requests of, with its /proc/diskstats means where it has them, then one
/// per other whole disk whose /proc/diskstats counters grew.
pub(crate) fn device_lines(
    prev: &KernelSnapshot,
    cur: &KernelSnapshot,
    interval_s: f64,
) -> Vec<DeviceLine> {
    /// (bucket, count) pairs of one histogram.
    type Counts = Vec<(usize, u64)>;
    /// Sizes, latencies, and latencies by cache-flush class.
    type DevCounts = (Counts, Counts, BTreeMap<u16, Counts>);
    let mut devices: BTreeMap<u32, DevCounts> = BTreeMap::new();
    for (key, &count) in &cur.block {
        let before = prev.block.get(key).copied().unwrap_or(0);
        let delta = count.wrapping_sub(before);
        if delta == 0 {
            continue;
        }
        let entry = devices.entry(key.dev).or_default();
        let slot = (key.bucket as usize, delta);
        match key.kind {
            block_hist::ISSUE_BYTES => entry.0.push(slot),
            block_hist::LATENCY_NS => entry.1.push(slot),
            k => entry
                .2
                .entry(k.saturating_sub(block_hist::FLUSH_LATENCY_NS))
                .or_default()
                .push(slot),
        }
    }
    let mut lines: Vec<DeviceLine> = devices
        .into_iter()
        .map(|(dev, (mut sizes, mut lat, flush))| {
            sizes.sort_unstable();
            lat.sort_unstable();
            DeviceLine {
                dev: DevId::from_kernel(dev),
                requests: sizes.iter().map(|s| s.1).sum(),
                request_bytes: buckets_of(sizes),
                latency_ns: buckets_of(lat),
                diskstats: None,
                flushes: flush
                    .into_iter()
                    .filter(|(class, _)| *class < flush_class::COUNT)
                    .map(|(class, mut counts)| {
                        counts.sort_unstable();
                        FlushLine::new(flush_class::name(class), buckets_of(counts))
                    })
                    .collect(),
            }
        })
        .collect();
    // The request programs key a request by its disk (`block_rq_issue`'s
    // `dev` is the request queue's disk, include/trace/events/block.h), as
    // /proc/diskstats lists disks: a disk both count is one line, with the
    // histograms and the means (bytes and flushes come from the means).
    for d in &cur.disks {
        let before = prev.disks.iter().find(|p| p.dev == d.dev);
        let Some(means) = DeviceLine::from_diskstats(before, d, interval_s) else {
            continue;
        };
        match lines.iter_mut().find(|l| l.dev == d.dev) {
            Some(l) => l.diskstats = means.diskstats,
            None => lines.push(means),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disks_interval_from_its_diskstats_counters() {
        let dev = DevId { major: 8, minor: 0 };
        let at = |requests, sectors, ticks_ms, weighted_ms| DiskCounters {
            dev,
            requests,
            sectors,
            ticks_ms,
            weighted_ms,
            sectors_written: sectors / 2,
            flushes: requests / 10,
            flush_ms: ticks_ms / 5,
        };
        // 100 requests of 8 sectors in 2 s, 250 ms of latency summed, 3 s
        // of weighted in-flight time.
        let line = DeviceLine::from_diskstats(
            Some(&at(1000, 8000, 500, 700)),
            &at(1100, 8800, 750, 3700),
            2.0,
        )
        .expect("requests in the interval");
        assert_eq!((line.dev, line.requests), (dev, 100));
        assert!(line.request_bytes.is_empty() && line.latency_ns.is_empty());
        let m = line.diskstats.expect("means");
        assert_eq!(m.bytes, 800 * 512);
        assert_eq!(m.request_bytes_mean, 4096.0);
        assert_eq!(m.latency_ns_mean, 2.5e6);
        assert_eq!(m.in_flight_mean, 1.5);
        // 10 of the 100 were flushes, 50 ms of the 250 theirs.
        assert_eq!((m.flushes, m.flush_latency_ns_mean), (10, Some(5e6)));
        // Nothing completed, not seen at the start, or counters gone back
        // (another device under the number): no line.
        let same = at(1000, 8000, 500, 700);
        assert!(DeviceLine::from_diskstats(Some(&same), &same, 1.0).is_none());
        assert!(DeviceLine::from_diskstats(None, &same, 1.0).is_none());
        assert!(DeviceLine::from_diskstats(Some(&at(2000, 1, 1, 1)), &same, 1.0).is_none());
        // As JSON: the means under `diskstats`, absent for tracepoint lines.
        let json = serde_json::to_value(&line).expect("json");
        assert_eq!(json["diskstats"]["in_flight_mean"], 1.5);
        let back: DeviceLine = serde_json::from_value(serde_json::json!(
            {"dev": "8:0", "requests": 3, "request_bytes": [], "latency_ns": []}
        ))
        .expect("a line from before the field");
        assert!(back.diskstats.is_none());
    }

    #[test]
    fn a_disk_the_tracepoints_saw_has_its_diskstats_means_too() {
        let (sda, sdb) = (
            DevId { major: 8, minor: 0 },
            DevId {
                major: 8,
                minor: 16,
            },
        );
        let key = |bucket| writeback_common::BlockHistKey {
            dev: (8 << 20),
            kind: block_hist::ISSUE_BYTES,
            bucket,
        };
        let disk = |dev, requests| DiskCounters {
            dev,
            requests,
            sectors: requests * 8,
            sectors_written: requests * 8,
            ..DiskCounters::default()
        };
        let prev = KernelSnapshot {
            disks: vec![disk(sda, 100), disk(sdb, 10)],
            ..KernelSnapshot::default()
        };
        let cur = KernelSnapshot {
            block: [(key(13), 40)].into_iter().collect(),
            disks: vec![disk(sda, 140), disk(sdb, 30)],
            ..KernelSnapshot::default()
        };
        let lines = device_lines(&prev, &cur, 1.0);
        assert_eq!(lines.len(), 2, "{lines:?}");
        let a = lines.iter().find(|l| l.dev == sda).expect("sda");
        assert_eq!((a.requests, a.request_bytes.len()), (40, 1));
        assert_eq!(a.diskstats.as_ref().map(|m| m.bytes), Some(40 * 8 * 512));
        let b = lines.iter().find(|l| l.dev == sdb).expect("sdb");
        assert!(b.request_bytes.is_empty());
        assert_eq!(
            (b.requests, b.diskstats.map(|m| m.bytes)),
            (20, Some(20 * 8 * 512))
        );
    }
}
