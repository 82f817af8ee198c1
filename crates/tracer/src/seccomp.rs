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
//!
//! Two exceptions. For `--remote-write` only ([`OUTBOUND`]): TCP sockets
//! and connect, for its client's connections to the receiver. For
//! `record --store` only ([`WritableDir`]): the store
//! creates, cuts back and deletes segment files and measures its free
//! space as long as it runs, through the descriptor of its directory
//! opened before the drop; openat, unlinkat and fstatfs are allowed on
//! that descriptor alone, openat only to create a new file.
use std::{
    collections::BTreeMap,
    os::fd::{AsRawFd as _, BorrowedFd},
};

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
        // only epoll wait of some architectures. ppoll, without waiting:
        // whether /proc/self/mountinfo changed (mounts.rs).
        "async runtime",
        &[
            libc::SYS_epoll_wait,
            libc::SYS_epoll_pwait,
            libc::SYS_ppoll,
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
/// reading the maps (one entry or a batch: tracer/batch.rs), writing GLOBAL_THRESH, removing closed generic calls,
/// the programs' run-time statistics, running the programs loaded before
/// the drop that send a CPU's kept calls and dirtyings (cpu_batch.rs), and
/// BPF_ITER_CREATE so that an
/// iterator attached before the drop can be read every interval. Nothing
/// that creates a map, loads a program or attaches one.
const BPF_COMMANDS: &[(u64, &str)] = &[
    (1, "BPF_MAP_LOOKUP_ELEM"),
    (2, "BPF_MAP_UPDATE_ELEM"),
    (3, "BPF_MAP_DELETE_ELEM"),
    (4, "BPF_MAP_GET_NEXT_KEY"),
    (10, "BPF_PROG_TEST_RUN"),
    (15, "BPF_OBJ_GET_INFO_BY_FD"),
    (24, "BPF_MAP_LOOKUP_BATCH"),
    (33, "BPF_ITER_CREATE"),
];

/// A directory the run goes on writing in after the drop (a store's):
/// the calls of [`WRITABLE_DIR`] are allowed on this descriptor, and
/// Landlock confines them beneath it (`super::landlock_dir`).
#[derive(Clone, Copy, Debug)]
pub struct WritableDir<'fd> {
    pub fd: BorrowedFd<'fd>,
}

/// The calls a [`WritableDir`] adds (recording/store/writer.rs):
/// - openat(fd, name, flags) with `fd` the directory's and O_CREAT|O_EXCL
///   in `flags`: a new segment; never an existing file opened;
/// - unlinkat(fd, name, 0): the oldest segment deleted (no AT_REMOVEDIR);
/// - fstatfs(fd): the free space `--min-free` keeps;
/// - ftruncate (any descriptor: only those opened for writing can be cut,
///   the segments): a block the full filesystem took half of cut back.
///
/// seccomp sees the arguments' values, not the memory a pointer points
/// to (Documentation/userspace-api/seccomp_filter.rst), so the name is
/// not checked: an absolute name makes openat and unlinkat ignore the
/// descriptor. What bounds them then is Landlock (the store's directory
/// the only place files are made or removed, `super::landlock_dir`),
/// and where the kernel has none, the drop user's own permissions (it
/// owns the store and nothing else, docs/production.md) and, for openat,
/// O_CREAT|O_EXCL (nothing existing is ever opened).
const WRITABLE_DIR: &[libc::c_long] = &[
    libc::SYS_openat,
    libc::SYS_unlinkat,
    libc::SYS_fstatfs,
    libc::SYS_ftruncate,
];

/// For `--remote-write` only: its client opens a TCP connection to the
/// receiver for each request (the address was resolved before the drop)
/// and reads the connection's outcome (`SO_ERROR`, tokio's check of a
/// non-blocking connect). socket(2) only for TCP over IPv4 or IPv6: no
/// raw, packet, netlink or unix sockets.
const OUTBOUND: &[libc::c_long] = &[libc::SYS_socket, libc::SYS_connect, libc::SYS_getsockopt];

/// System calls the filter allows (`bpf` and `ioctl` counted once).
pub(crate) fn allowed_count(dir: Option<WritableDir<'_>>, outbound: bool) -> usize {
    GROUPS.iter().map(|(_, calls)| calls.len()).sum::<usize>()
        + NO_EXEC.len()
        + 2
        + dir.map_or(0, |_| WRITABLE_DIR.len())
        + if outbound { OUTBOUND.len() } else { 0 }
}

/// The rules of [`OUTBOUND`].
fn outbound_rules() -> Result<Vec<(i64, Vec<SeccompRule>)>, seccompiler::BackendError> {
    // The type's low bits (SOCK_TYPE_MASK, include/linux/net.h); the
    // rest are SOCK_NONBLOCK and SOCK_CLOEXEC.
    let stream = |domain: libc::c_int| -> Result<SeccompRule, seccompiler::BackendError> {
        SeccompRule::new(vec![
            int_is(0, u32::MAX, domain as u32)?,
            int_is(1, 0xf, libc::SOCK_STREAM as u32)?,
        ])
    };
    Ok(vec![
        (
            libc::SYS_socket,
            vec![stream(libc::AF_INET)?, stream(libc::AF_INET6)?],
        ),
        (libc::SYS_connect, Vec::new()),
        (libc::SYS_getsockopt, Vec::new()),
    ])
}

/// One condition: argument `arg` (a 32-bit int: a descriptor or flags)
/// masked with `mask` equals `value`.
fn int_is(arg: u8, mask: u32, value: u32) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(u64::from(mask)),
        u64::from(value),
    )
}

/// The rules of [`WRITABLE_DIR`] for the directory `fd`.
fn writable_dir_rules(
    WritableDir { fd }: WritableDir<'_>,
) -> Result<Vec<(i64, Vec<SeccompRule>)>, seccompiler::BackendError> {
    let fd = u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX);
    let all = u32::MAX;
    let new_file = (libc::O_CREAT | libc::O_EXCL) as u32;
    Ok(vec![
        (
            libc::SYS_openat,
            vec![SeccompRule::new(vec![
                int_is(0, all, fd)?,
                int_is(2, new_file, new_file)?,
            ])?],
        ),
        (
            libc::SYS_unlinkat,
            vec![SeccompRule::new(vec![
                int_is(0, all, fd)?,
                int_is(2, all, 0)?,
            ])?],
        ),
        (
            libc::SYS_fstatfs,
            vec![SeccompRule::new(vec![int_is(0, all, fd)?])?],
        ),
        (libc::SYS_ftruncate, Vec::new()),
    ])
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

/// The compiled filter for this machine's architecture, with the calls
/// of a directory the run writes in when it has one.
pub(crate) fn filter(dir: Option<WritableDir<'_>>, outbound: bool) -> anyhow::Result<BpfProgram> {
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
    if let Some(dir) = dir {
        rules.extend(writable_dir_rules(dir)?);
    }
    if outbound {
        rules.extend(outbound_rules()?);
    }
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
    use std::os::fd::AsFd as _;

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
        assert_eq!(allowed_count(None, false), seen.len() + NO_EXEC.len() + 2);
        filter(None, false).expect("compiles");
        let file = std::fs::File::open("/").expect("a descriptor");
        let dir = Some(WritableDir { fd: file.as_fd() });
        for call in WRITABLE_DIR {
            assert!(!seen.contains(call), "{call} in the list of every run");
        }
        assert_eq!(
            allowed_count(dir, false),
            allowed_count(None, false) + WRITABLE_DIR.len()
        );
        filter(dir, false).expect("compiles");
        assert_eq!(
            allowed_count(None, true),
            allowed_count(None, false) + OUTBOUND.len()
        );
        filter(None, true).expect("compiles");
    }

    /// What a child process may do under the filter with a writable
    /// directory: `Ok(true)` if it ran `calls` and they all succeeded,
    /// `Err(signal)` if it was killed.
    fn under_filter(prog: &BpfProgram, calls: impl FnOnce() -> bool) -> Result<bool, i32> {
        // SAFETY: the child runs only raw system calls (no allocation, no
        // lock another thread of the test harness could hold) and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: plain system calls; no core file of a killed child.
            unsafe {
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                if seccompiler::apply_filter(prog).is_err() {
                    libc::_exit(3);
                }
                libc::_exit(if calls() { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        if libc::WIFSIGNALED(status) {
            return Err(libc::WTERMSIG(status));
        }
        assert_ne!(libc::WEXITSTATUS(status), 3, "filter not installed");
        Ok(libc::WEXITSTATUS(status) == 0)
    }

    /// With a writable directory, new files are created, measured, cut
    /// and deleted through its descriptor; the same calls on another
    /// descriptor, the working directory, or opening an existing file,
    /// kill the process.
    #[test]
    fn a_writable_dir_allows_new_files_through_its_descriptor_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("old"), b"x").expect("old file");
        let dir_fd = std::fs::File::open(dir.path()).expect("open dir");
        let other = std::fs::File::open("/").expect("open /");
        let prog = filter(Some(WritableDir { fd: dir_fd.as_fd() }), false).expect("filter");
        let (fd, other) = (dir_fd.as_raw_fd(), other.as_raw_fd());
        let create =
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        // SAFETY (all closures): raw system calls on valid C strings and
        // out-buffers, in the child.
        let new_file = || unsafe {
            let f = libc::openat(fd, c"new".as_ptr(), create, 0o600);
            let mut st: libc::statfs = std::mem::zeroed();
            f >= 0
                && libc::write(f, b"abc".as_ptr().cast(), 3) == 3
                && libc::ftruncate(f, 1) == 0
                && libc::fstatfs(fd, &mut st) == 0
                && libc::unlinkat(fd, c"new".as_ptr(), 0) == 0
        };
        assert_eq!(under_filter(&prog, new_file), Ok(true));
        assert!(!dir.path().join("new").exists());
        let killed = Err(libc::SIGSYS);
        assert_eq!(
            under_filter(&prog, || unsafe {
                libc::openat(libc::AT_FDCWD, c"new".as_ptr(), create, 0o600) >= 0
            }),
            killed,
            "openat on the working directory"
        );
        assert_eq!(
            under_filter(&prog, || unsafe {
                libc::openat(fd, c"old".as_ptr(), libc::O_RDONLY) >= 0
            }),
            killed,
            "an existing file opened"
        );
        assert_eq!(
            under_filter(&prog, || unsafe {
                libc::openat(other, c"tmp/x".as_ptr(), create, 0o600) >= 0
            }),
            killed,
            "openat on another descriptor"
        );
        assert_eq!(
            under_filter(&prog, || unsafe {
                libc::unlinkat(fd, c"old".as_ptr(), libc::AT_REMOVEDIR) == 0
            }),
            killed,
            "unlinkat removing a directory"
        );
        assert_eq!(
            under_filter(&prog, || unsafe {
                let mut st: libc::statfs = std::mem::zeroed();
                libc::fstatfs(other, &mut st) == 0
            }),
            killed,
            "fstatfs of another descriptor"
        );
        // Without a writable directory, none of it.
        let plain = filter(None, false).expect("filter");
        assert_eq!(under_filter(&plain, new_file), killed);
        assert!(dir.path().join("old").exists());
        assert!(!dir.path().join("new").exists());
    }

    /// With `outbound`, a TCP socket over IPv4 or IPv6 can be made and
    /// connected; a UDP, raw or unix socket still kills; without it, any
    /// socket does.
    #[test]
    fn outbound_allows_tcp_connections_only() {
        let killed = Err(libc::SIGSYS);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        let port = listener.local_addr().expect("addr").port();
        let tcp_connect = move || {
            // SAFETY: plain socket calls on a socket of our own.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                let mut addr: libc::sockaddr_in = std::mem::zeroed();
                addr.sin_family = libc::AF_INET as libc::sa_family_t;
                addr.sin_port = port.to_be();
                addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
                let ok = fd >= 0
                    && libc::connect(
                        fd,
                        (&addr as *const libc::sockaddr_in).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    ) == 0;
                libc::close(fd);
                ok
            }
        };
        let open = filter(None, true).expect("filter");
        assert_eq!(under_filter(&open, tcp_connect), Ok(true));
        for (domain, kind) in [
            (libc::AF_INET, libc::SOCK_DGRAM),
            (libc::AF_INET, libc::SOCK_RAW),
            (libc::AF_UNIX, libc::SOCK_STREAM),
            (libc::AF_NETLINK, libc::SOCK_RAW),
        ] {
            // SAFETY: socket(2) with constant arguments.
            let made = move || unsafe { libc::socket(domain, kind, 0) >= 0 };
            assert_eq!(
                under_filter(&open, made),
                killed,
                "socket({domain}, {kind})"
            );
        }
        let closed = filter(None, false).expect("filter");
        assert_eq!(under_filter(&closed, tcp_connect), killed);
    }

    /// A map opened before the drop is read a batch at a time (batch.rs)
    /// under the filter; making a map kills the process.
    #[test]
    fn maps_are_read_in_batches_but_not_made() {
        use crate::batch::{sys_bpf, test_maps::filled};
        let prog = filter(None, false).expect("filter");
        let killed = Err(libc::SIGSYS);
        let map = filled(aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_HASH, 3);
        let mut keys = [0u64; 8];
        let mut values = [[0u64; 3]; 8];
        let mut next = [0u8; 8];
        // SAFETY: all-zero is a valid bpf_attr.
        let mut batch: aya_obj::generated::bpf_attr = unsafe { std::mem::zeroed() };
        batch.batch.map_fd = map.as_raw_fd() as u32;
        batch.batch.keys = keys.as_mut_ptr() as u64;
        batch.batch.values = values.as_mut_ptr() as u64;
        batch.batch.out_batch = next.as_mut_ptr() as u64;
        batch.batch.count = 8;
        assert_eq!(
            under_filter(&prog, || {
                // The whole map in one batch: ENOENT, its end, with 3 read.
                // SAFETY: the buffers outlive the call, each of 8 entries;
                // then the member the kernel wrote back.
                unsafe {
                    sys_bpf(
                        aya_obj::generated::bpf_cmd::BPF_MAP_LOOKUP_BATCH,
                        &mut batch,
                    ) == -1
                        && batch.batch.count == 3
                }
            }),
            Ok(true),
            "a batch lookup"
        );
        let mut create = batch;
        assert_eq!(
            under_filter(&prog, || {
                // SAFETY: a creation attr (killed before the kernel reads
                // its pointers).
                unsafe { sys_bpf(aya_obj::generated::bpf_cmd::BPF_MAP_CREATE, &mut create) >= 0 }
            }),
            killed,
            "making a map"
        );
    }
}
