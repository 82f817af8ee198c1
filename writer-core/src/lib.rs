//! writer-core: wbscope's tunable large-chunk file writer.
//!
//! Writes large files in large chunks and controls writeback itself, with
//! the strategies docs/writer.md describes: `buffered`,
//! `fsync-end`, `fdatasync-chunk`, `srf-pipelined` (Ts'o's
//! sync_file_range pattern), `direct` (O_DIRECT), `uring` (io_uring),
//! `uncached` (pwritev2 with RWF_DONTCACHE) and `uring-buffered` (io_uring
//! buffered writes, optionally RWF_DONTCACHE), plus a small-files mode with dpkg-like per-file sync policies.
//!
//! ```no_run
//! use writer_core::{Strategy, Writer, WriterConfig, WriterSpec, parse_size};
//! let cfg = WriterConfig::new(WriterSpec {
//!     dirs: vec!["/var/tmp".into()],
//!     size: parse_size("1G")?,
//!     chunk: parse_size("8M")?,
//!     strategy: Strategy::SrfPipelined,
//!     ..WriterSpec::default()
//! })?;
//! let writer = Writer::new(cfg);
//! let live = writer.tunables(); // hand to another thread: set_chunk, set_window, request_stop
//! let report = writer.run()?;
//! println!("{:.0} MB/s durable", report.durable_mb_s.unwrap_or(0.0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layout: [`config`] (validated settings, no I/O), [`limits`] (every
//! bound on the settings, and the memory a run needs), [`size`] (size
//! strings), [`tunables`] (knobs re-read every chunk), [`event`] (observer
//! stream), [`sink`] (file operations behind a trait), [`schedule`] (the
//! synchronous strategies' call order), [`uring`], [`small_files`],
//! [`pattern`] and [`verify`] (verifiable data), [`stats`], [`meminfo`],
//! [`monitor`] (ticks, page-cache footprint of the files, reclaim),
//! [`device`] (O_DIRECT alignment), [`engine`] (threads, preflight,
//! cleanup) and [`report`].
pub mod buf;
pub mod config;
pub mod device;
pub mod engine;
pub mod error;
pub mod event;
pub mod limits;
pub mod meminfo;
pub mod monitor;
pub mod pattern;
mod preflight;
pub mod report;
pub mod schedule;
pub mod sink;
pub mod size;
pub mod small_files;
pub mod stats;
pub mod tunables;
pub mod uring;
pub mod verify;

pub use config::{ConfigError, FileSync, SmallFiles, Strategy, WriterConfig, WriterSpec};
pub use engine::Writer;
pub use error::{RunFailure, WriterError};
pub use event::{Event, FileRef, NullObserver, Observer, SyncKind};
pub use report::{Report, RunOutcome, RunStatus, VerifyReport};
pub use size::{ByteSize, SizeError, format_size, parse_size};
pub use tunables::LiveTunables;
pub use verify::{VerifyError, verify_file};
