//! Durability calls (`--enable durability`): each ext4 fsync's
//! span, the journal commits' phases, and the journal handles each process
//! put in each transaction. Classic tracepoints only: they fire per fsync,
//! per commit phase and per journal handle, never on a path without
//! writeback or a journal.
//!
//! Record layouts: writeback-common durability.rs.
use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap},
    programs::TracePointContext,
};
use writeback_common::{
    COMMIT_PHASE_KIND, CommitPhase, Filter, HandleCount, HandleKey, SYNC_SPAN_KIND, SyncSpan,
    TracepointLayout,
    fields::{
        ext4_sync_fs, jbd2_commit, jbd2_handle_stats, jbd2_run_stats, sync_file_enter,
        sync_file_exit, sys_enter_flags, sys_exit, xfs_file,
    },
    phase, stat, sync_call, sync_flags,
};

use crate::{
    EVENTS, FILTER, bump,
    in_call::in_call,
    read::{current_tid, field, now_ns},
    writepages::filtered_out,
};

#[unsafe(no_mangle)]
static SYNC_ENTER_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYNC_EXIT_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static COMMIT_START_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static COMMIT_LOCKING_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static COMMIT_FLUSHING_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static COMMIT_LOGGING_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static COMMIT_END_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static RUN_STATS_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static HANDLE_STATS_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_EXIT_FSYNC_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_EXIT_FDATASYNC_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static XFS_FSYNC_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_ENTER_MSYNC_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_ENTER_SFR_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_EXIT_MSYNC_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_EXIT_SFR_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static SYS_EXIT_SYNCFS_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static EXT4_SYNC_FS_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Each thread's fsync in progress, from its enter to its exit.
#[map]
static SYNCING: HashMap<u32, SyncSpan> = HashMap::with_max_entries(16384, 0);

/// Journal handles and their blocks per (device, transaction, process,
/// inode of the writepages call they were opened in). Userspace reads the
/// transactions that have committed and removes them; LRU, so that a
/// reader that stops keeping up loses the oldest counts, not new ones.
#[map]
static HANDLES: LruHashMap<HandleKey, HandleCount> = LruHashMap::with_max_entries(8192, 0);

/// Sends a record on the events ring without waking the reader: these
/// come a few per fsync and commit, and the reader's 100 ms timer takes
/// them.
#[inline(always)]
pub(crate) fn send<T: 'static>(value: T) {
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(value);
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => bump(stat::LOST_RECORDS),
    }
}

/// A span opened on this thread, before the file is known.
#[inline(always)]
fn open_span(call: u32, datasync: u32, dev: u32, ino: u64, flags: u32) -> u32 {
    // First, so that the span is the call's and not this program's work.
    let start_ns = now_ns();
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    // The device is not known at a system call's enter: only the process
    // and cgroup filters apply there, the device one at its exit.
    let tgid = (pid_tgid >> 32) as u32;
    let out = if flags & sync_flags::FILE_SEEN != 0 {
        filtered_out(dev, ino, tgid, cgroup_id)
    } else {
        // SAFETY: .rodata global, see read::field.
        let f: Filter = unsafe { core::ptr::read_volatile(&FILTER) };
        (f.tgid != 0 && f.tgid != tgid) || (f.cgroup_id != 0 && f.cgroup_id != cgroup_id)
    };
    if out {
        return 0;
    }
    let span = SyncSpan {
        kind: SYNC_SPAN_KIND,
        tid: pid_tgid as u32,
        pid: (pid_tgid >> 32) as u32,
        datasync,
        dev,
        ret: 0,
        ino,
        start_ns,
        end_ns: 0,
        cgroup_id,
        comm: bpf_get_current_comm().unwrap_or_default(),
        log_force_ns: 0,
        flags,
        call,
        wait_start_ns: 0,
        wait_end_ns: 0,
        journal_start_ns: 0,
        journal_end_ns: 0,
        flush_start_ns: 0,
        flush_end_ns: 0,
        journal_tid: 0,
        _pad: 0,
    };
    if SYNCING.insert(&span.tid, &span, 0).is_err() {
        bump(stat::MAP_FULL);
    }
    0
}

/// The thread's open span, to fill in.
#[inline(always)]
pub(crate) fn open_of(tid: u32) -> Option<&'static mut SyncSpan> {
    // SAFETY: the thread's own entry, written only by the thread.
    SYNCING.get_ptr_mut(&tid).map(|p| unsafe { &mut *p })
}

/// Closes the thread's span with `ret` and sends it, unless the filters
/// drop it. A span whose file no filesystem named (btrfs, ...) is sent
/// whatever the device filter: userspace places it on the device of its
/// own calls, which the filter has already chosen, or drops it.
#[inline(always)]
fn close_span(ret: i32) -> u32 {
    // First, as in `open_span`: the lookup, copy and removal below took
    // about 3 µs here, which would be counted in the span.
    let end_ns = now_ns();
    let tid = current_tid();
    // SAFETY: copied out before the entry is removed.
    let Some(mut span) = (unsafe { SYNCING.get(&tid) }).copied() else {
        return 0;
    };
    let _ = SYNCING.remove(&tid);
    if span.flags & sync_flags::FILE_SEEN != 0
        && filtered_out(span.dev, span.ino, span.pid, span.cgroup_id)
    {
        return 0;
    }
    span.end_ns = end_ns;
    span.ret = ret;
    send(span);
    0
}

/// `syscalls:sys_enter_fsync`: an fsync on any filesystem begins.
#[tracepoint]
pub fn sys_enter_fsync(_ctx: TracePointContext) -> u32 {
    open_span(sync_call::FSYNC, 0, 0, 0, sync_flags::SYSCALL)
}

/// `syscalls:sys_enter_fdatasync`.
#[tracepoint]
pub fn sys_enter_fdatasync(_ctx: TracePointContext) -> u32 {
    open_span(sync_call::FDATASYNC, 1, 0, 0, sync_flags::SYSCALL)
}

/// `syscalls:sys_enter_msync`: a span only with `MS_SYNC`.
#[tracepoint]
pub fn sys_enter_msync(ctx: TracePointContext) -> u32 {
    let flags = field(&ctx, &SYS_ENTER_MSYNC_LAYOUT, sys_enter_flags::FLAGS);
    if flags & sync_call::MS_SYNC == 0 {
        return 0;
    }
    open_span(sync_call::MSYNC, 0, 0, 0, sync_flags::SYSCALL)
}

/// `syscalls:sys_enter_sync_file_range`: a span only with a wait flag.
#[tracepoint]
pub fn sys_enter_sync_file_range(ctx: TracePointContext) -> u32 {
    let flags = field(&ctx, &SYS_ENTER_SFR_LAYOUT, sys_enter_flags::FLAGS);
    if flags & sync_call::SFR_WAIT == 0 {
        return 0;
    }
    open_span(sync_call::SYNC_FILE_RANGE, 1, 0, 0, sync_flags::SYSCALL)
}

/// `syscalls:sys_enter_syncfs`.
#[tracepoint]
pub fn sys_enter_syncfs(_ctx: TracePointContext) -> u32 {
    open_span(sync_call::SYNCFS, 0, 0, 0, sync_flags::SYSCALL)
}

/// `syscalls:sys_exit_msync`.
#[tracepoint]
pub fn sys_exit_msync(ctx: TracePointContext) -> u32 {
    close_span(field(&ctx, &SYS_EXIT_MSYNC_LAYOUT, sys_exit::RET) as i32)
}

/// `syscalls:sys_exit_sync_file_range`.
#[tracepoint]
pub fn sys_exit_sync_file_range(ctx: TracePointContext) -> u32 {
    close_span(field(&ctx, &SYS_EXIT_SFR_LAYOUT, sys_exit::RET) as i32)
}

/// `syscalls:sys_exit_syncfs`.
#[tracepoint]
pub fn sys_exit_syncfs(ctx: TracePointContext) -> u32 {
    close_span(field(&ctx, &SYS_EXIT_SYNCFS_LAYOUT, sys_exit::RET) as i32)
}

/// `syscalls:sys_exit_fsync`: the span is sent.
#[tracepoint]
pub fn sys_exit_fsync(ctx: TracePointContext) -> u32 {
    close_span(field(&ctx, &SYS_EXIT_FSYNC_LAYOUT, sys_exit::RET) as i32)
}

/// `syscalls:sys_exit_fdatasync`.
#[tracepoint]
pub fn sys_exit_fdatasync(ctx: TracePointContext) -> u32 {
    close_span(field(&ctx, &SYS_EXIT_FDATASYNC_LAYOUT, sys_exit::RET) as i32)
}

/// `ext4:ext4_sync_file_enter`: `ext4_sync_file()` begins. Inside an
/// fsync system call it names the file; alone (an O_SYNC write's
/// `generic_write_sync()`) it opens a span of its own.
#[tracepoint]
pub fn sync_file_enter(ctx: TracePointContext) -> u32 {
    let l = &SYNC_ENTER_LAYOUT;
    let dev = field(&ctx, l, sync_file_enter::DEV) as u32;
    let ino = field(&ctx, l, sync_file_enter::INO) as u64;
    if let Some(span) = open_of(current_tid()) {
        span.dev = dev;
        span.ino = ino;
        span.flags |= sync_flags::FILE_SEEN | sync_flags::EXT4;
        return 0;
    }
    let datasync = field(&ctx, l, sync_file_enter::DATASYNC) as u32;
    let flags = sync_flags::FILE_SEEN | sync_flags::EXT4;
    open_span(sync_call::WRITE_SYNC, datasync, dev, ino, flags)
}

/// `ext4:ext4_sync_file_exit`: a span ext4 opened is sent; one the
/// system call opened waits for the call's exit.
#[tracepoint]
pub fn sync_file_exit(ctx: TracePointContext) -> u32 {
    let syscall = open_of(current_tid()).is_some_and(|s| s.flags & sync_flags::SYSCALL != 0);
    if syscall {
        return 0;
    }
    close_span(field(&ctx, &SYNC_EXIT_LAYOUT, sync_file_exit::RET) as i32)
}

/// `xfs:xfs_file_fsync`: xfs names the file of the thread's fsync.
#[tracepoint]
pub fn xfs_fsync(ctx: TracePointContext) -> u32 {
    if let Some(span) = open_of(current_tid()) {
        span.dev = field(&ctx, &XFS_FSYNC_LAYOUT, xfs_file::DEV) as u32;
        span.ino = field(&ctx, &XFS_FSYNC_LAYOUT, xfs_file::INO) as u64;
        span.flags |= sync_flags::FILE_SEEN | sync_flags::XFS;
    }
    0
}

/// `ext4:ext4_sync_fs`: a syncfs(2) names its filesystem (the file
/// descriptor's, whose superblock `sync_filesystem()` syncs; no inode).
#[tracepoint]
pub fn ext4_sync_fs(ctx: TracePointContext) -> u32 {
    if let Some(span) = open_of(current_tid())
        && span.call == sync_call::SYNCFS
        && span.flags & sync_flags::FILE_SEEN == 0
    {
        span.dev = field(&ctx, &EXT4_SYNC_FS_LAYOUT, ext4_sync_fs::DEV) as u32;
        span.flags |= sync_flags::FILE_SEEN | sync_flags::EXT4;
    }
    0
}

/// `xfs:xfs_log_force`: the thread's fsync forces the log (its journal
/// part begins).
#[tracepoint]
pub fn xfs_log_force(_ctx: TracePointContext) -> u32 {
    if let Some(span) = open_of(current_tid())
        && span.log_force_ns == 0
    {
        span.log_force_ns = now_ns();
    }
    0
}

#[inline(always)]
fn commit(ctx: &TracePointContext, layout: &TracepointLayout, which: u32) -> u32 {
    send(CommitPhase {
        kind: COMMIT_PHASE_KIND,
        phase: which,
        dev: field(ctx, layout, jbd2_commit::DEV) as u32,
        transaction: field(ctx, layout, jbd2_commit::TRANSACTION) as u32,
        ns: now_ns(),
        handles: field(ctx, layout, jbd2_commit::SYNC_COMMIT) as u32,
        blocks: 0,
        blocks_logged: 0,
        _pad: 0,
    });
    0
}

/// `jbd2:jbd2_start_commit`.
#[tracepoint]
pub fn commit_start(ctx: TracePointContext) -> u32 {
    commit(&ctx, &COMMIT_START_LAYOUT, phase::START)
}

/// `jbd2:jbd2_commit_locking`.
#[tracepoint]
pub fn commit_locking(ctx: TracePointContext) -> u32 {
    commit(&ctx, &COMMIT_LOCKING_LAYOUT, phase::LOCKING)
}

/// `jbd2:jbd2_commit_flushing`.
#[tracepoint]
pub fn commit_flushing(ctx: TracePointContext) -> u32 {
    commit(&ctx, &COMMIT_FLUSHING_LAYOUT, phase::FLUSHING)
}

/// `jbd2:jbd2_commit_logging`.
#[tracepoint]
pub fn commit_logging(ctx: TracePointContext) -> u32 {
    commit(&ctx, &COMMIT_LOGGING_LAYOUT, phase::LOGGING)
}

/// `jbd2:jbd2_end_commit`.
#[tracepoint]
pub fn commit_end(ctx: TracePointContext) -> u32 {
    commit(&ctx, &COMMIT_END_LAYOUT, phase::END)
}

/// `jbd2:jbd2_run_stats`: the committed transaction's handles and blocks.
#[tracepoint]
pub fn commit_stats(ctx: TracePointContext) -> u32 {
    let l = &RUN_STATS_LAYOUT;
    send(CommitPhase {
        kind: COMMIT_PHASE_KIND,
        phase: phase::STATS,
        dev: field(&ctx, l, jbd2_run_stats::DEV) as u32,
        transaction: field(&ctx, l, jbd2_run_stats::TID) as u32,
        ns: now_ns(),
        handles: field(&ctx, l, jbd2_run_stats::HANDLE_COUNT) as u32,
        blocks: field(&ctx, l, jbd2_run_stats::BLOCKS) as u32,
        blocks_logged: field(&ctx, l, jbd2_run_stats::BLOCKS_LOGGED) as u32,
        _pad: 0,
    });
    0
}

/// `jbd2:jbd2_handle_stats`: a handle stops, in the thread that held it.
/// Inside an ext4 writepages call (block allocation for the call's data,
/// usually by a flusher thread) the handle is counted under the call's
/// inode, which userspace charges to that inode's dirtiers.
#[tracepoint]
pub fn handle_stats(ctx: TracePointContext) -> u32 {
    let l = &HANDLE_STATS_LAYOUT;
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // A call drawn into the sample (one left out has no entry of its own:
    // the thread's entry still holds its call before).
    let ino = if in_call(tid) {
        crate::writepages::thread_call(tid, false).map_or(0, |c| c.inode())
    } else {
        0
    };
    let key = HandleKey {
        dev: field(&ctx, l, jbd2_handle_stats::DEV) as u32,
        transaction: field(&ctx, l, jbd2_handle_stats::TID) as u32,
        pid: (pid_tgid >> 32) as u32,
        _pad: 0,
        ino,
    };
    let blocks = field(&ctx, l, jbd2_handle_stats::DIRTIED_BLOCKS).max(0) as u64;
    if let Some(count) = HANDLES.get_ptr_mut(&key) {
        // SAFETY: a valid entry; concurrent adds on other CPUs are atomic.
        unsafe {
            crate::atomic_add(&raw mut (*count).handles, 1);
            crate::atomic_add(&raw mut (*count).blocks, blocks);
        }
    } else {
        let count = HandleCount {
            handles: 1,
            blocks,
            comm: bpf_get_current_comm().unwrap_or_default(),
        };
        if HANDLES.insert(&key, &count, BPF_NOEXIST as u64).is_ok() {
            bump(stat::HANDLES_NEW);
        } else if let Some(c) = HANDLES.get_ptr_mut(&key) {
            // Another CPU made the entry first: add to it.
            // SAFETY: as above.
            unsafe {
                crate::atomic_add(&raw mut (*c).handles, 1);
                crate::atomic_add(&raw mut (*c).blocks, blocks);
            }
        }
    }
    0
}
