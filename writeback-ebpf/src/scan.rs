//! The scan, extents and per-folio concepts: hooks that fire inside a
//! writepages call and add to its in-flight state.
use aya_ebpf::{
    macros::{btf_tracepoint, kprobe, kretprobe, map, tracepoint},
    maps::HashMap,
    programs::{BtfTracePointContext, ProbeContext, RetProbeContext, TracePointContext},
};
use writeback_common::{
    CurrentCall, ExtentMembers, InflightKey, MemberSpec, ScanMembers, TracepointLayout, agg,
    call_flags,
    fields::{extent as ex, folios as fo},
};

use crate::{
    AGG, add,
    read::{Access, Typed, current_tid, field, member_at, raw_arg},
    writepages::{call_of, current_call, current_entry, in_flight, inode_key},
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

/// A scan pass of the call begins at byte position `start_pos`.
#[inline(always)]
fn scan_started(call: *mut CurrentCall, start_pos: i64) {
    // SAFETY: the entry of this thread's own call; only this thread
    // writes it.
    unsafe {
        if (*call).scan_iterations == 0 {
            // Before the first pass ends: once per call.
            let start = in_flight(call);
            (*start).scan_first_pos = start_pos;
            (*start).flags |= call_flags::SCAN_SEEN;
        }
        (*call).scan_iter_start = start_pos;
    }
}

/// The scan pass stopped at byte position `next_pos`.
#[inline(always)]
fn scan_ended(call: *mut CurrentCall, next_pos: i64) {
    // SAFETY: see scan_started.
    unsafe {
        let scanned = next_pos - (*call).scan_iter_start;
        if scanned > 0 {
            (*call).scan_bytes += scanned as u64;
        }
        (*call).scan_last_pos = next_pos;
        (*call).scan_iterations += 1;
    }
}

/// `ext4:ext4_da_write_folios_start`: an iteration of the map-and-submit
/// loop begins scanning at `start_pos`.
#[tracepoint]
pub fn folios_start(ctx: TracePointContext) -> u32 {
    let layout = &FOLIOS_START_LAYOUT;
    let key = key_of(&ctx, layout, fo::DEV, fo::INO);
    if let Some(call) = call_of(&key) {
        scan_started(call, field(&ctx, layout, fo::START_POS));
    }
    0
}

/// `ext4:ext4_da_write_folios_end`: the iteration stopped at `next_pos`.
#[tracepoint]
pub fn folios_end(ctx: TracePointContext) -> u32 {
    let layout = &FOLIOS_END_LAYOUT;
    let key = key_of(&ctx, layout, fo::DEV, fo::INO);
    if let Some(call) = call_of(&key) {
        scan_ended(call, field(&ctx, layout, fo::NEXT_POS));
    }
    0
}

/// `tp_btf/ext4_da_write_folios_start`: TP_PROTO(struct inode *inode,
/// loff_t start_pos, loff_t next_pos, struct writeback_control *wbc)
/// (include/trace/events/ext4.h, 6.16+): the raw arguments, without the
/// classic tracepoint's record.
#[btf_tracepoint(function = "ext4_da_write_folios_start")]
pub fn tp_btf_folios_start(ctx: BtfTracePointContext) -> i32 {
    let key = inode_key::<Typed>(raw_arg(&ctx, 0) as *const u8);
    if let Some(call) = call_of(&key) {
        scan_started(call, raw_arg(&ctx, 1) as i64);
    }
    0
}

/// `tp_btf/ext4_da_write_folios_end`: same arguments, `next_pos` now where
/// the pass stopped.
#[btf_tracepoint(function = "ext4_da_write_folios_end")]
pub fn tp_btf_folios_end(ctx: BtfTracePointContext) -> i32 {
    let key = inode_key::<Typed>(raw_arg(&ctx, 0) as *const u8);
    if let Some(call) = call_of(&key) {
        scan_ended(call, raw_arg(&ctx, 2) as i64);
    }
    0
}

/// `struct mpage_da_data` members, from BTF (ext4's module BTF when ext4
/// is a module).
#[unsafe(no_mangle)]
static SCAN_MEMBERS: ScanMembers = ScanMembers::EMPTY;

/// The `mpd` argument a scan kprobe saw, for its kretprobe.
#[map]
static SCAN_ARGS: HashMap<u32, u64> = HashMap::with_max_entries(16384, 0);

/// A cursor of `mpd` in bytes (page indices shifted by the page shift).
#[inline(always)]
fn mpd_pos(mpd: u64, spec: &MemberSpec) -> i64 {
    // SAFETY: .rodata global, see read::field.
    let shift = unsafe { core::ptr::read_volatile(&SCAN_MEMBERS.pos_shift) };
    member_at(mpd as *const u8, spec) << (shift & 63)
}

/// kprobe on ext4's `mpage_prepare_extent_to_map(struct mpage_da_data
/// *mpd)`: one scan pass of the writepages loop (ext4_writepages on 6.1,
/// ext4_do_writepages later), the function the folios tracepoints
/// bracket on 6.16+. It scans from `mpd->first_page` (`start_pos`) and,
/// returning, has left `mpd->next_page` (`next_pos`) one past the last
/// folio it took (fs/ext4/inode.c).
#[kprobe]
pub fn kprobe_scan(ctx: ProbeContext) -> u32 {
    let Some(mpd) = ctx.arg::<u64>(0) else {
        return 0;
    };
    if let Some(call) = current_entry() {
        if SCAN_ARGS.insert(&current_tid(), &mpd, 0).is_err() {
            crate::bump(writeback_common::stat::MAP_FULL);
        }
        scan_started(call, mpd_pos(mpd, &SCAN_MEMBERS.start));
    }
    0
}

#[kretprobe]
pub fn kretprobe_scan(_ctx: RetProbeContext) -> u32 {
    let tid = current_tid();
    // SAFETY: value copied out at once.
    let Some(mpd) = (unsafe { SCAN_ARGS.get(&tid) }).copied() else {
        return 0;
    };
    let _ = SCAN_ARGS.remove(&tid);
    if let Some(call) = current_entry() {
        scan_ended(call, mpd_pos(mpd, &SCAN_MEMBERS.next));
    }
    0
}

/// Counts one extent of `len` blocks in the call `key` names, if any.
#[inline(always)]
fn extent_mapped(key: &InflightKey, len: impl FnOnce() -> u64) {
    if let Some(call) = call_of(key) {
        let len = len().min(u32::MAX as u64) as u32;
        // SAFETY: see scan_started.
        unsafe {
            (*call).extents += 1;
            (*call).extent_blocks = (*call).extent_blocks.saturating_add(len);
        }
    }
}

/// `ext4:ext4_da_write_pages_extent`: one extent mapped for the call.
#[tracepoint]
pub fn extent(ctx: TracePointContext) -> u32 {
    let layout = &EXTENT_LAYOUT;
    let key = key_of(&ctx, layout, ex::DEV, ex::INO);
    extent_mapped(&key, || field(&ctx, layout, ex::LEN) as u64);
    0
}

/// `struct ext4_map_blocks` members, from BTF.
#[unsafe(no_mangle)]
static EXTENT_MEMBERS: ExtentMembers = ExtentMembers::EMPTY;

/// `tp_btf/ext4_da_write_pages_extent`: TP_PROTO(struct inode *inode,
/// struct ext4_map_blocks *map) (include/trace/events/ext4.h). Plain
/// loads of `inode->i_ino`, `inode->i_sb->s_dev` and `map->m_len` where
/// the classic tracepoint's program pays a helper call per field, and no
/// trace record built.
#[btf_tracepoint(function = "ext4_da_write_pages_extent")]
pub fn tp_btf_extent(ctx: BtfTracePointContext) -> i32 {
    let key = inode_key::<Typed>(raw_arg(&ctx, 0) as *const u8);
    let map = raw_arg(&ctx, 1) as *const u8;
    extent_mapped(&key, || Typed::scalar(map, &EXTENT_MEMBERS.len) as u64);
    0
}

/// `writeback:wbc_writepage`: one folio handed to ->writepage by
/// write_cache_pages/writeback_iter. Counted, never sent one by one.
#[tracepoint]
pub fn wbc_writepage(_ctx: TracePointContext) -> u32 {
    folio_written();
    0
}

/// `tp_btf/wbc_writepage`: the same count without the record (the bdi's
/// name and a dozen wbc fields) the classic tracepoint builds per folio.
#[btf_tracepoint(function = "wbc_writepage")]
pub fn tp_btf_wbc_writepage(_ctx: BtfTracePointContext) -> i32 {
    folio_written();
    0
}

#[inline(always)]
fn folio_written() {
    add(&AGG, agg::WBC_WRITEPAGE, 1);
    if let Some(call) = current_call() {
        // SAFETY: see scan_started.
        unsafe { (*call).folios_written += 1 };
    }
}
