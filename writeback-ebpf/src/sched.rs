//! On-CPU time of writepages calls: time the calling thread spends
//! switched out is subtracted from the call's wall time.
use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use writeback_common::{TracepointLayout, fields::sched_switch as ss, members as m};

use crate::{
    CURRENT, INFLIGHT, OFFCPU_SINCE,
    read::{Typed, current_tid, field, member, now_ns},
    writepages::{KERNEL_MEMBERS, in_call, raw_arg},
};

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
/// a thread inside a writepages call is involved.
#[inline(always)]
fn switched(prev: u32, next: u32) {
    let prev_in_call = in_call(prev);
    if !prev_in_call && !in_call(next) {
        return;
    }
    // SAFETY: value copied out at once.
    let next_since = unsafe { OFFCPU_SINCE.get(&next) }.copied();
    if !prev_in_call && next_since.is_none() {
        return;
    }
    let now = now_ns();
    if prev_in_call {
        let _ = OFFCPU_SINCE.insert(&prev, &now, 0);
    }
    let Some(since) = next_since else {
        return;
    };
    let _ = OFFCPU_SINCE.remove(&next);
    // SAFETY: as above.
    if let Some(key) = unsafe { CURRENT.get(&next) }.copied()
        && let Some(call) = INFLIGHT.get_ptr_mut(&key)
    {
        // SAFETY: the call's thread is switched out: nobody else writes it.
        unsafe { (*call).offcpu_ns += now.saturating_sub(since) };
    }
}
