//! The writepages-call concept: start and end of one call, joined by
//! (inode, thread, device), with a cause and a filter. Two front ends
//! feed the same join: classic tracepoints (fields through tracefs
//! layouts) and BTF tracepoints (struct members through BTF offsets).
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, PerCpuArray},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RawTracePointContext,
        RetProbeContext, TracePointContext,
    },
};
use writeback_common::{
    BatchState, CALL_BATCH, CALL_SLOTS, CallBatch, CurrentCall, Filter, InflightCall, InflightKey,
    RunClock, TracepointLayout, WritepagesCall, agg, call_flags, cause, cpu_time,
    fields::{writepages as wp, writepages_result as wpr},
    members as m, off_cpu_ns, record_kind, sampling, stat,
};

use crate::{
    AGG, CONFIG, CURRENT, EVENTS, FILTER, OFFCPU_SINCE, WORK, add,
    batch::{self, Batch},
    bump,
    in_call::{
        EXT4_CALL_ENDED, IN_EXT4_CALL, SAMPLED_OUT_CALL, call_byte, in_call, in_flusher_work,
        set_call_byte,
    },
    members::KERNEL_MEMBERS,
    read::{Access, Probed, Typed, current_tid, field, member, member_ptr, now_ns, raw_arg},
    sched::run_clock_at,
};

/// Layout of `ext4:ext4_writepages` (or `ext4_da_writepages`).
#[unsafe(no_mangle)]
static WRITEPAGES_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Layout of `ext4:ext4_writepages_result` (or `ext4_da_writepages_result`).
#[unsafe(no_mangle)]
static WRITEPAGES_RESULT_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Start-side values, whichever hook read them. Filled field by field in
/// a per-CPU slot ([`START`]), not built on the stack: held in registers
/// across the member reads and map lookups, a dozen values spilled to
/// their own stack slots and took the kprobe program's frame to 496 bytes,
/// past 6.1's 512-byte limit with the 8-byte frame of `read::read_u64`
/// ("combined stack size of 2 calls is 544", vm-test 6.1).
#[derive(Clone, Copy)]
struct Start {
    key: InflightKey,
    nr_to_write: i64,
    pages_skipped: i64,
    range_start: i64,
    range_end: i64,
    writeback_index: u64,
    sync_mode: i64,
    for_kupdate: bool,
    range_cyclic: bool,
    /// `Some` when the hook can read `wbc->for_background` itself.
    for_background: Option<bool>,
    /// A function hook: its end sees `wbc->nr_to_write` left, not the
    /// pages written, so a call left out of the sample keeps its
    /// `nr_to_write` in [`SAMPLED_NR`] for its end.
    function_hook: bool,
}

/// This CPU's [`Start`] being filled.
#[map]
static START: PerCpuArray<Start> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's [`START`] slot.
#[inline(always)]
fn start_slot() -> Option<&'static mut Start> {
    // SAFETY: this CPU's slot; no other program runs on it meanwhile.
    START.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// End-side values.
struct End {
    key: InflightKey,
    /// As the hook reports it; see `nr_to_write_left`.
    pages_written: i64,
    /// Function-exit hooks see `wbc->nr_to_write` after the call instead:
    /// pages written is then the budget consumed, exactly what
    /// `ext4_writepages_result` reports (`nr_to_write - wbc->nr_to_write`).
    nr_to_write_left: Option<i64>,
    /// Function-exit hooks: `wbc->range_start` and `range_end` now, which
    /// ext4 leaves as they were at the start (fs/ext4/inode.c). Checked
    /// against the start's: with its end and the next call's start both
    /// skipped by the kernel (a program's recursion guard, hit on
    /// PREEMPT_RT), a call's end would otherwise take the call before's
    /// start, and pages written from its `nr_to_write`.
    range_start: i64,
    range_end: i64,
    pages_skipped: i64,
    writeback_index: u64,
    ret: i32,
    sync_mode: u32,
}

/// True when the in-kernel filters drop this call.
#[inline(always)]
pub(crate) fn filtered_out(dev: u32, ino: u64, tgid: u32, cgroup_id: u64) -> bool {
    // SAFETY: .rodata global, see read::field.
    let f: Filter = unsafe { core::ptr::read_volatile(&FILTER) };
    (f.dev != 0 && f.dev != dev)
        || (f.ino != 0 && f.ino != ino)
        // --pid/--cgroup also keep the writeback of inodes the process or
        // cgroup dirtied, whoever makes it (dirtier.rs).
        || (((f.tgid != 0 && f.tgid != tgid) || (f.cgroup_id != 0 && f.cgroup_id != cgroup_id))
            && !crate::dirtier::dirtied_by_filter(dev, ino))
}

/// Whether the `--cgroup` filter is set.
#[inline(always)]
fn cgroup_filtered() -> bool {
    // SAFETY: .rodata global, see read::field.
    unsafe { core::ptr::read_volatile(&FILTER.cgroup_id) != 0 }
}

/// `A` reads the calling thread's run time (the hook's own access for
/// function hooks and tp_btf; classic tracepoints read through the helper).
#[inline(always)]
fn begin<A: Access>(s: &Start) -> Result<u32, u32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    // The start keeps no cgroup (the end records it): read only for the
    // `--cgroup` filter, four dependent loads from the task saved.
    let cgroup_id = if cgroup_filtered() {
        A::current_cgroup_id()
    } else {
        0
    };
    if filtered_out(s.key.dev, s.key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
        bump(stat::FILTERED);
        return Ok(0);
    }
    let mut flags = call_flags::START_SEEN;
    // The CPU budget's call sample (`sampling::CALLS`): a call not drawn
    // is marked in its thread's IN_CALL byte and only counted at its end
    // (`sampled_out_end`), so it costs a draw here instead of the
    // in-flight entries, clock reads and record below.
    let shift = crate::sampling_shift(sampling::CALLS);
    if !crate::drawn(shift) {
        if s.function_hook {
            if SAMPLED_NR.insert(&s.key.tid, &s.nr_to_write, 0).is_err() {
                bump(stat::MAP_FULL);
            }
        }
        set_call_byte(s.key.tid, SAMPLED_OUT_CALL);
        return Ok(0);
    }
    if shift != 0 {
        flags |= call_flags::SAMPLED;
    }
    if s.for_kupdate {
        flags |= call_flags::FOR_KUPDATE;
    }
    if s.range_cyclic {
        flags |= call_flags::RANGE_CYCLIC;
    }
    let cpu_method = CONFIG.get(0).copied().unwrap_or(cpu_time::OFF);
    if cpu_method != cpu_time::OFF {
        flags |= call_flags::CPU_TRACKED;
    }
    if cpu_method == cpu_time::SCHED_SWITCH {
        // A total left by a call whose end was not seen is not this
        // call's (sched.rs adds to it while the thread is switched out).
        let _ = OFFCPU_SINCE.remove(&s.key.tid);
    }
    // Cause, most specific first: WB_SYNC_ALL is a sync whoever asks;
    // for_kupdate is periodic; otherwise the flusher work this thread runs
    // (writeback_start..writeback_written) says background or why; outside
    // flusher work a WB_SYNC_NONE call was made directly by its caller.
    // Plain values, not an Option held across the code below: with the
    // start values in a map slot the match is no longer folded, and LLVM
    // spilled the `None` case's undefined payload, which 6.1's verifier
    // refuses ("R4 !read_ok").
    // Only a flusher thread has a WORK entry to find (in_call.rs).
    let work = if in_flusher_work(s.key.tid) {
        // SAFETY: the value is read at once.
        unsafe { WORK.get(&s.key.tid) }
    } else {
        None
    };
    let (in_work, work_background, work_reason) = match work {
        Some(w) => (true, w.for_background != 0, w.reason),
        None => (false, false, 0),
    };
    let background = match s.for_background {
        Some(b) => b,
        None => work_background,
    };
    if background {
        flags |= call_flags::FOR_BACKGROUND;
    }
    let call_cause = if s.sync_mode == 1 {
        cause::SYNC
    } else if s.for_kupdate {
        cause::PERIODIC
    } else if background {
        cause::BACKGROUND
    } else if in_work {
        cause::FLUSHER_OTHER
    } else {
        cause::DIRECT
    };
    // Written in place, in the thread's entry (made at its first call).
    let Some(slot) = thread_call(s.key.tid, true) else {
        // No log line here: aya-log's formatting code multiplies the
        // paths 6.1's verifier walks past its 1M-instruction limit. The
        // counter is printed in every summary.
        bump(stat::INFLIGHT_FULL);
        return Err(0);
    };
    let call = &mut slot.call;
    let (run, start_ns) = if cpu_method == cpu_time::TASK_RUNTIME {
        let (run, now) = run_clock_at::<A>();
        (Some(run), now)
    } else {
        (None, now_ns())
    };
    call.start_ns = start_ns;
    call.cpu_method = cpu_method;
    call.start_cpu = run.as_ref().map_or(0, |r| r.cpu);
    call.run_start = run.as_ref().map_or(0, |r| r.sum);
    call.exec_start = run.as_ref().map_or(0, |r| r.exec_start);
    call.uncounted_start = run.as_ref().map_or(0, |r| r.uncounted);
    call.nr_to_write = s.nr_to_write;
    call.pages_skipped = s.pages_skipped;
    call.range_start = s.range_start;
    call.range_end = s.range_end;
    call.writeback_index = s.writeback_index;
    call.flags = flags;
    call.cause = call_cause;
    call.work_reason = work_reason;
    // The counters the call's hooks add to start at zero. Volatile
    // stores: LLVM merges plain zero stores (or `..Default::default()`)
    // into calls of compiler_builtins' memset, BPF-to-BPF calls with a
    // frame of their own on top of the program's.
    zero(&mut call.scan_first_pos);
    zero(&mut call.folios_written);
    // Every field set above: adding one to InflightCall fails to compile
    // here until it is (no code is generated for this).
    let InflightCall {
        start_ns: _,
        nr_to_write: _,
        pages_skipped: _,
        range_start: _,
        range_end: _,
        writeback_index: _,
        scan_first_pos: _,
        flags: _,
        cause: _,
        work_reason: _,
        folios_written: _,
        cpu_method: _,
        start_cpu: _,
        run_start: _,
        exec_start: _,
        uncounted_start: _,
    } = call;
    let current = &mut slot.current;
    current.key = s.key;
    zero(&mut current.bio_bytes);
    zero(&mut current.bios);
    zero(&mut current.scan_iterations);
    zero(&mut current.extents);
    zero(&mut current.extent_blocks);
    zero(&mut current.scan_bytes);
    zero(&mut current.scan_last_pos);
    zero(&mut current.scan_iter_start);
    let CurrentCall {
        key: _,
        bio_bytes: _,
        bios: _,
        scan_iterations: _,
        extents: _,
        extent_blocks: _,
        scan_bytes: _,
        scan_last_pos: _,
        scan_iter_start: _,
    } = current;
    // Last: the hooks inside the call read the entry once this says so.
    mark_in_call(s.key.tid, true);
    Ok(0)
}

/// The current thread's (`tid`'s) call state: its slot in [`SLOTS`] if
/// the slot is the thread's, else its `CURRENT` entry; with `create` (a
/// call's start), the slot taken when no other thread's call holds it,
/// else the entry made at the thread's first call. Only the thread writes
/// either.
#[inline(always)]
pub(crate) fn thread_call(tid: u32, create: bool) -> Option<&'static mut ThreadCall> {
    if let Some(slot) = own_slot(tid, create) {
        // SAFETY: a live map value this thread holds.
        return Some(unsafe { &mut (*slot).call });
    }
    let zeros = || NO_START.get_ptr(0);
    // SAFETY: the thread's own entry, live for the program's run.
    CURRENT
        .current(tid, create, zeros)
        .map(|p| unsafe { &mut *p })
}

/// A thread's call state in a plain array, direct-mapped by thread id, in
/// front of `CURRENT`: an array lookup is a bounds check and an add that
/// the verifier inlines, where a task-storage lookup is a helper call
/// through the task's storage pointer and cache (kernel/bpf/
/// bpf_local_storage.c), about 140 ns of a 500 ns call start under an
/// fsync storm here (docs/bench-log/fsync-storm.md). Two threads whose
/// ids share the low bits take turns: a slot another thread's call holds
/// sends a call to `CURRENT` instead.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CallSlot {
    /// The thread the slot is for (its id in the low 32 bits), with
    /// [`CLAIM_BUSY`] while that thread's call is in flight; 0 for a slot
    /// never taken (thread 0 is the idle task, which makes no calls).
    claim: u64,
    call: ThreadCall,
    /// To 192 bytes, three cache lines: neighbouring slots belong to
    /// threads with neighbouring ids, often running on other CPUs.
    _pad: [u64; 2],
}

/// The bit of a slot's claim set while its thread's call is in flight.
const CLAIM_BUSY: u64 = 1 << 32;

#[map]
static SLOTS: Array<CallSlot> = Array::with_max_entries(CALL_SLOTS, 0);

/// The slot for `tid`, whoever holds it; `None` before 5.12, where the
/// slots are not used (see [`own_slot`]).
#[inline(always)]
fn slot_of(tid: u32) -> Option<*mut CallSlot> {
    if !crate::task_local::task_storage() {
        return None;
    }
    SLOTS.get_ptr_mut(tid & (CALL_SLOTS - 1))
}

/// `tid`'s slot, if the thread holds it; with `create`, taken if free
/// (no call in flight in it) with a compare-and-exchange, as two threads
/// sharing a slot may start calls on two CPUs at once. Only where the
/// kernel has BPF_CMPXCHG (Linux 5.12, the release that gave tracing
/// programs task storage: [`crate::task_local::task_storage`]); before,
/// the loader rewrites the instruction, never reached (crates/tracer
/// object.rs).
#[inline(always)]
fn own_slot(tid: u32, create: bool) -> Option<*mut CallSlot> {
    let slot = slot_of(tid)?;
    // SAFETY: a live map value; the claim is read once.
    let claim_at = unsafe { core::ptr::addr_of_mut!((*slot).claim) };
    let claim = unsafe { core::ptr::read_volatile(claim_at) };
    let ours = claim as u32 == tid;
    if !create {
        return ours.then_some(slot);
    }
    let wanted = u64::from(tid) | CLAIM_BUSY;
    if (ours || claim & CLAIM_BUSY == 0) && crate::cmpxchg(claim_at, claim, wanted) == claim {
        return Some(slot);
    }
    bump(stat::SLOT_BUSY);
    None
}

/// Frees `tid`'s slot for other threads once its call ended: a plain
/// store, as no other thread writes a busy slot.
#[inline(always)]
fn release_slot(tid: u32) {
    let Some(slot) = slot_of(tid) else {
        return;
    };
    // SAFETY: a live map value.
    unsafe {
        let claim_at = core::ptr::addr_of_mut!((*slot).claim);
        if core::ptr::read_volatile(claim_at) == u64::from(tid) | CLAIM_BUSY {
            core::ptr::write_volatile(claim_at, u64::from(tid));
        }
    }
}

/// The state of the ext4 call a thread is inside (its `CURRENT` entry):
/// what the hooks inside it count, then its start-side values. `current`
/// comes first, so a pointer to it is a pointer to the whole
/// ([`in_flight`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ThreadCall {
    current: CurrentCall,
    call: InflightCall,
}

impl ThreadCall {
    /// The call's inode number.
    #[inline(always)]
    pub fn inode(&self) -> u64 {
        self.current.key.ino
    }
}

/// The start-side values of the call whose counters `current` points to.
#[inline(always)]
pub fn in_flight(current: *mut CurrentCall) -> *mut InflightCall {
    // SAFETY: every `*mut CurrentCall` handed out here ([`call_of`],
    // [`current_entry`]) points to the first field of a `ThreadCall` in
    // `CURRENT` (repr(C)), so the cast and the field offset stay inside
    // that map value.
    unsafe { core::ptr::addr_of_mut!((*current.cast::<ThreadCall>()).call) }
}

/// The `CURRENT` entry of the call `key` names, if it is the one its
/// thread is inside: for hooks that know the inode as well as the thread.
#[inline(always)]
pub fn call_of(key: &InflightKey) -> Option<*mut CurrentCall> {
    if !in_call(key.tid) {
        return None;
    }
    let call = thread_call(key.tid, false)?;
    (call.current.key == *key).then(|| core::ptr::addr_of_mut!(call.current))
}

/// A store of zero the compiler cannot merge with its neighbours.
#[inline(always)]
fn zero<T: Default>(field: &mut T) {
    // SAFETY: a valid, aligned, exclusive reference.
    unsafe { core::ptr::write_volatile(field, T::default()) }
}

/// The end of a call the sample left out: its pages and itself counted
/// in `agg`, the thread's byte set as any ended ext4 call's (hook.rs).
#[inline(always)]
fn sampled_out_end(e: &End) -> u32 {
    let tid = e.key.tid;
    set_call_byte(tid, EXT4_CALL_ENDED);
    let pages = match e.nr_to_write_left {
        Some(left) => {
            // SAFETY: the value is copied out at once.
            let asked = unsafe { SAMPLED_NR.get(&tid) }.copied();
            let _ = SAMPLED_NR.remove(&tid);
            asked.map_or(0, |n| n - left)
        }
        None => e.pages_written,
    };
    add(&AGG, agg::CALLS_SAMPLED_OUT, 1);
    add(&AGG, agg::PAGES_SAMPLED_OUT, pages.max(0) as u64);
    0
}

#[inline(always)]
fn finish<A: Access>(e: End) -> Result<u32, u32> {
    let tid = e.key.tid;
    let result = end_call::<A>(e);
    // Last: another thread may take the slot once it is free.
    release_slot(tid);
    result
}

/// A call's wall time, 0 when its start was not seen.
#[inline(always)]
fn duration(start_ns: u64, now: u64) -> u64 {
    if start_ns != 0 {
        now.saturating_sub(start_ns)
    } else {
        0
    }
}

#[inline(always)]
fn end_call<A: Access>(e: End) -> Result<u32, u32> {
    if call_byte(e.key.tid) == SAMPLED_OUT_CALL {
        return Ok(sampled_out_end(&e));
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = e.key;
    let cgroup_id = A::current_cgroup_id();
    // The thread's entry, if it holds this call: its IN_CALL byte says a
    // call drawn into the sample started (a start the kernel skipped
    // leaves the byte of the thread's call before, ended), and the key is
    // this call's. The entry stays for the thread's next call, so it is
    // read in place; a call without one reads [`NO_START`]'s zeros. No
    // copy on the stack: an `Option` of one left bytes the 5.10 verifier
    // saw read uninitialised ("invalid read from stack", vm-test 5.10).
    let found = call_of(&key)
        .map(|c| c.cast::<ThreadCall>().cast_const())
        .filter(|t| {
            // SAFETY: a live map value, as below.
            let start = unsafe { &(**t).call };
            e.nr_to_write_left.is_none()
                || (start.range_start == e.range_start && start.range_end == e.range_end)
        });
    let matched = found.is_some();
    let Some(t) = found.or_else(|| NO_START.get_ptr(0)) else {
        return Err(0);
    };
    // SAFETY: a live map value: this thread's own entry (only the thread
    // writes it) or the zeros nobody writes.
    let (start, counted) = unsafe { (&(*t).call, &(*t).current) };
    // The end's clock, and the call's time off the CPU: from the run
    // clock where the start read one, else from the context switches'
    // count (sched.rs), taken with its entry. One branch on the method:
    // with a second one after it, a build of this program had LLVM test
    // the same spilled value twice, and the verifier, which keeps no "not
    // equal" of a value, walked the path the first test had ruled out,
    // where the register LLVM knew held the run clock held a pointer
    // ("math between map_value pointer and register with unbounded min
    // value").
    let (now, offcpu_ns) = if start.cpu_method == cpu_time::TASK_RUNTIME {
        let (end, now) = run_clock_at::<A>();
        mark_in_call(key.tid, false);
        let clock = RunClock {
            sum: start.run_start,
            exec_start: start.exec_start,
            uncounted: start.uncounted_start,
            cpu: start.start_cpu,
        };
        (now, off_cpu_ns(&clock, &end, duration(start.start_ns, now)))
    } else {
        let now = now_ns();
        mark_in_call(key.tid, false);
        let switched_out = if matched && start.cpu_method == cpu_time::SCHED_SWITCH {
            // SAFETY: the value is copied out at once.
            let total = unsafe { OFFCPU_SINCE.get(&key.tid) }.map_or(0, |o| o[1]);
            let _ = OFFCPU_SINCE.remove(&key.tid);
            total
        } else {
            0
        };
        (now, switched_out)
    };
    if !matched {
        if filtered_out(key.dev, key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
            return Ok(0);
        }
        bump(stat::UNMATCHED_RESULTS);
        // A function hook's end sees the budget left, not the pages
        // written: without its start there is no call to report.
        if e.nr_to_write_left.is_some() {
            return Ok(0);
        }
    }
    // A function hook's end reaches here only with its start (above).
    let pages_written = match e.nr_to_write_left {
        Some(left) => start.nr_to_write - left,
        None => e.pages_written,
    };

    let duration_ns = duration(start.start_ns, now);
    // Kept in this CPU's batch, sent eight to a ring record (batch.rs).
    let (Some(batch), Some(state)) = (CALL_BATCHES.get_ptr_mut(0), BATCH_STATE.get_ptr_mut(0))
    else {
        return Err(0);
    };
    // SAFETY: this CPU's values, written by programs on this CPU only;
    // the state's busy flag keeps a flush that interrupts this program
    // off the batch.
    let (batch, state) = unsafe { (&mut *batch, &mut *state) };
    let at = batch::begin::<CallBatch>(state);
    // SAFETY: `begin` gives a place in the batch.
    unsafe {
        batch.calls.as_mut_ptr().add(at).write(WritepagesCall {
            kind: record_kind::WRITEPAGES_CALL,
            dev: key.dev,
            ino: key.ino,
            start_ns: start.start_ns,
            duration_ns,
            offcpu_ns,
            cgroup_id,
            nr_to_write: start.nr_to_write,
            pages_written,
            pages_skipped_start: start.pages_skipped,
            pages_skipped_end: e.pages_skipped,
            range_start: start.range_start,
            range_end: start.range_end,
            writeback_index_before: start.writeback_index,
            writeback_index_after: e.writeback_index,
            scan_first_pos: start.scan_first_pos,
            scan_last_pos: counted.scan_last_pos,
            scan_bytes: counted.scan_bytes,
            extent_blocks: counted.extent_blocks as u64,
            bio_bytes: counted.bio_bytes,
            tgid: (pid_tgid >> 32) as u32,
            tid: key.tid,
            ret: e.ret,
            sync_mode: e.sync_mode,
            flags: start.flags,
            cause: start.cause,
            work_reason: start.work_reason,
            scan_iterations: counted.scan_iterations,
            extents: counted.extents,
            folios_written: start.folios_written,
            bios: counted.bios,
            _pad: 0,
            comm: A::current_comm(),
        })
    };
    batch::commit(batch, state, at);
    Ok(0)
}

/// This CPU's ext4 calls not yet sent (`writeback_common::CallBatch`).
#[map]
static CALL_BATCHES: PerCpuArray<CallBatch> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's call batch count and busy flag, read by userspace before
/// each drain to ask the CPUs that keep calls for them.
#[map]
static BATCH_STATE: PerCpuArray<BatchState> = PerCpuArray::with_max_entries(1, 0);

impl Batch for CallBatch {
    const N: usize = CALL_BATCH;

    /// One ring record, waking userspace once a quarter of the ring is
    /// used; calls a full ring refuses are counted lost.
    #[inline(always)]
    fn send(&mut self, count: u32) {
        self.kind = record_kind::CALL_BATCH;
        self.count = count;
        if EVENTS
            .output::<CallBatch>(self, crate::events_wakeup())
            .is_err()
        {
            crate::bump_by(stat::LOST_RECORDS, u64::from(count));
        }
    }
}

/// Sends this CPU's kept calls (batch.rs, `flush`). Never attached:
/// userspace runs it on each CPU that keeps calls before it drains the
/// ring and when it stops (`BPF_PROG_TEST_RUN` with
/// `BPF_F_TEST_RUN_ON_CPU`, which runs a raw tracepoint program on that
/// CPU: net/bpf/test_run.c, since 5.10), so that a CPU gone quiet does
/// not keep calls.
#[raw_tracepoint(tracepoint = "flush_call_batch")]
pub fn flush_call_batch(_ctx: RawTracePointContext) -> i32 {
    let (Some(batch), Some(state)) = (CALL_BATCHES.get_ptr_mut(0), BATCH_STATE.get_ptr_mut(0))
    else {
        return batch::FLUSHED;
    };
    // SAFETY: this CPU's values (batch.rs, `flush`).
    let (batch, state) = unsafe { (&mut *batch, &mut *state) };
    batch::flush(batch, state)
}

/// `ext4:ext4_writepages`, classic tracepoint.
#[tracepoint]
pub fn writepages_start(ctx: TracePointContext) -> u32 {
    let l = &WRITEPAGES_LAYOUT;
    let Some(s) = start_slot() else {
        return 0;
    };
    s.key = InflightKey {
        ino: field(&ctx, l, wp::INO) as u64,
        tid: current_tid(),
        dev: field(&ctx, l, wp::DEV) as u32,
    };
    s.nr_to_write = field(&ctx, l, wp::NR_TO_WRITE);
    s.pages_skipped = field(&ctx, l, wp::PAGES_SKIPPED);
    s.range_start = field(&ctx, l, wp::RANGE_START);
    s.range_end = field(&ctx, l, wp::RANGE_END);
    s.writeback_index = field(&ctx, l, wp::WRITEBACK_INDEX) as u64;
    s.sync_mode = field(&ctx, l, wp::SYNC_MODE);
    s.for_kupdate = field(&ctx, l, wp::FOR_KUPDATE) != 0;
    s.range_cyclic = field(&ctx, l, wp::RANGE_CYCLIC) != 0;
    // Not in the tracepoint: taken from the flusher work.
    s.for_background = None;
    s.function_hook = false;
    match begin::<Probed>(s) {
        Ok(r) | Err(r) => r,
    }
}

/// `ext4:ext4_writepages_result`, classic tracepoint.
#[tracepoint]
pub fn writepages_end(ctx: TracePointContext) -> u32 {
    let l = &WRITEPAGES_RESULT_LAYOUT;
    let end = End {
        key: InflightKey {
            ino: field(&ctx, l, wpr::INO) as u64,
            tid: current_tid(),
            dev: field(&ctx, l, wpr::DEV) as u32,
        },
        pages_written: field(&ctx, l, wpr::PAGES_WRITTEN),
        nr_to_write_left: None,
        range_start: 0,
        range_end: 0,
        pages_skipped: field(&ctx, l, wpr::PAGES_SKIPPED),
        writeback_index: field(&ctx, l, wpr::WRITEBACK_INDEX) as u64,
        ret: field(&ctx, l, wpr::RET) as i32,
        sync_mode: field(&ctx, l, wpr::SYNC_MODE) as u32,
    };
    match finish::<Probed>(end) {
        Ok(r) | Err(r) => r,
    }
}

/// (inode, device) of an inode pointer: `inode->i_ino`,
/// `inode->i_sb->s_dev`.
#[inline(always)]
pub(crate) fn inode_key<A: Access>(inode: *const u8) -> InflightKey {
    let k = &KERNEL_MEMBERS;
    let sb = member_ptr::<A>(inode, k, m::INODE_I_SB);
    InflightKey {
        ino: member::<A>(inode, k, m::INODE_I_INO) as u64,
        tid: current_tid(),
        dev: member::<A>(sb, k, m::SB_S_DEV) as u32,
    }
}

/// Start-side values read from a `struct writeback_control *`, into this
/// CPU's [`START`] slot.
#[inline(always)]
fn start_from_wbc<A: Access>(
    key: InflightKey,
    wbc: *const u8,
    writeback_index: u64,
    function_hook: bool,
) -> Option<&'static Start> {
    let k = &KERNEL_MEMBERS;
    let s = start_slot()?;
    s.key = key;
    s.function_hook = function_hook;
    s.writeback_index = writeback_index;
    s.nr_to_write = member::<A>(wbc, k, m::WBC_NR_TO_WRITE);
    s.pages_skipped = member::<A>(wbc, k, m::WBC_PAGES_SKIPPED);
    s.range_start = member::<A>(wbc, k, m::WBC_RANGE_START);
    s.range_end = member::<A>(wbc, k, m::WBC_RANGE_END);
    s.sync_mode = member::<A>(wbc, k, m::WBC_SYNC_MODE);
    s.for_kupdate = member::<A>(wbc, k, m::WBC_FOR_KUPDATE) != 0;
    s.range_cyclic = member::<A>(wbc, k, m::WBC_RANGE_CYCLIC) != 0;
    s.for_background = Some(member::<A>(wbc, k, m::WBC_FOR_BACKGROUND) != 0);
    Some(s)
}

/// `inode->i_mapping->writeback_index`.
#[inline(always)]
fn writeback_index<A: Access>(inode: *const u8) -> u64 {
    let k = &KERNEL_MEMBERS;
    let mapping = member_ptr::<A>(inode, k, m::INODE_I_MAPPING);
    member::<A>(mapping, k, m::MAPPING_WRITEBACK_INDEX) as u64
}

/// `tp_btf/ext4_writepages`: TP_PROTO(struct inode *inode, struct
/// writeback_control *wbc) in include/trace/events/ext4.h.
#[btf_tracepoint(function = "ext4_writepages")]
pub fn tp_btf_writepages_start(ctx: BtfTracePointContext) -> i32 {
    tracepoint_begin::<Typed>(raw_arg(&ctx, 0) as *const u8, raw_arg(&ctx, 1) as *const u8) as i32
}

/// `tp_btf/ext4_writepages_result`: TP_PROTO(struct inode *inode, struct
/// writeback_control *wbc, int ret, int pages_written).
#[btf_tracepoint(function = "ext4_writepages_result")]
pub fn tp_btf_writepages_end(ctx: BtfTracePointContext) -> i32 {
    tracepoint_end::<Typed>(
        raw_arg(&ctx, 0) as *const u8,
        raw_arg(&ctx, 1) as *const u8,
        raw_arg(&ctx, 2) as i32,
        raw_arg(&ctx, 3) as i32,
    ) as i32
}

/// `raw_tp/ext4_writepages`: the same arguments as the tp_btf program's,
/// read through `bpf_probe_read_kernel` at offsets from vmlinux' BTF.
/// Attached by name, it needs no BTF of the module that defines the
/// event (ext4 built as a module: `bpf_get_raw_tracepoint_module()`,
/// kernel/trace/bpf_trace.c, since 5.0), and like tp_btf it runs under
/// a guard of its own (`prog->active`, `__bpf_trace_run()`), not the
/// per-CPU `bpf_prog_active` a kprobe shares with the bpf() syscall's
/// map reads (`candidates` in crates/tracer/src/plan.rs).
#[raw_tracepoint(tracepoint = "ext4_writepages")]
pub fn raw_tp_writepages_start(ctx: RawTracePointContext) -> i32 {
    tracepoint_begin::<Probed>(raw_arg(&ctx, 0) as *const u8, raw_arg(&ctx, 1) as *const u8) as i32
}

/// `raw_tp/ext4_writepages_result`, as [`tp_btf_writepages_end`].
#[raw_tracepoint(tracepoint = "ext4_writepages_result")]
pub fn raw_tp_writepages_end(ctx: RawTracePointContext) -> i32 {
    tracepoint_end::<Probed>(
        raw_arg(&ctx, 0) as *const u8,
        raw_arg(&ctx, 1) as *const u8,
        raw_arg(&ctx, 2) as i32,
        raw_arg(&ctx, 3) as i32,
    ) as i32
}

/// A call's start from the `ext4_writepages` event's arguments.
#[inline(always)]
fn tracepoint_begin<A: Access>(inode: *const u8, wbc: *const u8) -> u32 {
    let Some(start) = start_from_wbc::<A>(
        inode_key::<A>(inode),
        wbc,
        writeback_index::<A>(inode),
        false,
    ) else {
        return 0;
    };
    match begin::<A>(start) {
        Ok(r) | Err(r) => r,
    }
}

/// A call's end from the `ext4_writepages_result` event's arguments.
#[inline(always)]
fn tracepoint_end<A: Access>(
    inode: *const u8,
    wbc: *const u8,
    ret: i32,
    pages_written: i32,
) -> u32 {
    let k = &KERNEL_MEMBERS;
    let end = End {
        key: inode_key::<A>(inode),
        pages_written: pages_written as i64,
        nr_to_write_left: None,
        range_start: 0,
        range_end: 0,
        pages_skipped: member::<A>(wbc, k, m::WBC_PAGES_SKIPPED),
        writeback_index: writeback_index::<A>(inode),
        ret,
        sync_mode: member::<A>(wbc, k, m::WBC_SYNC_MODE) as u32,
    };
    match finish::<A>(end) {
        Ok(r) | Err(r) => r,
    }
}

/// Start of `ext4_writepages(struct address_space *mapping, struct
/// writeback_control *wbc)` (fs/ext4/inode.c) seen from a function hook.
#[inline(always)]
fn function_begin<A: Access>(mapping: *const u8, wbc: *const u8) -> u32 {
    let k = &KERNEL_MEMBERS;
    let inode = member_ptr::<A>(mapping, k, m::MAPPING_HOST);
    let index = member::<A>(mapping, k, m::MAPPING_WRITEBACK_INDEX) as u64;
    let Some(start) = start_from_wbc::<A>(inode_key::<A>(inode), wbc, index, true) else {
        return 0;
    };
    match begin::<A>(start) {
        Ok(r) | Err(r) => r,
    }
}

/// End of `ext4_writepages()` seen from a function-exit hook.
#[inline(always)]
fn function_end<A: Access>(mapping: *const u8, wbc: *const u8, ret: i32) -> u32 {
    let k = &KERNEL_MEMBERS;
    let inode = member_ptr::<A>(mapping, k, m::MAPPING_HOST);
    let end = End {
        key: inode_key::<A>(inode),
        pages_written: 0,
        nr_to_write_left: Some(member::<A>(wbc, k, m::WBC_NR_TO_WRITE)),
        range_start: member::<A>(wbc, k, m::WBC_RANGE_START),
        range_end: member::<A>(wbc, k, m::WBC_RANGE_END),
        pages_skipped: member::<A>(wbc, k, m::WBC_PAGES_SKIPPED),
        writeback_index: member::<A>(mapping, k, m::MAPPING_WRITEBACK_INDEX) as u64,
        ret,
        sync_mode: member::<A>(wbc, k, m::WBC_SYNC_MODE) as u32,
    };
    match finish::<A>(end) {
        Ok(r) | Err(r) => r,
    }
}

#[fentry(function = "ext4_writepages")]
pub fn fentry_writepages(ctx: FEntryContext) -> u32 {
    function_begin::<Typed>(raw_arg(&ctx, 0) as *const u8, raw_arg(&ctx, 1) as *const u8)
}

/// fexit sees the arguments and, after them, the return value.
#[fexit(function = "ext4_writepages")]
pub fn fexit_writepages(ctx: FExitContext) -> u32 {
    let ret = raw_arg(&ctx, 2) as i32;
    function_end::<Typed>(
        raw_arg(&ctx, 0) as *const u8,
        raw_arg(&ctx, 1) as *const u8,
        ret,
    )
}

/// Zeros, never written: the start of a call whose start was not seen,
/// and the value a thread's first `CURRENT` entry is inserted with (its
/// fields are written after), off the 512-byte stack.
#[map]
static NO_START: Array<ThreadCall> = Array::with_max_entries(1, 0);

/// `nr_to_write` at the start of a function-hooked call the sample left
/// out, for its end ([`sampled_out_end`]).
#[map]
static SAMPLED_NR: HashMap<u32, i64> = HashMap::with_max_entries(16384, 0);

/// Arguments a kprobe saw, for its kretprobe (which sees none).
#[map]
static KPROBE_ARGS: HashMap<u32, [u64; 2]> = HashMap::with_max_entries(16384, 0);

#[kprobe]
pub fn kprobe_writepages(ctx: ProbeContext) -> u32 {
    let (Some(mapping), Some(wbc)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1)) else {
        return 0;
    };
    if KPROBE_ARGS
        .insert(&current_tid(), &[mapping, wbc], 0)
        .is_err()
    {
        bump(stat::MAP_FULL);
    }
    function_begin::<Probed>(mapping as *const u8, wbc as *const u8)
}

#[kretprobe]
pub fn kretprobe_writepages(ctx: RetProbeContext) -> u32 {
    let tid = current_tid();
    // SAFETY: value copied out at once.
    let Some([mapping, wbc]) = (unsafe { KPROBE_ARGS.get(&tid) }).copied() else {
        return 0;
    };
    let _ = KPROBE_ARGS.remove(&tid);
    let ret: i64 = ctx.ret();
    function_end::<Probed>(mapping as *const u8, wbc as *const u8, ret as i32)
}

/// The in-flight call of the current thread, if any (for hooks inside a
/// call that know the thread only).
#[inline(always)]
pub fn current_call() -> Option<*mut InflightCall> {
    current_entry().map(in_flight)
}

/// The current thread's `CURRENT` entry while it is inside a call: an
/// array load (its IN_CALL byte) for a thread outside one, which is what
/// the per-bio and per-folio hooks mostly hear, and one lookup inside.
#[inline(always)]
pub fn current_entry() -> Option<*mut CurrentCall> {
    let tid = current_tid();
    if !in_call(tid) {
        return None;
    }
    let t = thread_call(tid, false)?;
    Some(core::ptr::addr_of_mut!(t.current))
}

/// Marks `tid` inside an ext4 call, or its call as ended: the
/// `do_writepages()` hook around it (hook.rs) then knows that ext4's own
/// record has the call and emits none of its own.
#[inline(always)]
fn mark_in_call(tid: u32, on: bool) {
    set_call_byte(tid, if on { IN_EXT4_CALL } else { EXT4_CALL_ENDED });
}
