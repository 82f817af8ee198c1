//! On-CPU time of writepages calls without a program on the scheduler
//! (issue 19), against the running kernel (root): the calling thread's
//! run time read at each call's start and end agrees with the old
//! `sched_switch` figure on the same calls, and a context-switch storm
//! that writes nothing runs next to nothing of the tracer.
mod support;

use std::{
    collections::HashMap,
    fs::File,
    io::{Read, Write},
    os::unix::fs::MetadataExt,
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use support::LoopFs;
use wbscope::{
    model::plan::{Concept, HookKind},
    model::{CallRecord, DevId},
    tracer::plan::{TASK_RUNTIME, candidates, sched_switch_candidates},
    tracer::ring::{RingCollector, RingRecord},
    tracer::{Tracer, TracerOptions},
};

/// The tests of this file one at a time: the storm must not see the
/// other's writeback, and the other must not share its CPU with the storm.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls only write it
    // and hand it to the kernel for this thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

/// The kernel's tick in ns, from CONFIG_HZ in /proc/config.gz; without
/// it, the longest tick Linux can be built with (HZ=100,
/// kernel/Kconfig.hz).
fn tick_ns() -> u64 {
    let hz = Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("CONFIG_HZ=")?.parse::<u64>().ok())
        })
        .unwrap_or(100);
    1_000_000_000 / hz
}

/// Steal time of all CPUs so far in ns, and the most the count can be
/// short by (/proc/stat counts USER_HZ ticks per CPU:
/// Documentation/filesystems/proc.rst). All CPUs, not the writer's: a
/// flusher call may start on any, and the steal of the CPU it started
/// on is what its run-time figure leaves out (once 31 ms against 24 ms
/// of bound counted on CPU 0 alone).
fn steal_ns() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let per_cpu: Vec<u64> = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|line| {
            line.split_whitespace()
                .nth(8)
                .and_then(|v| v.parse().ok())
                .expect("steal column")
        })
        .collect();
    assert!(!per_cpu.is_empty(), "no cpuN lines in /proc/stat");
    // SAFETY: sysconf has no preconditions.
    let user_hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let unit = 1_000_000_000 / user_hz;
    (
        per_cpu.iter().sum::<u64>() * unit,
        unit * per_cpu.len() as u64,
    )
}

/// Drains `collector` until the calls for (`dev`, `ino`) add up to
/// `pages`, or 30 s pass.
async fn calls_for(
    collector: &mut RingCollector,
    dev: DevId,
    ino: u64,
    pages: i64,
) -> Vec<CallRecord> {
    let mut mine: Vec<CallRecord> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while mine.iter().map(|c| c.pages_written).sum::<i64>() < pages {
        let drained = tokio::time::timeout_at(
            deadline,
            collector.wait_and_drain(|RingRecord::Call(c)| {
                if c.dev == dev && c.ino == ino {
                    mine.push(c);
                }
            }),
        )
        .await;
        assert!(drained.is_ok(), "timed out; calls so far: {mine:?}");
    }
    mine
}

/// What identifies one call in two tracers' records (their clocks read
/// at slightly different moments, so not the times).
type CallId = (u32, i64, i64, u64, u64, i64, i64);

fn id(c: &CallRecord) -> CallId {
    (
        c.tid,
        c.nr_to_write,
        c.pages_written,
        c.writeback_index_before,
        c.writeback_index_after,
        c.range_start,
        c.range_end,
    )
}

/// 256 MiB written and fsynced by a thread that shares its CPU with a
/// spinning thread, so that its writepages calls are preempted (the
/// flusher's, which may take most of the file first, wait for the
/// device), under two tracers at once: the default one (on-CPU
/// time from the thread's run time) and one whose on-CPU time comes from
/// `sched_switch`, as before issue 19. Each call's figures agree within
/// the tick and the CPUs' steal time over the run: the run-time method
/// follows the scheduler's own accounting (writeback-ebpf/src/sched.rs),
/// in the run queue's `clock_task`, which leaves out the time the
/// hypervisor stole and is read at the scheduler's own clock updates,
/// where `sched_switch` stamps wall time at each switch; measured here,
/// the two differ by a few µs without steal and by up to a few ms with
/// it. A call that ends on another CPU is within the tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The guard serialises this test with the storm's, which runs on no
// runtime: nothing else in this test awaits the lock.
#[allow(clippy::await_holding_lock)]
async fn task_run_time_agrees_with_sched_switch() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let options = TracerOptions::default();
    let mut new = Tracer::attach(&options).expect("attach");
    let mut old = Tracer::attach_with(&options, |c| match c {
        Concept::CpuTime => sched_switch_candidates(),
        other => candidates(other),
    })
    .expect("attach with sched_switch");
    let new_plan = new.plan.concept(Concept::CpuTime).unwrap().clone();
    assert_eq!(new_plan.hook, Some(TASK_RUNTIME.label()), "{new_plan:?}");
    assert_eq!(
        new_plan.kind,
        new.plan.concept(Concept::WritepagesCall).unwrap().kind
    );
    let old_plan = old.plan.concept(Concept::CpuTime).unwrap().clone();
    assert_eq!(old_plan.kind, Some(HookKind::TpBtf), "{old_plan:?}");
    assert!(
        old_plan
            .hook
            .as_deref()
            .unwrap_or("")
            .contains("sched_switch"),
        "{old_plan:?}"
    );
    let mut new_calls = RingCollector::new(&mut new).unwrap();
    let mut old_calls = RingCollector::new(&mut old).unwrap();

    // The set-up must leave a call off the CPU for longer than the bound,
    // which grows with the CPUs' steal: on a busy hypervisor one write can
    // fall short (once 74.04 ms off the CPU against 74.1 ms of bound, 70
    // of them steal). The agreement is checked on every write; up to three
    // writes, each on a new filesystem, for one that shows it.
    for attempt in 1..=3 {
        let (compared, preempted, bound, stolen) =
            write_and_compare(&mut new_calls, &mut old_calls).await;
        eprintln!(
            "write {attempt}: {compared} call(s) compared, {preempted} switched out for long, \
             bound {bound} ns (steal {stolen} ns)"
        );
        if preempted > 0 {
            return;
        }
    }
    panic!("no call was off the CPU for longer than the bound in three writes");
}

/// One write of the set-up above under both tracers, each call's two
/// figures compared: (calls compared, calls off the CPU for longer than
/// the bound, the bound, the steal over the write).
async fn write_and_compare(
    new_calls: &mut RingCollector,
    old_calls: &mut RingCollector,
) -> (u32, u32, u64, u64) {
    const CPU: usize = 0;
    let (steal_before, steal_unit) = steal_ns();
    const MIB: usize = 256;
    let fs = LoopFs::new("ext4", 2 * MIB as u64);
    let ((dev, ino), fs) = tokio::task::spawn_blocking(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let spinning = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin_to(CPU);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        pin_to(CPU);
        let mut f = File::create_new(fs.path("data")).unwrap();
        let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 + 1).collect();
        for _ in 0..MIB {
            f.write_all(&chunk).unwrap();
        }
        f.sync_all().unwrap();
        stop.store(true, Ordering::Relaxed);
        spinning.join().unwrap();
        let meta = f.metadata().unwrap();
        ((DevId::from_user(meta.dev()), meta.ino()), fs)
    })
    .await
    .unwrap();
    let pages = MIB as i64 * 256;
    let new_mine = calls_for(new_calls, dev, ino, pages).await;
    let old_mine = calls_for(old_calls, dev, ino, pages).await;
    // Counted in whole units: up to one more than the difference shows.
    let stolen = steal_ns().0 - steal_before + steal_unit;
    drop(fs);

    let old_by_id: HashMap<CallId, &CallRecord> = old_mine.iter().map(|c| (id(c), c)).collect();
    // The two tracers' programs run one after the other at each hook,
    // and read the clock at different points of it: a few µs apart.
    const PROGRAMS_NS: u64 = 100_000;
    let bound = tick_ns() + stolen + PROGRAMS_NS;
    let mut compared = 0;
    let mut preempted = 0;
    for a in new_mine.iter().filter(|c| c.start_seen) {
        let Some(b) = old_by_id.get(&id(a)) else {
            continue;
        };
        let (Some(x), Some(y)) = (a.on_cpu_ns, b.on_cpu_ns) else {
            panic!("no on-CPU time: {a:?} / {b:?}");
        };
        assert!(x <= a.duration_ns, "{a:?}");
        assert!(
            x.abs_diff(y) <= bound,
            "run time {x} ns vs sched_switch {y} ns (bound {bound} ns): {a:?} / {b:?}"
        );
        eprintln!(
            "call tid {} pages {}: wall {} ns, on CPU {x} (run time) / {y} (sched_switch)",
            a.tid, a.pages_written, a.duration_ns
        );
        compared += 1;
        if b.duration_ns - y > bound {
            preempted += 1;
        }
        // On the CPU for more than a tick by sched_switch's count: the
        // run time advanced too (the bound alone may exceed the figure).
        if y > tick_ns() {
            assert!(x > 0, "{a:?} / {b:?}");
        }
    }
    assert!(compared > 0, "no call in both: {new_mine:?} / {old_mine:?}");
    // The set-up worked when a call (the fsync's, sharing its CPU with the
    // spinner, or the flusher's, waiting for the device) was off the CPU
    // for longer than the bound: the agreement above then tells a right
    // figure from wall time.
    if preempted == 0 {
        eprintln!("no call was off the CPU for more than {bound} ns: {old_mine:?}");
    }
    (compared, preempted, bound, stolen)
}

/// Total run count of every attached program.
fn runs(tracer: &Tracer) -> (u64, HashMap<String, u64>) {
    let per: HashMap<String, u64> = tracer
        .run_times()
        .into_iter()
        .map(|r| (r.program, r.run_count))
        .collect();
    (per.values().sum(), per)
}

/// A pipe ping-pong between two threads, nothing written: the default
/// tracer's programs together run fewer than 2,000 times a second (issue
/// 19), where the old `sched_switch` program, attached beside it, runs on
/// every switch of the storm.
#[test]
fn context_switch_storm_runs_next_to_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let options = TracerOptions::default();
    let new = Tracer::attach(&options).expect("attach");
    let old = Tracer::attach_with(&options, |c| match c {
        Concept::CpuTime => sched_switch_candidates(),
        other => candidates(other),
    })
    .expect("attach with sched_switch");
    // Whatever is dirty now (an earlier test's loop image in /var/tmp's
    // page cache) is written before the storm, not during it.
    assert!(Command::new("sync").status().is_ok_and(|s| s.success()));
    // A quiet second first: what the machine's other I/O (other users of
    // this host) makes the programs run anyway, to tell from the storm's.
    let quiet0 = runs(&new).0;
    let quiet = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let quiet_rate = (runs(&new).0 - quiet0) as f64 / quiet.elapsed().as_secs_f64();
    let runs_before = runs(&new);
    let new0 = runs_before.0;
    let (old0, _) = runs(&old);

    // (reader, writer): A pings B through the first, B answers through
    // the second.
    let (mut b_read, mut a_write) = std::io::pipe().expect("pipe");
    let (mut a_read, mut b_write) = std::io::pipe().expect("pipe");
    let storm = Duration::from_secs(1);
    let started = Instant::now();
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8];
        let mut n = 0u64;
        while b_read.read_exact(&mut byte).is_ok() {
            if b_write.write_all(&byte).is_err() {
                break;
            }
            n += 1;
        }
        n
    });
    let mut byte = [1u8];
    while started.elapsed() < storm {
        a_write.write_all(&byte).expect("ping");
        a_read.read_exact(&mut byte).expect("pong");
    }
    drop(a_write);
    let round_trips = echo.join().expect("echo thread");
    let secs = started.elapsed().as_secs_f64();

    let (new1, after) = runs(&new);
    let (_, before) = runs_before;
    let per_program: HashMap<String, u64> = after
        .into_iter()
        .map(|(p, n)| {
            let n0 = before.get(&p).copied().unwrap_or(0);
            (p, n - n0)
        })
        .collect();
    let (old1, _) = runs(&old);
    let new_rate = (new1 - new0) as f64 / secs;
    let old_rate = (old1 - old0) as f64 / secs;
    eprintln!(
        "{round_trips} round trips in {secs:.2} s; programs per second: default {new_rate:.0} \
         (quiet second before: {quiet_rate:.0}), with sched_switch {old_rate:.0}"
    );
    // Each round trip blocks a thread on a pipe read, at least once: the
    // old program saw the storm, so the statistics were on and counting.
    assert!(
        (old1 - old0) >= round_trips,
        "sched_switch ran {} times for {round_trips} round trips",
        old1 - old0
    );
    // Nothing of the default tracer runs per switch (what ran, ran for
    // the machine's other I/O)...
    assert!(
        per_program
            .iter()
            .all(|(_, &n)| n.saturating_mul(10) < round_trips),
        "a program ran on a tenth of the round trips or more: {per_program:?}"
    );
    // ...and all of it together stays under issue 19's bound, over what
    // ran in the quiet second.
    assert!(
        new_rate - quiet_rate < 2000.0,
        "{new_rate:.0} runs/s during the storm, {quiet_rate:.0} in the quiet second: {per_program:?}"
    );
}
