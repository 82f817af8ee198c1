//! Device I/O: bios submitted inside a writepages call, and per-device
//! request size and latency histograms (aggregated in the kernel).
//!
//! Two sets of programs: BTF tracepoints reading `struct request` and
//! `struct bio` with plain loads (chosen where tp_btf works), and classic
//! tracepoints reading the trace records (everywhere else).
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use writeback_common::{
    BlockHistKey, BlockMembers, DeviceLedger, DirectKey, FLUSH_REQUEST_KIND, FlushRequest,
    RequestKey, TracepointLayout, block_hist, block_members as bm,
    fields::{bio_queue as bq, rq},
    flush_class, ledger_class, log2_bucket, sampling, stat,
};

use crate::{
    BLOCK_HIST, BLOCK_SLOTS, DEVICE_LEDGER, DIRECT_BYTES, RQ_START, atomic_add, bump,
    durability::send,
    read::{Access, Typed, field, now_ns, raw_arg},
    writepages::current_entry,
};

#[unsafe(no_mangle)]
static BIO_QUEUE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static RQ_ISSUE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static RQ_COMPLETE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// 512-byte sectors (SECTOR_SHIFT in include/linux/blk_types.h).
const SECTOR_BYTES: u64 = 512;

/// Counts one sample in bucket `bucket` of histogram `kind` of device
/// `dev`: in the first of the device's slots of `BLOCK_SLOTS` it holds or
/// can take, else in `BLOCK_HIST`. Two CPUs may claim one free slot at
/// once: each stores its device, then reads the slot again, and the one
/// whose store was overwritten goes on to its next slot. Only a store that
/// lands between the other's store and its read can leave that other's
/// one sample counted under the winner's device, once per slot ever.
#[inline(always)]
fn hist_add(dev: u32, kind: u16, bucket: u32) {
    if dev != 0
        && let Some(slots) = BLOCK_SLOTS.get_ptr_mut(0)
    {
        let mut probe = 0;
        while probe < block_hist::PROBES {
            let i = block_hist::slot_of(dev, probe) as usize;
            // SAFETY: in bounds (`slot_of` masks to the slots); volatile so
            // that the read after a claim is made, not folded into the
            // store before it.
            unsafe {
                let held = &raw mut (*slots).devs[i];
                if core::ptr::read_volatile(held) == 0 {
                    core::ptr::write_volatile(held, dev);
                }
                if core::ptr::read_volatile(held) == dev {
                    let counts = &raw mut (*slots).buckets[i][kind as usize & 1];
                    atomic_add(
                        &raw mut (*counts)[bucket as usize & (block_hist::BUCKETS - 1)],
                        1,
                    );
                    return;
                }
            }
            probe += 1;
        }
    }
    hash_add(dev, kind, bucket);
}

/// Counts one sample in `BLOCK_HIST`: devices beyond the slots, and the
/// kinds the slots do not hold.
#[inline(always)]
fn hash_add(dev: u32, kind: u16, bucket: u32) {
    let key = BlockHistKey {
        dev,
        kind,
        bucket: bucket as u16,
    };
    // Atomic add and a BPF_NOEXIST insert, as for the slots above: the
    // completion program runs in interrupt context, where it can start on
    // this CPU while a completion counted in task context (polled I/O) is
    // halfway here; kernels whose `__bpf_trace_run()` has no `prog->active`
    // check let a tp_btf program overlap itself that way (main.rs,
    // "Per-CPU state and preemption").
    if let Some(v) = BLOCK_HIST.get_ptr_mut(&key) {
        atomic_add(v, 1);
    } else if BLOCK_HIST.insert(&key, &1, BPF_NOEXIST as u64).is_err() {
        match BLOCK_HIST.get_ptr_mut(&key) {
            Some(v) => atomic_add(v, 1),
            None => bump(stat::MAP_FULL),
        }
    }
}

/// Whether the CPU budget sheds `device_io` now (`sampling::DEVICE_IO`):
/// every block program then returns at once, but for the completion's
/// taking of an issue stamp made before, so that RQ_START keeps no
/// request the shedding left behind.
#[inline(always)]
fn shed() -> bool {
    crate::sampling_shift(sampling::DEVICE_IO) != 0
}

/// Remembers when the request at `sector` of `dev` was issued.
#[inline(always)]
fn stamp_issue(dev: u32, sector: u64) {
    let key = RequestKey {
        sector,
        dev,
        _pad: 0,
    };
    if RQ_START.insert(&key, &now_ns(), 0).is_err() {
        bump(stat::MAP_FULL);
    }
}

/// Takes the issue time [`stamp_issue`] kept for the request at `sector`
/// of `dev`, if any.
#[inline(always)]
fn take_issue_stamp(dev: u32, sector: u64) -> Option<u64> {
    let key = RequestKey {
        sector,
        dev,
        _pad: 0,
    };
    // SAFETY: value copied out at once.
    let issued = (unsafe { RQ_START.get(&key) }).copied()?;
    let _ = RQ_START.remove(&key);
    Some(issued)
}

/// Counts one request issued with `bytes`.
#[inline(always)]
fn add_issue(dev: u32, bytes: u64) {
    hist_add(dev, block_hist::ISSUE_BYTES, log2_bucket(bytes, 63));
}

/// Counts one request completed now, issued at `issued`, and again
/// under its cache-flush class when it has one (`biolatency -F`'s split).
#[inline(always)]
fn add_latency(dev: u32, issued: u64, flush: Option<u16>) {
    let now = now_ns();
    let bucket = log2_bucket(now.saturating_sub(issued), 63);
    hist_add(dev, block_hist::LATENCY_NS, bucket);
    if let Some(class) = flush {
        hash_add(dev, block_hist::FLUSH_LATENCY_NS + class, bucket);
        // And the request itself, for the fsyncs it falls inside.
        send(FlushRequest {
            kind: FLUSH_REQUEST_KIND,
            class: u32::from(class),
            dev,
            _pad: 0,
            issue_ns: issued,
            complete_ns: now,
        });
    }
}

/// Counts `bytes` written by a bio at `sector` of `dev` in the device's
/// ledger, under `class`, or under the journal when the sector lies in
/// it. A device first seen here gets an entry of its own (no journal
/// known): userspace put in those it found a journal on.
#[inline(always)]
fn ledger_add(dev: u32, sector: u64, class: usize, bytes: u64) {
    if dev == 0 {
        return;
    }
    let mut entry = DEVICE_LEDGER.get_ptr_mut(&dev);
    if entry.is_none() {
        let _ = DEVICE_LEDGER.insert(&dev, &DeviceLedger::default(), BPF_NOEXIST as u64);
        entry = DEVICE_LEDGER.get_ptr_mut(&dev);
    }
    let Some(ledger) = entry else {
        bump(stat::MAP_FULL);
        return;
    };
    // SAFETY: a value of the map, alive while the program runs; the
    // journal's extents are written by userspace before attach only.
    unsafe {
        let class = if (*ledger).in_journal(sector) {
            ledger_class::JOURNAL
        } else {
            class
        };
        let class = if class < ledger_class::COUNT {
            class
        } else {
            ledger_class::NO_DATA
        };
        atomic_add(&raw mut (*ledger).bytes[class], bytes);
    }
}

/// `block:block_bio_queue`: fires in the submitter's context, so a bio
/// queued while a thread is inside a writepages call belongs to that call.
/// Fires once per bio as submitted (`submit_bio_noacct_nocheck()`, block/
/// blk-core.c, marks it `BIO_TRACE_COMPLETION`; a split's remainder is
/// not traced again), so the write bios' bytes sum to what the device
/// counts as written once they complete.
#[tracepoint]
pub fn bio_queue(ctx: TracePointContext) -> u32 {
    if shed() {
        return 0;
    }
    let sectors = field(&ctx, &BIO_QUEUE_LAYOUT, bq::NR_SECTOR) as u64;
    if let Some(call) = current_entry() {
        // SAFETY: the entry of this thread's own call; only the thread
        // itself writes it.
        unsafe {
            (*call).bios += 1;
            (*call).bio_bytes += sectors * SECTOR_BYTES;
        }
    }
    if let Some(class) = ledger_class::of_rwbs(field(&ctx, &BIO_QUEUE_LAYOUT, bq::RWBS) as u64) {
        ledger_add(
            field(&ctx, &BIO_QUEUE_LAYOUT, bq::DEV) as u32,
            field(&ctx, &BIO_QUEUE_LAYOUT, bq::SECTOR) as u64,
            class,
            sectors * SECTOR_BYTES,
        );
    }
    0
}

/// `block:block_rq_issue`: request handed to the driver.
#[tracepoint]
pub fn rq_issue(ctx: TracePointContext) -> u32 {
    if shed() {
        return 0;
    }
    let layout = &RQ_ISSUE_LAYOUT;
    let dev = field(&ctx, layout, rq::DEV) as u32;
    add_issue(dev, field(&ctx, layout, rq::BYTES) as u64);
    stamp_issue(dev, field(&ctx, layout, rq::SECTOR) as u64);
    0
}

/// `block:block_rq_complete`: latency since issue.
#[tracepoint]
pub fn rq_complete(ctx: TracePointContext) -> u32 {
    let layout = &RQ_COMPLETE_LAYOUT;
    let dev = field(&ctx, layout, rq::DEV) as u32;
    // A request whose start sector was never set (an empty flush:
    // `blk_rq_init()` leaves `__sector` at -1) prints 0 at issue, where
    // `blk_rq_trace_sector()` hides it, and -1 here, where the event
    // prints `blk_rq_pos()` itself (include/trace/events/block.h).
    let sector = match field(&ctx, layout, rq::SECTOR) as u64 {
        u64::MAX => 0,
        s => s,
    };
    if let Some(issued) = take_issue_stamp(dev, sector)
        && !shed()
    {
        let flush = flush_class::of_rwbs(field(&ctx, layout, rq::RWBS) as u64);
        add_latency(dev, issued, flush);
    }
    0
}

/// Struct members the BTF block programs read, from the kernel's BTF.
#[unsafe(no_mangle)]
static BLOCK_MEMBERS: BlockMembers = BlockMembers::EMPTY;

#[inline(always)]
fn scalar(base: *const u8, index: usize) -> i64 {
    Typed::scalar(base, &BLOCK_MEMBERS.members[index])
}

#[inline(always)]
fn pointer(base: *const u8, index: usize) -> *const u8 {
    Typed::pointer(base, &BLOCK_MEMBERS.members[index])
}

/// The device the block tracepoints print for a request of queue `q`:
/// `disk_devt(q->disk)`, as `MKDEV(disk->major, disk->first_minor)`
/// (include/linux/kdev_t.h: MINORBITS 20; why the two are the same:
/// `block_members::PATHS`).
#[inline(always)]
fn queue_dev(q: *const u8) -> u32 {
    let disk = pointer(q, bm::QUEUE_DISK);
    let major = scalar(disk, bm::DISK_MAJOR) as u32;
    let minor = scalar(disk, bm::DISK_FIRST_MINOR) as u32;
    (major << 20) | (minor & ((1 << 20) - 1))
}

/// Whether queue `q` has block statistics on (`QUEUE_FLAG_STATS`, set
/// while writeback throttling, blk-iolatency or another blk-stat user
/// needs them: on by default with wbt). `blk_mq_start_request()`
/// (block/blk-mq.c) then stamps `rq->io_start_time_ns` right after
/// tracing `block_rq_issue`, for every request but passthrough ones.
#[inline(always)]
fn stats_on(q: *const u8) -> bool {
    // SAFETY: .rodata global, see read::field.
    let bit = unsafe { core::ptr::read_volatile(&BLOCK_MEMBERS.stats_bit) };
    bit < 64 && (scalar(q, bm::QUEUE_FLAGS) as u64 >> (bit & 63)) & 1 != 0
}

/// `tp_btf/block_bio_queue`: TP_PROTO(struct bio *bio)
/// (include/trace/events/block.h, since 5.11).
#[btf_tracepoint(function = "block_bio_queue")]
pub fn tp_btf_bio_queue(ctx: BtfTracePointContext) -> i32 {
    if shed() {
        return 0;
    }
    let bio = raw_arg(&ctx, 0) as *const u8;
    let bytes = scalar(bio, bm::BIO_SIZE) as u64;
    if let Some(call) = current_entry() {
        // SAFETY: as in `bio_queue`.
        unsafe {
            (*call).bios += 1;
            (*call).bio_bytes += bytes;
        }
    }
    // SAFETY: .rodata globals, see read::field.
    let (ledger, meta_bit) = unsafe {
        (
            core::ptr::read_volatile(&BLOCK_MEMBERS.ledger),
            core::ptr::read_volatile(&BLOCK_MEMBERS.meta_bit),
        )
    };
    if ledger == 0 {
        return 0;
    }
    let opf = scalar(bio, bm::BIO_OPF) as u32;
    let op = opf & flush_class::REQ_OP_MASK;
    if !ledger_class::counts_as_written(op) {
        return 0;
    }
    let meta = meta_bit < 32 && (opf >> (meta_bit & 31)) & 1 != 0;
    // The owner of the first page only where it can matter: a plain
    // write without REQ_META. A null pointer anywhere on the way (no
    // bio_vec, a page no file owns) reads as 0, and so does the host of
    // an anonymous page's `mapping` (an anon_vma pointer with bit 0 set:
    // the load lands one byte into the anon_vma, which the JIT's guarded
    // load reads as 0 where the address is not the kernel's).
    let mode = if op == ledger_class::REQ_OP_WRITE && !meta {
        let vec = pointer(bio, bm::BIO_IO_VEC);
        let page = pointer(vec, bm::BVEC_PAGE);
        let mapping = pointer(page, bm::PAGE_MAPPING);
        let host = pointer(mapping, bm::MAPPING_HOST);
        scalar(host, bm::INODE_MODE) as u32
    } else {
        0
    };
    let dev = scalar(pointer(bio, bm::BIO_BDEV), bm::BDEV_DEV) as u32;
    let class = ledger_class::of(op, meta, mode);
    ledger_add(dev, scalar(bio, bm::BIO_SECTOR) as u64, class, bytes);
    if class == ledger_class::UNOWNED {
        direct_add(dev, bytes);
    }
    0
}

/// Counts a direct-I/O bio's bytes to the submitting process: direct
/// writes are submitted in the writer's own context
/// (`iomap_dio_bio_iter()`, fs/iomap/direct-io.c), so the current task is
/// the one that wrote.
#[inline(always)]
fn direct_add(dev: u32, bytes: u64) {
    let key = DirectKey {
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        dev,
    };
    let mut entry = DIRECT_BYTES.get_ptr_mut(&key);
    if entry.is_none() {
        let _ = DIRECT_BYTES.insert(&key, &0, BPF_NOEXIST as u64);
        entry = DIRECT_BYTES.get_ptr_mut(&key);
    }
    match entry {
        Some(v) => atomic_add(v, bytes),
        None => bump(stat::MAP_FULL),
    }
}

/// `tp_btf/block_rq_issue`: TP_PROTO(struct request *rq). The issue time
/// goes into RQ_START only where the kernel will not stamp it itself:
/// with block statistics on, the completion reads `io_start_time_ns`
/// instead, and the request costs no hash operation at all.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn tp_btf_rq_issue(ctx: BtfTracePointContext) -> i32 {
    if shed() {
        return 0;
    }
    let rq = raw_arg(&ctx, 0) as *const u8;
    let q = pointer(rq, bm::RQ_QUEUE);
    let dev = queue_dev(q);
    add_issue(dev, scalar(rq, bm::RQ_DATA_LEN) as u64);
    if !stats_on(q) {
        stamp_issue(dev, scalar(rq, bm::RQ_SECTOR) as u64);
    }
    0
}

/// `tp_btf/block_rq_complete`: TP_PROTO(struct request *rq, blk_status_t
/// error, unsigned int nr_bytes). Latency from the kernel's own issue
/// stamp when it made one (the same clock: blk_time_get_ns() is
/// ktime_get_ns(), cached per plug), else from RQ_START.
#[btf_tracepoint(function = "block_rq_complete")]
pub fn tp_btf_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let rq = raw_arg(&ctx, 0) as *const u8;
    let dev = queue_dev(pointer(rq, bm::RQ_QUEUE));
    let stamped = scalar(rq, bm::RQ_IO_START_TIME) as u64;
    let issued = if stamped != 0 {
        Some(stamped)
    } else {
        take_issue_stamp(dev, scalar(rq, bm::RQ_SECTOR) as u64)
    };
    if let Some(issued) = issued
        && !shed()
    {
        // SAFETY: .rodata globals, see read::field.
        let (preflush, fua) = unsafe {
            (
                core::ptr::read_volatile(&BLOCK_MEMBERS.preflush_bit),
                core::ptr::read_volatile(&BLOCK_MEMBERS.fua_bit),
            )
        };
        let flags = scalar(rq, bm::RQ_CMD_FLAGS) as u32;
        add_latency(dev, issued, flush_class::of_cmd_flags(flags, preflush, fua));
    }
    0
}
