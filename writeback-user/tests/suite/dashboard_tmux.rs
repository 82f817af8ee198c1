//! End to end: the real dashboard in tmux, driven by keys, against the
//! real kernel (root).

use std::{
    fs::File,
    io::Write,
    process::Command,
    time::{Duration, Instant},
};

use crate::support::{LoopFs, run};

/// A tmux session on a server of its own: its socket in a temporary
/// directory of the test's, so that no user's tmux server is touched and
/// nothing is left in /tmp/tmux-UID when the test ends.
struct Session {
    name: String,
    dir: tempfile::TempDir,
}

impl Session {
    fn new(name: String) -> Session {
        Session {
            name,
            dir: tempfile::tempdir().expect("a directory for the tmux socket"),
        }
    }

    /// tmux, talking to this session's own server.
    fn tmux(&self) -> Command {
        let mut c = wbscope_programs::TMUX.command();
        c.arg("-S").arg(self.dir.path().join("socket"));
        c
    }

    fn capture(&self) -> String {
        run(self.tmux().args(["capture-pane", "-p", "-t", &self.name]))
    }

    fn alive(&self) -> bool {
        self.tmux()
            .args(["has-session", "-t", &self.name])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Polls the screen until `pred` holds, or fails with the last screen.
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.capture();
            if pred(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "no {what} on screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The server is this session's alone.
        let _ = self.tmux().arg("kill-server").status();
    }
}

/// The number after `label` on the screen, e.g. `calls 12`.
fn figure(screen: &str, label: &str) -> Option<u64> {
    let rest = &screen[screen.find(label)? + label.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

fn start(session: &Session, log: &std::path::Path, cwd: &std::path::Path, w: u16, h: u16) {
    start_with(session, log, cwd, w, h, "");
}

/// `wbscope ARGS --log LOG` in a new tmux session of `w`x`h`.
fn start_with(
    session: &Session,
    log: &std::path::Path,
    cwd: &std::path::Path,
    w: u16,
    h: u16,
    args: &str,
) {
    // The exit status lands next to the log, for `exited_ok`.
    let cmd = format!(
        "{} {args} --log {}; echo $? > {}.status",
        env!("CARGO_BIN_EXE_wbscope"),
        log.display(),
        log.display()
    );
    run(session.tmux().args([
        "new-session",
        "-d",
        "-s",
        &session.name,
        "-x",
        &w.to_string(),
        "-y",
        &h.to_string(),
        "-c",
        &cwd.display().to_string(),
        &cmd,
    ]));
}

fn keys(session: &Session, keys: &str) {
    run(session
        .tmux()
        .args(["send-keys", "-t", &session.name, keys]));
}

/// Waits for the session to end (the dashboard exited, so the terminal
/// is back from the alternate screen) and checks the exit status was 0.
fn wait_gone(session: &Session, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while session.alive() {
        assert!(Instant::now() < deadline, "still running after q");
        std::thread::sleep(Duration::from_millis(100));
    }
    let status_file = format!("{}.status", log.display());
    let status = std::fs::read_to_string(&status_file).unwrap_or_default();
    let _ = std::fs::remove_file(&status_file);
    assert_eq!(status.trim(), "0", "exit status");
}

#[test]
fn dashboard_shows_a_16_mib_fsync_and_quits_on_q() {
    let _file = crate::support::file_group(module_path!());
    let log = tempfile::NamedTempFile::new().unwrap();
    let session = Session::new(format!("wbscope-test-{}", std::process::id()));
    start(&session, log.path(), std::path::Path::new("/"), 100, 30);
    session.wait_for("the attached probes", |s| {
        s.contains(" 0 missing") && !s.contains("probes 0/")
    });

    let fs = LoopFs::new("ext4", 128);
    let mut f = File::create_new(fs.path("data")).unwrap();
    f.write_all(&vec![1u8; 16 << 20]).unwrap();
    f.sync_all().unwrap();

    // 16 MiB = 4096 pages in one fsync call: the 4K-8K row of the
    // histogram counts it.
    let screen = session.wait_for("the fsync call", |s| {
        s.lines().any(|l| l.contains("4K-8K") && l.contains('#'))
    });
    assert!(
        figure(&screen, "calls ").is_some_and(|c| c >= 1),
        "{screen}"
    );
    assert!(screen.contains("lost 0"), "{screen}");

    keys(&session, "q");
    wait_gone(&session, log.path());
}

/// The number before ` MB/s` on the writer's `running` line.
fn writer_mb_s(screen: &str) -> Option<u64> {
    let line = screen.lines().find(|l| l.contains("running "))?;
    let rest = &line[line.find("running ")? + "running ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn writer_from_keys_loads_the_kernel_and_cleans_up() {
    let _file = crate::support::file_group(module_path!());
    let log = tempfile::NamedTempFile::new().unwrap();
    let fs = LoopFs::new("ext4", 512);
    let session = Session::new(format!("wbscope-writer-test-{}", std::process::id()));
    // Started in the loop filesystem: the writer's default directory is a
    // new temporary directory there.
    start(&session, log.path(), &fs.mountpoint, 120, 40);
    session.wait_for("the attached probes", |s| {
        s.contains(" 0 missing") && !s.contains("probes 0/")
    });

    // fsync-end (one `s` from buffered), then start: each file ends with
    // an fsync, so writepages calls on this device are certain.
    keys(&session, "s");
    session.wait_for("the strategy", |s| s.contains("fsync-end  chunk 1MiB"));
    keys(&session, "w");
    let screen = session.wait_for("writer throughput", |s| {
        writer_mb_s(s).is_some_and(|mb| mb > 0)
    });
    let temp: Vec<_> = std::fs::read_dir(&fs.mountpoint)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".wbscope-"))
        .collect();
    assert_eq!(temp.len(), 1, "one temporary directory:\n{screen}");

    // The kernel side answers: calls in the header, a device in the top
    // table (Tab to it at this size is not needed: 120x40 shows it).
    let dev = crate::support::dev_of(&fs.mountpoint);
    session.wait_for("writepages calls of the writer's device", |s| {
        figure(s, "calls ").is_some_and(|c| c >= 1) && s.contains(&dev)
    });

    // Chunk x2, live.
    keys(&session, "+");
    session.wait_for("the new chunk", |s| s.contains("chunk 2MiB"));

    keys(&session, "q");
    wait_gone(&session, log.path());
    let left: Vec<_> = std::fs::read_dir(&fs.mountpoint)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "lost+found")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The lines a recorder writes on its standard error.
type StderrLines = std::io::Lines<std::io::BufReader<std::process::ChildStderr>>;

/// `wbscope record ARGS DEVICE OUTPUT` started, once it says it is
/// tracing; the rest of what it says (keep it read: a closed pipe would
/// fail the recorder's last lines).
fn record_until_tracing(
    args: &[&str],
    device: &std::path::Path,
    output: &[&std::ffi::OsStr],
) -> (std::process::Child, StderrLines) {
    let mut record = Command::new(env!("CARGO_BIN_EXE_wbscope"))
        .arg("record")
        .args(args)
        .arg(device)
        .args(output)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = record.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("tracing;"))));
    (record, lines)
}

/// `wbscope replay FILE` opens a recording in the dashboard: the recorded
/// fsync shows in the histogram, and the writer keys are refused.
#[test]
fn replay_opens_a_recording_in_the_dashboard() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("run.rec");
    // Only this test's filesystem: other writers on the host must not
    // crowd the histogram the test reads.
    let (mut record, _lines) = record_until_tracing(
        &["--duration", "4", "--interval", "0.5", "--device"],
        &fs.mountpoint,
        &["-o".as_ref(), rec.as_os_str()],
    );
    let mut f = File::create_new(fs.path("data")).unwrap();
    f.write_all(&vec![1u8; 16 << 20]).unwrap();
    f.sync_all().unwrap();
    assert!(record.wait().unwrap().success());

    let log = tempfile::NamedTempFile::new().unwrap();
    let session = Session::new(format!("wbscope-replay-{}", std::process::id()));
    let args = format!("replay {} --speed 4", rec.display());
    start_with(&session, log.path(), dir.path(), 120, 40, &args);
    session.wait_for("the recorded fsync", |s| {
        s.lines().any(|l| l.contains("4K-8K") && l.contains('#'))
    });
    keys(&session, "w");
    session.wait_for("the refused writer", |s| {
        s.contains("the writer runs only live")
    });
    keys(&session, "q");
    wait_gone(&session, log.path());
    // Nothing was written next to the recording.
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
}

/// `record -o - | replay -` in one terminal: the dashboard shows a call
/// within a second of its fsync (watching a host over SSH),
/// and quitting it stops the recorder too (its reader went away).
#[test]
fn a_live_pipe_into_the_dashboard_shows_a_call_within_a_second() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let log = dir.path().join("replay.log");
    let rec_err = dir.path().join("record.err");
    let bin = env!("CARGO_BIN_EXE_wbscope");
    let cmd = format!(
        "{bin} record -o - --device {} 2>{} | {bin} replay - --log {}; echo $? > {}.status",
        fs.mountpoint.display(),
        rec_err.display(),
        log.display(),
        log.display()
    );
    let session = Session::new(format!("wbscope-live-{}", std::process::id()));
    run(session.tmux().args([
        "new-session",
        "-d",
        "-s",
        &session.name,
        "-x",
        "120",
        "-y",
        "40",
        &cmd,
    ]));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&rec_err).is_ok_and(|s| s.contains("tracing;")) {
        assert!(Instant::now() < deadline, "record did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut f = File::create_new(fs.path("data")).unwrap();
    f.write_all(&vec![1u8; 16 << 20]).unwrap();
    f.sync_all().unwrap();
    let synced = Instant::now();
    // 16 MiB in one fsync call: the 4K-8K row of the histogram.
    loop {
        let screen = session.capture();
        if screen
            .lines()
            .any(|l| l.contains("4K-8K") && l.contains('#'))
        {
            break;
        }
        assert!(
            synced.elapsed() < Duration::from_secs(10),
            "no call on screen:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The screen's histogram is the last completed interval's (calls
    // "show up with the next interval", dashboard/app.rs): the call is
    // drawn at the first interval line after its record arrives, at
    // most one interval (1 s) later, plus the recorder's drain (100 ms)
    // and this loop's polling. A bound of exactly 1 s failed whenever the
    // fsync ended just after a line (1.0009 s, twice in a row here).
    let lag = synced.elapsed();
    assert!(
        lag < Duration::from_millis(1300),
        "shown {lag:?} after the fsync"
    );
    keys(&session, "q");
    wait_gone(&session, &log);
    let said = std::fs::read_to_string(&rec_err).unwrap();
    assert!(said.contains("went away"), "{said}");
}

/// The line of the screen holding `what`.
fn line_with<'a>(screen: &'a str, what: &str) -> &'a str {
    screen.lines().find(|l| l.contains(what)).unwrap_or("")
}

/// The `HH:MM:SS` after `label` on the line holding `line_label`, as
/// seconds of the day.
fn clock_after(screen: &str, line_label: &str, label: &str) -> Option<u32> {
    let line = line_with(screen, line_label);
    let rest = &line[line.find(label)? + label.len()..];
    let mut parts = rest.get(..8)?.split(':').map(|p| p.parse::<u32>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    Some(h * 3600 + m * 60 + s)
}

/// A store in the dashboard: `n` jumps to where the fsync storm
/// recorded in it starts and the third header line says the view is
/// there; `n` again finds nothing after it; `→` is refused at the end of
/// the store and `←` goes back towards its start.
#[test]
fn a_store_in_the_dashboard_jumps_to_the_next_finding() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = dir.path().join("store");
    // Only this test's filesystem, so that no other finding comes first.
    let (mut record, lines) = record_until_tracing(
        &["--duration", "10", "--device"],
        &fs.mountpoint,
        // The store is on the host's root: --min-free 1, not 10%, so that
        // a nearly full host does not make it stop writing.
        &[
            "--store".as_ref(),
            store.as_os_str(),
            "--min-free".as_ref(),
            "1".as_ref(),
        ],
    );
    // Three quiet seconds, then three of small files fsynced one after
    // the other (hundreds of sync calls a second: fsync-storm,
    // docs/findings.md).
    std::thread::sleep(Duration::from_secs(3));
    let storm = Instant::now();
    let mut i = 0;
    while storm.elapsed() < Duration::from_secs(3) {
        let mut f = File::create(fs.path(&format!("f{}", i % 50))).unwrap();
        f.write_all(&[7u8; 4096]).unwrap();
        f.sync_all().unwrap();
        i += 1;
    }
    // Read to its end (the recorder stops after --duration): a closed
    // pipe would fail its last lines.
    let said: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(record.wait().unwrap().success(), "{said:?}");

    let log = tempfile::NamedTempFile::new().unwrap();
    let session = Session::new(format!("wbscope-store-{}", std::process::id()));
    // A quarter of the recorded pace: the storm is still ahead when `n`
    // is pressed.
    let args = format!("replay {} --speed 0.25", store.display());
    start_with(&session, log.path(), dir.path(), 120, 40, &args);
    session.wait_for("the store's header line", |s| {
        line_with(s, " store ").contains("  at ")
    });
    keys(&session, "n");
    let screen = session.wait_for("the jump to the storm", |s| {
        s.contains("fsync-storm starts at")
    });
    let storm_at = clock_after(&screen, "fsync-storm starts at", "starts at ");
    let view_at = clock_after(&screen, " store ", "  at ");
    assert!(storm_at.is_some(), "{screen}");
    // The view is at the finding's start (or an interval on already).
    assert!(
        view_at
            .zip(storm_at)
            .is_some_and(|(v, s)| v == s || v == s + 1),
        "{screen}"
    );
    session.wait_for("the finding on the strip", |s| {
        line_with(s, " findings ").contains("fsync-storm")
    });
    keys(&session, "n");
    session.wait_for("nothing after the storm", |s| {
        s.contains("no finding starts after")
    });
    keys(&session, "Right");
    session.wait_for("the end of the store", |s| s.contains("the store ends at"));
    keys(&session, "Left");
    session.wait_for("the view back before the storm", |s| {
        clock_after(s, " store ", "  at ")
            .zip(storm_at)
            .is_some_and(|(v, s)| v < s)
    });
    keys(&session, "q");
    wait_gone(&session, log.path());
    // Replaying wrote nothing into the store or beside it.
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
}
