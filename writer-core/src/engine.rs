//! Runs a validated configuration: preflight, one thread per job, a monitor
//! thread (per-second ticks, /proc/meminfo samples), verify, cleanup, report.
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use crate::buf::{ChunkBuf, MEM_ALIGN};
use crate::config::WriterConfig;
use crate::error::WriterError;
use crate::event::{FileRef, NullObserver, Observer, SyncKind};
use crate::limits::{self, MemoryNeed};
use crate::monitor::{Reclaim, cpu_times, monitor};
use crate::pattern::Pattern;
use crate::plan::{self, PlannedFile, file_id};
use crate::preflight::preflight;
use crate::report::{Report, RunFailure, RunStatus, VerifyReport};
use crate::schedule::{FileCtx, JobStats, RateLimiter, write_file};
use crate::sink::FileSink;
use crate::small_files::{SmallFileOps, write_small_files};
use crate::spec::Strategy;
use crate::stats::SeriesStats;
use crate::tunables::LiveTunables;
use crate::uring::{UringFile, write_file_uring};
use crate::verify::verify_file;

/// The monitor thread's name.
const MONITOR_THREAD: &str = "wbscope-monitor";
/// Job threads are named this and their number.
const JOB_THREAD_PREFIX: &str = "wbscope-job-";

/// Whether a thread of this process is one of the engine's (by its name,
/// the `comm` of /proc/self/task/TID/stat): a host process that runs the
/// engine beside other work (the dashboard beside its tracer) counts their
/// CPU time apart.
pub fn is_engine_thread(name: &str) -> bool {
    name == MONITOR_THREAD
        || name
            .strip_prefix(JOB_THREAD_PREFIX)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A writer for one configuration. `run` may be called more than once.
pub struct Writer {
    cfg: WriterConfig,
    tunables: Arc<LiveTunables>,
    observer: Arc<dyn Observer>,
}

impl Writer {
    pub fn new(cfg: WriterConfig) -> Self {
        let s = cfg.spec();
        let tunables = Arc::new(LiveTunables::new(s.chunk, s.window, s.rate));
        Writer {
            cfg,
            tunables,
            observer: Arc::new(NullObserver),
        }
    }

    /// Sends the run's events to `observer` (e.g. an mpsc `Sender<Event>`).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// The live tunables: change chunk size, window or rate, or stop, while
    /// `run` is running on another thread.
    pub fn tunables(&self) -> Arc<LiveTunables> {
        Arc::clone(&self.tunables)
    }

    pub fn config(&self) -> &WriterConfig {
        &self.cfg
    }

    /// The files a run creates, per job.
    pub fn plan(&self) -> Vec<Vec<PlannedFile>> {
        plan::plan_files(self.cfg.spec())
    }

    /// Refuses ([`WriterError::Refused`]) a run whose buffers, plan and
    /// threads do not fit in half of `MemAvailable` or under `RLIMIT_AS`
    /// (see [`crate::limits`]). [`Writer::run`] checks this first; call it
    /// before [`Writer::plan`] too, which allocates the plan.
    pub fn check_memory(&self) -> Result<(), WriterError> {
        limits::check_memory(&MemoryNeed::of(self.cfg.spec()), limits::memory_room())
            .map_err(WriterError::Refused)
    }

    /// Runs the configuration to the end, an error, or a stop request.
    ///
    /// `Err` carries the partial report once anything was written. Files
    /// created are removed at the end (also on error) unless `keep`.
    pub fn run(&self) -> Result<Report, RunFailure> {
        let spec = self.cfg.spec();
        self.tunables.reset_abort();
        // Before the plan, the buffers or any file: a run that cannot fit
        // must not get as far as the OOM killer.
        self.check_memory()?;
        let plan = self.plan();
        let pre = preflight(&self.cfg, &plan)?;
        self.tunables.set_align(pre.align.unwrap_or(1));

        let progress = AtomicU64::new(0);
        let created = Mutex::new(Vec::new());
        let cpu0 = cpu_times();
        let reclaim0 = Reclaim::sample();
        let start = Instant::now();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let shared = Shared {
            cfg: &self.cfg,
            tunables: &self.tunables,
            observer: &*self.observer,
            progress: &progress,
            created: &created,
            mem_align: pre.align.unwrap_or(1).max(MEM_ALIGN as u64) as usize,
        };
        let (results, monitor, elapsed) = thread::scope(|s| {
            // A thread that cannot be created (RLIMIT_NPROC, RLIMIT_AS,
            // threads-max) fails the run like any other error: the jobs
            // already started are stopped and joined, their files removed.
            let mut spawn_error = None;
            let monitor = thread::Builder::new()
                .name(MONITOR_THREAD.into())
                .spawn_scoped(s, || {
                    // Large files only: a small-files run has thousands.
                    let files = spec.small_files.is_none().then_some(&created);
                    monitor(start, &progress, &*self.observer, files, stop_rx)
                })
                .map_err(|error| {
                    spawn_error = Some(WriterError::Io {
                        context: "starting the monitor thread".into(),
                        error,
                    });
                })
                .ok();
            let mut jobs = Vec::with_capacity(plan.len());
            for (job, files) in plan.iter().enumerate() {
                if spawn_error.is_some() {
                    break;
                }
                let shared = &shared;
                let spawned = thread::Builder::new()
                    .name(format!("{JOB_THREAD_PREFIX}{job}"))
                    .stack_size(limits::JOB_STACK)
                    .spawn_scoped(s, move || run_job(job as u32, files, shared));
                match spawned {
                    Ok(h) => jobs.push(h),
                    Err(error) => {
                        self.tunables.abort();
                        spawn_error = Some(WriterError::Io {
                            context: format!("starting the thread of job {job}"),
                            error,
                        });
                    }
                }
            }
            let mut results: Vec<JobResult> = jobs
                .into_iter()
                .enumerate()
                .map(|(job, h)| {
                    h.join().unwrap_or_else(|_| {
                        self.tunables.abort();
                        JobResult {
                            error: Some(WriterError::Panicked(job as u32)),
                            ..JobResult::default()
                        }
                    })
                })
                .collect();
            if let Some(error) = spawn_error {
                results.insert(
                    0,
                    JobResult {
                        error: Some(error),
                        ..JobResult::default()
                    },
                );
            }
            let elapsed = start.elapsed();
            let _ = stop_tx.send(());
            let monitor = monitor
                .map(|m| m.join().unwrap_or_default())
                .unwrap_or_default();
            (results, monitor, elapsed)
        });
        let cpu1 = cpu_times();
        let reclaim = reclaim0.zip(Reclaim::sample()).map(|(a, b)| a.delta(&b));

        let mut stats = JobStats::default();
        let (mut bytes, mut durable, mut files_written) = (0u64, 0u64, 0u64);
        let mut error = None;
        let mut done_files = Vec::new();
        for r in results {
            stats.merge(&r.stats);
            bytes += r.written;
            durable += r.durable;
            files_written += r.files_done;
            done_files.extend(r.completed);
            if error.is_none() {
                error = r.error;
            }
        }
        let stopped = self.tunables.user_stop();

        let mut verify = None;
        if spec.verify && error.is_none() && !stopped {
            let mut v = VerifyReport {
                ok: true,
                files: 0,
                bytes: 0,
                error: None,
            };
            for f in &done_files {
                match verify_file(
                    &f.path,
                    &Pattern::new(spec.seed, f.file_id),
                    f.size,
                    spec.noatime,
                ) {
                    Ok(n) => {
                        v.files += 1;
                        v.bytes += n;
                    }
                    Err(e) => {
                        v.ok = false;
                        v.error = Some(e.to_string());
                        error = Some(WriterError::Verify(e));
                        break;
                    }
                }
            }
            verify = Some(v);
        }

        let created = created.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut cleanup_errors = Vec::new();
        let kept_files = if spec.keep {
            created
        } else {
            for path in &created {
                match fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => cleanup_errors.push(format!("remove {}: {e}", path.display())),
                }
            }
            Vec::new()
        };

        let secs = elapsed.as_secs_f64().max(1e-9);
        let per_second = SeriesStats::of(&monitor.per_second_mb_s);
        let sync_latency_us: BTreeMap<&'static str, _> = SyncKind::ALL
            .iter()
            .filter_map(|&k| stats.sync[k as usize].summary().map(|s| (k.name(), s)))
            .collect();
        let status = if error.is_some() {
            RunStatus::Failed
        } else if stopped {
            RunStatus::Interrupted
        } else {
            RunStatus::Completed
        };
        let small = spec.small_files.as_ref();
        let report = Report {
            status,
            error: error.as_ref().map(|e| e.to_string()),
            mode: if small.is_some() {
                "small-files"
            } else {
                "large-files"
            },
            strategy: match small {
                Some(_) => "small-files".into(),
                None => spec.strategy.name().into(),
            },
            file_sync: small.map(|s| s.file_sync),
            dirs: spec.dirs.clone(),
            jobs: spec.jobs,
            files_planned: plan.iter().map(|p| p.len() as u64).sum(),
            files_written,
            file_bytes: small.is_none().then_some(spec.size),
            chunk_bytes: spec.chunk,
            window: spec.window,
            qd: spec.qd,
            fallocate: spec.fallocate,
            noatime: spec.noatime,
            datasync: spec.datasync,
            o_direct: self.cfg.uses_o_direct(),
            direct_align: pre.align,
            rate_bytes_s: spec.rate,
            drop_behind: spec.drop_behind,
            rwf_dontcache: self.cfg.uses_dontcache(),
            bytes,
            bytes_durable: durable,
            elapsed_s: secs,
            write_mb_s: bytes as f64 / 1e6 / secs,
            durable_mb_s: (durable > 0).then(|| durable as f64 / 1e6 / secs),
            per_second_mb_s: monitor.per_second_mb_s,
            cv: per_second.and_then(|p| p.cv),
            per_second,
            write_latency_us: stats.write.summary(),
            sync_latency_us,
            user_cpu_s: cpu1.0 - cpu0.0,
            sys_cpu_s: cpu1.1 - cpu0.1,
            sys_cpu_s_per_gib: (bytes > 0)
                .then(|| (cpu1.1 - cpu0.1) / (bytes as f64 / (1u64 << 30) as f64)),
            peak_dirty_kib: monitor.peak.map(|p| p.dirty_kib),
            peak_writeback_kib: monitor.peak.map(|p| p.writeback_kib),
            cache_peak_kib: monitor.cache_peak_kib,
            cache_end_kib: monitor.cache_end_kib,
            reclaim,
            files_per_s: small.map(|_| files_written as f64 / secs),
            verify,
            kept_files,
            cleanup_errors,
        };
        match error {
            // A refusal (RWF_DONTCACHE unsupported) before a byte was written
            // is one line, like a preflight refusal.
            Some(error @ WriterError::Refused(_)) if bytes == 0 => Err(error.into()),
            Some(error) => Err(RunFailure {
                error,
                partial: Some(Box::new(report)),
            }),
            None => Ok(report),
        }
    }
}

/// Everything the job threads share.
struct Shared<'a> {
    cfg: &'a WriterConfig,
    tunables: &'a LiveTunables,
    observer: &'a dyn Observer,
    progress: &'a AtomicU64,
    created: &'a Mutex<Vec<PathBuf>>,
    mem_align: usize,
}

impl Shared<'_> {
    /// Creates a new file (O_CREAT|O_EXCL: an existing file is an error,
    /// never truncated) and records it for cleanup.
    fn create(&self, path: &Path, o_direct: bool, size: u64) -> Result<File, WriterError> {
        let spec = self.cfg.spec();
        let mut flags = libc::O_CLOEXEC | libc::O_NOFOLLOW;
        if o_direct {
            flags |= libc::O_DIRECT;
        }
        if spec.noatime {
            flags |= libc::O_NOATIME;
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(flags)
            .open(path)
            .map_err(|error| {
                let hint = match error.raw_os_error() {
                    Some(libc::EEXIST) => " (refusing to overwrite an existing file)",
                    Some(libc::EINVAL) if o_direct => " (does this filesystem support O_DIRECT?)",
                    _ => "",
                };
                WriterError::Io {
                    context: format!("create {}{hint}", path.display()),
                    error,
                }
            })?;
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(path.to_path_buf());
        if spec.fallocate && size > 0 {
            let len = libc::off_t::try_from(size).map_err(|_| WriterError::Io {
                context: format!("fallocate {}", path.display()),
                error: io::Error::from_raw_os_error(libc::EFBIG),
            })?;
            // SAFETY: plain syscall on a descriptor we own.
            if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } != 0 {
                return Err(WriterError::Io {
                    context: format!("fallocate {} bytes for {}", size, path.display()),
                    error: io::Error::last_os_error(),
                });
            }
        }
        Ok(file)
    }
}

#[derive(Debug, Default)]
struct JobResult {
    stats: JobStats,
    written: u64,
    durable: u64,
    files_done: u64,
    completed: Vec<PlannedFile>,
    error: Option<WriterError>,
}

fn run_job(job: u32, files: &[PlannedFile], sh: &Shared<'_>) -> JobResult {
    let r = if sh.cfg.spec().small_files.is_some() {
        run_small_job(job, files, sh)
    } else {
        run_large_job(job, files, sh)
    };
    if r.error.is_some() {
        sh.tunables.abort();
    }
    r
}

fn run_large_job(job: u32, files: &[PlannedFile], sh: &Shared<'_>) -> JobResult {
    let spec = sh.cfg.spec();
    let mut r = JobResult::default();
    let mut rate = RateLimiter::new(spec.jobs);
    let chunk = sh.tunables.chunk() as usize;
    let uring = spec.strategy.is_uring();
    // io_uring writes from its own buffers, one per write in flight; the
    // synchronous strategies from one. limits::MemoryNeed counts the same.
    let bufs = (
        ChunkBuf::new(if uring { 0 } else { chunk }, sh.mem_align),
        (0..if uring { spec.qd } else { 0 })
            .map(|_| ChunkBuf::new(chunk, sh.mem_align))
            .collect::<io::Result<Vec<ChunkBuf>>>(),
    );
    let (mut buf, mut uring_bufs) = match bufs {
        (Ok(b), Ok(u)) => (b, u),
        (Err(error), _) | (_, Err(error)) => {
            r.error = Some(WriterError::Io {
                context: format!("job {job}: its chunk buffers"),
                error,
            });
            return r;
        }
    };
    let o_direct = sh.cfg.uses_o_direct();
    for pf in files {
        if sh.tunables.stop_requested() {
            break;
        }
        let file = match sh.create(&pf.path, o_direct, pf.size) {
            Ok(f) => f,
            Err(e) => {
                r.error = Some(e);
                break;
            }
        };
        let pattern = Pattern::new(spec.seed, pf.file_id);
        let mut ctx = FileCtx {
            at: FileRef {
                job,
                file: pf.index,
            },
            strategy: spec.strategy,
            datasync: spec.datasync,
            drop_behind: spec.drop_behind,
            dontcache: sh.cfg.uses_dontcache(),
            tunables: sh.tunables,
            observer: sh.observer,
            progress: sh.progress,
            stats: &mut r.stats,
            rate: &mut rate,
            buf: &mut buf,
            pattern: &pattern,
        };
        let res = if uring {
            match UringFile::new(file, spec.qd) {
                Ok(mut ring) => write_file_uring(&mut ring, pf.size, &mut uring_bufs, &mut ctx),
                Err(e) => {
                    r.error = Some(WriterError::Io {
                        context: "io_uring_setup".into(),
                        error: e,
                    });
                    break;
                }
            }
        } else {
            write_file(&mut FileSink::new(file), pf.size, &mut ctx)
        };
        match res {
            Ok(o) => {
                r.written += o.written;
                if o.durable {
                    r.durable += o.written;
                }
                if o.stopped {
                    break;
                }
                r.files_done += 1;
                r.completed.push(pf.clone());
            }
            Err(e) => {
                r.written += e.outcome.written;
                r.error = Some(match uncached_refusal(sh.cfg, &pf.path, &e.error) {
                    Some(refused) => refused,
                    None => WriterError::Io {
                        context: format!("{}: {}", pf.path.display(), e.op),
                        error: e.error,
                    },
                });
                break;
            }
        }
    }
    r
}

/// EOPNOTSUPP from an RWF_DONTCACHE write is a refusal (exit 2, one line),
/// never a reason to write without it.
fn uncached_refusal(cfg: &WriterConfig, path: &Path, e: &io::Error) -> Option<WriterError> {
    let dir = path.parent().unwrap_or(path);
    (cfg.uses_dontcache() && e.raw_os_error() == Some(libc::EOPNOTSUPP))
        .then(|| WriterError::Refused(crate::preflight::dontcache_refusal(dir)))
}

/// Real files for small-files mode.
struct RealSmallFiles<'a, 'b> {
    sh: &'a Shared<'b>,
    by_index: HashMap<u64, &'a PlannedFile>,
}

impl RealSmallFiles<'_, '_> {
    fn get(&self, index: u64) -> io::Result<&PlannedFile> {
        self.by_index
            .get(&index)
            .copied()
            .ok_or_else(|| io::Error::other(format!("no planned file #{index}")))
    }
}

impl SmallFileOps for RealSmallFiles<'_, '_> {
    type File = FileSink;

    fn create(&mut self, index: u64) -> io::Result<FileSink> {
        let pf = self.get(index)?;
        match self.sh.create(&pf.path, false, pf.size) {
            Ok(f) => Ok(FileSink::new(f)),
            Err(WriterError::Io { context, error }) => {
                Err(io::Error::new(error.kind(), format!("{context}: {error}")))
            }
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }

    fn reopen(&mut self, index: u64) -> io::Result<FileSink> {
        let pf = self.get(index)?;
        let mut flags = libc::O_CLOEXEC | libc::O_NOFOLLOW;
        if self.sh.cfg.spec().noatime {
            flags |= libc::O_NOATIME;
        }
        OpenOptions::new()
            .write(true)
            .custom_flags(flags)
            .open(&pf.path)
            .map(FileSink::new)
    }

    fn close(&mut self, _index: u64, file: FileSink) -> io::Result<()> {
        let fd = file.into_file().into_raw_fd();
        // SAFETY: we own fd (into_raw_fd) and close it exactly once. close(2)
        // can report a deferred write error (NFS, some FUSE): check it.
        if unsafe { libc::close(fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn run_small_job(job: u32, files: &[PlannedFile], sh: &Shared<'_>) -> JobResult {
    let spec = sh.cfg.spec();
    let mut r = JobResult::default();
    let Some(sf) = &spec.small_files else {
        return r;
    };
    let mut rate = RateLimiter::new(spec.jobs);
    let mut buf = match ChunkBuf::new(sh.tunables.chunk().min(sf.max_size) as usize, sh.mem_align) {
        Ok(b) => b,
        Err(error) => {
            r.error = Some(WriterError::Io {
                context: format!("job {job}: its chunk buffer"),
                error,
            });
            return r;
        }
    };
    let placeholder = Pattern::new(spec.seed, 0);
    let mut ops = RealSmallFiles {
        sh,
        by_index: files.iter().map(|f| (f.index, f)).collect(),
    };
    let list: Vec<(u64, u64)> = files.iter().map(|f| (f.index, f.size)).collect();
    let mut ctx = FileCtx {
        at: FileRef { job, file: 0 },
        strategy: Strategy::Buffered,
        datasync: spec.datasync,
        drop_behind: false,
        dontcache: false,
        tunables: sh.tunables,
        observer: sh.observer,
        progress: sh.progress,
        stats: &mut r.stats,
        rate: &mut rate,
        buf: &mut buf,
        pattern: &placeholder,
    };
    let res = write_small_files(
        &mut ops,
        &list,
        sf.file_sync,
        &|i| Pattern::new(spec.seed, file_id(job, i)),
        &mut ctx,
    );
    match res {
        Ok(o) => {
            r.written = o.bytes;
            r.files_done = o.files;
            if o.durable {
                r.durable = o.bytes;
            }
            r.completed = files.iter().take(o.files as usize).cloned().collect();
        }
        Err(e) => {
            r.written = e.outcome.written;
            r.error = Some(WriterError::Io {
                context: e.op,
                error: e.error,
            });
        }
    }
    r
}

#[cfg(test)]
mod thread_name_tests {
    use super::is_engine_thread;

    #[test]
    fn the_engine_threads_are_told_by_name() {
        assert!(is_engine_thread("wbscope-monitor"));
        assert!(is_engine_thread("wbscope-job-0"));
        assert!(is_engine_thread("wbscope-job-127"));
        assert!(!is_engine_thread("wbscope-job-"));
        assert!(!is_engine_thread("wbscope-job-x"));
        assert!(!is_engine_thread("wbscope-search"));
        assert!(!is_engine_thread("tokio-runtime-w"));
    }
}
