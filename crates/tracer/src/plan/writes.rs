//! The `writes` concept's candidate (`--enable writes`): each buffered
//! write system call's span from its enter and exit tracepoints, and the
//! events that split it: a wait for a page under writeback, direct and
//! memory-cgroup reclaim (the throttling concept's `balance_dirty_pages`
//! program marks the pauses). writeback-ebpf writes.rs.
use writeback_common::fields;

use super::{BtfAttach, Candidate, HookKind, TracepointAttach, bare, optional, sys_exit, tp};

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
    // `wait_on_page_writeback` until the folio conversion (5.17,
    // include/trace/events/writeback.h): whichever this kernel has.
    optional(bare(
        "write_wait_writeback",
        "writeback",
        "folio_wait_writeback",
    )),
    optional(bare(
        "write_wait_page_writeback",
        "writeback",
        "wait_on_page_writeback",
    )),
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

const fn pair(kind: HookKind, programs: &'static [BtfAttach; 2]) -> Candidate {
    Candidate::BtfPrograms {
        kind,
        attaches: programs,
        fields: &[],
    }
}

const fn at(program: &'static str, target: &'static str) -> BtfAttach {
    BtfAttach { program, target }
}

/// `__folio_lock()` (mm/filemap.c, 5.16+): `folio_lock()` calls it only
/// when the lock is taken, to sleep for it.
const FOLIO_LOCK: &str = "__folio_lock";
/// `jbd2__journal_start()` (fs/jbd2/transaction.c): every ext4 journal
/// handle starts here, and waits here for room in the running transaction
/// or for a locked one's commit. jbd2 is a module on most distribution
/// kernels: fentry cannot reach it through vmlinux's BTF, a kprobe can.
const JOURNAL_START: &str = "jbd2__journal_start";

pub(super) const FENTRY_LOCK: Candidate = pair(
    HookKind::Fentry,
    &[
        at("fentry_write_folio_lock", FOLIO_LOCK),
        at("fexit_write_folio_lock", FOLIO_LOCK),
    ],
);
pub(super) const KPROBE_LOCK: Candidate = pair(
    HookKind::Kprobe,
    &[
        at("kprobe_write_folio_lock", FOLIO_LOCK),
        at("kretprobe_write_folio_lock", FOLIO_LOCK),
    ],
);
pub(super) const FENTRY_JOURNAL: Candidate = pair(
    HookKind::Fentry,
    &[
        at("fentry_write_journal_start", JOURNAL_START),
        at("fexit_write_journal_start", JOURNAL_START),
    ],
);
pub(super) const KPROBE_JOURNAL: Candidate = pair(
    HookKind::Kprobe,
    &[
        at("kprobe_write_journal_start", JOURNAL_START),
        at("kretprobe_write_journal_start", JOURNAL_START),
    ],
);

/// Whether `c` is one of the waits' hooks (`--enable writes` turns them
/// on with the spans they mark).
pub(super) fn is_wait_hook(c: &Candidate) -> bool {
    [FENTRY_LOCK, KPROBE_LOCK, FENTRY_JOURNAL, KPROBE_JOURNAL].contains(c)
}

/// Why the waits' hooks wait for `--enable writes`.
pub(super) const WAITS_WHY_OFF: &str = "they mark the write spans of `writes`, which is off by \
     default; they run per contended folio lock and per journal handle started";

/// Why it waits for `--enable writes`.
pub(super) const WHY_OFF: &str = "the write system calls' tracepoints fire for every write on \
     the host, sockets and pipes included (each filtered in the kernel to regular files on a \
     traced device, but each still runs a program: BENCHMARKS.md, \"Write spans\")";

/// How often its programs run, for the plan.
pub(super) const FIRES: &[(&str, &str)] = &[
    (
        "sys_enter_write",
        "per write system call of the host (any file; the work only for regular files traced)",
    ),
    ("__folio_lock", "per contended folio lock of the host"),
    (
        "jbd2__journal_start",
        "per journal handle started on the host (a few per ext4 write that moves a file's size or time)",
    ),
];
