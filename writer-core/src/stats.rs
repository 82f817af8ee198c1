//! Statistics with documented units; `None` where a figure is undefined.
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Summary of a per-second throughput series (MB/s, 1 MB = 10^6 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SeriesStats {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Population standard deviation.
    pub stddev: f64,
    /// Coefficient of variation, stddev / mean. `None` with fewer than two
    /// samples or a zero mean, where it means nothing.
    pub cv: Option<f64>,
}

impl SeriesStats {
    /// `None` for an empty series.
    pub fn of(samples: &[f64]) -> Option<SeriesStats> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let stddev = var.sqrt();
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let cv = (samples.len() >= 2 && mean > 0.0).then(|| stddev / mean);
        Some(SeriesStats {
            min,
            mean,
            max,
            stddev,
            cv,
        })
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// A latency histogram recording nanoseconds, 3 significant digits, up to
/// one hour.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    /// `None` only if hdrhistogram refused our fixed, valid bounds, which it
    /// does not: then latencies are not recorded rather than panicking.
    h: Option<Histogram<u64>>,
}

const MAX_NS: u64 = 3_600_000_000_000;

impl Default for LatencyHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHist {
    pub fn new() -> Self {
        LatencyHist {
            h: Histogram::new_with_bounds(1, MAX_NS, 3).ok(),
        }
    }

    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        if let Some(h) = &mut self.h {
            h.saturating_record(ns);
        }
    }

    pub fn merge(&mut self, other: &LatencyHist) {
        // Same bounds on both sides, so adding cannot fail.
        if let (Some(a), Some(b)) = (&mut self.h, &other.h) {
            let _ = a.add(b);
        }
    }

    pub fn count(&self) -> u64 {
        self.h.as_ref().map_or(0, Histogram::len)
    }

    /// `None` when nothing was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        let h = self.h.as_ref().filter(|h| !h.is_empty())?;
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(LatencySummary {
            count: h.len(),
            p50: us(h.value_at_quantile(0.50)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_stats_on_known_inputs() {
        // mean 5, population variance 4 (the textbook example), CV 0.4.
        let s = SeriesStats::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!((s.min, s.mean, s.max), (2.0, 5.0, 9.0));
        assert!((s.stddev - 2.0).abs() < 1e-12);
        assert!((s.cv.unwrap() - 0.4).abs() < 1e-12);
        // A flat series has CV 0.
        assert_eq!(SeriesStats::of(&[3.0, 3.0, 3.0]).unwrap().cv, Some(0.0));
    }

    #[test]
    fn series_stats_undefined_cases() {
        assert_eq!(SeriesStats::of(&[]), None);
        assert_eq!(SeriesStats::of(&[5.0]).unwrap().cv, None);
        assert_eq!(SeriesStats::of(&[0.0, 0.0]).unwrap().cv, None);
    }

    #[test]
    fn percentiles_on_known_inputs() {
        let mut h = LatencyHist::new();
        assert!(h.summary().is_none());
        // 1..=100 microseconds: p50 = 50 us, p99 = 99 us, max = 100 us.
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary().unwrap();
        assert_eq!(s.count, 100);
        // 3 significant digits: within 0.1 %.
        assert!((s.p50 - 50.0).abs() <= 0.05, "{s:?}");
        assert!((s.p99 - 99.0).abs() <= 0.1, "{s:?}");
        assert!((s.max - 100.0).abs() <= 0.1, "{s:?}");
        assert!((s.mean - 50.5).abs() <= 0.1, "{s:?}");
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHist::new();
        let mut b = LatencyHist::new();
        a.record(Duration::from_millis(1));
        b.record(Duration::from_millis(3));
        b.record(Duration::from_secs(7200)); // beyond the bound: clamped, kept
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert!(a.summary().unwrap().max >= 3_599_000_000.0);
    }
}
