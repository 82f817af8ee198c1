//! Each interval's fsyncs per process (`fsyncs` in interval lines): how
//! many, their latency percentiles, where their time went, and the
//! slowest, with the commit it waited on. What the findings
//! (`journal-bound`, `fsync-entangled`), the dashboard's fsync pane and the
//! exporter read; the fsyncs ended up to [`super::HOLD_NS`] before the
//! interval's end (they are joined that long after they return).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Contributor, SyncRecord};
use crate::DevId;

/// An fsync that wrote at most this many pages is small (64 KiB): what it
/// has to write itself takes one request.
pub const SMALL_PAGES: i64 = 16;

/// A commit is mostly another's when that process's blocks and pages are
/// at least this share of all its contributors', and more than a small
/// fsync's own [`SMALL_PAGES`] (a background thread's block or two, such
/// as `ext4lazyinit` zeroing a new filesystem's inode tables, is not what
/// an fsync waits for).
pub const MOSTLY: f64 = 0.5;

/// Processes kept per interval, largest fsync time first; the rest are
/// added into one `(others)` line (pid 0).
pub const PROCESSES_KEPT: usize = 16;

/// Latencies kept per process and interval for its percentiles; past it
/// the percentiles are those of the first ones (the count and sums stay
/// whole).
const LATENCIES_KEPT: usize = 1 << 14;

/// Contributors kept with a slow fsync.
const CONTRIBUTORS_KEPT: usize = 3;

impl SyncRecord {
    /// The other process its commit mostly carried, when this fsync was
    /// small and spent most of its time waiting on that commit: the
    /// entanglement users never see.
    pub fn entangled_with(&self) -> Option<&Contributor> {
        let commit = self.commit.as_ref()?;
        let all: u64 = commit.contributors.iter().map(|c| c.blocks + c.pages).sum();
        let top = commit.contributors.first()?;
        (self.pages <= SMALL_PAGES
            && top.pid != self.pid
            && top.blocks + top.pages > SMALL_PAGES as u64
            && (top.blocks + top.pages) as f64 >= MOSTLY * all as f64
            && self.journal_ns * 2 >= self.total_ns)
            .then_some(top)
    }
}

/// One process's fsyncs in an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FsyncLine {
    pub pid: u32,
    pub comm: String,
    pub fsyncs: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Sums over its fsyncs: the whole, and each part
    /// (trace-json.md, `sync`).
    pub total_ns: u64,
    pub writeback_ns: u64,
    pub wait_ns: u64,
    pub journal_ns: u64,
    pub flush_ns: u64,
    pub other_ns: u64,
    pub pages: i64,
    /// Its fsyncs that waited on a commit mostly another's
    /// ([`SyncRecord::entangled_with`]).
    pub entangled: u64,
    /// Its slowest entangled fsync, else its slowest.
    pub slowest: Option<SlowFsync>,
}

/// The fsync a line shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlowFsync {
    pub dev: DevId,
    pub ino: u64,
    pub total_ns: u64,
    pub journal_ns: u64,
    pub pages: i64,
    pub entangled: bool,
    pub transaction: Option<u32>,
    pub commit_blocks: Option<u32>,
    /// The commit's largest contributors, at most three.
    pub contributors: Vec<Contributor>,
}

impl SlowFsync {
    fn of(r: &SyncRecord) -> SlowFsync {
        let commit = r.commit.as_ref();
        SlowFsync {
            dev: r.dev,
            ino: r.ino,
            total_ns: r.total_ns,
            journal_ns: r.journal_ns,
            pages: r.pages,
            entangled: r.entangled_with().is_some(),
            transaction: commit.map(|c| c.transaction),
            commit_blocks: commit.and_then(|c| c.blocks),
            contributors: commit
                .map(|c| {
                    c.contributors
                        .iter()
                        .take(CONTRIBUTORS_KEPT)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Which of two to show: an entangled one first, then the slower.
    fn rank(&self) -> (bool, u64) {
        (self.entangled, self.total_ns)
    }
}

#[derive(Clone, Debug, Default)]
struct Acc {
    line: FsyncLine,
    latencies: Vec<u64>,
}

/// The fsyncs of the interval in progress.
#[derive(Clone, Debug, Default)]
pub struct FsyncLines {
    per: BTreeMap<u32, Acc>,
}

impl FsyncLines {
    pub fn add(&mut self, r: &SyncRecord) {
        let acc = self.per.entry(r.pid).or_default();
        let l = &mut acc.line;
        l.pid = r.pid;
        l.comm.clone_from(&r.comm);
        l.fsyncs += 1;
        l.total_ns += r.total_ns;
        l.writeback_ns += r.writeback_ns;
        l.wait_ns += r.wait_ns;
        l.journal_ns += r.journal_ns;
        l.flush_ns += r.flush_ns.unwrap_or(0);
        l.other_ns += r.other_ns;
        l.pages += r.pages;
        l.max_ns = l.max_ns.max(r.total_ns);
        if r.entangled_with().is_some() {
            l.entangled += 1;
        }
        let slow = SlowFsync::of(r);
        if l.slowest.as_ref().is_none_or(|s| slow.rank() > s.rank()) {
            l.slowest = Some(slow);
        }
        if acc.latencies.len() < LATENCIES_KEPT {
            acc.latencies.push(r.total_ns);
        }
    }

    /// The interval's lines, largest fsync time first, and a fresh start.
    pub fn take(&mut self) -> Vec<FsyncLine> {
        let mut lines: Vec<FsyncLine> = std::mem::take(&mut self.per)
            .into_values()
            .map(|mut acc| {
                acc.latencies.sort_unstable();
                acc.line.p50_ns = nearest_rank(&acc.latencies, 0.5);
                acc.line.p99_ns = nearest_rank(&acc.latencies, 0.99);
                acc.line
            })
            .collect();
        lines.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)));
        keep_top(lines, others)
    }
}

/// The exact `q` quantile (0 < q <= 1) of ascending values: the
/// nearest-rank one, the `ceil(q * n)`-th; 0 when there are none.
pub(crate) fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1);
    sorted.get(i).copied().unwrap_or(0)
}

/// Ordered per-process lines kept to [`PROCESSES_KEPT`], the rest folded
/// into one last line by `fold`.
pub(crate) fn keep_top<T>(mut lines: Vec<T>, fold: impl FnOnce(Vec<T>) -> T) -> Vec<T> {
    if lines.len() > PROCESSES_KEPT {
        let rest = lines.split_off(PROCESSES_KEPT - 1);
        lines.push(fold(rest));
    }
    lines
}

/// The processes past [`PROCESSES_KEPT`], added into one line: counts and
/// sums add; of the percentiles only the max stays meaningful, and the
/// p50/p99 given are the largest of theirs.
fn others(rest: Vec<FsyncLine>) -> FsyncLine {
    let mut o = FsyncLine {
        comm: "(others)".into(),
        ..FsyncLine::default()
    };
    for l in rest {
        o.fsyncs += l.fsyncs;
        o.total_ns += l.total_ns;
        o.writeback_ns += l.writeback_ns;
        o.wait_ns += l.wait_ns;
        o.journal_ns += l.journal_ns;
        o.flush_ns += l.flush_ns;
        o.other_ns += l.other_ns;
        o.pages += l.pages;
        o.entangled += l.entangled;
        o.p50_ns = o.p50_ns.max(l.p50_ns);
        o.p99_ns = o.p99_ns.max(l.p99_ns);
        o.max_ns = o.max_ns.max(l.max_ns);
        if let Some(s) = l.slowest
            && o.slowest.as_ref().is_none_or(|x| s.rank() > x.rank())
        {
            o.slowest = Some(s);
        }
    }
    o
}

/// A compare/scenario run's fsyncs on its devices (`kernel.fsyncs` of its
/// JSON document): how many, their time's percentiles (exact), and the
/// mean of each part, in ms, beside the writer's own fsync latencies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FsyncFigures {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub writeback_ms_mean: f64,
    pub wait_ms_mean: f64,
    pub journal_ms_mean: f64,
    pub flush_ms_mean: f64,
    pub other_ms_mean: f64,
    pub entangled: u64,
}

impl FsyncFigures {
    /// `None` without any.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a SyncRecord>) -> Option<FsyncFigures> {
        let records: Vec<&SyncRecord> = records.into_iter().collect();
        if records.is_empty() {
            return None;
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        let n = records.len() as f64;
        let mut totals: Vec<u64> = records.iter().map(|r| r.total_ns).collect();
        totals.sort_unstable();
        let at = |q: f64| {
            let i = ((totals.len() as f64 * q).ceil() as usize).saturating_sub(1);
            ms(totals[i.min(totals.len() - 1)])
        };
        let mean = |f: fn(&SyncRecord) -> u64| records.iter().map(|r| ms(f(r))).sum::<f64>() / n;
        Some(FsyncFigures {
            count: records.len() as u64,
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: totals.last().map_or(0.0, |&t| ms(t)),
            writeback_ms_mean: mean(|r| r.writeback_ns),
            wait_ms_mean: mean(|r| r.wait_ns),
            journal_ms_mean: mean(|r| r.journal_ns),
            flush_ms_mean: mean(|r| r.flush_ns.unwrap_or(0)),
            other_ms_mean: mean(|r| r.other_ns),
            entangled: records
                .iter()
                .filter(|r| r.entangled_with().is_some())
                .count() as u64,
        })
    }
}
