//! `wbscope write` end to end: the built binary, its JSON report, its exit
//! codes, and the system calls it really makes, counted from outside with
//! strace(1).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::LoopFs;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_wbscope");

/// A temp dir on the root filesystem (/tmp may be tmpfs).
fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("wbscope-cli-")
        .tempdir_in("/var/tmp")
        .expect("temp dir")
}

fn wbscope(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("write")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("run wbscope")
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect()
}

fn json(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn json_report_has_the_documented_fields_and_bytes_equal_size() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let out = wbscope(
        dir.path(),
        &[
            "--size",
            "8M",
            "--chunk",
            "1M",
            "--strategy",
            "srf-pipelined",
            "--verify",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["bytes"], 8 << 20);
    assert_eq!(v["bytes_durable"], 8 << 20);
    assert_eq!(v["strategy"], "srf-pipelined");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["chunk_bytes"], 1 << 20);
    assert!(v["elapsed_s"].as_f64().unwrap() > 0.0);
    assert!(v["durable_mb_s"].as_f64().unwrap() > 0.0);
    assert!(v["per_second_mb_s"].is_array());
    assert!(v.get("cv").is_some());
    assert!(v["sys_cpu_s"].as_f64().unwrap() >= 0.0);
    assert!(v["user_cpu_s"].as_f64().unwrap() >= 0.0);
    let sync = v["sync_latency_us"].as_object().unwrap();
    assert_eq!(sync["srf_write"]["count"], 8);
    assert_eq!(sync["srf_wait_before"]["count"], 4);
    assert_eq!(sync["fdatasync"]["count"], 1);
    assert!(sync["fdatasync"]["p99"].as_f64().unwrap() > 0.0);
    assert_eq!(v["write_latency_us"]["count"], 8);
    assert_eq!(v["verify"]["ok"], true);
    assert!(entries(dir.path()).is_empty(), "files removed");
}

#[test]
fn human_report_is_a_table() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let out = wbscope(
        dir.path(),
        &["--size", "2M", "--chunk", "512k", "--strategy", "fsync-end"],
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("wbscope write: fsync-end (completed)"),
        "{text}"
    );
    for row in ["written", "throughput", "write latency", "fsync", "CPU"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(row)),
            "{row}: {text}"
        );
    }
    // No progress line when stderr is not a terminal.
    assert!(out.stderr.is_empty());
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let d = dir.path().to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--size", "8Q", "--strategy", "buffered"],
            "unknown unit \"Q\"",
        ),
        (
            &["--size", "0", "--strategy", "buffered"],
            "--size must be greater than 0",
        ),
        (
            &["--size", "1M", "--chunk", "2M", "--strategy", "buffered"],
            "larger than --size",
        ),
        (
            &["--size", "1M", "--strategy", "buffered", "--window", "0"],
            "--window",
        ),
        (&["--size", "1M", "--strategy", "fast"], "unknown strategy"),
        (
            &["--size", "1M", "--chunk", "5000", "--strategy", "direct"],
            "not a multiple of",
        ),
        // The bounds of writer_core::limits, the same the dashboard keeps.
        (
            &["--size", "1M", "--chunk", "1k", "--strategy", "buffered"],
            "--chunk 1KiB is smaller than the 4KiB minimum",
        ),
        (
            &["--size", "1G", "--chunk", "512M", "--strategy", "buffered"],
            "--chunk 512MiB is larger than the 256MiB maximum",
        ),
        (
            &["--size", "1M", "--strategy", "buffered", "--jobs", "65"],
            "--jobs 65 is more than the maximum of 64",
        ),
        (
            &["--size", "1M", "--strategy", "buffered", "--window", "65"],
            "--window 65 is more than the maximum of 64 chunks",
        ),
        (&["--size", "1M"], "missing --strategy"),
        (
            &["--size", "1M", "--strategy", "direct", "--drop-behind"],
            "--drop-behind needs --strategy srf-pipelined or fdatasync-chunk",
        ),
    ];
    for (args, want) in cases {
        let out = wbscope(Path::new(d), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("wbscope: error: ") && err.contains(want),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let missing = dir.path().join("missing");
    let out = wbscope(&missing, &["--size", "1M", "--strategy", "buffered"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "wbscope: error: --dir {}: does not exist",
            missing.display()
        )
    );
    // A parse error from clap itself (not a number) is one line and 2 too.
    let out = wbscope(
        dir.path(),
        &["--size", "1M", "--strategy", "buffered", "--jobs", "many"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn files_of_an_earlier_run_are_left_alone() {
    let _file = crate::support::file_group(module_path!());
    // Names carry the writer's pid, so a new run cannot pick an existing
    // name here; the O_EXCL refusal itself is tested in writer-core and the
    // O_CREAT|O_EXCL flags are checked with strace below.
    let dir = tmp();
    let out = wbscope(
        dir.path(),
        &["--size", "1M", "--strategy", "buffered", "--keep", "--json"],
    );
    assert!(out.status.success());
    let kept = json(&out)["kept_files"].as_array().unwrap().clone();
    assert_eq!(kept.len(), 1);
    let path = PathBuf::from(kept[0].as_str().unwrap());
    std::fs::write(&path, b"precious").unwrap();
    let out = wbscope(dir.path(), &["--size", "1M", "--strategy", "buffered"]);
    assert!(out.status.success());
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    assert_eq!(entries(dir.path()), vec![path]);
}

/// A small ext4 on a loop device, unmounted and detached on drop.
#[test]
fn full_and_read_only_filesystems() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 32);
    // Refused up front: does not fit.
    let out = wbscope(
        &fs.mountpoint,
        &["--size", "64M", "--chunk", "1M", "--strategy", "fsync-end"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().count() == 1 && err.contains("only"), "{err}");
    // Forced: ENOSPC mid-run, partial report, exit 1, nothing left behind.
    let out = wbscope(
        &fs.mountpoint,
        &[
            "--size",
            "64M",
            "--chunk",
            "1M",
            "--strategy",
            "fsync-end",
            "--no-space-check",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("wbscope: error: ") && err.contains("No space left on device"),
        "{err}"
    );
    let v = json(&out);
    assert_eq!(v["status"], "failed");
    assert!(v["bytes"].as_u64().unwrap() > 1 << 20);
    let left: Vec<PathBuf> = entries(&fs.mountpoint)
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(fs);

    let ro = LoopFs::with_mount_options("ext4", 32, &["-o", "ro"]);
    let out = wbscope(&ro.mountpoint, &["--size", "1M", "--strategy", "buffered"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "wbscope: error: --dir {}: is on a read-only filesystem",
            ro.mountpoint.display()
        )
    );
}

#[test]
fn help_has_examples() {
    let _file = crate::support::file_group(module_path!());
    let out = Command::new(BIN)
        .args(["write", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Examples:"), "{text}");
    assert!(text.contains("--strategy srf-pipelined"), "{text}");
    assert!(text.contains("--drop-behind"), "{text}");
    assert!(text.contains("powers of\n1024"), "{text}");
}

#[test]
fn sigint_stops_cleanly_with_a_partial_report() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let child = Command::new(BIN)
        .args(["write", "--dir"])
        .arg(dir.path())
        .args([
            "--size",
            "64M",
            "--chunk",
            "64k",
            "--strategy",
            "srf-pipelined",
        ])
        .args(["--rate", "8MB/s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["status"], "interrupted");
    let bytes = v["bytes"].as_u64().unwrap();
    assert!(bytes > 4_000_000 && bytes < 64 << 20, "{bytes}");
    assert!(entries(dir.path()).is_empty(), "files removed after SIGINT");
}

// ---- the syscalls, seen from outside ----

/// Runs wbscope under `strace -f` and returns the trace lines.
fn strace(dir: &Path, calls: &str, args: &[&str]) -> Vec<String> {
    let log = dir.join("strace.log");
    let work = dir.join("w");
    std::fs::create_dir(&work).unwrap();
    let status = wbscope_programs::STRACE
        .command()
        .args(["-f", "-qq", "-e", &format!("trace={calls}"), "-o"])
        .arg(&log)
        .arg(BIN)
        .args(["write", "--dir"])
        .arg(&work)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("strace must be installed (apt-get install strace)");
    assert!(status.success());
    joined(&std::fs::read_to_string(&log).unwrap())
}

/// strace's lines with each call split by another thread put back
/// together: "PID name(args <unfinished ...>" and, later, "PID <... name
/// resumed>rest" become "PID name(argsrest", where the first stood.
fn joined(log: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // pid -> index in `out` of its unfinished call.
    let mut open = std::collections::HashMap::new();
    for line in log.lines() {
        let pid = line.split_whitespace().next().unwrap_or("").to_string();
        if let Some(head) = line.strip_suffix(" <unfinished ...>") {
            open.insert(pid, out.len());
            out.push(head.to_string());
        } else if let Some((_, rest)) = line.split_once(" resumed>") {
            let at = open.remove(&pid).expect("resumed without unfinished");
            out[at].push_str(rest);
        } else {
            out.push(line.to_string());
        }
    }
    out
}

#[test]
fn strace_lines_split_by_another_thread_are_joined() {
    let _file = crate::support::file_group(module_path!());
    let log = "7 fadvise64(3, 0, 1048576, POSIX_FADV_DONTNEED <unfinished ...>\n\
               8 pwrite64(4, \"\"..., 1048576, 0) = 1048576\n\
               7 <... fadvise64 resumed>) = 0\n";
    assert_eq!(
        joined(log),
        [
            "7 fadvise64(3, 0, 1048576, POSIX_FADV_DONTNEED) = 0",
            "8 pwrite64(4, \"\"..., 1048576, 0) = 1048576",
        ]
    );
    assert_eq!(dontneed_calls(&joined(log)), [(0, 1048576)]);
}

/// (offset, flag) of each sync_file_range call, in order.
fn srf_calls(lines: &[String]) -> Vec<(u64, &'static str)> {
    lines
        .iter()
        .filter(|l| l.contains("sync_file_range("))
        .map(|l| {
            // "1234  sync_file_range(3, 1048576, 1048576, SYNC_FILE_RANGE_WRITE) = 0"
            let args = l.split_once('(').unwrap().1;
            let fields: Vec<&str> = args.split(", ").collect();
            let flag = if fields[3].starts_with("SYNC_FILE_RANGE_WRITE") {
                "WRITE"
            } else if fields[3].starts_with("SYNC_FILE_RANGE_WAIT_BEFORE") {
                "WAIT_BEFORE"
            } else {
                panic!("unexpected flags: {l}")
            };
            assert!(l.trim_end().ends_with("= 0"), "{l}");
            (fields[1].parse().unwrap(), flag)
        })
        .collect()
}

#[test]
fn srf_pipelined_syscalls_follow_the_window() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let lines = strace(
        dir.path(),
        "sync_file_range,fdatasync,fsync,pwrite64",
        &[
            "--size",
            "10M",
            "--chunk",
            "1M",
            "--strategy",
            "srf-pipelined",
            "--window",
            "4",
        ],
    );
    const M: u64 = 1 << 20;
    let mut want = Vec::new();
    for i in 0..10u64 {
        want.push((i * M, "WRITE"));
        if i >= 4 {
            want.push(((i - 4) * M, "WAIT_BEFORE"));
        }
    }
    assert_eq!(srf_calls(&lines), want);
    let pwrites = lines.iter().filter(|l| l.contains("pwrite64(")).count();
    assert_eq!(pwrites, 10);
    let syncs: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("fdatasync(") || l.contains("fsync("))
        .collect();
    assert_eq!(syncs.len(), 1, "{syncs:?}");
    assert!(syncs[0].contains("fdatasync("));
    // The fdatasync comes after the last sync_file_range.
    let last_srf = lines
        .iter()
        .rposition(|l| l.contains("sync_file_range("))
        .unwrap();
    let fdatasync = lines.iter().position(|l| l.contains("fdatasync(")).unwrap();
    assert!(fdatasync > last_srf);
}

/// (offset, len) of each fadvise64(POSIX_FADV_DONTNEED) call, in order.
fn dontneed_calls(lines: &[String]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter(|l| l.contains("fadvise64("))
        .map(|l| {
            // "1234  fadvise64(3, 0, 1048576, POSIX_FADV_DONTNEED) = 0"
            let args = l.split_once('(').unwrap().1;
            let fields: Vec<&str> = args.split(", ").collect();
            let advice = fields[3].split(')').next().unwrap();
            // 4 is POSIX_FADV_DONTNEED on x86_64 (strace prints the name).
            assert!(
                advice == "POSIX_FADV_DONTNEED" || advice == "4",
                "unexpected advice: {l}"
            );
            assert!(l.trim_end().ends_with("= 0"), "{l}");
            (fields[1].parse().unwrap(), fields[2].parse().unwrap())
        })
        .collect()
}

/// The calls of interest as short names, in order: W<off>, WB<off>, D<off>
/// (offsets in MiB), F for fdatasync.
fn call_sequence(lines: &[String]) -> Vec<String> {
    const M: u64 = 1 << 20;
    let field = |l: &str, n: usize| -> u64 {
        let args = l.split_once('(').unwrap().1;
        args.split(", ").nth(n).unwrap().parse().unwrap()
    };
    lines
        .iter()
        .filter_map(|l| {
            if l.contains("pwrite64(") {
                // pwrite64(fd, "...", len, offset): the offset is last.
                let off: u64 = l
                    .rsplit_once(", ")
                    .unwrap()
                    .1
                    .split(')')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                Some(format!("W{}", off / M))
            } else if l.contains("sync_file_range(") {
                let tag = if l.contains("SYNC_FILE_RANGE_WAIT_BEFORE") {
                    "WB"
                } else {
                    "S"
                };
                Some(format!("{tag}{}", field(l, 1) / M))
            } else if l.contains("fadvise64(") {
                Some(format!("D{}", field(l, 1) / M))
            } else if l.contains("fdatasync(") {
                Some("F".into())
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn drop_behind_fadvises_each_chunk_once_it_is_on_disk() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    const M: u64 = 1 << 20;
    let calls = "sync_file_range,fdatasync,fsync,pwrite64,fadvise64";
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let lines = strace(
        &a,
        calls,
        &[
            "--size",
            "10M",
            "--chunk",
            "1M",
            "--strategy",
            "srf-pipelined",
            "--window",
            "2",
            "--drop-behind",
        ],
    );
    // WRITE(i), WAIT_BEFORE(i-2), DONTNEED(i-2); the last two chunks after
    // the final fdatasync.
    let mut want: Vec<String> = Vec::new();
    for i in 0..10u64 {
        want.push(format!("W{i}"));
        want.push(format!("S{i}"));
        if i >= 2 {
            want.push(format!("WB{}", i - 2));
            want.push(format!("D{}", i - 2));
        }
    }
    want.extend(["F", "D8", "D9"].map(String::from));
    assert_eq!(call_sequence(&lines), want);
    let drops = dontneed_calls(&lines);
    assert_eq!(drops, (0..10).map(|i| (i * M, M)).collect::<Vec<_>>());

    // fdatasync-chunk: each chunk dropped right after its fdatasync.
    let b = dir.path().join("b");
    std::fs::create_dir(&b).unwrap();
    let lines = strace(
        &b,
        calls,
        &[
            "--size",
            "3M",
            "--chunk",
            "1M",
            "--strategy",
            "fdatasync-chunk",
            "--drop-behind",
        ],
    );
    assert_eq!(
        call_sequence(&lines),
        ["W0", "F", "D0", "W1", "F", "D1", "W2", "F", "D2"]
    );
    assert_eq!(dontneed_calls(&lines), vec![(0, M), (M, M), (2 * M, M)]);
}

/// (resident pages, pages) of a file, by mincore(2) on a mapping of it
/// (mapping does not fault pages in).
fn resident_pages(path: &Path) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    // SAFETY: a fresh read-only shared mapping of a file we opened; it is
    // only passed to mincore and unmapped below, never dereferenced.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        addr,
        libc::MAP_FAILED,
        "{}",
        std::io::Error::last_os_error()
    );
    let mut vec = vec![0u8; pages];
    // SAFETY: addr..addr+len is our mapping; vec has one byte per page.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(addr, len) };
    assert_eq!(rc, 0, "mincore: {err}");
    (vec.iter().filter(|&&b| b & 1 != 0).count(), pages)
}

#[test]
fn drop_behind_leaves_the_file_out_of_the_page_cache() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let run = |sub: &str, extra: &[&str]| -> (Value, (usize, usize)) {
        let d = dir.path().join(sub);
        std::fs::create_dir(&d).unwrap();
        let mut args = vec![
            "--size",
            "32M",
            "--chunk",
            "1M",
            "--strategy",
            "srf-pipelined",
            "--keep",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = wbscope(&d, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(&out);
        let kept = PathBuf::from(v["kept_files"][0].as_str().unwrap());
        let resident = resident_pages(&kept);
        std::fs::remove_file(&kept).unwrap();
        (v, resident)
    };
    let (v, (resident, pages)) = run("drop", &["--drop-behind"]);
    assert_eq!(v["drop_behind"], true);
    assert_eq!(v["sync_latency_us"]["drop_behind"]["count"], 32);
    assert_eq!(v["sync_latency_us"]["srf_wait_before"]["count"], 28);
    assert!(
        resident * 10 <= pages,
        "{resident} of {pages} pages still cached after --drop-behind"
    );
    // The control: without it, the pages just written stay cached (unless
    // the machine is short of memory), so the check above can see them.
    let (v, (resident, pages)) = run("keep", &[]);
    assert_eq!(v["drop_behind"], false);
    assert!(v["sync_latency_us"].get("drop_behind").is_none());
    assert!(
        resident * 2 > pages,
        "only {resident} of {pages} pages cached without --drop-behind"
    );

    // --verify reads the file back after drop-behind as after anything else.
    let d = dir.path().join("verify");
    std::fs::create_dir(&d).unwrap();
    let out = wbscope(
        &d,
        &[
            "--size",
            "8M",
            "--chunk",
            "1M",
            "--strategy",
            "srf-pipelined",
            "--drop-behind",
            "--verify",
            "--json",
        ],
    );
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["verify"]["ok"], true);
    assert_eq!(v["verify"]["bytes"], 8 << 20);
}

#[test]
fn other_strategies_make_the_calls_they_promise() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let count = |lines: &[String], call: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!(" {call}(")))
            .count()
    };
    let base = ["--size", "4M", "--chunk", "1M", "--strategy"];
    let run = |sub: &str, strategy: &str, extra: &[&str]| {
        let d = dir.path().join(sub);
        std::fs::create_dir(&d).unwrap();
        let mut args: Vec<&str> = base.to_vec();
        args.push(strategy);
        args.extend_from_slice(extra);
        strace(
            &d,
            "pwrite64,fsync,fdatasync,sync_file_range,io_uring_setup,openat",
            &args,
        )
    };
    let l = run("a", "buffered", &[]);
    assert_eq!(
        (
            count(&l, "pwrite64"),
            count(&l, "fsync"),
            count(&l, "fdatasync")
        ),
        (4, 0, 0)
    );
    let l = run("b", "fsync-end", &[]);
    assert_eq!(
        (
            count(&l, "pwrite64"),
            count(&l, "fsync"),
            count(&l, "fdatasync")
        ),
        (4, 1, 0)
    );
    let l = run("c", "fsync-end", &["--datasync"]);
    assert_eq!((count(&l, "fsync"), count(&l, "fdatasync")), (0, 1));
    let l = run("d", "fdatasync-chunk", &[]);
    assert_eq!((count(&l, "pwrite64"), count(&l, "fdatasync")), (4, 4));
    let l = run("e", "direct", &[]);
    assert_eq!((count(&l, "pwrite64"), count(&l, "fdatasync")), (4, 1));
    assert!(
        l.iter()
            .any(|x| x.contains("openat(") && x.contains("O_DIRECT") && x.contains("O_EXCL")),
        "{l:?}"
    );
    let l = run("f", "uring", &[]);
    assert_eq!((count(&l, "pwrite64"), count(&l, "io_uring_setup")), (0, 1));
    assert!(
        l.iter()
            .any(|x| x.contains("openat(") && x.contains("O_CREAT|O_EXCL"))
    );
}

#[test]
fn progress_bar_only_on_a_terminal() {
    let _file = crate::support::file_group(module_path!());
    // script(1) gives the command a pseudo-terminal; stdout and stderr both
    // land in its output.
    let dir = tmp();
    let cmd = format!(
        "{BIN} write --dir {} --size 12M --chunk 256k --strategy buffered --rate 6MB/s",
        dir.path().display()
    );
    let out = wbscope_programs::SCRIPT
        .command()
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // About 2 s at 6 MB/s: at least one progress line, with a bar and a rate.
    assert!(text.contains("\r\x1b[2K["), "{text:?}");
    assert!(text.contains("% ") && text.contains("MB/s"), "{text:?}");
    assert!(
        text.contains("wbscope write: buffered (completed)"),
        "{text:?}"
    );
}

// ---- hostile input ----

/// Address-space cap for runs that must be refused before they allocate:
/// what a broken refusal could take is bounded by it (the writer itself
/// runs in under 10 MB of address space).
const TEST_AS_LIMIT: u64 = 1 << 30;

/// Runs wbscope under `RLIMIT_AS = as_limit`, killed after `timeout`.
fn bounded(cmd: &mut Command, as_limit: u64, timeout: Duration) -> Output {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setrlimit(2) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: as_limit,
                rlim_max: as_limit,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wbscope");
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > timeout {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn write_cmd(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("write").arg("--dir").arg(dir).args(args);
    cmd
}

#[test]
fn runs_that_cannot_fit_in_memory_are_refused_before_any_file() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let cases: &[&[&str]] = &[
        // 10^6 jobs, a thread and a buffer each (was: the OOM killer and
        // 15,033 files left).
        &[
            "--jobs",
            "1000000",
            "--size",
            "4k",
            "--chunk",
            "4k",
            "--strategy",
            "buffered",
        ],
        // Within every per-option limit, but 4 x 256 MiB of buffers does
        // not fit under the 1 GiB address-space limit (was: abort, 134).
        &[
            "--jobs",
            "4",
            "--size",
            "256M",
            "--chunk",
            "256M",
            "--strategy",
            "buffered",
        ],
        // io_uring: a buffer per write in flight, 8 x 64 MiB x 4 jobs.
        &[
            "--jobs",
            "4",
            "--size",
            "64M",
            "--chunk",
            "64M",
            "--qd",
            "8",
            "--strategy",
            "uring",
        ],
        // The plan of 10^13 small files (its size list alone 80 TB).
        &["--small-files", "10000000000000"],
    ];
    for args in cases {
        let out = bounded(
            &mut write_cmd(dir.path(), args),
            TEST_AS_LIMIT,
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("wbscope: error: "), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(entries(dir.path()).is_empty(), "{args:?}: files created");
    }
}

/// Spawns a slow run (`--rate`), signals it after `after`, and returns its
/// output and how long it took to exit after the signal.
fn signalled(
    dir: &Path,
    args: &[&str],
    signal: libc::c_int,
    after: Duration,
) -> (Output, Duration) {
    let child = write_cmd(dir, args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wbscope");
    std::thread::sleep(after);
    let sent = std::time::Instant::now();
    // SAFETY: signalling our own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    // A run that ignores the signal is killed after 10 s, so the test fails
    // instead of waiting out the run (the report fits in the pipe buffer).
    let mut child = child;
    while child.try_wait().expect("wait").is_none() && sent.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = sent.elapsed();
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    (out, took)
}

#[test]
fn a_rate_limited_run_stops_within_a_second_of_sigint() {
    let _file = crate::support::file_group(module_path!());
    // --rate 1MB --chunk 64M: the second chunk is due 64 s after the
    // first; --rate 1 --chunk 4K: 4096 s. Either must stop at once.
    let cases: &[&[&str]] = &[
        &["--size", "128M", "--chunk", "64M", "--rate", "1MB"],
        &["--size", "64k", "--chunk", "4k", "--rate", "1"],
    ];
    for args in cases {
        let dir = tmp();
        let mut args = args.to_vec();
        args.extend(["--strategy", "buffered"]);
        let (out, took) = signalled(dir.path(), &args, libc::SIGINT, Duration::from_millis(700));
        assert_eq!(
            out.status.code(),
            Some(130),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            took < Duration::from_millis(1500),
            "{args:?}: took {took:?}"
        );
        assert_eq!(json(&out)["status"], "interrupted");
        assert!(entries(dir.path()).is_empty(), "{args:?}: files left");
    }
}

#[test]
fn sigterm_and_sighup_stop_like_sigint() {
    let _file = crate::support::file_group(module_path!());
    for (signal, code) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129)] {
        let dir = tmp();
        let (out, _) = signalled(
            dir.path(),
            &[
                "--size",
                "64M",
                "--chunk",
                "64k",
                "--strategy",
                "srf-pipelined",
                "--rate",
                "8MB/s",
            ],
            signal,
            Duration::from_millis(1000),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "signal {signal}: {err}");
        let v = json(&out);
        assert_eq!(v["status"], "interrupted", "signal {signal}");
        let bytes = v["bytes"].as_u64().unwrap();
        assert!(bytes > 0 && bytes < 64 << 20, "signal {signal}: {bytes}");
        assert!(
            entries(dir.path()).is_empty(),
            "signal {signal}: files left"
        );
    }
}

#[test]
fn a_non_utf8_dir_gives_complete_json() {
    let _file = crate::support::file_group(module_path!());
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tmp();
    let odd = dir.path().join(std::ffi::OsStr::from_bytes(b"d\xffir"));
    std::fs::create_dir(&odd).unwrap();
    let out = wbscope(
        &odd,
        &["--size", "1M", "--strategy", "buffered", "--keep", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    let shown = odd.to_string_lossy();
    assert_eq!(v["dirs"], serde_json::json!([shown]));
    let kept = v["kept_files"][0].as_str().unwrap();
    assert!(kept.starts_with(&*shown), "{kept}");
    let files = entries(&odd);
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::remove_file(&files[0]).unwrap();
}

// ---- uncached writes (RWF_DONTCACHE) and io_uring buffered writes ----

/// The flags argument of a pwritev2 line as strace prints it: the name, or
/// the number where strace predates the flag (strace 6.1: `0x80 /* RWF_??? */`).
fn is_dontcache(line: &str) -> bool {
    line.contains("RWF_DONTCACHE") || line.contains(", 0x80 /* RWF_??? */)")
}

#[test]
fn uncached_is_pwritev2_with_rwf_dontcache_then_one_fsync() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let lines = strace(
        dir.path(),
        "pwritev2,pwrite64,write,fsync,fdatasync",
        &["--size", "8M", "--chunk", "1M", "--strategy", "uncached"],
    );
    let data: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("pwritev2(") && l.trim_end().ends_with("= 1048576"))
        .collect();
    assert_eq!(data.len(), 8, "{lines:#?}");
    assert!(data.iter().all(|l| is_dontcache(l)), "{data:#?}");
    // The preflight asks without writing (a NULL iovec: EFAULT) and
    // nothing goes out through plain pwrite(2) or write(2) to a file.
    assert!(!lines.iter().any(|l| l.contains("pwrite64(")), "{lines:#?}");
    let fsync = lines.iter().position(|l| l.contains("fsync(")).unwrap();
    let last_write = lines.iter().rposition(|l| l.contains("pwritev2(")).unwrap();
    assert!(fsync > last_write, "the fsync ends the run");
}

#[test]
fn uring_buffered_goes_through_io_uring_enter() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let calls = "io_uring_setup,io_uring_enter,pwritev2,pwrite64,fsync";
    let args = |extra: &'static str| {
        let mut a = vec![
            "--size",
            "8M",
            "--chunk",
            "1M",
            "--strategy",
            "uring-buffered",
            "--qd",
            "4",
        ];
        a.extend(Some(extra).filter(|e| !e.is_empty()));
        a
    };
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let lines = strace(&a, calls, &args(""));
    assert!(lines.iter().any(|l| l.contains("io_uring_setup(")));
    assert!(lines.iter().any(|l| l.contains("io_uring_enter(")));
    // The data goes through the ring, not through a write call.
    assert!(!lines.iter().any(|l| l.contains("pwrite")), "{lines:#?}");
    // --uncached: the same, after the preflight's flag check.
    let b = dir.path().join("b");
    std::fs::create_dir(&b).unwrap();
    let lines = strace(&b, calls, &args("--uncached"));
    assert!(lines.iter().any(|l| l.contains("io_uring_enter(")));
    let probes: Vec<&String> = lines.iter().filter(|l| l.contains("pwritev2(")).collect();
    assert!(
        probes.len() == 1 && probes[0].contains("EFAULT") && is_dontcache(probes[0]),
        "{probes:#?}"
    );
}

#[test]
fn uncached_bad_combinations_and_filesystems_are_refused_with_exit_2() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let shm = tempfile::Builder::new()
        .prefix("wbscope-cli-")
        .tempdir_in("/dev/shm")
        .expect("temp dir on tmpfs");
    let base = ["--size", "4M", "--chunk", "1M"];
    for (d, extra, needle) in [
        (
            dir.path(),
            &["--strategy", "buffered", "--uncached"][..],
            "--uncached needs --strategy uring-buffered",
        ),
        (
            dir.path(),
            &["--strategy", "uncached", "--uncached"][..],
            "--uncached needs",
        ),
        (
            dir.path(),
            &["--strategy", "uring-buffered", "--direct-io"][..],
            "--direct-io is refused",
        ),
        (
            dir.path(),
            &["--strategy", "uncached", "--drop-behind"][..],
            "--drop-behind needs",
        ),
        // tmpfs has no RWF_DONTCACHE: refused, never written without it.
        (shm.path(), &["--strategy", "uncached"][..], "RWF_DONTCACHE"),
        (
            shm.path(),
            &["--strategy", "uring-buffered", "--uncached"][..],
            "RWF_DONTCACHE",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = wbscope(d, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("wbscope: error: ") && stderr.contains(needle),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(entries(d).is_empty(), "{args:?}: nothing left");
    }
}

#[test]
fn uncached_leaves_the_file_out_of_the_page_cache() {
    let _file = crate::support::file_group(module_path!());
    let dir = tmp();
    let out = wbscope(
        dir.path(),
        &[
            "--size",
            "64M",
            "--chunk",
            "1M",
            "--strategy",
            "uncached",
            "--keep",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["rwf_dontcache"], true);
    let kept = PathBuf::from(v["kept_files"][0].as_str().unwrap());
    // mincore(2), independent of the report's cachestat(2) figures.
    let (resident, pages) = resident_pages(&kept);
    std::fs::remove_file(&kept).unwrap();
    assert_eq!(pages, 64 * 256);
    // A few 1 MiB chunks (256 pages each) at most.
    assert!(
        resident <= 4 * 256,
        "{resident} of {pages} pages still cached"
    );
    assert!(v["cache_end_kib"].as_u64().unwrap() <= 4 * 1024, "{v}");
    for k in [
        "pgscan_kswapd",
        "pgsteal_kswapd",
        "pgscan_direct",
        "pgsteal_direct",
        "allocstall",
    ] {
        assert!(v["reclaim"][k].is_u64(), "{k}: {v}");
    }
}
