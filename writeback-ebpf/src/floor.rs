//! Calibration programs for `wbscope probes --cost`: attached only there,
//! to `sched:sched_switch`, never while tracing. Their run times are this
//! machine's floor for any program: what dispatching a tracepoint program
//! and keeping its BPF statistics cost before it does anything, and what
//! the things every wbscope program does cost on top (a hash lookup, a
//! clock read, a field read).
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use writeback_common::TracepointLayout;

use crate::{
    OFFCPU_SINCE,
    read::{current_tid, field, now_ns},
    trial::count_on_this_cpu,
};

/// Nothing at all.
#[tracepoint]
pub fn floor_empty(_ctx: TracePointContext) -> u32 {
    0
}

/// One counter added in this CPU's line of an array
/// (`trial::count_on_this_cpu`); `--on-hooks --counting` attaches it to
/// the classic tracepoints among the tracer's events.
#[tracepoint]
pub fn floor_count(_ctx: TracePointContext) -> u32 {
    count_on_this_cpu();
    0
}

/// One lookup in a hash the tracer keys by thread id, as most wbscope
/// programs make first.
#[tracepoint]
pub fn floor_lookup(_ctx: TracePointContext) -> u32 {
    // SAFETY: presence test only.
    unsafe { OFFCPU_SINCE.get(&current_tid()) }.is_some() as u32 & 0
}

/// One tracepoint field read the way every wbscope tracepoint program
/// reads its fields (`read::field`: one bpf_probe_read_kernel each).
#[tracepoint]
pub fn floor_field(ctx: TracePointContext) -> u32 {
    (field(&ctx, &FLOOR_LAYOUT, 0) & 0) as u32
}

/// Layout of the field `floor_field` reads: `next_pid` of sched_switch,
/// filled by userspace like every layout.
#[unsafe(no_mangle)]
static FLOOR_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// One `bpf_ktime_get_ns()`.
#[tracepoint]
pub fn floor_clock(_ctx: TracePointContext) -> u32 {
    // The helper is an opaque call: it is made even though the value only
    // feeds the always-zero return.
    (now_ns() & 0) as u32
}
