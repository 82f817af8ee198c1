//! Counting how often a tracepoint fires, with no BPF program: one
//! perf_event_open(2) counter per CPU (PERF_TYPE_TRACEPOINT, counting
//! mode, no samples), read once at the end. Used for
//! `io_uring:io_uring_queue_async_work` (io_uring/io_uring.c: a request
//! handed to an io-wq worker thread instead of completing inline), which
//! fires only while io_uring is used: the counter is open for one traced
//! window and closed after it.
use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::path::Path;

use anyhow::Context as _;

/// The first 64 bytes of `struct perf_event_attr`
/// (include/uapi/linux/perf_event.h, PERF_ATTR_SIZE_VER0): all a counting
/// tracepoint event needs; the kernel zero-extends a shorter struct.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// Bit fields: disabled (bit 0), inherit (1), ... all off.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_ATTR_SIZE_VER0: u32 = 64;
/// `PERF_TYPE_TRACEPOINT` of `enum perf_type_id`.
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `PERF_FLAG_FD_CLOEXEC` (include/uapi/linux/perf_event.h).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// A system-wide count of one tracepoint, from when it was opened.
pub struct TracepointCounter {
    per_cpu: Vec<File>,
}

impl TracepointCounter {
    /// Opens one counter per CPU on `system:event`. Fails when the event
    /// does not exist (io_uring built out) or perf events are not allowed
    /// (no CAP_PERFMON, perf_event_paranoid).
    pub fn open(system: &str, event: &str) -> anyhow::Result<TracepointCounter> {
        let root = super::tracefs::ensure_mounted()?;
        let id = event_id(&root, &format!("{system}/{event}"))?;
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as i32;
        let mut per_cpu = Vec::new();
        let mut last_err = None;
        for cpu in 0..cpus {
            match open_tracepoint(id, cpu, false) {
                // An offline CPU (ENODEV) is skipped; any other error is
                // reported if no CPU could be counted.
                Err(e) => last_err = Some(e),
                Ok(fd) => per_cpu.push(File::from(fd)),
            }
        }
        if per_cpu.is_empty() {
            let e = last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENODEV));
            return Err(e).with_context(|| format!("perf_event_open on {system}:{event}"));
        }
        Ok(TracepointCounter { per_cpu })
    }

    /// Events since the counter was opened, over every CPU.
    pub fn read(&mut self) -> anyhow::Result<u64> {
        let mut total = 0u64;
        for f in &mut self.per_cpu {
            let mut buf = [0u8; 8];
            f.read_exact(&mut buf).context("reading a perf counter")?;
            total += u64::from_ne_bytes(buf);
        }
        Ok(total)
    }
}

/// The id tracefs at `tracefs` gives the trace event `name`
/// (`system/event`, the directory under `events/`).
pub(super) fn event_id(tracefs: &Path, name: &str) -> anyhow::Result<u64> {
    let id_path = tracefs.join("events").join(name).join("id");
    std::fs::read_to_string(&id_path)
        .with_context(|| format!("reading {}", id_path.display()))?
        .trim()
        .parse()
        .with_context(|| format!("parsing {}", id_path.display()))
}

/// perf_event_open(2) of the tracepoint event `id`, every task (pid -1)
/// on `cpu`: a counter, or with `for_bpf` an event a BPF program is set
/// on (`PERF_EVENT_IOC_SET_BPF`; one sample per hit, which is how the
/// program runs; a program on a trace event runs on every CPU whatever
/// the event's).
pub(super) fn open_tracepoint(id: u64, cpu: i32, for_bpf: bool) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_TRACEPOINT,
        size: PERF_ATTR_SIZE_VER0,
        config: id,
        sample_period: u64::from(for_bpf),
        wakeup_events: u32::from(for_bpf),
        ..PerfEventAttr::default()
    };
    // SAFETY: attr is a valid VER0 attribute that outlives the call; no
    // group; the flags are the documented close-on-exec.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &raw const attr,
            -1 as libc::pid_t,
            cpu,
            -1 as RawFd,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attr_is_the_kernels_version_0_layout() {
        assert_eq!(
            std::mem::size_of::<PerfEventAttr>(),
            PERF_ATTR_SIZE_VER0 as usize
        );
    }
}
