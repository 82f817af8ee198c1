//! The cases `cargo xtask bench writer` runs, and which are compared
//! with which.
use super::Tool;

/// One configuration measured once per round.
pub(super) struct Case {
    pub(super) label: &'static str,
    pub(super) tool: Tool,
    /// Tool-specific arguments (the common ones are added at run time).
    pub(super) args: &'static [&'static str],
    /// The command ends with its data on stable storage.
    pub(super) durable: bool,
}

const FIO_BUFFERED: &[&str] = &["--ioengine=psync", "--fallocate=none"];
const FIO_END_FSYNC: &[&str] = &["--ioengine=psync", "--fallocate=none", "--end_fsync=1"];
const FIO_FDATASYNC: &[&str] = &["--ioengine=psync", "--fallocate=none", "--fdatasync=1"];
const FIO_SRF: &[&str] = &[
    "--ioengine=psync",
    "--fallocate=none",
    "--sync_file_range=write:1",
    "--end_fsync=1",
];
const FIO_DIRECT: &[&str] = &[
    "--ioengine=psync",
    "--direct=1",
    "--fallocate=native",
    "--end_fsync=1",
];
const FIO_URING: &[&str] = &[
    "--ioengine=io_uring",
    "--iodepth=32",
    "--direct=1",
    "--fallocate=native",
    "--end_fsync=1",
];

/// In alternating order: each writer strategy right after its fio twin.
pub(super) const CASES: &[Case] = &[
    Case {
        label: "dd conv=fsync",
        tool: Tool::Dd,
        args: &[],
        durable: true,
    },
    Case {
        label: "fio buffered",
        tool: Tool::Fio,
        args: FIO_BUFFERED,
        durable: false,
    },
    Case {
        label: "writer buffered",
        tool: Tool::Writer,
        args: &["--strategy", "buffered"],
        durable: false,
    },
    Case {
        label: "fio end_fsync",
        tool: Tool::Fio,
        args: FIO_END_FSYNC,
        durable: true,
    },
    Case {
        label: "writer fsync-end",
        tool: Tool::Writer,
        args: &["--strategy", "fsync-end"],
        durable: true,
    },
    Case {
        label: "fio fdatasync=1",
        tool: Tool::Fio,
        args: FIO_FDATASYNC,
        durable: true,
    },
    Case {
        label: "writer fdatasync-chunk",
        tool: Tool::Writer,
        args: &["--strategy", "fdatasync-chunk"],
        durable: true,
    },
    Case {
        label: "fio sync_file_range=write:1",
        tool: Tool::Fio,
        args: FIO_SRF,
        durable: true,
    },
    Case {
        label: "writer srf-pipelined",
        tool: Tool::Writer,
        args: &["--strategy", "srf-pipelined"],
        durable: true,
    },
    Case {
        label: DROP_BEHIND,
        tool: Tool::Writer,
        args: &["--strategy", "srf-pipelined", "--drop-behind"],
        durable: true,
    },
    Case {
        label: "fio direct psync",
        tool: Tool::Fio,
        args: FIO_DIRECT,
        durable: true,
    },
    Case {
        label: "writer direct --fallocate",
        tool: Tool::Writer,
        args: &["--strategy", "direct", "--fallocate"],
        durable: true,
    },
    Case {
        label: "fio io_uring direct qd32",
        tool: Tool::Fio,
        args: FIO_URING,
        durable: true,
    },
    Case {
        label: "writer uring --direct-io --fallocate",
        tool: Tool::Writer,
        args: &["--strategy", "uring", "--direct-io", "--fallocate"],
        durable: true,
    },
    Case {
        label: DONTCACHE_LOOP,
        tool: Tool::Loop,
        args: &[],
        durable: true,
    },
    Case {
        label: "writer uncached",
        tool: Tool::Writer,
        args: &["--strategy", "uncached"],
        durable: true,
    },
    Case {
        label: "writer uring-buffered --uncached",
        tool: Tool::Writer,
        args: &["--strategy", "uring-buffered", "--uncached"],
        durable: true,
    },
];

/// The bare RWF_DONTCACHE reference (fio 3.33 has no `uncached=1`).
const DONTCACHE_LOOP: &str = "pwritev2 RWF_DONTCACHE loop";

/// (writer case, its fio equivalent).
pub(super) const PAIRS: &[(&str, &str)] = &[
    ("writer buffered", "fio buffered"),
    ("writer fsync-end", "fio end_fsync"),
    ("writer fdatasync-chunk", "fio fdatasync=1"),
    ("writer srf-pipelined", "fio sync_file_range=write:1"),
    ("writer direct --fallocate", "fio direct psync"),
    (
        "writer uring --direct-io --fallocate",
        "fio io_uring direct qd32",
    ),
    ("writer uncached", DONTCACHE_LOOP),
    ("writer uring-buffered --uncached", DONTCACHE_LOOP),
];
/// srf-pipelined with posix_fadvise(DONTNEED) on each chunk once on disk.
pub(super) const DROP_BEHIND: &str = "writer srf-pipelined --drop-behind";
/// Writer cases shown beside a fio job that is not their equivalent (fio
/// has no drop-behind), with no goal on the ratio.
pub(super) const NEAREST: &[(&str, &str)] = &[(DROP_BEHIND, "fio sync_file_range=write:1")];
pub(super) const CEILING: &str = "fio io_uring direct qd32";
/// The case whose 1 MiB run gives each tool's fixed cost, in `Tool` order.
pub(super) const STARTUP_CASES: [&str; 3] = ["dd conv=fsync", "fio end_fsync", "writer fsync-end"];
