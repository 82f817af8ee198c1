//! Who dirtied it, against the running kernel (root): real
//! processes dirty files on filesystems made for the test and leave; the
//! calls that write their pages back, whoever makes them, must name them.

use std::{
    collections::HashMap,
    ffi::CString,
    fs,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    path::Path,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use crate::support::{LoopFs, TraceInstance, Tracing, dev_of, trace_field};

const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;

/// One test of this file at a time: some sync(2), which writes back the
/// others' files too, and each asserts who wrote its file's pages.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// sync(1): every dirty page of the host written.
fn sync_all() {
    assert!(
        wbscope_programs::SYNC
            .command()
            .status()
            .expect("sync")
            .success()
    );
}

/// The call lines on (dev, ino).
fn calls_on<'a>(lines: &'a [serde_json::Value], dev: &str, ino: u64) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["type"] == "call" && l["dev"] == dev && l["ino"] == ino)
        .collect()
}

/// The call lines on `dev`, by inode: one pass over the lines for a test
/// that looks up thousands of files ([`calls_on`] scans them all each
/// time).
fn calls_by_ino<'a>(
    lines: &'a [serde_json::Value],
    dev: &str,
) -> HashMap<u64, Vec<&'a serde_json::Value>> {
    let mut out: HashMap<u64, Vec<&serde_json::Value>> = HashMap::new();
    for l in lines
        .iter()
        .filter(|l| l["type"] == "call" && l["dev"] == dev)
    {
        if let Some(ino) = l["ino"].as_u64() {
            out.entry(ino).or_default().push(l);
        }
    }
    out
}

/// Pages charged per (pid, comm) over `calls`.
fn charged(calls: &[&serde_json::Value]) -> HashMap<(u64, String), u64> {
    let mut out = HashMap::new();
    for c in calls {
        for d in c["dirtiers"].as_array().expect("dirtiers") {
            let key = (
                d["pid"].as_u64().unwrap(),
                d["comm"].as_str().unwrap().to_string(),
            );
            *out.entry(key).or_default() += d["pages"].as_u64().unwrap();
        }
    }
    out
}

/// The sum of an `owners` field over every interval, for one pid.
fn owner_total(lines: &[serde_json::Value], pid: u64, field: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .flat_map(|l| l["owners"].as_array().cloned().unwrap_or_default())
        .filter(|o| o["pid"] == pid)
        .map(|o| o[field].as_u64().unwrap())
        .sum()
}

/// Forks a child that writes `regions` (offset, length) of `path` with
/// pwrite(2), after a byte arrives on a pipe, and exits without syncing.
/// Fork, not a program: the dirtier must be one process whose pid the
/// test knows, and only async-signal-safe calls are made in the child
/// (the buffer and path are prepared before the fork).
struct Dirtier {
    pid: libc::pid_t,
    go: libc::c_int,
}

impl Dirtier {
    fn fork(path: &Path, regions: Vec<(u64, u64)>) -> Dirtier {
        let buf: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8 + 1).collect();
        let cpath = CString::new(path.as_os_str().as_bytes()).unwrap();
        Dirtier::fork_with(move || {
            // SAFETY: async-signal-safe calls on memory prepared before
            // the fork.
            unsafe {
                let fd = libc::open(cpath.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644);
                if fd < 0 {
                    libc::_exit(3);
                }
                for &(offset, len) in &regions {
                    let mut done = 0;
                    while done < len {
                        let n = (len - done).min(MIB) as usize;
                        let w = libc::pwrite(fd, buf.as_ptr().cast(), n, (offset + done) as i64);
                        if w <= 0 {
                            libc::_exit(4);
                        }
                        done += w as u64;
                    }
                }
            }
        })
    }

    /// A child that writes one page to each of `paths` (a new file each,
    /// each its own (inode, process) pair), sleeps `idle`, then a second
    /// page to each of the first `regrow`: pairs that grow again after
    /// readings that found them unchanged.
    fn fork_files(paths: &[std::path::PathBuf], idle: Duration, regrow: usize) -> Dirtier {
        let page = vec![7u8; PAGE as usize];
        let cpaths: Vec<CString> = paths
            .iter()
            .map(|p| CString::new(p.as_os_str().as_bytes()).unwrap())
            .collect();
        let nap = libc::timespec {
            tv_sec: idle.as_secs() as libc::time_t,
            tv_nsec: idle.subsec_nanos() as libc::c_long,
        };
        Dirtier::fork_with(move || {
            // SAFETY: as in `fork`.
            let write_page = |path: &CString, offset: i64| unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644);
                if fd < 0 || libc::pwrite(fd, page.as_ptr().cast(), page.len(), offset) <= 0 {
                    libc::_exit(3);
                }
                libc::close(fd);
            };
            for path in &cpaths {
                write_page(path, 0);
            }
            // SAFETY: a plain syscall.
            unsafe { libc::nanosleep(&nap, std::ptr::null_mut()) };
            for path in cpaths.iter().take(regrow) {
                write_page(path, PAGE as i64);
            }
        })
    }

    /// Forks a child that runs `body` once a byte arrives on a pipe
    /// ([`Dirtier::start`]) and exits 0 (`body` exits otherwise on a
    /// failure). `body` may make only async-signal-safe calls, on memory
    /// prepared before the fork.
    fn fork_with(body: impl FnOnce()) -> Dirtier {
        let mut fds = [0; 2];
        // SAFETY: plain syscalls; the child runs `body`, then _exit.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                let mut b = 0u8;
                libc::close(fds[1]);
                if libc::read(fds[0], (&raw mut b).cast(), 1) != 1 {
                    libc::_exit(2);
                }
                body();
                libc::_exit(0);
            }
            libc::close(fds[0]);
            Dirtier { pid, go: fds[1] }
        }
    }

    /// Lets the child write.
    fn start(&self) {
        // SAFETY: plain syscalls on our own pipe.
        unsafe {
            assert_eq!(libc::write(self.go, [1u8].as_ptr().cast(), 1), 1);
            libc::close(self.go);
        }
    }

    fn wait(&self) {
        let mut status = 0;
        // SAFETY: our own child.
        unsafe {
            assert_eq!(libc::waitpid(self.pid, &mut status, 0), self.pid);
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "dirtier failed: {status}"
        );
    }
}

/// Who dirtied it, two ways (docs/trace-json.md, "dirtiers"): once per
/// inode made dirty (the default), or per dirtied folio.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    PerInode,
    PerFolio,
}

impl Mode {
    /// `trace` arguments: `base` and what the mode needs.
    fn args<'a>(self, base: &[&'a str]) -> Vec<&'a str> {
        let mut args = base.to_vec();
        if self == Mode::PerFolio {
            args.extend(["--enable", "dirty_folio"]);
        }
        args
    }

    fn name(self) -> &'static str {
        match self {
            Mode::PerInode => "per_inode",
            Mode::PerFolio => "per_folio",
        }
    }
}

/// A process dirties 256 MiB with dd and exits without syncing; another
/// runs `sync`: the calls that wrote the file name dd (its pid, its comm)
/// for all 65536 pages, and `owners` says dd's 65536 pages were written by
/// others. A second dd dirtying another filesystem meanwhile, which
/// `--device` leaves out, appears nowhere. Per folio, `owners` also says
/// dd dirtied 65536 pages; per inode, what a process dirtied comes from
/// its /proc/PID/io, read at each reading while it lives: dd, gone before
/// any, shows none (the documented limit), never more.
#[test]
fn sync_by_another_process_is_charged_to_the_departed_dirtier() {
    let _file = crate::support::file_group(module_path!());
    departed_dirtier(Mode::PerInode);
}

#[test]
fn sync_by_another_process_is_charged_to_the_departed_dirtier_per_folio() {
    let _file = crate::support::file_group(module_path!());
    departed_dirtier(Mode::PerFolio);
}

fn departed_dirtier(mode: Mode) {
    let _serial = serial();
    let fs = LoopFs::new("ext4", 512);
    let other_fs = LoopFs::new("ext4", 64);
    let path = fs.path("data");
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&mode.args(&["--json", "--events", "--device", &mount]));
    let dd_of = |path: &Path, mib: u32| {
        wbscope_programs::DD
            .command()
            .arg("if=/dev/zero")
            .arg(format!("of={}", path.display()))
            .args(["bs=1M", &format!("count={mib}"), "status=none"])
            .spawn()
            .expect("dd")
    };
    let other = dd_of(&other_fs.path("elsewhere"), 32);
    let dd = dd_of(&path, 256);
    let dd_pid = u64::from(dd.id());
    let other_pid = u64::from(other.id());
    let out = dd.wait_with_output().expect("dd");
    assert!(out.status.success());
    assert!(other.wait_with_output().expect("dd").status.success());
    sync_all();
    let ino = fs::metadata(&path).unwrap().ino();
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);

    let calls = calls_on(&lines, &dev, ino);
    let pages = 256 * MIB / PAGE;
    let written: u64 = calls
        .iter()
        .map(|c| c["pages_written"].as_u64().unwrap())
        .sum();
    assert_eq!(written, pages, "{calls:#?}");
    assert!(
        calls.iter().all(|c| c["pid"] != dd_pid),
        "dd exited before any writeback"
    );
    assert_eq!(
        charged(&calls),
        HashMap::from([((dd_pid, "dd".to_string()), pages)]),
        "{calls:#?}"
    );
    match mode {
        Mode::PerFolio => assert_eq!(owner_total(&lines, dd_pid, "pages_dirtied"), pages),
        // The kernel's count for dd, caught at its exit after the drop.
        Mode::PerInode => assert_eq!(owner_total(&lines, dd_pid, "pages_dirtied"), pages),
    }
    assert_eq!(owner_total(&lines, dd_pid, "pages_written"), pages);
    assert_eq!(
        owner_total(&lines, dd_pid, "pages_written_by_others"),
        pages
    );
    assert_eq!(owner_total(&lines, other_pid, "pages_dirtied"), 0);
    let summary = lines.last().unwrap();
    assert_eq!(summary["lost_records"], 0);
    assert_eq!(summary["lost_dirtyings"], 0);
    assert_eq!(summary["attribution"], mode.name());
}

/// Two processes dirty alternate 1 MiB regions of one file, at the same
/// time, then one `sync`: per folio, each is charged its half, within 1%.
#[test]
fn alternate_regions_are_charged_half_and_half_per_folio() {
    let _file = crate::support::file_group(module_path!());
    let (a, b, by_pid, half) = alternate_regions(Mode::PerFolio);
    for pid in [a, b] {
        let got = by_pid.get(&pid).copied().unwrap_or(0);
        assert!(
            got.abs_diff(half) * 100 <= half,
            "pid {pid}: {got} pages, not {half} ± 1%: {by_pid:?}"
        );
    }
    assert_eq!(by_pid.values().sum::<u64>(), 2 * half, "{by_pid:?}");
}

/// Two processes dirty two files of one filesystem at once, then one
/// `sync`: per inode, each is charged exactly its own file's pages.
#[test]
fn two_writers_of_two_files_are_each_charged_their_own() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 512);
    let (pa, pb) = (fs.path("a"), fs.path("b"));
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&Mode::PerInode.args(&["--json", "--events", "--device", &mount]));
    let a = Dirtier::fork(&pa, vec![(0, 48 * MIB)]);
    let b = Dirtier::fork(&pb, vec![(0, 80 * MIB)]);
    a.start();
    b.start();
    a.wait();
    b.wait();
    sync_all();
    let dev = dev_of(&pa);
    let inos = (
        fs::metadata(&pa).unwrap().ino(),
        fs::metadata(&pb).unwrap().ino(),
    );
    let lines = trace.stop(libc::SIGINT);
    for (ino, pid, mib) in [(inos.0, a.pid, 48), (inos.1, b.pid, 80)] {
        let calls = calls_on(&lines, &dev, ino);
        let by_pid: HashMap<u64, u64> = charged(&calls)
            .into_iter()
            .map(|((pid, _), pages)| (pid, pages))
            .collect();
        assert_eq!(
            by_pid,
            HashMap::from([(pid as u64, mib * MIB / PAGE)]),
            "{calls:#?}"
        );
    }
}

/// The default mode's documented limit, with the error it makes: per
/// inode, every page of a file several processes dirty at once goes to
/// the one that made the inode dirty (the test itself, which created the
/// file, or the first writer), so the other is charged nothing of its
/// half: an error of 100% of each writer's share, nothing lost.
#[test]
fn alternate_regions_go_to_one_process_per_inode() {
    let _file = crate::support::file_group(module_path!());
    let (a, b, by_pid, half) = alternate_regions(Mode::PerInode);
    assert_eq!(by_pid.len(), 1, "one process charged: {by_pid:?}");
    let (&charged_pid, &pages) = by_pid.iter().next().unwrap();
    assert_eq!(pages, 2 * half, "{by_pid:?}");
    let candidates = [a, b, u64::from(std::process::id())];
    assert!(
        candidates.contains(&charged_pid),
        "{charged_pid} not in {candidates:?}"
    );
    let error = |pid: u64| by_pid.get(&pid).copied().unwrap_or(0).abs_diff(half);
    eprintln!(
        "per inode: pid {charged_pid} charged {pages} pages; error {} and {} pages \
         against the {half} each of {a} and {b} dirtied",
        error(a),
        error(b)
    );
    assert_eq!(error(a) + error(b), 2 * half);
}

/// Two forked writers of alternate regions of one file, a sync, and what
/// the calls on the file charged to each pid: (a, b, charged, half).
fn alternate_regions(mode: Mode) -> (u64, u64, HashMap<u64, u64>, u64) {
    let _serial = serial();
    let fs = LoopFs::new("ext4", 512);
    let path = fs.path("shared");
    fs::write(&path, b"").unwrap();
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&mode.args(&["--json", "--events", "--device", &mount]));
    let regions = |parity: u64| -> Vec<(u64, u64)> {
        (0..128)
            .filter(|i| i % 2 == parity)
            .map(|i| (i * MIB, MIB))
            .collect()
    };
    let a = Dirtier::fork(&path, regions(0));
    let b = Dirtier::fork(&path, regions(1));
    a.start();
    b.start();
    a.wait();
    b.wait();
    sync_all();
    let ino = fs::metadata(&path).unwrap().ino();
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);

    let calls = calls_on(&lines, &dev, ino);
    let by_pid: HashMap<u64, u64> = charged(&calls)
        .into_iter()
        .map(|((pid, _), pages)| (pid, pages))
        .collect();
    (a.pid as u64, b.pid as u64, by_pid, 64 * MIB / PAGE)
}

/// `balance_dirty_pages` in a tracefs instance of our own, filtered to
/// one pid's pausing events: the independent count of its pauses.
struct PauseTrace(TraceInstance);

impl PauseTrace {
    fn new(pid: libc::pid_t) -> PauseTrace {
        PauseTrace(TraceInstance::new(&[(
            "writeback/balance_dirty_pages",
            &format!("pause > 0 && common_pid == {pid}"),
        )]))
    }

    /// (pausing events, sum of `pause` in ms).
    fn pauses(&self) -> (u64, u64) {
        let mut out = (0, 0);
        for line in self.0.lines() {
            let pause = trace_field(&line, "pause")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no pause in {line}"));
            out.0 += 1;
            out.1 += pause;
        }
        out
    }
}

/// Whether ext4 still holds delayed-allocation extents for `path`: pages
/// dirtied and not yet given blocks, which only writeback does
/// (`FIEMAP_EXTENT_DELALLOC`, include/uapi/linux/fiemap.h). An
/// independent "all written" for the flusher test: none left means every
/// writepages call that wrote the file has mapped its pages.
fn has_delalloc(path: &Path) -> bool {
    const EXTENTS: usize = 64;
    /// `struct fiemap` followed by its extent array (56 bytes each).
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped: u32,
        count: u32,
        reserved: u32,
        extents: [[u64; 7]; EXTENTS],
    }
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_EXTENT_DELALLOC: u64 = 0x4;
    let file = fs::File::open(path).expect("open");
    let mut map = Fiemap {
        start: 0,
        length: u64::MAX,
        flags: 0,
        mapped: 0,
        count: EXTENTS as u32,
        reserved: 0,
        extents: [[0; 7]; EXTENTS],
    };
    use std::os::fd::AsRawFd as _;
    // SAFETY: FS_IOC_FIEMAP on our own file with a buffer of `count`
    // extents.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &raw mut map) };
    assert_eq!(r, 0, "FIEMAP");
    // fe_flags is the low half of the sixth u64 (after fe_reserved64[2]).
    map.extents[..map.mapped as usize]
        .iter()
        .any(|e| e[5] & 0xffff_ffff & FIEMAP_EXTENT_DELALLOC != 0)
}

/// A process writes 64 MiB to a filesystem whose dirty cache is capped
/// at 2 MiB and exits: the flusher writes its pages (background
/// threshold, then expiry), and every page it wrote is charged to the
/// process, which `owners` shows throttled exactly as often and as long
/// as the `balance_dirty_pages` tracepoint says.
#[test]
fn flusher_writeback_and_throttling_are_charged_to_the_dirtier() {
    let _file = crate::support::file_group(module_path!());
    charged_to_the_dirtier_while(Mode::PerInode, false);
}

#[test]
fn flusher_writeback_and_throttling_are_charged_to_the_dirtier_per_folio() {
    let _file = crate::support::file_group(module_path!());
    charged_to_the_dirtier_while(Mode::PerFolio, false);
}

/// The same with a sync(2) every 200 ms while the process dirties the
/// file: each makes a whole-file WB_SYNC_ALL call on it, and what the
/// process dirtied after such a call started stays its own (the model
/// once dropped it with the pages the call found dirty, and the flusher's
/// next calls went to `(unknown)`: the sync of
/// `sync_by_another_process_is_charged_to_the_departed_dirtier` did that
/// to the test above in CI; with the old rule this test failed three runs
/// in three). sync(2), not syncfs(2): syncfs first waits for a
/// WB_SYNC_NONE pass over the filesystem, which a writer kept under a
/// 2 MiB limit keeps busy until it is done, and made no WB_SYNC_ALL call
/// on the file in two runs.
#[test]
fn syncs_while_dirtying_leave_later_pages_with_the_dirtier_per_folio() {
    let _file = crate::support::file_group(module_path!());
    charged_to_the_dirtier_while(Mode::PerFolio, true);
}

/// The same per inode: each sync cleans the inode, the writer's next
/// page makes it dirty again, and every call goes to the writer.
#[test]
fn syncs_while_dirtying_leave_later_pages_with_the_dirtier() {
    let _file = crate::support::file_group(module_path!());
    charged_to_the_dirtier_while(Mode::PerInode, true);
}

fn charged_to_the_dirtier_while(mode: Mode, sync_meanwhile: bool) {
    let _serial = serial();
    let mut fs = LoopFs::new("ext4", 512);
    // 2 MiB: the writer is certain to be throttled (at 8 MiB a fast disk
    // on a busy host once kept it from pausing at all), and the flusher
    // writes 512-page calls while the pages are still being dirtied,
    // which once charged a third of them to no one: each call of a batch
    // was tested against the pages outstanding alone, not the batch's
    // calls together (`Attribution::charge_batch`).
    fs.scratch().limit_dirty(2 * MIB).expect("bdi limit");
    let path = fs.path("capped");
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&mode.args(&["--json", "--events", "--device", &mount]));
    let size = 64 * MIB;
    let child = Dirtier::fork(&path, vec![(0, size)]);
    let pauses = PauseTrace::new(child.pid);
    let stop = Arc::new(AtomicBool::new(false));
    let syncs = sync_meanwhile.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: no arguments, cannot fail.
                unsafe { libc::sync() };
                n += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            n
        })
    });
    child.start();
    child.wait();
    if let Some(syncs) = syncs {
        stop.store(true, Ordering::Relaxed);
        assert!(syncs.join().expect("syncfs thread") >= 1);
    }
    // The flusher alone: no sync. Pages left under the background
    // threshold go at dirty_expire_centisecs (30 s by default) plus a
    // periodic wakeup (5 s).
    let deadline = Instant::now() + Duration::from_secs(90);
    while has_delalloc(&path) {
        assert!(Instant::now() < deadline, "the flusher did not write it");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The last call's record reaches userspace within a drain (100 ms).
    std::thread::sleep(Duration::from_secs(1));
    let ino = fs::metadata(&path).unwrap().ino();
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);
    let (events, pause_ms) = pauses.pauses();

    let pid = child.pid as u64;
    let calls = calls_on(&lines, &dev, ino);
    let pages = size / PAGE;
    let written: u64 = calls
        .iter()
        .map(|c| c["pages_written"].as_u64().unwrap())
        .sum();
    assert_eq!(written, pages, "{calls:#?}");
    assert!(
        calls
            .iter()
            .all(|c| c["pid"] != pid && !c["work_reason"].is_null()),
        "only the flusher wrote: {calls:#?}"
    );
    let by_pid: HashMap<u64, u64> = charged(&calls)
        .into_iter()
        .map(|((pid, _), pages)| (pid, pages))
        .collect();
    assert_eq!(by_pid, HashMap::from([(pid, pages)]), "{calls:#?}");
    // Per inode, the kernel's per-task count (the task iterator while
    // the writer lives, its exit record for the last part).
    assert_eq!(owner_total(&lines, pid, "pages_dirtied"), pages);
    assert_eq!(owner_total(&lines, pid, "pages_written_by_flusher"), pages);
    assert!(events > 0, "a 2 MiB cap must throttle a 64 MiB writer");
    assert_eq!(owner_total(&lines, pid, "throttle_pauses"), events);
    assert_eq!(owner_total(&lines, pid, "throttle_pause_ms"), pause_ms);
}

/// Forks a child that writes `mib` MiB to `path` (truncating it to
/// nothing after, with `truncate`), reads its own /proc/self/io and sends
/// it to the parent over a pipe (which dirties no page), then exits;
/// returns its pid and that text once it has exited.
fn write_and_report_own_io(path: &Path, mib: i64, truncate: bool) -> (u64, String) {
    let mut io_pipe = [0; 2];
    // SAFETY: a plain syscall.
    assert_eq!(unsafe { libc::pipe(io_pipe.as_mut_ptr()) }, 0);
    let [io_read, io_write] = io_pipe;
    let buf: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8 + 1).collect();
    let cpath = CString::new(path.as_os_str().as_bytes()).unwrap();
    let proc_io = CString::new("/proc/self/io").unwrap();
    let mut text = vec![0u8; 4096];
    let child = Dirtier::fork_with(move || {
        // SAFETY: async-signal-safe calls on memory prepared before the
        // fork.
        unsafe {
            let fd = libc::open(cpath.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644);
            if fd < 0 {
                libc::_exit(3);
            }
            for i in 0..mib {
                if libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), i << 20) != buf.len() as isize {
                    libc::_exit(4);
                }
            }
            if truncate && libc::ftruncate(fd, 0) != 0 {
                libc::_exit(6);
            }
            let io = libc::open(proc_io.as_ptr(), libc::O_RDONLY);
            let n = libc::read(io, text.as_mut_ptr().cast(), text.len());
            if io < 0 || n <= 0 || libc::write(io_write, text.as_ptr().cast(), n as usize) != n {
                libc::_exit(5);
            }
        }
    });
    // SAFETY: the parent's copy of the write end.
    unsafe { libc::close(io_write) };
    child.start();
    child.wait();
    let mut own = String::new();
    {
        use std::io::Read as _;
        // SAFETY: the read end, owned from here on.
        let mut f = unsafe { <fs::File as std::os::fd::FromRawFd>::from_raw_fd(io_read) };
        f.read_to_string(&mut own).unwrap();
    }
    (child.pid as u64, own)
}

/// Field `name` of a /proc/PID/io text.
fn io_field(own: &str, name: &str) -> u64 {
    own.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {own:?}"))
}

/// A process dirties 256 MiB and exits well before the next reading,
/// under the default (dropped) `trace`: its pid is charged what the
/// kernel counted for it, read by the process itself from /proc/self/io
/// just before it exits (65,536 pages), and the sync's calls write them
/// as its pages. Neither /proc/PID/io of another user (refused after the
/// drop) nor a /proc file at the next reading (gone) can tell this.
#[test]
fn a_process_that_exits_between_readings_is_charged_its_own_count() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 512);
    let path = fs.path("data");
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&["--json", "--events", "--device", &mount, "--interval", "4"]);
    let (pid, own) = write_and_report_own_io(&path, 256, false);
    let own_bytes = io_field(&own, "write_bytes");
    sync_all();
    std::thread::sleep(Duration::from_secs(1));
    let ino = fs::metadata(&path).unwrap().ino();
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);
    let pages = 256 * MIB / PAGE;
    assert_eq!(own_bytes, 256 * MIB, "the child's own count: {own}");
    assert_eq!(owner_total(&lines, pid, "pages_dirtied"), own_bytes / PAGE);
    assert_eq!(owner_total(&lines, pid, "pages_written"), pages);
    let by_pid: HashMap<u64, u64> = charged(&calls_on(&lines, &dev, ino))
        .into_iter()
        .map(|((pid, _), pages)| (pid, pages))
        .collect();
    assert_eq!(by_pid, HashMap::from([(pid, pages)]));
    let comms: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .flat_map(|l| l["owners"].as_array().into_iter().flatten())
        .filter(|o| o["pid"] == pid)
        .map(|o| &o["comm"])
        .collect();
    assert!(
        !comms.is_empty()
            && comms
                .iter()
                .all(|c| c.as_str().is_some_and(|c| !c.is_empty())),
        "{comms:?}"
    );
}

/// The same per-process counts, the bytes of write calls and those
/// cancelled: a process writes 8 MiB, truncates the file to nothing
/// before any writeback and exits between readings. Its `owners` rows
/// add up to what it read from its own /proc/self/io just before exiting:
/// 2,048 pages dirtied, 8 MiB cancelled, its write calls' bytes (those
/// and the pipe write it made after reading: `wchar` counts both).
#[test]
fn write_call_and_cancelled_bytes_equal_the_process_own_count() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 128);
    let path = fs.path("cancelled");
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&["--json", "--device", &mount, "--interval", "4"]);
    let (pid, own) = write_and_report_own_io(&path, 8, true);
    let field = |name: &str| io_field(&own, name);
    std::thread::sleep(Duration::from_millis(500));
    let lines = trace.stop(libc::SIGINT);
    assert_eq!(field("cancelled_write_bytes"), 8 * MIB, "{own}");
    assert_eq!(
        owner_total(&lines, pid, "pages_dirtied"),
        field("write_bytes") / PAGE
    );
    assert_eq!(owner_total(&lines, pid, "cancelled_bytes"), 8 * MIB);
    // wchar read before the pipe write, which counts too.
    assert_eq!(
        owner_total(&lines, pid, "write_call_bytes"),
        field("wchar") + own.len() as u64
    );
}

/// Where the task iterator does not load (made so by a test-only switch),
/// a dropped run cannot read other processes' counts: the owners have no
/// `pages_dirtied` at all and the summary says why, rather than a 0 that
/// reads as a fact; with `--no-drop` the counts come from /proc/PID/io.
#[test]
fn without_the_task_iterator_a_dropped_run_says_pages_dirtied_are_unmeasured() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 128);
    let mount = fs.mountpoint.display().to_string();
    for drop in [true, false] {
        let mut cmd = crate::support::wbscope();
        cmd.env("WBSCOPE_TEST_NO_TASK_ITERATOR", "1");
        let mut args = vec!["--json", "--device", &mount, "--interval", "0.5"];
        if !drop {
            args.push("--no-drop");
        }
        let trace = Tracing::start_with(cmd, &args);
        let child = Dirtier::fork(&fs.path(&format!("f{drop}")), vec![(0, 8 * MIB)]);
        child.start();
        child.wait();
        // Its pages written, so that it has an owners row.
        sync_all();
        std::thread::sleep(Duration::from_secs(1));
        let lines = trace.stop(libc::SIGINT);
        let pid = child.pid as u64;
        let rows: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| l["type"] == "interval")
            .flat_map(|l| l["owners"].as_array().into_iter().flatten())
            .filter(|o| o["pid"] == pid)
            .collect();
        let summary = lines.last().unwrap();
        if drop {
            assert!(
                !rows.is_empty(),
                "its throttling or writes name it: {lines:?}"
            );
            assert!(
                rows.iter().all(|o| o.get("pages_dirtied").is_none()),
                "{rows:?}"
            );
            let why = summary["pages_dirtied_unmeasured"].as_str().unwrap_or("");
            assert!(why.contains("WBSCOPE_TEST_NO_TASK_ITERATOR"), "{summary}");
        } else {
            assert!(
                summary.get("pages_dirtied_unmeasured").is_none(),
                "{summary}"
            );
            assert!(rows.iter().all(|o| o["pages_dirtied"].is_u64()), "{rows:?}");
        }
    }
}

/// Per folio, a reading looks up only the pairs announced as changed
/// (the whole map once a minute): one process writes a page to each of
/// 3,000 new files, idles through several readings that find those pairs
/// unchanged, then writes a second page to 100 of them. At a reading
/// every 0.2 s every reading but the first looks up the changed pairs
/// only; every page must still be counted once, and the sync's calls
/// charge each file's pages to the process.
#[test]
fn per_folio_readings_of_the_changed_pairs_miss_nothing() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 256);
    let dir = fs.path("many");
    fs::create_dir(&dir).unwrap();
    let paths: Vec<_> = (0..3000).map(|i| dir.join(format!("f{i}"))).collect();
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&Mode::PerFolio.args(&[
        "--json",
        "--events",
        "--device",
        &mount,
        "--interval",
        "0.2",
    ]));
    let child = Dirtier::fork_files(&paths, Duration::from_millis(1200), 100);
    child.start();
    child.wait();
    // A reading after the last page, then the sync's calls.
    std::thread::sleep(Duration::from_millis(500));
    sync_all();
    std::thread::sleep(Duration::from_secs(1));
    let dev = dev_of(&paths[0]);
    let inos: Vec<u64> = paths
        .iter()
        .map(|p| fs::metadata(p).unwrap().ino())
        .collect();
    let lines = trace.stop(libc::SIGINT);
    let pid = child.pid as u64;
    assert_eq!(owner_total(&lines, pid, "pages_dirtied"), 3100);
    assert_eq!(lines.last().unwrap()["lru_evicted"], 0, "3,000 pairs fit");
    let readings = lines.iter().filter(|l| l["type"] == "interval").count();
    // Several readings, fewer than 60: only the first read the whole map,
    // the regrowth was found by readings of the changed pairs.
    assert!(
        (5..60).contains(&readings),
        "{readings} intervals: the first whole, then the changes"
    );
    let by_ino = calls_by_ino(&lines, &dev);
    for (i, &ino) in inos.iter().enumerate() {
        let calls = by_ino.get(&ino).cloned().unwrap_or_default();
        let by_pid: HashMap<u64, u64> = charged(&calls)
            .into_iter()
            .map(|((pid, _), pages)| (pid, pages))
            .collect();
        let pages = if i < 100 { 2 } else { 1 };
        assert_eq!(
            by_pid,
            HashMap::from([(pid, pages)]),
            "file {i}: {calls:#?}"
        );
    }
}

/// More (inode, process) pairs than `DIRTIERS` holds (65,536): the LRU
/// map evicts the oldest, and the summary counts what it evicted
/// (`lru_evicted`, from the entries the kernel made less those found),
/// where the run above, within the map, counts none.
#[test]
fn per_folio_pairs_past_the_map_are_counted_as_evicted() {
    const FILES: usize = 70_000;
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    // One inode per file: mkfs's default of one per 16 KiB is too few.
    let fs = LoopFs::with_args("ext4", 512, &["-N", "80000"], &[]);
    let dir = fs.path("many");
    fs::create_dir(&dir).unwrap();
    let paths: Vec<_> = (0..FILES).map(|i| dir.join(format!("f{i}"))).collect();
    let mount = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&Mode::PerFolio.args(&["--json", "--device", &mount]));
    let child = Dirtier::fork_files(&paths, Duration::ZERO, 0);
    child.start();
    child.wait();
    // A whole reading of the map after the last page.
    std::thread::sleep(Duration::from_millis(2500));
    let lines = trace.stop(libc::SIGINT);
    let summary = lines.last().unwrap();
    let evicted = summary["lru_evicted"].as_u64().unwrap();
    assert!(
        (FILES as u64 - 65_536..=FILES as u64).contains(&evicted),
        "{evicted} evicted: {summary}"
    );
    let intervals: u64 = lines
        .iter()
        .filter_map(|l| {
            l["lru_evicted"]
                .as_u64()
                .filter(|_| l["type"] == "interval")
        })
        .sum();
    assert_eq!(
        intervals, evicted,
        "the intervals' evictions add up to the summary's"
    );
}

/// `--pid P` keeps the calls that write the pages P dirtied, though the
/// flusher or someone's sync makes them, and drops the others.
#[test]
fn pid_filter_keeps_the_writeback_of_pages_the_process_dirtied() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 256);
    let path = fs.path("mine");
    let other = fs.path("not-mine");
    let child = Dirtier::fork(&path, vec![(0, 16 * MIB)]);
    let pid = child.pid.to_string();
    let trace = Tracing::start(&["--json", "--events", "--pid", &pid]);
    child.start();
    child.wait();
    fs::write(&other, vec![1u8; MIB as usize]).unwrap();
    sync_all();
    let (ino, other_ino) = (
        fs::metadata(&path).unwrap().ino(),
        fs::metadata(&other).unwrap().ino(),
    );
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);

    let calls = calls_on(&lines, &dev, ino);
    let written: u64 = calls
        .iter()
        .map(|c| c["pages_written"].as_u64().unwrap())
        .sum();
    assert_eq!(written, 16 * MIB / PAGE, "{lines:#?}");
    assert!(calls.iter().all(|c| c["pid"] != child.pid as u64));
    assert!(calls_on(&lines, &dev, other_ino).is_empty());
}

/// A burst of new files faster than the dirtyings ring holds between two
/// interval readings (1 MiB, 15,880 dirtyings; an archive unpacked, a
/// build's outputs): the programs wake the trace once a quarter of the
/// ring waits, so no dirtying is lost and every file's page is charged to
/// the process that made it.
#[test]
fn a_burst_of_new_files_loses_no_dirtying() {
    const FILES: u64 = 60_000;
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    // 1 GiB: ext4's inode per 16 KiB gives 65,536.
    let fs = LoopFs::new("ext4", 1024);
    let dir = fs.path("burst");
    fs::create_dir(&dir).unwrap();
    let mount = fs.mountpoint.display().to_string();
    // Every call line wanted: no rate gate (a sync of the burst makes
    // tens of thousands a second).
    let mut trace = Tracing::start(&[
        "--json",
        "--events",
        "--device",
        &mount,
        "--max-event-rate",
        "1000000000",
    ]);
    // Read as written: 60,000 call lines would fill a pipe read only at
    // the end, and a trace blocked on its output loses records.
    let out = trace.stdout_lines();
    let page = [b'x'; PAGE as usize];
    let t0 = Instant::now();
    for i in 0..FILES {
        fs::write(dir.join(format!("f{i}")), page).unwrap();
    }
    let took = t0.elapsed();
    sync_all();
    let dev = dev_of(&dir);
    assert!(trace.stop(libc::SIGINT).is_empty());
    let lines: Vec<serde_json::Value> = out
        .iter()
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = lines.last().expect("a summary line");
    // Slower than the ring's second, the burst would test nothing.
    assert!(
        took < Duration::from_secs_f64(FILES as f64 / 15_880.0),
        "{FILES} files took {took:?}: too slow to outrun the ring"
    );
    assert_eq!(summary["lost_dirtyings"], 0, "{summary}");
    let calls: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["type"] == "call" && l["dev"] == dev.as_str())
        .collect();
    let written: i64 = calls
        .iter()
        .map(|c| c["pages_written"].as_i64().unwrap())
        .sum();
    assert_eq!(
        written, FILES as i64,
        "lost_records {}, calls {}",
        summary["lost_records"], summary["calls"]
    );
    let me = u64::from(std::process::id());
    let ours: u64 = charged(&calls)
        .into_iter()
        .filter(|((pid, _), _)| *pid == me)
        .map(|(_, pages)| pages)
        .sum();
    assert_eq!(ours, FILES, "{FILES} files' pages charged to the test");
}
