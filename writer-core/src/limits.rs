//! Every bound on the writer's settings, in one place.
//!
//! [`crate::WriterConfig::new`] refuses a spec outside these bounds and
//! [`crate::LiveTunables`] refuses a live change outside them; the CLI
//! (`wbscope write`, `compare`) and the dashboard's keys use the same
//! constants, so a value one front end accepts is a value every front end
//! accepts.
//!
//! The per-option bounds do not bound their product: 64 jobs of 256 MiB
//! chunks are 16 GiB of buffers. `MemoryNeed` is what a run will allocate,
//! and `check_memory` refuses it before anything is allocated when it does
//! not fit in the memory the machine has available (`MemAvailable`) or in
//! the process's address-space limit (`RLIMIT_AS`); the engine calls it
//! through [`crate::Writer::check_memory`].
use std::path::PathBuf;

use crate::plan::PlannedFile;
use crate::size::ByteSize;
use crate::spec::WriterSpec;

/// Smallest chunk: one page. Below it every write(2) is a partial page the
/// page cache must merge into, and the run measures that, not writeback.
pub const MIN_CHUNK: u64 = 4 << 10;
/// Largest chunk. One write of 256 MiB is already larger than the
/// background dirty threshold of a machine with a few GiB of memory
/// (`vm.dirty_background_ratio`, 10 % of available memory by default), so a
/// larger chunk changes nothing writeback sees; it only costs memory (a
/// buffer per job, one per write in flight with `uring`).
pub const MAX_CHUNK: u64 = 256 << 20;
/// srf-pipelined: chunks between sync_file_range(WRITE) and WAIT_BEFORE.
/// Beyond 64 chunks in flight per file the WAIT_BEFORE almost never waits
/// and the strategy is `buffered` with extra system calls.
pub const MAX_WINDOW: u32 = 64;
/// Parallel writer threads. Writeback of a device is done by one flusher
/// (one `bdi_writeback` per cgroup); past a few dozen writers a run
/// measures contention on the inode and page-cache locks and the
/// scheduler, not writeback.
pub const MAX_JOBS: u32 = 64;
/// io_uring rings bigger than this buy nothing here and pin memory.
pub const MAX_QD: u32 = 4096;
/// io_uring buffer memory per job we accept (`qd` × chunk).
pub const MAX_URING_BUFFERS: u64 = 4 << 30;
/// Stack of each job thread, set explicitly so `MemoryNeed` knows it (2
/// MiB is Rust's default for spawned threads, std::thread "Stack size").
pub(crate) const JOB_STACK: usize = 2 << 20;

/// Of `MemAvailable`, the share a run's own allocations may take. The rest
/// is left to the page cache the run dirties (the dirty limits are
/// fractions of available memory, `vm.dirty_ratio` 20 % by default) and to
/// everything else on the machine: the writer measures writeback and must
/// not push the machine into reclaim of its own making.
const AVAILABLE_SHARE: (u64, u64) = (1, 2);

/// What a run will allocate, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryNeed {
    /// Chunk buffers: filled with data, so resident for the whole run.
    pub(crate) buffers: u64,
    /// The plan and the bookkeeping of every file (paths, sizes): resident.
    pub(crate) bookkeeping: u64,
    /// Job thread stacks: address space, hardly resident.
    pub(crate) stacks: u64,
    /// The buffers as the options that make them, for the refusal
    /// ("--jobs 4 x --qd 32 x --chunk 64MiB").
    pub(crate) buffers_from: String,
    /// Files planned.
    pub(crate) files: u64,
    /// The options that make the files: `--small-files`, or `--jobs` and
    /// `--files`.
    pub(crate) files_from: &'static str,
}

/// Bytes one planned file costs while a run lives: its [`PlannedFile`]
/// in the plan and again in the list of completed files, its path in both
/// and in the list of created files, its size in the size mix, and an
/// entry in the small-files index (an over- rather than an under-estimate).
fn bytes_per_file(path_len: u64) -> u64 {
    let planned = std::mem::size_of::<PlannedFile>() as u64;
    let path = std::mem::size_of::<PathBuf>() as u64;
    2 * planned + path + 3 * path_len + 64
}

impl MemoryNeed {
    /// The allocations of a run of `s` (pure arithmetic, no I/O). Reads
    /// the plain spec: the config validates against the bounds above, so
    /// this module must not need the validated type.
    pub(crate) fn of(s: &WriterSpec) -> MemoryNeed {
        let jobs = u64::from(s.jobs);
        // Buffers are allocated page-aligned in whole pages (buf.rs).
        let page = crate::buf::MEM_ALIGN as u64;
        let round = |n: u64| n.div_ceil(page).saturating_mul(page);
        let large_files = jobs.saturating_mul(u64::from(s.files));
        let (per_job, buffers_from, files, files_from) = match &s.small_files {
            Some(sf) => {
                let chunk = s.chunk.min(sf.max_size);
                (
                    round(chunk),
                    format!("--jobs {} x --chunk {}", s.jobs, ByteSize(chunk)),
                    sf.count,
                    "--small-files",
                )
            }
            None if s.strategy.is_uring() => (
                round(s.chunk).saturating_mul(u64::from(s.qd)),
                format!(
                    "--jobs {} x --qd {} x --chunk {}",
                    s.jobs,
                    s.qd,
                    ByteSize(s.chunk)
                ),
                large_files,
                "--jobs or --files",
            ),
            None => (
                round(s.chunk),
                format!("--jobs {} x --chunk {}", s.jobs, ByteSize(s.chunk)),
                large_files,
                "--jobs or --files",
            ),
        };
        // `wbscope-<pid>-<job>-<index>.dat` at its longest: 14 fixed bytes,
        // a u32 pid and job (10 digits each), a u64 index (20).
        let name = 14 + 10 + 10 + 20;
        let dir = s
            .dirs
            .iter()
            .map(|d| d.as_os_str().len() as u64)
            .max()
            .unwrap_or(0);
        MemoryNeed {
            buffers: per_job.saturating_mul(jobs),
            bookkeeping: files.saturating_mul(bytes_per_file(dir + 1 + name)),
            stacks: jobs.saturating_mul(JOB_STACK as u64 + page),
            buffers_from,
            files,
            files_from,
        }
    }

    /// Memory the run keeps resident.
    pub(crate) fn resident(&self) -> u64 {
        self.buffers.saturating_add(self.bookkeeping)
    }

    /// Address space the run adds to the process.
    pub(crate) fn address_space(&self) -> u64 {
        self.resident().saturating_add(self.stacks)
    }

    /// What the memory goes to, the total, and which options to lower.
    fn what(&self, total: u64) -> (String, String) {
        if self.bookkeeping > self.buffers {
            (
                format!("planning {} files needs {}", self.files, approx(total)),
                format!("lower {}", self.files_from),
            )
        } else {
            let qd = if self.buffers_from.contains("--qd") {
                ", --qd"
            } else {
                ""
            };
            (
                format!("{} needs {}", self.buffers_from, approx(total)),
                format!("lower --jobs{qd} or --chunk"),
            )
        }
    }
}

/// A size for people, to a tenth of its unit: `16.0GiB`, `977.5MiB`.
fn approx(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    match UNITS.iter().find(|(_, u)| bytes >= *u) {
        Some((name, u)) => format!("{:.1}{name}", bytes as f64 / *u as f64),
        None => format!("{bytes} bytes"),
    }
}

/// What the machine allows, read by the engine just before a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryRoom {
    /// `MemAvailable` of /proc/meminfo in bytes (proc(5)); `None` when it
    /// cannot be read (kernels before 3.14 have no such line).
    pub(crate) available: Option<u64>,
    /// `RLIMIT_AS` minus the address space the process already uses;
    /// `None` without a limit.
    pub(crate) address_space: Option<u64>,
}

/// Refuses a run whose allocations do not fit in `room`, with one line
/// naming the options that make them.
pub(crate) fn check_memory(need: &MemoryNeed, room: MemoryRoom) -> Result<(), String> {
    if let Some(avail) = room.available {
        let share = avail / AVAILABLE_SHARE.1 * AVAILABLE_SHARE.0;
        if need.resident() > share {
            let (what, advice) = need.what(need.resident());
            return Err(format!(
                "{what}, more than half of the {} of memory available (MemAvailable); {advice}",
                approx(avail)
            ));
        }
    }
    if let Some(room) = room.address_space
        && need.address_space() > room
    {
        let (what, advice) = need.what(need.address_space());
        return Err(format!(
            "{what} with its threads' stacks, more than the {} of address space the \
             limit leaves (RLIMIT_AS, ulimit -v); {advice}",
            approx(room)
        ));
    }
    Ok(())
}

/// Reads what the machine allows now: /proc/meminfo, getrlimit(2) and
/// /proc/self/statm (proc(5): the first field is the process's total
/// program size, in pages).
pub(crate) fn memory_room() -> MemoryRoom {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| crate::meminfo::mem_available_kib(&t))
        .map(|kib| kib.saturating_mul(1024));
    // SAFETY: rlimit is plain old data.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer for the call.
    let limited = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY;
    let address_space = limited.then(|| {
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let used = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |pages| pages.saturating_mul(page));
        lim.rlim_cur.saturating_sub(used)
    });
    MemoryRoom {
        available,
        address_space,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WriterConfig;
    use crate::spec::{FileSync, SmallFiles, Strategy};

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn need(f: impl FnOnce(&mut WriterSpec)) -> MemoryNeed {
        let mut s = WriterSpec {
            dirs: vec!["/d".into()],
            size: 256 * MIB,
            chunk: MIB,
            ..WriterSpec::default()
        };
        f(&mut s);
        MemoryNeed::of(WriterConfig::new(s).unwrap().spec())
    }

    #[test]
    fn buffers_are_jobs_times_chunk_times_writes_in_flight() {
        let n = need(|s| s.jobs = 8);
        assert_eq!(n.buffers, 8 * MIB);
        assert_eq!(n.buffers_from, "--jobs 8 x --chunk 1MiB");
        assert_eq!(n.stacks, 8 * (2 * MIB + 4096));
        // uring: one buffer per write in flight, not one per job.
        let n = need(|s| {
            s.strategy = Strategy::Uring;
            s.jobs = 4;
            s.qd = 32;
            s.chunk = 8 * MIB;
        });
        assert_eq!(n.buffers, 4 * 32 * 8 * MIB);
        assert_eq!(n.buffers_from, "--jobs 4 x --qd 32 x --chunk 8MiB");
        // srf-pipelined's window is page cache, not buffers of ours.
        let n = need(|s| {
            s.strategy = Strategy::SrfPipelined;
            s.window = 64;
        });
        assert_eq!(n.buffers, MIB);
        // A chunk that is not a whole number of pages takes whole pages.
        assert_eq!(need(|s| s.chunk = 5000).buffers, 8192);
        // Small files: a buffer no larger than the largest file.
        let n = need(|s| {
            s.chunk = 64 * MIB;
            s.jobs = 2;
            s.small_files = Some(SmallFiles::new(10, FileSync::None));
        });
        assert_eq!(n.buffers, 2 * SmallFiles::DEFAULT_MAX);
    }

    #[test]
    fn the_plan_counts_per_file() {
        let one = need(|s| s.small_files = Some(SmallFiles::new(1, FileSync::None)));
        let many = need(|s| s.small_files = Some(SmallFiles::new(1000, FileSync::None)));
        assert_eq!(many.bookkeeping, 1000 * one.bookkeeping);
        // At least the PlannedFile and the path itself.
        assert!(one.bookkeeping > std::mem::size_of::<PlannedFile>() as u64 + 20);
        let huge = need(|s| s.small_files = Some(SmallFiles::new(u64::MAX, FileSync::None)));
        assert_eq!(huge.bookkeeping, u64::MAX, "saturates, never wraps");
    }

    #[test]
    fn refused_past_half_of_available_memory() {
        let n = need(|s| {
            s.jobs = 64;
            s.chunk = 256 * MIB;
        });
        assert_eq!(n.buffers, 16 * GIB);
        let room = |gib: u64| MemoryRoom {
            available: Some(gib * GIB),
            address_space: None,
        };
        assert_eq!(check_memory(&n, room(64)), Ok(()));
        // 16 GiB and the plan: just over half of 32 GiB.
        let err = check_memory(&n, room(32)).unwrap_err();
        assert!(
            err.starts_with("--jobs 64 x --chunk 256MiB needs 16.0GiB")
                && err.contains("the 32.0GiB of memory available (MemAvailable)")
                && err.ends_with("lower --jobs or --chunk")
                && !err.contains('\n'),
            "{err}"
        );
        // Unknown: nothing to check against.
        assert_eq!(check_memory(&n, MemoryRoom::default()), Ok(()));
    }

    #[test]
    fn refused_past_the_address_space_limit_stacks_included() {
        let n = need(|s| s.jobs = 4);
        let room = |bytes: u64| MemoryRoom {
            available: None,
            address_space: Some(bytes),
        };
        assert_eq!(check_memory(&n, room(n.address_space())), Ok(()));
        let err = check_memory(&n, room(n.address_space() - 1)).unwrap_err();
        assert!(err.contains("RLIMIT_AS") && !err.contains('\n'), "{err}");
        let uring = need(|s| {
            s.strategy = Strategy::Uring;
            s.jobs = 4;
        });
        let err = check_memory(&uring, room(uring.resident())).unwrap_err();
        assert!(err.ends_with("lower --jobs, --qd or --chunk"), "{err}");
        // The stacks alone (4 x 2 MiB) do not fit beside 4 MiB of buffers.
        assert!(check_memory(&n, room(n.resident() + MIB)).is_err());
    }

    #[test]
    fn a_huge_small_files_plan_is_named() {
        let n = need(|s| s.small_files = Some(SmallFiles::new(10_000_000_000, FileSync::None)));
        let err = check_memory(
            &n,
            MemoryRoom {
                available: Some(64 * GIB),
                address_space: None,
            },
        )
        .unwrap_err();
        assert!(
            err.starts_with("planning 10000000000 files needs ")
                && err.ends_with("lower --small-files"),
            "{err}"
        );
    }

    #[test]
    fn sizes_for_people() {
        assert_eq!(approx(16 * GIB + 1), "16.0GiB");
        assert_eq!(approx(1536 * MIB), "1.5GiB");
        assert_eq!(approx(4095), "4.0KiB");
        assert_eq!(approx(12), "12 bytes");
    }

    #[test]
    fn this_process_has_a_room() {
        let room = memory_room();
        assert!(room.available.is_some_and(|a| a > 0), "{room:?}");
    }
}
