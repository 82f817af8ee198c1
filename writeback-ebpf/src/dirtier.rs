//! Who dirtied it, two ways (crates/model/src/dirtier.rs charges
//! each writeback call's pages from what these count):
//!
//! - by default, once per inode: `writeback_dirty_inode_enqueue` fires
//!   when an inode goes from clean to dirty, in the dirtier's context, and
//!   [`tp_btf_dirty_inode`] / [`dirty_inode`] send one `InodeDirtying`
//!   record (who, when, which inode) to `DIRTYINGS`. Nothing runs per
//!   dirtied folio, so a small writer pays nothing per write;
//! - with `--enable dirty_folio`, per folio: pages dirtied per (inode,
//!   process), added up in the kernel at dirty time, exact when several
//!   processes dirty one file, at the cost below.
//!
//! `writeback_dirty_folio` fires once per folio going from clean to dirty
//! (`folio_account_dirtied()` in mm/page-writeback.c), in the dirtier's
//! context: hundreds of thousands of times a second under a fast buffered
//! writer. A folio dirtied by the process and file this CPU dirtied last
//! costs an array lookup and an add; any other, one hash lookup and one
//! atomic add, and the first time in a reading that the pair grows, a
//! record of its key to the ring (so that a reading looks up the pairs
//! that changed, not all the host has dirtied).
use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_ktime_get_ns,
    },
    macros::{btf_tracepoint, map, raw_tracepoint, tracepoint},
    maps::{Array, LruHashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, RawTracePointContext, TracePointContext},
};
use writeback_common::{
    BatchState, DIRTIER_CHANGED_KIND, DIRTYING_BATCH, DIRTYING_BATCH_KIND, DirtierChanged,
    DirtierEntry, DirtierKey, DirtierMembers, DirtierSlot, DirtyingBatch, Filter,
    INODE_DIRTYING_KIND, InodeDirtying, InodeKey, MemberSpec, TracepointLayout,
    dirtier_members as dm,
    fields::{dirty_folio, dirty_inode},
    sampling, stat,
};

use crate::{
    FILTER, SAMPLING, atomic_add,
    batch::{self, Batch},
    bump,
    read::{Access, Probed, Typed, field, load_spec, raw_arg},
};

/// Inode dirtyings to userspace, drained at every reading of the dirtier
/// maps (at least once a second, and again before charging a batch of
/// calls on an inode it has no dirtying for), sent eight to a record
/// (`DirtyingBatch`, 520 bytes and the ring's 8-byte header): 1 MiB holds
/// 15,880 dirtyings, a second of a small-files writer making that many
/// files dirty; a full buffer is counted (`stat::LOST_DIRTYINGS`) and
/// those inodes' writeback goes to `(unknown)`. A batch wakes userspace
/// only once a quarter of the ring waits ([`DIRTYINGS_WAKEUP_AT`]): a
/// burst of new files (an archive unpacked, a build's outputs: 50,000
/// a second here) fills it within the second userspace otherwise waits.
/// In the per-folio mode the same ring carries the
/// `DirtierChanged` records instead (32 bytes with the ring's header:
/// 32,768 changed pairs a reading), a full ring making the next reading
/// read the whole map.
#[map]
pub(crate) static DIRTYINGS: RingBuf = RingBuf::with_byte_size(DIRTYINGS_BYTES, 0);
const DIRTYINGS_BYTES: u32 = 1 << 20;
/// Bytes waiting in `DIRTYINGS` past which a batch wakes userspace
/// (`wakeup_past`): 3,970 dirtyings, leaving three quarters of the ring
/// for those that come while userspace wakes.
const DIRTYINGS_WAKEUP_AT: u64 = (DIRTYINGS_BYTES / 4) as u64;

/// The factor a dirtied folio counts for under the sampling in force, or
/// `None` when this one is not counted.
#[inline(always)]
fn sampled() -> Option<u64> {
    let shift = crate::sampling_shift(sampling::DIRTY_FOLIO);
    crate::drawn(shift).then_some(1 << shift)
}

/// Layout of `writeback:writeback_dirty_inode_enqueue`.
#[unsafe(no_mangle)]
static DIRTY_INODE_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Pages dirtied per (inode, process) since the trace started. LRU: an
/// entry no one dirties or reads any more makes room for new ones; 65536
/// pairs are far more than a host dirties between two reads.
#[map]
static DIRTIERS: LruHashMap<DirtierKey, DirtierEntry> = LruHashMap::with_max_entries(65536, 0);

/// Inodes the `--pid`/`--cgroup` filter's process or cgroup dirtied: their
/// writeback calls pass the filter whoever makes them.
#[map]
static FILTER_DIRTIED: LruHashMap<InodeKey, u8> = LruHashMap::with_max_entries(16384, 0);

/// The per-CPU cache in front of `DIRTIERS` (`DirtierSlot`), a slot per
/// CPU indexed by CPU number: not a per-CPU array, whose memory lives in
/// vmalloc'd percpu chunks (4 KiB pages, a TLB miss on a cold run), but a
/// plain array userspace sizes to the possible CPUs, kmalloc'd in the
/// direct map while it stays under 32 KiB (`bpf_map_area_alloc()`; up to
/// 255 CPUs at 128 bytes a slot).
#[map]
static DIRTY_SLOT: Array<DirtierSlot> = Array::with_max_entries(1, 0);

#[unsafe(no_mangle)]
static DIRTIER_MEMBERS: DirtierMembers = DirtierMembers::EMPTY;

/// Layout of `writeback:writeback_dirty_folio` (or `_page`).
#[unsafe(no_mangle)]
static DIRTY_FOLIO_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

#[inline(always)]
fn spec(index: usize) -> MemberSpec {
    load_spec(&DIRTIER_MEMBERS.members[index])
}

#[inline(always)]
fn scalar(base: *const u8, index: usize) -> i64 {
    Typed::scalar(base, &DIRTIER_MEMBERS.members[index])
}

#[inline(always)]
fn pointer(base: *const u8, index: usize) -> *const u8 {
    Typed::pointer(base, &DIRTIER_MEMBERS.members[index])
}

/// The cgroup the kernel charges the inode's writeback to:
/// `inode->i_wb->memcg_css->cgroup->kn->id`, 0 when the kernel has no
/// cgroup writeback (members absent) or the inode no `i_wb` (cgroup
/// writeback off: `inode_cgwb_enabled()` in include/linux/backing-dev.h).
#[inline(always)]
fn owner_cgroup(inode: *const u8) -> u64 {
    // The verifier walks only the branch the frozen table selects: a load
    // through an absent member's null would be refused.
    if spec(dm::INODE_I_WB).present == 0
        || spec(dm::WB_MEMCG_CSS).present == 0
        || spec(dm::CSS_CGROUP).present == 0
        || spec(dm::CGROUP_KN).present == 0
        || spec(dm::KN_ID).present == 0
    {
        return 0;
    }
    let wb = pointer(inode, dm::INODE_I_WB);
    let css = pointer(wb, dm::WB_MEMCG_CSS);
    let cgroup = pointer(css, dm::CSS_CGROUP);
    let kn = pointer(cgroup, dm::CGROUP_KN);
    scalar(kn, dm::KN_ID) as u64
}

/// This CPU's slot, when the map has one (userspace gives it one per
/// possible CPU).
#[inline(always)]
fn slot() -> Option<&'static mut DirtierSlot> {
    // SAFETY: plain helper call; tracing programs run with migration
    // disabled, so the CPU stays this one until the program returns.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let slot = DIRTY_SLOT.get_ptr_mut(cpu)?;
    // SAFETY: this CPU's slot, written by programs on this CPU only. The
    // program does not nest on one CPU (the kernel skips a program that
    // would recurse), so nothing else writes it meanwhile; userspace only
    // reads it.
    Some(unsafe { &mut *slot })
}

/// Adds `pages` to the slot when the folio is the slot's (inode, process):
/// the hit that a run of dirtying by one process of one file takes folio
/// after folio, reading nothing of the slot but its first line.
#[inline(always)]
fn hit(slot: &mut DirtierSlot, key: &DirtierKey, pages: u64) -> bool {
    if slot.key != *key {
        return false;
    }
    if slot.dropped == 0 {
        slot.entry.pages += pages;
    }
    true
}

/// A miss: moves the slot's pages to `DIRTIERS` and makes the folio's
/// (inode, process) the slot's, with the process's thread, comm, cgroup
/// and the inode's owner, or marks it dropped when the filter drops it.
#[inline(always)]
fn refill(slot: &mut DirtierSlot, key: DirtierKey, pages: u64, owner: impl FnOnce() -> u64) {
    if slot.entry.pages != 0 {
        let key = slot.key;
        flush(&key, &mut slot.entry);
    }
    // Pages to 0 before the key changes: a concurrent reader may see the
    // old key without pages (counted at the next read), never the old
    // pages under the new key.
    slot.entry.pages = 0;
    slot.key = key;
    if !dirty_filter(key.dev, key.ino, key.tgid) {
        slot.dropped = 1;
        return;
    }
    slot.dropped = 0;
    // SAFETY: plain helper call.
    slot.entry.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    slot.entry.owner_cgroup_id = owner();
    slot.entry.pid = bpf_get_current_pid_tgid() as u32;
    slot.entry.comm = bpf_get_current_comm().unwrap_or_default();
    slot.entry.pages = pages;
}

/// Adds a slot's pages to `DIRTIERS`, creating the entry (with the
/// slot's thread, comm, cgroup and owner, and its birth time) on first
/// sight, and tells the next reading the entry changed ([`announce`]).
#[inline(always)]
fn flush(key: &DirtierKey, pending: &mut DirtierEntry) {
    let reading = reading();
    let entry = match DIRTIERS.get_ptr_mut(key) {
        Some(e) => e,
        None => {
            // SAFETY: plain helper call.
            pending.born_ns = unsafe { bpf_ktime_get_ns() };
            pending.queued = reading;
            if DIRTIERS.insert(key, &*pending, BPF_NOEXIST as u64).is_ok() {
                bump(stat::DIRTIERS_NEW);
                pending.born_ns = 0;
                announce(key);
                return;
            }
            pending.born_ns = 0;
            // Another CPU created it meanwhile: add to theirs.
            match DIRTIERS.get_ptr_mut(key) {
                Some(e) => e,
                None => return,
            }
        }
    };
    // SAFETY: a live map value; `pages` is its first field.
    atomic_add(unsafe { &raw mut (*entry).pages }, pending.pages);
    // SAFETY: as above. Two CPUs racing here may both announce the entry:
    // the reading takes each key once.
    unsafe {
        if (*entry).queued != reading {
            (*entry).queued = reading;
            announce(key);
        }
    }
}

/// The reading generation userspace is in (`sampling::READING`).
#[inline(always)]
fn reading() -> u32 {
    // SAFETY: a live array value, written only by userspace.
    SAMPLING
        .get_ptr(sampling::READING)
        .map_or(0, |p| unsafe { *p })
}

/// Sends a `DirtierChanged` for `key`; a full ring is counted
/// (`stat::LOST_CHANGED`), and the next reading then reads the whole map
/// instead.
#[inline(always)]
fn announce(key: &DirtierKey) {
    let Some(mut record) = DIRTYINGS.reserve::<DirtierChanged>(0) else {
        bump(stat::LOST_CHANGED);
        return;
    };
    record.write(DirtierChanged {
        kind: DIRTIER_CHANGED_KIND,
        _pad: 0,
        key: *key,
    });
    record.submit(BPF_RB_NO_WAKEUP as u64);
}

/// The in-kernel filters at dirty time: device and inode drop the event;
/// a process or cgroup filter that matches marks the inode, so that its
/// writeback passes the filter whoever makes it ([`dirtied_by_filter`]).
/// Returns false when the event is dropped. Run on a slot miss only: a
/// hit has the slot's verdict.
#[inline(always)]
fn dirty_filter(dev: u32, ino: u64, tgid: u32) -> bool {
    // SAFETY: .rodata global, see read::field.
    let f: Filter = unsafe { core::ptr::read_volatile(&FILTER) };
    if (f.dev != 0 && dev != 0 && f.dev != dev) || (f.ino != 0 && f.ino != ino) {
        return false;
    }
    if f.tgid != 0 || f.cgroup_id != 0 {
        let tgid_ok = f.tgid == 0 || f.tgid == tgid;
        // SAFETY: plain helper call.
        let cgroup_ok = f.cgroup_id == 0 || f.cgroup_id == unsafe { bpf_get_current_cgroup_id() };
        if tgid_ok && cgroup_ok {
            let _ = FILTER_DIRTIED.insert(&InodeKey { ino, dev, _pad: 0 }, &1, 0);
        }
    }
    true
}

/// Whether the `--pid`/`--cgroup` filter's process or cgroup dirtied pages
/// of this inode since the trace started (the classic dirty hook does
/// not know the device: its entries have device 0).
#[inline(always)]
pub(crate) fn dirtied_by_filter(dev: u32, ino: u64) -> bool {
    // One key on the stack, reused: the kprobe program that calls this
    // sits within 16 bytes of 6.1's stack limit (writepages.rs, `zero`).
    let mut key = InodeKey { ino, dev, _pad: 0 };
    // SAFETY: values are not read, only their presence.
    if unsafe { FILTER_DIRTIED.get(&key) }.is_some() {
        return true;
    }
    key.dev = 0;
    // SAFETY: as above.
    unsafe { FILTER_DIRTIED.get(&key) }.is_some()
}

/// `folio_nr_pages()`: 1 unless the folio is large (PG_head set), when
/// the count is in the folio's first tail page.
#[inline(always)]
fn folio_pages(folio: *const u8) -> u64 {
    if spec(dm::FOLIO_NR_PAGES).present == 0 {
        return 1;
    }
    // SAFETY: .rodata global, see read::field.
    let bit = unsafe { core::ptr::read_volatile(&DIRTIER_MEMBERS.pg_head_bit) };
    let flags = scalar(folio, dm::FOLIO_FLAGS) as u64;
    if (flags >> (bit & 63)) & 1 == 0 {
        return 1;
    }
    let n = scalar(folio, dm::FOLIO_NR_PAGES) as u64;
    // A bound against a surprise: folios are at most MAX_PAGECACHE_ORDER
    // (PMD order, 512 pages on x86-64) here; 1 << 18 covers every
    // architecture's PUD order too.
    if n > 0 && n <= 1 << 18 { n } else { 1 }
}

/// `tp_btf/writeback_dirty_folio`: TP_PROTO(struct folio *folio, struct
/// address_space *mapping) (include/trace/events/writeback.h), fired by
/// `folio_account_dirtied()` as the folio's `folio_nr_pages()` pages are
/// added to NR_FILE_DIRTY.
///
/// Once per folio dirtied, and under a writer of large folios (1 MiB
/// writes) between two runs the kernel copies enough to evict the
/// program's code and data from the caches. A hit reads the lines the
/// kernel has just used itself (the folio, the mapping, the inode, the
/// superblock, the current task), the member specs and one line of the
/// slot; the filter and the hash are read on a miss only. Each cold line
/// still costs about as much as an empty program here
/// (docs/bench-log/tracer-overhead.md: this program against an empty one
/// on `writeback_dirty_folio`, under the same 4 KiB writes).
#[btf_tracepoint(function = "writeback_dirty_folio")]
pub fn tp_btf_dirty_folio(ctx: BtfTracePointContext) -> i32 {
    let folio = raw_arg(&ctx, 0) as *const u8;
    let mapping = raw_arg(&ctx, 1) as *const u8;
    // The verifier types `mapping` as possibly null (the kernel lists
    // this argument among the nullable tracepoint arguments) and allows
    // no offset on it before a check.
    if mapping.is_null() {
        return 0;
    }
    let Some(scale) = sampled() else {
        return 0;
    };
    let Some(slot) = slot() else {
        return 0;
    };
    let inode = pointer(mapping, dm::MAPPING_HOST);
    let sb = pointer(inode, dm::INODE_I_SB);
    let ino = scalar(inode, dm::INODE_I_INO) as u64;
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let key = DirtierKey {
        ino,
        dev: scalar(sb, dm::SB_S_DEV) as u32,
        tgid,
    };
    let pages = folio_pages(folio) * scale;
    if hit(slot, &key, pages) {
        return 0;
    }
    refill(slot, key, pages, || owner_cgroup(inode));
    0
}

/// `writeback:writeback_dirty_folio` (or `writeback_dirty_page`), classic
/// tracepoint: the inode number only (the record names the bdi, not the
/// filesystem: device 0) and one page per event (the folio's size is not
/// in the record).
#[tracepoint]
pub fn dirty_folio(ctx: TracePointContext) -> u32 {
    let Some(scale) = sampled() else {
        return 0;
    };
    let ino = field(&ctx, &DIRTY_FOLIO_LAYOUT, dirty_folio::INO) as u64;
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(slot) = slot() else {
        return 0;
    };
    let key = DirtierKey { ino, dev: 0, tgid };
    if hit(slot, &key, scale) {
        return 0;
    }
    refill(slot, key, scale, || 0);
    0
}

/// Keeps one `InodeDirtying` for the current process in this CPU's
/// batch, unless the device or inode filter drops the inode (the
/// `--pid`/`--cgroup` filter marks it instead, as the per-folio program
/// does).
#[inline(always)]
fn dirtying<A: Access>(dev: u32, ino: u64, owner: impl FnOnce() -> u64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !dirty_filter(dev, ino, (pid_tgid >> 32) as u32) {
        return;
    }
    let (Some(batch), Some(state)) = (
        DIRTYING_BATCHES.get_ptr_mut(0),
        DIRTYING_STATE.get_ptr_mut(0),
    ) else {
        return;
    };
    // SAFETY: plain helper call.
    let (at_ns, cgroup_id) = (unsafe { bpf_ktime_get_ns() }, A::current_cgroup_id());
    // SAFETY: this CPU's values, written by programs on this CPU only;
    // the state's busy flag keeps a flush that interrupts this program
    // off the batch.
    let (batch, state) = unsafe { (&mut *batch, &mut *state) };
    let at = batch::begin::<DirtyingBatch>(state);
    // SAFETY: `begin` gives a place in the batch.
    unsafe {
        batch.dirtyings.as_mut_ptr().add(at).write(InodeDirtying {
            kind: INODE_DIRTYING_KIND,
            dev,
            ino,
            at_ns,
            cgroup_id,
            owner_cgroup_id: owner(),
            tgid: (pid_tgid >> 32) as u32,
            pid: pid_tgid as u32,
            comm: A::current_comm(),
        })
    };
    batch::commit(batch, state, at);
}

/// This CPU's dirtyings not yet sent (`writeback_common::DirtyingBatch`).
#[map]
static DIRTYING_BATCHES: PerCpuArray<DirtyingBatch> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's dirtying batch count and busy flag, read by userspace
/// before each drain of `DIRTYINGS` to ask the CPUs that keep dirtyings
/// for them.
#[map]
static DIRTYING_STATE: PerCpuArray<BatchState> = PerCpuArray::with_max_entries(1, 0);

impl Batch for DirtyingBatch {
    const N: usize = DIRTYING_BATCH;

    /// One record to `DIRTYINGS`, waking userspace only once a quarter of
    /// the ring waits; dirtyings a full ring refuses are counted lost.
    #[inline(always)]
    fn send(&mut self, count: u32) {
        self.kind = DIRTYING_BATCH_KIND;
        self.count = count;
        if DIRTYINGS
            .output::<DirtyingBatch>(self, crate::wakeup_past(&DIRTYINGS, DIRTYINGS_WAKEUP_AT))
            .is_err()
        {
            crate::bump_by(stat::LOST_DIRTYINGS, u64::from(count));
        }
    }
}

/// Sends this CPU's kept dirtyings (batch.rs, `flush`). Never attached:
/// userspace runs it on each CPU that keeps dirtyings before it drains
/// `DIRTYINGS`, as `flush_call_batch` for the calls.
#[raw_tracepoint(tracepoint = "flush_dirtying_batch")]
pub fn flush_dirtying_batch(_ctx: RawTracePointContext) -> i32 {
    let (Some(batch), Some(state)) = (
        DIRTYING_BATCHES.get_ptr_mut(0),
        DIRTYING_STATE.get_ptr_mut(0),
    ) else {
        return batch::FLUSHED;
    };
    // SAFETY: this CPU's values (batch.rs, `flush`).
    let (batch, state) = unsafe { (&mut *batch, &mut *state) };
    batch::flush(batch, state)
}

/// `tp_btf/writeback_dirty_inode_enqueue`: TP_PROTO(struct inode *inode)
/// (include/trace/events/writeback.h, `writeback_inode_template`), fired
/// by `__mark_inode_dirty()` once the inode is marked dirty and was not
/// before, in the context of the task that dirtied it, with its
/// `i_wb` attached (`inode_attach_wb()` runs first), so the owner cgroup
/// is the one its writeback will be charged to.
#[btf_tracepoint(function = "writeback_dirty_inode_enqueue")]
pub fn tp_btf_dirty_inode(ctx: BtfTracePointContext) -> i32 {
    let inode = raw_arg(&ctx, 0) as *const u8;
    if inode.is_null() {
        return 0;
    }
    let sb = pointer(inode, dm::INODE_I_SB);
    let ino = scalar(inode, dm::INODE_I_INO) as u64;
    let dev = scalar(sb, dm::SB_S_DEV) as u32;
    dirtying::<Typed>(dev, ino, || owner_cgroup(inode));
    0
}

/// `writeback:writeback_dirty_inode_enqueue`, classic tracepoint: the
/// record has the superblock's `dev` and the inode number.
#[tracepoint]
pub fn dirty_inode(ctx: TracePointContext) -> u32 {
    let dev = field(&ctx, &DIRTY_INODE_LAYOUT, dirty_inode::DEV) as u32;
    let ino = field(&ctx, &DIRTY_INODE_LAYOUT, dirty_inode::INO) as u64;
    dirtying::<Probed>(dev, ino, || 0);
    0
}
