//! The engine on real files: a temp dir on the root filesystem, and
//! loop-mounted filesystems (journaled ext4, xfs, a full one, a read-only
//! one, a 4096-byte-sector one) made here and always removed.
//!
//! Needs root (mount, losetup) like the rest of wbscope's tests.
mod common;

use std::fs;
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use common::{files_in, flip_byte, loop_fs, var_tmp_dir};
use scratchfs::ScratchFs;
use writer_core::{
    Event, FileSync, RunStatus, SmallFiles, Strategy, VerifyError, Writer, WriterConfig,
    WriterSpec, pattern::BlockFault, pattern::Pattern, verify_file,
};

const MIB: u64 = 1 << 20;

fn spec(dir: &Path, strategy: Strategy) -> WriterSpec {
    WriterSpec {
        dirs: vec![dir.to_path_buf()],
        size: 4 * MIB,
        chunk: 256 << 10,
        strategy,
        verify: true,
        ..WriterSpec::default()
    }
}

fn run(spec: WriterSpec) -> Result<writer_core::Report, writer_core::RunFailure> {
    Writer::new(WriterConfig::new(spec).expect("valid config")).run()
}

#[test]
fn every_strategy_writes_exactly_size_and_verifies() {
    let dir = var_tmp_dir();
    for strategy in Strategy::ALL {
        let mut s = spec(dir.path(), strategy);
        s.jobs = 2;
        s.files = 2;
        s.qd = 4;
        let r = run(s).unwrap_or_else(|e| panic!("{strategy}: {e}"));
        assert_eq!(r.status, RunStatus::Completed, "{strategy}");
        assert_eq!(r.bytes, 2 * 2 * 4 * MIB, "{strategy}");
        assert_eq!(r.files_written, 4, "{strategy}");
        let v = r.verify.as_ref().expect("verify ran");
        assert!(
            v.ok && v.files == 4 && v.bytes == r.bytes,
            "{strategy}: {v:?}"
        );
        if strategy.is_durable() {
            assert_eq!(r.bytes_durable, r.bytes, "{strategy}");
            assert!(r.durable_mb_s.unwrap() > 0.0, "{strategy}");
        } else {
            assert_eq!((r.bytes_durable, r.durable_mb_s), (0, None), "{strategy}");
        }
        assert_eq!(r.write_latency_us.unwrap().count, 4 * 16, "{strategy}");
        let sync_kinds: Vec<&str> = r.sync_latency_us.keys().copied().collect();
        let want: &[&str] = match strategy {
            Strategy::Buffered => &[],
            Strategy::FsyncEnd | Strategy::Uring | Strategy::Uncached | Strategy::UringBuffered => {
                &["fsync"]
            }
            Strategy::FdatasyncChunk | Strategy::Direct => &["fdatasync"],
            Strategy::SrfPipelined => &["fdatasync", "srf_wait_before", "srf_write"],
        };
        assert_eq!(sync_kinds, want, "{strategy}");
        if strategy == Strategy::SrfPipelined {
            // 16 chunks per file, window 4: 16 WRITEs and 12 WAIT_BEFOREs.
            assert_eq!(r.sync_latency_us["srf_write"].count, 4 * 16);
            assert_eq!(r.sync_latency_us["srf_wait_before"].count, 4 * 12);
        }
        assert_eq!(r.o_direct, strategy == Strategy::Direct, "{strategy}");
        assert_eq!(
            r.rwf_dontcache,
            strategy == Strategy::Uncached,
            "{strategy}"
        );
        assert!(
            r.reclaim.is_some() && r.cache_end_kib.is_some(),
            "{strategy}"
        );
        assert!(r.peak_dirty_kib.is_some(), "{strategy}");
        assert!(files_in(dir.path()).is_empty(), "{strategy}: files removed");
    }
}

#[test]
fn uring_with_o_direct_verifies() {
    let dir = var_tmp_dir();
    let mut s = spec(dir.path(), Strategy::Uring);
    s.direct_io = true;
    s.datasync = true;
    let r = run(s).unwrap();
    assert!(r.o_direct && r.verify.unwrap().ok);
    assert!(r.sync_latency_us.contains_key("fdatasync"));
}

#[test]
fn options_fallocate_noatime_rate_and_unaligned_sizes() {
    let dir = var_tmp_dir();
    let mut s = spec(dir.path(), Strategy::SrfPipelined);
    s.size = 3 * MIB + 12345; // short last chunk and short last block
    s.chunk = 100_000; // not a multiple of the 4 KiB pattern block
    s.fallocate = true;
    s.noatime = true;
    let r = run(s).unwrap();
    assert_eq!(r.bytes, 3 * MIB + 12345);
    assert!(r.verify.unwrap().ok);
}

#[test]
fn small_files_every_policy_verifies() {
    let dir = var_tmp_dir();
    for policy in FileSync::ALL {
        let mut s = spec(dir.path(), Strategy::Buffered);
        s.size = 0;
        s.jobs = 2;
        s.noatime = true;
        s.small_files = Some(SmallFiles::new(40, policy));
        let r = run(s).unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert_eq!(r.files_written, 40, "{policy}");
        assert!(r.files_per_s.unwrap() > 0.0);
        assert_eq!(r.verify.unwrap().files, 40);
        assert_eq!(r.bytes_durable > 0, policy != FileSync::None, "{policy}");
        let kinds: Vec<&str> = r.sync_latency_us.keys().copied().collect();
        let want: &[&str] = match policy {
            FileSync::None => &[],
            FileSync::FsyncEach => &["fsync"],
            FileSync::SrfThenFsync => &["fsync", "srf_write"],
            FileSync::TwoPass => &["fdatasync", "srf_wait_before", "srf_write"],
        };
        assert_eq!(kinds, want, "{policy}");
        assert!(files_in(dir.path()).is_empty());
    }
}

#[test]
fn verify_detects_one_byte_changed_behind_the_writers_back() {
    let dir = var_tmp_dir();
    let mut s = spec(dir.path(), Strategy::FsyncEnd);
    s.keep = true;
    let seed = s.seed;
    let r = run(s).unwrap();
    assert_eq!(r.kept_files.len(), 1);
    let path = &r.kept_files[0];
    let pattern = Pattern::new(seed, writer_core::plan::file_id(0, 0));
    assert_eq!(
        verify_file(path, &pattern, 4 * MIB, false).unwrap(),
        4 * MIB
    );
    flip_byte(path, 3 * MIB + 777);
    match verify_file(path, &pattern, 4 * MIB, false) {
        Err(VerifyError::Block {
            offset,
            fault: BlockFault::BadChecksum,
            ..
        }) => assert_eq!(offset, 3 * MIB),
        other => panic!("corruption not found: {other:?}"),
    }
}

#[test]
fn refuses_to_overwrite_an_existing_file() {
    let dir = var_tmp_dir();
    let writer = Writer::new(WriterConfig::new(spec(dir.path(), Strategy::Buffered)).unwrap());
    let victim = writer.plan()[0][0].path.clone();
    fs::write(&victim, b"precious").unwrap();
    let err = writer.run().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("refusing to overwrite"), "{msg}");
    assert!(err.error.io_error().unwrap().raw_os_error() == Some(libc::EEXIST));
    assert!(!err.error.is_usage());
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    assert_eq!(files_in(dir.path()), vec![victim]);
}

#[test]
fn missing_dir_or_a_file_as_dir_is_refused_before_writing() {
    let dir = var_tmp_dir();
    let missing = dir.path().join("nope");
    let err = run(spec(&missing, Strategy::Buffered)).unwrap_err();
    assert!(err.error.is_usage() && err.partial.is_none());
    assert_eq!(
        err.to_string(),
        format!("--dir {}: does not exist", missing.display())
    );
    let file = dir.path().join("file");
    fs::write(&file, b"x").unwrap();
    let err = run(spec(&file, Strategy::Buffered)).unwrap_err();
    assert!(err.to_string().ends_with("is not a directory"), "{err}");
    let err = run(spec(Path::new("/dev/loop-control"), Strategy::Buffered)).unwrap_err();
    assert!(err.error.is_usage(), "{err}");
}

#[test]
fn live_tunables_change_the_chunk_and_stop_the_run() {
    let dir = var_tmp_dir();
    let mut s = spec(dir.path(), Strategy::SrfPipelined);
    s.size = 64 * MIB;
    s.chunk = 64 << 10;
    s.rate = Some(4 * MIB); // 16 s at full length: it will be stopped
    s.verify = false;
    let (tx, rx) = mpsc::channel::<Event>();
    let writer = Writer::new(WriterConfig::new(s).unwrap()).with_observer(Arc::new(tx));
    let live = writer.tunables();
    let report = std::thread::scope(|sc| {
        let h = sc.spawn(|| writer.run());
        let mut lens = Vec::new();
        let mut changed = false;
        let mut ticks = 0;
        // The writer holds the Sender until it is dropped: poll until the
        // run's thread is done instead of waiting for the channel to close.
        loop {
            let ev = match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(ev) => ev,
                Err(_) if h.is_finished() => break,
                Err(_) => continue,
            };
            match ev {
                Event::ChunkWritten { len, .. } => {
                    lens.push(len);
                    if lens.len() == 3 {
                        live.set_chunk(128 << 10).unwrap();
                        changed = true;
                    }
                }
                Event::Tick { bytes, .. } => {
                    ticks += 1;
                    assert!(bytes > 0);
                    live.request_stop();
                }
                _ => {}
            }
        }
        assert!(changed && ticks >= 1);
        assert_eq!(&lens[..3], &[64 << 10; 3]);
        assert!(lens[4..].iter().all(|&l| l == 128 << 10), "{lens:?}");
        h.join().unwrap()
    });
    let r = report.unwrap();
    assert_eq!(r.status, RunStatus::Interrupted);
    assert!(r.bytes > 0 && r.bytes < 64 * MIB);
    assert!(files_in(dir.path()).is_empty(), "removed after a stop");
}

#[test]
fn rate_limit_gives_a_flat_per_second_series() {
    let dir = var_tmp_dir();
    let mut s = spec(dir.path(), Strategy::Buffered);
    s.size = 5 * MIB;
    s.chunk = 64 << 10;
    s.rate = Some(2_000_000);
    s.verify = false;
    let r = run(s).unwrap();
    // 5.24 MB at 2 MB/s: about 2.6 s, two full seconds.
    assert!((2.4..3.5).contains(&r.elapsed_s), "{}", r.elapsed_s);
    assert_eq!(r.per_second_mb_s.len(), 2, "{:?}", r.per_second_mb_s);
    for mbs in &r.per_second_mb_s {
        assert!((1.5..2.5).contains(mbs), "{:?}", r.per_second_mb_s);
    }
    assert!(r.cv.unwrap() < 0.1);
}

// ---- loop-mounted filesystems ----

#[test]
fn journaled_ext4_and_xfs_verify() {
    for (fstype, mb) in [("ext4", 64), ("xfs", 320)] {
        let fs = loop_fs(fstype, mb, None, &[]);
        for strategy in [Strategy::SrfPipelined, Strategy::Direct, Strategy::Uring] {
            let mut s = spec(fs.mountpoint(), strategy);
            s.fallocate = strategy == Strategy::Direct;
            let r = run(s).unwrap_or_else(|e| panic!("{fstype} {strategy}: {e}"));
            assert!(r.verify.unwrap().ok, "{fstype} {strategy}");
        }
        assert!(files_in(fs.mountpoint()).is_empty());
    }
}

#[test]
fn full_filesystem_fails_cleanly_and_leaves_no_files() {
    let fs = loop_fs("ext4", 64, None, &[]);
    // Preflight refuses what cannot fit...
    let mut s = spec(fs.mountpoint(), Strategy::SrfPipelined);
    s.size = 100 * MIB;
    s.chunk = MIB;
    let err = run(s.clone()).unwrap_err();
    assert!(err.error.is_usage(), "{err}");
    assert!(err.to_string().contains("only"), "{err}");
    // ...and without the preflight, ENOSPC mid-run stops the run, reports
    // how far it got and removes the partial file.
    for strategy in [Strategy::SrfPipelined, Strategy::Uring, Strategy::Buffered] {
        let mut s = s.clone();
        s.strategy = strategy;
        s.skip_space_check = true;
        let err = run(s).unwrap_err();
        let errno = err.error.io_error().and_then(|e| e.raw_os_error());
        assert_eq!(errno, Some(libc::ENOSPC), "{strategy}: {err}");
        assert!(err.to_string().contains("No space left on device"), "{err}");
        assert!(!err.error.is_usage());
        let partial = err.partial.expect("partial report");
        assert_eq!(partial.status, RunStatus::Failed);
        assert!(
            partial.bytes > 10 * MIB && partial.bytes < 64 * MIB,
            "{}",
            partial.bytes
        );
        assert!(partial.error.unwrap().contains("No space left"));
        assert!(
            files_in(fs.mountpoint()).is_empty(),
            "{strategy}: partial file removed"
        );
    }
    // With fallocate the failure comes before any write.
    let mut s = s.clone();
    s.fallocate = true;
    s.skip_space_check = true;
    let err = run(s).unwrap_err();
    assert!(err.to_string().contains("fallocate"), "{err}");
    assert!(files_in(fs.mountpoint()).is_empty());
}

#[test]
fn read_only_filesystem_is_refused() {
    let fs = loop_fs("ext4", 64, None, &["-o", "ro"]);
    let err = run(spec(fs.mountpoint(), Strategy::FsyncEnd)).unwrap_err();
    assert!(err.error.is_usage());
    assert!(
        err.to_string().ends_with("is on a read-only filesystem"),
        "{err}"
    );
}

#[test]
fn direct_checks_the_devices_logical_block_size() {
    // A loop device with 4096-byte logical sectors.
    let fs = loop_fs("ext4", 64, Some(4096), &[]);
    let lbs = writer_core::device::logical_block_size(fs.mountpoint()).unwrap();
    assert_eq!(lbs, Some(4096));
    let mut s = spec(fs.mountpoint(), Strategy::Direct);
    s.chunk = 9 * 512; // sector-aligned for 512, not for 4096
    s.size = 9 * 512 * 100;
    let err = run(s.clone()).unwrap_err();
    assert!(err.error.is_usage());
    assert!(err.to_string().contains("not a multiple of 4096"), "{err}");
    s.chunk = 8192;
    s.size = 8192 * 100;
    let r = run(s).unwrap();
    assert_eq!(r.direct_align, Some(4096));
    assert!(r.verify.unwrap().ok);
}

#[test]
fn two_targets_get_jobs_round_robin() {
    let a = var_tmp_dir();
    let b = var_tmp_dir();
    let mut s = spec(a.path(), Strategy::FsyncEnd);
    s.dirs.push(b.path().to_path_buf());
    s.jobs = 3;
    s.keep = true;
    let r = run(s).unwrap();
    assert_eq!(files_in(a.path()).len(), 2);
    assert_eq!(files_in(b.path()).len(), 1);
    assert_eq!(r.kept_files.len(), 3);
}

/// RWF_DONTCACHE on a loop-mounted ext4 (O_DIRECT image, so the loop device
/// adds no cache of its own): the run's files hold at most a few chunks of
/// page cache at any 100 ms sample and almost nothing at the end, where
/// the same buffered write leaves the whole file cached. Measured with
/// cachestat(2) (`cache_*_kib`) and cross-checked with /proc/meminfo
/// `Cached`, an independent, system-wide source.
#[test]
fn uncached_writes_leave_the_page_cache_where_it_was() {
    let fs = ScratchFs::builder("ext4".parse().unwrap(), 1024)
        .direct_io(true)
        .create()
        .expect("scratch ext4");
    let chunk = 8 * MIB;
    let size = 384 * MIB;
    let cached_kib = || {
        let t = fs::read_to_string("/proc/meminfo").unwrap();
        t.lines()
            .find_map(|l| l.strip_prefix("Cached:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
            .unwrap()
    };
    for (strategy, uncached) in [
        (Strategy::Uncached, false),
        (Strategy::UringBuffered, true),
        (Strategy::Buffered, false),
    ] {
        let before = cached_kib();
        let r = run(WriterSpec {
            size,
            chunk,
            qd: 4,
            uncached,
            keep: true,
            verify: false,
            ..spec(fs.mountpoint(), strategy)
        })
        .unwrap_or_else(|e| panic!("{strategy}: {e}"));
        let grew = cached_kib() - before;
        let (peak, end) = (r.cache_peak_kib.unwrap(), r.cache_end_kib.unwrap());
        for f in &r.kept_files {
            fs::remove_file(f).unwrap();
        }
        let chunk_kib = (chunk / 1024) as i64;
        eprintln!(
            "{strategy} uncached={uncached}: peak {peak} KiB, end {end} KiB, Cached {grew:+} KiB"
        );
        if strategy == Strategy::Buffered {
            assert!(
                end >= size / 1024 * 9 / 10,
                "buffered keeps the file: {end}"
            );
            continue;
        }
        assert!(r.rwf_dontcache);
        // The last few chunks may still be dropping when the run ends.
        assert!(end as i64 <= 4 * chunk_kib, "{strategy}: {end} KiB left");
        // Never more than the writes in flight (qd 4) plus a few chunks
        // in write-out, far below the 384 MiB file.
        assert!(
            (peak as i64) <= 16 * chunk_kib,
            "{strategy}: peak {peak} KiB"
        );
        // System-wide: other processes (and the filesystem's metadata) add
        // noise in either direction, so only half the file is the bound;
        // the buffered run above grows it by the whole file.
        assert!(
            grew < (size / 1024 / 2) as i64,
            "{strategy}: Cached grew {grew} KiB"
        );
    }
}

/// tmpfs has no RWF_DONTCACHE (no FOP_DONTCACHE in its file operations):
/// both strategies are refused before a byte is written, with one line,
/// never run as plain buffered writes.
#[test]
fn uncached_is_refused_where_the_filesystem_lacks_it() {
    let dir = tempfile::Builder::new()
        .prefix("wbscope-test-")
        .tempdir_in("/dev/shm")
        .expect("temp dir on tmpfs");
    for (strategy, uncached) in [(Strategy::Uncached, false), (Strategy::UringBuffered, true)] {
        let e = run(WriterSpec {
            uncached,
            ..spec(dir.path(), strategy)
        })
        .unwrap_err();
        assert!(e.error.is_usage(), "{strategy}: {e}");
        assert!(e.partial.is_none(), "{strategy}: nothing to report");
        let msg = e.to_string();
        assert!(
            msg.contains("RWF_DONTCACHE") && !msg.contains('\n'),
            "{msg}"
        );
        assert!(files_in(dir.path()).is_empty(), "{strategy}");
    }
    // Without the flag the same directory takes the same writes.
    run(spec(dir.path(), Strategy::UringBuffered)).unwrap();
}
