//! Small facts and guards about the host process that every layer may
//! need: one signal guard, the page size, the host and kernel names,
//! `sync` + dropping the page cache. No module above keeps its own copy.
use std::{fs, io, path::Path};

use anyhow::Context as _;

// The one signal guard of the workspace lives with the scratch
// filesystems it exists for (scratchfs::signal): xtask's benches use it too.
pub(crate) use scratchfs::signal::{SignalGuard, caught_signal, check_interrupted, interrupted};

/// Page size the kernel counts pages in (4 KiB on x86_64).
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as u64 } else { 4096 }
}

/// log2 of the page size (pages are a power of two).
pub(crate) fn page_shift() -> u32 {
    page_size().trailing_zeros()
}

/// This host's name (`/proc/sys/kernel/hostname`), or "unknown".
pub(crate) fn hostname() -> String {
    proc_line("/proc/sys/kernel/hostname")
}

/// The running kernel's release (`uname -r`), or "unknown".
pub(crate) fn kernel_release() -> String {
    proc_line("/proc/sys/kernel/osrelease")
}

fn proc_line(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `sync` and `echo 3 > /proc/sys/vm/drop_caches`.
pub(crate) fn sync_and_drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").context("writing /proc/sys/vm/drop_caches")
}

/// statvfs(3) of the filesystem under `path`.
pub(crate) fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
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
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_BOOTTIME now, ns: the clock of a process's start time in
/// /proc/PID/stat (`task->start_boottime`).
pub(crate) fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// User plus system CPU time of this process so far, ns (all threads).
pub(crate) fn process_cpu_ns() -> u64 {
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
    fn page_shift_matches_the_page_size() {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        assert_eq!(1i64 << page_shift(), size);
        assert_eq!(page_size() as i64, size);
    }
}
