//! The write spans (`--enable writes`): each buffered write system call
//! to a file, split by what it waited for (model/writes.rs), as counters
//! fed from each interval line's `writes` (per process, summed here): the
//! calls, their bytes and errors, their time by `part` (`throttle`,
//! `stable`, `reclaim`, `blocked`, `other`, which add up to the calls'
//! time), the pauses and stable-page waits inside them, the slow ones,
//! and the intervals each dirty limit (`global`, `memcg`, `bdi`) paused
//! some; and, as levels of the last interval, the slowest process's p99
//! and the longest write.
//!
//! No pid or comm label: the lines are per process, but only summed
//! figures leave this module. The calls' durations, whole and by part,
//! are a histogram (`wbscope_write_call_seconds{part}`) of the log2
//! buckets each line carries (every call counted, model/writes.rs
//! `WriteHistograms`), so `histogram_quantile()` gives the host's p99
//! to within its bucket; the p99 gauge is the largest per-process exact
//! p99, which bounds the p99 of all the writes from above (each process
//! has 99% of its writes at or under it, so all processes together do
//! too).
//!
//! Every family is created at the first line with writes: a trace
//! without `--enable writes` serves none of these series, rather than
//! zeros that would read as "no write was slow".
use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::{EncodeLabelSet, LabelSetEncoder},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::SecondsCounter;
use super::log2::{HistFamily, request_latency};
use wbscope_model::writes::{PART_NAMES, WriteLine};

/// The dirty limits a write can be paused by, as `throttled_by` names
/// them (model/writes.rs `domain_names`). Only these become label
/// values: a line read back from a recording could name anything.
pub(crate) const LIMITS: [&str; 3] = ["global", "memcg", "bdi"];

/// No labels, in a family: a family serves nothing until its series is
/// made, which is how these metrics stay absent without the write spans.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Unlabelled;

impl EncodeLabelSet for Unlabelled {
    fn encode(&self, _encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PartLabels {
    /// One of [`PART_NAMES`].
    pub(crate) part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LimitLabels {
    /// One of [`LIMITS`].
    pub(crate) limit: &'static str,
}

type Seconds = Gauge<f64, AtomicU64>;

#[derive(Clone)]
pub(crate) struct WriteMetrics {
    calls: Family<Unlabelled, Counter>,
    bytes: Family<Unlabelled, Counter>,
    errors: Family<Unlabelled, Counter>,
    seconds: Family<PartLabels, SecondsCounter>,
    pauses: Family<Unlabelled, Counter>,
    stable_waits: Family<Unlabelled, Counter>,
    slow: Family<Unlabelled, Counter>,
    throttled_intervals: Family<LimitLabels, Counter>,
    p99: Family<Unlabelled, Seconds>,
    max: Family<Unlabelled, Seconds>,
    call_seconds: HistFamily<PartLabels>,
}

impl WriteMetrics {
    pub(crate) fn new() -> WriteMetrics {
        WriteMetrics {
            calls: Family::default(),
            bytes: Family::default(),
            errors: Family::default(),
            seconds: Family::default(),
            pauses: Family::default(),
            stable_waits: Family::default(),
            slow: Family::default(),
            throttled_intervals: Family::default(),
            p99: Family::default(),
            max: Family::default(),
            // The request latency's buckets: about 1 µs to 17 s.
            call_seconds: Family::new_with_constructor(request_latency),
        }
    }

    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "write_calls",
            "Buffered write system calls to files that ended (--enable writes: write, pwrite64, \
             writev, pwritev, pwritev2)",
            self.calls.clone(),
        );
        r.register_with_unit(
            "write",
            "Bytes those write calls returned (failed calls count 0)",
            Unit::Bytes,
            self.bytes.clone(),
        );
        r.register(
            "write_errors",
            "Write calls that returned an error",
            self.errors.clone(),
        );
        r.register_with_unit(
            "write",
            "Time in write calls by part: throttle, stable, reclaim, blocked, other; the parts \
             add up to the calls' time",
            Unit::Seconds,
            self.seconds.clone(),
        );
        r.register(
            "write_pauses",
            "balance_dirty_pages pauses inside write calls",
            self.pauses.clone(),
        );
        r.register(
            "write_stable_waits",
            "Waits inside write calls for a page under writeback (stable pages)",
            self.stable_waits.clone(),
        );
        r.register(
            "write_slow_calls",
            "Write calls at or over --slow-write (10 ms by default)",
            self.slow.clone(),
        );
        r.register(
            "write_throttled_intervals",
            "Intervals in which the limit (global, memcg, bdi) paused a write call (divide by \
             wbscope_intervals_total: the share of the time it acted on writers)",
            self.throttled_intervals.clone(),
        );
        r.register_with_unit(
            "write_p99",
            "The largest per-process p99 of write calls in the last interval: at or above the \
             p99 of all of them, equal with one writer (0 in an interval without writes)",
            Unit::Seconds,
            self.p99.clone(),
        );
        r.register_with_unit(
            "write_call",
            "Each write call's time (part=\"total\") and each of its parts' (throttle, stable, \
             reclaim, blocked, other; a call that did not wait in a part counts at 0)",
            Unit::Seconds,
            self.call_seconds.clone(),
        );
        r.register_with_unit(
            "write_max",
            "The longest write call of the last interval (0 in an interval without writes)",
            Unit::Seconds,
            self.max.clone(),
        );
    }

    /// An interval line's `writes`: empty without `--enable writes`, and
    /// then nothing is made; once made, an interval without writes sets
    /// the levels to 0.
    pub(crate) fn update(&self, lines: &[WriteLine]) {
        if lines.is_empty() && self.calls.get(&Unlabelled).is_none() {
            return;
        }
        let mut parts = [0u64; PART_NAMES.len()];
        let mut limits = [false; LIMITS.len()];
        let (mut p99_ns, mut max_ns) = (0u64, 0u64);
        let (mut calls, mut bytes, mut errors, mut pauses, mut stable_waits, mut slow) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        for l in lines {
            calls += l.writes;
            bytes += l.bytes;
            errors += l.errors;
            pauses += l.pauses;
            stable_waits += l.stable_waits;
            slow += l.slow;
            for (sum, v) in parts.iter_mut().zip(l.parts.values()) {
                *sum += v;
            }
            for by in &l.throttled_by {
                if let Some(i) = LIMITS.iter().position(|n| n == by) {
                    limits[i] = true;
                }
            }
            p99_ns = p99_ns.max(l.p99_ns);
            max_ns = max_ns.max(l.max_ns);
            let sums = std::iter::once(l.parts.total_ns).chain(l.parts.values());
            for ((part, buckets), sum) in l.histograms.by_name().into_iter().zip(sums) {
                if !buckets.is_empty() {
                    self.call_seconds
                        .get_or_create(&PartLabels { part })
                        .add_buckets(buckets, Some(sum));
                }
            }
        }
        self.calls.get_or_create(&Unlabelled).inc_by(calls);
        self.bytes.get_or_create(&Unlabelled).inc_by(bytes);
        self.errors.get_or_create(&Unlabelled).inc_by(errors);
        self.pauses.get_or_create(&Unlabelled).inc_by(pauses);
        self.stable_waits
            .get_or_create(&Unlabelled)
            .inc_by(stable_waits);
        self.slow.get_or_create(&Unlabelled).inc_by(slow);
        // Every part has its series from the first line on, 0 or not, so
        // that a stacked panel's parts and a share's denominator exist
        // together.
        for (part, ns) in PART_NAMES.iter().zip(parts) {
            self.seconds
                .get_or_create(&PartLabels { part })
                .inc_by_ns(ns);
        }
        for (limit, acted) in LIMITS.iter().zip(limits) {
            if acted {
                self.throttled_intervals
                    .get_or_create(&LimitLabels { limit })
                    .inc();
            }
        }
        self.p99.get_or_create(&Unlabelled).set(p99_ns as f64 / 1e9);
        self.max.get_or_create(&Unlabelled).set(max_ns as f64 / 1e9);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::histogram::Bucket;
    use wbscope_model::writes::{WriteHistograms, WriteParts};

    fn line(pid: u32, writes: u64, parts: [u64; 5], p99_ns: u64, by: &[&str]) -> WriteLine {
        let [throttle_ns, stable_ns, reclaim_ns, blocked_ns, other_ns] = parts;
        WriteLine {
            pid,
            comm: format!("w{pid}"),
            writes,
            bytes: writes * 4096,
            errors: 1,
            p50_ns: p99_ns / 2,
            p99_ns,
            max_ns: p99_ns * 2,
            percentiles_of: writes,
            parts: WriteParts {
                total_ns: parts.iter().sum(),
                throttle_ns,
                stable_ns,
                reclaim_ns,
                blocked_ns,
                other_ns,
                ..WriteParts::default()
            },
            pauses: 3,
            stable_waits: 2,
            locks: 0,
            journal_starts: 0,
            throttled_by: by.iter().map(|s| (*s).to_string()).collect(),
            slow: 1,
            slowest: None,
            histograms: WriteHistograms {
                // Every call 1-2 µs in all, 0 in each part but `other`.
                total: vec![Bucket {
                    lo: 1024,
                    hi: 2047,
                    count: writes,
                }],
                other: vec![Bucket {
                    lo: 1024,
                    hi: 2047,
                    count: writes,
                }],
                ..WriteHistograms::default()
            },
        }
    }

    #[test]
    fn each_lines_buckets_feed_the_call_histogram_by_part() {
        let (m, r) = registered();
        m.update(&[line(1, 100, [0, 0, 0, 0, 150_000], 2_000, &[])]);
        m.update(&[line(1, 60, [0, 0, 0, 0, 90_000], 2_000, &[])]);
        let text = encode(&r);
        assert!(
            text.contains("wbscope_write_call_seconds_count{part=\"total\"} 160"),
            "{text}"
        );
        assert!(
            text.contains("wbscope_write_call_seconds_count{part=\"other\"} 160"),
            "{text}"
        );
        // The sums are the parts' exact times.
        assert!(
            text.contains("wbscope_write_call_seconds_sum{part=\"other\"} 0.00024"),
            "{text}"
        );
        // No series for a part no line had buckets of.
        assert!(
            !text.contains("wbscope_write_call_seconds_count{part=\"throttle\"}"),
            "{text}"
        );
    }

    fn registered() -> (WriteMetrics, Registry) {
        let m = WriteMetrics::new();
        let mut r = Registry::with_prefix("wbscope");
        m.register(&mut r);
        (m, r)
    }

    fn encode(r: &Registry) -> String {
        super::super::web::encode(r).expect("encode")
    }

    #[test]
    fn without_write_lines_no_series_is_served() {
        let (m, r) = registered();
        m.update(&[]);
        let text = encode(&r);
        // An empty family is left out whole, its metadata too.
        assert!(!text.contains("wbscope_write_"), "{text}");
    }

    #[test]
    fn lines_add_up_by_part_and_limit_and_set_the_levels() {
        let (m, r) = registered();
        let ms = 1_000_000;
        m.update(&[
            line(
                1,
                100,
                [600 * ms, 10 * ms, 0, 40 * ms, 50 * ms],
                9 * ms,
                &["bdi"],
            ),
            line(2, 10, [0, 0, 5 * ms, 0, 5 * ms], 2 * ms, &[]),
        ]);
        m.update(&[line(
            1,
            50,
            [300 * ms, 0, 0, 0, 25 * ms],
            7 * ms,
            &["bdi", "memcg"],
        )]);
        let text = encode(&r);
        for expected in [
            "wbscope_write_calls_total 160",
            "wbscope_write_bytes_total 655360",
            "wbscope_write_errors_total 3",
            r#"wbscope_write_seconds_total{part="throttle"} 0.9"#,
            r#"wbscope_write_seconds_total{part="stable"} 0.01"#,
            r#"wbscope_write_seconds_total{part="reclaim"} 0.005"#,
            r#"wbscope_write_seconds_total{part="blocked"} 0.04"#,
            r#"wbscope_write_seconds_total{part="other"} 0.08"#,
            "wbscope_write_pauses_total 9",
            "wbscope_write_stable_waits_total 6",
            "wbscope_write_slow_calls_total 3",
            r#"wbscope_write_throttled_intervals_total{limit="bdi"} 2"#,
            r#"wbscope_write_throttled_intervals_total{limit="memcg"} 1"#,
            // The last interval's: one process, its p99 and max.
            "wbscope_write_p99_seconds 0.007",
            "wbscope_write_max_seconds 0.014",
            "# UNIT wbscope_write_seconds seconds",
            "# UNIT wbscope_write_bytes bytes",
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected} in\n{text}");
        }
        assert!(!text.contains(r#"limit="global""#), "{text}");
        // An interval without writes: the counters stay, the levels go
        // to 0.
        m.update(&[]);
        let text = encode(&r);
        assert!(text.lines().any(|l| l == "wbscope_write_calls_total 160"));
        assert!(
            text.lines().any(|l| l == "wbscope_write_p99_seconds 0.0"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_limit_name_makes_no_label() {
        let (m, r) = registered();
        m.update(&[line(1, 1, [1, 0, 0, 0, 0], 1, &["bdi\"}", "nfs"])]);
        let text = encode(&r);
        assert!(
            !text.contains("wbscope_write_throttled_intervals_total{"),
            "{text}"
        );
    }
}
