//! `wbscope record` and `replay` against the running kernel (root).
mod support;

use std::{
    fs::File,
    io::Write,
    os::unix::fs::MetadataExt,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;
use support::{LoopFs, Tracing, dev_of, wbscope};

fn replay(path: &std::path::Path, flag: &str) -> (Vec<Value>, String, Option<i32>) {
    let out = wbscope()
        .arg("replay")
        .arg(path)
        .arg(flag)
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        lines,
        String::from_utf8(out.stderr).unwrap(),
        out.status.code(),
    )
}

/// Starts `wbscope record` and waits until its probes are live.
fn start_record(args: &[&str]) -> std::process::Child {
    let mut child = wbscope()
        .arg("record")
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("record did not start");
        if line.contains("tracing;") {
            break;
        }
    }
    child
}

fn write_and_fsync(path: &std::path::Path, mib: usize) -> u64 {
    let mut f = File::create_new(path).unwrap();
    f.write_all(&vec![5u8; mib << 20]).unwrap();
    f.sync_all().unwrap();
    f.metadata().unwrap().ino()
}

/// Record and trace the same run on one device: replay gives the same
/// calls and pages as the live trace, and the file's 16384 pages.
#[test]
fn recorded_totals_equal_the_live_trace() {
    let fs = LoopFs::new("ext4", 256);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("run.rec");
    let device = fs.mountpoint.to_string_lossy().to_string();
    let trace = Tracing::start(&["--json", "--events", "--device", &device]);
    let mut record = start_record(&["-o", rec.to_str().unwrap(), "--device", &device]);
    let ino = write_and_fsync(&fs.path("data"), 64);
    let dev = dev_of(&fs.mountpoint);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain syscall on our child.
    unsafe { libc::kill(record.id() as i32, libc::SIGINT) };
    assert!(record.wait().unwrap().success());
    let live = trace.stop(libc::SIGINT);

    let (replayed, stderr, code) = replay(&rec, "--json");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let summary = replayed.last().unwrap();
    assert_eq!(summary["type"], "summary");
    let pages = |lines: &[Value]| -> i64 {
        lines
            .iter()
            .filter(|l| l["type"] == "call" && l["dev"] == dev.as_str() && l["ino"] == ino)
            .map(|l| l["pages_written"].as_i64().unwrap())
            .sum()
    };
    assert_eq!(pages(&replayed), 16384);
    assert_eq!(pages(&live), 16384);
    let live_summary = live.last().unwrap();
    assert_eq!(summary["calls"], live_summary["calls"]);
    assert_eq!(summary["pages_written"], live_summary["pages_written"]);
    let calls = replayed.iter().filter(|l| l["type"] == "call").count() as u64;
    assert_eq!(summary["calls"], calls);
    assert!(replayed.iter().any(|l| l["type"] == "interval"));

    let (only, _, _) = replay(&rec, "--summary");
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["calls"], summary["calls"]);
}

/// Cut anywhere after the header, a recording replays every whole frame
/// and says where it was cut; `kill -9` leaves a readable file.
#[test]
fn cut_recordings_replay_up_to_the_cut() {
    let fs = LoopFs::new("ext4", 128);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("run.rec");
    let mut record = start_record(&["-o", rec.to_str().unwrap(), "--interval", "0.2"]);
    write_and_fsync(&fs.path("a"), 8);
    std::thread::sleep(Duration::from_millis(700));
    record.kill().unwrap(); // SIGKILL: no summary frame
    record.wait().unwrap();

    let (lines, stderr, code) = replay(&rec, "--json");
    assert_eq!(code, Some(0), "{stderr}");
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["truncated"], true, "{summary}");
    let whole = lines.len();
    assert!(whole > 2, "{lines:?}");

    let bytes = std::fs::read(&rec).unwrap();
    let cut_path = dir.path().join("cut.rec");
    // Deterministic spread of cut points over the frames.
    let mut last_count = 0;
    for i in 1..=40 {
        let cut = bytes.len() * i / 40;
        std::fs::write(&cut_path, &bytes[..cut]).unwrap();
        let (lines, stderr, code) = replay(&cut_path, "--json");
        if code == Some(2) {
            // Only a cut inside the header may be refused, with one line.
            assert!(stderr.contains("header is cut short"), "{stderr}");
            assert_eq!(stderr.lines().count(), 1);
            continue;
        }
        assert_eq!(code, Some(0), "{stderr}");
        // More of the file never yields fewer frames.
        assert!(
            lines.len() >= last_count,
            "cut {cut}: {} < {last_count}",
            lines.len()
        );
        last_count = lines.len();
        if cut < bytes.len() {
            assert!(lines.len() <= whole);
        }
    }
    // A flipped byte in the middle: reported and skipped, the rest read.
    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x5a;
    std::fs::write(&cut_path, &damaged).unwrap();
    let (lines, stderr, code) = replay(&cut_path, "--json");
    assert_eq!(code, Some(0));
    assert!(stderr.contains("corrupt frame"), "{stderr}");
    assert!(lines.len() >= whole - 2, "{} of {whole}", lines.len());
}

#[test]
fn record_refuses_to_overwrite_and_replay_refuses_foreign_files() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let existing = dir.path().join("precious");
    std::fs::write(&existing, b"keep me").unwrap();
    let out = wbscope()
        .args(["record", "-o"])
        .arg(&existing)
        .args(["--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    let out = wbscope().arg("replay").arg(&existing).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("not a wbscope recording"), "{stderr}");
    let out = wbscope()
        .args(["record", "-o", "/no/such/dir/x.rec", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The number of BPF programs loaded on the host (bpftool).
fn loaded_programs() -> usize {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
    v.as_array().map_or(0, Vec::len)
}

/// After kill -9 nothing of wbscope stays attached.
#[test]
fn kill_9_leaves_nothing_attached() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("killed.rec");
    let before = loaded_programs();
    let mut child = start_record(&["-o", rec.to_str().unwrap()]);
    let during = loaded_programs();
    assert!(
        during > before,
        "{during} programs while tracing, {before} before"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let mut after = loaded_programs();
    for _ in 0..50 {
        if after <= before {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        after = loaded_programs();
    }
    assert!(
        after <= before,
        "{after} programs after kill -9, {before} before"
    );
}
