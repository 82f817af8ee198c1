//! Writing a store within its bounds at every block, not only at rotation:
//! before a block is written, the segments it would push past `--keep`,
//! `--max-size` (the active segment and the block itself counted) or the
//! free space `--min-free` asks for are deleted, oldest first; if the
//! filesystem is still short, the block is not kept (counted, said once,
//! and named in the next block kept: [`NotKept`]) and the recorder goes on.
//!
//! One block per interval, written whole with one write(2) and
//! fdatasync(2)ed, so that `kill -9` or a power cut loses at most the
//! interval being gathered. The clock, the free space and the sync are
//! behind [`Env`] so that the bounds are tested without the kernel's
//! help (tests below).
//!
//! Everything after [`StoreWriter::open`] goes through the directory's
//! descriptor, opened there: segments are created with openat(2)
//! (O_CREAT|O_EXCL), deleted with unlinkat(2), the free space measured
//! with fstatfs(2), and the lock is the descriptor taken at open. So the
//! recorder keeps working once its privileges are dropped: the seccomp
//! filter allows those calls on that descriptor only
//! (`tracer::seccomp::WritableDir`), and [`StoreWriter::give_to`] makes
//! the directory the drop user's beforehand.
use std::{
    collections::VecDeque,
    fs::{self, File},
    io::{self, Write as _},
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use rustix::fs::{AtFlags, Gid, Mode, OFlags, Uid};

use super::{SegmentFile, StoreLock, list, segment_name};
use crate::{
    FORMAT_VERSION_BLOCKS, FRAME_HEADER_LEN, FrameKind, Header, SegmentInfo,
    block::{self, BLOCK_RAW_TARGET, BlockBuilder, BlockMeta, META_MAX, NotKept},
    writer::encode_header,
};
use wbscope_model::CallRecord;

/// The bounds a store is kept within.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    /// Segments whose frames are all older than this are deleted.
    pub keep: Option<Duration>,
    /// The store's bytes (its segments, as allocated) never exceed this.
    pub max_size: u64,
    /// Free space on the store's filesystem, percent of its size, that
    /// the store never takes.
    pub min_free_percent: f64,
}

/// A segment is closed at this share of `--max-size`, so that deleting
/// the oldest one frees at most this much of the store and the active
/// one is never a large share of it.
pub(crate) const SEGMENTS_PER_STORE: u64 = 16;
/// Smallest segment, however small `--max-size`: a header (a few KiB of
/// probe plan) and some blocks.
const MIN_SEGMENT: u64 = 64 << 10;
/// A segment is closed after this long, so that `--keep` drops by the
/// hour and a moment is found within one segment of an hour at most.
const SEGMENT_AGE: Duration = Duration::from_secs(3600);
/// The unit a file's bytes are counted in: what the filesystem allocates
/// (ext4's and most filesystems' block size), so that the bound holds for
/// `du` as well as for the files' lengths.
const ALLOC_UNIT: u64 = 4096;

/// What the store holds besides its segments: the lock file and the
/// directory's own block (`du` counts both; measured 8 KiB over the
/// segments on ext4), counted against `--max-size` too.
const STORE_OVERHEAD: u64 = 2 * ALLOC_UNIT;

/// A file's bytes as the filesystem counts them: whole units, and one
/// more for its block map (a segment appended to between other files'
/// writes has more extents than ext4 keeps in the inode, four, and gets
/// an extent block: the kernel test measured 8 KiB over the data this way).
fn allocated(bytes: u64) -> u64 {
    bytes.div_ceil(ALLOC_UNIT) * ALLOC_UNIT + ALLOC_UNIT
}

/// Free and total bytes of a filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Available to an unprivileged writer (statvfs f_bavail).
    pub(crate) avail: u64,
    pub(crate) total: u64,
}

/// What the store needs from the system.
pub trait Env {
    /// Wall clock and CLOCK_MONOTONIC now, ns.
    fn now(&self) -> (u64, u64);
    /// The filesystem of the store's directory (its descriptor).
    fn space(&self, dir: BorrowedFd<'_>) -> io::Result<Space>;
    /// Makes a segment's written bytes durable.
    fn sync(&self, file: &File) -> io::Result<()>;
}

/// The real system.
pub struct SystemEnv;

impl Env for SystemEnv {
    fn now(&self) -> (u64, u64) {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (unix, wbscope_sys::monotonic_ns())
    }

    fn space(&self, dir: BorrowedFd<'_>) -> io::Result<Space> {
        // fstatfs(2) on the descriptor (rustix fills statvfs's fields from
        // it: Linux has no fstatvfs call).
        let st = rustix::fs::fstatvfs(dir)?;
        Ok(Space {
            avail: st.f_bavail.saturating_mul(st.f_frsize),
            total: st.f_blocks.saturating_mul(st.f_frsize),
        })
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        // SAFETY: fdatasync on a descriptor we own.
        if unsafe { libc::fdatasync(file.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// What the writer did, for its last words and the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub blocks: u64,
    /// Bytes of the frames before compression.
    pub raw_bytes: u64,
    /// Bytes written (headers and blocks).
    pub written_bytes: u64,
    pub(crate) segments_opened: u64,
    pub segments_deleted: u64,
    pub calls_not_kept: u64,
    pub intervals_not_kept: u64,
}

struct Active {
    file: File,
    seg: SegmentFile,
}

/// How segments are created: new files only (O_CREAT|O_EXCL, never an
/// existing one opened or truncated), appended to (after a full
/// filesystem's partial write is cut back, the next block goes at the
/// new end). The seccomp filter after the drop checks the O_CREAT|O_EXCL
/// bits of the same call.
const SEGMENT_FLAGS: OFlags = OFlags::WRONLY
    .union(OFlags::APPEND)
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::CLOEXEC);

/// A segment's permissions before the umask: what File::create gives.
const SEGMENT_MODE: u32 = 0o666;

pub struct StoreWriter<E: Env> {
    dir: PathBuf,
    /// The directory, opened once: every later call goes through it.
    dir_fd: OwnedFd,
    bounds: Bounds,
    segment_bytes: u64,
    env: E,
    lock: StoreLock,
    header: Header,
    /// Closed segments, oldest first.
    closed: VecDeque<SegmentFile>,
    active: Option<Active>,
    block: BlockBuilder,
    block_opened_ns: u64,
    zstd: zstd::bulk::Compressor<'static>,
    /// Frames not kept since the last block written.
    not_kept: Option<NotKept>,
    pub stats: StoreStats,
}

impl<E: Env> StoreWriter<E> {
    /// Opens (creating it if need be) and locks the store in `dir`; the
    /// segments already there count toward the bounds.
    pub fn open(dir: &Path, bounds: Bounds, header: Header, env: E) -> anyhow::Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir_fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)
        .with_context(|| format!("opening {}", dir.display()))?;
        let lock = StoreLock::acquire(dir)?;
        let closed = list(dir).with_context(|| format!("reading {}", dir.display()))?;
        let segment_bytes = (bounds.max_size / SEGMENTS_PER_STORE).max(MIN_SEGMENT);
        let zstd = zstd::bulk::Compressor::new(block::LEVEL).context("starting zstd")?;
        let block_opened_ns = env.now().0;
        Ok(StoreWriter {
            dir: dir.to_path_buf(),
            dir_fd,
            bounds,
            segment_bytes,
            env,
            lock,
            header,
            closed: closed.into(),
            active: None,
            block: BlockBuilder::default(),
            block_opened_ns,
            zstd,
            not_kept: None,
            stats: StoreStats::default(),
        })
    }

    pub fn call(&mut self, call: &CallRecord) -> anyhow::Result<()> {
        self.block.call(call)?;
        if self.block.raw_len() >= BLOCK_RAW_TARGET {
            self.close_block()?;
        }
        Ok(())
    }

    /// An interval line, which closes the block.
    pub fn interval<T: serde::Serialize>(&mut self, line: &T) -> anyhow::Result<()> {
        self.block.json(FrameKind::Interval, line)?;
        self.close_block()
    }

    /// The summary, which closes the last block.
    pub fn summary<T: serde::Serialize>(&mut self, summary: &T) -> anyhow::Result<()> {
        self.block.json(FrameKind::Summary, summary)?;
        self.close_block()
    }

    /// The store directory's descriptor, through which the writer works
    /// from [`StoreWriter::open`] on (for the drop's seccomp rules and
    /// Landlock ruleset).
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir_fd.as_fd()
    }

    /// Makes the store the user's whom the run becomes when it drops its
    /// privileges (uid, gid), so that it can still create and delete
    /// segments there: the directory, its segments and its lock, each
    /// only if owned by someone else (called as root, before the drop;
    /// the store is the recorder's own). Other files are left alone.
    pub fn give_to(&self, uid: u32, gid: u32) -> anyhow::Result<()> {
        let (owner, group) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        let give = |what: &Path,
                    st: rustix::io::Result<rustix::fs::Stat>,
                    chown: &dyn Fn() -> rustix::io::Result<()>|
         -> anyhow::Result<()> {
            match st {
                Ok(st) if st.st_uid == uid && st.st_gid == gid => Ok(()),
                // Deleted meanwhile (a segment): nothing to give.
                Err(rustix::io::Errno::NOENT) => Ok(()),
                st => st
                    .and_then(|_| chown())
                    .map_err(io::Error::from)
                    .with_context(|| {
                        format!(
                            "giving {} to uid {uid} gid {gid}, the user the run becomes after \
                         attaching (--user; or --no-drop)",
                            what.display()
                        )
                    }),
            }
        };
        give(&self.dir, rustix::fs::fstat(&self.dir_fd), &|| {
            rustix::fs::fchown(&self.dir_fd, owner, group)
        })?;
        give(
            &self.dir.join(super::LOCK_FILE),
            rustix::fs::fstat(self.lock.file()),
            &|| rustix::fs::fchown(self.lock.file(), owner, group),
        )?;
        for seg in &self.closed {
            let name = seg.file_name();
            // Not following a link: the link itself, never what it names.
            let nofollow = AtFlags::SYMLINK_NOFOLLOW;
            give(
                &seg.path,
                rustix::fs::statat(&self.dir_fd, name, nofollow),
                &|| rustix::fs::chownat(&self.dir_fd, name, owner, group, nofollow),
            )?;
        }
        Ok(())
    }

    /// The segments' bytes as counted against `--max-size`.
    pub(crate) fn size(&self) -> u64 {
        self.closed.iter().map(|s| allocated(s.bytes)).sum::<u64>()
            + self.active.as_ref().map_or(0, |a| allocated(a.seg.bytes))
    }

    fn close_block(&mut self) -> anyhow::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let (now, mono) = self.env.now();
        let intervals = u64::from(self.block.intervals);
        let body = self.block.compress(&mut self.zstd)?;
        let need = (body.body.len() + META_MAX + FRAME_HEADER_LEN) as u64;
        if !self.make_room(need, now)? {
            self.not_kept_(now, u64::from(body.calls), intervals);
            self.block_opened_ns = now;
            return Ok(());
        }
        let meta = BlockMeta {
            first_unix_ns: self.block_opened_ns.min(now),
            last_unix_ns: now,
            monotonic_ns: mono,
            raw_len: body.raw_len,
            frames: body.frames,
            calls: body.calls,
            not_kept: self.not_kept.clone(),
        };
        let frame = block::frame(&meta, &body.body)?;
        if self.append(&frame, now, mono)? {
            if let Some(nk) = self.not_kept.take() {
                eprintln!(
                    "wbscope: store: writing again; {} calls and {} intervals were not kept",
                    nk.calls, nk.intervals
                );
            }
            self.stats.blocks += 1;
            self.stats.raw_bytes += u64::from(body.raw_len);
        } else {
            self.not_kept_(now, u64::from(body.calls), intervals);
        }
        self.block_opened_ns = now;
        Ok(())
    }

    /// Counts a block not kept, saying so when the first one is.
    fn not_kept_(&mut self, now: u64, calls: u64, intervals: u64) {
        let nk = self.not_kept.get_or_insert_with(|| {
            eprintln!(
                "wbscope: store: {} is short of space (--max-size or --min-free): \
                 not writing frames until there is room again",
                self.dir.display()
            );
            NotKept {
                from_unix_ns: self.block_opened_ns,
                ..NotKept::default()
            }
        });
        nk.to_unix_ns = now;
        nk.calls += calls;
        nk.intervals += intervals;
        self.stats.calls_not_kept += calls;
        self.stats.intervals_not_kept += intervals;
    }

    /// Rotates and deletes so that `need` more bytes fit within every
    /// bound; false if they cannot.
    fn make_room(&mut self, need: u64, now: u64) -> anyhow::Result<bool> {
        if let Some(a) = &self.active
            && (a.seg.bytes + need > self.segment_bytes
                || now.saturating_sub(a.seg.start_unix_ns) >= SEGMENT_AGE.as_nanos() as u64)
        {
            self.rotate();
        }
        if let Some(keep) = self.bounds.keep {
            let horizon = now.saturating_sub(keep.as_nanos() as u64);
            // A closed segment's frames end where the next one starts.
            while !self.closed.is_empty() {
                let end = self
                    .closed
                    .get(1)
                    .map(|s| s.start_unix_ns)
                    .or(self.active.as_ref().map(|a| a.seg.start_unix_ns));
                match end {
                    Some(end) if end < horizon => self.delete_oldest()?,
                    _ => break,
                }
            }
        }
        loop {
            let header = if self.active.is_none() {
                self.header_len()? as u64
            } else {
                0
            };
            let total = self.size() + allocated(need + header) + STORE_OVERHEAD;
            if total <= self.bounds.max_size {
                break;
            }
            if !self.closed.is_empty() {
                self.delete_oldest()?;
            } else if self.active.is_some() {
                self.rotate();
            } else {
                return Ok(false);
            }
        }
        loop {
            let header = if self.active.is_none() {
                self.header_len()? as u64
            } else {
                0
            };
            let space = self
                .env
                .space(self.dir_fd.as_fd())
                .with_context(|| format!("statfs {}", self.dir.display()))?;
            let reserve = (space.total as f64 * self.bounds.min_free_percent / 100.0).ceil() as u64;
            if space.avail >= allocated(need + header) + ALLOC_UNIT + reserve {
                return Ok(true);
            }
            if self.closed.is_empty() {
                return Ok(false);
            }
            self.delete_oldest()?;
        }
    }

    fn header_len(&self) -> anyhow::Result<usize> {
        // The segment's header with its segment field (of fixed width).
        Ok(self.segment_header(u64::MAX, u64::MAX)?.len())
    }

    fn segment_header(&self, unix_ns: u64, mono: u64) -> anyhow::Result<Vec<u8>> {
        let mut header = self.header.clone();
        header.format_version = FORMAT_VERSION_BLOCKS;
        header.segment = Some(SegmentInfo {
            opened_unix_ns: unix_ns,
            opened_monotonic_ns: mono,
        });
        Ok(encode_header(&header, FORMAT_VERSION_BLOCKS)?)
    }

    fn rotate(&mut self) {
        if let Some(a) = self.active.take() {
            self.closed.push_back(a.seg);
        }
    }

    fn delete_oldest(&mut self) -> anyhow::Result<()> {
        let Some(seg) = self.closed.pop_front() else {
            return Ok(());
        };
        match self.unlink(&seg) {
            Ok(()) => {}
            // Deleted by someone else: gone all the same.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {}", seg.path.display())),
        }
        self.stats.segments_deleted += 1;
        Ok(())
    }

    /// Deletes a segment through the directory's descriptor.
    fn unlink(&self, seg: &SegmentFile) -> io::Result<()> {
        rustix::fs::unlinkat(&self.dir_fd, seg.file_name(), AtFlags::empty())
            .map_err(io::Error::from)
    }

    /// Writes a block to the active segment (opening one first if need
    /// be); false if the filesystem was full after all (the bytes are
    /// taken back and the block counted as not kept).
    fn append(&mut self, frame: &[u8], now: u64, mono: u64) -> anyhow::Result<bool> {
        if self.active.is_none() {
            let head = self.segment_header(now, mono)?;
            let mut at = now;
            let (file, path) = loop {
                let name = segment_name(at);
                let path = self.dir.join(&name);
                match rustix::fs::openat(
                    &self.dir_fd,
                    name.as_str(),
                    SEGMENT_FLAGS,
                    Mode::from_raw_mode(SEGMENT_MODE),
                ) {
                    Ok(fd) => break (File::from(fd), path),
                    Err(rustix::io::Errno::EXIST) => at += 1,
                    Err(e) => {
                        return Err(io::Error::from(e))
                            .with_context(|| format!("creating {}", path.display()));
                    }
                }
            };
            let mut active = Active {
                file,
                seg: SegmentFile {
                    path,
                    start_unix_ns: at,
                    bytes: 0,
                },
            };
            if !self.write(&mut active, &head)? {
                let _ = self.unlink(&active.seg);
                return Ok(false);
            }
            self.stats.segments_opened += 1;
            self.active = Some(active);
        }
        let Some(mut active) = self.active.take() else {
            return Ok(false);
        };
        let kept = self.write(&mut active, frame)?;
        self.active = Some(active);
        Ok(kept)
    }

    /// One write and a sync; a full filesystem takes the bytes back and
    /// says false, any other error is the recorder's end.
    fn write(&mut self, active: &mut Active, bytes: &[u8]) -> anyhow::Result<bool> {
        let result = active
            .file
            .write_all(bytes)
            .and_then(|()| self.env.sync(&active.file));
        match result {
            Ok(()) => {
                active.seg.bytes += bytes.len() as u64;
                self.stats.written_bytes += bytes.len() as u64;
                Ok(true)
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
                // What went out before the error is cut back, so that the
                // segment ends at its last whole block.
                active
                    .file
                    .set_len(active.seg.bytes)
                    .with_context(|| format!("truncating {}", active.seg.path.display()))?;
                Ok(false)
            }
            Err(e) => Err(e).with_context(|| format!("writing {}", active.seg.path.display())),
        }
    }
}

/// Test fixtures (the store writer's faked `Env`), also for the tests
/// of crates above (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
// Built without cfg(test) for the tests of the crates above, which use
// only some of these fixtures.
#[cfg_attr(not(test), allow(dead_code, unused_imports))]
#[path = "writer_tests.rs"]
pub mod tests;
