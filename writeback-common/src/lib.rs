//! Types shared by the eBPF programs (`writeback-ebpf`) and userspace
//! (`writeback-user`).
//!
//! Everything here is `#[repr(C)]`, made of fixed-width integers, and free of
//! kernel struct layouts: the kernel side learns where tracepoint fields live
//! from [`TracepointLayout`] globals that userspace fills in at load time from
//! tracefs `format` files (aya has no CO-RE relocations for Rust programs).
#![no_std]

/// Maximum number of fields a [`TracepointLayout`] can describe.
pub const MAX_TP_FIELDS: usize = 16;

/// Where one tracepoint field lives in the raw record, as read from
/// `/sys/kernel/tracing/events/<system>/<event>/format`.
///
/// `size == 0` means "this kernel's tracepoint has no such field": the program
/// then reads 0 and userspace reports the field as absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldSpec {
    pub offset: u16,
    /// 1, 2, 4 or 8 bytes; 0 when the field is missing.
    pub size: u8,
    /// 1 when the format file says `signed:1` (value is sign-extended).
    pub signed: u8,
}

impl FieldSpec {
    pub const ABSENT: FieldSpec = FieldSpec {
        offset: 0,
        size: 0,
        signed: 0,
    };

    pub const fn is_present(&self) -> bool {
        self.size != 0
    }
}

/// Field table for one tracepoint, indexed by the constants in
/// [`writepages_fields`] or [`writepages_result_fields`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointLayout {
    pub fields: [FieldSpec; MAX_TP_FIELDS],
}

impl TracepointLayout {
    pub const EMPTY: TracepointLayout = TracepointLayout {
        fields: [FieldSpec::ABSENT; MAX_TP_FIELDS],
    };
}

impl Default for TracepointLayout {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Logical fields of `ext4:ext4_writepages` (TRACE_EVENT in
/// include/trace/events/ext4.h, fired at the start of `ext4_do_writepages()`
/// in fs/ext4/inode.c on 6.x). Names are the format-file names.
pub mod writepages_fields {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const NR_TO_WRITE: usize = 2;
    pub const PAGES_SKIPPED: usize = 3;
    pub const RANGE_START: usize = 4;
    pub const RANGE_END: usize = 5;
    pub const WRITEBACK_INDEX: usize = 6;
    pub const SYNC_MODE: usize = 7;
    pub const FOR_KUPDATE: usize = 8;
    pub const RANGE_CYCLIC: usize = 9;
    /// Format-file names, in index order.
    pub const NAMES: [&str; 10] = [
        "dev",
        "ino",
        "nr_to_write",
        "pages_skipped",
        "range_start",
        "range_end",
        "writeback_index",
        "sync_mode",
        "for_kupdate",
        "range_cyclic",
    ];
}

/// Logical fields of `ext4:ext4_writepages_result` (include/trace/events/ext4.h;
/// `pages_written` is `nr_to_write - wbc->nr_to_write`, the budget consumed,
/// as passed by `ext4_do_writepages()`).
pub mod writepages_result_fields {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const RET: usize = 2;
    pub const PAGES_WRITTEN: usize = 3;
    pub const PAGES_SKIPPED: usize = 4;
    pub const WRITEBACK_INDEX: usize = 5;
    pub const SYNC_MODE: usize = 6;
    pub const NAMES: [&str; 7] = [
        "dev",
        "ino",
        "ret",
        "pages_written",
        "pages_skipped",
        "writeback_index",
        "sync_mode",
    ];
}

/// Kinds of record sent through the ring buffer; the first `u32` of every
/// record.
pub mod record_kind {
    pub const WRITEPAGES_CALL: u32 = 1;
}

/// Bits of [`WritepagesCall::flags`].
pub mod call_flags {
    /// `wbc->for_kupdate`: periodic (dirty_expire) writeback.
    pub const FOR_KUPDATE: u32 = 1 << 0;
    /// `wbc->range_cyclic`: the call continues from `writeback_index`.
    pub const RANGE_CYCLIC: u32 = 1 << 1;
    /// The start tracepoint of this call was seen. Without it (the probe was
    /// attached mid-call) the start-side fields and duration are zero.
    pub const START_SEEN: u32 = 1 << 2;
}

/// One ext4 writepages call, joined in the kernel from the start and result
/// tracepoints of the same (thread, inode).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritepagesCall {
    /// [`record_kind::WRITEPAGES_CALL`].
    pub kind: u32,
    /// Kernel `dev_t` encoding: major in the top 12 bits, minor in the low
    /// 20 (`MINORBITS` in include/linux/kdev_t.h).
    pub dev: u32,
    pub ino: u64,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at the start tracepoint.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// `wbc->nr_to_write` at the start of the call: the budget asked.
    pub nr_to_write: i64,
    /// Pages written, as the result tracepoint reports it.
    pub pages_written: i64,
    /// `wbc->pages_skipped` at the start and at the end.
    pub pages_skipped_start: i64,
    pub pages_skipped_end: i64,
    pub range_start: i64,
    pub range_end: i64,
    /// `mapping->writeback_index` before and after the call.
    pub writeback_index_before: u64,
    pub writeback_index_after: u64,
    pub tgid: u32,
    pub tid: u32,
    pub ret: i32,
    /// `enum writeback_sync_modes`: 0 = WB_SYNC_NONE, 1 = WB_SYNC_ALL.
    pub sync_mode: u32,
    /// [`call_flags`].
    pub flags: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// Indexes of the per-CPU counters in the `STATS` map.
pub mod stat {
    /// Records dropped because the ring buffer was full.
    pub const LOST_RECORDS: u32 = 0;
    /// Result tracepoints with no matching start (attached mid-call, or the
    /// in-flight map was full).
    pub const UNMATCHED_RESULTS: u32 = 1;
    /// Start tracepoints that could not be stored in the in-flight map.
    pub const INFLIGHT_FULL: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// Key of the in-flight map that joins start and result of one call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InflightKey {
    pub ino: u64,
    pub tid: u32,
    pub dev: u32,
}

/// Start-side state kept while a call is in flight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InflightCall {
    pub start_ns: u64,
    pub nr_to_write: i64,
    pub pages_skipped: i64,
    pub range_start: i64,
    pub range_end: i64,
    pub writeback_index: u64,
    pub flags: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] structs of plain integers with
    // explicit padding fields, so every bit pattern is valid.
    unsafe impl aya::Pod for super::FieldSpec {}
    unsafe impl aya::Pod for super::TracepointLayout {}
    unsafe impl aya::Pod for super::WritepagesCall {}
    unsafe impl aya::Pod for super::InflightKey {}
    unsafe impl aya::Pod for super::InflightCall {}
}
