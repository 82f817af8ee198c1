//! On-CPU time of writepages calls: time the calling thread spends
//! switched out is subtracted from the call's wall time.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use writeback_common::{TracepointLayout, fields::sched_switch as ss};

use crate::{
    CURRENT, INFLIGHT, OFFCPU_SINCE,
    read::{field, now_ns},
};

#[unsafe(no_mangle)]
static SCHED_SWITCH_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// `sched:sched_switch`: two hash lookups per switch; the clock is read
/// only when a thread inside a writepages call is involved (a clock read
/// costs more than both lookups on virtualised hosts).
#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let layout = &SCHED_SWITCH_LAYOUT;
    let prev = field(&ctx, layout, ss::PREV_PID) as u32;
    let next = field(&ctx, layout, ss::NEXT_PID) as u32;
    // SAFETY: presence test only.
    let prev_in_call = unsafe { CURRENT.get(&prev) }.is_some();
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
