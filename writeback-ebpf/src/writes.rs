//! Write spans (`--enable writes`): each buffered write system call to a
//! regular file on a traced device, split by what its thread waited for
//! (writeback-common writes.rs says what each part is).
//!
//! The system calls' tracepoints fire for every write on the host,
//! sockets and pipes included, so the enter programs filter first, in
//! this order, before any map operation: the `--pid` and `--cgroup`
//! filters, then the file behind the descriptor (`current->files->fdt->
//! fd[fd]`): a regular file, not opened `O_DIRECT`, on the `--dev`
//! device. A thread's entry in [`WRITING`] is made at its first traced
//! write and reused (written in place) by the next, as `CURRENT` is for
//! writepages calls: an insert costs several lookups.
//!
//! The part programs (a pause, a wait for a page under writeback, reclaim)
//! look the thread up and do nothing unless it is inside a traced write.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::{fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::{Array, LruHashMap},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};
use writeback_common::{
    FileMembers, Filter, OpenWrite, TracepointLayout, WRITE_CALL_KIND, fields::sys_enter_fd,
    fields::sys_exit, off_cpu_ns, segment, stat, write_call,
};

use crate::{
    FILTER, bump,
    durability::send,
    read::{Access, Probed, current_tid, field, now_ns, read_u64},
    sched::task_clock,
    thread_entry,
};

#[unsafe(no_mangle)]
static FILE_MEMBERS: FileMembers = FileMembers::EMPTY;

#[unsafe(no_mangle)]
static WRITE_ENTER_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;
#[unsafe(no_mangle)]
static WRITE_EXIT_LAYOUT: TracepointLayout = TracepointLayout::EMPTY;

/// Each thread's traced write, in flight while `call.kind` is
/// [`WRITE_CALL_KIND`] (0 between writes). 8,192 threads that wrote
/// recently, LRU so that threads long gone make room; a write whose
/// thread finds no room is not traced (`stat::INFLIGHT_FULL`).
#[map]
static WRITING: LruHashMap<u32, OpenWrite> = LruHashMap::with_max_entries(8192, 0);

/// One zeroed value, the template of a thread's first entry.
#[map]
static WRITING_ZERO: Array<OpenWrite> = Array::with_max_entries(1, 0);

/// The file behind descriptor `fd` of the current task, if it is a
/// regular file opened without `O_DIRECT`: its `(dev, ino)`.
#[inline(always)]
fn regular_file(fd: u64) -> Option<(u32, u64)> {
    let m = &FILE_MEMBERS;
    let task = Probed::current_task();
    let files = Probed::pointer(task, &m.task_files);
    if files.is_null() {
        return None;
    }
    let fdt = Probed::pointer(files, &m.files_fdt);
    if fdt.is_null() {
        return None;
    }
    let max_fds = Probed::scalar(fdt, &m.fdt_max_fds) as u64;
    if fd >= max_fds {
        return None;
    }
    let array = Probed::pointer(fdt, &m.fdt_fd);
    if array.is_null() {
        return None;
    }
    let file = read_u64(array.wrapping_add((fd as usize) * 8)) as *const u8;
    if file.is_null() {
        return None;
    }
    // SAFETY: .rodata global, see read::field.
    let o_direct = unsafe { core::ptr::read_volatile(&m.o_direct) };
    if Probed::scalar(file, &m.file_flags) as u64 & o_direct != 0 {
        return None;
    }
    let inode = Probed::pointer(file, &m.file_inode);
    if inode.is_null() {
        return None;
    }
    if Probed::scalar(inode, &m.inode_mode) & FileMembers::S_IFMT != FileMembers::S_IFREG {
        return None;
    }
    let sb = Probed::pointer(inode, &m.inode_sb);
    let dev = Probed::scalar(sb, &m.sb_dev) as u32;
    let ino = Probed::scalar(inode, &m.inode_ino) as u64;
    Some((dev, ino))
}

/// A write system call `call` begins with descriptor `fd`.
#[inline(always)]
fn enter(ctx: &TracePointContext, call: u32) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: .rodata global, see read::field.
    let f: Filter = unsafe { core::ptr::read_volatile(&FILTER) };
    if f.tgid != 0 && f.tgid != tgid {
        return 0;
    }
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if f.cgroup_id != 0 && f.cgroup_id != cgroup_id {
        return 0;
    }
    let fd = field(ctx, &WRITE_ENTER_LAYOUT, sys_enter_fd::FD) as u64;
    let Some((dev, ino)) = regular_file(fd) else {
        return 0;
    };
    if (f.dev != 0 && f.dev != dev) || (f.ino != 0 && f.ino != ino) {
        return 0;
    }
    let tid = pid_tgid as u32;
    let Some(w) = thread_entry(&WRITING, &WRITING_ZERO, tid) else {
        bump(stat::INFLIGHT_FULL);
        return 0;
    };
    let now = now_ns();
    let c = &mut w.call;
    c.kind = WRITE_CALL_KIND;
    c.tid = tid;
    c.pid = tgid;
    c.call = call;
    c.dev = dev;
    c.pauses = 0;
    c.ino = ino;
    c.ret = 0;
    c.start_ns = now;
    c.end_ns = 0;
    c.cgroup_id = cgroup_id;
    c.comm = bpf_get_current_comm().unwrap_or_default();
    c.throttle_ns = 0;
    c.stable_ns = 0;
    c.reclaim_ns = 0;
    c.blocked_ns = 0;
    c.stable_waits = 0;
    c.domains = 0;
    c.lock_ns = 0;
    c.journal_ns = 0;
    c.locks = 0;
    c.journal_starts = 0;
    w.segment = segment::PLAIN;
    w.segment_start_ns = now;
    w.segment_clock = task_clock::<Probed>();
    0
}

/// The thread's write in flight, if any.
#[inline(always)]
fn open_write() -> Option<&'static mut OpenWrite> {
    let w = WRITING.get_ptr_mut(&current_tid())?;
    // SAFETY: the thread's own entry: only the thread writes it.
    let w = unsafe { &mut *w };
    (w.call.kind == WRITE_CALL_KIND).then_some(w)
}

/// Closes the open segment at `now` (its time to its part) and opens one
/// of `next`.
#[inline(always)]
fn next_segment(w: &mut OpenWrite, next: u32, now: u64) {
    let clock = task_clock::<Probed>();
    let wall = now.saturating_sub(w.segment_start_ns);
    let off = off_cpu_ns(&w.segment_clock, &clock, wall);
    match w.segment {
        segment::THROTTLE => {
            let slept = off.min(u64::from(w.pause_ms) * 1_000_000);
            w.call.throttle_ns += slept;
            w.call.blocked_ns += off - slept;
        }
        segment::STABLE => w.call.stable_ns += off,
        segment::RECLAIM => w.call.reclaim_ns += wall,
        segment::LOCK => {
            w.call.blocked_ns += off;
            w.call.lock_ns += off;
        }
        segment::JOURNAL => {
            w.call.blocked_ns += off;
            w.call.journal_ns += off;
        }
        _ => w.call.blocked_ns += off,
    }
    w.segment = next;
    w.segment_start_ns = now;
    w.segment_clock = clock;
}

/// The write system call returns `ret`: the record is sent.
#[inline(always)]
fn exit(ctx: &TracePointContext) -> u32 {
    let Some(w) = open_write() else {
        return 0;
    };
    let now = now_ns();
    next_segment(w, segment::PLAIN, now);
    w.call.end_ns = now;
    w.call.ret = field(ctx, &WRITE_EXIT_LAYOUT, sys_exit::RET);
    send(w.call);
    w.call.kind = 0;
    0
}

/// A `balance_dirty_pages()` pause of `domain` (writeback_common
/// `write_domain`) and `pause_ms` begins on this thread (flusher.rs
/// `paused`).
#[inline(always)]
pub(crate) fn paused(domain: u32, pause_ms: u64) {
    let Some(w) = open_write() else {
        return;
    };
    if w.segment == segment::RECLAIM {
        return;
    }
    next_segment(w, segment::THROTTLE, now_ns());
    w.pause_ms = pause_ms as u32;
    w.call.pauses += 1;
    w.call.domains |= domain;
}

/// `writeback:folio_wait_writeback`: the thread is about to wait for a
/// folio's writeback (inside a write: a stable-page wait before
/// rewriting it).
#[tracepoint]
pub fn write_wait_writeback(_ctx: TracePointContext) -> u32 {
    stable_wait()
}

/// `writeback:wait_on_page_writeback`, its name before 5.17.
#[tracepoint]
pub fn write_wait_page_writeback(_ctx: TracePointContext) -> u32 {
    stable_wait()
}

#[inline(always)]
fn stable_wait() -> u32 {
    let Some(w) = open_write() else {
        return 0;
    };
    if w.segment == segment::RECLAIM {
        return 0;
    }
    next_segment(w, segment::STABLE, now_ns());
    w.call.stable_waits += 1;
    0
}

/// Direct or memory-cgroup reclaim begins on the thread.
#[inline(always)]
fn reclaim_begin() -> u32 {
    if let Some(w) = open_write()
        && w.segment != segment::RECLAIM
    {
        next_segment(w, segment::RECLAIM, now_ns());
    }
    0
}

/// It ends.
#[inline(always)]
fn reclaim_end() -> u32 {
    if let Some(w) = open_write()
        && w.segment == segment::RECLAIM
    {
        next_segment(w, segment::PLAIN, now_ns());
    }
    0
}

#[tracepoint]
pub fn write_direct_reclaim_begin(_ctx: TracePointContext) -> u32 {
    reclaim_begin()
}

#[tracepoint]
pub fn write_direct_reclaim_end(_ctx: TracePointContext) -> u32 {
    reclaim_end()
}

#[tracepoint]
pub fn write_memcg_reclaim_begin(_ctx: TracePointContext) -> u32 {
    reclaim_begin()
}

#[tracepoint]
pub fn write_memcg_reclaim_end(_ctx: TracePointContext) -> u32 {
    reclaim_end()
}

/// The thread entered a function that may sleep for `kind` (a folio
/// lock, a journal handle's start). A pause or a stable-page wait before
/// it is over (the thread runs again); reclaim nests it, and neither
/// nests the other.
#[inline(always)]
fn wait_entered(kind: u32) -> u32 {
    if let Some(w) = open_write()
        && !matches!(
            w.segment,
            segment::RECLAIM | segment::LOCK | segment::JOURNAL
        )
    {
        next_segment(w, kind, now_ns());
        if kind == segment::LOCK {
            w.call.locks += 1;
        } else {
            w.call.journal_starts += 1;
        }
    }
    0
}

/// It returned from it.
#[inline(always)]
fn wait_left(kind: u32) -> u32 {
    if let Some(w) = open_write()
        && w.segment == kind
    {
        next_segment(w, segment::PLAIN, now_ns());
    }
    0
}

#[fentry(function = "__folio_lock")]
pub fn fentry_write_folio_lock(_ctx: FEntryContext) -> u32 {
    wait_entered(segment::LOCK)
}

#[fexit(function = "__folio_lock")]
pub fn fexit_write_folio_lock(_ctx: FExitContext) -> u32 {
    wait_left(segment::LOCK)
}

#[kprobe]
pub fn kprobe_write_folio_lock(_ctx: ProbeContext) -> u32 {
    wait_entered(segment::LOCK)
}

#[kretprobe]
pub fn kretprobe_write_folio_lock(_ctx: RetProbeContext) -> u32 {
    wait_left(segment::LOCK)
}

#[fentry(function = "jbd2__journal_start")]
pub fn fentry_write_journal_start(_ctx: FEntryContext) -> u32 {
    wait_entered(segment::JOURNAL)
}

#[fexit(function = "jbd2__journal_start")]
pub fn fexit_write_journal_start(_ctx: FExitContext) -> u32 {
    wait_left(segment::JOURNAL)
}

#[kprobe]
pub fn kprobe_write_journal_start(_ctx: ProbeContext) -> u32 {
    wait_entered(segment::JOURNAL)
}

#[kretprobe]
pub fn kretprobe_write_journal_start(_ctx: RetProbeContext) -> u32 {
    wait_left(segment::JOURNAL)
}

#[tracepoint]
pub fn sys_enter_write(ctx: TracePointContext) -> u32 {
    enter(&ctx, write_call::WRITE)
}

#[tracepoint]
pub fn sys_enter_pwrite64(ctx: TracePointContext) -> u32 {
    enter(&ctx, write_call::PWRITE64)
}

#[tracepoint]
pub fn sys_enter_writev(ctx: TracePointContext) -> u32 {
    enter(&ctx, write_call::WRITEV)
}

#[tracepoint]
pub fn sys_enter_pwritev(ctx: TracePointContext) -> u32 {
    enter(&ctx, write_call::PWRITEV)
}

#[tracepoint]
pub fn sys_enter_pwritev2(ctx: TracePointContext) -> u32 {
    enter(&ctx, write_call::PWRITEV2)
}

#[tracepoint]
pub fn sys_exit_write(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}

#[tracepoint]
pub fn sys_exit_pwrite64(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}

#[tracepoint]
pub fn sys_exit_writev(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}

#[tracepoint]
pub fn sys_exit_pwritev(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}

#[tracepoint]
pub fn sys_exit_pwritev2(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}
