//! The fsync rules (`--enable durability`): fsyncs whose time
//! goes to journal commits (`journal-bound`), and small fsyncs waiting on
//! a commit that mostly carries another process's data
//! (`fsync-entangled`). Over the interval lines' `fsyncs` (model/
//! durability/line.rs); reasons for the thresholds in docs/findings.md.
use serde_json::json;

use super::{Ctx, Evidence, Verdict, band, round3};
use crate::durability::{FsyncLine, SlowFsync};

pub(crate) const JOURNAL_BOUND: &str = "journal-bound";
pub(crate) const ENTANGLED: &str = "fsync-entangled";

/// Intervals each rule adds up.
pub(crate) const WINDOW: usize = 3;

/// journal-bound: fsyncs needed in the window, and the share of their
/// time spent waiting on commits that makes the journal their cost.
pub(crate) const JOURNAL_MIN_FSYNCS: u64 = 3;
pub(crate) const JOURNAL_SHARE: f64 = 0.5;

/// Both rules band on milliseconds: `info` from 1 ms (a commit per fsync
/// cost that much: the journal acted), `warning` from 10 ms, etcd's bound
/// for a WAL fsync's p99 (past it the commit, not the data, sets the pace
/// of anything that syncs to commit).
pub(crate) const INFO_MS: f64 = 1.0;
pub(crate) const WARNING_MS: f64 = 10.0;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn slow_evidence(s: &SlowFsync) -> serde_json::Value {
    json!({
        "dev": s.dev.to_string(),
        "ino": s.ino,
        "total_ms": round3(ms(s.total_ns)),
        "journal_ms": round3(ms(s.journal_ns)),
        "pages": s.pages,
        "transaction": s.transaction,
        "commit_blocks": s.commit_blocks,
        "contributors": s.contributors,
    })
}

/// `journal-bound`: most of the fsyncs' time is spent waiting on journal
/// commits, banded on the slowest process's p99.
pub(crate) fn journal_bound(ctx: &Ctx<'_>) -> Option<Verdict> {
    if ctx.line().fsyncs.is_empty() {
        return None;
    }
    let lines: Vec<&FsyncLine> = ctx.last(WINDOW).flat_map(|l| &l.fsyncs).collect();
    let fsyncs: u64 = lines.iter().map(|l| l.fsyncs).sum();
    let total: u64 = lines.iter().map(|l| l.total_ns).sum();
    let journal: u64 = lines.iter().map(|l| l.journal_ns).sum();
    if fsyncs < JOURNAL_MIN_FSYNCS || (journal as f64) < JOURNAL_SHARE * total as f64 {
        return None;
    }
    let worst = lines.iter().max_by_key(|l| l.p99_ns)?;
    let severity = band(ms(worst.p99_ns), INFO_MS, WARNING_MS, f64::INFINITY)?;
    let secs: f64 = ctx.last(WINDOW).map(|l| l.interval_s).sum();
    let mut evidence = Evidence::new();
    evidence.insert("fsyncs", json!(fsyncs));
    evidence.insert(
        "fsyncs_per_s",
        round3(fsyncs as f64 / secs.max(f64::MIN_POSITIVE)),
    );
    evidence.insert("journal_share", round3(journal as f64 / total as f64));
    evidence.insert("pid", json!(worst.pid));
    evidence.insert("comm", json!(worst.comm));
    evidence.insert("p99_ms", round3(ms(worst.p99_ns)));
    evidence.insert("max_ms", round3(ms(worst.max_ns)));
    if let Some(s) = &worst.slowest {
        evidence.insert("slowest", slow_evidence(s));
    }
    evidence.insert("window_s", round3(secs));
    Some(Verdict {
        severity,
        evidence,
        advice: "the fsyncs wait mostly for journal commits, not for their own data: each \
            waits for the whole transaction it joined to reach the disk, with the device \
            cache flush that ends it (fs/ext4/fsync.c, jbd2_complete_transaction). Sync \
            less often (one fsync for a batch, syncfs(2)); fdatasync where the inode's times \
            need not be durable (an overwrite of allocated blocks then needs no commit); a \
            journal on a faster device (mke2fs -O journal_dev, tune2fs -J device=). When the \
            commits are slow because another process's writeback shares them, see \
            fsync-entangled"
            .into(),
    })
}

/// `fsync-entangled`: small fsyncs that waited on commits carrying mostly
/// another process's data, banded on the worst one's journal wait.
pub(crate) fn fsync_entangled(ctx: &Ctx<'_>) -> Option<Verdict> {
    if ctx.line().fsyncs.iter().all(|l| l.entangled == 0) {
        return None;
    }
    let lines: Vec<&FsyncLine> = ctx.last(WINDOW).flat_map(|l| &l.fsyncs).collect();
    let worst = lines
        .iter()
        .filter_map(|l| Some((l, l.slowest.as_ref().filter(|s| s.entangled)?)))
        .max_by_key(|(_, s)| s.journal_ns)?;
    let (waiter, slow) = worst;
    let severity = band(ms(slow.journal_ns), INFO_MS, WARNING_MS, f64::INFINITY)?;
    let entangled: u64 = lines
        .iter()
        .filter(|l| l.pid == waiter.pid)
        .map(|l| l.entangled)
        .sum();
    let fsyncs: u64 = lines
        .iter()
        .filter(|l| l.pid == waiter.pid)
        .map(|l| l.fsyncs)
        .sum();
    let other = slow.contributors.first()?;
    let all: u64 = slow.contributors.iter().map(|c| c.blocks + c.pages).sum();
    let mut evidence = Evidence::new();
    evidence.insert("pid", json!(waiter.pid));
    evidence.insert("comm", json!(waiter.comm));
    evidence.insert("entangled_fsyncs", json!(entangled));
    evidence.insert("fsyncs", json!(fsyncs));
    evidence.insert("other_pid", json!(other.pid));
    evidence.insert("other_comm", json!(other.comm));
    evidence.insert("other_pages", json!(other.pages));
    evidence.insert("other_blocks", json!(other.blocks));
    evidence.insert(
        "other_share",
        round3((other.blocks + other.pages) as f64 / all.max(1) as f64),
    );
    evidence.insert("worst", slow_evidence(slow));
    Some(Verdict {
        severity,
        evidence,
        advice: "a small fsync waited for a journal commit that carried another process's \
            data: a commit makes the whole transaction durable, so under data=ordered it \
            writes and waits for every file's newly allocated data, and otherwise the \
            journal's writes queue behind that writeback on the device. Keep the bulk writer \
            and the syncing one on separate filesystems (or devices); cap the bulk writer's \
            dirty pages (its cgroup's memory.high, or the device's \
            /sys/class/bdi/*/max_bytes with strict_limit, Linux 6.2+) so its writeback \
            comes in smaller pieces; have it sync its own data as it goes \
            (sync_file_range) so none is left for another's commit"
            .into(),
    })
}
