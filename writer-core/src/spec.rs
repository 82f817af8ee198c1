//! The writer's settings as plain data: the [`WriterSpec`] anyone can fill
//! in, and the choices it is made of ([`Strategy`], [`FileSync`],
//! [`SmallFiles`]).
//!
//! Nothing here checks a value: the `config` module validates a spec
//! against the bounds of the `limits` module, which in turn reads these
//! types to work out what a run needs. Keeping the plain types apart from
//! the validation lets the bounds depend on them without a circle.
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// How a large-file run drives writeback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// write(2) only: the kernel's flusher decides when data reaches the disk.
    Buffered,
    /// write(2), then one fsync(2) (fdatasync(2) with `datasync`) per file.
    FsyncEnd,
    /// fdatasync(2) after every chunk.
    FdatasyncChunk,
    /// sync_file_range(WRITE) after each chunk, WAIT_BEFORE `window` chunks
    /// later, fdatasync(2) at the end (Ts'o's dpkg pattern, docs/classic-cases.md, case 3).
    SrfPipelined,
    /// O_DIRECT pwrite(2) from aligned buffers, fdatasync(2) at the end.
    Direct,
    /// io_uring writes, `qd` in flight, a drained fsync at the end.
    Uring,
    /// pwritev2(2) with RWF_DONTCACHE per chunk (Linux 6.14+): the kernel
    /// starts write-out of the chunk from the write call and drops its pages
    /// once written; fsync(2) (fdatasync(2) with `datasync`) at the end.
    Uncached,
    /// io_uring buffered writes (never O_DIRECT), `qd` in flight, a drained
    /// fsync at the end; with `uncached`, RWF_DONTCACHE in each write SQE.
    UringBuffered,
}

impl Strategy {
    pub const ALL: [Strategy; 8] = [
        Strategy::Buffered,
        Strategy::FsyncEnd,
        Strategy::FdatasyncChunk,
        Strategy::SrfPipelined,
        Strategy::Direct,
        Strategy::Uring,
        Strategy::Uncached,
        Strategy::UringBuffered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Buffered => "buffered",
            Strategy::FsyncEnd => "fsync-end",
            Strategy::FdatasyncChunk => "fdatasync-chunk",
            Strategy::SrfPipelined => "srf-pipelined",
            Strategy::Direct => "direct",
            Strategy::Uring => "uring",
            Strategy::Uncached => "uncached",
            Strategy::UringBuffered => "uring-buffered",
        }
    }

    /// Whether the data is on stable storage when the strategy finishes.
    pub fn is_durable(self) -> bool {
        !matches!(self, Strategy::Buffered)
    }

    /// Whether the strategy writes through io_uring (one buffer per write
    /// in flight).
    pub fn is_uring(self) -> bool {
        matches!(self, Strategy::Uring | Strategy::UringBuffered)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-file durability policy in small-files mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FileSync {
    /// Write and close; nothing is made durable.
    #[default]
    None,
    /// fsync(2) (fdatasync(2) with `datasync`) each file before closing it,
    /// like dpkg before Debian #605009.
    FsyncEach,
    /// sync_file_range(WRITE) on each file as it is closed, then a second
    /// pass of fsync(2)/fdatasync(2) over all files (dpkg's first fix).
    SrfThenFsync,
    /// WRITE on each file as it is closed, then WAIT_BEFORE on all, then
    /// fdatasync(2) on all (Ts'o's final dpkg pattern, docs/classic-cases.md, case 3).
    TwoPass,
}

impl FileSync {
    pub const ALL: [FileSync; 4] = [
        FileSync::None,
        FileSync::FsyncEach,
        FileSync::SrfThenFsync,
        FileSync::TwoPass,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FileSync::None => "none",
            FileSync::FsyncEach => "fsync-each",
            FileSync::SrfThenFsync => "srf-then-fsync",
            FileSync::TwoPass => "two-pass",
        }
    }
}

impl fmt::Display for FileSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Small-files (package unpack) mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SmallFiles {
    /// Number of files in the whole run (spread over the jobs).
    pub count: u64,
    /// Smallest and largest file (defaults 4 KiB and 2 MiB).
    pub min_size: u64,
    pub max_size: u64,
    pub file_sync: FileSync,
}

impl SmallFiles {
    pub const DEFAULT_MIN: u64 = 4 << 10;
    pub const DEFAULT_MAX: u64 = 2 << 20;

    pub fn new(count: u64, file_sync: FileSync) -> Self {
        SmallFiles {
            count,
            min_size: Self::DEFAULT_MIN,
            max_size: Self::DEFAULT_MAX,
            file_sync,
        }
    }
}

/// Unvalidated settings, with the CLI's defaults. Turn into a
/// [`crate::WriterConfig`] with [`crate::WriterConfig::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct WriterSpec {
    /// Target directories; jobs are spread over them round-robin.
    pub dirs: Vec<PathBuf>,
    /// Bytes per file (large-file mode). A run writes `jobs × files × size`.
    pub size: u64,
    /// Bytes per write call.
    pub chunk: u64,
    pub strategy: Strategy,
    /// Files each job writes, one after the other.
    pub files: u32,
    /// Parallel writer threads.
    pub jobs: u32,
    /// srf-pipelined: chunks between WRITE and WAIT_BEFORE.
    pub window: u32,
    /// uring, uring-buffered: writes in flight.
    pub qd: u32,
    /// uring-buffered: RWF_DONTCACHE in every write SQE (`--uncached`).
    /// Refused with any other strategy (`uncached` is uncached already).
    pub uncached: bool,
    pub fallocate: bool,
    pub noatime: bool,
    /// Use fdatasync(2) where the strategy would fsync(2).
    pub datasync: bool,
    /// Open with O_DIRECT (implied by `direct`; useful with `uring`).
    pub direct_io: bool,
    /// Total bytes per second over all jobs; `None` = unlimited.
    pub rate: Option<u64>,
    /// posix_fadvise(POSIX_FADV_DONTNEED) on each chunk once it is on disk
    /// (srf-pipelined: after its WAIT_BEFORE; fdatasync-chunk: after its
    /// fdatasync). Refused with any other strategy.
    pub drop_behind: bool,
    pub verify: bool,
    pub keep: bool,
    /// Skip the free-space preflight (to test ENOSPC handling on purpose).
    pub skip_space_check: bool,
    /// Seed for the data pattern and the small-files size mix.
    pub seed: u64,
    pub small_files: Option<SmallFiles>,
}

impl Default for WriterSpec {
    fn default() -> Self {
        WriterSpec {
            dirs: Vec::new(),
            size: 0,
            chunk: 1 << 20,
            strategy: Strategy::Buffered,
            files: 1,
            jobs: 1,
            // Ts'o's example keeps a few chunks between starting and waiting
            // on writeback; 4 is the default docs/writer.md gives for --window.
            window: 4,
            // fio's io_uring reference job (BENCHMARKS.md) uses iodepth 32.
            qd: 32,
            uncached: false,
            fallocate: false,
            noatime: false,
            datasync: false,
            direct_io: false,
            rate: None,
            drop_behind: false,
            verify: false,
            keep: false,
            skip_space_check: false,
            seed: 0x7762_7363_6f70_6531, // "wbscope1"
            small_files: None,
        }
    }
}

impl WriterSpec {
    /// Directory job `job` writes into (round-robin over the targets).
    /// Panics without a target, which [`crate::WriterConfig::new`] refuses.
    pub(crate) fn dir_for_job(&self, job: u32) -> &Path {
        let i = job as usize % self.dirs.len();
        &self.dirs[i]
    }
}
