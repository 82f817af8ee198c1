//! Which calls a synchronous strategy makes, in which order, on which ranges.
//!
//! Generic over [`Sink`] so the schedules are tested call by call without a
//! disk (see the tests at the bottom). The io_uring schedule is in the
//! `uring` module.
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::buf::ChunkBuf;
use crate::event::{Event, FileRef, Observer, SyncKind};
use crate::pattern::Pattern;
use crate::sink::{Sink, SrfFlags};
use crate::spec::Strategy;
use crate::stats::LatencyHist;
use crate::tunables::LiveTunables;

/// Latency histograms of one job (merged into the report at the end).
#[derive(Debug, Clone, Default)]
pub struct JobStats {
    pub write: LatencyHist,
    pub sync: [LatencyHist; SyncKind::ALL.len()],
}

impl JobStats {
    pub fn sync_hist(&mut self, kind: SyncKind) -> &mut LatencyHist {
        &mut self.sync[kind as usize]
    }
    pub fn merge(&mut self, other: &JobStats) {
        self.write.merge(&other.write);
        for (a, b) in self.sync.iter_mut().zip(&other.sync) {
            a.merge(b);
        }
    }
}

/// Paces one job to its share of the rate limit (read live each chunk).
#[derive(Debug)]
pub struct RateLimiter {
    jobs: u32,
    /// (rate in force, when it took effect, bytes since then)
    epoch: Option<(u64, Instant, u64)>,
}

impl RateLimiter {
    /// Longest single sleep while pacing: a stop request (SIGINT, the
    /// dashboard) or a live rate change is seen within this, however long
    /// the next chunk is due (`--rate 1 --chunk 64M` is months).
    pub(crate) const SLICE: Duration = Duration::from_millis(50);

    pub fn new(jobs: u32) -> Self {
        RateLimiter {
            jobs: jobs.max(1),
            epoch: None,
        }
    }

    /// Sleeps until `len` more bytes fit under the total rate (bytes/s,
    /// [`LiveTunables::rate`]) shared evenly by the jobs. Sleeps in
    /// `SLICE`s (50 ms), re-reading the rate and the stop flag after each:
    /// returns `false`, with the chunk not counted, as soon as a stop is
    /// requested.
    pub fn pace(&mut self, tunables: &LiveTunables, len: u64) -> bool {
        loop {
            let Some(rate) = tunables.rate() else {
                self.epoch = None;
                return true;
            };
            let per_job = (rate / u64::from(self.jobs)).max(1);
            let (r, start, sent) = match self.epoch {
                Some(e) if e.0 == rate => e,
                // A new or changed rate starts a new epoch, so a live change
                // does not try to pay back (or bank) the past.
                _ => (rate, Instant::now(), 0),
            };
            self.epoch = Some((r, start, sent));
            let now = Instant::now();
            // None: further away than an Instant can say; due "never", so
            // only a stop or a rate change ends the wait.
            let due = Duration::try_from_secs_f64(sent as f64 / per_job as f64)
                .ok()
                .and_then(|d| start.checked_add(d));
            if due.is_some_and(|due| due <= now) {
                self.epoch = Some((r, start, sent.saturating_add(len)));
                return true;
            }
            if tunables.stop_requested() {
                return false;
            }
            let wait = due.map_or(Self::SLICE, |due| (due - now).min(Self::SLICE));
            std::thread::sleep(wait);
        }
    }
}

/// Everything a job shares with the engine while writing one file.
pub struct FileCtx<'a> {
    pub at: FileRef,
    pub strategy: Strategy,
    pub datasync: bool,
    /// `--drop-behind`: posix_fadvise(DONTNEED) on each chunk once it is on
    /// disk (srf-pipelined, fdatasync-chunk; ignored by the others).
    pub drop_behind: bool,
    /// Writes carry RWF_DONTCACHE ([`crate::WriterConfig::uses_dontcache`]):
    /// pwritev2(2) for the synchronous schedule, the SQE's rw_flags for
    /// io_uring.
    pub dontcache: bool,
    pub tunables: &'a LiveTunables,
    pub observer: &'a dyn Observer,
    /// Bytes written over all jobs (read by the monitor's ticks).
    pub progress: &'a AtomicU64,
    pub stats: &'a mut JobStats,
    pub rate: &'a mut RateLimiter,
    pub buf: &'a mut ChunkBuf,
    pub pattern: &'a Pattern,
}

/// How far a file got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileOutcome {
    pub written: u64,
    /// Whether the file's data is on stable storage.
    pub durable: bool,
    /// Stopped early on request.
    pub stopped: bool,
}

/// A failed call: what was being done, and how far the file had got.
#[derive(Debug)]
pub struct OpError {
    pub op: String,
    pub error: io::Error,
    pub outcome: FileOutcome,
}

impl FileCtx<'_> {
    /// Runs one timed sync call, with its events and its latency recorded.
    pub fn timed_sync<S: Sink>(
        &mut self,
        sink: &mut S,
        kind: SyncKind,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        self.observer.on_event(&Event::SyncStarted {
            at: self.at,
            kind,
            offset,
            len,
        });
        let t = Instant::now();
        let r = match kind {
            SyncKind::SrfWrite => sink.sync_file_range(offset, len, SrfFlags::WRITE),
            SyncKind::SrfWaitBefore => sink.sync_file_range(offset, len, SrfFlags::WAIT_BEFORE),
            SyncKind::Fdatasync => sink.fdatasync(),
            SyncKind::Fsync => sink.fsync(),
            SyncKind::DropBehind => sink.fadvise_dontneed(offset, len),
        };
        let latency = t.elapsed();
        self.stats.sync_hist(kind).record(latency);
        self.observer.on_event(&Event::SyncEnded {
            at: self.at,
            kind,
            offset,
            len,
            latency,
        });
        r
    }

    /// fsync(2), or fdatasync(2) when asked for `datasync`.
    pub fn end_sync_kind(&self) -> SyncKind {
        if self.datasync {
            SyncKind::Fdatasync
        } else {
            SyncKind::Fsync
        }
    }

    /// Writes one chunk with its events, latency and progress.
    pub fn timed_write<S: Sink>(&mut self, sink: &mut S, offset: u64, len: u64) -> io::Result<()> {
        let data = self.buf.prepare(self.pattern, offset, len as usize)?;
        self.observer.on_event(&Event::ChunkIssued {
            at: self.at,
            offset,
            len,
        });
        let t = Instant::now();
        if self.dontcache {
            sink.write_at_dontcache(data, offset)?;
        } else {
            sink.write_at(data, offset)?;
        }
        let latency = t.elapsed();
        self.stats.write.record(latency);
        self.progress.fetch_add(len, Ordering::Relaxed);
        self.observer.on_event(&Event::ChunkWritten {
            at: self.at,
            offset,
            len,
            latency,
        });
        Ok(())
    }
}

/// Writes a file of `size` bytes with one of the synchronous strategies
/// (everything but `uring`).
///
/// Per chunk `i` at `[off, off+len)`:
/// - `fdatasync-chunk`: write, fdatasync(2).
/// - `srf-pipelined`: write, sync_file_range(off, len, WRITE) to start
///   write-out at once; then, for every chunk now more than `window` chunks
///   old (chunk i-W), sync_file_range(WAIT_BEFORE) on its range, which waits
///   for the write-out started W chunks ago without starting new I/O
///   (sync_file_range(2)). The device always has up to W chunks queued and
///   the page cache never holds more than about W+1 chunks of dirty or
///   in-flight data for this file: Ts'o's pattern (docs/classic-cases.md, case 3).
/// - `uncached`: pwritev2(2) with RWF_DONTCACHE (write-out starts inside
///   the call: generic_write_sync() kicks filemap_fdatawrite_range_kick()
///   on the written range, include/linux/fs.h, Linux 6.14+).
/// - otherwise: write only.
///
/// At the end: `fsync-end` and `uncached` fsync(2) or fdatasync(2); `srf-pipelined` and
/// `direct` fdatasync(2) (for `direct`, the data is already on the device
/// but its allocation metadata and the device cache may not be).
/// `buffered` and a stopped run issue no sync.
///
/// With `drop_behind` (srf-pipelined and fdatasync-chunk only), each chunk
/// is dropped from the page cache with posix_fadvise(POSIX_FADV_DONTNEED)
/// on exactly its range as soon as it is known to be on disk: right after
/// its WAIT_BEFORE (srf-pipelined: chunk i-W, after WRITE on chunk i), or
/// right after the fdatasync that follows it (fdatasync-chunk). The chunks
/// still pending at the end (srf-pipelined's last W) are dropped after the
/// final fdatasync, oldest first. A stopped run drops nothing more: its
/// pending chunks may still be dirty. The sync_file_range(2) + DONTNEED
/// streaming-write recipe Linus Torvalds described on LKML in 2010; see
/// docs/writer.md ("Drop-behind").
pub fn write_file<S: Sink>(
    sink: &mut S,
    size: u64,
    ctx: &mut FileCtx<'_>,
) -> Result<FileOutcome, OpError> {
    let mut out = FileOutcome::default();
    let mut pending: VecDeque<(u64, u64)> = VecDeque::new();
    let fail = |op: String, error: io::Error, outcome: FileOutcome| OpError { op, error, outcome };
    while out.written < size {
        if ctx.tunables.stop_requested() {
            out.stopped = true;
            return Ok(out);
        }
        let off = out.written;
        let len = ctx.tunables.chunk().min(size - off);
        if !ctx.rate.pace(ctx.tunables, len) {
            out.stopped = true;
            return Ok(out);
        }
        ctx.timed_write(sink, off, len)
            .map_err(|e| fail(format!("write of {len} bytes at offset {off}"), e, out))?;
        out.written += len;
        match ctx.strategy {
            Strategy::FdatasyncChunk => {
                ctx.timed_sync(sink, SyncKind::Fdatasync, 0, 0)
                    .map_err(|e| {
                        fail(format!("fdatasync after the chunk at offset {off}"), e, out)
                    })?;
                if ctx.drop_behind {
                    drop_chunk(ctx, sink, off, len, out)?;
                }
            }
            Strategy::SrfPipelined => {
                ctx.timed_sync(sink, SyncKind::SrfWrite, off, len)
                    .map_err(|e| fail(format!("sync_file_range(WRITE) at offset {off}"), e, out))?;
                pending.push_back((off, len));
                let window = ctx.tunables.window().max(1) as usize;
                while pending.len() > window {
                    let Some((o, l)) = pending.pop_front() else {
                        break;
                    };
                    ctx.timed_sync(sink, SyncKind::SrfWaitBefore, o, l)
                        .map_err(|e| {
                            fail(
                                format!("sync_file_range(WAIT_BEFORE) at offset {o}"),
                                e,
                                out,
                            )
                        })?;
                    if ctx.drop_behind {
                        drop_chunk(ctx, sink, o, l, out)?;
                    }
                }
            }
            _ => {}
        }
    }
    let end = match ctx.strategy {
        Strategy::Buffered | Strategy::Uring | Strategy::UringBuffered => None,
        // The last chunk's fdatasync already made everything durable.
        Strategy::FdatasyncChunk => {
            out.durable = true;
            None
        }
        // uncached: the write calls only started the write-out.
        Strategy::FsyncEnd | Strategy::Uncached => Some(ctx.end_sync_kind()),
        Strategy::SrfPipelined | Strategy::Direct => Some(SyncKind::Fdatasync),
    };
    if let Some(kind) = end {
        ctx.timed_sync(sink, kind, 0, 0)
            .map_err(|e| fail(format!("final {}", kind.name()), e, out))?;
        out.durable = true;
    }
    if ctx.drop_behind && ctx.strategy == Strategy::SrfPipelined {
        for (o, l) in pending.drain(..) {
            drop_chunk(ctx, sink, o, l, out)?;
        }
    }
    Ok(out)
}

/// posix_fadvise(DONTNEED) on one chunk already on disk, timed as
/// [`SyncKind::DropBehind`].
fn drop_chunk<S: Sink>(
    ctx: &mut FileCtx<'_>,
    sink: &mut S,
    offset: u64,
    len: u64,
    out: FileOutcome,
) -> Result<(), OpError> {
    ctx.timed_sync(sink, SyncKind::DropBehind, offset, len)
        .map_err(|error| OpError {
            op: format!("posix_fadvise(DONTNEED) at offset {offset}"),
            error,
            outcome: out,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::NullObserver;
    use crate::sink::{Call, RecordingSink};
    use std::sync::Mutex;

    const CH: u64 = 4096;

    struct Harness {
        tunables: LiveTunables,
        progress: AtomicU64,
        stats: JobStats,
        rate: RateLimiter,
        buf: ChunkBuf,
        pattern: Pattern,
        drop_behind: bool,
    }

    impl Harness {
        fn new(window: u32) -> Self {
            Harness {
                tunables: LiveTunables::new(CH, window, None),
                progress: AtomicU64::new(0),
                stats: JobStats::default(),
                rate: RateLimiter::new(1),
                buf: ChunkBuf::new(CH as usize, 4096).unwrap(),
                pattern: Pattern::new(1, 0),
                drop_behind: false,
            }
        }

        fn run(
            &mut self,
            strategy: Strategy,
            datasync: bool,
            size: u64,
            sink: &mut RecordingSink,
            observer: &dyn Observer,
        ) -> Result<FileOutcome, OpError> {
            let mut ctx = FileCtx {
                at: FileRef { job: 0, file: 0 },
                strategy,
                datasync,
                drop_behind: self.drop_behind,
                dontcache: strategy == Strategy::Uncached,
                tunables: &self.tunables,
                observer,
                progress: &self.progress,
                stats: &mut self.stats,
                rate: &mut self.rate,
                buf: &mut self.buf,
                pattern: &self.pattern,
            };
            write_file(sink, size, &mut ctx)
        }
    }

    fn calls(strategy: Strategy, datasync: bool, chunks: u64, window: u32) -> Vec<Call> {
        calls_with(strategy, datasync, chunks, window, false)
    }

    fn calls_with(
        strategy: Strategy,
        datasync: bool,
        chunks: u64,
        window: u32,
        drop_behind: bool,
    ) -> Vec<Call> {
        let mut h = Harness::new(window);
        h.drop_behind = drop_behind;
        let mut sink = RecordingSink::default();
        let out = h
            .run(strategy, datasync, chunks * CH, &mut sink, &NullObserver)
            .unwrap();
        assert_eq!(out.written, chunks * CH);
        assert_eq!(out.durable, strategy.is_durable());
        assert_eq!(h.progress.load(Ordering::Relaxed), chunks * CH);
        sink.calls
    }

    fn w(i: u64) -> Call {
        Call::Write {
            offset: i * CH,
            len: CH,
        }
    }
    fn srf(i: u64, flags: SrfFlags) -> Call {
        Call::SyncFileRange {
            offset: i * CH,
            len: CH,
            flags,
        }
    }

    #[test]
    fn buffered_only_writes() {
        assert_eq!(
            calls(Strategy::Buffered, false, 3, 4),
            vec![w(0), w(1), w(2)]
        );
    }

    #[test]
    fn fsync_end_syncs_once_at_the_end() {
        assert_eq!(
            calls(Strategy::FsyncEnd, false, 3, 4),
            vec![w(0), w(1), w(2), Call::Fsync]
        );
        assert_eq!(
            calls(Strategy::FsyncEnd, true, 2, 4),
            vec![w(0), w(1), Call::Fdatasync]
        );
    }

    #[test]
    fn uncached_writes_every_chunk_with_rwf_dontcache_then_syncs_once() {
        let u = |i: u64| Call::WriteUncached {
            offset: i * CH,
            len: CH,
        };
        assert_eq!(
            calls(Strategy::Uncached, false, 3, 4),
            vec![u(0), u(1), u(2), Call::Fsync]
        );
        assert_eq!(
            calls(Strategy::Uncached, true, 2, 4),
            vec![u(0), u(1), Call::Fdatasync]
        );
        // A refused write (EOPNOTSUPP: no RWF_DONTCACHE here) stops the file
        // at once, with nothing written and no sync: never a plain write.
        let mut h = Harness::new(4);
        let mut sink = RecordingSink {
            fail_at: Some((0, libc::EOPNOTSUPP)),
            ..RecordingSink::default()
        };
        let err = h
            .run(Strategy::Uncached, false, 3 * CH, &mut sink, &NullObserver)
            .unwrap_err();
        assert_eq!(err.error.raw_os_error(), Some(libc::EOPNOTSUPP));
        assert_eq!(err.outcome.written, 0);
        assert_eq!(sink.calls, vec![u(0)]);
    }

    #[test]
    fn fdatasync_chunk_syncs_after_every_chunk() {
        assert_eq!(
            calls(Strategy::FdatasyncChunk, false, 3, 4),
            vec![
                w(0),
                Call::Fdatasync,
                w(1),
                Call::Fdatasync,
                w(2),
                Call::Fdatasync
            ]
        );
    }

    #[test]
    fn direct_writes_then_one_fdatasync() {
        assert_eq!(
            calls(Strategy::Direct, false, 2, 4),
            vec![w(0), w(1), Call::Fdatasync]
        );
    }

    #[test]
    fn srf_pipelined_window_4_over_10_chunks() {
        let mut want = Vec::new();
        for i in 0..10 {
            want.push(w(i));
            want.push(srf(i, SrfFlags::WRITE));
            if i >= 4 {
                want.push(srf(i - 4, SrfFlags::WAIT_BEFORE));
            }
        }
        want.push(Call::Fdatasync);
        assert_eq!(calls(Strategy::SrfPipelined, false, 10, 4), want);
    }

    #[test]
    fn srf_pipelined_window_2_waits_two_behind_and_fdatasyncs_last() {
        let got = calls(Strategy::SrfPipelined, false, 5, 2);
        assert_eq!(
            got,
            vec![
                w(0),
                srf(0, SrfFlags::WRITE),
                w(1),
                srf(1, SrfFlags::WRITE),
                w(2),
                srf(2, SrfFlags::WRITE),
                srf(0, SrfFlags::WAIT_BEFORE),
                w(3),
                srf(3, SrfFlags::WRITE),
                srf(1, SrfFlags::WAIT_BEFORE),
                w(4),
                srf(4, SrfFlags::WRITE),
                srf(2, SrfFlags::WAIT_BEFORE),
                Call::Fdatasync,
            ]
        );
        // Datasync or not, srf-pipelined ends with fdatasync.
        assert_eq!(
            calls(Strategy::SrfPipelined, false, 1, 2).last(),
            Some(&Call::Fdatasync)
        );
    }

    fn dontneed(i: u64) -> Call {
        Call::DontNeed {
            offset: i * CH,
            len: CH,
        }
    }

    #[test]
    fn srf_pipelined_drop_behind_window_2_drops_each_chunk_after_its_wait() {
        assert_eq!(
            calls_with(Strategy::SrfPipelined, false, 5, 2, true),
            vec![
                w(0),
                srf(0, SrfFlags::WRITE),
                w(1),
                srf(1, SrfFlags::WRITE),
                w(2),
                srf(2, SrfFlags::WRITE),
                srf(0, SrfFlags::WAIT_BEFORE),
                dontneed(0),
                w(3),
                srf(3, SrfFlags::WRITE),
                srf(1, SrfFlags::WAIT_BEFORE),
                dontneed(1),
                w(4),
                srf(4, SrfFlags::WRITE),
                srf(2, SrfFlags::WAIT_BEFORE),
                dontneed(2),
                // The last W chunks: after the final fdatasync, oldest first.
                Call::Fdatasync,
                dontneed(3),
                dontneed(4),
            ]
        );
        // Fewer chunks than the window: all are dropped at the end.
        assert_eq!(
            calls_with(Strategy::SrfPipelined, false, 1, 2, true),
            vec![w(0), srf(0, SrfFlags::WRITE), Call::Fdatasync, dontneed(0)]
        );
    }

    #[test]
    fn srf_pipelined_drop_behind_drops_every_chunk_once_on_its_exact_range() {
        let mut h = Harness::new(4);
        h.drop_behind = true;
        let mut sink = RecordingSink::default();
        h.run(
            Strategy::SrfPipelined,
            false,
            10 * CH + 100,
            &mut sink,
            &NullObserver,
        )
        .unwrap();
        let drops: Vec<(u64, u64)> = sink
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::DontNeed { offset, len } => Some((*offset, *len)),
                _ => None,
            })
            .collect();
        let writes: Vec<(u64, u64)> = sink
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Write { offset, len } => Some((*offset, *len)),
                _ => None,
            })
            .collect();
        assert_eq!(drops, writes);
        assert_eq!(drops.last(), Some(&(10 * CH, 100)));
        // Every drop comes right after the WAIT_BEFORE on the same range,
        // or after the final fdatasync.
        for (i, c) in sink.calls.iter().enumerate() {
            if let Call::DontNeed { offset, len } = *c {
                let prev = sink.calls[i - 1];
                assert!(
                    prev == Call::SyncFileRange {
                        offset,
                        len,
                        flags: SrfFlags::WAIT_BEFORE
                    } || prev == Call::Fdatasync
                        || matches!(prev, Call::DontNeed { .. }),
                    "{prev:?} before {c:?}"
                );
            }
        }
        assert_eq!(h.stats.sync_hist(SyncKind::DropBehind).count(), 11);
    }

    #[test]
    fn fdatasync_chunk_drop_behind_drops_each_chunk_after_its_fdatasync() {
        assert_eq!(
            calls_with(Strategy::FdatasyncChunk, false, 3, 4, true),
            vec![
                w(0),
                Call::Fdatasync,
                dontneed(0),
                w(1),
                Call::Fdatasync,
                dontneed(1),
                w(2),
                Call::Fdatasync,
                dontneed(2),
            ]
        );
    }

    #[test]
    fn drop_behind_failure_names_fadvise_and_stops() {
        let mut h = Harness::new(1);
        h.drop_behind = true;
        // W0 S0 W1 S1 WB0 <- EINVAL on DONTNEED(0), the 6th call.
        let mut sink = RecordingSink {
            fail_at: Some((5, libc::EINVAL)),
            ..Default::default()
        };
        let err = h
            .run(
                Strategy::SrfPipelined,
                false,
                4 * CH,
                &mut sink,
                &NullObserver,
            )
            .unwrap_err();
        assert_eq!(err.op, "posix_fadvise(DONTNEED) at offset 0");
        assert_eq!(err.outcome.written, 2 * CH);
        assert_eq!(sink.calls[5], dontneed(0));
        assert_eq!(sink.calls.len(), 6);
    }

    #[test]
    fn last_chunk_is_short_when_size_is_not_a_multiple() {
        let mut h = Harness::new(4);
        let mut sink = RecordingSink::default();
        h.run(
            Strategy::SrfPipelined,
            false,
            2 * CH + 100,
            &mut sink,
            &NullObserver,
        )
        .unwrap();
        assert!(sink.calls.contains(&Call::Write {
            offset: 2 * CH,
            len: 100
        }));
        assert!(sink.calls.contains(&Call::SyncFileRange {
            offset: 2 * CH,
            len: 100,
            flags: SrfFlags::WRITE
        }));
    }

    /// Changes tunables from inside the run, at a chosen chunk.
    struct ChangeAt<'a> {
        tunables: &'a LiveTunables,
        chunks_seen: Mutex<u32>,
    }
    impl Observer for ChangeAt<'_> {
        fn on_event(&self, e: &Event) {
            if let Event::ChunkWritten { .. } = e {
                let mut n = self.chunks_seen.lock().unwrap();
                *n += 1;
                if *n == 2 {
                    self.tunables.set_chunk(2 * CH).unwrap();
                    self.tunables.set_window(1).unwrap();
                }
                if *n == 4 {
                    self.tunables.request_stop();
                }
            }
        }
    }

    #[test]
    fn live_tunables_take_effect_at_the_next_chunk_and_stop_stops() {
        let mut h = Harness::new(4);
        let mut sink = RecordingSink::default();
        let obs = ChangeAt {
            tunables: &h.tunables,
            chunks_seen: Mutex::new(0),
        };
        let mut ctx = FileCtx {
            at: FileRef { job: 0, file: 0 },
            strategy: Strategy::SrfPipelined,
            datasync: false,
            drop_behind: false,
            dontcache: false,
            tunables: &h.tunables,
            observer: &obs,
            progress: &h.progress,
            stats: &mut h.stats,
            rate: &mut h.rate,
            buf: &mut h.buf,
            pattern: &h.pattern,
        };
        let out = write_file(&mut sink, 100 * CH, &mut ctx).unwrap();
        assert!(out.stopped && !out.durable);
        assert_eq!(out.written, 6 * CH);
        let writes: Vec<_> = sink
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Write { offset, len } => Some((*offset / CH, *len / CH)),
                _ => None,
            })
            .collect();
        assert_eq!(writes, vec![(0, 1), (1, 1), (2, 2), (4, 2)]);
        // The window drops to 1 while chunk 1 is written: from then on each
        // WRITE is followed by a WAIT_BEFORE on the chunk just before it.
        // No fdatasync after the stop.
        let waits: Vec<_> = sink
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::SyncFileRange {
                    offset,
                    flags: SrfFlags::WAIT_BEFORE,
                    ..
                } => Some(*offset / CH),
                _ => None,
            })
            .collect();
        assert_eq!(waits, vec![0, 1, 2]);
        assert!(!sink.calls.contains(&Call::Fdatasync));
    }

    #[test]
    fn an_error_reports_the_operation_and_how_far_it_got() {
        let mut h = Harness::new(4);
        // Calls: W0 S0 W1 S1 W2 <- ENOSPC on the 5th call.
        let mut sink = RecordingSink {
            fail_at: Some((4, libc::ENOSPC)),
            ..Default::default()
        };
        let err = h
            .run(
                Strategy::SrfPipelined,
                false,
                10 * CH,
                &mut sink,
                &NullObserver,
            )
            .unwrap_err();
        assert_eq!(err.outcome.written, 2 * CH);
        assert_eq!(err.error.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(err.op, format!("write of {CH} bytes at offset {}", 2 * CH));
        assert_eq!(sink.calls.len(), 5, "nothing is issued after the failure");
    }

    #[test]
    fn events_bracket_every_call() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut h = Harness::new(1);
        let mut sink = RecordingSink::default();
        h.run(Strategy::SrfPipelined, false, 2 * CH, &mut sink, &tx)
            .unwrap();
        drop(tx);
        let kinds: Vec<String> = rx
            .iter()
            .map(|e| match e {
                Event::ChunkIssued { offset, .. } => format!("issue{}", offset / CH),
                Event::ChunkWritten { offset, .. } => format!("wrote{}", offset / CH),
                Event::SyncStarted { kind, .. } => format!("start:{}", kind.name()),
                Event::SyncEnded { kind, .. } => format!("end:{}", kind.name()),
                Event::Tick { .. } => "tick".into(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "issue0",
                "wrote0",
                "start:srf_write",
                "end:srf_write",
                "issue1",
                "wrote1",
                "start:srf_write",
                "end:srf_write",
                "start:srf_wait_before",
                "end:srf_wait_before",
                "start:fdatasync",
                "end:fdatasync"
            ]
        );
        assert_eq!(h.stats.write.count(), 2);
        assert_eq!(h.stats.sync_hist(SyncKind::SrfWrite).count(), 2);
        assert_eq!(h.stats.sync_hist(SyncKind::SrfWaitBefore).count(), 1);
        assert_eq!(h.stats.sync_hist(SyncKind::Fdatasync).count(), 1);
    }

    #[test]
    fn rate_limiter_paces_to_the_rate() {
        let mut r = RateLimiter::new(2);
        let t = Instant::now();
        // 2 jobs share 200 kB/s: this job gets 100 kB/s; 3 x 10 kB must take
        // at least the 20 ms before the third chunk is due.
        let limited = LiveTunables::new(CH, 4, Some(200_000));
        for _ in 0..3 {
            assert!(r.pace(&limited, 10_000));
        }
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(20), "{e:?}");
        assert!(e < Duration::from_millis(500), "{e:?}");
        let t = Instant::now();
        assert!(r.pace(&LiveTunables::new(CH, 4, None), 1 << 30));
        assert!(t.elapsed() < Duration::from_millis(5));
    }

    /// Paces a second chunk due `far` away on one thread, asks for a stop
    /// (or changes the rate) from another after 100 ms, and returns what
    /// pace said and how long it took.
    fn interrupted_pace(rate: u64, first: u64, act: fn(&LiveTunables)) -> (bool, Duration) {
        let t = LiveTunables::new(CH, 4, Some(rate));
        let mut r = RateLimiter::new(1);
        assert!(r.pace(&t, first), "the first chunk goes at once");
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let start = Instant::now();
                (r.pace(&t, first), start.elapsed())
            });
            std::thread::sleep(Duration::from_millis(100));
            act(&t);
            h.join().unwrap()
        })
    }

    #[test]
    fn a_stop_ends_the_rate_limiters_sleep_within_a_slice() {
        // --rate 1MB --chunk 64M: the next chunk is due in 64 s.
        let (go, took) = interrupted_pace(1_000_000, 64 << 20, |t| t.request_stop());
        assert!(!go, "a stopped pace says so");
        assert!(
            took < Duration::from_millis(100) + 4 * RateLimiter::SLICE,
            "{took:?}"
        );
        // --rate 1: due in 2^26 s; and the same with a due date past what
        // an Instant can hold (2^64 bytes at 1 byte/s).
        let (go, took) = interrupted_pace(1, u64::MAX, |t| t.request_stop());
        assert!(!go);
        assert!(took < Duration::from_secs(1), "{took:?}");
    }

    #[test]
    fn a_live_rate_change_ends_the_sleep_too() {
        let (go, took) = interrupted_pace(1, 64 << 20, |t| t.set_rate(None).unwrap());
        assert!(go, "unlimited: the chunk goes");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
