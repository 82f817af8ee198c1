//! Empty programs loaded (and for kprobes attached) only to find out what
//! this kernel allows: the probe plan tries fentry, kprobe and tp_btf on
//! each candidate function with these and reports why one was refused.
use aya_ebpf::{
    macros::{btf_tracepoint, fentry, kprobe},
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
