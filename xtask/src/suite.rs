//! `cargo xtask test`: the fmt check, clippy, the docs' links, unit and
//! kernel integration tests counted over every test binary, then the VM
//! suite.
use std::{process::Command, time::Duration};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;
use xtask::{cargo, setup, step};

/// `cargo xtask test`: fmt check, clippy, `cargo test` with one closing
/// count, then the VM suite (the qemu harness' `test-suite`, which skips
/// itself when `WBSCOPE_VM_TESTS=0` or qemu is missing) unless test names
/// were given.
pub(crate) fn test(extra: &[String]) -> anyhow::Result<()> {
    // All that `cargo xtask setup` installs, not only what the tests
    // spawn: setup.rs's `every_program_of_the_test_vm_and_bench_scopes_
    // is_installed` then proves on every run, on a fresh machine too,
    // that setup installs each program a task spawns, the benches'
    // (fio, perf) included.
    let toolchain = setup::ensure(setup::Scope::All)?;
    step(
        "cargo fmt --check",
        cargo(&toolchain).args(["fmt", "--all", "--check"]),
    )?;
    step(
        "cargo clippy --all-targets -- -D warnings",
        cargo(&toolchain).args(["clippy", "--all-targets", "--", "-D", "warnings"]),
    )?;
    // The docs' links checked (after clippy, whose checked dependencies
    // rustdoc reuses: seconds). Private items are documented, as a
    // newcomer reads them, so links to them are not warned about.
    step(
        "cargo doc (broken intra-doc links denied)",
        cargo(&toolchain)
            .args([
                "doc",
                "--workspace",
                "--exclude",
                "writeback-ebpf",
                "--no-deps",
                "--document-private-items",
            ])
            .env(
                "RUSTDOCFLAGS",
                "-D rustdoc::broken_intra_doc_links -A rustdoc::private_intra_doc_links",
            ),
    )?;
    let mut cmd = cargo(&toolchain);
    // Every test binary runs even when one fails: a failure in one
    // suite must not hide the state of the others.
    cmd.args(["test", "--no-fail-fast"]);
    if !setup::is_root() {
        // Kernel integration tests attach BPF programs and mount loop
        // filesystems: run the test binaries (not cargo) as root.
        eprintln!("xtask: not root: test binaries run through `sudo -E`");
        cmd.env(
            format!(
                "CARGO_TARGET_{}_RUNNER",
                setup::host_triple()?.to_uppercase().replace('-', "_")
            ),
            format!("{} -E", programs::SUDO.name),
        );
    }
    if !extra.is_empty() {
        cmd.arg("--").args(extra);
    }
    eprintln!("xtask: cargo test (unit and kernel integration tests)");
    let counts = run_counting_tests(&mut cmd)?;
    // One closing line over all test binaries: cargo's own last line is
    // often an empty doc-test run ("0 passed"), which hides the total.
    println!(
        "summary: {} passed, {} failed",
        counts.passed, counts.failed
    );
    if !counts.success {
        bail!("cargo test failed");
    }
    if !extra.is_empty() {
        println!("vm: skipped: only the named tests were asked for");
        return Ok(());
    }
    // The binary cargo test built (with the dev-dependencies' features)
    // and the integration tests ran: the guests test the same one.
    let binary = xtask::target_dir()?.join("debug").join("wbscope");
    crate::hand_over(
        crate::VM,
        "test-suite",
        &["--binary".into(), binary.display().to_string()],
    )
}

#[derive(Debug, Default, PartialEq, Eq)]
struct TestCounts {
    passed: u64,
    failed: u64,
    success: bool,
}

/// Runs `cmd`, echoing its stdout, and adds up cargo's
/// `test result: ok. N passed; M failed; ...` lines.
fn run_counting_tests(cmd: &mut Command) -> anyhow::Result<TestCounts> {
    use std::io::{BufRead as _, BufReader};
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cmd:?}"))?;
    let stdout = child.stdout.take().context("no stdout")?;
    // Lines come through a thread: a process a failed test left behind
    // can hold the pipe open after cargo exits, and a plain read to EOF
    // then never ends (seen: a `wbscope record` whose test panicked).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut counts = TestCounts::default();
    let mut count = |line: String| {
        println!("{line}");
        if let Some((passed, failed)) = parse_test_result(&line) {
            counts.passed += passed;
            counts.failed += failed;
        }
    };
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => count(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break child.wait().context("waiting for cargo test")?;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Some(status) = child.try_wait().context("waiting for cargo test")? {
                    // What cargo printed last is in the pipe already.
                    loop {
                        match rx.recv_timeout(Duration::from_millis(500)) {
                            Ok(line) => count(line),
                            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                                eprintln!(
                                    "xtask: cargo test exited, but a process its tests left \
                                     behind holds the output open; not waiting for it"
                                );
                                break;
                            }
                        }
                    }
                    break status;
                }
            }
        }
    };
    counts.success = status.success();
    Ok(counts)
}

fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let number_before = |word: &str| -> Option<u64> {
        let end = rest.find(word)?;
        rest[..end]
            .trim_end()
            .rsplit([' ', '.', ';'])
            .next()?
            .parse()
            .ok()
    };
    Some((number_before(" passed")?, number_before(" failed")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cargo_test_result_lines() {
        assert_eq!(
            parse_test_result(
                "test result: ok. 18 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.06s"
            ),
            Some((18, 0))
        );
        assert_eq!(
            parse_test_result("test result: FAILED. 3 passed; 1 failed; 0 ignored"),
            Some((3, 1))
        );
        assert_eq!(parse_test_result("running 4 tests"), None);
    }
}
