//! `wbscope scenario NAME --scale tiny` against the running kernel (root):
//! each scenario runs and reports non-zero kernel figures, and its loop
//! devices, mounts and images are gone afterwards, also after an injected
//! failure and after SIGINT; after SIGKILL, the next run or `--cleanup`
//! removes them and puts the dirty caps back. The scenarios run one at a
//! time (they sync and drop caches).

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Output, Stdio},
    sync::Mutex,
    time::Duration,
};

use crate::support::wbscope;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What the `wbscope` process `pid` made and left: loop devices, mounts
/// and scratch directories named `wbscope-scratch-PID-…`.
fn leftovers(pid: u32) -> Vec<String> {
    let mark = format!("wbscope-scratch-{pid}-");
    let losetup = crate::support::run(wbscope_programs::LOSETUP.command().args([
        "-l",
        "-n",
        "-O",
        "NAME,BACK-FILE",
    ]));
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let dirs = std::fs::read_dir("/var/tmp")
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect::<Vec<_>>();
    losetup
        .lines()
        .chain(mounts.lines())
        .chain(dirs.iter().map(String::as_str))
        .filter(|l| l.contains(&mark))
        .map(str::to_string)
        .collect()
}

/// Runs `cmd` to its end; (pid, output).
fn run_to_end(cmd: &mut std::process::Command) -> (u32, Output) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    (pid, child.wait_with_output().expect("wait"))
}

fn scenario(name: &str, extra: &[&str]) -> serde_json::Value {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (pid, out) = run_to_end(
        wbscope()
            .args(["scenario", name, "--scale", "tiny", "--json"])
            .args(extra),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed: {stderr}");
    assert!(stderr.contains("filesystems removed"), "{stderr}");
    assert_eq!(leftovers(pid), Vec::<String>::new(), "{name} left these");
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
    let _file = crate::support::file_group(module_path!());
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
    let _file = crate::support::file_group(module_path!());
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
    let _file = crate::support::file_group(module_path!());
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
    let _file = crate::support::file_group(module_path!());
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
    let _file = crate::support::file_group(module_path!());
    let doc = scenario("many-writers", &[]);
    let runs = runs(&doc);
    let fs: Vec<&str> = runs.iter().map(|r| r["fs"].as_str().unwrap()).collect();
    assert_eq!(fs, ["ext4", "xfs"]);
    let want = 4 * 96 * 256;
    for r in runs {
        assert!(r["kernel"]["device_requests"].as_u64().unwrap() > 0, "{r}");
        // Writepages calls on both: ext4's from its own hooks, xfs's put
        // together from its per-folio events (docs/probes.md "Generic
        // calls"), so the per-call chunks stand side by side; every page
        // written is in a call.
        let k = &r["kernel"];
        let fs = &r["fs"];
        assert!(calls(r) > 0, "{fs}: {k}");
        let p50 = k["pages_per_call"]["p50"].as_u64();
        assert!(p50.is_some_and(|p| p > 0), "{fs}: {k}");
        let pages = k["pages_written"].as_u64().unwrap();
        assert!(
            pages.abs_diff(want) * 100 <= want,
            "{fs}: calls wrote {pages} pages of {want}: {k}"
        );
        // Inode passes on the run's device, both filesystems: the 64 MiB
        // dirty cap makes the flusher write in chunks with a finite budget
        // (writeback_chunk_size()), and every page of the 4 x 96 MiB goes
        // through a pass (syncfs at the end of the run: the rest).
        let p = &r["kernel"]["inode_pass"];
        assert!(p["budget_passes"].as_u64().unwrap() > 0, "{fs}: {p}");
        assert!(p["budget_pages_written"].as_u64().unwrap() > 0, "{fs}: {p}");
        let p50 = p["pages_per_pass_p50"].as_array().expect("p50 bucket");
        assert!(p50[0].as_u64().unwrap() > 0, "{fs}: {p}");
        assert!(p["pages_asked_per_pass_p50"].is_array(), "{fs}: {p}");
        let pages = p["pages_written"].as_u64().unwrap();
        assert!(
            pages.abs_diff(want) * 100 <= want,
            "{fs}: passes wrote {pages} pages of {want}: {p}"
        );
    }
}

#[test]
fn page_cache_cliff() {
    let _file = crate::support::file_group(module_path!());
    let doc = scenario("page-cache-cliff", &[]);
    let runs = runs(&doc);
    let labels: Vec<&str> = runs
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "buffered",
            "srf-pipelined --drop-behind",
            "uncached",
            "uring-buffered --uncached",
            "direct"
        ]
    );
    let by = |l: &str| runs.iter().find(|r| r["strategy"] == l).unwrap();
    let file_kib = by("buffered")["writer"]["file_bytes"].as_u64().unwrap() / 1024;
    let chunk_kib = by("buffered")["writer"]["chunk_bytes"].as_u64().unwrap() / 1024;
    // buffered leaves its file cached; the uncached runs leave at most a
    // few chunks, and their writeback was kicked by the writes themselves.
    assert!(by("buffered")["writer"]["cache_end_kib"].as_u64().unwrap() >= file_kib * 9 / 10);
    for l in ["uncached", "uring-buffered --uncached"] {
        let r = by(l);
        assert_eq!(r["writer"]["rwf_dontcache"], true, "{l}");
        assert!(
            r["writer"]["cache_end_kib"].as_u64().unwrap() <= 4 * chunk_kib,
            "{l}: {r}"
        );
        let kicked = r["kernel"]["calls_by_cause"]["uncached"]
            .as_u64()
            .unwrap_or(0);
        // One kick per chunk written (a chunk whose pages were already
        // written by an earlier kick may find nothing to do: at least half).
        assert!(kicked >= file_kib / chunk_kib / 2, "{l}: {}", r["kernel"]);
        assert!(r["kernel"]["calls_by_cause"].get("direct").is_none(), "{l}");
        assert!(r["writer"]["reclaim"]["pgsteal_kswapd"].is_u64(), "{l}");
    }
    // ext4 takes no io_uring buffered write without blocking: every write
    // is punted to a worker (the counter is system-wide: at least that).
    let punts = by("uring-buffered --uncached")["kernel"]["io_uring_punts"]
        .as_u64()
        .unwrap();
    assert!(punts >= file_kib / chunk_kib, "{punts}");
    // The other runs kicked nothing of their own.
    assert!(
        by("buffered")["kernel"]["calls_by_cause"]
            .get("uncached")
            .is_none()
    );
    assert!(
        by("srf-pipelined --drop-behind")["kernel"]["calls_by_cause"]["direct"].as_u64() > Some(0)
    );
}

#[test]
fn injected_failure_after_mount_leaves_nothing_behind() {
    let _file = crate::support::file_group(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (pid, out) = run_to_end(wbscope().args([
        "scenario",
        "three-filesystems",
        "--scale",
        "tiny",
        "--fail-after-mount",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("injected failure"), "{stderr}");
    assert_eq!(stderr.matches("mounted at").count(), 3, "{stderr}");
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

/// A scenario started with its stderr read line by line.
struct Started {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
    seen: Vec<String>,
}

impl Started {
    fn spawn(name: &str) -> Started {
        let mut child = wbscope()
            .args(["scenario", name, "--scale", "tiny"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        Started {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads stderr up to and including the first line containing `what`.
    fn wait_for(&mut self, what: &str) -> String {
        for line in self.lines.by_ref().map_while(Result::ok) {
            self.seen.push(line.clone());
            if line.contains(what) {
                return line;
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("no {what:?} in {:?}", self.seen);
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain syscall on our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Waits for the end; (exit status, the rest of stderr).
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let rest: Vec<String> = self.lines.map_while(Result::ok).collect();
        (self.child.wait().expect("wait"), rest.join("\n"))
    }
}

#[test]
fn sigint_mid_scenario_leaves_nothing_behind() {
    let _file = crate::support::file_group(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Started::spawn("single-stream");
    s.wait_for("mounted at");
    s.wait_for("ext4 fsync-end: sync + drop caches");
    std::thread::sleep(Duration::from_millis(100));
    s.signal(libc::SIGINT);
    let pid = s.child.id();
    let (status, _) = s.finish();
    assert!(!status.success(), "an interrupted scenario fails");
    assert_eq!(leftovers(pid), Vec::<String>::new(), "SIGINT left these");
}

#[test]
fn sigint_while_three_filesystems_write_fails_with_interrupted() {
    let _file = crate::support::file_group(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Started::spawn("three-filesystems");
    s.wait_for("three buffered writers: sync + drop caches");
    // Into the one traced window, while the three writers run (3 x 768
    // MiB under 64 MiB dirty caps: several seconds here).
    std::thread::sleep(Duration::from_millis(1500));
    s.signal(libc::SIGINT);
    let pid = s.child.id();
    let (status, rest) = s.finish();
    assert_eq!(status.code(), Some(1), "{rest}");
    let last = rest.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("wbscope: error: interrupted"),
        "one line saying so, last: {rest}"
    );
    assert!(!rest.contains("done in"), "{rest}");
    assert_eq!(leftovers(pid), Vec::<String>::new(), "SIGINT left these");
}

/// `/sys/class/bdi/MAJ:MIN` of the first filesystem a scenario mounted,
/// from its "ext4 on /dev/loopN (MAJ:MIN) mounted at …" line.
fn bdi_of(mounted: &str) -> PathBuf {
    let dev = mounted
        .split(['(', ')'])
        .nth(1)
        .unwrap_or_else(|| panic!("no (MAJ:MIN) in {mounted}"));
    Path::new("/sys/class/bdi").join(dev)
}

fn knob(bdi: &Path, name: &str) -> String {
    std::fs::read_to_string(bdi.join(name))
        .unwrap()
        .trim()
        .to_string()
}

/// A scenario killed with SIGKILL once its first filesystem is mounted
/// and capped: (pid, its bdi), with everything still in place.
fn killed_scenario() -> (u32, PathBuf) {
    let mut s = Started::spawn("single-stream");
    let mounted = s.wait_for("mounted at");
    assert!(mounted.contains("dirty cap"), "{mounted}");
    s.signal(libc::SIGKILL);
    let pid = s.child.id();
    s.finish();
    let bdi = bdi_of(&mounted);
    assert_eq!(
        knob(&bdi, "strict_limit"),
        "1",
        "the cap stays after SIGKILL"
    );
    let left = leftovers(pid);
    assert!(
        left.iter().any(|l| l.starts_with("/dev/loop")) && left.len() >= 3,
        "loop device, mount and directory stay after SIGKILL: {left:?}"
    );
    (pid, bdi)
}

#[test]
fn after_sigkill_cleanup_removes_everything_and_restores_the_caps() {
    let _file = crate::support::file_group(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (pid, bdi) = killed_scenario();
    let (_, out) = run_to_end(wbscope().args(["scenario", "--cleanup"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for what in [
        format!("restored {}/strict_limit to 0", bdi.display()),
        "unmounted /var/tmp/wbscope-scratch-".to_string(),
        "detached /dev/loop".to_string(),
        format!("removed /var/tmp/wbscope-scratch-{pid}-"),
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&what)),
            "no {what:?} in: {stdout}"
        );
    }
    assert_eq!(leftovers(pid), Vec::<String>::new());
    assert_eq!(knob(&bdi, "strict_limit"), "0");
    assert_eq!(knob(&bdi, "max_ratio"), "100");
}

#[test]
fn after_sigkill_the_next_scenario_removes_the_leftovers_and_says_so() {
    let _file = crate::support::file_group(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (pid, bdi) = killed_scenario();
    let (next, out) = run_to_end(wbscope().args([
        "scenario",
        "single-stream",
        "--scale",
        "tiny",
        "--fail-after-mount",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "wbscope: warning: left by a killed run: removed /var/tmp/wbscope-scratch-{pid}-"
        )),
        "{stderr}"
    );
    assert_eq!(leftovers(pid), Vec::<String>::new());
    assert_eq!(leftovers(next), Vec::<String>::new());
    // The device may have been bound again by the next run (and released):
    // the defaults either way.
    assert_eq!(knob(&bdi, "strict_limit"), "0");
}

#[test]
fn cleanup_takes_no_scenario_and_a_scenario_or_cleanup_is_required() {
    let _file = crate::support::file_group(module_path!());
    let (_, out) = run_to_end(wbscope().args(["scenario"]));
    assert_eq!(out.status.code(), Some(2));
    let (_, out) = run_to_end(wbscope().args(["scenario", "--cleanup", "single-stream"]));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// `--repeat 3`: three rounds of the five variants, each round's order
/// rotated by one (the variant that ran first runs last next), every run
/// after its own sync and drop, and the table's spread over the rounds.
#[test]
fn package_unpack_repeated_rotates_the_order() {
    let _file = crate::support::file_group(module_path!());
    let doc = scenario("package-unpack", &["--repeat", "3"]);
    let runs = runs(&doc);
    assert_eq!(runs.len(), 15);
    let order: Vec<(u64, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["repeat"].as_u64().unwrap(),
                r["strategy"].as_str().unwrap(),
            )
        })
        .collect();
    let variants = [
        "fsync-each",
        "srf-then-fsync",
        "two-pass",
        "fsync-each+na+fd",
        "two-pass+na+fd",
    ];
    for round in 0..3u64 {
        let got: Vec<&str> = order
            .iter()
            .filter(|(r, _)| *r == round)
            .map(|(_, s)| *s)
            .collect();
        let k = round as usize;
        let want: Vec<&str> = variants[k..]
            .iter()
            .chain(&variants[..k])
            .copied()
            .collect();
        assert_eq!(got, want, "round {round}");
    }
    for r in runs {
        assert_eq!(r["writer"]["files_written"].as_u64(), Some(300), "{r}");
    }
}

#[test]
fn sync_after_write_refuses_repeat_before_mounting() {
    let _file = crate::support::file_group(module_path!());
    let (_, out) = run_to_end(wbscope().args([
        "scenario",
        "sync-after-write",
        "--scale",
        "tiny",
        "--repeat",
        "2",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--repeat is not supported"), "{stderr}");
}
