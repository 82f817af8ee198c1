//! `wbscope record` and `replay` against the running kernel (root).

use std::{fs::File, io::Write, os::unix::fs::MetadataExt, process::Stdio, time::Duration};

use crate::support::{LoopFs, Tracing, dev_of, start_record, wbscope};
use serde_json::Value;

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
    let _file = crate::support::file_group(module_path!());
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

/// An xfs fsync recorded and traced at once: its calls (put together
/// from per-folio events, writeback-ebpf/src/generic.rs) replay with the
/// filesystem, boundary, folios and folio sizes the live trace printed.
#[test]
fn a_generic_call_replays_as_traced() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("xfs", 512);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("xfs.rec");
    let device = fs.mountpoint.to_string_lossy().to_string();
    let trace = Tracing::start(&["--json", "--events", "--device", &device]);
    let mut record = start_record(&["-o", rec.to_str().unwrap(), "--device", &device]);
    let ino = write_and_fsync(&fs.path("data"), 64);
    let dev = dev_of(&fs.mountpoint);
    // Past IDLE_CALL (1 s), so both tracers close fsync's call as `idle`
    // rather than one of them at its end (`drain`).
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: plain syscall on our child.
    unsafe { libc::kill(record.id() as i32, libc::SIGINT) };
    assert!(record.wait().unwrap().success());
    let live = trace.stop(libc::SIGINT);

    let (replayed, stderr, code) = replay(&rec, "--json");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    // Each tracer stamps its own times; the rest is the kernel's.
    let calls = |lines: &[Value]| -> Vec<Value> {
        let mut calls: Vec<Value> = lines
            .iter()
            .filter(|l| l["type"] == "call" && l["dev"] == dev.as_str() && l["ino"] == ino)
            .map(|l| {
                let mut l = l.clone();
                for key in ["time_ns", "duration_ns", "dirtiers", "owner_cgroup_id"] {
                    l.as_object_mut().unwrap().remove(key);
                }
                l
            })
            .collect();
        calls.sort_by_key(|c| c.to_string());
        calls
    };
    let (live, replayed) = (calls(&live), calls(&replayed));
    assert_eq!(live, replayed);
    let pages: i64 = replayed
        .iter()
        .map(|c| c["pages_written"].as_i64().unwrap())
        .sum();
    assert_eq!(pages, 64 << 20 >> 12, "{replayed:?}");
    for c in &replayed {
        assert_eq!(c["fs"], "xfs", "{c}");
        assert_ne!(c["boundary"], "hook", "{c}");
        assert!(c["folios_written"].as_u64().unwrap() > 0, "{c}");
        let folios: u64 = c["folio_pages"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(Some(folios), c["folios_written"].as_u64(), "{c}");
    }
}

/// Cut anywhere after the header, a recording replays every whole frame
/// and says where it was cut; `kill -9` leaves a readable file.
#[test]
fn cut_recordings_replay_up_to_the_cut() {
    let _file = crate::support::file_group(module_path!());
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
    // A flipped byte in the middle of the frames: reported and skipped,
    // the rest read. (The middle of the file can fall in the header, whose
    // probe plan holds every rejection's reason: a short recording's
    // header is most of it.) Frames start after "WBSCOPE\0", the version,
    // the header's length, the header and its crc (recording/mod.rs).
    let mut damaged = bytes.clone();
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let frames = 16 + header_len + 4;
    assert!(frames < bytes.len(), "no frames after the header");
    let mid = frames + (damaged.len() - frames) / 2;
    damaged[mid] ^= 0x5a;
    std::fs::write(&cut_path, &damaged).unwrap();
    let (lines, stderr, code) = replay(&cut_path, "--json");
    assert_eq!(code, Some(0));
    assert!(stderr.contains("corrupt frame"), "{stderr}");
    assert!(lines.len() >= whole - 2, "{} of {whole}", lines.len());
}

#[test]
fn record_refuses_to_overwrite_and_replay_refuses_foreign_files() {
    let _file = crate::support::file_group(module_path!());
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

/// The ids of the BPF programs loaded on the host (bpftool).
fn loaded_programs() -> std::collections::HashSet<u64> {
    let out = wbscope_programs::BPFTOOL
        .command()
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_u64())
        .collect()
}

/// Kills the child when dropped: a failed assertion must not leave a
/// tracer running (it would also hold the test's output pipe open, and
/// `cargo xtask test` with it).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// After kill -9 nothing of wbscope stays attached: every program that
/// appeared while it traced is gone. Ids, not counts: other tracers on
/// the host load and unload programs meanwhile.
#[test]
fn kill_9_leaves_nothing_attached() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("killed.rec");
    let before = loaded_programs();
    let mut child = KillOnDrop(start_record(&["-o", rec.to_str().unwrap()]));
    let ours: Vec<u64> = loaded_programs().difference(&before).copied().collect();
    assert!(!ours.is_empty(), "no program appeared while tracing");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let mut left = ours.clone();
    for _ in 0..50 {
        let now = loaded_programs();
        left.retain(|id| now.contains(id));
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        left.is_empty(),
        "programs {left:?} of {} still loaded after kill -9",
        ours.len()
    );
}

// Hostile and odd inputs to `replay`. These need no kernel.

fn test_header(host: &str, kernel: &str) -> wbscope_recording::Header {
    wbscope_recording::Header {
        format_version: wbscope_recording::FORMAT_VERSION,
        wbscope_version: "test".into(),
        host: host.into(),
        kernel: kernel.into(),
        start_unix_ns: 1,
        start_monotonic_ns: 2,
        probe_plan: serde_json::json!({}),
        field_offsets: serde_json::json!({}),
        filter: serde_json::json!({}),
        segment: None,
    }
}

/// Call `i` of process `comm`, on a filesystem named `comm` too (both
/// strings a recording chose).
fn test_call(i: u64, comm: &str) -> wbscope_model::CallRecord {
    wbscope_model::CallRecord {
        ino: 1000 + i,
        tgid: 42,
        comm: comm.into(),
        fs: comm.into(),
        nr_to_write: 1024,
        pages_written: 1,
        ..wbscope_model::CallRecord::default()
    }
}

/// A recording of `calls` calls named `comm`, with a summary unless cut.
fn write_recording(
    path: &std::path::Path,
    header: &wbscope_recording::Header,
    calls: u64,
    comm: &str,
) {
    use wbscope_recording::{FrameKind, writer::RecordingWriter};
    let out = std::io::BufWriter::new(File::create_new(path).unwrap());
    let mut w = RecordingWriter::new(out, header).unwrap();
    for i in 0..calls {
        w.call(&test_call(i, comm)).unwrap();
    }
    w.json(
        FrameKind::Summary,
        &serde_json::json!({"type": "summary", "calls": calls}),
    )
    .unwrap();
    w.into_inner().into_inner().unwrap().sync_all().unwrap();
}

/// Waits for a child at most `limit`, killing it if it takes longer.
fn wait_bounded(
    mut child: std::process::Child,
    limit: Duration,
) -> (std::process::ExitStatus, String, String) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_string(&mut out).unwrap();
    }
    if let Some(mut s) = child.stderr.take() {
        s.read_to_string(&mut err).unwrap();
    }
    (status, out, err)
}

/// A directory, a device and an empty file are named as what they are,
/// as usage errors (before: "No such device (os error 19)", exit 1).
#[test]
fn replay_of_a_directory_a_device_or_an_empty_file_is_a_usage_error() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.rec");
    File::create_new(&empty).unwrap();
    for (path, says) in [
        (dir.path(), "is a directory"),
        (std::path::Path::new("/dev/null"), "not a regular file"),
        (empty.as_path(), "is empty"),
    ] {
        for flag in ["--text", "--json", "--summary"] {
            let out = wbscope()
                .arg("replay")
                .arg(path)
                .arg(flag)
                .output()
                .unwrap();
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert_eq!(out.status.code(), Some(2), "{path:?} {flag}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(stderr.starts_with("wbscope: error: "), "{stderr}");
            assert!(stderr.contains(says), "{path:?}: {stderr}");
            assert!(out.stdout.is_empty());
        }
    }
}

/// A recording that shrinks while it is replayed is a cut, reported as
/// such (before: the file was mapped and replay died of SIGBUS).
#[test]
fn a_recording_shrinking_under_replay_is_a_cut_not_a_signal() {
    let _file = crate::support::file_group(module_path!());
    use std::io::{BufRead, BufReader, Read};
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("shrinking.rec");
    write_recording(&rec, &test_header("h", "6.18"), 120_000, "dd");
    let bytes = std::fs::read(&rec).unwrap();
    assert!(bytes.len() > 4 << 20, "{}", bytes.len());
    // Inside the first frame that ends past the middle.
    let mut at = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize + 4;
    while at < bytes.len() / 2 {
        at += 12 + u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    let cut = at + 5;
    let mut child = wbscope()
        .arg("replay")
        .arg(&rec)
        .arg("--text")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the first line is out, replay has opened the file; it then
    // stops when the pipe is full (64 KiB, pipe(7)), far before the cut.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("recording of h"), "{first:?}");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&rec)
        .unwrap()
        .set_len(cut as u64)
        .unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let (status, _, stderr) = wait_bounded(child, Duration::from_secs(120));
    assert_eq!(status.code(), Some(0), "{status:?}: {stderr}");
    assert_eq!(
        stderr.trim(),
        format!("wbscope: replay: recording cut short at byte {at} (last frame incomplete)")
    );
    let rows = rest.lines().filter(|l| l.contains(" dd ")).count();
    assert!(rows > 1000 && rows < 120_000, "{rows} rows");
}

/// A file of fake frame headers replays in time linear in its size
/// (before: each sync word re-checksummed up to 1 MiB, 34 s for 16 MiB).
/// The work bound itself is asserted by the reader's unit tests.
#[test]
fn fake_frame_headers_replay_promptly() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.rec");
    write_recording(&real, &test_header("h", "6.18"), 3, "dd");
    let bytes = std::fs::read(&real).unwrap();
    let header_end = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize + 4;
    let mut crafted = bytes[..header_end].to_vec();
    // Each 4 bytes a sync word whose header claims 112 KiB of payload.
    crafted.extend_from_slice(&[0xF7, 0xB5, 0x01, 0x00].repeat(1 << 20));
    crafted.extend_from_slice(&bytes[header_end..]);
    let path = dir.path().join("fake.rec");
    std::fs::write(&path, &crafted).unwrap();
    let child = wbscope()
        .arg("replay")
        .arg(&path)
        .arg("--summary")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stdout, stderr) = wait_bounded(child, Duration::from_secs(120));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "wbscope: replay: corrupt frame at byte {header_end}: skipped {} bytes",
            4 << 20
        )
    );
    let summary: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["calls"], 3, "{summary}");
}

/// Nothing a recording holds reaches the terminal raw: escape sequences
/// in its header and process names print escaped in text, and as JSON
/// escapes (which decode to the same strings) in JSON.
#[test]
fn escape_sequences_in_a_recording_print_escaped() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("hostile.rec");
    let host = "\u{1b}]0;owned\u{7}\u{1b}[2J";
    let comm = "\u{1b}[31mred\u{9b}2J\u{7f}";
    write_recording(&rec, &test_header(host, "6.18\u{1b}c"), 2, comm);
    let raw = |s: &str| s.chars().any(|c| c.is_control() && c != '\n');

    let out = wbscope()
        .arg("replay")
        .arg(&rec)
        .arg("--text")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!raw(&text), "{text:?}");
    assert!(
        text.starts_with("recording of \\u{1b}]0;owned\\u{7}\\u{1b}[2J (6.18\\u{1b}c)"),
        "{text}"
    );
    assert!(text.contains("\\u{1b}[31mred\\u{9b}2J\\u{7f}"), "{text}");

    let out = wbscope()
        .arg("replay")
        .arg(&rec)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(!raw(&json), "{json:?}");
    let lines: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&Value> = lines.iter().filter(|l| l["type"] == "call").collect();
    assert_eq!(calls.len(), 2);
    assert!(
        calls.iter().all(|c| c["comm"] == comm && c["fs"] == comm),
        "{json}"
    );
}
