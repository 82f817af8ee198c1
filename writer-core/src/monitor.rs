//! The monitor thread of a run: per-second throughput ticks, the Dirty
//! and Writeback peaks of /proc/meminfo, and the page-cache footprint of
//! the run's own files; and the reclaim counters of /proc/vmstat around
//! the run.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::event::{Event, Observer};
use crate::meminfo::{self, DirtyLevels};

/// /proc/meminfo sampling period: fine enough to catch the Dirty peak of a
/// one-second burst, cheap enough (one small read) not to matter. The
/// files' page-cache footprint is sampled with it.
const MEMINFO_EVERY: Duration = Duration::from_millis(100);

/// cachestat(2)'s number: 451 in the unified table every architecture
/// but alpha uses for calls added since 5.1 (arch/x86/entry/syscalls/
/// syscall_64.tbl, include/uapi/asm-generic/unistd.h); libc does not name
/// it on every target.
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` and `struct cachestat` of
/// include/uapi/linux/mman.h (Linux 6.5).
#[repr(C)]
struct CachestatRange {
    off: u64,
    /// 0: to the end of the file.
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Pages of `file` in the page cache (cachestat(2), Linux 6.5+: a walk of
/// the file's own page-cache entries, no mapping needed as mincore(2)
/// would); `None` where the kernel lacks the call.
fn cached_pages(file: &File) -> Option<u64> {
    let range = CachestatRange { off: 0, len: 0 };
    let mut cs = Cachestat::default();
    // SAFETY: both pointers are valid for the call; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut cs as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(cs.nr_cache)
}

/// KiB of the page cache held by `paths` now; `None` when cachestat(2) is
/// missing. A file that cannot be opened (not created yet, removed) holds
/// nothing.
pub(crate) fn footprint_kib(paths: &[PathBuf]) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut pages = 0u64;
    for p in paths {
        let Ok(f) = File::open(p) else { continue };
        pages += cached_pages(&f)?;
    }
    Some(pages * page / 1024)
}

/// Reclaim counters of /proc/vmstat (pages; system-wide), or their change
/// over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Reclaim {
    /// Pages kswapd scanned and reclaimed (`pgscan_kswapd`, `pgsteal_kswapd`).
    pub pgscan_kswapd: u64,
    pub pgsteal_kswapd: u64,
    /// The same in direct reclaim, by allocating tasks (`pgscan_direct`,
    /// `pgsteal_direct`).
    pub pgscan_direct: u64,
    pub pgsteal_direct: u64,
    /// Times an allocation entered direct reclaim (sum of `allocstall_*`).
    pub allocstall: u64,
}

impl Reclaim {
    /// Parses /proc/vmstat text; missing counters read as 0.
    pub fn parse(text: &str) -> Reclaim {
        let mut r = Reclaim::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(' ') else {
                continue;
            };
            let Ok(v) = value.trim().parse::<u64>() else {
                continue;
            };
            match key {
                "pgscan_kswapd" => r.pgscan_kswapd = v,
                "pgsteal_kswapd" => r.pgsteal_kswapd = v,
                "pgscan_direct" => r.pgscan_direct = v,
                "pgsteal_direct" => r.pgsteal_direct = v,
                k if k.starts_with("allocstall_") => r.allocstall += v,
                _ => {}
            }
        }
        r
    }

    pub(crate) fn sample() -> Option<Reclaim> {
        std::fs::read_to_string("/proc/vmstat")
            .ok()
            .map(|t| Reclaim::parse(&t))
    }

    /// `later` minus `self`, counter by counter (never below 0).
    pub fn delta(&self, later: &Reclaim) -> Reclaim {
        Reclaim {
            pgscan_kswapd: later.pgscan_kswapd.saturating_sub(self.pgscan_kswapd),
            pgsteal_kswapd: later.pgsteal_kswapd.saturating_sub(self.pgsteal_kswapd),
            pgscan_direct: later.pgscan_direct.saturating_sub(self.pgscan_direct),
            pgsteal_direct: later.pgsteal_direct.saturating_sub(self.pgsteal_direct),
            allocstall: later.allocstall.saturating_sub(self.allocstall),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct MonitorResult {
    pub(crate) per_second_mb_s: Vec<f64>,
    pub(crate) peak: Option<DirtyLevels>,
    /// Page cache held by the run's files (KiB): the peak of the 100 ms
    /// samples and the last one, after the jobs ended (before cleanup).
    /// `None` without cachestat(2) or when not asked.
    pub(crate) cache_peak_kib: Option<u64>,
    pub(crate) cache_end_kib: Option<u64>,
}

/// Samples /proc/meminfo (and, with `files`, the page cache the files
/// created so far hold) every 100 ms and emits a Tick every second until
/// told to stop.
pub(crate) fn monitor(
    start: Instant,
    progress: &AtomicU64,
    observer: &dyn Observer,
    files: Option<&Mutex<Vec<PathBuf>>>,
    stop: Receiver<()>,
) -> MonitorResult {
    let mut out = MonitorResult::default();
    let sample = |out: &mut MonitorResult| {
        if let Some(m) = meminfo::sample() {
            let p = out.peak.get_or_insert(m);
            p.dirty_kib = p.dirty_kib.max(m.dirty_kib);
            p.writeback_kib = p.writeback_kib.max(m.writeback_kib);
        }
        if let Some(files) = files {
            let paths = files.lock().unwrap_or_else(|p| p.into_inner()).clone();
            out.cache_end_kib = footprint_kib(&paths);
            out.cache_peak_kib = out.cache_peak_kib.max(out.cache_end_kib);
        }
    };
    sample(&mut out);
    let mut next_sample = start + MEMINFO_EVERY;
    let mut series = PerSecond::new(start);
    loop {
        let wake = next_sample.min(series.next_tick());
        match stop.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        if now >= next_sample {
            sample(&mut out);
            next_sample = (next_sample + MEMINFO_EVERY).max(now);
        }
        if now >= series.next_tick() {
            let bytes = progress.load(Ordering::Relaxed);
            let delta = series.tick(now, bytes);
            observer.on_event(&Event::Tick {
                elapsed: now.duration_since(start),
                bytes,
                bytes_last_second: delta,
            });
        }
    }
    // The partial last second (from the last tick to the end of the run) is
    // left out: a fraction of a second would count as a whole sample.
    out.per_second_mb_s = series.samples;
    sample(&mut out);
    out
}

/// The per-second throughput series of a run (`per_second_mb_s`).
///
/// Ticks fall on whole seconds from the start of the run; each sample is the
/// bytes handed to the kernel (write(2) returned, or io_uring completion
/// reaped) between two ticks, divided by the time between them (so a tick
/// taken a little late is still a rate in MB/s). Seconds in which the writer
/// waits in a sync count, with whatever few bytes they saw. A tick taken more
/// than a second late (the monitor thread starved) covers all the time since
/// the previous one and the ticks it missed are skipped, rather than closing
/// intervals of almost no length whose rate would be noise.
#[derive(Debug)]
pub(crate) struct PerSecond {
    next_tick: Instant,
    last_at: Instant,
    last_bytes: u64,
    samples: Vec<f64>,
}

impl PerSecond {
    const TICK: Duration = Duration::from_secs(1);

    fn new(start: Instant) -> Self {
        PerSecond {
            next_tick: start + Self::TICK,
            last_at: start,
            last_bytes: 0,
            samples: Vec::new(),
        }
    }

    fn next_tick(&self) -> Instant {
        self.next_tick
    }

    /// Closes the interval ending `now` (at or after `next_tick()`), with
    /// `bytes` written so far; returns the bytes written in it.
    fn tick(&mut self, now: Instant, bytes: u64) -> u64 {
        let dt = now.duration_since(self.last_at).as_secs_f64().max(1e-9);
        let delta = bytes.saturating_sub(self.last_bytes);
        self.samples.push(delta as f64 / 1e6 / dt);
        (self.last_at, self.last_bytes) = (now, bytes);
        while self.next_tick <= now {
            self.next_tick += Self::TICK;
        }
        delta
    }
}

/// (user, system) CPU seconds of the whole process so far (getrusage(2),
/// RUSAGE_SELF sums all threads).
pub(crate) fn cpu_times() -> (f64, f64) {
    // SAFETY: rusage is plain old data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_second_series_has_whole_seconds_only() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        let mut p = PerSecond::new(t0);
        assert_eq!(p.next_tick(), s(1.0));
        assert_eq!(p.tick(s(1.0), 300_000_000), 300_000_000);
        // 10 ms late: still a rate over the time since the last tick.
        assert_eq!(p.tick(s(2.01), 501_000_000), 201_000_000);
        assert_eq!(p.next_tick(), s(3.0));
        assert!((p.samples[0] - 300.0).abs() < 1e-9);
        assert!((p.samples[1] - 201.0 / 1.01).abs() < 1e-9);
        // 1.5 s late: one sample over the 2.49 s since the last tick, the
        // missed tick skipped (no zero-length interval follows).
        p.tick(s(4.5), 1_001_000_000);
        assert_eq!(p.next_tick(), s(5.0));
        assert_eq!(p.samples.len(), 3);
        assert!((p.samples[2] - 500.0 / 2.49).abs() < 1e-9);
    }

    #[test]
    fn reclaim_counters_parse_and_difference() {
        let a = Reclaim::parse(
            "nr_dirty 5\npgscan_kswapd 100\npgsteal_kswapd 90\npgscan_direct 7\n\
             pgsteal_direct 6\nallocstall_dma 1\nallocstall_normal 2\npgscan_khugepaged 9\n",
        );
        assert_eq!(
            a,
            Reclaim {
                pgscan_kswapd: 100,
                pgsteal_kswapd: 90,
                pgscan_direct: 7,
                pgsteal_direct: 6,
                allocstall: 3
            }
        );
        let b = Reclaim {
            pgscan_kswapd: 150,
            ..a
        };
        assert_eq!(a.delta(&b).pgscan_kswapd, 50);
        assert_eq!(b.delta(&a).pgscan_kswapd, 0, "never negative");
        assert!(Reclaim::sample().is_some());
    }

    #[test]
    fn footprint_counts_the_files_cached_pages() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        // Just written: all 1 MiB is in the page cache (dirty).
        let kib = footprint_kib(std::slice::from_ref(&path)).unwrap();
        assert_eq!(kib, 1024);
        // A missing file holds nothing; the sum is over files.
        let none = dir.path().join("missing");
        assert_eq!(footprint_kib(&[path.clone(), none]), Some(1024));
        assert_eq!(footprint_kib(&[]), Some(0));
    }
}
