//! Least privilege: `trace` and `record` (to a file and to a
//! store) end their privileges once attached (user, capabilities,
//! no_new_privs, seccomp) and count the same as with `--no-drop`; a
//! forbidden call after the drop kills the process; `replay` needs no
//! privilege at all.

use std::{
    collections::HashMap,
    fs::{self, File},
    io::Write,
    os::unix::{fs::MetadataExt, fs::PermissionsExt, process::CommandExt, process::ExitStatusExt},
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use crate::support::{
    LoopFs, Tracing, dev_of, replay_json, start_record, start_record_said, wbscope,
};
use serde_json::Value;

/// A store of these tests lives on the host's root (/var/tmp): `--min-free
/// 1` instead of the default 10%, so that a host whose root is over 90%
/// full (a CI host's root had 9.5% free for an unprivileged user) does
/// not make the store stop writing. Tests of
/// `--min-free` itself make a filesystem of their own.
const HOST_FREE: [&str; 2] = ["--min-free", "1"];

/// The fields of /proc/PID/status (or a thread's) the drop is seen in.
fn status(path: &Path) -> HashMap<String, String> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Every thread of `pid` runs as a non-root user and group with no
/// capability at all, no_new_privs and a seccomp filter.
fn assert_dropped(pid: u32) {
    let tasks: Vec<_> = fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .map(|e| e.expect("entry").path().join("status"))
        .collect();
    assert!(!tasks.is_empty());
    for path in std::iter::once(format!("/proc/{pid}/status").into()).chain(tasks) {
        let s = status(&path);
        for ids in ["Uid", "Gid"] {
            let all: Vec<&str> = s[ids].split_whitespace().collect();
            assert_eq!(all.len(), 4, "{ids}: {}", s[ids]);
            assert!(
                all.iter().all(|id| *id != "0"),
                "{}: {ids} {}",
                path.display(),
                s[ids]
            );
        }
        assert_eq!(s["Groups"], "", "{}: supplementary groups", path.display());
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(s[set], "0000000000000000", "{}: {set}", path.display());
        }
        assert_eq!(s["NoNewPrivs"], "1", "{}", path.display());
        // 2: SECCOMP_MODE_FILTER (Documentation/userspace-api/seccomp_filter.rst).
        assert_eq!(s["Seccomp"], "2", "{}", path.display());
    }
}

/// The opposite, for --no-drop: root with its capabilities, no filter.
fn assert_kept(pid: u32) {
    let s = status(Path::new(&format!("/proc/{pid}/status")));
    assert!(
        s["Uid"].split_whitespace().all(|id| id == "0"),
        "{}",
        s["Uid"]
    );
    assert_ne!(s["CapEff"], "0000000000000000");
    assert_eq!(s["Seccomp"], "0");
}

fn write_and_fsync(path: &Path, mib: usize) -> u64 {
    let mut f = File::create_new(path).expect("create");
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 + 1).collect();
    for _ in 0..mib {
        f.write_all(&chunk).expect("write");
    }
    f.sync_all().expect("fsync");
    f.metadata().expect("stat").ino()
}

/// Pages written to `ino` on `dev` by the call lines, and their count.
fn pages_and_calls(lines: &[Value], dev: &str, ino: u64) -> (i64, usize) {
    let calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "call" && l["dev"] == dev && l["ino"] == ino)
        .collect();
    let pages = calls
        .iter()
        .map(|c| c["pages_written"].as_i64().expect("pages"))
        .sum();
    (pages, calls.len())
}

/// One workload (24 MiB written and fsynced on a filesystem of the test's
/// own) seen at once by `trace` dropped, `trace --no-drop` and `record`
/// dropped: while they run, each dropped process shows the drop in
/// /proc/PID/status; afterwards all three count the file's exact pages in
/// the same calls, and the dropped and kept traces' summaries agree.
#[test]
fn trace_and_record_drop_after_attach_and_count_the_same() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let device = fs.mountpoint.to_string_lossy().to_string();
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let rec = dir.path().join("run.rec");
    let args = ["--json", "--events", "--device", device.as_str()];
    let dropped = Tracing::start(&args);
    let kept = Tracing::start(&[&args[..], &["--no-drop"]].concat());
    let mut record = start_record(&["-o", rec.to_str().expect("path"), "--device", &device]);

    assert_dropped(dropped.pid());
    assert_dropped(record.id());
    assert_kept(kept.pid());

    let ino = write_and_fsync(&fs.path("data"), 24);
    let dev = dev_of(&fs.mountpoint);
    // A few intervals after the drop, the filter allowing what they need.
    std::thread::sleep(Duration::from_millis(2500));
    assert_dropped(dropped.pid());
    assert_dropped(record.id());

    // SAFETY: plain syscall on our child.
    unsafe { libc::kill(record.id() as i32, libc::SIGINT) };
    let recorded = record.wait().expect("wait record");
    assert!(recorded.success(), "record: {recorded:?}");
    let dropped = dropped.stop(libc::SIGINT);
    let kept = kept.stop(libc::SIGINT);
    let replayed = replay_json(&rec);

    let expected = (24 << 20) / 4096;
    let (pages, calls) = pages_and_calls(&kept, &dev, ino);
    assert_eq!(pages, expected, "--no-drop");
    assert_eq!(
        pages_and_calls(&dropped, &dev, ino),
        (pages, calls),
        "dropped trace"
    );
    assert_eq!(
        pages_and_calls(&replayed, &dev, ino),
        (pages, calls),
        "dropped record"
    );
    let summary = |lines: &[Value]| lines.last().expect("summary").clone();
    let (d, k) = (summary(&dropped), summary(&kept));
    assert_eq!(d["type"], "summary");
    for key in ["calls", "pages_written", "lost_records"] {
        assert_eq!(d[key], k[key], "{key}: dropped {d} vs kept {k}");
    }
    assert_eq!(d["lost_records"], 0);
    // Both read the dirty counters every interval; the dropped one from
    // the /proc/vmstat it opened before the drop.
    let vmstat_read = |lines: &[Value]| {
        lines.iter().filter(|l| l["type"] == "interval").any(|l| {
            l["dirty"]["vmstat"]["nr_dirtied"]
                .as_u64()
                .is_some_and(|v| v > 0)
        })
    };
    assert!(vmstat_read(&dropped), "no vmstat figures after the drop");
    assert!(vmstat_read(&kept));
}

/// The segment files of a store (names), and who owns each.
fn segments(store: &Path) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = fs::read_dir(store)
        .expect("store")
        .filter_map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            // Deleted while listed: not there.
            let meta = e.metadata().ok()?;
            name.ends_with(".wbseg").then_some((name, meta.uid()))
        })
        .collect();
    out.sort();
    out
}

/// `record --store` drops its privileges too, and goes on keeping its
/// bounds as the drop user: one load (small files written and fsynced on
/// a filesystem of the test's own) recorded at once into a store with the
/// drop and one with `--no-drop`, both with a small `--max-size`. While
/// the dropped store rotates and deletes its own segments (and one a
/// root run left there), /proc/PID/status shows the drop; the store is
/// the drop user's; and both stores' summaries count the load's exact
/// pages in the same calls.
#[test]
fn a_store_drops_after_attach_and_rotates_and_deletes_as_the_drop_user() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 128);
    let device = fs.mountpoint.to_string_lossy().to_string();
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let (dropped_store, kept_store) = (dir.path().join("dropped"), dir.path().join("kept"));
    let path = |p: &Path| p.to_str().expect("path").to_string();
    // A segment a root run left in the store.
    let out = wbscope()
        .args(["record", "--store", &path(&dropped_store), "--no-drop"])
        .args(HOST_FREE)
        .args(["--duration", "0.3", "--device", &device])
        .output()
        .expect("root run");
    assert!(out.status.success(), "{out:?}");
    let old = segments(&dropped_store);
    assert!(
        !old.is_empty() && old.iter().all(|(_, uid)| *uid == 0),
        "{old:?}"
    );

    let bounds = [
        "--max-size",
        "256KiB",
        "--min-free",
        "1",
        "--interval",
        "0.2",
        "--device",
    ];
    let (dropped, dropped_said) =
        start_record_said(&[&["--store", &path(&dropped_store)], &bounds[..], &[&device]].concat());
    let (kept, kept_said) = start_record_said(
        &[
            &["--store", &path(&kept_store), "--no-drop"],
            &bounds[..],
            &[&device],
        ]
        .concat(),
    );
    let said = &dropped.before;
    assert!(
        said.iter().any(|l| {
            l.starts_with("wbscope: privileges dropped: user nobody")
                && l.ends_with(", files made and removed in the store only (Landlock)")
        }),
        "{said:?}"
    );
    assert!(
        !said.iter().any(|l| l.contains("keeps its privileges")),
        "{said:?}"
    );
    let (mut dropped, mut kept) = (dropped.child, kept.child);
    assert_dropped(dropped.id());
    assert_kept(kept.id());

    // The load, until the dropped store has deleted the root run's
    // segment and one it made itself after the drop.
    let page = [5u8; 4096];
    let mut written = 0u64;
    let mut made = std::collections::BTreeSet::new();
    let started = std::time::Instant::now();
    let deleted_own = loop {
        for _ in 0..100 {
            let mut f = File::create(fs.path(&format!("f{}", written % 200))).expect("create");
            f.write_all(&page).expect("write");
            f.sync_all().expect("fsync");
            written += 1;
        }
        let now = segments(&dropped_store);
        let names: Vec<&String> = now.iter().map(|(n, _)| n).collect();
        made.extend(
            names
                .iter()
                .filter(|n| !old.iter().any(|(o, _)| o == **n))
                .map(|n| n.to_string()),
        );
        let gone_old = old.iter().all(|(o, _)| !names.contains(&o));
        let gone_own = made.iter().find(|m| !names.contains(m)).cloned();
        if let (true, Some(own)) = (gone_old, gone_own) {
            break own;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no segment deleted after {written} files: {now:?}"
        );
        assert_dropped(dropped.id());
    };
    assert_dropped(dropped.id());
    // Three intervals for the last calls to be read, then the end.
    std::thread::sleep(Duration::from_millis(600));
    for child in [&dropped, &kept] {
        // SAFETY: plain syscall on our child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    }
    let (dropped_status, kept_status) = (dropped.wait().expect("wait"), kept.wait().expect("wait"));
    std::thread::sleep(Duration::from_millis(100));
    let dropped_said: Vec<String> = dropped_said.try_iter().collect();
    let kept_said: Vec<String> = kept_said.try_iter().collect();
    assert!(dropped_status.success(), "{dropped_said:?}");
    assert!(kept_status.success(), "{kept_said:?}");
    let deleted = |said: &[String]| -> u64 {
        let last = said.last().expect("last words");
        let words: Vec<&str> = last.split_whitespace().collect();
        let at = words
            .iter()
            .position(|w| *w == "segments")
            .unwrap_or_else(|| panic!("{last}"));
        words[at - 1]
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {last}"))
    };
    assert!(
        deleted(&dropped_said) >= 2,
        "{dropped_said:?} ({deleted_own} seen deleted)"
    );

    // The store is the drop user's: the directory, its lock, every
    // segment; the --no-drop store stays root's.
    let nobody = 65534;
    for p in [dropped_store.clone(), dropped_store.join(".lock")] {
        assert_eq!(
            fs::metadata(&p).expect("stat").uid(),
            nobody,
            "{}",
            p.display()
        );
    }
    let left = segments(&dropped_store);
    assert!(!left.is_empty());
    assert!(left.iter().all(|(_, uid)| *uid == nobody), "{left:?}");
    assert!(segments(&kept_store).iter().all(|(_, uid)| *uid == 0));

    // The same figures: every call of the load, counted alike.
    let summary = |store: &Path| -> Value {
        let lines = replay_json(store);
        let last = lines.last().expect("summary").clone();
        assert_eq!(last["type"], "summary", "{last}");
        last.get("recorded_summary")
            .filter(|r| !r.is_null())
            .cloned()
            .unwrap_or(last)
    };
    let (d, k) = (summary(&dropped_store), summary(&kept_store));
    for key in ["calls", "pages_written", "lost_records"] {
        assert_eq!(d[key], k[key], "{key}: dropped {d} vs kept {k}");
    }
    assert_eq!(d["lost_records"], 0);
    assert_eq!(d["pages_written"], written, "{written} pages written: {d}");
    eprintln!(
        "{written} files fsynced in {:.1} s; dropped store: {} calls, {} segments deleted \
         ({deleted_own} among them); --no-drop store: {} calls",
        started.elapsed().as_secs_f64(),
        d["calls"],
        deleted(&dropped_said),
        k["calls"]
    );
}

/// FS_IMMUTABLE_FL (include/uapi/linux/fs.h): not even root may change
/// the inode, its owner included.
const FS_IMMUTABLE_FL: libc::c_int = 0x10;

/// Sets or clears the immutable flag of `path` (ext4's `chattr +i`).
fn set_immutable(path: &Path, on: bool) {
    let f = File::open(path).expect("open");
    let mut flags: libc::c_int = 0;
    use std::os::fd::AsRawFd as _;
    // SAFETY: FS_IOC_GETFLAGS/SETFLAGS read and write an int.
    unsafe {
        assert_eq!(
            libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags),
            0
        );
        flags = if on {
            flags | FS_IMMUTABLE_FL
        } else {
            flags & !FS_IMMUTABLE_FL
        };
        assert_eq!(libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags), 0);
    }
}

/// A store that cannot be given to the user the run drops to (here a
/// directory made immutable, whose owner not even root can change) stops
/// the start with one line naming that user (exit 1), before the drop
/// and before recording anything.
#[test]
fn a_store_that_cannot_be_given_away_stops_with_one_line() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let store = dir.path().join("store");
    fs::create_dir(&store).expect("mkdir");
    // The lock of an earlier run, so that the start gets to the handing
    // over (an immutable directory takes no new file).
    File::create(store.join(".lock")).expect("lock");
    struct Mutable<'a>(&'a Path);
    impl Drop for Mutable<'_> {
        fn drop(&mut self) {
            set_immutable(self.0, false);
        }
    }
    set_immutable(&store, true);
    let _restore = Mutable(&store);
    let out = wbscope()
        .arg("record")
        .arg("--store")
        .arg(&store)
        .args(["--duration", "1"])
        .output()
        .expect("record");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].starts_with("wbscope: error: giving ")
            && errors[0].contains("to uid 65534 gid 65534")
            && errors[0].contains("Operation not permitted"),
        "{err}"
    );
    assert!(!err.contains("privileges dropped"), "{err}");
    assert_eq!(segments(&store), Vec::new());
    assert_eq!(fs::metadata(&store).expect("stat").uid(), 0);
}

/// The drop says what it did on one stderr line, and --no-drop says it
/// keeps everything; --user names the user, and one that does not exist
/// or is root is refused before anything runs long.
#[test]
fn the_drop_is_said_and_bad_users_are_refused() {
    let _file = crate::support::file_group(module_path!());
    let run = |args: &[&str]| {
        let out = wbscope()
            .arg("trace")
            .args(["--duration", "0.3"])
            .args(args)
            .stdout(Stdio::null())
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8(out.stderr).expect("utf-8"),
        )
    };
    let (code, err) = run(&[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.lines().any(
            |l| l.starts_with("wbscope: privileges dropped: user nobody (uid 65534")
                && l.contains("no_new_privs, seccomp filter of")
        ),
        "{err}"
    );
    let (code, err) = run(&["--no-drop"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("wbscope: --no-drop: keeping every privilege"),
        "{err}"
    );
    let (code, err) = run(&["--user", "no-such-user-wbscope"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim(),
        "wbscope: error: --user no-such-user-wbscope: no such user",
        "{err}"
    );
    let (code, err) = run(&["--user", "root"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.trim()
            .lines()
            .last()
            .is_some_and(|l| l.contains("uid 0")),
        "{err}"
    );
    let (code, err) = run(&["--user", "nobody", "--no-drop"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The test-only hook (feature `test-hooks`, on for this crate's tests)
/// tries execve right after the drop: seccomp kills the process with
/// SIGSYS, in `trace`, in `record` and in `record --store` (whose filter
/// allows its directory's calls, and no more).
#[test]
fn a_forbidden_call_after_the_drop_is_killed_by_sigsys() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let rec = dir.path().join("killed.rec");
    let store = dir.path().join("killed-store");
    for args in [
        vec!["trace", "--duration", "5"],
        vec![
            "record",
            "-o",
            rec.to_str().expect("path"),
            "--duration",
            "5",
        ],
        vec![
            "record",
            "--store",
            store.to_str().expect("path"),
            "--duration",
            "5",
        ],
    ] {
        let mut cmd = wbscope();
        cmd.args(&args)
            .env("WBSCOPE_TEST_FORBIDDEN_SYSCALL", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: setrlimit only, between fork and exec: no core file of
        // the killed process is left anywhere.
        unsafe {
            cmd.pre_exec(|| {
                let none = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                Ok(())
            });
        }
        let out = cmd.output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSYS),
            "{args:?}: {:?}; stderr: {stderr}",
            out.status
        );
        assert!(stderr.contains("probes:"), "attached first: {stderr}");
    }
}

/// A recording replays as user nobody with no capability (all sets
/// empty, as setpriv leaves them), exactly as root replays it: replay
/// needs no privilege.
#[test]
fn replay_needs_no_privilege() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let rec = dir.path().join("small.rec");
    fs::copy(
        wbscope_export::report::tests::fixtures().join("small.rec"),
        &rec,
    )
    .expect("copy fixture");
    fs::set_permissions(&rec, fs::Permissions::from_mode(0o644)).expect("chmod");
    let as_root = wbscope()
        .args(["replay", "--json"])
        .arg(&rec)
        .output()
        .expect("replay as root");
    let plain = plain_user()
        .args(["replay", "--json"])
        .arg(&rec)
        .output()
        .expect("replay as nobody");
    assert!(as_root.status.success());
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(!plain.stdout.is_empty());
    assert_eq!(plain.stdout, as_root.stdout);
    assert_eq!(fs::metadata(&rec).expect("stat").uid(), 0);
}

/// `wbscope` as user and group nobody, no supplementary groups, every
/// capability set empty (bounding included): a plain user.
fn plain_user() -> Command {
    let mut cmd = wbscope_programs::SETPRIV.command();
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        env!("CARGO_BIN_EXE_wbscope"),
    ]);
    cmd
}

/// The dashboard replays a recording as user nobody with no capability
/// (in tmux): it opens, answers keys (the writer key is refused, as in any
/// replay) and quits with status 0.
#[test]
fn dashboard_replay_needs_no_privilege() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let rec = dir.path().join("small.rec");
    fs::copy(
        wbscope_export::report::tests::fixtures().join("small.rec"),
        &rec,
    )
    .expect("copy fixture");
    fs::set_permissions(&rec, fs::Permissions::from_mode(0o644)).expect("chmod");
    // The log is the plain user's to write: a directory of its own.
    let own = dir.path().join("nobody");
    fs::create_dir(&own).expect("mkdir");
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).expect("chown");
    let log = own.join("wbscope.log");
    let status = dir.path().join("status");
    let plain: Vec<String> = std::iter::once("setpriv".to_string())
        .chain(
            plain_user()
                .get_args()
                .map(|a| a.to_string_lossy().into_owned()),
        )
        .collect();
    let cmd = format!(
        "{} replay {} --speed 20 --log {}; echo $? > {}",
        plain.join(" "),
        rec.display(),
        log.display(),
        status.display()
    );
    let session = format!("wbscope-plain-{}", std::process::id());
    // A tmux server of the test's own, its socket in a temporary
    // directory: no user's server touched, nothing left in /tmp/tmux-UID.
    let socket_dir = tempfile::tempdir().expect("a directory for the tmux socket");
    let socket = socket_dir.path().join("socket");
    let tmux = |args: &[&str]| {
        let out = wbscope_programs::TMUX
            .command()
            .arg("-S")
            .arg(&socket)
            .args(args)
            .output()
            .expect("tmux");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    struct Kill(std::path::PathBuf);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = wbscope_programs::TMUX
                .command()
                .arg("-S")
                .arg(&self.0)
                .arg("kill-server")
                .status();
        }
    }
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "40",
        &cmd,
    ]);
    let _kill = Kill(socket.clone());
    let wait_for = |what: &str, pred: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let screen = tmux(&["capture-pane", "-p", "-t", &session]);
            if pred(&screen) {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "no {what}:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for("the dashboard", &|s| {
        s.lines().filter(|l| !l.trim().is_empty()).count() > 5
    });
    tmux(&["send-keys", "-t", &session, "w"]);
    wait_for("the refused writer", &|s| {
        s.contains("the writer runs only live")
    });
    tmux(&["send-keys", "-t", &session, "q"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !status.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "dashboard still running after q"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        fs::read_to_string(&status).expect("status").trim(),
        "0",
        "log: {}",
        fs::read_to_string(&log).unwrap_or_default()
    );
}
