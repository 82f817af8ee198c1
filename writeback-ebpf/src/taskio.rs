//! Each process's I/O counts as the kernel keeps them per task (`struct
//! task_io_accounting`: what /proc/PID/io prints), read without /proc, so
//! that they stay true after the privilege drop (another user's
//! /proc/PID/io is refused to it) and at a process's exit (a /proc file is
//! gone by the next reading):
//!
//! - [`task_io_iter`], a task iterator: userspace makes one from its link
//!   at each reading, which runs this program once per thread of the
//!   host; a thread of a process in `FOLLOWED` (those that made an inode
//!   dirty) writes its counts to the iterator's output;
//! - [`task_io_exit`], on `sched:sched_process_exit`, once per exiting
//!   thread: the last thread of a process that dirtied pages sends the
//!   process's final counts to `DIRTYINGS`, after the dirtyings it made
//!   (one ring, so in order). An exit is no writeback event, but one
//!   cheap run per exit is the price of counting a `dd` that ends
//!   between two readings; the other threads stop at the first test.
use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP,
    cty::c_void,
    helpers::generated::bpf_seq_write,
    macros::{map, tracepoint},
    maps::HashMap,
    programs::TracePointContext,
};
use writeback_common::{
    TASK_IO_EXIT_KIND, TASK_IO_LIVE_KIND, TaskIo, TaskIoMembers, stat, task_io_members as tm,
};

use crate::{
    bump,
    dirtier::DIRTYINGS,
    read::{Access, Probed, Typed},
};

/// Where the task members are, from the kernel's BTF (tracer/attach.rs).
#[unsafe(no_mangle)]
static TASK_IO_MEMBERS: TaskIoMembers = TaskIoMembers::EMPTY;

/// The processes whose counts the iterator reports: those userspace saw
/// make an inode dirty, added at its reading and removed once gone.
/// 4,096 alive at once (a process past it is not followed, and says so):
/// 330 KB preallocated, where 16,384 took 1.3 MiB and pushed the default
/// maps past their 32 MiB bound (tracer/memory.rs).
#[map]
static FOLLOWED: HashMap<u32, u32> = HashMap::with_max_entries(1 << 12, 0);

/// The three counts of `task` (its own) plus, with `signal`, those its
/// thread group's exited threads left there.
#[inline(always)]
fn counts<A: Access>(task: *const u8, with_signal: bool) -> (u64, u64, u64) {
    let m = &TASK_IO_MEMBERS.members;
    let mut wchar = A::scalar(task, &m[tm::TASK_WCHAR]) as u64;
    let mut write = A::scalar(task, &m[tm::TASK_WRITE_BYTES]) as u64;
    let mut cancelled = A::scalar(task, &m[tm::TASK_CANCELLED]) as u64;
    if with_signal {
        let signal = A::pointer(task, &m[tm::TASK_SIGNAL]);
        wchar += A::scalar(signal, &m[tm::SIGNAL_WCHAR]) as u64;
        write += A::scalar(signal, &m[tm::SIGNAL_WRITE_BYTES]) as u64;
        cancelled += A::scalar(signal, &m[tm::SIGNAL_CANCELLED]) as u64;
    }
    (wchar, write, cancelled)
}

/// The thread group leader's start time (ns of CLOCK_BOOTTIME).
#[inline(always)]
fn leader_start<A: Access>(task: *const u8) -> u64 {
    let m = &TASK_IO_MEMBERS.members;
    let leader = A::pointer(task, &m[tm::TASK_GROUP_LEADER]);
    A::scalar(leader, &m[tm::TASK_START_BOOTTIME]) as u64
}

/// `iter/task`: the context is `struct bpf_iter__task { struct
/// bpf_iter_meta *meta; struct task_struct *task; }` (kernel/bpf/
/// task_iter.c), `task` null once past the last. Typed loads: the
/// verifier types `task` by BTF.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn task_io_iter(ctx: *mut c_void) -> i32 {
    let args = ctx as *const *const u8;
    // SAFETY: the two pointer members of the iterator's context, read at
    // constant offsets the verifier checks.
    let (meta, task) = unsafe { (*args, *args.add(1)) };
    if task.is_null() {
        return 0;
    }
    let m = &TASK_IO_MEMBERS.members;
    let tgid = Typed::scalar(task, &m[tm::TASK_TGID]) as u32;
    // SAFETY: plain map lookup.
    if unsafe { FOLLOWED.get(&tgid) }.is_none() {
        return 0;
    }
    let leader = Typed::pointer(task, &m[tm::TASK_GROUP_LEADER]);
    let (wchar, write_bytes, cancelled_write_bytes) =
        counts::<Typed>(task, core::ptr::eq(leader, task));
    let record = TaskIo {
        kind: TASK_IO_LIVE_KIND,
        tgid,
        start_boottime: leader_start::<Typed>(task),
        wchar,
        write_bytes,
        cancelled_write_bytes,
    };
    // SAFETY: `meta->seq` is the context's first member's first member
    // (`struct bpf_iter_meta { struct seq_file *seq; ... }`); the helper
    // copies `size_of::<TaskIo>()` bytes from the stack.
    unsafe {
        let seq = *(meta as *const *mut c_void);
        bpf_seq_write(
            seq.cast(),
            (&raw const record).cast(),
            size_of::<TaskIo>() as u32,
        );
    }
    0
}

/// `sched:sched_process_exit`, fired by `do_exit()` (kernel/exit.c) in the
/// exiting thread after `group_dead` is decided (`signal->live` is 0 for
/// the last thread of the process), before `exit_notify()` releases it:
/// its own counts are not yet in `signal->ioac`, so both are added.
#[tracepoint]
pub fn task_io_exit(_ctx: TracePointContext) -> u32 {
    let task = Probed::current_task();
    let m = &TASK_IO_MEMBERS.members;
    let signal = Probed::pointer(task, &m[tm::TASK_SIGNAL]);
    if Probed::scalar(signal, &m[tm::SIGNAL_LIVE]) != 0 {
        return 0;
    }
    let (wchar, write_bytes, cancelled_write_bytes) = counts::<Probed>(task, true);
    if write_bytes == 0 && cancelled_write_bytes == 0 {
        return 0;
    }
    let Some(mut entry) = DIRTYINGS.reserve::<TaskIo>(0) else {
        bump(stat::LOST_DIRTYINGS);
        return 0;
    };
    entry.write(TaskIo {
        kind: TASK_IO_EXIT_KIND,
        tgid: (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32,
        start_boottime: leader_start::<Probed>(task),
        wchar,
        write_bytes,
        cancelled_write_bytes,
    });
    entry.submit(BPF_RB_NO_WAKEUP as u64);
    0
}
