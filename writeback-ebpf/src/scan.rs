//! The scan, extents and per-folio concepts: hooks that fire inside a
//! writepages call and add to its in-flight state.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use writeback_common::{
    InflightKey, TracepointLayout, agg, call_flags,
    fields::{extent as ex, folios as fo},
};

use crate::{
    AGG, INFLIGHT, add,
    read::{current_tid, field},
    writepages::current_call,
};

#[unsafe(no_mangle)]
static FOLIOS_START_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static FOLIOS_END_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static EXTENT_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

#[inline(always)]
fn key_of(
    ctx: &TracePointContext,
    layout: &TracepointLayout,
    dev: usize,
    ino: usize,
) -> InflightKey {
    InflightKey {
        ino: field(ctx, layout, ino) as u64,
        tid: current_tid(),
        dev: field(ctx, layout, dev) as u32,
    }
}

/// `ext4:ext4_da_write_folios_start`: an iteration of the map-and-submit
/// loop begins scanning at `start_pos`.
#[tracepoint]
pub fn folios_start(ctx: TracePointContext) -> u32 {
    let layout = &FOLIOS_START_LAYOUT;
    let key = key_of(&ctx, layout, fo::DEV, fo::INO);
    if let Some(call) = INFLIGHT.get_ptr_mut(&key) {
        let start_pos = field(&ctx, layout, fo::START_POS);
        // SAFETY: entry of this thread's own call; only this thread and
        // its sched_switch updates touch it, never at the same time.
        unsafe {
            if (*call).scan_iterations == 0 {
                (*call).scan_first_pos = start_pos;
            }
            (*call).scan_iter_start = start_pos;
            (*call).flags |= call_flags::SCAN_SEEN;
        }
    }
    0
}

/// `ext4:ext4_da_write_folios_end`: the iteration stopped at `next_pos`.
#[tracepoint]
pub fn folios_end(ctx: TracePointContext) -> u32 {
    let layout = &FOLIOS_END_LAYOUT;
    let key = key_of(&ctx, layout, fo::DEV, fo::INO);
    if let Some(call) = INFLIGHT.get_ptr_mut(&key) {
        let next_pos = field(&ctx, layout, fo::NEXT_POS);
        // SAFETY: see folios_start.
        unsafe {
            let scanned = next_pos - (*call).scan_iter_start;
            if scanned > 0 {
                (*call).scan_bytes += scanned as u64;
            }
            (*call).scan_last_pos = next_pos;
            (*call).scan_iterations += 1;
        }
    }
    0
}

/// `ext4:ext4_da_write_pages_extent`: one extent mapped for the call.
#[tracepoint]
pub fn extent(ctx: TracePointContext) -> u32 {
    let layout = &EXTENT_LAYOUT;
    let key = key_of(&ctx, layout, ex::DEV, ex::INO);
    if let Some(call) = INFLIGHT.get_ptr_mut(&key) {
        let len = field(&ctx, layout, ex::LEN) as u64;
        // SAFETY: see folios_start.
        unsafe {
            (*call).extents += 1;
            (*call).extent_blocks += len;
        }
    }
    0
}

/// `writeback:wbc_writepage`: one folio handed to ->writepage by
/// write_cache_pages/writeback_iter. Counted, never sent one by one.
#[tracepoint]
pub fn wbc_writepage(_ctx: TracePointContext) -> u32 {
    add(&AGG, agg::WBC_WRITEPAGE, 1);
    if let Some(call) = current_call() {
        // SAFETY: see folios_start.
        unsafe { (*call).folios_written += 1 };
    }
    0
}
