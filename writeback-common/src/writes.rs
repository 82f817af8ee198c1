//! Write spans (`--enable writes`): each buffered write(2), pwrite64(2),
//! writev(2), pwritev(2) or pwritev2(2) to a regular file on a traced
//! device, timed from its system call's enter to its exit tracepoint on
//! one thread and split by what the thread waited for inside:
//!
//! - `throttle`: asleep in `balance_dirty_pages()` (mm/page-writeback.c
//!   fires `writeback:balance_dirty_pages` just before each pause's
//!   `io_schedule_timeout()`);
//! - `stable`: asleep waiting for a page under writeback before
//!   rewriting it (`folio_wait_stable()` → `folio_wait_writeback()`,
//!   which fires `writeback:folio_wait_writeback` before each wait);
//! - `reclaim`: inside direct or memory-cgroup reclaim
//!   (`vmscan:mm_vmscan_direct_reclaim_begin/end`,
//!   `mm_vmscan_memcg_reclaim_begin/end`), on the CPU or not;
//! - `blocked`: asleep anywhere else (a folio or inode lock, a journal
//!   handle's start, the run queue) — no tracepoint marks those waits;
//!   where function hooks load, the part of it inside `__folio_lock()`
//!   (mm/filemap.c: a contended folio lock) is `lock_ns` and inside
//!   `jbd2__journal_start()` (fs/jbd2/transaction.c: waiting for room in
//!   the running transaction, or for a locked one's commit) `journal_ns`;
//! - `other`: the rest, on the CPU: the copy into the page cache and the
//!   filesystem's own work.
//!
//! Each event closes the thread's last segment and opens the next; a
//! segment's time off the CPU comes from the thread's run clock
//! ([`crate::RunClock`], read at both ends): a pause counts what it slept
//! up to the tracepoint's `pause` (`io_schedule_timeout()` ends it at the
//! tick its jiffies end at, so up to a tick sooner), and the rest, its
//! wait for a CPU once woken, is `blocked`.

use crate::RunClock;

/// Kind of [`WriteCall`].
pub const WRITE_CALL_KIND: u32 = 6;

/// Which system call a [`WriteCall`] is ([`WriteCall::call`]).
pub mod write_call {
    pub const WRITE: u32 = 0;
    pub const PWRITE64: u32 = 1;
    pub const WRITEV: u32 = 2;
    pub const PWRITEV: u32 = 3;
    pub const PWRITEV2: u32 = 4;
    pub const NAMES: [&str; 5] = ["write", "pwrite64", "writev", "pwritev", "pwritev2"];
}

/// Which event opened the thread's current segment of a span.
pub mod segment {
    /// The call's enter, or the end of a reclaim: time off the CPU here is
    /// `blocked`.
    pub const PLAIN: u32 = 0;
    /// A `balance_dirty_pages` pause.
    pub const THROTTLE: u32 = 1;
    /// A wait for a page under writeback.
    pub const STABLE: u32 = 2;
    /// Inside reclaim: all of its wall time is `reclaim`.
    pub const RECLAIM: u32 = 3;
    /// Inside `__folio_lock()`: time off the CPU is `blocked`, and
    /// `lock_ns`.
    pub const LOCK: u32 = 4;
    /// Inside `jbd2__journal_start()`: time off the CPU is `blocked`, and
    /// `journal_ns`.
    pub const JOURNAL: u32 = 5;
}

/// Bits of [`WriteCall::domains`]: the limits whose pauses throttled the
/// call, as the throttling program classifies each pause (writeback-ebpf
/// flusher.rs `paused`).
pub mod write_domain {
    pub const GLOBAL: u32 = 1 << 0;
    pub const MEMCG: u32 = 1 << 1;
    /// The device's own limit (a strict-limit bdi, `max_bytes`,
    /// `max_ratio`): the domain itself ran free.
    pub const BDI: u32 = 1 << 2;
}

/// One write system call to a regular file, with its parts (ns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCall {
    /// [`WRITE_CALL_KIND`].
    pub kind: u32,
    pub tid: u32,
    pub pid: u32,
    /// [`write_call`].
    pub call: u32,
    /// The file's superblock `s_dev` (major << 20 | minor).
    pub dev: u32,
    /// Pauses of `balance_dirty_pages()` inside.
    pub pauses: u32,
    pub ino: u64,
    /// The system call's return: bytes written, or -errno.
    pub ret: i64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    pub throttle_ns: u64,
    pub stable_ns: u64,
    pub reclaim_ns: u64,
    pub blocked_ns: u64,
    /// Waits for a page under writeback inside.
    pub stable_waits: u32,
    /// [`write_domain`] bits.
    pub domains: u32,
    /// Of `blocked_ns`, asleep in a contended folio lock and in a journal
    /// handle's start (function hooks; 0 where they do not load).
    pub lock_ns: u64,
    pub journal_ns: u64,
    /// Contended folio locks and journal handles started inside.
    pub locks: u32,
    pub journal_starts: u32,
}

/// A thread's write in flight: the record being filled and its open
/// segment.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OpenWrite {
    pub call: WriteCall,
    /// [`segment`].
    pub segment: u32,
    /// A throttle segment's pause as `balance_dirty_pages` announced it
    /// (ms): its time asleep past that is the run queue's, `blocked`.
    pub pause_ms: u32,
    pub segment_start_ns: u64,
    pub segment_clock: RunClock,
}

/// What the write programs read to find a file descriptor's file
/// (include/linux/fdtable.h, include/linux/fs.h): `current->files->fdt`,
/// its `max_fds` and `fd` array, the file's inode and flags, the inode's
/// mode, number and superblock, the superblock's device. Resolved from
/// the kernel's BTF before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileMembers {
    pub task_files: crate::MemberSpec,
    pub files_fdt: crate::MemberSpec,
    pub fdt_max_fds: crate::MemberSpec,
    pub fdt_fd: crate::MemberSpec,
    pub file_inode: crate::MemberSpec,
    pub file_flags: crate::MemberSpec,
    pub inode_mode: crate::MemberSpec,
    pub inode_ino: crate::MemberSpec,
    pub inode_sb: crate::MemberSpec,
    pub sb_dev: crate::MemberSpec,
    /// The build's `O_DIRECT` (0o40000 on x86, 0o200000 on arm64:
    /// include/uapi/asm-generic/fcntl.h, arch/arm64/include/uapi/asm/
    /// fcntl.h), set by userspace: direct writes are not buffered writes.
    pub o_direct: u64,
}

impl FileMembers {
    pub const EMPTY: FileMembers = FileMembers {
        task_files: crate::MemberSpec::ABSENT,
        files_fdt: crate::MemberSpec::ABSENT,
        fdt_max_fds: crate::MemberSpec::ABSENT,
        fdt_fd: crate::MemberSpec::ABSENT,
        file_inode: crate::MemberSpec::ABSENT,
        file_flags: crate::MemberSpec::ABSENT,
        inode_mode: crate::MemberSpec::ABSENT,
        inode_ino: crate::MemberSpec::ABSENT,
        inode_sb: crate::MemberSpec::ABSENT,
        sb_dev: crate::MemberSpec::ABSENT,
        o_direct: 0,
    };
    /// `(struct, member path)` in field order.
    pub const PATHS: [(&'static str, &'static str); 10] = [
        ("task_struct", "files"),
        ("files_struct", "fdt"),
        ("fdtable", "max_fds"),
        ("fdtable", "fd"),
        ("file", "f_inode"),
        ("file", "f_flags"),
        ("inode", "i_mode"),
        ("inode", "i_ino"),
        ("inode", "i_sb"),
        ("super_block", "s_dev"),
    ];
    /// `S_IFMT` and `S_IFREG` (include/uapi/linux/stat.h).
    pub const S_IFMT: i64 = 0o170000;
    pub const S_IFREG: i64 = 0o100000;
}
