//! Flusher work, inode passes, dirty state and throttling: counters and
//! levels added up in maps for userspace's interval lines.
use aya_ebpf::{
    EbpfContext,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_jiffies64,
    },
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use aya_log_ebpf::warn;
use writeback_common::{
    DevCounterKey, FlusherWork, PausedBy, TracepointLayout, agg, dirty,
    fields::{balance_dirty as bd, single_inode as si, wb_work},
    global_thresh, inode_pass as ip, log2_bucket, members as m, stat, write_domain,
};

use crate::{
    AGG, DIRTY, GLOBAL_THRESH, INODE_PASS, THROTTLED, WORK, add, atomic_add, bump,
    in_call::set_flusher_work,
    members::KERNEL_MEMBERS,
    read::{Typed, current_tid, field, member, raw_arg},
    writepages::{filtered_out, inode_key},
};

#[unsafe(no_mangle)]
static WB_START_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static WB_WRITTEN_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SINGLE_INODE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static GLOBAL_DIRTY_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static BALANCE_DIRTY_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

#[inline(always)]
fn reason_slot(reason: i64) -> u32 {
    let r = reason as u32;
    if r < agg::WB_REASONS {
        r
    } else {
        agg::WB_REASONS - 1
    }
}

/// A `wb_reason` beyond the table (a kernel newer than wbscope): counted
/// in the last slot, and said in --log. A program of its own, rare and
/// small, because aya-log's formatting code is large.
#[inline(never)]
fn unknown_reason(ctx: &TracePointContext, reason: i64) {
    warn!(ctx, "writeback_start: unknown wb_reason {}", reason);
}

/// `writeback:writeback_start`: a flusher thread starts a chunk of work;
/// remember its budget and reason for the calls it makes.
#[tracepoint]
pub fn wb_start(ctx: TracePointContext) -> u32 {
    let layout = &WB_START_LAYOUT;
    let reason = field(&ctx, layout, wb_work::REASON);
    if !(0..agg::WB_REASONS as i64).contains(&reason) {
        unknown_reason(&ctx, reason);
    }
    let work = FlusherWork {
        nr_pages: field(&ctx, layout, wb_work::NR_PAGES),
        reason: reason_slot(reason) + 1,
        for_background: field(&ctx, layout, wb_work::FOR_BACKGROUND) as u32,
    };
    let tid = current_tid();
    if WORK.insert(&tid, &work, 0).is_ok() {
        set_flusher_work(tid, true);
    }
    0
}

/// `writeback:writeback_written`: the chunk is done; pages written is the
/// budget consumed (start `nr_pages` minus remaining), not the raw field.
#[tracepoint]
pub fn wb_written(ctx: TracePointContext) -> u32 {
    let tid = current_tid();
    set_flusher_work(tid, false);
    // SAFETY: value copied out at once.
    let Some(work) = (unsafe { WORK.get(&tid) }).copied() else {
        return 0;
    };
    let _ = WORK.remove(&tid);
    let left = field(&ctx, &WB_WRITTEN_LAYOUT, wb_work::NR_PAGES);
    let slot = work.reason - 1;
    add(&AGG, agg::WORK_CHUNKS + slot, 1);
    let done = work.nr_pages - left;
    if done > 0 {
        add(&AGG, agg::WORK_PAGES + slot, done as u64);
    }
    0
}

/// A finite budget: not LONG_MAX ("everything": WB_SYNC_ALL and tagged
/// passes, `writeback_chunk_size()` in fs/fs-writeback.c) and not 0
/// (`sync_inode_metadata()`, the inode only).
#[inline(always)]
fn finite_budget(asked: i64) -> bool {
    asked > 0 && asked != i64::MAX
}

/// The system-wide inode-pass counters, whichever hook saw the pass.
#[inline(always)]
fn count_pass(asked: i64, wrote: u64) {
    add(&AGG, agg::INODE_PASSES, 1);
    if finite_budget(asked) {
        add(&AGG, agg::INODE_ASKED, asked as u64);
    }
    add(&AGG, agg::INODE_WROTE, wrote);
}

/// `writeback:writeback_single_inode`: one inode pass (any filesystem).
/// The record names the bdi, not the device: system-wide counters only.
#[tracepoint]
pub fn single_inode(ctx: TracePointContext) -> u32 {
    let layout = &SINGLE_INODE_LAYOUT;
    count_pass(
        field(&ctx, layout, si::NR_TO_WRITE),
        field(&ctx, layout, si::WROTE) as u64,
    );
    0
}

/// Adds `value` to counter `index` of device `dev` in `INODE_PASS`: an
/// atomic add to the shared value, or a `BPF_NOEXIST` insert, which a
/// racing first insert on another CPU makes fail, and then the add.
#[inline(always)]
fn dev_add(dev: u32, index: u32, value: u64) {
    let key = DevCounterKey { dev, index };
    if let Some(v) = INODE_PASS.get_ptr_mut(&key) {
        atomic_add(v, value);
    } else if INODE_PASS.insert(&key, &value, BPF_NOEXIST as u64).is_err() {
        match INODE_PASS.get_ptr_mut(&key) {
            Some(v) => atomic_add(v, value),
            None => bump(stat::MAP_FULL),
        }
    }
}

/// `tp_btf/writeback_single_inode`: TP_PROTO(struct inode *inode, struct
/// writeback_control *wbc, unsigned long nr_to_write) in
/// include/trace/events/writeback.h, fired at the end of
/// `__writeback_single_inode()` (fs/fs-writeback.c) with the budget the
/// pass started with; the tracepoint's `wrote` is `nr_to_write -
/// wbc->nr_to_write`. Seeing the inode gives the device, so the pass is
/// also added up per device, after the in-kernel filters.
#[btf_tracepoint(function = "writeback_single_inode")]
pub fn tp_btf_single_inode(ctx: BtfTracePointContext) -> i32 {
    let inode = raw_arg(&ctx, 0) as *const u8;
    let wbc = raw_arg(&ctx, 1) as *const u8;
    let asked = raw_arg(&ctx, 2) as i64;
    let left = member::<Typed>(wbc, &KERNEL_MEMBERS, m::WBC_NR_TO_WRITE);
    // Never negative in practice; clamped so a surprise cannot add 2^64.
    let wrote = asked.wrapping_sub(left).max(0) as u64;
    count_pass(asked, wrote);

    let key = inode_key::<Typed>(inode);
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if filtered_out(key.dev, key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
        return 0;
    }
    let bucket = log2_bucket(wrote, ip::HIST_BUCKETS - 1);
    dev_add(key.dev, ip::WROTE, wrote);
    if finite_budget(asked) {
        dev_add(key.dev, ip::BUDGET_ASKED, asked as u64);
        dev_add(key.dev, ip::BUDGET_WROTE, wrote);
        dev_add(key.dev, ip::WROTE_HIST + bucket, 1);
        let asked_bucket = log2_bucket(asked as u64, ip::HIST_BUCKETS - 1);
        dev_add(key.dev, ip::ASKED_HIST + asked_bucket, 1);
    } else {
        dev_add(key.dev, ip::UNBOUNDED_WROTE_HIST + bucket, 1);
    }
    0
}

/// The record's first [`dirty::RECORD_WORDS`] words after the common
/// header, loaded straight from the context: a tracepoint program may
/// load any aligned word of its record at a constant offset from 8
/// (`tp_prog_is_valid_access()` in kernel/trace/bpf_trace.c), and no
/// further: attaching refuses a program that loads past the record's end
/// (`max_ctx_offset` against the event's size in
/// `perf_event_attach_bpf_prog()`).
#[inline(always)]
fn record_words(ctx: &TracePointContext) -> [u64; dirty::RECORD_WORDS] {
    let p = ctx.as_ptr().cast::<u64>();
    // SAFETY: see above; offsets 8 to 56, each an immediate of the load.
    unsafe {
        [
            *p.add(1),
            *p.add(2),
            *p.add(3),
            *p.add(4),
            *p.add(5),
            *p.add(6),
            *p.add(7),
        ]
    }
}

/// `writeback:global_dirty_state`: keep the latest levels.
///
/// It fires on every `balance_dirty_pages()` call past the free-run
/// threshold, every flusher threshold check and every read of
/// /proc/vmstat (`global_dirty_limits()` in mm/page-writeback.c): 350 to
/// 1,000 times per GiB of the bench's write, mostly with this program's
/// code and maps evicted in between. So a run copies the record's words,
/// as the kernel has just written them, into `DIRTY` (stores, which do
/// not wait for the line) and reads nothing else: no helper call, no load
/// from a map, not even the layout (readers decode the words with it,
/// [`dirty::record_word`]). Decoding in place with the layout cost a
/// quarter more, and the earlier program, which loaded its last update
/// time from `DIRTY` to skip all but one update per 16 ticks, two thirds
/// more (`dd bs=1M count=1024`, five interleaved runs each: medians 384,
/// 480 and 635 ns; docs/bench-log/tracer-overhead.md).
#[tracepoint]
pub fn global_dirty(ctx: TracePointContext) -> u32 {
    let words = record_words(&ctx);
    let mut i = 0;
    while i < dirty::RECORD_WORDS {
        if let Some(slot) = DIRTY.get_ptr_mut(i as u32) {
            // SAFETY: plain store; a torn read by userspace of one level is
            // harmless (levels, not counters).
            unsafe { *slot = words[i] };
        }
        i += 1;
    }
    if let Some(updated) = DIRTY.get_ptr_mut(dirty::UPDATED_NS) {
        // SAFETY: plain helper call (inlined by the verifier) and store.
        unsafe { *updated = bpf_jiffies64() };
    }
    0
}

/// The global dirty threshold `index` ([`global_thresh`]), 0 until
/// userspace wrote it.
#[inline(always)]
fn global_threshold(index: u32) -> u64 {
    GLOBAL_THRESH.get(index).copied().unwrap_or(0)
}

/// `writeback:balance_dirty_pages`: a dirtier was checked against the
/// limits; `pause` > 0 means it is put to sleep for that many ms.
#[tracepoint]
pub fn balance_dirty(ctx: TracePointContext) -> u32 {
    add(&AGG, agg::THROTTLE_EVENTS, 1);
    let pause = field(&ctx, &BALANCE_DIRTY_LAYOUT, bd::PAUSE);
    if pause > 0 {
        add(&AGG, agg::THROTTLE_PAUSES, 1);
        add(&AGG, agg::THROTTLE_PAUSE_MS, pause as u64);
        let bucket = log2_bucket(pause as u64, agg::HIST_BUCKETS - 1);
        add(&AGG, agg::THROTTLE_HIST + bucket, 1);
        paused(&ctx, pause as u64);
    }
    0
}

/// A pause: which limit caused it, and who it paused. Only pausing
/// events get here (a few per second per throttled task).
#[inline(always)]
fn paused(ctx: &TracePointContext, pause: u64) {
    let layout = &BALANCE_DIRTY_LAYOUT;
    let limit = field(ctx, layout, bd::LIMIT) as u64;
    if limit != 0 {
        // `setpoint = (limit + freerun) / 2` in the tracepoint's
        // TP_fast_assign, so freerun is `2 * setpoint - limit` (+1 for the
        // rounding); under it `balance_dirty_pages()` lets the domain run
        // free, so only a strict per-device limit paused the task.
        let setpoint = field(ctx, layout, bd::SETPOINT) as u64;
        let domain_dirty = field(ctx, layout, bd::DIRTY) as u64;
        let freerun = (2 * setpoint + 1).saturating_sub(limit);
        let slot = if domain_dirty <= freerun {
            agg::THROTTLE_BDI_MS
        } else {
            // A memcg's domain: its limit under the global threshold where
            // the tracepoint reports the domain's limit (the global
            // domain's, `hard_dirty_limit()`, is never under its
            // threshold), else (6.1 and 6.12 report global_wb_domain's)
            // its free-run ceiling under the global domain's, `(thresh +
            // bg_thresh) / 2`. The global domain's own pauses give
            // `freerun` equal to that or one more (the rounding above); the
            // margins of 1/16 cover thresholds that moved since userspace
            // last read them from /proc/vmstat (at most an interval ago).
            let thresh = global_threshold(global_thresh::DIRTY);
            let global_freerun = (thresh + global_threshold(global_thresh::BACKGROUND)) / 2;
            if limit + thresh / 16 < thresh || freerun + global_freerun / 16 < global_freerun {
                agg::THROTTLE_MEMCG_MS
            } else {
                agg::THROTTLE_GLOBAL_MS
            }
        };
        add(&AGG, slot, pause);
        let domain = match slot {
            agg::THROTTLE_BDI_MS => write_domain::BDI,
            agg::THROTTLE_MEMCG_MS => write_domain::MEMCG,
            _ => write_domain::GLOBAL,
        };
        crate::writes::paused(domain, pause);
    } else {
        crate::writes::paused(0, pause);
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let counts = match THROTTLED.get_ptr_mut(&tgid) {
        Some(v) => v,
        None => {
            let by = PausedBy {
                pauses: 0,
                pause_ms: 0,
                comm: bpf_get_current_comm().unwrap_or_default(),
            };
            // BPF_NOEXIST: a first pause of the process on another CPU
            // at the same moment keeps its entry, and both add to it.
            if THROTTLED.insert(&tgid, &by, BPF_NOEXIST as u64).is_ok() {
                bump(stat::THROTTLED_NEW);
            }
            match THROTTLED.get_ptr_mut(&tgid) {
                Some(v) => v,
                None => return bump(stat::MAP_FULL),
            }
        }
    };
    // SAFETY: a live entry of the shared map; other CPUs add atomically.
    unsafe {
        atomic_add(&raw mut (*counts).pauses, 1);
        atomic_add(&raw mut (*counts).pause_ms, pause);
    }
}
