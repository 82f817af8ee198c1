//! Command-line misuse a careful operator might try on a production host:
//! each gets one clear line and exit code 2, and changes nothing.
use std::{
    fs,
    process::{Command, Stdio},
};

fn wbscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wbscope"))
}

/// Exit code and stderr of a run with no terminal anywhere (stdin from
/// /dev/null, stdout and stderr piped), as under `setsid … </dev/null`.
fn without_terminal(args: &[&str]) -> (Option<i32>, String) {
    let out = wbscope()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("running wbscope");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_dashboard_without_a_terminal_says_so_in_one_line() {
    let _file = crate::support::file_group(module_path!());
    let (code, stderr) = without_terminal(&[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("needs a terminal"), "{stderr}");
    assert!(stderr.contains("wbscope trace"), "{stderr}");
}

#[test]
fn replay_to_the_dashboard_without_a_terminal_says_so_in_one_line() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().expect("temp dir");
    let rec = dir.path().join("short.rec");
    let rec = rec.to_str().expect("a UTF-8 temp path");
    let recorded = wbscope()
        .args(["record", "-o", rec, "--duration", "0.3"])
        .stderr(Stdio::null())
        .status()
        .expect("running wbscope record");
    assert!(recorded.success());
    let (code, stderr) = without_terminal(&["replay", rec]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("needs a terminal"), "{stderr}");
    assert!(stderr.contains("--text"), "{stderr}");
}

#[test]
fn an_existing_log_file_is_appended_to_not_truncated() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("wbscope.log");
    fs::write(&log, "kept line\n").expect("log");
    let status = wbscope()
        .arg("--log")
        .arg(&log)
        .args(["replay", "/no/such/recording"])
        .stderr(Stdio::null())
        .status()
        .expect("running wbscope");
    assert!(!status.success());
    let text = fs::read_to_string(&log).expect("log");
    assert!(text.starts_with("kept line\n"), "{text:?}");
}

#[test]
fn an_interval_below_the_drain_period_is_refused() {
    let _file = crate::support::file_group(module_path!());
    for args in [
        &["trace", "--interval", "1e-9"][..],
        &["record", "-o", "/nonexistent/x.rec", "--interval", "0.001"][..],
    ] {
        let out = wbscope().args(args).output().expect("running wbscope");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("at least 0.1 s"), "{stderr}");
    }
}

#[test]
fn filters_that_can_never_match_are_refused() {
    let _file = crate::support::file_group(module_path!());
    for (args, why) in [
        (&["trace", "--device", "999:999"][..], "no block device"),
        (
            &["trace", "--device", "/dev/null"][..],
            "not a block device",
        ),
        (
            &["trace", "--device", "/proc"][..],
            "never writes pages back",
        ),
    ] {
        let out = wbscope().args(args).output().expect("running wbscope");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}

#[test]
fn store_and_time_window_misuse_is_one_line_and_exit_2() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let file = dir.path().join("file");
    fs::write(&file, "{}").unwrap();
    let (rec, html) = (dir.path().join("x.rec"), dir.path().join("x.html"));
    let (empty, file) = (empty.to_str().unwrap(), file.to_str().unwrap());
    let (rec, html) = (rec.to_str().unwrap(), html.to_str().unwrap());
    for (args, why) in [
        (&["replay", empty, "--json"][..], "no segments"),
        (&["store", empty], "no segments"),
        (&["store", file], "not a store directory"),
        (&["replay", file, "--since", "yesterday"], "is not a time"),
        (
            &[
                "replay",
                file,
                "--since",
                "1796180400",
                "--until",
                "1796180000",
            ],
            "--since must be before --until",
        ),
        (
            &["replay", file, "--openmetrics", "--label", "1x=y"],
            "not a label name",
        ),
        (
            &["replay", file, "--openmetrics", "--label", "host"],
            "is not NAME=VALUE",
        ),
        (
            &["replay", file, "--openmetrics", "--label", "dev=8:0"],
            "wbscope's own",
        ),
        (&["replay", file, "--label", "host=a"], "--openmetrics"),
        (&["replay", file, "--openmetrics", "--json"], "--json"),
        (
            &["replay", file, "--openmetrics", "--step", "0s"],
            "is not an age",
        ),
        (&["doctor", "--since", "1h ago"], "--from"),
        (
            &["report", file, "-o", html, "--since", "1h ago"],
            "not of a JSON document",
        ),
        (&["record", "-o", rec, "--keep", "1d"], "bound a --store"),
        (&["record", "--store", file], "not a directory"),
        (
            &["record", "--store", empty, "--max-size", "1KiB"],
            "smallest store",
        ),
        (
            &["record", "--store", empty, "--min-free", "95"],
            "percentage",
        ),
    ] {
        let (code, stderr) = without_terminal(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("x.rec").exists() && !dir.path().join("x.html").exists());
}
