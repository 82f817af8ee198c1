//! The `uring` strategy: io_uring writes with up to `qd` in flight and one
//! fsync queued behind them with IOSQE_IO_DRAIN.
//!
//! IOSQE_IO_DRAIN (io_uring_enter(2)): "the SQE will not be started before
//! previously submitted SQEs have completed". So the fsync is submitted in
//! the same batch as the last writes, without a round trip to wait for them,
//! and still covers every one of them. Its measured latency therefore
//! includes the wait for the writes still in flight when it was queued.
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::{IoUring, opcode, squeue, types};

use crate::buf::ChunkBuf;
use crate::event::Event;
use crate::schedule::{FileCtx, FileOutcome, OpError};
use crate::sink::RWF_DONTCACHE;

/// user_data of the final fsync; writes use their buffer slot index.
const FSYNC_UD: u64 = u64::MAX;

/// The io_uring operations the schedule needs (mockable).
pub trait Ring {
    /// Queues a write of `len` bytes at `buf` to file `offset`, with
    /// `rw_flags` (RWF_*, as pwritev2(2) takes them) in the SQE.
    ///
    /// # Safety
    /// `buf` must stay valid and unchanged until the completion carrying
    /// `user_data` has been reaped.
    unsafe fn push_write(
        &mut self,
        buf: *const u8,
        len: u32,
        offset: u64,
        rw_flags: i32,
        user_data: u64,
    ) -> io::Result<()>;
    /// Queues fsync(2) (fdatasync(2) with `datasync`), drained behind every
    /// earlier submission when `drain`.
    fn push_fsync(&mut self, datasync: bool, drain: bool, user_data: u64) -> io::Result<()>;
    /// Submits what is queued and waits for at least `want` completions.
    fn submit_and_wait(&mut self, want: usize) -> io::Result<()>;
    /// Next completion: (user_data, result = bytes or -errno).
    fn pop_completion(&mut self) -> Option<(u64, i32)>;
}

/// A real ring bound to one file.
pub struct UringFile {
    ring: IoUring,
    file: File,
}

impl UringFile {
    pub fn new(file: File, qd: u32) -> io::Result<Self> {
        // One more entry than the queue depth, for the fsync.
        let ring = IoUring::new((qd + 1).next_power_of_two())?;
        Ok(UringFile { ring, file })
    }
}

fn sq_full() -> io::Error {
    io::Error::other("io_uring submission queue full")
}

impl Ring for UringFile {
    unsafe fn push_write(
        &mut self,
        buf: *const u8,
        len: u32,
        offset: u64,
        rw_flags: i32,
        user_data: u64,
    ) -> io::Result<()> {
        let e = opcode::Write::new(types::Fd(self.file.as_raw_fd()), buf, len)
            .offset(offset)
            .rw_flags(rw_flags)
            .build()
            .user_data(user_data);
        // SAFETY: the caller keeps `buf` alive until the completion.
        unsafe { self.ring.submission().push(&e) }.map_err(|_| sq_full())
    }

    fn push_fsync(&mut self, datasync: bool, drain: bool, user_data: u64) -> io::Result<()> {
        let mut op = opcode::Fsync::new(types::Fd(self.file.as_raw_fd()));
        if datasync {
            op = op.flags(types::FsyncFlags::DATASYNC);
        }
        let mut e = op.build().user_data(user_data);
        if drain {
            e = e.flags(squeue::Flags::IO_DRAIN);
        }
        // SAFETY: fsync references no user memory.
        unsafe { self.ring.submission().push(&e) }.map_err(|_| sq_full())
    }

    fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn pop_completion(&mut self) -> Option<(u64, i32)> {
        self.ring
            .completion()
            .next()
            .map(|c| (c.user_data(), c.result()))
    }
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    offset: u64,
    len: u64,
    done: u64,
    issued: Instant,
}

/// Writes a file of `size` bytes through `ring`, `bufs.len()` writes in
/// flight at most, then a drained fsync (or fdatasync with `datasync`).
///
/// On an error nothing new is issued, every write already in flight is
/// reaped (its buffer must outlive it), and the first error is returned.
pub fn write_file_uring<R: Ring>(
    ring: &mut R,
    size: u64,
    bufs: &mut [ChunkBuf],
    ctx: &mut FileCtx<'_>,
) -> Result<FileOutcome, OpError> {
    let qd = bufs.len();
    let mut out = FileOutcome::default();
    let mut free: Vec<usize> = (0..qd).rev().collect();
    let mut inflight: Vec<Option<InFlight>> = vec![None; qd];
    let mut n_inflight = 0usize;
    let mut next_off = 0u64;
    let mut error: Option<(String, io::Error)> = None;
    let sync_kind = ctx.end_sync_kind();
    // (queued at, whether a write was re-queued after it)
    let mut fsync: Option<(Instant, bool)> = None;
    let mut fsyncs_left = 0usize;
    let mut need_resync = false;
    // RWF_DONTCACHE goes in the SQE's rw_flags (io_uring's read/write prep
    // hands them to kiocb_set_rw_flags(), as pwritev2(2) does).
    let rw_flags = if ctx.dontcache { RWF_DONTCACHE } else { 0 };

    loop {
        // Fill the queue.
        while error.is_none() && !out.stopped && next_off < size {
            if ctx.tunables.stop_requested() {
                out.stopped = true;
                break;
            }
            let Some(slot) = free.pop() else { break };
            let len = ctx.tunables.chunk().min(size - next_off);
            if !ctx.rate.pace(ctx.tunables, len) {
                free.push(slot);
                out.stopped = true;
                break;
            }
            let ptr = match bufs[slot].prepare(ctx.pattern, next_off, len as usize) {
                Ok(data) => data.as_ptr(),
                Err(e) => {
                    free.push(slot);
                    error = Some((format!("a buffer for the write at offset {next_off}"), e));
                    break;
                }
            };
            ctx.observer.on_event(&Event::ChunkIssued {
                at: ctx.at,
                offset: next_off,
                len,
            });
            // SAFETY: bufs[slot] is not touched again until this slot's
            // completion is reaped (the slot is off the free list), and bufs
            // outlives the loop, which only ends with nothing in flight.
            match unsafe { ring.push_write(ptr, len as u32, next_off, rw_flags, slot as u64) } {
                Ok(()) => {
                    inflight[slot] = Some(InFlight {
                        offset: next_off,
                        len,
                        done: 0,
                        issued: Instant::now(),
                    });
                    n_inflight += 1;
                    next_off += len;
                }
                Err(e) => {
                    free.push(slot);
                    error = Some((format!("queueing a write at offset {next_off}"), e));
                }
            }
        }
        // Everything issued: queue the fsync right behind the writes.
        if error.is_none() && !out.stopped && next_off >= size && fsync.is_none() {
            ctx.observer.on_event(&Event::SyncStarted {
                at: ctx.at,
                kind: sync_kind,
                offset: 0,
                len: 0,
            });
            match ring.push_fsync(ctx.datasync, true, FSYNC_UD) {
                Ok(()) => {
                    fsync = Some((Instant::now(), false));
                    fsyncs_left += 1;
                }
                Err(e) => error = Some(("queueing the final fsync".into(), e)),
            }
        }
        if n_inflight == 0 && fsyncs_left == 0 {
            break;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            // The ring is unusable; the kernel only reads our buffers for
            // writes, and exiting the ring cancels or finishes them.
            let written = out.written;
            return Err(OpError {
                op: "io_uring_enter".into(),
                error: e,
                outcome: FileOutcome { written, ..out },
            });
        }
        while let Some((ud, res)) = ring.pop_completion() {
            if ud == FSYNC_UD {
                fsyncs_left -= 1;
                let (queued, _) = fsync.unwrap_or((Instant::now(), false));
                let latency = queued.elapsed();
                ctx.stats.sync_hist(sync_kind).record(latency);
                ctx.observer.on_event(&Event::SyncEnded {
                    at: ctx.at,
                    kind: sync_kind,
                    offset: 0,
                    len: 0,
                    latency,
                });
                if res < 0 {
                    error.get_or_insert((
                        format!("final {}", sync_kind.name()),
                        io::Error::from_raw_os_error(-res),
                    ));
                } else if !need_resync {
                    out.durable = true;
                }
                continue;
            }
            let slot = ud as usize;
            let Some(mut f) = inflight.get_mut(slot).and_then(Option::take) else {
                error.get_or_insert((
                    "reaping a completion".into(),
                    io::Error::other(format!("unknown io_uring user_data {ud}")),
                ));
                continue;
            };
            if res <= 0 {
                let e = if res < 0 {
                    io::Error::from_raw_os_error(-res)
                } else {
                    io::Error::from(io::ErrorKind::WriteZero)
                };
                error.get_or_insert((
                    format!("write of {} bytes at offset {}", f.len, f.offset),
                    e,
                ));
                free.push(slot);
                n_inflight -= 1;
                continue;
            }
            f.done += res as u64;
            if f.done < f.len {
                // A short write: queue the rest from the same buffer. If the
                // fsync is already queued it may run before this write, so
                // one more fsync follows at the end.
                if fsync.is_some() {
                    need_resync = true;
                }
                let rest = (f.len - f.done) as u32;
                // SAFETY: same slot and buffer, still off the free list.
                let ptr = unsafe { bufs[slot].as_ptr().add(f.done as usize) };
                match unsafe { ring.push_write(ptr, rest, f.offset + f.done, rw_flags, ud) } {
                    Ok(()) => inflight[slot] = Some(f),
                    Err(e) => {
                        error.get_or_insert((
                            format!("re-queueing a short write at offset {}", f.offset + f.done),
                            e,
                        ));
                        free.push(slot);
                        n_inflight -= 1;
                    }
                }
                continue;
            }
            let latency = f.issued.elapsed();
            ctx.stats.write.record(latency);
            ctx.progress
                .fetch_add(f.len, std::sync::atomic::Ordering::Relaxed);
            out.written += f.len;
            ctx.observer.on_event(&Event::ChunkWritten {
                at: ctx.at,
                offset: f.offset,
                len: f.len,
                latency,
            });
            free.push(slot);
            n_inflight -= 1;
        }
        if need_resync && n_inflight == 0 && fsyncs_left == 0 && error.is_none() {
            need_resync = false;
            fsync = None;
        }
    }
    if let Some((op, error)) = error {
        return Err(OpError {
            op,
            error,
            outcome: FileOutcome {
                durable: false,
                ..out
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{FileRef, NullObserver, SyncKind};
    use crate::pattern::Pattern;
    use crate::schedule::{JobStats, RateLimiter};
    use crate::spec::Strategy;
    use crate::tunables::LiveTunables;
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Log {
        Write { offset: u64, len: u32, ud: u64 },
        Fsync { datasync: bool, drain: bool },
        Submit,
        Complete { ud: u64, res: i32 },
    }

    /// Completes submitted entries one per wait, in submission order (what
    /// a drained fsync guarantees for the fsync; writes may really complete
    /// in any order).
    #[derive(Default)]
    struct MockRing {
        log: Vec<Log>,
        queued: Vec<(u64, i32)>,
        submitted: VecDeque<(u64, i32)>,
        done: VecDeque<(u64, i32)>,
        /// Complete the first write with only this many bytes.
        short_first: Option<i32>,
        /// Fail the write at this offset with this errno.
        fail_offset: Option<(u64, i32)>,
        writes_in_flight: usize,
        max_writes_in_flight: usize,
        /// rw_flags of every write pushed.
        flags: Vec<i32>,
    }

    impl Ring for MockRing {
        unsafe fn push_write(
            &mut self,
            _buf: *const u8,
            len: u32,
            offset: u64,
            rw_flags: i32,
            ud: u64,
        ) -> io::Result<()> {
            self.flags.push(rw_flags);
            self.log.push(Log::Write { offset, len, ud });
            let mut res = len as i32;
            if let Some(s) = self.short_first.take() {
                res = s;
            }
            if let Some((o, errno)) = self.fail_offset
                && o == offset
            {
                res = -errno;
            }
            self.queued.push((ud, res));
            self.writes_in_flight += 1;
            self.max_writes_in_flight = self.max_writes_in_flight.max(self.writes_in_flight);
            Ok(())
        }
        fn push_fsync(&mut self, datasync: bool, drain: bool, ud: u64) -> io::Result<()> {
            self.log.push(Log::Fsync { datasync, drain });
            self.queued.push((ud, 0));
            Ok(())
        }
        fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
            self.log.push(Log::Submit);
            self.submitted.extend(self.queued.drain(..));
            for _ in 0..want {
                let c = self
                    .submitted
                    .pop_front()
                    .expect("waiting with nothing in flight");
                if c.0 != FSYNC_UD {
                    self.writes_in_flight -= 1;
                }
                self.log.push(Log::Complete { ud: c.0, res: c.1 });
                self.done.push_back(c);
            }
            Ok(())
        }
        fn pop_completion(&mut self) -> Option<(u64, i32)> {
            self.done.pop_front()
        }
    }

    const CH: u64 = 4096;

    fn run(
        ring: &mut MockRing,
        qd: usize,
        chunks: u64,
        datasync: bool,
    ) -> (Result<FileOutcome, OpError>, JobStats) {
        run_with(ring, qd, chunks, datasync, false)
    }

    fn run_with(
        ring: &mut MockRing,
        qd: usize,
        chunks: u64,
        datasync: bool,
        dontcache: bool,
    ) -> (Result<FileOutcome, OpError>, JobStats) {
        let tunables = LiveTunables::new(CH, 4, None);
        let progress = AtomicU64::new(0);
        let mut stats = JobStats::default();
        let mut rate = RateLimiter::new(1);
        let mut spare = ChunkBuf::new(CH as usize, 4096).unwrap();
        let pattern = Pattern::new(1, 0);
        let mut bufs: Vec<ChunkBuf> = (0..qd)
            .map(|_| ChunkBuf::new(CH as usize, 4096).unwrap())
            .collect();
        let mut ctx = FileCtx {
            at: FileRef { job: 0, file: 0 },
            strategy: Strategy::Uring,
            datasync,
            drop_behind: false,
            dontcache,
            tunables: &tunables,
            observer: &NullObserver,
            progress: &progress,
            stats: &mut stats,
            rate: &mut rate,
            buf: &mut spare,
            pattern: &pattern,
        };
        let r = write_file_uring(ring, chunks * CH, &mut bufs, &mut ctx);
        (r, stats)
    }

    #[test]
    fn qd_writes_in_flight_then_a_drained_fsync_in_the_same_batch() {
        let mut ring = MockRing::default();
        let (r, stats) = run(&mut ring, 4, 10, false);
        let out = r.unwrap();
        assert_eq!(out.written, 10 * CH);
        assert!(out.durable);
        assert_eq!(ring.max_writes_in_flight, 4);
        // Every chunk written once, in offset order.
        let offsets: Vec<u64> = ring
            .log
            .iter()
            .filter_map(|l| match l {
                Log::Write { offset, len, .. } => {
                    assert_eq!(*len as u64, CH);
                    Some(*offset / CH)
                }
                _ => None,
            })
            .collect();
        assert_eq!(offsets, (0..10).collect::<Vec<_>>());
        // The first four writes go out in the first submission.
        assert_eq!(
            ring.log[..5]
                .iter()
                .filter(|l| matches!(l, Log::Write { .. }))
                .count(),
            4
        );
        assert_eq!(ring.log[4], Log::Submit);
        // Exactly one fsync, drained, queued right after the last write and
        // before that write completed (no extra round trip).
        let fsyncs: Vec<usize> = (0..ring.log.len())
            .filter(|&i| matches!(ring.log[i], Log::Fsync { .. }))
            .collect();
        assert_eq!(fsyncs.len(), 1);
        let at = fsyncs[0];
        assert_eq!(
            ring.log[at],
            Log::Fsync {
                datasync: false,
                drain: true
            }
        );
        assert!(matches!(ring.log[at - 1], Log::Write { offset, .. } if offset == 9 * CH));
        let completes_after = ring.log[at..]
            .iter()
            .filter(|l| matches!(l, Log::Complete { ud, .. } if *ud != FSYNC_UD))
            .count();
        assert!(
            completes_after >= 1,
            "writes still in flight when the fsync was queued"
        );
        assert_eq!(
            ring.log.last(),
            Some(&Log::Complete {
                ud: FSYNC_UD,
                res: 0
            })
        );
        assert_eq!(stats.write.count(), 10);
        assert_eq!(stats.sync[SyncKind::Fsync as usize].count(), 1);
    }

    #[test]
    fn uncached_sets_rwf_dontcache_on_every_write_and_only_then() {
        let mut ring = MockRing {
            short_first: Some(1000),
            ..Default::default()
        };
        let (r, _) = run_with(&mut ring, 4, 10, false, true);
        assert!(r.unwrap().durable);
        // 10 writes and the rest of the short one, all uncached.
        assert_eq!(ring.flags.len(), 11);
        assert!(ring.flags.iter().all(|&f| f == 0x80), "{:?}", ring.flags);
        // The same schedule otherwise: one drained fsync at the end.
        assert_eq!(
            ring.log
                .iter()
                .filter(|l| matches!(l, Log::Fsync { drain: true, .. }))
                .count(),
            1
        );
        let mut plain = MockRing::default();
        run(&mut plain, 4, 10, false).0.unwrap();
        assert!(plain.flags.iter().all(|&f| f == 0) && plain.flags.len() == 10);
    }

    #[test]
    fn datasync_uses_fdatasync_flag() {
        let mut ring = MockRing::default();
        let (r, stats) = run(&mut ring, 32, 3, true);
        assert!(r.unwrap().durable);
        assert!(ring.log.contains(&Log::Fsync {
            datasync: true,
            drain: true
        }));
        assert_eq!(stats.sync[SyncKind::Fdatasync as usize].count(), 1);
    }

    #[test]
    fn short_write_is_completed_and_followed_by_another_fsync_if_needed() {
        let mut ring = MockRing {
            short_first: Some(1000),
            ..Default::default()
        };
        let (r, _) = run(&mut ring, 2, 2, false);
        let out = r.unwrap();
        assert_eq!(out.written, 2 * CH);
        assert!(out.durable);
        assert!(
            ring.log.contains(&Log::Write {
                offset: 1000,
                len: (CH - 1000) as u32,
                ud: 1
            }) || ring.log.contains(&Log::Write {
                offset: 1000,
                len: (CH - 1000) as u32,
                ud: 0
            })
        );
    }

    #[test]
    fn an_error_drains_the_queue_and_is_reported() {
        let mut ring = MockRing {
            fail_offset: Some((2 * CH, libc::ENOSPC)),
            ..Default::default()
        };
        let (r, _) = run(&mut ring, 4, 10, false);
        let err = r.unwrap_err();
        assert_eq!(err.error.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(err.op, format!("write of {CH} bytes at offset {}", 2 * CH));
        assert!(!err.outcome.durable);
        // Completions free slots one by one: W0 done -> W4 queued, W1 done
        // -> W5 queued, W2 fails -> nothing new; W3, W4, W5 are reaped.
        assert_eq!(err.outcome.written, 5 * CH);
        let pushed = ring
            .log
            .iter()
            .filter(|l| matches!(l, Log::Write { .. }))
            .count();
        assert_eq!(pushed, 6);
        assert_eq!(ring.writes_in_flight, 0, "every write was reaped");
        assert!(!ring.log.iter().any(|l| matches!(l, Log::Fsync { .. })));
    }
}
