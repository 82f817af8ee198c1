//! Device I/O: bios submitted inside a writepages call, and per-device
//! request size and latency histograms (aggregated in the kernel).
use aya_ebpf::{macros::tracepoint, maps::PerCpuHashMap, programs::TracePointContext};
use writeback_common::{
    BlockHistKey, RequestKey, TracepointLayout, block_hist,
    fields::{bio_queue as bq, rq},
};

use crate::{
    BLOCK_HIST, RQ_START, log2_bucket,
    read::{field, now_ns},
    writepages::current_call,
};

#[unsafe(no_mangle)]
static BIO_QUEUE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static RQ_ISSUE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static RQ_COMPLETE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// 512-byte sectors (SECTOR_SHIFT in include/linux/blk_types.h).
const SECTOR_BYTES: u64 = 512;

#[inline(always)]
fn hist_add(map: &PerCpuHashMap<BlockHistKey, u64>, key: BlockHistKey) {
    match map.get_ptr_mut(&key) {
        // SAFETY: per-CPU value.
        Some(v) => unsafe { *v += 1 },
        None => {
            let _ = map.insert(&key, &1, 0);
        }
    }
}

/// `block:block_bio_queue`: fires in the submitter's context, so a bio
/// queued while a thread is inside a writepages call belongs to that call.
#[tracepoint]
pub fn bio_queue(ctx: TracePointContext) -> u32 {
    if let Some(call) = current_call() {
        let sectors = field(&ctx, &BIO_QUEUE_LAYOUT, bq::NR_SECTOR) as u64;
        // SAFETY: the entry of this thread's own call.
        unsafe {
            (*call).bios += 1;
            (*call).bio_bytes += sectors * SECTOR_BYTES;
        }
    }
    0
}

/// `block:block_rq_issue`: request handed to the driver.
#[tracepoint]
pub fn rq_issue(ctx: TracePointContext) -> u32 {
    let layout = &RQ_ISSUE_LAYOUT;
    let dev = field(&ctx, layout, rq::DEV) as u32;
    let bytes = field(&ctx, layout, rq::BYTES) as u64;
    hist_add(
        &BLOCK_HIST,
        BlockHistKey {
            dev,
            kind: block_hist::ISSUE_BYTES,
            bucket: log2_bucket(bytes, 63) as u16,
        },
    );
    let key = RequestKey {
        sector: field(&ctx, layout, rq::SECTOR) as u64,
        dev,
        _pad: 0,
    };
    let _ = RQ_START.insert(&key, &now_ns(), 0);
    0
}

/// `block:block_rq_complete`: latency since issue.
#[tracepoint]
pub fn rq_complete(ctx: TracePointContext) -> u32 {
    let layout = &RQ_COMPLETE_LAYOUT;
    let key = RequestKey {
        sector: field(&ctx, layout, rq::SECTOR) as u64,
        dev: field(&ctx, layout, rq::DEV) as u32,
        _pad: 0,
    };
    // SAFETY: value copied out at once.
    let Some(issued) = (unsafe { RQ_START.get(&key) }).copied() else {
        return 0;
    };
    let _ = RQ_START.remove(&key);
    hist_add(
        &BLOCK_HIST,
        BlockHistKey {
            dev: key.dev,
            kind: block_hist::LATENCY_NS,
            bucket: log2_bucket(now_ns().saturating_sub(issued), 63) as u16,
        },
    );
    0
}
