//! wbscope's kernel programs.
//!
//! No kernel struct layout is compiled in: every tracepoint field is read
//! through a [`TracepointLayout`] global that userspace fills from the
//! tracefs `format` file before loading (see writeback-user/src/tracefs.rs).
#![no_std]
#![no_main]

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use aya_log_ebpf::warn;
use writeback_common::{
    FieldSpec, InflightCall, InflightKey, TracepointLayout, WritepagesCall, call_flags,
    record_kind, stat, writepages_fields as wp, writepages_result_fields as wpr,
};

/// Layout of `ext4:ext4_writepages`, set by userspace with
/// `EbpfLoader::set_global` before load.
#[unsafe(no_mangle)]
static WRITEPAGES_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Layout of `ext4:ext4_writepages_result`.
#[unsafe(no_mangle)]
static WRITEPAGES_RESULT_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Per-call records to userspace. 1 MiB holds ~7700 records of 136 bytes:
/// far more than the few hundred writepages calls per second a busy host
/// makes (one call writes up to a whole chunk, not one page).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Calls in flight, keyed by (inode, thread, device). LRU so that a start
/// whose result never comes (probe detached mid-call, error paths) cannot
/// fill the map for good.
#[map]
static INFLIGHT: LruHashMap<InflightKey, InflightCall> = LruHashMap::with_max_entries(16384, 0);

/// Counters indexed by `writeback_common::stat`.
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

#[inline(always)]
fn bump(index: u32) {
    if let Some(counter) = STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the
        // program runs (tracepoint programs are not preempted mid-run).
        unsafe { *counter += 1 };
    }
}

/// Reads the field `index` of `layout` from the raw tracepoint record,
/// sign- or zero-extended to i64. An absent field reads as 0.
#[inline(always)]
fn field(ctx: &TracePointContext, layout: &TracepointLayout, index: usize) -> i64 {
    // SAFETY: the global lives in .rodata; read_volatile stops the compiler
    // from folding the load-time value away.
    let spec: FieldSpec = unsafe { core::ptr::read_volatile(&layout.fields[index]) };
    let offset = spec.offset as usize;
    let signed = spec.signed != 0;
    // SAFETY: bpf_probe_read_kernel checks the address; a bad offset yields
    // an error, mapped to 0, never a fault.
    unsafe {
        match spec.size {
            1 => ctx
                .read_at::<u8>(offset)
                .map(|v| if signed { v as i8 as i64 } else { v as i64 }),
            2 => ctx
                .read_at::<u16>(offset)
                .map(|v| if signed { v as i16 as i64 } else { v as i64 }),
            4 => ctx
                .read_at::<u32>(offset)
                .map(|v| if signed { v as i32 as i64 } else { v as i64 }),
            8 => ctx.read_at::<u64>(offset).map(|v| v as i64),
            _ => Ok(0),
        }
    }
    .unwrap_or(0)
}

/// `ext4:ext4_writepages`: remember the start of the call.
#[tracepoint(category = "ext4", name = "ext4_writepages")]
pub fn ext4_writepages(ctx: TracePointContext) -> u32 {
    match try_writepages_start(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_writepages_start(ctx: &TracePointContext) -> Result<u32, u32> {
    let layout = &WRITEPAGES_LAYOUT;
    let key = InflightKey {
        ino: field(ctx, layout, wp::INO) as u64,
        tid: bpf_get_current_pid_tgid() as u32,
        dev: field(ctx, layout, wp::DEV) as u32,
    };
    let mut flags = call_flags::START_SEEN;
    if field(ctx, layout, wp::FOR_KUPDATE) != 0 {
        flags |= call_flags::FOR_KUPDATE;
    }
    if field(ctx, layout, wp::RANGE_CYCLIC) != 0 {
        flags |= call_flags::RANGE_CYCLIC;
    }
    let call = InflightCall {
        // SAFETY: plain helper call.
        start_ns: unsafe { bpf_ktime_get_ns() },
        nr_to_write: field(ctx, layout, wp::NR_TO_WRITE),
        pages_skipped: field(ctx, layout, wp::PAGES_SKIPPED),
        range_start: field(ctx, layout, wp::RANGE_START),
        range_end: field(ctx, layout, wp::RANGE_END),
        writeback_index: field(ctx, layout, wp::WRITEBACK_INDEX) as u64,
        flags,
        _pad: 0,
    };
    if let Err(err) = INFLIGHT.insert(&key, &call, 0) {
        // Rare (LRU maps evict instead of failing): worth a log line.
        bump(stat::INFLIGHT_FULL);
        warn!(ctx, "in-flight map update failed: {}", err);
    }
    Ok(0)
}

/// `ext4:ext4_writepages_result`: join with the start and emit one record.
#[tracepoint(category = "ext4", name = "ext4_writepages_result")]
pub fn ext4_writepages_result(ctx: TracePointContext) -> u32 {
    match try_writepages_result(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_writepages_result(ctx: &TracePointContext) -> Result<u32, u32> {
    let layout = &WRITEPAGES_RESULT_LAYOUT;
    // SAFETY: plain helper calls.
    let now = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = InflightKey {
        ino: field(ctx, layout, wpr::INO) as u64,
        tid: pid_tgid as u32,
        dev: field(ctx, layout, wpr::DEV) as u32,
    };
    // SAFETY: the value is copied out before the entry is removed.
    let start = unsafe { INFLIGHT.get(&key) }.copied();
    if start.is_some() {
        let _ = INFLIGHT.remove(&key);
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
        nr_to_write: start.nr_to_write,
        pages_written: field(ctx, layout, wpr::PAGES_WRITTEN),
        pages_skipped_start: start.pages_skipped,
        pages_skipped_end: field(ctx, layout, wpr::PAGES_SKIPPED),
        range_start: start.range_start,
        range_end: start.range_end,
        writeback_index_before: start.writeback_index,
        writeback_index_after: field(ctx, layout, wpr::WRITEBACK_INDEX) as u64,
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        ret: field(ctx, layout, wpr::RET) as i32,
        sync_mode: field(ctx, layout, wpr::SYNC_MODE) as u32,
        flags: start.flags,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or_default(),
    });
    entry.submit(0);
    Ok(0)
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
