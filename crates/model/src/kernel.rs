//! What the tracer reads from the kernel at one instant, as plain data:
//! the programs' counters and maps, their run times, and `/proc/vmstat`.
//! `Tracer::snapshot` fills it; interval lines difference two of them.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use writeback_common::{BlockHistKey, DevCounterKey};

/// Counters kept by the programs (`STATS`), summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelStats {
    pub lost_records: u64,
    pub unmatched_results: u64,
    pub inflight_full: u64,
    pub filtered: u64,
    /// Inode dirtyings the kernel could not queue (`DIRTYINGS` full):
    /// their writeback went to `(unknown)`.
    pub lost_dirtyings: u64,
    /// Inserts that found a hash map full (`writeback_common::stat::MAP_FULL`):
    /// requests, passes, pauses or span starts no figure holds.
    pub map_full: u64,
    /// Entries made in `THROTTLED` (`stat::THROTTLED_NEW`).
    pub throttled_new: u64,
    /// Entries the LRU maps (`THROTTLED`, `HANDLES`, `DIRTIERS`) evicted to
    /// make room: a process's pauses, a transaction's handles or a
    /// file's dirtier pages no figure holds.
    pub lru_evicted: u64,
    /// Call starts whose thread's call slot another thread's call held
    /// (`stat::SLOT_BUSY`): kept in task storage instead, counted fully.
    pub slot_busy: u64,
}

/// Run time of one attached program (BPF_ENABLE_STATS).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProgramRunTime {
    pub program: String,
    pub run_count: u64,
    pub run_time_ns: u64,
    /// Runs the kernel skipped: the program was already running on that
    /// CPU (tracer/maps.rs `recursion_misses`), or, for a kretprobe of
    /// ours, a return its event missed (no free instance); 0 where not
    /// known.
    pub recursion_misses: u64,
}

/// `/proc/vmstat` figures we compare against (pages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmStat {
    pub nr_dirty: u64,
    pub nr_writeback: u64,
    /// Cumulative: pages whose writeback completed (all filesystems).
    pub nr_written: u64,
    /// Cumulative: pages that went from clean to dirty.
    pub nr_dirtied: u64,
    pub nr_dirty_threshold: u64,
    pub nr_dirty_background_threshold: u64,
}

/// One whole disk's cumulative counters from /proc/diskstats
/// (Documentation/admin-guide/iostats.rst): reads, writes, discards and
/// flushes together, as the block tracepoints see every request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub dev: crate::DevId,
    /// Requests completed.
    pub requests: u64,
    /// 512-byte sectors they moved.
    pub sectors: u64,
    /// ms they took, issue to completion, summed.
    pub ticks_ms: u64,
    /// ms requests spent in flight, weighted by how many were
    /// (`time_in_queue`): its growth over an interval is the mean number
    /// in flight times the interval (Little's law).
    pub weighted_ms: u64,
    /// Of `sectors`, those written (field 10, what `op_stat_group()`
    /// files under writes: discards apart).
    pub sectors_written: u64,
    /// Cache flush requests completed and the ms they took (fields 16
    /// and 17, Linux 5.5+; 0 before): counted in `requests` and
    /// `ticks_ms` too.
    pub flushes: u64,
    pub flush_ms: u64,
}

/// Everything read from the kernel at one instant.
#[derive(Clone, Debug, Default)]
pub struct KernelSnapshot {
    pub agg: Vec<u64>,
    pub block: HashMap<BlockHistKey, u64>,
    /// Per-device inode-pass counters (empty unless the tp_btf hook of
    /// `writeback_single_inode` is attached).
    pub inode_pass: HashMap<DevCounterKey, u64>,
    pub dirty: Vec<u64>,
    pub stats: KernelStats,
    pub run_times: Vec<ProgramRunTime>,
    pub vmstat: VmStat,
    /// Every whole disk's counters (/proc/diskstats), whatever the
    /// devices' source: the device lines' means and what the ledger's
    /// device rows close against.
    pub disks: Vec<DiskCounters>,
    /// Bytes of write bios by `writeback_common::ledger_class` per whole
    /// disk, since attach (`--enable device_io`); empty otherwise.
    pub ledger: HashMap<crate::DevId, [u64; writeback_common::ledger_class::COUNT]>,
    /// Each process's direct-I/O bytes per whole disk, since attach
    /// (`--enable device_io`, the BTF bio program); empty otherwise.
    pub direct: HashMap<(u32, crate::DevId), u64>,
    /// Whether the bio program sees each bio's pages (the BTF one): the
    /// ledger's `direct` is measured only then.
    pub ledger_pages: bool,
    /// Why `ledger` is not counted, when it is not.
    pub ledger_unmeasured: Option<String>,
    /// Each mounted filesystem's device (`s_dev`, what calls carry) → the
    /// whole disk it is on.
    pub fs_disks: HashMap<crate::DevId, crate::DevId>,
    /// Pause ms in `balance_dirty_pages` per tgid since the tracer
    /// attached, and the process's comm.
    pub throttled: HashMap<u32, (u64, String)>,
}

impl KernelSnapshot {
    pub(crate) fn agg(&self, i: u32) -> u64 {
        self.agg.get(i as usize).copied().unwrap_or(0)
    }
}
