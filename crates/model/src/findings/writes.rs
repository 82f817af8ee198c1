//! The write rule (`--enable writes`): buffered write system calls that
//! take long, named by the part of their time that dominates
//! (`write-stalled`). Over the interval lines' `writes` (model/
//! writes.rs); reasons for the thresholds in docs/findings.md.
use serde_json::json;

use super::{Ctx, Evidence, Verdict, band, round3};
use crate::writes::{PART_NAMES, WriteLine, WriteParts};

pub(crate) const STALLED: &str = "write-stalled";

/// Intervals the rule adds up.
pub(crate) const WINDOW: usize = 3;

/// Writes a process needs in the window for its p99 to mean anything.
pub(crate) const MIN_WRITES: u64 = 3;

/// Banded on the worst process's p99: `info` from 10 ms (bcc's
/// fileslower and ext4slower call a write slow from 10 ms; a buffered
/// write copies into the page cache in microseconds), `warning` from
/// 100 ms (half of `balance_dirty_pages()`'s longest pause, `MAX_PAUSE`
/// of 200 ms in mm/page-writeback.c: the writer is paused more than it
/// runs), `critical` from 1 s (several whole pauses per call).
pub(crate) const INFO_MS: f64 = 10.0;
pub(crate) const WARNING_MS: f64 = 100.0;
pub(crate) const CRITICAL_MS: f64 = 1000.0;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// What to try when `part` dominates (`blocked_in`: what the hooks
/// measured most of `blocked` in).
fn advice(part: &str, throttled_by: &[String], blocked_in: Option<&str>) -> String {
    match (part, blocked_in) {
        ("blocked", Some("journal")) => "the writes wait to start a journal handle \
             (jbd2__journal_start(), fs/jbd2/transaction.c): the running transaction is full \
             or being committed, so a write that moves the file's size or time waits for the \
             commit. Commits that take long are the cause (see journal-bound and \
             fsync-entangled): fewer fsyncs by others on the filesystem, a larger journal \
             (tune2fs -J size=), the journal on a faster device, preallocated files \
             (fallocate) so that appends change less metadata, lazytime"
            .into(),
        ("blocked", Some("lock")) => "the writes wait for a folio lock \
             (__folio_lock(), mm/filemap.c): another thread holds the page they write, \
             writeback submitting it, a reader or a fault on a mapping of it. Write \
             different pages from different threads, and do not rewrite a page the flusher \
             is writing out"
            .into(),
        _ => advice_by_part(part, throttled_by),
    }
}

/// What to try when `part` dominates, whatever blocked was.
fn advice_by_part(part: &str, throttled_by: &[String]) -> String {
    match part {
        "throttle" => format!(
            "the writes sleep in balance_dirty_pages(): the dirty limit of {} paused them \
             (see dirty-throttled for the limit and its figures). The writer dirties pages \
             faster than the device writes them back: write no faster than the device \
             (or spread the writes out), raise the limit that acted (global: \
             vm.dirty_bytes / vm.dirty_ratio; memcg: the cgroup's memory.max or memory.high, \
             whose dirty share is its limit; bdi: /sys/class/bdi/*/max_bytes, max_ratio, \
             strict_limit), or sync in steps (sync_file_range) so that less is dirty at once",
            if throttled_by.is_empty() {
                "a domain".to_string()
            } else {
                throttled_by.join(" and ")
            }
        ),
        "stable" => "the writes wait for pages under writeback: the device requires stable \
             pages (/sys/block/*/queue/stable_writes: checksums, RAID parity, integrity), so \
             a page being written out cannot change until its I/O ends (folio_wait_stable(), \
             mm/page-writeback.c). Rewrite a page once per writeback cycle (buffer the \
             rewrites, append instead of rewriting in place), or let the kernel write it \
             later (a longer dirty_expire_centisecs); where the device does not need stable \
             pages, stable_writes can be 0"
            .into(),
        "reclaim" => "the writes reclaim memory themselves: allocating page cache for them \
             found the memory cgroup (or the machine) at its limit, so they run reclaim \
             before they copy (mm/vmscan.c direct and memcg reclaim). Give the cgroup more \
             room (memory.max, memory.high), keep less in the page cache (posix_fadvise \
             DONTNEED on data written back, O_DIRECT for a stream not read again)"
            .into(),
        "blocked" => "the writes sleep on something no tracepoint names: a folio or inode \
             lock another thread holds (two writers of one file), a journal handle's start \
             waiting for a commit (ext4: see journal-bound), or the run queue (the CPUs are \
             busy). Off-CPU profiles of the writer (offcputime) name the wait"
            .into(),
        _ => "the writes spend their time on the CPU: copying into the page cache and the \
             filesystem's own work (block allocation, the journal). Larger writes amortize \
             the per-call cost; a busy CPU slows them too"
            .into(),
    }
}

/// `write-stalled`: a process's buffered writes are slow, with the part
/// of their time that dominates and what to try for it.
pub(crate) fn write_stalled(ctx: &Ctx<'_>) -> Option<Verdict> {
    if ctx.line().writes.is_empty() {
        return None;
    }
    // Per process over the window: writes, parts, the worst p99 and max.
    let mut per: std::collections::BTreeMap<u32, (&WriteLine, u64, WriteParts, u64, u64)> =
        std::collections::BTreeMap::new();
    for l in ctx.last(WINDOW).flat_map(|l| &l.writes) {
        let e = per
            .entry(l.pid)
            .or_insert((l, 0, WriteParts::default(), 0, 0));
        e.1 += l.writes;
        e.2.add(&l.parts);
        e.3 = e.3.max(l.p99_ns);
        e.4 = e.4.max(l.max_ns);
        if l.max_ns >= e.0.max_ns {
            e.0 = l;
        }
    }
    let (worst, writes, parts, p99, max) = per
        .into_values()
        .filter(|&(_, writes, ..)| writes >= MIN_WRITES)
        .max_by_key(|&(_, _, _, p99, _)| p99)?;
    let severity = band(ms(p99), INFO_MS, WARNING_MS, CRITICAL_MS)?;
    // The part that dominates the slow writes: of the slowest write when
    // there is one (the p99's calls are the slow ones), else of all.
    let judged = worst.slowest.as_ref().map_or(parts, |s| s.parts);
    let (part, part_ns) = judged.dominant();
    let secs: f64 = ctx.last(WINDOW).map(|l| l.interval_s).sum();
    let mut evidence = Evidence::new();
    evidence.insert("pid", json!(worst.pid));
    evidence.insert("comm", json!(worst.comm));
    evidence.insert("writes", json!(writes));
    evidence.insert(
        "writes_per_s",
        round3(writes as f64 / secs.max(f64::MIN_POSITIVE)),
    );
    evidence.insert("p99_ms", round3(ms(p99)));
    evidence.insert("max_ms", round3(ms(max)));
    evidence.insert("part", json!(part));
    evidence.insert(
        "part_share",
        round3(part_ns as f64 / judged.total_ns.max(1) as f64),
    );
    let by_part: serde_json::Map<String, serde_json::Value> = PART_NAMES
        .iter()
        .zip(parts.values())
        .map(|(n, v)| ((*n).to_string(), round3(ms(v))))
        .collect();
    evidence.insert("parts_ms", serde_json::Value::Object(by_part));
    evidence.insert("throttled_by", json!(worst.throttled_by));
    let blocked_in = judged.blocked_in();
    if part == "blocked" {
        evidence.insert("blocked_in", json!(blocked_in));
    }
    if let Some(s) = &worst.slowest {
        evidence.insert("slowest", json!(s));
    }
    evidence.insert("window_s", round3(secs));
    Some(Verdict {
        severity,
        evidence,
        advice: advice(part, &worst.throttled_by, blocked_in),
    })
}
