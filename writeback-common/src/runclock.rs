//! The arithmetic of a call's on-CPU time from the thread's run clock
//! read at its start and end (`writeback-ebpf/src/sched.rs` reads the
//! clocks; see [`crate::TaskMembers`] for what they are). Kept here, with
//! no kernel access, so that host tests pin every branch.

/// The thread's run clock as read at one moment.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunClock {
    /// `se.sum_exec_runtime`: run time as of the last `update_curr()`.
    pub sum: u64,
    /// `se.exec_start`: the run queue's `clock_task` at that update.
    pub exec_start: u64,
    /// `rq.clock - rq.clock_task` of the thread's run queue: time stolen
    /// from the CPU (and IRQ time where accounted apart) since boot, as
    /// of the queue's last clock update; 0 where unreadable.
    pub uncounted: u64,
    /// The CPU the thread was on.
    pub cpu: u32,
}

/// Nanoseconds of the `wall` ns between `start` and `end` that the thread
/// spent off the CPU.
///
/// On the CPU the call started on, it is the advance of `exec_start`
/// minus that of `sum_exec_runtime`: exact to the scheduler's clock,
/// however long ago it last updated them, and whatever CPUs the thread ran
/// on in between (each CPU's part cancels). That clock leaves out the time
/// stolen from the CPU, which the wall time holds: its growth over the
/// call (`uncounted`) is off-CPU time too, as the thread did not run.
///
/// The run queue accounts steal at its clock updates, so time stolen just
/// before the call can be accounted inside it. Such steal is known to be
/// (at least partly) from before the call when it covers all of the
/// call's on-CPU time: the call ran code, so not all of it was stolen.
/// It is then not taken out: the figure keeps the run time accounted over
/// the call where there is one, else all the on-CPU time (no update of
/// the thread's clocks in the call means it never left the CPU). CI saw
/// the other choice give a 6.12-rt guest's short xfs call 0 ns on the CPU.
/// With steal taken out, the on-CPU time is never less than the run time
/// accounted over the call (nor more than the figure without the steal).
///
/// Ending on another CPU, the two `exec_start`s are of two run queues'
/// `clock_task`, which differ by each CPU's steal (and IRQ) time since
/// boot (`update_rq_clock_task()` in kernel/sched/core.c): on-CPU time is
/// then the advance of `sum_exec_runtime` alone, short by the run since
/// the last update at the end and long by that at the start, so within
/// the tick, which calls `update_curr()` on a running thread
/// (`task_tick_fair()`).
#[inline(always)]
pub const fn off_cpu_ns(start: &RunClock, end: &RunClock, wall: u64) -> u64 {
    let ran = end.sum.wrapping_sub(start.sum);
    let on_cpu = if end.cpu == start.cpu {
        let advance = end.exec_start.wrapping_sub(start.exec_start) as i64;
        let off = advance.wrapping_sub(ran as i64);
        let off = if off < 0 { 0 } else { off as u64 };
        // Off for the whole call is impossible on one clock for a call
        // that ran code: the run queue's clock (sched_clock) and the wall
        // clock (ktime) disagree, as under qemu's TCG, where a 6.12-rt
        // guest's 106 µs xfs call came out 0 ns on the CPU. Only the
        // scheduler's own accounting is left then: the run time over the
        // call, or, with none, the whole call, as when nothing moved.
        let with_steal = if off < wall {
            wall - off
        } else if ran == 0 || ran > wall {
            wall
        } else {
            ran
        };
        let stolen = end.uncounted.wrapping_sub(start.uncounted);
        if stolen > wall {
            with_steal
        } else {
            let without = with_steal.saturating_sub(stolen);
            let floor = if ran < with_steal { ran } else { with_steal };
            match if without > floor { without } else { floor } {
                0 => with_steal,
                on => on,
            }
        }
    } else {
        ran
    };
    wall.saturating_sub(on_cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(sum: u64, exec_start: u64, uncounted: u64, cpu: u32) -> RunClock {
        RunClock {
            sum,
            exec_start,
            uncounted,
            cpu,
        }
    }

    #[test]
    fn a_call_that_never_left_the_cpu_is_off_it_for_no_time() {
        // No update of the clocks in 5 µs: nothing advanced.
        let s = clock(100, 1_000, 7, 0);
        assert_eq!(off_cpu_ns(&s, &s, 5_000), 0);
    }

    #[test]
    fn a_sleep_in_the_call_is_off_cpu() {
        // Ran 3 µs, exec_start moved 10 µs: 7 µs asleep.
        let s = clock(100, 1_000, 0, 0);
        let e = clock(3_100, 11_000, 0, 0);
        assert_eq!(off_cpu_ns(&s, &e, 12_000), 7_000);
    }

    #[test]
    fn steal_in_the_call_is_off_cpu() {
        let s = clock(100, 1_000, 50, 0);
        let e = clock(3_100, 11_000, 2_050, 0);
        // 12 µs wall, 7 µs asleep, 2 µs stolen: 3 µs on the CPU.
        assert_eq!(off_cpu_ns(&s, &e, 12_000), 9_000);
    }

    #[test]
    fn steal_from_before_the_call_keeps_the_accounted_run_time() {
        // The clock update inside the call accounted 4.5 µs of steal, of
        // 5 µs on the CPU; only 1 µs of run time accounted.
        let s = clock(100, 1_000, 0, 0);
        let e = clock(1_100, 2_000, 4_500, 0);
        assert_eq!(off_cpu_ns(&s, &e, 5_000), 5_000 - 1_000);
    }

    #[test]
    fn steal_covering_a_whole_short_call_does_not_make_it_zero() {
        // The 6.12-rt case: no update of the thread's clocks in a 9 µs
        // call, a run-queue clock update in it accounting 9 µs of steal
        // from before the call. The call ran: it keeps its 9 µs.
        let s = clock(100, 1_000, 10, 0);
        let e = clock(100, 1_000, 9_010, 0);
        assert_eq!(off_cpu_ns(&s, &e, 9_000), 0);
        // More than the call's on-CPU time, less than its wall time.
        let e = clock(1_100, 4_000, 8_010, 0);
        assert_eq!(off_cpu_ns(&s, &e, 9_000), 9_000 - 1_000);
    }

    #[test]
    fn steal_larger_than_the_wall_time_is_not_the_calls() {
        let s = clock(100, 1_000, 0, 0);
        let e = clock(100, 1_000, 50_000, 0);
        assert_eq!(off_cpu_ns(&s, &e, 9_000), 0);
    }

    #[test]
    fn a_run_queue_clock_ahead_of_the_wall_clock_keeps_the_run_time() {
        // exec_start moved 200 µs over a 106 µs call: the two clocks
        // disagree. The 4 µs of run time accounted is the on-CPU time.
        let s = clock(100, 1_000, 0, 0);
        let e = clock(4_100, 201_000, 0, 0);
        assert_eq!(off_cpu_ns(&s, &e, 106_000), 106_000 - 4_000);
        // With no run time accounted, the call never left the CPU as far
        // as the scheduler says.
        let e = clock(100, 201_000, 0, 0);
        assert_eq!(off_cpu_ns(&s, &e, 106_000), 0);
        // Nor is more run time than the wall time taken.
        let e = clock(300_100, 901_000, 0, 0);
        assert_eq!(off_cpu_ns(&s, &e, 106_000), 0);
    }

    #[test]
    fn on_another_cpu_the_run_time_alone_counts() {
        let s = clock(100, 1_000, 0, 0);
        let e = clock(4_100, 900_000, 123, 1);
        assert_eq!(off_cpu_ns(&s, &e, 10_000), 6_000);
    }

    #[test]
    fn the_on_cpu_time_is_never_above_the_wall_time_nor_under_zero() {
        let s = clock(u64::MAX - 5, u64::MAX - 10, 0, 0);
        let e = clock(50_000, 10, 0, 0);
        let off = off_cpu_ns(&s, &e, 1_000);
        assert!(off <= 1_000);
    }
}
