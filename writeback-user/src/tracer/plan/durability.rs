//! The `durability` concept's candidate (issue 27, `--enable
//! durability`): each ext4 fsync's span and the journal commits it waits
//! on, from classic tracepoints (writeback-ebpf durability.rs).
use writeback_common::fields;

use super::{TracepointAttach, tp};

const fn commit(
    program: &'static str,
    event: &'static str,
    global: &'static str,
) -> TracepointAttach {
    tp(
        program,
        "jbd2",
        event,
        global,
        &fields::jbd2_commit::NAMES,
        &["dev", "transaction"],
    )
}

/// The fsync span, the commit's phases, its counts and the handles.
pub(super) const DURABILITY_TP: &[TracepointAttach] = &[
    tp(
        "sync_file_enter",
        "ext4",
        "ext4_sync_file_enter",
        "SYNC_ENTER_LAYOUT",
        &fields::sync_file_enter::NAMES,
        &fields::sync_file_enter::NAMES,
    ),
    tp(
        "sync_file_exit",
        "ext4",
        "ext4_sync_file_exit",
        "SYNC_EXIT_LAYOUT",
        &fields::sync_file_exit::NAMES,
        &fields::sync_file_exit::NAMES,
    ),
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
    tp(
        "commit_stats",
        "jbd2",
        "jbd2_run_stats",
        "RUN_STATS_LAYOUT",
        &fields::jbd2_run_stats::NAMES,
        &fields::jbd2_run_stats::NAMES,
    ),
    tp(
        "handle_stats",
        "jbd2",
        "jbd2_handle_stats",
        "HANDLE_STATS_LAYOUT",
        &fields::jbd2_handle_stats::NAMES,
        &fields::jbd2_handle_stats::NAMES,
    ),
];

/// Why it waits for `--enable durability`.
pub(super) const WHY_OFF: &str = "it runs per journal handle (every metadata change on ext4: \
     a few per write(2) that moves a file's size or time) as well as per fsync and commit; \
     its cost is not yet measured against the floor";

/// How often its programs run, for the plan.
pub(super) const FIRES: &[(&str, &str)] = &[
    ("sync_file", "per ext4 fsync"),
    ("commit_", "per journal commit phase"),
    ("handle_stats", "per journal handle stopped"),
];
