//! `wbscope record --store` against the running kernel (root): the size
//! bound sampled while a small-files fsync load runs, `--since`, free
//! space on a small filesystem, `kill -9`, and `record -o - | replay -`.

use std::{
    fs::{self, File},
    io::{BufRead, BufReader, Write},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use crate::support::{LoopFs, wbscope};
use serde_json::Value;

/// A recorder child and its stderr lines.
struct Recorder {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Recorder {
    fn start(args: &[&str]) -> Recorder {
        let (started, stderr) = crate::support::start_record_said(args);
        Recorder {
            child: started.child,
            stderr,
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGINT, the exit status and everything it said.
    fn stop(mut self) -> (bool, Vec<String>) {
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let ok = self.child.wait().unwrap().success();
        thread::sleep(Duration::from_millis(100));
        (ok, self.stderr.try_iter().collect())
    }
}

impl Recorder {
    /// A store at `store` on the host's root, of the calls on `device`.
    fn store(store: &Path, device: &str) -> Recorder {
        Recorder::start(&[
            "--store",
            arg(store),
            "--min-free",
            HOST_FREE,
            "--device",
            device,
        ])
    }
}

/// `--min-free` of the stores these tests keep on the host's root
/// (/var/tmp): 1%, not the default 10, so that a host whose root is over
/// 90% full (a CI host's root had 9.5% free for an unprivileged user)
/// does not make them stop writing. The test of
/// `--min-free` itself makes a filesystem of its own.
const HOST_FREE: &str = "1";

/// Small files written and fsynced one after the other until stopped:
/// hundreds to thousands of writepages calls a second.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(dir: &Path) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|t| {
                let (s, dir) = (stop.clone(), dir.to_path_buf());
                thread::spawn(move || {
                    let block = [7u8; 4096];
                    let mut i = 0u64;
                    while !s.load(Ordering::Relaxed) {
                        let name = dir.join(format!("f{t}-{}", i % 100));
                        let mut f = File::create(name).unwrap();
                        f.write_all(&block).unwrap();
                        f.sync_all().unwrap();
                        i += 1;
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The store's files: bytes as lengths, and as allocated blocks with the
/// directory's own (as `du` counts them).
fn store_size(store: &Path) -> (u64, u64) {
    let mut len = 0;
    let mut blocks = fs::metadata(store).map_or(0, |m| m.blocks() * 512);
    for e in fs::read_dir(store).unwrap() {
        let Ok(m) = e.unwrap().metadata() else {
            continue; // deleted while listed
        };
        len += m.len();
        blocks += m.blocks() * 512;
    }
    (len, blocks)
}

/// Wall clock and CLOCK_MONOTONIC now, ns.
fn clocks() -> (u64, u64) {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (wall, ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// `wbscope ARGS`: exit code, stdout's JSON lines, stderr.
fn json_lines(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = wbscope().args(args).output().unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The end of each call line, as wall clock (through the test's own
/// clocks, the mapping the store's blocks hold).
fn call_ends(lines: &[Value], (wall, mono): (u64, u64)) -> Vec<u64> {
    lines
        .iter()
        .filter(|l| l["type"] == "call")
        .map(|l| {
            let end = l["time_ns"].as_u64().unwrap() + l["duration_ns"].as_u64().unwrap();
            wall - (mono - end)
        })
        .collect()
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Under a small-files fsync load, a store with a small --max-size
/// sampled every 100 ms never exceeds it (as lengths and as allocated
/// blocks), rotates and deletes its oldest, and `replay --since` gives
/// exactly the calls of the window asked, none older.
#[test]
fn under_fsync_load_the_store_stays_within_max_size_and_since_gives_the_window() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 256);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = tmp.path().join("store");
    let device = fs.mountpoint.to_string_lossy().to_string();
    let max = 256u64 << 10;
    let rec = Recorder::start(&[
        "--store",
        arg(&store),
        "--min-free",
        HOST_FREE,
        "--max-size",
        "256KiB",
        // Five blocks a second, for the store to fill in the test's time.
        "--interval",
        "0.2",
        "--device",
        &device,
    ]);
    let load = Load::start(&fs.mountpoint);
    let started = Instant::now();
    let mut most = (0, 0);
    while started.elapsed() < Duration::from_secs(25) {
        let (len, blocks) = store_size(&store);
        assert!(len <= max, "store {len} bytes > {max}");
        assert!(blocks <= max, "store {blocks} bytes allocated > {max}");
        most = (most.0.max(len), most.1.max(blocks));
        thread::sleep(Duration::from_millis(100));
    }
    let since = clocks().0 - 5_000_000_000;
    thread::sleep(Duration::from_millis(1500));
    drop(load);
    let (ok, said) = rec.stop();
    assert!(ok, "{said:?}");
    let now = clocks();

    let (code, all, err) = json_lines(&["replay", arg(&store), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, window, err) = json_lines(&[
        "replay",
        arg(&store),
        "--json",
        "--since",
        &format!("{:.9}", since as f64 / 1e9),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let all_ends = call_ends(&all, now);
    let window_ends = call_ends(&window, now);
    // The store rotated: its oldest calls are gone.
    assert!(
        all_ends.first().unwrap() > &(since - 15_000_000_000),
        "nothing was deleted ({most:?} at most)"
    );
    // The window: the store's calls at or after --since (a call within
    // 1 ms of the edge may map to either side through the test's clocks).
    let near = |t: u64| t.abs_diff(since) < 1_000_000;
    let expected: Vec<u64> = all_ends
        .iter()
        .copied()
        .filter(|&t| t >= since && !near(t))
        .collect();
    let got: Vec<u64> = window_ends.iter().copied().filter(|&t| !near(t)).collect();
    assert!(got.iter().all(|&t| t > since), "a call older than --since");
    assert_eq!(got, expected);
    assert!(got.len() > 100, "{} calls in the last 5 s", got.len());
    let summary = window.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["truncated"], false);
}

/// On a 32 MiB filesystem filled up to a little over --min-free, the
/// store deletes its oldest, then pauses; free space never falls under
/// the bound; the recorder is still recording when stopped; and the gap
/// is reported by `wbscope store`.
#[test]
fn on_a_nearly_full_filesystem_min_free_holds_and_the_gap_is_reported() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 32);
    let load_fs = LoopFs::new("ext4", 128);
    let store = fs.path("store");
    let statvfs = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: zeroed plain data and a valid path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        (st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)
    };
    let (avail, total) = statvfs(&fs.mountpoint);
    let reserve = total / 2;
    // Leave 96 KiB above the reserve: a few blocks' worth.
    let filler = fs.path("filler");
    {
        let mut f = File::create(&filler).unwrap();
        f.write_all(&vec![1u8; (avail - reserve - (96 << 10)) as usize])
            .unwrap();
        f.sync_all().unwrap();
    }
    let device = load_fs.mountpoint.to_string_lossy().to_string();
    let mut rec = Recorder::start(&[
        "--store",
        arg(&store),
        "--min-free",
        "50",
        "--max-size",
        "64MiB",
        "--interval",
        "0.2",
        "--device",
        &device,
    ]);
    let load = Load::start(&load_fs.mountpoint);
    let started = Instant::now();
    let mut least = u64::MAX;
    let mut paused = false;
    while started.elapsed() < Duration::from_secs(20) {
        let (avail, _) = statvfs(&fs.mountpoint);
        assert!(avail >= reserve, "free {avail} < --min-free's {reserve}");
        least = least.min(avail);
        paused |= rec.stderr.try_iter().any(|l| l.contains("short of space"));
        thread::sleep(Duration::from_millis(100));
        // Once paused, take the filler away: space returns.
        if paused && filler.exists() {
            fs::remove_file(&filler).unwrap();
        }
    }
    assert!(paused, "the store never ran short (least free {least})");
    assert!(rec.alive(), "the recorder exited");
    thread::sleep(Duration::from_millis(1500));
    drop(load);
    let (ok, said) = rec.stop();
    assert!(ok, "{said:?}");
    let (code, info, err) = json_lines(&["store", arg(&store), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let gaps = info[0]["gaps"].as_array().unwrap();
    let gap = gaps
        .iter()
        .find(|g| g["kind"] == "not kept")
        .unwrap_or_else(|| panic!("no gap reported: {info:?}"));
    assert!(gap["calls_not_kept"].as_u64().unwrap() > 0, "{gap}");
    let text = wbscope().arg("store").arg(&store).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("not kept"), "{text}");
    // Writing resumed after the gap: blocks after it.
    assert!(info[0]["last_unix_ns"].as_u64() > gap["to_unix_ns"].as_u64());
}

/// `kill -9`: everything up to the last interval before it is there, and
/// replay reads the store to its end with no error.
#[test]
fn kill_9_loses_at_most_the_last_interval() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = tmp.path().join("store");
    let device = fs.mountpoint.to_string_lossy().to_string();
    let mut rec = Recorder::store(&store, &device);
    let path = fs.path("marked");
    let ino = {
        let mut f = File::create_new(&path).unwrap();
        f.write_all(&vec![3u8; 256 << 10]).unwrap();
        f.sync_all().unwrap();
        f.metadata().unwrap().ino()
    };
    // One interval (1 s) and the drain after it.
    thread::sleep(Duration::from_millis(1300));
    rec.child.kill().unwrap();
    rec.child.wait().unwrap();
    let (code, lines, err) = json_lines(&["replay", arg(&store), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let pages: i64 = lines
        .iter()
        .filter(|l| l["type"] == "call" && l["ino"] == ino)
        .map(|l| l["pages_written"].as_i64().unwrap())
        .sum();
    assert_eq!(pages, 64, "{err}");
    // No summary was written: the one replay gives says so.
    assert_eq!(lines.last().unwrap()["truncated"], true);
    let (code, _, err) = json_lines(&["store", arg(&store), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    // doctor and report read a store, and a window of it, too.
    let (code, doctor, err) = json_lines(&[
        "doctor",
        "--from",
        arg(&store),
        "--json",
        "--since",
        "1h ago",
    ]);
    assert!(matches!(code, Some(0 | 3)), "{err}");
    assert!(doctor[0]["intervals"].as_u64().unwrap() >= 1, "{doctor:?}");
    let html = tmp.path().join("store.html");
    let out = wbscope()
        .args(["report", arg(&store), "-o", arg(&html), "--since", "1h ago"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(fs::read_to_string(&html).unwrap().contains("<svg"));
    // A second recorder on the store after the crash takes the lock.
    let rec = Recorder::store(&store, &device);
    let second = wbscope()
        .args(["record", "--store", arg(&store), "--device", &device])
        .args(["--min-free", HOST_FREE])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(
        said.lines()
            .last()
            .unwrap()
            .contains("another wbscope record is writing this store"),
        "{said}"
    );
    let (ok, said) = rec.stop();
    assert!(ok, "{said:?}");
}

/// `record -o - | replay - --json`, two processes and a pipe: a call is
/// printed by the replay within a second of its fsync.
#[test]
fn a_live_pipe_shows_a_call_within_a_second() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let device = fs.mountpoint.to_string_lossy().to_string();
    let mut record = wbscope()
        .args(["record", "-o", "-", "--device", &device])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = record.stdout.take().unwrap();
    let mut replay = wbscope()
        .args(["replay", "-", "--json"])
        .stdin(pipe)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(record.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    while !rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap()
        .contains("tracing;")
    {}
    let out = BufReader::new(replay.stdout.take().unwrap());
    let (ltx, lrx) = mpsc::channel::<(Instant, Value)>();
    thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let v: Value = serde_json::from_str(&l).unwrap();
            if ltx.send((Instant::now(), v)).is_err() {
                break;
            }
        }
    });
    // A quiet spell first: the recorder drains less often then
    // (tracer/ring.rs, QUIET_DRAIN_EVERY), and the call must still show
    // within the second.
    thread::sleep(Duration::from_secs(2));
    let path: PathBuf = fs.path("live");
    let mut f = File::create_new(&path).unwrap();
    f.write_all(&vec![9u8; 64 << 10]).unwrap();
    let ino = f.metadata().unwrap().ino();
    let synced = {
        f.sync_all().unwrap();
        Instant::now()
    };
    let seen = loop {
        let (at, line) = lrx
            .recv_timeout(Duration::from_secs(5))
            .expect("the call never reached the replay");
        if line["type"] == "call" && line["ino"] == ino {
            break at;
        }
    };
    let lag = seen.saturating_duration_since(synced);
    assert!(
        lag < Duration::from_secs(1),
        "shown {lag:?} after the fsync"
    );
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(record.id() as i32, libc::SIGINT) };
    assert!(record.wait().unwrap().success());
    // The recorder's end is the replay's: its summary, then exit 0.
    let status = replay.wait().unwrap();
    assert!(status.success());
    // Every line it printed: the reader thread ends at the pipe's end.
    let last = lrx.iter().last().map(|(_, v)| v).unwrap();
    assert_eq!(last["type"], "summary");
}
