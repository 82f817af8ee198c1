//! The block programs' per-device histograms and in-flight requests.

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
    /// Histogram kinds.
    pub const KINDS: usize = 2;
    /// log2 buckets per histogram (0..=63).
    pub const BUCKETS: usize = 64;
    /// Device slots of [`BlockSlots`], a power of two.
    pub const SLOTS: u32 = 16;
    /// Slots a device tries, from its hash on (linear probing), before it
    /// goes to the overflow hash.
    pub const PROBES: u32 = 8;

    /// The `probe`-th slot of [`BlockSlots`] device `dev` may use
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

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of plain integers with explicit padding.
    unsafe impl aya::Pod for super::BlockHistKey {}
    unsafe impl aya::Pod for super::BlockSlots {}
    unsafe impl aya::Pod for super::RequestKey {}
}
