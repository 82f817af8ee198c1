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
    pub members: [MemberSpec; block_members::ALL],
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
    /// Bit of `__REQ_META` in `bio.bi_opf`, as the two above.
    pub meta_bit: u32,
    /// 1 when every member from [`block_members::LEDGER`] on resolved:
    /// the bio program then counts the device ledger
    /// ([`DeviceLedger`]); 0 leaves it to the classic tracepoint's fields.
    pub ledger: u32,
    pub _pad: u32,
}

impl BlockMembers {
    pub const NO_STATS_BIT: u32 = 64;
    pub const EMPTY: BlockMembers = BlockMembers {
        members: [MemberSpec::ABSENT; block_members::ALL],
        stats_bit: Self::NO_STATS_BIT,
        preflush_bit: Self::NO_STATS_BIT,
        fua_bit: Self::NO_STATS_BIT,
        meta_bit: Self::NO_STATS_BIT,
        ledger: 0,
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
    /// From here on the members of the device ledger, optional together
    /// (`BlockMembers::ledger`): the bio's op and flags, its device and
    /// start sector, and the owner of its first page.
    pub const LEDGER: usize = 10;
    pub const BIO_OPF: usize = 10;
    pub const BIO_BDEV: usize = 11;
    pub const BDEV_DEV: usize = 12;
    pub const BIO_SECTOR: usize = 13;
    pub const BIO_IO_VEC: usize = 14;
    pub const BVEC_PAGE: usize = 15;
    pub const PAGE_MAPPING: usize = 16;
    pub const MAPPING_HOST: usize = 17;
    pub const INODE_MODE: usize = 18;
    pub const ALL: usize = 19;
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
    ///
    /// The ledger's: `bi_opf` (`blk_opf_t`), `bi_bdev` (since 5.12; before,
    /// `bi_disk`, and the ledger is left to the classic tracepoint),
    /// `bd_dev` (the dev_t the block tracepoints print),
    /// `bi_iter.bi_sector` (in 512-byte sectors of `bi_bdev`; block/
    /// blk-core.c remaps a partition's bios to the whole disk before
    /// `trace_block_bio_queue`), the first `bio_vec`'s page, and that
    /// page's `mapping->host->i_mode` (include/linux/mm_types.h: a page
    /// cache page's `mapping` is its file's address_space; an anonymous
    /// page's has bit 0 set and reads as no inode, see `ledger_class`).
    pub const PATHS: [(&str, &str, bool); ALL] = [
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
        ("bio", "bi_opf", false),
        ("bio", "bi_bdev", false),
        ("block_device", "bd_dev", false),
        ("bio", "bi_iter.bi_sector", false),
        ("bio", "bi_io_vec", false),
        ("bio_vec", "bv_page", false),
        ("page", "mapping", false),
        ("address_space", "host", false),
        ("inode", "i_mode", false),
    ];
}

/// Where the bytes written to a device went, by what the bio carried
/// (writeback-ebpf block.rs counts each write bio's bytes in one class at
/// `block_bio_queue`; userspace names them data, journal, metadata and
/// other: wbscope-model `ledger`).
pub mod ledger_class {
    /// Inside the journal (jbd2) or log (xfs) the filesystem's superblock
    /// places on the device ([`super::DeviceLedger::journal`]).
    pub const JOURNAL: usize = 0;
    /// Flagged `REQ_META` by the filesystem (xfs's buffers, btrfs's
    /// trees, jbd2's checkpoints on kernels whose `JBD2_JOURNAL_REQ_FLAGS`
    /// carry it).
    pub const META: usize = 1;
    /// A page of the block device's own page cache: ext2/3/4's metadata
    /// buffers written back, or writes to the device node itself.
    pub const BDEV: usize = 2;
    /// A page of a file's page cache (buffered data written back).
    pub const FILE: usize = 3;
    /// A write whose first page no inode owns: direct I/O from user
    /// memory, swap.
    pub const UNOWNED: usize = 4;
    /// A plain write the classic tracepoint saw (no page to look at).
    pub const PLAIN: usize = 5;
    /// A write that carries no data of its own: `REQ_OP_WRITE_ZEROES`,
    /// secure erase, zone management.
    pub const NO_DATA: usize = 6;
    pub const COUNT: usize = 7;

    /// `REQ_OP_WRITE` and `REQ_OP_DISCARD` (include/linux/blk_types.h).
    pub const REQ_OP_WRITE: u32 = 1;
    pub const REQ_OP_DISCARD: u32 = 3;
    /// `S_IFMT` and `S_IFBLK` (include/uapi/linux/stat.h).
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFBLK: u32 = 0o060000;

    /// Whether op `op` counts in the device's sectors written: what
    /// `op_stat_group()` (include/linux/blkdev.h) files under
    /// `STAT_WRITE`, every write op (odd, `op_is_write()`) but discard.
    pub const fn counts_as_written(op: u32) -> bool {
        op & 1 == 1 && op != REQ_OP_DISCARD
    }

    /// The class of a write bio from its op, its `REQ_META` flag and the
    /// mode of the inode owning its first page (0 for none).
    pub const fn of(op: u32, meta: bool, owner_mode: u32) -> usize {
        if op != REQ_OP_WRITE {
            NO_DATA
        } else if meta {
            META
        } else {
            match owner_mode & S_IFMT {
                0 => UNOWNED,
                S_IFBLK => BDEV,
                _ => FILE,
            }
        }
    }

    /// The class of a bio from the classic tracepoint's `rwbs` (as
    /// [`super::flush_class::of_rwbs`] reads it): `None` for one that
    /// writes nothing (reads, discards, flushes, `N` ops such as write
    /// zeroes, which the classic event cannot tell apart).
    pub fn of_rwbs(word: u64) -> Option<usize> {
        let at = |i: u32| ((word >> (i * 8)) & 0xff) as u8;
        let op = if at(0) == b'F' { 1 } else { 0 };
        if at(op) != b'W' {
            return None;
        }
        let mut i = op + 1;
        while i < 8 {
            if at(i) == b'M' {
                return Some(META);
            }
            i += 1;
        }
        Some(PLAIN)
    }
}

/// Key of `DIRECT_BYTES`: a process's write bios of pages no file owns
/// (O_DIRECT from user memory: [`ledger_class::UNOWNED`]), per device,
/// counted in the submitter's context at `block_bio_queue`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DirectKey {
    pub tgid: u32,
    pub dev: u32,
}

/// A device's ledger (`DEVICE_LEDGER`, keyed by its dev_t, shared by all
/// CPUs and added to atomically): where its journal lies, put there by
/// userspace once the programs are attached, and the bytes of its write bios
/// by [`ledger_class`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceLedger {
    /// `[start, end)` in 512-byte sectors of the device, up to
    /// [`DeviceLedger::RANGES`] extents; empty ranges are `[0, 0)`.
    pub journal: [[u64; 2]; DeviceLedger::RANGES],
    pub bytes: [u64; ledger_class::COUNT],
}

impl DeviceLedger {
    /// Extents of a journal: an ext4 journal inode's root holds up to
    /// four (`EXT4_EXT_ROOT` in i_block, fs/ext4/ext4_extents.h); xfs's
    /// internal log is one.
    pub const RANGES: usize = 4;

    /// Whether `sector` lies in the journal.
    #[inline(always)]
    pub fn in_journal(&self, sector: u64) -> bool {
        let mut i = 0;
        while i < Self::RANGES {
            let [start, end] = self.journal[i];
            if sector >= start && sector < end {
                return true;
            }
            i += 1;
        }
        false
    }
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
    unsafe impl aya::Pod for super::DeviceLedger {}
    unsafe impl aya::Pod for super::DirectKey {}
}
