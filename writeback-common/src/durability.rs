//! Durability calls: the span of each ext4 fsync and the
//! journal commits it may wait on, sent on the `EVENTS` ring, and the
//! journal handles each process opened per transaction, counted in the
//! kernel. Userspace joins them with the thread's own writepages calls
//! (crates/model/src/durability/).
//!
//! Sources: include/trace/events/ext4.h (`ext4_sync_file_enter/exit`),
//! include/trace/events/jbd2.h (`jbd2_start_commit`,
//! `jbd2_commit_locking`, `jbd2_commit_flushing`, `jbd2_commit_logging`,
//! `jbd2_end_commit`, `jbd2_run_stats`, `jbd2_handle_stats`), and
//! fs/jbd2/commit.c (`jbd2_journal_commit_transaction()` fires them in
//! that order, `jbd2_run_stats` just before `jbd2_end_commit`, and wakes
//! the commit's waiters after both).

/// Kind of [`SyncSpan`].
pub const SYNC_SPAN_KIND: u32 = 3;
/// Kind of [`CommitPhase`].
pub const COMMIT_PHASE_KIND: u32 = 4;
/// Kind of [`FlushRequest`].
pub const FLUSH_REQUEST_KIND: u32 = 5;

/// The phases of a journal commit, each a tracepoint of its own.
pub mod phase {
    /// `jbd2_start_commit`: the journal thread takes the transaction.
    pub const START: u32 = 0;
    /// `jbd2_commit_locking`: it waits for the transaction's open handles.
    pub const LOCKING: u32 = 1;
    /// `jbd2_commit_flushing`: it writes and waits for the ordered data
    /// (data=ordered: the data blocks the transaction's metadata points to).
    pub const FLUSHING: u32 = 2;
    /// `jbd2_commit_logging`: it writes the journal blocks and the commit
    /// block (with the device cache flush or FUA the journal asks for).
    pub const LOGGING: u32 = 3;
    /// `jbd2_end_commit`: the transaction is on disk.
    pub const END: u32 = 4;
    /// `jbd2_run_stats`: the commit's own counts (handles, blocks).
    pub const STATS: u32 = 5;
}

/// Bits of [`SyncSpan::flags`].
pub mod sync_flags {
    /// Opened by the fsync/fdatasync system call's enter tracepoint and
    /// closed by its exit (any filesystem); without it, by ext4's own
    /// `ext4_sync_file_enter/exit` (an O_SYNC write's sync).
    pub const SYSCALL: u32 = 1 << 0;
    /// A filesystem's own tracepoint named the file (`dev`, `ino` valid).
    pub const FILE_SEEN: u32 = 1 << 1;
    /// ext4's `ext4_sync_file` ran inside.
    pub const EXT4: u32 = 1 << 2;
    /// xfs's `xfs_file_fsync` ran inside.
    pub const XFS: u32 = 1 << 3;
    /// A function hook saw the thread wait for its pages' writeback inside
    /// (`file_write_and_wait_range()` or `filemap_fdatawait_range()`):
    /// [`super::SyncSpan::wait_start_ns`] and `wait_end_ns` are measured.
    pub const WAIT_HOOKED: u32 = 1 << 4;
    /// A function hook saw it wait for a journal commit
    /// (`jbd2_log_wait_commit()`): `journal_*` are measured.
    pub const JOURNAL_HOOKED: u32 = 1 << 5;
    /// A function hook saw it flush the device's cache
    /// (`blkdev_issue_flush()`): `flush_*` are measured.
    pub const FLUSH_HOOKED: u32 = 1 << 6;
}

/// Which durability call a [`SyncSpan`] is ([`SyncSpan::call`]).
pub mod sync_call {
    pub const FSYNC: u32 = 0;
    pub const FDATASYNC: u32 = 1;
    /// `msync(MS_SYNC)` (its `MS_ASYNC` waits for nothing).
    pub const MSYNC: u32 = 2;
    /// `sync_file_range` with a wait flag (`SYNC_FILE_RANGE_WAIT_BEFORE`
    /// or `_WAIT_AFTER`; `_WRITE` alone waits for nothing).
    pub const SYNC_FILE_RANGE: u32 = 3;
    pub const SYNCFS: u32 = 4;
    /// ext4's `ext4_sync_file()` outside those calls: an O_SYNC / O_DSYNC
    /// write's `generic_write_sync()`.
    pub const WRITE_SYNC: u32 = 5;
    /// `MS_SYNC` (include/uapi/asm-generic/mman-common.h).
    pub const MS_SYNC: i64 = 4;
    /// `SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WAIT_AFTER`
    /// (include/uapi/linux/fs.h).
    pub const SFR_WAIT: i64 = 1 | 4;
}

/// One fsync: the fsync/fdatasync system call on any filesystem, or
/// ext4's `ext4_sync_file()` alone (the O_SYNC / O_DSYNC writes'
/// `generic_write_sync()`), joined in the kernel from its enter and exit
/// tracepoints on one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncSpan {
    /// [`SYNC_SPAN_KIND`].
    pub kind: u32,
    pub tid: u32,
    pub pid: u32,
    /// `datasync` as the enter tracepoint gave it (1: fdatasync or O_DSYNC).
    pub datasync: u32,
    /// The kernel's `dev_t` (major << 20 | minor).
    pub dev: u32,
    pub ret: i32,
    pub ino: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    /// When xfs's log force began on the thread inside the span
    /// (`xfs:xfs_log_force`); 0 without one.
    pub log_force_ns: u64,
    /// [`sync_flags`].
    pub flags: u32,
    /// [`sync_call`].
    pub call: u32,
    /// The waits inside, measured by function hooks where the kernel
    /// allows them (writeback-ebpf syncwait.rs; each pair valid with its
    /// bit of [`sync_flags`]): the first entry and the last exit of the
    /// page waits (`file_write_and_wait_range()`, which writes the pages
    /// first, or `filemap_fdatawait_range()`), of `jbd2_log_wait_commit()`
    /// and of `blkdev_issue_flush()`.
    pub wait_start_ns: u64,
    pub wait_end_ns: u64,
    pub journal_start_ns: u64,
    pub journal_end_ns: u64,
    pub flush_start_ns: u64,
    pub flush_end_ns: u64,
    /// The transaction `jbd2_log_wait_commit()` waited for (its `tid`).
    pub journal_tid: u32,
    pub _pad: u32,
}

/// One phase of one journal commit ([`phase`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitPhase {
    /// [`COMMIT_PHASE_KIND`].
    pub kind: u32,
    /// [`phase`].
    pub phase: u32,
    /// The journal's filesystem device (`journal->j_fs_dev`).
    pub dev: u32,
    /// The transaction id (jbd2's `tid_t`).
    pub transaction: u32,
    pub ns: u64,
    /// [`phase::STATS`]: handles and blocks of the transaction
    /// (`jbd2_run_stats`' `handle_count`, `blocks`, `blocks_logged`);
    /// [`phase::START`]: `sync_commit` in `handles`.
    pub handles: u32,
    pub blocks: u32,
    pub blocks_logged: u32,
    pub _pad: u32,
}

/// One block request that carried a cache flush (`crate::flush_class`),
/// completed: sent by the block programs (`--enable device_io`), one or
/// two per fsync or commit, so that an fsync no hook or journal event
/// places its flush in (btrfs, which flushes through its own bios) finds
/// the device's flushes inside it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushRequest {
    /// [`FLUSH_REQUEST_KIND`].
    pub kind: u32,
    /// `crate::flush_class`.
    pub class: u32,
    /// The kernel's `dev_t` of the whole disk.
    pub dev: u32,
    pub _pad: u32,
    pub issue_ns: u64,
    pub complete_ns: u64,
}

/// A process's journal handles in one transaction (`HANDLES` map key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HandleKey {
    pub dev: u32,
    pub transaction: u32,
    /// The process (tgid) that stopped the handle.
    pub pid: u32,
    pub _pad: u32,
    /// The inode whose writepages call the handle was opened in (block
    /// allocation for its data: charged to that inode's dirtiers, not to
    /// the flusher thread that allocated); 0 outside a call.
    pub ino: u64,
}

/// What [`HandleKey`] counted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleCount {
    pub handles: u64,
    /// `jbd2_handle_stats`' `dirtied_blocks`: journal credits the handle
    /// used (blocks it put in the transaction).
    pub blocks: u64,
    /// The process's name at its first handle in the transaction (the
    /// flusher and journal threads make no call records of their own).
    pub comm: [u8; 16],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of plain integers with explicit padding;
    // every bit pattern is valid.
    unsafe impl aya::Pod for super::SyncSpan {}
    unsafe impl aya::Pod for super::CommitPhase {}
    unsafe impl aya::Pod for super::FlushRequest {}
    unsafe impl aya::Pod for super::HandleKey {}
    unsafe impl aya::Pod for super::HandleCount {}
}
