//! Checks before anything is written: every target directory exists, is
//! writable and has room for its files, and, with O_DIRECT, the chunk and
//! size fit the devices' logical block sizes.
use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, MIN_DIRECT_ALIGN, WriterConfig};
use crate::device;
use crate::error::WriterError;
use crate::plan::PlannedFile;
use crate::size::ByteSize;

/// What preflight learnt about the targets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Preflight {
    /// O_DIRECT alignment, when O_DIRECT is used.
    pub(crate) align: Option<u64>,
}

fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain old data; c is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn access_w(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: c is a valid C string.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Checks every target before anything is written.
pub(crate) fn preflight(
    cfg: &WriterConfig,
    plan: &[Vec<PlannedFile>],
) -> Result<Preflight, WriterError> {
    let spec = cfg.spec();
    let refuse =
        |dir: &Path, why: String| WriterError::Refused(format!("--dir {}: {why}", dir.display()));
    // Bytes each filesystem (st_dev) must take, and one dir to name for it.
    let mut need: HashMap<u64, (u64, PathBuf)> = HashMap::new();
    let mut align = None;
    for dir in &spec.dirs {
        let meta = fs::metadata(dir).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => refuse(dir, "does not exist".into()),
            _ => refuse(dir, e.to_string()),
        })?;
        if !meta.is_dir() {
            let what = if meta.file_type().is_block_device() {
                "is a block device; wbscope write only creates new files inside a directory"
            } else {
                "is not a directory"
            };
            return Err(refuse(dir, what.into()));
        }
        let st = statvfs(dir).map_err(|e| refuse(dir, format!("statvfs: {e}")))?;
        if st.f_flag & libc::ST_RDONLY != 0 {
            return Err(refuse(dir, "is on a read-only filesystem".into()));
        }
        access_w(dir).map_err(|e| refuse(dir, format!("not writable: {e}")))?;
        let bytes: u64 = plan
            .iter()
            .flatten()
            .filter(|f| f.path.parent() == Some(dir.as_path()))
            .map(|f| f.size)
            .sum();
        let entry = need.entry(meta.dev()).or_insert((0, dir.clone()));
        // Two --dir naming the same directory share its files: count once.
        if !spec.dirs.iter().take_while(|d| *d != dir).any(|d| d == dir) {
            entry.0 += bytes;
        }
        if !spec.skip_space_check {
            let avail = st.f_bavail.saturating_mul(st.f_frsize);
            if entry.0 > avail {
                return Err(refuse(
                    dir,
                    format!(
                        "the run needs {} but only {} is free on this filesystem",
                        ByteSize(entry.0),
                        ByteSize(avail)
                    ),
                ));
            }
        }
        if cfg.uses_o_direct() {
            // The device's logical block size; an unknown device (tmpfs,
            // btrfs) gets the 512 bytes every block device accepts, and the
            // kernel has the last word (EINVAL).
            let lbs = device::logical_block_size(dir)
                .map_err(|e| refuse(dir, e.to_string()))?
                .unwrap_or(MIN_DIRECT_ALIGN);
            for (what, value) in [("chunk", spec.chunk), ("size", spec.size)] {
                if value % lbs != 0 {
                    return Err(WriterError::Config(ConfigError::Unaligned {
                        what,
                        value: ByteSize(value),
                        align: lbs,
                    }));
                }
            }
            align = Some(align.unwrap_or(0).max(lbs));
        }
    }
    if cfg.uses_dontcache() {
        for dir in &spec.dirs {
            if dontcache_unsupported(dir) {
                return Err(WriterError::Refused(dontcache_refusal(dir)));
            }
        }
    }
    Ok(Preflight { align })
}

/// The one line that refuses an uncached run on `dir`.
pub(crate) fn dontcache_refusal(dir: &Path) -> String {
    format!(
        "--dir {}: this kernel or filesystem does not support uncached writes \
         (RWF_DONTCACHE: EOPNOTSUPP; Linux 6.14+ on a filesystem that supports \
         it, e.g. ext4, xfs, btrfs; not tmpfs); nothing was written",
        dir.display()
    )
}

/// Whether pwritev2(2) with RWF_DONTCACHE is refused with EOPNOTSUPP on
/// `dir`'s filesystem, asked without writing anything: on an unnamed
/// O_TMPFILE, one iovec of one byte at address 0. The flag is checked
/// first (kiocb_set_rw_flags() in the write path, include/linux/fs.h:
/// EOPNOTSUPP unless the file's operations have FOP_DONTCACHE); a
/// supported flag then fails with EFAULT on the bad address before a page
/// is touched. io_uring checks the same flag with the same function.
/// Anything else (no O_TMPFILE on this filesystem, say) is not a refusal:
/// the first real write has the last word.
pub(crate) fn dontcache_unsupported(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid C string; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return false;
    }
    let iov = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 1,
    };
    // SAFETY: a valid iovec whose base the kernel checks (EFAULT).
    let rc = unsafe { libc::pwritev2(fd, &iov, 1, 0, crate::sink::RWF_DONTCACHE) };
    let err = io::Error::last_os_error();
    // SAFETY: fd is ours and closed once.
    unsafe { libc::close(fd) };
    rc < 0 && err.raw_os_error() == Some(libc::EOPNOTSUPP)
}
