//! The file operations a schedule issues, behind a trait so that schedules
//! (which call, in which order, on which range) are unit-tested without a
//! disk by [`RecordingSink`].
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// Flags of sync_file_range(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrfFlags(u32);

impl SrfFlags {
    /// Wait for write-out of pages already under writeback before doing
    /// anything else (sync_file_range(2), SYNC_FILE_RANGE_WAIT_BEFORE).
    pub const WAIT_BEFORE: SrfFlags = SrfFlags(libc::SYNC_FILE_RANGE_WAIT_BEFORE);
    /// Start write-out of dirty pages in the range, without waiting.
    pub const WRITE: SrfFlags = SrfFlags(libc::SYNC_FILE_RANGE_WRITE);
    pub const WAIT_AFTER: SrfFlags = SrfFlags(libc::SYNC_FILE_RANGE_WAIT_AFTER);

    pub fn bits(self) -> u32 {
        self.0
    }
}

/// File operations used by the synchronous strategies.
pub trait Sink {
    /// Writes all of `buf` at `offset` (retrying short writes).
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset` with pwritev2(2) and RWF_DONTCACHE:
    /// the kernel starts write-out of the range from the call and drops the
    /// pages once written. EOPNOTSUPP where the kernel (before 6.14) or the
    /// filesystem does not support it.
    fn write_at_dontcache(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// sync_file_range(2) on `[offset, offset+len)`; `len == 0` means "to
    /// the end of the file", as in the man page.
    fn sync_file_range(&mut self, offset: u64, len: u64, flags: SrfFlags) -> io::Result<()>;
    fn fdatasync(&mut self) -> io::Result<()>;
    fn fsync(&mut self) -> io::Result<()>;
    /// posix_fadvise(2) POSIX_FADV_DONTNEED on `[offset, offset+len)`: drop
    /// the range's clean pages from the page cache (drop-behind).
    fn fadvise_dontneed(&mut self, offset: u64, len: u64) -> io::Result<()>;
}

/// The real thing: a file descriptor.
#[derive(Debug)]
pub struct FileSink {
    file: File,
}

impl FileSink {
    pub fn new(file: File) -> Self {
        FileSink { file }
    }

    pub fn into_file(self) -> File {
        self.file
    }
}

/// RWF_DONTCACHE (include/uapi/linux/fs.h, Linux 6.14): "uncached"
/// buffered I/O; the pages are dropped once written back.
pub const RWF_DONTCACHE: i32 = 0x80;
// The value libc knows must be the kernel's.
const _: () = assert!(RWF_DONTCACHE == libc::RWF_DONTCACHE);

/// pwritev2(2) of all of `buf` at `offset` with `flags`, retrying short
/// writes and EINTR like `write_all_at`.
pub(crate) fn pwritev2_all(file: &File, buf: &[u8], offset: u64, flags: i32) -> io::Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        let rest = &buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        let off = to_off(offset + done as u64)?;
        // SAFETY: one valid iovec over memory we borrow for the call.
        let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, off, flags) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
    Ok(())
}

fn to_off(v: u64) -> io::Result<libc::off64_t> {
    libc::off64_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

impl Sink for FileSink {
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        // pwrite(2) may write less than asked (a signal, a nearly full fs);
        // write_all_at retries, and reports ENOSPC once nothing more fits.
        self.file.write_all_at(buf, offset)
    }

    fn write_at_dontcache(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        pwritev2_all(&self.file, buf, offset, RWF_DONTCACHE)
    }

    fn sync_file_range(&mut self, offset: u64, len: u64, flags: SrfFlags) -> io::Result<()> {
        let (off, len) = (to_off(offset)?, to_off(len)?);
        loop {
            // SAFETY: plain syscall on a descriptor we own; no memory is passed.
            let rc =
                unsafe { libc::sync_file_range(self.file.as_raw_fd(), off, len, flags.bits()) };
            if rc == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    fn fdatasync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn fsync(&mut self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn fadvise_dontneed(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let (off, len) = (to_off(offset)?, to_off(len)?);
        // SAFETY: plain syscall on a descriptor we own; no memory is passed.
        // posix_fadvise returns the error number instead of setting errno.
        let rc = unsafe {
            libc::posix_fadvise(self.file.as_raw_fd(), off, len, libc::POSIX_FADV_DONTNEED)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }
}

/// One recorded call of a [`RecordingSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Write {
        offset: u64,
        len: u64,
    },
    /// pwritev2(RWF_DONTCACHE).
    WriteUncached {
        offset: u64,
        len: u64,
    },
    SyncFileRange {
        offset: u64,
        len: u64,
        flags: SrfFlags,
    },
    Fdatasync,
    Fsync,
    /// posix_fadvise(POSIX_FADV_DONTNEED) on the range.
    DontNeed {
        offset: u64,
        len: u64,
    },
}

/// A sink that records its calls and can be told to fail one of them.
#[derive(Debug, Default)]
pub struct RecordingSink {
    pub calls: Vec<Call>,
    /// Fail the n-th call (0-based over all calls) with this errno.
    pub fail_at: Option<(usize, i32)>,
}

impl RecordingSink {
    fn record(&mut self, call: Call) -> io::Result<()> {
        let n = self.calls.len();
        self.calls.push(call);
        match self.fail_at {
            Some((at, errno)) if at == n => Err(io::Error::from_raw_os_error(errno)),
            _ => Ok(()),
        }
    }
}

impl Sink for RecordingSink {
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.record(Call::Write {
            offset,
            len: buf.len() as u64,
        })
    }
    fn write_at_dontcache(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.record(Call::WriteUncached {
            offset,
            len: buf.len() as u64,
        })
    }
    fn sync_file_range(&mut self, offset: u64, len: u64, flags: SrfFlags) -> io::Result<()> {
        self.record(Call::SyncFileRange { offset, len, flags })
    }
    fn fdatasync(&mut self) -> io::Result<()> {
        self.record(Call::Fdatasync)
    }
    fn fsync(&mut self) -> io::Result<()> {
        self.record(Call::Fsync)
    }
    fn fadvise_dontneed(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.record(Call::DontNeed { offset, len })
    }
}
