//! On-CPU time of writepages calls: time the calling thread spends
//! switched out is subtracted from the call's wall time.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use writeback_common::{TracepointLayout, fields::sched_switch as ss};

use crate::{
    CURRENT, INFLIGHT, OFFCPU_SINCE,
    read::{current_tid, field, now_ns},
    writepages::in_call,
};

#[unsafe(no_mangle)]
static SCHED_SWITCH_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// `sched:sched_switch`: runs in `prev`'s context (__schedule() traces
/// before context_switch()), so `prev` is the current thread. Two array
/// lookups per switch (IN_CALL_BITS); hashes and the clock only when a
/// thread inside a writepages call is involved.
#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let prev = current_tid();
    let prev_in_call = in_call(prev);
    let next = field(&ctx, &SCHED_SWITCH_LAYOUT, ss::NEXT_PID) as u32;
    if !prev_in_call && !in_call(next) {
        return 0;
    }
    // SAFETY: value copied out at once.
    let next_since = unsafe { OFFCPU_SINCE.get(&next) }.copied();
    if !prev_in_call && next_since.is_none() {
        return 0;
    }
    let now = now_ns();
    if prev_in_call {
        let _ = OFFCPU_SINCE.insert(&prev, &now, 0);
    }
    let Some(since) = next_since else {
        return 0;
    };
    let _ = OFFCPU_SINCE.remove(&next);
    // SAFETY: as above.
    if let Some(key) = unsafe { CURRENT.get(&next) }.copied()
        && let Some(call) = INFLIGHT.get_ptr_mut(&key)
    {
        // SAFETY: the call's thread is switched out: nobody else writes it.
        unsafe { (*call).offcpu_ns += now.saturating_sub(since) };
    }
    0
}
