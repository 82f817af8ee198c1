//! Power-of-two histograms: the one log2 bucket rule of the workspace
//! (`writeback_common::log2_bucket`, which the eBPF programs use too) and
//! the histogram userspace keeps of it.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::units::pow2;

/// Histogram with power-of-two buckets: bucket 0 holds 0, bucket k (k >= 1)
/// holds values in [2^(k-1), 2^k).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log2Histogram {
    buckets: [u64; 65],
}

impl Default for Log2Histogram {
    fn default() -> Self {
        Log2Histogram { buckets: [0; 65] }
    }
}

impl Log2Histogram {
    /// The bucket `value` counts in ([`writeback_common::log2_bucket`]).
    pub fn bucket_of(value: u64) -> usize {
        writeback_common::log2_bucket(value, 64) as usize
    }

    /// The values `[lo, hi]` bucket `k` holds.
    pub fn bucket_bounds(k: usize) -> (u64, u64) {
        writeback_common::log2_bucket_bounds(k.min(64) as u32)
    }

    /// Adds another histogram's counts, bucket by bucket.
    pub fn merge(&mut self, other: &Log2Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *mine += theirs;
        }
    }

    /// The label of bucket `k`: `0`, `1`, `2-3`, `4-7`, ... with K/M
    /// suffixes past 1024.
    pub fn bucket_label(k: usize) -> String {
        match k {
            0 => "0".into(),
            1 => "1".into(),
            // Exact bounds while they are short; from 1K on, `1K-2K` reads
            // as [1024, 2048).
            _ if k <= 10 => {
                let lo = 1u64 << (k - 1);
                format!("{lo}-{}", (lo << 1) - 1)
            }
            // The top bucket's upper bound, 2^64, does not fit a u64.
            64.. => format!("{}+", pow2(1 << 63)),
            _ => {
                let lo = 1u64 << (k - 1);
                format!("{}-{}", pow2(lo), pow2(lo << 1))
            }
        }
    }

    pub fn record(&mut self, value: u64) {
        self.buckets[Self::bucket_of(value)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// Index range of the non-empty buckets, if any.
    pub fn span(&self) -> Option<(usize, usize)> {
        let first = self.buckets.iter().position(|&c| c != 0)?;
        let last = self.buckets.iter().rposition(|&c| c != 0)?;
        Some((first, last))
    }
}

/// A histogram bucket: values in `[lo, hi]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub lo: u64,
    pub hi: u64,
    pub count: u64,
}

pub(crate) fn buckets_of(counts: impl IntoIterator<Item = (usize, u64)>) -> Vec<Bucket> {
    counts
        .into_iter()
        .filter(|&(_, c)| c > 0)
        .map(|(k, count)| {
            let (lo, hi) = Log2Histogram::bucket_bounds(k);
            Bucket { lo, hi, count }
        })
        .collect()
}

pub fn histogram_buckets(h: &Log2Histogram) -> Vec<Bucket> {
    buckets_of(h.buckets().iter().copied().enumerate())
}

/// The bucket `[lo, hi]` holding quantile `q` (0 < q <= 1) of a histogram
/// whose buckets are in ascending order: the first whose cumulative count
/// reaches `ceil(q * total)`. `None` when the histogram is empty. A log2
/// histogram can say no more than this: the quantile lies in the bucket.
pub fn quantile_bucket(buckets: &[Bucket], q: f64) -> Option<[u64; 2]> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    if total == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    buckets.iter().find_map(|b| {
        seen += b.count;
        (seen >= rank).then_some([b.lo, b.hi])
    })
}

/// Two histograms of the same buckets added up, in ascending order.
pub fn merge_buckets(a: &[Bucket], b: &[Bucket]) -> Vec<Bucket> {
    let mut counts: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for x in a.iter().chain(b) {
        *counts.entry((x.lo, x.hi)).or_default() += x.count;
    }
    counts
        .into_iter()
        .map(|((lo, hi), count)| Bucket { lo, hi, count })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets() {
        assert_eq!(Log2Histogram::bucket_of(0), 0);
        assert_eq!(Log2Histogram::bucket_of(1), 1);
        assert_eq!(Log2Histogram::bucket_of(2), 2);
        assert_eq!(Log2Histogram::bucket_of(3), 2);
        assert_eq!(Log2Histogram::bucket_of(4), 3);
        assert_eq!(Log2Histogram::bucket_of(16384), 15);
        assert_eq!(Log2Histogram::bucket_of(u64::MAX), 64);
        assert_eq!(Log2Histogram::bucket_label(2), "2-3");
        assert_eq!(Log2Histogram::bucket_label(11), "1K-2K");
        assert_eq!(Log2Histogram::bucket_label(15), "16K-32K");
        assert_eq!(Log2Histogram::bucket_label(10), "512-1023");
        assert_eq!(Log2Histogram::bucket_label(20), "512K-1M");
        assert_eq!(Log2Histogram::bucket_label(64), "8E+");
        let mut h = Log2Histogram::default();
        assert_eq!(h.span(), None);
        for v in [0, 5, 6, 7, 300] {
            h.record(v);
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.span(), Some((0, 9)));
        assert_eq!(h.buckets()[3], 3);
        let mut g = Log2Histogram::default();
        g.record(6);
        g.merge(&h);
        assert_eq!((g.count(), g.buckets()[3]), (6, 4));
        assert_eq!(Log2Histogram::bucket_bounds(0), (0, 0));
        assert_eq!(Log2Histogram::bucket_bounds(3), (4, 7));
        assert_eq!(Log2Histogram::bucket_bounds(64), (1 << 63, u64::MAX));
        // Every bound falls in its own bucket: the two rules agree.
        for k in 0..=64 {
            let (lo, hi) = Log2Histogram::bucket_bounds(k);
            assert_eq!(Log2Histogram::bucket_of(lo), k);
            assert_eq!(Log2Histogram::bucket_of(hi), k);
        }
    }
}
