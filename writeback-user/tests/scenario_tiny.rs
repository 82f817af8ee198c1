//! `wbscope scenario NAME --scale tiny` against the running kernel (root):
//! each scenario runs and reports non-zero kernel figures, and its loop
//! devices and mounts are gone afterwards, also after an injected failure
//! and after SIGINT. The scenarios run one at a time (they sync and drop
//! caches, and count loop devices).
mod support;

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
    sync::Mutex,
    time::Duration,
};

use support::wbscope;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Our scratch filesystems: `losetup -a` and /proc/mounts lines naming a
/// `wbscope-scenario-` image or mount point.
fn leftovers() -> Vec<String> {
    let losetup = support::run(std::process::Command::new("losetup").arg("-a"));
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    losetup
        .lines()
        .chain(mounts.lines())
        .filter(|l| l.contains("wbscope-scenario-"))
        .map(str::to_string)
        .collect()
}

fn scenario(name: &str, extra: &[&str]) -> serde_json::Value {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = leftovers();
    let out = wbscope()
        .args(["scenario", name, "--scale", "tiny", "--json"])
        .args(extra)
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed: {stderr}");
    assert!(stderr.contains("filesystems removed"), "{stderr}");
    assert_eq!(leftovers(), before, "{name} left a loop device or mount");
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn runs(doc: &serde_json::Value) -> &Vec<serde_json::Value> {
    doc["runs"].as_array().expect("runs")
}

fn calls(run: &serde_json::Value) -> u64 {
    run["kernel"]["calls"].as_u64().unwrap()
}

#[test]
fn single_stream() {
    let doc = scenario("single-stream", &[]);
    let names: Vec<&str> = runs(&doc)
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["buffered", "fsync-end", "srf-pipelined", "direct"]);
    for r in runs(&doc) {
        assert!(r["kernel"]["device_requests"].as_u64().unwrap() > 0, "{r}");
        if r["strategy"] != "direct" {
            // 256 MiB through the page cache: all of it in writepages calls.
            assert!(calls(r) > 0, "{r}");
            assert_eq!(
                r["kernel"]["pages_written"].as_u64(),
                Some(65536),
                "{}",
                r["strategy"]
            );
        }
    }
}

#[test]
fn three_filesystems() {
    let doc = scenario("three-filesystems", &[]);
    let runs = runs(&doc);
    assert_eq!(runs.len(), 3);
    let mut devs: Vec<&str> = Vec::new();
    for r in runs {
        assert!(calls(r) > 0, "{r}");
        assert!(
            r["writer"]["per_second"]["min"].as_f64().is_some(),
            "per-second figures: {r}"
        );
        devs.push(r["kernel"]["devices"][0].as_str().unwrap());
    }
    devs.sort();
    devs.dedup();
    assert_eq!(devs.len(), 3, "one device per filesystem");
}

#[test]
fn sync_after_write() {
    let doc = scenario("sync-after-write", &[]);
    assert_eq!(runs(&doc).len(), 1);
    let sync = &doc["sync"];
    assert!(sync["sync_wall_s"].as_f64().unwrap() > 0.0);
    let total = calls(&runs(&doc)[0]) + sync["kernel"]["calls"].as_u64().unwrap();
    assert!(total > 0, "{doc}");
    let pages = runs(&doc)[0]["kernel"]["pages_written"].as_u64().unwrap()
        + sync["kernel"]["pages_written"].as_u64().unwrap();
    // 512 MiB: written by the flusher during the write or by the sync.
    assert!(pages >= 131072 * 9 / 10, "{pages} pages");
}

#[test]
fn package_unpack() {
    let doc = scenario("package-unpack", &[]);
    let runs = runs(&doc);
    assert_eq!(runs.len(), 5);
    for r in runs {
        assert_eq!(r["writer"]["files_written"].as_u64(), Some(300), "{r}");
        assert!(r["writer"]["files_per_s"].as_f64().unwrap() > 0.0);
        assert!(calls(r) > 0, "{r}");
    }
}

#[test]
fn many_writers() {
    let doc = scenario("many-writers", &[]);
    let runs = runs(&doc);
    let fs: Vec<&str> = runs.iter().map(|r| r["fs"].as_str().unwrap()).collect();
    assert_eq!(fs, ["ext4", "xfs"]);
    // ext4's writepages calls are traced; xfs has none of ext4's hooks, its
    // figures are the device's requests and the inode passes.
    assert!(calls(&runs[0]) > 0, "{}", runs[0]);
    for r in runs {
        assert!(r["kernel"]["device_requests"].as_u64().unwrap() > 0, "{r}");
        // Inode passes on the run's device, both filesystems: the 64 MiB
        // dirty cap makes the flusher write in chunks with a finite budget
        // (writeback_chunk_size()), and every page of the 4 x 96 MiB goes
        // through a pass (syncfs at the end of the run: the rest).
        let p = &r["kernel"]["inode_pass"];
        let fs = &r["fs"];
        assert!(p["budget_passes"].as_u64().unwrap() > 0, "{fs}: {p}");
        assert!(p["budget_pages_written"].as_u64().unwrap() > 0, "{fs}: {p}");
        let p50 = p["pages_per_pass_p50"].as_array().expect("p50 bucket");
        assert!(p50[0].as_u64().unwrap() > 0, "{fs}: {p}");
        assert!(p["pages_asked_per_pass_p50"].is_array(), "{fs}: {p}");
        let pages = p["pages_written"].as_u64().unwrap();
        let want = 4 * 96 * 256;
        assert!(
            pages.abs_diff(want) * 100 <= want,
            "{fs}: passes wrote {pages} pages of {want}: {p}"
        );
    }
}

#[test]
fn injected_failure_after_mount_leaves_nothing_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = leftovers();
    let out = wbscope()
        .args([
            "scenario",
            "three-filesystems",
            "--scale",
            "tiny",
            "--fail-after-mount",
        ])
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("injected failure"), "{stderr}");
    assert_eq!(stderr.matches("mounted at").count(), 3, "{stderr}");
    assert_eq!(leftovers(), before);
}

#[test]
fn sigint_mid_scenario_leaves_nothing_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = leftovers();
    let mut child = wbscope()
        .args(["scenario", "single-stream", "--scale", "tiny"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines().map_while(Result::ok) {
        let go = line.contains("ext4 fsync-end: sync + drop caches");
        seen.push(line);
        if go {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("mounted at")),
        "never mounted: {seen:?}"
    );
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: plain syscall on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().expect("wait");
    assert!(!status.success(), "an interrupted scenario fails");
    assert_eq!(leftovers(), before, "SIGINT left a loop device or mount");
}
