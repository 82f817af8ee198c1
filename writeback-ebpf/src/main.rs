//! wbscope's kernel programs.
//!
//! No kernel struct layout is compiled in: every tracepoint field is read
//! through a [`TracepointLayout`] global that userspace fills from the
//! tracefs `format` file before loading (crates/tracer/src/tracefs.rs).
//! Programs carry no tracepoint name in their section: userspace attaches
//! each to whichever candidate tracepoint its probe plan chose.
//!
//! One record per writepages call crosses the ring buffer; everything that
//! fires per page or per bio is added up in maps. No program of the probe
//! plan runs on events that fire without writeback or I/O but one, a
//! process's exit (taskio.rs: its last counts, once per exit; the on-CPU
//! time of a call comes from the thread's own run time, `sched.rs`).
#![no_std]
#![no_main]
// Inline assembly on the BPF target: the atomic add of dirtier.rs.
#![feature(asm_experimental_arch)]

mod batch;
mod block;
mod dirtier;
mod durability;
mod floor;
mod flusher;
mod generic;
mod hook;
mod in_call;
mod members;
mod read;
mod scan;
mod sched;
mod syncwait;
mod task_local;
mod taskio;
mod trial;
mod writepages;
mod writes;

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use writeback_common::{
    BlockHistKey, BlockSlots, DevCounterKey, DeviceLedger, DirectKey, Filter, FlusherWork,
    PausedBy, RequestKey, agg, dirty, global_thresh, sampling, stat,
};

/// Per-call records to userspace. 4 MiB holds ~17000 records of 240 bytes:
/// far more than the writepages calls a busy host makes in the time
/// userspace takes to drain it (one call writes up to a whole chunk).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);
const EVENTS_BYTES: u32 = 4 << 20;
/// Records are submitted without waking userspace (a wakeup is an
/// irq_work, which costs microseconds on virtualised hosts); userspace
/// drains on a short timer instead, and is woken only once a quarter of
/// the buffer is waiting.
const WAKEUP_AT_BYTES: u64 = (EVENTS_BYTES / 4) as u64;

/// The flags of a record submitted to `EVENTS`: a wakeup only once
/// [`WAKEUP_AT_BYTES`] are waiting.
#[inline(always)]
pub(crate) fn events_wakeup() -> u64 {
    wakeup_past(&EVENTS, WAKEUP_AT_BYTES)
}

/// The flags of a record submitted to `ring`: a wakeup only once `bytes`
/// are waiting in it (a wakeup is an irq_work, microseconds on a
/// virtualised host), none below.
#[inline(always)]
pub(crate) fn wakeup_past(ring: &RingBuf, bytes: u64) -> u64 {
    let flag = if ring.query(BPF_RB_AVAIL_DATA as u64) >= bytes {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    flag as u64
}

/// The ext4 writepages call each thread is inside, or was last: its
/// start-side values and what the hooks firing many times in it counted
/// ([`writepages::ThreadCall`]), for the call's end and for hooks that
/// know the thread but not the inode (bios, wbc_writepage, the scan
/// kprobes) or both (ext4's folios and extent tracepoints check the key).
/// Whether the thread is inside a call is its IN_CALL byte (in_call.rs).
///
/// One value per thread, hung on its task (task_local.rs) and written in
/// place by each of its calls: found at the start and at the end. Under
/// an fsync storm a map operation per call is a large share of the
/// programs' time (docs/bench-log/fsync-storm.md: an LRU hash insert
/// 1.0-1.2 µs, a lookup about 0.15 µs, where the empty program on the
/// event costs 0.1-0.16 µs); task storage finds the value through the
/// task's own cache, without hashing. Made at the thread's first call,
/// freed by the kernel when the task exits. A thread is inside one ext4
/// call at a time (ext4 writes back nothing from reclaim, which runs
/// GFP_NOFS under it).
///
/// Before 5.12 the loader makes it an LRU hash of 8,192 threads keyed by
/// thread id, preallocated: 1.8 MiB at 224 bytes an element (a 48-byte
/// `struct htab_elem`, the 8-byte key, the 168-byte value;
/// kernel/bpf/hashtab.c). An entry evicted while its call is in flight
/// makes that call's end unmatched, counted (`unmatched_results`); a
/// start that finds no room, or whose task-storage lookup the kernel
/// refuses (another under way on the CPU), is counted
/// (`stat::INFLIGHT_FULL`).
#[aya_ebpf::macros::btf_map]
static CURRENT: task_local::TaskStorage<writepages::ThreadCall> = task_local::TaskStorage::new();

/// When a thread inside a call was switched out, and how long it has
/// been switched out in the call so far (sched_switch, only in the
/// cross-check test's tracer).
#[map]
static OFFCPU_SINCE: HashMap<u32, [u64; 2]> = HashMap::with_max_entries(16384, 0);

/// Flusher work each flusher thread is running.
#[map]
static WORK: HashMap<u32, FlusherWork> = HashMap::with_max_entries(4096, 0);

/// Block requests in flight (issue time); removed at completion. A plain
/// hash: one insert and one delete per request, where LRU costs more.
#[map]
static RQ_START: HashMap<RequestKey, u64> = HashMap::with_max_entries(65536, 0);

/// Per-device log2 histograms of request size and latency, in a slot per
/// device shared by all CPUs (`BlockSlots`, `block.rs`).
#[map]
static BLOCK_SLOTS: Array<BlockSlots> = Array::with_max_entries(1, 0);

/// The same histograms, for devices whose slot another device holds, and
/// every device's latencies of cache-flush requests by class
/// (`block_hist::FLUSH_LATENCY_NS`: a few classes of a few buckets each).
/// One value shared by all CPUs, added to atomically: a per-CPU hash
/// holds a value per *possible* CPU for each of its entries
/// (`htab_map_alloc()` in kernel/bpf/hashtab.c), 8 MiB at 128 CPUs.
#[map]
static BLOCK_HIST: HashMap<BlockHistKey, u64> = HashMap::with_max_entries(8192, 0);

/// Each device's ledger: its journal's extents (from userspace) and the
/// bytes of its write bios by class (`DeviceLedger`, block.rs). Shared by
/// all CPUs, added to atomically. 256 devices, each entry 120 bytes.
#[map]
static DEVICE_LEDGER: HashMap<u32, DeviceLedger> = HashMap::with_max_entries(256, 0);

/// Each process's direct-I/O bytes per device (`DirectKey`, block.rs):
/// the ledger's `direct` stage. An LRU for the bound (a process that
/// stopped writing direct long ago gives its place); one value shared by
/// all CPUs, added to atomically. 1,024 processes writing direct at once:
/// 80 KiB, where 4,096 would push the fullest plan (every opt-in, a pid
/// filter) past its 32 MiB bound.
#[map]
static DIRECT_BYTES: LruHashMap<DirectKey, u64> = LruHashMap::with_max_entries(1024, 0);

/// Per-device inode-pass counters and histograms (`writeback_single_inode`
/// through tp_btf, which sees the inode), keyed by (device,
/// `writeback_common::inode_pass` index). 4096 entries hold 21 devices
/// with every bucket of every histogram in use. Shared by all CPUs, added
/// to atomically, for the memory's sake (as `BLOCK_HIST`).
#[map]
static INODE_PASS: HashMap<DevCounterKey, u64> = HashMap::with_max_entries(4096, 0);

/// Counters indexed by `writeback_common::stat`.
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Interval aggregates indexed by `writeback_common::agg`.
#[map]
static AGG: PerCpuArray<u64> = PerCpuArray::with_max_entries(agg::COUNT, 0);

/// log2 of each one-in-N sampling the CPU budget asks for, indexed by
/// `writeback_common::sampling`; written only by userspace.
#[map]
static SAMPLING: Array<u32> = Array::with_max_entries(sampling::COUNT, 0);

/// The sampling shift in force for `slot` (0: keep everything).
#[inline(always)]
fn sampling_shift(slot: u32) -> u32 {
    // SAFETY: a live array value, written only by userspace.
    SAMPLING.get_ptr(slot).map_or(0, |p| unsafe { *p }) & 31
}

/// Whether this event is drawn into a one-in-2^`shift` sample, at random
/// (always, at 0): the one rule of both samplings.
#[inline(always)]
fn drawn(shift: u32) -> bool {
    // SAFETY: plain helper call.
    shift == 0
        || u64::from(unsafe { aya_ebpf::helpers::bpf_get_prandom_u32() }) & ((1 << shift) - 1) == 0
}

/// Latest `global_dirty_state`, indexed by `writeback_common::dirty`
/// (only with `--enable global_dirty_state`).
#[map]
static DIRTY: Array<u64> = Array::with_max_entries(dirty::COUNT, 0);

/// The global dirty thresholds, from userspace
/// (`writeback_common::global_thresh`).
#[map]
static GLOBAL_THRESH: Array<u64> = Array::with_max_entries(global_thresh::COUNT, 0);

/// Pause ms per process in `balance_dirty_pages` (who was throttled);
/// LRU so processes long gone make room (counted: `stat::THROTTLED_NEW`).
/// Shared by all CPUs, added to atomically, for the memory's sake (as
/// `BLOCK_HIST`): 8,192 processes at 88 bytes each, room for a host of
/// a thousand cgroups' throttled writers and their successors.
#[map]
static THROTTLED: LruHashMap<u32, PausedBy> = LruHashMap::with_max_entries(8192, 0);

/// Runtime switches written by userspace after attaching: index 0 = how
/// on-CPU time is measured (`writeback_common::cpu_time`).
#[map]
pub(crate) static CONFIG: Array<u32> = Array::with_max_entries(4, 0);

/// In-kernel filters (0 = off), set before load.
#[unsafe(no_mangle)]
static FILTER: Filter = Filter {
    dev: 0,
    tgid: 0,
    ino: 0,
    cgroup_id: 0,
};

/// Thread `tid`'s entry in `map`, made on its first call: a lookup, and
/// only for a thread new to the map an insert (of the `zeros` a
/// never-written array holds: the caller writes every field it reads)
/// and a second lookup. For the per-thread maps written in place
/// (`do_writepages()`'s `HOOKED`, the write spans' `WRITING`; ext4's
/// `CURRENT` is task storage, task_local.rs, with this same path before
/// 5.12): making and dropping an entry per call cost several times a
/// lookup under an fsync storm (docs/bench-log/fsync-storm.md).
#[inline(always)]
pub(crate) fn thread_entry<V>(
    map: &'static LruHashMap<u32, V>,
    zeros: &'static Array<V>,
    tid: u32,
) -> Option<&'static mut V> {
    let entry = match map.get_ptr_mut(&tid) {
        Some(entry) => entry,
        None => {
            let template = zeros.get_ptr(0)?;
            // SAFETY: a live array value, a valid value to copy.
            map.insert(&tid, unsafe { &*template }, 0).ok()?;
            map.get_ptr_mut(&tid)?
        }
    };
    // SAFETY: the thread's own entry: only the thread writes it.
    Some(unsafe { &mut *entry })
}

/// Adds to this CPU's counter at `index` of `AGG`-like maps, with a plain
/// load, add and store: every index is added to by one attached program
/// (the hook its concept chose), and the kernel never runs a program
/// twice at once on one CPU (the per-CPU state below).
///
/// # Per-CPU state and preemption
///
/// The programs build records in per-CPU slots (writepages.rs `START`,
/// generic.rs `GENERIC_SCRATCH` and `WBC_SEEN`, dirtier.rs `DIRTY_SLOT`)
/// and add to per-CPU counters.
/// A program can lose its CPU halfway: fentry/fexit programs run with
/// migration disabled, not preemption (`__bpf_prog_enter_recur()`,
/// kernel/bpf/trampoline.c), and on PREEMPT_RT kernels whose tracepoints
/// run their probes under SRCU rather than with preemption disabled
/// (`tracepoint_guard()`, include/linux/tracepoint.h) so do tp_btf
/// programs; any program can be interrupted, and the block completion
/// programs run in interrupt context. What keeps a slot whole is that the
/// kernel never starts a program on a CPU where the same program's run is
/// unfinished: fentry/fexit and tp_btf check `prog->active`
/// (`__bpf_prog_enter_recur()`; `__bpf_trace_run()` in
/// kernel/trace/bpf_trace.c, on kernels whose tracepoint probes can be
/// preempted), kprobes and classic tracepoints check the CPU's
/// `bpf_prog_active` for all of them at once (`trace_call_bpf()`), and
/// kprobe handlers run with preemption disabled. The run it skips is
/// counted in the program's `recursion_misses`, never run halfway.
///
/// So a slot or counter that one attached program writes cannot be torn,
/// and each of the slots above has one writer: the plan attaches one
/// start hook per concept, and where two programs would share a slot
/// (generic.rs: iomap's and btrfs' per-folio programs) each has its own
/// (`generic::scratch`). The one slot two programs touch, `WBC_SEEN`,
/// is written by one program and read by another, with a thread id
/// written last and read before and after (generic.rs). The interleaving
/// test on a PREEMPT_RT guest (dev/vm/src/rt.rs) checks every call and
/// page against ftrace's own count.
#[inline(always)]
fn add(map: &PerCpuArray<u64>, index: u32, value: u64) {
    if let Some(counter) = map.get_ptr_mut(index) {
        // SAFETY: this CPU's counter, added to by one program (above).
        unsafe { *counter += value };
    }
}

/// Adds one to a `STATS` counter. Unlike [`add`]'s, these are bumped by
/// many programs (every hook that can find a map full or a record
/// filtered), which on a kernel that preempts or interrupts one of them
/// could interleave on one CPU: an atomic add, on paths that run rarely.
#[inline(always)]
pub(crate) fn bump(index: u32) {
    bump_by(index, 1);
}

/// Adds `n` to a `STATS` counter, atomically as [`bump`].
#[inline(always)]
pub(crate) fn bump_by(index: u32, n: u64) {
    if let Some(counter) = STATS.get_ptr_mut(index) {
        atomic_add(counter, n);
    }
}

/// Keeps the compiler from moving memory accesses across this point (an
/// empty `asm!` that may touch memory): the plain copies of `WBC_SEEN`
/// (generic.rs) stay between the volatile accesses of its thread id,
/// which order only among themselves. No instruction is emitted; the CPU
/// itself runs one program's accesses in order for that program.
#[inline(always)]
pub(crate) fn barrier() {
    // SAFETY: an empty assembly block.
    unsafe { core::arch::asm!("", options(nostack)) };
}

/// Adds `n` to the counter at `p` atomically, for map values several CPUs
/// add to at once. The BPF target offers no Rust atomic read-modify-write,
/// but the instruction set has had an atomic add (`BPF_XADD`,
/// `lock ... +=`) since its first release; the others came in 5.12.
#[inline(always)]
pub(crate) fn atomic_add(p: *mut u64, n: u64) {
    // SAFETY: `p` points to an 8-byte aligned u64 inside a map value.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {n}",
            p = in(reg) p,
            n = in(reg) n,
            options(nostack)
        )
    };
}

/// Compare-and-exchange of the u64 at `p` (`BPF_CMPXCHG`, Linux 5.12):
/// `new` is stored if `old` is found. Returns the value found.
#[inline(always)]
pub(crate) fn cmpxchg(p: *mut u64, old: u64, new: u64) -> u64 {
    let mut found = old;
    // SAFETY: `p` points to an 8-byte aligned u64 inside a map value.
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") found,
            options(nostack)
        )
    };
    found
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// GPL-compatible licence: needed for bpf_probe_read_kernel and friends.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
