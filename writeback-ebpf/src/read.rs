//! Reading tracepoint fields through load-time layouts.
use aya_ebpf::{EbpfContext, cty::c_void, helpers::generated, programs::TracePointContext};
use writeback_common::{FieldSpec, KernelMembers, MemberSpec, TracepointLayout};

/// Reads field `index` of `layout` from the raw tracepoint record, sign- or
/// zero-extended to i64. An absent field reads as 0.
///
/// Branch-free on purpose: eight bytes are read and the field's bytes kept
/// with shifts and masks derived from its size. A `match` on the size per
/// field multiplies the paths the verifier walks (5^fields): 6.18 prunes
/// them, 6.1 gives up with E2BIG. Not inlined, for the stack (see
/// [`member`]).
#[inline(never)]
pub fn field(ctx: &TracePointContext, layout: &TracepointLayout, index: usize) -> i64 {
    // SAFETY: the global lives in .rodata; read_volatile stops the compiler
    // from folding the load-time value away.
    let spec: FieldSpec = unsafe { core::ptr::read_volatile(&layout.fields[index]) };
    let raw = read_u64(ctx.as_ptr().cast::<u8>().wrapping_add(spec.offset as usize));
    let size = (spec.size & 15) as u64;
    // 1 for sizes 1..=8, 0 for an absent field (size 0).
    let present = (size + 7) >> 3;
    let shift = ((8 - size.min(8)) * 8) & 63;
    extend(raw, shift, shift, spec.signed as u64, present)
}

/// Eight bytes at `src`, or 0 where they cannot be read. The helper's
/// return value is not looked at: on failure it zero-fills the
/// destination already (bpf_probe_read_kernel in kernel/trace/
/// bpf_trace.c), and a branch on it per field would double the paths the
/// verifier walks each time. Reading past a field at the end of a
/// tracepoint record stays inside the trace buffer; callers mask the
/// extra bytes off. Not inlined: each read's 8-byte buffer then lives in
/// the callee's frame, which keeps the programs that read a dozen members
/// within the 512-byte BPF stack.
#[inline(never)]
pub fn read_u64(src: *const u8) -> u64 {
    let mut v: u64 = 0;
    // SAFETY: the helper validates `src`; `v` is a valid 8-byte buffer.
    unsafe {
        generated::bpf_probe_read_kernel((&raw mut v).cast::<c_void>(), 8, src.cast::<c_void>());
    }
    v
}

/// `(raw << left) >> right`, arithmetic when `signed` is 1, and 0 unless
/// `present` is 1: the whole of a field or bitfield read, without a branch.
#[inline(always)]
pub fn extend(raw: u64, left: u64, right: u64, signed: u64, present: u64) -> i64 {
    let up = raw << (left & 63);
    let arith = ((up as i64) >> (right & 63)) as u64;
    let logical = up >> (right & 63);
    let smask = 0u64.wrapping_sub(signed & 1);
    let value = (arith & smask) | (logical & !smask);
    (value & 0u64.wrapping_sub(present & 1)) as i64
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
/// whole member sign- or zero-extended, or a bitfield's bits, with the
/// shifts userspace derived from BTF (branch-free, see [`field`]). A null
/// base or an unresolved member reads as 0.
#[inline(always)]
pub fn member(base: *const u8, table: &KernelMembers, index: usize) -> i64 {
    member_at(base, &table.members[index])
}

/// [`member`] with its [`MemberSpec`] given directly (`spec` must be in a
/// load-time global).
#[inline(always)]
pub fn member_at(base: *const u8, spec: &MemberSpec) -> i64 {
    // SAFETY: .rodata global, see `field`.
    let spec: MemberSpec = unsafe { core::ptr::read_volatile(spec) };
    let raw = read_u64(base.wrapping_add(spec.offset as usize));
    extend(
        raw,
        spec.left_shift as u64,
        spec.right_shift as u64,
        spec.signed as u64,
        spec.present as u64,
    )
}
