//! Empty programs loaded (and for kprobes attached) only to find out what
//! this kernel allows: the probe plan tries fentry, kprobe and tp_btf on
//! each candidate function with these and reports why one was refused.
//! `wbscope probes --cost --on-hooks` attaches `trial_tp_btf` (or, with
//! `--counting`, `trial_tp_btf_count`) to the tracer's busiest events.
use aya_ebpf::{
    helpers::bpf_get_smp_processor_id,
    macros::{btf_tracepoint, fentry, kprobe, map},
    maps::Array,
    programs::{BtfTracePointContext, FEntryContext, ProbeContext},
};

#[fentry]
pub fn trial_fentry(_ctx: FEntryContext) -> u32 {
    0
}

#[kprobe]
pub fn trial_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[btf_tracepoint]
pub fn trial_tp_btf(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// The counting calibration programs' counters: a 64-byte line per CPU,
/// indexed by CPU number, a plain array kmalloc'd in the direct map as
/// the tracer's `DIRTY_SLOT` (userspace sizes it to the possible CPUs).
#[map]
static TRIAL_COUNT: Array<[u64; 8]> = Array::with_max_entries(1, 0);

/// Adds 1 to this CPU's line of `TRIAL_COUNT`, without an atomic: the
/// least a program that counts something does (one line of map memory
/// written), the floor under any aggregating program on its event.
#[inline(always)]
pub(crate) fn count_on_this_cpu() {
    // SAFETY: plain helper call; tracing programs run with migration
    // disabled.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    if let Some(line) = TRIAL_COUNT.get_ptr_mut(cpu) {
        // SAFETY: this CPU's line; the program does not nest on one CPU.
        unsafe { (*line)[0] += 1 };
    }
}

#[btf_tracepoint]
pub fn trial_tp_btf_count(_ctx: BtfTracePointContext) -> i32 {
    count_on_this_cpu();
    0
}
