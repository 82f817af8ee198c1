//! Writepages calls of xfs and btrfs, put together from their per-folio
//! tracepoints (writeback-ebpf/src/generic.rs), against workloads whose
//! calls are known exactly: sync_file_range(WRITE) of every 8 MiB
//! written, and one fsync (root, real kernel, loop filesystems).

use std::{
    fs::File,
    io::Write,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    time::Duration,
};

use crate::support::LoopFs;
use wbscope_model::plan::{Concept, HookKind};
use wbscope_model::{CallRecord, DevId};
use wbscope_tracer::ring::RingCollector;
use wbscope_tracer::{Tracer, TracerOptions};
use writeback_common::boundary;

const MIB: usize = 1 << 20;

fn page_size() -> i64 {
    // SAFETY: plain libc call.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as i64 }
}

/// Runs `work` (which returns the file's device and inode) on a blocking
/// thread while draining; returns that file's calls, the open ones closed
/// once the work is over.
async fn calls_of(
    collector: &mut RingCollector,
    work: impl FnOnce() -> (DevId, u64) + Send + 'static,
) -> Vec<CallRecord> {
    let handle = tokio::task::spawn_blocking(work);
    let mut all: Vec<CallRecord> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !handle.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "workload timed out");
        collector
            .wait_and_drain(|r| all.extend(r.into_call()))
            .await
            .unwrap();
    }
    let (dev, ino) = handle.await.unwrap();
    // Calls end in the ring a moment after the syscall returns.
    tokio::time::sleep(Duration::from_millis(300)).await;
    collector.drain(|r| all.extend(r.into_call()));
    collector.close_open_calls(|r| all.extend(r.into_call()));
    if std::env::var_os("WBSCOPE_TEST_DEBUG").is_some() {
        for c in &all {
            eprintln!(
                "{dev} {ino}: {} {} {} {} {}",
                c.dev, c.ino, c.fs, c.pages_written, c.boundary
            );
        }
    }
    all.retain(|c| c.dev == dev && c.ino == ino);
    all.sort_by_key(|c| c.start_ns);
    all
}

/// `chunks` × 8 MiB written, each followed by sync_file_range(WRITE) of
/// exactly that range, as fio `--sync_file_range=write:8` with 1 MiB
/// blocks does.
fn write_with_srf(fs: &LoopFs, chunks: usize) -> (DevId, u64) {
    let mut f = File::create_new(fs.path("srf")).unwrap();
    let chunk = vec![0x5au8; 8 * MIB];
    for i in 0..chunks {
        f.write_all(&chunk).unwrap();
        // SAFETY: plain syscall on an open fd.
        let r = unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                (i * 8 * MIB) as i64,
                (8 * MIB) as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        assert_eq!(r, 0, "sync_file_range: {}", std::io::Error::last_os_error());
    }
    let m = f.metadata().unwrap();
    let dev = sb_dev(&fs.mountpoint);
    // The data is fsynced so that nothing is left for the flusher of the
    // next test; that fsync's call finds nothing dirty and makes no folio.
    f.sync_all().unwrap();
    (dev, m.ino())
}

fn write_and_fsync(fs: &LoopFs, mib: usize) -> (DevId, u64) {
    let mut f = File::create_new(fs.path("fsync")).unwrap();
    f.write_all(&vec![7u8; mib * MIB]).unwrap();
    f.sync_all().unwrap();
    let m = f.metadata().unwrap();
    (sb_dev(&fs.mountpoint), m.ino())
}

/// The superblock's device of the filesystem mounted at `mountpoint`, as
/// mountinfo shows it and the records carry it (`inode->i_sb->s_dev`).
/// stat(2) says the same on xfs, but on btrfs it gives the subvolume's
/// own anonymous device (btrfs_getattr()).
fn sb_dev(mountpoint: &std::path::Path) -> DevId {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mountpoint.to_str().unwrap();
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(4) == Some(&mp)).then(|| f[2].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("{mp} not in mountinfo"))
}

fn attach() -> (Tracer, RingCollector) {
    let mut tracer = Tracer::attach(&TracerOptions::default()).expect("attach");
    let plan = tracer.plan.concept(Concept::GenericCall).unwrap().clone();
    assert_eq!(plan.kind, Some(HookKind::TpBtf), "{plan:?}");
    // This kernel refuses fentry (EPERM) and has no kprobes: the plan
    // falls back past the do_writepages hooks, saying why for each.
    let hooks: Vec<&str> = plan.rejected.iter().map(|r| r.hook.as_str()).collect();
    assert_eq!(
        hooks.get(..2),
        Some(&["fentry do_writepages", "kprobe do_writepages"][..]),
        "{plan:?}"
    );
    assert!(
        plan.rejected[0].reason.contains("EPERM") || plan.rejected[0].reason.contains("permit"),
        "{plan:?}"
    );
    assert!(plan.rejected[1].reason.contains("kprobes"), "{plan:?}");
    let collector = RingCollector::new(&mut tracer).unwrap();
    (tracer, collector)
}

/// 512 MiB with sync_file_range(WRITE) every 8 MiB: exactly 131072 pages
/// for the file; one call per range of 2048 pages (the flusher may take
/// part of a range first: `sync` or background writeback by anyone on
/// the machine; those are its own calls, closed at their pass end), each
/// naming its filesystem; every sync_file_range call but the last ends
/// where the next begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_file_range_every_8_mib_is_one_call_per_range_on_xfs_and_btrfs() {
    let _file = crate::support::file_group(module_path!());
    let (_tracer, mut collector) = attach();
    let pages_per_chunk = 8 * MIB as i64 / page_size();
    for fstype in ["xfs", "btrfs"] {
        let fs = std::sync::Arc::new(LoopFs::new(fstype, 1024));
        let work_fs = fs.clone();
        let calls = calls_of(&mut collector, move || write_with_srf(&work_fs, 64)).await;
        let summary: Vec<(i64, i64, u32, u32)> = calls
            .iter()
            .map(|c| (c.range_start, c.pages_written, c.boundary, c.cause))
            .collect();
        let total: i64 = calls.iter().map(|c| c.pages_written).sum();
        assert_eq!(total, 64 * pages_per_chunk, "{fstype}: {summary:?}");
        for c in &calls {
            assert_eq!(c.fs, fstype, "{c:?}");
            assert_ne!(c.boundary, boundary::HOOK, "{c:?}");
            // The folio sizes add up to the pages.
            let from_hist: u64 = c
                .folio_hist
                .iter()
                .enumerate()
                .map(|(k, n)| writeback_common::log2_bucket_bounds(k as u32).0 * u64::from(*n))
                .sum();
            assert_eq!(from_hist, c.pages_written as u64, "{c:?}");
            assert_eq!(c.folios_written, c.folio_hist.iter().sum::<u32>());
        }
        let srf: Vec<&CallRecord> = calls
            .iter()
            .filter(|c| c.cause == writeback_common::cause::DIRECT)
            .collect();
        assert!(srf.len() <= 64, "{fstype}: {summary:?}");
        let mut chunks_seen = std::collections::BTreeSet::new();
        for (i, c) in srf.iter().enumerate() {
            let chunk = c.range_start / (8 * MIB) as i64;
            assert_eq!(c.range_start, chunk * (8 * MIB) as i64, "{c:?}");
            assert_eq!(c.range_end, (chunk + 1) * (8 * MIB) as i64 - 1, "{c:?}");
            assert!(
                chunks_seen.insert(chunk),
                "two calls for chunk {chunk}: {summary:?}"
            );
            assert!(c.pages_written <= pages_per_chunk, "{c:?}");
            assert_eq!((c.sync_mode, c.nr_to_write), (0, i64::MAX), "{c:?}");
            assert!(c.start_seen && !c.comm.is_empty(), "{c:?}");
            let last = i + 1 == srf.len();
            let closed = if last {
                [boundary::IDLE, boundary::DRAIN].contains(&c.boundary)
            } else {
                c.boundary == boundary::NEXT_CALL
            };
            assert!(closed, "{fstype} call {i}: {c:?}");
        }
        let whole = srf
            .iter()
            .filter(|c| c.pages_written == pages_per_chunk)
            .count();
        assert!(whole >= 60, "{fstype}: {whole} whole ranges: {summary:?}");
        // Whatever the flusher took, it took in passes.
        for c in calls
            .iter()
            .filter(|c| c.cause != writeback_common::cause::DIRECT)
        {
            assert_eq!(c.boundary, boundary::PASS_END, "{c:?}");
        }
        drop(fs);
    }
}

/// 64 MiB written and fsynced: the calls add up to 16384 pages (4 KiB
/// pages): fsync's one WB_SYNC_ALL call, after whatever flusher passes
/// other work on the machine started first; on ext4 the calls are ext4's
/// own, never a second, derived one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_of_64_mib_adds_up_and_ext4_is_never_counted_twice() {
    let _file = crate::support::file_group(module_path!());
    let (_tracer, mut collector) = attach();
    let pages = 64 * MIB as i64 / page_size();
    for fstype in ["xfs", "btrfs", "ext4"] {
        let fs = std::sync::Arc::new(LoopFs::new(fstype, 512));
        let work_fs = fs.clone();
        let calls = calls_of(&mut collector, move || write_and_fsync(&work_fs, 64)).await;
        let summary: Vec<(i64, u32, u32, u32)> = calls
            .iter()
            .map(|c| (c.pages_written, c.sync_mode, c.boundary, c.cause))
            .collect();
        let total: i64 = calls.iter().map(|c| c.pages_written).sum();
        assert_eq!(total, pages, "{fstype}: {summary:?}");
        assert!(calls.iter().all(|c| c.fs == fstype), "{calls:?}");
        let sync: Vec<&CallRecord> = calls.iter().filter(|c| c.sync_mode == 1).collect();
        assert!(sync.len() <= 1, "{fstype}: {summary:?}");
        assert!(
            sync.iter()
                .all(|c| c.cause == writeback_common::cause::SYNC),
            "{summary:?}"
        );
        if fstype == "ext4" {
            assert!(
                calls.iter().all(|c| c.boundary == boundary::HOOK),
                "an ext4 call was also derived from folios: {summary:?}"
            );
        } else {
            assert!(
                calls.iter().all(|c| c.boundary != boundary::HOOK),
                "{summary:?}"
            );
        }
        // Nothing but fsync wrote: then it is the one call.
        if calls
            .iter()
            .all(|c| c.cause == writeback_common::cause::SYNC)
        {
            assert_eq!(calls.len(), 1, "{fstype}: {summary:?}");
        }
        drop(fs);
    }
}

/// 32 MiB written, then syncfs(2): the flusher writes the file in inode
/// passes, and each call closed at its pass end carries its on-CPU time
/// from the thread's run clock at the first folio and at the pass end
/// (no more than its wall time, and some of it: writing 32 MiB of folios
/// is work); a call whose end no program saw on its thread has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_closed_at_the_pass_end_have_their_on_cpu_time() {
    let _file = crate::support::file_group(module_path!());
    let (_tracer, mut collector) = attach();
    for fstype in ["xfs", "btrfs"] {
        let fs = std::sync::Arc::new(LoopFs::new(fstype, 512));
        let work_fs = fs.clone();
        let calls = calls_of(&mut collector, move || {
            let mut f = File::create_new(work_fs.path("synced")).unwrap();
            f.write_all(&vec![3u8; 32 * MIB]).unwrap();
            let ino = f.metadata().unwrap().ino();
            // syncfs(2), not sync(1): the flusher writes this filesystem
            // only (the other tests of this binary run beside this one and
            // count their own files' WB_SYNC_ALL calls).
            // SAFETY: plain syscall on an open fd.
            let r = unsafe { libc::syncfs(f.as_raw_fd()) };
            assert_eq!(r, 0, "syncfs: {}", std::io::Error::last_os_error());
            (sb_dev(&work_fs.mountpoint), ino)
        })
        .await;
        let total: i64 = calls.iter().map(|c| c.pages_written).sum();
        assert_eq!(total, 32 * MIB as i64 / page_size(), "{fstype}: {calls:?}");
        let passes: Vec<&CallRecord> = calls
            .iter()
            .filter(|c| c.boundary == boundary::PASS_END)
            .collect();
        assert!(
            !passes.is_empty(),
            "{fstype}: sync wrote no pass: {calls:?}"
        );
        for c in &calls {
            match c.on_cpu_ns {
                Some(on_cpu) => {
                    assert_eq!(c.boundary, boundary::PASS_END, "{c:?}");
                    assert!(on_cpu > 0 && on_cpu <= c.duration_ns, "{fstype}: {c:?}");
                }
                None => assert_ne!(c.boundary, boundary::PASS_END, "{fstype}: {c:?}"),
            }
        }
        drop(fs);
    }
}
