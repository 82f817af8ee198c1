//! The writepages-call concept: start and end of one call, joined by
//! (inode, thread, device), with a cause and a filter.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::tracepoint,
    programs::TracePointContext,
};
use aya_log_ebpf::warn;
use writeback_common::{
    Filter, InflightCall, InflightKey, TracepointLayout, WritepagesCall, call_flags, cause,
    fields::{writepages as wp, writepages_result as wpr},
    record_kind, stat,
};

use crate::{
    CONFIG, CURRENT, EVENTS, FILTER, INFLIGHT, OFFCPU_SINCE, WORK, bump,
    read::{current_tid, field, now_ns},
};

/// Layout of `ext4:ext4_writepages` (or `ext4_da_writepages`).
#[unsafe(no_mangle)]
static WRITEPAGES_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Layout of `ext4:ext4_writepages_result` (or `ext4_da_writepages_result`).
#[unsafe(no_mangle)]
static WRITEPAGES_RESULT_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// True when the in-kernel filters drop this call.
#[inline(always)]
fn filtered_out(dev: u32, ino: u64, tgid: u32, cgroup_id: u64) -> bool {
    // SAFETY: .rodata global, see read::field.
    let f: Filter = unsafe { core::ptr::read_volatile(&FILTER) };
    (f.dev != 0 && f.dev != dev)
        || (f.ino != 0 && f.ino != ino)
        || (f.tgid != 0 && f.tgid != tgid)
        || (f.cgroup_id != 0 && f.cgroup_id != cgroup_id)
}

#[tracepoint]
pub fn writepages_start(ctx: TracePointContext) -> u32 {
    match try_writepages_start(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_writepages_start(ctx: &TracePointContext) -> Result<u32, u32> {
    let layout = &WRITEPAGES_LAYOUT;
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = InflightKey {
        ino: field(ctx, layout, wp::INO) as u64,
        tid: pid_tgid as u32,
        dev: field(ctx, layout, wp::DEV) as u32,
    };
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if filtered_out(key.dev, key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
        bump(stat::FILTERED);
        return Ok(0);
    }
    let sync_mode = field(ctx, layout, wp::SYNC_MODE);
    let for_kupdate = field(ctx, layout, wp::FOR_KUPDATE) != 0;
    let mut flags = call_flags::START_SEEN;
    if for_kupdate {
        flags |= call_flags::FOR_KUPDATE;
    }
    if field(ctx, layout, wp::RANGE_CYCLIC) != 0 {
        flags |= call_flags::RANGE_CYCLIC;
    }
    if CONFIG.get(0).copied().unwrap_or(0) != 0 {
        flags |= call_flags::CPU_TRACKED;
    }
    // Cause, most specific first: WB_SYNC_ALL is a sync whoever asks;
    // for_kupdate is periodic; otherwise the flusher work this thread runs
    // (writeback_start..writeback_written) says background or why; outside
    // flusher work a WB_SYNC_NONE call was made directly by its caller.
    // SAFETY: the value is copied out at once.
    let work = unsafe { WORK.get(&key.tid) }.copied();
    let mut work_reason = 0;
    let call_cause = match work {
        _ if sync_mode == 1 => cause::SYNC,
        _ if for_kupdate => cause::PERIODIC,
        Some(w) if w.for_background != 0 => cause::BACKGROUND,
        Some(_) => cause::FLUSHER_OTHER,
        None => cause::DIRECT,
    };
    if let Some(w) = work {
        work_reason = w.reason;
        if w.for_background != 0 {
            flags |= call_flags::FOR_BACKGROUND;
        }
    }
    let call = InflightCall {
        start_ns: now_ns(),
        nr_to_write: field(ctx, layout, wp::NR_TO_WRITE),
        pages_skipped: field(ctx, layout, wp::PAGES_SKIPPED),
        range_start: field(ctx, layout, wp::RANGE_START),
        range_end: field(ctx, layout, wp::RANGE_END),
        writeback_index: field(ctx, layout, wp::WRITEBACK_INDEX) as u64,
        flags,
        cause: call_cause,
        work_reason,
        ..InflightCall::default()
    };
    if let Err(err) = INFLIGHT.insert(&key, &call, 0) {
        // Rare (LRU maps evict instead of failing): worth a log line.
        bump(stat::INFLIGHT_FULL);
        warn!(ctx, "in-flight map update failed: {}", err);
        return Err(0);
    }
    let _ = CURRENT.insert(&key.tid, &key, 0);
    Ok(0)
}

#[tracepoint]
pub fn writepages_end(ctx: TracePointContext) -> u32 {
    match try_writepages_end(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_writepages_end(ctx: &TracePointContext) -> Result<u32, u32> {
    let layout = &WRITEPAGES_RESULT_LAYOUT;
    let now = now_ns();
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = InflightKey {
        ino: field(ctx, layout, wpr::INO) as u64,
        tid: pid_tgid as u32,
        dev: field(ctx, layout, wpr::DEV) as u32,
    };
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: the value is copied out before the entry is removed.
    let start = unsafe { INFLIGHT.get(&key) }.copied();
    if start.is_some() {
        let _ = INFLIGHT.remove(&key);
        let _ = CURRENT.remove(&key.tid);
        let _ = OFFCPU_SINCE.remove(&key.tid);
    } else if filtered_out(key.dev, key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
        return Ok(0);
    } else {
        bump(stat::UNMATCHED_RESULTS);
    }
    let start = start.unwrap_or_default();

    let Some(mut entry) = EVENTS.reserve::<WritepagesCall>(0) else {
        bump(stat::LOST_RECORDS);
        return Err(0);
    };
    let duration_ns = if start.start_ns != 0 {
        now.saturating_sub(start.start_ns)
    } else {
        0
    };
    entry.write(WritepagesCall {
        kind: record_kind::WRITEPAGES_CALL,
        dev: key.dev,
        ino: key.ino,
        start_ns: start.start_ns,
        duration_ns,
        offcpu_ns: start.offcpu_ns,
        cgroup_id,
        nr_to_write: start.nr_to_write,
        pages_written: field(ctx, layout, wpr::PAGES_WRITTEN),
        pages_skipped_start: start.pages_skipped,
        pages_skipped_end: field(ctx, layout, wpr::PAGES_SKIPPED),
        range_start: start.range_start,
        range_end: start.range_end,
        writeback_index_before: start.writeback_index,
        writeback_index_after: field(ctx, layout, wpr::WRITEBACK_INDEX) as u64,
        scan_first_pos: start.scan_first_pos,
        scan_last_pos: start.scan_last_pos,
        scan_bytes: start.scan_bytes,
        extent_blocks: start.extent_blocks,
        bio_bytes: start.bio_bytes,
        tgid: (pid_tgid >> 32) as u32,
        tid: key.tid,
        ret: field(ctx, layout, wpr::RET) as i32,
        sync_mode: field(ctx, layout, wpr::SYNC_MODE) as u32,
        flags: start.flags,
        cause: start.cause,
        work_reason: start.work_reason,
        scan_iterations: start.scan_iterations,
        extents: start.extents,
        folios_written: start.folios_written,
        bios: start.bios,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or_default(),
    });
    entry.submit(0);
    Ok(0)
}

/// The in-flight call of the current thread, if any (for hooks inside a
/// call that know the thread only).
#[inline(always)]
pub fn current_call() -> Option<*mut InflightCall> {
    let tid = current_tid();
    // SAFETY: the key is copied out at once.
    let key = unsafe { CURRENT.get(&tid) }.copied()?;
    INFLIGHT.get_ptr_mut(&key)
}
