//! The bottom of wbscope's own crates: what every layer above the model
//! may need and none should keep its own copy of. The one [`UsageError`]
//! (exit code 2), the escaping of untrusted text before a terminal sees it
//! ([`escape`]), and small facts and guards about the host process: one
//! signal guard, the clocks the records are stamped with, the host and
//! kernel names, `statvfs`, `sync` + dropping the page cache, and the one
//! single-process lock ([`lock`]).
pub mod error;
pub mod escape;
pub mod lock;

pub use error::UsageError;
use std::{fs, io, path::Path};

use anyhow::Context as _;

// The one signal guard of the workspace lives with the scratch
// filesystems it exists for (scratchfs::signal): xtask's benches use it too.
pub use scratchfs::signal::{SignalGuard, caught_signal, check_interrupted, interrupted};

/// This host's name (`/proc/sys/kernel/hostname`), or "unknown".
pub fn hostname() -> String {
    proc_line("/proc/sys/kernel/hostname")
}

/// The running kernel's release (`uname -r`), or "unknown".
pub fn kernel_release() -> String {
    proc_line("/proc/sys/kernel/osrelease")
}

/// The running kernel's `(major, minor)`, if its release says.
pub fn kernel_version() -> Option<(u32, u32)> {
    release_version(&kernel_release())
}

/// `(major, minor)` of a release string ("5.10.0-46-amd64": (5, 10)).
pub fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    Some((parts.next()?, parts.next()?))
}

fn proc_line(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `sync` and `echo 3 > /proc/sys/vm/drop_caches`.
pub fn sync_and_drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").context("writing /proc/sys/vm/drop_caches")
}

/// statvfs(3) of the filesystem under `path`.
pub fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// CLOCK_MONOTONIC now, ns: the clock of `bpf_ktime_get_ns()`, which
/// stamps the records' `start_ns`.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_BOOTTIME now, ns: the clock of a process's start time in
/// /proc/PID/stat (`task->start_boottime`).
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// User plus system CPU time of this process so far, ns (all threads).
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_gives_its_major_and_minor() {
        assert_eq!(release_version("5.10.0-46-amd64"), Some((5, 10)));
        assert_eq!(release_version("6.12.118+deb13-rt-amd64"), Some((6, 12)));
        assert_eq!(release_version("7.3"), Some((7, 3)));
        assert_eq!(release_version("unknown"), None);
        assert_eq!(release_version("6"), None);
    }
}
