//! The `durability` concept's candidate (`--enable
//! durability`): each fsync's span from the system call's tracepoints (any
//! filesystem), the file and the journal from the filesystems' own —
//! ext4's `ext4_sync_file` and jbd2's commits, xfs's `xfs_file_fsync` and
//! log force — each optional, since a host loads only the modules of its
//! filesystems (writeback-ebpf durability.rs).
use writeback_common::fields;

use super::{BtfAttach, Candidate, HookKind, TracepointAttach, bare, optional, sys_exit, tp};

const fn commit(
    program: &'static str,
    event: &'static str,
    global: &'static str,
) -> TracepointAttach {
    optional(tp(
        program,
        "jbd2",
        event,
        global,
        &fields::jbd2_commit::NAMES,
        &["dev", "transaction"],
    ))
}

const fn sys_flags(program: &'static str, global: &'static str) -> TracepointAttach {
    tp(
        program,
        "syscalls",
        program,
        global,
        &fields::sys_enter_flags::NAMES,
        &fields::sys_enter_flags::NAMES,
    )
}

/// The fsync span, the commit's phases, its counts and the handles.
pub(super) const DURABILITY_TP: &[TracepointAttach] = &[
    bare("sys_enter_fsync", "syscalls", "sys_enter_fsync"),
    bare("sys_enter_fdatasync", "syscalls", "sys_enter_fdatasync"),
    sys_exit("sys_exit_fsync", "SYS_EXIT_FSYNC_LAYOUT"),
    sys_exit("sys_exit_fdatasync", "SYS_EXIT_FDATASYNC_LAYOUT"),
    sys_flags("sys_enter_msync", "SYS_ENTER_MSYNC_LAYOUT"),
    sys_exit("sys_exit_msync", "SYS_EXIT_MSYNC_LAYOUT"),
    sys_flags("sys_enter_sync_file_range", "SYS_ENTER_SFR_LAYOUT"),
    sys_exit("sys_exit_sync_file_range", "SYS_EXIT_SFR_LAYOUT"),
    bare("sys_enter_syncfs", "syscalls", "sys_enter_syncfs"),
    sys_exit("sys_exit_syncfs", "SYS_EXIT_SYNCFS_LAYOUT"),
    optional(tp(
        "sync_file_enter",
        "ext4",
        "ext4_sync_file_enter",
        "SYNC_ENTER_LAYOUT",
        &fields::sync_file_enter::NAMES,
        &fields::sync_file_enter::NAMES,
    )),
    optional(tp(
        "sync_file_exit",
        "ext4",
        "ext4_sync_file_exit",
        "SYNC_EXIT_LAYOUT",
        &fields::sync_file_exit::NAMES,
        &fields::sync_file_exit::NAMES,
    )),
    commit("commit_start", "jbd2_start_commit", "COMMIT_START_LAYOUT"),
    commit(
        "commit_locking",
        "jbd2_commit_locking",
        "COMMIT_LOCKING_LAYOUT",
    ),
    commit(
        "commit_flushing",
        "jbd2_commit_flushing",
        "COMMIT_FLUSHING_LAYOUT",
    ),
    commit(
        "commit_logging",
        "jbd2_commit_logging",
        "COMMIT_LOGGING_LAYOUT",
    ),
    commit("commit_end", "jbd2_end_commit", "COMMIT_END_LAYOUT"),
    optional(tp(
        "commit_stats",
        "jbd2",
        "jbd2_run_stats",
        "RUN_STATS_LAYOUT",
        &fields::jbd2_run_stats::NAMES,
        &fields::jbd2_run_stats::NAMES,
    )),
    optional(tp(
        "handle_stats",
        "jbd2",
        "jbd2_handle_stats",
        "HANDLE_STATS_LAYOUT",
        &fields::jbd2_handle_stats::NAMES,
        &fields::jbd2_handle_stats::NAMES,
    )),
    optional(tp(
        "ext4_sync_fs",
        "ext4",
        "ext4_sync_fs",
        "EXT4_SYNC_FS_LAYOUT",
        &fields::ext4_sync_fs::NAMES,
        &fields::ext4_sync_fs::NAMES,
    )),
    optional(tp(
        "xfs_fsync",
        "xfs",
        "xfs_file_fsync",
        "XFS_FSYNC_LAYOUT",
        &fields::xfs_file::NAMES,
        &fields::xfs_file::NAMES,
    )),
    optional(bare("xfs_log_force", "xfs", "xfs_log_force")),
];

/// The functions an fsync waits for its pages and its cache flush in
/// (writeback-ebpf syncwait.rs), all in vmlinux: `sync_waits`.
const WAIT_TARGETS: [&str; 3] = [
    "file_write_and_wait_range",
    "filemap_fdatawait_range",
    "blkdev_issue_flush",
];

/// Entry and exit programs of each target, in [`WAIT_TARGETS`] order.
const fn pairs(programs: &'static [BtfAttach; 6], kind: HookKind) -> Candidate {
    Candidate::BtfPrograms {
        kind,
        attaches: programs,
        fields: &[],
    }
}

const fn at(program: &'static str, target: &'static str) -> BtfAttach {
    BtfAttach { program, target }
}

/// fentry/fexit on the page waits and the cache flush.
pub(super) const FENTRY_SYNC_WAITS: Candidate = pairs(
    &[
        at("fentry_write_wait", WAIT_TARGETS[0]),
        at("fexit_write_wait", WAIT_TARGETS[0]),
        at("fentry_fdatawait", WAIT_TARGETS[1]),
        at("fexit_fdatawait", WAIT_TARGETS[1]),
        at("fentry_issue_flush", WAIT_TARGETS[2]),
        at("fexit_issue_flush", WAIT_TARGETS[2]),
    ],
    HookKind::Fentry,
);

/// kprobe/kretprobe on the same.
pub(super) const KPROBE_SYNC_WAITS: Candidate = pairs(
    &[
        at("kprobe_write_wait", WAIT_TARGETS[0]),
        at("kretprobe_write_wait", WAIT_TARGETS[0]),
        at("kprobe_fdatawait", WAIT_TARGETS[1]),
        at("kretprobe_fdatawait", WAIT_TARGETS[1]),
        at("kprobe_issue_flush", WAIT_TARGETS[2]),
        at("kretprobe_issue_flush", WAIT_TARGETS[2]),
    ],
    HookKind::Kprobe,
);

/// `jbd2_log_wait_commit`, the journal wait: apart from the others, as
/// jbd2 is a module on most distribution kernels (fentry cannot reach it
/// through vmlinux's BTF) and absent where no ext4 is mounted.
pub(super) const FENTRY_JOURNAL_WAIT: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Fentry,
    attaches: &[
        at("fentry_log_wait", "jbd2_log_wait_commit"),
        at("fexit_log_wait", "jbd2_log_wait_commit"),
    ],
    fields: &[],
};

pub(super) const KPROBE_JOURNAL_WAIT: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Kprobe,
    attaches: &[
        at("kprobe_log_wait", "jbd2_log_wait_commit"),
        at("kretprobe_log_wait", "jbd2_log_wait_commit"),
    ],
    fields: &[],
};

/// Whether `c` is one of the measured waits' candidates (`--enable
/// durability` turns them on with the spans they mark).
pub(super) fn is_wait_hook(c: &Candidate) -> bool {
    [
        FENTRY_SYNC_WAITS,
        KPROBE_SYNC_WAITS,
        FENTRY_JOURNAL_WAIT,
        KPROBE_JOURNAL_WAIT,
    ]
    .contains(c)
}

/// Why the measured waits wait for `--enable durability`.
pub(super) const WAITS_WHY_OFF: &str = "they mark the fsync spans of `durability`, which is \
     off by default; they run per fsync only";

/// Why it waits for `--enable durability`.
pub(super) const WHY_OFF: &str = "it runs per journal handle (every metadata change on ext4: \
     a few per write(2) that moves a file's size or time) as well as per fsync and commit, \
     and costs a create+write+fsync loop about 5% (BENCHMARKS.md)";

/// How often its programs run, for the plan.
pub(super) const FIRES: &[(&str, &str)] = &[
    (
        "sys_enter_fsync",
        "per fsync, msync, sync_file_range or syncfs call",
    ),
    ("commit_", "per journal commit phase"),
    ("handle_stats", "per journal handle stopped"),
    ("log_force", "per xfs log force"),
    (
        "file_write_and_wait_range",
        "per fsync (its page wait and cache flush)",
    ),
    (
        "jbd2_log_wait_commit",
        "per fsync that waits for a journal commit",
    ),
];
