//! `wbscope trace` against the running kernel (root): known workloads on
//! filesystems made for the test, checked against what they must produce.

use std::{
    fs::File,
    io::Write,
    os::unix::fs::MetadataExt,
    time::{Duration, Instant},
};

use crate::support::{LoopFs, Tracing, dev_of, wbscope, wbscope_with_caps};

const PAGE: u64 = 4096;

/// Writes `mib` MiB of non-zero data in 1 MiB chunks and fsyncs it.
fn write_and_fsync(path: &std::path::Path, mib: u64) -> u64 {
    let mut f = File::create_new(path).expect("create");
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 + 1).collect();
    for _ in 0..mib {
        f.write_all(&chunk).expect("write");
    }
    f.sync_all().expect("fsync");
    f.metadata().expect("stat").ino()
}

fn calls_for<'a>(
    lines: &'a [serde_json::Value],
    dev: &str,
    ino: u64,
) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["type"] == "call" && l["dev"] == dev && l["ino"] == ino)
        .collect()
}

fn check_summary(lines: &[serde_json::Value]) -> &serde_json::Value {
    let summary = lines.last().expect("no output");
    assert_eq!(summary["type"], "summary", "last line: {summary}");
    let calls = lines.iter().filter(|l| l["type"] == "call").count() as u64;
    assert_eq!(summary["calls"], calls);
    let pages: i64 = lines
        .iter()
        .filter(|l| l["type"] == "call")
        .map(|l| l["pages_written"].as_i64().unwrap())
        .sum();
    assert_eq!(summary["pages_written"], pages);
    assert_eq!(summary["lost_records"], 0, "{summary}");
    // An end without its start is a call the trace did not see begin (in
    // flight when it attached): its record says so. Every other call
    // matched.
    let unseen = lines
        .iter()
        .filter(|l| l["type"] == "call" && l["start_seen"] == false)
        .count() as u64;
    let unmatched = summary["unmatched_results"].as_u64().unwrap();
    assert!(
        unmatched <= unseen,
        "{unmatched} unmatched, {unseen} calls without a start: {summary}"
    );
    summary
}

/// A lone call reaches the output while the trace runs, not only when it
/// stops: each CPU keeps ext4's calls until it holds eight
/// (writeback-ebpf writepages.rs, `CALL_BATCHES`), and before each drain
/// userspace has every CPU that keeps some send them (tracer
/// cpu_batch.rs). The `--device` filter keeps every other call out of
/// the batches, so only that flush can bring this one out.
#[test]
fn a_lone_call_is_reported_while_the_trace_runs() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 64);
    let mountpoint = fs.mountpoint.to_string_lossy().into_owned();
    let mut trace = Tracing::start(&["--json", "--events", "--device", &mountpoint]);
    let out = trace.stdout_lines();
    let path = fs.path("one");
    let ino = write_and_fsync(&path, 1);
    let dev = dev_of(&path);
    let synced = Instant::now();
    let mut seen = Vec::new();
    let line = loop {
        let left = Duration::from_secs(10).saturating_sub(synced.elapsed());
        let Ok(text) = out.recv_timeout(left) else {
            panic!("no call for ino {ino} 10 s after its fsync; lines: {seen:#?}");
        };
        let line: serde_json::Value = serde_json::from_str(&text).expect("JSON line");
        if line["type"] == "call" && line["dev"] == dev.as_str() && line["ino"] == ino {
            break line;
        }
        seen.push(line);
    };
    let after = synced.elapsed();
    assert_eq!(line["pages_written"], 256, "{line}");
    // A drain every 100 ms, and a line each second at most in between:
    // well within 3 s here.
    assert!(after < Duration::from_secs(3), "{after:?} after its fsync");
    trace.stop(libc::SIGINT);
}

/// 64 MiB written and fsynced: that inode's records add up to exactly
/// 16384 pages, and no call writes more than it was asked to.
#[test]
fn fsync_of_64_mib_is_16384_pages() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 256);
    let trace = Tracing::start(&["--json", "--events"]);
    let path = fs.path("data");
    let ino = write_and_fsync(&path, 64);
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);

    check_summary(&lines);
    let calls = calls_for(&lines, &dev, ino);
    assert!(!calls.is_empty(), "no call for {dev} ino {ino}");
    let written: i64 = calls
        .iter()
        .map(|c| c["pages_written"].as_i64().unwrap())
        .sum();
    assert_eq!(written as u64, (64 << 20) / PAGE, "calls: {calls:#?}");
    for c in &lines {
        if c["type"] == "call" {
            let asked = c["nr_to_write"].as_i64().unwrap();
            let done = c["pages_written"].as_i64().unwrap();
            assert!(asked >= done, "wrote more than asked: {c}");
            for key in [
                "pid",
                "comm",
                "pages_skipped",
                "sync_mode",
                "ret",
                "duration_ns",
            ] {
                assert!(c.get(key).is_some(), "{key} missing in {c}");
            }
        }
    }
    // The fsync itself is a WB_SYNC_ALL call from this process.
    let me = std::process::id();
    assert!(
        calls
            .iter()
            .any(|c| c["sync_mode"] == "all" && c["pid"] == me),
        "no sync call from pid {me}: {calls:#?}"
    );
}

/// `--duration` ends the trace by itself, with the summary as last line;
/// SIGTERM does the same.
#[test]
fn duration_and_sigterm_both_end_with_a_summary() {
    let _file = crate::support::file_group(module_path!());
    let started = Instant::now();
    let lines = Tracing::start(&["--json", "--events", "--duration", "0.5"]).finish();
    assert!(started.elapsed() < Duration::from_secs(30));
    let summary = check_summary(&lines);
    assert!(summary["duration_s"].as_f64().unwrap() >= 0.5);
    assert_eq!(summary["probes"][0]["state"], "attached");

    let lines = Tracing::start(&["--json", "--events"]).stop(libc::SIGTERM);
    check_summary(&lines);
}

#[test]
fn bad_duration_is_a_one_line_usage_error() {
    let _file = crate::support::file_group(module_path!());
    for bad in ["0", "-3", "soon", "nan"] {
        let out = wbscope()
            .args(["trace", "--json", "--duration", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--duration {bad}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("positive number"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

/// Without root and without capabilities: one line naming what is
/// missing, exit code 1.
#[test]
fn unprivileged_run_names_the_missing_capabilities() {
    let _file = crate::support::file_group(module_path!());
    let out = wbscope_programs::SETPRIV
        .command()
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_wbscope"))
        .args(["trace", "--json", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// The BTF tracepoint path (struct members from BTF), the raw tracepoint
/// path (the same members read by `bpf_probe_read_kernel`: the path of
/// kernels whose ext4 is a module) and the classic tracepoint path
/// (fields from tracefs) see the same call the same way.
#[test]
fn tp_btf_and_classic_tracepoint_paths_agree() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 256);
    // --enable extents: the extents are compared too.
    let btf = Tracing::start(&["--json", "--events", "--enable", "extents"]);
    let raw = Tracing::start(&[
        "--json",
        "--events",
        "--enable",
        "extents",
        "--disable",
        "tp_btf",
    ]);
    let classic = Tracing::start(&[
        "--json",
        "--events",
        "--enable",
        "extents",
        "--disable",
        "tp_btf,raw_tp",
    ]);
    let path = fs.path("data");
    let ino = write_and_fsync(&path, 16);
    let dev = dev_of(&path);
    let (btf, raw, classic) = (
        btf.stop(libc::SIGINT),
        raw.stop(libc::SIGINT),
        classic.stop(libc::SIGINT),
    );

    // The whole plan of the call's concept in the message: what was tried
    // and why it was refused.
    let hook = |lines: &[serde_json::Value]| -> (String, String) {
        let plan = &lines.last().unwrap()["probes"][0];
        (plan["hook"].as_str().unwrap().to_string(), plan.to_string())
    };
    let (btf_hook, btf_plan) = hook(&btf);
    assert!(btf_hook.starts_with("tp_btf "), "{btf_plan}");
    let (raw_hook, raw_plan) = hook(&raw);
    assert!(raw_hook.starts_with("raw_tp "), "{raw_plan}");
    let (classic_hook, classic_plan) = hook(&classic);
    assert!(classic_hook.starts_with("tracepoint "), "{classic_plan}");

    let sync_call = |lines: &[serde_json::Value]| -> serde_json::Value {
        let mine = calls_for(lines, &dev, ino);
        let pages: i64 = mine
            .iter()
            .map(|c| c["pages_written"].as_i64().unwrap())
            .sum();
        assert_eq!(pages, 4096, "{mine:#?}");
        (*mine
            .iter()
            .find(|c| c["sync_mode"] == "all")
            .expect("the fsync call"))
        .clone()
    };
    let (a, r, b) = (sync_call(&btf), sync_call(&raw), sync_call(&classic));
    for key in [
        "pid",
        "nr_to_write",
        "pages_written",
        "range_start",
        "range_end",
        "writeback_index_before",
        "writeback_index_after",
        "for_kupdate",
        "range_cyclic",
        "cause",
        "ret",
        "extents",
        "extent_blocks",
    ] {
        assert_eq!(a[key], b[key], "{key}: tp_btf {a} vs tracepoint {b}");
        assert_eq!(a[key], r[key], "{key}: tp_btf {a} vs raw_tp {r}");
    }
    assert!(a["extents"].as_u64() > Some(0), "{a}");
}

/// Not root, only CAP_BPF + CAP_PERFMON: the one thing still missing
/// (reading tracefs) is named, exit code 1.
#[test]
fn bpf_and_perfmon_alone_name_the_missing_tracefs_capability() {
    let _file = crate::support::file_group(module_path!());
    let out = wbscope_with_caps("+bpf,+perfmon")
        .args(["trace", "--json", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("CAP_DAC_READ_SEARCH"), "{stderr}");
}

/// Not root, with CAP_BPF + CAP_PERFMON + CAP_DAC_READ_SEARCH: the trace
/// works and counts exactly.
#[test]
fn capability_reduced_trace_counts_exactly() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 256);
    let trace = Tracing::start_with(
        wbscope_with_caps("+bpf,+perfmon,+dac_read_search"),
        &["--json", "--events"],
    );
    let path = fs.path("data");
    let ino = write_and_fsync(&path, 16);
    let dev = dev_of(&path);
    let lines = trace.stop(libc::SIGINT);
    let written: i64 = calls_for(&lines, &dev, ino)
        .iter()
        .map(|c| c["pages_written"].as_i64().unwrap())
        .sum();
    assert_eq!(written, 4096);
    assert_eq!(lines.last().unwrap()["probes"][0]["state"], "attached");
}

/// A thread that says its id, then for each path it is sent writes
/// 64 MiB there, meets the other worker at `barrier`, fsyncs and answers
/// with the file's inode number; an empty path ends it.
struct Worker {
    tid: i32,
    paths: std::sync::mpsc::Sender<std::path::PathBuf>,
    inodes: std::sync::mpsc::Receiver<u64>,
    handle: std::thread::JoinHandle<()>,
}

impl Worker {
    fn spawn(barrier: std::sync::Arc<std::sync::Barrier>) -> Worker {
        use std::sync::mpsc::channel;
        let (paths, path_rx) = channel::<std::path::PathBuf>();
        let (ino_tx, inodes) = channel();
        let (tid_tx, tid_rx) = channel();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).expect("tid");
            for path in path_rx {
                if path.as_os_str().is_empty() {
                    return;
                }
                let mut f = File::create_new(&path).expect("create");
                let chunk = vec![0x5a_u8; 1 << 20];
                for _ in 0..64 {
                    f.write_all(&chunk).expect("write");
                }
                barrier.wait();
                f.sync_all().expect("fsync");
                ino_tx.send(f.metadata().expect("stat").ino()).expect("ino");
            }
        });
        let tid = tid_rx.recv().expect("the worker's tid");
        Worker {
            tid,
            paths,
            inodes,
            handle,
        }
    }

    fn end(self) {
        let _ = self.paths.send(std::path::PathBuf::new());
        self.handle.join().expect("worker");
    }
}

/// Two threads whose ids share a call slot (found by making threads
/// until one's id agrees with the first's in the low 12 bits) write back
/// 64 MiB each at the same moment, three times. While one's call holds
/// the slot the other's start finds it busy and keeps its call in task
/// storage (`slot_busy`); each file's calls still add up to its 16384
/// pages, and each thread's own call is there with its thread id.
#[test]
fn two_threads_sharing_a_call_slot_keep_their_calls_apart() {
    let _file = crate::support::file_group(module_path!());
    // 384 MiB written in all: ext4 starts writeback of its own (a
    // flusher's, `writeback_inodes_sb`) when delayed allocation nears the
    // free space (ext4_nonda_switch() in fs/ext4/inode.c), which a 512 MiB
    // filesystem did, taking files' pages from their threads' fsyncs.
    let fs = LoopFs::new("ext4", 1024);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let a = Worker::spawn(barrier.clone());
    let mut b = None;
    // Thread ids are handed out in turn up to pid_max (at least 32768):
    // one in 4096 of the next ids shares the slot, the host's own new
    // threads taking some of them.
    let slots = writeback_common::CALL_SLOTS as i32;
    for _ in 0..5 * slots {
        let w = Worker::spawn(barrier.clone());
        if w.tid % slots == a.tid % slots && w.tid != a.tid {
            b = Some(w);
            break;
        }
        w.end();
    }
    let b = b.expect("no thread id sharing the first worker's call slot");
    let trace = Tracing::start(&["--json", "--events"]);
    let mut files = Vec::new();
    for round in 0..3 {
        for (w, name) in [(&a, "a"), (&b, "b")] {
            w.paths
                .send(fs.path(&format!("{name}{round}")))
                .expect("send");
        }
        for w in [&a, &b] {
            files.push((w.tid, w.inodes.recv().expect("ino")));
        }
    }
    let dev = dev_of(&fs.path("a0"));
    let lines = trace.stop(libc::SIGINT);
    let (a_tid, b_tid) = (a.tid, b.tid);
    a.end();
    b.end();

    let summary = check_summary(&lines);
    for (tid, ino) in files {
        let calls = calls_for(&lines, &dev, ino);
        let written: i64 = calls
            .iter()
            .map(|c| c["pages_written"].as_i64().unwrap())
            .sum();
        assert_eq!(
            written as u64,
            (64 << 20) / PAGE,
            "thread {tid}, ino {ino}: {calls:#?}"
        );
        assert!(
            calls.iter().any(|c| c["tid"] == tid),
            "no call of thread {tid} on ino {ino}: {calls:#?}"
        );
    }
    assert!(
        summary["slot_busy"].as_u64().unwrap() >= 1,
        "threads {a_tid} and {b_tid} never held the slot at once: {summary}"
    );
}
