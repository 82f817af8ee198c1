//! The recorder's CPU budget (`record --cpu-budget PERCENT`): the
//! BPF programs' run time (the kernel's own statistics) and the recorder's
//! CPU time together, as a share of one core, held under the budget by
//! shedding optional work, costliest first, and taking it back when the
//! load falls. Plain arithmetic; the capture loop measures and applies.
//!
//! The ladder, stepped at the end of each interval over the budget by as
//! many steps as halvings would bring the interval's cost under it
//! (⌈log2(cost / budget)⌉, at least one): each step halves what the
//! sampled programs run, so a writer that starts at six times the budget
//! is met in one interval, not three (Run R3, docs/bench-log/recorder.md,
//! climbed one step an interval and spent its first six intervals over, up
//! to 8.73%):
//! 0. with `--enable device_io`, the block programs are shed whole (one
//!    step): they return at once, the devices' lines come from
//!    /proc/diskstats alone, and the ledger's device classes are
//!    unmeasured while shed. First because they run per request and per
//!    bio — under a small random writer about four runs per page written
//!    (docs/bench-log/small-writer.md, Run S1), against one for the
//!    per-folio program — and because what they add has a coarser
//!    source that stays (/proc/diskstats), where sampling the others
//!    turns exact counts into estimates;
//! 1. with `--enable dirty_folio`, the per-folio dirtier program counts
//!    one dirtied folio in 2, 4, … 64 (chosen at random in the kernel, and
//!    counted as that many): the program that runs once per write of a
//!    small writer ([`DIRTY_FOLIO_STEPS`]);
//! 2. then one ext4 writepages call in 2, 4, … 1024 is drawn into the
//!    sample in the kernel ([`CALL_STEPS`]): a call not drawn costs its
//!    start program a random draw and its end program two per-CPU adds
//!    (itself and its pages: the interval lines' `calls` and
//!    `pages_written` stay exact, `calls_sampled_out` says how many had no
//!    record), instead of the in-flight entries, clock reads and record of
//!    a traced call (writeback-ebpf/src/writepages.rs); the calls of the
//!    generic hooks, which the kernel does not sample, are written one in
//!    as many.
//!
//! One step back after [`CALM_INTERVALS`] intervals in a row under half the
//! budget: hysteresis, so that a load near the budget does not make the
//! figures flicker between sampled and exact.
use serde::{Deserialize, Serialize};

/// Steps of per-folio sampling: at most one folio in 2^6 counted.
pub(crate) const DIRTY_FOLIO_STEPS: u32 = 6;
/// Steps of call sampling: at most one call in 2^10 traced.
pub(crate) const CALL_STEPS: u32 = 10;
/// Intervals under half the budget before a step back.
pub(crate) const CALM_INTERVALS: u32 = 3;

/// What one interval cost and what was sampled during it: the interval
/// line's `budget` (docs/trace-json.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetLine {
    /// The budget, % of one core.
    pub budget_pct: f64,
    /// BPF run time plus the recorder's CPU time, % of one core.
    pub cpu_pct: f64,
    /// The BPF run time alone.
    pub bpf_pct: f64,
    /// One dirtied folio in this many was counted (1: all); the per-folio
    /// `dirtiers` and `pages_dirtied` are then estimates (see
    /// [`sampling_error`]).
    pub dirty_folio_1_in: u32,
    /// One call in this many was traced (drawn into the kernel's sample,
    /// or for generic calls written) as a `call` line (1: all).
    pub(crate) calls_1_in: u32,
    /// The block programs (`device_io`) were shed: the interval's devices
    /// are /proc/diskstats's alone and the ledger's classes unmeasured.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub device_io_shed: bool,
    /// Over the budget with every step of the ladder in force: what is
    /// left is what the programs cost at their least per event (a draw,
    /// two adds, an early return: Run R3, docs/bench-log/recorder.md) at
    /// this rate of writeback events, and the recorder's own reading and
    /// writing; no optional work is left to shed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_floor: bool,
}

/// The optional programs attached, whose steps come before the calls'.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sheddable {
    /// The block programs (`--enable device_io`).
    pub device_io: bool,
    /// The per-folio dirtier program (`--enable dirty_folio`).
    pub per_folio: bool,
}

impl Sheddable {
    fn device_steps(self) -> u32 {
        u32::from(self.device_io)
    }

    fn folio_steps(self) -> u32 {
        if self.per_folio { DIRTY_FOLIO_STEPS } else { 0 }
    }
}

/// The budget's state between intervals.
#[derive(Clone, Debug)]
pub struct CpuBudget {
    budget_pct: f64,
    attached: Sheddable,
    level: u32,
    calm: u32,
}

impl CpuBudget {
    pub fn new(budget_pct: f64, attached: Sheddable) -> CpuBudget {
        CpuBudget {
            budget_pct,
            attached,
            level: 0,
            calm: 0,
        }
    }

    fn max_level(&self) -> u32 {
        self.attached.device_steps() + self.attached.folio_steps() + CALL_STEPS
    }

    /// Whether the block programs are shed.
    pub fn device_io_shed(&self) -> bool {
        self.attached.device_io && self.level >= 1
    }

    /// log2 of the per-folio sampling in force.
    pub fn dirty_folio_shift(&self) -> u32 {
        self.level
            .saturating_sub(self.attached.device_steps())
            .min(self.attached.folio_steps())
    }

    /// log2 of the call-record sampling in force.
    pub fn calls_shift(&self) -> u32 {
        self.level
            .saturating_sub(self.attached.device_steps() + self.attached.folio_steps())
    }

    /// Closes an interval of `wall_ns` in which the programs ran `bpf_ns`
    /// and the recorder used `cpu_ns`: the line for it (with the sampling
    /// that was in force), then the step for the next one. `None` for an
    /// interval of no length.
    pub fn interval(&mut self, bpf_ns: u64, cpu_ns: u64, wall_ns: u64) -> Option<BudgetLine> {
        if wall_ns == 0 {
            return None;
        }
        let pct = |ns: u64| ns as f64 * 100.0 / wall_ns as f64;
        let cpu_pct = pct(bpf_ns + cpu_ns);
        let line = BudgetLine {
            budget_pct: self.budget_pct,
            cpu_pct,
            bpf_pct: pct(bpf_ns),
            dirty_folio_1_in: 1 << self.dirty_folio_shift(),
            calls_1_in: 1 << self.calls_shift(),
            device_io_shed: self.device_io_shed(),
            at_floor: self.level == self.max_level() && cpu_pct > self.budget_pct,
        };
        if line.cpu_pct > self.budget_pct {
            let steps = (line.cpu_pct / self.budget_pct).log2().ceil().max(1.0);
            // Bounded by the ladder (and f64 → u32 saturates).
            let steps = (steps as u32).min(self.max_level());
            self.level = (self.level + steps).min(self.max_level());
            self.calm = 0;
        } else if line.cpu_pct < self.budget_pct / 2.0 {
            self.calm += 1;
            if self.calm >= CALM_INTERVALS {
                self.level = self.level.saturating_sub(1);
                self.calm = 0;
            }
        } else {
            self.calm = 0;
        }
        Some(line)
    }
}

/// The 95% half-width, in pages, of an estimate of `pages` made by
/// counting one folio in `one_in` and multiplying by it: each folio is
/// counted with probability p = 1/one_in, so the estimate's variance is
/// n·(1−p)/p for n folios; with one page per folio (what a small writer
/// dirties; large folios make it larger by their size) that is
/// pages·(one_in − 1), and 1.96 standard deviations cover 95%.
pub fn sampling_error(pages: u64, one_in: u32) -> f64 {
    1.96 * (pages as f64 * f64::from(one_in.max(1) - 1)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const FOLIO: Sheddable = Sheddable {
        device_io: false,
        per_folio: true,
    };

    #[test]
    fn over_the_budget_sheds_the_per_folio_program_first_then_calls() {
        let mut b = CpuBudget::new(2.0, FOLIO);
        // 3% of a core: one step an interval.
        for step in 1..=DIRTY_FOLIO_STEPS {
            let line = b.interval(SEC / 50, SEC / 100, SEC).unwrap();
            assert!((line.cpu_pct - 3.0).abs() < 1e-9);
            assert!((line.bpf_pct - 2.0).abs() < 1e-9);
            assert_eq!(line.dirty_folio_1_in, 1 << (step - 1));
            assert_eq!(line.calls_1_in, 1);
        }
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (6, 0));
        b.interval(SEC * 3 / 100, 0, SEC);
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (6, 1));
        for _ in 0..20 {
            b.interval(SEC, 0, SEC);
        }
        assert_eq!(b.calls_shift(), CALL_STEPS, "bounded");
        // Every step in force and still over: said; under it: not.
        assert!(b.interval(SEC, 0, SEC).unwrap().at_floor);
        assert!(!b.interval(SEC / 100, 0, SEC).unwrap().at_floor);
    }

    #[test]
    fn without_the_per_folio_program_calls_are_shed_first() {
        let mut b = CpuBudget::new(1.0, Sheddable::default());
        b.interval(SEC / 80, 0, SEC);
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (0, 1));
    }

    /// Far over the budget, as many steps at once as halvings need:
    /// 12.5% against 2% is 6.25 times, ⌈log2 6.25⌉ = 3 steps.
    #[test]
    fn far_over_the_budget_steps_as_far_as_needed_at_once() {
        let mut b = CpuBudget::new(2.0, FOLIO);
        assert!(!b.interval(SEC / 8, 0, SEC).unwrap().at_floor, "steps left");
        assert_eq!(b.dirty_folio_shift(), 3);
        // Exactly twice the budget: one halving.
        b.interval(SEC / 25, 0, SEC);
        assert_eq!(b.dirty_folio_shift(), 4);
        // A whole core, 50 times the budget: ⌈log2 50⌉ = 6 steps, from
        // level 4 to 10 (the last folio steps, then four of the calls').
        b.interval(SEC, 0, SEC);
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (6, 4));
        // And never past the ladder's end.
        for _ in 0..5 {
            b.interval(SEC, 0, SEC);
        }
        assert_eq!(b.calls_shift(), CALL_STEPS);
    }

    /// One step back after three calm intervals in a row; a busy one
    /// between starts the count again; at or near the budget nothing moves.
    #[test]
    fn takes_work_back_when_calm_with_hysteresis() {
        let mut b = CpuBudget::new(2.0, FOLIO);
        // 3%: one step each.
        b.interval(SEC * 3 / 100, 0, SEC);
        b.interval(SEC * 3 / 100, 0, SEC);
        assert_eq!(b.dirty_folio_shift(), 2);
        let calm = SEC / 200; // 0.5%
        b.interval(calm, 0, SEC);
        b.interval(calm, 0, SEC);
        b.interval(SEC / 60, 0, SEC); // 1.7%: between half and the budget
        b.interval(calm, 0, SEC);
        b.interval(calm, 0, SEC);
        assert_eq!(b.dirty_folio_shift(), 2);
        b.interval(calm, 0, SEC);
        assert_eq!(b.dirty_folio_shift(), 1);
        for _ in 0..3 {
            b.interval(calm, 0, SEC);
        }
        assert_eq!(b.dirty_folio_shift(), 0);
        for _ in 0..9 {
            b.interval(calm, 0, SEC);
        }
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (0, 0));
        assert_eq!(b.interval(0, 0, 0), None);
    }

    /// With the block programs attached they are shed first, whole, and
    /// taken back last; the samplings' steps come after them.
    #[test]
    fn device_io_is_shed_first_and_taken_back_last() {
        let mut b = CpuBudget::new(
            2.0,
            Sheddable {
                device_io: true,
                per_folio: true,
            },
        );
        let line = b.interval(SEC * 3 / 100, 0, SEC).unwrap();
        assert!(!line.device_io_shed, "the line says what was in force");
        assert!(b.device_io_shed());
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (0, 0));
        let line = b.interval(SEC * 3 / 100, 0, SEC).unwrap();
        assert!(line.device_io_shed && line.dirty_folio_1_in == 1);
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (1, 0));
        // The whole ladder: one more step than without device_io.
        for _ in 0..20 {
            b.interval(SEC, 0, SEC);
        }
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (6, CALL_STEPS));
        assert!(b.interval(SEC, 0, SEC).unwrap().at_floor);
        // Calm: the samplings go first, device_io last.
        let calm = SEC / 200;
        for _ in 0..3 * (DIRTY_FOLIO_STEPS + CALL_STEPS) {
            b.interval(calm, 0, SEC);
        }
        assert_eq!((b.dirty_folio_shift(), b.calls_shift()), (0, 0));
        assert!(b.device_io_shed());
        for _ in 0..3 {
            b.interval(calm, 0, SEC);
        }
        assert!(!b.device_io_shed());
        // Without the block programs nothing is said shed.
        let mut b = CpuBudget::new(2.0, FOLIO);
        b.interval(SEC, 0, SEC);
        assert!(!b.device_io_shed());
        assert!(!b.interval(SEC, 0, SEC).unwrap().device_io_shed);
    }

    #[test]
    fn sampling_error_is_zero_unsampled_and_grows_with_the_rate() {
        assert_eq!(sampling_error(65536, 1), 0.0);
        // 65536 pages, one in 4: 1.96 * sqrt(65536 * 3) = 869.07.
        assert!((sampling_error(65536, 4) - 869.07).abs() < 0.01);
        assert!(sampling_error(65536, 64) > sampling_error(65536, 4));
    }
}
