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

/// Argument `n` of a BTF-typed program (tp_btf, fentry, fexit: the context
/// is the array of the traced function's u64 arguments). A plain load at a
/// constant offset: the verifier types a pointer argument by the
/// function's BTF, so members are read from it with [`Typed`] loads.
#[inline(always)]
pub(crate) fn raw_arg<C: EbpfContext>(ctx: &C, n: usize) -> u64 {
    // SAFETY: `n` is a constant below the traced function's argument
    // count at every call site; the verifier checks it (btf_ctx_access()).
    unsafe { *ctx.as_ptr().cast::<u64>().add(n) }
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

/// How a program reads kernel structs through a pointer.
///
/// [`Probed`] copies through `bpf_probe_read_kernel`: kprobes see their
/// arguments as plain numbers, which the verifier lets no program
/// dereference. [`Typed`] loads directly: tp_btf and fentry arguments are
/// pointers typed by the kernel's BTF, and the verifier checks each load
/// against the struct's layout (btf_struct_access() in kernel/bpf/btf.c;
/// the JIT guards it against faults, so a null pointer reads as 0). A
/// helper call costs about as much as the rest of a small program here
/// (`wbscope probes --cost`), a load next to nothing.
///
/// The offsets and sizes come from load-time globals in .rodata, which aya
/// freezes after filling: the verifier reads them as constants (loads from
/// a frozen read-only map, since Linux 5.2), so a pointer plus an offset
/// from the table is a pointer at a known offset, and of the `match` on a
/// member's size only one arm is ever walked.
pub trait Access {
    /// An integer member, or a bitfield, extended to i64; 0 if unresolved.
    fn scalar(base: *const u8, spec: &MemberSpec) -> i64;
    /// A pointer member; null if unresolved.
    fn pointer(base: *const u8, spec: &MemberSpec) -> *const u8;
    /// The current thread's `task_struct`, as this access reads it.
    fn current_task() -> *const u8;
    /// The current thread's `comm`, as `bpf_get_current_comm()` gives it
    /// up to its first NUL (what userspace keeps of it).
    fn current_comm() -> [u8; 16];
    /// The id of the current thread's cgroup on the unified hierarchy,
    /// as `bpf_get_current_cgroup_id()` gives it.
    fn current_cgroup_id() -> u64;
}

/// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.kn` and
/// `kernfs_node.id`, all or none, from the kernel's BTF: the path of
/// `bpf_get_current_cgroup_id()` (`cgroup_id(task_dfl_cgroup(current))`,
/// kernel/bpf/helpers.c and include/linux/cgroup.h).
#[unsafe(no_mangle)]
static TASK_CGROUP: [MemberSpec; 4] = [MemberSpec::ABSENT; 4];

/// `task_struct.comm` (`char comm[TASK_COMM_LEN]`, 16 bytes: include/
/// linux/sched.h) as its first 8-byte word, from the kernel's BTF; absent
/// when BTF has no such member, and then the helper is used.
#[unsafe(no_mangle)]
static TASK_COMM: MemberSpec = MemberSpec::ABSENT;

/// Reads through `bpf_probe_read_kernel` (kprobe arguments).
pub struct Probed;

/// Reads with plain loads (tp_btf, fentry and fexit arguments, and the
/// pointers loaded from them).
pub struct Typed;

impl Access for Probed {
    #[inline(always)]
    fn scalar(base: *const u8, spec: &MemberSpec) -> i64 {
        member_at(base, spec)
    }

    #[inline(always)]
    fn pointer(base: *const u8, spec: &MemberSpec) -> *const u8 {
        member_at(base, spec) as u64 as *const u8
    }

    /// A plain number to the verifier, read through the helper.
    #[inline(always)]
    fn current_task() -> *const u8 {
        // SAFETY: plain helper call.
        unsafe { generated::bpf_get_current_task() as *const u8 }
    }

    #[inline(always)]
    fn current_comm() -> [u8; 16] {
        aya_ebpf::helpers::bpf_get_current_comm().unwrap_or_default()
    }

    #[inline(always)]
    fn current_cgroup_id() -> u64 {
        // SAFETY: plain helper call.
        unsafe { aya_ebpf::helpers::bpf_get_current_cgroup_id() }
    }
}

impl Access for Typed {
    #[inline(always)]
    fn scalar(base: *const u8, spec: &MemberSpec) -> i64 {
        let spec = load_spec(spec);
        let at = base.wrapping_add(spec.offset as usize);
        // SAFETY: the verifier checks each load against the BTF of the
        // struct `base` points to; exactly the member's (or bitfield
        // unit's) size is loaded, as it requires.
        let raw = unsafe {
            match spec.size {
                1 => *at as u64,
                2 => *at.cast::<u16>() as u64,
                4 => *at.cast::<u32>() as u64,
                8 => *at.cast::<u64>(),
                _ => 0,
            }
        };
        extend_member(raw, &spec)
    }

    #[inline(always)]
    fn pointer(base: *const u8, spec: &MemberSpec) -> *const u8 {
        let spec = load_spec(spec);
        if spec.present == 0 || spec.size != 8 {
            return core::ptr::null();
        }
        // SAFETY: as in `scalar`. The value is kept as loaded, never
        // shifted or masked: the verifier types it as a pointer into the
        // member's struct and allows no arithmetic on it but adding.
        unsafe { *base.wrapping_add(spec.offset as usize).cast::<*const u8>() }
    }

    /// A pointer the verifier types as `struct task_struct` (helper
    /// `bpf_get_current_task_btf`, since 5.11), so members load directly.
    #[inline(always)]
    fn current_task() -> *const u8 {
        // SAFETY: plain helper call.
        unsafe { generated::bpf_get_current_task_btf() as *const u8 }
    }

    /// Two loads from the task (the verifier allows word loads inside a
    /// member that is an array of integers: btf_struct_walk() in
    /// kernel/bpf/btf.c) instead of the helper, which copies with
    /// `strscpy_pad()` (kernel/bpf/helpers.c): about 80 ns a call here
    /// against 11 ns for `bpf_get_current_pid_tgid()`
    /// (docs/bench-log/fsync-storm.md, step 8). The bytes after the
    /// name's NUL may be an older name's where the kernel renamed the
    /// task without padding (`__set_task_comm()` with `strlcpy()`):
    /// userspace reads up to the NUL.
    #[inline(always)]
    fn current_comm() -> [u8; 16] {
        let spec = load_spec(&TASK_COMM);
        if spec.present == 0 || spec.size != 8 {
            return Probed::current_comm();
        }
        let at = Self::current_task().wrapping_add(spec.offset as usize);
        // SAFETY: as in `scalar`: both words lie inside the member.
        let (lo, hi) = unsafe { (*at.cast::<u64>(), *at.wrapping_add(8).cast::<u64>()) };
        let mut comm = [0u8; 16];
        comm[..8].copy_from_slice(&lo.to_ne_bytes());
        comm[8..].copy_from_slice(&hi.to_ne_bytes());
        comm
    }

    /// Four dependent loads instead of the helper (about 25 ns a call
    /// here, docs/bench-log/fsync-storm.md, step 8). Under the RCU read
    /// lock every tracing program runs in, as the helper's own.
    #[inline(always)]
    fn current_cgroup_id() -> u64 {
        let [cgroups, dfl_cgrp, kn, id] = &TASK_CGROUP;
        // The verifier walks only the branch the frozen table selects: a
        // load through an absent member's null would be refused.
        if load_spec(cgroups).present == 0
            || load_spec(dfl_cgrp).present == 0
            || load_spec(kn).present == 0
            || load_spec(id).present == 0
        {
            return Probed::current_cgroup_id();
        }
        let set = Self::pointer(Self::current_task(), cgroups);
        let cgroup = Self::pointer(set, dfl_cgrp);
        let node = Self::pointer(cgroup, kn);
        Self::scalar(node, id) as u64
    }
}

/// Integer member `index` of `table` in the struct at `base`.
#[inline(always)]
pub fn member<A: Access>(base: *const u8, table: &KernelMembers, index: usize) -> i64 {
    A::scalar(base, &table.members[index])
}

/// Pointer member `index` of `table` in the struct at `base`.
#[inline(always)]
pub fn member_ptr<A: Access>(base: *const u8, table: &KernelMembers, index: usize) -> *const u8 {
    A::pointer(base, &table.members[index])
}

/// Reads the member `spec` describes (a load-time global) from the kernel
/// struct at `base` with bpf_probe_read_kernel: a whole member sign- or
/// zero-extended, or a bitfield's bits, with the shifts userspace derived
/// from BTF (branch-free, see [`field`]). A null base or an unresolved
/// member reads as 0.
#[inline(always)]
pub fn member_at(base: *const u8, spec: &MemberSpec) -> i64 {
    let spec = load_spec(spec);
    extend_member(read_u64(base.wrapping_add(spec.offset as usize)), &spec)
}

/// A member's spec from .rodata in one 8-byte load (`MemberSpec` is
/// 8-byte aligned for it, its fields in this order). A volatile load of
/// the struct itself is one load per field, seven, and programs read
/// several specs per run: the dirty-folio program's code went from 2524
/// to 2317 bytes. Its run time did not measurably change (cold runs are
/// paid in data loads, not instructions: docs/bench-log/tracer-overhead.md,
/// the tracer's programs against an empty program on each of their events). The verifier reads the frozen map's
/// value all the same and prunes the branches on it.
#[inline(always)]
pub fn load_spec(spec: &MemberSpec) -> MemberSpec {
    // SAFETY: .rodata global, see `field`; aligned by MemberSpec's repr.
    let w = unsafe { core::ptr::read_volatile((spec as *const MemberSpec).cast::<u64>()) };
    MemberSpec {
        offset: w as u16,
        left_shift: (w >> 16) as u8,
        right_shift: (w >> 24) as u8,
        signed: (w >> 32) as u8,
        present: (w >> 40) as u8,
        size: (w >> 48) as u8,
        _pad: 0,
    }
}

/// [`extend`] with a member's shifts, signedness and presence.
#[inline(always)]
fn extend_member(raw: u64, spec: &MemberSpec) -> i64 {
    extend(
        raw,
        spec.left_shift as u64,
        spec.right_shift as u64,
        spec.signed as u64,
        spec.present as u64,
    )
}
