//! Small-files mode: many files of a realistic size mix (the plan's
//! [`crate::plan::size_mix`]), each made durable (or not) by a per-file
//! policy, as a package manager unpacking an archive.
use std::io;

use crate::event::{FileRef, SyncKind};
use crate::pattern::Pattern;
use crate::schedule::{FileCtx, FileOutcome, OpError};
use crate::sink::Sink;
use crate::spec::FileSync;

/// Opening and closing the files of a small-files run (mockable).
pub trait SmallFileOps {
    type File: Sink;
    /// Creates file `index` (never an existing one).
    fn create(&mut self, index: u64) -> io::Result<Self::File>;
    /// Opens file `index` again for a later pass (with O_NOATIME if asked).
    fn reopen(&mut self, index: u64) -> io::Result<Self::File>;
    fn close(&mut self, index: u64, file: Self::File) -> io::Result<()>;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmallOutcome {
    pub files: u64,
    pub bytes: u64,
    pub durable: bool,
    pub stopped: bool,
}

fn op_err(index: u64, what: &str, error: io::Error, out: &SmallOutcome) -> OpError {
    OpError {
        op: format!("small file #{index}: {what}"),
        error,
        outcome: FileOutcome {
            written: out.bytes,
            durable: false,
            stopped: out.stopped,
        },
    }
}

/// Writes `files` (index, size) with `policy`. `ctx.pattern` is replaced per
/// file with the pattern of `pattern_of(index)`.
///
/// - `none`: create, write, close.
/// - `fsync-each`: create, write, fsync/fdatasync, close.
/// - `srf-then-fsync`: create, write, sync_file_range(WRITE), close; then a
///   second pass reopening each file for fsync/fdatasync.
/// - `two-pass`: create, write, sync_file_range(WRITE), close; then reopen
///   each for sync_file_range(WAIT_BEFORE); then reopen each for
///   fdatasync(2). Starting write-out of every file before waiting on any
///   lets delayed allocation resolve for all of them and keeps the device
///   busy (Ts'o, Debian #605009, docs/classic-cases.md, case 3).
pub fn write_small_files<O: SmallFileOps>(
    ops: &mut O,
    files: &[(u64, u64)],
    policy: FileSync,
    pattern_of: &dyn Fn(u64) -> Pattern,
    ctx: &mut FileCtx<'_>,
) -> Result<SmallOutcome, OpError> {
    let mut out = SmallOutcome::default();
    let end_kind = ctx.end_sync_kind();
    for &(index, size) in files {
        if ctx.tunables.stop_requested() {
            out.stopped = true;
            return Ok(out);
        }
        let mut f = ops
            .create(index)
            .map_err(|e| op_err(index, "create", e, &out))?;
        let pattern = pattern_of(index);
        let mut sub = FileCtx {
            at: FileRef {
                job: ctx.at.job,
                file: index,
            },
            strategy: ctx.strategy,
            datasync: ctx.datasync,
            drop_behind: false,
            dontcache: false,
            tunables: ctx.tunables,
            observer: ctx.observer,
            progress: ctx.progress,
            stats: &mut *ctx.stats,
            rate: &mut *ctx.rate,
            buf: &mut *ctx.buf,
            pattern: &pattern,
        };
        let mut off = 0;
        while off < size {
            let len = sub.tunables.chunk().min(size - off);
            if !sub.rate.pace(sub.tunables, len) {
                // Stopped inside a file: close it (it is removed with the
                // others) and count it as not written.
                ops.close(index, f)
                    .map_err(|e| op_err(index, "close", e, &out))?;
                out.stopped = true;
                return Ok(out);
            }
            sub.timed_write(&mut f, off, len)
                .map_err(|e| op_err(index, &format!("write at offset {off}"), e, &out))?;
            off += len;
            out.bytes += len;
        }
        match policy {
            FileSync::None => {}
            FileSync::FsyncEach => sub
                .timed_sync(&mut f, end_kind, 0, 0)
                .map_err(|e| op_err(index, end_kind.name(), e, &out))?,
            FileSync::SrfThenFsync | FileSync::TwoPass => sub
                .timed_sync(&mut f, SyncKind::SrfWrite, 0, size)
                .map_err(|e| op_err(index, "sync_file_range(WRITE)", e, &out))?,
        }
        ops.close(index, f)
            .map_err(|e| op_err(index, "close", e, &out))?;
        out.files += 1;
    }
    let passes: &[(SyncKind, &str)] = match policy {
        FileSync::None => &[],
        FileSync::FsyncEach => {
            out.durable = true;
            &[]
        }
        FileSync::SrfThenFsync => &[(end_kind, "fsync pass")],
        FileSync::TwoPass => &[
            (SyncKind::SrfWaitBefore, "WAIT_BEFORE pass"),
            (SyncKind::Fdatasync, "fdatasync pass"),
        ],
    };
    for &(kind, what) in passes {
        for &(index, size) in files {
            if ctx.tunables.stop_requested() {
                out.stopped = true;
                return Ok(out);
            }
            let mut f = ops
                .reopen(index)
                .map_err(|e| op_err(index, &format!("{what}: reopen"), e, &out))?;
            let len = if kind == SyncKind::SrfWaitBefore {
                size
            } else {
                0
            };
            ctx.at.file = index;
            ctx.timed_sync(&mut f, kind, 0, len)
                .map_err(|e| op_err(index, what, e, &out))?;
            ops.close(index, f)
                .map_err(|e| op_err(index, &format!("{what}: close"), e, &out))?;
        }
        out.durable = true;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::ChunkBuf;
    use crate::event::NullObserver;
    use crate::schedule::{JobStats, RateLimiter};
    use crate::sink::{Call, RecordingSink, SrfFlags};
    use crate::spec::Strategy;
    use crate::tunables::LiveTunables;
    use std::sync::atomic::AtomicU64;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Op {
        Create(u64),
        Reopen(u64),
        Close(u64),
        Call(u64, Call),
    }

    #[derive(Default)]
    struct MockFiles {
        log: Vec<Op>,
    }

    struct MockFile {
        index: u64,
        sink: RecordingSink,
    }

    impl Sink for MockFile {
        fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.sink.write_at(buf, offset)
        }
        fn write_at_dontcache(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.sink.write_at_dontcache(buf, offset)
        }
        fn sync_file_range(&mut self, offset: u64, len: u64, flags: SrfFlags) -> io::Result<()> {
            self.sink.sync_file_range(offset, len, flags)
        }
        fn fdatasync(&mut self) -> io::Result<()> {
            self.sink.fdatasync()
        }
        fn fsync(&mut self) -> io::Result<()> {
            self.sink.fsync()
        }
        fn fadvise_dontneed(&mut self, offset: u64, len: u64) -> io::Result<()> {
            self.sink.fadvise_dontneed(offset, len)
        }
    }

    impl SmallFileOps for MockFiles {
        type File = MockFile;
        fn create(&mut self, index: u64) -> io::Result<MockFile> {
            self.log.push(Op::Create(index));
            Ok(MockFile {
                index,
                sink: RecordingSink::default(),
            })
        }
        fn reopen(&mut self, index: u64) -> io::Result<MockFile> {
            self.log.push(Op::Reopen(index));
            Ok(MockFile {
                index,
                sink: RecordingSink::default(),
            })
        }
        fn close(&mut self, index: u64, f: MockFile) -> io::Result<()> {
            assert_eq!(index, f.index);
            self.log
                .extend(f.sink.calls.into_iter().map(|c| Op::Call(index, c)));
            self.log.push(Op::Close(index));
            Ok(())
        }
    }

    fn run(policy: FileSync, datasync: bool, files: &[(u64, u64)]) -> (SmallOutcome, Vec<Op>) {
        let tunables = LiveTunables::new(8192, 4, None);
        let progress = AtomicU64::new(0);
        let mut stats = JobStats::default();
        let mut rate = RateLimiter::new(1);
        let mut buf = ChunkBuf::new(8192, 4096).unwrap();
        let p0 = Pattern::new(0, 0);
        let mut ctx = FileCtx {
            at: FileRef { job: 0, file: 0 },
            strategy: Strategy::Buffered,
            datasync,
            drop_behind: false,
            dontcache: false,
            tunables: &tunables,
            observer: &NullObserver,
            progress: &progress,
            stats: &mut stats,
            rate: &mut rate,
            buf: &mut buf,
            pattern: &p0,
        };
        let mut ops = MockFiles::default();
        let out =
            write_small_files(&mut ops, files, policy, &|i| Pattern::new(0, i), &mut ctx).unwrap();
        (out, ops.log)
    }

    const FILES: [(u64, u64); 2] = [(0, 10_000), (1, 4096)];

    fn wr(i: u64, offset: u64, len: u64) -> Op {
        Op::Call(i, Call::Write { offset, len })
    }

    fn first_pass(extra: impl Fn(u64, u64) -> Vec<Op>) -> Vec<Op> {
        let mut v = vec![Op::Create(0), wr(0, 0, 8192), wr(0, 8192, 1808)];
        v.extend(extra(0, 10_000));
        v.extend([Op::Close(0), Op::Create(1), wr(1, 0, 4096)]);
        v.extend(extra(1, 4096));
        v.push(Op::Close(1));
        v
    }

    #[test]
    fn none_writes_and_closes() {
        let (out, log) = run(FileSync::None, false, &FILES);
        assert_eq!(log, first_pass(|_, _| vec![]));
        assert_eq!((out.files, out.bytes, out.durable), (2, 14_096, false));
    }

    #[test]
    fn fsync_each_syncs_before_close() {
        let (out, log) = run(FileSync::FsyncEach, false, &FILES);
        assert_eq!(log, first_pass(|i, _| vec![Op::Call(i, Call::Fsync)]));
        assert!(out.durable);
        let (_, log) = run(FileSync::FsyncEach, true, &FILES);
        assert_eq!(log, first_pass(|i, _| vec![Op::Call(i, Call::Fdatasync)]));
    }

    fn srf_write(i: u64, size: u64) -> Vec<Op> {
        vec![Op::Call(
            i,
            Call::SyncFileRange {
                offset: 0,
                len: size,
                flags: SrfFlags::WRITE,
            },
        )]
    }

    #[test]
    fn srf_then_fsync_writes_out_each_then_fsyncs_all() {
        let (out, log) = run(FileSync::SrfThenFsync, false, &FILES);
        let mut want = first_pass(srf_write);
        for i in 0..2 {
            want.extend([Op::Reopen(i), Op::Call(i, Call::Fsync), Op::Close(i)]);
        }
        assert_eq!(log, want);
        assert!(out.durable);
    }

    #[test]
    fn two_pass_is_write_each_then_wait_all_then_fdatasync_all() {
        let (out, log) = run(FileSync::TwoPass, false, &FILES);
        let mut want = first_pass(srf_write);
        for (i, size) in FILES {
            want.extend([
                Op::Reopen(i),
                Op::Call(
                    i,
                    Call::SyncFileRange {
                        offset: 0,
                        len: size,
                        flags: SrfFlags::WAIT_BEFORE,
                    },
                ),
                Op::Close(i),
            ]);
        }
        for i in 0..2 {
            want.extend([Op::Reopen(i), Op::Call(i, Call::Fdatasync), Op::Close(i)]);
        }
        assert_eq!(log, want);
        assert!(out.durable);
    }
}
