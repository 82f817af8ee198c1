//! Each rule on constructed interval sequences, at the edges of its
//! thresholds; the engine's open/close bookkeeping.
use super::*;
use crate::units::page_size;
use crate::{
    DevId,
    interval::{
        Bucket, CallAggregate, DeviceLine, FlusherLine, InodePassCounts, InodePassLine, PausedTask,
        ThrottleLimits,
    },
    kernel::KernelSnapshot,
};

/// An empty one-second interval ending at `t`, with the machine's
/// thresholds: 1000 pages background, 2000 pages hard.
fn line(t: f64) -> IntervalLine {
    let snap = KernelSnapshot::default();
    let mut l = IntervalLine::new(t, 1.0, &CallAggregate::default(), &snap, &snap);
    l.dirty.vmstat.nr_dirty_background_threshold = 1000;
    l.dirty.vmstat.nr_dirty_threshold = 2000;
    l
}

fn lines(n: usize, f: impl Fn(usize, &mut IntervalLine)) -> Vec<IntervalLine> {
    (0..n)
        .map(|i| {
            let mut l = line(i as f64 + 1.0);
            f(i, &mut l);
            l
        })
        .collect()
}

/// The names of the findings a sequence yields.
fn names(ls: &[IntervalLine]) -> Vec<&'static str> {
    judge(ls).findings.iter().map(|f| f.name).collect()
}

fn only(ls: &[IntervalLine], name: &str) -> Option<Finding> {
    judge(ls).findings.into_iter().find(|f| f.name == name)
}

#[test]
fn quiet_intervals_yield_nothing() {
    let ls = lines(40, |_, _| {});
    let r = judge(&ls);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert!(!r.alarming());
    assert_eq!(r.intervals, 40);
    assert_eq!(r.duration_s, 40.0);
}

fn throttled(ms: u64) -> impl Fn(usize, &mut IntervalLine) {
    move |_, l| {
        l.throttle.pauses = 10;
        l.throttle.pause_ms_total = ms;
        // Global dirty over the free-run ceiling (1500).
        l.dirty.vmstat.nr_dirty = 1700;
    }
}

#[test]
fn dirty_throttled_at_the_share_edges() {
    // 49 ms of pause per second: under a twentieth, nothing.
    assert_eq!(names(&lines(5, throttled(49))), Vec::<&str>::new());
    // 50 to 249 ms: info, with the same evidence.
    for ms in [50, 249] {
        let f = only(&lines(5, throttled(ms)), dirty::THROTTLED).unwrap();
        assert_eq!(f.severity, Severity::Info, "{ms}");
        assert_eq!(f.evidence["limit"], "global");
    }
    let r = judge(&lines(5, throttled(249)));
    assert!(!r.alarming(), "info alone exits 0");
    // 250 ms: a quarter exactly, warning.
    let f = only(&lines(5, throttled(250)), dirty::THROTTLED).unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["limit"], "global");
    assert_eq!(f.evidence["pause_s_per_s"], 0.25);
    assert_eq!((f.first_seen_s, f.last_seen_s, f.intervals), (1.0, 5.0, 5));
    // 749 / 750 ms: the critical edge.
    assert_eq!(
        only(&lines(5, throttled(749)), dirty::THROTTLED)
            .unwrap()
            .severity,
        Severity::Warning
    );
    assert_eq!(
        only(&lines(5, throttled(750)), dirty::THROTTLED)
            .unwrap()
            .severity,
        Severity::Critical
    );
    // Pauses counted but none in the latest interval: it has stopped.
    let mut ls = lines(5, throttled(900));
    ls.push(line(6.0));
    let r = judge(&ls);
    assert_eq!(r.findings[0].last_seen_s, 5.0);
}

/// The programs' split of an interval's pauses: global, bdi, memcg ms.
fn split(global_ms: u64, bdi_ms: u64, memcg_ms: u64) -> Option<ThrottleLimits> {
    Some(ThrottleLimits {
        global_ms,
        bdi_ms,
        memcg_ms,
    })
}

#[test]
fn dirty_throttled_names_the_limit_and_who() {
    // Global dirty under the free-run ceiling and no split from the
    // programs: a device's or a memcg's limit.
    let ls = lines(3, |_, l| {
        throttled(500)(0, l);
        l.dirty.vmstat.nr_dirty = 100;
    });
    let f = only(&ls, dirty::THROTTLED).unwrap();
    assert_eq!(f.evidence["limit"], "bdi-or-memcg");
    // The programs' split decides when there is one.
    let ls = lines(3, |i, l| {
        throttled(500)(0, l);
        l.throttle.limits = split(100, 400, 0);
        l.throttle.paused = vec![
            PausedTask {
                tgid: 7,
                comm: "dd".into(),
                pause_ms: 300,
            },
            PausedTask {
                tgid: 9,
                comm: "cp".into(),
                pause_ms: 100 + i as u64 * 200,
            },
        ];
    });
    let f = only(&ls, dirty::THROTTLED).unwrap();
    assert_eq!(f.evidence["limit"], "bdi");
    assert!(f.advice.contains("strict_limit"), "{}", f.advice);
    assert_eq!(
        f.evidence["pause_ms_by_limit"],
        serde_json::json!({"global": 300, "bdi": 1200, "memcg": 0})
    );
    // cp: 100 + 300 + 500 = 900 ms, dd 900 ms: ties by tgid.
    assert_eq!(f.evidence["paused"][0]["comm"], "dd");
    assert_eq!(f.evidence["paused"][1]["pause_ms"], 900);
    assert!(
        !f.evidence.contains_key("memcg_cgroup_id"),
        "{:?}",
        f.evidence
    );
    // A memcg's limit: the most-paused task's cgroup names the memcg
    // (from the owner rows), and each paused task carries its own.
    let ls = lines(3, |_, l| {
        throttled(500)(0, l);
        l.throttle.limits = split(0, 0, 500);
        l.throttle.paused = vec![PausedTask {
            tgid: 7,
            comm: "dd".into(),
            pause_ms: 500,
        }];
        l.owners = vec![crate::dirtier::OwnerLine {
            pid: 7,
            comm: "dd".into(),
            cgroup_id: 4242,
            ..Default::default()
        }];
    });
    let f = only(&ls, dirty::THROTTLED).unwrap();
    assert_eq!(f.evidence["limit"], "memcg");
    assert_eq!(f.evidence["memcg_cgroup_id"], 4242);
    assert_eq!(f.evidence["paused"][0]["cgroup_id"], 4242);
    let ls = lines(3, |_, l| {
        throttled(500)(0, l);
        l.throttle.limits = split(100, 0, 400);
    });
    assert_eq!(
        only(&ls, dirty::THROTTLED).unwrap().evidence["limit"],
        "memcg"
    );
}

fn sync_calls(calls: u64, pages_each: u64) -> impl Fn(usize, &mut IntervalLine) {
    move |_, l| {
        l.sync_calls.calls_writing = calls;
        l.sync_calls.pages_written = calls * pages_each;
        let (lo, hi) =
            writeback_common::log2_bucket_bounds(writeback_common::log2_bucket(pages_each, 64));
        l.sync_calls.pages_per_call = vec![b(lo, hi, calls)];
    }
}

#[test]
fn fsync_storm_at_its_edges() {
    let small = calls::STORM_SMALL_KIB * 1024 / page_size();
    // 10 calls a second of exactly the small size: a storm.
    let f = only(&lines(3, sync_calls(10, small)), calls::FSYNC_STORM).unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["sync_calls_per_s"], 10.0);
    // 9 a second: info; down to 2 a second (6 in the window); 1: nothing.
    for n in [9, 2] {
        let f = only(&lines(3, sync_calls(n, small)), calls::FSYNC_STORM).unwrap();
        assert_eq!(f.severity, Severity::Info, "{n}");
    }
    assert_eq!(names(&lines(3, sync_calls(1, small))), Vec::<&str>::new());
    // The median call in the bucket above the small size: not small.
    assert_eq!(
        names(&lines(3, sync_calls(10, 2 * small))),
        Vec::<&str>::new()
    );
    // A few large calls among many small ones: the median decides.
    let mut ls = lines(3, sync_calls(10, small));
    for l in &mut ls {
        l.sync_calls.calls_writing += 4;
        l.sync_calls.pages_written += 4 * 100 * small;
        l.sync_calls
            .pages_per_call
            .push(b(64 * small, 128 * small - 1, 4));
    }
    assert!(only(&ls, calls::FSYNC_STORM).is_some());
    // Fewer than STORM_MIN_CALLS in the window, even at a high rate:
    // info; fewer than STORM_INFO_MIN_CALLS: nothing.
    let short = |n| {
        let mut l = line(0.3);
        l.interval_s = 0.3;
        sync_calls(n, 1)(0, &mut l);
        l
    };
    assert_eq!(
        only(&[short(9)], calls::FSYNC_STORM).unwrap().severity,
        Severity::Info
    );
    assert_eq!(names(&[short(5)]), Vec::<&str>::new());
}

fn scanned(ratio_x10: u64) -> impl Fn(usize, &mut IntervalLine) {
    move |_, l| {
        let written = calls::SCAN_MIN_KIB * 1024 / page_size();
        l.scan.pages_written = written;
        l.scan.bytes_scanned = written * ratio_x10 * page_size() / 10;
        l.calls = 4;
    }
}

/// A wrong figure from the kernel side (a call's `pages_written` near
/// 2^63) in two lines of the window: judged, not a panic on overflow.
#[test]
fn a_huge_pages_written_does_not_overflow_the_scan_finding() {
    let huge = |_: usize, l: &mut IntervalLine| {
        l.scan.pages_written = 1 << 62;
        l.scan.bytes_scanned = u64::MAX / 2;
        l.calls = 1;
    };
    let _ = names(&lines(3, huge));
}

#[test]
fn scan_exceeds_written_at_its_edges() {
    assert_eq!(names(&lines(3, scanned(19))), Vec::<&str>::new());
    for x10 in [20, 39] {
        let f = only(&lines(3, scanned(x10)), calls::SCAN).unwrap();
        assert_eq!(f.severity, Severity::Info, "{x10}");
    }
    let f = only(&lines(3, scanned(40)), calls::SCAN).unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["pages_scanned_per_page_written"], 4.0);
    assert_eq!(
        only(&lines(3, scanned(159)), calls::SCAN).unwrap().severity,
        Severity::Warning
    );
    assert_eq!(
        only(&lines(3, scanned(160)), calls::SCAN).unwrap().severity,
        Severity::Critical
    );
    // Too little written to judge: one interval of a third of the minimum.
    let mut l = line(1.0);
    scanned(100)(0, &mut l);
    l.scan.pages_written /= 3;
    l.scan.bytes_scanned /= 3;
    assert_eq!(names(&[l]), Vec::<&str>::new());
}

fn continued(calls: u64, same: u64, pages: u64, asked: u64) -> impl Fn(usize, &mut IntervalLine) {
    move |_, l| {
        let c = &mut l.continued_calls;
        c.calls = calls;
        c.mode_pages = pages;
        c.mode_calls = same;
        c.calls_finite = calls;
        c.pages_asked_finite = calls * asked;
    }
}

#[test]
fn chunk_capped_at_its_edges() {
    // 3 intervals x 3 calls = 9 >= 8, all at 1024 pages of 4096 asked.
    let f = only(&lines(3, continued(3, 3, 1024, 4096)), calls::CHUNK_CAPPED).unwrap();
    assert_eq!(f.evidence["chunk_pages"], 1024);
    assert_eq!(f.evidence["pages_asked_mean"], 4096.0);
    assert_eq!(f.severity, Severity::Warning);
    // Asked 4x - 1 page down to 2x: info; under 2x: nothing.
    for asked in [4095, 2048] {
        let f = only(&lines(3, continued(3, 3, 1024, asked)), calls::CHUNK_CAPPED).unwrap();
        assert_eq!(f.severity, Severity::Info, "{asked}");
    }
    assert_eq!(
        names(&lines(3, continued(3, 3, 1024, 2047))),
        Vec::<&str>::new()
    );
    // 7 calls in all: too few.
    let mut ls = lines(3, continued(3, 3, 1024, 4096));
    ls[0].continued_calls = Default::default();
    ls[1].continued_calls.calls = 1;
    ls[1].continued_calls.mode_calls = 1;
    ls[1].continued_calls.calls_finite = 1;
    ls[1].continued_calls.pages_asked_finite = 4096;
    assert_eq!(names(&ls), Vec::<&str>::new());
    // 12 calls, 9 at the same size = 0.75: capped; 8 of 12: not.
    assert!(only(&lines(3, continued(4, 3, 1024, 8192)), calls::CHUNK_CAPPED).is_some());
    let mut ls = lines(3, continued(4, 3, 1024, 8192));
    ls[0].continued_calls.mode_calls = 2;
    assert_eq!(names(&ls), Vec::<&str>::new());
    // Calls asking everything (LONG_MAX): always far below.
    let ls = lines(3, |_, l| {
        let c = &mut l.continued_calls;
        (c.calls, c.mode_pages, c.mode_calls, c.calls_unbounded) = (3, 2048, 3, 3);
    });
    let f = only(&ls, calls::CHUNK_CAPPED).unwrap();
    assert_eq!(f.evidence["pages_asked_mean"], "everything");
}

fn b(lo: u64, hi: u64, count: u64) -> Bucket {
    Bucket { lo, hi, count }
}

fn passes(asked_lo: u64, n: u64, used_pct: u64) -> impl Fn(usize, &mut IntervalLine) {
    move |_, l| {
        let asked = asked_lo * n;
        l.inode_passes_by_device = vec![InodePassLine {
            dev: DevId { major: 7, minor: 2 },
            counts: InodePassCounts {
                passes: n,
                pages_written: asked * used_pct / 100,
                budget_passes: n,
                budget_pages_asked: asked,
                budget_pages_written: asked * used_pct / 100,
                pages_per_pass: vec![b(asked_lo, 2 * asked_lo - 1, n)],
                pages_per_unbounded_pass: vec![],
                pages_asked_per_pass: vec![b(asked_lo, 2 * asked_lo - 1, n)],
            },
        }];
    }
}

#[test]
fn small_flusher_budget_at_its_edges() {
    let floor = flusher::min_writeback_pages();
    // 3 x 6 = 18 passes at the floor, budget 80% used.
    let f = only(&lines(3, passes(floor, 6, 80)), flusher::SMALL_BUDGET).unwrap();
    assert_eq!(f.evidence["device"], "7:2");
    assert_eq!(
        f.evidence["pages_asked_per_pass_p50"],
        serde_json::json!([floor, 2 * floor - 1])
    );
    assert_eq!(f.severity, Severity::Warning);
    // 15 passes down to 4: info; 3: nothing. 75% used is enough, 74% not.
    for n in [5, 2] {
        let f = only(&lines(3, passes(floor, n, 80)), flusher::SMALL_BUDGET).unwrap();
        assert_eq!(f.severity, Severity::Info, "{n}");
    }
    assert_eq!(names(&lines(3, passes(floor, 1, 80))), Vec::<&str>::new());
    assert!(only(&lines(3, passes(floor, 6, 75)), flusher::SMALL_BUDGET).is_some());
    assert_eq!(names(&lines(3, passes(floor, 6, 74))), Vec::<&str>::new());
    // Budgets one bucket over the floor: not held there.
    assert_eq!(
        names(&lines(3, passes(2 * floor, 6, 100))),
        Vec::<&str>::new()
    );
}

fn rate_then_limit(before_mib: u64, after_mib: u64) -> Vec<IntervalLine> {
    let per_mib = (1 << 20) / page_size();
    lines(8, |i, l| {
        if i < 5 {
            l.dirty.vmstat_dirtied_delta = before_mib * per_mib;
            l.dirty.vmstat.nr_dirty = 200 * i as u64;
        } else {
            l.dirty.vmstat_dirtied_delta = after_mib * per_mib;
            l.dirty.vmstat.nr_dirty = 1800;
            l.throttle.pauses = 1;
            l.throttle.pause_ms_total = 10;
        }
    })
}

#[test]
fn page_cache_cliff_at_its_edges() {
    // 100 MiB/s, then 50 at the limit: half, a cliff.
    let f = only(&rate_then_limit(100, 50), dirty::CLIFF).unwrap();
    assert_eq!(f.evidence["dirtied_mib_s_before"], 100.0);
    assert_eq!(f.evidence["dirtied_mib_s_now"], 50.0);
    assert_eq!(f.first_seen_s, 8.0);
    assert_eq!(f.severity, Severity::Info);
    // A quarter: a stall, warning; just over it, info.
    assert_eq!(
        only(&rate_then_limit(100, 25), dirty::CLIFF)
            .unwrap()
            .severity,
        Severity::Warning
    );
    assert_eq!(
        only(&rate_then_limit(100, 26), dirty::CLIFF)
            .unwrap()
            .severity,
        Severity::Info
    );
    // 51: not half.
    assert!(only(&rate_then_limit(100, 51), dirty::CLIFF).is_none());
    // Not at the limit (no pauses, dirty under 0.9 of the threshold).
    let mut ls = rate_then_limit(100, 10);
    for l in &mut ls[5..] {
        l.throttle.pauses = 0;
        l.dirty.vmstat.nr_dirty = 1799;
    }
    assert!(only(&ls, dirty::CLIFF).is_none());
    for l in &mut ls[5..] {
        l.dirty.vmstat.nr_dirty = 1800;
    }
    assert!(only(&ls, dirty::CLIFF).is_some());
    // An earlier peak under 1 MiB/s is no cliff.
    let mut ls = rate_then_limit(0, 0);
    for l in &mut ls[..5] {
        l.dirty.vmstat_dirtied_delta = (1 << 20) / page_size() - 1;
    }
    assert!(only(&ls, dirty::CLIFF).is_none());
}

fn lagging(growth_per_s: u64, flusher_gap: Option<usize>) -> Vec<IntervalLine> {
    lines(12, |i, l| {
        l.dirty.vmstat.nr_dirty = 1001 + growth_per_s * i as u64;
        if flusher_gap != Some(i) {
            l.flusher = vec![FlusherLine {
                reason: "background".into(),
                chunks: 1,
                pages: 100,
            }];
        }
    })
}

#[test]
fn writeback_lagging_at_its_edges() {
    // 10 steps of 10 pages = 100 = 5% of the 2000-page threshold.
    let f = only(&lagging(10, None), dirty::LAGGING).unwrap();
    assert_eq!(f.evidence["seconds"], 10.0);
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["growth_share_of_threshold"], 0.05);
    // 9 pages a step (4.5%) down to 2 (1%): info; 1 (0.5%): nothing.
    for step in [9, 2] {
        let f = only(&lagging(step, None), dirty::LAGGING).unwrap();
        assert_eq!(f.severity, Severity::Info, "{step}");
    }
    assert!(only(&lagging(1, None), dirty::LAGGING).is_none());
    // One interval without flusher work: not continuous.
    assert!(only(&lagging(20, Some(5)), dirty::LAGGING).is_none());
    // Under the background threshold: the periodic policy, not a lag.
    let mut ls = lagging(10, None);
    for l in &mut ls {
        l.dirty.vmstat.nr_dirty -= 200;
    }
    assert!(only(&ls, dirty::LAGGING).is_none());
}

fn device(requests: u64, lat_lo: u64) -> DeviceLine {
    DeviceLine {
        dev: DevId {
            major: 254,
            minor: 0,
        },
        requests,
        request_bytes: vec![b(4096, 8191, requests)],
        latency_ns: vec![b(lat_lo, 2 * lat_lo - 1, requests)],
        diskstats: None,
        flushes: Vec::new(),
    }
}

/// The same device by default: /proc/diskstats means, no histograms.
fn disk(requests: u64, latency_ns_mean: f64, in_flight_mean: f64) -> DeviceLine {
    DeviceLine {
        request_bytes: Vec::new(),
        latency_ns: Vec::new(),
        diskstats: Some(crate::interval::DiskMeans {
            bytes: requests * 4096,
            request_bytes_mean: 4096.0,
            latency_ns_mean,
            in_flight_mean,
            ..Default::default()
        }),
        ..device(requests, 1)
    }
}

#[test]
fn device_saturated_from_diskstats_means() {
    // Baseline mean 100 us (bucket 64-131 us); then 1.6 ms (16x) with 20
    // requests in flight, held three intervals.
    let busy = |lat_ns: f64, in_flight: f64| {
        let mut ls = vec![line(1.0)];
        ls[0].devices = vec![disk(100, 100_000.0, 0.01)];
        for i in 0..3 {
            let mut l = line(i as f64 + 2.0);
            l.devices = vec![disk(2000, lat_ns, in_flight)];
            ls.push(l);
        }
        ls
    };
    let r = judge(&busy(1_600_000.0, 20.0));
    let f = &r.findings[0];
    assert_eq!(f.name, device::SATURATED);
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["latency_from"], "/proc/diskstats mean");
    assert_eq!(f.evidence["in_flight_mean"], 20.0);
    // As slow, but the queue mostly empty: not saturation.
    assert_eq!(names(&busy(1_600_000.0, 0.5)), Vec::<&str>::new());
    // Four times the baseline: under the 8x of a warning, info; twice:
    // nothing.
    let r = judge(&busy(400_000.0, 20.0));
    assert_eq!(r.findings[0].severity, Severity::Info);
    assert!(!r.alarming());
    assert_eq!(names(&busy(200_000.0, 20.0)), Vec::<&str>::new());
}

/// Every interval: `flushes` cache flushes of `ms_mean` ms on the disk.
fn flushing(flushes: u64, ms_mean: f64) -> impl Fn(usize, &mut IntervalLine) {
    move |_, l| {
        let mut d = disk(100, 1e6, 0.1);
        if let Some(m) = d.diskstats.as_mut() {
            m.flushes = flushes;
            m.flush_latency_ns_mean = (flushes > 0).then_some(ms_mean * 1e6);
        }
        l.devices = vec![d];
    }
}

#[test]
fn flush_bound_at_its_edges() {
    // 10 flushes a second of 10 ms: a tenth of the time, info.
    let f = only(&lines(3, flushing(10, 10.0)), device::FLUSH_BOUND).unwrap();
    assert_eq!(f.severity, Severity::Info);
    assert_eq!(f.evidence["device"], "254:0");
    assert_eq!(f.evidence["flush_s_per_s"], 0.1);
    assert_eq!(f.evidence["flushes_per_s"], 10.0);
    assert_eq!(f.evidence["flush_latency_ms_mean"], 10.0);
    // Just under a tenth: nothing.
    assert!(only(&lines(3, flushing(10, 9.9)), device::FLUSH_BOUND).is_none());
    // Half the time: warning, and exit 3.
    let r = judge(&lines(3, flushing(50, 10.0)));
    assert_eq!(r.findings[0].severity, Severity::Warning);
    assert!(r.alarming());
    // Fewer than three flushes in the window, however slow: nothing.
    assert!(only(&lines(2, flushing(1, 900.0)), device::FLUSH_BOUND).is_none());
    // No flush in the interval that just ended: it closed there.
    let mut ls = lines(3, flushing(50, 10.0));
    flushing(0, 0.0)(0, &mut ls[2]);
    let f = only(&ls, device::FLUSH_BOUND).unwrap();
    assert_eq!((f.first_seen_s, f.last_seen_s), (1.0, 2.0));
}

#[test]
fn device_saturated_against_its_own_baseline() {
    // Baseline 64-127 us; then 8x (512-1023 us) with 2000 requests: in
    // flight = 2000 x 768 us / 1 s = 1.5; held three intervals.
    let base = 1 << 16;
    let busy = |lat: &[u64]| {
        let mut ls = vec![line(1.0)];
        ls[0].devices = vec![device(100, base)];
        for (i, &x) in lat.iter().enumerate() {
            let mut l = line(i as f64 + 2.0);
            l.devices = vec![device(2000, base << x)];
            ls.push(l);
        }
        ls
    };
    let r = judge(&busy(&[3, 3, 6]));
    let f = &r.findings[0];
    assert_eq!(f.name, device::SATURATED);
    assert_eq!((f.first_seen_s, f.last_seen_s), (4.0, 4.0));
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.evidence["times_baseline_at_least"], 32);
    assert_eq!(f.evidence["latency_from"], "block tracepoints median");
    assert_eq!(
        judge(&busy(&[3, 3, 3])).findings[0].severity,
        Severity::Warning
    );
    // Two intervals only: a burst.
    assert_eq!(names(&busy(&[3, 3])), Vec::<&str>::new());
    // One interval at 4x among the three (4000 requests keep 1.6 in
    // flight): info, a warning holds 8x in all three; 2x in one of them
    // (8000 requests): nothing.
    let mut ls = busy(&[3, 3, 3]);
    ls[2].devices = vec![device(4000, base << 2)];
    assert_eq!(judge(&ls).findings[0].severity, Severity::Info);
    ls[2].devices = vec![device(8000, base << 1)];
    assert_eq!(names(&ls), Vec::<&str>::new());
    // 8x with the device idle half the time: not at full queue.
    let mut ls = busy(&[3, 3, 3]);
    ls[2].devices = vec![device(1000, base << 3)];
    assert_eq!(names(&ls), Vec::<&str>::new());
    // No baseline yet: too few requests in the first interval.
    let mut ls = busy(&[3, 3, 3]);
    ls[0].devices = vec![device(31, base)];
    assert_eq!(names(&ls), Vec::<&str>::new());
}

#[test]
fn engine_opens_closes_and_merges_episodes() {
    let mut e = Engine::new();
    let mut events = Vec::new();
    let mut ls = lines(8, throttled(300));
    ls[3].throttle.pauses = 0;
    for l in &ls {
        events.extend(e.interval(l));
    }
    let (closing, report) = e.finish();
    let kinds: Vec<(&str, f64)> = events
        .iter()
        .chain(&closing)
        .map(|ev| (ev.event, ev.time_s))
        .collect();
    assert_eq!(
        kinds,
        vec![("open", 1.0), ("close", 4.0), ("open", 5.0), ("close", 8.0)]
    );
    let f = &report.findings[0];
    assert_eq!((f.episodes, f.intervals), (2, 7));
    assert_eq!((f.first_seen_s, f.last_seen_s), (1.0, 8.0));
    assert!(report.alarming());
    let json = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(json["type"], "finding");
    assert_eq!(json["event"], "open");
    assert_eq!(json["name"], "dirty-throttled");
    assert_eq!(json["severity"], "warning");
}

#[test]
fn findings_of_lines_read_back_are_the_same() {
    // What a recording holds is the interval line's JSON: the rules see
    // the same figures after the round trip.
    let mut ls = lines(12, throttled(800));
    for (i, l) in ls.iter_mut().enumerate() {
        sync_calls(20, 3)(i, l);
        l.dirty.vmstat.nr_dirty = 1001 + 50 * i as u64;
        l.flusher = vec![FlusherLine {
            reason: "background".into(),
            chunks: 1,
            pages: 100,
        }];
    }
    let back: Vec<IntervalLine> = ls
        .iter()
        .map(|l| serde_json::from_str(&serde_json::to_string(l).unwrap()).unwrap())
        .collect();
    let (a, b) = (judge(&ls), judge(&back));
    assert_eq!(a, b);
    assert_eq!(
        a.findings.iter().map(|f| f.name).collect::<Vec<_>>(),
        vec![dirty::THROTTLED, calls::FSYNC_STORM, dirty::LAGGING]
    );
}

/// One process's fsyncs in every interval: `n` of `p99_ms`, the journal
/// `journal_pct` of their time, the slowest entangled with dd's data or
/// not.
fn fsyncing(
    n: u64,
    p99_ms: u64,
    journal_pct: u64,
    entangled: bool,
) -> impl Fn(usize, &mut IntervalLine) {
    use crate::durability::{Contributor, FsyncLine, SlowFsync};
    move |_, l| {
        let total = n * p99_ms * 1_000_000;
        l.fsyncs = vec![FsyncLine {
            pid: 5,
            comm: "etcd".into(),
            fsyncs: n,
            p50_ns: p99_ms * 1_000_000,
            p99_ns: p99_ms * 1_000_000,
            max_ns: p99_ms * 1_000_000,
            total_ns: total,
            journal_ns: total * journal_pct / 100,
            other_ns: total - total * journal_pct / 100,
            pages: n as i64,
            entangled: u64::from(entangled),
            slowest: Some(SlowFsync {
                total_ns: p99_ms * 1_000_000,
                journal_ns: p99_ms * 1_000_000 * journal_pct / 100,
                pages: 1,
                entangled,
                transaction: Some(4711),
                commit_blocks: Some(12),
                contributors: vec![Contributor {
                    pid: 812,
                    comm: "dd".into(),
                    handles: 9,
                    blocks: 9,
                    pages: 9800,
                }],
                ..SlowFsync::default()
            }),
            ..FsyncLine::default()
        }];
    }
}

#[test]
fn journal_bound_at_its_edges() {
    let f = only(
        &lines(3, fsyncing(10, 10, 50, false)),
        fsyncs::JOURNAL_BOUND,
    )
    .unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["journal_share"], 0.5);
    assert_eq!(f.evidence["p99_ms"], 10.0);
    for ms in [9, 1] {
        let f = only(
            &lines(3, fsyncing(10, ms, 90, false)),
            fsyncs::JOURNAL_BOUND,
        )
        .unwrap();
        assert_eq!(f.severity, Severity::Info, "{ms}");
    }
    // Under a millisecond, under half in the journal, or too few: nothing.
    let none = |ls: Vec<IntervalLine>| assert!(only(&ls, fsyncs::JOURNAL_BOUND).is_none());
    none(lines(3, |i, l| {
        fsyncing(10, 1, 90, false)(i, l);
        l.fsyncs[0].p99_ns = 999_999;
    }));
    none(lines(3, fsyncing(10, 50, 49, false)));
    none(vec![{
        let mut l = line(1.0);
        fsyncing(2, 50, 90, false)(0, &mut l);
        l
    }]);
}

#[test]
fn fsync_entangled_only_with_an_entangled_fsync() {
    let f = only(&lines(3, fsyncing(10, 40, 90, true)), fsyncs::ENTANGLED).unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["other_pid"], 812);
    assert_eq!(f.evidence["other_comm"], "dd");
    assert_eq!(f.evidence["entangled_fsyncs"], 3);
    assert_eq!(f.evidence["other_share"], 1.0);
    // A millisecond's wait on another's commit: info.
    let f = only(&lines(3, fsyncing(10, 2, 50, true)), fsyncs::ENTANGLED).unwrap();
    assert_eq!(f.severity, Severity::Info);
    // The same slow fsyncs, their commits their own: journal-bound only.
    let ls = lines(3, fsyncing(10, 40, 90, false));
    assert_eq!(names(&ls), vec![fsyncs::JOURNAL_BOUND]);
}

/// Each interval, one process that wrote `calls` bytes, dirtied `dirtied`
/// and was charged `back` written back and `journal` of the journal.
fn amplified(
    calls: u64,
    dirtied: u64,
    back: u64,
    journal: u64,
) -> impl Fn(usize, &mut IntervalLine) {
    use crate::ledger::{LedgerLine, ProcessLedger, Stages};
    move |_, l| {
        l.ledger = Some(LedgerLine {
            processes: vec![ProcessLedger {
                pid: 42,
                comm: "logger".into(),
                cgroup_id: 1,
                stages: Stages {
                    write_calls: Some(calls),
                    dirtied: Some(dirtied),
                    written_back: back,
                    journal: Some(journal),
                    metadata: Some(0),
                    ..Stages::default()
                },
            }],
            ..LedgerLine::default()
        })
    }
}

#[test]
fn write_amplified_at_its_edges_names_the_stage() {
    let name = ledger::WRITE_AMPLIFIED;
    // The journald case's shape: 125 KiB of records a second dirtying
    // 800 KiB (a page each), with 2.3 MiB of journal: 25x, the journal.
    let f = only(
        &lines(5, amplified(125_000, 800 << 10, 800 << 10, 2_300 << 10)),
        name,
    )
    .expect("holds");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["stage"], "journal");
    assert_eq!(f.evidence["over"], "write_calls");
    assert_eq!(f.evidence["pid"], 42);
    // Small writes each written back as a whole page: data.
    let f = only(&lines(5, amplified(700_000, 1 << 20, 2 << 20, 0)), name).expect("holds");
    assert_eq!(
        (f.severity, f.evidence["stage"].as_str()),
        (Severity::Info, Some("data"))
    );
    // Under 2x: nothing; 1 MiB in the window is the floor (3 intervals of
    // 300 KiB dirtied are not enough even at 10x).
    assert!(
        only(
            &lines(5, amplified(1 << 20, 1 << 20, (1 << 20) + (900 << 10), 0)),
            name
        )
        .is_none()
    );
    assert!(
        only(
            &lines(5, amplified(30_000, 300 << 10, 300 << 10, 3 << 20)),
            name
        )
        .is_none()
    );
    // A plain 1 MiB-write streamer: 1x.
    assert!(
        only(
            &lines(5, amplified(8 << 20, 8 << 20, 8 << 20, 40_000)),
            name
        )
        .is_none()
    );
    // Without write calls measured, over what it dirtied.
    let mut mmap = lines(5, amplified(0, 2 << 20, 2 << 20, 8 << 20));
    for l in &mut mmap {
        if let Some(p) = l.ledger.as_mut().map(|g| &mut g.processes[0]) {
            p.stages.write_calls = None;
        }
    }
    let f = only(&mmap, name).expect("holds");
    assert_eq!(
        (f.severity, &f.evidence["over"]),
        (Severity::Warning, &serde_json::json!("dirtied"))
    );
}

/// One process's writes in every interval: `n` of `p99_ms`, `part` of the
/// slowest one's time the `throttle` (the rest `other`).
fn writing(n: u64, p99_ms: u64, throttle_share: f64) -> impl Fn(usize, &mut IntervalLine) {
    use crate::writes::{SlowWrite, WriteLine, WriteParts};
    move |_, l| {
        let total = p99_ms * 1_000_000;
        let throttle = (total as f64 * throttle_share) as u64;
        let parts = WriteParts {
            total_ns: total,
            throttle_ns: throttle,
            other_ns: total - throttle,
            ..WriteParts::default()
        };
        l.writes = vec![WriteLine {
            pid: 42,
            comm: "dd".into(),
            writes: n,
            p50_ns: 20_000,
            p99_ns: total,
            max_ns: total,
            parts,
            pauses: u64::from(throttle > 0),
            throttled_by: if throttle > 0 {
                vec!["bdi".into()]
            } else {
                Vec::new()
            },
            slowest: Some(SlowWrite {
                pid: 42,
                tid: 42,
                comm: "dd".into(),
                cgroup_id: 1,
                dev: DevId::default(),
                ino: 12,
                call: "write".into(),
                ret: 65536,
                start_ns: 0,
                parts,
                pauses: u32::from(throttle > 0),
                stable_waits: 0,
                locks: 0,
                journal_starts: 0,
                throttled_by: Vec::new(),
                waited_for: parts.dominant().0.into(),
            }),
            ..WriteLine::default()
        }];
    }
}

#[test]
fn write_stalled_names_the_dominant_part_banded_on_the_p99() {
    let f = only(&lines(3, writing(50, 150, 0.9)), writes::STALLED).unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.evidence["part"], "throttle");
    assert_eq!(f.evidence["pid"], 42);
    assert_eq!(f.evidence["throttled_by"], serde_json::json!(["bdi"]));
    assert!(f.advice.contains("bdi"), "{}", f.advice);
    assert!(f.advice.contains("max_bytes"), "{}", f.advice);
    // At the edges of its bands.
    let sev =
        |p99: u64| only(&lines(3, writing(50, p99, 0.9)), writes::STALLED).map(|f| f.severity);
    assert_eq!(sev(9), None);
    assert_eq!(sev(10), Some(Severity::Info));
    assert_eq!(sev(99), Some(Severity::Info));
    assert_eq!(sev(1000), Some(Severity::Critical));
    // Slow on the CPU: named `other`, with its own advice.
    let f = only(&lines(3, writing(50, 30, 0.0)), writes::STALLED).unwrap();
    assert_eq!(f.evidence["part"], "other");
    assert!(f.advice.contains("on the CPU"), "{}", f.advice);
}

#[test]
fn write_stalled_needs_slow_writes_and_enough_of_them() {
    // Fast writes: nothing, whatever their number.
    assert!(only(&lines(5, writing(100_000, 1, 0.0)), writes::STALLED).is_none());
    // Two slow writes in the window are too few to have a p99.
    let ls = lines(3, |i, l| {
        if i == 2 {
            writing(2, 500, 1.0)(i, l);
        }
    });
    assert!(only(&ls, writes::STALLED).is_none());
    // No write spans (the default trace): nothing.
    assert!(only(&lines(5, |_, _| {}), writes::STALLED).is_none());
}

#[test]
fn write_stalled_in_blocked_names_the_journal_where_the_hooks_measured_it() {
    let ls = lines(3, |i, l| {
        writing(50, 200, 0.0)(i, l);
        let w = &mut l.writes[0];
        let total = w.parts.total_ns;
        w.parts.other_ns = total / 10;
        w.parts.blocked_ns = total - total / 10;
        w.parts.journal_ns = w.parts.blocked_ns * 3 / 4;
        if let Some(s) = w.slowest.as_mut() {
            s.parts = w.parts;
        }
    });
    let f = only(&ls, writes::STALLED).unwrap();
    assert_eq!(f.evidence["part"], "blocked");
    assert_eq!(f.evidence["blocked_in"], "journal");
    assert!(f.advice.contains("jbd2__journal_start"), "{}", f.advice);
}
