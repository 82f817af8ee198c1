//! `write-amplified`: a process whose writes cost the device several
//! times the bytes it wrote, over the interval lines' `ledger` (model/
//! ledger.rs); reasons for the thresholds in docs/findings.md.
use std::collections::BTreeMap;

use serde_json::json;

use super::{Ctx, Evidence, Verdict, band, round3};
use crate::ledger::Stages;

pub(crate) const WRITE_AMPLIFIED: &str = "write-amplified";

/// Intervals the rule adds up.
pub(crate) const WINDOW: usize = 3;
/// Dirtied in the window before a ratio means anything: a few small
/// writes of a quiet process are all overhead and harm nobody.
pub(crate) const MIN_DIRTIED: u64 = 1 << 20;
/// Device bytes per byte written: `info` from 2× (a journaled filesystem
/// doubles small synced writes as a matter of course), `warning` from 4×,
/// the "4-6x" systemd#15292 reports for ext4 on small writes and the
/// lower end of the 2-32× Mohan et al. measured for data operations
/// (arXiv 1707.08514).
pub(crate) const INFO_X: f64 = 2.0;
pub(crate) const WARNING_X: f64 = 4.0;

/// The stage that dominates a process's device bytes, with what to try.
fn dominant(s: &Stages, basis: u64) -> (&'static str, &'static str) {
    let journal = s.journal.unwrap_or(0);
    let metadata = s.metadata.unwrap_or(0);
    // Data beyond what it wrote: whole pages written back for partial
    // writes, or the same page written back again and again.
    let rewritten = s.written_back.saturating_sub(basis);
    let most = journal.max(metadata).max(rewritten);
    if most == journal && journal > 0 {
        (
            "journal",
            "each durable write commits the journal: sync less often or in batches (one fsync \
             for many records); fdatasync where the file's times need not be durable; \
             preallocate (fallocate) so that appends allocate nothing to commit; mount with \
             lazytime; the journal mode (data=ordered is the default; a journal on a separate \
             device with mke2fs -O journal_dev moves these bytes off the data device)",
        )
    } else if most == metadata && metadata > 0 {
        (
            "metadata",
            "the filesystem's own blocks outweigh the data: create, rename and extend files less \
             often (preallocate with fallocate, reuse files), mount with lazytime so that time \
             updates stay in memory, and prefer fdatasync to fsync",
        )
    } else {
        (
            "data",
            "whole pages are written back for partial writes: each sync or writeback of a page \
             rewritten since writes all of it again. Append in whole blocks (4 KiB), gather \
             records before syncing them, and keep a page's rewrites between two writebacks",
        )
    }
}

/// `write-amplified`: the process whose device bytes over its write
/// calls (its dirtied bytes where write calls are not measured) are
/// highest in the window, banded on that ratio.
pub(crate) fn write_amplified(ctx: &Ctx<'_>) -> Option<Verdict> {
    ctx.line().ledger.as_ref()?;
    let mut rows: BTreeMap<(u32, &str), Stages> = BTreeMap::new();
    let mut secs = 0.0;
    for line in ctx.last(WINDOW) {
        secs += line.interval_s;
        let Some(ledger) = &line.ledger else { continue };
        for p in ledger.processes.iter().filter(|p| p.pid != 0) {
            rows.entry((p.pid, p.comm.as_str()))
                .or_default()
                .add(&p.stages);
        }
    }
    let ((pid, comm), stages, basis, ratio) = rows
        .into_iter()
        .filter(|(_, s)| s.dirtied.unwrap_or(0) >= MIN_DIRTIED)
        .filter_map(|(k, s)| {
            let basis = s.write_calls.filter(|&w| w > 0).or(s.dirtied)?;
            let ratio = s.charged() as f64 / basis as f64;
            Some((k, s, basis, ratio))
        })
        .max_by(|a, b| a.3.total_cmp(&b.3))?;
    let severity = band(ratio, INFO_X, WARNING_X, f64::INFINITY)?;
    let (stage, advice) = dominant(&stages, basis);
    let mut evidence = Evidence::new();
    evidence.insert("pid", json!(pid));
    evidence.insert("comm", json!(comm));
    evidence.insert("amplification", round3(ratio));
    evidence.insert(
        "over",
        json!(if stages.write_calls.is_some_and(|w| w > 0) {
            "write_calls"
        } else {
            "dirtied"
        }),
    );
    evidence.insert("stage", json!(stage));
    evidence.insert("write_calls", json!(stages.write_calls));
    evidence.insert("dirtied", json!(stages.dirtied));
    evidence.insert("written_back", json!(stages.written_back));
    evidence.insert("journal", json!(stages.journal));
    evidence.insert("metadata", json!(stages.metadata));
    evidence.insert("window_s", round3(secs));
    Some(Verdict {
        severity,
        evidence,
        advice: advice.to_string(),
    })
}
