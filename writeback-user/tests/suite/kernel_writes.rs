//! Write spans (`--enable writes`) against the running kernel (root):
//! each part of a buffered write caused on purpose on a loop filesystem
//! made for the test, and the spans checked against bpftrace on the same
//! tracepoints (the write system call's enter and exit, the pauses of
//! `balance_dirty_pages`, the waits for pages under writeback, memory
//! cgroup reclaim).
use std::{
    fs,
    path::PathBuf,
    process::Command,
    sync::{Mutex, MutexGuard, PoisonError},
};

use crate::support::{Bpftrace, LoopFs, Tracing};
use serde_json::Value;

/// One test of this file at a time: each tells its writer from others
/// by its name (`dd`, `xfs_io`) for bpftrace, one sets the machine's
/// dirty limits, and another's writer would change the dirty levels a
/// pause is judged against.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The run's `write` lines (one per slow write) and interval lines'
/// `writes` of processes named `comm`.
fn of_comm(lines: &[Value], comm: &str) -> (Vec<Value>, Vec<Value>) {
    let slow = lines
        .iter()
        .filter(|l| l["type"] == "write" && l["comm"] == comm)
        .cloned()
        .collect();
    let per_interval = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .flat_map(|l| l["writes"].as_array().cloned().unwrap_or_default())
        .filter(|w| w["comm"] == comm)
        .collect();
    (slow, per_interval)
}

/// The `write-stalled` finding the trace opened for `comm`, if any.
fn stalled(lines: &[Value], comm: &str) -> Option<Value> {
    lines
        .iter()
        .find(|l| {
            l["type"] == "finding" && l["name"] == "write-stalled" && l["evidence"]["comm"] == comm
        })
        .cloned()
}

fn sum(values: &[Value], key: &str) -> u64 {
    values.iter().map(|v| v[key].as_u64().unwrap_or(0)).sum()
}

/// bpftrace's `@name: N` line.
fn peer_count(out: &[String], name: &str) -> u64 {
    out.iter()
        .find_map(|l| l.strip_prefix(&format!("@{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A cgroup v1 directory of the test's own (`memory` or `blkio`),
/// removed on drop once its processes have ended.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(controller: &str, name: &str) -> Cgroup {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/{controller}/wbscope-test-{name}-{}",
            std::process::id()
        ));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Cgroup(dir)
    }

    fn set(&self, file: &str, value: &str) {
        fs::write(self.0.join(file), value)
            .unwrap_or_else(|e| panic!("{} {file} = {value}: {e}", self.0.display()));
    }

    /// `program ARGS` run inside the cgroup (`sh` puts itself in, then
    /// execs it), to its end.
    fn run(&self, program: &wbscope_programs::Program, args: &[String]) -> String {
        let script = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", self.0.display());
        let mut cmd: Command = wbscope_programs::SH.command();
        cmd.arg("-c")
            .arg(script)
            .arg("sh")
            .arg(program.name)
            .args(args);
        crate::support::run(&mut cmd)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// A block queue attribute set for the test and put back on drop, before
/// the loop device is detached (declare it after the filesystem).
struct QueueKnob {
    path: PathBuf,
    was: String,
}

impl QueueKnob {
    fn set(device: &str, knob: &str, value: &str) -> QueueKnob {
        let name = device.trim_start_matches("/dev/");
        let path = PathBuf::from(format!("/sys/block/{name}/queue/{knob}"));
        let was = fs::read_to_string(&path).expect("queue knob");
        fs::write(&path, value).expect("set queue knob");
        QueueKnob {
            path,
            was: was.trim().to_string(),
        }
    }
}

impl Drop for QueueKnob {
    fn drop(&mut self) {
        let _ = fs::write(&self.path, &self.was);
    }
}

/// The machine's dirty limits, set for a test and put back on drop:
/// writing `dirty_bytes` zeroes `dirty_ratio` and the other way round
/// (mm/page-writeback.c `dirty_bytes_handler()`), so whichever of each
/// pair was in force is written back.
struct GlobalDirty {
    was: Vec<(&'static str, String)>,
}

impl GlobalDirty {
    const KNOBS: [&'static str; 4] = [
        "dirty_bytes",
        "dirty_ratio",
        "dirty_background_bytes",
        "dirty_background_ratio",
    ];

    fn set_bytes(dirty: u64, background: u64) -> GlobalDirty {
        let read = |k: &str| {
            fs::read_to_string(format!("/proc/sys/vm/{k}"))
                .expect("vm knob")
                .trim()
                .to_string()
        };
        let was = Self::KNOBS.iter().map(|&k| (k, read(k))).collect();
        let guard = GlobalDirty { was };
        fs::write(
            "/proc/sys/vm/dirty_background_bytes",
            background.to_string(),
        )
        .expect("set");
        fs::write("/proc/sys/vm/dirty_bytes", dirty.to_string()).expect("set");
        guard
    }
}

impl Drop for GlobalDirty {
    fn drop(&mut self) {
        // The pair member that was non-zero is the one in force.
        for pair in self.was.chunks(2) {
            let [(bytes_knob, bytes), (ratio_knob, ratio)] = pair else {
                continue;
            };
            let (knob, value) = if bytes != "0" {
                (bytes_knob, bytes)
            } else {
                (ratio_knob, ratio)
            };
            let _ = fs::write(format!("/proc/sys/vm/{knob}"), value);
        }
    }
}

/// A `dd` under a machine-wide `dirty_bytes` of 32 MiB, on a device with
/// no limit of its own: its pauses are the global domain's, and its
/// throttle part is the tracepoint's pauses.
#[test]
fn a_writer_under_the_global_dirty_bytes_is_throttled_by_global() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 1024);
    // SAFETY: plain syscall: what earlier tests left dirty is written
    // first, so the limit meets this writer's pages only.
    unsafe { libc::sync() };
    let _limits = GlobalDirty::set_bytes(32 << 20, 16 << 20);
    let peer = Bpftrace::start(
        r#"tracepoint:writeback:balance_dirty_pages /comm == "dd" && args->pause > 0/ {
               @pauses = count(); @pause_ms = sum(args->pause); }"#,
    );
    let trace = Tracing::start(&["--json", "--enable", "writes", "--slow-write", "2"]);
    let dd = crate::support::run(
        wbscope_programs::DD
            .command()
            .arg("if=/dev/zero")
            .arg(format!("of={}", fs.path("dd").display()))
            .args(["bs=64k", "count=2048", "status=none"]),
    );
    assert!(dd.is_empty(), "{dd}");
    let lines = trace.stop(libc::SIGINT);
    let peer = peer.stop();
    let (_, per_interval) = of_comm(&lines, "dd");
    assert_eq!(sum(&per_interval, "writes"), 2048);
    let pauses = sum(&per_interval, "pauses");
    assert!(pauses > 5, "dd was throttled: {pauses} pauses");
    assert_eq!(pauses, peer_count(&peer, "pauses"), "{peer:?}");
    // Named global: in the calls' limits, and for most of the pause time
    // by the interval lines' split (a pause near the free-run ceiling can
    // read as the device's, docs/findings.md "Which limit": 88–100% here
    // over runs).
    for l in per_interval
        .iter()
        .filter(|l| l["pauses"].as_u64() > Some(0))
    {
        let by = l["throttled_by"].as_array().expect("throttled_by");
        assert!(by.iter().any(|b| b == "global"), "{l}");
    }
    let limits = |key: &str| -> u64 {
        lines
            .iter()
            .filter(|l| l["type"] == "interval")
            .map(|l| l["throttle"]["limits"][key].as_u64().unwrap_or(0))
            .sum()
    };
    let (global, all) = (
        limits("global_ms"),
        limits("global_ms") + limits("bdi_ms") + limits("memcg_ms"),
    );
    assert!(global * 4 >= all * 3, "global {global} of {all} ms");
    let throttle = sum(&per_interval, "throttle_ns");
    let announced = peer_count(&peer, "pause_ms") * 1_000_000;
    assert!(throttle <= announced, "{throttle} ns > {announced} ns");
    assert!(
        announced - throttle <= pauses * crate::support::tick_ns(),
        "throttle {throttle} ns, announced {announced} ns in {pauses} pauses"
    );
}

/// A `dd` of 64 KiB writes on a device with a 16 MiB strict dirty cap,
/// beside a writer of its own: its write system calls as wbscope spans
/// them equal bpftrace's on `sys_enter_write`/`sys_exit_write` (count
/// exact, total time within 1%), their pauses are the device's own limit
/// (`bdi`), the throttle part is the pauses the tracepoint announced, and
/// the parts leave little in `other` for throttled calls.
#[test]
fn a_throttled_writers_calls_equal_bpftrace_and_their_pauses_are_the_devices() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let mut fs = LoopFs::new("ext4", 2048);
    fs.scratch().limit_dirty(16 << 20).expect("cap");
    let peer = Bpftrace::start(
        r#"tracepoint:syscalls:sys_enter_write /comm == "dd"/ { @start[tid] = nsecs; }
           tracepoint:syscalls:sys_exit_write /@start[tid]/ {
               @calls = count(); @ns = sum(nsecs - @start[tid]); delete(@start[tid]); }
           tracepoint:writeback:balance_dirty_pages /comm == "dd" && args->pause > 0/ {
               @pauses = count(); @pause_ms = sum(args->pause); }
           END { clear(@start); }"#,
    );
    // Slow from 2 ms: a throttled call sleeps at least a pause of a few
    // ms, an unthrottled 64 KiB copy takes tens of µs.
    let trace = Tracing::start(&["--json", "--enable", "writes", "--slow-write", "2"]);
    let mut other = crate::support::wbscope();
    other.args(["write", "--dir"]).arg(&fs.mountpoint).args([
        "--size",
        "384M",
        "--strategy",
        "buffered",
    ]);
    let mut other = other.spawn().expect("the other writer");
    let dd = crate::support::run(
        wbscope_programs::DD
            .command()
            .arg("if=/dev/zero")
            .arg(format!("of={}", fs.path("dd").display()))
            .args(["bs=64k", "count=3072", "status=none"]),
    );
    assert!(dd.is_empty(), "{dd}");
    assert!(other.wait().expect("wait").success());
    let lines = trace.stop(libc::SIGINT);
    let peer = peer.stop();

    let (slow, per_interval) = of_comm(&lines, "dd");
    let calls = sum(&per_interval, "writes");
    let ns = sum(&per_interval, "total_ns");
    assert_eq!(calls, 3072, "every write of dd");
    assert_eq!(calls, peer_count(&peer, "calls"), "{peer:?}");
    let peer_ns = peer_count(&peer, "ns") as f64;
    assert!(
        (ns as f64 - peer_ns).abs() <= peer_ns * 0.01,
        "total {ns} ns against bpftrace's {peer_ns}"
    );
    // The pauses: as many as the tracepoint announced for dd, all the
    // device's, and the time asleep the tracepoint's `pause`, short by
    // under a tick each: `io_schedule_timeout()` ends a pause at the tick
    // its jiffies end at (mm/page-writeback.c, kernel/time/timer.c).
    let pauses = sum(&per_interval, "pauses");
    assert_eq!(pauses, peer_count(&peer, "pauses"), "{peer:?}");
    assert!(pauses > 10, "dd was throttled: {pauses} pauses");
    for l in per_interval
        .iter()
        .filter(|l| l["pauses"].as_u64() > Some(0))
    {
        assert_eq!(l["throttled_by"], serde_json::json!(["bdi"]), "{l}");
    }
    let throttle = sum(&per_interval, "throttle_ns");
    let announced = peer_count(&peer, "pause_ms") * 1_000_000;
    let short = announced - throttle.min(announced);
    eprintln!(
        "throttle {throttle} ns of the {announced} ns announced in {pauses} pauses \
         ({short} ns short)"
    );
    assert!(throttle <= announced, "{throttle} ns > {announced} ns");
    assert!(
        short <= pauses * crate::support::tick_ns(),
        "throttle {throttle} ns, announced {announced} ns in {pauses} pauses"
    );
    // Each call's parts add up; of the throttled ones the median leaves
    // at most 5% of its time in `other` (the copy, on the CPU).
    let mut shares: Vec<f64> = Vec::new();
    for w in &slow {
        let parts: u64 = [
            "throttle_ns",
            "stable_ns",
            "reclaim_ns",
            "blocked_ns",
            "other_ns",
        ]
        .iter()
        .map(|k| w[*k].as_u64().unwrap())
        .sum();
        assert_eq!(parts, w["total_ns"].as_u64().unwrap(), "{w}");
        if w["pauses"].as_u64() > Some(0) {
            shares.push(w["other_ns"].as_f64().unwrap() / w["total_ns"].as_f64().unwrap());
        }
    }
    shares.sort_by(f64::total_cmp);
    assert!(
        shares.len() > 10,
        "{} throttled calls written",
        shares.len()
    );
    let median = shares[shares.len() / 2];
    eprintln!(
        "median share of other in {} throttled calls: {:.4}",
        shares.len(),
        median
    );
    assert!(median <= 0.05, "median share of other {median}");
}

/// Rewriting pages still under writeback on a device that requires
/// stable pages (`queue/stable_writes` set on the loop device) waits for
/// the device: writeback started by `sync_file_range(WRITE)` and held
/// back by a blkio cgroup's 8 MB/s, then the same 8 MiB written again.
/// The waits are as many as the kernel's `folio_wait_writeback` events
/// in the writer (bpftrace), and hold nearly all of those calls' time.
#[test]
fn rewriting_pages_under_writeback_is_named_stable() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    let fs = LoopFs::new("ext4", 256);
    let _stable = QueueKnob::set(&fs.device, "stable_writes", "1");
    // A superblock takes the device's stable-writes flag when mounted
    // (`SB_I_STABLE_WRITES`, fs/super.c): mounted again now that the
    // device requires them.
    let mount = fs.mountpoint.display().to_string();
    crate::support::run(wbscope_programs::UMOUNT.command().arg(&mount));
    crate::support::run(
        wbscope_programs::MOUNT
            .command()
            .args(["-t", "ext4", &fs.device, &mount]),
    );
    let slow_device = Cgroup::new("blkio", "stable");
    let disk = crate::support::disk_majmin(&fs.device);
    slow_device.set(
        "blkio.throttle.write_bps_device",
        &format!("{disk} 8388608"),
    );
    let peer = Bpftrace::start(
        r#"tracepoint:writeback:folio_wait_writeback /comm == "xfs_io"/ { @waits = count(); }
           tracepoint:syscalls:sys_enter_pwrite64 /comm == "xfs_io"/ { @calls = count(); }"#,
    );
    // Only this filesystem's writes.
    let trace = Tracing::start(&[
        "--json",
        "--enable",
        "writes",
        "--slow-write",
        "0",
        "--device",
        &mount,
    ]);
    let mut args: Vec<String> = vec!["-f".into()];
    for _ in 0..4 {
        for c in ["pwrite -q -b 1m 0 8m", "sync_range -w 0 8m"] {
            args.push("-c".into());
            args.push(c.into());
        }
    }
    args.push(fs.path("rewritten").display().to_string());
    let out = slow_device.run(&wbscope_programs::XFS_IO, &args);
    assert!(out.is_empty(), "{out}");
    let lines = trace.stop(libc::SIGINT);
    let peer = peer.stop();

    let (slow, per_interval) = of_comm(&lines, "xfs_io");
    // 4 × 8 writes of 1 MiB on the traced device (the shell's write of
    // its pid into cgroup.procs, before the exec, is on cgroupfs).
    assert_eq!(sum(&per_interval, "writes"), 32);
    assert_eq!(peer_count(&peer, "calls"), 32, "{peer:?}");
    let waits = sum(&per_interval, "stable_waits");
    assert!(waits >= 3, "{waits} stable-page waits");
    assert_eq!(waits, peer_count(&peer, "waits"), "{peer:?}");
    let waited: Vec<&Value> = slow
        .iter()
        .filter(|w| w["stable_waits"].as_u64() > Some(0))
        .collect();
    assert!(!waited.is_empty());
    let total: u64 = waited.iter().map(|w| w["total_ns"].as_u64().unwrap()).sum();
    let stable: u64 = waited
        .iter()
        .map(|w| w["stable_ns"].as_u64().unwrap())
        .sum();
    // 24 MiB rewritten behind 8 MB/s: about 3 s of waiting.
    assert!(stable > 1_000_000_000, "{stable} ns stable");
    assert!(
        stable as f64 >= total as f64 * 0.9,
        "{stable} of {total} ns"
    );
    // A wait can find its folio's writeback ending as it starts and
    // sleep for nothing (a 124 µs write with one such wait was seen):
    // every write that waited a millisecond or more is named stable.
    let blocked: Vec<&&Value> = waited
        .iter()
        .filter(|w| w["total_ns"].as_u64() >= Some(1_000_000))
        .collect();
    assert!(!blocked.is_empty());
    for w in blocked {
        assert_eq!(w["waited_for"], "stable", "{w}");
    }
    let f = stalled(&lines, "xfs_io").expect("write-stalled");
    assert_eq!(f["evidence"]["part"], "stable", "{f}");
    assert!(
        f["advice"].as_str().unwrap().contains("stable_writes"),
        "{f}"
    );
}

/// A writer in a memory cgroup (v1) of 12 MiB writing 128 MiB reclaims
/// its own page cache inside its writes, most of their time: the reclaim
/// part is the time between bpftrace's `mm_vmscan_memcg_reclaim_begin`
/// and `_end` in that writer (within 10%: reclaim outside a write, in
/// dd's read of /dev/zero, is not a write's), and `write-stalled` shows
/// it as the largest wait a tracepoint names (its write lines do, where
/// its p99 stays under the finding's threshold).
#[test]
fn a_writer_over_its_memory_limit_is_named_reclaim() {
    let _file = crate::support::file_group(module_path!());
    let _serial = serial();
    if !std::path::Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
        eprintln!("no cgroup v1 memory controller here: the VM guests check reclaim");
        return;
    }
    let fs = LoopFs::new("ext4", 512);
    let small = Cgroup::new("memory", "reclaim");
    small.set("memory.limit_in_bytes", &(12u64 << 20).to_string());
    let peer = Bpftrace::start(
        r#"tracepoint:vmscan:mm_vmscan_memcg_reclaim_begin /comm == "dd"/ { @start[tid] = nsecs; }
           tracepoint:vmscan:mm_vmscan_memcg_reclaim_end /@start[tid]/ {
               @reclaims = count(); @ns = sum(nsecs - @start[tid]); delete(@start[tid]); }
           END { clear(@start); }"#,
    );
    let trace = Tracing::start(&["--json", "--enable", "writes", "--slow-write", "1000"]);
    let out = small.run(
        &wbscope_programs::DD,
        &[
            "if=/dev/zero".into(),
            format!("of={}", fs.path("big").display()),
            // 4 MiB a call: each reclaims a third of its cgroup.
            "bs=4M".into(),
            "count=32".into(),
            "status=none".into(),
        ],
    );
    assert!(out.is_empty(), "{out}");
    let lines = trace.stop(libc::SIGINT);
    let peer = peer.stop();
    let (_, per_interval) = of_comm(&lines, "dd");
    // 32 writes of 4 MiB, and the shell's of its pid into cgroup.procs.
    assert_eq!(sum(&per_interval, "writes"), 33);
    let reclaim = sum(&per_interval, "reclaim_ns") as f64;
    let peer_ns = peer_count(&peer, "ns") as f64;
    assert!(peer_count(&peer, "reclaims") > 0, "{peer:?}");
    assert!(
        // Each reclaim is timed by two programs on the same events as
        // bpftrace's, its clock read a few µs apart: 1% over at most.
        reclaim <= peer_ns * 1.01 && reclaim >= peer_ns * 0.9,
        "reclaim {reclaim} ns in writes against bpftrace's {peer_ns} ns"
    );
    // The finding names reclaim as the largest wait a tracepoint marks,
    // a quarter of the writes' time or more. It need not be the largest
    // part of all: time off the CPU outside reclaim (`blocked`: dd
    // preempted by the loop device's workers writing back what reclaim
    // pushed out) matched it in one run (32.4 against 32.3 ms), and dd's
    // own copying of 4 MiB a write into the page cache, on the CPU
    // (`other`), passed it in another (45.8 against 35.4 ms), so the
    // finding's dominant part is not asserted.
    // The finding starts at a p99 of 10 ms (model findings/writes.rs
    // INFO_MS). On a quiet host each 4 MiB write's reclaim can take 1-4
    // ms, the p99 stays under it and there is no finding (7 runs of 12
    // one afternoon): the write lines' parts must then name reclaim
    // the same way.
    let p99 = per_interval
        .iter()
        .map(|l| l["p99_ns"].as_u64().unwrap_or(0))
        .max();
    match stalled(&lines, "dd") {
        Some(f) => crate::support::assert_largest_named_wait(&f, "reclaim"),
        None => {
            assert!(
                p99 < Some(10_000_000),
                "no write-stalled finding: {per_interval:?}"
            );
            let part = |name: &str| sum(&per_interval, &format!("{name}_ns"));
            let named = part("reclaim");
            assert!(named * 4 >= part("total"), "{per_interval:?}");
            assert!(
                named > part("throttle") && named > part("stable"),
                "{per_interval:?}"
            );
        }
    }
}
