//! The observer event stream: what a live front end (the TUI) sees of a run.
//!
//! Events are delivered synchronously on the writing thread (or the monitor
//! thread for [`Event::Tick`]), so an observer must be cheap: the usual one is
//! an `std::sync::mpsc::Sender<Event>`, which implements [`Observer`].
use std::sync::mpsc::Sender;
use std::time::Duration;

use serde::Serialize;

/// Kind of a sync call, also the key of the report's `sync_latency_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncKind {
    /// sync_file_range(SYNC_FILE_RANGE_WRITE): start write-out, don't wait.
    SrfWrite,
    /// sync_file_range(SYNC_FILE_RANGE_WAIT_BEFORE): wait for write-out
    /// already started on the range.
    SrfWaitBefore,
    Fdatasync,
    Fsync,
    /// posix_fadvise(POSIX_FADV_DONTNEED) on a chunk already on disk
    /// (`--drop-behind`): not a sync, but timed and reported like one.
    DropBehind,
}

impl SyncKind {
    pub const ALL: [SyncKind; 5] = [
        SyncKind::SrfWrite,
        SyncKind::SrfWaitBefore,
        SyncKind::Fdatasync,
        SyncKind::Fsync,
        SyncKind::DropBehind,
    ];
    pub fn name(self) -> &'static str {
        match self {
            SyncKind::SrfWrite => "srf_write",
            SyncKind::SrfWaitBefore => "srf_wait_before",
            SyncKind::Fdatasync => "fdatasync",
            SyncKind::Fsync => "fsync",
            SyncKind::DropBehind => "drop_behind",
        }
    }
}

/// Which file an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FileRef {
    pub job: u32,
    pub file: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A write of `[offset, offset+len)` is about to be issued.
    ChunkIssued { at: FileRef, offset: u64, len: u64 },
    /// The write returned (for uring: its completion was reaped).
    ChunkWritten {
        at: FileRef,
        offset: u64,
        len: u64,
        latency: Duration,
    },
    /// A sync call starts. `len == 0` means "the whole file".
    SyncStarted {
        at: FileRef,
        kind: SyncKind,
        offset: u64,
        len: u64,
    },
    SyncEnded {
        at: FileRef,
        kind: SyncKind,
        offset: u64,
        len: u64,
        latency: Duration,
    },
    /// Once a second: bytes written so far over all jobs, and in the last
    /// second.
    Tick {
        elapsed: Duration,
        bytes: u64,
        bytes_last_second: u64,
    },
}

pub trait Observer: Send + Sync {
    fn on_event(&self, event: &Event);
}

/// Discards every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullObserver;

impl Observer for NullObserver {
    fn on_event(&self, _event: &Event) {}
}

/// Forwards events to a channel; a closed receiver is ignored (the writer
/// must not fail because nobody is watching any more).
impl Observer for Sender<Event> {
    fn on_event(&self, event: &Event) {
        let _ = self.send(event.clone());
    }
}
