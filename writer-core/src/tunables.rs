//! Live tunables: the knobs a running writer re-reads before every chunk.
//!
//! The TUI (or any other thread) holds an `Arc<LiveTunables>` from
//! [`crate::Writer::tunables`] and may change the chunk size, the
//! srf-pipelined window and the rate limit while the writer runs, or ask it
//! to stop. Values are plain atomics read with `Relaxed` ordering: a change
//! takes effect at the next chunk boundary of each job, and nothing else is
//! published through them, so no stronger ordering is needed.
//!
//! What is *not* live: the strategy, the number of jobs/files and the uring
//! queue depth (they shape threads, files and rings set up at the start),
//! and `drop_behind`, which goes with the strategy (a run either keeps its
//! pages cached or not; a toggle would make its figures a mix of both).
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::config::{ConfigError, check_chunk, check_window};
use crate::size::ByteSize;

#[derive(Debug)]
pub struct LiveTunables {
    chunk: AtomicU64,
    window: AtomicU32,
    /// Bytes/s over all jobs; 0 = unlimited.
    rate: AtomicU64,
    /// Required chunk alignment (the device's logical block size with
    /// O_DIRECT, else 1). Set by the engine's preflight.
    align: AtomicU64,
    stop: AtomicBool,
    /// Set by the engine when one job fails, so the others stop too.
    abort: AtomicBool,
}

impl LiveTunables {
    pub fn new(chunk: u64, window: u32, rate: Option<u64>) -> Self {
        LiveTunables {
            chunk: AtomicU64::new(chunk),
            window: AtomicU32::new(window),
            rate: AtomicU64::new(rate.unwrap_or(0)),
            align: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
        }
    }

    /// Current chunk size in bytes.
    pub fn chunk(&self) -> u64 {
        self.chunk.load(Ordering::Relaxed)
    }

    /// Changes the chunk size from the next chunk on. With O_DIRECT it must
    /// stay a multiple of the device's logical block size.
    pub fn set_chunk(&self, bytes: u64) -> Result<(), ConfigError> {
        check_chunk(bytes)?;
        let align = self.align();
        if !bytes.is_multiple_of(align) {
            return Err(ConfigError::Unaligned {
                what: "chunk",
                value: ByteSize(bytes),
                align,
            });
        }
        self.chunk.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// srf-pipelined window, in chunks.
    pub fn window(&self) -> u32 {
        self.window.load(Ordering::Relaxed)
    }

    pub fn set_window(&self, chunks: u32) -> Result<(), ConfigError> {
        check_window(chunks)?;
        self.window.store(chunks, Ordering::Relaxed);
        Ok(())
    }

    /// Rate limit in bytes/s over all jobs, `None` = unlimited.
    pub fn rate(&self) -> Option<u64> {
        match self.rate.load(Ordering::Relaxed) {
            0 => None,
            r => Some(r),
        }
    }

    pub fn set_rate(&self, rate: Option<u64>) -> Result<(), ConfigError> {
        if rate == Some(0) {
            return Err(ConfigError::ZeroRate);
        }
        self.rate.store(rate.unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    pub fn align(&self) -> u64 {
        self.align.load(Ordering::Relaxed).max(1)
    }

    pub(crate) fn set_align(&self, align: u64) {
        self.align.store(align.max(1), Ordering::Relaxed);
    }

    /// Asks every job to stop at its next chunk boundary (SIGINT, the TUI's
    /// stop key). The run then ends with status `interrupted`.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether a job should stop at its next chunk: on request, or because
    /// another job failed.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.abort.load(Ordering::Relaxed)
    }

    /// Whether [`Self::request_stop`] was called.
    pub fn user_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
    }

    pub(crate) fn reset_abort(&self) {
        self.abort.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_validate_like_the_config() {
        let t = LiveTunables::new(1 << 20, 4, None);
        assert_eq!(t.set_chunk(0), Err(ConfigError::ZeroChunk));
        assert_eq!(t.set_window(0), Err(ConfigError::ZeroWindow));
        assert_eq!(t.set_rate(Some(0)), Err(ConfigError::ZeroRate));
        t.set_align(4096);
        assert!(t.set_chunk(6000).is_err());
        assert_eq!(t.chunk(), 1 << 20, "a refused value changes nothing");
        t.set_chunk(8192).unwrap();
        t.set_window(2).unwrap();
        t.set_rate(Some(1000)).unwrap();
        assert_eq!((t.chunk(), t.window(), t.rate()), (8192, 2, Some(1000)));
        assert!(!t.stop_requested());
        t.request_stop();
        assert!(t.stop_requested());
    }
}
