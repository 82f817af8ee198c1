//! The summary line: what `trace`, `record` and `doctor` print last,
//! whatever stopped them (docs/trace-json.md).
use serde::Serialize;
use writeback_common::agg;

use crate::{
    Totals,
    interval::{RunTimeLine, is_zero, ratio},
    kernel::{KernelStats, ProgramRunTime},
    plan::ProbeStatus,
};

/// `{"type":"summary", ...}`: the last line, whatever stopped the trace.
#[derive(Debug, Serialize)]
pub struct SummaryLine<'a> {
    pub(crate) r#type: &'static str,
    pub duration_s: f64,
    pub calls: u64,
    pub pages_written: u64,
    pub lost_records: u64,
    pub unmatched_results: u64,
    /// Records the ring buffer delivered that could not be decoded.
    pub(crate) bad_records: u64,
    /// Calls the in-kernel filters dropped.
    pub(crate) filtered: u64,
    /// Calls counted in the figures but not written out one by one because
    /// the call rate was over `--max-event-rate`.
    pub calls_not_written: u64,
    /// Of `calls` and `pages_written`: the ext4 calls the CPU budget's
    /// call sample left out in the kernel (no record), and their pages.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) calls_sampled_out: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) pages_sampled_out: u64,
    pub probes: &'a [ProbeStatus],
    /// How `dirtiers` and `owners` were made: `per_inode` (the default)
    /// or `per_folio` (`--enable dirty_folio`); absent without the hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attribution: Option<crate::plan::AttributionMode>,
    /// Why `owners` have no `pages_dirtied` (the per-process counts could
    /// not be read in this run); absent when they have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages_dirtied_unmeasured: Option<String>,
    /// Where the run's bytes went: its intervals' ledgers added.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger: Option<crate::ledger::LedgerLine>,
    /// Inode dirtyings lost (the per-inode mode's buffer was full).
    pub(crate) lost_dirtyings: u64,
    /// Counts the programs could not keep, a hash map being full
    /// (`KernelStats::map_full`).
    pub(crate) map_full: u64,
    /// Calls whose start found the in-flight map full: their bios, folios
    /// and off-CPU time went uncounted (`KernelStats::inflight_full`).
    pub(crate) inflight_full: u64,
    /// Entries the LRU maps evicted to make room
    /// (`KernelStats::lru_evicted`).
    pub(crate) lru_evicted: u64,
    /// Call starts whose thread's call slot another thread's call held
    /// (`KernelStats::slot_busy`): not a loss, the slower path.
    pub(crate) slot_busy: u64,
    /// BPF run time per program over the whole trace (null figures when
    /// the kernel keeps no BPF statistics).
    pub(crate) run_time: Vec<RunTimeLine>,
}

impl<'a> SummaryLine<'a> {
    /// Adds the calls the kernel's call sample left out over the whole
    /// trace (`agg` of the last snapshot: counted since attach) to the
    /// totals, and says how many they were.
    pub fn add_sampled_out(&mut self, agg: &[u64]) {
        let at = |i: u32| agg.get(i as usize).copied().unwrap_or(0);
        self.calls_sampled_out = at(agg::CALLS_SAMPLED_OUT);
        self.pages_sampled_out = at(agg::PAGES_SAMPLED_OUT);
        self.calls += self.calls_sampled_out;
        self.pages_written += self.pages_sampled_out;
    }

    pub fn new(
        duration_s: f64,
        totals: &Totals,
        kernel: &KernelStats,
        bad_records: u64,
        probes: &'a [ProbeStatus],
        run_times: &[ProgramRunTime],
    ) -> Self {
        SummaryLine {
            r#type: "summary",
            duration_s,
            calls: totals.calls,
            pages_written: totals.pages_written,
            calls_sampled_out: 0,
            pages_sampled_out: 0,
            lost_records: kernel.lost_records,
            unmatched_results: kernel.unmatched_results,
            bad_records,
            filtered: kernel.filtered,
            calls_not_written: 0,
            probes,
            attribution: None,
            pages_dirtied_unmeasured: None,
            ledger: None,
            lost_dirtyings: kernel.lost_dirtyings,
            map_full: kernel.map_full,
            inflight_full: kernel.inflight_full,
            lru_evicted: kernel.lru_evicted,
            slot_busy: kernel.slot_busy,
            run_time: run_times
                .iter()
                .map(|r| RunTimeLine {
                    program: r.program.clone(),
                    run_count: r.run_count,
                    run_time_ns: r.run_time_ns,
                    avg_ns: ratio(r.run_time_ns, r.run_count),
                    recursion_misses: r.recursion_misses,
                })
                .collect(),
        }
    }
}
