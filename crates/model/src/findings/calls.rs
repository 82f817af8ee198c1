//! The per-call rules: many small WB_SYNC_ALL calls (`fsync-storm`),
//! scans far longer than what is written (`scan-exceeds-written`), and
//! calls ending at a fixed size below their budget while the inode has
//! more (`chunk-capped`). Reasons for the thresholds in docs/findings.md.
use serde_json::json;

use super::{Ctx, Evidence, Verdict, band, round3};
use crate::interval::{Bucket, IntervalLine, merge_buckets, quantile_bucket};
use crate::units::page_size;

pub(crate) const FSYNC_STORM: &str = "fsync-storm";
pub(crate) const SCAN: &str = "scan-exceeds-written";
pub(crate) const CHUNK_CAPPED: &str = "chunk-capped";

/// Intervals each rule here adds up (a second each by default): enough
/// calls to judge, short enough to close soon after it stops.
pub(crate) const WINDOW: usize = 3;

/// fsync-storm: WB_SYNC_ALL calls that wrote pages, per second, and the
/// most the median call may write (KiB, the lower bound of its log2
/// bucket) to count as small. The median, not the mean: a package has a
/// few large files among many small ones, and the small ones set the
/// count of commits.
pub(crate) const STORM_CALLS_PER_S: f64 = 10.0;
pub(crate) const STORM_MIN_CALLS: u64 = 10;
pub(crate) const STORM_SMALL_KIB: u64 = 256;
/// `info` from two small syncs a second (six in the window): each pays a
/// journal commit and a cache flush, a few milliseconds on an SSD (etcd
/// asks for a WAL fsync p99 under 10 ms), so at two a second they take
/// about 1–2% of the time: the syncs acted, without setting the pace.
pub(crate) const STORM_INFO_CALLS_PER_S: f64 = 2.0;
pub(crate) const STORM_INFO_MIN_CALLS: u64 = 6;

/// scan-exceeds-written: pages examined per page written, over at least
/// this much written (KiB): a call's folio-batch look-ahead past the end
/// of what it writes is at most one batch, which this much writing
/// dilutes.
pub(crate) const SCAN_WARNING: f64 = 4.0;
pub(crate) const SCAN_CRITICAL: f64 = 16.0;
pub(crate) const SCAN_MIN_KIB: u64 = 4096;
/// `info` from two pages examined per page written: half of every walk
/// is past what is written, more than one batch's look-ahead explains
/// once [`SCAN_MIN_KIB`] were written, so the file's layout made it.
pub(crate) const SCAN_INFO: f64 = 2.0;

/// chunk-capped: continued calls needed, the share that stopped at the
/// same size, and how far below the budget that size must be.
pub(crate) const CAPPED_MIN_CALLS: u64 = 8;
pub(crate) const CAPPED_SAME_SIZE: f64 = 0.75;
pub(crate) const CAPPED_BELOW_ASKED: f64 = 4.0;
/// `info` from half the budget: every call then needs at least two round
/// trips (a setup and a scan each) where one would do.
pub(crate) const CAPPED_INFO_BELOW_ASKED: f64 = 2.0;

fn device_requests<'a>(lines: impl Iterator<Item = &'a IntervalLine>) -> (u64, Vec<Bucket>) {
    let mut n = 0;
    let mut sizes = Vec::new();
    for l in lines {
        for d in &l.devices {
            n += d.requests;
            sizes = merge_buckets(&sizes, &d.request_bytes);
        }
    }
    (n, sizes)
}

/// `fsync-storm`: many WB_SYNC_ALL calls a second, each writing little.
pub(crate) fn fsync_storm(ctx: &Ctx<'_>) -> Option<Verdict> {
    if ctx.line().sync_calls.calls_writing == 0 {
        return None;
    }
    let lines = ctx.last(WINDOW);
    let secs: f64 = lines.clone().map(|l| l.interval_s).sum();
    let calls: u64 = lines.clone().map(|l| l.sync_calls.calls_writing).sum();
    let pages: u64 = lines.clone().map(|l| l.sync_calls.pages_written).sum();
    if secs <= 0.0 || calls < STORM_INFO_MIN_CALLS {
        return None;
    }
    let rate = calls as f64 / secs;
    let kib_per_call = pages as f64 * page_size() as f64 / 1024.0 / calls as f64;
    let hist = lines.clone().fold(Vec::new(), |h, l| {
        merge_buckets(&h, &l.sync_calls.pages_per_call)
    });
    let p50 = quantile_bucket(&hist, 0.5)?;
    if p50[0] * page_size() > STORM_SMALL_KIB * 1024 {
        return None;
    }
    // A warning needs STORM_MIN_CALLS in the window as well as the rate.
    let warning = if calls >= STORM_MIN_CALLS {
        STORM_CALLS_PER_S
    } else {
        f64::INFINITY
    };
    let severity = band(rate, STORM_INFO_CALLS_PER_S, warning, f64::INFINITY)?;
    let (requests, sizes) = device_requests(lines);
    let mut evidence = Evidence::new();
    evidence.insert("sync_calls_per_s", round3(rate));
    evidence.insert("sync_calls", json!(calls));
    evidence.insert("kib_per_sync_call_mean", round3(kib_per_call));
    evidence.insert(
        "kib_per_sync_call_p50",
        json!([
            p50[0] * page_size() / 1024,
            (p50[1] + 1) * page_size() / 1024
        ]),
    );
    evidence.insert(
        "device_requests_per_sync_call",
        round3(requests as f64 / calls as f64),
    );
    evidence.insert(
        "device_request_bytes_p50",
        json!(quantile_bucket(&sizes, 0.5)),
    );
    evidence.insert("window_s", round3(secs));
    Some(Verdict {
        severity,
        evidence,
        advice: "each fsync/fdatasync of a little data pays a journal commit and a device cache \
            flush of its own, so the fixed costs, not the data, set the pace (dpkg, Debian \
            #605009). Start writeback of every file first and sync after: \
            sync_file_range(SYNC_FILE_RANGE_WRITE) after each file, then fsync each \
            (srf-then-fsync), or a separate later pass (two-pass; `wbscope scenario \
            package-unpack` compares them); or one syncfs(2) for the batch. fdatasync instead \
            of fsync and O_NOATIME/noatime spare inode updates"
            .into(),
    })
}

/// `scan-exceeds-written`: the calls examine far more pages than they
/// write.
pub(crate) fn scan_exceeds_written(ctx: &Ctx<'_>) -> Option<Verdict> {
    if ctx.line().scan.pages_written == 0 {
        return None;
    }
    let lines = ctx.last(WINDOW);
    let page = page_size();
    // Saturating: one call's figure the kernel side got wrong (a
    // `pages_written` near 2^63 was seen once, in a 6.12-rt guest) must
    // not end the run.
    let total = |f: fn(&IntervalLine) -> u64| lines.clone().map(f).fold(0u64, u64::saturating_add);
    let scanned = total(|l| l.scan.bytes_scanned) / page;
    let written = total(|l| l.scan.pages_written);
    if written.saturating_mul(page) < SCAN_MIN_KIB * 1024 {
        return None;
    }
    let ratio = scanned as f64 / written as f64;
    let severity = band(ratio, SCAN_INFO, SCAN_WARNING, SCAN_CRITICAL)?;
    let mut evidence = Evidence::new();
    evidence.insert("pages_scanned_per_page_written", round3(ratio));
    evidence.insert("pages_scanned", json!(scanned));
    evidence.insert("pages_written", json!(written));
    evidence.insert("calls", json!(lines.map(|l| l.calls).sum::<u64>()));
    Some(Verdict {
        severity,
        evidence,
        advice: "the filesystem walks much more of the file than it writes in each call (the \
            RHEL5 case: write_cache_pages scanned to the end of a 10 GB file for every 8 MiB \
            extent, 500 s of system CPU for one sync). No knob changes the walk: write back in \
            ranges the writer owns (sync_file_range(SYNC_FILE_RANGE_WRITE) per chunk) so each \
            call's range is short, preallocate (fallocate) so allocation does not end calls \
            early, or move to a kernel where the scan stops at the chunk"
            .into(),
    })
}

/// `chunk-capped`: calls continued at once on the same inode, most of
/// them having stopped at the same size, far below what they were asked.
pub(crate) fn chunk_capped(ctx: &Ctx<'_>) -> Option<Verdict> {
    let cur = &ctx.line().continued_calls;
    if cur.calls == 0 {
        return None;
    }
    let lines = ctx.last(WINDOW);
    let calls: u64 = lines.clone().map(|l| l.continued_calls.calls).sum();
    let same: u64 = lines
        .clone()
        .filter(|l| l.continued_calls.mode_pages == cur.mode_pages)
        .map(|l| l.continued_calls.mode_calls)
        .sum();
    let finite: u64 = lines.clone().map(|l| l.continued_calls.calls_finite).sum();
    let asked: u64 = lines
        .clone()
        .map(|l| l.continued_calls.pages_asked_finite)
        .sum();
    let unbounded: u64 = lines.map(|l| l.continued_calls.calls_unbounded).sum();
    if calls < CAPPED_MIN_CALLS || (same as f64) < CAPPED_SAME_SIZE * calls as f64 {
        return None;
    }
    let mean_asked = (finite > 0).then(|| asked as f64 / finite as f64);
    // How many times the chunk the calls were asked: unbounded when most
    // asked everything (LONG_MAX).
    let times_below = match mean_asked {
        Some(a) if unbounded < finite => a / (cur.mode_pages as f64).max(1.0),
        _ => f64::INFINITY,
    };
    let severity = band(
        times_below,
        CAPPED_INFO_BELOW_ASKED,
        CAPPED_BELOW_ASKED,
        f64::INFINITY,
    )?;
    let mut evidence = Evidence::new();
    evidence.insert("continued_calls", json!(calls));
    evidence.insert("chunk_pages", json!(cur.mode_pages));
    evidence.insert("chunk_kib", json!(cur.mode_pages * page_size() / 1024));
    evidence.insert("same_size_share", round3(same as f64 / calls as f64));
    evidence.insert(
        "pages_asked_mean",
        match mean_asked {
            Some(a) if unbounded < finite => round3(a),
            _ => json!("everything"),
        },
    );
    Some(Verdict {
        severity,
        evidence,
        advice: "the filesystem ends its writepages calls at a fixed size while the inode has \
            more dirty pages, and the flusher calls again at once: every round trip pays the \
            call's setup and a scan (the 2.6.32 ext4 chunk case, fixed by sizing the chunk \
            from nr_to_write; ext4 of that era had /sys/fs/ext4/DEV/max_writeback_mb_bump). \
            Look for a filesystem or mount limit on the size of one writeback (extent or \
            allocation size caps), or write back from the application in ranges of the size \
            you want (sync_file_range)"
            .into(),
    })
}
