//! The final report of a run (serialised as one JSON object by
//! `wbscope write --json`; the schema is documented in docs/writer.md).
//!
//! Units are in the field names: `_s` seconds, `_us` microseconds, `_kib`
//! KiB (1024 bytes), `_mb_s` MB/s with 1 MB = 10^6 bytes (what dd and fio
//! print as MB/s).
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Serialize, Serializer};

use crate::error::WriterError;
use crate::spec::FileSync;
use crate::stats::{LatencySummary, SeriesStats};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    /// Stopped on request (SIGINT, the TUI) before the end.
    Interrupted,
    /// Stopped by an error; `error` says which.
    Failed,
}

/// How a run ended, for a front end that must act on it (the dashboard
/// starts the next run unless the last one failed) and show it: decide on
/// `status`, never on the words of `summary`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: RunStatus,
    /// One line for people: "completed 1.0 GB, 512 MB/s", "failed: ...".
    pub summary: String,
}

impl RunOutcome {
    /// A run that failed (or never started), with its error.
    pub fn failed(error: impl std::fmt::Display) -> RunOutcome {
        RunOutcome {
            status: RunStatus::Failed,
            summary: format!("failed: {error}"),
        }
    }
}

/// A run that failed, with the report of how far it got when it got
/// anywhere (a preflight refusal has none).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RunFailure {
    pub error: WriterError,
    pub partial: Option<Box<Report>>,
}

impl From<WriterError> for RunFailure {
    fn from(error: WriterError) -> Self {
        RunFailure {
            error,
            partial: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub files: u64,
    pub bytes: u64,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub status: RunStatus,
    pub error: Option<String>,
    /// `large-files` or `small-files`.
    pub mode: &'static str,
    /// Strategy name; in small-files mode `small-files`.
    pub strategy: String,
    /// Small-files policy.
    pub file_sync: Option<FileSync>,
    /// Paths are JSON strings, so a name that is not UTF-8 is written
    /// lossily (U+FFFD for each bad byte) rather than failing the report.
    #[serde(serialize_with = "lossy_paths")]
    pub dirs: Vec<PathBuf>,
    pub jobs: u32,
    /// Files planned and files fully written.
    pub files_planned: u64,
    pub files_written: u64,
    /// Bytes per file (large-file mode).
    pub file_bytes: Option<u64>,
    /// Chunk size at the start (it is a live tunable).
    pub chunk_bytes: u64,
    pub window: u32,
    pub qd: u32,
    pub fallocate: bool,
    pub noatime: bool,
    pub datasync: bool,
    pub o_direct: bool,
    /// O_DIRECT alignment used (the device's logical block size).
    pub direct_align: Option<u64>,
    pub rate_bytes_s: Option<u64>,
    /// `--drop-behind`: each chunk was dropped from the page cache with
    /// posix_fadvise(DONTNEED) once on disk (calls and latency under
    /// `sync_latency_us.drop_behind`).
    pub drop_behind: bool,
    /// Writes carried RWF_DONTCACHE (`uncached`, `uring-buffered
    /// --uncached`).
    pub rwf_dontcache: bool,
    /// Bytes whose write() returned (for uring: whose completion arrived).
    pub bytes: u64,
    /// Bytes on stable storage at the end (after the strategy's syncs).
    pub bytes_durable: u64,
    /// From the first write to the end of the last sync (verify excluded).
    pub elapsed_s: f64,
    /// bytes / elapsed_s.
    pub write_mb_s: f64,
    /// bytes_durable / elapsed_s, flush included. `None` when nothing was
    /// made durable (buffered, `--file-sync none`).
    pub durable_mb_s: Option<f64>,
    /// Throughput in each whole second of the run, MB/s: bytes handed to
    /// the kernel (write(2) returned; uring: completion reaped) between two
    /// ticks on whole seconds from the start, over the time between them.
    /// Seconds spent waiting in syncs count (a long final fsync shows as
    /// slow seconds); the partial last second is left out. Not durable
    /// bytes: `buffered`'s series ends with its last write. The definition
    /// is in docs/writer.md ("Per-second series").
    pub per_second_mb_s: Vec<f64>,
    pub per_second: Option<SeriesStats>,
    /// Coefficient of variation of `per_second_mb_s` (copy of
    /// `per_second.cv`).
    pub cv: Option<f64>,
    /// Latency of each write (pwrite(2), or io_uring submit to completion).
    pub write_latency_us: Option<LatencySummary>,
    /// Per sync kind: `srf_write`, `srf_wait_before`, `fdatasync`, `fsync`,
    /// and `drop_behind` (posix_fadvise(DONTNEED) calls, not a sync).
    pub sync_latency_us: BTreeMap<&'static str, LatencySummary>,
    /// getrusage(RUSAGE_SELF) over the run: all threads of the process.
    pub user_cpu_s: f64,
    pub sys_cpu_s: f64,
    /// System CPU seconds per GiB written.
    pub sys_cpu_s_per_gib: Option<f64>,
    /// Peak of /proc/meminfo Dirty and Writeback, sampled every 100 ms.
    pub peak_dirty_kib: Option<u64>,
    pub peak_writeback_kib: Option<u64>,
    /// Page cache held by the run's own files (cachestat(2) over them,
    /// sampled every 100 ms): the peak, and at the end of the run (after
    /// the last sync, before the files are removed). Large-file mode on
    /// Linux 6.5+; `None` otherwise.
    pub cache_peak_kib: Option<u64>,
    pub cache_end_kib: Option<u64>,
    /// Page reclaim over the run (/proc/vmstat deltas, pages,
    /// system-wide): kswapd and direct reclaim.
    pub reclaim: Option<crate::monitor::Reclaim>,
    /// Small-files mode: files_written / elapsed_s.
    pub files_per_s: Option<f64>,
    pub verify: Option<VerifyReport>,
    /// Files left in place (`--keep`); empty otherwise. Lossy like `dirs`.
    #[serde(serialize_with = "lossy_paths")]
    pub kept_files: Vec<PathBuf>,
    /// Files that could not be removed at the end.
    pub cleanup_errors: Vec<String>,
}

/// Paths as strings, non-UTF-8 bytes replaced (serde's own `Path`
/// serialisation fails on them, in the middle of the report).
fn lossy_paths<S: Serializer>(paths: &[PathBuf], ser: S) -> Result<S::Ok, S::Error> {
    ser.collect_seq(paths.iter().map(|p| p.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;

    #[derive(Serialize)]
    struct Paths {
        #[serde(serialize_with = "lossy_paths")]
        p: Vec<PathBuf>,
    }

    #[test]
    fn a_non_utf8_path_is_written_lossily_not_an_error() {
        let odd = PathBuf::from(OsStr::from_bytes(b"/mnt/d\xffir"));
        // What serde does with the path itself: an error, mid-object.
        assert!(serde_json::to_string(&odd).is_err());
        let json = serde_json::to_string(&Paths {
            p: vec![odd, "/plain".into()],
        })
        .unwrap();
        assert_eq!(json, "{\"p\":[\"/mnt/d\u{fffd}ir\",\"/plain\"]}");
    }
}
