//! The block programs' per-device histograms and in-flight requests,
//! and the struct members their BTF programs read.

use crate::MemberSpec;

/// Key of a request in flight on a device (issue → complete).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RequestKey {
    pub sector: u64,
    pub dev: u32,
    pub _pad: u32,
}

/// Key of the per-device block histograms (`BLOCK_HIST`, per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockHistKey {
    pub dev: u32,
    /// [`block_hist`].
    pub kind: u16,
    /// log2 bucket: 0 for 0, k for [2^(k-1), 2^k).
    pub bucket: u16,
}

pub mod block_hist {
    /// Request size in bytes at block_rq_issue.
    pub const ISSUE_BYTES: u16 = 0;
    /// Issue-to-complete latency in ns.
    pub const LATENCY_NS: u16 = 1;
    /// Histogram kinds of [`super::BlockSlots`]: the two above, for
    /// every request.
    pub const KINDS: usize = 2;
    /// Issue-to-complete latency in ns of the requests that carry a cache
    /// flush, one kind per [`super::flush_class`] from here on, counted
    /// in the overflow hash only (one or two per fsync, not per request).
    pub const FLUSH_LATENCY_NS: u16 = 2;
    /// log2 buckets per histogram (0..=63).
    pub const BUCKETS: usize = 64;
    /// Device slots of [`super::BlockSlots`], a power of two.
    pub const SLOTS: u32 = 16;
    /// Slots a device tries, from its hash on (linear probing), before it
    /// goes to the overflow hash.
    pub const PROBES: u32 = 8;

    /// The `probe`-th slot of [`super::BlockSlots`] device `dev` may use
    /// (Fibonacci hashing: kernel dev_t numbers cluster in their low bits).
    pub const fn slot_of(dev: u32, probe: u32) -> u32 {
        ((dev.wrapping_mul(0x9E37_79B1) >> (32 - SLOTS.trailing_zeros())) + probe) & (SLOTS - 1)
    }
}

/// The block programs' per-device histograms: the one value of the array
/// `BLOCK_SLOTS`, shared by all CPUs, each count an atomic add (as
/// libbpf-tools' biolatency counts into a map value every CPU shares).
/// A device holds the first of its [`block_hist::slot_of`] slots that is
/// free or its own; a device that finds all of them taken goes to the
/// per-CPU hash `BLOCK_HIST`.
///
/// Why not per CPU: a completion finds this memory cold (under a loop
/// device the completion runs after the request's data was copied), and
/// per-CPU map memory lives in vmalloc'd percpu chunks mapped with 4 KiB
/// pages, so each of the two lines a count touched (the slot's device,
/// its bucket) cost a TLB miss on top of the cache miss: adding the count
/// measured ~450 ns of a ~1,100 ns `tp_btf_rq_complete` run (loop ext4,
/// `dd bs=1M count=1024 conv=fsync`). At 16.4 KiB this array is kmalloc'd
/// (`bpf_map_area_alloc()`, up to 32 KiB), in the kernel's direct map,
/// and the devices of all slots share one cache line that only a slot's
/// first claim writes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSlots {
    /// Kernel dev_t of the device holding each slot; 0 = free.
    pub devs: [u32; block_hist::SLOTS as usize],
    /// Indexed by slot, [`block_hist`] kind, then log2 bucket.
    pub buckets: [[[u64; block_hist::BUCKETS]; block_hist::KINDS]; block_hist::SLOTS as usize],
}

impl Default for BlockSlots {
    fn default() -> Self {
        BlockSlots {
            devs: [0; block_hist::SLOTS as usize],
            buckets: [[[0; block_hist::BUCKETS]; block_hist::KINDS]; block_hist::SLOTS as usize],
        }
    }
}

/// What the BTF-typed block programs read (`tp_btf/block_rq_issue`,
/// `block_rq_complete`, `block_bio_queue`), resolved from the kernel's BTF
/// apart from [`crate::KernelMembers`] so that a kernel lacking one of these
/// refuses only the block hooks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockMembers {
    /// Indexed by [`block_members`].
    pub members: [MemberSpec; 10],
    /// Bit of `QUEUE_FLAG_STATS` in `request_queue.queue_flags`, or
    /// [`BlockMembers::NO_STATS_BIT`] when the kernel's BTF does not name
    /// it (a `#define` before the flags became an enum).
    pub stats_bit: u32,
    /// Bits of `__REQ_PREFLUSH` and `__REQ_FUA` in `request.cmd_flags`
    /// (`enum req_flag_bits`, include/linux/blk_types.h), or
    /// [`BlockMembers::NO_STATS_BIT`] when BTF does not name them: the
    /// request's [`flush_class`].
    pub preflush_bit: u32,
    pub fua_bit: u32,
    pub _pad: u32,
}

impl BlockMembers {
    pub const NO_STATS_BIT: u32 = 64;
    pub const EMPTY: BlockMembers = BlockMembers {
        members: [MemberSpec::ABSENT; 10],
        stats_bit: Self::NO_STATS_BIT,
        preflush_bit: Self::NO_STATS_BIT,
        fua_bit: Self::NO_STATS_BIT,
        _pad: 0,
    };
}

/// [`BlockMembers`] slots, with `(struct, member path, signed)` in
/// [`block_members::PATHS`] order.
pub mod block_members {
    pub const RQ_QUEUE: usize = 0;
    pub const QUEUE_DISK: usize = 1;
    pub const DISK_MAJOR: usize = 2;
    pub const DISK_FIRST_MINOR: usize = 3;
    pub const RQ_SECTOR: usize = 4;
    pub const RQ_DATA_LEN: usize = 5;
    pub const RQ_IO_START_TIME: usize = 6;
    pub const QUEUE_FLAGS: usize = 7;
    pub const BIO_SIZE: usize = 8;
    pub const RQ_CMD_FLAGS: usize = 9;
    /// Sources: include/linux/blk-mq.h (struct request), blkdev.h
    /// (request_queue, gendisk). The device is what the block tracepoints
    /// print, `disk_devt(rq->q->disk)` = `disk->part0->bd_dev`, which is
    /// `MKDEV(disk->major, disk->first_minor)`: `device_add_disk()`
    /// (block/genhd.c) sets the two, dynamic (extended) numbers included,
    /// and hands that devt to the whole-disk device, part0. Reading the two
    /// ints from the gendisk saves a dependent load of the block_device
    /// on every request. `__sector` and `__data_len` are what
    /// `blk_rq_pos()` and `blk_rq_bytes()` return; bvec.h's
    /// `bi_iter.bi_size` is what a bio still has to transfer, its whole
    /// size at `block_bio_queue`. `cmd_flags` is the op and flags the
    /// block tracepoints print as `rwbs` (`blk_opf_t`, a u32).
    pub const PATHS: [(&str, &str, bool); 10] = [
        ("request", "q", false),
        ("request_queue", "disk", false),
        ("gendisk", "major", false),
        ("gendisk", "first_minor", false),
        ("request", "__sector", false),
        ("request", "__data_len", false),
        ("request", "io_start_time_ns", false),
        ("request_queue", "queue_flags", false),
        ("bio", "bi_iter.bi_size", false),
        ("request", "cmd_flags", false),
    ];
}

/// The cache-flush classes of block requests, as `biolatency -F`
/// (libbpf-tools) splits them by `cmd_flags`: `REQ_OP_FLUSH` (an empty
/// flush: the block layer's flush sequence, block/blk-flush.c
/// `blk_kick_flush()`), and data requests still carrying `REQ_FUA` or
/// `REQ_PREFLUSH` when the driver gets them (`blk_insert_flush()` strips
/// both where the device has no volatile cache or does not do FUA, and
/// turns a PREFLUSH write into a flush request then the write).
pub mod flush_class {
    /// `REQ_OP_FLUSH`.
    pub const FLUSH: u16 = 0;
    /// A data request with `REQ_FUA` only.
    pub const FUA: u16 = 1;
    /// A data request with `REQ_PREFLUSH` only.
    pub const PREFLUSH: u16 = 2;
    /// A data request with both.
    pub const PREFLUSH_FUA: u16 = 3;
    pub const COUNT: u16 = 4;
    /// `REQ_OP_FLUSH` in `enum req_op` (include/linux/blk_types.h: READ 0,
    /// WRITE 1, FLUSH 2 since Linux 4.10), under `REQ_OP_MASK`
    /// (`REQ_OP_BITS` 8).
    pub const REQ_OP_FLUSH: u32 = 2;
    pub const REQ_OP_MASK: u32 = 0xff;

    /// The class of a request from its op and flags, `None` for one that
    /// flushes nothing.
    pub const fn of(op_flush: bool, preflush: bool, fua: bool) -> Option<u16> {
        if op_flush {
            Some(FLUSH)
        } else {
            match (preflush, fua) {
                (false, false) => None,
                (false, true) => Some(FUA),
                (true, false) => Some(PREFLUSH),
                (true, true) => Some(PREFLUSH_FUA),
            }
        }
    }

    /// The class of a request from `cmd_flags` (`struct request`), with
    /// the bits of `__REQ_PREFLUSH` and `__REQ_FUA` (`enum
    /// req_flag_bits`, read from the kernel's BTF: they moved as flags
    /// were added); a bit of 64 or more is one the kernel did not name.
    pub fn of_cmd_flags(flags: u32, preflush_bit: u32, fua_bit: u32) -> Option<u16> {
        let has = |bit: u32| bit < 32 && (flags >> bit) & 1 != 0;
        of(
            flags & REQ_OP_MASK == REQ_OP_FLUSH,
            has(preflush_bit),
            has(fua_bit),
        )
    }

    /// The class of a request from the `rwbs` string the block tracepoints
    /// print (8 bytes, little-endian in `word`), as `blk_fill_rwbs()`
    /// (block/blktrace.c) writes it: `F` first for `REQ_PREFLUSH`, the op
    /// (`W`, `R`, `D`, `DE`, `F` for `REQ_OP_FLUSH`, `N`), then `F` for
    /// `REQ_FUA`, then `A`, `S`, `M`.
    pub fn of_rwbs(word: u64) -> Option<u16> {
        let at = |i: u32| ((word >> (i * 8)) & 0xff) as u8;
        let preflush_lead = at(0) == b'F';
        let mut i = if preflush_lead { 1 } else { 0 };
        let op = at(i);
        i += 1;
        if op == b'D' && at(i) == b'E' {
            i += 1;
        }
        let fua = at(i) == b'F';
        // An empty flush prints `FF`: the flag and the op. A lone `F` would
        // be an op of FLUSH without the flag, which the block layer does
        // not send (`blk_kick_flush()` sets both), read the same way.
        if op == b'F' || (preflush_lead && op == 0) {
            of(true, false, false)
        } else {
            of(false, preflush_lead, fua)
        }
    }

    /// The name interval lines give the class.
    pub const fn name(class: u16) -> &'static str {
        match class {
            FLUSH => "flush",
            FUA => "fua",
            PREFLUSH => "preflush",
            _ => "preflush_fua",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::flush_class::{self, FLUSH, FUA, PREFLUSH, PREFLUSH_FUA};

    fn rwbs(s: &str) -> u64 {
        let mut b = [0u8; 8];
        b[..s.len()].copy_from_slice(s.as_bytes());
        u64::from_le_bytes(b)
    }

    #[test]
    fn rwbs_strings_of_blk_fill_rwbs_classify() {
        for (s, want) in [
            ("FF", Some(FLUSH)),
            ("FFS", Some(FLUSH)),
            ("WFS", Some(FUA)),
            ("WF", Some(FUA)),
            ("FWS", Some(PREFLUSH)),
            ("FWFS", Some(PREFLUSH_FUA)),
            ("FWFSM", Some(PREFLUSH_FUA)),
            ("W", None),
            ("WS", None),
            ("WSM", None),
            ("R", None),
            ("RA", None),
            ("RM", None),
            ("D", None),
            ("DE", None),
            ("N", None),
            ("", None),
        ] {
            assert_eq!(flush_class::of_rwbs(rwbs(s)), want, "{s:?}");
        }
    }

    #[test]
    fn cmd_flags_classify_with_the_kernels_bits() {
        // Linux 6.12's enum req_flag_bits: __REQ_FUA 17, __REQ_PREFLUSH 18.
        let (pre, fua) = (18, 17);
        let op = |o: u32, bits: &[u32]| bits.iter().fold(o, |f, b| f | 1 << b);
        assert_eq!(
            flush_class::of_cmd_flags(op(2, &[pre]), pre, fua),
            Some(FLUSH)
        );
        assert_eq!(
            flush_class::of_cmd_flags(op(1, &[fua, 11]), pre, fua),
            Some(FUA)
        );
        assert_eq!(
            flush_class::of_cmd_flags(op(1, &[pre]), pre, fua),
            Some(PREFLUSH)
        );
        assert_eq!(
            flush_class::of_cmd_flags(op(1, &[pre, fua]), pre, fua),
            Some(PREFLUSH_FUA)
        );
        assert_eq!(flush_class::of_cmd_flags(op(1, &[11, 12]), pre, fua), None);
        assert_eq!(flush_class::of_cmd_flags(op(0, &[]), pre, fua), None);
        // Bits the kernel did not name read as unset.
        assert_eq!(flush_class::of_cmd_flags(op(1, &[fua]), 64, 64), None);
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of plain integers with explicit padding.
    unsafe impl aya::Pod for super::BlockHistKey {}
    unsafe impl aya::Pod for super::BlockSlots {}
    unsafe impl aya::Pod for super::RequestKey {}
}
