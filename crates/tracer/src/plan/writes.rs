//! The `writes` concept's candidate (`--enable writes`): each buffered
//! write system call's span from its enter and exit tracepoints, and the
//! events that split it: a wait for a page under writeback, direct and
//! memory-cgroup reclaim (the throttling concept's `balance_dirty_pages`
//! program marks the pauses). writeback-ebpf writes.rs.
use writeback_common::fields;

use super::{Candidate, TracepointAttach, bare, sys_exit, tp};

const fn enter(program: &'static str) -> TracepointAttach {
    tp(
        program,
        "syscalls",
        program,
        "WRITE_ENTER_LAYOUT",
        &fields::sys_enter_fd::NAMES,
        &fields::sys_enter_fd::NAMES,
    )
}

const fn exit(program: &'static str) -> TracepointAttach {
    sys_exit(program, "WRITE_EXIT_LAYOUT")
}

/// The spans and their parts.
pub(super) const WRITES_TP: &[TracepointAttach] = &[
    enter("sys_enter_write"),
    exit("sys_exit_write"),
    enter("sys_enter_pwrite64"),
    exit("sys_exit_pwrite64"),
    enter("sys_enter_writev"),
    exit("sys_exit_writev"),
    enter("sys_enter_pwritev"),
    exit("sys_exit_pwritev"),
    enter("sys_enter_pwritev2"),
    exit("sys_exit_pwritev2"),
    bare("write_wait_writeback", "writeback", "folio_wait_writeback"),
    bare(
        "write_direct_reclaim_begin",
        "vmscan",
        "mm_vmscan_direct_reclaim_begin",
    ),
    bare(
        "write_direct_reclaim_end",
        "vmscan",
        "mm_vmscan_direct_reclaim_end",
    ),
    bare(
        "write_memcg_reclaim_begin",
        "vmscan",
        "mm_vmscan_memcg_reclaim_begin",
    ),
    bare(
        "write_memcg_reclaim_end",
        "vmscan",
        "mm_vmscan_memcg_reclaim_end",
    ),
];

pub(super) const CANDIDATE: Candidate = Candidate::Tracepoints(WRITES_TP);

/// Why it waits for `--enable writes`.
pub(super) const WHY_OFF: &str = "the write system calls' tracepoints fire for every write on \
     the host, sockets and pipes included (each filtered in the kernel to regular files on a \
     traced device, but each still runs a program: BENCHMARKS.md, \"Write spans\")";

/// How often its programs run, for the plan.
pub(super) const FIRES: &[(&str, &str)] = &[(
    "sys_enter_write",
    "per write system call of the host (any file; the work only for regular files traced)",
)];
