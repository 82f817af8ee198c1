//! The dist's systemd unit for the flight recorder
//! (writeback-user/dist/wbscope-recorder.service) passes
//! `systemd-analyze verify` with nothing to say, and holds the settings
//! a recorder run as a service needs (restarted always, niced, a memory
//! cap, the system read-only, a state directory, stopped by SIGTERM).
use std::{fs, path::Path, process::Command};

fn unit_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/wbscope-recorder.service");
    fs::read_to_string(&path).unwrap()
}

/// What `systemd-analyze verify` says of `text` as a unit file (it
/// checks that ExecStart's program exists: the unit is pointed at the
/// wbscope just built).
fn verify(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("wbscope-recorder.service");
    fs::write(
        &unit,
        text.replace("/usr/local/bin/wbscope", env!("CARGO_BIN_EXE_wbscope")),
    )
    .unwrap();
    let out = wbscope_programs::SYSTEMD_ANALYZE
        .command()
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (cargo xtask setup installs systemd)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn the_recorder_unit_verifies_cleanly() {
    let _file = crate::support::file_group(module_path!());
    let text = unit_text();
    for setting in [
        "ExecStart=/usr/local/bin/wbscope record --store /var/lib/wbscope ",
        "Restart=always",
        "Nice=",
        "MemoryMax=",
        "ProtectSystem=strict",
        "StateDirectory=wbscope",
        "KillSignal=SIGTERM",
    ] {
        assert!(text.contains(setting), "the unit lacks {setting}");
    }
    let said = verify(&text);
    assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");
    // The check can fail: a setting systemd does not take is named.
    let said = verify(&text.replace("Restart=always", "Restart=sometimes"));
    assert!(said.contains("sometimes"), "{said}");
}

/// The unit starts as root and lets wbscope give the store to the user
/// it drops to and drop to it (docs/production.md): the capabilities of
/// both are in its bounding set, and it names no `User=` (which would
/// start it without CAP_SETUID, and hand the store to that user).
#[test]
fn the_units_bounding_set_lets_the_store_drop() {
    let _file = crate::support::file_group(module_path!());
    let text = unit_text();
    let bounding = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("CapabilityBoundingSet=");
    let caps: Vec<&str> = bounding.split_whitespace().collect();
    for cap in [
        "CAP_BPF",
        "CAP_PERFMON",
        "CAP_CHOWN",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_SETPCAP",
    ] {
        assert!(
            caps.contains(&cap),
            "the bounding set lacks {cap}: {bounding}"
        );
    }
    assert!(!text.lines().any(|l| l.starts_with("User=")));
    assert!(!text.contains("--no-drop"));
}

#[test]
fn the_units_command_line_parses() {
    let _file = crate::support::file_group(module_path!());
    // The ExecStart arguments are wbscope's: its parser takes them (and
    // refuses a store that is a file, before attaching anything).
    let text = unit_text();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/wbscope "))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    fs::write(&file, "x").unwrap();
    let args: Vec<String> = exec
        .split_whitespace()
        .map(|a| {
            if a == "/var/lib/wbscope" {
                file.display().to_string()
            } else {
                a.to_string()
            }
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_wbscope"))
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a directory"), "{err}");
}
