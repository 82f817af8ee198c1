//! End to end: the real dashboard in tmux, driven by keys, against the
//! real kernel (root).
mod support;

use std::{
    fs::File,
    io::Write,
    process::Command,
    time::{Duration, Instant},
};

use support::{LoopFs, run};

struct Session(String);

impl Session {
    fn capture(&self) -> String {
        run(Command::new("tmux").args(["capture-pane", "-p", "-t", &self.0]))
    }

    fn alive(&self) -> bool {
        Command::new("tmux")
            .args(["has-session", "-t", &self.0])
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
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

/// The number after `label` on the screen, e.g. `calls 12`.
fn figure(screen: &str, label: &str) -> Option<u64> {
    let rest = &screen[screen.find(label)? + label.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn dashboard_shows_a_16_mib_fsync_and_quits_on_q() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let session = Session(format!("wbscope-test-{}", std::process::id()));
    let cmd = format!(
        "{} --log {}",
        env!("CARGO_BIN_EXE_wbscope"),
        log.path().display()
    );
    run(Command::new("tmux").args([
        "new-session",
        "-d",
        "-s",
        &session.0,
        "-x",
        "100",
        "-y",
        "30",
        &cmd,
    ]));
    session.wait_for("the attached writepages hook", |s| {
        s.contains("attached     writepages_call: ")
    });

    let fs = LoopFs::new("ext4", 128);
    let mut f = File::create_new(fs.path("data")).unwrap();
    f.write_all(&vec![1u8; 16 << 20]).unwrap();
    f.sync_all().unwrap();

    // 16 MiB = 4096 pages in one fsync call: the 4K-8K bucket appears and
    // the totals count at least those pages.
    let screen = session.wait_for("the fsync call", |s| {
        s.contains("4K-8K") && figure(s, "pages written").is_some_and(|p| p >= 4096)
    });
    assert!(
        figure(&screen, "calls ").is_some_and(|c| c >= 1),
        "{screen}"
    );
    assert!(screen.contains("lost records 0"), "{screen}");

    run(Command::new("tmux").args(["send-keys", "-t", &session.0, "q"]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while session.alive() {
        assert!(Instant::now() < deadline, "still running after q");
        std::thread::sleep(Duration::from_millis(100));
    }
}
