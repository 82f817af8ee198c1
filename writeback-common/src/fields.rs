//! Logical fields of each tracepoint the programs read, by format-file
//! name. A program reads field `i` through slot `i` of its
//! [`crate::TracepointLayout`]; userspace fills slot `i` from the format
//! file entry named `NAMES[i]`.
//!
//! Sources: include/trace/events/ext4.h, writeback.h, block.h, sched.h.

/// `ext4:ext4_writepages` (start of `ext4_do_writepages()`), and the older
/// `ext4:ext4_da_writepages` with the same names.
pub mod writepages {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const NR_TO_WRITE: usize = 2;
    pub const PAGES_SKIPPED: usize = 3;
    pub const RANGE_START: usize = 4;
    pub const RANGE_END: usize = 5;
    pub const WRITEBACK_INDEX: usize = 6;
    pub const SYNC_MODE: usize = 7;
    pub const FOR_KUPDATE: usize = 8;
    pub const RANGE_CYCLIC: usize = 9;
    pub const NAMES: [&str; 10] = [
        "dev",
        "ino",
        "nr_to_write",
        "pages_skipped",
        "range_start",
        "range_end",
        "writeback_index",
        "sync_mode",
        "for_kupdate",
        "range_cyclic",
    ];
}

/// `ext4:ext4_writepages_result` (and `ext4_da_writepages_result`).
/// `pages_written` is the budget consumed, `nr_to_write - wbc->nr_to_write`.
pub mod writepages_result {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const RET: usize = 2;
    pub const PAGES_WRITTEN: usize = 3;
    pub const PAGES_SKIPPED: usize = 4;
    pub const WRITEBACK_INDEX: usize = 5;
    pub const SYNC_MODE: usize = 6;
    pub const NAMES: [&str; 7] = [
        "dev",
        "ino",
        "ret",
        "pages_written",
        "pages_skipped",
        "writeback_index",
        "sync_mode",
    ];
}

/// `ext4:ext4_da_write_folios_start` / `_end` (6.16+): one pair per
/// iteration of the map-and-submit loop of `ext4_do_writepages()`.
pub mod folios {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const START_POS: usize = 2;
    pub const NEXT_POS: usize = 3;
    pub const NR_TO_WRITE: usize = 4;
    pub const NAMES: [&str; 5] = ["dev", "ino", "start_pos", "next_pos", "nr_to_write"];
}

/// `ext4:ext4_da_write_pages_extent`: one extent being mapped.
pub mod extent {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const LBLK: usize = 2;
    pub const LEN: usize = 3;
    pub const NAMES: [&str; 4] = ["dev", "ino", "lblk", "len"];
}

/// `sched:sched_switch`.
pub mod sched_switch {
    pub const PREV_PID: usize = 0;
    pub const NEXT_PID: usize = 1;
    pub const NAMES: [&str; 2] = ["prev_pid", "next_pid"];
}

/// `block:block_bio_queue`.
pub mod bio_queue {
    pub const DEV: usize = 0;
    pub const NR_SECTOR: usize = 1;
    pub const SECTOR: usize = 2;
    /// As [`super::rq::RWBS`].
    pub const RWBS: usize = 3;
    pub const NAMES: [&str; 4] = ["dev", "nr_sector", "sector", "rwbs"];
}

/// `block:block_rq_issue` and `block:block_rq_complete`.
pub mod rq {
    pub const DEV: usize = 0;
    pub const SECTOR: usize = 1;
    pub const NR_SECTOR: usize = 2;
    /// `bytes` at issue (absent at complete).
    pub const BYTES: usize = 3;
    /// `char rwbs[RWBS_LEN]` (8 bytes): the op and flags as letters
    /// (`crate::flush_class::of_rwbs`).
    pub const RWBS: usize = 4;
    pub const NAMES: [&str; 5] = ["dev", "sector", "nr_sector", "bytes", "rwbs"];
    /// `block_rq_complete` has no `bytes`: the first three slots are
    /// needed, `bytes` is left absent.
    pub const COMPLETE_NAMES: [&str; 3] = ["dev", "sector", "nr_sector"];
}

/// `writeback:writeback_start` and `writeback:writeback_written`.
pub mod wb_work {
    pub const NR_PAGES: usize = 0;
    pub const REASON: usize = 1;
    pub const FOR_BACKGROUND: usize = 2;
    pub const NAMES: [&str; 3] = ["nr_pages", "reason", "for_background"];
}

/// `writeback:writeback_single_inode`.
pub mod single_inode {
    pub const NR_TO_WRITE: usize = 0;
    pub const WROTE: usize = 1;
    pub const NAMES: [&str; 2] = ["nr_to_write", "wrote"];
}

/// `writeback:global_dirty_state`, in [`crate::dirty`] order.
pub mod global_dirty {
    pub const NAMES: [&str; 7] = [
        "nr_dirty",
        "nr_writeback",
        "background_thresh",
        "dirty_thresh",
        "dirty_limit",
        "nr_dirtied",
        "nr_written",
    ];
}

/// `writeback:balance_dirty_pages`.
pub mod balance_dirty {
    /// Milliseconds the task is about to sleep (`pause * 1000 / HZ`);
    /// 0 or negative: no sleep this time.
    pub const PAUSE: usize = 0;
    /// The throttling domain's hard limit, its setpoint (`(limit +
    /// freerun) / 2`) and its dirty pages, all in pages
    /// (include/trace/events/writeback.h).
    pub const LIMIT: usize = 1;
    pub const SETPOINT: usize = 2;
    pub const DIRTY: usize = 3;
    pub const NAMES: [&str; 4] = ["pause", "limit", "setpoint", "dirty"];
}

/// `writeback:writeback_dirty_inode_enqueue` (fs/fs-writeback.c,
/// include/trace/events/writeback.h, 5.9+): an inode went from clean to
/// dirty; `dev` is its superblock's.
pub mod dirty_inode {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const NAMES: [&str; 2] = ["dev", "ino"];
}

/// `writeback:writeback_dirty_folio` (`writeback_dirty_page` before 5.17):
/// a page-cache folio went from clean to dirty. The record names the bdi
/// (`name`), not the filesystem, and not how many pages the folio holds.
pub mod dirty_folio {
    pub const INO: usize = 0;
    pub const NAMES: [&str; 1] = ["ino"];
}

/// `ext4:ext4_sync_file_enter`.
pub mod sync_file_enter {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const DATASYNC: usize = 2;
    pub const NAMES: [&str; 3] = ["dev", "ino", "datasync"];
}

/// `ext4:ext4_sync_file_exit`.
pub mod sync_file_exit {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const RET: usize = 2;
    pub const NAMES: [&str; 3] = ["dev", "ino", "ret"];
}

/// `ext4:ext4_sync_fs` (include/trace/events/ext4.h): ext4's `sync_fs`,
/// run in the caller's thread by syncfs(2) and sync(2).
pub mod ext4_sync_fs {
    pub const DEV: usize = 0;
    pub const NAMES: [&str; 1] = ["dev"];
}

/// `jbd2:jbd2_start_commit`, `jbd2_commit_locking`, `jbd2_commit_flushing`,
/// `jbd2_commit_logging`, `jbd2_end_commit` (include/trace/events/jbd2.h,
/// the `jbd2_commit` class).
pub mod jbd2_commit {
    pub const DEV: usize = 0;
    pub const TRANSACTION: usize = 1;
    pub const SYNC_COMMIT: usize = 2;
    pub const NAMES: [&str; 3] = ["dev", "transaction", "sync_commit"];
}

/// `jbd2:jbd2_run_stats`.
pub mod jbd2_run_stats {
    pub const DEV: usize = 0;
    pub const TID: usize = 1;
    pub const HANDLE_COUNT: usize = 2;
    pub const BLOCKS: usize = 3;
    pub const BLOCKS_LOGGED: usize = 4;
    pub const NAMES: [&str; 5] = ["dev", "tid", "handle_count", "blocks", "blocks_logged"];
}

/// `jbd2:jbd2_handle_stats` (fired by `jbd2_journal_stop()` for every
/// handle, in the thread that held it).
pub mod jbd2_handle_stats {
    pub const DEV: usize = 0;
    pub const TID: usize = 1;
    pub const DIRTIED_BLOCKS: usize = 2;
    pub const NAMES: [&str; 3] = ["dev", "tid", "dirtied_blocks"];
}

/// `syscalls:sys_exit_fsync` and `sys_exit_fdatasync`.
pub mod sys_exit {
    pub const RET: usize = 0;
    pub const NAMES: [&str; 1] = ["ret"];
}

/// `xfs:xfs_file_fsync` (the `xfs_inode_class`) and `xfs:xfs_log_force`.
pub mod xfs_file {
    pub const DEV: usize = 0;
    pub const INO: usize = 1;
    pub const NAMES: [&str; 2] = ["dev", "ino"];
    /// `xfs_log_force` has `dev` only.
    pub const LOG_FORCE_NAMES: [&str; 1] = ["dev"];
}

/// `syscalls:sys_enter_write`, `_pwrite64`, `_writev`, `_pwritev` and
/// `_pwritev2`: the file descriptor (`unsigned int fd` for write and
/// pwrite64, `unsigned long fd` for the vector calls).
pub mod sys_enter_fd {
    pub const FD: usize = 0;
    pub const NAMES: [&str; 1] = ["fd"];
}

/// `syscalls:sys_enter_msync` and `sys_enter_sync_file_range`: their
/// `flags`.
pub mod sys_enter_flags {
    pub const FLAGS: usize = 0;
    pub const NAMES: [&str; 1] = ["flags"];
}
