//! Types shared by the eBPF programs (`writeback-ebpf`) and userspace
//! (`writeback-user`).
//!
//! Everything here is `#[repr(C)]`, made of fixed-width integers, and free of
//! kernel struct layouts: the kernel side learns where tracepoint fields live
//! from [`TracepointLayout`] globals that userspace fills in at load time from
//! tracefs `format` files (aya has no CO-RE relocations for Rust programs).
#![no_std]

pub mod fields;

/// The one log2 bucket rule of every histogram, kernel and userspace
/// alike: bucket 0 holds 0, bucket k (k >= 1) holds [2^(k-1), 2^k), and
/// values past bucket `max` count in `max`. The eBPF programs call it on
/// their hot paths (it inlines to a count-leading-zeros and a compare).
#[inline(always)]
pub const fn log2_bucket(value: u64, max: u32) -> u32 {
    let b = u64::BITS - value.leading_zeros();
    if b > max { max } else { b }
}

/// The values `[lo, hi]` bucket `k` of [`log2_bucket`] holds (bucket 64,
/// the last, ends at `u64::MAX`).
pub const fn log2_bucket_bounds(k: u32) -> (u64, u64) {
    match k {
        0 => (0, 0),
        64.. => (1 << 63, u64::MAX),
        _ => (1 << (k - 1), (1u64 << k) - 1),
    }
}

/// Maximum number of fields a [`TracepointLayout`] can describe.
pub const MAX_TP_FIELDS: usize = 16;

/// Slots of the call-slot array (writeback-ebpf writepages.rs `SLOTS`): a
/// power of two, a thread's slot chosen by the low bits of its id. 768
/// KiB at 192 bytes a slot; threads in calls at once collide in pairs
/// about n² / 8,192 times (n threads), and a collision costs the lookup
/// the slot saves.
pub const CALL_SLOTS: u32 = 4096;

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

/// Field table for one tracepoint, indexed by the constants of its module
/// in [`fields`].
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

/// Where one kernel struct member lives, resolved from the kernel's BTF
/// by userspace, for the programs that read structs through pointers
/// (tp_btf, fentry, kprobe). The program reads the `size`-byte unit at
/// `offset` (a kprobe: 8 bytes there, through bpf_probe_read_kernel) and
/// keeps `(raw << left_shift) >> right_shift` (arithmetic when `signed`):
/// the same two shifts serve whole members and bitfields, without a branch.
/// Aligned to 8 bytes so that a program reads it in one load and takes
/// the fields apart in this order (`load_spec`, writeback-ebpf/src/read.rs).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberSpec {
    pub offset: u16,
    pub left_shift: u8,
    pub right_shift: u8,
    /// 1 to sign-extend.
    pub signed: u8,
    /// 0 when unresolved: the member reads as 0.
    pub present: u8,
    /// Bytes of the member, or of the naturally aligned unit holding a
    /// bitfield: 1, 2, 4 or 8. BTF-typed pointers are read with a load of
    /// exactly this size, the only kind the verifier allows on them
    /// (btf_struct_walk() in kernel/bpf/btf.c).
    pub size: u8,
    pub _pad: u8,
}

impl MemberSpec {
    /// Unresolved: reads as 0.
    pub const ABSENT: MemberSpec = MemberSpec {
        offset: 0,
        left_shift: 0,
        right_shift: 0,
        signed: 0,
        present: 0,
        size: 0,
        _pad: 0,
    };

    /// A member `size` bytes wide at `offset`, or a bitfield of
    /// `bit_size` bits at `bit_offset` inside the `size`-byte unit there
    /// (little-endian).
    pub const fn new(offset: u16, size: u8, bit_offset: u8, bit_size: u8, signed: bool) -> Self {
        let (left, right) = if bit_size == 0 {
            let s = 64 - 8 * size;
            (s, s)
        } else {
            (64 - bit_offset - bit_size, 64 - bit_size)
        };
        MemberSpec {
            offset,
            left_shift: left,
            right_shift: right,
            signed: signed as u8,
            present: 1,
            size,
            _pad: 0,
        }
    }
}

/// Member table of the BTF-typed programs, indexed by [`members`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelMembers {
    pub members: [MemberSpec; 16],
}

/// What the function-hook scan programs read of ext4's `struct
/// mpage_da_data` (fs/ext4/inode.c), the argument of
/// `mpage_prepare_extent_to_map()`: where a scan pass starts (at entry) and
/// where it stopped (at return). The struct is ext4's own, so userspace
/// resolves it from the ext4 module's split BTF when ext4 is a module.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanMembers {
    /// `first_page` (page index, before 6.16) or `start_pos` (bytes).
    pub start: MemberSpec,
    /// `next_page` (page index) or `next_pos` (bytes).
    pub next: MemberSpec,
    /// Left shift turning the members' unit into bytes: the page shift for
    /// page indices, 0 for byte positions.
    pub pos_shift: u32,
    pub _pad: u32,
}

impl ScanMembers {
    pub const EMPTY: ScanMembers = ScanMembers {
        start: MemberSpec::ABSENT,
        next: MemberSpec::ABSENT,
        pos_shift: 0,
        _pad: 0,
    };

    /// `(start, next, in_pages)` member names of `struct mpage_da_data`,
    /// newest layout first: 6.16 made ext4's writeback folio-sized and
    /// moved the cursor to byte positions (`start_pos`/`next_pos`, the
    /// same figures `ext4_da_write_folios_start/end` print); earlier
    /// kernels keep page indices.
    pub const LAYOUTS: [(&'static str, &'static str, bool); 2] = [
        ("start_pos", "next_pos", false),
        ("first_page", "next_page", true),
    ];
}

/// What the writepages programs read of the calling thread, for the
/// call's on-CPU time without a hook on the scheduler: its run time as
/// the scheduler last accounted it, and when that was. Resolved from the
/// kernel's BTF apart from [`KernelMembers`], so that the classic
/// tracepoint programs (which read these through `bpf_probe_read_kernel`)
/// have them whichever other tables resolved.
///
/// `update_curr()` (kernel/sched/fair.c; `update_curr_common()` for the
/// other classes) adds `now - se.exec_start` to `se.sum_exec_runtime` and
/// sets `se.exec_start = now`, in the run queue's `clock_task`; switching
/// a task in sets `exec_start` to that clock and adds nothing
/// (`set_next_entity()`, `set_next_task_rt()`). So while a thread runs
/// both advance together, and while it is switched out only `exec_start`
/// jumps: between two reads on one CPU the time off the CPU is the
/// advance of `exec_start` minus that of `sum_exec_runtime`, exactly,
/// whenever the scheduler last updated them.
///
/// That clock leaves out the time the hypervisor stole from the CPU and,
/// with CONFIG_IRQ_TIME_ACCOUNTING, its IRQ time (`update_rq_clock_task()`
/// in kernel/sched/core.c), which the call's wall time holds. The run
/// queue keeps both clocks (`rq.clock`, `rq.clock_task`), so the growth
/// of their difference over the call is that left-out time, read through
/// the thread's `se.cfs_rq->rq` (the run queue of the CPU it runs on:
/// `set_task_rq()`). Without it, a call that waits 1.5 s on a CPU whose
/// other thread is robbed of 180 ms counts those 180 ms as its own
/// on-CPU time (measured here: 189 ms against `sched_switch`'s 8 ms).
/// `cfs_rq.rq` exists with CONFIG_FAIR_GROUP_SCHED only; without it
/// these four stay absent and the stolen time is not taken out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskMembers {
    /// `task_struct.se.sum_exec_runtime` (ns).
    pub sum_exec_runtime: MemberSpec,
    /// `task_struct.se.exec_start` (ns of the run queue's `clock_task`).
    pub exec_start: MemberSpec,
    /// `task_struct.se.cfs_rq` (pointer).
    pub cfs_rq: MemberSpec,
    /// `cfs_rq.rq` (pointer).
    pub rq: MemberSpec,
    /// `rq.clock` (ns).
    pub rq_clock: MemberSpec,
    /// `rq.clock_task` (ns).
    pub rq_clock_task: MemberSpec,
}

impl TaskMembers {
    pub const EMPTY: TaskMembers = TaskMembers {
        sum_exec_runtime: MemberSpec::ABSENT,
        exec_start: MemberSpec::ABSENT,
        cfs_rq: MemberSpec::ABSENT,
        rq: MemberSpec::ABSENT,
        rq_clock: MemberSpec::ABSENT,
        rq_clock_task: MemberSpec::ABSENT,
    };
    /// `(struct, member path)` of the two fields every run-time reading
    /// needs, in field order (include/linux/sched.h: `struct
    /// sched_entity se` in `task_struct`).
    pub const PATHS: [(&'static str, &'static str); 2] = [
        ("task_struct", "se.sum_exec_runtime"),
        ("task_struct", "se.exec_start"),
    ];
    /// `(struct, member path)` of the four that take the stolen time out
    /// (kernel/sched/sched.h), in field order: all or none.
    pub const UNCOUNTED_PATHS: [(&'static str, &'static str); 4] = [
        ("task_struct", "se.cfs_rq"),
        ("cfs_rq", "rq"),
        ("rq", "clock"),
        ("rq", "clock_task"),
    ];
}

/// What `tp_btf/ext4_da_write_pages_extent` reads of its `struct
/// ext4_map_blocks *map` argument (fs/ext4/ext4.h): the blocks asked for,
/// the classic tracepoint's `len`. ext4's own struct, so in vmlinux's BTF
/// only when ext4 is built in (the only case where aya 0.14 can attach
/// tp_btf programs to ext4's tracepoints anyway).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtentMembers {
    pub len: MemberSpec,
}

impl ExtentMembers {
    pub const EMPTY: ExtentMembers = ExtentMembers {
        len: MemberSpec::ABSENT,
    };
    pub const PATH: (&'static str, &'static str) = ("ext4_map_blocks", "m_len");
}

/// How the writepages programs measure the on-CPU time of calls: slot 0
/// of the `CONFIG` array, written by userspace after attaching.
pub mod cpu_time {
    /// Not measured.
    pub const OFF: u32 = 0;
    /// A program on `sched_switch` adds up the time the calling thread is
    /// switched out (kept for the cross-check test; it runs on every
    /// context switch of the machine).
    pub const SCHED_SWITCH: u32 = 1;
    /// The thread's own run time read at the start and the end of the
    /// call ([`crate::TaskMembers`]).
    pub const TASK_RUNTIME: u32 = 2;
}

/// The kernel struct members the BTF-typed writepages programs read, with
/// `(struct, member, signed)` in [`members::PATHS`] order.
pub mod members {
    pub const INODE_I_INO: usize = 0;
    pub const INODE_I_SB: usize = 1;
    pub const SB_S_DEV: usize = 2;
    pub const INODE_I_MAPPING: usize = 3;
    pub const MAPPING_WRITEBACK_INDEX: usize = 4;
    pub const WBC_NR_TO_WRITE: usize = 5;
    pub const WBC_PAGES_SKIPPED: usize = 6;
    pub const WBC_RANGE_START: usize = 7;
    pub const WBC_RANGE_END: usize = 8;
    pub const WBC_SYNC_MODE: usize = 9;
    pub const WBC_FOR_KUPDATE: usize = 10;
    pub const WBC_FOR_BACKGROUND: usize = 11;
    pub const WBC_RANGE_CYCLIC: usize = 12;
    pub const MAPPING_HOST: usize = 13;
    pub const TASK_PID: usize = 14;
    /// Sources: include/linux/fs.h (inode, super_block, address_space) and
    /// include/linux/writeback.h (writeback_control; the flags are 1-bit
    /// bitfields).
    pub const PATHS: [(&str, &str, bool); 15] = [
        ("inode", "i_ino", false),
        ("inode", "i_sb", false),
        ("super_block", "s_dev", false),
        ("inode", "i_mapping", false),
        ("address_space", "writeback_index", false),
        ("writeback_control", "nr_to_write", true),
        ("writeback_control", "pages_skipped", true),
        ("writeback_control", "range_start", true),
        ("writeback_control", "range_end", true),
        ("writeback_control", "sync_mode", false),
        ("writeback_control", "for_kupdate", false),
        ("writeback_control", "for_background", false),
        ("writeback_control", "range_cyclic", false),
        ("address_space", "host", false),
        // include/linux/sched.h: the thread id (tp_btf sched_switch's next).
        ("task_struct", "pid", false),
    ];
}

/// Filters applied in the kernel; 0 means "no filter" for each.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Kernel-internal `dev_t` (major << 20 | minor).
    pub dev: u32,
    /// Process (thread group) id.
    pub tgid: u32,
    pub ino: u64,
    /// cgroup v2 id (the inode number of the cgroup's directory).
    pub cgroup_id: u64,
}

/// Kinds of record sent through the ring buffer; the first `u32` of every
/// record.
pub mod record_kind {
    pub const WRITEPAGES_CALL: u32 = 1;
    /// A [`crate::CallBatch`]: up to [`crate::CALL_BATCH`] calls of one CPU.
    pub const CALL_BATCH: u32 = 7;
}

/// Calls a CPU keeps before sending them to the ring in one record.
pub const CALL_BATCH: usize = 8;

/// One CPU's ext4 call records, sent to the ring as one record once
/// [`CALL_BATCH`] are kept, or when userspace asks for a quiet CPU's
/// (writeback-ebpf writepages.rs, `flush_call_batch`): a ring record's
/// reserve and submit, whose lock and positions every CPU shares, cost
/// about 290 ns here, more than the rest of the call's end program
/// (docs/bench-log/fsync-storm.md, step 8).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallBatch {
    /// [`record_kind::CALL_BATCH`].
    pub kind: u32,
    /// Calls sent, the first `count` of `calls`: stamped from
    /// [`BatchState::count`] when the batch is sent.
    pub count: u32,
    pub calls: [WritepagesCall; CALL_BATCH],
}

/// A CPU's batch state beside its batch ([`CallBatch`],
/// [`crate::DirtyingBatch`]): what userspace reads to know which CPUs keep
/// records, and the flag that keeps a flush from sending a batch a program
/// is writing on that CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchState {
    /// Records kept in the batch: the one live count, beside the batch so
    /// that userspace reads 8 bytes a CPU, not a whole batch.
    pub count: u32,
    /// 1 while a program writes the batch.
    pub busy: u32,
}

/// Bits of [`WritepagesCall::flags`].
pub mod call_flags {
    /// `wbc->for_kupdate`: periodic (dirty_expire) writeback.
    pub const FOR_KUPDATE: u32 = 1 << 0;
    /// `wbc->range_cyclic`: the call continues from `writeback_index`.
    pub const RANGE_CYCLIC: u32 = 1 << 1;
    /// The start of this call was seen. Without it (the probe was attached
    /// mid-call) the start-side fields and duration are zero.
    pub const START_SEEN: u32 = 1 << 2;
    /// The flusher work this call runs under was for background writeback
    /// (`wbc->for_background`).
    pub const FOR_BACKGROUND: u32 = 1 << 3;
    /// The scan hooks fired during this call (scan fields are meaningful).
    pub const SCAN_SEEN: u32 = 1 << 4;
    /// On-CPU time was measured for the whole call (`offcpu_ns` is
    /// meaningful): the thread's run time read at its start and end, or
    /// a `sched_switch` program attached throughout.
    pub const CPU_TRACKED: u32 = 1 << 5;
    /// The call was drawn into the kernel's call sample (`sampling::CALLS`
    /// above 0, the CPU budget's): the calls not drawn are only counted
    /// (`agg::CALLS_SAMPLED_OUT`), so userspace samples this one no more.
    pub const SAMPLED: u32 = 1 << 6;
}

/// The events the default trace's programs run on, in the hook kinds the
/// probe plan picks on a kernel with tp_btf, each with the program it
/// runs there: a tp_btf target by name, a classic tracepoint as
/// `category:event`. The two scan-pass events first, which fire once per
/// extent mapped (about once per page under random 4 KiB writes with
/// fsync: 0.98 runs per dirtied page each in Run S3,
/// docs/bench-log/small-writer.md),
/// then the per-call and per-inode events (a few per fsync;
/// `writeback_start`, a classic tracepoint there, once per chunk of
/// flusher work). Then the per-folio events other filesystems' calls are
/// put together from where no function hook on `do_writepages()` loads
/// (writeback-ebpf generic.rs): `writeback_iter()`'s, iomap's (xfs) and
/// btrfs' own, once per folio written. An event with two programs is
/// listed once for each. What `wbscope probes --cost --on-hooks`
/// measures its floor on (crates/tracer/src/cost.rs), and what `cargo
/// xtask bench` sets the tracer's programs against (xtask
/// bench/figures.rs): one list, so that the two cannot drift apart. The
/// opt-in concepts' events are measured by `wbscope probes --cost` on
/// their own.
pub const DEFAULT_HOOKS: &[(&str, &str)] = &[
    ("ext4_da_write_folios_start", "tp_btf_folios_start"),
    ("ext4_da_write_folios_end", "tp_btf_folios_end"),
    ("ext4_writepages", "tp_btf_writepages_start"),
    ("ext4_writepages_result", "tp_btf_writepages_end"),
    ("writeback_dirty_inode_enqueue", "tp_btf_dirty_inode"),
    ("writeback_single_inode", "tp_btf_single_inode"),
    ("writeback:writeback_start", "wb_start"),
    ("writeback_single_inode", "generic_pass_end"),
    ("wbc_writepage", "tp_btf_wbc_writepage"),
    ("wbc_writepage", "generic_wbc_writepage"),
    ("iomap_writeback_folio", "generic_iomap_folio"),
    ("extent_writepage", "generic_btrfs_folio"),
];

/// Slots of the `SAMPLING` array map: log2 of the one-in-N sampling the
/// CPU budget asks for (crates/model/src/budget.rs), written by
/// userspace at each interval; 0 keeps everything.
pub mod sampling {
    /// Folios dirtied, in the per-folio attribution (dirtier.rs).
    pub const DIRTY_FOLIO: u32 = 0;
    /// Writepages calls of the ext4 hooks (writepages.rs): a call not
    /// drawn costs its start a random draw and its end two per-CPU adds.
    pub const CALLS: u32 = 1;
    /// Not a shift: the generation of the per-folio reading in progress
    /// (writeback-ebpf dirtier.rs `DirtierChanged`), bumped by userspace
    /// at each reading.
    pub const READING: u32 = 2;
    /// Not a shift: non-zero while the CPU budget sheds `device_io`; the
    /// block programs (block.rs) then return at once.
    pub const DEVICE_IO: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Why a writepages call happened, as far as the kernel tells.
pub mod cause {
    pub const UNKNOWN: u32 = 0;
    /// WB_SYNC_ALL: fsync, fdatasync, sync(2), O_SYNC.
    pub const SYNC: u32 = 1;
    /// `for_kupdate`: periodic writeback of expired dirty data.
    pub const PERIODIC: u32 = 2;
    /// Flusher work for background writeback (over the background threshold).
    pub const BACKGROUND: u32 = 3;
    /// Other flusher work (see `work_reason`): sync's first pass, vmscan,
    /// free-space pressure, laptop mode, cgroup writeback...
    pub const FLUSHER_OTHER: u32 = 4;
    /// WB_SYNC_NONE from outside the flusher: sync_file_range(WRITE),
    /// fadvise(DONTNEED), filemap_flush, page reclaim.
    pub const DIRECT: u32 = 5;
    /// Never set by the kernel programs: userspace turns a `DIRECT` call
    /// into this one when it knows the thread is doing RWF_DONTCACHE writes
    /// (the write kicks write-out of what it wrote; docs/trace-json.md).
    pub const UNCACHED: u32 = 6;
}

/// One writepages call, joined in the kernel from its start and end hooks,
/// with what happened inside it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritepagesCall {
    /// [`record_kind::WRITEPAGES_CALL`].
    pub kind: u32,
    /// Kernel `dev_t` encoding: major in the top 12 bits, minor in the low
    /// 20 (`MINORBITS` in include/linux/kdev_t.h).
    pub dev: u32,
    pub ino: u64,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at the start.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Time the calling thread spent switched out during the call (from
    /// its scheduler run time, [`TaskMembers`], or from `sched_switch`);
    /// on-CPU time is `duration_ns - offcpu_ns`.
    pub offcpu_ns: u64,
    pub cgroup_id: u64,
    /// `wbc->nr_to_write` at the start of the call: the budget asked.
    pub nr_to_write: i64,
    /// Pages written, as the end hook reports it.
    pub pages_written: i64,
    /// `wbc->pages_skipped` at the start and at the end.
    pub pages_skipped_start: i64,
    pub pages_skipped_end: i64,
    pub range_start: i64,
    pub range_end: i64,
    /// `mapping->writeback_index` before and after the call.
    pub writeback_index_before: u64,
    pub writeback_index_after: u64,
    /// Scan extent (ext4_da_write_folios_start/end): `start_pos` at the
    /// first iteration and `next_pos` at the last.
    pub scan_first_pos: i64,
    pub scan_last_pos: i64,
    /// Bytes examined: sum over iterations of `next_pos` at the end minus
    /// `start_pos` at the start (see docs/probes.md).
    pub scan_bytes: u64,
    /// Blocks in the extents mapped during the call
    /// (ext4_da_write_pages_extent `len`).
    pub extent_blocks: u64,
    /// Bytes of the bios the calling thread submitted during the call
    /// (block_bio_queue).
    pub bio_bytes: u64,
    pub tgid: u32,
    pub tid: u32,
    pub ret: i32,
    /// `enum writeback_sync_modes`: 0 = WB_SYNC_NONE, 1 = WB_SYNC_ALL.
    pub sync_mode: u32,
    /// [`call_flags`].
    pub flags: u32,
    /// [`cause`].
    pub cause: u32,
    /// `enum wb_reason` + 1 of the flusher work the call ran under; 0 when
    /// the call did not run under flusher work.
    pub work_reason: u32,
    /// Loop iterations of the scan (folios_start/end pairs).
    pub scan_iterations: u32,
    pub extents: u32,
    /// Folios counted by `writeback:wbc_writepage` during the call (only
    /// filesystems that write through write_cache_pages/writeback_iter).
    pub folios_written: u32,
    pub bios: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// Indexes of the per-CPU counters in the `STATS` map.
pub mod stat {
    /// Records dropped because the ring buffer was full.
    pub const LOST_RECORDS: u32 = 0;
    /// End hooks with no matching start (attached mid-call, or the in-flight
    /// map evicted the start).
    pub const UNMATCHED_RESULTS: u32 = 1;
    /// Starts that could not be stored in the in-flight map, or whose
    /// thread could not be stored in `CURRENT` (that call's bios, folios
    /// and off-CPU time then go uncounted).
    pub const INFLIGHT_FULL: u32 = 2;
    /// Calls dropped by the in-kernel filters.
    pub const FILTERED: u32 = 3;
    /// Inode dirtyings dropped because `DIRTYINGS` was full (their
    /// writeback is then charged to `(unknown)`).
    pub const LOST_DIRTYINGS: u32 = 4;
    /// Per-folio `DirtierChanged` records dropped because `DIRTYINGS` was
    /// full: nothing is lost, the next reading reads the whole map.
    pub const LOST_CHANGED: u32 = 5;
    /// Inserts that found their hash map full: a request, pass, pause or
    /// span start that no figure holds (`BLOCK_HIST`, `INODE_PASS`,
    /// `THROTTLED`, `RQ_START`, `SYNCING`, `SCAN_ARGS`, `OFFCPU_SINCE`,
    /// `SAMPLED_NR`, `KPROBE_ARGS`). The LRU maps make room instead.
    pub const MAP_FULL: u32 = 6;
    /// Entries made in the LRU maps that evict their oldest when full
    /// (`THROTTLED`, `HANDLES`, `DIRTIERS`): userspace sets them against
    /// the entries it finds and removed to count the evicted.
    pub const THROTTLED_NEW: u32 = 7;
    pub const HANDLES_NEW: u32 = 8;
    pub const DIRTIERS_NEW: u32 = 9;
    /// Call starts whose thread's slot in `SLOTS` another thread's call
    /// held (or took at the same moment): the call went to `CURRENT`,
    /// counted fully, by the slower path.
    pub const SLOT_BUSY: u32 = 10;
    pub const COUNT: u32 = 11;
}

/// Indexes of the per-CPU interval aggregates in the `AGG` map: counters the
/// kernel adds to at high rates, read and differenced by userspace.
pub mod agg;

/// The global domain's dirty thresholds (pages) as /proc/vmstat last
/// showed them (`nr_dirty_threshold`, `nr_dirty_background_threshold`,
/// which `vmstat_start()` computes with the same `global_dirty_limits()`
/// that fires `global_dirty_state`): the `GLOBAL_THRESH` array map,
/// written by userspace at attach and at every interval, read by the
/// throttle classifier on each pause. So no program runs on
/// `global_dirty_state` to learn them (a program there ran ~1,000 times
/// per GiB written, 0.1–0.4 ms of BPF time).
pub mod global_thresh {
    pub const DIRTY: u32 = 0;
    pub const BACKGROUND: u32 = 1;
    pub const COUNT: u32 = 2;
}

/// `writeback:global_dirty_state`, latest values (pages). The `DIRTY`
/// array map holds the record's first [`dirty::RECORD_WORDS`] words after
/// its common header as the kernel wrote them, and [`dirty::UPDATED_NS`];
/// readers find each level's word with [`dirty::record_word`] and the
/// tracepoint's layout. The level indices below are the order userspace
/// decodes them in ([`crate::fields::global_dirty::NAMES`]).
pub mod dirty {
    use crate::FieldSpec;

    pub const NR_DIRTY: u32 = 0;
    pub const NR_WRITEBACK: u32 = 1;
    pub const BACKGROUND_THRESH: u32 = 2;
    pub const DIRTY_THRESH: u32 = 3;
    pub const DIRTY_LIMIT: u32 = 4;
    pub const NR_DIRTIED: u32 = 5;
    pub const NR_WRITTEN: u32 = 6;
    /// `jiffies` at the last update (0 = never fired).
    pub const UPDATED_NS: u32 = 7;
    pub const COUNT: u32 = 8;
    /// Words of the record the program copies: the seven `unsigned long`
    /// fields the event has had since 5.8 (before, an eighth,
    /// `nr_unstable`, came before `nr_written`).
    pub const RECORD_WORDS: usize = 7;

    /// Which copied word holds a field: a whole 8-byte, 8-byte aligned
    /// field within the copied words, or none (the level then reads 0).
    pub const fn record_word(spec: &FieldSpec) -> Option<usize> {
        let offset = spec.offset as usize;
        if spec.size != 8 || offset < 8 || !offset.is_multiple_of(8) {
            return None;
        }
        let word = offset / 8 - 1;
        if word < RECORD_WORDS {
            Some(word)
        } else {
            None
        }
    }
}

/// Key of the per-device inode-pass aggregates (`INODE_PASS`, per CPU):
/// one counter or histogram bucket of [`inode_pass`] for one device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DevCounterKey {
    /// Kernel `dev_t` of the inode's filesystem (`inode->i_sb->s_dev`).
    pub dev: u32,
    /// [`inode_pass`].
    pub index: u32,
}

/// Indexes of the per-device inode-pass aggregates. A pass is one call of
/// `__writeback_single_inode()` (fs/fs-writeback.c): the flusher's
/// `writeback_sb_inodes()` makes one per inode per chunk with
/// `nr_to_write = writeback_chunk_size()`; `writeback_single_inode()`
/// (write_inode_now, sync_inode_metadata) makes others. Pages written is
/// the budget consumed, `nr_to_write - wbc->nr_to_write`, as the
/// `writeback_single_inode` tracepoint reports it.
pub mod inode_pass {
    /// Buckets per log2 histogram: 0 holds 0, k holds [2^(k-1), 2^k).
    pub const HIST_BUCKETS: u32 = 64;
    /// Pages written, every pass.
    pub const WROTE: u32 = 0;
    /// Passes with a finite budget (0 < `nr_to_write` < LONG_MAX, i.e.
    /// the flusher's WB_SYNC_NONE chunks): pages asked, pages written.
    pub const BUDGET_ASKED: u32 = 1;
    pub const BUDGET_WROTE: u32 = 2;
    /// log2 histogram of pages written per pass with a finite budget; its
    /// counts add up to those passes.
    pub const WROTE_HIST: u32 = 16;
    /// The same for the other passes: budget LONG_MAX (WB_SYNC_ALL and
    /// tagged sync writeback, `writeback_chunk_size()`; write_inode_now)
    /// or 0 (`sync_inode_metadata()`: the inode only).
    pub const UNBOUNDED_WROTE_HIST: u32 = WROTE_HIST + HIST_BUCKETS;
    /// log2 histogram of the budgets of passes with a finite one.
    pub const ASKED_HIST: u32 = UNBOUNDED_WROTE_HIST + HIST_BUCKETS;
    pub const COUNT: u32 = ASKED_HIST + HIST_BUCKETS;
}

/// Key of the in-flight map that joins start and end of one call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InflightKey {
    pub ino: u64,
    pub tid: u32,
    pub dev: u32,
}

/// The call a thread is inside (the `CURRENT` hash, keyed by thread id),
/// and what the hooks that fire many times inside it have counted so far:
/// the bios it queued (`block_bio_queue`, which knows the thread only) and
/// its scan passes and extents (ext4's folios and extent tracepoints, and
/// the scan kprobes). Counting here, in a map small enough to stay in the
/// kernel's direct map, spares each of those a lookup in the in-flight
/// LRU; the call's end adds the counts to its record. 64 bytes, so that
/// `CURRENT` stays under 32 KiB (see its comment in writeback-ebpf).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CurrentCall {
    pub key: InflightKey,
    pub bio_bytes: u64,
    pub bios: u32,
    /// Scan passes ended (folios_end, or the scan kretprobe).
    pub scan_iterations: u32,
    pub extents: u32,
    /// Blocks of the extents (`m_len`): 2^32 blocks is 16 TiB of 4 KiB
    /// blocks in one call; counted saturating.
    pub extent_blocks: u32,
    pub scan_bytes: u64,
    pub scan_last_pos: i64,
    /// `start_pos` at the current pass's start.
    pub scan_iter_start: i64,
}

/// Flusher work the thread is running (writeback_start → writeback_written).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlusherWork {
    pub nr_pages: i64,
    /// `enum wb_reason` + 1.
    pub reason: u32,
    pub for_background: u32,
}

/// The state of one call while it is in flight: start-side fields plus
/// what the hooks inside the call add up.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InflightCall {
    pub start_ns: u64,
    pub nr_to_write: i64,
    pub pages_skipped: i64,
    pub range_start: i64,
    pub range_end: i64,
    pub writeback_index: u64,
    /// `start_pos` at the first scan pass (set with
    /// [`call_flags::SCAN_SEEN`] by the pass's start; the passes' other
    /// figures are counted in the thread's [`CurrentCall`]).
    pub scan_first_pos: i64,
    pub flags: u32,
    pub cause: u32,
    pub work_reason: u32,
    pub folios_written: u32,
    /// [`cpu_time`] method the start used.
    pub cpu_method: u32,
    /// With [`cpu_time::TASK_RUNTIME`]: the CPU the call started on and
    /// the thread's `se.sum_exec_runtime` and `se.exec_start` then, and
    /// its run queue's `clock - clock_task` ([`TaskMembers`]).
    pub start_cpu: u32,
    pub run_start: u64,
    pub exec_start: u64,
    pub uncounted_start: u64,
}

/// One process's pauses in `balance_dirty_pages` (the `THROTTLED`
/// per-CPU LRU hash, keyed by tgid): how many, their sum of the
/// tracepoint's `pause` (ms), and its comm. Read by the findings (who was
/// paused) and by the who-dirtied-it owners.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PausedBy {
    pub pauses: u64,
    pub pause_ms: u64,
    pub comm: [u8; 16],
}

#[cfg(feature = "user")]
mod pod {
    unsafe impl aya::Pod for super::PausedBy {}
    // SAFETY: all of these are #[repr(C)] structs of plain integers with
    // explicit padding fields, so every bit pattern is valid.
    unsafe impl aya::Pod for super::FieldSpec {}
    unsafe impl aya::Pod for super::MemberSpec {}
    unsafe impl aya::Pod for super::KernelMembers {}
    unsafe impl aya::Pod for super::ScanMembers {}
    unsafe impl aya::Pod for super::BlockMembers {}
    unsafe impl aya::Pod for super::TaskMembers {}
    unsafe impl aya::Pod for super::ExtentMembers {}
    unsafe impl aya::Pod for super::TracepointLayout {}
    unsafe impl aya::Pod for super::Filter {}
    unsafe impl aya::Pod for super::WritepagesCall {}
    unsafe impl aya::Pod for super::CallBatch {}
    unsafe impl aya::Pod for super::BatchState {}
    unsafe impl aya::Pod for super::InflightKey {}
    unsafe impl aya::Pod for super::InflightCall {}
    unsafe impl aya::Pod for super::FlusherWork {}
    unsafe impl aya::Pod for super::DevCounterKey {}
    unsafe impl aya::Pod for super::FileMembers {}
    unsafe impl aya::Pod for super::WriteCall {}
}

mod generic;
pub use generic::*;
mod dirtier;
pub use dirtier::*;
mod block;
pub use block::*;
mod runclock;
pub use runclock::*;
mod durability;
pub use durability::*;
mod writes;
pub use writes::*;

#[cfg(test)]
mod tests {
    /// `CURRENT` stays under the 32 KiB kmalloc bound with 64-byte values
    /// (the sizing in its comment in writeback-ebpf/src/main.rs).
    #[test]
    fn a_current_call_is_64_bytes() {
        assert_eq!(core::mem::size_of::<super::CurrentCall>(), 64);
    }
}
