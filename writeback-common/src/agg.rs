/// Number of `enum wb_reason` slots (WB_REASON_MAX is 10 in 6.x; room
/// to grow).
pub const WB_REASONS: u32 = 16;
/// Flusher work chunks per reason (writeback_written).
pub const WORK_CHUNKS: u32 = 0;
/// Pages written per reason: `nr_pages` at writeback_start minus at
/// writeback_written (the budget consumed).
pub const WORK_PAGES: u32 = WORK_CHUNKS + WB_REASONS;
/// writeback_single_inode: passes, pages asked, pages written, on
/// every device (per device: `INODE_PASS`, [`crate::inode_pass`]).
pub const INODE_PASSES: u32 = WORK_PAGES + WB_REASONS;
pub const INODE_ASKED: u32 = INODE_PASSES + 1;
pub const INODE_WROTE: u32 = INODE_PASSES + 2;
/// balance_dirty_pages: events, and those that paused the task.
pub const THROTTLE_EVENTS: u32 = INODE_PASSES + 3;
pub const THROTTLE_PAUSES: u32 = THROTTLE_EVENTS + 1;
/// Sum of `pause` (ms, jiffy resolution: `pause * 1000 / HZ` in
/// include/trace/events/writeback.h) over pausing events.
pub const THROTTLE_PAUSE_MS: u32 = THROTTLE_EVENTS + 2;
/// log2 histogram of `pause` in ms, 32 buckets.
pub const THROTTLE_HIST: u32 = THROTTLE_EVENTS + 3;
pub const HIST_BUCKETS: u32 = 32;
/// writeback:wbc_writepage events (folios handed to ->writepage by
/// write_cache_pages/writeback_iter users).
pub const WBC_WRITEPAGE: u32 = THROTTLE_HIST + HIST_BUCKETS;
/// Pause ms by the limit that paused the task (`balance_dirty_pages`
/// fields `limit`, `setpoint`, `dirty`): with the domain's dirty at or
/// under its free-run ceiling only the device's own (strict) limit
/// throttles; over it, a `limit` below the global `dirty_limit` or a
/// free-run ceiling under the global domain's is a memcg's; else the
/// global limit. Pauses on kernels whose tracepoint
/// has no `limit` are in none of the three.
pub const THROTTLE_GLOBAL_MS: u32 = WBC_WRITEPAGE + 1;
pub const THROTTLE_BDI_MS: u32 = WBC_WRITEPAGE + 2;
pub const THROTTLE_MEMCG_MS: u32 = WBC_WRITEPAGE + 3;
/// Writepages calls the kernel's call sample left out
/// (`sampling::CALLS`), and the pages they wrote: with the sampled
/// calls' records, the interval's totals stay exact.
pub const CALLS_SAMPLED_OUT: u32 = WBC_WRITEPAGE + 4;
pub const PAGES_SAMPLED_OUT: u32 = WBC_WRITEPAGE + 5;
pub const COUNT: u32 = WBC_WRITEPAGE + 6;
