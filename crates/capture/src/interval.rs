//! The interval a capture loop is in, and its line: the calls that ended
//! in it, the kernel counters at its start, and what a loop adds to the
//! line beyond them. The session's intervals (`trace`, `record`) and a
//! window's (`compare`, `scenario`: its findings' seconds and its timeline
//! ticks) are closed by this one piece of code.
use std::time::Instant;

use wbscope_model::CallRecord;
use wbscope_model::budget::{BudgetLine, sampling_error};
use wbscope_model::dirtier::OwnerLine;
use wbscope_model::durability::FsyncLine;
use wbscope_model::interval::{CallAggregate, IntervalLine};
use wbscope_model::kernel::KernelSnapshot;
use wbscope_model::ledger::{HandleBlocks, LedgerInputs, LedgerLine, ShareCarry};

/// What a line carries beyond its calls and the kernel's counters; each
/// loop fills what it has attached (a window has no owners or budget).
#[derive(Default)]
pub(crate) struct Decoration<'a> {
    /// Who dirtied the pages written (model/dirtier.rs).
    pub(crate) owners: Vec<OwnerLine>,
    /// The fsyncs joined in the interval (model/durability.rs).
    pub(crate) fsyncs: Vec<FsyncLine>,
    /// The write system calls of the interval (model/writes.rs).
    pub(crate) writes: Vec<wbscope_model::writes::WriteLine>,
    /// The CPU budget's figures, and the sampling in force (model/budget.rs).
    pub(crate) budget: Option<BudgetLine>,
    /// Journal blocks per device and pid, for the ledger's shares; `None`
    /// without the journal's events.
    pub(crate) handles: Option<HandleBlocks>,
    /// Pages charged per (process, filesystem device), for the ledger's
    /// device rows.
    pub(crate) written_on: std::collections::BTreeMap<(u32, wbscope_model::DevId), u64>,
    /// The ledger's journal bytes held over from the interval before
    /// (the session's; a window has none and makes no ledger).
    pub(crate) carry: Option<&'a mut ShareCarry>,
}

/// The interval a loop is in.
pub(crate) struct OpenInterval {
    calls: CallAggregate,
    /// The kernel's counters where the interval began; its line is these
    /// differenced against the counters at its end.
    prev: KernelSnapshot,
    from: Instant,
}

impl OpenInterval {
    pub(crate) fn new(prev: KernelSnapshot, from: Instant) -> OpenInterval {
        OpenInterval {
            calls: CallAggregate::default(),
            prev,
            from,
        }
    }

    pub(crate) fn add(&mut self, call: &CallRecord) {
        self.calls.add(call);
    }

    /// The calls that ended in it so far.
    pub(crate) fn calls(&self) -> &CallAggregate {
        &self.calls
    }

    /// When it began.
    pub(crate) fn from(&self) -> Instant {
        self.from
    }

    /// The kernel's counters where it began.
    pub(crate) fn prev(&self) -> &KernelSnapshot {
        &self.prev
    }

    /// Its line, ended at `now` with the counters `cur`, in a run that
    /// began at `started` (the line's `time_s` counts from there).
    pub(crate) fn line(
        &self,
        started: Instant,
        now: Instant,
        cur: &KernelSnapshot,
        decoration: Decoration<'_>,
    ) -> IntervalLine {
        let mut line = IntervalLine::new(
            now.duration_since(started).as_secs_f64(),
            now.duration_since(self.from).as_secs_f64(),
            &self.calls,
            &self.prev,
            cur,
        );
        line.owners = decoration.owners;
        line.fsyncs = decoration.fsyncs;
        line.writes = decoration.writes;
        if let Some(carry) = decoration.carry {
            line.ledger = LedgerLine::of(
                &LedgerInputs {
                    prev: &self.prev,
                    cur,
                    owners: &line.owners,
                    handles: decoration.handles.as_ref(),
                    written_on: &decoration.written_on,
                    page_size: wbscope_model::units::page_size(),
                    interval_s: line.interval_s,
                    device_io_shed: decoration.budget.as_ref().is_some_and(|b| b.device_io_shed),
                },
                carry,
            );
        }
        line.budget = decoration.budget;
        state_sampling_error(&mut line);
        line
    }

    /// Ends it as [`OpenInterval::line`] does, and opens the next one from
    /// `now` and `cur`.
    pub(crate) fn close(
        &mut self,
        started: Instant,
        now: Instant,
        cur: KernelSnapshot,
        decoration: Decoration<'_>,
    ) -> IntervalLine {
        let line = self.line(started, now, &cur, decoration);
        *self = OpenInterval::new(cur, now);
        line
    }
}

/// Each owner's `pages_dirtied_error` when the interval's per-folio counts
/// were sampled (the budget says one folio in how many was counted).
fn state_sampling_error(line: &mut IntervalLine) {
    let Some(one_in) = line.budget.as_ref().map(|b| b.dirty_folio_1_in) else {
        return;
    };
    if one_in <= 1 {
        return;
    }
    for o in &mut line.owners {
        o.pages_dirtied_error = Some(sampling_error(o.pages_dirtied, one_in).ceil() as u64);
    }
}
