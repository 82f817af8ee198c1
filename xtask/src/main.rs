//! Project tasks: `cargo xtask setup|build|run|test`.
//!
//! Everything a fresh Debian machine needs to build and test wbscope is
//! installed from here, so README's two commands are all the set-up there
//! is (see docs/toolchain.md for why each piece is what it is).
mod bench;
mod bench_writer;
mod dist;
mod setup;
// Test-only: the check that setup installs every program the sources spawn.
#[cfg(test)]
mod spawned;
// Test-only: the layering of writeback-user and the file-length limit.
#[cfg(test)]
mod layers;
mod vm;

use std::{
    path::PathBuf,
    process::{Command, ExitCode},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "wbscope project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Detect or install the eBPF toolchain, bpf-linker and every program
    /// the tests, vm-test and the benchmarks run (idempotent).
    Setup,
    /// Build wbscope with its eBPF object embedded.
    Build {
        #[arg(long)]
        release: bool,
    },
    /// Build the release `wbscope` for hosts without Rust: one binary with
    /// the eBPF object embedded, stripped, with its sha256, under
    /// target/dist/.
    Dist,
    /// Build (release) and run wbscope as root (through sudo when not root).
    ///
    /// Example: cargo xtask run -- trace --json --duration 5
    Run {
        /// Run the debug build instead: quicker to build, but the dashboard
        /// then costs more CPU than the 2%-of-a-core budget when idle.
        #[arg(long)]
        debug: bool,
        /// Arguments for wbscope (after `--`); none opens the dashboard.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Measure the tracer's overhead (root; writes SIZE MiB per run), or
    /// with `writer`, `wbscope write` against dd and fio.
    ///
    /// Example: cargo xtask bench --size-mib 2048 --pairs 5
    ///
    /// Example: cargo xtask bench writer --size-mib 1024 --rounds 3
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        /// Another benchmark than the tracer's overhead (the default).
        #[command(subcommand)]
        what: Option<BenchTarget>,
        /// MiB written (then fsynced) per run.
        #[arg(long, default_value_t = 2048)]
        size_mib: u64,
        /// Traced/untraced pairs, alternating order.
        #[arg(long, default_value_t = 5)]
        pairs: usize,
        /// Seconds of idle tracing for the idle CPU figure.
        #[arg(long, default_value_t = 10)]
        idle_secs: u64,
        /// Seconds to wait after dropping the caches before each run (as
        /// for `bench writer`).
        #[arg(long, default_value_t = 10)]
        settle_secs: u64,
        /// Seconds of `wbscope probes --cost` for the per-program floor.
        #[arg(long, default_value_t = 5)]
        floor_secs: u64,
    },
    /// Boot Debian's kernels in qemu (TCG), one at a time, and check the
    /// fentry, kprobe and tracepoint paths inside: 5.10, 6.1, 6.12, 6.12's
    /// PREEMPT_RT and cloud builds and the newest the archive offers (and
    /// its PREEMPT_RT build), each
    /// the newest build of its series (docs/toolchain.md).
    ///
    /// Example: cargo xtask vm-test --kernel 6.12-rt
    VmTest {
        /// 5.10, 6.1, 6.12, 6.12-rt, 6.12-cloud, newest, newest-rt; `suite` for the
        /// kernels `cargo xtask test` runs; `all` (the default) for every
        /// one.
        #[arg(long)]
        kernel: Option<String>,
    },
    /// Run classic scenarios in qemu guests of several kernels (same
    /// virtual disk, memory and CPU) and print Fengguang Wu's table: a
    /// row per case and figure, a column per kernel with the change
    /// against the first and `wbscope diff`'s significance marks, TOTAL
    /// rows. Minutes per kernel under TCG. Table and documents in
    /// target/vm/scenario/ (docs/diff.md, "Across kernels").
    ///
    /// Example: cargo xtask vm-scenario --kernels 6.12,newest --scenarios single-stream,package-unpack --repeat 3
    VmScenario {
        /// Kernel labels of the VM matrix (as vm-test's --kernel), the
        /// first the base; 6.2 or newer (the tiny scale caps each
        /// filesystem's dirty pages with the bdi's max_bytes and
        /// strict_limit, which came in 6.2: 5.10 and 6.1 cannot run it).
        #[arg(long, value_delimiter = ',', default_value = "6.12,newest")]
        kernels: Vec<String>,
        /// `wbscope scenario` names, run at tiny scale (all but
        /// sync-after-write, which has no --repeat).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "single-stream,package-unpack"
        )]
        scenarios: Vec<String>,
        /// Runs per variant and kernel (at least 2; 3 or more for the
        /// significance rules to mean much).
        #[arg(long, default_value_t = 3)]
        repeat: u32,
    },
    /// fmt check, clippy -D warnings, unit and kernel integration tests
    /// then the qemu kernel matrix's `suite` kernels (5.10, 6.1, 6.12,
    /// 6.12-rt) and a vm-scenario of 6.12 against 6.12-rt, when qemu is
    /// installed and no test name is given
    /// (WBSCOPE_VM_TESTS=0 skips it; `vm-test --kernel all` runs the rest).
    Test {
        /// Extra arguments for `cargo test` (after `--`), e.g. a test name.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum BenchTarget {
    /// What a program writing 4 KiB at a time feels (issue 31): dd and fio
    /// randwrite, untraced against traced (default), traced with the
    /// per-folio attribution, bpftrace counting dirty folios and empty
    /// programs, in alternating pairs; medians of the per-pair ratios of
    /// the writer's wall and system time (root; needs fio, bpftrace).
    /// Report in target/bench/small-writer.md.
    ///
    /// Example: cargo xtask bench small-writer --pairs 10 --size-mib 1024
    ///          cargo xtask bench small-writer --pairs 40 --writers dd --observers trace,nothing
    SmallWriter {
        /// MiB each writer writes, 4 KiB at a time.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        /// Pairs per observer and writer (the order swapped every pair).
        #[arg(long, default_value_t = 10)]
        pairs: usize,
        /// Seconds between attaching (and dropping the caches) and writing.
        #[arg(long, default_value_t = 4)]
        settle_secs: u64,
        /// The writers to run, comma-separated.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "dd,fio,dd-1m"
        )]
        writers: Vec<bench::small_writer::Writer>,
        /// The observers, each paired with an untraced run, comma-separated;
        /// `nothing` pairs two untraced runs, the measure's own spread.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "trace,per-folio,bpftrace,floor,nothing"
        )]
        observers: Vec<bench::small_writer::Side>,
    },
    /// The flight recorder as a service runs it (issue 26): `record --store
    /// --max-size --cpu-budget` under a small-files fsync load for minutes;
    /// its memory, CPU and store size sampled as it runs, and the budget
    /// lines it kept (root). Report in target/bench/recorder.md.
    ///
    /// Example: cargo xtask bench recorder --minutes 12 --cpu-budget 2
    Recorder {
        /// Minutes of load (the issue asks for at least 10).
        #[arg(long, default_value_t = 12)]
        minutes: u64,
        /// The store's --max-size, MiB.
        #[arg(long, default_value_t = 64)]
        max_size_mib: u64,
        /// The recorder's --cpu-budget, % of one core (the systemd unit's).
        #[arg(long, default_value_t = 2.0)]
        cpu_budget: f64,
        /// Seconds between samples.
        #[arg(long, default_value_t = 10)]
        every_secs: u64,
        /// MiB a `dd bs=4k` writes at full speed in the budget phase,
        /// recorded unshed and under the budget (0: no such phase).
        #[arg(long, default_value_t = 4096)]
        dd_mib: u64,
        /// Files one process dirties, a page each, before the recorder's
        /// idle reading cost is measured again (per folio against the
        /// default attribution; 0: no such phase).
        #[arg(long, default_value_t = 60000)]
        pairs: u64,
    },
    /// `wbscope write`'s strategies against dd and the equivalent fio jobs
    /// on one loop-mounted ext4 (root; needs fio). Report in
    /// target/bench/writer.md.
    Writer {
        /// MiB written per run.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        /// Rounds over every case, in rotating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Let the loop device write its image through /var/tmp's page
        /// cache (losetup's default) instead of O_DIRECT: the set-up of the
        /// runs before issue 4's fix, to compare.
        #[arg(long)]
        buffered_loop: bool,
        /// Seconds to wait after dropping the caches before each run, so
        /// that every run starts with the memory just freed handed back to
        /// the hypervisor (free page reporting), not only those after a
        /// long run.
        #[arg(long, default_value_t = 10)]
        settle_secs: u64,
        /// Only the cases whose label contains one of these
        /// (comma-separated), e.g. `--only uncached,DONTCACHE`; pairs are
        /// judged where both sides ran. Every case by default.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // A Ctrl-C during a bench stops it between runs and unwinds through
    // the scratch filesystems' and directories' `Drop`: nothing is left
    // mounted. (The children see the same Ctrl-C and end on their own.)
    let _signals =
        matches!(cli.task, Task::Bench { .. }).then(scratchfs::signal::SignalGuard::install);
    match cli.task {
        Task::Setup => {
            setup::ensure(setup::Scope::All)?;
            Ok(())
        }
        Task::Build { release } => build(release).map(|_| ()),
        Task::Run { debug, args } => {
            let binary = build(!debug)?;
            let mut cmd = if setup::is_root() {
                Command::new(&binary)
            } else {
                eprintln!("xtask: not root: running wbscope through sudo");
                let mut c = Command::new("sudo");
                c.arg(&binary);
                c
            };
            cmd.args(&args);
            let status = cmd
                .status()
                .with_context(|| format!("running {}", binary.display()))?;
            if !status.success() {
                bail!("wbscope exited with {status}");
            }
            Ok(())
        }
        Task::Test { args } => test(&args),
        Task::Dist => dist::dist(&build(true)?, &target_dir()?),
        Task::VmTest { kernel } => vm::vm_test(kernel.as_deref()),
        Task::VmScenario {
            kernels,
            scenarios,
            repeat,
        } => vm::vm_scenario(&vm::ScenarioOptions {
            kernels,
            scenarios,
            repeat,
        }),
        Task::Bench {
            what:
                Some(BenchTarget::Writer {
                    size_mib,
                    rounds,
                    buffered_loop,
                    settle_secs,
                    only,
                }),
            ..
        } => {
            if !setup::is_root() {
                bail!(
                    "bench writer mounts a loop filesystem and drops the page cache: run it as root"
                );
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = build(true)?;
            let report = bench_writer::bench(
                &binary,
                &bench_writer::WriterBenchOptions {
                    size_mib,
                    rounds,
                    buffered_loop,
                    settle_secs,
                    only,
                },
            )?;
            write_report("writer.md", &report)
        }
        Task::Bench {
            what:
                Some(BenchTarget::SmallWriter {
                    size_mib,
                    pairs,
                    settle_secs,
                    writers,
                    observers,
                }),
            ..
        } => {
            if !setup::is_root() {
                bail!("bench small-writer drops the page cache and attaches BPF: run it as root");
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = build(true)?;
            let report = bench::small_writer::bench(
                &binary,
                &bench::small_writer::SmallWriterOptions {
                    size_mib,
                    pairs,
                    settle_secs,
                    writers,
                    sides: observers,
                },
            )?;
            write_report("small-writer.md", &report)
        }
        Task::Bench {
            what:
                Some(BenchTarget::Recorder {
                    minutes,
                    max_size_mib,
                    cpu_budget,
                    every_secs,
                    dd_mib,
                    pairs,
                }),
            ..
        } => {
            if !setup::is_root() {
                bail!("bench recorder mounts a loop filesystem and attaches BPF: run it as root");
            }
            let binary = build(true)?;
            let report = bench::recorder::bench(
                &binary,
                &bench::recorder::RecorderOptions {
                    minutes,
                    max_size_mib,
                    cpu_budget,
                    every_secs: every_secs.max(1),
                    dd_mib,
                    pairs,
                },
            )?;
            write_report("recorder.md", &report)
        }
        Task::Bench {
            what: None,
            size_mib,
            pairs,
            idle_secs,
            settle_secs,
            floor_secs,
        } => {
            if !setup::is_root() {
                bail!("the benchmark mounts a loop filesystem and attaches BPF: run it as root");
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = build(true)?;
            let report = bench::bench(
                &binary,
                &bench::BenchOptions {
                    size_mib,
                    pairs,
                    idle_secs,
                    settle_secs,
                    floor_secs,
                },
            )?;
            write_report("results.md", &report)
        }
    }
}

/// Writes a benchmark report to target/bench/NAME and prints it.
fn write_report(name: &str, report: &str) -> anyhow::Result<()> {
    let dir = target_dir()?.join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, report)?;
    println!("{report}");
    eprintln!("xtask: written to {}", path.display());
    Ok(())
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Cargo's target directory for this workspace, as cargo itself reports it
/// (`cargo metadata`'s `target_directory`): `CARGO_TARGET_DIR`,
/// `build.target-dir` in a config file, or `target/` in the workspace.
/// Every path xtask builds under the target directory comes from here.
fn target_dir() -> anyhow::Result<PathBuf> {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir.clone());
    }
    let out = cargo_metadata()
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({})", out.status);
    }
    let dir = target_directory_of(&out.stdout)?;
    Ok(DIR.get_or_init(|| dir).clone())
}

/// `cargo metadata` of this workspace, without its dependencies or the
/// network.
fn cargo_metadata() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args([
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ])
    .current_dir(workspace_root());
    cmd
}

/// `target_directory` of `cargo metadata`'s JSON.
fn target_directory_of(json: &[u8]) -> anyhow::Result<PathBuf> {
    let meta: serde_json::Value =
        serde_json::from_slice(json).context("cargo metadata printed no JSON")?;
    meta["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata has no target_directory")
}

/// `cargo` with the detected eBPF toolchain exported to build.rs and
/// bpf-linker's directory on PATH (aya-build's nested cargo links with it).
fn cargo(toolchain: &setup::Toolchains) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root())
        .env("WBSCOPE_BPF_TOOLCHAIN", toolchain.bpf.rustup_name());
    if let Some(dir) = toolchain.bpf_linker.parent() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(dirs) {
            cmd.env("PATH", joined);
        }
    }
    cmd
}

fn step(what: &str, cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: {what}");
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn build(release: bool) -> anyhow::Result<PathBuf> {
    let toolchain = setup::ensure(setup::Scope::Build)?;
    let mut cmd = cargo(&toolchain);
    cmd.args(["build", "--package", "writeback-user", "--bin", "wbscope"]);
    if release {
        cmd.arg("--release");
    }
    step("building wbscope", &mut cmd)?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir()?.join(profile).join("wbscope"))
}

fn test(extra: &[String]) -> anyhow::Result<()> {
    let toolchain = setup::ensure(setup::Scope::Test)?;
    step(
        "cargo fmt --check",
        cargo(&toolchain).args(["fmt", "--all", "--check"]),
    )?;
    step(
        "cargo clippy --all-targets -- -D warnings",
        cargo(&toolchain).args(["clippy", "--all-targets", "--", "-D", "warnings"]),
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
            "sudo -E",
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
    vm::from_test_suite()
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

    /// The directory cargo reports is the one `CARGO_TARGET_DIR` names
    /// (issue 28: the VM step looked for the binary under the checkout).
    #[test]
    fn target_dir_is_cargos() {
        let elsewhere = std::env::temp_dir().join(format!("xtask-target-{}", std::process::id()));
        let out = cargo_metadata()
            .env("CARGO_TARGET_DIR", &elsewhere)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(target_directory_of(&out.stdout).unwrap(), elsewhere);
        assert!(!elsewhere.exists(), "cargo metadata creates nothing");
        assert!(target_directory_of(b"{}").is_err());
        assert!(target_directory_of(b"not json").is_err());
    }
}
