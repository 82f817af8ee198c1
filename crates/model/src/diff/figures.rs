//! The figures `wbscope diff` compares, with their units and which way is
//! better, and how one run's values are taken from a `compare`/`scenario`
//! document or from a recording's interval lines. A [`Sample`] is one run:
//! a value per figure it has, and the findings it had. Plain data; the
//! files are read by `commands::diff`.
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::{
    interval::{Bucket, IntervalLine, merge_buckets, quantile_bucket},
    timeline::Timeline,
};

/// Which way a figure is better, for the verdict (`worse`, `better`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
    /// A kernel internal whose change is neither good nor bad by itself
    /// (bigger chunks, more dirty pages): shown as `changed`.
    Neither,
}

/// One figure of the catalogue.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Figure {
    pub(crate) name: &'static str,
    pub(crate) unit: &'static str,
    pub(crate) better: Better,
    /// Decimals to print.
    #[serde(skip)]
    pub(crate) decimals: usize,
}

const fn fig(name: &'static str, unit: &'static str, better: Better, decimals: usize) -> Figure {
    Figure {
        name,
        unit,
        better,
        decimals,
    }
}

use Better::{Higher, Lower, Neither};

/// Every figure, in the order tables print them (docs/diff.md says what
/// each is and where it comes from). Findings are figures too:
/// `finding:NAME`, 1 for a run that had it, 0 for one that did not.
pub(crate) const FIGURES: &[Figure] = &[
    // The writer (compare/scenario documents only).
    fig("write_mb_s", "MB/s", Higher, 1),
    fig("durable_mb_s", "MB/s", Higher, 1),
    fig("per_second_mean_mb_s", "MB/s", Higher, 1),
    fig("per_second_min_mb_s", "MB/s", Higher, 1),
    fig("per_second_cv", "ratio", Lower, 3),
    fig("files_per_s", "files/s", Higher, 0),
    fig("elapsed_s", "s", Lower, 2),
    fig("write_p50", "us", Lower, 0),
    fig("write_p99", "us", Lower, 0),
    fig("write_max", "us", Lower, 0),
    fig("fsync_p50", "us", Lower, 0),
    fig("fsync_p99", "us", Lower, 0),
    fig("fdatasync_p50", "us", Lower, 0),
    fig("fdatasync_p99", "us", Lower, 0),
    fig("srf_write_p50", "us", Lower, 0),
    fig("srf_write_p99", "us", Lower, 0),
    fig("srf_wait_before_p50", "us", Lower, 0),
    fig("srf_wait_before_p99", "us", Lower, 0),
    fig("user_cpu_s", "s", Lower, 2),
    fig("sys_cpu_s", "s", Lower, 2),
    fig("sys_cpu_s_per_gib", "s/GiB", Lower, 2),
    // The kernel.
    fig("kernel_written_mb_s", "MB/s", Neither, 1),
    fig("calls", "calls", Neither, 0),
    fig("pages_per_call_mean", "pages", Neither, 0),
    fig("pages_per_call_p50", "pages", Neither, 0),
    fig("pages_per_call_p99", "pages", Neither, 0),
    fig("scanned_per_page", "pages/page", Lower, 2),
    fig("ns_per_page", "ns", Lower, 0),
    fig("on_cpu_ns_per_page", "ns", Lower, 0),
    fig("throttle_ms_per_s", "ms/s", Lower, 1),
    fig("throttle_events", "events", Lower, 0),
    fig("dirty_mean_mib", "MiB", Neither, 1),
    fig("dirty_peak_mib", "MiB", Neither, 1),
    fig("writeback_mean_mib", "MiB", Neither, 1),
    fig("writeback_peak_mib", "MiB", Neither, 1),
    fig("device_requests", "requests", Neither, 0),
    fig("request_kib_mean", "KiB", Neither, 0),
    fig("request_latency_mean_us", "us", Lower, 0),
    fig("request_latency_p99_us", "us", Lower, 0),
    fig("pages_per_pass_mean", "pages", Neither, 0),
];

/// The figure of a finding, `finding:NAME`.
pub(crate) const FINDING: Figure = fig("finding", "runs", Lower, 2);

/// The catalogue entry of `name` (`finding:NAME` included).
pub(crate) fn figure(name: &str) -> Option<Figure> {
    if let Some(f) = name.strip_prefix("finding:") {
        return finding_names().any(|n| n == f).then_some(FINDING);
    }
    FIGURES.iter().find(|f| f.name == name).copied()
}

/// The names of docs/findings.md's findings.
pub(crate) fn finding_names() -> impl Iterator<Item = &'static str> {
    crate::findings::RULES.iter().map(|r| r.name)
}

/// One run: its value of each figure it has (a run without fsyncs has no
/// `fsync_p99`), and the findings it had.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub values: BTreeMap<&'static str, f64>,
    pub(crate) findings: BTreeSet<String>,
}

impl Sample {
    fn set(&mut self, name: &'static str, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.values.insert(name, v);
        }
    }

    /// The value of `name` (`finding:NAME`: 1 or 0).
    pub fn get(&self, name: &str) -> Option<f64> {
        match name.strip_prefix("finding:") {
            Some(f) => Some(if self.findings.contains(f) { 1.0 } else { 0.0 }),
            None => self.values.get(name).copied(),
        }
    }
}

fn num(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Levels and device histograms gathered over a run's time (a document's
/// timeline bins, a recording's interval lines).
#[derive(Default)]
struct Levels {
    dirty_pages: Vec<u64>,
    writeback_pages: Vec<u64>,
    latency_ns: Vec<Bucket>,
    request_bytes: Vec<Bucket>,
}

/// The mean of a log2 histogram, each bucket counted at its middle: an
/// estimate within a factor of 1.5 of the truth (docs/diff.md).
fn bucket_mean(buckets: &[Bucket]) -> Option<f64> {
    let n: u64 = buckets.iter().map(|b| b.count).sum();
    (n > 0).then(|| {
        buckets
            .iter()
            .map(|b| (b.lo as f64 + b.hi as f64) / 2.0 * b.count as f64)
            .sum::<f64>()
            / n as f64
    })
}

fn mean_u64(xs: &[u64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<u64>() as f64 / xs.len() as f64)
}

impl Levels {
    fn put(&self, s: &mut Sample, page: f64, peaks: bool) {
        s.set(
            "dirty_mean_mib",
            mean_u64(&self.dirty_pages).map(|p| p * page / MIB),
        );
        s.set(
            "writeback_mean_mib",
            mean_u64(&self.writeback_pages).map(|p| p * page / MIB),
        );
        if peaks {
            let peak = |xs: &[u64]| xs.iter().max().map(|&p| p as f64 * page / MIB);
            s.set("dirty_peak_mib", peak(&self.dirty_pages));
            s.set("writeback_peak_mib", peak(&self.writeback_pages));
        }
        s.set(
            "request_kib_mean",
            bucket_mean(&self.request_bytes).map(|b| b / 1024.0),
        );
        s.set(
            "request_latency_mean_us",
            bucket_mean(&self.latency_ns).map(|ns| ns / 1000.0),
        );
        s.set(
            "request_latency_p99_us",
            quantile_bucket(&self.latency_ns, 0.99).map(|[_, hi]| hi as f64 / 1000.0),
        );
    }
}

/// One run of a `compare`/`scenario` document (`{"strategy", "writer",
/// "kernel", ...}`), with `page_size` bytes per page.
pub fn of_run(run: &Value, page_size: u64) -> Sample {
    let mut s = Sample::default();
    let w = |p: &str| num(run, &format!("/writer/{p}"));
    let k = |p: &str| num(run, &format!("/kernel/{p}"));
    s.set("write_mb_s", w("write_mb_s"));
    s.set("durable_mb_s", w("durable_mb_s"));
    s.set("per_second_mean_mb_s", w("per_second/mean"));
    s.set("per_second_min_mb_s", w("per_second/min"));
    s.set("per_second_cv", w("per_second/cv"));
    s.set("files_per_s", w("files_per_s"));
    s.set("elapsed_s", w("elapsed_s"));
    // A latency of a run without such calls is absent, not zero.
    if w("write_latency_us/count").is_some_and(|c| c > 0.0) {
        s.set("write_p50", w("write_latency_us/p50"));
        s.set("write_p99", w("write_latency_us/p99"));
        s.set("write_max", w("write_latency_us/max"));
    }
    for (kind, p50, p99) in [
        ("fsync", "fsync_p50", "fsync_p99"),
        ("fdatasync", "fdatasync_p50", "fdatasync_p99"),
        ("srf_write", "srf_write_p50", "srf_write_p99"),
        (
            "srf_wait_before",
            "srf_wait_before_p50",
            "srf_wait_before_p99",
        ),
    ] {
        if w(&format!("sync_latency_us/{kind}/count")).is_some_and(|c| c > 0.0) {
            s.set(p50, w(&format!("sync_latency_us/{kind}/p50")));
            s.set(p99, w(&format!("sync_latency_us/{kind}/p99")));
        }
    }
    s.set("user_cpu_s", w("user_cpu_s"));
    s.set("sys_cpu_s", w("sys_cpu_s"));
    s.set("sys_cpu_s_per_gib", w("sys_cpu_s_per_gib"));

    let window = k("window_s").filter(|&w| w > 0.0);
    let page = page_size as f64;
    let calls = k("calls");
    let pages = k("pages_written");
    s.set(
        "kernel_written_mb_s",
        pages.zip(window).map(|(p, w)| p * page / 1e6 / w),
    );
    s.set("calls", calls);
    s.set(
        "pages_per_call_mean",
        pages.zip(calls.filter(|&c| c > 0.0)).map(|(p, c)| p / c),
    );
    s.set("pages_per_call_p50", k("pages_per_call/p50"));
    s.set("pages_per_call_p99", k("pages_per_call/p99"));
    s.set("scanned_per_page", k("pages_scanned_per_page_written"));
    s.set("ns_per_page", k("ns_per_written_page"));
    s.set("on_cpu_ns_per_page", k("on_cpu_ns_per_written_page"));
    s.set(
        "throttle_ms_per_s",
        k("throttle_pause_ms_total")
            .zip(window)
            .map(|(ms, w)| ms / w),
    );
    s.set("throttle_events", k("throttle_events"));
    s.set(
        "dirty_peak_mib",
        k("peak_dirty_kib").map(|kib| kib / 1024.0),
    );
    s.set(
        "writeback_peak_mib",
        k("peak_writeback_kib").map(|kib| kib / 1024.0),
    );
    s.set("device_requests", k("device_requests"));
    s.set("pages_per_pass_mean", k("inode_pass/pages_per_pass_mean"));
    let mut levels = Levels::default();
    if let Some(t) = run
        .pointer("/kernel/timeline")
        .and_then(|t| serde_json::from_value::<Timeline>(t.clone()).ok())
    {
        for b in &t.bins {
            levels.dirty_pages.extend(b.dirty_pages);
            levels.writeback_pages.extend(b.writeback_pages);
            levels.latency_ns = merge_buckets(&levels.latency_ns, &b.request_latency_ns);
            levels.request_bytes = merge_buckets(&levels.request_bytes, &b.request_bytes);
        }
    }
    // The document's peaks (sampled every 100 ms) are the run's own.
    levels.put(&mut s, page, false);
    if let Some(fs) = run.pointer("/kernel/findings").and_then(Value::as_array) {
        s.findings = fs
            .iter()
            .filter_map(|f| f.get("name").and_then(Value::as_str))
            .map(str::to_string)
            .collect();
    }
    s
}

/// A recording, interval line by interval line: the kernel's figures
/// (a recording has no writer of wbscope's own), over every device.
#[derive(Default)]
pub struct RecordingSample {
    seconds: f64,
    calls: u64,
    pages: u64,
    scan_bytes: u64,
    scan_pages: u64,
    /// Sums of ns per page weighted by the interval's pages, and the pages.
    ns: (f64, f64),
    on_cpu_ns: (f64, f64),
    throttle_ms: u64,
    throttle_events: u64,
    requests: u64,
    levels: Levels,
    engine: crate::findings::Engine,
}

impl RecordingSample {
    pub fn interval(&mut self, line: &IntervalLine) {
        self.seconds += line.interval_s.max(0.0);
        self.calls += line.calls;
        self.pages += line.pages_written;
        self.scan_bytes += line.scan.bytes_scanned;
        self.scan_pages += line.scan.pages_written;
        let p = line.pages_written as f64;
        if let Some(ns) = line.ns_per_written_page {
            self.ns.0 += ns * p;
            self.ns.1 += p;
        }
        if let Some(ns) = line.on_cpu_ns_per_written_page {
            self.on_cpu_ns.0 += ns * p;
            self.on_cpu_ns.1 += p;
        }
        self.throttle_ms += line.throttle.pause_ms_total;
        self.throttle_events += line.throttle.events;
        self.levels.dirty_pages.push(line.dirty.vmstat.nr_dirty);
        self.levels
            .writeback_pages
            .push(line.dirty.vmstat.nr_writeback);
        for d in &line.devices {
            self.requests += d.requests;
            self.levels.latency_ns = merge_buckets(&self.levels.latency_ns, &d.latency_ns);
            self.levels.request_bytes = merge_buckets(&self.levels.request_bytes, &d.request_bytes);
        }
        self.engine.interval(line);
    }

    /// The sample; `None` for a recording without a whole interval.
    pub fn finish(mut self, page_size: u64) -> Option<Sample> {
        if self.seconds <= 0.0 {
            return None;
        }
        let mut s = Sample::default();
        let page = page_size as f64;
        s.set(
            "kernel_written_mb_s",
            Some(self.pages as f64 * page / 1e6 / self.seconds),
        );
        s.set("calls", Some(self.calls as f64));
        s.set(
            "pages_per_call_mean",
            (self.calls > 0).then(|| self.pages as f64 / self.calls as f64),
        );
        s.set(
            "scanned_per_page",
            (self.scan_pages > 0).then(|| self.scan_bytes as f64 / page / self.scan_pages as f64),
        );
        s.set(
            "ns_per_page",
            (self.ns.1 > 0.0).then(|| self.ns.0 / self.ns.1),
        );
        s.set(
            "on_cpu_ns_per_page",
            (self.on_cpu_ns.1 > 0.0).then(|| self.on_cpu_ns.0 / self.on_cpu_ns.1),
        );
        s.set(
            "throttle_ms_per_s",
            Some(self.throttle_ms as f64 / self.seconds),
        );
        s.set("throttle_events", Some(self.throttle_events as f64));
        s.set("device_requests", Some(self.requests as f64));
        self.levels.put(&mut s, page, true);
        s.findings = self
            .engine
            .finish()
            .1
            .findings
            .iter()
            .map(|f| f.name.to_string())
            .collect();
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_has_a_unique_name_and_a_line_in_the_docs() {
        let doc = include_str!("../../../../docs/diff.md");
        let mut seen = BTreeSet::new();
        for f in FIGURES {
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert!(
                doc.contains(&format!("`{}`", f.name)),
                "{} not in docs/diff.md",
                f.name
            );
        }
        assert!(figure("finding:dirty-throttled").is_some());
        assert!(figure("finding:no-such").is_none());
        assert!(figure("write_mb_s").is_some());
    }

    #[test]
    fn a_compare_run_gives_its_figures() {
        let run = serde_json::json!({
            "strategy": "fsync-end",
            "writer": {
                "write_mb_s": 400.0, "durable_mb_s": 300.0, "elapsed_s": 2.0,
                "per_second": {"mean": 390.0, "min": 350.0, "cv": 0.1},
                "write_latency_us": {"count": 10, "p50": 20.0, "p99": 90.0, "max": 100.0},
                "sync_latency_us": {"fsync": {"count": 1, "p50": 5000.0, "p99": 5000.0}},
                "user_cpu_s": 0.1, "sys_cpu_s": 0.5, "sys_cpu_s_per_gib": 0.25,
                "files_per_s": null
            },
            "kernel": {
                "window_s": 4.0, "calls": 10, "pages_written": 20480,
                "pages_per_call": {"p50": 2048, "p99": 4096, "max": 4096},
                "pages_scanned_per_page_written": 1.5,
                "throttle_pause_ms_total": 200, "throttle_events": 7,
                "peak_dirty_kib": 2048, "peak_writeback_kib": 1024,
                "device_requests": 80,
                "findings": [{"name": "dirty-throttled"}],
                "timeline": {"bin_s": 0.1, "span_s": 0.2, "bins": [
                    {"dirty_pages": 256, "writeback_pages": 0,
                     "request_latency_ns": [{"lo": 1000, "hi": 1999, "count": 2}],
                     "request_bytes": [{"lo": 4096, "hi": 8191, "count": 2}]},
                    {"dirty_pages": 768, "writeback_pages": 512,
                     "request_latency_ns": [{"lo": 4000, "hi": 5999, "count": 2}],
                     "request_bytes": []}
                ]}
            }
        });
        let s = of_run(&run, 4096);
        let v = |n: &str| s.get(n).unwrap_or_else(|| panic!("no {n}"));
        assert_eq!(v("write_mb_s"), 400.0);
        assert_eq!(v("fsync_p99"), 5000.0);
        assert_eq!(s.get("fdatasync_p99"), None);
        assert_eq!(s.get("files_per_s"), None);
        assert_eq!(v("write_p99"), 90.0);
        // 20480 pages of 4 KiB in 4 s.
        assert!((v("kernel_written_mb_s") - 20480.0 * 4096.0 / 1e6 / 4.0).abs() < 1e-9);
        assert_eq!(v("pages_per_call_mean"), 2048.0);
        assert_eq!(v("throttle_ms_per_s"), 50.0);
        assert_eq!(v("dirty_peak_mib"), 2.0);
        // (256 + 768) / 2 pages = 2 MiB; (0 + 512) / 2 = 1 MiB.
        assert_eq!(v("dirty_mean_mib"), 2.0);
        assert_eq!(v("writeback_mean_mib"), 1.0);
        // Midpoints 1499.5 and 4999.5 ns, two requests each.
        assert!((v("request_latency_mean_us") - 3.2495).abs() < 1e-9);
        assert_eq!(v("request_latency_p99_us"), 5.999);
        assert!((v("request_kib_mean") - 6143.5 / 1024.0).abs() < 1e-9);
        assert_eq!(v("finding:dirty-throttled"), 1.0);
        assert_eq!(v("finding:page-cache-cliff"), 0.0);
    }
}
