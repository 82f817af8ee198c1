//! The writepages call of any filesystem, put together from per-folio
//! tracepoints on kernels where no function hook on `do_writepages`
//! loads (docs/probes.md, "generic calls").
//!
//! A writepages loop hands its folios out one by one: `writeback_iter()`
//! (mm/page-writeback.c, 6.10+; `write_cache_pages()` before) fires
//! `wbc_writepage(wbc, bdi)` for each folio it returns, and iomap's
//! `iomap_writeback_folio()` (fs/iomap/buffered-io.c) then fires
//! `iomap_writeback_folio(inode, pos, folio_size)` for that folio; btrfs'
//! own loop fires `extent_writepage(folio, inode, wbc)` per folio
//! (fs/btrfs/extent_io.c). The folios of one thread form one call until
//! something shows that a new call began or the old one ended:
//! - another inode, another `wbc`, another range or sync mode;
//! - the budget: `writeback_iter()` takes `folio_nr_pages()` off
//!   `wbc->nr_to_write` before it returns the next folio, so within a
//!   call the budget a folio sees falls strictly, and LONG_MAX (fsync,
//!   sync_file_range, sync) is seen only by a call's first folio. btrfs
//!   raises a finite budget mid-call (`writepage_delalloc()`), so there
//!   only LONG_MAX counts;
//! - `writeback_single_inode`, at the end of every flusher inode pass,
//!   on the thread that made the pass.
//!
//! The last call a thread makes outside the flusher (the last fsync or
//! sync_file_range) has no such event: userspace closes it once it has
//! been idle (`boundary::IDLE`) or when tracing stops. Every record says
//! which boundary closed it.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use writeback_common::{
    FOLIO_HIST_BUCKETS, FlusherWork, FolioMembers, GENERIC_CALL_KIND, GenericCall, InflightKey,
    RunClock, boundary, cause, cpu_time, generic_flags as gf, log2_bucket, members as m,
    off_cpu_ns, stat,
};

use crate::{
    CONFIG, EVENTS, WORK, barrier, bump,
    in_call::{in_ext4_call, in_flusher_work},
    members::KERNEL_MEMBERS,
    read::{Access, Typed, current_tid, member, member_ptr, now_ns, raw_arg},
    sched::run_clock_at,
    writepages::{filtered_out, inode_key},
};

/// `struct folio` members and the page shift, from BTF at load time.
#[unsafe(no_mangle)]
static FOLIO_MEMBERS: FolioMembers = FolioMembers::EMPTY;

/// Each thread's open call. Userspace removes the ones left idle.
#[map]
static GENERIC: HashMap<u32, GenericCall> = HashMap::with_max_entries(16384, 0);

/// The `wbc` of the folio `wbc_writepage` just announced on this CPU, for
/// the `iomap_writeback_folio` that follows it on the same thread (both
/// fire between `writeback_get_folio()` locking the folio and iomap
/// starting on it; nothing sleeps in between).
#[map]
static WBC_SEEN: PerCpuArray<WbcSeen> = PerCpuArray::with_max_entries(1, 0);

/// A call being opened, built off the 512-byte stack: a slot per program
/// that opens calls ([`scratch`]), so that no two programs share one. Both
/// are attached together (crates/tracer/src/plan.rs,
/// `TP_BTF_GENERIC`), and where tracepoint probes can be preempted
/// (PREEMPT_RT, main.rs "Per-CPU state and preemption") btrfs' program
/// could otherwise run on the CPU while iomap's is halfway through the
/// slot; the kernel keeps each program from overlapping itself.
#[map]
static GENERIC_SCRATCH: PerCpuArray<GenericCall> = PerCpuArray::with_max_entries(scratch::COUNT, 0);

/// Indexes of [`GENERIC_SCRATCH`]: the program that owns each.
mod scratch {
    /// `generic_iomap_folio`.
    pub(super) const IOMAP: u32 = 0;
    /// `generic_btrfs_folio`.
    pub(super) const BTRFS: u32 = 1;
    pub(super) const COUNT: u32 = 2;
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct WbcSeen {
    /// Thread that saw it; 0 once taken.
    tid: u32,
    pub(crate) sync_mode: u32,
    /// [`gf`] bits FOR_KUPDATE, RANGE_CYCLIC, FOR_BACKGROUND.
    pub(crate) flags: u32,
    _pad: u32,
    pub(crate) wbc: u64,
    pub(crate) nr_to_write: i64,
    pub(crate) range_start: i64,
    pub(crate) range_end: i64,
}

/// LONG_MAX: the budget of integrity and range writeback ("everything").
const ALL: i64 = i64::MAX;

#[inline(always)]
pub(crate) fn read_wbc<A: Access>(wbc: *const u8, tid: u32) -> WbcSeen {
    let k = &KERNEL_MEMBERS;
    let mut flags = 0;
    if member::<A>(wbc, k, m::WBC_FOR_KUPDATE) != 0 {
        flags |= gf::FOR_KUPDATE;
    }
    if member::<A>(wbc, k, m::WBC_RANGE_CYCLIC) != 0 {
        flags |= gf::RANGE_CYCLIC;
    }
    if member::<A>(wbc, k, m::WBC_FOR_BACKGROUND) != 0 {
        flags |= gf::FOR_BACKGROUND;
    }
    WbcSeen {
        tid,
        sync_mode: member::<A>(wbc, k, m::WBC_SYNC_MODE) as u32,
        flags,
        _pad: 0,
        wbc: wbc as u64,
        nr_to_write: member::<A>(wbc, k, m::WBC_NR_TO_WRITE),
        range_start: member::<A>(wbc, k, m::WBC_RANGE_START),
        range_end: member::<A>(wbc, k, m::WBC_RANGE_END),
    }
}

/// `inode->i_mapping->writeback_index`.
#[inline(always)]
fn writeback_index(inode: *const u8) -> u64 {
    let k = &KERNEL_MEMBERS;
    let mapping = member_ptr::<Typed>(inode, k, m::INODE_I_MAPPING);
    member::<Typed>(mapping, k, m::MAPPING_WRITEBACK_INDEX) as u64
}

/// Whether a folio of `key`, seen with `wbc`, continues the open call `c`.
#[inline(always)]
fn continues(c: &GenericCall, key: &InflightKey, wbc: &Option<WbcSeen>, may_rise: bool) -> bool {
    if c.dev != key.dev || c.ino != key.ino {
        return false;
    }
    match wbc {
        None => true,
        Some(w) => {
            w.wbc == c.wbc
                && w.sync_mode == c.sync_mode
                && w.range_start == c.range_start
                && w.range_end == c.range_end
                && w.nr_to_write != ALL
                && (may_rise || w.nr_to_write < c.nr_last)
        }
    }
}

/// Sends a closed call to userspace.
#[inline(always)]
pub(crate) fn emit(c: *const GenericCall, how: u32) {
    let Some(mut entry) = EVENTS.reserve::<GenericCall>(0) else {
        bump(stat::LOST_RECORDS);
        return;
    };
    let out = entry.as_mut_ptr();
    // SAFETY: `c` is a live map value, `out` a reserved record of the same
    // type; they do not overlap.
    unsafe {
        core::ptr::copy_nonoverlapping(c, out, 1);
        (*out).kind = GENERIC_CALL_KIND;
        (*out).boundary = how;
    }
    entry.submit(crate::events_wakeup());
}

/// One folio of `pages` pages at byte `pos` of `inode`, about to be
/// written by the current thread; `slot` is the calling program's
/// [`GENERIC_SCRATCH`] slot.
#[inline(always)]
fn folio(slot: u32, inode: *const u8, wbc: Option<WbcSeen>, pages: u64, pos: i64, may_rise: bool) {
    let tid = current_tid();
    // Inside an ext4 writepages call the folio is that call's (it counts
    // it in folios_written, or is left out of the sample): never a second
    // call.
    if in_ext4_call(tid) {
        return;
    }
    let key = inode_key::<Typed>(inode);
    let now = now_ns();
    let bucket = log2_bucket(pages, FOLIO_HIST_BUCKETS as u32 - 1) as usize;
    // The thread's entry, if it has one: a call that goes on takes the
    // folio; one that does not is sent and the new call opened in its
    // place. Written in place, not removed and inserted again: under an
    // fsync storm every call's first folio did both, a hash remove and
    // insert, a third of the program's time (docs/bench-log/fsync-storm.md).
    // Userspace closing the entry as idle at the very moment a call opens
    // in it after a second's quiet reads a mix of the two calls, where a
    // remove and insert lost the new call and sent the old one twice.
    let entry = GENERIC.get_ptr_mut(&tid);
    if let Some(c) = entry {
        // SAFETY: this thread's own entry; only this thread writes it
        // (userspace removes only entries idle for a second).
        let open = unsafe { &mut *c };
        if continues(open, &key, &wbc, may_rise) {
            open.pages += pages;
            open.folios += 1;
            if let Some(n) = open.folio_hist.get_mut(bucket) {
                *n += 1;
            }
            open.last_ns = now;
            open.last_end = pos + ((pages as i64) << (page_shift() & 63));
            if let Some(w) = wbc {
                open.nr_last = w.nr_to_write;
            }
            return;
        }
        emit(c, boundary::NEXT_CALL);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if filtered_out(key.dev, key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
        bump(stat::FILTERED);
        if entry.is_some() {
            // Sent above: userspace must not close it again.
            let _ = GENERIC.remove(&tid);
        }
        return;
    }
    // The thread's first call (or its first since its entry was closed)
    // is built in this CPU's scratch slot and inserted.
    let target = match entry {
        Some(c) => c,
        None => match GENERIC_SCRATCH.get_ptr_mut(slot) {
            Some(scratch) => scratch,
            None => return,
        },
    };
    // SAFETY: the thread's own entry, or this CPU's slot of the calling
    // program, which the kernel does not run twice at once on one CPU
    // (main.rs, "Per-CPU state and preemption").
    let c = unsafe { &mut *target };
    let w = wbc.unwrap_or(WbcSeen {
        tid: 0,
        sync_mode: 0,
        flags: 0,
        _pad: 0,
        wbc: 0,
        nr_to_write: 0,
        range_start: 0,
        range_end: 0,
    });
    let mut flags = w.flags;
    if wbc.is_some() {
        flags |= gf::WBC_SEEN;
    }
    open::<Typed>(
        c,
        &key,
        &w,
        flags,
        now,
        pid_tgid,
        cgroup_id,
        writeback_index(inode),
    );
    c.first_pos = pos;
    c.last_end = pos + ((pages as i64) << (page_shift() & 63));
    c.pages = pages;
    c.folios = 1;
    if let Some(n) = c.folio_hist.get_mut(bucket) {
        *n = 1;
    }
    if entry.is_none() && GENERIC.insert(&tid, &*c, 0).is_err() {
        bump(stat::INFLIGHT_FULL);
    }
}

/// Cause as for ext4 (writepages.rs): WB_SYNC_ALL, then for_kupdate,
/// then the flusher work this thread runs, else a direct caller; unknown
/// when the `wbc` was not seen.
#[inline(always)]
pub(crate) fn cause_of(flags: u32, sync_mode: u32, work: Option<FlusherWork>) -> u32 {
    let seen = flags & gf::WBC_SEEN != 0;
    let background = flags & gf::FOR_BACKGROUND != 0 || work.is_some_and(|w| w.for_background != 0);
    match work {
        _ if seen && sync_mode == 1 => cause::SYNC,
        _ if flags & gf::FOR_KUPDATE != 0 => cause::PERIODIC,
        _ if background => cause::BACKGROUND,
        Some(_) => cause::FLUSHER_OTHER,
        None if seen => cause::DIRECT,
        None => cause::UNKNOWN,
    }
}

/// Fills every field of `c` for a call the current thread opens `now` on
/// `key` with `wbc` (zeros where the call has not seen it) and `flags`:
/// the one initialiser of the function hooks (hook.rs) and the per-folio
/// path, which then set their own counters and boundary. Reads the
/// thread's run clock for the on-CPU time where the kernel gives it
/// (`cpu_time::TASK_RUNTIME`, as for ext4's calls).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn open<A: Access>(
    c: &mut GenericCall,
    key: &InflightKey,
    w: &WbcSeen,
    mut flags: u32,
    now: u64,
    pid_tgid: u64,
    cgroup_id: u64,
    writeback_index_before: u64,
) {
    let tid = pid_tgid as u32;
    // Only a flusher thread has a WORK entry to find (in_call.rs).
    let work = if in_flusher_work(tid) {
        // SAFETY: copied out at once.
        unsafe { WORK.get(&tid) }.copied()
    } else {
        None
    };
    let mut start_ns = now;
    if CONFIG.get(0).copied() == Some(cpu_time::TASK_RUNTIME) {
        let (run, at) = run_clock_at::<A>();
        start_ns = at;
        c.start_cpu = run.cpu;
        c.run_start = run.sum;
        c.exec_start = run.exec_start;
        c.uncounted_start = run.uncounted;
        flags |= gf::RUN_CLOCK;
    } else {
        c.start_cpu = 0;
        c.run_start = 0;
        c.exec_start = 0;
        c.uncounted_start = 0;
    }
    c.kind = GENERIC_CALL_KIND;
    c.dev = key.dev;
    c.ino = key.ino;
    c.wbc = w.wbc;
    c.start_ns = start_ns;
    c.last_ns = now;
    c.end_ns = 0;
    c.cgroup_id = cgroup_id;
    c.nr_to_write = w.nr_to_write;
    c.nr_last = w.nr_to_write;
    c.nr_left = 0;
    c.range_start = w.range_start;
    c.range_end = w.range_end;
    c.writeback_index_before = writeback_index_before;
    c.writeback_index_after = 0;
    c.first_pos = 0;
    c.last_end = 0;
    c.pages = 0;
    c.tgid = (pid_tgid >> 32) as u32;
    c.tid = tid;
    c.sync_mode = w.sync_mode;
    c.flags = flags;
    c.cause = cause_of(flags, w.sync_mode, work);
    c.work_reason = work.map(|w| w.reason).unwrap_or(0);
    c.folios = 0;
    c.boundary = 0;
    c.folio_hist = [0; FOLIO_HIST_BUCKETS];
    c.comm = A::current_comm();
    c.ret = 0;
    c.offcpu_ns = 0;
    // Every field set above: adding one to GenericCall fails to compile
    // here until it is (no code is generated for this).
    let GenericCall {
        kind: _,
        dev: _,
        ino: _,
        wbc: _,
        start_ns: _,
        last_ns: _,
        end_ns: _,
        cgroup_id: _,
        nr_to_write: _,
        nr_last: _,
        nr_left: _,
        range_start: _,
        range_end: _,
        writeback_index_before: _,
        writeback_index_after: _,
        first_pos: _,
        last_end: _,
        pages: _,
        tgid: _,
        tid: _,
        sync_mode: _,
        flags: _,
        cause: _,
        work_reason: _,
        folios: _,
        boundary: _,
        folio_hist: _,
        comm: _,
        ret: _,
        start_cpu: _,
        run_start: _,
        exec_start: _,
        uncounted_start: _,
        offcpu_ns: _,
    } = c;
}

/// The call ends now on its own thread: its end (`end_ns`, read again
/// here) and the time it spent switched out since it opened, where the
/// run clock was read then, as of one moment.
#[inline(always)]
pub(crate) fn close_clock<A: Access>(c: &mut GenericCall) {
    if c.flags & gf::RUN_CLOCK == 0 {
        return;
    }
    let start = RunClock {
        sum: c.run_start,
        exec_start: c.exec_start,
        uncounted: c.uncounted_start,
        cpu: c.start_cpu,
    };
    // The end as of the run clock's reading (sched.rs `run_clock_at`).
    let (end, now) = run_clock_at::<A>();
    c.end_ns = now;
    c.offcpu_ns = off_cpu_ns(&start, &end, c.end_ns.saturating_sub(c.start_ns));
    c.flags |= gf::OFF_CPU;
}

#[inline(always)]
fn page_shift() -> u32 {
    // SAFETY: .rodata global, see read::field.
    unsafe { core::ptr::read_volatile(&FOLIO_MEMBERS.page_shift) }
}

/// `tp_btf/wbc_writepage`: TP_PROTO(struct writeback_control *wbc, struct
/// backing_dev_info *bdi) (include/trace/events/writeback.h), fired by
/// `writeback_get_folio()` for each folio `writeback_iter()` returns.
/// Only the `wbc` is kept, for the per-folio event that names the inode.
#[btf_tracepoint(function = "wbc_writepage")]
pub fn generic_wbc_writepage(ctx: BtfTracePointContext) -> i32 {
    let tid = current_tid();
    if in_ext4_call(tid) {
        return 0;
    }
    let seen = read_wbc::<Typed>(raw_arg(&ctx, 0) as *const u8, tid);
    if let Some(slot) = WBC_SEEN.get_ptr_mut(0) {
        // The thread id last, after the fields, with no thread's id while
        // they change: a reader that finds its id before and after its
        // copy has the fields its own thread wrote, even when another
        // thread's run began on the CPU in between (PREEMPT_RT).
        // SAFETY: this CPU's slot, written by this program only, which the
        // kernel does not run twice at once on one CPU; volatile so that
        // the stores keep their order.
        unsafe {
            core::ptr::write_volatile(&raw mut (*slot).tid, 0);
            barrier();
            let tid_of_seen = seen.tid;
            *slot = WbcSeen { tid: 0, ..seen };
            barrier();
            core::ptr::write_volatile(&raw mut (*slot).tid, tid_of_seen);
        }
    }
    0
}

/// `tp_btf/iomap_writeback_folio`: TP_PROTO(struct inode *inode, loff_t
/// off, u64 len) (fs/iomap/trace.h, the range event class), fired by
/// `iomap_writeback_folio()` with `folio_pos()` and `folio_size()`.
#[btf_tracepoint(function = "iomap_writeback_folio")]
pub fn generic_iomap_folio(ctx: BtfTracePointContext) -> i32 {
    let inode = raw_arg(&ctx, 0) as *const u8;
    let pos = raw_arg(&ctx, 1) as i64;
    let len = raw_arg(&ctx, 2);
    let tid = current_tid();
    let mut wbc = None;
    if let Some(slot) = WBC_SEEN.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; the id read before and after the copy
        // (`generic_wbc_writepage` writes it last).
        unsafe {
            if core::ptr::read_volatile(&raw const (*slot).tid) == tid {
                barrier();
                let copy = *slot;
                barrier();
                if core::ptr::read_volatile(&raw const (*slot).tid) == tid {
                    wbc = Some(copy);
                    core::ptr::write_volatile(&raw mut (*slot).tid, 0);
                }
            }
        }
    }
    folio(
        scratch::IOMAP,
        inode,
        wbc,
        len >> (page_shift() & 63),
        pos,
        false,
    );
    0
}

/// Pages of a folio: 1 unless `PG_head` is set, then `_nr_pages`
/// (`folio_nr_pages()`, include/linux/mm.h).
#[inline(always)]
fn folio_pages(folio: *const u8) -> u64 {
    let f = &FOLIO_MEMBERS;
    // SAFETY: .rodata global, see read::field.
    let head_bit = unsafe { core::ptr::read_volatile(&f.head_bit) };
    let flags = <Typed as crate::read::Access>::scalar(folio, &f.flags) as u64;
    if head_bit >= 64 || flags & (1u64 << (head_bit & 63)) == 0 {
        return 1;
    }
    let n = <Typed as crate::read::Access>::scalar(folio, &f.nr_pages) as u64;
    if n == 0 { 1 } else { n }
}

/// `tp_btf/extent_writepage`: TP_PROTO(const struct folio *folio, const
/// struct inode *inode, const struct writeback_control *wbc)
/// (include/trace/events/btrfs.h), at the top of btrfs'
/// `extent_writepage()`, before the budget is taken down by one.
#[btf_tracepoint(function = "extent_writepage")]
pub fn generic_btrfs_folio(ctx: BtfTracePointContext) -> i32 {
    let folio_ptr = raw_arg(&ctx, 0) as *const u8;
    let inode = raw_arg(&ctx, 1) as *const u8;
    let wbc = read_wbc::<Typed>(raw_arg(&ctx, 2) as *const u8, current_tid());
    let index = <Typed as crate::read::Access>::scalar(folio_ptr, &FOLIO_MEMBERS.index);
    let pos = index << (page_shift() & 63);
    folio(
        scratch::BTRFS,
        inode,
        Some(wbc),
        folio_pages(folio_ptr),
        pos,
        true,
    );
    0
}

/// `tp_btf/writeback_single_inode`: TP_PROTO(struct inode *inode, struct
/// writeback_control *wbc, unsigned long nr_to_write), at the end of
/// `__writeback_single_inode()` (fs/fs-writeback.c): the thread's
/// writepages call of this pass is over.
#[btf_tracepoint(function = "writeback_single_inode")]
pub fn generic_pass_end(ctx: BtfTracePointContext) -> i32 {
    let tid = current_tid();
    let Some(c) = GENERIC.get_ptr_mut(&tid) else {
        return 0;
    };
    let inode = raw_arg(&ctx, 0) as *const u8;
    let wbc = raw_arg(&ctx, 1) as *const u8;
    let key = inode_key::<Typed>(inode);
    // SAFETY: this thread's own entry.
    let open = unsafe { &mut *c };
    open.end_ns = now_ns();
    if open.dev == key.dev && open.ino == key.ino {
        open.writeback_index_after = writeback_index(inode);
        if open.wbc == wbc as u64 {
            open.nr_left = member::<Typed>(wbc, &KERNEL_MEMBERS, m::WBC_NR_TO_WRITE);
            open.flags |= gf::FINAL_BUDGET;
        }
    }
    close_clock::<Typed>(open);
    emit(c, boundary::PASS_END);
    let _ = GENERIC.remove(&tid);
    0
}
