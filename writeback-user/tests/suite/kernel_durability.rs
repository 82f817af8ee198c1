//! Each fsync split, against the running kernel (root): a
//! process fsyncs a 4 KiB write every 100 ms on a journaled ext4 made for
//! the test, alone and then beside a large writer that never syncs. Its
//! fsyncs as wbscope splits them are checked against the kernel's own
//! record of its fsync system calls (a tracefs instance of the test's own
//! on `syscalls:sys_enter_fsync` / `sys_exit_fsync`), and the commits it
//! waited on must name the large writer when it runs.

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    io::Write as _,
    os::unix::{
        fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _},
        io::AsRawFd as _,
    },
    process::{Child, Stdio},
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use crate::support::{Bpftrace, LoopFs, TraceInstance, Tracing, dev_of, kernel_dev};
use serde_json::Value;

const FSYNCS: usize = 30;

/// One test of this file at a time: each times fsyncs against a bulk
/// writer of its own.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The large writer ("process A"): a 1.5 GiB dd that never syncs.
fn bulk_writer(fs: &LoopFs) -> Child {
    wbscope_programs::DD
        .command()
        .arg("if=/dev/zero")
        .arg(format!("of={}", fs.path("large").display()))
        .args(["bs=1M", "count=6000", "status=none"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("dd")
}

/// A scratch ext4 with a small strict dirty cap, which keeps a bulk
/// writer's pages going to the device all the time, so that the fsyncs'
/// commits meet them. Its inode tables and journal are zeroed by mkfs,
/// not after mounting by `ext4lazyinit`, whose writes would share the
/// commits of the fsyncs alone (up to 196 ms of them here).
fn capped_ext4() -> LoopFs {
    // What an earlier test left for the host's own writeback (a loop
    // image's pages) is written first: the loop device's flushes are
    // fsyncs of its image on the host, and would wait behind it.
    // SAFETY: plain syscall.
    unsafe { libc::sync() };
    let mut fs = LoopFs::with_args(
        "ext4",
        8192,
        &["-E", "lazy_itable_init=0,lazy_journal_init=0"],
        &[],
    );
    fs.scratch().limit_dirty(32 << 20).expect("dirty cap");
    fs
}

/// `FSYNCS` times: write 4 KiB, fsync, sleep 100 ms (the small syncing
/// writer, "process B"). Returns the file's inode.
fn fsync_every_100ms(path: &std::path::Path) -> u64 {
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .expect("open");
    f.write_all(&[1u8; 65536]).expect("write");
    f.sync_all().expect("first fsync");
    let block = [7u8; 4096];
    for i in 0..FSYNCS {
        f.write_all_at(&block, (i as u64 % 16) * 4096)
            .expect("pwrite");
        // SAFETY: plain syscall on an open descriptor.
        assert_eq!(unsafe { libc::fsync(f.as_raw_fd()) }, 0, "fsync");
        std::thread::sleep(Duration::from_millis(100));
    }
    f.metadata().expect("stat").ino()
}

/// A line's stamp in ns (tracefs prints the `mono` clock's ns truncated
/// to µs: `kernel/trace/trace_output.c`, `lat_print_timestamp`).
fn stamp_ns(l: &str) -> u64 {
    l.split_whitespace()
        .find_map(|w| {
            let (s, us) = w.strip_suffix(':')?.split_once('.')?;
            let (s, us): (u64, u64) = (s.parse().ok()?, us.parse().ok()?);
            Some(s * 1_000_000_000 + us * 1_000)
        })
        .unwrap_or_else(|| panic!("no time stamp in {l:?}"))
}

/// Each `sys_enter_fsync` and the `sys_exit_fsync` after it, in ns, in
/// the instance's lines.
fn syscall_spans(lines: &[String]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut entered = None;
    for l in lines {
        if l.contains("sys_fsync(") {
            entered = Some(stamp_ns(l));
        } else if l.contains("sys_fsync ->") {
            let enter = entered.take().expect("an exit without its enter");
            out.push((enter, stamp_ns(l)));
        }
    }
    out
}

/// When the thread was switched out, in ns, in the instance's lines.
fn switch_outs(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter(|l| l.contains("sched_switch:"))
        .map(|l| stamp_ns(l))
        .collect()
}

/// How far wbscope's stamp `ours` is from the kernel's `theirs` of the
/// same tracepoint, unless the thread was switched out between them.
/// Both are taken in probes of that tracepoint, one after the other: a
/// few µs apart. Since 6.13 the syscall tracepoints run their probes
/// preemptible (`include/linux/tracepoint.h`, `__DECLARE_TRACE_SYSCALL`;
/// each probe disables preemption only for itself), so a thread switched
/// out between the two probes puts any time between the stamps.
fn stamp_gap(theirs: u64, ours: u64, switched: &[u64]) -> Option<i64> {
    let (first, last) = (theirs.min(ours), theirs.max(ours));
    let preempted = switched.iter().any(|&t| t + 1_000 >= first && t <= last);
    (!preempted).then_some(ours as i64 - theirs as i64)
}

/// Each fsync's span against its system call's, stamp by stamp on the
/// same clock (the kernel's truncated to µs): the gaps between them,
/// smallest first, once checked.
fn stamps_match<'a>(
    syscalls: &[(u64, u64)],
    spans: impl Iterator<Item = &'a &'a Value> + Clone,
    switched: &[u64],
) -> Vec<i64> {
    let mut gaps = Vec::new();
    // Per fsync, how much longer wbscope's span is than the system
    // call's: what a clock read late at one end only (the exit's after
    // its lookup, about 3 µs here) adds to every span.
    let mut longer = Vec::new();
    for &(enter, exit) in syscalls {
        // Our stamps come first: the kernel registers its perf handler
        // of the syscall tracepoints (every BPF program's way in) once
        // for all users, and a tracefs instance's handler when the
        // instance first enables one (kernel/trace/trace_syscalls.c,
        // `sys_perf_refcount_enter`, `tr->sys_refcount_enter`); a
        // tracepoint calls its handlers in the order they were
        // registered, and the trace is attached before the instance
        // ([`watch_fsyncs`]; before that, another test's BPF program on
        // any syscall tracepoint reversed the order now and then). Of
        // the spans from 50 ms before the enter, the one that starts
        // nearest it: the file's first fsync is only a write before the
        // loop's first.
        let s = spans
            .clone()
            .filter(|s| {
                (enter.saturating_sub(50_000_000)..=exit + 1_000).contains(&u(s, "start_ns"))
            })
            .min_by_key(|s| u(s, "start_ns").abs_diff(enter))
            .unwrap_or_else(|| panic!("no sync line in the call at {enter}..{exit} ns"));
        let end = u(s, "start_ns") + u(s, "total_ns");
        let start_gap = stamp_gap(enter, u(s, "start_ns"), switched);
        let end_gap = stamp_gap(exit, end, switched);
        if let (Some(a), Some(b)) = (start_gap, end_gap) {
            longer.push(b - a);
        }
        gaps.extend(start_gap.into_iter().chain(end_gap));
    }
    // Two probes of one tracepoint take their stamps a few µs apart: the
    // first probe's own work, 1.5–2.5 µs here alone and up to 5 µs under
    // the whole suite's load, and the µs truncation. An interrupt between
    // them, or the host stealing the vCPU, can part them by a few hundred
    // µs, which no event of the instance shows; a span matched to the
    // wrong call would be off by the 100 ms between fsyncs.
    gaps.sort_unstable_by_key(|g| g.abs());
    let near = gaps.iter().filter(|g| g.abs() <= 10_000).count();
    assert!(
        near * 10 >= gaps.len() * 9 && gaps.len() * 10 >= syscalls.len() * 2 * 9,
        "{near} of {} stamps within 10 µs of the kernel's, of {} in all: {gaps:?}",
        gaps.len(),
        2 * syscalls.len()
    );
    assert!(gaps.iter().all(|g| g.abs() <= 10_000_000), "{gaps:?}");
    // The typical span is as long as its call but for the probes' work:
    // the gaps' load moves both ends together. Our programs run first
    // (above), so a span is longer by what our enter program does after
    // its clock read and the exit's does not: 1.3 µs here, up to 3.3 µs
    // on xfs with two qemu guests busy on the host's two CPUs. A span
    // matched to another call, or ended at another event, is off by
    // milliseconds.
    longer.sort_unstable();
    let typical = longer[longer.len() / 2];
    assert!(typical <= 5_000, "spans longer by {typical} ns: {longer:?}");
    gaps
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// This thread's fsync system calls and its switches out in a tracefs
/// instance of the test's own (the kernel's record), and a durability
/// trace of `mount` started. The trace first: its programs then run
/// before the instance's probes at both ends whatever else is attached
/// ([`stamps_match`] says why the order would otherwise vary).
fn watch_fsyncs(mount: &str, enable: &str) -> (TraceInstance, Tracing) {
    let trace = durability_trace(mount, enable);
    // SAFETY: plain syscall.
    let tid = unsafe { libc::gettid() };
    let filter = format!("common_pid == {tid}");
    let kernel = TraceInstance::new(&[
        ("syscalls/sys_enter_fsync", &filter),
        ("syscalls/sys_exit_fsync", &filter),
        ("sched/sched_switch", &format!("prev_pid == {tid}")),
    ]);
    (kernel, trace)
}

/// `trace --enable ENABLE --json --events --device MOUNT`, started.
fn durability_trace(mount: &str, enable: &str) -> Tracing {
    Tracing::start(&["--enable", enable, "--json", "--events", "--device", mount])
}

/// A sync line's parts, added up (they must equal its `total_ns`).
fn parts(s: &Value) -> u64 {
    ["writeback_ns", "wait_ns", "journal_ns", "other_ns"]
        .iter()
        .map(|k| u(s, k))
        .sum::<u64>()
        + s["flush_ns"].as_u64().unwrap_or(0)
}

/// The top contributor's pid of the commit a sync line waited on.
fn top_contributor(s: &Value) -> Option<u64> {
    s["commit"]["contributors"][0]["pid"].as_u64()
}

#[test]
fn each_fsync_is_split_into_its_parts_and_names_who_shared_its_commit() {
    let _file = crate::support::file_group(module_path!());
    let _one = serial();
    let fs = capped_ext4();
    let mount = fs.mountpoint.display().to_string();
    let dev = dev_of(&fs.mountpoint);
    let (kernel, trace) = watch_fsyncs(&mount, "durability");
    let alone = fsync_every_100ms(&fs.path("alone"));
    let mut dd = bulk_writer(&fs);
    std::thread::sleep(Duration::from_millis(500));
    let beside = fsync_every_100ms(&fs.path("beside"));
    let dd_pid = u64::from(dd.id());
    let _ = dd.kill();
    let _ = dd.wait();
    let lines = trace.stop(libc::SIGINT);
    let kernel_lines = kernel.lines();
    let syscalls = syscall_spans(&kernel_lines);
    let switched = switch_outs(&kernel_lines);

    let me = u64::from(std::process::id());
    let mine = |ino: u64| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["type"] == "sync" && l["pid"] == me && l["ino"] == ino && l["dev"] == dev)
            .collect()
    };
    let (alone, beside) = (mine(alone), mine(beside));
    // Every fsync the kernel saw, once: each file's first (`sync_all`)
    // and its FSYNCS.
    assert_eq!(syscalls.len(), 2 * (FSYNCS + 1), "tracefs: {syscalls:?}");
    assert_eq!(
        alone.len() + beside.len(),
        syscalls.len(),
        "{alone:#?}\n{beside:#?}"
    );
    let gaps = stamps_match(&syscalls, alone.iter().chain(&beside), &switched);
    let ours: f64 = alone
        .iter()
        .chain(&beside)
        .map(|s| u(s, "total_ns") as f64 / 1e9)
        .sum();
    let theirs: f64 = syscalls.iter().map(|(a, b)| (b - a) as f64 / 1e9).sum();

    // The parts tile each fsync, and what is left over is small.
    let mut other_share = Vec::new();
    for s in alone.iter().chain(&beside) {
        let total = u(s, "total_ns");
        assert_eq!(parts(s), total, "{s}");
        other_share.push(u(s, "other_ns") as f64 / total.max(1) as f64);
        assert!(u(s, "pages") >= 1 || s["calls"] == 0, "{s}");
        // Its writeback is its `call` lines, named by thread and start.
        let times = s["call_times_ns"].as_array().expect("call_times_ns");
        assert_eq!(times.len() as u64, u(s, "calls"), "{s}");
        let own: Vec<&Value> = times
            .iter()
            .map(|t| {
                lines
                    .iter()
                    .find(|l| l["type"] == "call" && l["tid"] == s["tid"] && l["time_ns"] == *t)
                    .unwrap_or_else(|| panic!("no call line at {t} for {s}"))
            })
            .collect();
        let pages: u64 = own.iter().map(|c| u(c, "pages_written")).sum();
        assert_eq!(pages, u(s, "pages"), "{s}");
    }
    assert!(median(other_share.clone()) <= 0.10, "{other_share:?}");

    let slowest = |v: &[&Value]| v.iter().map(|s| u(s, "journal_ns")).max().unwrap_or(0);
    let journal_share = |v: &[&Value]| {
        median(
            v.iter()
                .map(|s| u(s, "journal_ns") as f64 / u(s, "total_ns").max(1) as f64)
                .collect(),
        )
    };
    let journal_ms = |v: &[&Value]| {
        let mut ms: Vec<u64> = v.iter().map(|s| u(s, "journal_ns") / 1_000_000).collect();
        ms.sort_unstable();
        ms
    };
    eprintln!(
        "journal ms alone {:?} beside {:?}",
        journal_ms(&alone),
        journal_ms(&beside)
    );
    eprintln!(
        "wbscope {ours:.6} s, system calls {theirs:.6} s, stamps' gaps {:?} ns (median, \
         largest); median other share {:.4}; journal \
         share alone {:.2} beside {:.2}; slowest journal alone {} ns beside {} ns; dd largest \
         in {} of {}",
        (gaps[gaps.len() / 2], gaps[gaps.len() - 1]),
        median(other_share.clone()),
        journal_share(&alone),
        journal_share(&beside),
        slowest(&alone),
        slowest(&beside),
        beside
            .iter()
            .filter(|s| top_contributor(s) == Some(dd_pid))
            .count(),
        beside.len()
    );
    // Beside the large writer, B's fsyncs wait for commits whose largest
    // contributor is that writer, and the journal is most of their time.
    let named = beside
        .iter()
        .filter(|s| top_contributor(s) == Some(dd_pid))
        .count();
    assert!(
        named * 2 >= beside.len(),
        "dd (pid {dd_pid}) is the largest contributor of {named} of {} fsyncs: {beside:#?}",
        beside.len()
    );
    assert!(journal_share(&beside) >= 0.5, "{beside:#?}");
    // Alone, the only data written during its commits is its own
    // (whoever wrote it back: the dirtier is charged).
    for s in &alone {
        for c in s["commit"]["contributors"].as_array().into_iter().flatten() {
            assert!(c["pages"] == 0 || c["pid"] == me, "{s}");
        }
    }
    // The journal part of the typical fsync: a few ms alone, tens beside
    // dd (medians: one slow commit alone, from the host's own writeback
    // of the image, must not decide).
    let typical = |v: &[&Value]| median(v.iter().map(|s| u(s, "journal_ns") as f64).collect());
    assert!(
        typical(&beside) >= 4.0 * typical(&alone).max(1e6),
        "median journal parts: beside {} ns, alone {} ns",
        typical(&beside),
        typical(&alone)
    );
}

/// `doctor` names `fsync-entangled` for the fsyncs beside the bulk
/// writer, naming it, and not for the same fsyncs alone (where the
/// commits are their own: `journal-bound` at most).
#[test]
fn doctor_names_the_entanglement_only_beside_the_bulk_writer() {
    let _file = crate::support::file_group(module_path!());
    let _one = serial();
    for beside in [false, true] {
        let fs = capped_ext4();
        let mount = fs.mountpoint.display().to_string();
        let doctor = crate::support::wbscope()
            .args(["doctor", "--json", "--duration", "8", "--device", &mount])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("doctor");
        // Its probes attached (as tests/doctor.rs waits).
        std::thread::sleep(Duration::from_secs(3));
        let mut dd = beside.then(|| bulk_writer(&fs));
        std::thread::sleep(Duration::from_millis(500));
        fsync_every_100ms(&fs.path("small"));
        let dd_pid = dd.as_ref().map(|d| u64::from(d.id()));
        if let Some(d) = dd.as_mut() {
            let _ = d.kill();
            let _ = d.wait();
        }
        let out = doctor.wait_with_output().expect("doctor");
        let code = out.status.code();
        assert!(
            matches!(code, Some(0 | 3)),
            "doctor: {code:?} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
        let named = |name: &str| {
            r["findings"]
                .as_array()
                .expect("findings")
                .iter()
                .find(|f| f["name"] == name)
                .cloned()
        };
        let entangled = named("fsync-entangled");
        eprintln!("beside {beside}: {}", r["findings"]);
        if beside {
            let f = entangled.unwrap_or_else(|| panic!("no fsync-entangled: {r}"));
            assert_eq!(f["evidence"]["pid"], u64::from(std::process::id()), "{f}");
            assert_eq!(f["evidence"]["other_pid"], dd_pid.expect("dd"), "{f}");
            assert_eq!(f["evidence"]["other_comm"], "dd", "{f}");
        } else {
            assert!(entangled.is_none(), "alone: {r}");
            let j = named("journal-bound").unwrap_or_else(|| panic!("no journal-bound: {r}"));
            assert_eq!(j["evidence"]["pid"], u64::from(std::process::id()), "{j}");
        }
    }
}

/// xfs and btrfs: every fsync is a span as the system call counted it,
/// on the filesystem's device, its parts tiling it; xfs's log force is
/// its journal part, and btrfs's own writeback calls are found in it.
#[test]
fn xfs_and_btrfs_fsyncs_are_split_too() {
    let _file = crate::support::file_group(module_path!());
    let _one = serial();
    for fstype in ["xfs", "btrfs"] {
        let fs = LoopFs::new(fstype, 512);
        let mount = fs.mountpoint.display().to_string();
        let dev = dev_of(&fs.mountpoint);
        // With the block programs: btrfs's cache flush, through its own
        // bios, is found among the device's flush requests.
        let (kernel, trace) = watch_fsyncs(&mount, "durability,device_io");
        let ino = fsync_every_100ms(&fs.path("small"));
        let lines = trace.stop(libc::SIGINT);
        let kernel_lines = kernel.lines();
        let syscalls = syscall_spans(&kernel_lines);
        let switched = switch_outs(&kernel_lines);
        let me = u64::from(std::process::id());
        let mine: Vec<&Value> = lines
            .iter()
            .filter(|l| l["type"] == "sync" && l["pid"] == me)
            .collect();
        assert_eq!(mine.len(), syscalls.len(), "{fstype}: {mine:#?}");
        assert_eq!(syscalls.len(), FSYNCS + 1, "{fstype}");
        stamps_match(&syscalls, mine.iter(), &switched);
        // btrfs: the superblock's device, as its calls name it (stat(2)
        // gives the subvolume's anonymous one).
        let dev = match fstype {
            "btrfs" => lines
                .iter()
                .find(|l| l["type"] == "call" && l["ino"] == ino)
                .map(|l| l["dev"].as_str().expect("dev").to_string())
                .expect("a call on the file"),
            _ => dev,
        };
        let mut journal = 0;
        let mut written = 0;
        let mut flushed = 0;
        for s in &mine {
            assert_eq!(s["dev"], dev, "{fstype}: {s}");
            assert_eq!(s["fs"], fstype, "{fstype}: {s}");
            if fstype == "xfs" {
                assert_eq!(s["ino"], ino, "{s}");
            }
            assert_eq!(parts(s), u(s, "total_ns"), "{s}");
            journal += usize::from(u(s, "journal_ns") > 0);
            // Its own calls, by their pages: a call put together from
            // per-folio events (this host's xfs and btrfs) lasts from its
            // first folio to its last, 0 for one folio (docs/probes.md).
            written += usize::from(u(s, "calls") > 0 && s["pages"].as_i64() > Some(0));
            flushed += usize::from(s["flush_ns"].as_u64() > Some(0));
        }
        eprintln!(
            "{fstype}: {} fsyncs, {journal} with a journal part, {written} with writeback, \
             {flushed} with a flush",
            mine.len()
        );
        match fstype {
            "xfs" => assert!(journal * 2 >= mine.len(), "xfs: {mine:#?}"),
            _ => {
                assert!(written * 2 >= mine.len(), "btrfs: {mine:#?}");
                assert!(flushed * 2 >= mine.len(), "btrfs: {mine:#?}");
            }
        }
    }
}

/// The other durability calls, one each on ext4: msync(MS_SYNC),
/// sync_file_range with a wait flag, an O_SYNC write; and two that wait
/// for nothing and are no span: msync(MS_ASYNC), sync_file_range(WRITE).
/// And a syncfs(2), whose writeback the flusher does: ext4's `sync_fs`
/// event names its filesystem.
#[test]
fn every_durability_call_is_a_span_of_its_kind() {
    let _file = crate::support::file_group(module_path!());
    let _one = serial();
    let fs = LoopFs::new("ext4", 256);
    let mount = fs.mountpoint.display().to_string();
    let trace = durability_trace(&mount, "durability");
    let path = fs.path("mapped");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(1 << 20).expect("size");
    let fd = f.as_raw_fd();
    // SAFETY: a shared mapping of the whole open file, unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            1 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: inside the mapping; plain syscalls on our own mapping and fd.
    unsafe {
        std::ptr::write_bytes(map.cast::<u8>(), 7, 8192);
        assert_eq!(libc::msync(map, 1 << 20, libc::MS_ASYNC), 0);
        assert_eq!(libc::msync(map, 1 << 20, libc::MS_SYNC), 0);
        std::ptr::write_bytes(map.cast::<u8>().add(65536), 9, 8192);
        assert_eq!(libc::munmap(map, 1 << 20), 0);
        let write = libc::SYNC_FILE_RANGE_WRITE;
        assert_eq!(libc::sync_file_range(fd, 65536, 8192, write), 0);
        f.write_all_at(&[3u8; 8192], 131072).expect("pwrite");
        let wait = libc::SYNC_FILE_RANGE_WAIT_BEFORE | write | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        assert_eq!(libc::sync_file_range(fd, 131072, 8192, wait), 0);
    }
    let mut synced = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_SYNC)
        .open(fs.path("osync"))
        .expect("O_SYNC open");
    synced.write_all(&[1u8; 4096]).expect("O_SYNC write");
    // syncfs(2): ext4's `ext4_sync_fs` names the filesystem.
    f.write_all_at(&[5u8; 8192], 262144).expect("pwrite");
    // SAFETY: plain syscall on an open descriptor.
    assert_eq!(unsafe { libc::syncfs(fd) }, 0, "syncfs");
    let lines = trace.stop(libc::SIGINT);
    let me = u64::from(std::process::id());
    let mut kinds: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "sync" && l["pid"] == me)
        .map(|l| l["kind"].as_str().expect("kind"))
        .collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["msync", "o_sync", "sync_file_range", "syncfs"],
        "{lines:#?}"
    );
    let dev = dev_of(&fs.mountpoint);
    let syncfs = lines
        .iter()
        .find(|l| l["type"] == "sync" && l["kind"] == "syncfs")
        .expect("syncfs");
    assert_eq!(
        (&syncfs["dev"], &syncfs["fs"]),
        (&Value::from(dev), &Value::from("ext4"))
    );
    assert_eq!(parts(syncfs), u(syncfs, "total_ns"), "{syncfs}");
}

/// The cache-flush requests each device completed, by class, as
/// `biolatency -F` splits them (by the request's flags), against
/// bpftrace on the same block tracepoints and the device's own flush
/// counter (/proc/diskstats fields 16-17, Linux 5.5+).
#[test]
fn flush_requests_by_class_equal_an_independent_trace() {
    let _file = crate::support::file_group(module_path!());
    let _one = serial();
    // SAFETY: plain syscall (an earlier test's loop image, as in
    // capped_ext4).
    unsafe { libc::sync() };
    // Initialised by mkfs, so that no `ext4lazyinit` flush falls between
    // the three sources' starts; small, so that this leaves the host
    // little to write back for the tests after it.
    let fs = LoopFs::with_args(
        "ext4",
        64,
        &["-E", "lazy_itable_init=0,lazy_journal_init=0"],
        &[],
    );
    let mount = fs.mountpoint.display().to_string();
    let dev = dev_of(&fs.mountpoint);
    let kdev = kernel_dev(&dev);
    let disk = std::fs::read_link(format!("/sys/dev/block/{dev}"))
        .expect("sysfs link")
        .file_name()
        .expect("disk name")
        .to_string_lossy()
        .into_owned();
    let flushes_done = || -> u64 {
        let stat = std::fs::read_to_string(format!("/sys/block/{disk}/stat")).expect("stat");
        // Documentation/block/stat.rst: field 16 is flush requests completed.
        stat.split_whitespace()
            .nth(15)
            .and_then(|f| f.parse().ok())
            .expect("a kernel with flush fields (5.5+)")
    };
    // biolatency's way: the time from issue to completion of each request,
    // keyed by its flags (here `rwbs`, the block tracepoints' letters). An
    // empty flush is sector 0 at issue and -1 at completion (block.rs,
    // `rq_complete`); biolatency keys by the request's address instead.
    let script = format!(
        "tracepoint:block:block_rq_issue /args->dev == {kdev}/ {{ @start[args->sector] = nsecs; }}
         tracepoint:block:block_rq_complete /args->dev == {kdev}/ {{
           $s = args->sector;
           if ((int64)$s == -1) {{ $s = 0; }}
           if (@start[$s]) {{
             printf(\"rq %s %d\\n\", args->rwbs, nsecs - @start[$s]);
             delete(@start[$s]);
           }}
         }}
         END {{ clear(@start); }}"
    );
    let peer = Bpftrace::start(&script);
    // Both block paths at once: the BTF one (chosen where tp_btf loads)
    // and the classic tracepoints, each counting the same requests.
    let traces = [&[][..], &["--disable", "tp_btf"][..]].map(|more| {
        let mut args = vec!["--enable", "device_io", "--json", "--device", &mount];
        args.extend(more);
        (more.join(" "), Tracing::start(&args))
    });
    let before = flushes_done();
    let dd = crate::support::run(
        wbscope_programs::DD
            .command()
            .arg("if=/dev/zero")
            .arg(format!("of={}", fs.path("dsync").display()))
            .args(["bs=4k", "count=100", "oflag=dsync", "status=none"]),
    );
    assert!(dd.is_empty(), "{dd}");
    let flushed = flushes_done() - before;
    // Each O_DSYNC write ends in a journal commit or a flush of its own.
    assert!(flushed >= 100, "{flushed} flushes for 100 O_DSYNC writes");
    let outputs = traces.map(|(name, t)| (name, t.stop(libc::SIGINT)));
    let peer = peer.stop();

    // bpftrace: the latencies of each flag string; flush requests are the
    // `rwbs` the kernel prints for them (block/blktrace.c `blk_fill_rwbs()`:
    // `F` for REQ_PREFLUSH, then the op, `F` for REQ_OP_FLUSH).
    let mut theirs: BTreeMap<String, Vec<u64>> = Default::default();
    for l in &peer {
        let mut w = l.split_whitespace();
        if w.next() == Some("rq") {
            let (rwbs, ns) = (w.next().expect("rwbs"), w.next().expect("ns"));
            theirs
                .entry(rwbs.to_string())
                .or_default()
                .push(ns.parse().expect("ns"));
        }
    }
    let class_of = |rwbs: &str| -> Option<&str> {
        let b = rwbs.as_bytes();
        let pre = b.first() == Some(&b'F');
        let op = b.get(usize::from(pre)).copied();
        let fua = b.get(usize::from(pre) + 1) == Some(&b'F');
        match (op, pre, fua) {
            (Some(b'F'), ..) => Some("flush"),
            (_, true, true) => Some("preflush_fua"),
            (_, true, false) => Some("preflush"),
            (_, false, true) => Some("fua"),
            _ => None,
        }
    };
    let mut want: BTreeMap<&str, Vec<u64>> = Default::default();
    for (rwbs, ns) in &theirs {
        if let Some(class) = class_of(rwbs) {
            want.entry(class).or_default().extend(ns);
        }
    }
    assert!(
        want.contains_key("flush"),
        "bpftrace saw no flush: {theirs:?}"
    );
    for (path, lines) in &outputs {
        flushes_match(path, lines, &dev, flushed, &want, &theirs);
    }
}

/// One trace's flush requests of device `dev` against bpftrace's
/// (`want`, by class) and the device's flush counter (`flushed`).
fn flushes_match(
    path: &str,
    lines: &[Value],
    dev: &str,
    flushed: u64,
    want: &BTreeMap<&str, Vec<u64>>,
    theirs: &BTreeMap<String, Vec<u64>>,
) {
    /// Per class: requests, and (lo, hi, count) latency buckets.
    type Classes = BTreeMap<String, (u64, Vec<(u64, u64, u64)>)>;
    let mut got = Classes::new();
    for l in lines.iter().filter(|l| l["type"] == "interval") {
        for d in l["devices"].as_array().expect("devices") {
            if d["dev"] != dev {
                continue;
            }
            for f in d["flushes"].as_array().into_iter().flatten() {
                let e = got
                    .entry(f["kind"].as_str().expect("kind").to_string())
                    .or_default();
                e.0 += u(f, "requests");
                for b in f["latency_ns"].as_array().expect("buckets") {
                    e.1.push((u(b, "lo"), u(b, "hi"), u(b, "count")));
                }
            }
        }
    }
    assert_eq!(
        got.iter()
            .map(|(k, v)| (k.clone(), v.0))
            .collect::<Vec<_>>(),
        want.iter()
            .map(|(k, v)| (k.to_string(), v.len() as u64))
            .collect::<Vec<_>>(),
        "flush requests by class: wbscope ({path:?}) vs bpftrace ({theirs:?})"
    );
    // The empty flushes are the device's own flush count.
    assert_eq!(
        got.get("flush").map(|g| g.0),
        Some(flushed),
        "{path:?}: {got:?}"
    );
    // Medians: the two programs stamp the same events a few µs apart, so
    // bpftrace's median lies in wbscope's p50 bucket or one beside it.
    for (class, ns) in want {
        let p50 = median(ns.iter().map(|&n| n as f64).collect());
        let mut buckets = got[*class].1.clone();
        buckets.sort_unstable();
        let total: u64 = buckets.iter().map(|b| b.2).sum();
        let mut seen = 0;
        let (lo, hi, _) = *buckets
            .iter()
            .find(|b| {
                seen += b.2;
                seen * 2 >= total
            })
            .expect("a p50 bucket");
        assert!(
            (lo as f64 / 2.0..=hi as f64 * 2.0 + 1.0).contains(&p50),
            "{path:?} {class}: bpftrace's median {p50} ns outside [{lo}, {hi}] and its neighbours"
        );
    }
}
