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
//! Layout, from the bottom up (each module uses only modules listed before
//! it): [`size`] (size strings), [`spec`] (the plain settings), [`pattern`]
//! (verifiable data), [`buf`] (aligned chunk buffers), [`meminfo`],
//! [`plan`] (the files a run creates), [`limits`] (every bound on the
//! settings, and the memory a run needs), [`config`] (validated settings,
//! no I/O), [`tunables`] (knobs re-read every chunk), [`verify`],
//! [`error`], [`event`] (observer stream), [`monitor`] (ticks, page-cache
//! footprint of the files, reclaim), [`stats`], [`report`], [`sink`] (file
//! operations behind a trait), [`schedule`] (the synchronous strategies'
//! call order), [`small_files`], [`uring`], [`device`] (O_DIRECT
//! alignment), preflight (checks of the targets before anything is
//! written) and [`engine`] (threads, cleanup).
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
pub mod plan;
mod preflight;
pub mod report;
pub mod schedule;
pub mod sink;
pub mod size;
pub mod small_files;
pub mod spec;
pub mod stats;
pub mod tunables;
pub mod uring;
pub mod verify;

pub use config::{ConfigError, WriterConfig};
pub use engine::Writer;
pub use error::WriterError;
pub use event::{Event, FileRef, NullObserver, Observer, SyncKind};
pub use report::{Report, RunFailure, RunOutcome, RunStatus, VerifyReport};
pub use size::{ByteSize, SizeError, format_size, parse_size};
pub use spec::{FileSync, SmallFiles, Strategy, WriterSpec};
pub use tunables::LiveTunables;
pub use verify::{VerifyError, verify_file};
