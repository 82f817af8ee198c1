//! Reading tracepoint fields through load-time layouts.
use aya_ebpf::programs::TracePointContext;
use writeback_common::{FieldSpec, TracepointLayout};

/// Reads field `index` of `layout` from the raw tracepoint record, sign- or
/// zero-extended to i64. An absent field reads as 0.
#[inline(always)]
pub fn field(ctx: &TracePointContext, layout: &TracepointLayout, index: usize) -> i64 {
    // SAFETY: the global lives in .rodata; read_volatile stops the compiler
    // from folding the load-time value away.
    let spec: FieldSpec = unsafe { core::ptr::read_volatile(&layout.fields[index]) };
    let offset = spec.offset as usize;
    let signed = spec.signed != 0;
    // SAFETY: bpf_probe_read_kernel checks the address; a bad offset yields
    // an error, mapped to 0, never a fault.
    unsafe {
        match spec.size {
            1 => ctx
                .read_at::<u8>(offset)
                .map(|v| if signed { v as i8 as i64 } else { v as i64 }),
            2 => ctx
                .read_at::<u16>(offset)
                .map(|v| if signed { v as i16 as i64 } else { v as i64 }),
            4 => ctx
                .read_at::<u32>(offset)
                .map(|v| if signed { v as i32 as i64 } else { v as i64 }),
            8 => ctx.read_at::<u64>(offset).map(|v| v as i64),
            _ => Ok(0),
        }
    }
    .unwrap_or(0)
}

/// The current thread id (`task->pid`).
#[inline(always)]
pub fn current_tid() -> u32 {
    aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32
}

#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: plain helper call.
    unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() }
}
