//! The exporter's own metric types: log2 histograms as OpenMetrics
//! histograms ([`Log2Metric`]) and counters of seconds kept in ns
//! ([`SecondsCounter`]).
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric, family::Family},
};

use wbscope_model::{Log2Histogram, interval::Bucket};

/// Which log2 buckets a [`Log2Metric`] exposes: bucket `k` holds values
/// in `[2^(k-1), 2^k - 1]` (bucket 0 holds 0), so its `le` is
/// `(2^k - 1) * scale`. Buckets below `first` are folded into `first`,
/// those above `last` into `+Inf`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Log2Spec {
    pub(crate) first: usize,
    pub(crate) last: usize,
    /// Multiplies the native unit into the exposed one (ms → s: 1e-3).
    pub(crate) scale: f64,
}

/// Pages per call: le 0, 1, 3, 7, ... 2^20 - 1 (4 GiB of 4 KiB pages).
pub(crate) const PAGES_PER_CALL: Log2Spec = Log2Spec {
    first: 0,
    last: 20,
    scale: 1.0,
};
/// Request sizes: le 511 B ... 128 MiB - 1.
pub(crate) const REQUEST_BYTES: Log2Spec = Log2Spec {
    first: 9,
    last: 27,
    scale: 1.0,
};
/// Request latency: le ~1 µs ... ~17 s, in seconds.
pub(crate) const REQUEST_LATENCY: Log2Spec = Log2Spec {
    first: 10,
    last: 34,
    scale: 1e-9,
};
/// Throttle pauses: le 0, 1 ms, 3 ms ... ~16 s, in seconds.
pub(crate) const THROTTLE_PAUSE: Log2Spec = Log2Spec {
    first: 0,
    last: 14,
    scale: 1e-3,
};

#[derive(Debug)]
struct Log2State {
    /// Per log2 bucket, as `model::Log2Histogram::bucket_of` numbers them.
    counts: [u64; 65],
    /// In the native unit (pages, bytes, ns, ms).
    sum: u64,
}

impl Default for Log2State {
    fn default() -> Self {
        Log2State {
            counts: [0; 65],
            sum: 0,
        }
    }
}

impl Log2State {
    fn add(&mut self, bucket: usize, count: u64) {
        if let Some(c) = self.counts.get_mut(bucket) {
            *c = c.saturating_add(count);
        }
    }
}

/// A histogram over wbscope's log2 buckets. prometheus-client's own
/// `Histogram` only takes single observations; the kernel hands us
/// per-bucket counts (block requests, throttle pauses), which this type
/// adds as they are, so the exposed buckets are exactly the kernel's.
#[derive(Clone, Debug)]
pub(crate) struct Log2Metric {
    spec: Log2Spec,
    state: Arc<Mutex<Log2State>>,
}

impl Log2Metric {
    pub(crate) fn new(spec: Log2Spec) -> Log2Metric {
        Log2Metric {
            spec,
            state: Arc::default(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Log2State) -> T) -> T {
        // A panic while holding the lock leaves plain counters behind.
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    pub(crate) fn observe(&self, value: u64) {
        self.with(|s| {
            s.add(Log2Histogram::bucket_of(value), 1);
            s.sum = s.sum.saturating_add(value);
        });
    }

    /// Adds an interval's non-empty buckets (`lo` names the bucket). `sum`
    /// is the exact total when the kernel keeps one; otherwise each value
    /// counts as its bucket's lower edge (exact for powers of two).
    pub(crate) fn add_buckets(&self, buckets: &[Bucket], sum: Option<u64>) {
        self.with(|s| {
            let mut lower_edges = 0u64;
            for b in buckets {
                s.add(Log2Histogram::bucket_of(b.lo), b.count);
                lower_edges = lower_edges.saturating_add(b.lo.saturating_mul(b.count));
            }
            s.sum = s.sum.saturating_add(sum.unwrap_or(lower_edges));
        });
    }

    /// `(le, count)` pairs, not cumulative, ending with `+Inf`; the sum in
    /// the exposed unit; the total count.
    fn snapshot(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let spec = self.spec;
        self.with(|s| {
            let counts = &s.counts;
            let at = |k: usize| counts.get(k).copied().unwrap_or(0);
            let mut out = Vec::with_capacity(spec.last - spec.first + 2);
            let upper = |k: usize| ((1u128 << k) - 1) as f64 * spec.scale;
            out.push((upper(spec.first), (0..=spec.first).map(at).sum()));
            for k in spec.first + 1..=spec.last {
                out.push((upper(k), at(k)));
            }
            out.push((f64::INFINITY, (spec.last + 1..counts.len()).map(at).sum()));
            (out, s.sum as f64 * spec.scale, counts.iter().sum())
        })
    }
}

impl TypedMetric for Log2Metric {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Log2Metric {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (buckets, sum, count) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A counter of nanoseconds, exposed in seconds: kept as an integer so
/// the sum is exact (an `f64` counter accumulates rounding noise).
#[derive(Clone, Debug, Default)]
pub(crate) struct SecondsCounter {
    ns: Arc<AtomicU64>,
}

impl SecondsCounter {
    pub(crate) fn inc_by_ns(&self, ns: u64) {
        self.ns.fetch_add(ns, Ordering::Relaxed);
    }
}

impl TypedMetric for SecondsCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for SecondsCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let seconds = self.ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_counter::<NoLabelSet, _, f64>(&seconds, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

pub(super) type HistFamily<L> = Family<L, Log2Metric, fn() -> Log2Metric>;

pub(super) fn pages_per_call() -> Log2Metric {
    Log2Metric::new(PAGES_PER_CALL)
}
pub(super) fn request_bytes() -> Log2Metric {
    Log2Metric::new(REQUEST_BYTES)
}
pub(super) fn request_latency() -> Log2Metric {
    Log2Metric::new(REQUEST_LATENCY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets_fold_below_first_and_above_last() {
        let h = Log2Metric::new(Log2Spec {
            first: 2,
            last: 3,
            scale: 1.0,
        });
        for v in [0, 1, 3, 7, 8, 1 << 40] {
            h.observe(v);
        }
        let (buckets, sum, count) = h.snapshot();
        assert_eq!(buckets, vec![(3.0, 3), (7.0, 1), (f64::INFINITY, 2)]);
        assert_eq!(count, 6);
        assert_eq!(sum, (19 + (1u64 << 40)) as f64);
    }
}
