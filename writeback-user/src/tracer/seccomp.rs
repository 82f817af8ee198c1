//! The one list of system calls `trace`, `record` and the Prometheus
//! exporter make after their privileges are dropped
//! (`privileges::drop_after_attach`); any other kills the process
//! (SECCOMP_RET_KILL_PROCESS: SIGSYS, and an audit record naming the
//! call). Found by running the commands under `strace -f` over all their
//! paths (intervals, ring drain, the exporter's connections with and
//! without TLS, signals, output to a file, the terminal and a closed pipe,
//! exit) and keeping what came after the drop; docs/production.md says
//! how to read a denial.
//!
//! What is not here, on purpose: open/openat (everything read later is
//! opened before: `/proc/vmstat`, the maps, the output), execve, fork,
//! socket/bind/listen/connect (the listener is bound before), ptrace,
//! mount, setuid & co., and every `bpf` command that loads or attaches.
use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Calls allowed with any arguments, in groups, each with why. Seen
/// under strace after the drop in every path (the list in the module
/// comment); a few the same paths need on other kernels or under
/// conditions the runs did not reach are marked so.
const GROUPS: &[(&str, &[libc::c_long])] = &[
    (
        // The allocator (glibc malloc: brk for the main arena, mmap and
        // munmap for large blocks, mremap to grow them, madvise to give
        // pages back), and the ring buffers unmapped when the tracer is
        // dropped. mmap and mprotect are in [`NO_EXEC`], not here.
        "memory",
        &[
            libc::SYS_brk,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_madvise,
        ],
    ),
    (
        // Descriptors opened before the drop: stdout (terminal, file or
        // pipe), stderr and --log, the recording, the exporter's
        // connections (writev: hyper's headers and body), /proc/vmstat and
        // /proc/self/mountinfo read again from offset 0 (lseek; statx and
        // fstat for std's size hint), fcntl and close of the programs'
        // descriptors at exit. fsync/fdatasync: a recording made durable.
        "reading and writing open descriptors",
        &[
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_writev,
            libc::SYS_lseek,
            libc::SYS_close,
            libc::SYS_fcntl,
            libc::SYS_statx,
            libc::SYS_fstat,
            libc::SYS_newfstatat,
            libc::SYS_fsync,
            libc::SYS_fdatasync,
        ],
    ),
    (
        // tokio's reactor (epoll on the ring buffers, the log buffer and
        // the sockets) and timers (epoll timeouts: the interval, the
        // ring's 100 ms drain, the exporter's timeouts); futex for locks;
        // clock_gettime when the vDSO cannot answer; epoll_pwait is the
        // only epoll wait of some architectures.
        "async runtime",
        &[
            libc::SYS_epoll_wait,
            libc::SYS_epoll_pwait,
            libc::SYS_epoll_ctl,
            libc::SYS_clock_gettime,
            libc::SYS_futex,
            libc::SYS_getpid,
            libc::SYS_gettid,
        ],
    ),
    (
        // SIGINT/SIGTERM/SIGHUP end the run cleanly: tokio installs its
        // handlers (sigaction) when the loop starts; a handler wakes the
        // loop through the socket pair made with the runtime (send(2) is
        // sendto, recv(2) recvfrom); returning from it is rt_sigreturn.
        "signals",
        &[
            libc::SYS_rt_sigaction,
            libc::SYS_rt_sigprocmask,
            libc::SYS_rt_sigreturn,
            libc::SYS_sigaltstack,
            libc::SYS_sendto,
            libc::SYS_recvfrom,
        ],
    ),
    (
        // The exporter: accepting on the listener bound before the drop
        // (each connection's reads and writes are above), and hyper's
        // shutdown of a connection once answered.
        "exporter connections",
        &[libc::SYS_accept4, libc::SYS_shutdown],
    ),
    (
        // TLS (rustls on ring) draws its randomness from the kernel.
        "randomness",
        &[libc::SYS_getrandom],
    ),
    ("exit", &[libc::SYS_exit, libc::SYS_exit_group]),
];

/// mmap and mprotect, allowed only without PROT_EXEC (third argument):
/// the allocator never maps code, and code mapped or made executable
/// after the drop is what an exploit would want.
const NO_EXEC: &[libc::c_long] = &[libc::SYS_mmap, libc::SYS_mprotect];

/// ioctl, allowed only as PERF_EVENT_IOC_DISABLE (`_IO('$', 1)`,
/// include/uapi/linux/perf_event.h): aya disables a program attached
/// through a perf event when the tracer is dropped, on kernels without
/// BPF links for perf events (before 5.15; 6.18 closes a link instead).
const PERF_EVENT_IOC_DISABLE: u64 = 0x2401;

/// `bpf(2)` commands allowed (first argument; `enum bpf_cmd` of
/// include/uapi/linux/bpf.h), all on descriptors opened before the drop:
/// reading the maps, writing GLOBAL_THRESH, removing closed generic calls,
/// the programs' run-time statistics, and BPF_ITER_CREATE so that an
/// iterator attached before the drop can be read every interval. Nothing
/// that creates a map, loads a program or attaches one.
const BPF_COMMANDS: &[(u64, &str)] = &[
    (1, "BPF_MAP_LOOKUP_ELEM"),
    (2, "BPF_MAP_UPDATE_ELEM"),
    (3, "BPF_MAP_DELETE_ELEM"),
    (4, "BPF_MAP_GET_NEXT_KEY"),
    (15, "BPF_OBJ_GET_INFO_BY_FD"),
    (33, "BPF_ITER_CREATE"),
];

/// System calls the filter allows (`bpf` and `ioctl` counted once).
pub(crate) fn allowed_count() -> usize {
    GROUPS.iter().map(|(_, calls)| calls.len()).sum::<usize>() + NO_EXEC.len() + 2
}

/// One rule: argument `arg` (a 64-bit word) masked with `mask` equals
/// `value`.
fn arg_is(arg: u8, mask: u64, value: u64) -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )?])
}

/// The compiled filter for this machine's architecture.
pub(crate) fn filter() -> anyhow::Result<BpfProgram> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, calls) in GROUPS {
        for &call in *calls {
            // No rule: allowed whatever the arguments.
            rules.insert(call, Vec::new());
        }
    }
    let bpf = BPF_COMMANDS
        .iter()
        .map(|&(cmd, _)| {
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                cmd,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_bpf, bpf);
    for &call in NO_EXEC {
        rules.insert(call, vec![arg_is(2, libc::PROT_EXEC as u64, 0)?]);
    }
    rules.insert(
        libc::SYS_ioctl,
        vec![arg_is(1, u64::from(u32::MAX), PERF_EVENT_IOC_DISABLE)?],
    );
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::KillProcess,
        SeccompAction::Allow,
        arch,
    )?;
    Ok(filter.try_into()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No call is listed twice (a group would then say why for another's
    /// call) and none of the calls that would undo the drop is allowed.
    #[test]
    fn list_is_unique_and_leaves_out_what_would_undo_the_drop() {
        let mut seen = std::collections::HashSet::new();
        for (group, calls) in GROUPS {
            for call in *calls {
                assert!(seen.insert(*call), "{call} twice (again in {group})");
            }
        }
        for forbidden in [
            libc::SYS_open,
            libc::SYS_openat,
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_fork,
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_ptrace,
            libc::SYS_setuid,
            libc::SYS_setresuid,
            libc::SYS_capset,
            libc::SYS_prctl,
            libc::SYS_mount,
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_bpf,
            libc::SYS_ioctl,
            libc::SYS_mmap,
            libc::SYS_mprotect,
        ] {
            assert!(!seen.contains(&forbidden), "{forbidden} allowed");
        }
        assert!(BPF_COMMANDS.iter().all(|&(cmd, _)| cmd != 0 && cmd != 5));
        assert_eq!(allowed_count(), seen.len() + NO_EXEC.len() + 2);
        filter().expect("compiles");
    }
}
