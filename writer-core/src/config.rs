//! The writer's validated configuration: [`WriterConfig`] only exists once
//! a plain [`WriterSpec`] has been checked against the bounds of
//! [`crate::limits`], and [`ConfigError`] names the option at fault when it
//! is not.
//!
//! Validation does no I/O. What depends on the target (does the directory
//! exist, is it writable, is there room, what is the device's logical block
//! size) is checked by the engine's preflight, before the first byte is
//! written.
use std::str::FromStr;

use crate::limits::{MAX_CHUNK, MAX_JOBS, MAX_QD, MAX_URING_BUFFERS, MAX_WINDOW, MIN_CHUNK};
use crate::size::ByteSize;
use crate::spec::{FileSync, Strategy, WriterSpec};

/// O_DIRECT needs at least 512-byte alignment on every Linux block device;
/// the real requirement (the device's logical block size) is checked at run
/// time.
pub const MIN_DIRECT_ALIGN: u64 = 512;

/// A configuration that was refused, naming the option at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("no target directory (--dir)")]
    NoDir,
    #[error("--size must be greater than 0")]
    ZeroSize,
    #[error("--chunk must be greater than 0")]
    ZeroChunk,
    #[error("--chunk {chunk} is larger than --size {size}")]
    ChunkLargerThanSize { chunk: ByteSize, size: ByteSize },
    #[error("--chunk {0} is larger than the {max} maximum", max = ByteSize(MAX_CHUNK))]
    ChunkTooLarge(ByteSize),
    #[error("--chunk {0} is smaller than the {min} minimum (one page)", min = ByteSize(MIN_CHUNK))]
    ChunkTooSmall(ByteSize),
    #[error("--{0} must be at least 1")]
    ZeroCount(&'static str),
    #[error("--jobs {0} is more than the maximum of {MAX_JOBS}")]
    TooManyJobs(u32),
    #[error("--window must be at least 1 (0 would wait on a chunk before starting its write-out)")]
    ZeroWindow,
    #[error("--window {0} is more than the maximum of {MAX_WINDOW} chunks")]
    WindowTooLarge(u32),
    #[error("--qd must be between 1 and {MAX_QD}, got {0}")]
    BadQd(u32),
    #[error(
        "--qd {qd} x --chunk {chunk} would pin more than {max} of buffers",
        max = ByteSize(MAX_URING_BUFFERS)
    )]
    UringBuffers { qd: u32, chunk: ByteSize },
    #[error("--rate must be greater than 0")]
    ZeroRate,
    #[error("--{what} {value} is not a multiple of {align} bytes, which O_DIRECT requires")]
    Unaligned {
        what: &'static str,
        value: ByteSize,
        align: u64,
    },
    #[error(
        "unknown strategy {0:?} (expected one of: buffered, fsync-end, fdatasync-chunk, srf-pipelined, direct, uring, uncached, uring-buffered)"
    )]
    UnknownStrategy(String),
    #[error(
        "unknown file sync policy {0:?} (expected one of: none, fsync-each, srf-then-fsync, two-pass)"
    )]
    UnknownFileSync(String),
    #[error("small files: size range {min}..{max} is empty or starts at 0")]
    BadSmallRange { min: ByteSize, max: ByteSize },
    #[error("--small-files takes --file-sync, not a large-file --strategy ({0})")]
    SmallFilesStrategy(Strategy),
    #[error(
        "--drop-behind needs --strategy srf-pipelined or fdatasync-chunk (the strategies that know when a chunk is on disk), not {0}"
    )]
    DropBehindStrategy(&'static str),
    #[error(
        "--uncached needs --strategy uring-buffered (--strategy uncached is uncached already), not {0}"
    )]
    UncachedStrategy(&'static str),
    #[error("--strategy {0} writes through the page cache; --direct-io is refused with it")]
    DirectIoStrategy(&'static str),
    #[error("the run is too large: jobs x files x size overflows 64 bits")]
    TooLarge,
}

// Parsing lives here, not beside the plain types in `spec`: it fails with a
// ConfigError, whose messages name the bounds in `limits`, and `limits`
// reads `spec`.
impl FromStr for Strategy {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| ConfigError::UnknownStrategy(s.to_string()))
    }
}

impl FromStr for FileSync {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FileSync::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| ConfigError::UnknownFileSync(s.to_string()))
    }
}

/// The chunk bounds ([`MIN_CHUNK`]..=[`MAX_CHUNK`]), for the config and for
/// a live change.
pub(crate) fn check_chunk(chunk: u64) -> Result<(), ConfigError> {
    match chunk {
        0 => Err(ConfigError::ZeroChunk),
        c if c < MIN_CHUNK => Err(ConfigError::ChunkTooSmall(ByteSize(c))),
        c if c > MAX_CHUNK => Err(ConfigError::ChunkTooLarge(ByteSize(c))),
        _ => Ok(()),
    }
}

/// The window bounds (1..=[`MAX_WINDOW`]), for the config and a live change.
pub(crate) fn check_window(window: u32) -> Result<(), ConfigError> {
    match window {
        0 => Err(ConfigError::ZeroWindow),
        w if w > MAX_WINDOW => Err(ConfigError::WindowTooLarge(w)),
        _ => Ok(()),
    }
}

/// A validated configuration: every field is in range and consistent.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterConfig {
    spec: WriterSpec,
}

impl WriterConfig {
    /// Validates `spec` (no I/O).
    pub fn new(spec: WriterSpec) -> Result<Self, ConfigError> {
        if spec.dirs.is_empty() {
            return Err(ConfigError::NoDir);
        }
        if spec.jobs == 0 {
            return Err(ConfigError::ZeroCount("jobs"));
        }
        if spec.jobs > MAX_JOBS {
            return Err(ConfigError::TooManyJobs(spec.jobs));
        }
        check_chunk(spec.chunk)?;
        if spec.rate == Some(0) {
            return Err(ConfigError::ZeroRate);
        }
        if spec.drop_behind {
            if spec.small_files.is_some() {
                return Err(ConfigError::DropBehindStrategy("--small-files"));
            }
            if !matches!(
                spec.strategy,
                Strategy::SrfPipelined | Strategy::FdatasyncChunk
            ) {
                return Err(ConfigError::DropBehindStrategy(spec.strategy.name()));
            }
        }
        if spec.uncached && (spec.small_files.is_some() || spec.strategy != Strategy::UringBuffered)
        {
            return Err(ConfigError::UncachedStrategy(match spec.small_files {
                Some(_) => "--small-files",
                None => spec.strategy.name(),
            }));
        }
        if spec.direct_io && matches!(spec.strategy, Strategy::Uncached | Strategy::UringBuffered) {
            return Err(ConfigError::DirectIoStrategy(spec.strategy.name()));
        }
        if let Some(sf) = &spec.small_files {
            if sf.count == 0 {
                return Err(ConfigError::ZeroCount("small-files"));
            }
            if sf.min_size == 0 || sf.min_size > sf.max_size {
                return Err(ConfigError::BadSmallRange {
                    min: ByteSize(sf.min_size),
                    max: ByteSize(sf.max_size),
                });
            }
            if spec.strategy != Strategy::Buffered {
                return Err(ConfigError::SmallFilesStrategy(spec.strategy));
            }
            return Ok(WriterConfig { spec });
        }
        if spec.size == 0 {
            return Err(ConfigError::ZeroSize);
        }
        if spec.chunk > spec.size {
            return Err(ConfigError::ChunkLargerThanSize {
                chunk: ByteSize(spec.chunk),
                size: ByteSize(spec.size),
            });
        }
        if spec.files == 0 {
            return Err(ConfigError::ZeroCount("files"));
        }
        check_window(spec.window)?;
        if spec.qd == 0 || spec.qd > MAX_QD {
            return Err(ConfigError::BadQd(spec.qd));
        }
        if spec.strategy.is_uring()
            && u64::from(spec.qd).saturating_mul(spec.chunk) > MAX_URING_BUFFERS
        {
            return Err(ConfigError::UringBuffers {
                qd: spec.qd,
                chunk: ByteSize(spec.chunk),
            });
        }
        let cfg = WriterConfig { spec };
        if cfg.uses_o_direct() {
            for (what, value) in [("chunk", cfg.spec.chunk), ("size", cfg.spec.size)] {
                if value % MIN_DIRECT_ALIGN != 0 {
                    return Err(ConfigError::Unaligned {
                        what,
                        value: ByteSize(value),
                        align: MIN_DIRECT_ALIGN,
                    });
                }
            }
        }
        u64::from(cfg.spec.jobs)
            .checked_mul(u64::from(cfg.spec.files))
            .and_then(|n| n.checked_mul(cfg.spec.size))
            .ok_or(ConfigError::TooLarge)?;
        Ok(cfg)
    }

    pub fn spec(&self) -> &WriterSpec {
        &self.spec
    }

    /// Whether files are opened with O_DIRECT.
    pub fn uses_o_direct(&self) -> bool {
        self.spec.small_files.is_none()
            && (self.spec.strategy == Strategy::Direct
                || (self.spec.direct_io && self.spec.strategy == Strategy::Uring))
    }

    /// Whether writes carry RWF_DONTCACHE (include/uapi/linux/fs.h):
    /// `uncached`, and `uring-buffered --uncached`.
    pub fn uses_dontcache(&self) -> bool {
        self.spec.small_files.is_none()
            && (self.spec.strategy == Strategy::Uncached
                || (self.spec.uncached && self.spec.strategy == Strategy::UringBuffered))
    }

    /// Directory job `job` writes into (round-robin over the targets).
    pub fn dir_for_job(&self, job: u32) -> &std::path::Path {
        self.spec.dir_for_job(job)
    }

    /// Bytes of a large-file run (jobs × files × size).
    pub fn large_total_bytes(&self) -> u64 {
        u64::from(self.spec.jobs) * u64::from(self.spec.files) * self.spec.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SmallFiles;

    fn spec() -> WriterSpec {
        WriterSpec {
            dirs: vec!["/nonexistent-is-fine-no-io".into()],
            size: 64 << 20,
            chunk: 8 << 20,
            ..WriterSpec::default()
        }
    }

    fn err(f: impl FnOnce(&mut WriterSpec)) -> ConfigError {
        let mut s = spec();
        f(&mut s);
        WriterConfig::new(s).unwrap_err()
    }

    #[test]
    fn defaults_with_size_are_valid_and_need_no_io() {
        let cfg = WriterConfig::new(spec()).unwrap();
        assert_eq!(cfg.spec().window, 4);
        assert_eq!(cfg.spec().qd, 32);
        assert_eq!(cfg.large_total_bytes(), 64 << 20);
    }

    #[test]
    fn refuses_bad_values_naming_the_option() {
        assert_eq!(err(|s| s.dirs.clear()), ConfigError::NoDir);
        assert_eq!(err(|s| s.size = 0), ConfigError::ZeroSize);
        assert_eq!(err(|s| s.chunk = 0), ConfigError::ZeroChunk);
        assert_eq!(
            err(|s| s.chunk = 128 << 20),
            ConfigError::ChunkLargerThanSize {
                chunk: ByteSize(128 << 20),
                size: ByteSize(64 << 20)
            }
        );
        assert_eq!(err(|s| s.window = 0), ConfigError::ZeroWindow);
        assert_eq!(err(|s| s.jobs = 0), ConfigError::ZeroCount("jobs"));
        assert_eq!(err(|s| s.files = 0), ConfigError::ZeroCount("files"));
        assert_eq!(err(|s| s.qd = 0), ConfigError::BadQd(0));
        assert_eq!(err(|s| s.rate = Some(0)), ConfigError::ZeroRate);
        assert_eq!(
            err(|s| {
                s.size = 4 << 30;
                s.chunk = 2 << 30;
            }),
            ConfigError::ChunkTooLarge(ByteSize(2 << 30))
        );
        assert!(matches!(
            err(|s| {
                s.strategy = Strategy::Uring;
                s.qd = 1024;
            }),
            ConfigError::UringBuffers { qd: 1024, .. }
        ));
        assert_eq!(
            err(|s| {
                s.jobs = crate::limits::MAX_JOBS;
                s.files = u32::MAX;
                s.size = u64::MAX / 2;
            }),
            ConfigError::TooLarge
        );
        let msg = err(|s| s.chunk = 128 << 20).to_string();
        assert_eq!(msg, "--chunk 128MiB is larger than --size 64MiB");
    }

    #[test]
    fn the_limits_module_bounds_chunk_window_and_jobs() {
        use crate::limits::{MAX_CHUNK, MAX_JOBS, MAX_WINDOW, MIN_CHUNK};
        let ok = |f: fn(&mut WriterSpec)| {
            let mut s = spec();
            s.size = 1 << 30;
            f(&mut s);
            WriterConfig::new(s)
        };
        assert!(ok(|s| s.chunk = MIN_CHUNK).is_ok());
        assert!(ok(|s| s.chunk = MAX_CHUNK).is_ok());
        assert!(ok(|s| s.jobs = MAX_JOBS).is_ok());
        assert!(ok(|s| s.window = MAX_WINDOW).is_ok());
        assert_eq!(
            ok(|s| s.chunk = MIN_CHUNK - 1),
            Err(ConfigError::ChunkTooSmall(ByteSize(MIN_CHUNK - 1)))
        );
        assert_eq!(
            ok(|s| s.chunk = MAX_CHUNK + 1),
            Err(ConfigError::ChunkTooLarge(ByteSize(MAX_CHUNK + 1)))
        );
        assert_eq!(
            ok(|s| s.jobs = MAX_JOBS + 1),
            Err(ConfigError::TooManyJobs(MAX_JOBS + 1))
        );
        assert_eq!(
            ok(|s| s.window = MAX_WINDOW + 1),
            Err(ConfigError::WindowTooLarge(MAX_WINDOW + 1))
        );
        // Small-files mode has the same chunk and jobs bounds.
        let mut s = spec();
        s.small_files = Some(SmallFiles::new(10, FileSync::None));
        s.chunk = 512;
        assert_eq!(
            WriterConfig::new(s),
            Err(ConfigError::ChunkTooSmall(ByteSize(512)))
        );
        assert_eq!(
            err(|s| s.chunk = 1 << 30).to_string(),
            "--chunk 1GiB is larger than the 256MiB maximum"
        );
        assert_eq!(
            err(|s| s.chunk = 100).to_string(),
            "--chunk 100 is smaller than the 4KiB minimum (one page)"
        );
        assert_eq!(
            err(|s| s.jobs = 1_000_000).to_string(),
            "--jobs 1000000 is more than the maximum of 64"
        );
    }

    #[test]
    fn drop_behind_only_with_strategies_that_know_a_chunk_is_on_disk() {
        for st in Strategy::ALL {
            let mut s = spec();
            s.strategy = st;
            s.drop_behind = true;
            let r = WriterConfig::new(s);
            match st {
                Strategy::SrfPipelined | Strategy::FdatasyncChunk => assert!(r.is_ok(), "{st}"),
                _ => assert_eq!(r, Err(ConfigError::DropBehindStrategy(st.name()))),
            }
        }
        let mut s = spec();
        s.small_files = Some(SmallFiles::new(10, FileSync::TwoPass));
        s.drop_behind = true;
        assert_eq!(
            WriterConfig::new(s),
            Err(ConfigError::DropBehindStrategy("--small-files"))
        );
        let msg = err(|s| s.drop_behind = true).to_string();
        assert!(msg.starts_with("--drop-behind needs --strategy srf-pipelined"));
        assert!(
            msg.ends_with("not buffered") && !msg.contains('\n'),
            "{msg}"
        );
    }

    #[test]
    fn uncached_only_where_it_means_something() {
        let ok = |f: fn(&mut WriterSpec)| {
            let mut s = spec();
            f(&mut s);
            WriterConfig::new(s).unwrap()
        };
        assert!(ok(|s| s.strategy = Strategy::Uncached).uses_dontcache());
        let uring = ok(|s| s.strategy = Strategy::UringBuffered);
        assert!(!uring.uses_dontcache() && !uring.uses_o_direct());
        assert!(
            ok(|s| {
                s.strategy = Strategy::UringBuffered;
                s.uncached = true;
            })
            .uses_dontcache()
        );
        for st in [Strategy::Buffered, Strategy::Uring, Strategy::Uncached] {
            assert_eq!(
                err(|s| {
                    s.strategy = st;
                    s.uncached = true;
                }),
                ConfigError::UncachedStrategy(st.name())
            );
        }
        for st in [Strategy::Uncached, Strategy::UringBuffered] {
            let e = err(|s| {
                s.strategy = st;
                s.direct_io = true;
            });
            assert_eq!(e, ConfigError::DirectIoStrategy(st.name()));
            assert!(!e.to_string().contains('\n'));
        }
        assert_eq!(
            err(|s| {
                s.strategy = Strategy::Uncached;
                s.drop_behind = true;
            }),
            ConfigError::DropBehindStrategy("uncached")
        );
        // uring-buffered pins one buffer per write in flight, like uring.
        assert!(matches!(
            err(|s| {
                s.strategy = Strategy::UringBuffered;
                s.qd = 1024;
                s.chunk = 64 << 20;
                s.size = 1 << 30;
            }),
            ConfigError::UringBuffers { .. }
        ));
    }

    #[test]
    fn direct_needs_sector_aligned_chunk_and_size() {
        assert_eq!(
            err(|s| {
                s.strategy = Strategy::Direct;
                s.chunk = 5000;
            }),
            ConfigError::Unaligned {
                what: "chunk",
                value: ByteSize(5000),
                align: 512
            }
        );
        assert_eq!(
            err(|s| {
                s.strategy = Strategy::Direct;
                s.size = (64 << 20) + 100;
            }),
            ConfigError::Unaligned {
                what: "size",
                value: ByteSize((64 << 20) + 100),
                align: 512
            }
        );
        // The same unaligned chunk is fine for buffered I/O.
        let mut s = spec();
        s.chunk = 5000;
        assert!(WriterConfig::new(s).is_ok());
        // uring only needs alignment when asked for O_DIRECT.
        let mut s = spec();
        s.strategy = Strategy::Uring;
        s.chunk = 5000;
        assert!(WriterConfig::new(s.clone()).is_ok());
        s.direct_io = true;
        assert!(WriterConfig::new(s).is_err());
    }

    #[test]
    fn names_parse_and_print_both_ways() {
        for st in Strategy::ALL {
            assert_eq!(st.name().parse::<Strategy>(), Ok(st));
            assert_eq!(serde_json::to_string(&st).unwrap(), format!("\"{st}\""));
        }
        for p in FileSync::ALL {
            assert_eq!(p.name().parse::<FileSync>(), Ok(p));
        }
        assert_eq!(
            "dd".parse::<Strategy>(),
            Err(ConfigError::UnknownStrategy("dd".into()))
        );
        assert!("sometimes".parse::<FileSync>().is_err());
    }

    #[test]
    fn small_files_mode_ignores_size_but_checks_its_own_range() {
        let mut s = spec();
        s.size = 0;
        s.small_files = Some(SmallFiles::new(100, FileSync::TwoPass));
        assert!(WriterConfig::new(s.clone()).is_ok());
        s.small_files = Some(SmallFiles::new(0, FileSync::TwoPass));
        assert_eq!(
            WriterConfig::new(s.clone()),
            Err(ConfigError::ZeroCount("small-files"))
        );
        let mut sf = SmallFiles::new(10, FileSync::None);
        sf.min_size = 8192;
        sf.max_size = 4096;
        s.small_files = Some(sf);
        assert!(matches!(
            WriterConfig::new(s.clone()),
            Err(ConfigError::BadSmallRange { .. })
        ));
        s.small_files = Some(SmallFiles::new(10, FileSync::None));
        s.strategy = Strategy::Uring;
        assert_eq!(
            WriterConfig::new(s),
            Err(ConfigError::SmallFilesStrategy(Strategy::Uring))
        );
    }

    #[test]
    fn jobs_are_spread_round_robin_over_dirs() {
        let mut s = spec();
        s.dirs = vec!["/a".into(), "/b".into()];
        s.jobs = 3;
        let cfg = WriterConfig::new(s).unwrap();
        assert_eq!(cfg.dir_for_job(0), std::path::Path::new("/a"));
        assert_eq!(cfg.dir_for_job(1), std::path::Path::new("/b"));
        assert_eq!(cfg.dir_for_job(2), std::path::Path::new("/a"));
    }
}
