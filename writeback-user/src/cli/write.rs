//! `wbscope write`'s arguments.
use std::path::PathBuf;

use clap::Args;

const EXAMPLES: &str = "\
Examples:
  # 1 GiB in 8 MiB chunks with Ts'o's pipelined sync_file_range, as JSON
  wbscope write --dir /var/tmp --size 1G --chunk 8M --strategy srf-pipelined --json

  # the same, dropping each chunk from the page cache once it is on disk
  # (posix_fadvise DONTNEED after its WAIT_BEFORE; the last ones after the
  # final fdatasync): the file does not stay cached
  wbscope write --dir /var/tmp --size 4G --chunk 8M --strategy srf-pipelined --drop-behind

  # dd conv=fsync equivalent, then read back and check every block
  wbscope write --dir /mnt/a --size 4G --chunk 1M --strategy fsync-end --verify

  # two filesystems at once: 4 jobs spread over both, 200 MB/s in total
  wbscope write --dir /mnt/a --dir /mnt/b --jobs 4 --size 2G --chunk 4M \\
      --strategy buffered --rate 200MB

  # O_DIRECT io_uring, 32 writes in flight
  wbscope write --dir /mnt/a --size 8G --chunk 1M --strategy uring --direct-io --qd 32

  # uncached buffered writes (Linux 6.14+, RWF_DONTCACHE): write-out starts
  # in each pwritev2 call and the pages are dropped once written
  wbscope write --dir /var/tmp --size 2G --chunk 8M --strategy uncached --json

  # the same through io_uring, 16 writes in flight
  wbscope write --dir /var/tmp --size 2G --chunk 8M --strategy uring-buffered --qd 16 --uncached

  # dpkg-like unpack: 5000 files of 4 KiB..2 MiB, Ts'o's two-pass sync
  wbscope write --dir /var/tmp --small-files 5000 --file-sync two-pass --noatime

Sizes: 4096, 64k, 8M, 8MiB, 1.5GiB. K, M, G, T (and KiB..TiB) are powers of
1024, as in dd; kB, MB, GB, TB are powers of 1000.
Strategies: buffered, fsync-end, fdatasync-chunk, srf-pipelined, direct, uring,
uncached, uring-buffered.
The report's JSON schema is documented in docs/writer.md.";

/// Arguments of `wbscope write`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct WriteArgs {
    /// Directory to create the files in (repeat for several targets; jobs
    /// are spread over them round-robin). Existing files are never touched.
    #[arg(long = "dir", value_name = "DIR", required = true)]
    pub(crate) dirs: Vec<PathBuf>,
    /// Bytes per file. A run writes jobs x files x SIZE.
    #[arg(long, value_name = "SIZE")]
    pub(crate) size: Option<String>,
    /// Bytes per write call.
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    pub(crate) chunk: String,
    /// buffered | fsync-end | fdatasync-chunk | srf-pipelined | direct | uring
    /// | uncached | uring-buffered
    #[arg(long, value_name = "NAME")]
    pub(crate) strategy: Option<String>,
    /// Files per job, written one after the other.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) files: u32,
    /// Parallel writers.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) jobs: u32,
    /// srf-pipelined: chunks between sync_file_range(WRITE) and WAIT_BEFORE.
    #[arg(long, value_name = "CHUNKS", default_value_t = 4)]
    pub(crate) window: u32,
    /// uring, uring-buffered: writes in flight.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub(crate) qd: u32,
    /// uring-buffered: RWF_DONTCACHE in every write (Linux 6.14+; refused
    /// where the filesystem lacks it, and with any other strategy).
    #[arg(long)]
    pub(crate) uncached: bool,
    /// Preallocate each file with fallocate(2).
    #[arg(long)]
    pub(crate) fallocate: bool,
    /// Open files with O_NOATIME (and reopen with it for later sync passes).
    #[arg(long)]
    pub(crate) noatime: bool,
    /// fdatasync(2) instead of fsync(2) where the strategy syncs.
    #[arg(long)]
    pub(crate) datasync: bool,
    /// Open with O_DIRECT (implied by --strategy direct; with uring, the
    /// O_DIRECT io_uring ceiling).
    #[arg(long)]
    pub(crate) direct_io: bool,
    /// Drop each chunk from the page cache once it is on disk:
    /// posix_fadvise(DONTNEED) on its range after its WAIT_BEFORE
    /// (srf-pipelined; the last --window chunks after the final fdatasync)
    /// or after its fdatasync (fdatasync-chunk). Other strategies: refused.
    #[arg(long)]
    pub(crate) drop_behind: bool,
    /// Limit to BYTES per second over all jobs (e.g. 200MB, 100MiB/s).
    #[arg(long, value_name = "BYTES/s")]
    pub(crate) rate: Option<String>,
    /// After the run, drop the cached pages and read everything back.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Keep the files (default: remove them at the end, also on error).
    #[arg(long)]
    pub(crate) keep: bool,
    /// Small-files mode: write N files of 4 KiB..2 MiB (seeded size mix).
    #[arg(long, value_name = "N")]
    pub(crate) small_files: Option<u64>,
    /// Small-files policy: none | fsync-each | srf-then-fsync | two-pass.
    #[arg(long, value_name = "POLICY", default_value = "none")]
    pub(crate) file_sync: String,
    /// Seed of the data pattern and of the small-files size mix.
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Skip the free-space check (to provoke ENOSPC on purpose).
    #[arg(long)]
    pub(crate) no_space_check: bool,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}
