//! One program run at a time per CPU for the per-CPU scratch slots that
//! records are built in (writepages.rs `START`/`SCRATCH`, hook.rs
//! `HOOK_SCRATCH`, generic.rs `GENERIC_SCRATCH` and `WBC_SEEN`; dirtier.rs
//! has its own two slots per CPU with the same counter in each).
//!
//! A slot per CPU is safe only while nothing else runs on the CPU until
//! the program returns. That holds for programs run with preemption
//! disabled, but fentry/fexit programs run with migration disabled only
//! (`__bpf_prog_enter()`, kernel/bpf/trampoline.c), and on PREEMPT_RT
//! that is what keeps any program on its CPU: another task can run
//! programs on the CPU while one is halfway through a slot. The kernel
//! skips a program whose own previous run on the CPU is unfinished
//! (`prog->active`, counted in its `recursion_misses`), but not another
//! program that shares the slot.
//!
//! The guard is the kernel's own for per-CPU state its BPF code shares
//! (`bpf_task_storage_busy`, `bpf_prog_active`): a per-CPU counter, added
//! to on entry, and the slot is this run's only if the counter then reads
//! 1. The add is an atomic instruction (`BPF_XADD`, in every kernel the
//! programs load on) and the read comes after it, so of any runs
//! interleaved on a CPU at most one reads 1 while it holds the slot; the
//! others back off and are counted with the starts that could not be
//! stored (`stat::INFLIGHT_FULL`; the call's end is then an unmatched
//! result, in every summary).
use aya_ebpf::{macros::map, maps::PerCpuArray};
use writeback_common::stat;

use crate::{atomic_add, bump};

/// Busy counters, one per guarded slot (`slot::*`).
#[map]
static SCRATCH_BUSY: PerCpuArray<u64> = PerCpuArray::with_max_entries(slot::COUNT, 0);

/// Indexes of [`SCRATCH_BUSY`].
pub(crate) mod slot {
    /// writepages.rs: `START` and `SCRATCH`, used by one start program.
    pub(crate) const WRITEPAGES: u32 = 0;
    /// hook.rs: `HOOK_SCRATCH`.
    pub(crate) const HOOK: u32 = 1;
    /// generic.rs: `GENERIC_SCRATCH`.
    pub(crate) const GENERIC: u32 = 2;
    /// generic.rs: `WBC_SEEN`'s writer.
    pub(crate) const WBC_SEEN: u32 = 3;
    pub(crate) const COUNT: u32 = 4;
}

/// This CPU's slot `index`, held until dropped.
pub(crate) struct Claim(*mut u64);

impl Claim {
    /// Claims slot `index` on this CPU, or counts a run that found it
    /// busy and returns `None`.
    #[inline(always)]
    pub(crate) fn take(index: u32) -> Option<Claim> {
        let busy = SCRATCH_BUSY.get_ptr_mut(index)?;
        atomic_add(busy, 1);
        // SAFETY: this CPU's counter, read after the atomic add above.
        if unsafe { core::ptr::read_volatile(busy) } == 1 {
            return Some(Claim(busy));
        }
        atomic_add(busy, u64::MAX);
        bump(stat::INFLIGHT_FULL);
        None
    }
}

impl Drop for Claim {
    #[inline(always)]
    fn drop(&mut self) {
        // Adding 2^64 - 1 is subtracting 1.
        atomic_add(self.0, u64::MAX);
    }
}
