//! Reading tracepoint fields through load-time layouts.
use aya_ebpf::{helpers::bpf_probe_read_kernel, programs::TracePointContext};
use writeback_common::{FieldSpec, KernelMembers, MemberSpec, TracepointLayout};

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

/// Reads member `index` of `table` from the kernel struct at `base`: a
/// whole member sign- or zero-extended, or a bitfield's bits. A null base
/// or an unresolved member reads as 0.
#[inline(always)]
pub fn member(base: *const u8, table: &KernelMembers, index: usize) -> i64 {
    // SAFETY: .rodata global, see `field`.
    let spec: MemberSpec = unsafe { core::ptr::read_volatile(&table.members[index]) };
    if base.is_null() {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel validates the address; an error reads
    // as 0.
    let raw: u64 = unsafe {
        let p = base.wrapping_add(spec.offset as usize);
        match spec.size {
            1 => bpf_probe_read_kernel(p.cast::<u8>()).map(u64::from),
            2 => bpf_probe_read_kernel(p.cast::<u16>()).map(u64::from),
            4 => bpf_probe_read_kernel(p.cast::<u32>()).map(u64::from),
            8 => bpf_probe_read_kernel(p.cast::<u64>()),
            _ => Ok(0),
        }
    }
    .unwrap_or(0);
    if spec.bit_size != 0 {
        let bits = spec.bit_size as u32;
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        return ((raw >> (spec.bit_offset as u32 & 63)) & mask) as i64;
    }
    if spec.signed == 0 {
        return raw as i64;
    }
    match spec.size {
        1 => raw as u8 as i8 as i64,
        2 => raw as u16 as i16 as i64,
        4 => raw as u32 as i32 as i64,
        _ => raw as i64,
    }
}
