//! The probe layer against the running kernel (root): known workloads on
//! filesystems made for the test, checked against what they must produce
//! and against /proc/vmstat.

use std::{
    fs::{self, File},
    io::Write,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use crate::support::{LoopFs, Tracing, dev_of, wbscope};
use serde_json::Value;

const PAGE: i64 = 4096;
/// The largest folio ext4 builds (PMD size, 2 MiB) in pages: in
/// WB_SYNC_NONE a call stops only between folios, so it can write up to
/// one folio minus a page more than it was asked (`mpage_prepare_extent_to
/// _map()` checks `nr_to_write` before adding each folio; fs/ext4/inode.c).
const MAX_FOLIO_PAGES: i64 = 512;

fn write_file(path: &Path, mib: usize, fsync: bool) -> u64 {
    let mut f = File::create_new(path).expect("create");
    write_mib(&mut f, mib, fsync);
    f.metadata().expect("stat").ino()
}

/// `mib` MiB of non-zero bytes in 1 MiB writes to `f`, then fsync if asked.
fn write_mib(f: &mut File, mib: usize, fsync: bool) {
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8 + 1).collect();
    for _ in 0..mib {
        f.write_all(&chunk).expect("write");
    }
    if fsync {
        f.sync_all().expect("fsync");
    }
}

fn calls(lines: &[Value]) -> impl Iterator<Item = &Value> {
    lines.iter().filter(|l| l["type"] == "call")
}

fn pages_of(lines: &[Value], dev: &str, ino: u64) -> i64 {
    calls(lines)
        .filter(|c| c["dev"] == dev && c["ino"] == ino)
        .map(|c| c["pages_written"].as_i64().unwrap())
        .sum()
}

/// The invariants every record must keep on this kernel.
fn check_invariants(lines: &[Value]) {
    for c in calls(lines) {
        let duration = c["duration_ns"].as_u64().unwrap();
        if let Some(on_cpu) = c["on_cpu_ns"].as_u64() {
            assert!(on_cpu <= duration, "on-CPU > wall: {c}");
        }
        if c["start_seen"] == true {
            let asked = c["nr_to_write"].as_i64().unwrap();
            let written = c["pages_written"].as_i64().unwrap();
            assert!(written <= asked.saturating_add(MAX_FOLIO_PAGES - 1), "{c}");
        }
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["lost_records"], 0, "{summary}");
}

/// 256 MiB buffered, no fsync, then `sync`: the flusher or sync writes the
/// file, our records add up to its pages, and /proc/vmstat's nr_written
/// (counted at I/O completion, every device) grew by at least as much.
#[test]
fn buffered_write_then_sync_matches_file_and_vmstat() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 512);
    let trace = Tracing::start(&["--json", "--events", "--interval", "0.5"]);
    let path = fs.path("big");
    let ino = write_file(&path, 256, false);
    let status = wbscope_programs::SYNC.command().status().expect("sync");
    assert!(status.success());
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);
    check_invariants(&lines);

    let file_pages = 256 * (1 << 20) / PAGE;
    let ours = pages_of(&lines, &dev, ino);
    // Tolerance 1%; in practice the sum is exact.
    assert!(
        (ours - file_pages).abs() * 100 <= file_pages,
        "{ours} pages traced for a {file_pages}-page file"
    );
    let mine: Vec<&Value> = calls(&lines)
        .filter(|c| c["dev"] == dev && c["ino"] == ino)
        .collect();
    assert!(
        mine.iter().any(|c| c["cause"] != "direct"),
        "no flusher or sync call: {mine:?}"
    );
    let vmstat_written: u64 = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .map(|l| l["dirty"]["vmstat_written_delta"].as_u64().unwrap())
        .sum();
    assert!(
        vmstat_written >= ours as u64,
        "vmstat nr_written grew by {vmstat_written}, less than the {ours} pages traced"
    );
    // Scan figures were measured for this delalloc file, and the scan
    // covered at least what was written.
    let scanned: u64 = mine
        .iter()
        .filter_map(|c| c["scan"]["bytes"].as_u64())
        .sum();
    assert!(
        scanned >= (ours * PAGE) as u64,
        "scanned {scanned} bytes for {ours} pages"
    );
}

/// Two files on two filesystems written at once: each device's figures
/// are its own.
#[test]
fn two_filesystems_at_once_are_separated_per_device() {
    let _file = crate::support::file_group(module_path!());
    let a = LoopFs::new("ext4", 256);
    let b = LoopFs::new("ext4", 256);
    let trace = Tracing::start(&["--json", "--events"]);
    let (pa, pb) = (a.path("a"), b.path("b"));
    let ta = std::thread::spawn(move || write_file(&pa, 32, true));
    let tb = std::thread::spawn(move || write_file(&pb, 48, true));
    let (ino_a, ino_b) = (ta.join().unwrap(), tb.join().unwrap());
    let (dev_a, dev_b) = (dev_of(&a.mountpoint), dev_of(&b.mountpoint));
    assert_ne!(dev_a, dev_b);
    let lines = trace.stop(libc::SIGINT);
    check_invariants(&lines);

    assert_eq!(pages_of(&lines, &dev_a, ino_a), 32 * 256);
    assert_eq!(pages_of(&lines, &dev_b, ino_b), 48 * 256);
    // The device histograms saw requests on both loop devices.
    let mut requests = std::collections::HashMap::<String, u64>::new();
    for l in lines.iter().filter(|l| l["type"] == "interval") {
        for d in l["devices"].as_array().unwrap() {
            *requests
                .entry(d["dev"].as_str().unwrap().into())
                .or_default() += d["requests"].as_u64().unwrap();
        }
    }
    for dev in [&dev_a, &dev_b] {
        assert!(
            requests.get(dev).copied().unwrap_or(0) > 0,
            "{dev}: {requests:?}"
        );
    }
}

/// Requests completed on a block device so far, from
/// /sys/block/NAME/stat (Documentation/block/stat.rst): read, write,
/// discard and flush I/Os.
/// The fields of `/sys/block/NAME/stat` (Documentation/block/stat.rst).
fn block_stat(device: &str) -> Vec<u64> {
    let name = Path::new(device).file_name().expect("device name");
    fs::read_to_string(Path::new("/sys/block").join(name).join("stat"))
        .expect("diskstats")
        .split_whitespace()
        .map(|v| v.parse().expect("number"))
        .collect()
}

/// Requests completed: reads, writes, discards and flushes.
fn diskstats_ios(device: &str) -> u64 {
    let f = block_stat(device);
    f[0] + f[4] + f[11] + f.get(15).copied().unwrap_or(0)
}

/// Cache flushes completed (Linux 5.5+).
fn diskstats_flushes(device: &str) -> u64 {
    block_stat(device)[15]
}

/// (requests, latency samples, request-size samples) of `dev` summed over
/// the interval lines.
fn device_histograms(lines: &[Value], dev: &str) -> (u64, u64, u64) {
    let count = |buckets: &Value| -> u64 {
        buckets
            .as_array()
            .expect("buckets")
            .iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum()
    };
    let mut sums = (0, 0, 0);
    for l in lines.iter().filter(|l| l["type"] == "interval") {
        for d in l["devices"].as_array().unwrap() {
            if d["dev"] == dev {
                sums.0 += d["requests"].as_u64().unwrap();
                sums.1 += count(&d["latency_ns"]);
                sums.2 += count(&d["request_bytes"]);
            }
        }
    }
    sums
}

/// The device histograms count every request the device completed, by
/// the kernel's own count (/sys/block/NAME/stat), with one latency
/// sample each: through the BTF programs (latency from the kernel's
/// `io_start_time_ns` where block statistics are on) and the classic
/// tracepoints (latency from the tracer's own issue stamp), both behind
/// `--enable device_io`. The bios each call queued add up to the file.
/// By default no block program runs: the same requests come from
/// /proc/diskstats, with their bytes and mean latency, and the calls
/// count no bios.
#[test]
fn device_figures_match_diskstats_on_every_path() {
    let _file = crate::support::file_group(module_path!());
    for (args, kind) in [
        (&["--enable", "device_io"][..], "tp_btf"),
        (
            &["--enable", "device_io", "--disable", "tp_btf"][..],
            "tracepoint",
        ),
        (&[][..], "/proc/diskstats"),
    ] {
        // noinit_itable: no lazy inode-table zeroing racing the counts.
        let fs = LoopFs::with_mount_options("ext4", 256, &["-o", "noinit_itable"]);
        let mut trace_args = vec!["--json", "--events", "--interval", "60"];
        trace_args.extend_from_slice(args);
        let trace = Tracing::start(&trace_args);
        let before = diskstats_ios(&fs.device);
        let flushes_before = diskstats_flushes(&fs.device);
        let ino = write_file(&fs.path("data"), 64, true);
        // SAFETY: plain syscall.
        unsafe { libc::sync() };
        let completed = diskstats_ios(&fs.device) - before;
        let flushed = diskstats_flushes(&fs.device) - flushes_before;
        let lines = trace.stop(libc::SIGINT);
        let summary = lines.last().unwrap();
        let device_io = summary["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["concept"] == "device_io")
            .expect("device_io in the plan");
        let hook = device_io["hook"].as_str().unwrap();
        assert!(hook.starts_with(kind), "{device_io}");

        let dev = dev_of(&fs.mountpoint);
        let (requests, latencies, sizes) = device_histograms(&lines, &dev);
        // The trace also spans the moments before `before` and after the
        // sync, when an idle filesystem made for the test issues nothing.
        // The block layer completes a request or so it never issued
        // through blk_mq_start_request() (82 completed, 81 issued here in
        // every run; blk_insert_flush() ends some flushes at once).
        assert!(
            requests.abs_diff(completed) <= 2,
            "{kind}: {requests} requests traced, {completed} completed by diskstats"
        );
        let bio_bytes: u64 = calls(&lines)
            .filter(|c| c["dev"] == dev.as_str() && c["ino"] == ino)
            .map(|c| c["bio_bytes"].as_u64().unwrap())
            .sum();
        if kind == "/proc/diskstats" {
            assert_eq!((latencies, sizes, bio_bytes), (0, 0, 0), "no histograms");
            let means: Vec<&Value> = lines
                .iter()
                .filter(|l| l["type"] == "interval")
                .flat_map(|l| l["devices"].as_array().unwrap())
                .filter(|d| d["dev"] == dev.as_str())
                .map(|d| &d["diskstats"])
                .collect();
            assert!(!means.is_empty(), "{dev}: no device lines");
            let bytes: u64 = means.iter().map(|m| m["bytes"].as_u64().unwrap()).sum();
            // The file and the journal-less metadata of a fresh ext4.
            assert!(
                ((64 << 20)..=(64 << 20) + (4 << 20)).contains(&bytes),
                "{bytes} bytes moved for a 64 MiB file"
            );
            for m in &means {
                assert!(m["latency_ns_mean"].as_f64().unwrap() >= 0.0, "{m}");
                assert!(m["in_flight_mean"].as_f64().unwrap() >= 0.0, "{m}");
            }
            // The fsync's cache flushes (the loop driver declares a
            // write cache and serves a flush with an fsync of its image,
            // drivers/block/loop.c), as the device's own counter has
            // them, with a mean time where there were some.
            let flushes: u64 = means.iter().map(|m| m["flushes"].as_u64().unwrap()).sum();
            assert!(flushed > 0, "the fsync flushed nothing on {dev}");
            assert_eq!(flushes, flushed, "{means:?}");
            for m in means.iter().filter(|m| m["flushes"].as_u64() > Some(0)) {
                assert!(m["flush_latency_ns_mean"].as_f64().unwrap() >= 0.0, "{m}");
            }
            continue;
        }
        assert_eq!(sizes, requests, "{kind}");
        if kind == "tp_btf" {
            // One sample per completion: the kernel's own stamp.
            assert!(
                latencies.abs_diff(completed) <= 2,
                "{kind}: {latencies} latency samples, {completed} completions"
            );
        } else {
            // Issue stamps keyed by (device, sector): requests in flight
            // at once at the same sector share a key (blk_kick_flush()
            // inits flush requests to sector -1), so a few completions find
            // no stamp (79 of 82 here).
            assert!(
                latencies <= requests && latencies + 4 >= requests,
                "{kind}: {latencies} latency samples for {requests} requests"
            );
        }
        // Plus, now and then, a few 1 KiB blocks of metadata read from
        // inside the call (3072 bytes in one run).
        assert!(
            ((64 << 20)..=(64 << 20) + (64 << 10)).contains(&bio_bytes),
            "{kind}: {bio_bytes} bytes of bios for a 64 MiB file"
        );
    }
}

/// Per-device inode-pass figures (`inode_passes_by_device`) summed over
/// a trace's interval lines: device → (passes, pages written).
fn passes_by_device(lines: &[Value]) -> std::collections::HashMap<String, (u64, u64)> {
    let mut out = std::collections::HashMap::<String, (u64, u64)>::new();
    for l in lines.iter().filter(|l| l["type"] == "interval") {
        for d in l["inode_passes_by_device"].as_array().unwrap() {
            let e = out.entry(d["dev"].as_str().unwrap().into()).or_default();
            e.0 += d["passes"].as_u64().unwrap();
            e.1 += d["pages_written"].as_u64().unwrap();
            // Every pass is in one of the two histograms.
            let count = |h: &str| -> u64 {
                d[h].as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b["count"].as_u64().unwrap())
                    .sum()
            };
            assert_eq!(
                count("pages_per_pass") + count("pages_per_unbounded_pass"),
                d["passes"].as_u64().unwrap(),
                "{d}"
            );
        }
    }
    out
}

/// Inode passes (tp_btf `writeback_single_inode`, any filesystem) are
/// added up per device: a buffered file on xfs and one on ext4, written
/// back by `sync` (its flusher passes and its WB_SYNC_ALL passes, whose
/// budget is LONG_MAX), add up to each file's pages on its own device; a
/// `--device` trace sees only its device's passes; the classic tracepoint
/// (`--disable tp_btf`) still counts them system-wide, with no device.
///
/// Tolerance 1%: a pass counts what `->writepages` took from its budget,
/// and on ext4 (data=ordered) jbd2's commit can write a few already
/// mapped pages outside any pass (`ext4_journal_submit_inode_data_buffers`);
/// for a freshly written delalloc file the sum is exact in practice. No
/// other inode of these filesystems has page-cache data (ext4 directory
/// blocks live in the block device's mapping, xfs metadata in its buffer
/// cache).
#[test]
fn inode_passes_add_up_per_device_on_xfs_and_ext4() {
    let _file = crate::support::file_group(module_path!());
    let x = LoopFs::new("xfs", 512);
    let e = LoopFs::new("ext4", 512);
    let (dev_x, dev_e) = (dev_of(&x.mountpoint), dev_of(&e.mountpoint));
    let all = Tracing::start(&["--json", "--events", "--interval", "0.5"]);
    let only_x = Tracing::start(&[
        "--json",
        "--interval",
        "0.5",
        "--device",
        &x.mountpoint.to_string_lossy(),
    ]);
    let classic = Tracing::start(&["--json", "--interval", "0.5", "--disable", "tp_btf"]);
    let (px, pe) = (x.path("x"), e.path("e"));
    let tx = std::thread::spawn(move || write_file(&px, 96, false));
    let te = std::thread::spawn(move || write_file(&pe, 64, false));
    let (_, ino_e) = (tx.join().unwrap(), te.join().unwrap());
    let status = wbscope_programs::SYNC.command().status().expect("sync");
    assert!(status.success());
    let (all, only_x) = (all.stop(libc::SIGINT), only_x.stop(libc::SIGINT));
    let classic = classic.stop(libc::SIGINT);
    check_invariants(&all);

    // The hook a concept used, from the summary's probe list.
    let hook = |lines: &[Value], concept: &str| {
        lines.last().unwrap()["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["concept"] == concept)
            .unwrap()["hook"]
            .clone()
    };
    assert_eq!(
        hook(&all, "inode_writeback"),
        "tp_btf writeback_single_inode"
    );
    assert_eq!(
        hook(&classic, "inode_writeback"),
        "tracepoint writeback:writeback_single_inode"
    );

    let per_dev = passes_by_device(&all);
    let within = |got: u64, want: i64| (got as i64 - want).abs() * 100 <= want;
    for (dev, mib) in [(&dev_x, 96), (&dev_e, 64)] {
        let want = mib * (1 << 20) / PAGE;
        let (passes, pages) = per_dev.get(dev).copied().unwrap_or_default();
        assert!(passes > 0, "{dev}: no inode pass: {per_dev:?}");
        assert!(
            within(pages, want),
            "{dev}: passes wrote {pages} pages for a {want}-page file: {per_dev:?}"
        );
    }
    // ext4's own count of the same writeback (its writepages calls).
    let calls_e = pages_of(&all, &dev_e, ino_e);
    assert!(
        within(per_dev[&dev_e].1, calls_e),
        "ext4: passes {} vs writepages calls {calls_e}",
        per_dev[&dev_e].1
    );
    // The system-wide counters saw at least both devices' passes.
    let global = |lines: &[Value]| -> u64 {
        lines
            .iter()
            .filter(|l| l["type"] == "interval")
            .map(|l| l["inode_pages_wrote"].as_u64().unwrap())
            .sum()
    };
    let both = per_dev[&dev_x].1 + per_dev[&dev_e].1;
    assert!(global(&all) >= both, "{}", global(&all));
    // The fallback: the same system-wide counters, no per-device lines.
    assert!(global(&classic) >= both, "{}", global(&classic));
    assert!(passes_by_device(&classic).is_empty());

    // --device: the per-device figures are filtered in the kernel too.
    let filtered = passes_by_device(&only_x);
    assert_eq!(
        filtered.keys().collect::<Vec<_>>(),
        vec![&dev_x],
        "{filtered:?}"
    );
    // Both traces ran over the whole write and sync (passes may differ
    // by a late metadata-only pass between the two stops).
    assert_eq!(filtered[&dev_x].1, per_dev[&dev_x].1);

    // Per-folio writes: xfs writes back through writeback_iter(), which
    // fires wbc_writepage once per folio (ext4's delalloc path does not).
    // The tp_btf program and the classic tracepoint count the same
    // events; the xfs file alone gives at least one folio and at most
    // one per page.
    let folios = |lines: &[Value]| -> u64 {
        lines
            .iter()
            .filter(|l| l["type"] == "interval")
            .map(|l| l["wbc_writepage_events"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(hook(&all, "per_page_write"), "tp_btf wbc_writepage");
    assert_eq!(
        hook(&classic, "per_page_write"),
        "tracepoint writeback:wbc_writepage"
    );
    let (btf, tp) = (folios(&all), folios(&classic));
    assert!(btf > 0, "no wbc_writepage event for 96 MiB on xfs");
    let xfs_pages = 96 * (1 << 20) / PAGE as u64;
    // Other filesystems' writeback in the window (the block device
    // mappings) may add a few to both.
    assert!(
        btf <= xfs_pages + 1024,
        "{btf} folios for {xfs_pages} pages"
    );
    assert!(
        btf.abs_diff(tp) <= 64 + btf / 100,
        "tp_btf {btf} vs tracepoint {tp}"
    );
}

fn cgroup2_root() -> PathBuf {
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("no cgroup2 mount")
}

/// A cgroup made for the test, removed on drop.
struct TestCgroup(PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// `dd` of `count` blocks of `bs` zeros into `of`, with fsync, in a child
/// process: its pages are not this test process's.
fn dd_child(of: &Path, bs: &str, count: u32) {
    let status = wbscope_programs::DD
        .command()
        .args([
            "if=/dev/zero",
            &format!("bs={bs}"),
            &format!("count={count}"),
            "conv=fsync",
            "status=none",
        ])
        .arg(format!("of={}", of.display()))
        .status()
        .unwrap();
    assert!(status.success());
}

/// `dd` of `mib` MiB with fsync, started inside `cgroup`.
fn dd_in_cgroup(cgroup: &Path, file: &Path, mib: u32) {
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec dd if=/dev/zero of={} bs=1M count={mib} conv=fsync status=none",
        cgroup.display(),
        file.display()
    );
    let status = wbscope_programs::SH
        .command()
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Each filter keeps what it should and drops the rest.
#[test]
fn filters_keep_what_they_should() {
    let _file = crate::support::file_group(module_path!());
    let a = LoopFs::new("ext4", 128);
    let b = LoopFs::new("ext4", 128);
    let dev_a = dev_of(&a.mountpoint);

    // --device: only a's calls.
    let trace = Tracing::start(&[
        "--json",
        "--events",
        "--device",
        &a.mountpoint.to_string_lossy(),
    ]);
    let ino_a = write_file(&a.path("x"), 4, true);
    let ino_b = write_file(&b.path("y"), 4, true);
    let lines = trace.stop(libc::SIGINT);
    assert!(
        calls(&lines).all(|c| c["dev"] == dev_a.as_str()),
        "{lines:?}"
    );
    assert_eq!(pages_of(&lines, &dev_a, ino_a), 1024);
    assert!(lines.last().unwrap()["filtered"].as_u64().unwrap() > 0);

    // --inode: only that inode (on any device). The file exists before the
    // trace starts so its number is known; its data is written after.
    let mut z = File::create_new(b.path("z")).unwrap();
    let ino_c = z.metadata().unwrap().ino();
    let trace = Tracing::start(&["--json", "--events", "--inode", &ino_c.to_string()]);
    z.write_all(&vec![3u8; 1 << 20]).unwrap();
    z.sync_all().unwrap();
    write_file(&a.path("w"), 2, true);
    let lines = trace.stop(libc::SIGINT);
    assert!(calls(&lines).all(|c| c["ino"] == ino_c), "{lines:?}");
    assert_eq!(pages_of(&lines, &dev_of(&b.mountpoint), ino_c), 256);

    // --pid: the fsync calls of this process, not the other one's.
    let my_pid = std::process::id();
    let me = my_pid.to_string();
    let trace = Tracing::start(&["--json", "--events", "--pid", &me]);
    let ino_mine = write_file(&a.path("mine"), 2, true);
    dd_child(&b.path("theirs"), "1M", 2);
    let lines = trace.stop(libc::SIGINT);
    // The filter also keeps the writeback of inodes this process dirtied,
    // whoever makes it (a flusher or jbd2 may write "mine" before or
    // beside the fsync: a CI run failed on one), and this process is the
    // whole test suite: the flusher's calls on another test's files are
    // kept too (charged to this pid: a CI run failed on those). The other
    // process's file never appears, and every call is this process's, of
    // "mine", or charged to this process alone.
    let ino_theirs = fs::metadata(b.path("theirs")).unwrap().ino();
    let dev_b = dev_of(&b.mountpoint);
    assert!(
        calls(&lines).all(|c| c["pid"] == my_pid
            || (c["dev"] == dev_a.as_str() && c["ino"] == ino_mine)
            || c["dirtiers"]
                .as_array()
                .is_some_and(|d| !d.is_empty() && d.iter().all(|d| d["pid"] == my_pid))),
        "{lines:?}"
    );
    assert!(
        !calls(&lines).any(|c| c["dev"] == dev_b.as_str() && c["ino"] == ino_theirs),
        "{lines:?}"
    );
    assert!(calls(&lines).any(|c| c["pid"] == my_pid), "{lines:?}");
    assert_eq!(pages_of(&lines, &dev_a, ino_mine), 512);
    let _ = ino_b;

    // --cgroup: only the dd started inside the test cgroup.
    let cg = TestCgroup(cgroup2_root().join(format!("wbscope-test-{me}")));
    fs::create_dir(&cg.0).unwrap();
    let trace = Tracing::start(&["--json", "--events", "--cgroup", &cg.0.to_string_lossy()]);
    dd_in_cgroup(&cg.0, &a.path("in-cgroup"), 3);
    write_file(&a.path("outside"), 3, true);
    let lines = trace.stop(libc::SIGINT);
    let ino_in = fs::metadata(a.path("in-cgroup")).unwrap().ino();
    let cg_id = fs::metadata(&cg.0).unwrap().ino();
    // As with --pid: the cgroup's calls, or another writer's of the file
    // the cgroup dirtied; never the file dirtied outside it.
    assert!(
        calls(&lines)
            .all(|c| c["cgroup_id"] == cg_id || (c["dev"] == dev_a.as_str() && c["ino"] == ino_in)),
        "{lines:?}"
    );
    assert!(calls(&lines).any(|c| c["cgroup_id"] == cg_id), "{lines:?}");
    assert_eq!(pages_of(&lines, &dev_a, ino_in), 768);
}

/// Filters that cannot match are usage errors (exit 2, one line).
#[test]
fn bad_filters_are_usage_errors() {
    let _file = crate::support::file_group(module_path!());
    for args in [
        vec!["--device", "/no/such/device"],
        vec!["--cgroup", "/no/such/cgroup"],
        vec!["--pid", "4000000000"],
        vec!["--device", "99999:1"],
    ] {
        let out = wbscope()
            .args(["trace", "--json", "--duration", "1"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

/// A traced pid that exits: said once, and the trace goes on to its end.
#[test]
fn traced_pid_that_exits_is_reported_and_the_trace_continues() {
    let _file = crate::support::file_group(module_path!());
    let mut child = wbscope_programs::SLEEP.command().arg("1").spawn().unwrap();
    let pid = child.id().to_string();
    // Reap it when it exits, so /proc/PID goes away (no zombie).
    let reaper = std::thread::spawn(move || child.wait());
    let out = wbscope()
        .args(["trace", "--json", "--interval", "0.3", "--duration", "3"])
        .args(["--pid", &pid])
        .output()
        .unwrap();
    reaper.join().unwrap().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {pid} has exited")),
        "{stderr}"
    );
    let last = String::from_utf8(out.stdout).unwrap();
    let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "summary");
}

/// Over `--max-event-rate`, calls stop being printed one by one but are
/// still counted: printed + not written = all calls.
#[test]
fn event_rate_limit_switches_to_aggregation_only() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let trace = Tracing::start(&[
        "--json",
        "--events",
        "--interval",
        "0.3",
        "--max-event-rate",
        "5",
        "--device",
        &fs.mountpoint.to_string_lossy(),
    ]);
    // Many small files each fsynced: one call per file, well over 5/s.
    for i in 0..60 {
        let mut f = File::create_new(fs.path(&format!("f{i}"))).unwrap();
        f.write_all(&[1u8; 4096]).unwrap();
        f.sync_all().unwrap();
        if i % 20 == 19 {
            std::thread::sleep(std::time::Duration::from_millis(350));
        }
    }
    let lines = trace.stop(libc::SIGINT);
    let summary = lines.last().unwrap();
    let printed = calls(&lines).count() as u64;
    let not_written = summary["calls_not_written"].as_u64().unwrap();
    assert!(not_written > 0, "{summary}");
    assert_eq!(printed + not_written, summary["calls"].as_u64().unwrap());
    // The interval figures still count every call.
    let in_intervals: u64 = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .map(|l| l["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(in_intervals, summary["calls"].as_u64().unwrap());
    assert!(summary["calls"].as_u64().unwrap() >= 60);
}

/// `probes --cost`: the calibration programs ran on every context
/// switch of the measurement (the same event, attached one after the
/// other, so their counts differ only by the switches between attaches).
#[test]
fn probes_cost_measures_the_calibration_programs() {
    let _file = crate::support::file_group(module_path!());
    let out = wbscope()
        .args(["probes", "--cost", "1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let costs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = costs
        .iter()
        .map(|c| c["program"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "floor_empty",
            "floor_count",
            "floor_lookup",
            "floor_field",
            "floor_clock"
        ]
    );
    // The measurement sleeps in 1 ms steps: at least a few hundred
    // switches of its own in a second.
    let counts: Vec<u64> = costs
        .iter()
        .map(|c| c["invocations"].as_u64().unwrap())
        .collect();
    for c in &costs {
        let n = c["invocations"].as_u64().unwrap();
        assert!(n >= 200, "{c}");
        let avg = c["avg_ns"].as_f64().unwrap();
        let total = c["run_time_ns"].as_u64().unwrap() as f64;
        assert!(avg > 0.0 && (avg * n as f64 - total).abs() < 1.0, "{c}");
    }
    assert!(
        counts[0] >= counts[4],
        "attached first, ran at least as often: {counts:?}"
    );
    // The counting program did its one thing on every run.
    assert_eq!(costs[1]["counted"], costs[1]["invocations"], "{costs:?}");
    assert!(costs[0].get("counted").is_none(), "{costs:?}");

    let bad = wbscope().args(["probes", "--cost", "0"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(String::from_utf8(bad.stderr).unwrap().lines().count(), 1);
}

/// The events `probes --cost --on-hooks` measures, once each: the default
/// trace's (writeback_common::DEFAULT_HOOKS), the per-folio events of
/// other filesystems' calls last.
const ON_HOOKS_EVENTS: [&str; 10] = [
    "ext4_da_write_folios_start",
    "ext4_da_write_folios_end",
    "ext4_writepages",
    "ext4_writepages_result",
    "writeback_dirty_inode_enqueue",
    "writeback_single_inode",
    "writeback:writeback_start",
    "wbc_writepage",
    "iomap_writeback_folio",
    "extent_writepage",
];

/// The events of a `probes --cost --json` array, in its order.
fn events_of(costs: &[serde_json::Value]) -> Vec<&str> {
    costs.iter().filter_map(|c| c["program"].as_str()).collect()
}

/// `probes --cost --on-hooks` under a known workload: the empty programs
/// on the default trace's events ran for dd's fsync of a new file (one
/// ext4 writepages call with its scan passes, the new inode made dirty),
/// and Ctrl-C ends the measurement with the figures printed.
#[test]
fn probes_cost_on_hooks_runs_on_the_tracers_events() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 64);
    let mut cmd = wbscope();
    cmd.args(["probes", "--cost", "600", "--on-hooks", "--json"]);
    let measuring = Tracing::spawn(cmd, "measuring;");
    // A child writes, not this process: `filters_keep_what_they_should`
    // traces `--pid` of this process beside it, and keeps the writeback
    // of every page this process dirties, whoever writes it back.
    dd_child(&fs.path("pages"), "4k", 256);
    let stopped = std::time::Instant::now();
    let out = measuring.stop(libc::SIGINT);
    assert!(stopped.elapsed().as_secs() < 10, "Ctrl-C did not end it");
    let costs = out[0].as_array().expect("one JSON array");
    let of = |name: &str| {
        costs
            .iter()
            .find(|c| c["program"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {costs:?}"))
    };
    for name in [
        "ext4_writepages",
        "ext4_writepages_result",
        "ext4_da_write_folios_start",
        "ext4_da_write_folios_end",
        "writeback_dirty_inode_enqueue",
    ] {
        assert!(of(name)["invocations"].as_u64().unwrap() >= 1, "{name}");
    }
    assert_eq!(events_of(costs), ON_HOOKS_EVENTS, "{costs:?}");
    for c in costs {
        let n = c["invocations"].as_u64().unwrap();
        if n > 0 {
            let avg = c["avg_ns"].as_f64().unwrap();
            let total = c["run_time_ns"].as_u64().unwrap() as f64;
            assert!(avg > 0.0 && (avg * n as f64 - total).abs() < 1.0, "{c}");
        }
    }

    let bad = wbscope().args(["probes", "--on-hooks"]).output().unwrap();
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--cost <SECONDS>"), "{stderr}");
}

/// `probes --cost --on-hooks --counting`: the program on each event adds
/// 1 to its CPU's counter, and the counters add up to its invocations (it
/// did its one thing on every run, over every CPU it ran on); the dirty
/// folio one ran at least once per folio dd dirtied, as the empty one.
#[test]
fn probes_cost_on_hooks_counting_counts_every_run() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 64);
    let mut cmd = wbscope();
    cmd.args([
        "probes",
        "--cost",
        "600",
        "--on-hooks",
        "--counting",
        "--json",
    ]);
    let measuring = Tracing::spawn(cmd, "measuring; a counting program");
    dd_child(&fs.path("pages"), "4k", 256);
    let out = measuring.stop(libc::SIGINT);
    let costs = out[0].as_array().expect("one JSON array");
    assert_eq!(events_of(costs), ON_HOOKS_EVENTS, "{costs:?}");
    let mut ran = 0;
    for c in costs {
        if c["does"] == "not attached" {
            continue;
        }
        assert_eq!(c["counted"], c["invocations"], "{c}");
        ran += c["invocations"].as_u64().unwrap();
    }
    let runs = |event: &str| {
        let c = costs
            .iter()
            .find(|c| c["program"] == event)
            .unwrap_or_else(|| panic!("{event} in {costs:?}"));
        c["invocations"].as_u64().unwrap()
    };
    // dd's fsync is at least one ext4 writepages call (other writeback
    // on the host may add more), with at least one scan pass in it.
    assert!(runs("ext4_writepages") >= 1, "{costs:?}");
    assert!(runs("ext4_writepages_result") >= 1, "{costs:?}");
    assert!(runs("ext4_da_write_folios_start") >= 1, "{costs:?}");
    assert!(runs("ext4_da_write_folios_end") >= 1, "{costs:?}");
    assert!(ran >= 4, "{costs:?}");

    let bad = wbscope()
        .args(["probes", "--cost", "1", "--counting"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--on-hooks"), "{stderr}");
}

/// ext4's scan passes and extents of a 64 MiB write + fsync as wbscope
/// counts them (in the thread's `CURRENT` entry) equal the kernel's own
/// trace of the same tracepoints, in a tracefs instance filtered to the
/// file: passes (`ext4_da_write_folios_end`), bytes scanned (each pass's
/// `next_pos` at its end minus its `start_pos` at its start, per thread),
/// where the scans began and ended, extents (`ext4_da_write_pages_extent`,
/// `--enable extents`) and their blocks.
#[test]
fn scan_passes_and_extents_equal_ext4s_own_trace() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 256);
    let path = fs.path("f");
    let mut f = File::create_new(&path).expect("create");
    let meta = f.metadata().expect("stat");
    let ino = meta.ino();
    // The events' `dev` is the kernel's dev_t: MKDEV, 20 minor bits.
    let kdev = (libc::major(meta.dev()) << 20) | libc::minor(meta.dev());
    let filter = format!("dev == {kdev} && ino == {ino}");
    let kernel = crate::support::TraceInstance::new(&[
        ("ext4/ext4_da_write_folios_start", &filter),
        ("ext4/ext4_da_write_folios_end", &filter),
        ("ext4/ext4_da_write_pages_extent", &filter),
    ]);
    let trace = Tracing::start(&["--json", "--events", "--enable", "extents"]);
    write_mib(&mut f, 64, true);
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);
    check_invariants(&lines);

    let pos = |line: &str, name: &str| -> i64 {
        let v =
            crate::support::trace_field(line, name).unwrap_or_else(|| panic!("{name} in {line}"));
        i64::from_str_radix(v.trim_start_matches("0x"), 16).expect("hex position")
    };
    let (mut passes, mut scanned, mut extents, mut blocks) = (0u64, 0i64, 0u64, 0u64);
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    // The pass each thread is in: its `start_pos`.
    let mut open = std::collections::HashMap::<String, i64>::new();
    for line in kernel.lines() {
        // `comm-pid` before ` [cpu]`, the pid padded to its width.
        let thread = line
            .split(" [")
            .next()
            .and_then(|t| t.trim().rsplit('-').next())
            .expect("task-pid")
            .to_string();
        if line.contains("ext4_da_write_folios_start:") {
            let start = pos(&line, "start_pos");
            first = first.min(start);
            open.insert(thread, start);
        } else if line.contains("ext4_da_write_folios_end:") {
            let next = pos(&line, "next_pos");
            passes += 1;
            last = last.max(next);
            let start = open.remove(&thread).expect("a pass's end after its start");
            scanned += (next - start).max(0);
        } else if line.contains("ext4_da_write_pages_extent:") {
            extents += 1;
            blocks += crate::support::trace_field(&line, "len")
                .and_then(|v| v.parse::<u64>().ok())
                .expect("len");
        }
    }
    assert!(
        passes > 0 && extents > 0,
        "the kernel traced no pass or extent"
    );

    let mine: Vec<&Value> = calls(&lines)
        .filter(|c| c["dev"] == dev && c["ino"] == ino)
        .collect();
    let sum = |f: &dyn Fn(&Value) -> Option<u64>| -> u64 { mine.iter().filter_map(|c| f(c)).sum() };
    assert_eq!(
        sum(&|c| c["scan"]["iterations"].as_u64()),
        passes,
        "{mine:?}"
    );
    assert_eq!(
        sum(&|c| c["scan"]["bytes"].as_u64()),
        scanned as u64,
        "{mine:?}"
    );
    assert_eq!(sum(&|c| c["extents"].as_u64()), extents, "{mine:?}");
    assert_eq!(sum(&|c| c["extent_blocks"].as_u64()), blocks, "{mine:?}");
    let firsts = mine.iter().filter_map(|c| c["scan"]["first_pos"].as_i64());
    let lasts = mine.iter().filter_map(|c| c["scan"]["last_pos"].as_i64());
    assert_eq!(firsts.min(), Some(first), "{mine:?}");
    assert_eq!(lasts.max(), Some(last), "{mine:?}");
}

/// The maps' kernel memory `probes` states before load equals, map by
/// map, what the kernel says of the loaded maps (`memlock:` in their
/// fdinfo), with the default plan and with the opt-ins that size maps
/// up; `--cpus` states another host's without loading anything.
#[test]
fn probes_states_map_memory_as_the_kernel_reports_it() {
    let _file = crate::support::file_group(module_path!());
    let possible = fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let possible: u64 = possible
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
            None => 1,
        })
        .sum();
    let memory_of = |args: &[&str]| -> Value {
        let out = wbscope().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.get("memory").cloned().unwrap_or(v)
    };
    let bytes_of = |m: &Value, name: &str| -> u64 {
        m["maps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {m}"))["bytes"]
            .as_u64()
            .unwrap()
    };
    let default = memory_of(&["probes", "--json"]);
    let enabled = memory_of(&[
        "--enable",
        "dirty_folio",
        "--enable",
        "device_io",
        "probes",
        "--json",
    ]);
    for m in [&default, &enabled] {
        assert_eq!(m["possible_cpus"], possible, "{m}");
        let maps = m["maps"].as_array().unwrap();
        assert!(maps.len() >= 30, "{m}");
        for e in maps {
            assert_eq!(e["measured"], e["bytes"], "{e}");
        }
        let sum: u64 = maps.iter().map(|e| e["bytes"].as_u64().unwrap()).sum();
        assert_eq!(m["total_bytes"], sum);
        assert!(m["total_bytes"].as_u64().unwrap() <= m["bound_bytes"].as_u64().unwrap());
    }
    // Over the bound with both opt-ins, the in-flight maps give way.
    let shrunk = enabled["maps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "GENERIC")
        .unwrap();
    assert!(
        shrunk["sized"].as_str().unwrap().starts_with("shrunk"),
        "{shrunk}"
    );
    // Unused, a map is made with one entry; asked for, with all of them.
    assert!(bytes_of(&default, "DIRTIERS") < 8192, "{default}");
    assert!(bytes_of(&enabled, "DIRTIERS") > 4 << 20, "{enabled}");
    assert!(bytes_of(&enabled, "RQ_START") > bytes_of(&default, "RQ_START"));

    // Another host's, stated without loading: per-CPU parts grow, the
    // whole stays within its bound.
    let at = |cpus: &str| memory_of(&["probes", "--cpus", cpus, "--json"]);
    let (at2, at128, at256) = (at("2"), at("128"), at("256"));
    assert_eq!(at128["possible_cpus"], 128);
    assert!(at128["maps"][0].get("measured").is_none(), "{at128}");
    assert_eq!(at128["bound_bytes"], 32u64 << 20);
    assert_eq!(at256["bound_bytes"], 64u64 << 20);
    for m in [&at128, &at256] {
        assert!(
            m["total_bytes"].as_u64() <= m["bound_bytes"].as_u64(),
            "{m}"
        );
    }
    // 126 more CPUs: a value of each per-CPU array and slot, a spare
    // element of each plain hash: more, but less than a MiB.
    let grew = bytes_of(&at128, "AGG") - bytes_of(&at2, "AGG");
    assert_eq!(grew, 126 * 76 * 8);
    let whole = at128["total_bytes"].as_u64().unwrap() - at2["total_bytes"].as_u64().unwrap();
    assert!(whole > 0 && whole < 1 << 20, "{whole}");
    let table = wbscope()
        .args(["probes", "--cpus", "128"])
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.starts_with("MAP MEMORY at 128 possible CPUs"),
        "{table}"
    );
    assert!(
        table.contains("unused without --enable dirty_folio"),
        "{table}"
    );

    for bad in ["0", "-1", "x", "9000"] {
        let out = wbscope().args(["probes", "--cpus", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

/// A memory cgroup made for the test under this process's own (v2 where
/// its memory controller is, else v1), with `limit` bytes, removed on
/// drop: the directory and the file to write the limit to.
fn memory_cgroup(limit: u64) -> (TestCgroup, PathBuf) {
    let me = std::process::id();
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    let v2 = cgroup2_root();
    let v2_path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    let v2_dir = v2.join(v2_path.trim_start_matches('/'));
    let (dir, file) = if fs::read_to_string(v2_dir.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
    {
        fs::write(v2_dir.join("cgroup.subtree_control"), "+memory").ok();
        (v2_dir.join(format!("wbscope-memroom-{me}")), "memory.max")
    } else {
        let v1 = mounts
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"cgroup") && f[3].split(',').any(|o| o == "memory"))
                    .then(|| PathBuf::from(f[1]))
            })
            .expect("no memory cgroup controller, v1 or v2");
        let path = own
            .lines()
            .find_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, c, path) = (p.next()?, p.next()?, p.next()?);
                c.split(',').any(|c| c == "memory").then_some(path)
            })
            .unwrap_or("/");
        (
            v1.join(path.trim_start_matches('/'))
                .join(format!("wbscope-memroom-{me}")),
            "memory.limit_in_bytes",
        )
    };
    fs::create_dir(&dir).unwrap();
    let cg = TestCgroup(dir.clone());
    fs::write(dir.join(file), limit.to_string()).unwrap();
    (cg, dir)
}

/// A memory cgroup too small for the maps (the kernel charges them to it
/// since 5.11) gets the plan's answer before anything is loaded, not an
/// allocation failure mid-attach; one with room attaches.
#[test]
fn a_memory_cgroup_too_small_for_the_maps_is_told_before_load() {
    let _file = crate::support::file_group(module_path!());
    let run_in = |limit: u64| {
        let (cg, dir) = memory_cgroup(limit);
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec {} probes",
            dir.display(),
            env!("CARGO_BIN_EXE_wbscope")
        );
        let out = wbscope_programs::SH
            .command()
            .args(["-c", &script])
            .output()
            .unwrap();
        drop(cg);
        out
    };
    let small = run_in(24 << 20);
    assert_eq!(small.status.code(), Some(1), "{small:?}");
    let err = String::from_utf8(small.stderr).unwrap();
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("memory cgroup") && last.contains("wbscope-memroom"),
        "{err}"
    );
    assert!(last.contains("MemoryMax"), "{err}");
    let roomy = run_in(512 << 20);
    assert!(roomy.status.success(), "{roomy:?}");
    let plan = String::from_utf8(roomy.stdout).unwrap();
    assert!(plan.contains("MAP MEMORY at"), "{plan}");
}
