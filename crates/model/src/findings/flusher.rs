//! `small-flusher-budget`: the flusher's inode passes held to the minimum
//! budget. `writeback_chunk_size()` (fs/fs-writeback.c) gives each
//! WB_SYNC_NONE pass `min(wb->avg_write_bandwidth / 2, dirty_limit /
//! DIRTY_SCOPE)` pages, rounded down to a multiple of
//! `MIN_WRITEBACK_PAGES` (4 MiB) after adding one, so the floor is 4 MiB
//! and a pass sits there when the device's bandwidth estimate is under
//! 8 MiB/s — the 3.2 xfs case.
use std::collections::BTreeMap;

use serde_json::json;

use super::{Ctx, Evidence, Verdict, band, round3};
use crate::units::page_size;
use crate::{DevId, interval::InodePassCounts, interval::quantile_bucket};

pub(crate) const SMALL_BUDGET: &str = "small-flusher-budget";

/// `MIN_WRITEBACK_PAGES` in fs/fs-writeback.c: 4096 KiB of pages.
pub(crate) fn min_writeback_pages() -> u64 {
    (4096 * 1024) / page_size()
}

/// Intervals added up, budget passes needed, and the share of the budget
/// the passes must have used for it to be what held them (a pass that
/// runs out of dirty pages first was not held by its budget).
pub(crate) const WINDOW: usize = 3;
pub(crate) const MIN_PASSES: u64 = 16;
/// `info` from four held passes in the window, more than one a second:
/// the floor held passes again and again, not once at the end of a burst.
pub(crate) const MIN_PASSES_INFO: u64 = 4;
pub(crate) const BUDGET_USED: f64 = 0.75;

pub(crate) fn small_flusher_budget(ctx: &Ctx<'_>) -> Option<Verdict> {
    let floor = min_writeback_pages();
    let mut by_dev: BTreeMap<DevId, InodePassCounts> = BTreeMap::new();
    for l in ctx.last(WINDOW) {
        for d in &l.inode_passes_by_device {
            by_dev.entry(d.dev).or_default().merge(&d.counts);
        }
    }
    let now: Vec<DevId> = ctx
        .line()
        .inode_passes_by_device
        .iter()
        .filter(|d| d.counts.budget_passes > 0)
        .map(|d| d.dev)
        .collect();
    // The device with the most budget passes held at the floor.
    let (dev, c, asked_p50) = by_dev
        .into_iter()
        .filter(|(dev, _)| now.contains(dev))
        .filter_map(|(dev, c)| {
            let p50 = quantile_bucket(&c.pages_asked_per_pass, 0.5)?;
            let held = c.budget_passes >= MIN_PASSES_INFO
                && p50[1] < 2 * floor
                && c.budget_pages_written as f64 >= BUDGET_USED * c.budget_pages_asked as f64;
            held.then_some((dev, c, p50))
        })
        .max_by_key(|(_, c, _)| c.budget_passes)?;
    let severity = band(
        c.budget_passes as f64,
        MIN_PASSES_INFO as f64,
        MIN_PASSES as f64,
        f64::INFINITY,
    )?;
    let mut evidence = Evidence::new();
    evidence.insert("device", json!(dev.to_string()));
    evidence.insert("budget_passes", json!(c.budget_passes));
    evidence.insert("pages_asked_per_pass_p50", json!(asked_p50));
    evidence.insert("floor_pages", json!(floor));
    evidence.insert(
        "budget_used",
        round3(c.budget_pages_written as f64 / c.budget_pages_asked.max(1) as f64),
    );
    evidence.insert("pages_per_pass_p50", json!(c.pages_per_pass_quantile(0.5)));
    Some(Verdict {
        severity,
        evidence,
        advice: "the flusher gives each inode a budget of half a second of the device's \
            estimated write bandwidth (writeback_chunk_size(), fs/fs-writeback.c), and the \
            estimate is low, so passes stop at the 4 MiB floor and the flusher hops between \
            inodes (the 3.2 xfs case). No sysctl sets the budget: the estimate \
            (BdiWriteBandwidth in /sys/kernel/debug/bdi/MAJ:MIN/stats) follows what the device \
            completes, and rises with sustained writeback; a writer can write back its own \
            files in larger ranges (sync_file_range) instead of leaving it to the flusher"
            .into(),
    })
}
