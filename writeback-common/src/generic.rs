//! The tracepoint-derived writepages calls of filesystems without
//! per-call tracepoints (xfs, btrfs, ...): the record, its boundaries and
//! the folio members its programs read.
use crate::MemberSpec;

/// Kind of the tracepoint-derived per-call record ([`GenericCall`]).
pub const GENERIC_CALL_KIND: u32 = 2;

/// Buckets of [`GenericCall::folio_hist`]: log2 of pages per folio, by
/// [`crate::log2_bucket`]; bucket 11 holds 1024 pages (4 MiB folios) and up.
pub const FOLIO_HIST_BUCKETS: usize = 12;

/// How a [`GenericCall`] was closed. Only the function hooks see where a
/// call really ends; every other boundary is derived (docs/probes.md).
pub mod boundary {
    /// The call's own end hook (ext4's writepages_result, fexit, kretprobe).
    pub const HOOK: u32 = 0;
    /// The inode pass that made the call ended (`writeback_single_inode`
    /// on the same thread).
    pub const PASS_END: u32 = 1;
    /// The thread's next folio belonged to another call (another inode,
    /// another `wbc`, another range, or a budget reset).
    pub const NEXT_CALL: u32 = 2;
    /// No folio for a while and nothing closed it: userspace closed it.
    pub const IDLE: u32 = 3;
    /// Still open when the tracer stopped.
    pub const DRAIN: u32 = 4;
}

/// Bits of [`GenericCall::flags`] (the first four as in [`crate::call_flags`]).
pub mod generic_flags {
    pub const FOR_KUPDATE: u32 = 1 << 0;
    pub const RANGE_CYCLIC: u32 = 1 << 1;
    pub const FOR_BACKGROUND: u32 = 1 << 3;
    /// The call's `wbc` was seen: budget, range and sync mode are known.
    pub const WBC_SEEN: u32 = 1 << 8;
    /// `wbc->nr_to_write` was read at the end of the inode pass
    /// (`nr_left` is meaningful).
    pub const FINAL_BUDGET: u32 = 1 << 9;
    /// Opened and closed by a function hook on `do_writepages()` (fentry/
    /// fexit or kprobe/kretprobe): start, end and `ret` are the call's own;
    /// pages are the budget consumed, not counted folio by folio.
    pub const FUNCTION_HOOK: u32 = 1 << 10;
    /// The thread's run clock was read when the call opened
    /// (`start_cpu`, `run_start`, `exec_start`).
    pub const RUN_CLOCK: u32 = 1 << 11;
    /// Closed on its own thread at a known end (the function exit or the
    /// inode pass end) with the run clock read again: `offcpu_ns` holds.
    pub const OFF_CPU: u32 = 1 << 12;
}

/// What the tracepoint-derived writepages path reads of `struct folio`
/// (include/linux/mm_types.h), from the kernel's BTF: whether the folio
/// is large (`PG_head` in its flags) and then how many pages it has.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FolioMembers {
    /// `folio.flags` (`flags.f` since memdesc_flags_t, 6.18).
    pub flags: MemberSpec,
    /// `folio._nr_pages` (64-bit kernels, 6.10+): pages of a large folio.
    pub nr_pages: MemberSpec,
    /// `folio.index`: page index in the file.
    pub index: MemberSpec,
    /// Bit number of `PG_head` (`enum pageflags`); 64 when unknown (every
    /// folio then counts as one page).
    pub head_bit: u32,
    /// log2 of the page size, for folio sizes given in bytes.
    pub page_shift: u32,
}

impl FolioMembers {
    pub const EMPTY: FolioMembers = FolioMembers {
        flags: MemberSpec::ABSENT,
        nr_pages: MemberSpec::ABSENT,
        index: MemberSpec::ABSENT,
        head_bit: 64,
        page_shift: 12,
    };
}

/// One writepages call of any filesystem, from a function hook on
/// `do_writepages()` or put together from its per-folio tracepoints
/// (`wbc_writepage` + `iomap_writeback_folio`, btrfs'
/// `extent_writepage`): the in-flight state of a thread's call (map
/// `GENERIC`, keyed by thread id) and, once closed, the ring-buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenericCall {
    /// [`GENERIC_CALL_KIND`].
    pub kind: u32,
    /// Kernel `dev_t` of the inode's filesystem (`inode->i_sb->s_dev`).
    pub dev: u32,
    pub ino: u64,
    /// Address of the call's `struct writeback_control` (identity only).
    pub wbc: u64,
    /// `bpf_ktime_get_ns()` at the first folio, the last folio, and the
    /// pass end (0 unless closed there).
    pub start_ns: u64,
    pub last_ns: u64,
    pub end_ns: u64,
    pub cgroup_id: u64,
    /// `wbc->nr_to_write` at the first folio: the budget asked.
    pub nr_to_write: i64,
    /// `wbc->nr_to_write` at the last folio, before its own decrement.
    pub nr_last: i64,
    /// `wbc->nr_to_write` at the pass end ([`generic_flags::FINAL_BUDGET`]).
    pub nr_left: i64,
    pub range_start: i64,
    pub range_end: i64,
    /// `mapping->writeback_index` at the first folio and at the pass end.
    pub writeback_index_before: u64,
    pub writeback_index_after: u64,
    /// Byte position of the first folio, and the end of the last one.
    pub first_pos: i64,
    pub last_end: i64,
    /// Pages of the folios written (each folio's own size).
    pub pages: u64,
    pub tgid: u32,
    pub tid: u32,
    pub sync_mode: u32,
    /// [`generic_flags`].
    pub flags: u32,
    /// [`crate::cause`].
    pub cause: u32,
    /// `enum wb_reason` + 1 of the flusher work, 0 outside it.
    pub work_reason: u32,
    pub folios: u32,
    /// [`boundary`].
    pub boundary: u32,
    /// Folios by log2 of their pages ([`FOLIO_HIST_BUCKETS`]).
    pub folio_hist: [u32; FOLIO_HIST_BUCKETS],
    pub comm: [u8; 16],
    /// `do_writepages()`'s return value, where a function-exit hook saw
    /// it ([`generic_flags::FUNCTION_HOOK`]); 0 otherwise.
    pub ret: i32,
    /// With [`generic_flags::RUN_CLOCK`]: the CPU the call started on and
    /// the thread's `se.sum_exec_runtime` and `se.exec_start` then
    /// (`cpu_time::TASK_RUNTIME`, as for ext4's calls), and its run
    /// queue's `clock - clock_task` (`TaskMembers`).
    pub start_cpu: u32,
    pub run_start: u64,
    pub exec_start: u64,
    pub uncounted_start: u64,
    /// With [`generic_flags::OFF_CPU`]: time the thread spent switched out
    /// between `start_ns` and `end_ns`.
    pub offcpu_ns: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of plain integers; every bit pattern is
    // valid.
    unsafe impl aya::Pod for super::FolioMembers {}
    unsafe impl aya::Pod for super::GenericCall {}
}
