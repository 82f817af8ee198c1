//! On-CPU time of writepages calls: time the calling thread spends
//! switched out is subtracted from the call's wall time.
//!
//! The writepages programs read the thread's own scheduler run time at
//! the start and the end of each call ([`RunClock`]); nothing runs on
//! the scheduler's events. The `sched_switch` programs below, which run
//! on every context switch of the machine, are no candidate of the probe
//! plan: they stay for the test that checks the one method against the
//! other (writeback-user/tests/suite/kernel_probes.rs).
use aya_ebpf::{
    helpers::bpf_get_smp_processor_id,
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use writeback_common::{
    RunClock, TaskMembers, TracepointLayout, fields::sched_switch as ss, members as m,
};

use crate::{
    OFFCPU_SINCE,
    in_call::in_call,
    members::KERNEL_MEMBERS,
    read::{Access, Typed, current_tid, field, member, now_ns, raw_arg},
};

/// `task_struct.se` members, from the kernel's BTF.
#[unsafe(no_mangle)]
static TASK_MEMBERS: TaskMembers = TaskMembers::EMPTY;

/// The thread's run clock and the clock ([`now_ns`]) as of one moment, for a
/// call's start or end: its wall time and its time off the CPU must
/// span the same interval. A program can be interrupted between reads
/// (by the tick, whose `update_curr()` moves the run clock) and, on
/// PREEMPT_RT, where tracing programs run with migration disabled only,
/// switched out and in: the time away then counted on one side only,
/// and a CI run gave a 6.12-rt guest's xfs call 0 ns on the CPU.
/// `exec_start` moves at each of those (`update_curr()`,
/// `set_next_entity()` in kernel/sched/fair.c), so it is read first and
/// again last, and the whole is read once more if it moved.
#[inline(always)]
pub(crate) fn run_clock_at<A: Access>() -> (RunClock, u64) {
    let (first, now, moved) = read_run_clock_at::<A>();
    if !moved {
        return (first, now);
    }
    let (second, now, _) = read_run_clock_at::<A>();
    (second, now)
}

/// One reading for [`run_clock_at`], and whether `exec_start` moved
/// across it.
#[inline(always)]
fn read_run_clock_at<A: Access>() -> (RunClock, u64, bool) {
    let task = A::current_task();
    let exec_start = A::scalar(task, &TASK_MEMBERS.exec_start) as u64;
    let sum = A::scalar(task, &TASK_MEMBERS.sum_exec_runtime) as u64;
    let uncounted = uncounted::<A>(task);
    // SAFETY: plain helper call.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let now = now_ns();
    let moved = A::scalar(task, &TASK_MEMBERS.exec_start) as u64 != exec_start;
    (
        RunClock {
            sum,
            exec_start,
            uncounted,
            cpu,
        },
        now,
        moved,
    )
}

/// [`run_clock_at`]'s run clock without the run queue's clocks (`uncounted` 0): two
/// reads where it takes six, for the write spans, which read it at each
/// write's enter and exit; time stolen from the CPU then stays in a
/// segment's on-CPU time (`off_cpu_ns` takes out no steal when both
/// readings have none).
#[inline(always)]
pub(crate) fn task_clock<A: Access>() -> RunClock {
    let task = A::current_task();
    // SAFETY: plain helper call.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    RunClock {
        sum: A::scalar(task, &TASK_MEMBERS.sum_exec_runtime) as u64,
        exec_start: A::scalar(task, &TASK_MEMBERS.exec_start) as u64,
        uncounted: 0,
        cpu,
    }
}

/// `rq.clock - rq.clock_task` of the run queue `task` is on: the time
/// stolen from that CPU (and its IRQ time, where the kernel accounts it
/// apart) since boot, as of the queue's last clock update
/// (`TaskMembers`). 0 when the members are absent: the stolen time then
/// stays in the on-CPU figure.
#[inline(always)]
fn uncounted<A: Access>(task: *const u8) -> u64 {
    let cfs_rq = A::pointer(task, &TASK_MEMBERS.cfs_rq);
    if cfs_rq.is_null() {
        return 0;
    }
    let rq = A::pointer(cfs_rq, &TASK_MEMBERS.rq);
    if rq.is_null() {
        return 0;
    }
    (A::scalar(rq, &TASK_MEMBERS.rq_clock) as u64)
        .wrapping_sub(A::scalar(rq, &TASK_MEMBERS.rq_clock_task) as u64)
}

#[unsafe(no_mangle)]
static SCHED_SWITCH_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// `sched:sched_switch`: runs in `prev`'s context (__schedule() traces
/// before context_switch()), so `prev` is the current thread; `next` comes
/// from the record.
#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let next = field(&ctx, &SCHED_SWITCH_LAYOUT, ss::NEXT_PID) as u32;
    switched(current_tid(), next);
    0
}

/// `tp_btf/sched_switch`: TP_PROTO(bool preempt, struct task_struct *prev,
/// struct task_struct *next, unsigned int prev_state) (include/trace/
/// events/sched.h; `next` is the third argument since before 5.18 too).
/// No trace record is built for a BTF tracepoint, so every context switch
/// of the system costs less than with the classic one.
#[btf_tracepoint(function = "sched_switch")]
pub fn tp_btf_sched_switch(ctx: BtfTracePointContext) -> i32 {
    let next = raw_arg(&ctx, 2) as *const u8;
    switched(
        current_tid(),
        member::<Typed>(next, &KERNEL_MEMBERS, m::TASK_PID) as u32,
    );
    0
}

/// Two array lookups per switch (IN_CALL); hashes and the clock only when
/// a thread inside a writepages call is involved. A thread's
/// `OFFCPU_SINCE` entry holds when it was switched out inside its call
/// (0 while it runs) and the time it spent switched out so far, which
/// the call's end takes: the call's own entry hangs on its task
/// (`CURRENT`), out of reach from here, where only `next`'s id is known.
#[inline(always)]
fn switched(prev: u32, next: u32) {
    let prev_in_call = in_call(prev);
    if !prev_in_call && !in_call(next) {
        return;
    }
    let next_off = OFFCPU_SINCE.get_ptr_mut(&next);
    // SAFETY: a live map value, read at once.
    let next_since = next_off.map_or(0, |o| unsafe { (*o)[0] });
    if !prev_in_call && next_since == 0 {
        return;
    }
    let now = now_ns();
    if prev_in_call {
        match OFFCPU_SINCE.get_ptr_mut(&prev) {
            // SAFETY: `prev`'s entry; only its switches write it.
            Some(o) => unsafe { (*o)[0] = now },
            None => {
                if OFFCPU_SINCE.insert(&prev, &[now, 0], 0).is_err() {
                    crate::bump(writeback_common::stat::MAP_FULL);
                }
            }
        }
    }
    if let Some(o) = next_off
        && next_since != 0
    {
        // SAFETY: `next`'s entry; it is switched out, nobody else writes it.
        unsafe {
            (*o)[1] += now.saturating_sub(next_since);
            (*o)[0] = 0;
        }
    }
}
