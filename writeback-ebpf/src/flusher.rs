//! Flusher work, inode passes, dirty state and throttling: counters and
//! levels added up in maps for userspace's interval lines.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use aya_log_ebpf::warn;
use writeback_common::{
    FlusherWork, TracepointLayout, agg, dirty,
    fields::{balance_dirty as bd, global_dirty, single_inode as si, wb_work},
};

use crate::{
    AGG, DIRTY, WORK, add, log2_bucket,
    read::{current_tid, field, now_ns},
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
    let _ = WORK.insert(&current_tid(), &work, 0);
    0
}

/// `writeback:writeback_written`: the chunk is done; pages written is the
/// budget consumed (start `nr_pages` minus remaining), not the raw field.
#[tracepoint]
pub fn wb_written(ctx: TracePointContext) -> u32 {
    let tid = current_tid();
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

/// `writeback:writeback_single_inode`: one inode pass (any filesystem).
#[tracepoint]
pub fn single_inode(ctx: TracePointContext) -> u32 {
    let layout = &SINGLE_INODE_LAYOUT;
    add(&AGG, agg::INODE_PASSES, 1);
    let asked = field(&ctx, layout, si::NR_TO_WRITE);
    // LONG_MAX ("everything", WB_SYNC_ALL passes) is no budget to add up.
    if asked > 0 && asked != i64::MAX {
        add(&AGG, agg::INODE_ASKED, asked as u64);
    }
    add(
        &AGG,
        agg::INODE_WROTE,
        field(&ctx, layout, si::WROTE) as u64,
    );
    0
}

/// `writeback:global_dirty_state`: keep the latest levels.
#[tracepoint]
pub fn global_dirty(ctx: TracePointContext) -> u32 {
    let layout = &GLOBAL_DIRTY_LAYOUT;
    let mut i = 0;
    while i < global_dirty::NAMES.len() {
        if let Some(slot) = DIRTY.get_ptr_mut(i as u32) {
            // SAFETY: plain store; a torn read by userspace of one level is
            // harmless (levels, not counters).
            unsafe { *slot = field(&ctx, layout, i) as u64 };
        }
        i += 1;
    }
    if let Some(slot) = DIRTY.get_ptr_mut(dirty::UPDATED_NS) {
        // SAFETY: as above.
        unsafe { *slot = now_ns() };
    }
    0
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
    }
    0
}
