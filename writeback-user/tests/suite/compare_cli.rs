//! `wbscope compare` against the running kernel (root), on an ext4 made
//! for the test: one run per strategy, each with its own kernel calls; bad
//! input refused with one line and exit code 2 before anything runs.

use std::sync::{PoisonError, RwLock};

use crate::support::{LoopFs, dev_of, wbscope};

#[test]
fn compare_json_has_one_run_per_strategy_with_kernel_calls() {
    let _file = crate::support::file_group(module_path!());
    let _drops = DROPPING.read().unwrap_or_else(PoisonError::into_inner);
    let fs = LoopFs::new("ext4", 512);
    let out = wbscope()
        .args(["compare", "--dir"])
        .arg(&fs.mountpoint)
        .args([
            "--size",
            "48M",
            "--chunk",
            "4M",
            "--strategies",
            "buffered,fsync-end,srf-pipelined",
            "--json",
        ])
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "compare failed: {stderr}");
    assert_eq!(
        stderr.matches("sync + drop caches").count(),
        3,
        "each run says it synced and dropped caches: {stderr}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let runs = doc["runs"].as_array().expect("runs");
    let names: Vec<&str> = runs
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["buffered", "fsync-end", "srf-pipelined"]);
    let dev = dev_of(&fs.mountpoint);
    for r in runs {
        let k = &r["kernel"];
        assert!(k["calls"].as_u64().unwrap() > 0, "no kernel calls: {r}");
        assert_eq!(k["devices"], serde_json::json!([dev]));
        // 48 MiB = 12288 pages, all written back inside the run's window
        // (the syncfs after the writer is part of it).
        assert_eq!(
            k["pages_written"].as_u64(),
            Some(12288),
            "{}",
            r["strategy"]
        );
        assert!(k["pages_per_call"]["max"].as_u64().unwrap() > 0);
        assert!(k["device_requests"].as_u64().unwrap() > 0);
        assert_eq!(r["writer"]["bytes"].as_u64(), Some(48 << 20));
    }
    // The run's files are gone; nothing else was created.
    let left: Vec<_> = std::fs::read_dir(&fs.mountpoint)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "lost+found")
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn compare_table_has_a_column_per_strategy() {
    let _file = crate::support::file_group(module_path!());
    let _drops = DROPPING.read().unwrap_or_else(PoisonError::into_inner);
    let fs = LoopFs::new("ext4", 256);
    let plots = tempfile::tempdir_in("/var/tmp").unwrap();
    let svg = plots.path().join("cmp.svg");
    let out = wbscope()
        .args(["compare", "--dir"])
        .arg(&fs.mountpoint)
        .arg("--plot")
        .arg(&svg)
        .args([
            "--size",
            "16M",
            "--strategies",
            "fsync-end,direct",
            "--chunk",
            "1M",
            "--markdown",
        ])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("fsync-end") && header.contains("direct"),
        "{table}"
    );
    for row in [
        "durable MB/s",
        "writepages calls",
        "pages/call p50",
        "scanned/written page",
        "device request p50",
    ] {
        assert!(table.contains(row), "no {row} row: {table}");
    }
    // The plot: an SVG with the report's panels (export::report): both
    // runs on the time axis, and a histogram of pages per call per run.
    let svg = std::fs::read_to_string(&svg).expect("--plot wrote no file");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    for text in [
        "Writer throughput per run",
        "Pages per call: the kernel",
        ">fsync-end</text>",
        ">direct</text>",
    ] {
        assert!(svg.contains(text), "no {text:?} in the SVG");
    }
    // An existing plot file is never overwritten.
    let again = wbscope()
        .args(["compare", "--dir"])
        .arg(&fs.mountpoint)
        .arg("--plot")
        .arg(plots.path().join("cmp.svg"))
        .args(["--size", "4M", "--strategies", "fsync-end"])
        .output()
        .expect("spawn");
    assert_eq!(again.status.code(), Some(2));
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let _file = crate::support::file_group(module_path!());
    let cases: [(&[&str], &str); 5] = [
        (&["--dir", "/var/tmp", "--size", "8Q"], "--size"),
        (
            &["--dir", "/var/tmp", "--size", "1M", "--strategies", "dd"],
            "unknown strategy",
        ),
        (
            &["--dir", "/nonexistent/wbscope", "--size", "1M"],
            "--dir /nonexistent/wbscope",
        ),
        (
            &["--dir", "/var/tmp", "--size", "1M", "--chunk", "2M"],
            "larger than --size",
        ),
        (
            &[
                "--dir",
                "/var/tmp",
                "--size",
                "1M",
                "--strategies",
                "buffered,buffered",
            ],
            "twice",
        ),
    ];
    for (args, expect) in cases {
        let out = wbscope().arg("compare").args(args).output().expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

/// Held for reading by the tests whose runs drop the page cache, and for
/// writing by the one that counts the drops (`drop_pagecache` in
/// /proc/vmstat is the machine's): the tests of this file overlap.
static DROPPING: RwLock<()> = RwLock::new(());

/// `drop_pagecache` of /proc/vmstat: how often the page cache was dropped.
fn drops() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("drop_pagecache "))
        .expect("drop_pagecache in /proc/vmstat")
        .parse()
        .unwrap()
}

#[test]
fn unusable_dirs_are_refused_before_the_page_cache_is_dropped() {
    let _file = crate::support::file_group(module_path!());
    // Alone: the count is the machine's, and the other tests' runs drop.
    let _drops = DROPPING.write().unwrap_or_else(PoisonError::into_inner);
    let ro = LoopFs::with_mount_options("ext4", 64, &["-o", "ro"]);
    let small = LoopFs::new("ext4", 32);
    let ro_dir = ro.mountpoint.display().to_string();
    let small_dir = small.mountpoint.display().to_string();
    let cases: [(&str, &str, &str); 4] = [
        (&ro_dir, "1M", "read-only filesystem"),
        ("/proc", "1M", "not on a block device"),
        ("/dev/shm", "1M", "not on a block device"),
        (&small_dir, "64M", "only"),
    ];
    for (dir, size, expect) in cases {
        let before = drops();
        let out = wbscope()
            .args(["compare", "--dir", dir, "--size", size, "--chunk", "1M"])
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{dir}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{dir}: {stderr}");
        assert!(
            stderr.starts_with(&format!("wbscope: error: --dir {dir}: "))
                && stderr.contains(expect),
            "{dir}: {stderr}"
        );
        assert_eq!(drops(), before, "{dir}: the page cache was dropped");
    }
}

#[test]
fn a_non_utf8_dir_gives_complete_json_or_exit_2() {
    let _file = crate::support::file_group(module_path!());
    let _drops = DROPPING.read().unwrap_or_else(PoisonError::into_inner);
    use std::os::unix::ffi::OsStrExt as _;
    let fs = LoopFs::new("ext4", 64);
    let odd = fs.mountpoint.join(std::ffi::OsStr::from_bytes(b"d\xffir"));
    std::fs::create_dir(&odd).unwrap();
    let out = wbscope()
        .args(["compare", "--dir"])
        .arg(&odd)
        .args([
            "--size",
            "4M",
            "--chunk",
            "1M",
            "--strategies",
            "buffered",
            "--json",
        ])
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    match out.status.code() {
        Some(0) => {
            let doc: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("one complete JSON document");
            let runs = doc["runs"].as_array().expect("runs");
            assert_eq!(runs.len(), 1, "{doc}");
            assert_eq!(
                runs[0]["writer"]["dirs"],
                serde_json::json!([odd.to_string_lossy()])
            );
            assert_eq!(runs[0]["writer"]["bytes"].as_u64(), Some(4 << 20));
        }
        Some(2) => {
            assert!(out.stdout.is_empty());
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        }
        other => panic!("exit {other:?}: {stderr}"),
    }
    let left: Vec<_> = std::fs::read_dir(&odd).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

/// The calls of a run on xfs and on btrfs (generic calls) add
/// up to what the inode passes and the block layer saw on the same
/// device: every page the writer dirtied is written by one writepages
/// call inside one `__writeback_single_inode()` pass (fs/fs-writeback.c:
/// the pass calls do_writepages), and reaches the device as at least as
/// many bytes. The block figure is bounded by the request-size buckets
/// (log2 `[lo, hi]`, the JSON keeps no byte total); the difference above
/// the data is the filesystems' metadata (xfs's log, btrfs's trees).
/// It also checks that `compare` finds btrfs' calls at all: they carry the
/// superblock's anonymous device, which neither stat(2) of the directory
/// (a subvolume's device) nor the loop device names.
#[test]
fn calls_equal_inode_passes_and_fit_the_block_requests_on_xfs_and_btrfs() {
    let _file = crate::support::file_group(module_path!());
    let _drops = DROPPING.read().unwrap_or_else(PoisonError::into_inner);
    for fstype in ["xfs", "btrfs"] {
        let fs = LoopFs::new(fstype, 512);
        let out = wbscope()
            .args(["compare", "--dir"])
            .arg(&fs.mountpoint)
            .args([
                "--size",
                "48M",
                "--chunk",
                "4M",
                "--strategies",
                "buffered",
                "--json",
            ])
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{fstype}: compare failed: {stderr}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let k = &doc["runs"][0]["kernel"];
        let data_pages = 48 * 256;
        assert_eq!(
            k["pages_written"].as_u64(),
            Some(data_pages),
            "{fstype}: {k}"
        );
        // The passes' pages: the file's, plus on btrfs the tree blocks
        // written through its btree inode's own passes (~20 pages for
        // this run), which no data call carries.
        let passes = k["inode_pass"]["pages_written"].as_u64().unwrap();
        let metadata = if fstype == "btrfs" {
            data_pages / 100
        } else {
            0
        };
        // A pass counts the budget it consumed. btrfs raises a finite
        // budget mid-pass (`writepage_delalloc()`, fs/btrfs/extent_io.c:
        // `wbc->nr_to_write` set up to the delalloc range, at most 8192
        // pages), so when another process's `sync` splits its passes into
        // budget chunks they count fewer pages than they wrote (CI: 10776
        // of 12288); only the upper bound holds then. Without budget
        // passes the figures must agree.
        let budget_passes_on_btrfs =
            fstype == "btrfs" && k["inode_pass"]["budget_passes"].as_u64() != Some(0);
        let floor = if budget_passes_on_btrfs {
            0
        } else {
            data_pages
        };
        assert!(
            (floor..=data_pages + metadata).contains(&passes),
            "{fstype}: the calls ({data_pages} pages) and the inode passes ({passes}) \
             disagree: {k}"
        );
        let (mut lo, mut hi) = (0u64, 0u64);
        for b in k["device_request_bytes"].as_array().expect("buckets") {
            let n = b["count"].as_u64().unwrap();
            lo += b["lo"].as_u64().unwrap() * n;
            hi += b["hi"].as_u64().unwrap() * n;
        }
        let data = 48u64 << 20;
        assert!(
            hi >= data,
            "{fstype}: requests of at most {hi} bytes cannot carry {data}: {k}"
        );
        // Metadata is a small part of a 48 MiB write; twice the data
        // would mean requests counted from elsewhere.
        assert!(
            lo <= 2 * data,
            "{fstype}: requests of at least {lo} bytes: {k}"
        );
    }
}
