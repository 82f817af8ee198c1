//! Write spans (`--enable writes`): each buffered write system call to a
//! file, split by what it waited for (writeback_common writes.rs says how
//! each part is measured), per process per interval ([`WriteLine`]), and
//! each slow one on its own ([`SlowWrite`], docs/trace-json.md `write`
//! lines).
//!
//! The parts add up to the call's time: `other` is what the kernel's
//! parts leave of it (the copy into the page cache and the rest, on the
//! CPU).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use writeback_common::{WriteCall, write_call, write_domain};

use crate::{
    DevId, Log2Histogram,
    durability::{keep_top, nearest_rank},
    histogram::{Bucket, histogram_buckets, merge_buckets},
    record::comm,
};

/// Each process's write times kept per interval for its exact
/// percentiles: 65,536 calls (512 KiB); past them the percentiles are of
/// the first ones and the line says so (`percentiles_of`).
const LATENCIES_KEPT: usize = 1 << 16;

/// Slow writes written one by one per interval at most; the rest are
/// counted in the interval's lines (`slow`).
pub const SLOW_WRITES_KEPT: usize = 256;

/// One write as the kernel sent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Write {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    pub dev: DevId,
    pub ino: u64,
    /// writeback_common [`write_call`].
    pub call: u32,
    pub ret: i64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub throttle_ns: u64,
    pub stable_ns: u64,
    pub reclaim_ns: u64,
    pub blocked_ns: u64,
    pub pauses: u32,
    pub stable_waits: u32,
    /// writeback_common [`write_domain`] bits.
    pub domains: u32,
    /// Of `blocked_ns`: in a contended folio lock, in a journal handle's
    /// start (function hooks; 0 without them).
    pub lock_ns: u64,
    pub journal_ns: u64,
    pub locks: u32,
    pub journal_starts: u32,
}

impl From<&WriteCall> for Write {
    fn from(w: &WriteCall) -> Write {
        Write {
            pid: w.pid,
            tid: w.tid,
            comm: comm(&w.comm),
            cgroup_id: w.cgroup_id,
            dev: DevId::from_kernel(w.dev),
            ino: w.ino,
            call: w.call,
            ret: w.ret,
            start_ns: w.start_ns,
            end_ns: w.end_ns,
            throttle_ns: w.throttle_ns,
            stable_ns: w.stable_ns,
            reclaim_ns: w.reclaim_ns,
            blocked_ns: w.blocked_ns,
            pauses: w.pauses,
            stable_waits: w.stable_waits,
            domains: w.domains,
            lock_ns: w.lock_ns,
            journal_ns: w.journal_ns,
            locks: w.locks,
            journal_starts: w.journal_starts,
        }
    }
}

/// The parts of one or many writes' time, ns. They add up to `total_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteParts {
    pub total_ns: u64,
    pub throttle_ns: u64,
    pub stable_ns: u64,
    pub reclaim_ns: u64,
    pub blocked_ns: u64,
    pub other_ns: u64,
    /// Of `blocked_ns`: in a contended folio lock (`__folio_lock()`) and in
    /// a journal handle's start (`jbd2__journal_start()`), where function
    /// hooks load (the plan's `write_lock`, `write_journal`); 0 elsewhere.
    #[serde(default)]
    pub lock_ns: u64,
    #[serde(default)]
    pub journal_ns: u64,
}

/// The parts by name, in the order lines and panes show them.
pub const PART_NAMES: [&str; 5] = ["throttle", "stable", "reclaim", "blocked", "other"];

impl WriteParts {
    /// One write's parts: the measured ones scaled down together if the
    /// clock readings made them pass the call's time (they never should
    /// by more than a scheduler tick), `other` the rest.
    pub fn of(w: &Write) -> WriteParts {
        let total = w.end_ns.saturating_sub(w.start_ns);
        let mut measured = [w.throttle_ns, w.stable_ns, w.reclaim_ns, w.blocked_ns];
        let sum: u64 = measured.iter().sum();
        if sum > total && sum > 0 {
            for m in &mut measured {
                *m = (u128::from(*m) * u128::from(total) / u128::from(sum)) as u64;
            }
        }
        let [throttle_ns, stable_ns, reclaim_ns, blocked_ns] = measured;
        // Lock and journal are of blocked: at most it, scaled with it.
        let of_blocked = |ns: u64| {
            (u128::from(ns.min(w.blocked_ns)) * u128::from(blocked_ns)
                / u128::from(w.blocked_ns.max(1))) as u64
        };
        WriteParts {
            total_ns: total,
            throttle_ns,
            stable_ns,
            reclaim_ns,
            blocked_ns,
            other_ns: total.saturating_sub(measured.iter().sum()),
            lock_ns: of_blocked(w.lock_ns),
            journal_ns: of_blocked(w.journal_ns),
        }
    }

    pub fn add(&mut self, o: &WriteParts) {
        self.total_ns += o.total_ns;
        self.throttle_ns += o.throttle_ns;
        self.stable_ns += o.stable_ns;
        self.reclaim_ns += o.reclaim_ns;
        self.blocked_ns += o.blocked_ns;
        self.other_ns += o.other_ns;
        self.lock_ns += o.lock_ns;
        self.journal_ns += o.journal_ns;
    }

    /// What most of `blocked` was, where the hooks measured it: `lock`
    /// or `journal` when it holds half of it or more.
    pub fn blocked_in(&self) -> Option<&'static str> {
        [("lock", self.lock_ns), ("journal", self.journal_ns)]
            .into_iter()
            .filter(|&(_, ns)| ns > 0 && 2 * ns >= self.blocked_ns)
            .max_by_key(|&(_, ns)| ns)
            .map(|(n, _)| n)
    }

    /// The parts in [`PART_NAMES`] order.
    pub fn values(&self) -> [u64; 5] {
        [
            self.throttle_ns,
            self.stable_ns,
            self.reclaim_ns,
            self.blocked_ns,
            self.other_ns,
        ]
    }

    /// The largest part and its time: what the call mostly waited for.
    pub fn dominant(&self) -> (&'static str, u64) {
        PART_NAMES
            .iter()
            .zip(self.values())
            .max_by_key(|&(_, v)| v)
            .map_or(("other", 0), |(n, v)| (*n, v))
    }
}

/// The limits that paused a write, by name.
pub fn domain_names(bits: u32) -> Vec<&'static str> {
    [
        (write_domain::GLOBAL, "global"),
        (write_domain::MEMCG, "memcg"),
        (write_domain::BDI, "bdi"),
    ]
    .into_iter()
    .filter(|&(b, _)| bits & b != 0)
    .map(|(_, n)| n)
    .collect()
}

/// One slow write (docs/trace-json.md, `write`): at or over the
/// threshold (`--slow-write`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowWrite {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    pub dev: DevId,
    pub ino: u64,
    pub call: String,
    /// Bytes written, or -errno.
    pub ret: i64,
    /// Monotonic ns of its start.
    pub start_ns: u64,
    #[serde(flatten)]
    pub parts: WriteParts,
    pub pauses: u32,
    pub stable_waits: u32,
    /// Contended folio locks and journal handles started inside (with the
    /// function hooks; 0 without them).
    #[serde(default)]
    pub locks: u32,
    #[serde(default)]
    pub journal_starts: u32,
    /// The limits that paused it: `global`, `memcg`, `bdi`.
    pub throttled_by: Vec<String>,
    /// Its largest part.
    pub waited_for: String,
}

impl SlowWrite {
    pub fn of(w: &Write) -> SlowWrite {
        let parts = WriteParts::of(w);
        SlowWrite {
            pid: w.pid,
            tid: w.tid,
            comm: w.comm.clone(),
            cgroup_id: w.cgroup_id,
            dev: w.dev,
            ino: w.ino,
            call: write_call::NAMES
                .get(w.call as usize)
                .copied()
                .unwrap_or("write")
                .to_string(),
            ret: w.ret,
            start_ns: w.start_ns,
            parts,
            pauses: w.pauses,
            stable_waits: w.stable_waits,
            locks: w.locks,
            journal_starts: w.journal_starts,
            throttled_by: domain_names(w.domains)
                .into_iter()
                .map(str::to_string)
                .collect(),
            waited_for: parts.dominant().0.to_string(),
        }
    }
}

/// One process's writes in an interval (docs/trace-json.md, interval
/// lines' `writes`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteLine {
    pub pid: u32,
    pub comm: String,
    pub writes: u64,
    /// Bytes its writes returned (failed ones count 0).
    pub bytes: u64,
    pub errors: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// How many writes the percentiles are of (all, up to 65,536).
    pub percentiles_of: u64,
    /// Sums over its writes.
    #[serde(flatten)]
    pub parts: WriteParts,
    pub pauses: u64,
    pub stable_waits: u64,
    #[serde(default)]
    pub locks: u64,
    #[serde(default)]
    pub journal_starts: u64,
    pub throttled_by: Vec<String>,
    /// Its writes at or over the slow threshold.
    pub slow: u64,
    /// Its slowest write.
    pub slowest: Option<SlowWrite>,
    /// Each call's time and its parts' in log2 buckets of ns (the
    /// exporter's histograms); absent in recordings made before them.
    #[serde(default, skip_serializing_if = "WriteHistograms::is_empty")]
    pub histograms: WriteHistograms,
}

/// Per-call times, ns, in log2 buckets (`model::histogram`): the whole
/// call and each part, every call counted in each (a call that did not
/// wait in a part counts in its 0 bucket).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteHistograms {
    pub total: Vec<Bucket>,
    pub throttle: Vec<Bucket>,
    pub stable: Vec<Bucket>,
    pub reclaim: Vec<Bucket>,
    pub blocked: Vec<Bucket>,
    pub other: Vec<Bucket>,
}

impl WriteHistograms {
    pub fn is_empty(&self) -> bool {
        self.total.is_empty()
    }

    /// `("total", ...)` then the parts in [`PART_NAMES`] order.
    pub fn by_name(&self) -> [(&'static str, &[Bucket]); 6] {
        [
            ("total", &self.total),
            ("throttle", &self.throttle),
            ("stable", &self.stable),
            ("reclaim", &self.reclaim),
            ("blocked", &self.blocked),
            ("other", &self.other),
        ]
    }

    fn of(h: &[Log2Histogram; 6]) -> WriteHistograms {
        let [total, throttle, stable, reclaim, blocked, other] =
            h.each_ref().map(histogram_buckets);
        WriteHistograms {
            total,
            throttle,
            stable,
            reclaim,
            blocked,
            other,
        }
    }

    fn merge(&mut self, o: &WriteHistograms) {
        for (mine, theirs) in [
            (&mut self.total, &o.total),
            (&mut self.throttle, &o.throttle),
            (&mut self.stable, &o.stable),
            (&mut self.reclaim, &o.reclaim),
            (&mut self.blocked, &o.blocked),
            (&mut self.other, &o.other),
        ] {
            *mine = merge_buckets(mine, theirs);
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Acc {
    line: WriteLine,
    domains: u32,
    latencies: Vec<u64>,
    /// The call, then its parts ([`WriteHistograms`]).
    hists: [Log2Histogram; 6],
}

/// The writes of the interval in progress, and the slow ones to write out.
#[derive(Clone, Debug)]
pub struct WriteTally {
    per: BTreeMap<u32, Acc>,
    slow_ns: u64,
    slow: Vec<SlowWrite>,
    /// Slow writes handed out to write this interval.
    slow_written: usize,
    /// Slow writes past [`SLOW_WRITES_KEPT`] this interval.
    pub slow_not_written: u64,
}

impl WriteTally {
    /// Writes of `slow_ns` or more are slow.
    pub fn new(slow_ns: u64) -> WriteTally {
        WriteTally {
            per: BTreeMap::new(),
            slow_ns,
            slow: Vec::new(),
            slow_written: 0,
            slow_not_written: 0,
        }
    }

    pub fn add(&mut self, w: &Write) {
        let parts = WriteParts::of(w);
        let acc = self.per.entry(w.pid).or_default();
        let l = &mut acc.line;
        l.pid = w.pid;
        l.comm.clone_from(&w.comm);
        l.writes += 1;
        if w.ret < 0 {
            l.errors += 1;
        } else {
            l.bytes += w.ret as u64;
        }
        l.parts.add(&parts);
        l.pauses += u64::from(w.pauses);
        l.stable_waits += u64::from(w.stable_waits);
        l.locks += u64::from(w.locks);
        l.journal_starts += u64::from(w.journal_starts);
        acc.domains |= w.domains;
        l.max_ns = l.max_ns.max(parts.total_ns);
        acc.hists[0].record(parts.total_ns);
        for (h, v) in acc.hists[1..].iter_mut().zip(parts.values()) {
            h.record(v);
        }
        if acc.latencies.len() < LATENCIES_KEPT {
            acc.latencies.push(parts.total_ns);
        }
        if parts.total_ns >= self.slow_ns {
            l.slow += 1;
            let slow = SlowWrite::of(w);
            if l.slowest
                .as_ref()
                .is_none_or(|s| slow.parts.total_ns > s.parts.total_ns)
            {
                l.slowest = Some(slow.clone());
            }
            if self.slow_written < SLOW_WRITES_KEPT {
                self.slow_written += 1;
                self.slow.push(slow);
            } else {
                self.slow_not_written += 1;
            }
        }
    }

    /// The slow writes seen since the last call, to write out.
    pub fn take_slow(&mut self) -> Vec<SlowWrite> {
        std::mem::take(&mut self.slow)
    }

    /// The interval's lines, largest write time first (past
    /// [`crate::durability::PROCESSES_KEPT`], the rest added into one), and a fresh start.
    pub fn take_lines(&mut self) -> Vec<WriteLine> {
        self.slow_not_written = 0;
        self.slow_written = 0;
        let mut lines: Vec<WriteLine> = std::mem::take(&mut self.per)
            .into_values()
            .map(|mut acc| {
                acc.latencies.sort_unstable();
                acc.line.p50_ns = nearest_rank(&acc.latencies, 0.5);
                acc.line.p99_ns = nearest_rank(&acc.latencies, 0.99);
                acc.line.percentiles_of = acc.latencies.len() as u64;
                acc.line.histograms = WriteHistograms::of(&acc.hists);
                acc.line.throttled_by = domain_names(acc.domains)
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                acc.line
            })
            .collect();
        lines.sort_by(|a, b| {
            b.parts
                .total_ns
                .cmp(&a.parts.total_ns)
                .then(a.pid.cmp(&b.pid))
        });
        keep_top(lines, others)
    }
}

/// The processes past [`crate::durability::PROCESSES_KEPT`] in one line: counts and sums add;
/// the p50/p99 given are the largest of theirs, the max is exact.
fn others(rest: Vec<WriteLine>) -> WriteLine {
    let mut o = WriteLine {
        comm: "(others)".into(),
        ..WriteLine::default()
    };
    for l in rest {
        o.writes += l.writes;
        o.bytes += l.bytes;
        o.errors += l.errors;
        o.parts.add(&l.parts);
        o.pauses += l.pauses;
        o.stable_waits += l.stable_waits;
        o.locks += l.locks;
        o.journal_starts += l.journal_starts;
        o.slow += l.slow;
        o.percentiles_of += l.percentiles_of;
        o.histograms.merge(&l.histograms);
        o.p50_ns = o.p50_ns.max(l.p50_ns);
        o.p99_ns = o.p99_ns.max(l.p99_ns);
        o.max_ns = o.max_ns.max(l.max_ns);
        for d in l.throttled_by {
            if !o.throttled_by.contains(&d) {
                o.throttled_by.push(d);
            }
        }
        if let Some(s) = l.slowest
            && o.slowest
                .as_ref()
                .is_none_or(|x| s.parts.total_ns > x.parts.total_ns)
        {
            o.slowest = Some(s);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(pid: u32, total: u64, throttle: u64, stable: u64, blocked: u64) -> Write {
        Write {
            pid,
            tid: pid,
            comm: format!("w{pid}"),
            start_ns: 1_000,
            end_ns: 1_000 + total,
            ret: 4096,
            throttle_ns: throttle,
            stable_ns: stable,
            blocked_ns: blocked,
            pauses: u32::from(throttle > 0),
            domains: if throttle > 0 { write_domain::BDI } else { 0 },
            ..Write::default()
        }
    }

    #[test]
    fn the_parts_add_up_to_the_call_and_other_is_the_rest() {
        let p = WriteParts::of(&write(1, 100, 60, 10, 5));
        assert_eq!(p.values(), [60, 10, 0, 5, 25]);
        assert_eq!(p.values().iter().sum::<u64>(), p.total_ns);
        assert_eq!(p.dominant(), ("throttle", 60));
    }

    #[test]
    fn lock_and_journal_are_of_blocked_and_scaled_with_it() {
        let mut w = write(1, 100, 0, 0, 80);
        w.journal_ns = 60;
        w.lock_ns = 10;
        let p = WriteParts::of(&w);
        assert_eq!((p.blocked_ns, p.journal_ns, p.lock_ns), (80, 60, 10));
        assert_eq!(
            p.values().iter().sum::<u64>(),
            100,
            "not parts of their own"
        );
        assert_eq!(p.blocked_in(), Some("journal"));
        // Past the call: blocked scaled to 50, its journal with it.
        let mut w = write(1, 100, 100, 0, 100);
        w.journal_ns = 100;
        let p = WriteParts::of(&w);
        assert_eq!((p.blocked_ns, p.journal_ns), (50, 50));
        // A lock of a third of blocked does not name it.
        let mut w = write(1, 100, 0, 0, 90);
        w.lock_ns = 30;
        assert_eq!(WriteParts::of(&w).blocked_in(), None);
    }

    #[test]
    fn measured_parts_past_the_call_are_scaled_into_it() {
        // A tick's error of the run clock can make the parts pass the
        // call by a little: they are scaled down together, never negative.
        let p = WriteParts::of(&write(1, 100, 90, 30, 0));
        assert_eq!(p.total_ns, 100);
        assert!(p.values().iter().sum::<u64>() <= 100);
        assert_eq!(p.throttle_ns, 75);
        assert_eq!(p.stable_ns, 25);
    }

    #[test]
    fn a_line_has_exact_percentiles_sums_and_the_slowest_write() {
        let mut t = WriteTally::new(50);
        for total in 1..=100u64 {
            t.add(&write(7, total, 0, 0, 0));
        }
        t.add(&write(7, 1_000, 900, 0, 0));
        let slow = t.take_slow();
        // 50..=100 and the 1,000.
        assert_eq!(slow.len(), 52);
        assert_eq!(slow.last().map(|s| s.waited_for.as_str()), Some("throttle"));
        assert_eq!(
            slow.last().map(|s| s.throttled_by.clone()),
            Some(vec!["bdi".to_string()])
        );
        let lines = t.take_lines();
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert_eq!(l.writes, 101);
        assert_eq!(l.bytes, 101 * 4096);
        assert_eq!(l.p50_ns, 51);
        assert_eq!(l.p99_ns, 100);
        assert_eq!(l.max_ns, 1_000);
        assert_eq!(l.parts.total_ns, 5_050 + 1_000);
        assert_eq!(l.parts.throttle_ns, 900);
        assert_eq!(l.parts.values().iter().sum::<u64>(), l.parts.total_ns);
        assert_eq!(l.slow, 52);
        assert_eq!(l.slowest.as_ref().map(|s| s.parts.total_ns), Some(1_000));
        assert_eq!(l.throttled_by, vec!["bdi".to_string()]);
        // Every call in each histogram; the 1,000-ns call's 900 ns of
        // throttle in [512, 1023], the other 100 calls' none in bucket 0.
        let count = |b: &[Bucket]| b.iter().map(|b| b.count).sum::<u64>();
        for (name, b) in l.histograms.by_name() {
            assert_eq!(count(b), 101, "{name}");
        }
        assert_eq!(
            l.histograms.throttle,
            vec![
                Bucket {
                    lo: 0,
                    hi: 0,
                    count: 100
                },
                Bucket {
                    lo: 512,
                    hi: 1023,
                    count: 1
                }
            ]
        );
        assert!(t.take_lines().is_empty(), "a fresh start");
    }

    #[test]
    fn slow_writes_past_the_bound_are_counted_not_kept() {
        let mut t = WriteTally::new(0);
        for _ in 0..SLOW_WRITES_KEPT + 10 {
            t.add(&write(1, 5, 0, 0, 0));
        }
        assert_eq!(t.take_slow().len(), SLOW_WRITES_KEPT);
        assert_eq!(t.slow_not_written, 10);
        assert_eq!(t.take_lines()[0].slow, SLOW_WRITES_KEPT as u64 + 10);
    }

    #[test]
    fn many_processes_end_in_one_others_line() {
        let mut t = WriteTally::new(u64::MAX);
        for pid in 0..40u32 {
            t.add(&write(pid, u64::from(pid) + 1, 0, 0, 0));
        }
        let lines = t.take_lines();
        assert_eq!(lines.len(), crate::durability::PROCESSES_KEPT);
        let others = lines.last().expect("an others line");
        assert_eq!(others.comm, "(others)");
        assert_eq!(lines.iter().map(|l| l.writes).sum::<u64>(), 40);
    }
}
