//! The waits inside an fsync, measured (`--enable durability`): function
//! hooks on the kernel functions an fsync waits in, each marking the
//! thread's open span (durability.rs `SYNCING`) with when it entered and
//! left. They run only on sync paths: never per page, request or write.
//!
//! - `file_write_and_wait_range()` (mm/filemap.c): ext4's and xfs's fsync
//!   write the file's dirty pages and wait for them here;
//!   `filemap_fdatawait_range()` is the wait alone (btrfs's ordered
//!   extents, `btrfs_wait_ordered_range()`). The span's own writepages
//!   calls inside come first; the wait is the rest.
//! - `jbd2_log_wait_commit(journal_t *journal, tid_t tid)`
//!   (fs/jbd2/journal.c): waiting for the commit of transaction `tid`,
//!   called by `jbd2_complete_transaction()` (ext4_sync_file's commit)
//!   only when the transaction is not yet on disk.
//! - `blkdev_issue_flush()` (block/blk-flush.c): the cache flush ext4
//!   issues itself when the commit sent none (`needs_barrier`), xfs when
//!   its log force did not.
//!
//! fentry/fexit where the kernel allows them on the function (vmlinux's
//! BTF has it), else kprobe/kretprobe; two sets of programs each, the
//! journal's apart, since jbd2 is a module on most distribution kernels,
//! where fentry cannot reach it through vmlinux's BTF.
use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use writeback_common::sync_flags;

use crate::{
    durability::open_of,
    read::{current_tid, now_ns, raw_arg},
};

/// Which wait a hook marks.
#[derive(Clone, Copy)]
enum Part {
    Wait,
    Journal,
    Flush,
}

/// The thread entered the function of `part`: its first entry in the
/// span is kept (`tid` is the transaction, for the journal).
#[inline(always)]
fn entered(part: Part, tid: u32) -> u32 {
    let Some(s) = open_of(current_tid()) else {
        return 0;
    };
    let now = now_ns();
    let (start, bit) = match part {
        Part::Wait => (&mut s.wait_start_ns, sync_flags::WAIT_HOOKED),
        Part::Journal => {
            s.journal_tid = tid;
            (&mut s.journal_start_ns, sync_flags::JOURNAL_HOOKED)
        }
        Part::Flush => (&mut s.flush_start_ns, sync_flags::FLUSH_HOOKED),
    };
    if *start == 0 {
        *start = now;
    }
    s.flags |= bit;
    0
}

/// It left the function of `part`: its last exit is kept.
#[inline(always)]
fn left(part: Part) -> u32 {
    let Some(s) = open_of(current_tid()) else {
        return 0;
    };
    let now = now_ns();
    match part {
        Part::Wait => s.wait_end_ns = now,
        Part::Journal => s.journal_end_ns = now,
        Part::Flush => s.flush_end_ns = now,
    }
    0
}

#[fentry(function = "file_write_and_wait_range")]
pub fn fentry_write_wait(_ctx: FEntryContext) -> u32 {
    entered(Part::Wait, 0)
}

#[fexit(function = "file_write_and_wait_range")]
pub fn fexit_write_wait(_ctx: FExitContext) -> u32 {
    left(Part::Wait)
}

#[fentry(function = "filemap_fdatawait_range")]
pub fn fentry_fdatawait(_ctx: FEntryContext) -> u32 {
    entered(Part::Wait, 0)
}

#[fexit(function = "filemap_fdatawait_range")]
pub fn fexit_fdatawait(_ctx: FExitContext) -> u32 {
    left(Part::Wait)
}

#[fentry(function = "blkdev_issue_flush")]
pub fn fentry_issue_flush(_ctx: FEntryContext) -> u32 {
    entered(Part::Flush, 0)
}

#[fexit(function = "blkdev_issue_flush")]
pub fn fexit_issue_flush(_ctx: FExitContext) -> u32 {
    left(Part::Flush)
}

/// `tid_t` is an unsigned int (include/linux/jbd2.h), the second argument.
#[fentry(function = "jbd2_log_wait_commit")]
pub fn fentry_log_wait(ctx: FEntryContext) -> u32 {
    entered(Part::Journal, raw_arg(&ctx, 1) as u32)
}

#[fexit(function = "jbd2_log_wait_commit")]
pub fn fexit_log_wait(_ctx: FExitContext) -> u32 {
    left(Part::Journal)
}

#[kprobe]
pub fn kprobe_write_wait(_ctx: ProbeContext) -> u32 {
    entered(Part::Wait, 0)
}

#[kretprobe]
pub fn kretprobe_write_wait(_ctx: RetProbeContext) -> u32 {
    left(Part::Wait)
}

#[kprobe]
pub fn kprobe_fdatawait(_ctx: ProbeContext) -> u32 {
    entered(Part::Wait, 0)
}

#[kretprobe]
pub fn kretprobe_fdatawait(_ctx: RetProbeContext) -> u32 {
    left(Part::Wait)
}

#[kprobe]
pub fn kprobe_issue_flush(_ctx: ProbeContext) -> u32 {
    entered(Part::Flush, 0)
}

#[kretprobe]
pub fn kretprobe_issue_flush(_ctx: RetProbeContext) -> u32 {
    left(Part::Flush)
}

#[kprobe]
pub fn kprobe_log_wait(ctx: ProbeContext) -> u32 {
    entered(Part::Journal, ctx.arg::<u32>(1).unwrap_or(0))
}

#[kretprobe]
pub fn kretprobe_log_wait(_ctx: RetProbeContext) -> u32 {
    left(Part::Journal)
}
