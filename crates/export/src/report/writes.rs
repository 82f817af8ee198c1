//! The write spans of a recording (`--enable writes`) in the timeline's
//! bins: the interval lines' `writes` (per process) added up per bin.
//!
//! The model's `TimeBin` has no place for them, so they are kept here,
//! beside the timeline, in bins that follow its length: a timeline
//! doubles its bin length (merging neighbours in pairs) when a time past
//! its last bin comes, or when the recording's interval grows, so these
//! bins are merged the same way whenever they are touched and at the
//! end ([`WriteBins::align`]), and bin `i` here is always bin `i` there.
//! Memory: one small entry per bin of the timeline, bounded as it is.
use wbscope_model::writes::{WriteLine, WriteParts};

/// The writes of one bin.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct WriteSums {
    pub(crate) writes: u64,
    /// Summed over the bin's processes and intervals.
    pub(crate) parts: WriteParts,
    /// The largest per-process p99 in the bin: at or above the p99 of
    /// all its writes (each process has 99% of its writes at or under
    /// its own), equal when one process wrote.
    pub(crate) p99_ns: u64,
    pub(crate) max_ns: u64,
}

impl WriteSums {
    fn add(&mut self, o: &WriteSums) {
        self.writes += o.writes;
        self.parts.add(&o.parts);
        self.p99_ns = self.p99_ns.max(o.p99_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
    }

    fn of(lines: &[WriteLine]) -> WriteSums {
        let mut s = WriteSums::default();
        for l in lines {
            s.add(&WriteSums {
                writes: l.writes,
                parts: l.parts,
                p99_ns: l.p99_ns,
                max_ns: l.max_ns,
            });
        }
        s
    }
}

/// Write sums in bins of the timeline's length.
#[derive(Clone, Debug)]
pub(crate) struct WriteBins {
    bin_s: f64,
    bins: Vec<WriteSums>,
}

impl WriteBins {
    /// Bins of `bin_s`, the timeline's bin length at the start.
    pub(crate) fn new(bin_s: f64) -> WriteBins {
        WriteBins {
            bin_s,
            bins: Vec::new(),
        }
    }

    /// Merges pairs until the bins are `bin_s` long, as the timeline
    /// did: both start at the same length and only double.
    pub(crate) fn align(&mut self, bin_s: f64) {
        while self.bin_s * 1.5 < bin_s {
            let bins = std::mem::take(&mut self.bins);
            for pair in bins.chunks(2) {
                let mut b = pair[0];
                if let Some(next) = pair.get(1) {
                    b.add(next);
                }
                self.bins.push(b);
            }
            self.bin_s *= 2.0;
        }
    }

    /// An interval line's writes, at time `t_s`, which the timeline
    /// (now `bin_s` long a bin) has just placed in one of its bins.
    pub(crate) fn add(&mut self, bin_s: f64, t_s: f64, lines: &[WriteLine]) {
        if lines.is_empty() {
            return;
        }
        self.align(bin_s);
        // The timeline's own placement (`Timeline::at`): negative and
        // non-finite times go to the first bin.
        let t = if t_s.is_finite() { t_s.max(0.0) } else { 0.0 };
        let i = (t / self.bin_s) as usize;
        if self.bins.len() <= i {
            self.bins.resize(i + 1, WriteSums::default());
        }
        self.bins[i].add(&WriteSums::of(lines));
    }

    /// The bins, as many as the timeline's (`bin_s` long, `len` of
    /// them); empty when no line had writes.
    pub(crate) fn finish(mut self, bin_s: f64, len: usize) -> Vec<WriteSums> {
        if self.bins.is_empty() {
            return Vec::new();
        }
        self.align(bin_s);
        self.bins
            .resize(len.max(self.bins.len()), WriteSums::default());
        self.bins
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::timeline::Timeline;

    fn line(writes: u64, total_ns: u64, p99_ns: u64) -> WriteLine {
        WriteLine {
            writes,
            p99_ns,
            max_ns: p99_ns,
            parts: WriteParts {
                total_ns,
                other_ns: total_ns,
                ..WriteParts::default()
            },
            ..WriteLine::default()
        }
    }

    #[test]
    fn the_bins_follow_the_timeline_as_it_doubles() {
        // 0.1-s lines for 200 s: the timeline doubles its bins five
        // times (600 bins at most); the writes' bins with it.
        let mut t = Timeline::new(0.1);
        let mut w = WriteBins::new(t.bin_s);
        for k in 0..2000u64 {
            let mid = k as f64 * 0.1 + 0.05;
            t.at(mid).add_call("periodic", k);
            w.add(t.bin_s, mid, &[line(1, k, k)]);
        }
        let bins = w.finish(t.bin_s, t.bins.len());
        assert_eq!(bins.len(), t.bins.len());
        // Each bin has the writes of the calls the timeline put there.
        for (b, tb) in bins.iter().zip(&t.bins) {
            let pages: u64 = tb.pages_written_by_cause.values().sum();
            assert_eq!(b.parts.total_ns, pages);
            assert_eq!(b.writes, tb.calls);
        }
        assert_eq!(bins.iter().map(|b| b.writes).sum::<u64>(), 2000);
        // The largest p99 of a bin is kept, not added.
        assert_eq!(bins.last().map(|b| b.p99_ns), Some(1999));
    }

    #[test]
    fn no_writes_no_bins() {
        let mut w = WriteBins::new(0.5);
        w.add(0.5, 1.0, &[]);
        assert!(w.finish(1.0, 6).is_empty());
    }
}
